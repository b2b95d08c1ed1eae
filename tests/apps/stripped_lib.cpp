// Test library for attribution of stripped code (built, then stripped with --strip-all; its
// debug information is kept aside as <file>.debug). Its hot functions are static: once
// stripped, only the unwind information (.eh_frame) still tells where they begin and end.
#include <cstdint>

#include "kernel.hpp"

namespace {

volatile std::uint64_t g_iterations = 2'500'000;  // read at run time: no constant-propagated clones

__attribute__((noinline)) double stripped_hot_a(std::uint64_t n, double x) { return csp_test::spin(2 * n, x); }
__attribute__((noinline)) double stripped_hot_b(std::uint64_t n, double x) { return csp_test::spin(n, x) * 0.5 + 1.0; }

}  // namespace

// Two thirds of the work in stripped_hot_a, one third in stripped_hot_b.
extern "C" __attribute__((visibility("default"), noinline)) double stripped_work(int units, double x) {
  for (int u = 0; u < units; ++u) {
    x = stripped_hot_a(g_iterations, x);
    x = stripped_hot_b(g_iterations, x);
  }
  return x;
}
