// The Callers view (thesis Alg. 7.3, docs/views.md, exact rules), built lazily: a forest with one
// root per procedure, below it the chains of its callers, each level built only when shown.
//
// A Callers node stands for a chain ck -> ... -> c1 -> x (a caller is a procedure plus the call
// site in it) and remembers the CCT frames of x that reach it together with how far up their
// paths the chain already goes. Expanding it groups those frames by their next caller. Every
// frame's exclusive accumulator is combined into every chain node it reaches; its inclusive
// accumulator only where the chain does not occur again higher up the frame's own path, so that
// recursion counts each sample once.
#include <map>
#include <tuple>

#include "sources.hpp"

namespace csp::views::detail {

namespace {

class CallersModel final : public ViewModel {
 public:
  CallersModel(const storage::Database& db, const MetricSet& metrics)
      : db_(db), metrics_(metrics), summaries_(std::make_unique<SummaryScan>(db, metrics)), idx_(CctIndex::read(db)) {
    loadFrames();
    summaries_.reset();
    buildRoots();
  }

  std::uint32_t root() override { return 0; }

  std::vector<std::uint32_t> children(std::uint32_t h) override {
    if (!nodes_[h].expanded) expand(h);
    return nodes_[h].children;
  }

  const ModelNode& node(std::uint32_t h) const override { return nodes_[h].model; }

  bool hasChildren(std::uint32_t h) override {
    if (nodes_[h].expanded) return !nodes_[h].children.empty();
    for (const auto& inst : nodes_[h].instances)
      if (callerOf(inst.cursor) != kNoIndex) return true;
    return false;
  }

  // Procedures are numbered before anything else, so their ids are the same in every run; the
  // ids of caller chains depend on what was expanded before and cannot be looked up afresh.
  std::optional<std::uint32_t> byId(std::uint64_t id) override {
    if (id == 0 || id >= nodes_.size() || nodes_[id].chainLength != 0) return std::nullopt;
    return static_cast<std::uint32_t>(id);
  }

  // Within one model a chain's id is its handle.
  std::optional<std::uint32_t> built(std::uint64_t id) override {
    if (id >= nodes_.size()) return std::nullopt;
    return static_cast<std::uint32_t>(id);
  }

  std::vector<std::uint32_t> procedures() override { return nodes_[0].children; }

  std::vector<std::pair<storage::NodeId, bool>> contributors(std::uint32_t h) override {
    std::vector<std::pair<storage::NodeId, bool>> out;
    for (const auto& inst : nodes_[h].instances)
      out.emplace_back(inst.frame, !recurs(inst.frame, nodes_[h].chainLength));
    return out;
  }

  std::vector<std::uint32_t> find(const std::string& pattern, bool exact) override {
    std::vector<std::uint32_t> out;
    for (auto h : nodes_[0].children)
      if (labelMatches(nodes_[h].model.name, pattern, exact)) out.push_back(h);
    return out;
  }

  // Whether a procedure or any caller chain above it matches would need the chains built; a
  // procedure root matches when it or any frame on the paths to it has a matching name.
  bool subtreeMatches(std::uint32_t h, const std::string& pattern) override {
    const auto& strings = db_.metadata().strings;
    if (nameMatches(nodes_[h].model.name, pattern)) return true;
    for (const auto& inst : nodes_[h].instances)
      for (auto f = callerOf(inst.cursor); f != kNoIndex; f = callerOf(f))
        if (nameMatches(strings[idx_.nodes[f].name], pattern)) return true;
    return false;
  }

 private:
  struct Instance {
    storage::NodeId frame;   // x, the CCT frame whose values this is
    storage::NodeId cursor;  // the frame of the chain's last caller (x at a root)
  };
  struct CallersNode {
    ModelNode model;
    std::vector<Instance> instances;
    std::vector<std::uint32_t> children;
    unsigned chainLength = 0;  // callers in the chain
    bool expanded = false;
  };

  // The frame that called `frame` (through the call site that is its parent), or kNoIndex.
  storage::NodeId callerOf(storage::NodeId frame) const {
    const auto p = idx_.nodes[frame].parent;
    if (p == kNoIndex || idx_.nodes[p].kind != ScopeKind::CallSite) return kNoIndex;
    return idx_.frame[p];
  }

  const Acc& acc(storage::NodeId frame, std::size_t slot) const {
    return frameAcc_[frameSlot_[frame] * metrics_.slots() + slot];
  }

  void loadFrames() {
    const std::size_t n = idx_.size();
    std::vector<char> wanted(n, 0);
    frameSlot_.assign(n, kNoIndex);
    std::uint32_t frames = 0;
    for (std::size_t i = 0; i < n; ++i)
      if (idx_.nodes[i].kind == ScopeKind::ProcFrame || i == 0) {
        wanted[i] = 1;
        frameSlot_[i] = frames++;
      }
    frameAcc_.resize(std::size_t{frames} * metrics_.slots());
    summaries_->forEach(wanted, [&](storage::NodeId id, std::size_t slot, const Acc& a) {
      frameAcc_[std::size_t{frameSlot_[id]} * metrics_.slots() + slot] = a;
    });
  }

  std::uint32_t make(ModelNode model, unsigned chainLength) {
    const auto h = static_cast<std::uint32_t>(nodes_.size());
    model.viewId = h;
    model.cctNode.reset();
    for (std::size_t m = 0; m < metrics_.ids.size(); ++m)
      for (int s = 0; s < 2; ++s) model.acc.push_back(metrics_.combined(m));
    CallersNode node;
    node.model = std::move(model);
    node.chainLength = chainLength;
    nodes_.push_back(std::move(node));
    return h;
  }

  // Adds one frame's accumulators to a chain node of `length` callers.
  void attribute(std::uint32_t h, storage::NodeId frame, unsigned length) {
    const bool inclusive = !recurs(frame, length);
    for (std::size_t s = 0; s < metrics_.slots(); ++s)
      if (s % 2 == 0 || inclusive) nodes_[h].model.acc[s].add(acc(frame, s));
  }

  // Whether the chain of `length` callers ending in `frame` occurs again higher up its path
  // (thesis Alg. 7.3, is-outermost-instance).
  bool recurs(storage::NodeId frame, unsigned length) const {
    if (length == 0) {  // the procedure alone: any frame of it further up
      for (auto f = callerOf(frame); f != kNoIndex; f = callerOf(f))
        if (idx_.procedure[f] == idx_.procedure[frame]) return true;
      return false;
    }
    // path[i]: i-th frame up from `frame` (path[0] = frame); site[i]: the call site from
    // path[i] into path[i-1].
    std::vector<storage::NodeId> path{frame};
    std::vector<storage::NodeId> site{kNoIndex};
    for (auto f = frame;;) {
      const auto caller = callerOf(f);
      if (caller == kNoIndex) break;
      site.push_back(idx_.nodes[f].parent);
      path.push_back(caller);
      f = caller;
    }
    auto sameSite = [&](storage::NodeId a, storage::NodeId b) {
      return idx_.nodes[a].file == idx_.nodes[b].file && idx_.nodes[a].line == idx_.nodes[b].line;
    };
    for (std::size_t j = 1; j + length < path.size(); ++j) {
      if (idx_.procedure[path[j]] != idx_.procedure[path[0]]) continue;
      bool same = true;
      for (std::size_t i = 1; i <= length && same; ++i)
        same = idx_.procedure[path[i + j]] == idx_.procedure[path[i]] && sameSite(site[i + j], site[i]);
      if (same) return true;
    }
    return false;
  }

  void buildRoots() {
    ModelNode top;
    top.kind = NodeKind::Root;
    make(std::move(top), 0);
    for (std::size_t s = 0; s < metrics_.slots(); ++s) nodes_[0].model.acc[s].add(acc(0, s));
    nodes_[0].expanded = true;
    std::vector<std::uint32_t> rootOf(idx_.procOf.size(), kNoIndex);
    for (std::size_t i = 0; i < idx_.size(); ++i) {
      if (idx_.nodes[i].kind != ScopeKind::ProcFrame) continue;
      const auto id = static_cast<storage::NodeId>(i);
      auto& r = rootOf[idx_.procedure[id]];
      if (r == kNoIndex) {
        r = make(labelOf(db_, id, idx_.nodes[id]), 0);
        nodes_[0].children.push_back(r);
      }
      nodes_[r].instances.push_back({id, id});
      attribute(r, id, 0);
    }
  }

  void expand(std::uint32_t h) {
    const auto& strings = db_.metadata().strings;
    std::map<std::tuple<std::uint32_t, StringId, std::uint32_t>, std::uint32_t> byCaller;
    const unsigned length = nodes_[h].chainLength + 1;
    const auto instances = nodes_[h].instances;  // nodes_ may grow below
    std::vector<std::uint32_t> kids;
    for (const auto& inst : instances) {
      const auto caller = callerOf(inst.cursor);
      if (caller == kNoIndex) continue;
      const auto& site = idx_.nodes[idx_.nodes[inst.cursor].parent];
      auto [it, fresh] = byCaller.try_emplace({idx_.procedure[caller], site.file, site.line}, 0);
      if (fresh) {
        ModelNode m = labelOf(db_, caller, idx_.nodes[caller]);
        m.file = strings[site.file];
        m.line = site.line;
        it->second = make(std::move(m), length);
        kids.push_back(it->second);
      }
      nodes_[it->second].instances.push_back({inst.frame, caller});
      attribute(it->second, inst.frame, length);
    }
    nodes_[h].children = std::move(kids);
    nodes_[h].expanded = true;
  }

  const storage::Database& db_;
  MetricSet metrics_;
  std::unique_ptr<SummaryScan> summaries_;  // declared before idx_: starts before the CCT is read
  CctIndex idx_;
  std::vector<std::uint32_t> frameSlot_;
  std::vector<Acc> frameAcc_;
  std::vector<CallersNode> nodes_;
};

}  // namespace

std::unique_ptr<ViewModel> makeCallers(const storage::Database& db, const MetricSet& metrics) {
  return std::make_unique<CallersModel>(db, metrics);
}

}  // namespace csp::views::detail
