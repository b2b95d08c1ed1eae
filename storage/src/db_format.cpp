#include "db_format.hpp"

#include <fmt/format.h>
#include <rocksdb/convenience.h>
#include <rocksdb/env.h>
#include <rocksdb/table.h>
#include <thread>

#include <algorithm>
#include <array>
#include <bit>
#include <cstdarg>
#include <cstdio>
#include <initializer_list>
#include <optional>

namespace csp::storage::format {

const std::vector<std::string>& shardFamilies() {
  static const std::vector<std::string> families = {kCctNodes,      kCctChildren, kSummaries,       kValuesByProfile,
                                                    kValuesByNode,  kRegionNodes, kRegionSummaries, kRegionEvents,
                                                    kDistributions, kCommEvents};
  return families;
}

// --- keys ------------------------------------------------------------------------------------

std::string nodeKey(NodeId id) {
  std::string k;
  putBe32(k, id);
  return k;
}

std::string childKey(NodeId parent, NodeId child) {
  std::string k;
  putBe32(k, parent);
  putBe32(k, child);
  return k;
}

std::string summaryKey(std::uint32_t id, MetricId metric, MetricScope scope) {
  std::string k;
  putBe32(k, id);
  putBe16(k, metric);
  k.push_back(static_cast<char>(scope));
  return k;
}

std::string distributionKey(NodeId id, MetricId metric, MetricScope scope, std::uint8_t population) {
  std::string k = summaryKey(id, metric, scope);
  k.push_back(static_cast<char>(population));
  return k;
}

std::string encodeDistribution(std::string_view accumulator, std::string_view histogram) {
  std::string v;
  putBytes(v, accumulator);
  putBytes(v, histogram);
  return v;
}

AccumulatorKeyHead readAccumulatorKeyHead(Reader& key) {
  AccumulatorKeyHead h;
  h.id = key.be32();
  h.metric = key.be16();
  const std::uint8_t scope = key.u8();
  if (scope > 1) key.fail("unknown scope");
  h.scope = static_cast<MetricScope>(scope);
  return h;
}

DistributionView decodeDistributionView(std::string_view key, std::string_view value) {
  DistributionView d;
  Reader k(key, "distribution key");
  d.head = readAccumulatorKeyHead(k);
  d.population = k.u8();
  if (d.population > kThreadClassCount) k.fail("unknown thread class");
  k.expectDone();
  Reader v(value, "distribution");
  d.accumulator = v.textView();
  d.histogram = v.textView();
  v.expectDone();
  if (d.population == kAllThreads && !d.accumulator.empty()) v.fail("an all-threads entry with an accumulator");
  if (d.population != kAllThreads && d.accumulator.empty()) v.fail("a thread-class entry without an accumulator");
  return d;
}

DistributionEntry decodeDistribution(std::string_view key, std::string_view value) {
  const DistributionView d = decodeDistributionView(key, value);
  return {d.head.metric, d.head.scope, d.population, std::string(d.accumulator), std::string(d.histogram)};
}

std::string profileBlockKey(ProfileId profile, NodeId firstNode) { return childKey(profile, firstNode); }

std::string nodeBlockKey(NodeId node, MetricId metric, MetricScope scope, ProfileId firstProfile) {
  std::string k = summaryKey(node, metric, scope);
  putBe32(k, firstProfile);
  return k;
}

std::string prefixEnd(std::string_view prefix) {
  std::string end(prefix);
  while (!end.empty() && static_cast<unsigned char>(end.back()) == 0xff) end.pop_back();
  if (!end.empty()) end.back() = static_cast<char>(static_cast<unsigned char>(end.back()) + 1);
  return end;  // empty: no upper bound
}

// --- node and region values ------------------------------------------------------------------

std::string encodeCctNode(const CctNode& n) {
  std::string v;
  v.push_back(static_cast<char>(n.kind));
  putVarint(v, n.parent == kNoIndex ? 0 : std::uint64_t{n.parent} + 1);
  putVarint(v, n.name);
  putVarint(v, n.file);
  putVarint(v, n.module);
  putVarint(v, n.line);
  return v;
}

CctNode decodeCctNode(std::string_view value) {
  Reader r(value, "CCT node");
  CctNode n;
  const std::uint8_t kind = r.u8();
  if (kind > static_cast<std::uint8_t>(ScopeKind::Stmt)) r.fail(fmt::format("unknown scope kind {}", kind));
  n.kind = static_cast<ScopeKind>(kind);
  const std::uint64_t parent = r.u64();
  if (parent > UINT32_MAX) r.fail("parent out of range");
  n.parent = parent == 0 ? kNoIndex : static_cast<NodeId>(parent - 1);
  n.name = r.u32();
  n.file = r.u32();
  n.module = r.u32();
  n.line = r.u32();
  r.expectDone();
  return n;
}

std::string encodeRegionNode(const RegionNode& n) {
  std::string v;
  putVarint(v, n.parent == kNoIndex ? 0 : std::uint64_t{n.parent} + 1);
  putVarint(v, n.name);
  putVarint(v, n.dynamicId);
  return v;
}

RegionNode decodeRegionNode(std::string_view value) {
  Reader r(value, "region node");
  RegionNode n;
  const std::uint64_t parent = r.u64();
  if (parent > UINT32_MAX) r.fail("parent out of range");
  n.parent = parent == 0 ? kNoIndex : static_cast<RegionId>(parent - 1);
  n.name = r.u32();
  n.dynamicId = r.u64();
  r.expectDone();
  return n;
}

// --- per-thread value blocks -----------------------------------------------------------------

namespace {

// Metric and scope folded into one small integer so that a block lists a node's values compactly.
std::uint32_t column(MetricId metric, MetricScope scope) {
  return std::uint32_t{metric} << 1 | static_cast<std::uint32_t>(scope);
}

}  // namespace

namespace {

// The header of every profile block: how many metrics are scaled (maybe none), then each one's id
// and scale.
std::vector<char> profileBlockHeader(std::span<const ValueScale> scales) {
  std::size_t n = 0;
  for (const auto& scale : scales) n += scale.scale() != 1 ? 1 : 0;
  std::vector<char> header(10 + 20 * n);
  char* out = varintAt(header.data(), n);
  for (std::size_t m = 0; m < scales.size(); ++m)
    if (scales[m].scale() != 1) out = varintAt(varintAt(out, m), scales[m].scale());
  header.resize(static_cast<std::size_t>(out - header.data()));
  return header;
}

}  // namespace

}  // namespace csp::storage::format

namespace csp::storage {

ProfileBlockEncoder::ProfileBlockEncoder(std::span<const ValueScale> scales)
    : metrics_(scales.size()), header_(format::profileBlockHeader(scales)), bytes_(4096) {
  if (scales.size() > kMaxMetrics)
    throw std::invalid_argument(
        fmt::format("ProfileBlockEncoder: {} metrics, more than {}", scales.size(), kMaxMetrics));
  for (std::size_t m = 0; m < scales.size(); ++m) {
    scale_[m] = scales[m];
    if (scales[m].scale() != 1) scaled_ |= std::uint32_t{1} << m;
  }
}

ProfileBlockEncoder::Grown ProfileBlockEncoder::grow(std::size_t used, std::size_t room) {
  if (bytes_.size() - used < room) bytes_.resize(2 * bytes_.size() + room);
  return {bytes_.data(), bytes_.data() + used, bytes_.data() + bytes_.size()};
}

ProfileBlocks ProfileBlockEncoder::finish(Profile profile) {
  if (profile.inBlock_ > 0) profile.closeBlock();
  ProfileBlocks out;
  out.bytes.assign(profile.base_, profile.out_);
  out.blocks = blocks_;
  out.values = profile.values_;
  out.made = true;
  return out;
}

}  // namespace csp::storage

namespace csp::storage::format {

namespace {

// A profile's blocks, node group by node group: the cut rule (a block closes after the group that
// brings it to kProfileBlockValues), the node deltas and the groups' column patterns (format 4.0),
// shared by both forms of input.
class ProfileBlockWriter {
 public:
  ProfileBlockWriter(ProfileId profile, std::span<const ValueScale> scales, const EmitBlock& emit)
      : profile_(profile), scales_(scales), header_(profileBlockHeader(scales)), emit_(emit), bytes_(4096) {}
  // A group at `node` of the values in `columns` (ascending; at least one); then value() for
  // each. The group's varints (at most 10 bytes each; a scaled value 20) are written in place:
  // the bulk of csp-prof-mpi's output. `mirrored`: the columns are exclusive ones, and each
  // value is also the node's inclusive value of its metric (2n values in all).
  void group(NodeId node, std::span<const std::uint32_t> columns, bool mirrored) {
    if (columns.back() < 64) {
      std::uint64_t mask = 0;
      for (const std::uint32_t c : columns) mask |= std::uint64_t{1} << c;
      group(node, mask, columns.size(), mirrored);
      return;
    }
    open(node, columns.size());
    std::size_t known = patterns_;
    for (std::size_t i = 0; i < patterns_ && known == patterns_; ++i)
      if (pattern_[i].mirrored == mirrored &&
          std::equal(pattern_[i].columns.begin(), pattern_[i].columns.end(), columns.begin(), columns.end()))
        known = i;
    name(node, known, columns.size(), mirrored, [&](std::size_t j) { return columns[j]; });
    if (known == patterns_ && patterns_ < kNewPattern) {
      Pattern& p = pattern_[patterns_++];
      p.mask = 0;
      p.columns.assign(columns.begin(), columns.end());
      p.mirrored = mirrored;
    }
  }
  // The same for columns below 64, given as a bit mask of `n` >= 1 bits: the common case, found
  // without a list of columns.
  void group(NodeId node, std::uint64_t mask, std::size_t n, bool mirrored) {
    open(node, n);
    std::size_t known = patterns_;
    if (lastPattern_ < patterns_ && pattern_[lastPattern_].mask == mask &&
        pattern_[lastPattern_].mirrored == mirrored && pattern_[lastPattern_].columns.empty())
      known = lastPattern_;
    for (std::size_t i = 0; i < patterns_ && known == patterns_; ++i)
      if (pattern_[i].mask == mask && pattern_[i].mirrored == mirrored && pattern_[i].columns.empty()) known = i;
    std::uint64_t rest = mask;
    name(node, known, n, mirrored, [&](std::size_t) {
      const auto c = static_cast<std::uint32_t>(std::countr_zero(rest));
      rest &= rest - 1;
      return c;
    });
    if (known < patterns_) {
      lastPattern_ = known;
    } else if (patterns_ < kNewPattern) {
      Pattern& p = pattern_[patterns_];
      p.mask = mask;
      p.columns.clear();
      p.mirrored = mirrored;
      lastPattern_ = patterns_++;
    }
  }
  void value(std::uint32_t column, std::uint64_t value) {
    const std::size_t metric = column >> 1;
    if (metric < scales_.size())
      used_ = static_cast<std::size_t>(scales_[metric].put(bytes_.data() + used_, value) - bytes_.data());
    else
      put(value);
  }
  // After a group: closes the block when it is full or the profile ends.
  void endGroup(bool last) {
    if (inBlock_ < kProfileBlockValues && !last) return;
    emit_(profileBlockKey(profile_, first_), std::string_view(bytes_.data(), used_));
    used_ = 0;
    inBlock_ = 0;
  }

 private:
  // A block's pattern: its columns as a mask when all are below 64 (`columns` empty), else as a
  // list.
  struct Pattern {
    std::uint64_t mask = 0;
    std::vector<std::uint32_t> columns;
    bool mirrored = false;
  };
  // Room for a group of n values, and the block's header when the group opens a block.
  void open(NodeId node, std::size_t n) {
    if (bytes_.size() - used_ < header_.size() + 40 * (n + 1))
      bytes_.resize(2 * bytes_.size() + header_.size() + 40 * (n + 1));
    if (inBlock_ == 0) {
      first_ = previous_ = node;
      std::copy(header_.begin(), header_.end(), bytes_.data() + used_);
      used_ += header_.size();
      patterns_ = 0;
    }
  }
  // The group's first varint: the node delta and the block's pattern `known`, or (known ==
  // patterns_: a pattern the block has not used yet, or one beyond those it can name) the
  // columns spelled out, column(j) for j < n ascending.
  template <typename Column>
  void name(NodeId node, std::size_t known, std::size_t n, bool mirrored, Column column) {
    const std::uint64_t delta = std::uint64_t{node - previous_} << kPatternBits;
    if (known < patterns_) {
      put(delta | known);
    } else {
      put(delta | kNewPattern);
      put(std::uint64_t{n} << 1 | (mirrored ? 1 : 0));
      std::uint32_t last = 0;
      for (std::size_t j = 0; j < n; ++j) {
        const std::uint32_t c = column(j);
        put(j == 0 ? c : c - last - 1);
        last = c;
      }
    }
    previous_ = node;
    inBlock_ += mirrored ? 2 * n : n;
  }
  void put(std::uint64_t v) { used_ = static_cast<std::size_t>(varintAt(bytes_.data() + used_, v) - bytes_.data()); }
  ProfileId profile_;
  std::span<const ValueScale> scales_;
  std::vector<char> header_;
  const EmitBlock& emit_;
  std::vector<char> bytes_;  // the block: bytes_[0, used_)
  std::size_t used_ = 0;
  NodeId first_ = 0, previous_ = 0;
  std::size_t inBlock_ = 0;
  std::array<Pattern, kNewPattern> pattern_;  // the block's patterns [0, patterns_)
  std::size_t patterns_ = 0, lastPattern_ = 0;
};

}  // namespace

void encodeProfileBlocks(ProfileId profile, const std::vector<ProfileValue>& values, std::span<const ValueScale> scales,
                         const EmitBlock& emit) {
  ProfileBlockWriter w(profile, scales, emit);
  std::vector<std::uint32_t> columns;
  std::size_t i = 0;
  while (i < values.size()) {
    const NodeId node = values[i].node;
    std::size_t end = i;
    while (end < values.size() && values[end].node == node) ++end;
    // Sorted by (metric, scope): mirrored when every metric has both scopes, of equal value.
    bool mirrored = (end - i) % 2 == 0;
    for (std::size_t j = i; mirrored && j < end; j += 2)
      mirrored = values[j].metric == values[j + 1].metric && values[j].scope == MetricScope::Exclusive &&
                 values[j + 1].scope == MetricScope::Inclusive && values[j].value == values[j + 1].value;
    columns.clear();
    for (std::size_t j = i; j < end; j += mirrored ? 2 : 1)
      columns.push_back(column(values[j].metric, values[j].scope));
    w.group(node, columns, mirrored);
    for (std::size_t j = i; j < end; j += mirrored ? 2 : 1)
      w.value(column(values[j].metric, values[j].scope), values[j].value);
    i = end;
    w.endGroup(i == values.size());
  }
}

std::uint64_t emitProfileBlocks(ProfileId profile, const ProfileBlocks& blocks, const EmitBlock& emit) {
  std::uint32_t start = 0;
  for (const auto& b : blocks.blocks) {
    emit(profileBlockKey(profile, b.firstNode), std::string_view(blocks.bytes.data() + start, b.end - start));
    start = b.end;
  }
  return blocks.values;
}

namespace {

// Where a profile's values end: the entries from there on are all zero, so the group that reaches
// it is the profile's last and closes its block.
std::size_t valuesEndOf(const ProfileValueColumns& values) {
  std::size_t end = values.node.size();
  while (end > 0 && values.exclusive[end - 1] == 0 && values.inclusive[end - 1] == 0) --end;
  return end;
}

// encodeProfileBlocks of a profile whose metrics all have a scale (1 for none) and are below
// ProfileBlockEncoder::kMaxMetrics (the common case): each node's values are spread out by metric
// and handed to the encoder that csp-prof-mpi's values pass feeds directly.
std::uint64_t encodeNarrowProfileBlocks(ProfileId profile, const ProfileValueColumns& values,
                                        std::span<const ValueScale> scales, const EmitBlock& emit) {
  ProfileBlockEncoder encoder(scales);
  auto encoding = encoder.begin();
  std::array<std::uint64_t, ProfileBlockEncoder::kMaxMetrics> exclusive{}, inclusive{};
  const std::size_t size = values.node.size();
  for (std::size_t i = 0, end = 0; i < size; i = end) {
    const NodeId node = values.node[i];
    for (end = i; end < size && values.node[end] == node; ++end) {
      exclusive[values.metric[end]] = values.exclusive[end];
      inclusive[values.metric[end]] = values.inclusive[end];
    }
    encoding.addNode(node, exclusive.data(), inclusive.data());
    for (std::size_t k = i; k < end; ++k) exclusive[values.metric[k]] = inclusive[values.metric[k]] = 0;
  }
  return emitProfileBlocks(profile, encoder.finish(encoding), emit);
}

}  // namespace

std::uint64_t encodeProfileBlocks(ProfileId profile, const ProfileValueColumns& values,
                                  std::span<const ValueScale> scales, const EmitBlock& emit) {
  MetricId most = 0;  // the largest metric id
  for (const MetricId m : values.metric) most = std::max(most, m);
  if (scales.size() <= ProfileBlockEncoder::kMaxMetrics && most < ProfileBlockEncoder::kMaxMetrics) {
    if (most < scales.size()) return encodeNarrowProfileBlocks(profile, values, scales, emit);
    // Metrics beyond the scales are written unscaled, as with a scale of 1.
    std::vector<ValueScale> padded(scales.begin(), scales.end());
    padded.resize(std::size_t{most} + 1);
    return encodeNarrowProfileBlocks(profile, values, padded, emit);
  }
  ProfileBlockWriter w(profile, scales, emit);
  const std::size_t size = values.node.size();
  std::uint64_t written = 0;
  std::vector<std::uint32_t> columns;
  auto nonZeroAt = [&](std::size_t k) {
    return std::size_t{values.exclusive[k] != 0} + std::size_t{values.inclusive[k] != 0};
  };
  const std::size_t valuesEnd = valuesEndOf(values);
  std::size_t i = 0;
  while (i < size) {
    const NodeId node = values.node[i];
    std::size_t end = i, n = 0;
    bool mirrored = true;  // every metric's inclusive value is its exclusive one (a CCT leaf)
    // The columns as masks while they are below 64 (metrics ascend at a node).
    std::uint64_t exclusiveMask = 0, inclusiveMask = 0;
    for (; end < size && values.node[end] == node; ++end) {
      n += nonZeroAt(end);
      mirrored = mirrored && values.exclusive[end] == values.inclusive[end];
      const std::uint32_t c = column(values.metric[end], MetricScope::Exclusive) & 63;
      exclusiveMask |= std::uint64_t{values.exclusive[end] != 0} << c;
      inclusiveMask |= std::uint64_t{values.inclusive[end] != 0} << (c + 1);
    }
    if (n == 0) {
      i = end;
      continue;
    }
    if (values.metric[end - 1] < 32) {
      w.group(node, mirrored ? exclusiveMask : exclusiveMask | inclusiveMask, mirrored ? n / 2 : n, mirrored);
    } else {
      columns.clear();
      for (std::size_t k = i; k < end; ++k) {
        if (values.exclusive[k]) columns.push_back(column(values.metric[k], MetricScope::Exclusive));
        if (values.inclusive[k] && !mirrored) columns.push_back(column(values.metric[k], MetricScope::Inclusive));
      }
      w.group(node, columns, mirrored);
    }
    for (std::size_t k = i; k < end; ++k) {
      if (values.exclusive[k]) w.value(column(values.metric[k], MetricScope::Exclusive), values.exclusive[k]);
      if (values.inclusive[k] && !mirrored)
        w.value(column(values.metric[k], MetricScope::Inclusive), values.inclusive[k]);
    }
    written += n;
    w.endGroup(end >= valuesEnd);
    i = end;
  }
  return written;
}

namespace {

// The scale header of a block of format 2.0 or later: how many metrics are scaled, then each
// one's id and scale.
std::vector<ValueScale> readScales(Reader& r, std::size_t blockBytes) {
  std::vector<ValueScale> scales;
  const std::uint64_t n = r.u64();
  if (n > blockBytes) r.fail("more scaled metrics than bytes");
  for (std::uint64_t i = 0; i < n; ++i) {
    const std::uint64_t metric = r.u64(), scale = r.u64();
    if (metric > UINT16_MAX || metric < scales.size() || scale < 2) r.fail("bad scale of a metric");
    scales.resize(metric + 1);
    scales[metric] = ValueScale(scale);
  }
  return scales;
}

constexpr std::uint64_t kMaxColumn = std::uint64_t{UINT16_MAX} << 1 | 1;

// The pieces every profile block layout shares: the next group's node, its j-th column from the
// previous one `c` (the first is the column itself, later ones column - previous - 1), and a
// value of it (both scopes' for a mirrored group).
void advanceNode(Reader& r, std::uint64_t& node, std::uint64_t delta, bool& firstGroup) {
  if (firstGroup ? delta != 0 : delta == 0) r.fail("node ids not strictly ascending");
  firstGroup = false;
  node += delta;
  if (node > UINT32_MAX) r.fail("node id out of range");
}
std::uint64_t nextColumn(Reader& r, std::uint64_t j, std::uint64_t c, bool mirrored) {
  const std::uint64_t step = r.u64();
  c = j == 0 ? step : c + step + 1;
  if (c > kMaxColumn) r.fail("metric id out of range");
  if (mirrored && (c & 1) != 0) r.fail("inclusive value in a group of exclusive values that are also inclusive");
  return c;
}
void readValue(Reader& r, const std::vector<ValueScale>& scales, std::uint64_t node, std::uint64_t c, bool mirrored,
               std::vector<ProfileValue>& out) {
  const std::uint64_t v = (c >> 1) < scales.size() ? scales[c >> 1].read(r) : r.u64();
  if (v == 0) r.fail("stored zero value");
  out.push_back({static_cast<NodeId>(node), static_cast<MetricId>(c >> 1), static_cast<MetricScope>(c & 1), v});
  if (mirrored) out.push_back({static_cast<NodeId>(node), static_cast<MetricId>(c >> 1), MetricScope::Inclusive, v});
}

// Format 4.0: groups name their columns by pattern.
void decodePatternGroups(Reader& r, std::uint64_t node, const std::vector<ValueScale>& scales,
                         std::vector<ProfileValue>& out) {
  struct Pattern {
    std::vector<std::uint32_t> columns;
    bool mirrored = false;
  };
  std::array<Pattern, kNewPattern> patterns;
  std::size_t known = 0;
  bool firstGroup = true;
  while (!r.done()) {
    const std::uint64_t head = r.u64();
    const std::uint64_t code = head & kNewPattern;
    advanceNode(r, node, head >> kPatternBits, firstGroup);
    const Pattern* p = nullptr;
    Pattern local;
    if (code == kNewPattern) {
      const std::uint64_t count = r.u64();
      const std::uint64_t n = count >> 1;
      if (n == 0) r.fail("node without values");
      if (n > r.remaining()) r.fail("more values than bytes");
      Pattern& made = known < patterns.size() ? patterns[known++] : local;
      made.mirrored = (count & 1) != 0;
      made.columns.clear();
      std::uint64_t c = 0;
      for (std::uint64_t j = 0; j < n; ++j) {
        c = nextColumn(r, j, c, made.mirrored);
        made.columns.push_back(static_cast<std::uint32_t>(c));
      }
      p = &made;
    } else {
      if (code >= known) r.fail("group names a column pattern the block has not defined");
      p = &patterns[code];
    }
    for (const std::uint32_t c : p->columns) readValue(r, scales, node, c, p->mirrored, out);
  }
}

}  // namespace

void decodeProfileBlock(std::string_view key, std::string_view value, std::vector<ProfileValue>& out,
                        std::uint32_t formatMajor) {
  Reader k(key, "values_by_profile key");
  k.be32();
  std::uint64_t node = k.be32();
  k.expectDone();
  Reader r(value, "values_by_profile block");
  if (formatMajor >= 4) {
    const auto scales = readScales(r, value.size());
    if (r.done()) r.fail("block without values");
    decodePatternGroups(r, node, scales, out);
    return;
  }
  // Format 2.0: a block of scaled metrics names them first (a format 1 block starts with the
  // first node's delta, 0).
  std::vector<ValueScale> scales;
  if (!r.done() && static_cast<unsigned char>(value[0]) != 0) scales = readScales(r, value.size());
  const bool mirroredGroups = formatMajor >= 3;
  bool firstGroup = true;
  while (!r.done()) {
    advanceNode(r, node, r.u64(), firstGroup);
    const std::uint64_t head = r.u64();
    const bool mirrored = mirroredGroups && (head & 1) != 0;
    const std::uint64_t count = mirroredGroups ? head >> 1 : head;
    if (count == 0) r.fail("node without values");
    std::uint64_t c = 0;
    for (std::uint64_t j = 0; j < count; ++j) {
      c = nextColumn(r, j, c, mirrored);
      readValue(r, scales, node, c, mirrored, out);
    }
  }
}

void decodeNodeBlock(std::string_view key, std::string_view value, std::vector<NodeValue>& out,
                     std::uint32_t formatMajor) {
  Reader k(key, "values_by_node key");
  const auto head = readAccumulatorKeyHead(k);  // node, metric, scope: the same head
  std::uint64_t profile = k.be32();
  k.expectDone();
  Reader r(value, "values_by_node block");
  ValueScale scale;
  if (formatMajor >= 4) {
    const std::uint64_t s = r.u64();
    if (s == 0) r.fail("bad scale");
    scale = ValueScale(s);
    const std::uint64_t layout = r.u64();
    if (layout & 1) {
      // The block's profiles as a bitmap from its first profile, then their values in order.
      const std::uint64_t span = layout >> 1;
      if (span == 0 || span > r.remaining() * 8) r.fail("profile bitmap longer than the block");
      const std::string_view bits = r.take((span + 7) / 8);
      const auto byteAt = [&](std::uint64_t i) { return static_cast<unsigned char>(bits[i]); };
      if ((byteAt(0) & 1) == 0 || ((byteAt((span - 1) / 8) >> ((span - 1) % 8)) & 1) == 0 ||
          (span % 8 != 0 && (byteAt(span / 8) >> (span % 8)) != 0))
        r.fail("profile bitmap does not span its first to its last profile");
      for (std::uint64_t i = 0; i < bits.size(); ++i)
        for (unsigned b = byteAt(i); b != 0; b &= b - 1) {
          const std::uint64_t at = profile + i * 8 + static_cast<unsigned>(std::countr_zero(b));
          if (at > UINT32_MAX) r.fail("profile id out of range");
          const std::uint64_t v = scale.read(r);
          if (v == 0) r.fail("stored zero value");
          out.push_back({head.metric, head.scope, static_cast<ProfileId>(at), v});
        }
      r.expectDone();
      return;
    }
    if (layout != 0) r.fail("unknown block layout");
    if (r.done()) r.fail("block without values");
  } else if (!r.done() && static_cast<unsigned char>(value[0]) != 0) {
    // Format 2.0: a block of a scaled metric starts with its scale (format 1: with the first
    // profile's delta, 0).
    const std::uint64_t s = r.u64();
    if (s < 2) r.fail("bad scale");
    scale = ValueScale(s);
  }
  bool firstEntry = true;
  while (!r.done()) {
    const std::uint64_t delta = r.u64();
    if (firstEntry ? delta != 0 : delta == 0) r.fail("profile ids not strictly ascending");
    firstEntry = false;
    profile += delta;
    if (profile > UINT32_MAX) r.fail("profile id out of range");
    const std::uint64_t v = scale.read(r);
    if (v == 0) r.fail("stored zero value");
    out.push_back({head.metric, head.scope, static_cast<ProfileId>(profile), v});
  }
}

std::string_view encodeNodeBlock(std::span<const ProfileId> profiles, std::span<const std::uint64_t> values,
                                 const ValueScale& scale, std::vector<char>& buffer) {
  const std::size_t n = profiles.size();
  // A bitmap over the block's span when it takes at most a byte per value (the list takes at
  // least that for the profile deltas); its values read without a varint each.
  const std::uint64_t span = std::uint64_t{profiles[n - 1]} - profiles[0] + 1;
  const std::uint64_t bitmapBytes = (span + 7) / 8;
  const bool bitmap = bitmapBytes <= n;
  const std::size_t room = 20 + (bitmap ? bitmapBytes : 10 * n) + 20 * n;
  if (buffer.size() < room) buffer.resize(std::max(room, 2 * buffer.size()));
  char* const begin = buffer.data();
  char* at = varintAt(begin, scale.scale());
  if (bitmap) {
    at = varintAt(at, span << 1 | 1);
    std::fill(at, at + bitmapBytes, 0);
    for (const ProfileId p : profiles) {
      const std::uint64_t i = p - profiles[0];
      at[i / 8] = static_cast<char>(static_cast<unsigned char>(at[i / 8]) | 1u << (i % 8));
    }
    at += bitmapBytes;
    for (std::size_t i = 0; i < n; ++i) at = scale.put(at, values[i]);
  } else {
    at = varintAt(at, 0);
    for (std::size_t i = 0; i < n; ++i) {
      at = varintAt(at, i == 0 ? 0 : profiles[i] - profiles[i - 1]);
      at = scale.put(at, values[i]);
    }
  }
  return {begin, static_cast<std::size_t>(at - begin)};
}

// --- metadata --------------------------------------------------------------------------------

namespace {

constexpr std::string_view kVersionKey = "version";
constexpr std::string_view kExperimentKey = "experiment";
constexpr std::string_view kMetricPrefix = "metric/";
constexpr std::string_view kProfilePrefix = "profile/";
constexpr std::string_view kStringPrefix = "string/";
constexpr std::string_view kSkippedPrefix = "skipped/";
constexpr std::string_view kPropertyPrefix = "property/";
constexpr std::string_view kRegionMetricPrefix = "region-metric/";
constexpr std::string_view kQualityKey = "quality";
constexpr std::string_view kQualityPrefix = "quality/";
constexpr std::string_view kThreadClassPrefix = "thread-class/";
constexpr std::string_view kUnwindKey = "unwind";
constexpr std::string_view kModuleLoopsKey = "module-loops";
constexpr std::string_view kModuleLoopsPrefix = "module-loops/";

std::string keyWithBe32(std::string_view prefix, std::uint32_t id) {
  std::string k(prefix);
  putBe32(k, id);
  return k;
}

void putList(std::string& out, const std::vector<std::string>& list) {
  putVarint(out, list.size());
  for (const auto& s : list) putBytes(out, s);
}

std::vector<std::string> readList(Reader& r) {
  const std::uint64_t n = r.u64();
  std::vector<std::string> list;
  for (std::uint64_t i = 0; i < n; ++i) list.push_back(r.text());
  return list;
}

}  // namespace

void encodeMetadata(const DatabaseMetadata& m, const Emit& emit) {
  std::string v;
  putVarint(v, kDatabaseFormatMajor);
  putVarint(v, kDatabaseFormatMinor);
  emit(std::string(kVersionKey), v);

  v.clear();
  putBytes(v, m.title);
  putBytes(v, m.executable);
  putList(v, m.commandLine);
  putList(v, m.hostnames);
  putVarint(v, m.processCount);
  putVarint(v, m.threadCount);
  putVarint(v, m.nodeCount);
  putVarint(v, m.regionCount);
  putVarint(v, m.metrics.size());
  putVarint(v, m.profiles.size());
  putVarint(v, m.strings.size());
  putVarint(v, m.skipped.size());
  emit(std::string(kExperimentKey), v);

  for (std::size_t i = 0; i < m.metrics.size(); ++i) {
    const auto& d = m.metrics[i].descriptor;
    v.clear();
    putBytes(v, d.name);
    putBytes(v, d.unit);
    v.push_back(static_cast<char>(d.kind));
    putVarint(v, d.period);
    putBytes(v, d.description);
    v.push_back(static_cast<char>(m.metrics[i].valueType));
    std::string k(kMetricPrefix);
    putBe16(k, static_cast<std::uint16_t>(i));
    emit(k, v);
  }
  for (std::size_t i = 0; i < m.profiles.size(); ++i) {
    v.clear();
    putVarint(v, m.profiles[i].size());
    for (const auto& e : m.profiles[i]) {
      v.push_back(static_cast<char>(e.kind));
      putVarint(v, e.value);
    }
    emit(keyWithBe32(kProfilePrefix, static_cast<std::uint32_t>(i)), v);
  }
  for (std::size_t i = 0; i < m.strings.size(); ++i)
    emit(keyWithBe32(kStringPrefix, static_cast<std::uint32_t>(i)), m.strings[i]);
  for (std::size_t i = 0; i < m.skipped.size(); ++i) {
    v.clear();
    putBytes(v, m.skipped[i].path);
    putBytes(v, m.skipped[i].reason);
    emit(keyWithBe32(kSkippedPrefix, static_cast<std::uint32_t>(i)), v);
  }
  for (std::size_t i = 0; i < m.regionMetrics.size(); ++i) {
    const auto& r = m.regionMetrics[i];
    v.clear();
    putBytes(v, r.name);
    putBytes(v, r.unit);
    putBytes(v, r.description);
    v.push_back(static_cast<char>((r.exclusive ? 1 : 0) | (r.inclusive ? 2 : 0) | (r.perProcess ? 4 : 0)));
    std::string k(kRegionMetricPrefix);
    putBe16(k, static_cast<std::uint16_t>(i));
    emit(k, v);
  }
  for (const auto& p : m.properties) emit(std::string(kPropertyPrefix) + p.key, p.value);
  if (m.hasQuality()) {
    if (m.quality.size() != m.profiles.size())
      throw FormatError(
          fmt::format("sampling quality of {} profiles for {} profiles", m.quality.size(), m.profiles.size()));
    auto put = [&](const SamplingQuality& q) {
      putVarint(v, q.samples);
      putVarint(v, q.unwindFailures);
      putVarint(v, q.droppedSamples);
      putVarint(v, q.truncatedSamples);
      putVarint(v, q.depthLimited);
    };
    v.clear();
    putVarint(v, m.quality.size());
    put(m.qualityTotal());
    emit(std::string(kQualityKey), v);
    for (std::size_t i = 0; i < m.quality.size(); ++i) {
      v.clear();
      put(m.quality[i]);
      emit(keyWithBe32(kQualityPrefix, static_cast<std::uint32_t>(i)), v);
    }
  }
  if (m.unwindRecovery) {
    v.clear();
    putVarint(v, m.unwindRecovery->scannedSamples);
    putVarint(v, m.unwindRecovery->recoveredSamples);
    emit(std::string(kUnwindKey), v);
  }
  if (!m.moduleLoops.empty()) {
    v.clear();
    putVarint(v, m.moduleLoops.size());
    emit(std::string(kModuleLoopsKey), v);
    for (std::size_t i = 0; i < m.moduleLoops.size(); ++i) {
      const auto& l = m.moduleLoops[i];
      v.clear();
      putBytes(v, l.module);
      putVarint(v, l.loops);
      putVarint(v, l.byAddress);
      putBytes(v, l.note);
      emit(keyWithBe32(kModuleLoopsPrefix, static_cast<std::uint32_t>(i)), v);
    }
  }
  if (!m.threadClasses.empty()) {
    if (m.threadClasses.size() != m.profiles.size())
      throw FormatError(
          fmt::format("thread classes of {} profiles for {} profiles", m.threadClasses.size(), m.profiles.size()));
    for (std::size_t i = 0; i < m.threadClasses.size(); ++i) {
      v.clear();
      v.push_back(static_cast<char>(m.threadClasses[i].threadClass));
      putBytes(v, m.threadClasses[i].entry);
      putBytes(v, m.threadClasses[i].reason);
      emit(keyWithBe32(kThreadClassPrefix, static_cast<std::uint32_t>(i)), v);
    }
  }
}

namespace {

SamplingQuality readQuality(Reader& r) {
  SamplingQuality q;
  q.samples = r.u64();
  q.unwindFailures = r.u64();
  q.droppedSamples = r.u64();
  q.truncatedSamples = r.u64();
  q.depthLimited = r.u64();
  return q;
}

// Index of a dense-table entry: the 4 (or 2) big-endian bytes after the prefix.
std::uint32_t tableIndex(std::string_view key, std::string_view prefix, std::size_t width) {
  Reader r(key.substr(prefix.size()), "metadata key");
  const std::uint32_t id = width == 2 ? r.be16() : r.be32();
  r.expectDone();
  return id;
}

// Dense tables are written 0, 1, 2, ... and read in key order: an entry beyond the next one is a
// gap (a damaged database), refused before a table is sized by its id.
template <typename T>
void placeAt(std::vector<T>& table, std::string_view key, std::string_view prefix, std::size_t width, T value) {
  const std::uint32_t id = tableIndex(key, prefix, width);
  if (id > table.size())
    throw FormatError(fmt::format("metadata {} table: entry {} follows {} entries (a gap)",
                                  prefix.substr(0, prefix.size() - 1), id, table.size()));
  if (table.size() == id) table.resize(std::size_t{id} + 1);
  table[id] = std::move(value);
}

StoredMetric readMetric(std::string_view value) {
  Reader r(value, "metric descriptor");
  StoredMetric s;
  s.descriptor.name = r.text();
  s.descriptor.unit = r.text();
  const std::uint8_t kind = r.u8();
  if (kind > 1) r.fail("unknown metric kind");
  s.descriptor.kind = static_cast<MetricKind>(kind);
  s.descriptor.period = r.u64();
  s.descriptor.description = r.text();
  const std::uint8_t type = r.u8();
  if (type > 1) r.fail("unknown value type");
  s.valueType = static_cast<ValueType>(type);
  s.descriptor.valueType = s.valueType;
  r.expectDone();
  return s;
}

RegionMetricInfo readRegionMetric(std::string_view value) {
  Reader r(value, "region metric descriptor");
  RegionMetricInfo info;
  info.name = r.text();
  info.unit = r.text();
  info.description = r.text();
  const std::uint8_t flags = r.u8();
  if (flags > 7) r.fail("unknown region metric flags");
  info.exclusive = flags & 1;
  info.inclusive = flags & 2;
  info.perProcess = flags & 4;
  r.expectDone();
  return info;
}

ThreadClassInfo readThreadClass(std::string_view value) {
  Reader r(value, "thread class");
  ThreadClassInfo c;
  const std::uint8_t cls = r.u8();
  if (cls < 1 || cls > kThreadClassCount) r.fail("unknown thread class");
  c.threadClass = static_cast<ThreadClass>(cls);
  c.entry = r.text();
  c.reason = r.text();
  r.expectDone();
  return c;
}

}  // namespace

void MetadataDecoder::add(std::string_view key, std::string_view value) {
  if (key == kVersionKey) {
    Reader r(value, "format version");
    version_.major = r.u32();
    version_.minor = r.u32();
    r.expectDone();
    sawVersion_ = true;
  } else if (key == kExperimentKey) {
    Reader r(value, "experiment record");
    m_.title = r.text();
    m_.executable = r.text();
    m_.commandLine = readList(r);
    m_.hostnames = readList(r);
    m_.processCount = r.u64();
    m_.threadCount = r.u64();
    m_.nodeCount = r.u32();
    m_.regionCount = r.u32();
    // Sizes of the dense tables, so that finish() detects a missing tail.
    expected_.metrics = r.u64();
    expected_.profiles = r.u64();
    expected_.strings = r.u64();
    expected_.skipped = r.u64();
    r.expectDone();
    sawExperiment_ = true;
  } else if (key.starts_with(kMetricPrefix)) {
    placeAt(m_.metrics, key, kMetricPrefix, 2, readMetric(value));
    ++seen_.metrics;
  } else if (key.starts_with(kProfilePrefix)) {
    Reader r(value, "profile id tuple");
    IdTuple t(r.u32());
    for (auto& e : t) {
      const std::uint8_t kind = r.u8();
      if (kind > static_cast<std::uint8_t>(kLastIdKind)) r.fail("unknown id kind");
      e.kind = static_cast<IdKind>(kind);
      e.value = r.u64();
    }
    r.expectDone();
    placeAt(m_.profiles, key, kProfilePrefix, 4, std::move(t));
    ++seen_.profiles;
  } else if (key.starts_with(kStringPrefix)) {
    placeAt(m_.strings, key, kStringPrefix, 4, std::string(value));
    ++seen_.strings;
  } else if (key.starts_with(kSkippedPrefix)) {
    Reader r(value, "skipped input");
    SkippedInput s;
    s.path = r.text();
    s.reason = r.text();
    r.expectDone();
    placeAt(m_.skipped, key, kSkippedPrefix, 4, std::move(s));
    ++seen_.skipped;
  } else if (key.starts_with(kRegionMetricPrefix)) {
    placeAt(m_.regionMetrics, key, kRegionMetricPrefix, 2, readRegionMetric(value));
  } else if (key == kQualityKey) {
    Reader r(value, "sampling quality total");
    expected_.quality = r.u64();
    qualityTotal_ = readQuality(r);
    r.expectDone();
    sawQuality_ = true;
  } else if (key.starts_with(kQualityPrefix)) {
    Reader r(value, "sampling quality");
    auto q = readQuality(r);
    r.expectDone();
    placeAt(m_.quality, key, kQualityPrefix, 4, q);
    ++seen_.quality;
  } else if (key.starts_with(kThreadClassPrefix)) {
    placeAt(m_.threadClasses, key, kThreadClassPrefix, 4, readThreadClass(value));
    ++seen_.threadClasses;
  } else if (key == kUnwindKey) {
    Reader r(value, "unwind recovery");
    UnwindRecovery u;
    u.scannedSamples = r.u64();
    u.recoveredSamples = r.u64();
    r.expectDone();
    if (u.recoveredSamples > u.scannedSamples) r.fail("more recovered than scanned samples");
    m_.unwindRecovery = u;
  } else if (key == kModuleLoopsKey) {
    Reader r(value, "module loops count");
    expected_.moduleLoops = r.u64();
    r.expectDone();
  } else if (key.starts_with(kModuleLoopsPrefix)) {
    Reader r(value, "module loops");
    ModuleLoops l;
    l.module = r.text();
    l.loops = r.u64();
    l.byAddress = r.u64();
    l.note = r.text();
    r.expectDone();
    if (l.byAddress > l.loops) r.fail("more loops known by address than loops");
    placeAt(m_.moduleLoops, key, kModuleLoopsPrefix, 4, std::move(l));
    ++seen_.moduleLoops;
  } else if (key.starts_with(kPropertyPrefix)) {
    m_.properties.push_back({std::string(key.substr(kPropertyPrefix.size())), std::string(value)});
  }
  // Unknown keys belong to a newer minor version: ignored by design.
}

DatabaseMetadata MetadataDecoder::finish() {
  if (!sawVersion_) throw FormatError("metadata has no format version");
  if (!sawExperiment_) throw FormatError("metadata has no experiment record");
  auto check = [](const char* table, std::uint64_t expected, std::uint64_t seen, std::size_t size) {
    if (seen != expected || size != expected)
      throw FormatError(fmt::format("metadata {} table has {} of {} entries", table, seen, expected));
  };
  check("metric", expected_.metrics, seen_.metrics, m_.metrics.size());
  check("profile", expected_.profiles, seen_.profiles, m_.profiles.size());
  check("string", expected_.strings, seen_.strings, m_.strings.size());
  check("skipped-input", expected_.skipped, seen_.skipped, m_.skipped.size());
  check("module-loops", expected_.moduleLoops, seen_.moduleLoops, m_.moduleLoops.size());  // format 1.5
  // Sampling quality (format 1.1): absent in older databases; when present, one entry per
  // profile adding up to the stored total.
  if (sawQuality_ || seen_.quality > 0) {
    check("sampling-quality", expected_.quality, seen_.quality, m_.quality.size());
    if (m_.quality.size() != m_.profiles.size())
      throw FormatError(fmt::format("metadata has sampling quality of {} profiles for {} profiles", m_.quality.size(),
                                    m_.profiles.size()));
    if (m_.qualityTotal() != qualityTotal_) throw FormatError("metadata sampling quality does not add up to its total");
  }
  // Thread classes (format 1.4): none, or one per profile.
  if (seen_.threadClasses > 0 &&
      (seen_.threadClasses != m_.profiles.size() || m_.threadClasses.size() != m_.profiles.size()))
    throw FormatError(
        fmt::format("metadata has the thread classes of {} of {} profiles", seen_.threadClasses, m_.profiles.size()));
  return std::move(m_);
}

// --- region event logs -------------------------------------------------------------------------

std::string regionLogThreadKey(ProfileId process, ProfileId thread) {
  std::string k;
  putBe32(k, process);
  putBe32(k, thread);
  return k;
}

std::string regionLogBlockKey(ProfileId process, ProfileId thread, std::uint32_t block) {
  std::string k = regionLogThreadKey(process, thread);
  putBe32(k, block);
  return k;
}

std::string encodeRegionLogProcess(const RegionLogProcess& p) {
  std::string v;
  putBytes(v, p.hostname);
  putVarint(v, p.pid);
  putVarint(v, p.threads.size());
  for (const auto& t : p.threads) putVarint(v, t.profile);
  return v;
}

RegionLogProcess decodeRegionLogProcess(std::string_view key, std::string_view value) {
  RegionLogProcess p;
  Reader k(key, "region log process key");
  p.process = k.be32();
  k.expectDone();
  Reader r(value, "region log process");
  p.hostname = r.text();
  p.pid = r.u64();
  const std::uint64_t n = r.u64();
  if (n > value.size()) r.fail("thread count exceeds the entry");
  for (std::uint64_t i = 0; i < n; ++i) {
    RegionLogThread t;
    t.profile = r.u32();
    if (i > 0 && t.profile <= p.threads.back().profile) r.fail("thread ids do not ascend");
    p.threads.push_back(t);
  }
  r.expectDone();
  return p;
}

std::string encodeRegionLogThread(const RegionLogThread& t, std::uint32_t blocks) {
  std::string v;
  putVarint(v, t.events);
  putVarint(v, t.eventsLost);
  putVarint(v, t.mismatchedEnds);
  putVarint(v, t.unclosedAtExit);
  putVarint(v, blocks);
  return v;
}

RegionLogThread decodeRegionLogThread(std::string_view key, std::string_view value) {
  RegionLogThread t;
  Reader k(key, "region log thread key");
  k.be32();
  t.profile = k.be32();
  k.expectDone();
  Reader r(value, "region log thread");
  t.events = r.u64();
  t.eventsLost = r.u64();
  t.mismatchedEnds = r.u64();
  t.unclosedAtExit = r.u64();
  r.u64();  // block count
  r.expectDone();
  return t;
}

std::uint32_t regionLogThreadBlocks(std::string_view value) {
  Reader r(value, "region log thread");
  for (int i = 0; i < 4; ++i) r.u64();
  const std::uint64_t blocks = r.u64();
  if (blocks > UINT32_MAX) r.fail("block count exceeds 32 bits");
  return static_cast<std::uint32_t>(blocks);
}

std::uint64_t regionLogBlockStart(std::string_view value) {
  Reader r(value, "region log block");
  return r.u64() == 0 ? 0 : r.u64();
}

// Per event: varint time delta (the block's first event: absolute), varint code = region << 2 |
// enter << 1 | hasAttr, and with hasAttr the zigzag varint attribute.
std::string encodeRegionLogBlock(std::span<const RegionLogEvent> events) {
  std::string v;
  putVarint(v, events.size());
  std::uint64_t prev = 0;
  for (const auto& e : events) {
    if (e.timeNs < prev) throw std::logic_error("region log events must be in time order");
    putVarint(v, e.timeNs - prev);
    prev = e.timeNs;
    const bool has = e.enter && e.hasAttr;
    putVarint(v, std::uint64_t{e.region} << 2 | std::uint64_t{e.enter} << 1 | std::uint64_t{has});
    if (has) putVarint(v, (static_cast<std::uint64_t>(e.attr) << 1) ^ static_cast<std::uint64_t>(e.attr >> 63));
  }
  return v;
}

void decodeRegionLogBlock(std::string_view value, std::vector<RegionLogEvent>& out) {
  Reader r(value, "region log block");
  const std::uint64_t n = r.u64();
  if (n > value.size()) r.fail("event count exceeds the block");
  std::uint64_t t = 0;
  for (std::uint64_t i = 0; i < n; ++i) {
    RegionLogEvent e;
    const std::uint64_t dt = r.u64();
    if (dt > UINT64_MAX - t) r.fail("time overflows");
    t += dt;
    e.timeNs = t;
    const std::uint64_t code = r.u64();
    if ((code >> 2) > UINT32_MAX) r.fail("region id exceeds 32 bits");
    e.region = static_cast<RegionId>(code >> 2);
    e.enter = (code & 2) != 0;
    e.hasAttr = (code & 1) != 0;
    if (e.hasAttr && !e.enter) r.fail("an exit event with an attribute");
    if (e.hasAttr) {
      const std::uint64_t z = r.u64();
      e.attr = static_cast<std::int64_t>(z >> 1) ^ -static_cast<std::int64_t>(z & 1);
    }
    out.push_back(e);
  }
  r.expectDone();
}

// --- communication events (format 1.7) ------------------------------------------------------

namespace {
std::uint64_t zigzag(std::int64_t v) {
  return (static_cast<std::uint64_t>(v) << 1) ^ static_cast<std::uint64_t>(v >> 63);
}
std::int64_t unzigzag(std::uint64_t z) { return static_cast<std::int64_t>(z >> 1) ^ -static_cast<std::int64_t>(z & 1); }
}  // namespace

std::string encodeProcessClock(const ProcessClock& p) {
  std::string v;
  putBytes(v, p.hostname);
  putVarint(v, p.pid);
  putVarint(v, zigzag(p.rank));
  const ClockSync& c = p.clock;
  v.push_back(static_cast<char>(c.state));
  putVarint(v, c.referenceRank);
  for (std::uint64_t x : {c.initLocalNs, c.initRefLoNs, c.initRefHiNs, c.finalLocalNs, c.finalRefLoNs, c.finalRefHiNs})
    putVarint(v, x);
  putVarint(v, c.rounds);
  putVarint(v, c.costNs);
  putVarint(v, p.tightened);
  putVarint(v, p.conflicts);
  return v;
}

ProcessClock decodeProcessClock(std::string_view key, std::string_view value) {
  ProcessClock p;
  Reader k(key, "process clock key");
  p.process = k.be32();
  k.expectDone();
  Reader r(value, "process clock");
  p.hostname = r.text();
  p.pid = r.u64();
  p.rank = unzigzag(r.u64());
  const std::uint8_t state = r.u8();
  if (state > static_cast<std::uint8_t>(ClockState::InitOnly)) r.fail("unknown clock state");
  ClockSync& c = p.clock;
  c.state = static_cast<ClockState>(state);
  c.referenceRank = r.u32();
  for (std::uint64_t* x :
       {&c.initLocalNs, &c.initRefLoNs, &c.initRefHiNs, &c.finalLocalNs, &c.finalRefLoNs, &c.finalRefHiNs})
    *x = r.u64();
  c.rounds = r.u32();
  c.costNs = r.u64();
  p.tightened = r.u64();
  p.conflicts = r.u64();
  r.expectDone();
  return p;
}

// Per event: u8 kind, varint local begin (delta to the previous event's), varint local
// duration, then the intervals as offsets: begin.lo, begin width, end.lo - begin.lo, end width
// (zigzag where they may be negative), zigzag peer, zigzag tag, varint comm, varint sequence,
// varint region; from format 1.8 varint (local wait begin - local begin), u8 collective op.
std::string encodeCommEvents(std::span<const CommEventRecord> events) {
  std::string v;
  putVarint(v, events.size());
  std::uint64_t prev = 0;
  for (const auto& e : events) {
    v.push_back(static_cast<char>(e.kind));
    putVarint(v, zigzag(static_cast<std::int64_t>(e.localBeginNs - prev)));
    prev = e.localBeginNs;
    putVarint(v, e.localEndNs - e.localBeginNs);
    putVarint(v, e.begin.lo);
    putVarint(v, e.begin.width());
    putVarint(v, zigzag(static_cast<std::int64_t>(e.end.lo - e.begin.lo)));
    putVarint(v, e.end.width());
    putVarint(v, zigzag(e.peer));
    putVarint(v, zigzag(e.tag));
    putVarint(v, e.comm);
    putVarint(v, e.sequence);
    putVarint(v, e.region);
    putVarint(v, e.waitBeginNs() - e.localBeginNs);
    v.push_back(static_cast<char>(e.op));
  }
  return v;
}

void decodeCommEvents(std::string_view key, std::string_view value, std::vector<CommEventRecord>& out, bool withWaits) {
  Reader k(key, "communication events key");
  k.be32();
  const ProfileId thread = k.be32();
  k.expectDone();
  Reader r(value, "communication events");
  const std::uint64_t n = r.u64();
  if (n > value.size()) r.fail("event count exceeds the entry");
  std::uint64_t prev = 0;
  for (std::uint64_t i = 0; i < n; ++i) {
    CommEventRecord e;
    e.thread = thread;
    const std::uint8_t kind = r.u8();
    if (kind < 1 || kind > 4) r.fail("unknown event kind");
    e.kind = static_cast<CommKind>(kind);
    e.localBeginNs = prev + static_cast<std::uint64_t>(unzigzag(r.u64()));
    prev = e.localBeginNs;
    e.localEndNs = e.localBeginNs + r.u64();
    e.begin.lo = r.u64();
    e.begin.hi = e.begin.lo + r.u64();
    e.end.lo = e.begin.lo + static_cast<std::uint64_t>(unzigzag(r.u64()));
    e.end.hi = e.end.lo + r.u64();
    e.peer = static_cast<std::int32_t>(unzigzag(r.u64()));
    e.tag = static_cast<std::int32_t>(unzigzag(r.u64()));
    e.comm = r.u64();
    e.sequence = r.u64();
    e.region = r.u32();
    if (withWaits) {
      const std::uint64_t wait = r.u64();
      if (wait > e.localEndNs - e.localBeginNs) r.fail("a wait outside its event");
      e.localWaitBeginNs = wait == 0 ? 0 : e.localBeginNs + wait;  // 0: blocking
      const std::uint8_t op = r.u8();
      if (op >= kCollectiveOpCount) r.fail("unknown collective");
      e.op = static_cast<CollectiveOp>(op);
    }
    out.push_back(e);
  }
  r.expectDone();
}

// --- RocksDB options -------------------------------------------------------------------------

namespace {

// RocksDB's info log would be written into the database directory, even by read-only opens;
// readers must leave the directory untouched, and a finished database has no use for it.
class NullLogger : public rocksdb::Logger {
 public:
  using rocksdb::Logger::Logv;
  void Logv(const char*, va_list) override {}
};

// The first of `preferred` that this RocksDB build supports (none: no compression).
rocksdb::CompressionType firstSupported(std::initializer_list<rocksdb::CompressionType> preferred) {
  static const auto supported = rocksdb::GetSupportedCompressions();
  for (auto c : preferred)
    if (std::find(supported.begin(), supported.end(), c) != supported.end()) return c;
  return rocksdb::kNoCompression;
}

}  // namespace

rocksdb::ColumnFamilyOptions familyOptions(const std::string& family) {
  rocksdb::ColumnFamilyOptions o;
  rocksdb::BlockBasedTableOptions t;
  t.format_version = 5;
  // Value blocks are scanned whole; bigger table blocks compress better and cost little.
  const bool values = family == kValuesByProfile || family == kValuesByNode || family == kRegionEvents;
  t.block_size = values ? 64 * 1024 : 16 * 1024;
  o.table_factory.reset(rocksdb::NewBlockBasedTableFactory(t));
  // ZSTD where the build has it, except for the two value families, which are most of the bytes
  // written: LZ4 first there, which compresses their packed blocks in a fraction of zstd's time
  // (database-format.md, "Conventions").
  o.compression = family == kValuesByProfile || family == kValuesByNode
                      ? firstSupported({rocksdb::kLZ4Compression, rocksdb::kZSTD, rocksdb::kSnappyCompression})
                      : firstSupported({rocksdb::kZSTD, rocksdb::kLZ4Compression, rocksdb::kSnappyCompression});
  o.bottommost_compression = o.compression;
  // Ingested files land in the bottommost level, so its options are the ones that count. Level 1
  // (ZSTD's fastest positive level) measured as small as the default level 3 on packed value
  // blocks, at about two thirds of the writing time.
  o.compression_opts.level = 1;
  o.bottommost_compression_opts = o.compression_opts;
  o.bottommost_compression_opts.enabled = true;
  // Databases are written once (bulk ingestion, one explicit compaction) and then read: no
  // background compaction, neither while building nor when a reader opens one to cache views.
  o.disable_auto_compactions = true;
  return o;
}

rocksdb::DBOptions instanceOptions() {
  rocksdb::DBOptions o;
  o.info_log = std::make_shared<NullLogger>();
  o.max_open_files = -1;
  o.paranoid_checks = true;
  // The one big compaction (values by node, after ingestion) may use every core.
  const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  o.max_subcompactions = static_cast<std::uint32_t>(cores);
  o.max_background_jobs = std::max(2, cores);
  return o;
}

// --- manifest --------------------------------------------------------------------------------

namespace {
constexpr std::string_view kManifestFirstLine = "CSP experiment database";
}

std::string manifestText() {
  return fmt::format(
      "{}\n"
      "format {}.{}\n"
      "\n"
      "This directory holds one RocksDB instance written by CSP. The key layout is documented\n"
      "in docs/database-format.md of the CSP sources. Read it with csp-views; do not edit it.\n",
      kManifestFirstLine, kDatabaseFormatMajor, kDatabaseFormatMinor);
}

std::optional<FormatVersion> parseManifest(std::string_view text) {
  const auto firstEnd = text.find('\n');
  if (firstEnd == std::string_view::npos || text.substr(0, firstEnd) != kManifestFirstLine) return std::nullopt;
  std::string_view rest = text.substr(firstEnd + 1);
  const auto lineEnd = rest.find('\n');
  std::string line(rest.substr(0, lineEnd));
  FormatVersion v;
  char tail = 0;
  if (std::sscanf(line.c_str(), "format %u.%u%c", &v.major, &v.minor, &tail) != 2) return std::nullopt;
  return v;
}

}  // namespace csp::storage::format
