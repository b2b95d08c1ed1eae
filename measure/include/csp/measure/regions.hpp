// C++ helper for region annotations: a scope guard that ends the region on every exit path,
// including exceptions, so begin and end cannot get out of step.
#pragma once

#include <cstdint>

#include "csp/measure/regions.h"

namespace csp {

class Region {
 public:
  explicit Region(const char* name, std::uint64_t dynamicId = 0) noexcept { csp_region_begin(name, dynamicId); }
  explicit Region(std::uint32_t staticId, std::uint64_t dynamicId = 0) noexcept {
    csp_region_begin_id(staticId, dynamicId);
  }
  // With a numeric attribute of this visit (csp_region_begin_attr).
  Region(const char* name, std::uint64_t dynamicId, std::int64_t attr) noexcept {
    csp_region_begin_attr(name, dynamicId, attr);
  }
  Region(std::uint32_t staticId, std::uint64_t dynamicId, std::int64_t attr) noexcept {
    csp_region_begin_id_attr(staticId, dynamicId, attr);
  }
  ~Region() { csp_region_end(); }
  Region(const Region&) = delete;
  Region& operator=(const Region&) = delete;
};

}  // namespace csp
