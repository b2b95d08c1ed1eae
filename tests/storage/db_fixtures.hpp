// Synthetic database content for the database tests, the crash-test writer and the benchmark.
// Everything is a pure function of (seed, profile, node, ...) so that any process can produce
// exactly its share, and the tests can check any entry without keeping the whole tensor.
#pragma once

#include <fmt/format.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <stdexcept>
#include <string>
#include <vector>

#include "common/temp_dir.hpp"
#include "csp/storage/database.hpp"
#include "csp/storage/database_writer.hpp"

namespace csp::test {

using namespace csp::storage;

inline std::uint64_t mix(std::uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

struct Synthetic {
  std::uint64_t seed = 1;
  std::uint32_t profiles = 16;
  std::uint32_t nodes = 200;
  std::uint16_t metrics = 2;
  bool bothScopes = true;  // false: inclusive values only (the benchmark's shape)
  std::uint32_t regions = 5;

  std::uint64_t hash(std::uint64_t a, std::uint64_t b, std::uint64_t c = 0) const {
    return mix(seed * 0x100000001b3ULL ^ mix(a * 0x9e3779b1ULL ^ mix(b * 31 + c)));
  }
  // About half of the nodes occur in a profile; the root occurs everywhere.
  bool present(ProfileId p, NodeId n) const { return n == 0 || (hash(p, n) & 1) == 0; }
  std::uint64_t value(ProfileId p, NodeId n, MetricId m, MetricScope s) const {
    if (!present(p, n)) return 0;
    const std::uint64_t h = hash(p, n, 2u * m + static_cast<unsigned>(s) + 1);
    if (s == MetricScope::Exclusive && (h & 3) == 0) return 0;  // some zeros to drop
    return 1 + (h >> 8) % 1000;
  }

  std::vector<MetricScope> scopes() const {
    if (bothScopes) return {MetricScope::Exclusive, MetricScope::Inclusive};
    return {MetricScope::Inclusive};
  }

  std::vector<ProfileValue> profileValues(ProfileId p) const {
    std::vector<ProfileValue> out;
    for (NodeId n = 0; n < nodes; ++n) {
      if (!present(p, n)) continue;
      for (MetricId m = 0; m < metrics; ++m)
        for (MetricScope s : scopes())
          if (const auto v = value(p, n, m, s)) out.push_back({n, m, s, v});
    }
    return out;
  }

  std::vector<NodeValue> nodeValues(NodeId n) const {
    std::vector<NodeValue> out;
    for (MetricId m = 0; m < metrics; ++m)
      for (MetricScope s : scopes())
        for (ProfileId p = 0; p < profiles; ++p)
          if (const auto v = value(p, n, m, s)) out.push_back({m, s, p, v});
    return out;
  }

  // A 4-ary tree: parent(i) = (i - 1) / 4.
  CctNode node(NodeId n) const {
    if (n == 0) return CctNode{};
    static constexpr ScopeKind kinds[] = {ScopeKind::ProcFrame, ScopeKind::CallSite, ScopeKind::Loop, ScopeKind::Stmt};
    return CctNode{(n - 1) / 4, kinds[n % 4], 1 + n % 7, 1 + n % 5, 1 + n % 3, n * 10};
  }
  std::vector<NodeId> children(NodeId n) const {
    std::vector<NodeId> out;
    for (std::uint64_t c = 4ull * n + 1; c <= 4ull * n + 4 && c < nodes; ++c) out.push_back(static_cast<NodeId>(c));
    return out;
  }

  std::string summary(std::uint32_t id, MetricId m, MetricScope s) const {
    return fmt::format("acc:{}:{}:{}:{:x}", id, m, static_cast<int>(s), hash(id, m, 77));
  }
  std::vector<Accumulator> summaries(NodeId n) const {
    std::vector<Accumulator> out;
    for (MetricId m = 0; m < metrics; ++m)
      for (MetricScope s : {MetricScope::Exclusive, MetricScope::Inclusive}) out.push_back({m, s, summary(n, m, s)});
    return out;
  }

  // Format 1.4: the histogram of every (node, metric 0, scope) and the parts of two thread classes.
  std::vector<DistributionEntry> distributions(NodeId n) const {
    std::vector<DistributionEntry> out;
    for (MetricScope s : {MetricScope::Exclusive, MetricScope::Inclusive})
      for (std::uint8_t population : {std::uint8_t{kAllThreads}, std::uint8_t{1}, std::uint8_t{2}})
        out.push_back({0, s, population, population == kAllThreads ? "" : fmt::format("acc:{}:{}", n, population),
                       fmt::format("hist:{}:{}:{:x}", n, static_cast<int>(s), hash(n, population, 5))});
    return out;
  }

  RegionNode region(RegionId r) const {
    return r == 0 ? RegionNode{kNoIndex, 0, 0} : RegionNode{(r - 1) / 2, 1 + r % 7, hash(r, 5) % 100};
  }

  // Region event logs: the two threads of each rank (profiles 2k, 2k+1) form process 2k.
  RegionLogProcess logProcess(ProfileId first) const {
    RegionLogProcess p{first, first % 4 == 0 ? "nid00001" : "nid00002", 1000 + first / 2, {}};
    for (ProfileId t = first; t < std::min(first + 2, profiles); ++t)
      p.threads.push_back({t, regionLog(t).size(), t % 3, 0, t % 5 == 0 ? 1u : 0u});
    return p;
  }
  std::vector<RegionLogEvent> regionLog(ProfileId t) const {
    std::vector<RegionLogEvent> out;
    std::uint64_t time = 1'000'000 + t;
    for (std::uint32_t i = 0; i < 3 + t % 4; ++i) {
      const auto r = static_cast<RegionId>(1 + (t + i) % (regions - 1));
      time += hash(t, i) % 5000;
      out.push_back({time, r, true, i % 2 == 0, -static_cast<std::int64_t>(hash(t, i + 9) % 1000)});
      if (!out.back().hasAttr) out.back().attr = 0;
      time += hash(t, i + 3) % 5000;
      out.push_back({time, r, false, false, 0});
    }
    return out;
  }

  // Clocks and communication events (format 1.7): one per log process, its first thread's calls.
  ProcessClock processClock(ProfileId first) const {
    ProcessClock c;
    c.process = first;
    c.hostname = first % 4 == 0 ? "nid00001" : "nid00002";
    c.pid = 1000 + first / 2;
    c.rank = first / 2;
    c.clock = {first == 0 ? ClockState::Reference : ClockState::Measured,
               0,
               100 + first,
               90,
               120,
               900'000 + first,
               890'000,
               910'000,
               8,
               1234 + first};
    c.tightened = first % 3;
    c.conflicts = first % 2;
    return c;
  }
  std::vector<CommEventRecord> commEvents(ProfileId first) const {
    std::vector<CommEventRecord> out;
    std::uint64_t local = 5'000 + first;
    for (std::uint32_t i = 0; i < 2 + first % 3; ++i) {
      CommEventRecord e;
      e.thread = first;
      e.kind = static_cast<CommKind>(1 + (first + i) % 4);
      e.localBeginNs = local;
      e.localEndNs = local += hash(first, i) % 700;
      e.begin = {local - 50, local + 50};
      e.end = {local + 10, local + 90};
      e.peer = static_cast<std::int32_t>(i) - 2;
      e.tag = static_cast<std::int32_t>(hash(first, i + 1) % 100) - 50;
      e.comm = i % 2 == 0 ? 0 : hash(first, 7);
      e.sequence = i;
      e.region = static_cast<RegionId>(i % regions);
      // Format 1.8: a non-blocking operation's wait begin (0: blocking), a collective's kind.
      const std::uint64_t half = (e.localEndNs - e.localBeginNs) / 2;
      e.localWaitBeginNs = i % 2 == 1 && half > 0 ? e.localBeginNs + half : 0;
      if (e.kind == CommKind::Collective) e.op = static_cast<CollectiveOp>(1 + (first + i) % (kCollectiveOpCount - 1));
      out.push_back(e);
      local += 100;
    }
    return out;
  }

  DatabaseMetadata metadata(const std::string& title) const {
    DatabaseMetadata m;
    m.title = title;
    m.executable = "/opt/app/bin/solver";
    m.commandLine = {"solver", "-n", "64", "in.deck"};
    m.hostnames = {"nid00001", "nid00002"};
    m.processCount = (profiles + 1) / 2;
    m.threadCount = profiles;
    m.nodeCount = nodes;
    m.regionCount = regions;
    for (MetricId i = 0; i < metrics; ++i) {
      const auto type = i == 1 ? ValueType::Real : ValueType::Count;  // read back in both places
      m.metrics.push_back(
          {{fmt::format("metric-{}", i), "ns", MetricKind::Sampled, 5'000'000, "synthetic", type}, type});
    }
    for (ProfileId p = 0; p < profiles; ++p)
      m.profiles.push_back({{IdKind::Node, p / 8}, {IdKind::Rank, p / 2}, {IdKind::Thread, p % 2}});
    m.strings = {"", "main", "solve", "f.cpp", "libm.so", "kernel", "g.c", "region-x"};
    m.skipped = {{"meas/r000009-t0000.99.cspprof", "truncated: header announces 100 bytes, file has 10"}};
    m.properties = {{"generator", "db_fixtures"}, {"seed", std::to_string(seed)}};
    for (ProfileId p = 0; p < profiles; ++p)
      m.quality.push_back({1000 + hash(p, 11) % 1000, p % 3, p % 2, hash(p, 12) % 500, p % 2});
    for (ProfileId p = 0; p < profiles; ++p)
      m.threadClasses.push_back({p % 2 == 0 ? ThreadClass::Main : ThreadClass::Worker,
                                 p % 2 == 0 ? "main" : "worker_loop",
                                 p % 2 == 0 ? "the process's initial thread" : "its own work"});
    m.unwindRecovery = storage::UnwindRecovery{40 + seed % 7, 30};
    m.moduleLoops = {
        {"app", 12, 0, ""}, {"libz.so.1", 37, 37, "known by address: no line table"}, {"[vdso]", 0, 0, "not analysed"}};
    return m;
  }

  // Contiguous share `shard` of `shards` for an id space of `count` ids.
  static std::pair<std::uint32_t, std::uint32_t> range(std::uint32_t count, std::uint32_t shard, std::uint32_t shards) {
    return {static_cast<std::uint32_t>(std::uint64_t{count} * shard / shards),
            static_cast<std::uint32_t>(std::uint64_t{count} * (shard + 1) / shards)};
  }

  // Everything shard `shard` of `shards` owns: profiles and nodes by contiguous ranges, the
  // regions on shard 0.
  void writeShard(ShardWriter& w, std::uint32_t shard, std::uint32_t shards) const {
    const auto [n0, n1] = range(nodes, shard, shards);
    const auto [p0, p1] = range(profiles, shard, shards);
    for (NodeId n = n0; n < n1; ++n) w.putNode(n, node(n));
    for (NodeId n = n0; n < n1; ++n)
      for (NodeId c : children(n)) w.putChild(n, c);
    for (NodeId n = n0; n < n1; ++n)
      for (const auto& a : summaries(n)) w.putSummary(n, a.metric, a.scope, a.bytes);
    for (NodeId n = n0; n < n1; ++n)
      for (const auto& d : distributions(n))
        w.putDistribution(n, d.metric, d.scope, d.population, d.accumulator, d.histogram);
    for (NodeId n = n0; n < n1; ++n) w.putNodeValues(n, nodeValues(n));
    for (ProfileId p = p0; p < p1; ++p) w.putProfileValues(p, profileValues(p));
    for (ProfileId p = p0; p < p1; ++p) {
      if (p % 2 != 0) continue;
      const auto process = logProcess(p);
      w.putRegionLogProcess(process);
      for (const auto& t : process.threads) w.putRegionLogThread(p, t, regionLog(t.profile));
      w.putProcessClock(processClock(p));
      w.putCommEvents(p, p, commEvents(p));
    }
    if (shard == 0)
      for (RegionId r = 0; r < regions; ++r) {
        w.putRegion(r, region(r));
        w.putRegionSummary(r, 0, MetricScope::Inclusive, summary(r, 0, MetricScope::Inclusive));
      }
  }
};

// Builds a whole database in this process with `shards` shard writers run one after the other.
// Publishes a builder's shards with metadata that holds nothing but the empty string: for the
// tests of the value and log families, which need no profiles or metrics.
inline void publishBare(DatabaseBuilder& b, std::uint32_t shards) {
  DatabaseMetadata m;
  m.strings = {""};
  b.writeMetadata(m);
  b.ingestShards(shards);
  b.publish();
}

// With metadata of the caller's (e.g. `s.metadata(title)` without a table that older formats lacked).
inline void buildInProcess(const std::filesystem::path& target, const Synthetic& s, const DatabaseMetadata& metadata,
                           std::uint32_t shards = 1, bool force = false) {
  DatabaseBuilder b(target, BuildOptions{.force = force, .onStep = {}});
  for (std::uint32_t k = 0; k < shards; ++k) {
    ShardWriter w(b.stagingDir(), k);
    s.writeShard(w, k, shards);
    w.finish();
  }
  b.writeMetadata(metadata);
  b.ingestShards(shards);
  b.publish();
}

inline void buildInProcess(const std::filesystem::path& target, const Synthetic& s, const std::string& title,
                           std::uint32_t shards = 1, bool force = false) {
  buildInProcess(target, s, s.metadata(title), shards, force);
}

// Writer processes, forked before this process creates the database and so before RocksDB starts
// any thread (forking a threaded process can leave a lock held in the child forever). Like MPI
// ranks they learn the staging directory from the root, here through a pipe.
class ForkedWriters {
 public:
  using Work = std::function<void(const std::filesystem::path& stagingDir, std::uint32_t shard)>;

  ForkedWriters(std::uint32_t count, const Work& work) {
    for (std::uint32_t k = 0; k < count; ++k) {
      int fds[2];
      if (::pipe(fds) != 0) throw std::runtime_error("pipe failed");
      std::fflush(nullptr);  // or the children print our buffered output again
      const pid_t pid = ::fork();
      if (pid < 0) throw std::runtime_error("fork failed");
      if (pid == 0) {
        ::close(fds[1]);
        // The write ends of earlier writers' pipes too: held open here they would keep those
        // writers waiting for the end of the path until this one exits.
        for (int fd : pipes_) ::close(fd);
        std::string path;
        char buf[256];
        for (ssize_t n; (n = ::read(fds[0], buf, sizeof buf)) > 0;) path.append(buf, static_cast<std::size_t>(n));
        int status = 1;
        if (!path.empty()) {
          try {
            work(path, k);
            status = 0;
          } catch (const std::exception& e) {
            std::fprintf(stderr, "writer %u: %s\n", k, e.what());
          }
        }
        std::fflush(stdout);
        ::_exit(status);  // no destructors or atexit handlers of the parent's objects
      }
      ::close(fds[0]);
      pids_.push_back(pid);
      pipes_.push_back(fds[1]);
    }
  }
  ~ForkedWriters() { join(); }
  ForkedWriters(const ForkedWriters&) = delete;
  ForkedWriters& operator=(const ForkedWriters&) = delete;

  void start(const std::filesystem::path& stagingDir) {
    const std::string path = stagingDir.string();
    for (int& fd : pipes_) {
      if (::write(fd, path.data(), path.size()) != static_cast<ssize_t>(path.size()))
        throw std::runtime_error("cannot reach a writer process");
      ::close(fd);
      fd = -1;
    }
  }

  // True if every writer exited with status 0. Writers never started get EOF and fail.
  bool join() {
    for (int& fd : pipes_)
      if (fd >= 0) ::close(fd), fd = -1;
    bool ok = true;
    for (pid_t pid : pids_) {
      int status = 0;
      ::waitpid(pid, &status, 0);
      ok = ok && WIFEXITED(status) && WEXITSTATUS(status) == 0;
    }
    pids_.clear();
    return ok;
  }

 private:
  std::vector<pid_t> pids_;
  std::vector<int> pipes_;
};

}  // namespace csp::test
