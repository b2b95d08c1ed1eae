// A program that computes until it is killed: T threads (argument, default 4) spin in a few call
// levels. For the tests of what measurement keeps when a program is stopped by a signal.
//   usage: forever [threads=4]
#include <cstdio>
#include <cstdlib>
#include <thread>
#include <vector>

#include "kernel.hpp"

extern "C" __attribute__((noinline)) double forever_work(double x) { return csp_test::spin(1'000'000, x); }

extern "C" __attribute__((noinline)) void forever_loop(double seed) {
  double x = seed;
  for (;;) x = forever_work(x);
}

int main(int argc, char** argv) {
  const int threads = argc > 1 ? std::atoi(argv[1]) : 4;
  std::vector<std::thread> workers;
  for (int t = 1; t < threads; ++t) workers.emplace_back(forever_loop, 1.0 + t);
  std::printf("forever: %d threads\n", threads);
  std::fflush(stdout);
  forever_loop(1.0);
}
