// HPCToolkit's database format 4.0 (meta.db, profile.db, cct.db and metrics/default.yaml; HPCToolkit's
// doc/FORMATS.md), as CSP writes it: the byte encodings and the file layouts, with no MPI. The
// parallel export (export.cpp) decides who encodes what and where it goes.
//
// What maps to what (docs/hpctoolkit.md): CCT node n is context n + 1, and the implicit global
// context 0 repeats the root's values; the root is the one entry point ("main thread"); profile p
// is profile index p + 1 (index 0: the summary profile). Metric m has ten ids: statistic id
// 10 m + 2 k + s for partial k (count, sum of squares, min, max, sum) and scope s (0 exclusive,
// scope "function"; 1 inclusive, scope "execution"); its propagated values use the ids of the
// sum partial, 10 m + 8 + s.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "csp/storage/database.hpp"

namespace csp::reduce::hpctk {

// Sizes and offsets fixed by the format (FORMATS.md tables).
inline constexpr std::uint64_t kMetaHeaderSize = 0x90;
inline constexpr std::uint64_t kProfileHeaderSize = 0x30;
inline constexpr std::uint64_t kCctHeaderSize = 0x20;
inline constexpr std::uint64_t kProfileInfoSize = 0x30;   // {PI}
inline constexpr std::uint64_t kContextInfoSize = 0x20;   // {CI}
inline constexpr std::uint64_t kProfileValueSize = 0x0a;  // profile.db {Val}: u16 metric, f64
inline constexpr std::uint64_t kProfileIndexSize = 0x0c;  // profile.db {Idx}: u32 context, u64 start
inline constexpr std::uint64_t kContextValueSize = 0x0c;  // cct.db {Val}: u32 profile, f64
inline constexpr std::uint64_t kContextIndexSize = 0x0a;  // cct.db {Idx}: u16 metric, u64 start
inline constexpr std::uint64_t kIdTupleHeaderSize = 0x08;
inline constexpr std::uint64_t kIdTupleElementSize = 0x10;
inline constexpr char kMetaFooter[] = "_meta.db";
inline constexpr char kProfileFooter[] = "_prof.db";
inline constexpr char kCctFooter[] = "__ctx.db";
inline constexpr std::uint64_t kFooterSize = 8;

constexpr std::uint64_t alignUp(std::uint64_t v, std::uint64_t a) { return (v + a - 1) / a * a; }

// Metric ids (see the top of this file).
inline constexpr unsigned kPartials = 5;
enum class Partial : unsigned { Count = 0, SumSquares = 1, Min = 2, Max = 3, Sum = 4 };
inline constexpr unsigned kIdsPerMetric = 2 * kPartials;
inline constexpr std::size_t kMaxMetrics = 65536 / kIdsPerMetric;
constexpr std::uint16_t statisticId(std::size_t metric, Partial p, storage::MetricScope s) {
  return static_cast<std::uint16_t>(metric * kIdsPerMetric + 2 * static_cast<unsigned>(p) + static_cast<unsigned>(s));
}
constexpr std::uint16_t propagatedId(std::size_t metric, storage::MetricScope s) {
  return statisticId(metric, Partial::Sum, s);
}
constexpr std::uint32_t contextOf(storage::NodeId node) { return node + 1; }

// The metric's name in the HPCToolkit database: "cpu-time" and "real-time" take HPCToolkit's names
// (CPUTIME, REALTIME: the names Hatchet's reader looks for), and a unit follows in parentheses as
// in HPCToolkit's names: "CPUTIME (ns)", "work (units)".
std::string metricName(const MetricDescriptor& metric);

// A per-thread value as HPCToolkit stores it (f64): counts convert (exactly below 2^53), real
// values are the stored bit pattern.
double valueOf(std::uint64_t stored, storage::ValueType type);

// Little-endian image of a part of a file, addressed by absolute file offsets.
class Image {
 public:
  explicit Image(std::uint64_t base = 0) : base_(base) {}
  std::uint64_t base() const { return base_; }
  std::uint64_t end() const { return base_ + bytes_.size(); }
  void alignTo(std::uint64_t a) { bytes_.resize(alignUp(end(), a) - base_, '\0'); }
  std::uint64_t reserve(std::uint64_t n);  // zero bytes; returns their offset
  void u8(std::uint64_t at, std::uint8_t v) { bytes_[at - base_] = static_cast<char>(v); }
  void u16(std::uint64_t at, std::uint16_t v) { put(at, v, 2); }
  void u32(std::uint64_t at, std::uint32_t v) { put(at, v, 4); }
  void u64(std::uint64_t at, std::uint64_t v) { put(at, v, 8); }
  void f64(std::uint64_t at, double v);
  std::uint64_t cstring(std::string_view text);  // appends text and a NUL; returns its offset
  void raw(std::string_view bytes) { bytes_.append(bytes); }
  const std::string& bytes() const { return bytes_; }
  std::string take() { return std::move(bytes_); }

 private:
  void put(std::uint64_t at, std::uint64_t v, int n);
  std::uint64_t base_;
  std::string bytes_;
};

// meta.db, whole (written by one process: its size grows with the CCT, not with the profiles).
struct MetaInput {
  const storage::DatabaseMetadata* metadata = nullptr;
  const std::vector<storage::CctNode>* cct = nullptr;
  std::string description;  // Markdown text of the General Properties section
};
std::string encodeMetaDb(const MetaInput& input);

// metrics/default.yaml: the metric taxonomy hpcviewer reads (HPCToolkit's METRICS.yaml format,
// version 0): every metric with Sum, Mean, StdDev, CfVar, Min and Max of both scopes.
std::string encodeMetricsYaml(const storage::DatabaseMetadata& metadata);

// The identifier kinds (meta.db Identifier Names; index = kind) and the id tuples of profile.db.
// HPCToolkit's kinds keep their numbers (NODE 1, RANK 2, THREAD 3, CORE 7); CSP's process is 8.
struct IdKinds {
  std::vector<std::string> names;
  std::vector<std::uint8_t> kindOf;  // by csp::IdKind value
};
IdKinds idKinds();
// The Identifier Tuple section: profiles' tuples in profile order; `offsets` gets each tuple's
// absolute offset (the section starts at `at`).
std::string encodeIdTuples(const std::vector<IdTuple>& profiles, std::uint64_t at, std::vector<std::uint64_t>& offsets);

// One profile's values in profile-major order (profile.db): contexts ascending, their values by
// metric id. The block is position-independent and starts 8-aligned: values, then the context
// index at the next 4-aligned offset, padded to a multiple of 8.
struct Block {
  std::uint64_t values = 0;   // nValues
  std::uint32_t indices = 0;  // nCtxs (profile.db) or nMetrics (cct.db)
  std::uint64_t bytes = 0;    // size including the final padding
};
class ProfileBlockEncoder {
 public:
  // Contexts ascending, metrics ascending within a context; zeros are left out (sparse).
  void add(std::uint32_t context, std::uint16_t metric, double v);
  // Appends the block to `out` and resets.
  Block finish(std::string& out);

 private:
  std::string values_;
  std::string index_;
  std::uint64_t count_ = 0;
  std::uint32_t contexts_ = 0;
  std::uint32_t lastContext_ = 0;
};
// Offsets of a profile.db block's two arrays from its start.
inline std::uint64_t profileIndexOffset(const Block& b) { return alignUp(b.values * kProfileValueSize, 4); }
inline std::uint64_t profileBlockBytes(std::uint64_t values, std::uint64_t indices) {
  return alignUp(alignUp(values * kProfileValueSize, 4) + indices * kProfileIndexSize, 8);
}

// One context's values in context-major order (cct.db): metrics ascending, their values by
// profile index; values first, then the metric index (2-aligned right after them), padded to 8.
// A chunk of blocks in memory, 4096-aligned for direct I/O; grows by doubling.
class ChunkBuffer {
 public:
  ChunkBuffer() = default;
  ~ChunkBuffer();
  ChunkBuffer(ChunkBuffer&& o) noexcept { swap(o); }
  ChunkBuffer& operator=(ChunkBuffer&& o) noexcept {
    swap(o);
    return *this;
  }
  char* extend(std::size_t n);         // n more bytes, not initialized
  void padTo(std::uint64_t multiple);  // zeros up to a multiple of `multiple`
  const char* data() const { return data_; }
  std::size_t size() const { return size_; }
  void clear() { size_ = 0; }

 private:
  void swap(ChunkBuffer& o) noexcept {
    std::swap(data_, o.data_);
    std::swap(size_, o.size_);
    std::swap(capacity_, o.capacity_);
  }
  char* data_ = nullptr;
  std::size_t size_ = 0;
  std::size_t capacity_ = 0;
};

// One profile's per-thread values (sorted by node, metric, scope, as the CSP database gives them)
// as a profile.db block appended to `out` (context 0 repeats the root's values).
Block encodeProfileBlock(std::span<const storage::ProfileValue> values, std::span<const storage::ValueType> types,
                         ChunkBuffer& out);
// One node's per-thread values (sorted by metric, scope, profile) as a cct.db block: values, then
// the metric index (2-aligned right after them), padded to a multiple of 8.
Block encodeContextBlock(std::span<const storage::NodeValue> values, std::span<const storage::ValueType> types,
                         ChunkBuffer& out);
inline std::uint64_t contextIndexOffset(const Block& b) { return b.values * kContextValueSize; }

// Where things go in profile.db and cct.db, from sizes alone, identical on every process. The
// per-thread blocks come in chunks of consecutive profiles (contexts), each starting at a multiple
// of kChunkAlignment: one process writes a whole chunk, page-aligned, with no page shared with
// another process's writes.
inline constexpr std::uint64_t kChunkAlignment = 4096;
inline constexpr std::uint64_t kProfilesPerChunk = 64;
inline constexpr std::uint64_t kNodesPerChunk = 64;

struct ProfileDbLayout {
  std::uint64_t profiles = 0;       // including the summary profile
  std::uint64_t pProfileInfos = 0;  // section
  std::uint64_t szProfileInfos = 0;
  std::uint64_t pProfiles = 0;  // {PI} array
  std::uint64_t pIdTuples = 0;
  std::uint64_t szIdTuples = 0;
  std::uint64_t pBlocks = 0;         // the per-thread blocks' chunks, in profile order
  std::uint64_t pSummaryValues = 0;  // after the chunks (placeSummary)
  std::uint64_t pSummaryIndex = 0;
  std::uint64_t footer = 0;  // offset of the footer; the file ends 8 bytes later
};
ProfileDbLayout profileDbLayout(std::uint64_t threadProfiles, std::uint64_t idTupleBytes);
void placeSummary(ProfileDbLayout& layout, std::uint64_t blockBytes, std::uint64_t summaryValues,
                  std::uint64_t summaryContexts);
std::string encodeProfileDbHeader(const ProfileDbLayout& layout);           // at 0
std::string encodeProfileInfoSectionHeader(const ProfileDbLayout& layout);  // at pProfileInfos
// A {PI}: `pIdTuple` 0 and summary for the summary profile.
std::string encodeProfileInfo(const Block& block, std::uint64_t at, std::uint64_t pIdTuple, bool summary);

struct CctDbLayout {
  std::uint64_t contexts = 0;
  std::uint64_t pCtxInfos = 0;
  std::uint64_t szCtxInfos = 0;
  std::uint64_t pCtxs = 0;
  std::uint64_t pBlocks = 0;  // the chunks of context blocks; the footer follows the last
};
CctDbLayout cctDbLayout(std::uint64_t contexts);
std::string encodeCctDbHeader(const CctDbLayout& layout);  // header and section header, at 0
std::string encodeContextInfo(const Block& block, std::uint64_t at);

}  // namespace csp::reduce::hpctk
