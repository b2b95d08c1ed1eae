// csp-query's cost (docs/benchmarks.md "csp-query"): frames and one query over synthetic region
// logs streamed from memory (no log is ever held: the events are computed as they are read), and
// the same from a database at a smaller size. Reports events/s and peak RSS.
//
//   query_bench [--events N] [--threads T] [--db-events M] [--dir D] [--smoke]
//
// The logs: T threads run iterations of region "loop" followed by "barrier"; thread T-1 does
// twice the work of the others, so the straggler degree is exactly 1/2 (checked: a benchmark
// that computes a wrong answer fails).
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>

#include "csp/analysis/database_source.hpp"
#include "csp/analysis/evaluate.hpp"
#include "csp/analysis/frames.hpp"
#include "csp/analysis/query.hpp"
#include "csp/storage/database.hpp"
#include "csp/storage/database_writer.hpp"

namespace fs = std::filesystem;
using namespace csp::analysis;

namespace {

constexpr std::uint32_t kLoop = 1, kBarrier = 2;
constexpr std::uint64_t kWork = 1000;

// Thread `t` of `threads`: per iteration enter loop, exit loop, and (not the slow thread) enter
// and exit barrier; `iterations` iterations. Computed on demand.
class SyntheticStream final : public EventStream {
 public:
  SyntheticStream(std::size_t t, std::size_t threads, std::uint64_t iterations)
      : slow_(t + 1 == threads), iterations_(iterations) {}
  bool next(Event& e) override {
    if (it_ == iterations_) return false;
    const std::uint64_t s = start_;
    const std::uint64_t w = workOf(it_);
    const std::uint64_t work = slow_ ? 2 * w : w;
    switch (step_) {
      case 0:
        e = {s, kLoop, true, false, 0};
        break;
      case 1:
        e = {s + work, kLoop, false, false, 0};
        break;
      case 2:
        e = {s + work, kBarrier, true, false, 0};
        break;
      default:
        e = {s + 2 * w, kBarrier, false, false, 0};
        break;
    }
    ++step_;
    if (step_ == (slow_ ? 2u : 4u)) {
      step_ = 0;
      start_ += 2 * w + 7;  // the barrier's release takes 7 ns in which every thread is in phi
      ++it_;
    }
    return true;
  }
  // The work of an iteration varies (the same for every thread, twice that for the slow one), so
  // that timestamps are irregular like measured ones; the straggler degree stays exactly 1/2.
  static std::uint64_t workOf(std::uint64_t it) {
    std::uint64_t h = (it + 1) * 0x9E3779B97F4A7C15ull;
    h ^= h >> 29;
    return kWork + h % kWork;
  }
  static std::uint64_t perIteration(std::size_t threads) { return 4 * (threads - 1) + 2; }

 private:
  bool slow_;
  std::uint64_t iterations_;
  std::uint64_t it_ = 0;
  std::uint64_t start_ = 0;
  unsigned step_ = 0;
};

RegionTree tree() {
  RegionTree t;
  t.add(0, "loop");
  t.add(0, "barrier");
  return t;
}

double seconds(std::chrono::steady_clock::time_point since) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - since).count();
}

double peakRssMiB() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return static_cast<double>(u.ru_maxrss) / 1024.0;
}

const char* kQuery = "Duration(∃1 t : (t, loop) ∧ ∀u ≠ t : (u, barrier)) / Duration(∃t : (t, loop))";

bool check(double degree, const char* what) {
  if (degree != 0.5) {
    std::fprintf(stderr, "query_bench: %s: straggler degree %.17g, expected 0.5\n", what, degree);
    return false;
  }
  return true;
}

bool streamed(std::uint64_t events, std::size_t threads) {
  const auto t = tree();
  const std::uint64_t iterations = events / SyntheticStream::perIteration(threads);
  const std::uint64_t n = iterations * SyntheticStream::perIteration(threads);
  auto open = [&] {
    std::vector<std::unique_ptr<EventStream>> s;
    for (std::size_t i = 0; i < threads; ++i) s.push_back(std::make_unique<SyntheticStream>(i, threads, iterations));
    return s;
  };
  // Frames alone.
  auto start = std::chrono::steady_clock::now();
  FrameBuilder fb(t, open());
  Frame f;
  std::uint64_t frames = 0;
  while (fb.next(f)) ++frames;
  const double framesSeconds = seconds(start);
  // Frames and the straggler query.
  ProcessInput p;
  p.label = "synthetic";
  for (std::size_t i = 0; i < threads; ++i) p.threadNumbers.push_back(i);
  p.open = open;
  const Query q = parseQuery(kQuery);
  start = std::chrono::steady_clock::now();
  const auto r = evaluate(q, t, p);
  const double querySeconds = seconds(start);
  std::printf(
      "streamed  events %llu  threads %zu  frames %llu  frames-only %.2f s (%.1f M events/s)  "
      "frames+query %.2f s (%.1f M events/s)  peak RSS %.1f MiB\n",
      static_cast<unsigned long long>(n), threads, static_cast<unsigned long long>(frames), framesSeconds,
      static_cast<double>(n) / framesSeconds / 1e6, querySeconds, static_cast<double>(n) / querySeconds / 1e6,
      peakRssMiB());
  return check(r.bindings.at(0).value, "streamed");
}

bool fromDatabase(std::uint64_t events, std::size_t threads, const fs::path& dir) {
  using namespace csp::storage;
  const std::uint64_t iterations = events / SyntheticStream::perIteration(threads);
  const std::uint64_t n = iterations * SyntheticStream::perIteration(threads);
  const fs::path target = dir / "query-bench-db";
  std::error_code ec;
  fs::remove_all(target, ec);
  auto start = std::chrono::steady_clock::now();
  // Written by a child process, so that the peak RSS reported below is the query's alone.
  const pid_t child = fork();
  if (child < 0) return false;
  if (child == 0) {
    DatabaseBuilder b(target);
    {
      ShardWriter w(b.stagingDir(), 0);
      RegionLogProcess proc{0, "bench", 1, {}};
      for (std::size_t i = 0; i < threads; ++i) proc.threads.push_back({static_cast<ProfileId>(i), 0, 0, 0, 0});
      w.putRegionLogProcess(proc);
      std::vector<RegionLogEvent> log;
      for (std::size_t i = 0; i < threads; ++i) {
        log.clear();
        SyntheticStream s(i, threads, iterations);
        Event e;
        while (s.next(e)) log.push_back({e.timeNs, e.region, e.enter, false, 0});
        w.putRegionLogThread(0, proc.threads[i], log);
      }
      w.finish();
    }
    DatabaseMetadata m;
    m.strings = {"", "loop", "barrier"};
    m.regionCount = 3;
    for (std::size_t i = 0; i < threads; ++i) m.profiles.push_back({{csp::IdKind::Thread, i}});
    {
      ShardWriter w(b.stagingDir(), 1);
      w.putRegion(0, {csp::kNoIndex, 0, 0});
      w.putRegion(1, {0, 1, 0});
      w.putRegion(2, {0, 2, 0});
      w.finish();
    }
    b.writeMetadata(m);
    b.ingestShards(2);
    b.publish();
    std::_Exit(0);
  }
  int status = 0;
  if (waitpid(child, &status, 0) != child || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    std::fprintf(stderr, "query_bench: writing the database failed\n");
    return false;
  }
  const double writeSeconds = seconds(start);
  std::uint64_t bytes = 0;
  for (const auto& e : fs::recursive_directory_iterator(target))
    if (e.is_regular_file()) bytes += e.file_size();
  const double rssBefore = peakRssMiB();
  auto db = Database::open(target);
  std::uint64_t familyBytes = 0;
  for (const auto& [name, size] : db->columnFamilySizes())
    if (name == "region_events") familyBytes = size;
  const auto logs = loadLogs(*db);
  start = std::chrono::steady_clock::now();
  const auto r = evaluate(parseQuery(kQuery), logs.tree, logs.processes.at(0));
  const double querySeconds = seconds(start);
  std::printf(
      "database  events %llu  threads %zu  written in %.2f s  region_events %.2f bytes/event (directory %.1f MiB)  "
      "frames+query %.2f s (%.1f M events/s)  peak RSS %.1f MiB (%.1f before the query)\n",
      static_cast<unsigned long long>(n), threads, writeSeconds,
      static_cast<double>(familyBytes) / static_cast<double>(n), static_cast<double>(bytes) / 1048576.0, querySeconds,
      static_cast<double>(n) / querySeconds / 1e6, peakRssMiB(), rssBefore);
  db.reset();
  fs::remove_all(target, ec);
  return check(r.bindings.at(0).value, "database");
}

}  // namespace

int main(int argc, char** argv) {
  std::uint64_t events = 100'000'000, dbEvents = 10'000'000;
  std::size_t threads = 8;
  fs::path dir = fs::temp_directory_path();
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "query_bench: %s needs a value\n", a.c_str());
        std::exit(2);
      }
      return argv[++i];
    };
    if (a == "--events")
      events = std::stoull(next());
    else if (a == "--db-events")
      dbEvents = std::stoull(next());
    else if (a == "--threads")
      threads = std::stoull(next());
    else if (a == "--dir")
      dir = next();
    else if (a == "--smoke") {
      events = 100'000;
      dbEvents = 20'000;
    } else {
      std::fprintf(stderr, "usage: query_bench [--events N] [--threads T] [--db-events M] [--dir D] [--smoke]\n");
      return 2;
    }
  }
  if (threads < 2) {
    std::fprintf(stderr, "query_bench: --threads must be at least 2\n");
    return 2;
  }
  bool ok = streamed(events / 100, threads);  // a small run first: peak RSS must not grow with the log
  ok = streamed(events, threads) && ok;
  if (dbEvents > 0) ok = fromDatabase(dbEvents, threads, dir) && ok;
  return ok ? 0 : 1;
}
