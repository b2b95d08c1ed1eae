// Test application for csp-query (Benavides §3.2, blackscholes): the main thread reads its input
// (region "read"), starts workers that price chunks of options (region "bs_thread", and per chunk
// region "price" whose attribute is the chunk size, csp_region_begin_attr), waits for them, and
// writes the results (region "write"); all inside region "main". Reading and writing are
// simulated by sleeping, pricing by computing.
//   usage: blackscholes EXPECTED.txt [workers=4] [chunks=6]
// EXPECTED.txt gets what the program measured itself with CLOCK_MONOTONIC, twice per region: the
// outer reading encloses the region calls, the inner one is enclosed by them, so that the time
// the measurement library records lies between the two whatever the scheduler does:
//   main <outer ns> <inner ns> / read ... / write ... / large <thread index> <outer> <inner>
// (large: the sums over the thread's chunks of size >= 4000).
#include <time.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <thread>
#include <vector>

#include "csp/measure/regions.hpp"

namespace {

// A span read outside and inside the region calls.
struct Span {
  std::uint64_t outer = 0, inner = 0;
};

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
  std::vector<Span> large(static_cast<std::size_t>(workers));
  Span mainSpan, readSpan, writeSpan;
  // Runs `body` inside region `name` (attribute `attr` if non-negative) and adds both readings.
  auto timed = [](Span& span, const char* name, std::uint64_t dynamicId, std::int64_t attr, auto&& body) {
    const std::uint64_t o0 = nowNs();
    if (attr >= 0)
      csp_region_begin_attr(name, dynamicId, attr);
    else
      csp_region_begin(name, dynamicId);
    const std::uint64_t i0 = nowNs();
    body();
    const std::uint64_t i1 = nowNs();
    csp_region_end();
    const std::uint64_t o1 = nowNs();
    span.outer += o1 - o0;
    span.inner += i1 - i0;
  };
  timed(mainSpan, "main", 0, -1, [&] {
    timed(readSpan, "read", 0, -1, [] { sleepMs(40); });
    std::vector<std::thread> threads;
    for (int w = 0; w < workers; ++w)
      threads.emplace_back([&, w] {
        csp::Region thread("bs_thread", static_cast<std::uint64_t>(w));
        double x = 0;
        for (int c = 0; c < chunks; ++c) {
          const int size = c % 2 == 0 ? 1000 : 4000;
          Span chunk;
          timed(chunk, "price", 0, size, [&] { x += price(0.1 * w, size); });
          if (size >= 4000) {
            large[static_cast<std::size_t>(w)].outer += chunk.outer;
            large[static_cast<std::size_t>(w)].inner += chunk.inner;
          }
        }
        volatile double sink = x;
        (void)sink;
      });
    for (auto& t : threads) t.join();
    timed(writeSpan, "write", 0, -1, [] { sleepMs(30); });
  });
  std::FILE* out = std::fopen(argv[1], "w");
  if (out == nullptr) return 1;
  auto put = [&](const char* key, const Span& s) {
    std::fprintf(out, "%s %llu %llu\n", key, static_cast<unsigned long long>(s.outer),
                 static_cast<unsigned long long>(s.inner));
  };
  put("main", mainSpan);
  put("read", readSpan);
  put("write", writeSpan);
  for (int w = 0; w < workers; ++w) {
    std::fprintf(out, "large %d ", w + 1);
    put("", large[static_cast<std::size_t>(w)]);
  }
  std::fclose(out);
  return 0;
}
