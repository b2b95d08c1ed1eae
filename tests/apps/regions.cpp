// Test application (d): annotated regions with a straggler. Eight worker threads each run
// `iterations` iterations (region "iteration", dynamic id = iteration number) of region
// "compute"; worker 7 gets double work. The main thread uses a numbered region, ends one region
// too many and leaves one open, which the profile must report rather than crash on.
//   usage: regions EXPECTED.txt [iterations=10]
// EXPECTED.txt gets one line per thread and region, as the program itself measured it:
//   <thread index> <region> <count> <total wall ns outside> <total wall ns inside>
// where "outside" reads the clock before the region begins and after it ends, and "inside"
// after it begins and before it ends: the region's own duration lies between the two, however
// the threads are preempted.
#include <time.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <thread>
#include <vector>

#include "csp/measure/regions.hpp"
#include "kernel.hpp"

namespace {

std::uint64_t nowNs() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<std::uint64_t>(ts.tv_sec) * 1'000'000'000u + static_cast<std::uint64_t>(ts.tv_nsec);
}

struct Totals {
  std::uint64_t iterationCount = 0, iterationNs = 0, iterationInsideNs = 0;
  std::uint64_t computeCount = 0, computeNs = 0, computeInsideNs = 0;
};

}  // namespace

extern "C" __attribute__((noinline)) double region_work(double x, int units) {
  for (int u = 0; u < units; ++u) x = csp_test::spin(1'000'000, x);
  return x;
}

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: regions EXPECTED.txt [iterations]\n");
    return 2;
  }
  const int iterations = argc > 2 ? std::atoi(argv[2]) : 10;
  constexpr int kWorkers = 8;
  csp_region_register(7, "setup");
  csp_region_begin_id(7, 0);
  volatile double s = region_work(1.0, 2);
  (void)s;
  csp_region_end();
  csp_region_end();  // one end too many: counted as mismatched

  std::vector<Totals> totals(kWorkers);
  std::vector<std::thread> threads;
  for (int w = 0; w < kWorkers; ++w) {
    threads.emplace_back([&, w] {
      const int units = w == kWorkers - 1 ? 16 : 8;  // the straggler does double work
      double x = 1.0 + w;
      Totals& t = totals[static_cast<std::size_t>(w)];
      for (int i = 0; i < iterations; ++i) {
        const std::uint64_t i0 = nowNs();
        {
          csp::Region iteration("iteration", static_cast<std::uint64_t>(i));
          const std::uint64_t i1 = nowNs();
          const std::uint64_t c0 = nowNs();
          {
            csp::Region compute("compute");
            const std::uint64_t c1 = nowNs();
            x = region_work(x, units);
            t.computeInsideNs += nowNs() - c1;
          }
          t.computeNs += nowNs() - c0;
          t.computeCount += 1;
          t.iterationInsideNs += nowNs() - i1;
        }
        t.iterationNs += nowNs() - i0;
        t.iterationCount += 1;
      }
      volatile double sink = x;
      (void)sink;
    });
  }
  for (auto& t : threads) t.join();

  std::FILE* out = std::fopen(argv[1], "w");
  if (out == nullptr) return 1;
  for (int w = 0; w < kWorkers; ++w) {
    const Totals& t = totals[static_cast<std::size_t>(w)];
    std::fprintf(out, "%d iteration %llu %llu %llu\n", w + 1, static_cast<unsigned long long>(t.iterationCount),
                 static_cast<unsigned long long>(t.iterationNs), static_cast<unsigned long long>(t.iterationInsideNs));
    std::fprintf(out, "%d compute %llu %llu %llu\n", w + 1, static_cast<unsigned long long>(t.computeCount),
                 static_cast<unsigned long long>(t.computeNs), static_cast<unsigned long long>(t.computeInsideNs));
  }
  std::fclose(out);
  csp_region_begin("left-open", 0);  // still open when the main thread's profile is written
  std::printf("regions: %d workers x %d iterations, measured: %s\n", kWorkers, iterations,
              csp_region_active() != 0 ? "yes" : "no");
  return 0;
}
