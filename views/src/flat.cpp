// The Flat view (thesis Alg. 7.2, DESIGN.md 7 "Exact rules"): module -> file -> procedure ->
// loops/inlined code -> call sites and statements, every calling context merged.
//
// Each CCT node maps to one Flat node and contributes once: its exclusive accumulator always,
// its inclusive one only when the procedure frame enclosing it is the outermost instance of that
// procedure on its path (a statement always). Module and file nodes follow the same rule with
// "outermost frame of any procedure of this module (file)": their sums are then exact too,
// which summing their procedures' inclusive values would not be (a caller and its callee in one
// file would count the callee twice).
#include <map>
#include <tuple>
#include <unordered_map>

#include "sources.hpp"

namespace csp::views::detail {

namespace {

class FlatModel final : public ViewModel {
 public:
  FlatModel(const storage::Database& db, const MetricSet& metrics) : metrics_(metrics) { build(db); }

  std::uint32_t root() override { return 0; }
  std::vector<std::uint32_t> children(std::uint32_t h) override { return children_[h]; }
  const ModelNode& node(std::uint32_t h) const override { return nodes_[h]; }
  bool hasChildren(std::uint32_t h) override { return !children_[h].empty(); }
  std::optional<std::uint32_t> byId(std::uint64_t id) override {
    if (id >= nodes_.size()) return std::nullopt;
    return static_cast<std::uint32_t>(id);
  }
  std::vector<std::uint32_t> procedures() override { return procedures_; }

  std::vector<std::uint32_t> find(const std::string& pattern) override {
    std::vector<std::uint32_t> out;
    std::vector<std::uint32_t> stack{0};
    while (!stack.empty()) {
      const auto h = stack.back();
      stack.pop_back();
      if (h != 0 && nameMatches(matchLabel(nodes_[h]), pattern)) {
        out.push_back(h);
        continue;
      }
      for (auto it = children_[h].rbegin(); it != children_[h].rend(); ++it) stack.push_back(*it);
    }
    return out;
  }

  bool subtreeMatches(std::uint32_t h, const std::string& pattern) override {
    auto& memo = matches_[pattern];
    if (memo.empty()) {
      memo.assign(nodes_.size(), 0);
      // Flat nodes are created parents first, so a backwards pass folds matches upwards.
      for (std::size_t i = nodes_.size(); i-- > 0;) {
        if (nameMatches(matchLabel(nodes_[i]), pattern)) memo[i] = 1;
        if (memo[i] && i != 0) memo[parent_[i]] = 1;
      }
    }
    return memo[h] != 0;
  }

 private:
  std::uint32_t make(std::uint32_t parent, ModelNode node) {
    const auto h = static_cast<std::uint32_t>(nodes_.size());
    node.viewId = h;
    for (std::size_t m = 0; m < metrics_.ids.size(); ++m)
      for (int s = 0; s < 2; ++s) node.acc.push_back(Acc::combined(metrics_.types[m]));
    nodes_.push_back(std::move(node));
    children_.emplace_back();
    parent_.push_back(parent);
    if (parent != kNoIndex) children_[parent].push_back(h);
    return h;
  }

  void build(const storage::Database& db) {
    const CctIndex idx = CctIndex::read(db);
    const auto& strings = db.metadata().strings;
    ModelNode rootNode;
    rootNode.kind = NodeKind::Root;
    make(kNoIndex, std::move(rootNode));

    const std::size_t n = idx.size();
    // Per CCT node: its Flat node, and for frames their module and file nodes.
    std::vector<std::uint32_t> flat(n, 0), moduleOf(n, kNoIndex), fileOf(n, kNoIndex);
    enum : std::uint8_t { kIncl = 1, kInclModule = 2, kInclFile = 4 };
    std::vector<std::uint8_t> flags(n, 0);
    std::vector<char> outermostFrame(n, 0);

    std::unordered_map<StringId, std::uint32_t> modules;
    std::map<std::pair<StringId, StringId>, std::uint32_t> files;
    std::vector<std::uint32_t> procNode(idx.procOf.size(), kNoIndex);
    std::map<std::tuple<std::uint32_t, NodeKind, StringId, StringId, std::uint32_t>, std::uint32_t> scopes;

    // Instances of a procedure (module, file) on the current path.
    std::vector<std::uint32_t> procDepth(idx.procOf.size(), 0);
    std::unordered_map<StringId, std::uint32_t> moduleDepth;
    std::map<std::pair<StringId, StringId>, std::uint32_t> fileDepth;

    struct Step {
      storage::NodeId id;
      bool exit;
    };
    std::vector<Step> stack{{0, false}};
    flags[0] = kIncl;
    while (!stack.empty()) {
      const Step step = stack.back();
      stack.pop_back();
      const auto id = step.id;
      const auto& c = idx.nodes[id];
      if (step.exit) {
        --procDepth[idx.procedure[id]];
        --moduleDepth[c.module];
        --fileDepth[{c.module, c.file}];
        continue;
      }
      if (id != 0) {
        if (c.kind == ScopeKind::ProcFrame) {
          auto [mit, mfresh] = modules.try_emplace(c.module, 0);
          if (mfresh) {
            ModelNode m;
            m.kind = NodeKind::Module;
            m.name = m.module = strings[c.module];
            mit->second = make(0, std::move(m));
          }
          auto [fit, ffresh] = files.try_emplace({c.module, c.file}, 0);
          if (ffresh) {
            ModelNode f;
            f.kind = NodeKind::File;
            f.name = f.file = strings[c.file];
            f.module = strings[c.module];
            fit->second = make(mit->second, std::move(f));
          }
          auto& pn = procNode[idx.procedure[id]];
          if (pn == kNoIndex) {
            ModelNode p = labelOf(db, id, c);
            p.cctNode.reset();
            pn = make(fit->second, std::move(p));
            procedures_.push_back(pn);
          }
          flat[id] = pn;
          moduleOf[id] = mit->second;
          fileOf[id] = fit->second;
          const bool outermost = procDepth[idx.procedure[id]]++ == 0;
          outermostFrame[id] = outermost;
          std::uint8_t f = outermost ? kIncl : 0;
          if (moduleDepth[c.module]++ == 0) f |= kInclModule;
          if (fileDepth[{c.module, c.file}]++ == 0) f |= kInclFile;
          flags[id] = f;
          stack.push_back({id, true});
        } else {
          const std::uint32_t parentFlat = flat[c.parent];
          const auto key = std::tuple{parentFlat, kindOf(c.kind), c.name, c.file, c.line};
          auto [sit, fresh] = scopes.try_emplace(key, 0);
          if (fresh) {
            ModelNode s = labelOf(db, id, c);
            s.cctNode.reset();
            sit->second = make(parentFlat, std::move(s));
          }
          flat[id] = sit->second;
          const auto frame = idx.frame[id];
          const bool incl = c.kind == ScopeKind::Stmt || frame == kNoIndex || outermostFrame[frame];
          flags[id] = incl ? kIncl : 0;
        }
      }
      for (auto k = idx.childBegin[id + 1]; k > idx.childBegin[id]; --k) stack.push_back({idx.child[k - 1], false});
    }

    std::vector<char> wanted(n, 1);
    scanSummaries(db, metrics_, wanted, [&](storage::NodeId id, std::size_t slot, const Acc& acc) {
      const bool inclusive = slot % 2 == 1;
      const auto f = flags[id];
      if (!inclusive || (f & kIncl)) nodes_[flat[id]].acc[slot].add(acc);
      if (moduleOf[id] == kNoIndex) return;
      if (!inclusive || (f & kInclModule)) nodes_[moduleOf[id]].acc[slot].add(acc);
      if (!inclusive || (f & kInclFile)) nodes_[fileOf[id]].acc[slot].add(acc);
    });
  }

  MetricSet metrics_;
  std::vector<ModelNode> nodes_;
  std::vector<std::vector<std::uint32_t>> children_;
  std::vector<std::uint32_t> parent_;
  std::vector<std::uint32_t> procedures_;
  std::map<std::string, std::vector<char>> matches_;
};

}  // namespace

std::unique_ptr<ViewModel> makeFlat(const storage::Database& db, const MetricSet& metrics) {
  return std::make_unique<FlatModel>(db, metrics);
}

}  // namespace csp::views::detail
