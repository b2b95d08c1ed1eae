// The canonical calling context tree (docs/design.md, "Data model", thesis 7.2.2): the union of all thread CCTs.
//
// Two forms: a LocalCct that threads of one process insert into concurrently (ids in arrival
// order, meaningless outside the process), and a FinalCct with dense ids that depend only on the
// structure (children ordered by their keys' text, numbered in preorder), so that the same inputs
// give the same ids for any process or worker count.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "csp/reduce/scope.hpp"

namespace csp::reduce {

// A canonical CCT node while csp-prof-mpi builds the tree: its identity below the parent as a
// hashable ScopeKey whose strings are ids of the process-local StringTable. The stage that
// writes the database turns it into the persisted storage::CctNode (database string ids).
struct CctNode {
  std::uint32_t parent = kNoIndex;
  ScopeKey key;
};

class EdgeCache;  // canonical_cct.cpp

class LocalCct {
 public:
  explicit LocalCct(StringTable& strings);
  ~LocalCct();
  LocalCct(const LocalCct&) = delete;
  LocalCct& operator=(const LocalCct&) = delete;

  // Thread-safe insert-or-find of `parent`'s child with this key. The root is node 0.
  std::uint32_t child(std::uint32_t parent, const ScopeKey& key);
  // The same through the calling thread's index of edges, looked up once and asked into the
  // core's cache: for the many lookups of one profile. Used on the thread that made it only.
  class Lookup {
   public:
    std::uint32_t child(std::uint32_t parent, const ScopeKey& key);

   private:
    friend class LocalCct;
    Lookup(LocalCct& cct, EdgeCache& cache) : cct_(cct), cache_(cache) {}
    [[gnu::noinline]] std::uint32_t shared(std::uint32_t parent, const ScopeKey& key, std::size_t hash);
    LocalCct& cct_;
    EdgeCache& cache_;
  };
  Lookup lookup();
  std::size_t size() const;
  // Unique in the process to this tree (never 0): what its node ids mean. Per-node facts that
  // depend only on a node's path (EntryTracker) can be kept from profile to profile under it.
  std::uint64_t numbering() const { return numbering_; }
  CctNode node(std::uint32_t id) const;

  // Structure only (no metric values), self-contained (strings as text), parent before child.
  std::vector<std::byte> serialize() const;
  // Adds every node of a serialized structure. Throws std::runtime_error on malformed bytes.
  void merge(std::span<const std::byte> bytes);

 private:
  StringTable& strings_;
  std::uint64_t numbering_;
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

class FinalCct {
 public:
  FinalCct() = default;
  // Dense deterministic ids from a local CCT's structure.
  static FinalCct fromLocal(const LocalCct& local, StringTable& strings);
  // The broadcast form: same encoding as LocalCct::serialize, already in final id order.
  std::vector<std::byte> serialize(const StringTable& strings) const;
  static FinalCct deserialize(std::span<const std::byte> bytes, StringTable& strings);

  std::size_t size() const { return nodes_.size(); }
  const CctNode& node(std::uint32_t id) const { return nodes_[id]; }
  const std::vector<CctNode>& nodes() const { return nodes_; }
  // Child with this key, or kNoIndex.
  std::uint32_t find(std::uint32_t parent, const ScopeKey& key) const;
  // Children of a node, ascending id.
  std::span<const std::uint32_t> children(std::uint32_t id) const {
    return {childList_.data() + childBegin_[id], childBegin_[id + 1] - childBegin_[id]};
  }

  // The hash of an edge (parent, key): the open-addressing tables (this one, LocalCct's) take
  // its low bits as the home slot and its high half as a tag, so every bit must depend on every
  // bit of the edge. Two 64 x 64 -> 128-bit multiplications, each folded (high half xor low
  // half), mix the edge's 21 bytes packed into three words: csp-prof-mpi hashes every context of
  // every profile, and this took a third of the instructions of the seven multiplications and
  // shifts of a hash per field.
  static std::size_t edgeHash(std::uint32_t parent, const ScopeKey& key) {
    const std::uint64_t a = (std::uint64_t{key.name} << 32 | key.file) ^ 0x9E3779B97F4A7C15ULL;
    const std::uint64_t b = (std::uint64_t{key.line} << 32 | key.module) ^ 0xC4CEB9FE1A85EC53ULL;
    const std::uint64_t c = (std::uint64_t{parent} << 8 | static_cast<std::uint8_t>(key.kind)) ^ 0xFF51AFD7ED558CCDULL;
    return static_cast<std::size_t>(fold(fold(a, b) ^ c, 0xD6E8FEB86659FD93ULL));
  }

 private:
  static std::uint64_t fold(std::uint64_t x, std::uint64_t y) {
    __extension__ using Product = unsigned __int128;
    const Product product = static_cast<Product>(x) * y;
    return static_cast<std::uint64_t>(product >> 64) ^ static_cast<std::uint64_t>(product);
  }
  void index();
  std::vector<CctNode> nodes_;
  std::vector<std::uint32_t> childBegin_;
  std::vector<std::uint32_t> childList_;

  // Open addressing over node ids (kNoIndex = empty) with the hash's high half as a tag: only a
  // probe whose tag matches reads nodes_, so a lookup mostly touches one line of the table and
  // the node it finds (16 bytes per node).
  struct Slot {
    std::uint32_t tag = 0;
    std::uint32_t id = kNoIndex;
  };
  std::vector<Slot> table_;
  std::size_t mask_ = 0;
};

}  // namespace csp::reduce
