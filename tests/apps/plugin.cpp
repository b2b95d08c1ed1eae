// The shared library that test application (c) loads with dlopen: it does measurable work so
// that samples land in a module that is not loaded at start-up (and is unloaded before exit).
#include "kernel.hpp"

extern "C" __attribute__((visibility("default"), noinline)) double plugin_work(double x, int units) {
  for (int u = 0; u < units; ++u) x = csp_test::spin(2'500'000, x);
  return x;
}
