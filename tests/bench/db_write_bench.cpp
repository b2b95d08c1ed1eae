// db_write_bench: writes a synthetic experiment database the way csp-prof-mpi will (a root that
// builds and publishes, W forked writer processes that each write the profile range and node
// range they own), then measures its size and the latency of the reads the views need.
//
//   db_write_bench [--profiles N] [--nodes M] [--writers W] [--dir DIR] [--keep] [--smoke]
//
// Defaults: the shape, 16,384 profiles x 5,000 nodes x 2 metrics, about half of the
// nodes present in each profile, 2 writers. Values are synthetic sample counts (1..1000), one
// per (profile, node, metric), inclusive scope; each is stored in both orders. The time includes
// generating the values (a hash per value), which csp-prof-mpi replaces by real work.
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>

#include "storage/db_fixtures.hpp"

namespace fs = std::filesystem;
using namespace csp;
using namespace csp::storage;
using Clock = std::chrono::steady_clock;

namespace {

double seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

struct WriterResult {  // in shared memory, one per writer
  std::uint64_t values = 0;
  double seconds = 0;
  double generating = 0;  // of which spent producing the synthetic values
};

// Synthetic::writeShard's work for the values, with the time spent generating them kept apart
// from the time spent in the ShardWriter.
void writeValues(const test::Synthetic& s, ShardWriter& w, std::uint32_t k, std::uint32_t writers, double& generating) {
  const auto [n0, n1] = test::Synthetic::range(s.nodes, k, writers);
  const auto [p0, p1] = test::Synthetic::range(s.profiles, k, writers);
  for (NodeId n = n0; n < n1; ++n) w.putNode(n, s.node(n));
  for (NodeId n = n0; n < n1; ++n)
    for (NodeId c : s.children(n)) w.putChild(n, c);
  for (NodeId n = n0; n < n1; ++n)
    for (const auto& a : s.summaries(n)) w.putSummary(n, a.metric, a.scope, a.bytes);
  for (NodeId n = n0; n < n1; ++n) {
    const auto t = Clock::now();
    const auto values = s.nodeValues(n);
    generating += seconds(Clock::now() - t);
    w.putNodeValues(n, values);
  }
  for (ProfileId p = p0; p < p1; ++p) {
    const auto t = Clock::now();
    const auto values = s.profileValues(p);
    generating += seconds(Clock::now() - t);
    w.putProfileValues(p, values);
  }
}

struct Latency {
  double median = 0, max = 0, first = 0;
};

template <typename Fn>
Latency measure(int samples, Fn&& fn) {
  std::vector<double> ms;
  for (int i = 0; i < samples; ++i) {
    const auto t0 = Clock::now();
    fn(i);
    ms.push_back(seconds(Clock::now() - t0) * 1e3);
  }
  Latency l;
  l.first = ms.front();
  std::sort(ms.begin(), ms.end());
  l.median = ms[ms.size() / 2];
  l.max = ms.back();
  return l;
}

void usage(const char* argv0) {
  std::fprintf(stderr, "usage: %s [--profiles N] [--nodes M] [--writers W] [--dir DIR] [--keep] [--smoke]\n", argv0);
  std::exit(2);
}

}  // namespace

int main(int argc, char** argv) {
  test::Synthetic s;
  s.seed = 1;
  s.profiles = 16384;
  s.nodes = 5000;
  s.metrics = 2;
  s.bothScopes = false;
  std::uint32_t writers = 2;
  fs::path dir;
  bool keep = false;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) usage(argv[0]);
      return argv[++i];
    };
    if (a == "--profiles")
      s.profiles = static_cast<std::uint32_t>(std::stoul(next()));
    else if (a == "--nodes")
      s.nodes = static_cast<std::uint32_t>(std::stoul(next()));
    else if (a == "--writers")
      writers = static_cast<std::uint32_t>(std::stoul(next()));
    else if (a == "--dir")
      dir = next();
    else if (a == "--keep")
      keep = true;
    else if (a == "--smoke") {
      s.profiles = 256;
      s.nodes = 500;
    } else
      usage(argv[0]);
  }
  if (writers == 0 || s.profiles == 0 || s.nodes == 0) usage(argv[0]);
  std::optional<test::TempDir> tmp;
  if (dir.empty()) {
    tmp.emplace();
    dir = tmp->path();
  }
  const fs::path target = dir / "bench-db";
  std::printf("db_write_bench: %u profiles x %u nodes x %u metrics, %u writer processes, %s\n", s.profiles, s.nodes,
              s.metrics, writers, target.c_str());

  auto* results = static_cast<WriterResult*>(
      ::mmap(nullptr, sizeof(WriterResult) * writers, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0));
  if (results == MAP_FAILED) return 1;
  std::memset(static_cast<void*>(results), 0, sizeof(WriterResult) * writers);

  const auto start = Clock::now();
  Clock::duration createTime{}, writeTime{}, ingestTime{}, publishTime{};
  try {
    test::ForkedWriters writerProcesses(writers, [&](const fs::path& staging, std::uint32_t k) {
      const auto t0 = Clock::now();
      ShardWriter w(staging, k);
      writeValues(s, w, k, writers, results[k].generating);
      w.finish();
      results[k].values = w.valuesWritten();
      results[k].seconds = seconds(Clock::now() - t0);
    });
    DatabaseBuilder builder(target, BuildOptions{.force = true, .onStep = {}});
    createTime = Clock::now() - start;
    writerProcesses.start(builder.stagingDir());
    builder.writeMetadata(s.metadata("db_write_bench"));
    if (!writerProcesses.join()) throw std::runtime_error("a writer process failed");
    writeTime = Clock::now() - start;
    auto t = Clock::now();
    builder.ingestShards(writers);
    ingestTime = Clock::now() - t;
    t = Clock::now();
    builder.publish();
    publishTime = Clock::now() - t;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "db_write_bench: %s\n", e.what());
    return 1;
  }
  const double wall = seconds(Clock::now() - start);

  std::uint64_t storedTwice = 0;
  for (std::uint32_t k = 0; k < writers; ++k) storedTwice += results[k].values;
  const std::uint64_t nonZeros = storedTwice / 2;  // every value is stored once per order

  rusage self{}, kids{};
  ::getrusage(RUSAGE_SELF, &self);
  ::getrusage(RUSAGE_CHILDREN, &kids);

  std::uint64_t dirBytes = 0;
  for (const auto& e : fs::recursive_directory_iterator(target))
    if (e.is_regular_file()) dirBytes += e.file_size();

  auto t = Clock::now();
  auto db = Database::open(target);
  const double openMs = seconds(Clock::now() - t) * 1e3;
  std::uint64_t byProfile = 0, byNode = 0;
  std::printf("\ncolumn family sizes (bytes after compression):\n");
  for (const auto& [name, bytes] : db->columnFamilySizes()) {
    std::printf("  %-18s %14llu\n", name.c_str(), static_cast<unsigned long long>(bytes));
    if (name == "values_by_profile") byProfile = bytes;
    if (name == "values_by_node") byNode = bytes;
  }

  std::mt19937 rng(7);
  std::vector<NodeId> nodes(200);
  std::vector<ProfileId> profiles(50);
  for (auto& n : nodes) n = static_cast<NodeId>(rng() % s.nodes);
  for (auto& p : profiles) p = static_cast<ProfileId>(rng() % s.profiles);
  std::size_t sink = 0;
  const Latency children = measure(200, [&](int i) { sink += db->children(nodes[i] / 4).size(); });
  const Latency nodeValues = measure(200, [&](int i) { sink += db->nodeValues(nodes[i]).size(); });
  const Latency profileValues = measure(50, [&](int i) { sink += db->profileValues(profiles[i]).size(); });
  const Latency summaries = measure(200, [&](int i) { sink += db->summaries(nodes[i]).size(); });

  std::printf("\nwrite\n");
  std::printf(
      "  wall time                 %8.2f s  (create %.2f s, writers done at %.2f s, ingest %.2f s, publish %.2f s)\n",
      wall, seconds(createTime), seconds(writeTime), seconds(ingestTime), seconds(publishTime));
  for (std::uint32_t k = 0; k < writers; ++k)
    std::printf("  writer %u                  %8.2f s  (%.2f s generating values, %.2f s in ShardWriter)\n", k,
                results[k].seconds, results[k].generating, results[k].seconds - results[k].generating);
  auto cpu = [](const rusage& r) {
    return double(r.ru_utime.tv_sec + r.ru_stime.tv_sec) + double(r.ru_utime.tv_usec + r.ru_stime.tv_usec) / 1e6;
  };
  std::printf(
      "  CPU time                  %8.2f s  (root %.2f s, writers %.2f s; wall exceeds CPU / writers when\n"
      "                                       the cores are shared)\n",
      cpu(self) + cpu(kids), cpu(self), cpu(kids));
  std::printf("  peak RSS                  %8.1f MiB root, %.1f MiB largest writer\n", self.ru_maxrss / 1024.0,
              kids.ru_maxrss / 1024.0);
  std::printf("\nsize\n");
  std::printf("  non-zero per-thread values %llu\n", static_cast<unsigned long long>(nonZeros));
  std::printf("  values_by_profile         %8.2f bytes/value\n", double(byProfile) / double(nonZeros));
  std::printf("  values_by_node            %8.2f bytes/value\n", double(byNode) / double(nonZeros));
  std::printf("  both orders               %8.2f bytes/value\n", double(byProfile + byNode) / double(nonZeros));
  std::printf("  whole directory           %8.2f bytes/value (%.1f MiB)\n", double(dirBytes) / double(nonZeros),
              dirBytes / 1048576.0);
  std::printf("\nread (page cache warm; ms: first / median / max)\n");
  std::printf("  open                      %8.2f\n", openMs);
  auto row = [](const char* what, const Latency& l) {
    std::printf("  %-25s %8.3f / %.3f / %.3f\n", what, l.first, l.median, l.max);
  };
  row("children of a node", children);
  row("one node, all profiles", nodeValues);
  row("one profile, all nodes", profileValues);
  row("summaries of a node", summaries);
  std::printf("  (%zu values read)\n", sink);

  db.reset();
  if (keep)
    std::printf("\nkept %s\n", target.c_str());
  else
    fs::remove_all(target);
  return 0;
}
