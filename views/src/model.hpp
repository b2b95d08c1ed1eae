// Internals of views/: the sources of the view pipeline. A ViewModel is a lazily expandable tree
// whose nodes carry non-finalized accumulators; select.cpp finalizes, prunes and sorts it into a
// ViewTree; the renderers print that.
#pragma once

#include <memory>
#include <string>
#include <variant>
#include <vector>

#include "csp/metrics/accumulator.hpp"
#include "csp/metrics/histogram.hpp"
#include "csp/views/views.hpp"

namespace csp::views::detail {

using storage::RegionId;
using storage::StringId;

// A summary accumulator of either value type. Metrics stored as counts use the exact integer
// accumulator, per-thread derived (real) metrics the mergeable mean/M2 form. With a histogram
// of the per-thread values (divided by `unit`, the metric's period), finalize() adds the
// percentiles.
class Acc {
 public:
  // One CCT instance without values (a node absent from every profile for this metric).
  static Acc emptyInstance(storage::ValueType type, bool withHistogram = false, double unit = 1);
  // A Flat/Callers node: zero instances, fed with add().
  static Acc combined(storage::ValueType type, bool withHistogram = false, double unit = 1);
  static Acc decode(storage::ValueType type, std::string_view bytes);
  void setHistogram(std::string_view bytes, double unit);  // throws metrics::DecodeError

  void add(const Acc& instance);  // combineInstance (thesis Fig. 7.7)
  void merge(const Acc& part);    // combine: another population's part of the same node
  metrics::Statistics finalize(std::uint64_t profiles, metrics::Population population) const;
  std::uint64_t instances() const;

 private:
  std::variant<metrics::IntAccumulator, metrics::RealAccumulator> v_;
  bool hasHistogram_ = false;
  double unit_ = 1;
  metrics::LogLinearHistogram histogram_;
};

// The metrics a view loads: the distinct metrics of the requested columns.
struct MetricSet {
  std::vector<storage::MetricId> ids;  // database metric ids, in slot order
  std::vector<storage::ValueType> types;
  std::vector<std::string> names, units;
  std::vector<bool> exclusiveOnly;  // no inclusive values stored (region metrics per process)
  std::vector<double> periods;      // the histograms' unit per metric
  // Per metric: a per-thread value's worst-case sampling error (period - 1 for sampled metrics,
  // 0 for counted ones, NaN for real-valued ones and region metrics).
  std::vector<double> perThreadError;
  // Which threads the accumulators cover: all (the summaries family) or the union of some
  // thread classes (their parts in the distributions family, combined).
  bool byClass = false;
  bool classes[storage::kThreadClassCount + 1] = {};  // by ThreadClass value
  // Histograms were asked for (percentile statistics) and the database has them.
  bool histograms = false;
  Acc empty(std::size_t metricIndex) const {
    return Acc::emptyInstance(types[metricIndex], histograms && types[metricIndex] == storage::ValueType::Count,
                              periods.empty() ? 1 : periods[metricIndex]);
  }
  Acc combined(std::size_t metricIndex) const {
    return Acc::combined(types[metricIndex], histograms && types[metricIndex] == storage::ValueType::Count,
                         periods.empty() ? 1 : periods[metricIndex]);
  }
  // The scope that shares (threshold, hot path, percentages) are measured on.
  storage::MetricScope shareScope(std::size_t metricIndex) const {
    return metricIndex < exclusiveOnly.size() && exclusiveOnly[metricIndex] ? storage::MetricScope::Exclusive
                                                                            : storage::MetricScope::Inclusive;
  }
  // slot of (metric index, scope) in a node's accumulator vector
  static std::size_t slot(std::size_t metricIndex, storage::MetricScope scope) {
    return metricIndex * 2 + static_cast<std::size_t>(scope);
  }
  std::size_t slots() const { return ids.size() * 2; }
};

struct ModelNode {
  NodeKind kind = NodeKind::Root;
  std::string name, file, module;
  std::uint32_t line = 0;
  std::optional<std::uint32_t> cctNode;
  std::uint64_t viewId = 0;
  std::vector<Acc> acc;  // MetricSet::slot order
};

class ViewModel {
 public:
  virtual ~ViewModel() = default;
  virtual std::uint32_t root() = 0;
  // Children of a node; built on first request by lazy models. Handles stay valid.
  virtual std::vector<std::uint32_t> children(std::uint32_t node) = 0;
  virtual const ModelNode& node(std::uint32_t handle) const = 0;
  // Cheap test used at the depth limit, where children are not built.
  virtual bool hasChildren(std::uint32_t node) = 0;
  // The node with this view id (TreeNode::viewId), for --focus ID.
  virtual std::optional<std::uint32_t> byId(std::uint64_t viewId) = 0;
  // The same for a node this model has shown (a session's children()): lazy models whose ids
  // depend on what was expanded before (Callers chains) know those they built.
  virtual std::optional<std::uint32_t> built(std::uint64_t viewId) { return byId(viewId); }
  // Nodes whose name (or label) matches, for --focus by name: outermost matches only. `exact`:
  // the label equals the pattern (tried first, so that "main" does not pick the file main.c).
  virtual std::vector<std::uint32_t> find(const std::string& pattern, bool exact) = 0;
  // Whether a node or anything below it matches (for --keep). Lazy models may answer for the
  // node alone.
  virtual bool subtreeMatches(std::uint32_t node, const std::string& pattern) = 0;
  // Flat/Callers: the procedure nodes, for --top.
  virtual std::vector<std::uint32_t> procedures() { return {}; }
  // The CCT nodes combined into a node, with whether their inclusive values count (--node with
  // a Flat or Callers id).
  virtual std::vector<std::pair<storage::NodeId, bool>> contributors(std::uint32_t handle) {
    const auto& n = node(handle);
    if (!n.cctNode) return {};
    return {{*n.cctNode, true}};
  }
};

// The whole canonical CCT structure, read with one scan of the node family.
struct CctIndex {
  std::vector<storage::CctNode> nodes;
  std::vector<std::uint32_t> childBegin;  // CSR: children of n are child[childBegin[n] .. childBegin[n+1])
  std::vector<storage::NodeId> child;
  std::vector<std::uint32_t> procedure;  // ProcFrame: dense procedure id; others kNoIndex
  std::vector<storage::NodeId> frame;    // enclosing ProcFrame (itself for a ProcFrame); kNoIndex above any
  std::vector<storage::NodeId> procOf;   // procedure id -> one CCT node of it (for labels)

  static CctIndex read(const storage::Database& db);
  std::size_t size() const { return nodes.size(); }
};

bool nameMatches(const std::string& name, const std::string& pattern);
inline bool labelMatches(const std::string& label, const std::string& pattern, bool exact) {
  return exact ? label == pattern : nameMatches(label, pattern);
}
// Label used for matching and folded stacks: procedure name, or "kind file:line".
std::string matchLabel(const ModelNode& node);
std::string fileLine(const std::string& file, std::uint32_t line);

MetricSet resolveMetrics(const storage::Database& db, std::vector<Column>& columns);

std::unique_ptr<ViewModel> makeCallingContext(const storage::Database& db, const MetricSet& metrics);
// Distinct procedures: (module, name, file, line) of a ProcFrame, as the views identify them.
std::unique_ptr<ViewModel> makeFlat(const storage::Database& db, const MetricSet& metrics);
std::unique_ptr<ViewModel> makeCallers(const storage::Database& db, const MetricSet& metrics);
std::unique_ptr<ViewModel> makeRegions(const storage::Database& db, const MetricSet& metrics);

// What buildView resolves before a model is built: the columns as shown, the metrics to load and
// the request as the selection applies it.
struct PreparedView {
  ViewTree tree;  // kind, columns, units, threads and profiles; the selection adds the nodes
  ViewRequest request;
  MetricSet metrics;
};
PreparedView prepareView(const storage::Database& db, const ViewRequest& request);
std::unique_ptr<ViewModel> makeModel(const storage::Database& db, ViewKind kind, const MetricSet& metrics);
// Selects from `model` into prepared.tree: the view's top (root, focus or top procedures), or
// with `start` that node and what the request's depth shows below it.
void selectView(ViewModel& model, PreparedView& prepared, std::optional<std::uint32_t> start = std::nullopt);

// Region summaries have their own metric table (reduce/src/prof.cpp): visits (E), time ns (E, I).
MetricSet regionMetrics(const storage::Database& db, std::vector<Column>& columns);

}  // namespace csp::views::detail
