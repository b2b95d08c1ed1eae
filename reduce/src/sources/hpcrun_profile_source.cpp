// HPCToolkit's per-thread measurement files (*.hpcrun, format 4.0, written by hpcrun), read
// into the common ThreadProfile (docs/profile-format.md, "Other input formats"). Written from
// HPCToolkit's description of the format, not from its code: big-endian, a footer at the end of
// the file that gives where each section lies (header, load map, CCT, metric table, id-tuple
// dictionary, sparse metric values). Frames stay (load module, offset) pairs, so attribution
// works on them exactly as on CSP's own address profiles. hpcrun's special roots become path
// starts; its other placeholders, procedures of the module "[placeholder]" (they stand for no
// code). Interior frames hold return addresses, as CSP's do.
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <map>
#include <numeric>
#include <optional>
#include <string_view>
#include <system_error>

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fmt/format.h>

#include "csp/reduce/attribution.hpp"
#include "csp/reduce/profile_source.hpp"
#include "csp/storage/profile_io.hpp"

namespace csp::reduce {

namespace {

namespace fs = std::filesystem;

constexpr std::string_view kMagic = "HPCRUN-profile____";
constexpr std::string_view kVersion = "04.00";
constexpr std::uint64_t kFooterMagic = 0x48504352554E736DULL;  // "HPCRUNsm"
constexpr std::size_t kFooterBytes = 14 * 8;
constexpr std::size_t kHeaderBytes = 24;  // magic, version, endianness
constexpr std::size_t kCctNodeBytes = 19;
// The fixed parts of a header setting (two string lengths), a load-map entry (id, path length,
// flags) and a metric descriptor: a count of them cannot exceed the section's bytes over these.
constexpr std::size_t kSettingBytes = 4 + 4;
constexpr std::size_t kLoadModuleBytes = 2 + 4 + 8;
constexpr std::size_t kMetricBytes = 4 + 4 + 16 + 8 + 4 + 4 + 20;
constexpr std::uint32_t kLastNodeEnd = 0x656E6421;  // "end!": the sentinel of the node index
constexpr std::uint64_t kStampMask = 0xffffffff00000000ULL;
constexpr std::uint64_t kNegativeZero = 0x8000000000000000ULL;  // a real -0.0: no value

// hpcrun's load module 0 holds no code: its "offsets" are eight-character codes.
constexpr std::uint64_t code(const char (&s)[9]) {
  std::uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v = v << 8 | static_cast<unsigned char>(s[i]);
  return v;
}
constexpr std::uint64_t kRootPrimary = code("^Primary");
constexpr std::uint64_t kRootPartial = code("^Partial");
constexpr std::uint64_t kFenceMain = code("| Main  ");
constexpr std::uint64_t kFenceThread = code("| Thread");

std::string codeText(std::uint64_t v) {
  std::string s;
  for (int shift = 56; shift >= 0; shift -= 8) {
    const char c = static_cast<char>((v >> shift) & 0xff);
    s += (c >= 0x20 && c < 0x7f) ? c : '?';
  }
  while (!s.empty() && s.back() == ' ') s.pop_back();
  return s;
}

// A big-endian cursor over one section; every read past its end is the named section's defect.
class Cursor {
 public:
  Cursor(const std::string& file, std::string_view bytes, std::size_t begin, std::size_t end, const char* section)
      : file_(file), bytes_(bytes), pos_(begin), end_(end), section_(section) {}
  std::uint64_t uint(unsigned n) {
    need(n);
    std::uint64_t v = 0;
    std::memcpy(reinterpret_cast<char*>(&v) + (8 - n), bytes_.data() + pos_, n);  // big-endian, right-aligned
    pos_ += n;
    return __builtin_bswap64(v);
  }
  std::string_view raw(std::size_t n) {
    need(n);
    const auto s = bytes_.substr(pos_, n);
    pos_ += n;
    return s;
  }
  // n bytes at once, for arrays of fixed-size records decoded in one loop (be16/be32/be64).
  const unsigned char* bytes(std::size_t n) { return reinterpret_cast<const unsigned char*>(raw(n).data()); }
  std::string str() { return std::string(raw(uint(4))); }
  std::size_t left() const { return end_ - pos_; }
  void expectEnd() const {
    if (pos_ != end_) fail(fmt::format("{} bytes after its last entry", end_ - pos_));
  }
  [[noreturn]] void fail(const std::string& what) const {
    throw storage::ProfileError(file_, fmt::format("{}: {}", section_, what));
  }

 private:
  void need(std::size_t n) const {
    if (n > end_ - pos_) fail("ends early (truncated or corrupt)");
  }
  const std::string& file_;
  std::string_view bytes_;
  std::size_t pos_, end_;
  const char* section_;
};

std::uint16_t be16(const unsigned char* p) {
  std::uint16_t v;
  std::memcpy(&v, p, 2);
  return __builtin_bswap16(v);
}
std::uint32_t be32(const unsigned char* p) {
  std::uint32_t v;
  std::memcpy(&v, p, 4);
  return __builtin_bswap32(v);
}
std::uint64_t be64(const unsigned char* p) {
  std::uint64_t v;
  std::memcpy(&v, p, 8);
  return __builtin_bswap64(v);
}

struct Footer {
  std::uint64_t hdr[2], loadmap[2], cct[2], metrics[2], idDictionary[2], values[2];
};

struct Node {
  std::uint32_t id, parent;
  std::uint16_t module;
  std::uint64_t ip;
};

struct RawValue {
  std::uint32_t node;  // hpcrun's id
  std::uint16_t metric;
  std::uint64_t bits;
};

// What one file holds, before it becomes a ThreadProfile. The CCT and the values stay the file's
// bytes until a conversion (CctBuilder) reads them.
struct HpcrunFile {
  std::vector<Setting> header;
  std::vector<std::pair<std::uint16_t, std::string>> loadmap;
  std::vector<MetricDescriptor> metrics;
  IdTuple idTuple;
  const unsigned char* cctRecords = nullptr;  // kCctNodeBytes each
  std::uint64_t cctCount = 0;
  const unsigned char* pairs = nullptr;  // (value, metric): 10 bytes each
  std::uint64_t valueCount = 0;
  const unsigned char* index = nullptr;  // (node id, first pair): 12 bytes each, then the sentinel
  std::uint64_t indexCount = 0;          // its entries before the sentinel

  // Decoded by the general conversion only.
  std::vector<Node> nodes;
  std::uint32_t maxNodeId = 0;
  std::vector<RawValue> values;
  struct Group {
    std::uint32_t node, begin, end;  // values[begin, end) are node's (hpcrun's id)
    std::uint32_t position = 0;      // the node's in the file (CctBuilder)
  };
  std::vector<Group> groups;  // as the node index lists them
};

class Reader {
 public:
  Reader(const std::string& name, std::string_view bytes) : name_(name), bytes_(bytes) {}

  // Into `out`, whose vectors keep their capacity from the profile read before.
  void read(HpcrunFile& out) {
    checkHeaderMagic();
    const Footer f = footer();
    header(section(f.hdr, "header"), out.header);
    loadmap(section(f.loadmap, "load map"), out.loadmap);
    cct(section(f.cct, "CCT"), out);
    metrics(section(f.metrics, "metric table"), out.metrics);
    values(section(f.values, "metric values"), out);
  }

 private:
  [[noreturn]] void fail(const std::string& defect) const { throw storage::ProfileError(name_, defect); }

  void checkHeaderMagic() const {
    if (bytes_.size() < kHeaderBytes || std::string_view(bytes_).substr(0, kMagic.size()) != kMagic)
      fail("not an hpcrun profile (no 'HPCRUN-profile____' at its start)");
    const auto version = std::string_view(bytes_).substr(kMagic.size(), kVersion.size());
    if (version != kVersion)
      fail(fmt::format("hpcrun format version '{}' is not supported (this reader knows {})", codeSafe(version),
                       kVersion));
    if (bytes_[kHeaderBytes - 1] != 'b') fail("not big-endian (hpcrun writes 'b')");
  }
  static std::string codeSafe(std::string_view s) {
    std::string out;
    for (char c : s) out += (c >= 0x20 && c < 0x7f) ? c : '?';
    return out;
  }

  Footer footer() const {
    if (bytes_.size() < kHeaderBytes + kFooterBytes) fail("truncated: too short to hold the footer");
    const std::size_t at = bytes_.size() - kFooterBytes;
    Cursor c(name_, bytes_, at, bytes_.size(), "footer");
    Footer f;
    for (auto* s : {f.hdr, f.loadmap, f.cct, f.metrics, f.idDictionary, f.values}) {
      s[0] = c.uint(8);
      s[1] = c.uint(8);
    }
    const std::uint64_t footerStart = c.uint(8);
    if (c.uint(8) != kFooterMagic)
      fail("truncated or unfinished: no footer at its end (hpcrun writes the footer last)");
    if (footerStart != at) fail(fmt::format("footer: says it starts at {}, but lies at {}", footerStart, at));
    for (auto* s : {f.hdr, f.loadmap, f.cct, f.metrics, f.idDictionary, f.values})
      if (s[0] > s[1] || s[1] > at) fail(fmt::format("footer: section [{}, {}) lies outside the file", s[0], s[1]));
    return f;
  }

  Cursor section(const std::uint64_t (&range)[2], const char* what) const {
    return Cursor(name_, bytes_, range[0], range[1], what);
  }

  static void header(Cursor c, std::vector<Setting>& out) {
    c.raw(kHeaderBytes);
    const std::uint64_t n = c.uint(4);
    if (n > c.left() / kSettingBytes) c.fail("more name-value pairs than bytes");
    out.resize(n);
    for (auto& s : out) {
      s.key = c.str();
      s.value = c.str();
    }
    c.expectEnd();
  }

  static void loadmap(Cursor c, std::vector<std::pair<std::uint16_t, std::string>>& out) {
    const std::uint64_t n = c.uint(4);
    if (n > c.left() / kLoadModuleBytes) c.fail("more entries than bytes");
    out.resize(n);
    for (auto& [id, path] : out) {
      id = static_cast<std::uint16_t>(c.uint(2));
      path = c.str();
      c.uint(8);  // flags
      if (id == 0) c.fail(fmt::format("'{}' has id 0, which is reserved for placeholders", path));
    }
    c.expectEnd();
  }

  // Records of id, parent id, load module, address and flags (whether the node came from an
  // unwind: GPU operations do not), left for the conversion to decode.
  static void cct(Cursor c, HpcrunFile& out) {
    const std::uint64_t n = c.uint(8);
    if (n > c.left() / kCctNodeBytes) c.fail(fmt::format("{} nodes declared, {} bytes hold fewer", n, c.left()));
    out.cctRecords = c.bytes(n * kCctNodeBytes);
    out.cctCount = n;
    c.expectEnd();
  }

  static void metrics(Cursor c, std::vector<MetricDescriptor>& out) {
    const std::uint64_t n = c.uint(4);
    if (n > c.left() / kMetricBytes) c.fail("more metrics than bytes");
    out.resize(n);
    for (auto& m : out) m = metric(c);
    c.expectEnd();
  }

  // Name, description, 16 bytes of flags (type, inclusive/exclusive, value format, ...), period,
  // formula, format and the perf-event details. Values are taken as they are (hpcrun already
  // multiplied samples by the period), so every metric is a "counted" one of period 1.
  static MetricDescriptor metric(Cursor& c) {
    MetricDescriptor m;
    m.name = c.str();
    const std::string description = c.str();
    const auto flags = c.raw(16);
    const std::uint64_t period = c.uint(8);
    c.str();               // formula
    c.str();               // format
    c.raw(2 + 2 + 8 + 8);  // frequency mode, multiplexed, mean threshold, samples
    m.kind = MetricKind::Counted;
    m.period = 1;
    m.valueType = valueFormat(flags) == 1 ? ValueType::Count : ValueType::Real;
    m.unit = m.name.find("(sec)") != std::string::npos ? "s" : "";
    m.description = description.empty() ? fmt::format("hpcrun metric, period {}", period)
                                        : fmt::format("{} (hpcrun period {})", description, period);
    if (m.name.empty()) c.fail("a metric has no name");
    return m;
  }

  // 1 = integer, 2 = real (0 = unset: read as real, as HPCToolkit does). Older hpcrun versions
  // wrote the flags as bit fields of a big-endian word; their type byte is then out of range.
  static unsigned valueFormat(std::string_view flags) {
    const auto type = static_cast<unsigned char>(flags[0]);
    const bool zeroTail = std::all_of(flags.begin() + 8, flags.end(), [](char b) { return b == 0; });
    if ((type == 1 || type == 2) && zeroTail) return static_cast<unsigned char>(flags[2]);
    std::uint64_t word = 0;
    for (int i = 0; i < 8; ++i) word = word << 8 | static_cast<unsigned char>(flags[i]);
    return (word >> 8) & 0xf;
  }

  // The id tuple, then (value, metric) pairs in node order and the node index: (node id, first
  // pair) per valued node, ended by a sentinel; both arrays left for the conversion to decode.
  void values(Cursor c, HpcrunFile& out) const {
    idTuple(c, out.idTuple);
    const std::uint64_t count = c.uint(8);
    const std::uint64_t nodes = c.uint(4);
    if (count > c.left() / 10 || nodes > c.left() / 12) c.fail("more values than bytes");
    out.pairs = c.bytes(count * 10);
    out.valueCount = count;
    out.index = c.bytes((nodes + 1) * 12);
    out.indexCount = nodes;
    c.expectEnd();
  }

  static void idTuple(Cursor& c, IdTuple& out) {
    out.clear();
    const std::uint64_t length = c.uint(2);
    if (length == 0) c.fail("the profile's id tuple is empty");
    for (std::uint64_t i = 0; i < length; ++i) {
      const auto kind = static_cast<std::uint16_t>(c.uint(2));
      c.uint(8);  // physical index (host id, core number): the logical one identifies
      const std::uint64_t logical = c.uint(8);
      if (const auto k = idKind(kind & 0x3fff, c)) out.push_back({*k, logical});
    }
    dropGpuDevice(out);
  }

  // HPCToolkit's kinds -> CSP's (a GPU device is its context where no context is given).
  static std::optional<IdKind> idKind(std::uint16_t kind, const Cursor& c) {
    switch (kind) {
      case 1:
        return IdKind::Node;
      case 2:
        return IdKind::Rank;
      case 3:
        return IdKind::Thread;
      case 4:  // GPU device
      case 5:  // GPU context
        return IdKind::GpuContext;
      case 6:
        return IdKind::GpuStream;
      case 7:
        return IdKind::Core;
      default:
        c.fail(fmt::format("id-tuple kind {} is unknown", kind));
    }
  }
  static void dropGpuDevice(IdTuple& t) {
    for (std::size_t i = 0; i + 1 < t.size(); ++i)
      if (t[i].kind == IdKind::GpuContext && t[i + 1].kind == IdKind::GpuContext) t.erase(t.begin() + i);
  }

  const std::string& name_;
  std::string_view bytes_;
};

LoadModule moduleAt(const std::string& path) {
  LoadModule m;
  m.path = path;
  return m;
}

// What converting one profile needs besides its output, kept per thread from profile to profile
// (a worker reads thousands of the same shape): the file's bytes, its decoded sections and the
// tables of the conversion keep their capacity, so that a profile allocates only its output.
struct Scratch {
  HpcrunFile file;
  std::vector<std::uint32_t> dense;                           // position by hpcrun id, or empty
  std::vector<std::pair<std::uint32_t, std::uint32_t>> byId;  // else (hpcrun id, position), sorted
  std::vector<std::uint32_t> parentPos, firstChild, children, fill, roots;
  std::vector<std::uint8_t> valued;                                 // per position: has values
  std::vector<std::pair<std::uint32_t, std::uint32_t>> byPosition;  // (position, value): a node listed twice
  std::vector<RawValue> regrouped;
  std::vector<std::uint32_t> moduleIndex;  // by hpcrun's module id
  struct Visit {
    std::uint32_t position, parent;  // parent: the CSP node the visited node goes below
    PathStart start;
  };
  std::vector<Visit> stack;
  std::vector<std::uint8_t> removed;  // file order: a special root or fence
  std::vector<PathStart> start;
  std::vector<std::uint32_t> subtree, cspOf;
  std::vector<std::uint32_t> positionOf;    // per CSP node but the root: its position
  std::vector<std::uint32_t> placeholders;  // CSP nodes whose frames wait for their modules
  std::vector<std::uint32_t> valueAt;
  std::vector<std::uint8_t> realMetric;  // by metric: real-valued
  // convertPreorder's tables.
  std::vector<std::uint64_t> depthById;  // by hpcrun id: stamp << 32 | depth of the record
  std::uint64_t stamp = 0;               // of the profile read last
  struct Step {                          // a record on the path to the record read last
    std::uint32_t id;
    std::uint32_t node;  // CSP's; 0 for a special root (and above the roots)
    PathStart start;     // of the paths below a special root (Unknown elsewhere)
  };
  std::vector<Step> path;  // by depth
  std::vector<std::uint32_t> entryNode;
};

Scratch& scratch() {
  thread_local Scratch s;
  return s;
}

// The whole file, mapped as CSP's own profiles are: no copy into a buffer (measured: a read into
// a reused buffer, or MAP_POPULATE, cost as much or more).
class MappedBytes {
 public:
  explicit MappedBytes(const fs::path& file) {
    const int fd = ::open(file.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
    if (fd < 0) throw storage::ProfileError(file.string(), "cannot be opened");
    struct stat st {};
    const bool regular = ::fstat(fd, &st) == 0 && S_ISREG(st.st_mode);
    size_ = regular ? static_cast<std::size_t>(st.st_size) : 0;
    if (size_ > 0) data_ = ::mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, fd, 0);
    ::close(fd);
    if (!regular || data_ == MAP_FAILED) throw storage::ProfileError(file.string(), "cannot be read");
  }
  ~MappedBytes() {
    if (data_ != nullptr && data_ != MAP_FAILED) ::munmap(data_, size_);
  }
  MappedBytes(const MappedBytes&) = delete;
  MappedBytes& operator=(const MappedBytes&) = delete;
  std::string_view bytes() const { return {static_cast<const char*>(data_), data_ == nullptr ? 0 : size_}; }

 private:
  void* data_ = nullptr;
  std::size_t size_ = 0;
};

// hpcrun's CCT (ids, parents by id, in any order) -> CSP's (parents before children), with the
// special roots and the fences below them left out: they only say how the paths below begin.
// Nodes are handled by their position in the file; ids only lead to positions.
class CctBuilder {
 public:
  CctBuilder(const std::string& name, HpcrunFile& in, ThreadProfile& out, Scratch& s)
      : name_(name), in_(in), out_(out), s_(s) {}

  void build() {
    mapModules();
    if (convertPreorder()) return;
    forgetPreorder();
    decodeCct();
    decodeValues();
    indexNodes();
    linkChildren();
    groupValues();
    s_.placeholders.clear();
    if (parentsFirst_)
      orderInFileOrder();
    else
      orderDepthFirst();
    placeholderFrames();
    values();
  }

 private:
  [[noreturn]] void fail(const std::string& defect) const { throw storage::ProfileError(name_, defect); }

  // hpcrun's own layout: it writes the CCT and the values in one walk, each node before its
  // children (a preorder), so CSP's order (depth first, siblings in file order) is the file's,
  // the special roots left out. Then one pass over the records converts the CCT and one over the
  // pairs its values, straight from the file's bytes and without a branch that depends on the
  // tree's shape (the branch mispredictions of a walk cost more than the rest). Returns false at
  // the first thing this layout does not explain (another order, values listed apart from their
  // node, a metric out of order, ids too sparse for the table by id, any defect): the general
  // conversion then reads the file again and names the defect, if there is one.
  bool convertPreorder() {
    const std::uint64_t n = in_.cctCount;
    if (n >= kNoIndex || in_.indexCount > n || be64(in_.index + 4) != 0) return false;
    Preorder w = startPreorder(n);
    const unsigned char* record = in_.cctRecords;
    for (std::uint64_t i = 0; i < n; ++i, record += kCctNodeBytes)
      if (!preorderNode(record, w)) return false;
    if (w.indexUsed != in_.indexCount || be32(in_.index + 12 * w.indexUsed) != kLastNodeEnd || !preorderValues(w))
      return false;
    endPreorder(w);
    return true;
  }

  // convertPreorder's state. Depth 0 stands above the roots, as id 0 (hpcrun's parent id of a
  // root).
  struct Preorder {
    std::uint64_t* byId;          // the depth of an id's record, valid if stamped with this profile's stamp
    std::uint64_t stamp;          // this profile's, in the high half
    std::uint32_t idLimit;        // ids below it fit byId
    Scratch::Step* path;          // path[d]: the record at depth d on the path to the record read last
    std::uint32_t depth = 0;      // of the record read last
    std::uint32_t* entryNode;     // by node index entry: its CSP node
    std::uint64_t indexUsed = 0;  // node index entries matched to records
    std::uint32_t next = 1;       // CSP nodes made
    bool anyStart = false;
    std::uint32_t* parent;
    PathStart* pathStart;
    std::vector<AddressFrame>* frames;  // these grow: their elements are written once, not zeroed first
    SparseValues* values;
  };

  // One record: its parent must be on the path to the record before it (else no preorder), so
  // the parent's id leads to its depth and the path holds what its children need.
  bool preorderNode(const unsigned char* record, Preorder& w) {
    const std::uint32_t id = be32(record), parentId = be32(record + 4);
    if (id == 0 || id >= w.idLimit || parentId >= w.idLimit) return false;
    if ((w.byId[id] & kStampMask) == w.stamp) return false;  // id twice
    const std::uint64_t upEntry = w.byId[parentId];
    if ((upEntry & kStampMask) != w.stamp) return false;  // no such parent before it
    const auto up = static_cast<std::uint32_t>(upEntry);  // the parent's depth
    if (up > w.depth || w.path[up].id != parentId) return false;
    const Scratch::Step parent = w.path[up];
    w.depth = up + 1;
    w.byId[id] = w.stamp | w.depth;
    const bool valued = be32(in_.index + 12 * w.indexUsed) == id;  // the sentinel's id is beyond idLimit
    const std::uint16_t module = be16(record + 8);
    const std::uint64_t ip = be64(record + 10);
    if (module == 0 && parent.node == 0 && !valued)
      if (const auto start = specialStart(ip, parent.start)) {
        w.path[w.depth] = {id, 0, *start};
        return true;
      }
    const std::uint32_t node = w.next++;
    w.parent[node] = parent.node;
    w.pathStart[node] = parent.start;  // Unknown below a CSP node
    w.anyStart |= parent.start != PathStart::Unknown;
    if (module == 0)
      w.frames->push_back({placeholderModule(ip), 0});
    else if (module < s_.moduleIndex.size() && s_.moduleIndex[module] != kNoIndex)
      w.frames->push_back({s_.moduleIndex[module], ip});
    else
      return false;
    w.path[w.depth] = {id, node, PathStart::Unknown};
    w.entryNode[w.indexUsed] = node;
    w.indexUsed += valued ? 1 : 0;
    return true;
  }

  // The pairs in order, each node's (a node index entry's) by metric; zeros are not stored (each
  // pair is written, and kept by counting it: no branch on its value).
  bool preorderValues(Preorder& w) const {
    const std::uint64_t count = in_.valueCount;
    if (count == 0 || in_.indexCount == 0) return count == 0 && in_.indexCount == 0;
    const unsigned char* index = in_.index;
    const unsigned char* pair = in_.pairs;
    const std::uint8_t* real = s_.realMetric.data();
    const std::size_t metrics = s_.realMetric.size();
    std::uint64_t entry = 0, next = be64(index + 16);  // the first pair of the entry after it
    if (next == 0) return false;                       // a first entry without values (its node is no valued node)
    std::uint32_t previous = 0;                        // metric
    w.values->node.resize(count);
    w.values->metric.resize(count);
    w.values->count.resize(count);
    std::uint32_t* valueNode = w.values->node.data();
    std::uint16_t* valueMetric = w.values->metric.data();
    std::uint64_t* valueCount = w.values->count.data();
    std::size_t stored = 0;
    for (std::uint64_t v = 0; v < count; ++v, pair += 10) {
      const bool advance = v == next;
      entry += advance ? 1 : 0;
      if (entry >= in_.indexCount) return false;  // values after the sentinel's first pair
      next = be64(index + 12 * entry + 16);       // at most the sentinel's
      const std::uint16_t metric = be16(pair + 8);
      const std::uint64_t bits = be64(pair);
      if ((next <= v) | (metric >= metrics) | (!advance & (v != 0) & (metric <= previous))) return false;
      previous = metric;
      valueNode[stored] = w.entryNode[entry];
      valueMetric[stored] = metric;
      valueCount[stored] = bits;
      stored += ((bits != 0) & !((real[metric] != 0) & (bits == kNegativeZero))) ? 1 : 0;
    }
    w.values->node.resize(stored);
    w.values->metric.resize(stored);
    w.values->count.resize(stored);
    return entry + 1 == in_.indexCount && next == count;
  }

  // The tables at the largest size the file can need; the output likewise, cut to size at the end.
  Preorder startPreorder(std::uint64_t n) {
    const std::size_t ids = std::min<std::size_t>(4 * n + 64, kLastNodeEnd);
    if (s_.depthById.size() < ids) s_.depthById.resize(ids);
    if (++s_.stamp == std::uint64_t{1} << 32) {  // wrapped: an old stamp could come back
      std::fill(s_.depthById.begin(), s_.depthById.end(), 0);
      s_.stamp = 1;
    }
    s_.depthById[0] = s_.stamp << 32;  // id 0 stands above the roots, at depth 0
    s_.path.resize(n + 1);
    s_.path[0] = {0, 0, PathStart::Unknown};
    s_.entryNode.resize(in_.indexCount + 1);
    out_.cct.parent.resize(n + 1);
    out_.cct.parent[0] = kNoIndex;
    out_.cct.pathStart.resize(n + 1);
    out_.cct.pathStart[0] = PathStart::Unknown;
    out_.addressFrames.reserve(n);
    s_.realMetric.resize(out_.metrics.size());
    for (std::size_t m = 0; m < out_.metrics.size(); ++m)
      s_.realMetric[m] = out_.metrics[m].valueType == ValueType::Real;
    return {.byId = s_.depthById.data(),
            .stamp = s_.stamp << 32,
            .idLimit = static_cast<std::uint32_t>(ids),
            .path = s_.path.data(),
            .entryNode = s_.entryNode.data(),
            .parent = out_.cct.parent.data(),
            .pathStart = out_.cct.pathStart.data(),
            .frames = &out_.addressFrames,
            .values = &out_.values};
  }
  void endPreorder(const Preorder& w) {
    out_.cct.parent.resize(w.next);
    out_.cct.pathStart.resize(w.next);
    endCct(w.anyStart);
  }
  // What convertPreorder made before it gave up.
  void forgetPreorder() {
    out_.modules.resize(in_.loadmap.size());
    placeholderModules_.clear();
    out_.addressFrames.clear();
    out_.values = {};
  }

  // The general conversion's tables: every record and value decoded.
  void decodeCct() {
    const unsigned char* p = in_.cctRecords;
    in_.nodes.resize(in_.cctCount);
    in_.maxNodeId = 0;
    for (auto& node : in_.nodes) {
      node = {be32(p), be32(p + 4), be16(p + 8), be64(p + 10)};
      in_.maxNodeId = std::max(in_.maxNodeId, node.id);
      p += kCctNodeBytes;
    }
  }
  void decodeValues() {
    const std::uint64_t count = in_.valueCount;
    in_.values.resize(count);
    in_.groups.clear();
    std::uint32_t node = 0;
    std::uint64_t start = 0;
    for (std::uint64_t i = 0; i <= in_.indexCount; ++i) {
      const unsigned char* entry = in_.index + 12 * i;
      const std::uint32_t nextNode = be32(entry);
      const std::uint64_t nextStart = be64(entry + 4);
      if (nextStart < start || nextStart > count || (i == 0 && nextStart != 0))
        fail("metric values: the node index is not in order");
      for (std::uint64_t k = start; k < nextStart; ++k)
        in_.values[k] = {node, be16(in_.pairs + 10 * k + 8), be64(in_.pairs + 10 * k)};
      if (nextStart > start)
        in_.groups.push_back({node, static_cast<std::uint32_t>(start), static_cast<std::uint32_t>(nextStart)});
      node = nextNode;
      start = nextStart;
    }
    if (node != kLastNodeEnd || start != count) fail("metric values: the node index does not end with its sentinel");
  }

  // hpcrun numbers its nodes densely (ids up to about twice their count): a table by id, else a
  // sorted list of (id, position).
  void indexNodes() {
    const std::uint32_t maxId = in_.maxNodeId;
    s_.dense.clear();
    s_.byId.clear();
    if (maxId <= 4 * in_.nodes.size() + 64) {
      s_.dense.assign(std::size_t{maxId} + 1, kNoIndex);
      for (std::uint32_t i = 0; i < in_.nodes.size(); ++i) {
        auto& slot = s_.dense[in_.nodes[i].id];
        if (in_.nodes[i].id == 0) idZero();
        if (slot != kNoIndex) fail(fmt::format("CCT: node id {} appears twice", in_.nodes[i].id));
        slot = i;
      }
      return;
    }
    for (std::uint32_t i = 0; i < in_.nodes.size(); ++i) {
      if (in_.nodes[i].id == 0) idZero();
      s_.byId.push_back({in_.nodes[i].id, i});
    }
    std::sort(s_.byId.begin(), s_.byId.end());
    for (std::size_t i = 1; i < s_.byId.size(); ++i)
      if (s_.byId[i].first == s_.byId[i - 1].first)
        fail(fmt::format("CCT: node id {} appears twice", s_.byId[i].first));
  }
  [[noreturn]] void idZero() const { fail("CCT: a node has id 0, which is reserved"); }
  // The position of hpcrun id `id`, or kNoIndex.
  std::uint32_t position(std::uint32_t id) const {
    if (!s_.dense.empty()) return id < s_.dense.size() ? s_.dense[id] : kNoIndex;
    const auto it = std::lower_bound(s_.byId.begin(), s_.byId.end(), std::pair<std::uint32_t, std::uint32_t>{id, 0});
    return it == s_.byId.end() || it->first != id ? kNoIndex : it->second;
  }

  // The position of each node's parent (kNoIndex: a root), and whether every parent comes before
  // its children in the file (as hpcrun writes them).
  void linkChildren() {
    s_.parentPos.resize(in_.nodes.size());
    s_.roots.clear();
    parentsFirst_ = true;
    for (std::uint32_t i = 0; i < in_.nodes.size(); ++i) {
      const Node& node = in_.nodes[i];
      s_.parentPos[i] = node.parent == 0 ? kNoIndex : position(node.parent);
      if (node.parent == 0)
        s_.roots.push_back(i);
      else if (s_.parentPos[i] == kNoIndex)
        fail(fmt::format("CCT: node {} has parent {}, which does not exist", node.id, node.parent));
      parentsFirst_ &= node.parent == 0 || s_.parentPos[i] < i;
    }
  }

  // Children per node in file order, as one array (firstChild[i] .. firstChild[i + 1]).
  void childLists() {
    const std::size_t n = in_.nodes.size();
    s_.firstChild.assign(n + 1, 0);
    for (const std::uint32_t p : s_.parentPos)
      if (p != kNoIndex) ++s_.firstChild[p + 1];
    for (std::size_t i = 0; i < n; ++i) s_.firstChild[i + 1] += s_.firstChild[i];
    s_.children.resize(s_.firstChild[n]);
    s_.fill.assign(s_.firstChild.begin(), s_.firstChild.end() - 1);
    for (std::uint32_t i = 0; i < n; ++i)
      if (s_.parentPos[i] != kNoIndex) s_.children[s_.fill[s_.parentPos[i]]++] = i;
  }

  // Each valued node's values as one range, in file order (hpcrun's node index gives them so).
  void groupValues() {
    s_.valued.assign(in_.nodes.size(), 0);
    bool listedTwice = false;
    for (auto& g : in_.groups) {
      const auto p = position(g.node);
      if (p == kNoIndex) fail(fmt::format("metric values: node {} is not in the CCT", g.node));
      g.position = p;
      for (std::uint32_t k = g.begin; k < g.end; ++k)
        if (in_.values[k].metric >= out_.metrics.size())
          fail(fmt::format("metric values: metric {} at node {} is not in the metric table", in_.values[k].metric,
                           g.node));
      listedTwice |= s_.valued[p] != 0;
      s_.valued[p] = 1;
    }
    if (listedTwice) regroup();
  }
  bool valued(std::uint32_t position) const { return s_.valued[position] != 0; }

  // A node listed more than once in the node index: its values brought together (stable, so in
  // file order), as one range.
  void regroup() {
    s_.byPosition.clear();
    for (const auto& g : in_.groups)
      for (std::uint32_t k = g.begin; k < g.end; ++k) s_.byPosition.push_back({g.position, k});
    std::stable_sort(s_.byPosition.begin(), s_.byPosition.end(),
                     [](const auto& a, const auto& b) { return a.first < b.first; });
    s_.regrouped.clear();
    in_.groups.clear();
    for (const auto& [p, k] : s_.byPosition) {
      const auto at = static_cast<std::uint32_t>(s_.regrouped.size());
      if (in_.groups.empty() || in_.groups.back().position != p) in_.groups.push_back({in_.nodes[p].id, at, at, p});
      s_.regrouped.push_back(in_.values[k]);
      ++in_.groups.back().end;
    }
    in_.values.swap(s_.regrouped);
  }

  void mapModules() {
    // By id, as large as the largest id (load maps are small; hpcrun ids are 16-bit).
    std::uint32_t maxId = 0;
    for (const auto& entry : in_.loadmap) maxId = std::max<std::uint32_t>(maxId, entry.first);
    s_.moduleIndex.assign(std::size_t{maxId} + 1, kNoIndex);
    for (const auto& [id, path] : in_.loadmap) {
      if (s_.moduleIndex[id] != kNoIndex) fail(fmt::format("load map: id {} appears twice", id));
      s_.moduleIndex[id] = static_cast<std::uint32_t>(out_.modules.size());
      out_.modules.push_back(moduleAt(path));
    }
  }

  // CSP's node order is depth first from the roots, children in file order, whatever order the
  // file gives them in (the same tree gives the same profile). Either way below fills the CCT's
  // parents and path starts and positionOf (per CSP node but the root: its position).
  void startCct(std::size_t size) {
    out_.cct.parent.assign(size, kNoIndex);
    out_.cct.pathStart.assign(size, PathStart::Unknown);
    s_.positionOf.resize(size - 1);
    out_.addressFrames.resize(size - 1);
  }
  void endCct(bool anyStart) {
    out_.cct.frame.resize(out_.cct.parent.size());
    out_.cct.frame[0] = kNoIndex;
    std::iota(out_.cct.frame.begin() + 1, out_.cct.frame.end(), 0u);
    if (!anyStart) std::vector<PathStart>().swap(out_.cct.pathStart);  // none: not stored
  }

  // The usual case, parents before children: the depth-first order computed in three passes over
  // the file (which nodes are left out, subtree sizes bottom up, first slots top down), without a
  // walk from node to node.
  void orderInFileOrder() {
    const std::size_t n = in_.nodes.size();
    auto& removed = s_.removed;  // per position: a special root or fence (not a CSP node)
    auto& start = s_.start;      // per position: its path start, or the one below it if removed
    removed.assign(n, 0);
    start.assign(n, PathStart::Unknown);
    bool anyStart = false;
    for (std::uint32_t i = 0; i < n; ++i) {
      const std::uint32_t p = s_.parentPos[i];
      if (p != kNoIndex && !removed[p]) continue;  // below a CSP node: no path start
      const PathStart inherited = p == kNoIndex ? PathStart::Unknown : start[p];
      const auto special = specialRoot(i, inherited);
      removed[i] = special.has_value();
      start[i] = special.value_or(inherited);
      anyStart |= !special && inherited != PathStart::Unknown;
    }
    auto& size = s_.subtree;  // CSP nodes in each subtree
    size.resize(n);
    for (std::uint32_t i = 0; i < n; ++i) size[i] = removed[i] ? 0 : 1;
    for (std::uint32_t i = static_cast<std::uint32_t>(n); i-- > 0;)
      if (s_.parentPos[i] != kNoIndex) size[s_.parentPos[i]] += size[i];
    // Per position: the CSP index of its next child's subtree; in place of its size, which is not
    // read again once its own slot is known.
    auto& next = size;
    s_.cspOf.resize(n);
    std::uint32_t total = 1;
    for (const std::uint32_t r : s_.roots) total += size[r];
    startCct(total);
    std::uint32_t top = 1;
    std::uint32_t* parent = out_.cct.parent.data();
    std::uint32_t* positionOf = s_.positionOf.data();
    std::uint32_t* cspOf = s_.cspOf.data();
    for (std::uint32_t i = 0; i < n; ++i) {
      const std::uint32_t p = s_.parentPos[i];
      std::uint32_t& from = p == kNoIndex ? top : next[p];
      const std::uint32_t slot = from;
      from += size[i];
      next[i] = removed[i] ? slot : slot + 1;
      if (removed[i]) continue;
      const bool rootLevel = p == kNoIndex || removed[p];
      parent[slot] = rootLevel ? 0 : cspOf[p];
      if (rootLevel) out_.cct.pathStart[slot] = start[i];
      positionOf[slot - 1] = i;
      cspOf[i] = slot;
      frame(slot, in_.nodes[i]);
    }
    endCct(anyStart);
  }

  // Children before parents somewhere: a walk from the roots over the children lists.
  void orderDepthFirst() {
    childLists();
    const std::size_t n = in_.nodes.size();
    out_.cct.parent = {kNoIndex};
    out_.cct.pathStart = {PathStart::Unknown};
    s_.positionOf.clear();
    s_.cspOf.resize(n);
    s_.stack.clear();
    for (auto r = s_.roots.rbegin(); r != s_.roots.rend(); ++r) s_.stack.push_back({*r, 0, PathStart::Unknown});
    std::size_t reached = 0;
    bool anyStart = false;
    while (!s_.stack.empty()) {
      auto [i, parent, start] = s_.stack.back();
      s_.stack.pop_back();
      ++reached;
      std::uint32_t here = parent;
      if (const auto special = parent == 0 ? specialRoot(i, start) : std::nullopt) {
        start = *special;
      } else {
        anyStart |= parent == 0 && start != PathStart::Unknown;
        here = static_cast<std::uint32_t>(out_.cct.parent.size());
        out_.cct.parent.push_back(parent);
        out_.cct.pathStart.push_back(parent == 0 ? start : PathStart::Unknown);
        s_.positionOf.push_back(i);
        s_.cspOf[i] = here;
      }
      for (std::uint32_t c = s_.firstChild[i + 1]; c-- > s_.firstChild[i];)
        s_.stack.push_back({s_.children[c], here, start});
    }
    if (reached != n) fail(fmt::format("CCT: {} nodes are not reachable from its roots (a cycle)", n - reached));
    out_.addressFrames.resize(s_.positionOf.size());
    for (std::uint32_t node = 1; node <= s_.positionOf.size(); ++node) frame(node, in_.nodes[s_.positionOf[node - 1]]);
    endCct(anyStart);
  }

  // A frame per CSP node (attribution caches by module and offset, so repeated frames cost
  // nothing later, and no lookup is needed here). Placeholders get their modules in CSP's order
  // later (placeholderFrames), so that the module table does not depend on the file's order.
  void frame(std::uint32_t node, const Node& n) {
    if (n.module == 0) {
      s_.placeholders.push_back(node);
      return;
    }
    if (n.module >= s_.moduleIndex.size() || s_.moduleIndex[n.module] == kNoIndex)
      fail(fmt::format("CCT: node {} is in load module {}, which is not in the load map", n.id, n.module));
    out_.addressFrames[node - 1] = {s_.moduleIndex[n.module], n.ip};
  }
  void placeholderFrames() {
    std::sort(s_.placeholders.begin(), s_.placeholders.end());
    for (const std::uint32_t node : s_.placeholders)
      out_.addressFrames[node - 1] = {placeholderModule(in_.nodes[s_.positionOf[node - 1]].ip), 0};
  }

  // In CSP's node order, each node's values: counted per node, then placed, both in file order.
  void values() {
    const std::size_t size = out_.cct.size();
    s_.realMetric.resize(out_.metrics.size());
    for (std::size_t m = 0; m < out_.metrics.size(); ++m)
      s_.realMetric[m] = out_.metrics[m].valueType == ValueType::Real;
    auto& at = s_.valueAt;  // per CSP node: where its values go
    at.assign(size + 1, 0);
    for (const auto& g : in_.groups) at[s_.cspOf[g.position] + 1] += storedValues(g);
    for (std::size_t c = 0; c < size; ++c) at[c + 1] += at[c];
    out_.values.node.resize(at[size]);
    out_.values.metric.resize(at[size]);
    out_.values.count.resize(at[size]);
    std::uint32_t* nodes = out_.values.node.data();
    std::uint16_t* metrics = out_.values.metric.data();
    std::uint64_t* counts = out_.values.count.data();
    for (const auto& g : in_.groups) {
      const std::uint32_t node = s_.cspOf[g.position];
      std::uint32_t k = at[node];
      for (std::uint32_t v = g.begin; v < g.end; ++v)
        if (stored(in_.values[v])) {
          nodes[k] = node;
          metrics[k] = in_.values[v].metric;
          counts[k++] = in_.values[v].bits;
        }
    }
  }
  // Zeros (and real -0.0) are no values.
  bool stored(const RawValue& v) const { return v.bits != 0 && !(s_.realMetric[v.metric] && realValue(v.bits) == 0.0); }
  // A node's values ordered by metric; how many are stored (a metric stored twice is a defect).
  std::uint32_t storedValues(const HpcrunFile::Group& g) {
    const auto first = in_.values.begin() + g.begin, last = in_.values.begin() + g.end;
    const auto byMetric = [](const RawValue& a, const RawValue& b) { return a.metric < b.metric; };
    if (g.end - g.begin > 1 && !std::is_sorted(first, last, byMetric)) std::sort(first, last, byMetric);
    std::uint32_t count = 0;
    std::optional<std::uint16_t> previous;
    for (auto v = first; v != last; ++v) {
      if (!stored(*v)) continue;
      if (previous == v->metric) fail(fmt::format("metric values: metric {} appears twice at one node", v->metric));
      previous = v->metric;
      ++count;
    }
    return count;
  }

  // For a node at the root level that is a special root or a fence below ^Primary (and carries no
  // values of its own), the start of the paths below it.
  std::optional<PathStart> specialRoot(std::uint32_t i, PathStart inherited) const {
    const Node& n = in_.nodes[i];
    if (n.module != 0 || valued(i)) return std::nullopt;
    return specialStart(n.ip, inherited);
  }
  // The same for a placeholder of code `ip` at the root level, whose values are none.
  static std::optional<PathStart> specialStart(std::uint64_t ip, PathStart inherited) {
    if (ip == kRootPrimary) return PathStart::Complete;
    if (ip == kRootPartial) return PathStart::Partial;
    if (inherited == PathStart::Complete && (ip == kFenceMain || ip == kFenceThread)) return inherited;
    return std::nullopt;
  }

  // A placeholder other than the roots and fences stands for no code: a module of its own, named
  // by its code ("[placeholder NoActvty]"), which attribution makes the procedure "NoActvty" of
  // the module "[placeholder]" (attribution.hpp), so that views show what hpcrun recorded.
  std::uint32_t placeholderModule(std::uint64_t code) {
    const std::string path = kPlaceholderModulePrefix + codeText(code) + "]";
    const auto [it, added] = placeholderModules_.emplace(path, out_.modules.size());
    if (added) out_.modules.push_back(moduleAt(path));
    return it->second;
  }

  const std::string& name_;
  HpcrunFile& in_;  // the scratch's: values are reordered in place
  ThreadProfile& out_;
  Scratch& s_;
  std::map<std::string, std::uint32_t> placeholderModules_;
  bool parentsFirst_ = true;
};

// Metric names must be unique in a profile; hpcrun's rarely repeat, and then get a suffix.
void uniqueMetricNames(std::vector<MetricDescriptor>& metrics) {
  std::map<std::string, int> seen;
  for (auto& m : metrics)
    if (const int n = seen[m.name]++; n > 0) m.name += fmt::format(" [{}]", n + 1);
}

void fillIdentity(const HpcrunFile& in, ThreadProfile& p) {
  p.identity.idTuple = in.idTuple;
  for (const auto& s : in.header) {
    if (s.key == "program-name") p.identity.executable = s.value;
    if (s.key == "host-id") p.identity.hostname = s.value;
    if (s.key == "process-id") {
      std::uint32_t pid = 0;
      if (std::sscanf(s.value.c_str(), "%u", &pid) == 1) p.identity.pid = pid;
    }
    p.identity.settings.push_back({"hpcrun." + s.key, s.value});
  }
  p.identity.settings.push_back({"format", "hpcrun 4.0"});
}

class HpcrunProfileSource final : public ProfileSource {
 public:
  SourceProvides provides() const override {
    return {.addressFrames = true, .realMetrics = true, .pathStarts = true, .gpuIdentities = true};
  }
  std::string pattern() const override { return "*.hpcrun"; }
  bool isProfile(const fs::path& file) const override { return file.extension() == ".hpcrun"; }
  std::vector<std::string> list(const fs::path& directory) const override {
    std::vector<std::string> out;
    std::error_code ec;
    const auto entries = storage::directoryEntries(directory, ec);
    if (ec) throw storage::ProfileError(directory.string(), "cannot be listed: " + ec.message());
    for (const auto& e : entries) {
      if (!storage::hasExtension(e.name, ".hpcrun")) continue;
      const fs::path path = directory / e.name;
      std::error_code statError;
      if (e.kind == storage::DirectoryEntry::Kind::Regular ||
          (e.kind == storage::DirectoryEntry::Kind::Unknown && fs::is_regular_file(path, statError)))
        out.push_back(path.string());
    }
    std::sort(out.begin(), out.end());
    return out;
  }
  ThreadProfile read(const fs::path& entry) const override {
    const std::string name = entry.string();
    Scratch& s = scratch();
    const MappedBytes file(entry);
    Reader(name, file.bytes()).read(s.file);
    HpcrunFile& in = s.file;
    ThreadProfile p;
    p.frameKind = FrameKind::Address;
    p.strings = {""};
    p.metrics = in.metrics;
    uniqueMetricNames(p.metrics);
    fillIdentity(in, p);
    CctBuilder(name, in, p, s).build();
    return p;
  }
};

}  // namespace

std::string hpcrunNotRead(const fs::path& directory) {
  std::error_code ec;
  std::size_t traces = 0, gpuBinaries = 0;
  for (const auto& e : storage::directoryEntries(directory, ec))
    traces += storage::hasExtension(e.name, ".hpctrace") ? 1 : 0;
  gpuBinaries = storage::directoryEntries(directory / "gpubins", ec).size();
  if (traces + gpuBinaries == 0) return {};
  std::string what;
  if (traces) what = fmt::format("{} trace file{} (*.hpctrace)", traces, traces == 1 ? "" : "s");
  if (gpuBinaries)
    what += fmt::format("{}{} GPU binar{} (gpubins/)", what.empty() ? "" : " and ", gpuBinaries,
                        gpuBinaries == 1 ? "y" : "ies");
  return fmt::format("{}: {} of hpcrun not read (docs/hpctoolkit-input.md)", directory.string(), what);
}

std::shared_ptr<const ProfileSource> hpcrunProfileSource() { return std::make_shared<const HpcrunProfileSource>(); }

}  // namespace csp::reduce
