// Summary accumulators per (node, metric, scope) and their reduce-scatter by node range.
#include <algorithm>
#include <cstring>
#include <stdexcept>
#include <tuple>

#include <fmt/format.h>

#include "csp/metrics/encoding.hpp"
#include "stages.hpp"

namespace csp::reduce::dbsink {

namespace {

constexpr std::size_t kScopes = 2;  // storage::MetricScope: Exclusive = 0, Inclusive = 1

double fromBits(std::uint64_t bits) {
  double x;
  std::memcpy(&x, &bits, sizeof x);
  return x;
}

// Folds a block into the stack: two neighbouring blocks of one level become their parent.
void pushPiece(std::vector<SummaryTable::Piece>& stack, SummaryTable::Piece piece) {
  while (!stack.empty() && stack.back().level == piece.level && (piece.index & 1) &&
         stack.back().index + 1 == piece.index) {
    SummaryTable::Piece left = stack.back();
    stack.pop_back();
    left.acc.combine(piece.acc);
    piece = {piece.level + 1, piece.index >> 1, left.acc};
  }
  stack.push_back(piece);
}

metrics::RealAccumulator foldPieces(const std::vector<SummaryTable::Piece>& stack) {
  metrics::RealAccumulator out;
  for (const auto& p : stack) out.combine(p.acc);
  return out;
}

// The first node rank r owns.
std::uint32_t ownerStart(std::uint32_t nodes, int rank, int size) {
  return static_cast<std::uint32_t>(std::uint64_t{nodes} * static_cast<std::uint64_t>(rank) /
                                    static_cast<std::uint64_t>(size));
}

// What one exchange entry is about.
struct SummaryKey {
  std::uint32_t node = 0;
  std::uint16_t metric = 0;
  std::uint8_t scope = 0;
  std::uint8_t population = 0;                          // storage::kAllThreads or a ThreadClass
  auto operator<=>(const SummaryKey&) const = default;  // NOLINT(modernize-use-nullptr): clang-tidy 14 misreads it
};

void packKey(Packer& p, const SummaryKey& k) {
  p.u64(k.node);
  p.u64(k.metric);
  p.u64(k.scope);
  p.u64(k.population);
}

SummaryKey unpackKey(Unpacker& u) {
  SummaryKey k;
  k.node = static_cast<std::uint32_t>(u.u64());
  k.metric = static_cast<std::uint16_t>(u.u64());
  k.scope = static_cast<std::uint8_t>(u.u64());
  k.population = static_cast<std::uint8_t>(u.u64());
  return k;
}

// One node's exchange entries from all parts, combined, then written in key order (reused from
// node to node). A node has a few (metrics x scopes x populations): a linear search finds them.
// An entry that only one part has (every entry with one process) is written as that part packed
// it; decoding and encoding it again gave the same bytes, and with large trees cost a sixth of
// the run.
class NodeEntries {
 public:
  explicit NodeEntries(const std::vector<std::uint8_t>& isReal) : isReal_(isReal) {}
  void clear() { used_ = 0; }
  // The entry `key` whose pieces count follows in `u` (the bytes stay alive until write()).
  void add(const SummaryKey& key, Unpacker& u) {
    const auto pieces = u.u64();
    if (key.metric >= isReal_.size()) throw std::runtime_error("summary of an unknown metric");
    Entry& e = find(key);
    ++e.parts;
    if (!isReal_[key.metric]) {
      const std::string_view accumulator = u.textView(), histogram = u.textView();
      if (e.parts == 1) {
        e.packedAccumulator = accumulator;
        e.packedHistogram = histogram;
        return;
      }
      if (e.parts == 2) {
        e.acc = metrics::decodeIntAccumulator(e.packedAccumulator);
        e.histogram = metrics::decodeHistogram(e.packedHistogram);
      }
      e.acc.combine(metrics::decodeIntAccumulator(accumulator));
      e.histogram.merge(metrics::decodeHistogram(histogram));
      return;
    }
    for (std::uint64_t i = 0; i < pieces; ++i) {
      SummaryTable::Piece piece;
      piece.level = static_cast<std::uint32_t>(u.u64());
      piece.index = u.u64();
      piece.acc = metrics::decodeRealAccumulator(u.textView());
      pushPiece(e.stack, piece);
    }
  }
  // Summaries (all threads) and distributions (histograms; classes' accumulators) in key order.
  void write(storage::ShardWriter& shard) {
    order_.resize(used_);
    for (std::size_t i = 0; i < used_; ++i) order_[i] = i;
    std::sort(order_.begin(), order_.end(),
              [&](std::size_t a, std::size_t b) { return entries_[a].key < entries_[b].key; });
    for (const std::size_t i : order_) {
      const Entry& e = entries_[i];
      std::string_view accumulator, histogram;
      if (isReal_[e.key.metric]) {
        accumulatorBytes_ = metrics::encode(foldPieces(e.stack));
        accumulator = accumulatorBytes_;
      } else if (e.parts == 1) {
        accumulator = e.packedAccumulator;
        histogram = e.packedHistogram;
      } else {
        accumulatorBytes_ = metrics::encode(e.acc);
        histogramBytes_ = metrics::encode(e.histogram);
        accumulator = accumulatorBytes_;
        histogram = histogramBytes_;
      }
      const auto scope = static_cast<storage::MetricScope>(e.key.scope);
      if (e.key.population == storage::kAllThreads) {
        shard.putSummary(e.key.node, e.key.metric, scope, accumulator);
        if (!histogram.empty()) shard.putDistribution(e.key.node, e.key.metric, scope, e.key.population, {}, histogram);
      } else {
        shard.putDistribution(e.key.node, e.key.metric, scope, e.key.population, accumulator, histogram);
      }
    }
  }

 private:
  struct Entry {
    SummaryKey key;
    std::size_t parts = 0;                                // parts that had it
    std::string_view packedAccumulator, packedHistogram;  // the first part's (count metrics)
    metrics::IntAccumulator acc;                          // count metrics, once two parts had it
    metrics::LogLinearHistogram histogram;
    std::vector<SummaryTable::Piece> stack;  // real-valued metrics
  };
  Entry& find(const SummaryKey& key) {
    for (std::size_t at = 0; at < used_; ++at)
      if (entries_[at].key == key) return entries_[at];
    if (used_ == entries_.size()) entries_.emplace_back();
    Entry& e = entries_[used_++];
    e.key = key;
    e.parts = 0;
    e.stack.clear();
    return e;
  }
  const std::vector<std::uint8_t>& isReal_;
  std::vector<Entry> entries_;
  std::size_t used_ = 0;
  std::vector<std::size_t> order_;
  std::string accumulatorBytes_, histogramBytes_;
};

}  // namespace

SummaryTable::SummaryTable(const std::vector<std::uint8_t>& leaf, const std::vector<MetricDescriptor>& metrics,
                           const std::vector<std::uint8_t>& threadClassOf)
    : nodes_(static_cast<std::uint32_t>(leaf.size())), leaf_(leaf), classOf_(threadClassOf) {
  for (std::size_t m = 0; m < metrics.size(); ++m) {
    const bool real = metrics[m].valueType == ValueType::Real;
    auto& group = real ? reals_ : counts_;
    slotOf_.push_back(static_cast<std::uint32_t>(group.size()));
    isReal_.push_back(real ? 1 : 0);
    group.push_back(static_cast<std::uint16_t>(m));
    if (!real) periods_.emplace_back(std::max<std::uint64_t>(metrics[m].period, 1));
  }
  // Classes are kept apart only when there is more than one: otherwise a class is all threads.
  bool present[storage::kThreadClassCount + 1] = {};
  for (auto c : classOf_)
    if (c >= 1 && c <= storage::kThreadClassCount) present[c] = true;
  population_.push_back(storage::kAllThreads);
  if (std::count(std::begin(present), std::end(present), true) > 1) {
    for (std::uint8_t c = 1; c <= storage::kThreadClassCount; ++c) {
      if (!present[c]) continue;
      sliceOf_[c] = static_cast<std::uint8_t>(population_.size());
      population_.push_back(c);
    }
    sliceOfProfile_.reserve(classOf_.size());
    for (auto c : classOf_) sliceOfProfile_.push_back(c <= storage::kThreadClassCount ? sliceOf_[c] : 0);
  }
  const std::size_t slices = population_.size();
  // Count cells: a leaf's inclusive summaries are its exclusive ones (one scope), and all
  // threads' slice is only fed by profiles without a class slice of their own.
  nodeCells_.resize(std::size_t{nodes_} + 1);
  for (std::uint32_t n = 0; n < nodes_; ++n)
    nodeCells_[n + 1] = nodeCells_[n] + counts_.size() * (leaf_[n] ? 1 : kScopes);
  bool allThreadsFed = slices == 1;
  for (auto c : classOf_) allThreadsFed = allThreadsFed || c > storage::kThreadClassCount || sliceOf_[c] == 0;
  std::size_t cells = 0;
  for (std::size_t slice = 0; slice < slices; ++slice) {
    if (slice == 0 && !allThreadsFed) {
      countSliceStart_[slice] = kNoCells;
      continue;
    }
    countSliceStart_[slice] = cells;
    cells += nodeCells_[nodes_];
  }
  countAcc_.resize(cells);
  countHist_.resize(cells);
  realStacks_.resize(slices * nodes_ * reals_.size() * kScopes);
  batchLeaf_.resize(slices * reals_.size() * kScopes);
  batchLeafUsed_.resize(batchLeaf_.size(), 0);
}

void SummaryTable::beginBatch(std::size_t batchIndex, std::span<const ProfileInfo> batch) {
  batchIndex_ = batchIndex;
  // A node's values come in profile order (NodeValueSink) and the batches in id order: every
  // count cell sees its profiles in ascending id order (IntAccumulator::accumulateAscending).
  for (const ProfileInfo& p : batch) {
    if (p.id == kNoIndex || p.id >= classOf_.size())
      throw std::logic_error(fmt::format("summaries: profile {} has no thread class", p.id));
    if (lastId_ != kNoIndex && p.id <= lastId_)
      throw std::logic_error(fmt::format("summaries: profile {} after profile {}", p.id, lastId_));
    lastId_ = p.id;
  }
}

void SummaryTable::addBlock(storage::MetricId metric, storage::MetricScope scope,
                            std::span<const storage::ProfileId> profiles, std::span<const std::uint64_t> values) {
  const std::size_t slot = slotOf_.at(metric);
  const auto s = static_cast<std::size_t>(scope);
  const bool leaf = leaf_[node_] != 0;
  if (leaf && scope != storage::MetricScope::Exclusive)
    throw std::logic_error(fmt::format("summaries: inclusive values of leaf node {}", node_));
  if (isReal_[metric]) {
    addRealBlock(slot, s, profiles, values);
    return;
  }
  // A count cell: the node's cells in the profile's slice, then the slot's (a leaf's one scope).
  const std::size_t within = nodeCells_[node_] + (leaf ? slot : 2 * slot + s);
  const metrics::PeriodDivisor period = periods_[slot];
  if (population_.size() == 1) {  // one slice, whose cells start at 0
    countAcc_[within].accumulateAscending(profiles, values);
    countHist_[within].addDivided(values, period);
    return;
  }
  // Classes kept apart: each value into its profile's class slice only.
  for (std::size_t k = 0; k < values.size(); ++k) {
    const std::size_t at = countSliceStart_[sliceOf(profiles[k])] + within;
    countAcc_[at].accumulateAscending(profiles[k], values[k]);
    countHist_[at].add(period.divide(values[k]));
  }
}

// Real-valued metrics go into all threads' slice and the class's: a sum of the classes' would
// add the doubles in another order than the all-threads accumulator's.
void SummaryTable::addRealBlock(std::size_t slot, std::size_t scope, std::span<const storage::ProfileId> profiles,
                                std::span<const std::uint64_t> values) {
  for (std::size_t k = 0; k < values.size(); ++k) {
    const std::size_t extra = population_.size() == 1 ? 0 : sliceOf(profiles[k]);
    for (std::size_t slice : {std::size_t{0}, extra}) {
      const std::size_t at = (slice * reals_.size() + slot) * kScopes + scope;
      batchLeaf_[at].accumulate(profiles[k], fromBits(values[k]));
      batchLeafUsed_[at] = 1;
      if (extra == 0) break;
    }
  }
}

// The batch's leaf of every (slice, real metric, scope) the node has values of, onto its stack.
void SummaryTable::pushRealLeaves(std::uint32_t node) {
  const std::size_t perSlice = reals_.size() * kScopes;
  for (std::size_t slice = 0; slice < population_.size(); ++slice)
    for (std::size_t k = 0; k < perSlice; ++k) {
      const std::size_t at = slice * perSlice + k;
      if (!batchLeafUsed_[at]) continue;
      pushPiece(realStacks_[(slice * nodes_ + node) * perSlice + k], {0, batchIndex_, batchLeaf_[at]});
      batchLeaf_[at] = {};
      batchLeafUsed_[at] = 0;
    }
}

// One node's partial accumulators, as exchange entries: key, number of pieces, then the encoded
// accumulator and histogram (count metrics: one) or the pieces (level, index, encoded
// accumulator) of a real-valued metric.
void SummaryTable::packNode(Packer& p, std::uint32_t n) const {
  const std::size_t slices = population_.size();
  std::vector<metrics::IntAccumulator> acc(slices);
  std::vector<metrics::LogLinearHistogram> histogram(slices);
  std::vector<std::string> accBytes(slices), histogramBytes(slices);
  for (std::size_t slot = 0; slot < counts_.size(); ++slot) {
    for (std::size_t scope = 0; scope < kScopes; ++scope) {
      // A leaf's inclusive summaries are its exclusive ones, one cell: encoded once, packed under
      // both scopes' keys.
      if (scope == 0 || !leaf_[n]) {
        // Slice 0 (all threads) holds the values of profiles without a class slice; it becomes
        // the sum of every slice (addCount), each builder's histogram made once.
        for (std::size_t slice = 0; slice < slices; ++slice) {
          if (!hasCountCells(slice)) {
            acc[slice] = {};
            histogram[slice] = {};
            continue;
          }
          acc[slice] = countAcc_[countIndex(slice, n, slot, heldIn(n, scope))];
          histogram[slice] = countHist_[countIndex(slice, n, slot, heldIn(n, scope))].histogram();
          if (slice == 0) continue;
          acc[0].combine(acc[slice]);
          histogram[0].merge(histogram[slice]);
        }
        for (std::size_t slice = 0; slice < slices; ++slice) {
          if (acc[slice].count() == 0) continue;
          accBytes[slice] = metrics::encode(acc[slice]);
          histogramBytes[slice] = metrics::encode(histogram[slice]);
        }
      }
      for (std::size_t slice = 0; slice < slices; ++slice) {
        if (acc[slice].count() == 0) continue;
        packKey(p, {n, counts_[slot], static_cast<std::uint8_t>(scope), population_[slice]});
        p.u64(1);
        p.text(accBytes[slice]);
        p.text(histogramBytes[slice]);
      }
    }
  }
  for (std::size_t slot = 0; slot < reals_.size(); ++slot) {
    for (std::size_t scope = 0; scope < kScopes; ++scope) {
      for (std::size_t slice = 0; slice < population_.size(); ++slice) {
        const auto& stack = realStacks_[realIndex(slice, n, slot, heldIn(n, scope))];
        if (stack.empty()) continue;
        packKey(p, {n, reals_[slot], static_cast<std::uint8_t>(scope), population_[slice]});
        p.u64(stack.size());
        for (const auto& piece : stack) {
          p.u64(piece.level);
          p.u64(piece.index);
          p.text(metrics::encode(piece.acc));
        }
      }
    }
  }
}

void SummaryTable::exchangeAndWrite(const Comm& comm, storage::ShardWriter& shard) {
  std::vector<std::vector<std::byte>> outgoing(static_cast<std::size_t>(comm.size()));
  for (int r = 0; r < comm.size(); ++r) {
    Packer p;
    for (std::uint32_t n = ownerStart(nodes_, r, comm.size()); n < ownerStart(nodes_, r + 1, comm.size()); ++n)
      packNode(p, n);
    outgoing[static_cast<std::size_t>(r)] = p.take();
  }
  // Packed: the partial accumulators (the histogram builders are most of a run's memory) are
  // not needed any more; the exchange and the merge below hold only the packed parts.
  std::vector<metrics::IntAccumulator>().swap(countAcc_);
  std::vector<metrics::HistogramBuilder>().swap(countHist_);
  std::vector<std::vector<Piece>>().swap(realStacks_);
  faultPoint(comm, "exchange");
  const auto incoming = comm.alltoall(outgoing);
  std::vector<std::vector<std::byte>>().swap(outgoing);

  // Each part holds its nodes in ascending order: the parts are read side by side, one node at
  // a time, and each node's summaries are combined and written before the next node's are
  // decoded. Parts arrive in rank order, which is batch order: folding real-valued pieces in
  // that order repeats exactly what one process would have done.
  const std::uint32_t myFirst = ownerStart(nodes_, comm.rank(), comm.size());
  const std::uint32_t myEnd = ownerStart(nodes_, comm.rank() + 1, comm.size());
  std::vector<Unpacker> parts;
  std::vector<SummaryKey> next(incoming.size());  // each part's next key (node myEnd: none left)
  auto advance = [&](std::size_t r) {
    next[r] = parts[r].done() ? SummaryKey{myEnd} : unpackKey(parts[r]);
    if (next[r].node < myFirst || next[r].node > myEnd || (next[r].node == myEnd && !parts[r].done()))
      throw std::logic_error("summary for a node outside this rank's range");
  };
  for (std::size_t r = 0; r < incoming.size(); ++r) {
    parts.emplace_back(incoming[r]);
    advance(r);
  }
  NodeEntries entries(isReal_);
  for (std::uint32_t node = myFirst; node < myEnd; ++node) {
    entries.clear();
    for (std::size_t r = 0; r < parts.size(); ++r) {
      for (; next[r].node == node; advance(r)) entries.add(next[r], parts[r]);
      if (next[r].node < node) throw std::logic_error("summaries of a part out of node order");
    }
    entries.write(shard);
  }
}

}  // namespace csp::reduce::dbsink
