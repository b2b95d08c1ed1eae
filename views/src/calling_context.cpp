// The Calling Context view: the canonical CCT as stored, read lazily node by node so that a
// pruned view of a million-node CCT touches only what it shows (and those nodes' children).
#include <fmt/format.h>

#include <map>
#include <unordered_map>

#include "csp/metrics/encoding.hpp"
#include "sources.hpp"

namespace csp::views::detail {

NodeKind kindOf(ScopeKind kind) {
  switch (kind) {
    case ScopeKind::Root:
      return NodeKind::Root;
    case ScopeKind::ProcFrame:
      return NodeKind::Procedure;
    case ScopeKind::Alien:
      return NodeKind::Inlined;
    case ScopeKind::Loop:
      return NodeKind::Loop;
    case ScopeKind::CallSite:
      return NodeKind::CallSite;
    case ScopeKind::Stmt:
      return NodeKind::Statement;
  }
  return NodeKind::Statement;
}

ModelNode labelOf(const storage::Database& db, storage::NodeId id, const storage::CctNode& n) {
  const auto& s = db.metadata().strings;
  ModelNode m;
  m.kind = kindOf(n.kind);
  m.name = s.at(n.name);
  m.file = s.at(n.file);
  m.module = s.at(n.module);
  m.line = n.line;
  m.cctNode = id;
  m.viewId = id;
  return m;
}

std::vector<Acc> nodeAccumulators(const storage::Database& db, const MetricSet& metrics, storage::NodeId id) {
  std::vector<Acc> acc;
  for (std::size_t m = 0; m < metrics.ids.size(); ++m)
    for (int s = 0; s < 2; ++s) acc.push_back(metrics.empty(m));
  auto damaged = [&](const metrics::DecodeError& e) {
    throw storage::DatabaseError(db.directory(), fmt::format("damaged database: summary of node {}: {}", id, e.what()));
  };
  if (!metrics.byClass) {
    for (const auto& a : db.summaries(id)) {
      for (std::size_t m = 0; m < metrics.ids.size(); ++m) {
        if (metrics.ids[m] != a.metric) continue;
        try {
          acc[MetricSet::slot(m, a.scope)] = Acc::decode(metrics.types[m], a.bytes);
          if (metrics.histograms && metrics.types[m] == storage::ValueType::Count)
            acc[MetricSet::slot(m, a.scope)].setHistogram({}, metrics.periods[m]);
        } catch (const metrics::DecodeError& e) {
          damaged(e);
        }
      }
    }
    if (!metrics.histograms) return acc;
  }
  // Thread classes' parts (combined), and the histograms.
  std::vector<char> seen(acc.size(), 0);
  for (const auto& d : db.distributions(id)) {
    const bool wanted = metrics.byClass ? d.population != storage::kAllThreads && metrics.classes[d.population]
                                        : d.population == storage::kAllThreads;
    if (!wanted) continue;
    for (std::size_t m = 0; m < metrics.ids.size(); ++m) {
      if (metrics.ids[m] != d.metric) continue;
      const auto slot = MetricSet::slot(m, d.scope);
      try {
        if (!metrics.byClass) {
          acc[slot].setHistogram(d.histogram, metrics.periods[m]);
          continue;
        }
        Acc part = Acc::decode(metrics.types[m], d.accumulator);
        if (metrics.histograms && metrics.types[m] == storage::ValueType::Count)
          part.setHistogram(d.histogram, metrics.periods[m]);
        if (seen[slot])
          acc[slot].merge(part);
        else
          acc[slot] = std::move(part);
        seen[slot] = 1;
      } catch (const metrics::DecodeError& e) {
        damaged(e);
      }
    }
  }
  return acc;
}

SummaryScan::SummaryScan(const storage::Database& db, const MetricSet& metrics) : db_(db), metrics_(metrics) {
  done_ = std::async(std::launch::async, [this] { run(); });
}

SummaryScan::~SummaryScan() {
  if (done_.valid()) done_.wait();
}

void SummaryScan::run() {
  std::vector<int> index;  // metric id -> index in the set
  for (std::size_t m = 0; m < metrics_.ids.size(); ++m) {
    if (index.size() <= metrics_.ids[m]) index.resize(metrics_.ids[m] + 1u, -1);
    index[metrics_.ids[m]] = static_cast<int>(m);
  }
  auto slotOf = [&](storage::MetricId metric, storage::MetricScope scope) -> std::optional<std::uint32_t> {
    if (metric >= index.size() || index[metric] < 0) return std::nullopt;
    return static_cast<std::uint32_t>(MetricSet::slot(static_cast<std::size_t>(index[metric]), scope));
  };
  auto keep = [&](std::string_view bytes) {
    const std::uint64_t at = bytes_.size();
    bytes_.append(bytes);
    return at;
  };
  // All threads: the summaries, and for percentiles the all-threads histograms beside them;
  // thread classes: the selected classes' entries of the distributions family.
  if (!metrics_.byClass) {
    db_.forEachSummary(
        [&](storage::NodeId node, storage::MetricId metric, storage::MetricScope scope, std::string_view acc) {
          if (const auto slot = slotOf(metric, scope))
            entries_.push_back({node, *slot, keep(acc), static_cast<std::uint32_t>(acc.size()), 0, 0, false});
        });
  }
  if (!metrics_.byClass && !metrics_.histograms) return;
  db_.forEachDistribution([&](storage::NodeId node, storage::MetricId metric, storage::MetricScope scope,
                              std::uint8_t population, std::string_view acc, std::string_view histogram) {
    const auto slot = slotOf(metric, scope);
    if (!slot) return;
    if (!metrics_.byClass) {
      if (population == storage::kAllThreads)
        histograms_.push_back({node, *slot, 0, 0, keep(histogram), static_cast<std::uint32_t>(histogram.size()), true});
      return;
    }
    if (population == storage::kAllThreads || !metrics_.classes[population]) return;
    const auto accAt = keep(acc);
    entries_.push_back({node, *slot, accAt, static_cast<std::uint32_t>(acc.size()), keep(histogram),
                        static_cast<std::uint32_t>(histogram.size()), true});
  });
}

void SummaryScan::forEach(const std::vector<char>& wanted,
                          const std::function<void(storage::NodeId, std::size_t, const Acc&)>& fn) {
  done_.get();
  const std::size_t slots = metrics_.slots();
  std::vector<char> seen(wanted.size() * slots, 0);
  auto damaged = [&](storage::NodeId node, const metrics::DecodeError& err) {
    throw storage::DatabaseError(db_.directory(),
                                 fmt::format("damaged database: summary of node {}: {}", node, err.what()));
  };
  auto view = [&](std::uint64_t at, std::uint32_t size) { return std::string_view(bytes_.data() + at, size); };
  // Histograms of the all-threads population, by (node, slot), in key order like entries_.
  std::size_t h = 0;
  auto histogramOf = [&](const Entry& e) -> std::string_view {
    while (h < histograms_.size() &&
           std::make_pair(histograms_[h].node, histograms_[h].slot) < std::make_pair(e.node, e.slot))
      ++h;
    if (h < histograms_.size() && histograms_[h].node == e.node && histograms_[h].slot == e.slot)
      return view(histograms_[h].histOffset, histograms_[h].histSize);
    return {};
  };
  for (std::size_t i = 0; i < entries_.size();) {
    const Entry& first = entries_[i];
    std::size_t j = i + 1;  // the parts of one (node, slot): one per selected class
    while (j < entries_.size() && entries_[j].node == first.node && entries_[j].slot == first.slot) ++j;
    if (first.node >= wanted.size() || !wanted[first.node]) {
      i = j;
      continue;
    }
    const std::size_t m = first.slot / 2;
    const bool withHistogram = metrics_.histograms && metrics_.types[m] == storage::ValueType::Count;
    Acc acc;
    try {
      for (std::size_t k = i; k < j; ++k) {
        const Entry& e = entries_[k];
        Acc part = Acc::decode(metrics_.types[m], view(e.accOffset, e.accSize));
        if (withHistogram)
          part.setHistogram(e.hasHist ? view(e.histOffset, e.histSize) : histogramOf(e), metrics_.periods[m]);
        if (k == i)
          acc = std::move(part);
        else
          acc.merge(part);
      }
    } catch (const metrics::DecodeError& err) {
      damaged(first.node, err);
    }
    seen[std::size_t{first.node} * slots + first.slot] = 1;
    fn(first.node, first.slot, acc);
    i = j;
  }
  entries_ = {};
  histograms_ = {};
  bytes_ = {};
  std::vector<Acc> empty;
  for (std::size_t m = 0; m < metrics_.ids.size(); ++m)
    for (int s = 0; s < 2; ++s) empty.push_back(metrics_.empty(m));
  for (std::size_t n = 0; n < wanted.size(); ++n) {
    if (!wanted[n]) continue;
    for (std::size_t s = 0; s < slots; ++s)
      if (!seen[n * slots + s]) fn(static_cast<storage::NodeId>(n), s, empty[s]);
  }
}

namespace {

class CallingContextModel final : public ViewModel {
 public:
  CallingContextModel(const storage::Database& db, const MetricSet& metrics) : db_(db), metrics_(metrics) {}

  std::uint32_t root() override { return load(0); }

  std::vector<std::uint32_t> children(std::uint32_t h) override {
    const storage::NodeId id = *nodes_[h].cctNode;
    std::vector<std::uint32_t> out;
    if (index_) {
      for (auto c = index_->childBegin[id]; c < index_->childBegin[id + 1]; ++c) out.push_back(load(index_->child[c]));
    } else {
      for (auto c : db_.children(id)) out.push_back(load(c));
    }
    return out;
  }

  const ModelNode& node(std::uint32_t h) const override { return nodes_[h]; }

  bool hasChildren(std::uint32_t h) override {
    const storage::NodeId id = *nodes_[h].cctNode;
    if (index_) return index_->childBegin[id + 1] > index_->childBegin[id];
    return !db_.children(id).empty();
  }

  std::optional<std::uint32_t> byId(std::uint64_t id) override {
    if (id >= db_.metadata().nodeCount) return std::nullopt;
    return load(static_cast<storage::NodeId>(id));
  }

  std::vector<std::uint32_t> find(const std::string& pattern, bool exact) override {
    const auto& idx = index();
    std::vector<std::uint32_t> out;
    // Outermost matches: a preorder walk that does not descend below a match.
    std::vector<storage::NodeId> stack{0};
    while (!stack.empty()) {
      const auto id = stack.back();
      stack.pop_back();
      if (id != 0 && labelMatches(matchLabel(labelOf(db_, id, idx.nodes[id])), pattern, exact)) {
        out.push_back(load(id));
        continue;
      }
      for (auto c = idx.childBegin[id + 1]; c > idx.childBegin[id]; --c) stack.push_back(idx.child[c - 1]);
    }
    return out;
  }

  bool subtreeMatches(std::uint32_t h, const std::string& pattern) override {
    auto& memo = matches_[pattern];
    if (memo.empty()) {
      const auto& idx = index();
      memo.assign(idx.size(), 0);
      const auto& s = db_.metadata().strings;
      // Children have larger preorder positions; walk a preorder list backwards to fold upwards.
      std::vector<storage::NodeId> order;
      order.reserve(idx.size());
      std::vector<storage::NodeId> stack{0};
      while (!stack.empty()) {
        const auto id = stack.back();
        stack.pop_back();
        order.push_back(id);
        for (auto c = idx.childBegin[id]; c < idx.childBegin[id + 1]; ++c) stack.push_back(idx.child[c]);
      }
      for (auto it = order.rbegin(); it != order.rend(); ++it) {
        const auto& n = idx.nodes[*it];
        // The same labels as the selection matches a node itself against.
        const bool named = n.kind == ScopeKind::ProcFrame || n.kind == ScopeKind::Alien;
        if (*it != 0 && nameMatches(named ? s[n.name] : matchLabel(labelOf(db_, *it, n)), pattern)) memo[*it] = 1;
        if (memo[*it] && *it != 0) memo[n.parent] = 1;
      }
    }
    return memo[*nodes_[h].cctNode] != 0;
  }

 private:
  const CctIndex& index() {
    if (!index_) index_ = CctIndex::read(db_);
    return *index_;
  }

  std::uint32_t load(storage::NodeId id) {
    auto [it, fresh] = handles_.try_emplace(id, static_cast<std::uint32_t>(nodes_.size()));
    if (!fresh) return it->second;
    storage::CctNode n;
    if (index_) {
      n = index_->nodes[id];
    } else {
      auto stored = db_.node(id);
      if (!stored)
        throw storage::DatabaseError(db_.directory(), fmt::format("damaged database: CCT node {} is missing", id));
      n = *stored;
    }
    ModelNode m = labelOf(db_, id, n);
    m.acc = nodeAccumulators(db_, metrics_, id);
    nodes_.push_back(std::move(m));
    return it->second;
  }

  const storage::Database& db_;
  MetricSet metrics_;
  std::optional<CctIndex> index_;
  std::vector<ModelNode> nodes_;
  std::unordered_map<storage::NodeId, std::uint32_t> handles_;
  std::map<std::string, std::vector<char>> matches_;
};

}  // namespace

std::unique_ptr<ViewModel> makeCallingContext(const storage::Database& db, const MetricSet& metrics) {
  return std::make_unique<CallingContextModel>(db, metrics);
}

}  // namespace csp::views::detail
