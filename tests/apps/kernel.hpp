// A compute kernel whose cost is proportional to its argument and that the optimizer cannot
// remove or vectorize away (a serial dependency chain). Inlined into each caller on purpose:
// samples must land in the procedure that calls it, so that tests can count by leaf procedure.
#pragma once

#include <cstdint>

namespace csp_test {

__attribute__((always_inline)) inline double spin(std::uint64_t iterations, double x) {
  for (std::uint64_t i = 0; i < iterations; ++i) {
    x = x * 1.0000001 + 1e-9;
    asm volatile("" : "+x"(x));
  }
  return x;
}

}  // namespace csp_test
