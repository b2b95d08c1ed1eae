// HPCToolkit's database format 4.0: byte encodings and layouts (format.hpp).
#include "format.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <bit>
#include <cctype>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <new>
#include <regex>
#include <stdexcept>
#include <tuple>
#include <unordered_map>

namespace csp::reduce::hpctk {

using storage::CctNode;
using storage::MetricScope;

namespace {

void appendLe(std::string& out, std::uint64_t v, int n) {
  char b[8];
  for (int i = 0; i < n; ++i, v >>= 8) b[i] = static_cast<char>(v & 0xff);
  out.append(b, static_cast<std::size_t>(n));
}
void padTo(std::string& out, std::uint64_t start, std::uint64_t a) {
  out.resize(start + alignUp(out.size() - start, a), '\0');
}

// The common file header: magic, format, major version 4, minor version 0.
void fileHeader(Image& image, std::string_view format) {
  image.raw("HPCTOOLKIT");
  image.raw(format);
  image.raw(std::string_view("\x04\x00", 2));
}

// meta.db's eight sections, in the order of the file header's {sz,p} pairs.
enum Section : unsigned { General, IdNames, Metrics, Context, Strings, Modules, Files, Functions };

void setSection(Image& image, Section s, std::uint64_t start) {
  image.u64(0x10 + 0x10 * s, image.end() - start);
  image.u64(0x18 + 0x10 * s, start);
}

// Strings, load modules, source files and functions of meta.db, deduplicated in order of first use.
class Tables {
 public:
  std::size_t string(const std::string& text) { return intern(strings_, stringIds_, text); }
  int module(const std::string& path) {
    return path.empty() ? -1 : static_cast<int>(intern(modules_, moduleIds_, path));
  }
  int file(const std::string& path) { return static_cast<int>(intern(files_, fileIds_, path)); }
  int function(const std::string& name, int module, int file, std::uint32_t line) {
    const auto key = std::make_tuple(name, module, file, line);
    const auto [it, added] = functionIds_.try_emplace(key, functions_.size());
    if (added) {
      string(name);
      functions_.push_back({name, module, file, line});
    }
    return static_cast<int>(it->second);
  }

  struct Function {
    std::string name;
    int module = -1;
    int file = -1;
    std::uint32_t line = 0;
  };
  const std::vector<std::string>& strings() const { return strings_; }
  const std::vector<std::string>& modules() const { return modules_; }
  const std::vector<std::string>& files() const { return files_; }
  const std::vector<Function>& functions() const { return functions_; }

 private:
  std::size_t intern(std::vector<std::string>& list, std::unordered_map<std::string, std::size_t>& ids,
                     const std::string& text) {
    const auto [it, added] = ids.try_emplace(text, list.size());
    if (added) {
      list.push_back(text);
      if (&list != &strings_) string(text);
    }
    return it->second;
  }
  std::vector<std::string> strings_, modules_, files_;
  std::unordered_map<std::string, std::size_t> stringIds_, moduleIds_, fileIds_;
  std::vector<Function> functions_;
  std::map<std::tuple<std::string, int, int, std::uint32_t>, std::size_t> functionIds_;
};

constexpr std::uint8_t kLexicalNest = 0, kCall = 1, kInlinedCall = 2;
constexpr std::uint8_t kFunctionContext = 0, kLoopContext = 1, kLineContext = 2;

// What one CCT node becomes (docs/hpctoolkit.md, "What maps to what").
struct ContextSpec {
  std::uint8_t relation = kLexicalNest;
  std::uint8_t lexicalType = kLineContext;
  int function = -1;
  int file = -1;
  std::uint32_t line = 0;
  int module = -1;
  std::uint64_t offset = 0;
  unsigned flexWords() const { return (function >= 0 ? 1 : 0) + (file >= 0 ? 2 : 0) + (module >= 0 ? 2 : 0); }
  std::uint64_t bytes() const { return 0x20 + 8 * flexWords(); }
};

std::string fileName(const std::string& path) {
  const auto slash = path.rfind('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

std::vector<ContextSpec> contextSpecs(const storage::DatabaseMetadata& meta, const std::vector<CctNode>& cct,
                                      Tables& tables) {
  static const std::regex addressLoop(R"(loop @0x([0-9a-fA-F]+) in (.+))");
  auto text = [&](storage::StringId id) -> const std::string& { return meta.strings.at(id); };
  std::vector<ContextSpec> specs(cct.size());
  std::vector<storage::NodeId> procOf(cct.size(), kNoIndex);
  for (storage::NodeId n = 1; n < cct.size(); ++n) {
    const CctNode& node = cct[n];
    procOf[n] = node.kind == ScopeKind::ProcFrame ? n : procOf[node.parent];
    const std::string procModule = procOf[n] != kNoIndex ? text(cct[procOf[n]].module) : std::string();
    // A line needs a file: code without a line table is placed in its module.
    auto sourceLine = [&](ContextSpec& s) {
      const std::string& file = text(node.file);
      s.file = tables.file(!file.empty() ? file : !procModule.empty() ? procModule : std::string("[unknown file]"));
      s.line = node.line;
    };
    ContextSpec& s = specs[n];
    switch (node.kind) {
      case ScopeKind::ProcFrame: {
        const std::string& name = text(node.name);
        s.relation = kCall;
        s.lexicalType = kFunctionContext;
        s.function =
            tables.function(name.empty() ? "[unknown procedure]" : name, tables.module(text(node.module)),
                            node.file != 0 && !text(node.file).empty() ? tables.file(text(node.file)) : -1, node.line);
        break;
      }
      case ScopeKind::Alien: {
        const std::string& name = text(node.name);
        s.relation = kInlinedCall;
        s.lexicalType = kFunctionContext;
        s.function = tables.function(name.empty() ? "[inlined code]" : name, tables.module(procModule), -1, 0);
        sourceLine(s);  // where it was inlined
        break;
      }
      case ScopeKind::Loop: {
        s.lexicalType = kLoopContext;
        sourceLine(s);
        std::smatch m;
        const std::string& name = text(node.name);
        if (std::regex_match(name, m, addressLoop)) {
          s.module = tables.module(fileName(procModule) == m[2].str() ? procModule : m[2].str());
          s.offset = std::stoull(m[1].str(), nullptr, 16);
        }
        break;
      }
      case ScopeKind::CallSite:
      case ScopeKind::Stmt:
        s.lexicalType = kLineContext;
        sourceLine(s);
        break;
      case ScopeKind::Root:
        throw std::runtime_error(fmt::format("CCT node {} is a second root", n));
    }
  }
  return specs;
}

void writeGeneral(Image& image, const MetaInput& in) {
  const auto start = image.end();
  image.reserve(0x10);
  const auto& meta = *in.metadata;
  image.u64(start, image.cstring(!meta.title.empty() ? meta.title : meta.executable));
  image.u64(start + 8, image.cstring(in.description));
  setSection(image, General, start);
}

void writeIdNames(Image& image) {
  const auto kinds = idKinds();
  const auto start = image.end();
  image.reserve(0x09);
  image.alignTo(8);
  const auto array = image.reserve(8 * kinds.names.size());
  image.u64(start, array);
  image.u8(start + 8, static_cast<std::uint8_t>(kinds.names.size()));
  for (std::size_t k = 0; k < kinds.names.size(); ++k) image.u64(array + 8 * k, image.cstring(kinds.names[k]));
  setSection(image, IdNames, start);
}

struct PartialSpec {
  Partial partial;
  const char* formula;
  std::uint8_t combine;  // 0 sum, 1 min, 2 max
};
constexpr PartialSpec kPartialSpecs[kPartials] = {{Partial::Count, "1", 0},
                                                  {Partial::SumSquares, "($$^2)", 0},
                                                  {Partial::Min, "$$", 1},
                                                  {Partial::Max, "$$", 2},
                                                  {Partial::Sum, "$$", 0}};
constexpr const char* kScopeNames[2] = {"function", "execution"};
// Scope types: CSP's exclusive value follows the thesis' rules (a loop keeps only its own
// statements), which no transitive propagation over the context tree expresses: "custom" (0).
// Inclusive is HPCToolkit's standard "execution" (2).
constexpr std::uint8_t kScopeTypes[2] = {0, 2};

void writeMetrics(Image& image, const storage::DatabaseMetadata& meta) {
  const std::size_t n = meta.metrics.size();
  const auto start = image.end();
  image.reserve(0x1b);
  image.alignTo(8);
  const auto scopes = image.reserve(2 * 0x10);
  const auto metrics = image.reserve(n * 0x20);
  image.u64(start, metrics);
  image.u32(start + 0x08, static_cast<std::uint32_t>(n));
  image.u8(start + 0x0c, 0x20);
  image.u8(start + 0x0d, 0x10);
  image.u8(start + 0x0e, 0x18);
  image.u64(start + 0x10, scopes);
  image.u16(start + 0x18, 2);
  image.u8(start + 0x1a, 0x10);
  // The arrays first (8-aligned), then the strings they point at.
  std::vector<std::pair<std::uint64_t, std::uint64_t>> arrays;  // {PSI}[2], {SS}[10] per metric
  for (std::size_t m = 0; m < n; ++m) {
    const auto instances = image.reserve(2 * 0x10);
    arrays.emplace_back(instances, image.reserve(2 * kPartials * 0x18));
  }
  for (unsigned s = 0; s < 2; ++s) {
    image.u64(scopes + 0x10 * s, image.cstring(kScopeNames[s]));
    image.u8(scopes + 0x10 * s + 8, kScopeTypes[s]);
    image.u8(scopes + 0x10 * s + 9, 0xff);  // no propagation bit
  }
  std::map<std::string, std::uint64_t> formulas;
  for (const auto& p : kPartialSpecs)
    if (!formulas.count(p.formula)) formulas[p.formula] = image.cstring(p.formula);
  for (std::size_t m = 0; m < n; ++m) {
    const auto md = metrics + 0x20 * m;
    const auto [instances, summaries] = arrays[m];
    image.u64(md, image.cstring(metricName(meta.metrics[m].descriptor)));
    image.u64(md + 0x08, instances);
    image.u64(md + 0x10, summaries);
    image.u16(md + 0x18, 2);
    image.u16(md + 0x1a, 2 * kPartials);
    for (unsigned s = 0; s < 2; ++s) {
      const auto scope = static_cast<MetricScope>(s);
      image.u64(instances + 0x10 * s, scopes + 0x10 * s);
      image.u16(instances + 0x10 * s + 8, propagatedId(m, scope));
      for (unsigned k = 0; k < kPartials; ++k) {
        const auto ss = summaries + 0x18 * (s * kPartials + k);
        image.u64(ss, scopes + 0x10 * s);
        image.u64(ss + 0x08, formulas.at(kPartialSpecs[k].formula));
        image.u8(ss + 0x10, kPartialSpecs[k].combine);
        image.u16(ss + 0x12, statisticId(m, kPartialSpecs[k].partial, scope));
      }
    }
  }
  setSection(image, Metrics, start);
}

// Strings, Modules, Files and Functions; returns the offsets of their entries.
struct TableOffsets {
  std::vector<std::uint64_t> strings, modules, files, functions;
};

TableOffsets writeTables(Image& image, const Tables& t) {
  TableOffsets o;
  auto start = image.end();
  for (const auto& s : t.strings()) o.strings.push_back(image.cstring(s));
  setSection(image, Strings, start);
  std::unordered_map<std::string, std::size_t> stringIndex;
  for (std::size_t i = 0; i < t.strings().size(); ++i) stringIndex.emplace(t.strings()[i], i);
  auto stringAt = [&](const std::string& s) { return o.strings[stringIndex.at(s)]; };

  // Modules and Files share their layout: flags (u32), pPath at 0x08.
  auto paths = [&](Section section, const std::vector<std::string>& list, std::vector<std::uint64_t>& out) {
    image.alignTo(8);
    const auto at = image.end();
    image.reserve(0x0e);
    image.alignTo(8);
    const auto array = image.reserve(0x10 * list.size());
    image.u64(at, array);
    image.u32(at + 8, static_cast<std::uint32_t>(list.size()));
    image.u16(at + 0x0c, 0x10);
    for (std::size_t i = 0; i < list.size(); ++i) {
      out.push_back(array + 0x10 * i);
      image.u64(array + 0x10 * i + 8, stringAt(list[i]));
    }
    setSection(image, section, at);
  };
  paths(Modules, t.modules(), o.modules);
  paths(Files, t.files(), o.files);

  image.alignTo(8);
  start = image.end();
  image.reserve(0x0e);
  image.alignTo(8);
  const auto array = image.reserve(0x28 * t.functions().size());
  image.u64(start, array);
  image.u32(start + 8, static_cast<std::uint32_t>(t.functions().size()));
  image.u16(start + 0x0c, 0x28);
  for (std::size_t i = 0; i < t.functions().size(); ++i) {
    const auto& f = t.functions()[i];
    const auto fs = array + 0x28 * i;
    o.functions.push_back(fs);
    image.u64(fs, stringAt(f.name));
    image.u64(fs + 0x08, f.module >= 0 ? o.modules[f.module] : 0);
    image.u64(fs + 0x18, f.file >= 0 ? o.files[f.file] : 0);
    image.u32(fs + 0x20, f.line);
  }
  setSection(image, Functions, start);
  return o;
}

void writeContextRecord(Image& image, std::uint64_t at, storage::NodeId n, const ContextSpec& s,
                        std::uint64_t childBytes, std::uint64_t childArray, const TableOffsets& o) {
  image.u64(at, childBytes);
  image.u64(at + 0x08, childBytes ? childArray : 0);
  image.u32(at + 0x10, contextOf(n));
  std::uint8_t flags = 0;
  auto flex = at + 0x20;
  if (s.function >= 0) {
    flags |= 0x1;
    image.u64(flex, o.functions[s.function]);
    flex += 8;
  }
  if (s.file >= 0) {
    flags |= 0x2;
    image.u64(flex, o.files[s.file]);
    image.u32(flex + 8, s.line);
    flex += 16;
  }
  if (s.module >= 0) {
    flags |= 0x4;
    image.u64(flex, o.modules[s.module]);
    image.u64(flex + 8, s.offset);
  }
  image.u8(at + 0x14, flags);
  image.u8(at + 0x15, s.relation);
  image.u8(at + 0x16, s.lexicalType);
  image.u8(at + 0x17, static_cast<std::uint8_t>(s.flexWords()));
  // propagation (0x18): no bits, no transitive scope is defined
}

// The context tree: the root is the one entry point; each node's children form one array, the
// arrays in order of their parents' ids.
void writeContextTree(Image& image, const std::vector<CctNode>& cct, const std::vector<ContextSpec>& specs,
                      const TableOffsets& o, std::uint64_t prettyName) {
  std::vector<std::vector<storage::NodeId>> children(cct.size());
  for (storage::NodeId n = 1; n < cct.size(); ++n) children[cct[n].parent].push_back(n);
  std::vector<std::uint64_t> childBytes(cct.size(), 0);
  for (storage::NodeId n = 0; n < cct.size(); ++n)
    for (auto c : children[n]) childBytes[n] += specs[c].bytes();

  image.alignTo(8);
  const auto start = image.end();
  image.reserve(0x0b);
  image.alignTo(8);
  const auto entry = image.reserve(0x20);
  image.u64(start, entry);
  image.u16(start + 8, 1);
  image.u8(start + 0x0a, 0x20);
  std::vector<std::uint64_t> arrayOf(cct.size(), 0);
  for (storage::NodeId n = 0; n < cct.size(); ++n)
    if (childBytes[n]) arrayOf[n] = image.reserve(childBytes[n]);
  image.u64(entry, childBytes[0]);
  image.u64(entry + 0x08, childBytes[0] ? arrayOf[0] : 0);
  image.u32(entry + 0x10, contextOf(0));
  image.u16(entry + 0x14, 1);  // "main thread": every thread of CSP's run hangs below the one root
  image.u64(entry + 0x18, prettyName);
  for (storage::NodeId n = 0; n < cct.size(); ++n) {
    auto at = arrayOf[n];
    for (auto c : children[n]) {
      writeContextRecord(image, at, c, specs[c], childBytes[c], arrayOf[c], o);
      at += specs[c].bytes();
    }
  }
  setSection(image, Context, start);
}

std::string yamlQuoted(std::string_view s) {
  std::string out = "\"";
  for (const char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    if (static_cast<unsigned char>(c) < 0x20) {
      out += fmt::format("\\x{:02x}", static_cast<unsigned char>(c));
      continue;
    }
    out += c;
  }
  return out + "\"";
}

}  // namespace

std::string metricName(const MetricDescriptor& metric) {
  std::string name = metric.name == "cpu-time" ? "CPUTIME" : metric.name == "real-time" ? "REALTIME" : metric.name;
  return metric.unit.empty() ? name : fmt::format("{} ({})", name, metric.unit);
}

double valueOf(std::uint64_t stored, storage::ValueType type) {
  return type == storage::ValueType::Real ? std::bit_cast<double>(stored) : static_cast<double>(stored);
}

std::uint64_t Image::reserve(std::uint64_t n) {
  const auto at = end();
  bytes_.resize(bytes_.size() + n, '\0');
  return at;
}

void Image::f64(std::uint64_t at, double v) { put(at, std::bit_cast<std::uint64_t>(v), 8); }

void Image::put(std::uint64_t at, std::uint64_t v, int n) {
  for (int i = 0; i < n; ++i, v >>= 8) bytes_[at - base_ + i] = static_cast<char>(v & 0xff);
}

std::uint64_t Image::cstring(std::string_view text) {
  const auto at = end();
  bytes_.append(text);
  bytes_.push_back('\0');
  return at;
}

std::string encodeMetaDb(const MetaInput& in) {
  const auto& meta = *in.metadata;
  const auto& cct = *in.cct;
  if (cct.empty() || cct[0].kind != ScopeKind::Root) throw std::runtime_error("the CCT has no root");
  if (meta.metrics.size() > kMaxMetrics)
    throw std::runtime_error(
        fmt::format("{} metrics: HPCToolkit's 16-bit metric ids hold at most {}", meta.metrics.size(), kMaxMetrics));
  Tables tables;
  const auto specs = contextSpecs(meta, cct, tables);
  tables.string("main thread");

  Image image;
  fileHeader(image, "meta");
  image.reserve(kMetaHeaderSize - image.end());
  writeGeneral(image, in);
  image.alignTo(8);
  writeIdNames(image);
  image.alignTo(8);
  writeMetrics(image, meta);
  image.alignTo(8);
  const auto offsets = writeTables(image, tables);
  std::unordered_map<std::string, std::size_t> index;
  for (std::size_t i = 0; i < tables.strings().size(); ++i) index.emplace(tables.strings()[i], i);
  writeContextTree(image, cct, specs, offsets, offsets.strings[index.at("main thread")]);
  image.raw(std::string_view(kMetaFooter, kFooterSize));
  return image.take();
}

std::string encodeMetricsYaml(const storage::DatabaseMetadata& meta) {
  static constexpr const char* kPartialNames[kPartials] = {"count", "squares", "min", "max", "sum"};
  static constexpr const char* kCombine[] = {"sum", "min", "max"};
  std::string y =
      "# The metric taxonomy of a database written by CSP (csp-prof-mpi --hpctoolkit): HPCToolkit's METRICS.yaml\n"
      "# format. Inputs are the summary statistics of profile.db; see CSP's docs/hpctoolkit.md.\n"
      "version: 0\ninputs:\n";
  auto anchor = [](std::size_t m, unsigned k, unsigned s) {
    return fmt::format("m{}-{}-{}", m, kPartialNames[k], kScopeNames[s]);
  };
  for (std::size_t m = 0; m < meta.metrics.size(); ++m)
    for (unsigned s = 0; s < 2; ++s)
      for (unsigned k = 0; k < kPartials; ++k)
        y += fmt::format("  - &{} {{metric: {}, scope: {}, formula: {}, combine: {}}}\n", anchor(m, k, s),
                         yamlQuoted(metricName(meta.metrics[m].descriptor)), kScopeNames[s],
                         yamlQuoted(kPartialSpecs[k].formula), kCombine[kPartialSpecs[k].combine]);
  y += "roots:\n";
  for (std::size_t m = 0; m < meta.metrics.size(); ++m) {
    const auto& d = meta.metrics[m].descriptor;
    y += fmt::format("  - name: {}\n    description: {}\n    variants:\n", yamlQuoted(metricName(d)),
                     yamlQuoted(d.description.empty() ? d.name : d.description));
    auto ref = [&](Partial p, unsigned s) { return fmt::format("*{}", anchor(m, static_cast<unsigned>(p), s)); };
    auto mean = [&](unsigned s) {
      return fmt::format("{{\"/\": [{}, {}]}}", ref(Partial::Sum, s), ref(Partial::Count, s));
    };
    auto stddev = [&](unsigned s) {
      return fmt::format("{{sqrt: [{{\"-\": [{{\"/\": [{}, {}]}}, {{\"^\": [{}, 2]}}]}}]}}",
                         ref(Partial::SumSquares, s), ref(Partial::Count, s), mean(s));
    };
    using Formula = std::function<std::string(unsigned)>;
    const std::vector<std::tuple<const char*, const char*, Formula>> variants = {
        {"Sum", "[number, percent]", [&](unsigned s) { return ref(Partial::Sum, s); }},
        {"Mean", "number", mean},
        {"StdDev", "number", stddev},
        {"CfVar", "number", [&](unsigned s) { return fmt::format("{{\"/\": [{}, {}]}}", stddev(s), mean(s)); }},
        {"Min", "number", [&](unsigned s) { return ref(Partial::Min, s); }},
        {"Max", "number", [&](unsigned s) { return ref(Partial::Max, s); }}};
    for (const auto& [name, render, formula] : variants)
      y += fmt::format(
          "      {}:\n        render: {}\n        formula:\n          inclusive: {{standard: {}}}\n"
          "          exclusive: {{standard: {}}}\n",
          name, render, formula(1), formula(0));
  }
  return y;
}

IdKinds idKinds() {
  IdKinds k;
  k.names = {"SUMMARY", "NODE", "RANK", "THREAD", "GPUDEVICE", "GPUCONTEXT", "GPUSTREAM", "CORE", "PROCESS"};
  // By name, so that kinds CSP adds later find HPCToolkit's number when it has one.
  for (unsigned v = 0; v < 256; ++v) {
    std::string name = toString(static_cast<IdKind>(v));
    if (name == "unknown") break;
    std::string upper;
    for (char c : name)
      if (std::isalnum(static_cast<unsigned char>(c)))
        upper += static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
    auto it = std::find(k.names.begin(), k.names.end(), upper);
    if (it == k.names.end()) it = k.names.insert(k.names.end(), upper);
    k.kindOf.push_back(static_cast<std::uint8_t>(it - k.names.begin()));
  }
  return k;
}

std::string encodeIdTuples(const std::vector<IdTuple>& profiles, std::uint64_t at,
                           std::vector<std::uint64_t>& offsets) {
  const auto kinds = idKinds();
  // Physical identifiers (nodes, cores: HPCToolkit's isPhysical kinds, and any value beyond 32
  // bits) get logical ids dense from 0: their rank among the kind's values.
  auto physical = [&](std::uint8_t kind, std::uint64_t v) { return kind == 1 || kind == 7 || v > UINT32_MAX; };
  std::map<std::uint8_t, std::vector<std::uint64_t>> values;
  for (const auto& t : profiles)
    for (const auto& e : t) values[kinds.kindOf.at(static_cast<std::size_t>(e.kind))].push_back(e.value);
  for (auto& [kind, v] : values) {
    std::sort(v.begin(), v.end());
    v.erase(std::unique(v.begin(), v.end()), v.end());
  }
  std::string out;
  for (const auto& t : profiles) {
    offsets.push_back(at + out.size());
    appendLe(out, t.size(), 2);
    appendLe(out, 0, 6);
    for (const auto& e : t) {
      const auto kind = kinds.kindOf.at(static_cast<std::size_t>(e.kind));
      const bool phys = physical(kind, e.value);
      const auto& v = values[kind];
      const auto logical = phys ? std::lower_bound(v.begin(), v.end(), e.value) - v.begin() : e.value;
      appendLe(out, kind, 1);
      appendLe(out, 0, 1);
      appendLe(out, phys ? 1 : 0, 2);
      appendLe(out, static_cast<std::uint64_t>(logical), 4);
      appendLe(out, e.value, 8);
    }
  }
  return out;
}

void ProfileBlockEncoder::add(std::uint32_t context, std::uint16_t metric, double v) {
  if (v == 0) return;
  if (contexts_ == 0 || context != lastContext_) {
    appendLe(index_, context, 4);
    appendLe(index_, count_, 8);
    ++contexts_;
    lastContext_ = context;
  }
  char b[kProfileValueSize];
  const auto bits = std::bit_cast<std::uint64_t>(v);
  b[0] = static_cast<char>(metric & 0xff);
  b[1] = static_cast<char>(metric >> 8);
  for (int i = 0; i < 8; ++i) b[2 + i] = static_cast<char>((bits >> (8 * i)) & 0xff);
  values_.append(b, sizeof b);
  ++count_;
}

Block ProfileBlockEncoder::finish(std::string& out) {
  const auto start = out.size();
  out += values_;
  padTo(out, start, 4);
  out += index_;
  padTo(out, start, 8);
  const Block b{count_, contexts_, out.size() - start};
  values_.clear();
  index_.clear();
  count_ = 0;
  contexts_ = 0;
  return b;
}

ChunkBuffer::~ChunkBuffer() { std::free(data_); }

char* ChunkBuffer::extend(std::size_t n) {
  if (size_ + n > capacity_) {
    const std::size_t capacity = std::max<std::size_t>(alignUp(2 * (size_ + n), kChunkAlignment), 1 << 20);
    void* grown = nullptr;
    if (::posix_memalign(&grown, kChunkAlignment, capacity) != 0) throw std::bad_alloc();
    if (size_) std::memcpy(grown, data_, size_);
    std::free(data_);
    data_ = static_cast<char*>(grown);
    capacity_ = capacity;
  }
  char* at = data_ + size_;
  size_ += n;
  return at;
}

void ChunkBuffer::padTo(std::uint64_t multiple) {
  const auto n = alignUp(size_, multiple) - size_;
  std::memset(extend(n), 0, n);
}

namespace {

// Little-endian stores into a block being filled (the format is little-endian whatever the host).
void store(char* at, std::uint64_t v, int n) {
  if constexpr (std::endian::native == std::endian::little) {
    std::memcpy(at, &v, static_cast<std::size_t>(n));
  } else {
    for (int i = 0; i < n; ++i, v >>= 8) at[i] = static_cast<char>(v & 0xff);
  }
}

// A block of `values` value records and `indices` index records, zero padding included.
char* blockOf(ChunkBuffer& out, std::uint64_t valuesBytes, std::uint64_t indexAt, std::uint64_t bytes) {
  char* block = out.extend(bytes);
  std::memset(block + valuesBytes, 0, indexAt - valuesBytes);
  return block;
}

}  // namespace

Block encodeProfileBlock(std::span<const storage::ProfileValue> values, std::span<const storage::ValueType> types,
                         ChunkBuffer& out) {
  // Counted first, so that the block is written once, in place.
  auto present = [&](const storage::ProfileValue& v) { return valueOf(v.value, types[v.metric]) != 0; };
  std::uint64_t kept = 0, rootValues = 0, contexts = 0;
  std::uint64_t lastNode = UINT64_MAX;
  for (const auto& v : values) {
    if (!present(v)) continue;
    ++kept;
    if (v.node == 0) ++rootValues;
    if (v.node != lastNode) ++contexts, lastNode = v.node;
  }
  if (rootValues) ++contexts;
  Block b{kept + rootValues, static_cast<std::uint32_t>(contexts), profileBlockBytes(kept + rootValues, contexts)};
  if (b.values == 0) return {};
  const auto indexAt = alignUp(b.values * kProfileValueSize, 4);
  char* block = blockOf(out, b.values * kProfileValueSize, indexAt, b.bytes);
  char* value = block;
  char* index = block + indexAt;
  std::uint64_t count = 0;
  auto emit = [&](std::uint32_t context, const storage::ProfileValue& v, bool first) {
    if (first) {
      store(index, context, 4);
      store(index + 4, count, 8);
      index += kProfileIndexSize;
    }
    store(value, propagatedId(v.metric, v.scope), 2);
    store(value + 2, std::bit_cast<std::uint64_t>(valueOf(v.value, types[v.metric])), 8);
    value += kProfileValueSize;
    ++count;
  };
  bool first = true;
  for (const auto& v : values) {
    if (v.node != 0) break;
    if (present(v)) emit(0, v, std::exchange(first, false));
  }
  lastNode = UINT64_MAX;
  for (const auto& v : values) {
    if (!present(v)) continue;
    emit(contextOf(v.node), v, v.node != lastNode);
    lastNode = v.node;
  }
  std::memset(index, 0, static_cast<std::size_t>(block + b.bytes - index));
  return b;
}

Block encodeContextBlock(std::span<const storage::NodeValue> values, std::span<const storage::ValueType> types,
                         ChunkBuffer& out) {
  auto present = [&](const storage::NodeValue& v) { return valueOf(v.value, types[v.metric]) != 0; };
  std::uint64_t kept = 0, metrics = 0;
  int last = -1;
  for (const auto& v : values) {
    if (!present(v)) continue;
    ++kept;
    const int id = propagatedId(v.metric, v.scope);
    if (id != last) ++metrics, last = id;
  }
  if (kept == 0) return {};
  const auto valuesBytes = kept * kContextValueSize;
  Block b{kept, static_cast<std::uint32_t>(metrics), alignUp(valuesBytes + metrics * kContextIndexSize, 8)};
  char* block = out.extend(b.bytes);
  char* value = block;
  char* index = block + valuesBytes;
  std::uint64_t count = 0;
  last = -1;
  for (const auto& v : values) {
    if (!present(v)) continue;
    const int id = propagatedId(v.metric, v.scope);
    if (id != last) {
      store(index, static_cast<std::uint64_t>(id), 2);
      store(index + 2, count, 8);
      index += kContextIndexSize;
      last = id;
    }
    store(value, v.profile + 1, 4);
    store(value + 4, std::bit_cast<std::uint64_t>(valueOf(v.value, types[v.metric])), 8);
    value += kContextValueSize;
    ++count;
  }
  std::memset(index, 0, static_cast<std::size_t>(block + b.bytes - index));
  return b;
}

ProfileDbLayout profileDbLayout(std::uint64_t threadProfiles, std::uint64_t idTupleBytes) {
  ProfileDbLayout l;
  l.profiles = threadProfiles + 1;
  l.pProfileInfos = alignUp(kProfileHeaderSize, 8);
  l.pProfiles = l.pProfileInfos + alignUp(0x0d, 8);
  l.szProfileInfos = l.pProfiles + l.profiles * kProfileInfoSize - l.pProfileInfos;
  l.pIdTuples = alignUp(l.pProfileInfos + l.szProfileInfos, 8);
  l.szIdTuples = idTupleBytes;
  l.pBlocks = alignUp(l.pIdTuples + l.szIdTuples, kChunkAlignment);
  return l;
}

void placeSummary(ProfileDbLayout& l, std::uint64_t blockBytes, std::uint64_t summaryValues,
                  std::uint64_t summaryContexts) {
  l.pSummaryValues = alignUp(l.pBlocks + blockBytes, 8);
  l.pSummaryIndex = alignUp(l.pSummaryValues + summaryValues * kProfileValueSize, 4);
  l.footer = alignUp(l.pSummaryIndex + summaryContexts * kProfileIndexSize, 8);
}

std::string encodeProfileDbHeader(const ProfileDbLayout& l) {
  Image image;
  fileHeader(image, "prof");
  const auto at = image.reserve(0x20);
  image.u64(at, l.szProfileInfos);
  image.u64(at + 0x08, l.pProfileInfos);
  image.u64(at + 0x10, l.szIdTuples);
  image.u64(at + 0x18, l.pIdTuples);
  return image.take();
}

std::string encodeProfileInfoSectionHeader(const ProfileDbLayout& l) {
  Image image(l.pProfileInfos);
  image.reserve(l.pProfiles - l.pProfileInfos);
  image.u64(l.pProfileInfos, l.pProfiles);
  image.u32(l.pProfileInfos + 8, static_cast<std::uint32_t>(l.profiles));
  image.u8(l.pProfileInfos + 0x0c, kProfileInfoSize);
  return image.take();
}

std::string encodeProfileInfo(const Block& b, std::uint64_t at, std::uint64_t pIdTuple, bool summary) {
  std::string out;
  appendLe(out, b.values, 8);
  appendLe(out, at, 8);
  appendLe(out, b.indices, 4);
  appendLe(out, 0, 4);
  appendLe(out, at + profileIndexOffset(b), 8);
  appendLe(out, pIdTuple, 8);
  appendLe(out, summary ? 1 : 0, 4);
  appendLe(out, 0, 4);
  return out;
}

CctDbLayout cctDbLayout(std::uint64_t contexts) {
  CctDbLayout l;
  l.contexts = contexts;
  l.pCtxInfos = alignUp(kCctHeaderSize, 8);
  l.pCtxs = l.pCtxInfos + alignUp(0x0d, 8);
  l.szCtxInfos = l.pCtxs + contexts * kContextInfoSize - l.pCtxInfos;
  l.pBlocks = alignUp(l.pCtxInfos + l.szCtxInfos, kChunkAlignment);
  return l;
}

std::string encodeCctDbHeader(const CctDbLayout& l) {
  Image image;
  fileHeader(image, "ctxt");
  image.reserve(l.pCtxs - image.end());
  image.u64(0x10, l.szCtxInfos);
  image.u64(0x18, l.pCtxInfos);
  image.u64(l.pCtxInfos, l.pCtxs);
  image.u32(l.pCtxInfos + 8, static_cast<std::uint32_t>(l.contexts));
  image.u8(l.pCtxInfos + 0x0c, kContextInfoSize);
  return image.take();
}

std::string encodeContextInfo(const Block& b, std::uint64_t at) {
  std::string out;
  appendLe(out, b.values, 8);
  appendLe(out, at, 8);
  appendLe(out, b.indices, 2);
  appendLe(out, 0, 6);
  appendLe(out, at + contextIndexOffset(b), 8);
  return out;
}

}  // namespace csp::reduce::hpctk
