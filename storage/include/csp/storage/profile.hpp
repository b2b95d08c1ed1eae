// The per-thread profile: what one measured thread (an "execution context") recorded.
//
// This is the in-memory form of the on-disk format described in docs/profile-format.md and
// storage/schema/profile.capnp. It is plain data: the measurement library and csp-gen fill it,
// the reader returns it, csp-prof-mpi consumes it. Lists that describe nodes are column-wise,
// mirroring the file.
#pragma once

#include <bit>
#include <compare>
#include <cstdint>
#include <limits>
#include <string>
#include <string_view>
#include <vector>

namespace csp {

inline constexpr std::uint32_t kNoIndex = std::numeric_limits<std::uint32_t>::max();

// The kinds of an id tuple's elements, outermost first (docs/profile-format.md, "Identity"). The
// GPU kinds identify the execution contexts of a GPU (a device context and a stream or queue in
// it), as formats of GPU-tracing profilers record them; CSP's own profiles hold none
// (docs/profile-format.md, "The data model beyond this file").
enum class IdKind : std::uint8_t {
  Node = 0,
  Rank = 1,
  Thread = 2,
  Core = 3,
  Process = 4,
  GpuContext = 5,
  GpuStream = 6
};
inline constexpr IdKind kLastIdKind = IdKind::GpuStream;

struct IdElement {
  IdKind kind = IdKind::Thread;
  std::uint64_t value = 0;
  // NOLINTNEXTLINE(modernize-use-nullptr): clang-tidy 14's false positive on a defaulted <=>
  auto operator<=>(const IdElement&) const = default;
};
using IdTuple = std::vector<IdElement>;

const char* toString(IdKind kind);
// "rank 3 thread 1" style rendering for messages and views.
// The last component of a path as profiles and databases store them ("/usr/lib/libm.so.6" ->
// "libm.so.6"); the whole text if it has no slash.
inline std::string baseName(std::string_view path) {
  const auto slash = path.rfind('/');
  return std::string(slash == std::string_view::npos ? path : path.substr(slash + 1));
}

std::string formatIdTuple(const IdTuple& tuple);

struct Setting {
  std::string key;
  std::string value;
  bool operator==(const Setting&) const = default;
};

struct Identity {
  IdTuple idTuple;
  std::uint32_t pid = 0;
  std::string hostname;
  std::string executable;
  std::vector<std::string> commandLine;
  std::uint64_t startTimeNs = 0;
  std::uint64_t endTimeNs = 0;
  std::vector<Setting> settings;
  bool operator==(const Identity&) const = default;
};

enum class MetricKind : std::uint8_t { Sampled = 0, Counted = 1 };
const char* toString(MetricKind kind);

// How a metric's values are held. Count: integers, value = count x period (CSP's measurement,
// sampling profilers). Real: real numbers such as seconds or bytes measured by other tools, held
// as the bit pattern of a finite IEEE double in the same 64-bit columns (period 1), so that
// every value column stays one integer type. +0.0 (bits 0) is absence, like a zero count.
enum class ValueType : std::uint8_t { Count = 0, Real = 1 };

struct MetricDescriptor {
  std::string name;
  std::string unit;
  MetricKind kind = MetricKind::Sampled;
  std::uint64_t period = 1;  // value of one count
  std::string description;
  ValueType valueType = ValueType::Count;
  bool operator==(const MetricDescriptor&) const = default;
};

// A real value's bit pattern and back (ValueType::Real).
inline std::uint64_t realBits(double value) { return std::bit_cast<std::uint64_t>(value); }
inline double realValue(std::uint64_t bits) { return std::bit_cast<double>(bits); }

// Module path of address frames that lie in no module of the load map (JIT code, garbage from a
// failed unwind); their offset is the absolute address.
inline constexpr const char* kUnmappedModulePath = "[unknown]";

struct LoadModule {
  std::string path;
  std::vector<std::uint8_t> buildId;
  std::uint64_t loadBegin = 0;
  std::uint64_t loadEnd = 0;
  std::uint64_t loadBias = 0;
  bool operator==(const LoadModule&) const = default;
};

enum class FrameKind : std::uint8_t { Address = 0, Symbolic = 1 };

// The scopes of the canonical CCT (docs/design.md, "Data model"). Symbolic frames name them directly; address
// frames become chains of them after attribution.
enum class ScopeKind : std::uint8_t { Root = 0, ProcFrame = 1, Alien = 2, Loop = 3, CallSite = 4, Stmt = 5 };
const char* toString(ScopeKind kind);

struct AddressFrame {
  std::uint32_t module = 0;  // index into ThreadProfile::modules
  std::uint64_t offset = 0;  // relative to the module's load bias
  // NOLINTNEXTLINE(modernize-use-nullptr): clang-tidy 14's false positive on a defaulted <=>
  auto operator<=>(const AddressFrame&) const = default;
};

struct SymbolicFrame {
  ScopeKind scope = ScopeKind::Stmt;
  std::uint32_t name = 0;  // string id: procedure (ProcFrame, Alien)
  std::uint32_t file = 0;  // string id
  std::uint32_t line = 0;
  std::uint32_t module = 0;  // string id: load module (ProcFrame)
  // NOLINTNEXTLINE(modernize-use-nullptr): clang-tidy 14's false positive on a defaulted <=>
  auto operator<=>(const SymbolicFrame&) const = default;
};

// How the measurement found a frame of an address profile where the unwind tables gave out
// (docs/profile-format.md, "Frames found without unwind tables"). Stored per CCT node as one
// UInt32: kind << 28 | link << 14 | slot. Slots count the 8-byte stack words upwards from the
// stack pointer of the frame the unwind stopped at (word 0 is at that stack pointer).
enum class UnwindNoteKind : std::uint8_t {
  Tables = 0,     // found by the unwind tables (CFI), as every frame of older profiles
  Stopped = 1,    // no unwind tables cover this frame (or stepping failed): the stack above was scanned
  Candidate = 2,  // a stack word above a Stopped frame that looks like a return address (unverified)
  Resumed = 3,    // the first return address above a Stopped frame that has unwind tables: unwinding went on here
};
struct UnwindNote {
  static constexpr std::uint32_t kMaxSlot = (1u << 14) - 1;
  UnwindNoteKind kind = UnwindNoteKind::Tables;
  std::uint32_t slot = 0;  // Candidate, Resumed: the word that held this frame's address
  // 1 + a word index, 0 for none. Stopped: the word the frame pointer (rbp) pointed at.
  // Candidate, Resumed: the word that the stack word just below `slot` points at (where a
  // callee's `push %rbp` keeps its caller's frame pointer).
  std::uint32_t link = 0;
  constexpr std::uint32_t encode() const {
    return std::uint32_t{static_cast<std::uint8_t>(kind)} << 28 | link << 14 | slot;
  }
  static constexpr UnwindNote decode(std::uint32_t v) {
    return {static_cast<UnwindNoteKind>(v >> 28), v & kMaxSlot, (v >> 14) & kMaxSlot};
  }
  bool operator==(const UnwindNote&) const = default;
};

// How a call path that begins at a child of the raw CCT's root begins, where the profile's
// format records it (docs/profile-format.md, "The data model beyond this file"). CSP's own profiles leave it Unknown:
// for address frames csp-prof-mpi then decides from the binaries whether the outermost frame
// starts a stack (Attributor::startsPath); symbolic paths are complete.
enum class PathStart : std::uint8_t {
  Unknown = 0,
  Complete = 1,     // the unwind reached the thread's entry
  Partial = 2,      // it did not: the path is shown below kTruncatedPathsName, its samples truncated
  Placeholder = 3,  // a symbolic ProcFrame that stands for no code (a GPU context, a runtime state):
                    // a complete path, never a thread's entry procedure
};
inline constexpr PathStart kLastPathStart = PathStart::Placeholder;

// Raw calling context tree; node 0 is the root. parent[i] < i for every i > 0.
struct RawCct {
  std::vector<std::uint32_t> parent;
  std::vector<std::uint32_t> frame;
  // Empty, or one encoded UnwindNote per node (address profiles whose unwind went past code
  // without unwind tables; format 1.1).
  std::vector<std::uint32_t> unwindNote;
  // Empty, or one PathStart per node; only the root's children may be other than Unknown. Not in
  // CSP's profile files (other formats' sources fill it).
  std::vector<PathStart> pathStart;
  std::size_t size() const { return parent.size(); }
  UnwindNote note(std::size_t node) const {
    return unwindNote.empty() ? UnwindNote{} : UnwindNote::decode(unwindNote[node]);
  }
  PathStart start(std::size_t node) const { return pathStart.empty() ? PathStart::Unknown : pathStart[node]; }
  bool operator==(const RawCct&) const = default;
};

// Sparse counts sorted by (node, metric); no zeros, no duplicates. A real-valued metric's "count"
// is its value's bit pattern (ValueType::Real).
struct SparseValues {
  std::vector<std::uint32_t> node;
  std::vector<std::uint16_t> metric;
  std::vector<std::uint64_t> count;
  std::size_t size() const { return node.size(); }
  bool operator==(const SparseValues&) const = default;
};

// Per-thread region tree (docs/views.md, "Regions"); node 0 is the root and is no region.
struct RegionProfile {
  std::vector<std::string> names;  // static id -> name
  std::vector<std::uint32_t> parent;
  std::vector<std::uint32_t> staticId;
  std::vector<std::uint64_t> dynamicId;
  std::vector<std::uint64_t> count;
  std::vector<std::uint64_t> inclusiveNs;
  std::vector<std::uint64_t> exclusiveNs;
  std::vector<std::uint64_t> eventTimeNs;
  std::vector<std::uint32_t> eventNode;
  std::vector<bool> eventIsEnter;
  // Optional attribute of enter events (csp_region_begin_attr): both empty, or one entry per
  // event; eventHasAttr[i] is false for exits and for enters without an attribute.
  std::vector<std::int64_t> eventAttr;
  std::vector<bool> eventHasAttr;
  std::uint64_t eventsLost = 0;
  std::uint64_t mismatchedEnds = 0;
  std::uint64_t unclosedAtExit = 0;
  std::size_t size() const { return parent.size(); }
  bool operator==(const RegionProfile&) const = default;
};

// The process's clock against the reference process's (docs/profile-format.md "Clocks across
// processes"): at two moments a local reading lies between two reference readings.
enum class ClockState : std::uint8_t { None = 0, Reference, SameClock, Measured, InitOnly };
struct ClockSync {
  ClockState state = ClockState::None;
  std::uint32_t referenceRank = 0;
  std::uint64_t initLocalNs = 0, initRefLoNs = 0, initRefHiNs = 0;
  std::uint64_t finalLocalNs = 0, finalRefLoNs = 0, finalRefHiNs = 0;
  std::uint32_t rounds = 0;
  std::uint64_t costNs = 0;
  bool operator==(const ClockSync&) const = default;
};

// MPI calls of a thread (docs/profile-format.md "Communication events"), column-wise.
enum class CommKind : std::uint8_t { Send = 1, Recv = 2, Collective = 3, Wait = 4 };
// Which collective an event is (0 for point-to-point events and in profiles written before
// CSP recorded it); what each waits for is in analysis/causal.hpp.
enum class CollectiveOp : std::uint8_t {
  Unknown = 0,
  Barrier,
  Bcast,
  Reduce,
  Allreduce,
  Gather,
  Gatherv,
  Scatter,
  Scatterv,
  Allgather,
  Allgatherv,
  Alltoall,
  Alltoallv,
  ReduceScatter,
  ReduceScatterBlock,
  Scan,
  Exscan,
};
inline constexpr std::uint8_t kCollectiveOpCount = 17;
const char* collectiveOpName(CollectiveOp op);  // "barrier", "bcast", ...; "collective" for Unknown
struct CommLog {
  std::vector<std::uint8_t> kind;
  std::vector<std::uint64_t> beginNs, endNs;
  // A non-blocking operation: begin is its start (MPI_Isend...), waitBegin the start of the wait
  // or test that completed it, end that call's end. Blocking calls: waitBegin == begin. Empty in
  // profiles written before CSP recorded it (read as begin), like `op`.
  std::vector<std::uint64_t> waitBeginNs;
  std::vector<std::uint8_t> op;  // CollectiveOp
  std::vector<std::int32_t> peer, tag;
  std::vector<std::uint64_t> comm, sequence;
  std::vector<std::uint32_t> region;
  std::uint64_t eventsLost = 0;
  std::size_t size() const { return kind.size(); }
  bool operator==(const CommLog&) const = default;
};

struct MeasurementStats {
  std::uint64_t samples = 0;
  std::uint64_t unwindFailures = 0;
  std::uint64_t droppedSamples = 0;
  std::uint64_t truncatedPaths = 0;
  bool operator==(const MeasurementStats&) const = default;
};

// OpenMP logical call paths (docs/profile-format.md, "Logical contexts"): the creation contexts
// of parallel regions and explicit tasks that the thread's samples ran in. A raw CCT node whose
// frame lies in the pseudo module kLogicalContextModule is a marker (a child of the root): its
// subtree was sampled in the body of context `offset` (an index into this table), or of no
// context but a worker's wait in the runtime's pool when the offset is kPoolMarker.
inline constexpr const char* kLogicalContextModule = "[omp context]";
inline constexpr const char* kOmpRuntimeName = "[omp runtime]";  // the folded runtime frames
inline constexpr std::uint64_t kPoolMarker = 0xFFFF'FFFFull;
enum class LogicalKind : std::uint8_t { Parallel = 0, Task = 1 };
struct LogicalContexts {
  std::vector<std::uint32_t> parent;  // index of the creator's context, kNoIndex: created outside any
  std::vector<LogicalKind> kind;
  // The creator's frames (address frames, outermost first; the last is the call into the runtime)
  // of context i: pathFrame[pathBegin[i] .. pathBegin[i + 1]); pathBegin has size() + 1 entries.
  std::vector<std::uint32_t> pathBegin;
  std::vector<std::uint32_t> pathFrame;
  std::size_t size() const { return parent.size(); }
  bool operator==(const LogicalContexts&) const = default;
};

struct ThreadProfile {
  Identity identity;
  std::vector<MetricDescriptor> metrics;
  std::vector<LoadModule> modules;
  std::vector<std::string> strings;  // index 0 is ""
  FrameKind frameKind = FrameKind::Symbolic;
  std::vector<AddressFrame> addressFrames;
  std::vector<SymbolicFrame> symbolicFrames;
  RawCct cct;
  SparseValues values;
  RegionProfile regions;
  MeasurementStats stats;
  LogicalContexts logical;
  ClockSync clock;
  CommLog commLog;

  std::size_t frameCount() const {
    return frameKind == FrameKind::Address ? addressFrames.size() : symbolicFrames.size();
  }
  bool operator==(const ThreadProfile&) const = default;
};

}  // namespace csp
