// A reader of HPCToolkit databases (format 4.0: meta.db, profile.db, cct.db), written for the tests
// from HPCToolkit's doc/FORMATS.md alone, not from CSP's writer: it checks what the format
// requires (magic, versions, footers, section bounds, alignment, strides, sorted and dense ids,
// pointers inside their sections) and returns the contents as plain data. Any violation throws
// std::runtime_error naming the file and the defect.
#pragma once

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

namespace csp::test::hpctoolkit {

class Bytes {
 public:
  Bytes(const std::filesystem::path& path, std::string format) : path_(path.string()) {
    std::ifstream in(path, std::ios::binary);
    if (!in) fail("cannot open");
    data_.assign(std::istreambuf_iterator<char>(in), {});
    if (data_.size() < 16 + 8) fail("shorter than a header and a footer");
    if (data_.compare(0, 10, "HPCTOOLKIT") != 0) fail("no HPCTOOLKIT magic");
    if (data_.compare(10, 4, format) != 0) fail("format is not '" + format + "'");
    if (u8(14) != 4) fail("major version is not 4");
  }
  [[noreturn]] void fail(const std::string& what) const { throw std::runtime_error(path_ + ": " + what); }
  std::uint64_t size() const { return data_.size(); }
  void check(std::uint64_t at, std::uint64_t n, const char* what) const {
    if (at > data_.size() || n > data_.size() - at) fail(std::string(what) + " beyond the end of the file");
  }
  void aligned(std::uint64_t at, std::uint64_t a, const char* what) const {
    if (at % a != 0)
      fail(std::string(what) + " at " + std::to_string(at) + " is not " + std::to_string(a) + "-aligned");
  }
  template <class T>
  T le(std::uint64_t at) const {
    check(at, sizeof(T), "field");
    T v{};
    for (std::size_t i = 0; i < sizeof(T); ++i)
      v |= static_cast<T>(static_cast<T>(static_cast<unsigned char>(data_[at + i])) << (8 * i));
    return v;
  }
  std::uint8_t u8(std::uint64_t at) const { return le<std::uint8_t>(at); }
  std::uint16_t u16(std::uint64_t at) const { return le<std::uint16_t>(at); }
  std::uint32_t u32(std::uint64_t at) const { return le<std::uint32_t>(at); }
  std::uint64_t u64(std::uint64_t at) const { return le<std::uint64_t>(at); }
  double f64(std::uint64_t at) const {
    const std::uint64_t bits = u64(at);
    double v;
    std::memcpy(&v, &bits, 8);
    return v;
  }
  // A NUL-terminated string that lies wholly within [begin, end).
  std::string cstring(std::uint64_t at, std::uint64_t begin, std::uint64_t end, const char* what) const {
    if (at < begin || at >= end) fail(std::string(what) + " outside its section");
    const auto nul = data_.find('\0', at);
    if (nul == std::string::npos || nul >= end) fail(std::string(what) + " not terminated within its section");
    return data_.substr(at, nul - at);
  }
  void footer(const char* text) const {
    if (data_.compare(data_.size() - 8, 8, text) != 0) fail(std::string("no footer '") + text + "'");
  }
  // Section i of the file header: {size, pointer}.
  std::pair<std::uint64_t, std::uint64_t> section(unsigned i) const {
    const auto sz = u64(0x10 + 0x10 * i), p = u64(0x18 + 0x10 * i);
    check(p, sz, "section");
    return {p, p + sz};
  }

 private:
  std::string path_;
  std::string data_;
};

struct Function {
  std::string name;  // empty when pName is 0
  std::string module;
  std::string file;
  std::uint64_t offset = 0;
  std::uint32_t line = 0;
};

struct Context {
  std::uint32_t id = 0;
  std::uint32_t parent = 0;  // the parent's id (an entry point's id for top-level contexts)
  std::uint8_t relation = 0;
  std::uint8_t lexicalType = 0;
  std::uint16_t propagation = 0;
  bool hasFunction = false, hasSrcLoc = false, hasPoint = false;
  Function function;
  std::string file;
  std::uint32_t line = 0;
  std::string module;
  std::uint64_t offset = 0;
  std::vector<std::uint32_t> children;  // ids, in the stored order
};

struct EntryPoint {
  std::uint32_t id = 0;
  std::uint16_t kind = 0;
  std::string prettyName;
  std::vector<std::uint32_t> children;
};

struct Scope {
  std::string name;
  std::uint8_t type = 0;
  std::uint8_t propagationIndex = 0;
};

struct Summary {
  std::string scope;
  std::string formula;
  std::uint8_t combine = 0;
  std::uint16_t id = 0;
};

struct Metric {
  std::string name;
  std::vector<std::pair<std::string, std::uint16_t>> scopes;  // scope name, propMetricId
  std::vector<Summary> summaries;
};

struct Meta {
  std::string title, description;
  std::vector<std::string> kindNames;
  std::vector<Scope> scopes;
  std::vector<Metric> metrics;
  std::vector<EntryPoint> entries;
  std::map<std::uint32_t, Context> contexts;  // by id
};

inline Meta readMeta(const std::filesystem::path& path) {
  Bytes b(path, "meta");
  b.footer("_meta.db");
  Meta m;
  // Every section lies within the file, 8-aligned (its header structures are).
  for (unsigned i = 0; i < 8; ++i) b.aligned(b.section(i).first, 8, "section");

  {  // General Properties
    const auto [s, e] = b.section(0);
    m.title = b.cstring(b.u64(s), s, e, "title");
    m.description = b.cstring(b.u64(s + 8), s, e, "description");
  }
  {  // Identifier Names
    const auto [s, e] = b.section(1);
    const auto pp = b.u64(s);
    const auto n = b.u8(s + 8);
    b.aligned(pp, 8, "ppNames");
    for (unsigned k = 0; k < n; ++k) m.kindNames.push_back(b.cstring(b.u64(pp + 8 * k), s, e, "kind name"));
  }
  {  // Performance Metrics
    const auto [s, e] = b.section(2);
    const auto pMetrics = b.u64(s);
    const auto n = b.u32(s + 8);
    const auto szMetric = b.u8(s + 0x0c), szInst = b.u8(s + 0x0d), szSummary = b.u8(s + 0x0e);
    const auto pScopes = b.u64(s + 0x10);
    const auto nScopes = b.u16(s + 0x18);
    const auto szScope = b.u8(s + 0x1a);
    if (szMetric < 0x20 || szInst < 0x10 || szSummary < 0x18 || szScope < 0x10) b.fail("metric structures too small");
    std::map<std::uint64_t, std::string> scopeAt;
    for (unsigned i = 0; i < nScopes; ++i) {
      const auto ps = pScopes + szScope * i;
      b.aligned(ps, 8, "{PS}");
      if (ps < s || ps + 0x10 > e) b.fail("{PS} outside the metrics section");
      Scope sc{b.cstring(b.u64(ps), s, e, "scope name"), b.u8(ps + 8), b.u8(ps + 9)};
      scopeAt[ps] = sc.name;
      m.scopes.push_back(sc);
    }
    auto scopeName = [&](std::uint64_t p) {
      if (!scopeAt.count(p)) b.fail("pScope points at no {PS}");
      return scopeAt[p];
    };
    std::set<std::uint16_t> propIds;
    for (unsigned i = 0; i < n; ++i) {
      const auto md = pMetrics + szMetric * std::uint64_t{i};
      b.aligned(md, 8, "{MD}");
      if (md < s || md + 0x20 > e) b.fail("{MD} outside the metrics section");
      Metric metric;
      metric.name = b.cstring(b.u64(md), s, e, "metric name");
      const auto pInst = b.u64(md + 8), pSum = b.u64(md + 0x10);
      const auto nInst = b.u16(md + 0x18), nSum = b.u16(md + 0x1a);
      for (unsigned j = 0; j < nInst; ++j) {
        const auto psi = pInst + szInst * j;
        b.aligned(psi, 8, "{PSI}");
        const auto id = b.u16(psi + 8);
        if (!propIds.insert(id).second) b.fail("propMetricId " + std::to_string(id) + " given twice");
        metric.scopes.emplace_back(scopeName(b.u64(psi)), id);
      }
      for (unsigned j = 0; j < nSum; ++j) {
        const auto ss = pSum + szSummary * j;
        b.aligned(ss, 8, "{SS}");
        Summary su{scopeName(b.u64(ss)), b.cstring(b.u64(ss + 8), s, e, "formula"), b.u8(ss + 0x10), b.u16(ss + 0x12)};
        if (su.combine > 2) b.fail("unknown combine " + std::to_string(su.combine));
        metric.summaries.push_back(su);
      }
      m.metrics.push_back(metric);
    }
  }
  const auto [strS, strE] = b.section(4);
  auto tableEntries = [&](unsigned section, std::uint64_t minSize) {
    const auto [s, e] = b.section(section);
    const auto p = b.u64(s);
    const auto n = b.u32(s + 8);
    const auto sz = b.u16(s + 0x0c);
    if (sz < minSize) b.fail("table entry size too small");
    std::vector<std::uint64_t> at;
    for (unsigned i = 0; i < n; ++i) {
      const auto x = p + sz * std::uint64_t{i};
      b.aligned(x, 8, "table entry");
      if (x < s || x + minSize > e) b.fail("table entry outside its section");
      at.push_back(x);
    }
    return at;
  };
  std::map<std::uint64_t, std::string> modules, files;
  for (const auto x : tableEntries(5, 0x10)) modules[x] = b.cstring(b.u64(x + 8), strS, strE, "module path");
  for (const auto x : tableEntries(6, 0x10)) files[x] = b.cstring(b.u64(x + 8), strS, strE, "file path");
  std::map<std::uint64_t, Function> functions;
  for (const auto x : tableEntries(7, 0x28)) {
    Function f;
    const auto pName = b.u64(x), pModule = b.u64(x + 8), pFile = b.u64(x + 0x18);
    if (pName) f.name = b.cstring(pName, strS, strE, "function name");
    if (pModule && !modules.count(pModule)) b.fail("function's pModule points at no module");
    if (pFile && !files.count(pFile)) b.fail("function's pFile points at no file");
    if (!pName && !pModule && !pFile) b.fail("function without name, module and file");
    f.module = pModule ? modules[pModule] : "";
    f.file = pFile ? files[pFile] : "";
    f.offset = b.u64(x + 0x10);
    f.line = b.u32(x + 0x20);
    functions[x] = f;
  }
  {  // Context Tree
    const auto [s, e] = b.section(3);
    const auto pEntries = b.u64(s);
    const auto nEntries = b.u16(s + 8);
    const auto szEntry = b.u8(s + 0x0a);
    if (szEntry < 0x20) b.fail("entry point size too small");
    std::set<std::uint32_t> ids;
    // The contexts of one children array, recursively (an explicit stack: trees are deep).
    struct Pending {
      std::uint64_t at, end;
      std::uint32_t parent;
    };
    std::vector<Pending> stack;
    auto children = [&](std::uint64_t p, std::uint64_t sz, std::uint32_t parent) {
      if (sz == 0) {
        if (p != 0) b.fail("pChildren set with szChildren 0");
        return;
      }
      b.aligned(p, 8, "children array");
      if (p < s || p + sz > e) b.fail("children array outside the context section");
      stack.push_back({p, p + sz, parent});
    };
    for (unsigned i = 0; i < nEntries; ++i) {
      const auto x = pEntries + szEntry * std::uint64_t{i};
      EntryPoint ep;
      ep.id = b.u32(x + 0x10);
      ep.kind = b.u16(x + 0x14);
      ep.prettyName = b.cstring(b.u64(x + 0x18), strS, strE, "entry point name");
      if (ep.id == 0 || !ids.insert(ep.id).second) b.fail("entry point ctxId 0 or repeated");
      children(b.u64(x + 8), b.u64(x), ep.id);
      m.entries.push_back(ep);
    }
    while (!stack.empty()) {
      auto& top = stack.back();
      if (top.at == top.end) {
        stack.pop_back();
        continue;
      }
      if (top.at + 0x20 > top.end) b.fail("a context overruns its children array");
      const auto x = top.at;
      Context c;
      c.id = b.u32(x + 0x10);
      c.parent = top.parent;
      const auto flags = b.u8(x + 0x14);
      c.relation = b.u8(x + 0x15);
      c.lexicalType = b.u8(x + 0x16);
      const auto words = b.u8(x + 0x17);
      c.propagation = b.u16(x + 0x18);
      if (c.relation > 2 || c.lexicalType > 3) b.fail("unknown relation or lexical type");
      if (c.id == 0 || !ids.insert(c.id).second) b.fail("ctxId " + std::to_string(c.id) + " is 0 or repeated");
      top.at += 0x20 + 8 * std::uint64_t{words};
      if (top.at > top.end) b.fail("a context's flex words overrun its children array");
      // flex: sub-fields packed in order, u64 in a word of their own, the u32 line in the next word.
      std::uint64_t w = x + 0x20, used = 0;
      auto word = [&]() {
        if (++used > words) b.fail("flags announce more flex words than nFlexWords");
        const auto at = w;
        w += 8;
        return at;
      };
      if (flags & 1) {
        const auto p = b.u64(word());
        if (!functions.count(p)) b.fail("pFunction points at no function");
        c.hasFunction = true;
        c.function = functions[p];
      }
      if (flags & 2) {
        const auto p = b.u64(word());
        if (!files.count(p)) b.fail("pFile points at no file");
        c.hasSrcLoc = true;
        c.file = files[p];
        c.line = b.u32(word());
      }
      if (flags & 4) {
        const auto p = b.u64(word());
        if (!modules.count(p)) b.fail("pModule points at no module");
        c.hasPoint = true;
        c.module = modules[p];
        c.offset = b.u64(word());
      }
      const auto sz = b.u64(x), pc = b.u64(x + 8);
      if (m.contexts.count(c.parent))
        m.contexts[c.parent].children.push_back(c.id);
      else
        for (auto& ep : m.entries)
          if (ep.id == c.parent) ep.children.push_back(c.id);
      m.contexts[c.id] = c;
      children(pc, sz, c.id);
    }
  }
  return m;
}

struct IdElement {
  std::uint8_t kind = 0;
  std::uint16_t flags = 0;
  std::uint32_t logicalId = 0;
  std::uint64_t physicalId = 0;
};

// context -> metric -> value
using ProfileValues = std::map<std::uint32_t, std::map<std::uint16_t, double>>;

struct Profile {
  bool summary = false;
  std::vector<IdElement> idTuple;
  ProfileValues values;
};

inline std::vector<Profile> readProfiles(const std::filesystem::path& path) {
  Bytes b(path, "prof");
  b.footer("_prof.db");
  const auto [s, e] = b.section(0);
  const auto [ts, te] = b.section(1);
  b.aligned(s, 8, "Profile Info section");
  b.aligned(ts, 8, "Identifier Tuple section");
  const auto pProfiles = b.u64(s);
  const auto n = b.u32(s + 8);
  const auto sz = b.u8(s + 0x0c);
  if (sz < 0x2c) b.fail("{PI} too small");
  std::vector<Profile> out;
  for (unsigned i = 0; i < n; ++i) {
    const auto pi = pProfiles + sz * std::uint64_t{i};
    b.aligned(pi, 8, "{PI}");
    if (pi < s || pi + sz > e) b.fail("{PI} outside its section");
    Profile p;
    const auto nValues = b.u64(pi), pValues = b.u64(pi + 8);
    const auto nCtxs = b.u32(pi + 0x10);
    const auto pIdx = b.u64(pi + 0x18), pTuple = b.u64(pi + 0x20);
    p.summary = (b.u32(pi + 0x28) & 1) != 0;
    if ((i == 0) != p.summary) b.fail("profile 0 and only it must be the summary profile");
    if (i == 0 && pTuple != 0) b.fail("the summary profile has an id tuple");
    if (pTuple) {
      b.aligned(pTuple, 8, "id tuple");
      if (pTuple < ts || pTuple + 8 > te) b.fail("id tuple outside its section");
      const auto nIds = b.u16(pTuple);
      if (pTuple + 8 + 16 * std::uint64_t{nIds} > te) b.fail("id tuple overruns its section");
      for (unsigned k = 0; k < nIds; ++k) {
        const auto x = pTuple + 8 + 16 * k;
        IdElement id{b.u8(x), b.u16(x + 2), b.u32(x + 4), b.u64(x + 8)};
        if (!(id.flags & 1) && id.physicalId != id.logicalId) b.fail("logical id whose physicalId differs");
        p.idTuple.push_back(id);
      }
    }
    if (nValues) {
      b.aligned(pValues, 2, "{Val} array");
      b.aligned(pIdx, 4, "{Idx} array");
      if (pIdx < pValues + 10 * nValues) b.fail("{Idx} array overlaps the values");
      b.check(pValues, 10 * nValues, "values");
      b.check(pIdx, 12 * std::uint64_t{nCtxs}, "context index");
      std::uint64_t lastStart = 0;
      for (unsigned c = 0; c < nCtxs; ++c) {
        const auto ctx = b.u32(pIdx + 12 * c);
        const auto start = b.u64(pIdx + 12 * c + 4);
        const auto end = c + 1 < nCtxs ? b.u64(pIdx + 12 * (c + 1) + 4) : nValues;
        if (c > 0 && ctx <= p.values.rbegin()->first) b.fail("context ids not ascending");
        if (start < lastStart || start >= end || end > nValues) b.fail("context index ranges not increasing or empty");
        if (c == 0 && start != 0) b.fail("first context does not start at value 0");
        lastStart = start;
        auto& vals = p.values[ctx];
        for (auto v = start; v < end; ++v) {
          const auto metric = b.u16(pValues + 10 * v);
          const auto value = b.f64(pValues + 10 * v + 2);
          if (!vals.empty() && metric <= vals.rbegin()->first) b.fail("metric ids not ascending in a context");
          if (value == 0) b.fail("a stored zero");
          vals[metric] = value;
        }
      }
    } else if (nCtxs) {
      b.fail("contexts without values");
    }
    out.push_back(std::move(p));
  }
  return out;
}

// metric -> (profile index -> value)
using ContextValues = std::map<std::uint16_t, std::map<std::uint32_t, double>>;

inline std::vector<ContextValues> readContexts(const std::filesystem::path& path) {
  Bytes b(path, "ctxt");
  b.footer("__ctx.db");
  const auto [s, e] = b.section(0);
  b.aligned(s, 8, "Context Info section");
  const auto pCtxs = b.u64(s);
  const auto n = b.u32(s + 8);
  const auto sz = b.u8(s + 0x0c);
  if (sz < 0x20) b.fail("{CI} too small");
  std::vector<ContextValues> out(n);
  for (unsigned i = 0; i < n; ++i) {
    const auto ci = pCtxs + sz * std::uint64_t{i};
    b.aligned(ci, 8, "{CI}");
    if (ci < s || ci + 0x20 > e) b.fail("{CI} outside its section");
    const auto nValues = b.u64(ci), pValues = b.u64(ci + 8);
    const auto nMetrics = b.u16(ci + 0x10);
    const auto pIdx = b.u64(ci + 0x18);
    if (!nValues) {
      if (nMetrics) b.fail("metrics without values");
      continue;
    }
    b.aligned(pValues, 4, "{Val} array");
    b.aligned(pIdx, 2, "{Idx} array");
    if (pIdx < pValues + 12 * nValues) b.fail("{Idx} array overlaps the values");
    b.check(pValues, 12 * nValues, "values");
    b.check(pIdx, 10 * std::uint64_t{nMetrics}, "metric index");
    for (unsigned k = 0; k < nMetrics; ++k) {
      const auto metric = b.u16(pIdx + 10 * k);
      const auto start = b.u64(pIdx + 10 * k + 2);
      const auto end = k + 1 < nMetrics ? b.u64(pIdx + 10 * (k + 1) + 2) : nValues;
      if (k > 0 && metric <= out[i].rbegin()->first) b.fail("metric ids not ascending");
      if ((k == 0 && start != 0) || start >= end || end > nValues) b.fail("metric index ranges not increasing");
      auto& vals = out[i][metric];
      for (auto v = start; v < end; ++v) {
        const auto prof = b.u32(pValues + 12 * v);
        const auto value = b.f64(pValues + 12 * v + 4);
        if (!vals.empty() && prof <= vals.rbegin()->first) b.fail("profile indices not ascending");
        if (prof == 0) b.fail("cct.db holds a value of the summary profile");
        if (value == 0) b.fail("a stored zero");
        vals[prof] = value;
      }
    }
  }
  return out;
}

}  // namespace csp::test::hpctoolkit
