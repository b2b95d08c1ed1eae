// Test application for csp-query (Benavides §3.2, blackscholes): the main thread reads its input
// (region "read"), starts workers that price chunks of options (region "bs_thread", and per chunk
// region "price" whose attribute is the chunk size, csp_region_begin_attr), waits for them, and
// writes the results (region "write"); all inside region "main". Reading and writing are
// simulated by sleeping, pricing by computing.
//   usage: blackscholes EXPECTED.txt [workers=4] [chunks=6]
// EXPECTED.txt gets what the program measured itself (CLOCK_MONOTONIC around the region calls):
//   main <ns> / read <ns> / write <ns> / large <thread index> <ns in chunks of size >= 4000>
#include <time.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <thread>
#include <vector>

#include "csp/measure/regions.hpp"

namespace {

std::uint64_t nowNs() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<std::uint64_t>(ts.tv_sec) * 1'000'000'000u + static_cast<std::uint64_t>(ts.tv_nsec);
}

void sleepMs(int ms) {
  timespec ts{ms / 1000, (ms % 1000) * 1'000'000L};
  while (nanosleep(&ts, &ts) != 0) {
  }
}

double price(double s, int n) {
  double sum = 0;
  for (int i = 0; i < n * 200; ++i) sum += std::erf(s + i * 1e-6) * std::exp(-1e-9 * i);
  return sum;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: blackscholes EXPECTED.txt [workers] [chunks]\n");
    return 2;
  }
  const int workers = argc > 2 ? std::atoi(argv[2]) : 4;
  const int chunks = argc > 3 ? std::atoi(argv[3]) : 6;
  std::vector<std::uint64_t> large(static_cast<std::size_t>(workers), 0);
  std::uint64_t readNs = 0, writeNs = 0;
  const std::uint64_t m0 = nowNs();
  csp_region_begin("main", 0);
  {
    const std::uint64_t r0 = nowNs();
    {
      csp::Region read("read");
      sleepMs(40);
    }
    readNs = nowNs() - r0;
    std::vector<std::thread> threads;
    for (int w = 0; w < workers; ++w)
      threads.emplace_back([&, w] {
        csp::Region thread("bs_thread", static_cast<std::uint64_t>(w));
        double x = 0;
        for (int c = 0; c < chunks; ++c) {
          const int size = c % 2 == 0 ? 1000 : 4000;
          const std::uint64_t c0 = nowNs();
          {
            csp::Region p("price", 0, size);
            x += price(0.1 * w, size);
          }
          if (size >= 4000) large[static_cast<std::size_t>(w)] += nowNs() - c0;
        }
        volatile double sink = x;
        (void)sink;
      });
    for (auto& t : threads) t.join();
    const std::uint64_t w0 = nowNs();
    {
      csp::Region write("write");
      sleepMs(30);
    }
    writeNs = nowNs() - w0;
  }
  csp_region_end();
  const std::uint64_t mainNs = nowNs() - m0;
  std::FILE* out = std::fopen(argv[1], "w");
  if (out == nullptr) return 1;
  std::fprintf(out, "main %llu\nread %llu\nwrite %llu\n", static_cast<unsigned long long>(mainNs),
               static_cast<unsigned long long>(readNs), static_cast<unsigned long long>(writeNs));
  for (int w = 0; w < workers; ++w)
    std::fprintf(out, "large %d %llu\n", w + 1, static_cast<unsigned long long>(large[static_cast<std::size_t>(w)]));
  std::fclose(out);
  return 0;
}
