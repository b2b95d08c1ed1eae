// Reading hpcrun measurements against reading CSP's own profiles of the same shape (issue 29's
// target: reading hpcrun input costs at most 1.3 x reading CSP's format).
//
//     hpcrun_bench [--profiles N] [--nodes M] [--dir DIR] [--prof CSP_PROF_MPI] [--rounds R] [--made-order]
//                  [--smoke]
//     hpcrun_bench --write DIR [--profiles N] [--nodes M] [--made-order]
//
// Writes N hpcrun files of M CCT nodes and 2 integer metrics (tests/reduce/hpcrun_writer.hpp),
// the nodes and values in preorder as hpcrun writes them (--made-order: in the order the tree
// was made, parents first but no preorder), reads each back through the hpcrun source and
// writes the same profile as a .cspprof; then times reading all N of each format in this process
// through its source, and through its source plus the validation the pipeline adds to every
// source (R interleaved rounds, default 3; thread CPU time, medians and the ratio per round) and,
// with --prof, csp-prof-mpi on each directory.
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
// postproc scenario), its values its own. Node ids are in the order the nodes were made (each
// below a random earlier one); the file has them in preorder, as hpcrun writes them, or (with
// `madeOrder`) in the order they were made: parents first, but no preorder.
hr::Profile shape(std::size_t nodes, std::uint64_t seed, bool madeOrder) {
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
  if (!madeOrder) p.nodes = hr::inPreorder(p.nodes);
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

// CPU seconds per round of reading every profile of each format.
struct Times {
  std::vector<double> hpcrun, csp;
  void print(const char* what, std::size_t nodes) const {
    std::vector<double> ratio;
    for (std::size_t r = 0; r < hpcrun.size(); ++r) ratio.push_back(hpcrun[r] / csp[r]);
    std::printf(
        "%s, CPU: hpcrun %.4f s (%.1f ns per node)  csp %.4f s (%.1f ns per node)  hpcrun / csp per round: "
        "median %.2f (%.2f-%.2f)\n",
        what, median(hpcrun), 1e9 * median(hpcrun) / static_cast<double>(nodes), median(csp),
        1e9 * median(csp) / static_cast<double>(nodes), median(ratio), *std::min_element(ratio.begin(), ratio.end()),
        *std::max_element(ratio.begin(), ratio.end()));
  }
};

}  // namespace

int main(int argc, char** argv) {
  std::size_t profiles = 1024, nodes = 5000;
  fs::path dir = fs::temp_directory_path() / "csp-hpcrun-bench";
  std::string prof;
  bool writeOnly = false, madeOrder = false;
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
    } else if (a == "--made-order") {
      madeOrder = true;
    } else if (a == "--prof" && i + 1 < argc) {
      prof = argv[++i];
    } else {
      std::fprintf(stderr,
                   "usage: hpcrun_bench [--profiles N] [--nodes M] [--dir DIR] [--prof CSP_PROF_MPI] [--rounds R] "
                   "[--made-order]\n"
                   "       [--smoke]\n"
                   "       hpcrun_bench --write DIR [--profiles N] [--nodes M] [--made-order]\n");
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
    hr::write(shape(nodes, k, madeOrder), hpcrunFiles.back());
    auto p = source->read(hpcrunFiles.back());
    p.cct.pathStart.clear();  // CSP's files hold no path starts; the shape is the same
    csp::storage::writeProfile(p, cspFiles.back());
  }
  if (writeOnly) {
    std::printf("wrote %zu hpcrun and %zu CSP profiles of %zu nodes to %s\n", profiles, profiles, nodes, dir.c_str());
    return 0;
  }
  // Each format read as the pipeline reads it: through its source (CSP's maps the file, checks its
  // checksum and decodes it; hpcrun's reads and converts it), and then, as the pipeline's read
  // step does for every source alike, validated (readInput in reduce/src/pipeline/read.cpp).
  // Thread CPU time, interleaved rounds, the ratio per round.
  const auto csp = csp::reduce::cspProfileSource();
  std::size_t sink = 0;
  const auto readAll = [&](const csp::reduce::ProfileSource& from, const std::vector<fs::path>& files, bool validate) {
    return cpuSeconds([&] {
      for (const auto& f : files) {
        const auto p = from.read(f);
        if (validate) csp::storage::validateProfile(p, f.string());
        sink += p.cct.size();
      }
    });
  };
  Times read, readValidate;
  for (int round = 0; round < rounds; ++round) {
    read.csp.push_back(readAll(*csp, cspFiles, false));
    read.hpcrun.push_back(readAll(*source, hpcrunFiles, false));
    readValidate.csp.push_back(readAll(*csp, cspFiles, true));
    readValidate.hpcrun.push_back(readAll(*source, hpcrunFiles, true));
  }
  std::uintmax_t hpcrunBytes = 0, cspBytes = 0;
  for (const auto& f : hpcrunFiles) hpcrunBytes += fs::file_size(f);
  for (const auto& f : cspFiles) cspBytes += fs::file_size(f);
  std::printf("%zu profiles x %zu nodes (nodes in %s; %.1f MB hpcrun, %.1f MB CSP; %zu nodes read)\n", profiles, nodes,
              madeOrder ? "the order they were made" : "preorder, as hpcrun writes them", hpcrunBytes / 1e6,
              cspBytes / 1e6, sink);
  read.print("read (the source)", profiles * nodes);
  readValidate.print("read + validate (the pipeline's read step)", profiles * nodes);
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
