// OpenMP test program for idleness accounting through OMPT (built with clang -fopenmp against
// LLVM's libomp; docs/measurement.md).
//
//   csp-app-omp [LONG_MS [SHORT_MS [SERIAL_MS [REGIONS]]]]
//
// Each of REGIONS parallel loops has one iteration per thread (schedule(static, 1)); iteration 0
// computes for LONG_MS of thread CPU time in long_iteration(), the others for SHORT_MS in
// short_iteration(): the other threads wait at the loop's barrier while iteration 0 runs.
// Between the loops the initial thread computes SERIAL_MS in serial_part() while the workers
// idle in the pool. Costs are thread CPU time, so they do not depend on the machine's load.
#include <omp.h>
#include <time.h>

#include <cstdio>
#include <cstdlib>

namespace {

double cpuMs() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) * 1e3 + static_cast<double>(ts.tv_nsec) / 1e6;
}

volatile double g_sink = 0;

__attribute__((noinline)) void burn(double ms) {
  double x = g_sink;
  const double end = cpuMs() + ms;
  while (cpuMs() < end)
    for (int i = 0; i < 2000; ++i) x = x * 1.0000001 + 1e-9;
  g_sink = x;
}

}  // namespace

// Each keeps a frame of its own: the update after the call keeps the compiler from turning the
// call into a jump (a tail call leaves no trace of the caller on the stack).
extern "C" __attribute__((noinline)) void long_iteration(double ms) {
  burn(ms);
  g_sink = g_sink + 1;
}
extern "C" __attribute__((noinline)) void short_iteration(double ms) {
  burn(ms);
  g_sink = g_sink + 1;
}
extern "C" __attribute__((noinline)) void serial_part(double ms) {
  burn(ms);
  g_sink = g_sink + 1;
}

int main(int argc, char** argv) {
  const double longMs = argc > 1 ? std::atof(argv[1]) : 300;
  const double shortMs = argc > 2 ? std::atof(argv[2]) : 5;
  const double serialMs = argc > 3 ? std::atof(argv[3]) : 100;
  const int regions = argc > 4 ? std::atoi(argv[4]) : 2;
  int threads = 0;
  for (int r = 0; r < regions; ++r) {
#pragma omp parallel
    {
#pragma omp single
      threads = omp_get_num_threads();
#pragma omp for schedule(static, 1)
      for (int i = 0; i < omp_get_num_threads(); ++i) {
        if (i == 0)
          long_iteration(longMs);
        else
          short_iteration(shortMs);
      }
    }
    serial_part(serialMs);
  }
  std::printf("omp: %d threads, %d regions\n", threads, regions);
  return 0;
}
