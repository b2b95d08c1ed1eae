// Loop recovery (binary analysis of a load module, docs/postprocessing.md "Loops"): the cold
// analysis time of a module, with all cores and with one, and the time to read it back from the
// structure cache, through the Attributor as csp-prof-mpi uses it.
//
//   structure_bench [--runs N] [--smoke] [MODULE...]     (default MODULE: libc.so.6)
//
// Per module and run, in a fresh cache directory: attribution of one address with loop recovery
// off (the baseline: opening the module and its debug information), then with an empty cache
// (analysis and cache write), then in a new Attributor with the cache filled (cache hit). Prints
// median (min-max) of each, the analysis time alone, the cache entry's size, the loops found and
// the peak memory; CPU times beside wall-clock times (a loaded machine stretches the latter).
// --smoke: one run on libc, checks that the cache is hit.
#include <sys/resource.h>
#include <tbb/global_control.h>
#include <tbb/info.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "csp/reduce/attribution.hpp"

namespace fs = std::filesystem;
using namespace csp;
using namespace csp::reduce;

namespace {

double cpuSeconds() {
  struct rusage ru {};
  ::getrusage(RUSAGE_SELF, &ru);
  return static_cast<double>(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) +
         1e-6 * static_cast<double>(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec);
}

struct Timing {
  double wall = 0;      // the attribute() call
  double cpu = 0;       // CPU time of all threads during it (user + system)
  double analysis = 0;  // AttributionStats::analysisSeconds
  std::uint64_t analysed = 0, cached = 0, loops = 0;
};

Timing attributeOnce(const std::string& module, bool loops, const fs::path& cache) {
  StringTable strings;
  AttributionOptions o;
  o.loops = loops;
  o.structureCache = cache.string();
  Attributor attributor(strings, o);
  const LoadModule m{module, {}, 0, 0, 0};
  const auto start = std::chrono::steady_clock::now();
  const double cpu = cpuSeconds();
  (void)attributor.attribute(m, 0x1000, true);
  Timing t;
  t.wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  t.cpu = cpuSeconds() - cpu;
  const auto s = attributor.stats();
  t.analysis = s.analysisSeconds;
  t.analysed = s.modulesAnalysed;
  t.cached = s.modulesFromCache;
  t.loops = s.loops;
  for (const auto& w : s.warnings) std::fprintf(stderr, "structure_bench: warning: %s\n", w.c_str());
  return t;
}

std::string summary(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  char buf[96];
  std::snprintf(buf, sizeof buf, "%.3f s (%.3f-%.3f)", v[v.size() / 2], v.front(), v.back());
  return buf;
}

std::uint64_t entryBytes(const fs::path& dir) {
  std::uint64_t n = 0;
  for (const auto& e : fs::directory_iterator(dir))
    if (e.path().extension() == ".cspstruct") n += fs::file_size(e.path());
  return n;
}

}  // namespace

int main(int argc, char** argv) {
  int runs = 3;
  bool smoke = false;
  std::vector<std::string> modules;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--runs" && i + 1 < argc)
      runs = std::max(1, std::atoi(argv[++i]));
    else if (a == "--smoke")
      smoke = true;
    else
      modules.push_back(a);
  }
  if (smoke) runs = 1;
  if (modules.empty()) modules.push_back("/lib/x86_64-linux-gnu/libc.so.6");
  const fs::path work = fs::temp_directory_path() / ("csp-structure-bench-" + std::to_string(::getpid()));
  const int cores = tbb::info::default_concurrency();
  int status = 0;
  for (const auto& module : modules) {
    std::vector<double> baseline, cold, coldAnalysis, coldCpu, serial, hit, hitCpu;
    std::uint64_t bytes = 0, loops = 0;
    for (int r = 0; r < runs; ++r) {
      fs::remove_all(work);
      baseline.push_back(attributeOnce(module, false, "off").wall);
      const auto c = attributeOnce(module, true, work / "cache");
      cold.push_back(c.wall);
      coldAnalysis.push_back(c.analysis);
      coldCpu.push_back(c.cpu);
      loops = c.loops;
      bytes = entryBytes(work / "cache");
      const auto h = attributeOnce(module, true, work / "cache");
      hit.push_back(h.wall);
      hitCpu.push_back(h.cpu);
      if (c.analysed != 1 || h.cached != 1) {
        std::fprintf(stderr, "structure_bench: %s: expected one analysis and one cache hit, got %llu and %llu\n",
                     module.c_str(), static_cast<unsigned long long>(c.analysed),
                     static_cast<unsigned long long>(h.cached));
        status = 1;
      }
      if (!smoke) {
        fs::remove_all(work);
        tbb::global_control one(tbb::global_control::max_allowed_parallelism, 1);
        serial.push_back(attributeOnce(module, true, work / "cache").analysis);
      }
    }
    std::printf("%s\n", module.c_str());
    std::printf("  attribution without loop recovery (baseline): %s\n", summary(baseline).c_str());
    std::printf("  cold: analysis %s on %d threads, first attribution %s, CPU time %s\n", summary(coldAnalysis).c_str(),
                cores, summary(cold).c_str(), summary(coldCpu).c_str());
    if (!serial.empty()) std::printf("  cold: analysis %s on 1 thread\n", summary(serial).c_str());
    std::printf("  cache hit: first attribution %s, CPU time %s\n", summary(hit).c_str(), summary(hitCpu).c_str());
    std::printf("  cache entry %.1f KiB, %llu loops\n", static_cast<double>(bytes) / 1024.0,
                static_cast<unsigned long long>(loops));
  }
  struct rusage ru {};
  ::getrusage(RUSAGE_SELF, &ru);
  std::printf("peak memory %.0f MiB\n", static_cast<double>(ru.ru_maxrss) / 1024.0);
  fs::remove_all(work);
  return status;
}
