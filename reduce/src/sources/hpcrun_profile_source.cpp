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
#include <fstream>
#include <map>
#include <optional>
#include <string_view>
#include <system_error>

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
constexpr std::uint32_t kLastNodeEnd = 0x656E6421;  // "end!": the sentinel of the node index

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

// What one file holds, before it becomes a ThreadProfile.
struct HpcrunFile {
  std::vector<Setting> header;
  std::vector<std::pair<std::uint16_t, std::string>> loadmap;
  std::vector<Node> nodes;
  std::vector<MetricDescriptor> metrics;
  IdTuple idTuple;
  std::vector<RawValue> values;
};

class Reader {
 public:
  Reader(std::string name, std::string bytes) : name_(std::move(name)), bytes_(std::move(bytes)) {}

  HpcrunFile read() {
    checkHeaderMagic();
    const Footer f = footer();
    HpcrunFile out;
    out.header = header(section(f.hdr, "header"));
    out.loadmap = loadmap(section(f.loadmap, "load map"));
    out.nodes = cct(section(f.cct, "CCT"));
    out.metrics = metrics(section(f.metrics, "metric table"));
    values(section(f.values, "metric values"), out);
    return out;
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

  static std::vector<Setting> header(Cursor c) {
    c.raw(kHeaderBytes);
    std::vector<Setting> out(c.uint(4));
    if (out.size() > c.left() / 8) c.fail("more name-value pairs than bytes");
    for (auto& s : out) {
      s.key = c.str();
      s.value = c.str();
    }
    c.expectEnd();
    return out;
  }

  static std::vector<std::pair<std::uint16_t, std::string>> loadmap(Cursor c) {
    std::vector<std::pair<std::uint16_t, std::string>> out(c.uint(4));
    if (out.size() > c.left() / 14) c.fail("more entries than bytes");
    for (auto& [id, path] : out) {
      id = static_cast<std::uint16_t>(c.uint(2));
      path = c.str();
      c.uint(8);  // flags
      if (id == 0) c.fail(fmt::format("'{}' has id 0, which is reserved for placeholders", path));
    }
    c.expectEnd();
    return out;
  }

  static std::vector<Node> cct(Cursor c) {
    const std::uint64_t n = c.uint(8);
    if (n > c.left() / kCctNodeBytes) c.fail(fmt::format("{} nodes declared, {} bytes hold fewer", n, c.left()));
    std::vector<Node> out(n);
    for (auto& node : out) {
      node.id = static_cast<std::uint32_t>(c.uint(4));
      node.parent = static_cast<std::uint32_t>(c.uint(4));
      node.module = static_cast<std::uint16_t>(c.uint(2));
      node.ip = c.uint(8);
      c.uint(1);  // flags: whether the node came from an unwind (GPU operations do not)
    }
    c.expectEnd();
    return out;
  }

  static std::vector<MetricDescriptor> metrics(Cursor c) {
    std::vector<MetricDescriptor> out(c.uint(4));
    for (auto& m : out) m = metric(c);
    c.expectEnd();
    return out;
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

  void values(Cursor c, HpcrunFile& out) const {
    const std::uint64_t length = c.uint(2);
    if (length == 0) c.fail("the profile's id tuple is empty");
    for (std::uint64_t i = 0; i < length; ++i) {
      const auto kind = static_cast<std::uint16_t>(c.uint(2));
      c.uint(8);  // physical index (host id, core number): the logical one identifies
      const std::uint64_t logical = c.uint(8);
      if (const auto k = idKind(kind & 0x3fff, c)) out.idTuple.push_back({*k, logical});
    }
    const std::uint64_t count = c.uint(8);
    const std::uint64_t nodes = c.uint(4);
    if (count > c.left() / 10 || nodes > c.left() / 12) c.fail("more values than bytes");
    std::vector<std::pair<std::uint64_t, std::uint16_t>> pairs(count);
    for (auto& [bits, metric] : pairs) {
      bits = c.uint(8);
      metric = static_cast<std::uint16_t>(c.uint(2));
    }
    std::uint32_t node = 0;
    std::uint64_t start = 0;
    for (std::uint64_t i = 0; i <= nodes; ++i) {
      const auto nextNode = static_cast<std::uint32_t>(c.uint(4));
      const std::uint64_t nextStart = c.uint(8);
      if (nextStart < start || nextStart > count || (i == 0 && nextStart != 0))
        c.fail("the node index is not in order");
      for (std::uint64_t k = start; i > 0 && k < nextStart; ++k)
        out.values.push_back({node, pairs[k].second, pairs[k].first});
      node = nextNode;
      start = nextStart;
    }
    if (node != kLastNodeEnd || start != count) c.fail("the node index does not end with its sentinel");
    c.expectEnd();
    dropGpuDevice(out.idTuple);
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

  std::string name_;
  std::string bytes_;
};

LoadModule moduleAt(const std::string& path) {
  LoadModule m;
  m.path = path;
  return m;
}

std::string fileBytes(const fs::path& file) {
  std::ifstream in(file, std::ios::binary);
  if (!in) throw storage::ProfileError(file.string(), "cannot be opened");
  std::error_code ec;
  const auto size = fs::file_size(file, ec);
  std::string bytes(ec ? 0 : size, '\0');
  in.read(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  if (ec || in.gcount() != static_cast<std::streamsize>(bytes.size()))
    throw storage::ProfileError(file.string(), "cannot be read");
  return bytes;
}

// hpcrun's CCT (ids, parents by id, in any order) -> CSP's (parents before children), with the
// special roots and the fences below them left out: they only say how the paths below begin.
// Nodes are handled by their position in the file; ids only lead to positions.
class CctBuilder {
 public:
  CctBuilder(const std::string& name, const HpcrunFile& in, ThreadProfile& out) : name_(name), in_(in), out_(out) {}

  void build() {
    indexNodes();
    linkChildren();
    markValued();
    mapModules();
    walk();
    frameTable();
    convertValues();
  }

 private:
  [[noreturn]] void fail(const std::string& defect) const { throw storage::ProfileError(name_, defect); }

  // hpcrun numbers its nodes densely (ids up to about twice their count): a table by id, else a
  // sorted list of (id, position).
  void indexNodes() {
    std::uint32_t maxId = 0;
    for (const auto& n : in_.nodes) {
      if (n.id == 0) fail("CCT: a node has id 0, which is reserved");
      maxId = std::max(maxId, n.id);
    }
    if (maxId <= 4 * in_.nodes.size() + 64) {
      dense_.assign(std::size_t{maxId} + 1, kNoIndex);
      for (std::uint32_t i = 0; i < in_.nodes.size(); ++i) {
        auto& slot = dense_[in_.nodes[i].id];
        if (slot != kNoIndex) fail(fmt::format("CCT: node id {} appears twice", in_.nodes[i].id));
        slot = i;
      }
      return;
    }
    for (std::uint32_t i = 0; i < in_.nodes.size(); ++i) byId_.push_back({in_.nodes[i].id, i});
    std::sort(byId_.begin(), byId_.end());
    for (std::size_t i = 1; i < byId_.size(); ++i)
      if (byId_[i].first == byId_[i - 1].first) fail(fmt::format("CCT: node id {} appears twice", byId_[i].first));
  }
  std::optional<std::uint32_t> position(std::uint32_t id) const {
    if (!dense_.empty()) {
      if (id >= dense_.size() || dense_[id] == kNoIndex) return std::nullopt;
      return dense_[id];
    }
    const auto it = std::lower_bound(byId_.begin(), byId_.end(), std::pair<std::uint32_t, std::uint32_t>{id, 0});
    if (it == byId_.end() || it->first != id) return std::nullopt;
    return it->second;
  }

  // Children per node in file order, as one array (firstChild_[i] .. firstChild_[i + 1]).
  void linkChildren() {
    const std::size_t n = in_.nodes.size();
    std::vector<std::uint32_t> parentPos(n, kNoIndex);
    firstChild_.assign(n + 1, 0);
    for (std::uint32_t i = 0; i < n; ++i) {
      const Node& node = in_.nodes[i];
      if (node.parent == 0) {
        roots_.push_back(i);
        continue;
      }
      const auto p = position(node.parent);
      if (!p) fail(fmt::format("CCT: node {} has parent {}, which does not exist", node.id, node.parent));
      parentPos[i] = *p;
      ++firstChild_[*p + 1];
    }
    for (std::size_t i = 0; i < n; ++i) firstChild_[i + 1] += firstChild_[i];
    children_.resize(firstChild_[n]);
    std::vector<std::uint32_t> fill(firstChild_.begin(), firstChild_.end() - 1);
    for (std::uint32_t i = 0; i < n; ++i)
      if (parentPos[i] != kNoIndex) children_[fill[parentPos[i]]++] = i;
  }

  void markValued() {
    valued_.assign(in_.nodes.size(), false);
    valuePos_.reserve(in_.values.size());
    for (const auto& v : in_.values) {
      const auto p = position(v.node);
      if (!p) fail(fmt::format("metric values: node {} is not in the CCT", v.node));
      valued_[*p] = true;
      valuePos_.push_back(*p);
    }
  }

  void mapModules() {
    // By id, as large as the largest id (load maps are small; hpcrun ids are 16-bit).
    std::uint32_t maxId = 0;
    for (const auto& entry : in_.loadmap) maxId = std::max<std::uint32_t>(maxId, entry.first);
    moduleIndex_.assign(std::size_t{maxId} + 1, kNoIndex);
    for (const auto& [id, path] : in_.loadmap) {
      if (moduleIndex_[id] != kNoIndex) fail(fmt::format("load map: id {} appears twice", id));
      moduleIndex_[id] = static_cast<std::uint32_t>(out_.modules.size());
      out_.modules.push_back(moduleAt(path));
    }
  }

  // Depth first from the roots in file order: the CSP order is the same for the same tree.
  void walk() {
    out_.cct.parent.reserve(in_.nodes.size() + 1);
    nodeFrames_.reserve(in_.nodes.size());
    starts_.reserve(in_.nodes.size() + 1);
    out_.cct.parent = {kNoIndex};
    out_.cct.frame = {kNoIndex};
    starts_ = {PathStart::Unknown};
    cspOf_.assign(in_.nodes.size(), kNoIndex);
    std::vector<std::pair<std::uint32_t, PathStart>> place(in_.nodes.size(), {0, PathStart::Unknown});
    std::vector<std::uint32_t> stack(roots_.rbegin(), roots_.rend());
    std::size_t reached = 0;
    while (!stack.empty()) {
      const std::uint32_t i = stack.back();
      stack.pop_back();
      ++reached;
      auto [parent, start] = place[i];
      std::uint32_t here = parent;
      if (const auto special = parent == 0 ? specialRoot(i, start) : std::nullopt)
        start = *special;
      else
        here = emit(i, parent, parent == 0 ? start : PathStart::Unknown);
      for (std::uint32_t c = firstChild_[i + 1]; c-- > firstChild_[i];) {
        place[children_[c]] = {here, start};
        stack.push_back(children_[c]);
      }
    }
    if (reached != in_.nodes.size())
      fail(fmt::format("CCT: {} nodes are not reachable from its roots (a cycle)", in_.nodes.size() - reached));
    if (std::any_of(starts_.begin(), starts_.end(), [](PathStart s) { return s != PathStart::Unknown; }))
      out_.cct.pathStart = std::move(starts_);
  }

  // The frame table: a frame per node (attribution caches by module and offset, so repeated
  // frames cost nothing later, and no lookup is needed here).
  void frameTable() {
    out_.addressFrames = std::move(nodeFrames_);
    out_.cct.frame.resize(out_.addressFrames.size() + 1);
    for (std::uint32_t i = 1; i < out_.cct.frame.size(); ++i) out_.cct.frame[i] = i - 1;
  }

  // For a node at the root level that is a special root or a fence below ^Primary (and carries no
  // values of its own), the start of the paths below it.
  std::optional<PathStart> specialRoot(std::uint32_t i, PathStart inherited) const {
    const Node& n = in_.nodes[i];
    if (n.module != 0 || valued_[i]) return std::nullopt;
    if (n.ip == kRootPrimary) return PathStart::Complete;
    if (n.ip == kRootPartial) return PathStart::Partial;
    if (inherited == PathStart::Complete && (n.ip == kFenceMain || n.ip == kFenceThread)) return inherited;
    return std::nullopt;
  }

  // A placeholder other than the roots and fences stands for no code: a module of its own, named
  // by its code ("[placeholder NoActvty]"), which attribution makes the procedure "NoActvty" of
  // the module "[placeholder]" (attribution.hpp), so that views show what hpcrun recorded.
  std::uint32_t moduleOf(const Node& n) {
    if (n.module != 0) {
      if (n.module >= moduleIndex_.size() || moduleIndex_[n.module] == kNoIndex)
        fail(fmt::format("CCT: node {} is in load module {}, which is not in the load map", n.id, n.module));
      return moduleIndex_[n.module];
    }
    const std::string path = kPlaceholderModulePrefix + codeText(n.ip) + "]";
    const auto [it, added] = placeholderModules_.emplace(path, out_.modules.size());
    if (added) out_.modules.push_back(moduleAt(path));
    return it->second;
  }

  std::uint32_t emit(std::uint32_t i, std::uint32_t parent, PathStart start) {
    const Node& n = in_.nodes[i];
    const auto index = static_cast<std::uint32_t>(out_.cct.parent.size());
    nodeFrames_.push_back({moduleOf(n), n.module == 0 ? 0 : n.ip});
    out_.cct.parent.push_back(parent);
    starts_.push_back(start);
    cspOf_[i] = index;
    return index;
  }

  struct Entry {
    std::uint32_t node;
    std::uint16_t metric;
    std::uint64_t count;
  };

  // Bucketed by node (linear), then by metric within a node (a few each).
  void sortByNodeAndMetric(std::vector<Entry>& entries) const {
    std::vector<std::uint32_t> first(out_.cct.size() + 1, 0);
    for (const auto& e : entries) ++first[e.node + 1];
    for (std::size_t i = 0; i + 1 < first.size(); ++i) first[i + 1] += first[i];
    std::vector<Entry> sorted(entries.size());
    std::vector<std::uint32_t> fill(first.begin(), first.end() - 1);
    for (const auto& e : entries) sorted[fill[e.node]++] = e;
    for (std::size_t n = 0; n + 1 < first.size(); ++n)
      if (first[n + 1] - first[n] > 1)
        std::sort(sorted.begin() + first[n], sorted.begin() + first[n + 1],
                  [](const Entry& a, const Entry& b) { return a.metric < b.metric; });
    entries = std::move(sorted);
  }

  void convertValues() {
    std::vector<Entry> entries;
    entries.reserve(in_.values.size());
    for (std::size_t k = 0; k < in_.values.size(); ++k) {
      const RawValue& v = in_.values[k];
      if (v.metric >= out_.metrics.size())
        fail(fmt::format("metric values: metric {} at node {} is not in the metric table", v.metric, v.node));
      std::uint64_t bits = v.bits;
      if (out_.metrics[v.metric].valueType == ValueType::Real && realValue(bits) == 0.0) bits = 0;  // -0.0
      if (bits != 0) entries.push_back({cspOf_[valuePos_[k]], v.metric, bits});
    }
    sortByNodeAndMetric(entries);
    out_.values.node.reserve(entries.size());
    out_.values.metric.reserve(entries.size());
    out_.values.count.reserve(entries.size());
    for (std::size_t i = 0; i < entries.size(); ++i) {
      if (i > 0 && entries[i].node == entries[i - 1].node && entries[i].metric == entries[i - 1].metric)
        fail(fmt::format("metric values: metric {} appears twice at one node", entries[i].metric));
      out_.values.node.push_back(entries[i].node);
      out_.values.metric.push_back(entries[i].metric);
      out_.values.count.push_back(entries[i].count);
    }
  }

  const std::string& name_;
  const HpcrunFile& in_;
  ThreadProfile& out_;
  std::vector<std::uint32_t> dense_;                           // position by hpcrun id, or empty
  std::vector<std::pair<std::uint32_t, std::uint32_t>> byId_;  // else (hpcrun id, position), sorted
  std::vector<std::uint32_t> firstChild_, children_, roots_;
  std::vector<bool> valued_;                // per position: carries values
  std::vector<std::uint32_t> valuePos_;     // per value: its node's position
  std::vector<std::uint32_t> cspOf_;        // per position: the CSP node
  std::vector<std::uint32_t> moduleIndex_;  // by hpcrun's module id
  std::map<std::string, std::uint32_t> placeholderModules_;
  std::vector<AddressFrame> nodeFrames_;  // per CSP node but the root
  std::vector<PathStart> starts_;
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
  std::vector<fs::path> list(const fs::path& directory) const override {
    std::vector<fs::path> out;
    std::error_code ec;
    for (fs::directory_iterator it(directory, ec), end; !ec && it != end; it.increment(ec))
      if (isProfile(it->path()) && it->is_regular_file()) out.push_back(it->path());
    if (ec) throw storage::ProfileError(directory.string(), "cannot be listed: " + ec.message());
    std::sort(out.begin(), out.end());
    return out;
  }
  ThreadProfile read(const fs::path& entry) const override {
    const std::string name = entry.string();
    const HpcrunFile in = Reader(name, fileBytes(entry)).read();
    ThreadProfile p;
    p.frameKind = FrameKind::Address;
    p.strings = {""};
    p.metrics = in.metrics;
    uniqueMetricNames(p.metrics);
    fillIdentity(in, p);
    CctBuilder(name, in, p).build();
    return p;
  }
};

}  // namespace

std::string hpcrunNotRead(const fs::path& directory) {
  std::error_code ec;
  std::size_t traces = 0, gpuBinaries = 0;
  for (fs::directory_iterator it(directory, ec), end; !ec && it != end; it.increment(ec))
    traces += it->path().extension() == ".hpctrace" ? 1 : 0;
  for (fs::directory_iterator it(directory / "gpubins", ec), end; !ec && it != end; it.increment(ec)) ++gpuBinaries;
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
