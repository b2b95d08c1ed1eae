// Summary accumulators per (node, metric, scope) and their reduce-scatter by node range.
#include <tbb/parallel_for.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <tuple>

#include "csp/metrics/encoding.hpp"
#include "prof_stages.hpp"

namespace csp::reduce::prof {

namespace {

constexpr std::size_t kScopes = 2;  // storage::MetricScope: Exclusive = 0, Inclusive = 1

double fromBits(std::uint64_t bits) {
  double x;
  std::memcpy(&x, &bits, sizeof x);
  return x;
}

// Folds a block into the stack: two neighbouring blocks of one level become their parent.
void pushPiece(std::vector<SummaryTable::Piece>& stack, SummaryTable::Piece piece) {
  while (!stack.empty() && stack.back().level == piece.level && (piece.index & 1) && stack.back().index + 1 == piece.index) {
    SummaryTable::Piece left = std::move(stack.back());
    stack.pop_back();
    left.acc.combine(piece.acc);
    piece = {piece.level + 1, piece.index >> 1, std::move(left.acc)};
  }
  stack.push_back(std::move(piece));
}

metrics::RealAccumulator foldPieces(const std::vector<SummaryTable::Piece>& stack) {
  metrics::RealAccumulator out;
  for (const auto& p : stack) out.combine(p.acc);
  return out;
}

// The first node rank r owns.
std::uint32_t ownerStart(std::uint32_t nodes, int rank, int size) {
  return static_cast<std::uint32_t>(std::uint64_t{nodes} * static_cast<std::uint64_t>(rank) / static_cast<std::uint64_t>(size));
}

// What one exchange entry is about.
struct SummaryKey {
  std::uint32_t node = 0;
  std::uint16_t metric = 0;
  std::uint8_t scope = 0;
  auto operator<=>(const SummaryKey&) const = default;
};

void packKey(Packer& p, const SummaryKey& k) {
  p.u64(k.node);
  p.u64(k.metric);
  p.u64(k.scope);
}

SummaryKey unpackKey(Unpacker& u) {
  SummaryKey k;
  k.node = static_cast<std::uint32_t>(u.u64());
  k.metric = static_cast<std::uint16_t>(u.u64());
  k.scope = static_cast<std::uint8_t>(u.u64());
  return k;
}

}  // namespace

SummaryTable::SummaryTable(std::uint32_t nodeCount, std::size_t rawCount, std::size_t derivedCount)
    : nodes_(nodeCount),
      raw_(rawCount),
      derived_(derivedCount),
      rawAcc_(std::size_t{nodeCount} * rawCount * kScopes),
      derivedStacks_(std::size_t{nodeCount} * derivedCount * kScopes) {}

metrics::IntAccumulator& SummaryTable::raw(std::uint32_t node, std::size_t metric, std::size_t scope) {
  return rawAcc_[(std::size_t{node} * raw_ + metric) * kScopes + scope];
}

std::vector<SummaryTable::Piece>& SummaryTable::derived(std::uint32_t node, std::size_t metric, std::size_t scope) {
  return derivedStacks_[(std::size_t{node} * derived_ + metric) * kScopes + scope];
}

void SummaryTable::accumulate(std::size_t batchIndex, std::span<const ProfileInfo> batch,
                              const std::vector<ThreadValues>& values) {
  constexpr std::uint32_t kChunk = 256;
  tbb::parallel_for(std::uint32_t{0}, (nodes_ + kChunk - 1) / kChunk, [&](std::uint32_t c) {
    const std::uint32_t lo = c * kChunk, hi = std::min(nodes_, lo + kChunk);
    for (std::size_t i = 0; i < batch.size(); ++i) {
      const ThreadValues& v = values[i];
      auto k = static_cast<std::size_t>(std::lower_bound(v.node.begin(), v.node.end(), lo) - v.node.begin());
      for (; k < v.size() && v.node[k] < hi; ++k) {
        if (v.metric[k] >= raw_) continue;
        if (v.exclusive[k]) raw(v.node[k], v.metric[k], 0).accumulate(batch[i].id, v.exclusive[k]);
        if (v.inclusive[k]) raw(v.node[k], v.metric[k], 1).accumulate(batch[i].id, v.inclusive[k]);
      }
    }
    if (derived_ == 0) return;
    // This batch's leaf per (node, derived metric, scope), accumulated in profile order.
    std::vector<metrics::RealAccumulator> leaf(std::size_t{hi - lo} * derived_ * kScopes);
    std::vector<std::uint8_t> used(leaf.size(), 0);
    for (std::size_t i = 0; i < batch.size(); ++i) {
      const ThreadValues& v = values[i];
      auto k = static_cast<std::size_t>(std::lower_bound(v.node.begin(), v.node.end(), lo) - v.node.begin());
      for (; k < v.size() && v.node[k] < hi; ++k) {
        if (v.metric[k] < raw_) continue;
        const std::size_t at = ((v.node[k] - lo) * derived_ + (v.metric[k] - raw_)) * kScopes;
        if (v.exclusive[k]) leaf[at].accumulate(batch[i].id, fromBits(v.exclusive[k])), used[at] = 1;
        if (v.inclusive[k]) leaf[at + 1].accumulate(batch[i].id, fromBits(v.inclusive[k])), used[at + 1] = 1;
      }
    }
    for (std::size_t at = 0; at < leaf.size(); ++at)
      if (used[at]) pushPiece(derivedStacks_[std::size_t{lo} * derived_ * kScopes + at], {0, batchIndex, std::move(leaf[at])});
  });
}

void SummaryTable::exchangeAndWrite(const Comm& comm, storage::ShardWriter& shard) {
  // Each entry: key, number of pieces, then the encoded accumulator (raw metrics: one) or the
  // pieces (level, index, encoded accumulator) of a derived metric.
  std::vector<std::vector<std::byte>> outgoing(static_cast<std::size_t>(comm.size()));
  for (int r = 0; r < comm.size(); ++r) {
    Packer p;
    for (std::uint32_t n = ownerStart(nodes_, r, comm.size()); n < ownerStart(nodes_, r + 1, comm.size()); ++n) {
      for (std::size_t m = 0; m < raw_; ++m) {
        for (std::size_t scope = 0; scope < kScopes; ++scope) {
          const auto& a = raw(n, m, scope);
          if (a.count() == 0) continue;
          packKey(p, {n, static_cast<std::uint16_t>(m), static_cast<std::uint8_t>(scope)});
          p.u64(1);
          p.text(metrics::encode(a));
        }
      }
      for (std::size_t d = 0; d < derived_; ++d) {
        for (std::size_t scope = 0; scope < kScopes; ++scope) {
          const auto& stack = derived(n, d, scope);
          if (stack.empty()) continue;
          packKey(p, {n, static_cast<std::uint16_t>(raw_ + d), static_cast<std::uint8_t>(scope)});
          p.u64(stack.size());
          for (const auto& piece : stack) {
            p.u64(piece.level);
            p.u64(piece.index);
            p.text(metrics::encode(piece.acc));
          }
        }
      }
    }
    outgoing[static_cast<std::size_t>(r)] = p.take();
  }
  faultPoint(comm, "exchange");
  const auto incoming = comm.alltoall(outgoing);
  outgoing.clear();

  // Parts arrive in rank order, which is batch order: folding derived pieces in that order
  // repeats exactly what one process would have done.
  const std::uint32_t myFirst = ownerStart(nodes_, comm.rank(), comm.size());
  const std::uint32_t myEnd = ownerStart(nodes_, comm.rank() + 1, comm.size());
  std::map<SummaryKey, metrics::IntAccumulator> owned;
  std::map<SummaryKey, std::vector<Piece>> ownedDerived;
  for (const auto& part : incoming) {
    Unpacker u(part);
    while (!u.done()) {
      const auto key = unpackKey(u);
      const auto pieces = u.u64();
      if (key.node < myFirst || key.node >= myEnd) throw std::logic_error("summary for a node outside this rank's range");
      if (key.metric < raw_) {
        auto acc = metrics::decodeIntAccumulator(u.text());
        auto [it, fresh] = owned.try_emplace(key, acc);
        if (!fresh) it->second.combine(acc);
        continue;
      }
      auto& stack = ownedDerived[key];
      for (std::uint64_t i = 0; i < pieces; ++i) {
        Piece piece;
        piece.level = static_cast<std::uint32_t>(u.u64());
        piece.index = u.u64();
        piece.acc = metrics::decodeRealAccumulator(u.text());
        pushPiece(stack, std::move(piece));
      }
    }
  }
  std::map<SummaryKey, std::string> encoded;
  for (const auto& [key, acc] : owned) encoded[key] = metrics::encode(acc);
  for (const auto& [key, stack] : ownedDerived) encoded[key] = metrics::encode(foldPieces(stack));
  for (const auto& [key, bytes] : encoded)
    shard.putSummary(key.node, key.metric, static_cast<storage::MetricScope>(key.scope), bytes);
}

}  // namespace csp::reduce::prof
