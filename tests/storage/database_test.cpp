// The database in one process: round trips, writer contract, publication, errors on open.
#include <gtest/gtest.h>
#include <unistd.h>
#include <sstream>

#include <fmt/format.h>
#include <rocksdb/db.h>
#include <map>
#include <set>

#include <atomic>
#include <bit>
#include <fstream>
#include <functional>
#include <optional>
#include <random>
#include <thread>

#include "common/address_space_cap.hpp"
#include "common/db_dump.hpp"
#include "csp/storage/bytes.hpp"
#include "db_format.hpp"
#include "storage/db_expect.hpp"

namespace fs = std::filesystem;
using namespace csp;
using namespace csp::storage;
using csp::test::dirEntries;
using csp::test::Synthetic;
using csp::test::TempDir;

namespace {

void writeText(const fs::path& file, const std::string& text) {
  std::ofstream out(file, std::ios::binary | std::ios::trunc);
  out << text;
}

// Expects Database::open to fail with a DatabaseError whose message contains `needle`.
void expectOpenFailsWith(const fs::path& dir, Database::Mode mode, const std::string& needle) {
  try {
    auto db = Database::open(dir, mode);
    // Damage in table blocks may surface only when they are read.
    for (const auto& family : databaseColumnFamilies()) db->forEachEntry(family, [](auto, auto) {});
    ADD_FAILURE() << "opening " << dir << " succeeded";
  } catch (const DatabaseError& e) {
    std::printf("  error: %s\n", e.what());
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find(dir.string()), std::string::npos) << e.what();
  }
}

void expectOpenFails(const fs::path& dir, const std::string& needle) {
  expectOpenFailsWith(dir, Database::Mode::ReadOnly, needle);
}

using RawFamiliesUse = std::function<void(rocksdb::DB*, const std::vector<std::string>& families,
                                          const std::vector<rocksdb::ColumnFamilyHandle*>& handles)>;

// Opens a built database with RocksDB itself (every column family, RocksDB's default options) and
// hands it to `use` with the families' names and handles: read-only, or to edit (flushed after).
void withRawFamilies(const fs::path& dir, bool readOnly, const RawFamiliesUse& use) {
  std::vector<std::string> families;
  ASSERT_TRUE(rocksdb::DB::ListColumnFamilies(rocksdb::DBOptions(), dir.string(), &families).ok());
  std::vector<rocksdb::ColumnFamilyDescriptor> descriptors;
  for (const auto& f : families) descriptors.emplace_back(f, rocksdb::ColumnFamilyOptions());
  std::vector<rocksdb::ColumnFamilyHandle*> handles;
  rocksdb::DB* raw = nullptr;
  const rocksdb::DBOptions options;
  ASSERT_TRUE((readOnly ? rocksdb::DB::OpenForReadOnly(options, dir.string(), descriptors, &handles, &raw)
                        : rocksdb::DB::Open(options, dir.string(), descriptors, &handles, &raw))
                  .ok());
  use(raw, families, handles);
  for (auto* h : handles) {
    if (!readOnly) raw->Flush(rocksdb::FlushOptions(), h);
    raw->DestroyColumnFamilyHandle(h);
  }
  delete raw;
}

// Lets `change` edit one column family of a built database: damage that CSP's writer never
// makes, for the open tests.
void editFamily(const fs::path& dir, const std::string& family,
                const std::function<void(rocksdb::DB*, rocksdb::ColumnFamilyHandle*)>& change) {
  withRawFamilies(dir, false, [&](rocksdb::DB* raw, const auto& families, const auto& handles) {
    for (std::size_t i = 0; i < families.size(); ++i)
      if (families[i] == family) change(raw, handles[i]);
  });
}

}  // namespace

TEST(DatabaseRoundTrip, EveryColumnFamilySurvives) {
  TempDir tmp;
  const Synthetic s{.seed = 3, .profiles = 12, .nodes = 150};
  const fs::path target = tmp.path() / "db";
  test::buildInProcess(target, s, "round trip");
  auto db = Database::open(target);
  EXPECT_EQ(db->formatVersion().major, kDatabaseFormatMajor);
  test::expectContent(*db, s, "round trip");
  auto expected = s.nodeValues(5);
  std::erase_if(expected, [](const NodeValue& v) { return v.metric != 1 || v.scope != MetricScope::Inclusive; });
  EXPECT_EQ(db->nodeValues(5, 1, MetricScope::Inclusive), expected);
  // Only the manifest and RocksDB's own files: no staging area, owner file or info log.
  for (const auto& name : dirEntries(target)) {
    EXPECT_TRUE(name == kDatabaseManifestName || name == "CURRENT" || name == "IDENTITY" || name == "LOCK" ||
                name.starts_with("MANIFEST-") || name.starts_with("OPTIONS-") || name.ends_with(".sst") ||
                name.ends_with(".log"))
        << name;
  }
  // No temporary directory left next to the database.
  EXPECT_EQ(dirEntries(tmp.path()), std::vector<std::string>{"db"});
}

// Each family's tables are compressed as docs/database-format.md ("Conventions") says: the two
// value families with LZ4, every other family with ZSTD (Debian's RocksDB has both). RocksDB
// names the compression of every table it wrote.
TEST(DatabaseRoundTrip, FamiliesAreCompressedAsDocumented) {
  TempDir tmp;
  const Synthetic s{.seed = 5, .profiles = 8, .nodes = 120};
  const fs::path target = tmp.path() / "db";
  test::buildInProcess(target, s, "compression");
  std::map<std::string, std::set<std::string>> compressions;  // family -> its tables' compressions
  withRawFamilies(target, true, [&](rocksdb::DB* raw, const auto& families, const auto& handles) {
    for (std::size_t i = 0; i < families.size(); ++i) {
      rocksdb::TablePropertiesCollection tables;
      ASSERT_TRUE(raw->GetPropertiesOfAllTables(handles[i], &tables).ok());
      for (const auto& [file, properties] : tables) compressions[families[i]].insert(properties->compression_name);
    }
  });
  EXPECT_EQ(compressions[format::kValuesByProfile], std::set<std::string>{"LZ4"});
  EXPECT_EQ(compressions[format::kValuesByNode], std::set<std::string>{"LZ4"});
  EXPECT_EQ(compressions[format::kSummaries], std::set<std::string>{"ZSTD"});
  EXPECT_EQ(compressions[format::kCctNodes], std::set<std::string>{"ZSTD"});
}

// Format 2.0 stores a metric's values in units of a scale (its period): a value need not be a
// multiple of it, and every value, up to UINT64_MAX, reads back exactly in both orders, with and
// without scales (format 1's layout), and in blocks that mix scaled and unscaled metrics.
TEST(DatabaseRoundTrip, ExtremeValuesBlocksAndZeros) {
  // One profile with 3,000 nodes (several blocks), huge and real values, zeros to be dropped;
  // one node across 5,000 sparse profile ids (several blocks).
  std::vector<ProfileValue> profile;
  for (NodeId n = 0; n < 3000; ++n) {
    profile.push_back({n * 3 + 1, 0, MetricScope::Exclusive, n % 5 == 0 ? 0 : UINT64_MAX - n});
    profile.push_back({n * 3 + 1, 0, MetricScope::Inclusive, 1});
    profile.push_back({n * 3 + 1, 2, MetricScope::Exclusive, std::uint64_t{n} * 1000000 + (n % 7 == 0 ? 999999 : 0)});
    profile.push_back({n * 3 + 1, 700, MetricScope::Inclusive, std::bit_cast<std::uint64_t>(0.25 * n)});
  }
  std::vector<NodeValue> node;
  for (ProfileId p = 0; p < 5000; ++p) {
    node.push_back({0, MetricScope::Exclusive, p * 7 + 100, UINT64_MAX - p});
    node.push_back({3, MetricScope::Inclusive, p * 7 + 100, p % 3 == 0 ? 0 : std::uint64_t{p} << 40});
  }
  // Runs of consecutive profiles of many lengths, one across a block's end (1,100), split by
  // zeros; scaled (metric 2) and not (5).
  ProfileId p = 40000;
  for (const std::uint32_t length : {1u, 2u, 3u, 127u, 128u, 129u, 130u, 131u, 1100u}) {
    for (std::uint32_t j = 0; j < length; ++j, ++p) {
      node.push_back({2, MetricScope::Exclusive, p, std::uint64_t{p} * 1000000 + (p % 11 == 0 ? 5 : 0)});
      node.push_back({5, MetricScope::Inclusive, p, p % 97 == 0 ? 0 : UINT64_MAX - p});
    }
    p += 1 + length % 3;  // a gap of 1 to 3 profiles
  }
  std::sort(node.begin(), node.end(), [](const NodeValue& a, const NodeValue& b) {
    return std::tie(a.metric, a.scope, a.profile) < std::tie(b.metric, b.scope, b.profile);
  });
  auto keepNonZero = [](auto values) {
    std::erase_if(values, [](const auto& v) { return v.value == 0; });
    return values;
  };
  const std::vector<std::vector<std::uint64_t>> scaleSets = {{}, {3, 1, 1000000, 1u << 20}, {2, 1, 7}};
  std::uintmax_t unscaledBytes = 0;
  for (const auto& scales : scaleSets) {
    TempDir tmp;
    const fs::path target = tmp.path() / "db";
    {
      DatabaseBuilder b(target);
      ShardWriter w(b.stagingDir(), 0, {.valueScales = scales});
      w.putProfileValues(UINT32_MAX - 1, profile);
      w.putNodeValues(UINT32_MAX, node);
      w.finish();
      test::publishBare(b, 1);
    }
    auto db = Database::open(target);
    EXPECT_EQ(db->profileValues(UINT32_MAX - 1), keepNonZero(profile)) << scales.size();
    EXPECT_EQ(db->nodeValues(UINT32_MAX), keepNonZero(node)) << scales.size();
    EXPECT_TRUE(db->profileValues(0).empty());
    EXPECT_TRUE(db->nodeValues(0).empty());
    std::uintmax_t bytes = 0;
    db->forEachEntry("values_by_profile", [&](auto, std::string_view v) { bytes += v.size(); });
    if (scales.empty()) unscaledBytes = bytes;
    if (scales.size() == 4) {
      EXPECT_LT(bytes, unscaledBytes);  // metric 2 in its units: smaller varints
    }
  }
}

// Format 3.0's mirrored groups: a node group whose values are exclusive ones that are also the
// node's inclusive ones lists each once, flagged in its count. Read as such only from 3.0 on; a
// flagged group listing an inclusive value is damage.
TEST(ProfileBlockCodec, MirroredGroupsReadBackBothScopes) {
  const std::string key = format::nodeKey(9) + std::string("\0\0\0\5", 4);  // profile 9, first node 5
  // node 5: mirrored, metrics 0 and 2 (columns 0, 4: steps 0, 3), values 7 and 300; node 6: not
  // mirrored, metric 1 exclusive 1 and inclusive 2 (columns 2, 3: steps 2, 0).
  const std::string block = {0, 2 << 1 | 1, 0, 7, 3, char(0xac), 2, 1, 2 << 1, 2, 1, 0, 2};
  std::vector<ProfileValue> out;
  format::decodeProfileBlock(key, block, out, 3);
  const std::vector<ProfileValue> expected = {{5, 0, MetricScope::Exclusive, 7},   {5, 0, MetricScope::Inclusive, 7},
                                              {5, 2, MetricScope::Exclusive, 300}, {5, 2, MetricScope::Inclusive, 300},
                                              {6, 1, MetricScope::Exclusive, 1},   {6, 1, MetricScope::Inclusive, 2}};
  EXPECT_EQ(out, expected);
  // Before 3.0 the count is the count: the same bytes are another block, and a block of format 2
  // (node 5: metric 0 exclusive 7 and inclusive 9) reads as written.
  out.clear();
  format::decodeProfileBlock(key, block, out, 2);
  EXPECT_NE(out, expected);
  const std::string format2 = {0, 2, 0, 7, 0, 9};
  out.clear();
  format::decodeProfileBlock(key, format2, out, 2);
  const std::vector<ProfileValue> expected2 = {{5, 0, MetricScope::Exclusive, 7}, {5, 0, MetricScope::Inclusive, 9}};
  EXPECT_EQ(out, expected2);
  // A flagged group listing an inclusive value (column 1).
  const std::string damaged = {0, 1 << 1 | 1, 1, 7};
  out.clear();
  EXPECT_ANY_THROW(format::decodeProfileBlock(key, damaged, out, 3));
}

// Format 4.0's profile blocks: a scale header (maybe empty), then groups whose first varint is
// node delta << 3 | pattern; pattern 7 spells the group's columns out (count << 1 | mirrored,
// column steps) and makes them the block's next pattern (up to 7), which later groups name.
TEST(ProfileBlockCodec, Format4PatternsNameRepeatedColumns) {
  const std::string key = format::nodeKey(9) + std::string("\0\0\0\5", 4);  // profile 9, first node 5
  // node 5: new pattern 0 (mirrored, columns 0, 4), values 7 and 300; node 6: new pattern 1
  // (columns 2, 3), values 1 and 2; node 8: pattern 0 again, values 3 and 4.
  const std::string block = {0,      0 << 3 | 7, 2 << 1 | 1, 0, 3, 7,          char(0xac), 2, 1 << 3 | 7,
                             2 << 1, 2,          0,          1, 2, 2 << 3 | 0, 3,          4};
  std::vector<ProfileValue> out;
  format::decodeProfileBlock(key, block, out, 4);
  const std::vector<ProfileValue> expected = {{5, 0, MetricScope::Exclusive, 7},   {5, 0, MetricScope::Inclusive, 7},
                                              {5, 2, MetricScope::Exclusive, 300}, {5, 2, MetricScope::Inclusive, 300},
                                              {6, 1, MetricScope::Exclusive, 1},   {6, 1, MetricScope::Inclusive, 2},
                                              {8, 0, MetricScope::Exclusive, 3},   {8, 0, MetricScope::Inclusive, 3},
                                              {8, 2, MetricScope::Exclusive, 4},   {8, 2, MetricScope::Inclusive, 4}};
  EXPECT_EQ(out, expected);
  // Damage: a pattern the block has not defined; a mirrored pattern with an inclusive column; a
  // later group at the same node; a group cut short; no groups at all.
  for (const std::string& damaged : {std::string{0, 0 << 3 | 1, 5}, std::string{0, 0 << 3 | 7, 1 << 1 | 1, 1, 5},
                                     std::string{0, 0 << 3 | 7, 1 << 1, 0, 5, 0 << 3 | 0, 6},
                                     std::string{0, 0 << 3 | 7, 2 << 1, 0, 0, 5}, std::string{0}}) {
    out.clear();
    EXPECT_ANY_THROW(format::decodeProfileBlock(key, damaged, out, 4)) << damaged.size();
  }
  // Encoded: a block with more column sets than it can name (the eighth on are spelled out each
  // time) reads back as written.
  std::vector<ProfileValue> values;
  for (NodeId n = 0; n < 60; ++n)
    for (MetricId m = 0; m < 4; ++m)
      if ((n % 12) & (1u << m) || n % 12 == 0) {
        values.push_back({n, m, MetricScope::Exclusive, 1 + n});
        values.push_back({n, m, MetricScope::Inclusive, n % 5 == 0 ? 1 + n : 1000 + n});
      }
  std::vector<std::string> blocks;
  format::encodeProfileBlocks(3, values, {}, [&](const std::string& k, std::string_view v) {
    out.clear();
    format::decodeProfileBlock(k, v, out, 4);
    blocks.emplace_back(v);
  });
  ASSERT_EQ(blocks.size(), 1u);
  EXPECT_EQ(out, values);
}

// A profile's columns with every metric below 32 take encodeProfileBlocks' own path (through
// ProfileBlockEncoder, fed node by node), and csp-prof-mpi's values pass feeds that encoder
// itself as it collects each node's values; both write the bytes of the general writer, which the
// list form of the same values takes: random profiles of many blocks, with zeros, leaves
// (mirrored groups), more column sets than a block can name, scaled and unscaled metrics (also
// metrics beyond the scales given), values of every size, and profiles whose last entries are
// zeros.
TEST(ProfileBlockCodec, NarrowColumnsEncodeAsTheGeneralWriter) {
  std::mt19937_64 random(11);
  const std::vector<ValueScale> scales = {ValueScale(1000), ValueScale(1), ValueScale(7), ValueScale(1u << 20)};
  std::size_t narrowBlocks = 0;
  for (int round = 0; round < 40; ++round) {
    const auto metrics = static_cast<MetricId>(1 + round % 6 + (round == 39 ? 25 : 0));  // metric ids up to 29
    // Scales for every metric (cycling through `scales`), for the first four, or none.
    std::vector<ValueScale> perMetric;
    if (round % 4 == 1)
      for (MetricId m = 0; m < metrics; ++m) perMetric.push_back(scales[m % scales.size()]);
    if (round % 4 == 3) perMetric = scales;
    std::vector<NodeId> node;
    std::vector<MetricId> metric;
    std::vector<std::uint64_t> exclusive, inclusive;
    std::vector<ProfileValue> list;
    NodeId n = static_cast<NodeId>(random() % 3);
    for (int g = 0, groups = static_cast<int>(random() % 3000); g < groups; ++g) {
      n += 1 + static_cast<NodeId>(random() % (g % 50 == 0 ? 5000 : 4));
      const bool leaf = random() % 3 == 0;
      for (MetricId m = 0; m < metrics; ++m) {
        if (random() % 4 == 0) continue;
        auto value = [&]() -> std::uint64_t {
          switch (random() % 6) {
            case 0:
              return 0;
            case 1:
              return random() % 8;
            case 2:
              return (random() % 100) * 1000;
            case 3:
              return random() >> (random() % 64);
            default:
              return 1 + random() % 300;
          }
        };
        const std::uint64_t e = value(), i = leaf ? e : value();
        node.push_back(n);
        metric.push_back(m);
        exclusive.push_back(e);
        inclusive.push_back(i);
        list.push_back({n, m, MetricScope::Exclusive, e});
        list.push_back({n, m, MetricScope::Inclusive, i});
      }
    }
    for (int tail = static_cast<int>(random() % 3); tail > 0; --tail) {  // zeros at the end
      node.push_back(++n);
      metric.push_back(0);
      exclusive.push_back(0);
      inclusive.push_back(0);
    }
    std::erase_if(list, [](const ProfileValue& v) { return v.value == 0; });
    const std::span<const ValueScale> scaled(perMetric);
    using Blocks = std::vector<std::pair<std::string, std::string>>;
    Blocks fromColumns, fromList, fromEncoder;
    const auto written =
        format::encodeProfileBlocks(5, ProfileValueColumns{node, metric, exclusive, inclusive}, scaled,
                                    [&](const std::string& k, std::string_view v) { fromColumns.emplace_back(k, v); });
    format::encodeProfileBlocks(5, list, scaled,
                                [&](const std::string& k, std::string_view v) { fromList.emplace_back(k, v); });
    ASSERT_EQ(fromColumns, fromList) << "round " << round;
    EXPECT_EQ(written, list.size()) << "round " << round;
    // Node by node, dense by metric (the values pass's form), with a scale for every metric; the
    // loops unrolled for a known metric count where the values pass unrolls them.
    std::vector<ValueScale> dense(perMetric);
    dense.resize(std::max<std::size_t>(dense.size(), metrics));
    ProfileBlockEncoder encoder(dense);
    for (int twice = 0; twice < 2; ++twice) {  // the encoder is reused from profile to profile
      auto encoding = encoder.begin();
      std::vector<std::uint64_t> e(dense.size()), i(dense.size());
      for (std::size_t k = 0, end = 0; k < node.size(); k = end) {
        std::fill(e.begin(), e.end(), 0);
        std::fill(i.begin(), i.end(), 0);
        for (end = k; end < node.size() && node[end] == node[k]; ++end) {
          e[metric[end]] = exclusive[end];
          i[metric[end]] = inclusive[end];
        }
        switch (dense.size()) {
          case 2:
            encoding.addNode<2>(node[k], e.data(), i.data());
            break;
          case 3:
            encoding.addNode<3>(node[k], e.data(), i.data());
            break;
          default:
            encoding.addNode(node[k], e.data(), i.data());
        }
      }
      const ProfileBlocks blocks = encoder.finish(encoding);
      EXPECT_TRUE(blocks.made);
      EXPECT_EQ(blocks.values, list.size()) << "round " << round;
      fromEncoder.clear();
      format::emitProfileBlocks(5, blocks,
                                [&](const std::string& k, std::string_view v) { fromEncoder.emplace_back(k, v); });
      ASSERT_EQ(fromEncoder, fromList) << "round " << round << " profile " << twice;
    }
    narrowBlocks += fromColumns.size();
  }
  EXPECT_GT(narrowBlocks, 100u);
  EXPECT_THROW(ProfileBlockEncoder(std::vector<ValueScale>(33)), std::invalid_argument);
}

// Format 4.0's node blocks: the scale (1: unscaled), then layout 0 and (profile delta, value)
// pairs, or layout span << 1 | 1 and a bitmap of the profiles from the block's first one (bit 0
// of byte 0 first), then their values. The writer takes the bitmap when it has at most a byte
// per value.
TEST(NodeBlockCodec, Format4ListsOrBitmaps) {
  const std::string key = format::nodeBlockKey(4, 1, MetricScope::Inclusive, 20);
  auto decode = [&](const std::string& block) {
    std::vector<NodeValue> out;
    format::decodeNodeBlock(key, block, out, 4);
    return out;
  };
  // Profiles 20, 22, 29 with values 5, 6, 7: as a bitmap of 10 bits, and as a list.
  const std::vector<NodeValue> expected = {
      {1, MetricScope::Inclusive, 20, 5}, {1, MetricScope::Inclusive, 22, 6}, {1, MetricScope::Inclusive, 29, 7}};
  EXPECT_EQ(decode({1, 10 << 1 | 1, 0b101, 0b10, 5, 6, 7}), expected);
  EXPECT_EQ(decode({1, 0, 0, 5, 2, 6, 7, 7}), expected);
  // Scaled by 3: 5 = 1 * 3 + 2, 6 = 2 * 3, 7 = 2 * 3 + 1.
  EXPECT_EQ(decode({3, 10 << 1 | 1, 0b101, 0b10, 1 << 1 | 1, 2, 2 << 1, 2 << 1 | 1, 1}), expected);
  // Damage: scale 0; an unknown layout; the first bit clear; a bit past the span; the last bit
  // clear; a value missing; a value too many; a bitmap longer than the block.
  for (const std::string& damaged :
       {std::string{0, 0, 0, 5}, std::string{1, 2, 0, 5}, std::string{1, 10 << 1 | 1, 0b100, 0b10, 6, 7},
        std::string{1, 10 << 1 | 1, 0b101, 0b110, 5, 6, 7, 8}, std::string{1, 10 << 1 | 1, 0b101, 0b00, 5, 6},
        std::string{1, 10 << 1 | 1, 0b101, 0b10, 5, 6}, std::string{1, 10 << 1 | 1, 0b101, 0b10, 5, 6, 7, 8},
        std::string{1, 50 << 1 | 1, 1, 5}, std::string{1, 0}})
    EXPECT_ANY_THROW(decode(damaged)) << damaged.size();
  // Encoded: dense profiles as a bitmap, sparse ones as a list; both read back.
  for (const ProfileId step : {1u, 2u, 9u, 300u}) {
    std::vector<ProfileId> profiles;
    std::vector<std::uint64_t> values;
    for (ProfileId i = 0; i < 50; ++i) {
      profiles.push_back(20 + i * step);
      values.push_back(3 * i + 1);
    }
    std::vector<char> buffer;
    const std::string block(format::encodeNodeBlock(profiles, values, ValueScale(3), buffer));
    const bool bitmap = (static_cast<unsigned char>(block[1]) & 1) != 0;
    EXPECT_EQ(bitmap, step <= 2) << step;
    const auto out = decode(block);
    ASSERT_EQ(out.size(), profiles.size()) << step;
    for (std::size_t i = 0; i < out.size(); ++i) {
      EXPECT_EQ(out[i].profile, profiles[i]);
      EXPECT_EQ(out[i].value, values[i]);
    }
  }
}

// The value codec of format 2.0 alone: exact for multiples, remainders and extremes; damaged
// encodings (a remainder of 0 or beyond the scale, a quotient that overflows) are refused.
TEST(ValueScaleCodec, ExactForEveryValueAndRefusesDamage) {
  for (const std::uint64_t scale : {std::uint64_t{1}, std::uint64_t{2}, std::uint64_t{3}, std::uint64_t{1000000},
                                    std::uint64_t{1} << 40, UINT64_MAX}) {
    const ValueScale codec(scale);
    for (const std::uint64_t v : {std::uint64_t{1}, std::uint64_t{2}, scale, scale + 1, 2 * scale, 5 * scale - 1,
                                  std::uint64_t{1} << 52, (std::uint64_t{1} << 52) + 1, UINT64_MAX - 1, UINT64_MAX}) {
      if (v == 0) continue;
      char bytes[20];
      const char* end = codec.put(bytes, v);
      ByteReader<> r(std::string_view(bytes, static_cast<std::size_t>(end - bytes)), "value");
      EXPECT_EQ(codec.read(r), v) << v << " in units of " << scale;
      EXPECT_TRUE(r.done());
    }
  }
  const ValueScale codec(10);
  auto read = [&](std::initializer_list<unsigned char> bytes) {
    const std::string text(bytes.begin(), bytes.end());
    ByteReader<> r(text, "value");
    return codec.read(r);
  };
  EXPECT_EQ(read({2 << 1 | 1, 7}), 27u);
  EXPECT_THROW(read({2 << 1 | 1, 0}), BytesError);   // a remainder of 0 is flagged
  EXPECT_THROW(read({2 << 1 | 1, 10}), BytesError);  // a remainder as large as the scale
  EXPECT_THROW(read({0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01}), BytesError);  // overflows
}

// csp-prof-mpi writes values from columns (by profile) and dealt out value by value (by node);
// both must store exactly the bytes of the list forms: the same blocks, cut at the same points
// (node blocks of more than 1,024 values, a profile whose last entries are zeros), zeros dropped.
TEST(ShardWriterContract, ColumnsAndDealtBlocksStoreTheBytesOfTheLists) {
  TempDir tmp;
  struct Columns {
    std::vector<NodeId> node;
    std::vector<MetricId> metric;
    std::vector<std::uint64_t> exclusive, inclusive;
  } columns;
  std::vector<ProfileValue> profile;
  for (NodeId n = 0; n < 900; ++n)
    for (MetricId m : {MetricId{0}, MetricId{3}, MetricId{40}}) {
      // Metric 40 (columns 80 and 81: beyond a 64-bit mask of columns, format 4.0's patterns are
      // lists) at every third node.
      if (m == 40 && n % 3 != 0) continue;
      const std::uint64_t ex = (n + m) % 4 == 0 ? 0 : n * 1000 + m;
      // Nodes whose inclusive values are their exclusive ones (CCT leaves: mirrored groups, format
      // 3.0), also with one metric at zero; nodes where only one metric's are.
      const std::uint64_t in = n % 5 == 0 || (n % 5 == 1 && m == 0) ? ex : n % 7 == 0 ? 0 : UINT64_MAX - n;
      columns.node.push_back(n * 2 + 1);
      columns.metric.push_back(m);
      columns.exclusive.push_back(n >= 890 ? 0 : ex);  // the last nodes hold only zeros
      columns.inclusive.push_back(n >= 890 ? 0 : in);
      profile.push_back({n * 2 + 1, m, MetricScope::Exclusive, columns.exclusive.back()});
      profile.push_back({n * 2 + 1, m, MetricScope::Inclusive, columns.inclusive.back()});
    }
  std::vector<NodeValue> node;  // sorted by (metric, scope, profile)
  for (MetricId m : {MetricId{1}, MetricId{2}})
    for (auto scope : {MetricScope::Exclusive, MetricScope::Inclusive})
      for (ProfileId p = 0; p < 2500; ++p) node.push_back({m, scope, p * 3, (p + m) % 5 == 0 ? 0 : p + 1});
  // Also with scales (format 2.0): metric 0 and 2 scaled, 1 and 3 not.
  const std::vector<std::uint64_t> scales = {1000, 1, 7};
  auto build = [&](const fs::path& target, bool lists, const std::vector<std::uint64_t>& valueScales) {
    DatabaseBuilder b(target);
    {
      ShardWriter w(b.stagingDir(), 0, {.valueScales = valueScales});
      if (lists) {
        w.putProfileValues(7, profile);
        w.putNodeValues(4, node);
      } else {
        w.putProfileColumns(7, ProfileValueColumns{columns.node, columns.metric, columns.exclusive, columns.inclusive});
        NodeValueBlocks blocks(valueScales);
        // Every block's values are shown to a visitor before it is encoded (csp-prof-mpi's
        // summaries): 2,000 non-zero values per column make a full block and an open one.
        std::vector<NodeValue> visited;
        std::size_t visits = 0;
        blocks.visitBlocks([&](MetricId metric, MetricScope scope, std::span<const ProfileId> profiles,
                               std::span<const std::uint64_t> values) {
          ASSERT_EQ(profiles.size(), values.size());
          ++visits;
          for (std::size_t k = 0; k < values.size(); ++k) visited.push_back({metric, scope, profiles[k], values[k]});
        });
        for (std::size_t p = 0; p < 2500; ++p)  // dealt out profile by profile, as csp-prof-mpi does
          for (std::size_t column = 0; column < 4; ++column) {
            const auto& v = node[column * 2500 + p];
            blocks.add(v.metric, v.scope, v.profile, v.value);
          }
        w.putNodeBlocks(4, blocks);
        EXPECT_TRUE(blocks.empty());
        // The full blocks are shown as they fill (all columns side by side), the open ones when
        // the node is written: per column, its values in profile order, zeros left out.
        std::stable_sort(visited.begin(), visited.end(), [](const NodeValue& a, const NodeValue& b) {
          return std::pair(a.metric, a.scope) < std::pair(b.metric, b.scope);
        });
        auto nonZero = node;
        std::erase_if(nonZero, [](const NodeValue& v) { return v.value == 0; });
        EXPECT_EQ(visited, nonZero);
        EXPECT_EQ(visits, 4 * 2u);
      }
      w.finish();
    }
    test::publishBare(b, 1);
  };
  build(tmp.path() / "lists", true, {});
  build(tmp.path() / "columns", false, {});
  build(tmp.path() / "scaled-lists", true, scales);
  build(tmp.path() / "scaled-columns", false, scales);
  auto entries = [](const fs::path& target, const std::string& family) {
    std::vector<std::pair<std::string, std::string>> out;
    Database::open(target)->forEachEntry(family,
                                         [&](std::string_view k, std::string_view v) { out.emplace_back(k, v); });
    return out;
  };
  for (const std::string family : {"values_by_profile", "values_by_node"}) {
    const auto lists = entries(tmp.path() / "lists", family);
    EXPECT_GT(lists.size(), 4u) << family;
    EXPECT_EQ(entries(tmp.path() / "columns", family), lists) << family;
    const auto scaled = entries(tmp.path() / "scaled-lists", family);
    EXPECT_EQ(entries(tmp.path() / "scaled-columns", family), scaled) << family;
    EXPECT_NE(scaled, lists) << family;
  }
  const auto plain = Database::open(tmp.path() / "lists"), scaled = Database::open(tmp.path() / "scaled-columns");
  auto nonZero = profile;
  std::erase_if(nonZero, [](const ProfileValue& v) { return v.value == 0; });
  EXPECT_EQ(plain->profileValues(7), nonZero);
  EXPECT_EQ(scaled->profileValues(7), plain->profileValues(7));
  EXPECT_EQ(scaled->nodeValues(4), plain->nodeValues(4));
}

TEST(ShardWriterContract, RejectsUnsortedInput) {
  TempDir tmp;
  DatabaseBuilder b(tmp.path() / "db");
  ShardWriter w(b.stagingDir(), 0);
  w.putNode(5, CctNode{});
  EXPECT_THROW(w.putNode(5, CctNode{}), std::logic_error);
  EXPECT_THROW(w.putNode(4, CctNode{}), std::logic_error);
  w.putProfileValues(2, std::vector<ProfileValue>{{1, 0, MetricScope::Exclusive, 1}});
  EXPECT_THROW(w.putProfileValues(1, {}), std::logic_error);
  const std::vector<ProfileValue> unsorted{{2, 0, MetricScope::Exclusive, 1}, {1, 0, MetricScope::Exclusive, 1}};
  EXPECT_THROW(w.putProfileValues(3, unsorted), std::logic_error);
  const std::vector<NodeValue> duplicate{{0, MetricScope::Inclusive, 4, 1}, {0, MetricScope::Inclusive, 4, 2}};
  EXPECT_THROW(w.putNodeValues(1, duplicate), std::logic_error);
  const std::vector<CctNode> badTree{CctNode{}, CctNode{.parent = 2}, CctNode{.parent = 0}};
  ShardWriter w2(b.stagingDir(), 1);
  EXPECT_THROW(w2.putCct(badTree), std::logic_error);
  w.finish();
  EXPECT_THROW(w.putNode(9, CctNode{}), std::logic_error);
}

// Blocks a ProfileBlockEncoder made (csp-prof-mpi's values pass) store what the same values
// stored from their columns do; they are refused out of profile order or when none were made.
TEST(ShardWriterContract, EncodedProfileBlocksStoreTheBytesOfTheColumns) {
  TempDir tmp;
  const std::vector<std::uint64_t> scales = {1000, 1, 7};
  const std::vector<ValueScale> valueScales = {ValueScale(1000), ValueScale(1), ValueScale(7)};
  std::vector<NodeId> node;
  std::vector<MetricId> metric;
  std::vector<std::uint64_t> exclusive, inclusive;
  for (NodeId n = 0; n < 2000; ++n)
    for (MetricId m = 0; m < 3; ++m) {
      if ((n + m) % 5 == 0) continue;
      node.push_back(n);
      metric.push_back(m);
      exclusive.push_back(n % 3 == 0 ? 0 : (n + 1) * 1000 + m);
      inclusive.push_back(n % 4 == 0 ? exclusive.back() : (n + 1) * 7000);
    }
  auto build = [&](const fs::path& target, bool encoded) {
    DatabaseBuilder b(target);
    {
      ShardWriter w(b.stagingDir(), 0, {.valueScales = scales});
      for (ProfileId profile : {ProfileId{3}, ProfileId{9}}) {
        if (!encoded) {
          w.putProfileColumns(profile, ProfileValueColumns{node, metric, exclusive, inclusive});
          continue;
        }
        ProfileBlockEncoder encoder(valueScales);
        auto encoding = encoder.begin();
        for (std::size_t k = 0, end = 0; k < node.size(); k = end) {
          std::uint64_t e[3] = {}, i[3] = {};
          for (end = k; end < node.size() && node[end] == node[k]; ++end) {
            e[metric[end]] = exclusive[end];
            i[metric[end]] = inclusive[end];
          }
          encoding.addNode<3>(node[k], e, i);
        }
        const ProfileBlocks blocks = encoder.finish(encoding);
        w.putProfileBlocks(profile, blocks);
        EXPECT_THROW(w.putProfileBlocks(profile, blocks), std::logic_error);  // not ascending
      }
      EXPECT_THROW(w.putProfileBlocks(10, ProfileBlocks{}), std::logic_error);  // not made
      w.finish();
    }
    test::publishBare(b, 1);
  };
  build(tmp.path() / "columns", false);
  build(tmp.path() / "encoded", true);
  auto entries = [](const fs::path& target) {
    std::vector<std::pair<std::string, std::string>> out;
    Database::open(target)->forEachEntry("values_by_profile",
                                         [&](std::string_view k, std::string_view v) { out.emplace_back(k, v); });
    return out;
  };
  const auto columns = entries(tmp.path() / "columns");
  EXPECT_GT(columns.size(), 10u);
  EXPECT_EQ(entries(tmp.path() / "encoded"), columns);
  EXPECT_EQ(Database::open(tmp.path() / "encoded")->profileValues(9),
            Database::open(tmp.path() / "columns")->profileValues(9));
}

TEST(ShardWriterContract, OverlappingShardsAreRejected) {
  TempDir tmp;
  DatabaseBuilder b(tmp.path() / "db");
  for (std::uint32_t k = 0; k < 2; ++k) {
    ShardWriter w(b.stagingDir(), k);
    w.putNode(10 * k, CctNode{});
    w.putNode(10 * k + 15, CctNode{});  // shard 0: 0..15, shard 1: 10..25
    w.finish();
  }
  try {
    b.ingestShards(2);
    FAIL() << "overlap accepted";
  } catch (const DatabaseError& e) {
    EXPECT_NE(std::string(e.what()).find("shards 0 and 1 overlap in column family cct_nodes"), std::string::npos)
        << e.what();
  }
}

// Three runs of a node's values (as csp-prof-mpi writes values by node, batch by batch),
// `nodes` nodes each, ten profiles per run, written with NodeRunWriter into `dir`.
// Every third node is a CCT leaf: only its exclusive values are dealt out, and the run stands
// them for the inclusive ones too (written once, copied by the merge); node 9, a leaf, has
// 2,500 profiles in each run (several blocks per metric and scope).
std::vector<fs::path> writeRuns(const fs::path& dir, NodeId nodes, std::map<NodeId, std::vector<NodeValue>>* expected) {
  std::vector<fs::path> runs;
  NodeValueBlocks blocks;
  for (std::uint32_t k = 0; k < 3; ++k) {
    runs.push_back(dir / fmt::format("run-{}", k));
    NodeRunWriter w(runs.back());
    for (NodeId n = 0; n < nodes; ++n) {
      if (n % 7 == k) continue;  // a node a run has no values of
      const bool leaf = n % 3 == 0;
      const ProfileId count = n == 9 ? 2500 : 10;
      for (ProfileId p = k * 5000; p < k * 5000 + count; ++p) {
        const NodeValue v{static_cast<MetricId>(p % 2), leaf ? MetricScope::Exclusive : MetricScope::Inclusive, p,
                          1 + n * 100 + p};
        blocks.add(v.metric, v.scope, v.profile, v.value);
        if (!expected) continue;
        (*expected)[n].push_back(v);
        if (leaf) (*expected)[n].push_back({v.metric, MetricScope::Inclusive, v.profile, v.value});
      }
      w.putNodeBlocks(n, blocks, leaf);
    }
    w.finish();
  }
  return runs;
}

TEST(ShardWriterContract, MergedRunsHoldEverythingInOrder) {
  // Three runs over the same nodes, merged into one shard; plus an ordinary shard. Everything
  // reads back as written, the runs are gone.
  TempDir tmp;
  const fs::path target = tmp.path() / "db";
  std::map<NodeId, std::vector<NodeValue>> expected;
  {
    DatabaseBuilder b(target);
    const auto runs = writeRuns(b.stagingDir(), 50, &expected);
    mergeNodeRuns(b.stagingDir(), runs, 1);
    for (const auto& r : runs) EXPECT_FALSE(fs::exists(r)) << r;
    ShardWriter main(b.stagingDir(), 0);
    main.putNode(0, CctNode{});
    main.finish();
    test::publishBare(b, 2);
  }
  auto db = Database::open(target);
  for (NodeId n = 0; n < 50; ++n) {
    auto& want = expected[n];  // by (metric, scope, profile), as nodeValues() gives them
    std::sort(want.begin(), want.end(), [](const NodeValue& a, const NodeValue& b) {
      return std::tie(a.metric, a.scope, a.profile) < std::tie(b.metric, b.scope, b.profile);
    });
    EXPECT_EQ(db->nodeValues(n), want) << n;
  }
  EXPECT_EQ(db->nodeValues(9).size(), 2u * 2500 * 2);  // runs 0 and 1 (run 2 has none of node 9), both scopes
  // A leaf's run refuses inclusive values.
  NodeRunWriter leafRun(tmp.path() / "leaf");
  NodeValueBlocks leafBlocks;
  leafBlocks.add(0, MetricScope::Inclusive, 0, 1);
  EXPECT_THROW(leafRun.putNodeBlocks(3, leafBlocks, true), std::logic_error);
  // Nodes must ascend within a run.
  NodeRunWriter w(tmp.path() / "descending");
  NodeValueBlocks blocks;
  blocks.add(0, MetricScope::Exclusive, 0, 1);
  w.putNodeBlocks(5, blocks);
  blocks.add(0, MetricScope::Exclusive, 0, 1);
  EXPECT_THROW(w.putNodeBlocks(5, blocks), std::logic_error);
}

TEST(ShardWriterContract, DamagedOrMissingRunsAreNamed) {
  TempDir tmp;
  DatabaseBuilder b(tmp.path() / "db");
  auto mergeFails = [&](const std::vector<fs::path>& runs, const fs::path& named, const std::string& what) {
    try {
      mergeNodeRuns(b.stagingDir(), runs, 1);
      ADD_FAILURE() << what << ": merged";
    } catch (const DatabaseError& e) {
      EXPECT_NE(std::string(e.what()).find(named.string()), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find(what), std::string::npos) << e.what();
    }
  };
  auto runs = writeRuns(tmp.path(), 20, nullptr);
  const auto full = fs::file_size(runs[1]);
  // Cut anywhere (between records too: the trailer counts them), or not a run at all.
  for (const std::uintmax_t size : {full - 1, full - 9, full / 2, std::uintmax_t{12}, std::uintmax_t{3}}) {
    runs = writeRuns(tmp.path(), 20, nullptr);
    fs::resize_file(runs[1], size);
    mergeFails(runs, runs[1], size < 8 ? "bad magic" : "damaged run of values by node");
  }
  runs = writeRuns(tmp.path(), 20, nullptr);
  fs::remove(runs[2]);
  mergeFails(runs, runs[2], "cannot open run");
  // A record cut out of the middle: the trailer's count no longer matches.
  runs = writeRuns(tmp.path(), 20, nullptr);
  {
    NodeRunWriter w(runs[0]);
    NodeValueBlocks blocks;
    for (NodeId n = 0; n < 3; ++n) {
      blocks.add(0, MetricScope::Exclusive, 0, 1 + n);
      w.putNodeBlocks(n, blocks);
    }
    w.finish();
  }
  std::string bytes;
  {
    std::ifstream in(runs[0], std::ios::binary);
    bytes.assign(std::istreambuf_iterator<char>(in), {});
  }
  const std::size_t record = (bytes.size() - 8 - 9) / 3;  // magic, three equal records, trailer
  std::string cut = bytes;
  cut.erase(8 + record, record);
  std::ofstream(runs[0], std::ios::binary | std::ios::trunc) << cut;
  mergeFails(runs, runs[0], "trailer counts 3 records, the run holds 2");
  // A record flagged as standing for an inclusive block too whose own block is not exclusive.
  std::string flagged = bytes;
  const std::size_t firstKey = 8 + 1;
  flagged[firstKey + 6] = 1;                                           // the key's scope: inclusive
  flagged[firstKey + static_cast<unsigned char>(bytes[8])] |= '\x80';  // the length's top bit
  std::ofstream(runs[0], std::ios::binary | std::ios::trunc) << flagged;
  mergeFails(runs, runs[0], "mirrored record of no exclusive block");
  // A damaged block length (4 G) is refused as the record it cannot be, not read into a buffer.
  const std::size_t lengthAt = 8 + 1 + static_cast<unsigned char>(bytes[8]);
  bytes.replace(lengthAt, 4, "\xff\xff\xff\xf0", 4);
  std::ofstream(runs[0], std::ios::binary | std::ios::trunc) << bytes;
  const test::AddressSpaceCap cap(std::size_t{1} << 30);
  mergeFails(runs, runs[0], "damaged run of values by node: cut short in a record");
}

TEST(ShardWriterContract, AFullDiskIsNamedWhenARunIsWritten) {
  ASSERT_TRUE(fs::exists("/dev/full"));  // Linux: writes fail with ENOSPC
  NodeRunWriter w("/dev/full");
  NodeValueBlocks blocks;
  try {
    for (NodeId n = 0; n < 4096; ++n) {  // past the writer's buffer
      for (ProfileId p = 0; p < 64; ++p) blocks.add(0, MetricScope::Exclusive, p, 1'000'000 + p);
      w.putNodeBlocks(n, blocks);
    }
    w.finish();
    FAIL() << "writing to /dev/full succeeded";
  } catch (const DatabaseError& e) {
    EXPECT_NE(std::string(e.what()).find("/dev/full"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("No space left on device"), std::string::npos) << e.what();
  }
}

TEST(ShardWriterContract, UnfinishedShardIsRejected) {
  TempDir tmp;
  DatabaseBuilder b(tmp.path() / "db");
  {
    ShardWriter w(b.stagingDir(), 0);
    w.putNode(0, CctNode{});
    w.finish();
  }
  {
    ShardWriter w(b.stagingDir(), 1);
    w.putNode(1, CctNode{});
    // destroyed without finish(): as if its process died
  }
  EXPECT_THROW(b.ingestShards(2), DatabaseError);
}

TEST(DatabasePublication, ExistingDatabaseNeedsForce) {
  TempDir tmp;
  const fs::path target = tmp.path() / "db";
  const Synthetic a{.seed = 1}, b{.seed = 2};
  test::buildInProcess(target, a, "A");
  EXPECT_THROW(test::buildInProcess(target, b, "B"), DatabaseError);
  EXPECT_EQ(Database::open(target)->metadata().title, "A");
  test::buildInProcess(target, b, "B", 1, /*force=*/true);
  test::expectContent(*Database::open(target), b, "B");
  EXPECT_EQ(dirEntries(tmp.path()), std::vector<std::string>{"db"});
}

TEST(DatabasePublication, ForeignDirectoryIsNeverReplaced) {
  TempDir tmp;
  const fs::path target = tmp.path() / "important";
  fs::create_directory(target);
  writeText(target / "thesis.tex", "do not lose me");
  try {
    DatabaseBuilder builder(target, {.force = true, .onStep = {}});
    FAIL() << "a foreign directory would be replaced";
  } catch (const DatabaseError& e) {
    EXPECT_NE(std::string(e.what()).find("not a CSP database"), std::string::npos) << e.what();
  }
  EXPECT_TRUE(fs::exists(target / "thesis.tex"));
}

TEST(DatabasePublication, AbandonedBuildLeavesNothing) {
  TempDir tmp;
  const fs::path target = tmp.path() / "db";
  std::vector<std::string> steps;
  {
    DatabaseBuilder b(target, {.force = false, .onStep = [&](std::string_view s) { steps.emplace_back(s); }});
    EXPECT_TRUE(fs::is_directory(b.tempDir()));
    EXPECT_EQ(b.tempDir().filename().string(), fmt::format(".db.tmp-{}", ::getpid()));
    ShardWriter w(b.stagingDir(), 0);
    Synthetic{}.writeShard(w, 0, 1);
    w.finish();
    b.writeMetadata(Synthetic{}.metadata("x"));
  }
  EXPECT_EQ(steps, (std::vector<std::string>{"created", "metadata"}));
  EXPECT_TRUE(dirEntries(tmp.path()).empty());
}

// A failure right after the database is created (csp-prof-mpi's "output" fault point is there)
// closes it and removes the build directory before the constructor throws: no column family
// handle outlives the database (Debian's RocksDB aborts the process on that), nothing is left,
// and the target can be built again in the same process.
TEST(DatabasePublication, FailureRightAfterCreationClosesTheDatabase) {
  TempDir tmp;
  const fs::path target = tmp.path() / "db";
  auto failAtCreated = [](std::string_view s) {
    if (s == "created") throw std::runtime_error("injected at created");
  };
  EXPECT_THROW(DatabaseBuilder(target, {.force = false, .onStep = failAtCreated}), std::runtime_error);
  EXPECT_TRUE(dirEntries(tmp.path()).empty());
  {
    DatabaseBuilder b(target);
    EXPECT_TRUE(b.leftovers().empty());
    ShardWriter w(b.stagingDir(), 0);
    Synthetic{}.writeShard(w, 0, 1);
    w.finish();
    b.writeMetadata(Synthetic{}.metadata("again"));
    b.ingestShards(1);
    b.publish();
  }
  EXPECT_EQ(dirEntries(tmp.path()), std::vector<std::string>{"db"});
  EXPECT_EQ(Database::open(target)->formatVersion().major, kDatabaseFormatMajor);
}

// BuildOptions::openLater (csp-prof-mpi's root creates its database beside the read): the
// constructor makes the directories only, openDatabase() on another thread makes the RocksDB
// instance while a shard is written; the result is the same database. Using the database before
// it is opened, or opening it twice, is refused; a failure while opening leaves nothing.
TEST(DatabasePublication, DatabaseOpenedLaterOnAnotherThread) {
  TempDir tmp;
  const fs::path target = tmp.path() / "db";
  std::vector<std::string> steps;
  {
    DatabaseBuilder b(
        target, {.force = false, .onStep = [&](std::string_view s) { steps.emplace_back(s); }, .openLater = true});
    EXPECT_TRUE(fs::is_directory(b.stagingDir()));
    EXPECT_TRUE(steps.empty());
    EXPECT_THROW(b.writeMetadata(Synthetic{}.metadata("early")), std::logic_error);
    std::thread opening([&] { b.openDatabase(); });
    ShardWriter w(b.stagingDir(), 0);
    Synthetic{}.writeShard(w, 0, 1);
    w.finish();
    opening.join();
    EXPECT_THROW(b.openDatabase(), std::logic_error);
    b.writeMetadata(Synthetic{}.metadata("later"));
    b.ingestShards(1);
    b.publish();
  }
  EXPECT_EQ(steps.front(), "created");
  EXPECT_EQ(dirEntries(tmp.path()), std::vector<std::string>{"db"});
  EXPECT_EQ(Database::open(target)->metadata().title, "later");

  const fs::path second = tmp.path() / "second";
  auto failAtCreated = [](std::string_view s) {
    if (s == "created") throw std::runtime_error("injected at created");
  };
  {
    DatabaseBuilder b(second, {.force = false, .onStep = failAtCreated, .openLater = true});
    EXPECT_THROW(b.openDatabase(), std::runtime_error);
    EXPECT_THROW(b.writeMetadata(Synthetic{}.metadata("x")), std::logic_error);
  }
  EXPECT_EQ(dirEntries(tmp.path()), std::vector<std::string>{"db"});
}

TEST(DatabasePublication, LeftoversOfDeadRunsAreRemovedLiveOnesReported) {
  TempDir tmp;
  const fs::path target = tmp.path() / "db";
  // A pid that is certainly dead: a child we have reaped.
  const pid_t dead = ::fork();
  if (dead == 0) ::_exit(0);
  ::waitpid(dead, nullptr, 0);
  const fs::path deadTmp = tmp.path() / fmt::format(".db.tmp-{}", dead);
  const fs::path liveTmp = tmp.path() / fmt::format(".db.tmp-{}", ::getppid());
  const fs::path unrelated = tmp.path() / ".db.tmp-notapid";
  // Our own pid but no builder of ours: an earlier process had the same pid (containers).
  const fs::path samePidTmp = tmp.path() / fmt::format(".db.tmp-{}", ::getpid());
  for (const auto& d : {deadTmp, liveTmp, unrelated, samePidTmp}) fs::create_directories(d / "staging");
  test::buildInProcess(target, Synthetic{}, "A");
  EXPECT_FALSE(fs::exists(deadTmp));
  EXPECT_EQ(Database::open(target)->metadata().title, "A");  // built in place of samePidTmp
  EXPECT_TRUE(fs::exists(liveTmp));
  EXPECT_TRUE(fs::exists(unrelated));
  const auto reports = cleanupLeftovers(target);
  ASSERT_EQ(reports.size(), 1u);
  EXPECT_EQ(reports[0].path, liveTmp);
  EXPECT_FALSE(reports[0].removed);
  EXPECT_NE(reports[0].reason.find("still running"), std::string::npos) << reports[0].reason;
}

TEST(DatabasePublication, LeftoverOwnersAreIdentifiedBeyondTheirPid) {
  TempDir tmp;
  const fs::path target = tmp.path() / "db";
  // Our parent is alive. What its OWNER file says decides whether it is the owner.
  const pid_t parent = ::getppid();
  auto field = [](pid_t pid, int n) {
    std::ifstream in(fmt::format("/proc/{}/stat", pid));
    std::string line;
    std::getline(in, line);
    std::istringstream rest(line.substr(line.rfind(')') + 1));
    std::string f;
    for (int i = 3; i <= n; ++i) rest >> f;
    return f;
  };
  std::string boot;
  std::ifstream("/proc/sys/kernel/random/boot_id") >> boot;
  const std::string start = field(parent, 22);
  ASSERT_FALSE(start.empty());
  auto leftover = [&](const std::string& name, const std::string& owner) {
    const fs::path d = tmp.path() / name;
    fs::create_directories(d / "staging");
    std::ofstream(d / "OWNER") << owner;
    return d;
  };
  char host[256] = {};
  ::gethostname(host, sizeof host - 1);
  // The same pid, but a process that started at another time: the pid was reused, the owner is dead.
  const auto reused = leftover(fmt::format(".db.tmp-{}", parent),
                               fmt::format("pid {}\nhost {}\nstart 1\nboot {}\n", parent, host, boot));
  auto reports = cleanupLeftovers(target);
  ASSERT_EQ(reports.size(), 1u);
  EXPECT_TRUE(reports[0].removed) << reports[0].reason;
  EXPECT_FALSE(fs::exists(reused));
  // Another boot: dead too.
  const auto rebooted = leftover(fmt::format(".db.tmp-{}", parent),
                                 fmt::format("pid {}\nhost {}\nstart {}\nboot other-boot\n", parent, host, start));
  reports = cleanupLeftovers(target);
  ASSERT_EQ(reports.size(), 1u);
  EXPECT_TRUE(reports[0].removed) << reports[0].reason;
  EXPECT_FALSE(fs::exists(rebooted));
  // The real owner: left alone, and the report says what to do.
  const auto live = leftover(fmt::format(".db.tmp-{}", parent),
                             fmt::format("pid {}\nhost {}\nstart {}\nboot {}\n", parent, host, start, boot));
  reports = cleanupLeftovers(target);
  ASSERT_EQ(reports.size(), 1u);
  EXPECT_FALSE(reports[0].removed);
  EXPECT_TRUE(fs::exists(live));
  EXPECT_NE(reports[0].reason.find("still running"), std::string::npos) << reports[0].reason;
  EXPECT_NE(reports[0].reason.find("stop it"), std::string::npos) << reports[0].reason;
  fs::remove_all(live);
  // Another host: left alone, with the command to remove it.
  const auto remote = leftover(".db.tmp-12345", "pid 12345\nhost some-other-node\n");
  reports = cleanupLeftovers(target);
  ASSERT_EQ(reports.size(), 1u);
  EXPECT_FALSE(reports[0].removed);
  EXPECT_TRUE(fs::exists(remote));
  EXPECT_NE(reports[0].reason.find("some-other-node"), std::string::npos) << reports[0].reason;
  EXPECT_NE(reports[0].reason.find("rm -rf '" + remote.string() + "'"), std::string::npos) << reports[0].reason;
}

TEST(DatabasePublication, InterruptedTwoRenameReplacementIsRestored) {
  TempDir tmp;
  const fs::path target = tmp.path() / "db";
  test::buildInProcess(target, Synthetic{}, "A");
  // What a replacement on a file system without RENAME_EXCHANGE leaves if it dies between renames.
  const pid_t dead = ::fork();
  if (dead == 0) ::_exit(0);
  ::waitpid(dead, nullptr, 0);
  fs::rename(target, tmp.path() / fmt::format(".db.old-{}", dead));
  const auto reports = cleanupLeftovers(target);
  ASSERT_EQ(reports.size(), 1u);
  EXPECT_TRUE(reports[0].removed) << reports[0].reason;
  EXPECT_EQ(Database::open(target)->metadata().title, "A");
}

TEST(DatabasePublication, LinksPlantedAtTemporaryNamesAreNeverFollowed) {
  // Symbolic links to a directory of the user's at every name a build uses or cleans up: the
  // build succeeds, the target is a real directory, and nothing behind the links changes.
  TempDir tmp;
  const fs::path target = tmp.path() / "db";
  const fs::path victim = tmp.path() / "victim";
  fs::create_directories(victim / "staging");
  writeText(victim / "OWNER", "keep");
  const pid_t dead = ::fork();
  if (dead == 0) ::_exit(0);
  ::waitpid(dead, nullptr, 0);
  for (const auto& name :
       {fmt::format(".db.old-{}", dead), fmt::format(".db.tmp-{}", dead), fmt::format(".db.tmp-{}", ::getpid())})
    fs::create_directory_symlink(victim, tmp.path() / name);
  test::buildInProcess(target, Synthetic{}, "A");
  EXPECT_EQ(fs::symlink_status(target).type(), fs::file_type::directory);
  EXPECT_EQ(Database::open(target)->metadata().title, "A");
  EXPECT_EQ(dirEntries(victim), (std::vector<std::string>{"OWNER", "staging"}));
  std::ifstream in(victim / "OWNER");
  std::string text;
  in >> text;
  EXPECT_EQ(text, "keep");
  // The links themselves are gone: they were at names only builds of db use.
  EXPECT_EQ(dirEntries(tmp.path()), (std::vector<std::string>{"db", "victim"}));
}

TEST(DatabaseOpen, MissingDirectory) {
  TempDir tmp;
  expectOpenFails(tmp.path() / "nowhere", "does not exist");
}

TEST(DatabaseOpen, ForeignDirectories) {
  TempDir tmp;
  fs::create_directory(tmp.path() / "empty");
  expectOpenFails(tmp.path() / "empty", "not a CSP database (no CSP-DATABASE manifest");
  fs::create_directory(tmp.path() / "other");
  writeText(tmp.path() / "other" / kDatabaseManifestName, "something else\n");
  expectOpenFails(tmp.path() / "other", "is not a CSP manifest");
  writeText(tmp.path() / "file", "x");
  expectOpenFails(tmp.path() / "file", "not a directory");
  // A bare RocksDB instance with a manifest but without our column families.
  const fs::path bare = tmp.path() / "bare";
  {
    rocksdb::Options o;
    o.create_if_missing = true;
    rocksdb::DB* raw = nullptr;
    ASSERT_TRUE(rocksdb::DB::Open(o, bare.string(), &raw).ok());
    delete raw;
  }
  writeText(bare / kDatabaseManifestName, "CSP experiment database\nformat 1.0\n");
  expectOpenFails(bare, "damaged database: column family 'metadata' is missing");
}

TEST(DatabaseOpen, NewerFormat) {
  TempDir tmp;
  const fs::path target = tmp.path() / "db";
  test::buildInProcess(target, Synthetic{}, "A");
  writeText(target / kDatabaseManifestName, "CSP experiment database\nformat 5.1\n");
  expectOpenFails(target, "database format 5.1 is newer than this CSP reads (1.x to 4.x)");
  writeText(target / kDatabaseManifestName, "CSP experiment database\nformat 0.9\n");
  expectOpenFails(target, "database format 0.9 is older than this CSP reads (1.x to 4.x)");
  // A newer minor version is readable.
  writeText(target / kDatabaseManifestName, "CSP experiment database\nformat 4.7\n");
  EXPECT_EQ(Database::open(target)->formatVersion().minor, 7u);
}

// Format 1.3 added the sampling quality: a database without it (as 1.0-1.2 wrote them) is read with
// no quality; a quality table with a missing entry, or one that does not add up, is damage.
TEST(DatabaseOpen, SamplingQualityOptionalButConsistent) {
  TempDir tmp;
  const Synthetic s{.profiles = 6, .nodes = 50};
  EXPECT_GE(kDatabaseFormatMajor * 100 + kDatabaseFormatMinor, 103u);  // format 1.3 or later
  const fs::path with = tmp.path() / "with";
  test::buildInProcess(with, s, "A");
  {
    auto db = Database::open(with);
    ASSERT_TRUE(db->metadata().hasQuality());
    EXPECT_EQ(db->metadata().quality.size(), 6u);
    EXPECT_EQ(db->metadata().qualityTotal().samples, [&] {
      std::uint64_t sum = 0;
      for (const auto& q : s.metadata("A").quality) sum += q.samples;
      return sum;
    }());
  }
  // Without quality: what a 1.0 writer left.
  const fs::path without = tmp.path() / "without";
  {
    auto meta = s.metadata("A");
    meta.quality.clear();
    test::buildInProcess(without, s, meta);
  }
  test::pretendFormat(without, 1, 0);
  {
    auto db = Database::open(without);
    EXPECT_FALSE(db->metadata().hasQuality());
    EXPECT_EQ(db->metadata().profiles.size(), 6u);
  }
  // A writer never stores quality for only some profiles.
  {
    auto meta = s.metadata("A");
    meta.quality.pop_back();
    DatabaseBuilder b(tmp.path() / "partial", {});
    EXPECT_THROW(b.writeMetadata(meta), std::exception);
  }
  // Damage: one per-profile entry removed, or a total that does not match.
  auto edit = [](const fs::path& dir, const std::function<void(rocksdb::DB*, rocksdb::ColumnFamilyHandle*)>& change) {
    editFamily(dir, "metadata", change);
  };
  const fs::path missing = tmp.path() / "missing";
  test::buildInProcess(missing, s, "A");
  edit(missing, [](rocksdb::DB* db, rocksdb::ColumnFamilyHandle* h) {
    ASSERT_TRUE(db->Delete(rocksdb::WriteOptions(), h, std::string("quality/\0\0\0\5", 12)).ok());
  });
  expectOpenFails(missing, "damaged database: metadata sampling-quality table has 5 of 6 entries");
  // An entry in the middle missing, or one far beyond the table (a damaged id: a table of 4 G
  // entries if it were sized by it), is a gap.
  const fs::path middle = tmp.path() / "middle";
  test::buildInProcess(middle, s, "A");
  edit(middle, [](rocksdb::DB* db, rocksdb::ColumnFamilyHandle* h) {
    ASSERT_TRUE(db->Delete(rocksdb::WriteOptions(), h, std::string("quality/\0\0\0\3", 12)).ok());
  });
  expectOpenFails(
      middle, "damaged database: column family metadata: metadata quality table: entry 4 follows 3 entries (a gap)");
  const fs::path beyond = tmp.path() / "beyond";
  test::buildInProcess(beyond, s, "A");
  edit(beyond, [](rocksdb::DB* db, rocksdb::ColumnFamilyHandle* h) {
    ASSERT_TRUE(db->Put(rocksdb::WriteOptions(), h, std::string("string/\xff\xff\xff\xf0", 11), "x").ok());
  });
  expectOpenFails(beyond, "metadata string table: entry 4294967280 follows");
  const fs::path wrongTotal = tmp.path() / "wrong-total";
  test::buildInProcess(wrongTotal, s, "A");
  edit(wrongTotal, [](rocksdb::DB* db, rocksdb::ColumnFamilyHandle* h) {
    // Profile 3's entry rewritten one sample off from what the total accounts for.
    std::string v;
    ASSERT_TRUE(db->Get(rocksdb::ReadOptions(), h, std::string("quality/\0\0\0\3", 12), &v).ok());
    v[0] = static_cast<char>(v[0] ^ 1);
    ASSERT_TRUE(db->Put(rocksdb::WriteOptions(), h, std::string("quality/\0\0\0\3", 12), v).ok());
  });
  expectOpenFails(wrongTotal, "damaged database: metadata sampling quality does not add up to its total");
}

// Format 1.5: the counts of call paths through code without unwind tables and the loop report
// per module round trip; a database without them (1.0-1.4) opens without them; a loop table with
// a missing entry is damage.
TEST(DatabaseOpen, UnwindRecoveryAndModuleLoops) {
  TempDir tmp;
  const Synthetic s{.profiles = 4, .nodes = 20};
  EXPECT_GE(kDatabaseFormatMajor * 100 + kDatabaseFormatMinor, 105u);  // format 1.5 or later
  const fs::path with = tmp.path() / "with";
  test::buildInProcess(with, s, "A");
  {
    auto db = Database::open(with);
    EXPECT_EQ(db->metadata().unwindRecovery, s.metadata("A").unwindRecovery);
    EXPECT_EQ(db->metadata().moduleLoops, s.metadata("A").moduleLoops);
  }
  const fs::path without = tmp.path() / "without";
  {
    auto meta = s.metadata("A");
    meta.unwindRecovery.reset();
    meta.moduleLoops.clear();
    test::buildInProcess(without, s, meta);
  }
  {
    auto db = Database::open(without);
    EXPECT_FALSE(db->metadata().unwindRecovery.has_value());
    EXPECT_TRUE(db->metadata().moduleLoops.empty());
  }
  const fs::path missing = tmp.path() / "missing";
  test::buildInProcess(missing, s, "A");
  editFamily(missing, "metadata", [](rocksdb::DB* db, rocksdb::ColumnFamilyHandle* h) {
    ASSERT_TRUE(db->Delete(rocksdb::WriteOptions(), h, std::string("module-loops/\0\0\0\1", 17)).ok());
  });
  expectOpenFails(missing,
                  "damaged database: column family metadata: metadata module-loops table: entry 2 follows 1 "
                  "entries (a gap)");
}

// Format 1.4: per-node distributions (histograms, thread classes' accumulators) and the thread
// class of every profile round trip; a database without them (1.0-1.3) opens without them; a
// class table with a missing entry is damage; a bad population in a key is damage.
TEST(DatabaseOpen, DistributionsAndThreadClasses) {
  TempDir tmp;
  const Synthetic s{.profiles = 6, .nodes = 50};
  EXPECT_GE(kDatabaseFormatMajor * 100 + kDatabaseFormatMinor, 104u);  // format 1.4 or later
  const fs::path with = tmp.path() / "with";
  test::buildInProcess(with, s, "A");
  {
    auto db = Database::open(with);
    ASSERT_TRUE(db->hasDistributions());
    EXPECT_EQ(db->metadata().threadClasses, s.metadata("A").threadClasses);
    for (NodeId n : {0u, 7u, 49u}) EXPECT_EQ(db->distributions(n), s.distributions(n)) << n;
  }
  // Written without the family and without classes, as before 1.4.
  const fs::path without = tmp.path() / "without";
  {
    DatabaseBuilder b(without, {});
    auto meta = s.metadata("A");
    meta.threadClasses.clear();
    b.writeMetadata(meta);
    ShardWriter w(b.stagingDir(), 0);
    for (NodeId n = 0; n < s.nodes; ++n) w.putNode(n, s.node(n));
    for (NodeId n = 0; n < s.nodes; ++n)
      for (NodeId c : s.children(n)) w.putChild(n, c);
    w.finish();
    b.ingestShards(1);
    b.publish();
  }
  {
    auto db = Database::open(without);
    EXPECT_TRUE(db->metadata().threadClasses.empty());
    EXPECT_TRUE(db->distributions(3).empty());
  }
  // A writer never stores the classes of only some profiles.
  {
    auto meta = s.metadata("A");
    meta.threadClasses.pop_back();
    DatabaseBuilder b(tmp.path() / "partial", {});
    EXPECT_THROW(b.writeMetadata(meta), std::exception);
  }
  const fs::path missing = tmp.path() / "missing";
  test::buildInProcess(missing, s, "A");
  editFamily(missing, "metadata", [](rocksdb::DB* db, rocksdb::ColumnFamilyHandle* h) {
    ASSERT_TRUE(db->Delete(rocksdb::WriteOptions(), h, std::string("thread-class/\0\0\0\2", 17)).ok());
  });
  expectOpenFails(missing,
                  "damaged database: column family metadata: metadata thread-class table: entry 3 follows 2 "
                  "entries (a gap)");
  const fs::path badKey = tmp.path() / "bad-key";
  test::buildInProcess(badKey, s, "A");
  editFamily(badKey, "distributions", [](rocksdb::DB* db, rocksdb::ColumnFamilyHandle* h) {
    ASSERT_TRUE(db->Put(rocksdb::WriteOptions(), h, std::string("\0\0\0\3\0\0\1\x09", 8), std::string("\0\0", 2)).ok());
  });
  try {
    Database::open(badKey)->distributions(3);
    ADD_FAILURE() << "a distribution of population 9 was accepted";
  } catch (const DatabaseError& e) {
    EXPECT_NE(std::string(e.what()).find("unknown thread class"), std::string::npos) << e.what();
  }
}

TEST(DatabaseOpen, DamagedDatabases) {
  TempDir tmp;
  const Synthetic s{.profiles = 40, .nodes = 400};
  const fs::path noCurrent = tmp.path() / "no-current";
  test::buildInProcess(noCurrent, s, "A");
  fs::remove(noCurrent / "CURRENT");
  expectOpenFails(noCurrent, "damaged database");

  const fs::path noTable = tmp.path() / "no-table";
  test::buildInProcess(noTable, s, "A");
  for (const auto& e : fs::directory_iterator(noTable))
    if (e.path().extension() == ".sst") fs::remove(e.path());
  expectOpenFails(noTable, "damaged database");

  // Every table file overwritten in its middle: checksums catch it at open or on first read.
  const fs::path garbled = tmp.path() / "garbled";
  test::buildInProcess(garbled, s, "A");
  for (const auto& e : fs::directory_iterator(garbled)) {
    if (e.path().extension() != ".sst") continue;
    std::fstream f(e.path(), std::ios::in | std::ios::out | std::ios::binary);
    const auto size = fs::file_size(e.path());
    f.seekp(static_cast<std::streamoff>(size / 4));
    const std::string junk(static_cast<std::size_t>(size / 4), '\x5a');
    f.write(junk.data(), static_cast<std::streamsize>(junk.size()));
  }
  expectOpenFails(garbled, "damaged database");
}

TEST(DatabaseOpen, ManyReadersAtOnce) {
  TempDir tmp;
  const Synthetic s{};
  const fs::path target = tmp.path() / "db";
  test::buildInProcess(target, s, "A");
  const auto before = dirEntries(target);
  std::vector<std::unique_ptr<Database>> readers;
  for (int i = 0; i < 4; ++i) readers.push_back(Database::open(target));
  // ... also while another database is being built next to it.
  DatabaseBuilder other(tmp.path() / "other");
  for (const auto& r : readers) test::expectContent(*r, s, "A");
  // One database shared by several threads.
  std::vector<std::thread> threads;
  std::atomic<int> mismatches{0};
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&, t] {
      for (NodeId n = static_cast<NodeId>(t); n < s.nodes; n += 4)
        if (readers[0]->nodeValues(n) != s.nodeValues(n) || readers[0]->children(n) != s.children(n)) ++mismatches;
    });
  for (auto& t : threads) t.join();
  EXPECT_EQ(mismatches.load(), 0);
  readers.clear();
  EXPECT_EQ(dirEntries(target), before);  // read-only opens leave the directory untouched
}

TEST(DatabaseOpen, OneWriterAtATime) {
  TempDir tmp;
  const fs::path target = tmp.path() / "db";
  test::buildInProcess(target, Synthetic{}, "A");
  auto writer = Database::open(target, Database::Mode::ReadWrite);
  expectOpenFailsWith(target, Database::Mode::ReadWrite, "is open for writing by another process");
  // Readers are not locked out.
  EXPECT_EQ(Database::open(target)->metadata().title, "A");
}

TEST(DatabasePublication, OneBuildOfATargetPerProcess) {
  TempDir tmp;
  DatabaseBuilder first(tmp.path() / "db");
  EXPECT_THROW(DatabaseBuilder(tmp.path() / "db"), DatabaseError);
  EXPECT_TRUE(fs::is_directory(first.tempDir()));  // the failed second build took nothing with it
}

// ByteReader::u64 (the fast path for 64-bit varints) accepts and rejects what varint(64) does.
TEST(ByteReader, U64AgreesWithVarint64) {
  std::vector<std::string> encodings;
  for (const Uint128 v : {Uint128{0}, Uint128{1}, Uint128{127}, Uint128{128}, Uint128{300}, Uint128{UINT32_MAX},
                          Uint128{1} << 56, Uint128{1} << 63, Uint128{UINT64_MAX}, Uint128{UINT64_MAX} + 1}) {
    std::string e;
    storage::putVarint(e, v);
    encodings.push_back(e);
  }
  encodings.push_back("\x80");                                          // truncated
  encodings.push_back(std::string("\x80\x00", 2));                      // overlong
  encodings.push_back("\xff\xff\xff\xff\xff\xff\xff\xff\xff\x02");      // 65 bits
  encodings.push_back("\xff\xff\xff\xff\xff\xff\xff\xff\xff\x80\x00");  // continued past 64 bits
  for (const auto& e : encodings) {
    SCOPED_TRACE(fmt::format("{} bytes, last {:#x}", e.size(), static_cast<unsigned char>(e.back())));
    std::optional<std::uint64_t> fast, slow;
    try {
      storage::ByteReader<> r(e, "test");
      fast = r.u64();
    } catch (const storage::BytesError&) {
    }
    try {
      storage::ByteReader<> r(e, "test");
      slow = static_cast<std::uint64_t>(r.varint(64));
    } catch (const storage::BytesError&) {
    }
    EXPECT_EQ(fast, slow);
  }
}
