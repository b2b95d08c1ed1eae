// Thread classes (docs/views.md, "Thread classes"): which threads do the program's work. A
// process's initial thread is `main`; a thread whose own code (its entry procedure) lives in a
// runtime library that runs progress, communication or monitoring threads, or that neither
// worked nor waited in the program's own synchronization for more than a sliver of what the
// busiest thread of its process did, is a `helper`; the others are `worker`s.
// csp-prof-mpi keeps statistics per class, and views show the main and worker threads unless
// told otherwise, so that idle helpers do not distort means, minima and imbalance.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "csp/reduce/scope.hpp"
#include "csp/storage/database.hpp"

namespace csp::reduce {

// `--thread-class CLASS=PATTERN`: threads whose entry procedure, or the file name of its module,
// matches the glob PATTERN are in CLASS. Rules are tried in order before the built-in ones.
struct ThreadClassRule {
  storage::ThreadClass threadClass = storage::ThreadClass::Helper;
  std::string pattern;
};
// Throws std::invalid_argument with a one-line reason for a malformed rule.
ThreadClassRule parseThreadClassRule(std::string_view text);

struct ThreadClassOptions {
  std::vector<ThreadClassRule> rules;
  // A thread other than the initial one with less work and waiting than this share of its
  // process's busiest thread is a helper (0 turns the rule off).
  double helperFraction = 0.01;
};

// What the classification looks at, per profile.
struct ThreadFeatures {
  std::string process;         // host and pid: threads of one process share it
  bool initialThread = false;  // thread index 0 (or no thread index)
  std::uint64_t work = 0;      // recorded samples of the source's work metric (cpu-time for CSP's
                               // profiles; of every count metric if there is none)
  std::string entry;           // entry procedure (most samples), "" if unknown
  std::string entryModule;     // its module's path
  std::uint64_t waited = 0;    // its waits in the program's locks, barriers and MPI calls
                               // (sync-wait, lock-wait, mpi-wait of --idleness), in work-metric samples
};

// The metrics of csp-run --idleness that time a thread's waits in the program's own
// synchronization (a waiting thread is not a helper).
bool isProgramWaitMetric(std::string_view name);

// One class per thread, in input order, with the entry and the reason shown by csp-views --info.
std::vector<storage::ThreadClassInfo> classifyThreads(const std::vector<ThreadFeatures>& threads,
                                                      const ThreadClassOptions& options);

// Finds a thread's entry procedure while its call paths are projected onto the canonical CCT:
// fed every edge (parent, key) -> child in root-to-leaf order, it knows for each node the
// outermost procedure frame on its path that is not a thread start (_start, start_thread, clone,
// ...: kThreadEntries), not in a module of trampolines (the C and C++ runtimes, the loader) and
// no placeholder (kPlaceholderModuleName), and marks nodes below the truncated-paths frame as
// having none.
// Nodes are numbered densely by the CCT they come from, `numbering` (LocalCct::numbering) names
// that tree. A node's entry depends on its path only, so the tracker keeps a table by node for
// the tree, taken from a per-thread pool and handed back as it is: the next profile of the same
// tree finds most of its nodes known and learns only the others (a node table per profile, or a
// hash map, cost a tenth of csp-prof-mpi's reading in allocations). A table of another tree is
// cleared first.
class EntryTracker {
 public:
  EntryTracker(const StringTable& strings, std::uint64_t numbering);
  ~EntryTracker();
  EntryTracker(const EntryTracker&) = delete;
  EntryTracker& operator=(const EntryTracker&) = delete;
  void edge(std::uint32_t parent, const ScopeKey& key, std::uint32_t child) {
    const auto& entry = table_->entry;
    if (child < entry.size() && entry[child] != kUnset) return;  // known: reached before
    learn(parent, key, child);
  }
  // The entry procedure frame of a node, or kNoIndex.
  std::uint32_t entryOf(std::uint32_t node) const {
    if (node >= table_->entry.size()) return kNoIndex;
    const std::uint32_t e = table_->entry[node];
    return e == kUnset || e == kTruncated ? kNoIndex : e;
  }

  struct Table {
    std::vector<std::uint32_t> entry;  // node -> entry node (kNoIndex: none yet; kUnset: not reached)
    std::uint64_t numbering = 0;       // the tree whose entries `entry` holds (0: none yet)
  };

 private:
  void learn(std::uint32_t parent, const ScopeKey& key, std::uint32_t child);
  bool isThreadStart(std::uint32_t name, std::uint32_t module);
  const StringTable& strings_;
  std::unique_ptr<Table> table_;                        // from the pool, back to it when the tracker ends
  std::unordered_map<std::uint64_t, bool> startNames_;  // (name, module) -> a thread-start frame
  static constexpr std::uint32_t kTruncated = kNoIndex - 1;
  static constexpr std::uint32_t kUnset = kNoIndex - 2;
};

}  // namespace csp::reduce
