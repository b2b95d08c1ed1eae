// Reading hpcrun measurements against reading CSP's own profiles of the same shape (issue 29's
// target: reading hpcrun input costs at most 1.3 x reading CSP's format).
//
//     hpcrun_bench [--profiles N] [--nodes M] [--dir DIR] [--prof CSP_PROF_MPI] [--rounds R] [--smoke]
//     hpcrun_bench --write DIR [--profiles N] [--nodes M]
//
// Writes N hpcrun files of M CCT nodes and 2 integer metrics (tests/reduce/hpcrun_writer.hpp),
// reads each back through the hpcrun source and writes the same profile as a .cspprof; then
// times reading all N of each format in this process (R interleaved rounds, default 3, medians) and,
// with --prof, csp-prof-mpi on each directory. Prints the times and their ratio.
// --write only writes the two directories (DIR/hpcrun, DIR/csp) and keeps them: the inputs of
// tests/bench/run.py's hpcrun scenario.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "csp/reduce/profile_source.hpp"
#include "csp/storage/profile_io.hpp"
#include "reduce/hpcrun_writer.hpp"

namespace {

namespace fs = std::filesystem;
namespace hr = csp::test::hpcrun;

// Profile `seed`: one of two trees (threads of one program share their call paths, as in the
// postproc scenario), its values its own.
hr::Profile shape(std::size_t nodes, std::uint64_t seed) {
  std::mt19937_64 rng(seed % 2), values(seed);
  hr::Profile p;
  p.loadmap = {{1, "/nonexistent/bench/app"}, {2, "/nonexistent/bench/libm.so"}};
  p.metrics = {{"CYCLES", false, 1000000, ""}, {"INSTRUCTIONS", false, 1000000, ""}};
  p.idTuple = {{hr::Rank, seed / 4, seed / 4}, {hr::Thread, seed % 4, seed % 4}};
  p.nodes.push_back({2, 0, 0, hr::kPrimary});
  p.nodes.push_back({4, 2, 0, hr::kMainFence});
  for (std::uint32_t i = 2; i < nodes; ++i) {
    const std::uint32_t parent = i < 3 ? 4 : 2 * (2 + static_cast<std::uint32_t>(rng() % (i - 2)));
    p.nodes.push_back({2 * (i + 1), parent, static_cast<std::uint16_t>(1 + rng() % 2), 0x1000 + (rng() % 4096) * 4});
    if (values() % 2 == 0) {
      p.values.push_back({2 * (i + 1), 0, 1000000 * (1 + values() % 100)});
      if (values() % 2 == 0) p.values.push_back({2 * (i + 1), 1, 1000000 * (1 + values() % 100)});
    }
  }
  return p;
}

double seconds(const std::function<void()>& f) {
  const auto t0 = std::chrono::steady_clock::now();
  f();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// CPU time of this thread: what the read costs, whatever else the (shared) machine runs.
double cpuSeconds(const std::function<void()>& f) {
  timespec t0{}, t1{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t0);
  f();
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t1);
  return static_cast<double>(t1.tv_sec - t0.tv_sec) + 1e-9 * static_cast<double>(t1.tv_nsec - t0.tv_nsec);
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  std::size_t profiles = 1024, nodes = 5000;
  fs::path dir = fs::temp_directory_path() / "csp-hpcrun-bench";
  std::string prof;
  bool writeOnly = false;
  int rounds = 3;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--smoke") {
      profiles = 8;
      nodes = 200;
    } else if (a == "--profiles" && i + 1 < argc) {
      profiles = std::stoul(argv[++i]);
    } else if (a == "--nodes" && i + 1 < argc) {
      nodes = std::stoul(argv[++i]);
    } else if (a == "--dir" && i + 1 < argc) {
      dir = argv[++i];
    } else if (a == "--write" && i + 1 < argc) {
      dir = argv[++i];
      writeOnly = true;
    } else if (a == "--rounds" && i + 1 < argc) {
      rounds = std::max(1, std::stoi(argv[++i]));
    } else if (a == "--prof" && i + 1 < argc) {
      prof = argv[++i];
    } else {
      std::fprintf(
          stderr,
          "usage: hpcrun_bench [--profiles N] [--nodes M] [--dir DIR] [--prof CSP_PROF_MPI] [--rounds R] [--smoke]\n"
          "       hpcrun_bench --write DIR [--profiles N] [--nodes M]\n");
      return 2;
    }
  }
  const auto source = csp::reduce::hpcrunProfileSource();
  // --write replaces only what it writes; the timing run owns its whole directory.
  fs::remove_all(writeOnly ? dir / "hpcrun" : dir);
  if (writeOnly) fs::remove_all(dir / "csp");
  fs::create_directories(dir / "hpcrun");
  fs::create_directories(dir / "csp");
  std::vector<fs::path> hpcrunFiles, cspFiles;
  for (std::size_t k = 0; k < profiles; ++k) {
    char name[64];
    std::snprintf(name, sizeof name, "p%06zu", k);
    hpcrunFiles.push_back(dir / "hpcrun" / (std::string(name) + ".hpcrun"));
    cspFiles.push_back(dir / "csp" / (std::string(name) + ".cspprof"));
    hr::write(shape(nodes, k), hpcrunFiles.back());
    auto p = source->read(hpcrunFiles.back());
    p.cct.pathStart.clear();  // CSP's files hold no path starts; the shape is the same
    csp::storage::writeProfile(p, cspFiles.back());
  }
  if (writeOnly) {
    std::printf("wrote %zu hpcrun and %zu CSP profiles of %zu nodes to %s\n", profiles, profiles, nodes, dir.c_str());
    return 0;
  }
  std::vector<double> hpcrunTimes, cspTimes, hpcrunCpu, cspCpu;
  std::size_t sink = 0;
  for (int round = 0; round < rounds; ++round) {
    double cpu = 0;
    cspTimes.push_back(seconds([&] {
      cpu = cpuSeconds([&] {
        for (const auto& f : cspFiles) sink += csp::storage::readProfile(f, {.validate = false}).cct.size();
      });
    }));
    cspCpu.push_back(cpu);
    hpcrunTimes.push_back(seconds([&] {
      cpu = cpuSeconds([&] {
        for (const auto& f : hpcrunFiles) sink += source->read(f).cct.size();
      });
    }));
    hpcrunCpu.push_back(cpu);
  }
  std::uintmax_t hpcrunBytes = 0, cspBytes = 0;
  for (const auto& f : hpcrunFiles) hpcrunBytes += fs::file_size(f);
  for (const auto& f : cspFiles) cspBytes += fs::file_size(f);
  std::printf("%zu profiles x %zu nodes (%zu nodes read)\n", profiles, nodes, sink / 6);
  std::vector<double> perRound, cpuPerRound;
  for (std::size_t r = 0; r < hpcrunTimes.size(); ++r) {
    perRound.push_back(hpcrunTimes[r] / cspTimes[r]);
    cpuPerRound.push_back(hpcrunCpu[r] / cspCpu[r]);
  }
  std::printf("read  hpcrun %.3f s (%.1f MB)  csp %.3f s (%.1f MB)  ratio %.2f  (per round: median %.2f)\n",
              median(hpcrunTimes), hpcrunBytes / 1e6, median(cspTimes), cspBytes / 1e6,
              median(hpcrunTimes) / median(cspTimes), median(perRound));
  std::printf("read CPU  hpcrun %.3f s  csp %.3f s  per round: median ratio %.2f\n", median(hpcrunCpu), median(cspCpu),
              median(cpuPerRound));
  if (!prof.empty()) {
    std::vector<double> h, c;
    for (int round = 0; round < 3; ++round) {
      for (const char* format : {"csp", "hpcrun"}) {
        const std::string cmd = prof + " -q --structure-cache off " + (dir / format).string() + " -o " +
                                (dir / (std::string(format) + ".db")).string() + " --force";
        const double t = seconds([&] {
          if (std::system(cmd.c_str()) != 0) std::fprintf(stderr, "failed: %s\n", cmd.c_str());
        });
        (format[0] == 'c' ? c : h).push_back(t);
      }
    }
    std::printf("csp-prof-mpi  hpcrun %.3f s  csp %.3f s  ratio %.2f\n", median(h), median(c), median(h) / median(c));
  }
  fs::remove_all(dir);
  return 0;
}
