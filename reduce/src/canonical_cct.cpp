#include "csp/reduce/canonical_cct.hpp"

#include <fmt/format.h>
#include <tbb/concurrent_hash_map.h>
#include <tbb/concurrent_vector.h>
#include <tbb/enumerable_thread_specific.h>

#include "csp/storage/bytes.hpp"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <stdexcept>
#include <unordered_map>

namespace csp::reduce {

namespace {

constexpr std::uint32_t kStructureMagic = 0x31544343;  // "CCT1"

struct Edge {
  std::uint32_t parent;
  ScopeKey key;
};

struct EdgeHashCompare {
  static std::size_t hash(const Edge& e) { return FinalCct::edgeHash(e.parent, e.key); }
  static bool equal(const Edge& a, const Edge& b) { return a.parent == b.parent && a.key == b.key; }
};

// The structure messages use the one byte codec (csp/storage/bytes.hpp).
using ByteWriter = storage::ByteWriter<std::vector<std::byte>>;
using ByteReader = storage::ByteReader<std::runtime_error>;

// Encodes nodes (parent before child) with a string list of the texts they use.
template <typename NodeAt>
std::vector<std::byte> encode(std::size_t count, NodeAt nodeAt, const StringTable& strings) {
  std::unordered_map<std::uint32_t, std::uint32_t> local;  // table id -> position in the list
  std::vector<std::uint32_t> used;
  auto ref = [&](std::uint32_t id) {
    auto [it, fresh] = local.try_emplace(id, static_cast<std::uint32_t>(used.size()));
    if (fresh) used.push_back(id);
    return it->second;
  };
  ref(0);
  std::vector<std::uint32_t> fields;
  fields.reserve(count * 6);
  for (std::size_t i = 0; i < count; ++i) {
    const CctNode n = nodeAt(i);
    fields.insert(fields.end(), {n.parent, static_cast<std::uint32_t>(n.key.kind), ref(n.key.name), ref(n.key.file),
                                 n.key.line, ref(n.key.module)});
  }
  ByteWriter w;
  w.u64(kStructureMagic);
  w.u64(static_cast<std::uint32_t>(used.size()));
  for (auto id : used) w.text(strings.text(id));
  w.u64(static_cast<std::uint32_t>(count));
  for (std::size_t i = 0; i < count; ++i) {
    const std::uint32_t* f = &fields[i * 6];
    w.u64(f[0]);
    w.u8(static_cast<std::uint8_t>(f[1]));
    w.u64(f[2]);
    w.u64(f[3]);
    w.u64(f[4]);
    w.u64(f[5]);
  }
  return w.take();
}

// Decodes into (parent, key) pairs with strings interned into `strings`.
std::vector<CctNode> decode(std::span<const std::byte> bytes, StringTable& strings) {
  ByteReader r(bytes, "CCT structure");
  if (r.u32() != kStructureMagic) throw std::runtime_error("CCT structure: bad magic");
  const std::uint32_t nstrings = r.u32();
  std::vector<std::uint32_t> ids;
  ids.reserve(nstrings);
  for (std::uint32_t i = 0; i < nstrings; ++i) ids.push_back(strings.intern(r.textView()));
  const std::uint32_t count = r.u32();
  std::vector<CctNode> nodes;
  nodes.reserve(count);
  auto str = [&](std::uint32_t i) {
    if (i >= ids.size()) throw std::runtime_error("CCT structure: string index out of range");
    return ids[i];
  };
  for (std::uint32_t i = 0; i < count; ++i) {
    CctNode n;
    n.parent = r.u32();
    const std::uint8_t kind = r.u8();
    if (kind > static_cast<std::uint8_t>(ScopeKind::Stmt)) throw std::runtime_error("CCT structure: bad scope kind");
    n.key.kind = static_cast<ScopeKind>(kind);
    n.key.name = str(r.u32());
    n.key.file = str(r.u32());
    n.key.line = r.u32();
    n.key.module = str(r.u32());
    if (i == 0 ? n.parent != kNoIndex : n.parent >= i)
      throw std::runtime_error(fmt::format("CCT structure: node {} has parent {}", i, n.parent));
    nodes.push_back(n);
  }
  if (!r.done()) throw std::runtime_error("CCT structure: trailing bytes");
  if (nodes.empty()) throw std::runtime_error("CCT structure: no root");
  return nodes;
}

}  // namespace

// A thread's own index of the edges it has looked up: once a node exists its id never changes,
// so repeated lookups (every profile walks mostly the same edges) need neither the shared map's
// bucket locks nor its cache lines, which the other threads write. A slot is 8 bytes (the
// hash's high half and the id), not a copy of the edge: a full copy made the index of a
// 5,000-node tree outgrow the core's L2 cache, and its misses were 12 % of csp-prof-mpi's CPU.
// The rare tag match is confirmed against the shared node list.
class EdgeCache {
 public:
  template <typename Nodes>
  std::uint32_t find(const Edge& e, std::size_t hash, const Nodes& nodes) const {
    if (slots_.empty()) return kNoIndex;
    const auto tag = tagOf(hash);
    for (std::size_t at = hash & mask_;; at = (at + 1) & mask_) {
      const Slot s = slots_[at];
      if (s.id == kNoIndex) return kNoIndex;
      if (s.tag == tag) {
        const CctNode& n = nodes[s.id];
        if (n.parent == e.parent && n.key == e.key) return s.id;
      }
    }
  }
  // Asks for every line of the table: reading and validating a profile pushes much of it out of
  // the core's cache, and the profile's lookups would then wait for their slots one by one.
  void warm() const {
    const auto* bytes = reinterpret_cast<const char*>(slots_.data());
    for (std::size_t at = 0; at < slots_.size() * sizeof(Slot); at += 64) __builtin_prefetch(bytes + at);
  }
  void insert(std::size_t hash, std::uint32_t id) {
    if (2 * (used_ + 1) > slots_.size()) grow();
    insertWithHash(hash, id);
  }

 private:
  struct Slot {
    std::uint32_t tag = 0;
    std::uint32_t id = kNoIndex;
  };
  static std::uint32_t tagOf(std::size_t hash) { return static_cast<std::uint32_t>(std::uint64_t{hash} >> 32); }
  // A tag alone does not give the home slot in a bigger table: growing reads the full hashes.
  void grow() {
    std::vector<Slot> old = std::move(slots_);
    std::vector<std::size_t> oldHashes = std::move(hashes_);
    slots_.assign(std::max<std::size_t>(1024, old.size() * 2), Slot{});
    hashes_.assign(slots_.size(), 0);
    mask_ = slots_.size() - 1;
    used_ = 0;
    for (std::size_t i = 0; i < old.size(); ++i)
      if (old[i].id != kNoIndex) insertWithHash(oldHashes[i], old[i].id);
  }
  void insertWithHash(std::size_t hash, std::uint32_t id) {
    std::size_t at = hash & mask_;
    while (slots_[at].id != kNoIndex) at = (at + 1) & mask_;
    slots_[at] = {tagOf(hash), id};
    hashes_[at] = hash;
    ++used_;
  }
  std::vector<Slot> slots_;
  std::vector<std::size_t> hashes_;  // per slot, only read when growing
  std::size_t mask_ = 0, used_ = 0;
};

struct LocalCct::Impl {
  tbb::concurrent_hash_map<Edge, std::uint32_t, EdgeHashCompare> edges;
  tbb::concurrent_vector<CctNode> nodes;
  tbb::enumerable_thread_specific<EdgeCache> caches;
};

namespace {
std::atomic<std::uint64_t> nextNumbering{1};  // NOLINT(cppcoreguidelines-avoid-non-const-global-variables)
}  // namespace

LocalCct::LocalCct(StringTable& strings)
    : strings_(strings), numbering_(nextNumbering.fetch_add(1)), impl_(std::make_unique<Impl>()) {
  impl_->nodes.push_back(CctNode{kNoIndex, ScopeKey{}});
}

LocalCct::~LocalCct() = default;

std::uint32_t LocalCct::child(std::uint32_t parent, const ScopeKey& key) {
  return Lookup(*this, impl_->caches.local()).child(parent, key);
}

// The index is warmed for the many lookups of a profile (a single one would not pay for it).
LocalCct::Lookup LocalCct::lookup() {
  EdgeCache& cache = impl_->caches.local();
  cache.warm();
  return Lookup(*this, cache);
}

std::uint32_t LocalCct::Lookup::child(std::uint32_t parent, const ScopeKey& key) {
  const Edge edge{parent, key};
  const std::size_t hash = EdgeHashCompare::hash(edge);
  if (const auto id = cache_.find(edge, hash, cct_.impl_->nodes); id != kNoIndex) return id;
  return shared(parent, key, hash);
}

// Out of line: the shared map's accessor made every lookup save and restore the registers it
// needs, though nearly every lookup finds its edge in the thread's own index.
std::uint32_t LocalCct::Lookup::shared(std::uint32_t parent, const ScopeKey& key, std::size_t hash) {
  LocalCct::Impl& impl = *cct_.impl_;
  std::uint32_t id = kNoIndex;
  {
    decltype(impl.edges)::accessor acc;
    if (impl.edges.insert(acc, Edge{parent, key})) {
      auto it = impl.nodes.push_back(CctNode{parent, key});
      acc->second = static_cast<std::uint32_t>(it - impl.nodes.begin());
    }
    id = acc->second;
  }
  cache_.insert(hash, id);
  return id;
}

std::size_t LocalCct::size() const { return impl_->nodes.size(); }

CctNode LocalCct::node(std::uint32_t id) const { return impl_->nodes[id]; }

std::vector<std::byte> LocalCct::serialize() const {
  return encode(
      impl_->nodes.size(), [&](std::size_t i) { return impl_->nodes[i]; }, strings_);
}

void LocalCct::merge(std::span<const std::byte> bytes) {
  const auto nodes = decode(bytes, strings_);
  std::vector<std::uint32_t> mapped(nodes.size());
  mapped[0] = 0;
  for (std::size_t i = 1; i < nodes.size(); ++i) mapped[i] = child(mapped[nodes[i].parent], nodes[i].key);
}

FinalCct FinalCct::fromLocal(const LocalCct& local, StringTable& strings) {
  const std::size_t n = local.size();
  std::vector<CctNode> nodes(n);
  for (std::size_t i = 0; i < n; ++i) nodes[i] = local.node(static_cast<std::uint32_t>(i));
  std::vector<std::vector<std::uint32_t>> children(n);
  for (std::size_t i = 1; i < n; ++i) children[nodes[i].parent].push_back(static_cast<std::uint32_t>(i));
  for (auto& c : children) {
    std::sort(c.begin(), c.end(),
              [&](std::uint32_t a, std::uint32_t b) { return compareByText(nodes[a].key, nodes[b].key, strings) < 0; });
  }
  // Preorder numbering; the stack holds children in reverse so the first is visited first.
  FinalCct out;
  out.nodes_.reserve(n);
  std::vector<std::uint32_t> finalId(n, kNoIndex);
  std::vector<std::uint32_t> stack{0};
  while (!stack.empty()) {
    const std::uint32_t id = stack.back();
    stack.pop_back();
    finalId[id] = static_cast<std::uint32_t>(out.nodes_.size());
    out.nodes_.push_back(CctNode{id == 0 ? kNoIndex : finalId[nodes[id].parent], nodes[id].key});
    for (auto it = children[id].rbegin(); it != children[id].rend(); ++it) stack.push_back(*it);
  }
  out.index();
  return out;
}

std::vector<std::byte> FinalCct::serialize(const StringTable& strings) const {
  return encode(
      nodes_.size(), [&](std::size_t i) { return nodes_[i]; }, strings);
}

FinalCct FinalCct::deserialize(std::span<const std::byte> bytes, StringTable& strings) {
  FinalCct out;
  out.nodes_ = decode(bytes, strings);
  out.index();
  return out;
}

std::uint32_t FinalCct::find(std::uint32_t parent, const ScopeKey& key) const {
  if (table_.empty()) return kNoIndex;
  const std::size_t hash = edgeHash(parent, key);
  const auto tag = static_cast<std::uint32_t>(std::uint64_t{hash} >> 32);
  for (std::size_t slot = hash & mask_;; slot = (slot + 1) & mask_) {
    const Slot s = table_[slot];
    if (s.id == kNoIndex) return kNoIndex;
    if (s.tag == tag && nodes_[s.id].parent == parent && nodes_[s.id].key == key) return s.id;
  }
}

void FinalCct::index() {
  const std::size_t n = nodes_.size();
  childBegin_.assign(n + 1, 0);
  for (std::size_t i = 1; i < n; ++i) ++childBegin_[nodes_[i].parent + 1];
  for (std::size_t i = 0; i < n; ++i) childBegin_[i + 1] += childBegin_[i];
  childList_.assign(n > 0 ? n - 1 : 0, 0);
  std::vector<std::uint32_t> fill(childBegin_.begin(), childBegin_.end() - 1);
  std::size_t capacity = 16;
  while (capacity < 2 * n) capacity <<= 1;
  table_.assign(capacity, Slot{});
  mask_ = capacity - 1;
  for (std::size_t i = 1; i < n; ++i) {
    childList_[fill[nodes_[i].parent]++] = static_cast<std::uint32_t>(i);
    const std::size_t hash = edgeHash(nodes_[i].parent, nodes_[i].key);
    std::size_t slot = hash & mask_;
    while (table_[slot].id != kNoIndex) slot = (slot + 1) & mask_;
    table_[slot] = {static_cast<std::uint32_t>(std::uint64_t{hash} >> 32), static_cast<std::uint32_t>(i)};
  }
}

}  // namespace csp::reduce
