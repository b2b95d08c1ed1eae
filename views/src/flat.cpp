// The Flat view (thesis Alg. 7.2, docs/views.md, exact rules): module -> file -> procedure ->
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

// Open-addressing map from (parent Flat node, kind, name, file, line) to a Flat node: a
// million-node CCT makes this the hot lookup, and node-based hash maps spend their time in
// cache misses and allocations.
class ScopeTable {
 public:
  struct Key {
    std::uint32_t parent;
    std::uint32_t kind;
    StringId name, file;
    std::uint32_t line;
    bool operator==(const Key&) const = default;
  };

  explicit ScopeTable(std::size_t expected) {
    std::size_t cap = 16;
    while (cap < 2 * expected) cap <<= 1;
    slots_.resize(cap);
    mask_ = cap - 1;
  }

  // The value for key, inserting make() if absent.
  template <typename Make>
  std::uint32_t findOrInsert(const Key& key, Make&& make) {
    if (2 * (size_ + 1) > slots_.size()) grow();
    for (std::size_t i = hash(key) & mask_;; i = (i + 1) & mask_) {
      auto& s = slots_[i];
      if (s.value == kNoIndex) {
        s.key = key;
        s.value = make();
        ++size_;
        return s.value;
      }
      if (s.key == key) return s.value;
    }
  }

 private:
  struct Slot {
    Key key{};
    std::uint32_t value = kNoIndex;
  };
  static std::size_t hash(const Key& k) {
    auto mix = [](std::uint64_t x) {  // splitmix64's finalizer
      x ^= x >> 30;
      x *= 0xBF58476D1CE4E5B9ull;
      x ^= x >> 27;
      x *= 0x94D049BB133111EBull;
      return x ^ (x >> 31);
    };
    return static_cast<std::size_t>(mix(mix(std::uint64_t{k.parent} << 32 | k.line) ^
                                        (std::uint64_t{k.name} << 32 | k.file) ^ std::uint64_t{k.kind} << 61));
  }
  void grow() {
    std::vector<Slot> old = std::move(slots_);
    slots_.assign(old.size() * 2, Slot{});
    mask_ = slots_.size() - 1;
    for (const auto& s : old) {
      if (s.value == kNoIndex) continue;
      for (std::size_t i = hash(s.key) & mask_;; i = (i + 1) & mask_)
        if (slots_[i].value == kNoIndex) {
          slots_[i] = s;
          break;
        }
    }
  }
  std::vector<Slot> slots_;
  std::size_t mask_ = 0, size_ = 0;
};

class FlatModel final : public ViewModel {
 public:
  FlatModel(const storage::Database& db, const MetricSet& metrics)
      : strings_(db.metadata().strings), metrics_(metrics) {
    build(db);
  }

  std::uint32_t root() override { return 0; }
  std::vector<std::uint32_t> children(std::uint32_t h) override {
    return {child_.begin() + childBegin_[h], child_.begin() + childBegin_[h + 1]};
  }
  bool hasChildren(std::uint32_t h) override { return childBegin_[h + 1] > childBegin_[h]; }
  std::optional<std::uint32_t> byId(std::uint64_t id) override {
    if (id >= nodes_.size()) return std::nullopt;
    return static_cast<std::uint32_t>(id);
  }
  std::vector<std::uint32_t> procedures() override { return procedures_; }

  std::vector<std::pair<storage::NodeId, bool>> contributors(std::uint32_t h) override {
    std::vector<std::pair<storage::NodeId, bool>> out;
    for (std::size_t id = 0; id < flat_.size(); ++id) {
      const auto f = flags_[id];
      if (flat_[id] == h)
        out.emplace_back(static_cast<storage::NodeId>(id), (f & kIncl) != 0);
      else if (moduleOf_[id] == h)
        out.emplace_back(static_cast<storage::NodeId>(id), (f & kInclModule) != 0);
      else if (fileOf_[id] == h)
        out.emplace_back(static_cast<storage::NodeId>(id), (f & kInclFile) != 0);
    }
    return out;
  }

  // Materialized on first use: a view shows a few hundred of the (up to) millions of nodes.
  const ModelNode& node(std::uint32_t h) const override {
    auto [it, fresh] = shown_.try_emplace(h);
    if (!fresh) return it->second;
    const Node& n = nodes_[h];
    ModelNode& m = it->second;
    m.kind = n.kind;
    m.name = nameOf(n);
    m.file = strings_[n.file];
    m.module = strings_[n.module];
    m.line = n.line;
    m.viewId = h;
    const std::size_t slots = metrics_.slots();
    m.acc.assign(acc_.begin() + static_cast<std::ptrdiff_t>(h * slots),
                 acc_.begin() + static_cast<std::ptrdiff_t>((h + 1) * slots));
    return m;
  }

  std::vector<std::uint32_t> find(const std::string& pattern, bool exact) override {
    std::vector<std::uint32_t> out;
    std::vector<std::uint32_t> stack{0};
    while (!stack.empty()) {
      const auto h = stack.back();
      stack.pop_back();
      if (h != 0 && labelMatches(label(h), pattern, exact)) {
        out.push_back(h);
        continue;
      }
      for (auto k = childBegin_[h + 1]; k > childBegin_[h]; --k) stack.push_back(child_[k - 1]);
    }
    return out;
  }

  bool subtreeMatches(std::uint32_t h, const std::string& pattern) override {
    auto& memo = matches_[pattern];
    if (memo.empty()) {
      memo.assign(nodes_.size(), 0);
      // Flat nodes are created parents first, so a backwards pass folds matches upwards.
      for (std::size_t i = nodes_.size(); i-- > 0;) {
        if (nameMatches(label(static_cast<std::uint32_t>(i)), pattern)) memo[i] = 1;
        if (memo[i] && i != 0) memo[nodes_[i].parent] = 1;
      }
    }
    return memo[h] != 0;
  }

 private:
  struct Node {
    std::uint32_t parent = kNoIndex;
    NodeKind kind = NodeKind::Root;
    StringId name = 0, file = 0, module = 0;
    std::uint32_t line = 0;
  };

  // A file row of code without a line table is named after its module.
  std::string nameOf(const Node& n) const {
    if (n.kind == NodeKind::File && strings_[n.name].empty()) return strings_[n.module] + " (no source file)";
    return strings_[n.name];
  }

  std::string label(std::uint32_t h) const {
    const Node& n = nodes_[h];
    ModelNode m;
    m.kind = n.kind;
    m.name = nameOf(n);
    m.file = strings_[n.file];
    m.line = n.line;
    return matchLabel(m);
  }

  std::uint32_t make(Node node) {
    const auto h = static_cast<std::uint32_t>(nodes_.size());
    nodes_.push_back(node);
    for (std::size_t m = 0; m < metrics_.ids.size(); ++m)
      for (int s = 0; s < 2; ++s) acc_.push_back(metrics_.combined(m));
    onPath_.push_back(0);
    return h;
  }

  void build(const storage::Database& db) {
    SummaryScan summaries(db, metrics_);
    const CctIndex idx = CctIndex::read(db);
    const std::size_t n = idx.size();
    // At most one Flat node per CCT node plus modules and files: reserving address space up front
    // avoids copying hundreds of MB while growing (pages are touched only when used).
    nodes_.reserve(n + 1);
    acc_.reserve((n + 1) * metrics_.slots());
    make({});

    // Per CCT node: its Flat node, and for frames their module and file nodes.
    auto& flat = flat_;
    auto& moduleOf = moduleOf_;
    auto& fileOf = fileOf_;
    auto& flags = flags_;
    flat.assign(n, 0);
    moduleOf.assign(n, kNoIndex);
    fileOf.assign(n, kNoIndex);
    flags.assign(n, 0);
    std::vector<char> outermostFrame(n, 0);

    std::vector<std::uint32_t> modules(strings_.size(), 0);  // module string -> Flat node (0: none yet)
    std::unordered_map<std::uint64_t, std::uint32_t> files;  // module << 32 | file -> Flat node
    std::vector<std::uint32_t> procNode(idx.procOf.size(), kNoIndex);
    ScopeTable scopes(n);
    // onPath_[flat node]: frames of that procedure (module, file) on the current path.

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
        --onPath_[flat[id]];
        --onPath_[moduleOf[id]];
        --onPath_[fileOf[id]];
        continue;
      }
      if (id != 0) {
        if (c.kind == ScopeKind::ProcFrame) {
          if (modules[c.module] == 0) modules[c.module] = make({0, NodeKind::Module, c.module, 0, c.module, 0});
          const std::uint32_t moduleNode = modules[c.module];
          auto [fit, ffresh] = files.try_emplace(std::uint64_t{c.module} << 32 | c.file, 0);
          if (ffresh) fit->second = make({moduleNode, NodeKind::File, c.file, c.file, c.module, 0});
          const std::uint32_t fileNode = fit->second;
          auto& pn = procNode[idx.procedure[id]];
          if (pn == kNoIndex) {
            pn = make({fileNode, NodeKind::Procedure, c.name, c.file, c.module, c.line});
            procedures_.push_back(pn);
          }
          flat[id] = pn;
          moduleOf[id] = moduleNode;
          fileOf[id] = fileNode;
          const bool outermost = onPath_[pn]++ == 0;
          outermostFrame[id] = outermost;
          std::uint8_t f = outermost ? kIncl : 0;
          if (onPath_[moduleNode]++ == 0) f |= kInclModule;
          if (onPath_[fileNode]++ == 0) f |= kInclFile;
          flags[id] = f;
          stack.push_back({id, true});
        } else {
          const std::uint32_t parentFlat = flat[c.parent];
          const NodeKind kind = kindOf(c.kind);
          flat[id] = scopes.findOrInsert({parentFlat, static_cast<std::uint32_t>(kind), c.name, c.file, c.line}, [&] {
            return make({parentFlat, kind, c.name, c.file, c.module, c.line});
          });
          const auto frame = idx.frame[id];
          const bool incl = c.kind == ScopeKind::Stmt || frame == kNoIndex || outermostFrame[frame];
          flags[id] = incl ? kIncl : 0;
        }
      }
      for (auto k = idx.childBegin[id + 1]; k > idx.childBegin[id]; --k) stack.push_back({idx.child[k - 1], false});
    }
    onPath_ = {};

    // Children in creation order (CSR).
    childBegin_.assign(nodes_.size() + 1, 0);
    for (std::size_t i = 1; i < nodes_.size(); ++i) childBegin_[nodes_[i].parent + 1]++;
    for (std::size_t i = 0; i < nodes_.size(); ++i) childBegin_[i + 1] += childBegin_[i];
    child_.resize(nodes_.size() - 1);
    std::vector<std::uint32_t> fill(childBegin_.begin(), childBegin_.end() - 1);
    for (std::size_t i = 1; i < nodes_.size(); ++i) child_[fill[nodes_[i].parent]++] = static_cast<std::uint32_t>(i);

    const std::size_t slots = metrics_.slots();
    std::vector<char> wanted(n, 1);
    summaries.forEach(wanted, [&](storage::NodeId id, std::size_t slot, const Acc& acc) {
      const bool inclusive = slot % 2 == 1;
      const auto f = flags[id];
      if (!inclusive || (f & kIncl)) acc_[flat[id] * slots + slot].add(acc);
      if (moduleOf[id] == kNoIndex) return;
      if (!inclusive || (f & kInclModule)) acc_[moduleOf[id] * slots + slot].add(acc);
      if (!inclusive || (f & kInclFile)) acc_[fileOf[id] * slots + slot].add(acc);
    });
  }

  enum : std::uint8_t { kIncl = 1, kInclModule = 2, kInclFile = 4 };
  const std::vector<std::string>& strings_;
  MetricSet metrics_;
  std::vector<std::uint32_t> flat_, moduleOf_, fileOf_;  // per CCT node (see build)
  std::vector<std::uint8_t> flags_;
  std::vector<Node> nodes_;
  std::vector<Acc> acc_;  // nodes_.size() x metrics_.slots()
  std::vector<std::uint32_t> childBegin_, child_;
  std::vector<std::uint32_t> procedures_;
  std::vector<std::uint32_t> onPath_;
  mutable std::unordered_map<std::uint32_t, ModelNode> shown_;
  std::map<std::string, std::vector<char>> matches_;
};

}  // namespace

std::unique_ptr<ViewModel> makeFlat(const storage::Database& db, const MetricSet& metrics) {
  return std::make_unique<FlatModel>(db, metrics);
}

}  // namespace csp::views::detail
