// Thread classes (reduce/include/csp/reduce/thread_classes.hpp): the rules in their order, and
// the entry procedure found while paths are projected.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <tuple>
#include <vector>

#include "csp/reduce/attribution.hpp"
#include "csp/reduce/canonical_cct.hpp"
#include "csp/reduce/thread_classes.hpp"
#include "stages.hpp"

using namespace csp;
using namespace csp::reduce;
using storage::ThreadClass;

namespace {

ThreadFeatures thread(const std::string& process, bool initial, std::uint64_t work, const std::string& entry = "",
                      const std::string& module = "/opt/app/bin/app") {
  return {process, initial, work, entry, module};
}

TEST(ThreadClasses, BuiltInRulesInOrder) {
  const std::vector<ThreadFeatures> threads{
      thread("p1", true, 0, "main"),             // initial: main, even idle
      thread("p1", false, 5000, "worker_loop"),  // worker
      thread("p1", false, 4000, "progress_engine", "/usr/lib/x86_64-linux-gnu/libopen-pal.so.40"),  // runtime: helper
      thread("p1", false, 49, "poller"),  // < 1 % of 5000: helper
      thread("p1", false, 50, "poller"),  // exactly 1 %: worker
      thread("p2", false, 3, "tiny"),     // its own process's busiest: worker
      thread("p3", false, 0, ""),         // nothing known, no work: worker
  };
  const auto classes = classifyThreads(threads, {});
  ASSERT_EQ(classes.size(), threads.size());
  const ThreadClass expected[] = {ThreadClass::Main,   ThreadClass::Worker, ThreadClass::Helper, ThreadClass::Helper,
                                  ThreadClass::Worker, ThreadClass::Worker, ThreadClass::Worker};
  for (std::size_t i = 0; i < threads.size(); ++i)
    EXPECT_EQ(classes[i].threadClass, expected[i]) << i << ": " << classes[i].reason;
  EXPECT_EQ(classes[2].reason, "starts in the runtime library libopen-pal.so.40");
  EXPECT_EQ(classes[3].reason, "49 samples, under 1 % of its process's busiest thread (5000)");
  EXPECT_EQ(classes[1].entry, "worker_loop");
}

TEST(ThreadClasses, WaitingInTheProgramsSynchronizationIsEffort) {
  // A waiter with no CPU work of its own but 900 samples' worth of waiting for a lock is a
  // worker; the busiest thread's effort includes its waits too.
  auto waiter = thread("p", false, 2, "wait_for_lock");
  waiter.waited = 900;
  auto idle = thread("p", false, 2, "idle_loop");
  const auto classes = classifyThreads({thread("p", true, 100, "main"), waiter, idle}, {});
  EXPECT_EQ(classes[1].threadClass, ThreadClass::Worker) << classes[1].reason;
  EXPECT_EQ(classes[1].reason, "2 samples of its own work, 900 of waits in the program's synchronization");
  EXPECT_EQ(classes[2].threadClass, ThreadClass::Helper) << classes[2].reason;
  EXPECT_EQ(classes[2].reason, "2 samples, under 1 % of its process's busiest thread (902)");
  EXPECT_TRUE(isProgramWaitMetric("lock-wait"));
  EXPECT_TRUE(isProgramWaitMetric("mpi-wait"));
  EXPECT_FALSE(isProgramWaitMetric("idleness"));
}

TEST(ThreadClasses, UserRulesComeFirstAndFractionIsConfigurable) {
  ThreadClassOptions options;
  options.rules.push_back(parseThreadClassRule("worker=progress_*"));
  options.rules.push_back(parseThreadClassRule("helper=libmonitor.so*"));
  options.helperFraction = 0;
  const std::vector<ThreadFeatures> threads{
      thread("p", true, 100, "main"),
      thread("p", false, 100, "progress_engine", "/usr/lib/libopen-pal.so.40"),  // rule: worker
      thread("p", false, 100, "monitor", "/usr/lib/libmonitor.so.1"),            // rule on the module: helper
      thread("p", false, 0, "idle"),                                             // fraction 0: worker
  };
  const auto classes = classifyThreads(threads, options);
  EXPECT_EQ(classes[1].threadClass, ThreadClass::Worker);
  EXPECT_EQ(classes[1].reason, "--thread-class worker=progress_*");
  EXPECT_EQ(classes[2].threadClass, ThreadClass::Helper);
  EXPECT_EQ(classes[3].threadClass, ThreadClass::Worker);
  // A rule can even make an initial thread a helper (a launcher's own process, say).
  options.rules = {parseThreadClassRule("helper=main")};
  EXPECT_EQ(classifyThreads({thread("q", true, 10, "main")}, options)[0].threadClass, ThreadClass::Helper);
}

TEST(ThreadClasses, RuleSyntax) {
  EXPECT_EQ(parseThreadClassRule("helper=progress_engine").threadClass, ThreadClass::Helper);
  EXPECT_EQ(parseThreadClassRule("main=*").pattern, "*");
  for (const char* bad : {"", "helper", "=x", "helper=", "boss=x"})
    EXPECT_THROW(parseThreadClassRule(bad), std::invalid_argument) << bad;
}

// Scopes of the entry tracker's tests: a procedure frame of `module`, and one call site.
ScopeKey procFrame(StringTable& strings, const char* name, const char* module) {
  return ScopeKey{ScopeKind::ProcFrame, strings.intern(name), 0, 0, strings.intern(module)};
}
ScopeKey callSite(StringTable& strings) { return ScopeKey{ScopeKind::CallSite, 0, strings.intern("x.c"), 3, 0}; }

// The entry of a path: the outermost procedure frame below the thread-start frames and outside
// the C and C++ runtimes; nothing below the truncated-paths frame.
TEST(ThreadClasses, EntryTrackerSkipsThreadStartsAndRuntimeTrampolines) {
  StringTable strings;
  const LocalCct tree(strings);  // names the node ids below
  EntryTracker t(strings, tree.numbering());
  auto proc = [&](const char* name, const char* module) { return procFrame(strings, name, module); };
  const ScopeKey site = callSite(strings);
  // clone3 (libc) -> start_thread (libc) -> execute_native_thread_routine (libstdc++) -> worker (app) -> kernel (app)
  t.edge(0, proc("clone3", "/lib/x86_64-linux-gnu/libc.so.6"), 1);
  t.edge(1, site, 2);
  t.edge(2, proc("start_thread", "/lib/x86_64-linux-gnu/libc.so.6"), 3);
  t.edge(3, site, 4);
  t.edge(4, proc("execute_native_thread_routine", "/lib/x86_64-linux-gnu/libstdc++.so.6"), 5);
  t.edge(5, site, 6);
  t.edge(6, proc("worker", "/opt/app"), 7);
  t.edge(7, site, 8);
  t.edge(8, proc("kernel", "/opt/app"), 9);
  t.edge(9, {ScopeKind::Stmt, 0, strings.intern("k.c"), 9, 0}, 10);
  EXPECT_EQ(t.entryOf(3), kNoIndex);
  EXPECT_EQ(t.entryOf(7), 7u);
  EXPECT_EQ(t.entryOf(10), 7u);
  // [truncated call paths] -> f: no entry.
  t.edge(0, proc(kTruncatedPathsName, ""), 20);
  t.edge(20, site, 21);
  t.edge(21, proc("f", "/opt/app"), 22);
  EXPECT_EQ(t.entryOf(22), kNoIndex);
}

// Entries depend on a node's path only: a tracker of the same tree (numbering) finds those of the
// profiles before it, answers the same for the nodes it reaches again and finds new ones; a
// tracker of another tree finds none of them, and neither does the first tree's after it.
TEST(ThreadClasses, EntryTrackerKeepsEntriesForTheNextProfileOfTheSameTreeOnly) {
  StringTable strings;
  LocalCct cct(strings), other(strings);
  ASSERT_NE(cct.numbering(), other.numbering());
  auto proc = [&](const char* name, const char* module) { return procFrame(strings, name, module); };
  const ScopeKey site = callSite(strings);
  const ScopeKey line{ScopeKind::Stmt, 0, strings.intern("x.c"), 4, 0};
  const std::vector<std::tuple<std::uint32_t, ScopeKey, std::uint32_t>> workerPath = {
      {0, proc("start_thread", "/lib/x86_64-linux-gnu/libc.so.6"), 1},
      {1, site, 2},
      {2, proc("worker", "/opt/app"), 3},
      {3, line, 4}};
  {  // first profile: start_thread -> worker -> statement
    EntryTracker t(strings, cct.numbering());
    for (const auto& [parent, key, child] : workerPath) t.edge(parent, key, child);
    EXPECT_EQ(t.entryOf(4), 3u);
  }
  {  // second profile of the same tree: the known path again, and main's path, new
    EntryTracker t(strings, cct.numbering());
    EXPECT_EQ(t.entryOf(4), 3u);  // kept
    for (const auto& [parent, key, child] : workerPath) t.edge(parent, key, child);
    t.edge(0, proc("main", "/opt/app"), 5);
    t.edge(5, line, 6);
    EXPECT_EQ(t.entryOf(1), kNoIndex);
    EXPECT_EQ(t.entryOf(4), 3u);
    EXPECT_EQ(t.entryOf(6), 5u);
  }
  {  // another tree numbers its nodes otherwise: nothing of the first is known
    EntryTracker t(strings, other.numbering());
    EXPECT_EQ(t.entryOf(4), kNoIndex);
    EXPECT_EQ(t.entryOf(6), kNoIndex);
    t.edge(0, proc("main", "/opt/app"), 4);
    EXPECT_EQ(t.entryOf(4), 4u);
  }
  // The first tree again: its table was cleared for the other, whose entry of node 4 does not
  // hold here either.
  EntryTracker t(strings, cct.numbering());
  EXPECT_EQ(t.entryOf(4), kNoIndex);
  EXPECT_EQ(t.entryOf(6), kNoIndex);
  t.edge(0, proc("main", "/opt/app"), 5);
  EXPECT_EQ(t.entryOf(5), 5u);
}

// A thread's work and entry procedure from its statements' values, with a few entries and with
// many (more than a list is searched for): work in samples of the work metric (value / period),
// the entry with most samples, ties to the smaller name.
TEST(ThreadClasses, FeaturesFindTheEntryWithMostWorkAmongFewOrMany) {
  for (const std::uint32_t procedures : {3u, 40u}) {
    StringTable strings;
    LocalCct cct(strings);
    EntryTracker entries(strings, cct.numbering());
    auto lookup = cct.lookup();
    ThreadProfile p;
    p.identity.hostname = "h";
    p.metrics = {{"cpu-time", "ns", MetricKind::Sampled, 1000, ""}, {"real-time", "ns", MetricKind::Sampled, 7, ""}};
    std::vector<StmtValue> stmt;
    std::uint64_t expected = 0;
    for (std::uint32_t k = 0; k < procedures; ++k) {
      // p00, p01, ... under the root, each with one statement: p05 and p07 have the most work
      // (ties: p05 wins by name), and the real-time values do not count.
      const ScopeKey proc{ScopeKind::ProcFrame, strings.intern(fmt::format("p{:02}", k)), 0, 0,
                          strings.intern("/opt/app")};
      const std::uint32_t frame = lookup.child(0, proc);
      entries.edge(0, proc, frame);
      const ScopeKey line{ScopeKind::Stmt, 0, strings.intern("a.c"), k + 1, 0};
      const std::uint32_t leaf = lookup.child(frame, line);
      entries.edge(frame, line, leaf);
      const std::uint64_t samples = k == 5 || k == 7 ? 50 : k % 4 + 1;
      stmt.push_back({leaf, 0, samples * 1000});
      stmt.push_back({leaf, 1, 999 * 7});
      expected += samples;
    }
    // Statements of one entry apart: the last entry seen is not the only one looked up.
    stmt.push_back({stmt[2].node, 0, 3000});
    expected += 3;
    const ThreadFeatures f = stages::threadFeatures(p, "cpu-time", stmt, entries, cct, strings);
    EXPECT_EQ(f.work, expected) << procedures;
    EXPECT_EQ(f.entry, procedures > 7 ? "p05" : "p01") << procedures;  // 3 procedures: p01 has 2 + 3
    EXPECT_EQ(f.entryModule, "/opt/app");
  }
}

}  // namespace
