// Region trees (docs/views.md, "Regions"): the union of the profiles' trees on each rank, the
// reduced tree with deterministic ids, and each profile's region values at those ids.
#include <algorithm>
#include <numeric>

#include "stages.hpp"

namespace csp::reduce::stages {

namespace {

std::vector<std::byte> packTree(const std::vector<RegionTreeNode>& nodes) {
  Packer p;
  p.u64(nodes.size());
  for (const auto& n : nodes) {
    p.u64(n.parent);
    p.text(n.name);
    p.u64(n.dynamicId);
  }
  return p.take();
}

std::vector<RegionTreeNode> unpackTree(const std::vector<std::byte>& bytes) {
  Unpacker u(bytes);
  std::vector<RegionTreeNode> out(u.u64());
  for (std::size_t i = 0; i < out.size(); ++i) {
    out[i].parent = static_cast<std::uint32_t>(u.u64());
    out[i].name = u.text();
    out[i].dynamicId = u.u64();
    if (i == 0 ? out[i].parent != kNoIndex : out[i].parent >= i) throw std::runtime_error("region tree: bad parent");
  }
  return out;
}

}  // namespace

std::uint32_t RegionUnion::child(std::uint32_t parent, const std::string& name, std::uint64_t dynamicId) {
  std::lock_guard lock(mutex_);
  auto [it, fresh] =
      index_.try_emplace(std::make_tuple(parent, name, dynamicId), static_cast<std::uint32_t>(nodes_.size()));
  if (fresh) nodes_.push_back({parent, name, dynamicId});
  return it->second;
}

void RegionUnion::add(const RegionProfile& r) {
  std::vector<std::uint32_t> id(r.size(), 0);
  for (std::size_t i = 1; i < r.size(); ++i) id[i] = child(id[r.parent[i]], r.names[r.staticId[i]], r.dynamicId[i]);
}

void RegionUnion::merge(const std::vector<RegionTreeNode>& other) {
  std::vector<std::uint32_t> id(other.size(), 0);
  for (std::size_t i = 1; i < other.size(); ++i) id[i] = child(id[other[i].parent], other[i].name, other[i].dynamicId);
}

std::vector<RegionTreeNode> RegionUnion::finalTree() const {
  std::vector<std::vector<std::uint32_t>> children(nodes_.size());
  for (std::size_t i = 1; i < nodes_.size(); ++i) children[nodes_[i].parent].push_back(static_cast<std::uint32_t>(i));
  for (auto& c : children)
    std::sort(c.begin(), c.end(), [&](auto a, auto b) {
      return std::tie(nodes_[a].name, nodes_[a].dynamicId) < std::tie(nodes_[b].name, nodes_[b].dynamicId);
    });
  std::vector<RegionTreeNode> out;
  std::vector<std::uint32_t> finalId(nodes_.size(), kNoIndex);
  std::vector<std::uint32_t> stack{0};
  while (!stack.empty()) {
    const auto id = stack.back();
    stack.pop_back();
    finalId[id] = static_cast<std::uint32_t>(out.size());
    out.push_back({id == 0 ? kNoIndex : finalId[nodes_[id].parent], nodes_[id].name, nodes_[id].dynamicId});
    for (auto it = children[id].rbegin(); it != children[id].rend(); ++it) stack.push_back(*it);
  }
  return out;
}

// Region trees are small: gathered at the root, merged, numbered and broadcast.
RegionTree RegionTree::unify(const Comm& comm, const RegionUnion& mine) {
  const auto parts = comm.gather(packTree(mine.nodes()));
  std::vector<std::byte> merged;
  if (comm.rank() == 0) {
    RegionUnion all;
    for (const auto& part : parts) all.merge(unpackTree(part));
    merged = packTree(all.finalTree());
  }
  comm.broadcast(merged);
  RegionTree tree;
  tree.nodes_ = unpackTree(merged);
  for (std::size_t i = 1; i < tree.nodes_.size(); ++i) {
    const auto& n = tree.nodes_[i];
    tree.index_[{n.parent, n.name, n.dynamicId}] = static_cast<std::uint32_t>(i);
  }
  return tree;
}

std::vector<std::uint32_t> RegionTree::idsOf(const RegionProfile& r) const {
  std::vector<std::uint32_t> id(r.size(), 0);
  for (std::size_t k = 1; k < r.size(); ++k)
    id[k] = index_.at({id[r.parent[k]], r.names[r.staticId[k]], r.dynamicId[k]});
  return id;
}

RegionValues RegionTree::valuesOf(const RegionProfile& r) const {
  const auto id = idsOf(r);
  std::vector<std::size_t> order(r.size() > 0 ? r.size() - 1 : 0);  // the profile's regions (its nodes 1..)
  std::iota(order.begin(), order.end(), std::size_t{1});
  std::sort(order.begin(), order.end(), [&](auto a, auto b) { return id[a] < id[b]; });
  RegionValues rv;
  for (auto k : order) {
    // Two nodes of one profile can name the same region (a name registered twice).
    if (!rv.region.empty() && rv.region.back() == id[k]) {
      rv.count.back() += r.count[k];
      rv.inclusiveNs.back() += r.inclusiveNs[k];
      rv.exclusiveNs.back() += r.exclusiveNs[k];
      continue;
    }
    rv.region.push_back(id[k]);
    rv.count.push_back(r.count[k]);
    rv.inclusiveNs.push_back(r.inclusiveNs[k]);
    rv.exclusiveNs.push_back(r.exclusiveNs[k]);
  }
  return rv;
}

}  // namespace csp::reduce::stages
