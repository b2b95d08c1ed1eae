// Test application (b): deep recursion. The work happens at the bottom of a call chain of
// `depth` activations of recurse(), so every sample has a path more than `depth` frames deep.
//   usage: recursion [depth=1000] [rounds=40]
#include <cstdint>
#include <cstdio>
#include <cstdlib>

#include "kernel.hpp"

extern "C" __attribute__((noinline)) double bottom_work(double x) { return csp_test::spin(2'000'000, x); }

// The addition after the call keeps it from becoming a tail call (which would flatten the chain).
extern "C" __attribute__((noinline)) double recurse(int depth, double x) {
  if (depth == 0) return bottom_work(x);
  const double r = recurse(depth - 1, x + 1e-12);
  asm volatile("" ::: "memory");
  return r + 1e-15 * depth;
}

int main(int argc, char** argv) {
  const int depth = argc > 1 ? std::atoi(argv[1]) : 1000;
  const int rounds = argc > 2 ? std::atoi(argv[2]) : 40;
  double x = 1.0;
  for (int r = 0; r < rounds; ++r) x = recurse(depth, x);
  std::printf("recursion: depth %d, %d rounds, checksum %.6g\n", depth, rounds, x);
  return 0;
}
