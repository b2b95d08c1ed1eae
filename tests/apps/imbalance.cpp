// Test application for the load-imbalance cause attribution (csp-views --imbalance, issue 17):
// every thread runs the same three procedures; one of them, process_items, holds a loop whose
// trip counts come from the thread's data, and is the only cause of imbalance. balanced_heavy
// costs more than any other procedure but the same in every thread; small_setup is small. Each
// thread's work is the region "work" (for csp-views --imbalance region:work with --region-log).
//   usage: imbalance [threads=16] [scale=1] [serial]   (scale multiplies every amount of work;
//   serial: the threads run one after the other, so that each thread's wall-clock time in the
//   region is its own work, not also its wait for a core)
#include <time.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "csp/measure/regions.h"
#include "kernel.hpp"

namespace {

std::uint64_t g_itersPerMs = 1;  // spin iterations per millisecond of CPU time, measured at start

double threadCpuMs() {
  timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return 1e3 * static_cast<double>(ts.tv_sec) + 1e-6 * static_cast<double>(ts.tv_nsec);
}

void calibrate() {
  double x = 1;
  const double t0 = threadCpuMs();
  const std::uint64_t n = 20'000'000;
  x = csp_test::spin(n, x);
  const double ms = threadCpuMs() - t0;
  g_itersPerMs = static_cast<std::uint64_t>(static_cast<double>(n) / (ms > 0 ? ms : 1));
  if (g_itersPerMs == 0 || x == 0) g_itersPerMs = 1;
}

}  // namespace

extern "C" __attribute__((noinline)) double balanced_heavy(double x, double ms) {
  return csp_test::spin(static_cast<std::uint64_t>(ms * static_cast<double>(g_itersPerMs)), x);
}

extern "C" __attribute__((noinline)) double small_setup(double x, double ms) {
  return csp_test::spin(static_cast<std::uint64_t>(ms * static_cast<double>(g_itersPerMs)), x);
}

// The cause: the inner loop runs trips[i] times, and the trips differ between threads.
extern "C" __attribute__((noinline)) double process_items(const std::vector<int>& trips, double x, double msPerTrip) {
  const auto iters = static_cast<std::uint64_t>(msPerTrip * static_cast<double>(g_itersPerMs));
  for (std::size_t i = 0; i < trips.size(); ++i) {
    double y = x;
    for (int k = 0; k < trips[i]; ++k) y = csp_test::spin(iters, y);  // DATA-DEPENDENT LOOP
    x += y * 1e-12;
  }
  return x;
}

extern "C" __attribute__((noinline)) double worker(int t, int threads, double scale) {
  // Each thread's items: 10 of them, with trips from 1 to 15 per item depending on the thread
  // (a permutation of the thread numbers, so that slow threads are not simply the last ones).
  const int rank = (t * 7 + 3) % threads;
  std::vector<int> trips(10, 1 + (rank * 14) / (threads > 1 ? threads - 1 : 1));
  double x = 1.0 + t;
  x = small_setup(x, 2 * scale);
  x = balanced_heavy(x, 60 * scale);
  x = process_items(trips, x, 1.0 * scale);
  return x;
}

int main(int argc, char** argv) {
  const int threads = argc > 1 ? std::atoi(argv[1]) : 16;
  const double scale = argc > 2 ? std::atof(argv[2]) : 1.0;
  if (threads < 1 || !(scale > 0)) {
    std::fprintf(stderr, "usage: imbalance [threads>=1] [scale>0]\n");
    return 2;
  }
  calibrate();
  std::vector<double> results(static_cast<std::size_t>(threads));
  std::vector<std::thread> pool;
  const bool serial = argc > 3 && std::string(argv[3]) == "serial";
  for (int t = 0; t < threads; ++t) {
    pool.emplace_back([&, t] {
      csp_region_begin("work", 0);
      results[static_cast<std::size_t>(t)] = worker(t, threads, scale);
      csp_region_end();
    });
    if (serial) pool.back().join();
  }
  for (auto& th : pool)
    if (th.joinable()) th.join();
  double sum = 0;
  for (double r : results) sum += r;
  std::printf("imbalance: %d threads, checksum %.6g\n", threads, sum);
  return 0;
}
