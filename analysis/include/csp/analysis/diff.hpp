// Scaling-loss analysis between two runs (docs/diff.md, thesis §7.2.1): csp-diff as a library.
//
//   auto p = storage::Database::open(resolveRunDatabase("run-p64"));
//   auto q = storage::Database::open(resolveRunDatabase("run-p4096"));
//   ScalingDiff d = computeScalingDiff(*p, *q, {});
//   writeDiffDatabase(d, "scaling-db", /*force=*/false);
//   views::renderDiffText(views::diffReport(d, 10), std::cout);   // the report: views/
//
// The two canonical CCTs are matched by symbolic path (kinds, names, files, lines and module
// base names; never addresses) into their union; every union node gets both runs' sums, the
// excess work and the loss. docs/diff.md is the reference for the formulas, the significance
// rule and the layout of the result database.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "csp/metrics/scaling.hpp"
#include "csp/storage/database.hpp"

namespace csp::analysis {

// Inputs csp-diff refuses (same run twice, p >= q, no common metric, damaged or unsuitable
// databases). what() is one line naming the run and the problem.
class DiffError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// A run argument is either a database directory or a run directory holding `db/` (the batch
// scripts' layout). Returns the database directory; throws DiffError if it is neither.
std::filesystem::path resolveRunDatabase(const std::filesystem::path& run);

struct DiffOptions {
  metrics::ScalingMode mode = metrics::ScalingMode::Strong;
  std::optional<double> p;  // overrides run P's process count
  std::optional<double> q;  // overrides run Q's process count
  std::string metric;       // empty: cpu-time, else real-time, else run P's first common metric
};

// Which runs a union node occurs in (as a CCT node, whatever its value of the chosen metric).
enum class Presence : std::uint8_t { Both = 0, OnlyP = 1, OnlyQ = 2 };

// One scope (E or I) of a union node. Sums are over all profiles of a run, 0 where absent.
struct ScopeDiff {
  double sumP = 0;
  double sumQ = 0;
  double excess = 0;         // strong: sumQ - sumP; weak: sumQ/q - sumP/p
  double loss = 0;           // % of the q run: 100 * excess / reference (docs/diff.md)
  double share = 0;          // % of the total loss: 100 * excess / excess(root, I); NaN if that is 0
  double noise = 0;          // worst-case sampling error of excess (thesis Eq. A.10), same unit
  bool withinNoise = false;  // |excess| <= noise: sampling alone could explain the difference
  bool measured = false;     // some profile of either run has a value here
};

struct DiffNode {
  storage::NodeId parent = kNoIndex;  // kNoIndex for the root
  ScopeKind kind = ScopeKind::Root;
  std::string name, file, module;  // module: full path as stored by the run (Q's if in both)
  std::uint32_t line = 0;
  Presence presence = Presence::Both;
  ScopeDiff exclusive, inclusive;
};

struct DiffRun {
  std::filesystem::path database;
  std::string title;
  double processes = 0;       // p or q as used
  std::string processesFrom;  // "ranks", "processes" or "option": where `processes` came from
  std::uint64_t profiles = 0;
  std::uint64_t nodes = 0;
  std::uint64_t skippedInputs = 0;  // profiles csp-prof-mpi skipped: their costs are missing
  std::uint64_t period = 1;         // of the chosen metric
  bool sampled = false;             // the chosen metric is sampled (has sampling error)
};

struct ScalingDiff {
  metrics::ScalingStudy study;  // mode, p, q and the q run's root (inclusive) sum
  std::string metric;           // name of the compared metric
  std::string unit;             // its unit in the runs
  DiffRun runP, runQ;
  // The union CCT: id = index, root 0, children ordered by their keys' text and numbered in
  // preorder (so parent < child and a subtree is a contiguous id range).
  std::vector<DiffNode> nodes;
  std::uint64_t onlyP = 0, onlyQ = 0;  // union nodes present in one run only
  // Read from a diff database (readScalingDiff), which does not store the runs' profile and
  // context counts, skipped inputs and periods.
  bool readBack = false;

  const ScopeDiff& total() const { return nodes.front().inclusive; }
};

// Matches the two runs and computes every node's loss. Throws DiffError for unsuitable inputs
// and storage::DatabaseError for damaged ones.
ScalingDiff computeScalingDiff(const storage::Database& runP, const storage::Database& runQ,
                               const DiffOptions& options);

// Writes the result as a normal CSP database (docs/diff.md "The diff database"), built under a
// temporary name and published atomically; an existing target is replaced only with `force`.
void writeDiffDatabase(const ScalingDiff& diff, const std::filesystem::path& target, bool force);

// The names of the metrics of a diff database, in metric-id order.
const std::vector<std::string>& diffMetricNames();

// Waiting versus compute (docs/diff.md, "Waiting and compute"): for runs measured with csp-run
// --idleness, the whole-program totals of the thread-state metrics in both runs and their excess
// under the diff's scaling mode and process counts. Empty when either run lacks `work`.
struct StateExcess {
  std::string metric;    // work, idleness, sync-wait, lock-wait, lock-blame, mpi-wait (those in both runs)
  bool waiting = false;  // a wait metric (sync-wait, lock-wait, mpi-wait)
  double sumP = 0, sumQ = 0, excess = 0;  // ns; excess as in ScopeDiff (weak: per process)
};
std::vector<StateExcess> stateExcess(const storage::Database& runP, const storage::Database& runQ,
                                     const ScalingDiff& diff);

// A diff database (writeDiffDatabase) read back: the union CCT with every node's values, the
// scaling study and the runs as far as stored (readBack). Throws DiffError for a database that is
// no csp-diff result and storage::DatabaseError for a damaged one.
ScalingDiff readScalingDiff(const storage::Database& db);

// Refuses an output path that is one of the inputs or lies inside one, however spelled
// (symlinks, "..", a run directory and its db/): DiffError naming the input as given.
// `inputs`: (the run as given, its database).
void checkDiffOutput(const std::filesystem::path& output,
                     const std::vector<std::pair<std::string, std::filesystem::path>>& inputs);

}  // namespace csp::analysis
