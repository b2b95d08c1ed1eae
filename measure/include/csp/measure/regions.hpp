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
  ~Region() { csp_region_end(); }
  Region(const Region&) = delete;
  Region& operator=(const Region&) = delete;
};

}  // namespace csp
