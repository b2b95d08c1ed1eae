// The Regions view: the reduced region tree (docs/views.md, "Regions") with visits and time statistics.
// Region trees are small (user-annotated spans), so the whole tree is read at once.
#include <fmt/format.h>

#include "csp/metrics/encoding.hpp"
#include "sources.hpp"

namespace csp::views::detail {

namespace {

class RegionsModel final : public ViewModel {
 public:
  RegionsModel(const storage::Database& db, const MetricSet& metrics) {
    const auto& meta = db.metadata();
    const auto count = meta.regionCount;
    children_.resize(count);
    for (RegionId id = 0; id < count; ++id) {
      const auto region = db.region(id);
      if (!region)
        throw storage::DatabaseError(db.directory(), fmt::format("damaged database: region {} is missing", id));
      ModelNode m;
      m.kind = id == 0 ? NodeKind::Root : NodeKind::Region;
      m.name = meta.strings.at(region->name);
      if (region->dynamicId != 0) m.name += fmt::format("#{}", region->dynamicId);
      m.viewId = id;
      for (std::size_t k = 0; k < metrics.slots(); ++k) m.acc.push_back(Acc::emptyInstance(storage::ValueType::Count));
      for (const auto& a : db.regionSummaries(id)) {
        if (a.metric >= metrics.ids.size()) continue;
        try {
          m.acc[MetricSet::slot(a.metric, a.scope)] = Acc::decode(storage::ValueType::Count, a.bytes);
        } catch (const metrics::DecodeError& e) {
          throw storage::DatabaseError(db.directory(),
                                       fmt::format("damaged database: summary of region {}: {}", id, e.what()));
        }
      }
      if (id != 0) {
        if (region->parent >= count)
          throw storage::DatabaseError(db.directory(), fmt::format("damaged database: region {} has a bad parent", id));
        children_[region->parent].push_back(id);
      }
      nodes_.push_back(std::move(m));
    }
    if (nodes_.empty()) {
      ModelNode m;
      for (std::size_t k = 0; k < metrics.slots(); ++k) m.acc.push_back(Acc::emptyInstance(storage::ValueType::Count));
      nodes_.push_back(std::move(m));
      children_.emplace_back();
    }
  }

  std::uint32_t root() override { return 0; }
  std::vector<std::uint32_t> children(std::uint32_t h) override { return children_[h]; }
  const ModelNode& node(std::uint32_t h) const override { return nodes_[h]; }
  bool hasChildren(std::uint32_t h) override { return !children_[h].empty(); }
  std::optional<std::uint32_t> byId(std::uint64_t id) override {
    if (id >= nodes_.size()) return std::nullopt;
    return static_cast<std::uint32_t>(id);
  }
  std::vector<std::uint32_t> find(const std::string& pattern, bool exact) override {
    std::vector<std::uint32_t> out;
    std::vector<std::uint32_t> stack{0};
    while (!stack.empty()) {
      const auto h = stack.back();
      stack.pop_back();
      if (h != 0 && labelMatches(nodes_[h].name, pattern, exact)) {
        out.push_back(h);
        continue;
      }
      for (auto it = children_[h].rbegin(); it != children_[h].rend(); ++it) stack.push_back(*it);
    }
    return out;
  }
  bool subtreeMatches(std::uint32_t h, const std::string& pattern) override {
    if (nameMatches(nodes_[h].name, pattern)) return true;
    for (auto c : children_[h])
      if (subtreeMatches(c, pattern)) return true;
    return false;
  }

 private:
  std::vector<ModelNode> nodes_;
  std::vector<std::vector<std::uint32_t>> children_;
};

}  // namespace

std::unique_ptr<ViewModel> makeRegions(const storage::Database& db, const MetricSet& metrics) {
  return std::make_unique<RegionsModel>(db, metrics);
}

}  // namespace csp::views::detail
