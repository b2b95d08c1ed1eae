// The compute-bound application of the overhead benchmark (tests/bench/measure_overhead.sh):
// single-threaded, a few call levels, a fixed amount of work (about 2 s per default).
//   usage: compute [units=200]
#include <cstdio>
#include <cstdlib>

#include "kernel.hpp"

extern "C" __attribute__((noinline)) double compute_inner(double x) { return csp_test::spin(2'500'000, x); }
extern "C" __attribute__((noinline)) double compute_outer(double x, int n) {
  for (int i = 0; i < n; ++i) x = compute_inner(x);
  return x;
}

int main(int argc, char** argv) {
  const int units = argc > 1 ? std::atoi(argv[1]) : 200;
  double x = 1.0;
  for (int u = 0; u < units; u += 10) x = compute_outer(x, 10);
  std::printf("compute: %d units, checksum %.6g\n", units, x);
  return 0;
}
