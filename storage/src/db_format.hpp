// Key layout, value encodings and RocksDB options of the database (docs/database-format.md is
// the reference; keep the two in step). Shared by the reader and the writers.
#pragma once

#include <rocksdb/options.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "csp/storage/bytes.hpp"
#include "csp/storage/database.hpp"
#include "csp/storage/profile_blocks.hpp"

namespace csp::storage::format {

// Column family names. "default" exists in every RocksDB instance and stays empty.
inline constexpr const char* kMetadata = "metadata";
inline constexpr const char* kCctNodes = "cct_nodes";
inline constexpr const char* kCctChildren = "cct_children";
inline constexpr const char* kSummaries = "summaries";
inline constexpr const char* kValuesByProfile = "values_by_profile";
inline constexpr const char* kValuesByNode = "values_by_node";
inline constexpr const char* kRegionNodes = "region_nodes";
inline constexpr const char* kRegionSummaries = "region_summaries";
inline constexpr const char* kViewCache = "view_cache";  // reserved, empty (docs/database-format.md)
// Added in format 1.2; older databases lack it and still open.
inline constexpr const char* kRegionEvents = "region_events";
// Added in format 1.4: histograms and per-thread-class summaries.
inline constexpr const char* kDistributions = "distributions";
inline constexpr std::size_t kRegionLogBlockEvents = 4096;
// Added in format 1.7: clocks across processes and communication events.
inline constexpr const char* kCommEvents = "comm_events";

// Families written by ShardWriter (everything but metadata and the view cache), in a fixed
// order that is also the order of the shard index file.
const std::vector<std::string>& shardFamilies();

// A value that does not decode: the database is damaged.
class FormatError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Node blocks are cut after this many values so that a block stays a few KiB (profile blocks:
// kProfileBlockValues, profile_blocks.hpp).
inline constexpr std::size_t kNodeBlockValues = 1024;

// --- primitive encodings: the one byte codec (csp/storage/bytes.hpp) ---------------------------
using storage::putBe16;
using storage::putBe32;
using storage::putBytes;  // varint length + bytes
using storage::putVarint;
using Reader = ByteReader<FormatError>;

// --- keys ------------------------------------------------------------------------------------
std::string nodeKey(NodeId id);                                                                       // be32
std::string childKey(NodeId parent, NodeId child);                                                    // be32 be32
std::string summaryKey(std::uint32_t id, MetricId metric, MetricScope scope);                         // be32 be16 u8
std::string distributionKey(NodeId id, MetricId metric, MetricScope scope, std::uint8_t population);  // be32 be16 u8 u8
// The head shared by summary, region-summary, distribution and values_by_node keys: be32 id, be16 metric, u8
// scope (checked). The caller reads what follows and ends the key.
struct AccumulatorKeyHead {
  std::uint32_t id = 0;
  MetricId metric = 0;
  MetricScope scope = MetricScope::Exclusive;
};
AccumulatorKeyHead readAccumulatorKeyHead(Reader& key);
std::string encodeDistribution(std::string_view accumulator, std::string_view histogram);
// A distribution entry decoded in place (views into key and value), with every check.
struct DistributionView {
  AccumulatorKeyHead head;
  std::uint8_t population = kAllThreads;
  std::string_view accumulator, histogram;
};
DistributionView decodeDistributionView(std::string_view key, std::string_view value);
DistributionEntry decodeDistribution(std::string_view key, std::string_view value);
std::string profileBlockKey(ProfileId profile, NodeId firstNode);                                   // be32 be32
std::string nodeBlockKey(NodeId node, MetricId metric, MetricScope scope, ProfileId firstProfile);  // be32 be16 u8 be32

// The smallest key greater than every key starting with `prefix` (an exclusive upper bound).
std::string prefixEnd(std::string_view prefix);

// --- values ----------------------------------------------------------------------------------
std::string encodeCctNode(const CctNode& node);
CctNode decodeCctNode(std::string_view value);
std::string encodeRegionNode(const RegionNode& region);
RegionNode decodeRegionNode(std::string_view value);

// Calls emit(key, value) for each block of one profile's values (sorted, zeros already dropped).
using Emit = std::function<void(const std::string& key, const std::string& value)>;
// Value blocks are handed over as views of the encoder's buffer.
using EmitBlock = std::function<void(const std::string& key, std::string_view value)>;
// `scales`: by metric, the unit each metric's values are stored in (ShardOptions::valueScales);
// a block whose metrics have one names them first.
void encodeProfileBlocks(ProfileId profile, const std::vector<ProfileValue>& values, std::span<const ValueScale> scales,
                         const EmitBlock& emit);
// The same blocks from columns (unsorted or repeated entries are the caller's check); returns
// the number of non-zero values written.
std::uint64_t encodeProfileBlocks(ProfileId profile, const ProfileValueColumns& values,
                                  std::span<const ValueScale> scales, const EmitBlock& emit);
// Blocks a ProfileBlockEncoder made, each with its key; returns the number of non-zero values.
std::uint64_t emitProfileBlocks(ProfileId profile, const ProfileBlocks& blocks, const EmitBlock& emit);
// `formatMajor`: the database's format major version, which fixes the block layout (3.0: mirrored
// groups; 4.0: column patterns).
void decodeProfileBlock(std::string_view key, std::string_view value, std::vector<ProfileValue>& out,
                        std::uint32_t formatMajor);
// Node blocks are built by NodeValueBlocks (database_writer.hpp) with encodeNodeBlock: the block
// (format 4.0) of one (node, metric, scope) for `profiles` (ascending, at least one) with their
// `values` (non-zero), written into `buffer` (grown as needed) and returned as a view of it.
std::string_view encodeNodeBlock(std::span<const ProfileId> profiles, std::span<const std::uint64_t> values,
                                 const ValueScale& scale, std::vector<char>& buffer);
void decodeNodeBlock(std::string_view key, std::string_view value, std::vector<NodeValue>& out,
                     std::uint32_t formatMajor);

// Region event logs: keys be32 process | be32 process be32 thread | ... be32 block.
std::string regionLogThreadKey(ProfileId process, ProfileId thread);
std::string regionLogBlockKey(ProfileId process, ProfileId thread, std::uint32_t block);
std::string encodeRegionLogProcess(const RegionLogProcess& p);  // value of key be32 process (threads' ids included)
RegionLogProcess decodeRegionLogProcess(std::string_view key, std::string_view value);
std::string encodeRegionLogThread(const RegionLogThread& t, std::uint32_t blocks);
RegionLogThread decodeRegionLogThread(std::string_view key, std::string_view value);
std::string encodeRegionLogBlock(std::span<const RegionLogEvent> events);
void decodeRegionLogBlock(std::string_view value, std::vector<RegionLogEvent>& out);  // appends
std::uint32_t regionLogThreadBlocks(std::string_view value);  // the block count of a thread entry
std::uint64_t regionLogBlockStart(std::string_view value);    // a block's first event time (0 if empty)

// Communication events: keys be32 process (its clock) | be32 process be32 thread (its events).
std::string encodeProcessClock(const ProcessClock& p);
ProcessClock decodeProcessClock(std::string_view key, std::string_view value);
std::string encodeCommEvents(std::span<const CommEventRecord> events);
// Appends; `withWaits`: written by format 1.8 or later (wait begins and collective ops).
void decodeCommEvents(std::string_view key, std::string_view value, std::vector<CommEventRecord>& out, bool withWaits);

// Metadata column family: every entry of the metadata, keyed as documented.
void encodeMetadata(const DatabaseMetadata& metadata, const Emit& emit);
// Builds the metadata from the metadata family's entries in key order.
class MetadataDecoder {
 public:
  void add(std::string_view key, std::string_view value);
  DatabaseMetadata finish();  // checks that dense tables have no gaps
  FormatVersion version() const { return version_; }

 private:
  struct Counts {
    std::uint64_t metrics = 0, profiles = 0, strings = 0, skipped = 0, quality = 0, threadClasses = 0, moduleLoops = 0;
  };
  SamplingQuality qualityTotal_;
  bool sawQuality_ = false;
  DatabaseMetadata m_;
  FormatVersion version_;
  bool sawVersion_ = false;
  bool sawExperiment_ = false;
  Counts expected_, seen_;
};

// --- RocksDB options -------------------------------------------------------------------------
// Options of a family, identical for the instance and for SstFileWriter so that ingested files
// are what the instance itself would have written.
rocksdb::ColumnFamilyOptions familyOptions(const std::string& family);
// Instance options; `readOnly` disables everything that would touch the directory.
rocksdb::DBOptions instanceOptions();

// The manifest text for the current version, and its parser (nullopt: not a CSP manifest).
std::string manifestText();
std::optional<FormatVersion> parseManifest(std::string_view text);

}  // namespace csp::storage::format
