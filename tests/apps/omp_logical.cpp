// OpenMP test program for logical call paths (docs/measurement.md, "OpenMP: logical call paths"),
// built with clang -fopenmp against LLVM's libomp.
//
//   csp-app-omp-logical callers MS     solve_small and solve_large both run kernel(), a parallel
//                                      loop whose loop_body burns MS (small) and 3 x MS (large)
//                                      of CPU time in total over the threads
//   csp-app-omp-logical nested MS      outer_region: 2 threads, each runs inner_region, a nested
//                                      parallel region of 2 threads whose nested_body burns MS each
//   csp-app-omp-logical tasks N MS     spawn_tasks: fib-style recursive tasks (depth N) created by one
//                                      thread and run (stolen) by all; each leaf_task burns MS
//   csp-app-omp-logical starved MS     solve_balanced runs kernel() (MS in total), then solve_starved
//                                      a loop of one iteration per thread where long_iteration burns
//                                      4 x MS and the others MS / 10: the region starves its threads
//   csp-app-omp-logical bench N US     bench_tasks: one thread creates N tasks of US microseconds of
//                                      CPU time each (tests/bench)
// Costs are thread CPU time, so they do not depend on the machine's load.
#include <omp.h>
#include <time.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace {

double cpuUs() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) * 1e6 + static_cast<double>(ts.tv_nsec) / 1e3;
}

volatile double g_sink = 0;

__attribute__((noinline)) void burn(double us) {
  double x = g_sink;
  const double end = cpuUs() + us;
  while (cpuUs() < end)
    for (int i = 0; i < 200; ++i) x = x * 1.0000001 + 1e-9;
  g_sink = x;
}

}  // namespace

// Each keeps a frame of its own: the update after the call keeps the compiler from turning the
// call into a jump.
extern "C" __attribute__((noinline)) void loop_body(double us) {
  burn(us);
  g_sink = g_sink + 1;
}

extern "C" __attribute__((noinline)) void kernel(int iterations, double usEach) {
#pragma omp parallel for schedule(dynamic, 1)
  for (int i = 0; i < iterations; ++i) loop_body(usEach);
  g_sink = g_sink + 1;
}

extern "C" __attribute__((noinline)) void solve_small(double ms) {
  kernel(64, ms * 1e3 / 64);
  g_sink = g_sink + 1;
}
extern "C" __attribute__((noinline)) void solve_large(double ms) {
  kernel(64, 3 * ms * 1e3 / 64);
  g_sink = g_sink + 1;
}

extern "C" __attribute__((noinline)) void nested_body(double ms) {
  burn(ms * 1e3);
  g_sink = g_sink + 1;
}
extern "C" __attribute__((noinline)) void inner_region(double ms) {
#pragma omp parallel num_threads(2)
  nested_body(ms);
  g_sink = g_sink + 1;
}
extern "C" __attribute__((noinline)) void outer_region(double ms) {
  omp_set_max_active_levels(2);
#pragma omp parallel num_threads(2)
  inner_region(ms);
  g_sink = g_sink + 1;
}

extern "C" __attribute__((noinline)) void leaf_task(double ms) {
  burn(ms * 1e3);
  g_sink = g_sink + 1;
}
extern "C" __attribute__((noinline)) long fib_task(int n, double ms) {
  if (n < 2) {
    leaf_task(ms);
    return 1;
  }
  long a = 0, b = 0;
#pragma omp task shared(a)
  a = fib_task(n - 1, ms);
#pragma omp task shared(b)
  b = fib_task(n - 2, ms);
#pragma omp taskwait
  return a + b;
}
extern "C" __attribute__((noinline)) long spawn_tasks(int n, double ms) {
  long leaves = 0;
#pragma omp parallel
#pragma omp single
  leaves = fib_task(n, ms);
  return leaves;
}

extern "C" __attribute__((noinline)) void long_iteration(double ms) {
  burn(ms * 1e3);
  g_sink = g_sink + 1;
}
extern "C" __attribute__((noinline)) void solve_balanced(double ms) {
  kernel(64, ms * 1e3 / 64);
  g_sink = g_sink + 1;
}
extern "C" __attribute__((noinline)) void solve_starved(double ms) {
#pragma omp parallel for schedule(static, 1)
  for (int i = 0; i < omp_get_num_threads(); ++i) {
    if (i == 0)
      long_iteration(4 * ms);
    else
      loop_body(ms * 100);
  }
  g_sink = g_sink + 1;
}

extern "C" __attribute__((noinline)) void task_work(double us) {
  burn(us);
  g_sink = g_sink + 1;
}
extern "C" __attribute__((noinline)) void bench_tasks(long n, double us) {
#pragma omp parallel
#pragma omp single
  for (long i = 0; i < n; ++i) {
#pragma omp task
    task_work(us);
  }
}

int main(int argc, char** argv) {
  const char* mode = argc > 1 ? argv[1] : "callers";
  if (std::strcmp(mode, "callers") == 0) {
    const double ms = argc > 2 ? std::atof(argv[2]) : 400;
    solve_small(ms);
    solve_large(ms);
  } else if (std::strcmp(mode, "nested") == 0) {
    outer_region(argc > 2 ? std::atof(argv[2]) : 300);
  } else if (std::strcmp(mode, "tasks") == 0) {
    const long leaves = spawn_tasks(argc > 2 ? std::atoi(argv[2]) : 8, argc > 3 ? std::atof(argv[3]) : 20);
    std::printf("leaves %ld\n", leaves);
  } else if (std::strcmp(mode, "starved") == 0) {
    const double ms = argc > 2 ? std::atof(argv[2]) : 200;
    solve_balanced(ms);
    solve_starved(ms);
  } else if (std::strcmp(mode, "bench") == 0) {
    bench_tasks(argc > 2 ? std::atol(argv[2]) : 1000000, argc > 3 ? std::atof(argv[3]) : 10);
  } else {
    std::fprintf(stderr, "csp-app-omp-logical: unknown mode '%s'\n", mode);
    return 2;
  }
  std::printf("threads %d\n", omp_get_max_threads());
  return 0;
}
