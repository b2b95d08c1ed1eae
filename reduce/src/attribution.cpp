#include "csp/reduce/attribution.hpp"

#include <cxxabi.h>
#include <dwarf.h>
#include <elfutils/libdw.h>
#include <elfutils/libdwfl.h>
#include <fmt/format.h>
#include <tbb/concurrent_unordered_map.h>

#include <atomic>
#include <cstdlib>
#include <map>
#include <mutex>

namespace csp::reduce {

namespace {

std::string demangle(const char* name) {
  if (!name) return {};
  int status = 0;
  char* out = abi::__cxa_demangle(name, nullptr, nullptr, &status);
  if (status != 0 || !out) return name;
  std::string result(out);
  std::free(out);
  return result;
}

std::string baseName(const std::string& path) {
  auto slash = path.rfind('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

// A procedure's presentable name: the demangled linkage name when there is one (C++), else the
// plain name. dwarf_attr_integrate follows abstract origins and specifications, which is where
// inlined and out-of-line instances keep their names.
std::string procedureName(Dwarf_Die* die) {
  Dwarf_Attribute attr;
  for (int at : {DW_AT_linkage_name, DW_AT_MIPS_linkage_name}) {
    if (dwarf_attr_integrate(die, at, &attr)) {
      if (const char* s = dwarf_formstring(&attr)) return demangle(s);
    }
  }
  if (dwarf_attr_integrate(die, DW_AT_name, &attr)) {
    if (const char* s = dwarf_formstring(&attr)) return s;
  }
  return {};
}

// The chain of DIEs around `pc`, outermost first: the concrete subprogram, then its lexical
// blocks and inlined subroutines down to the innermost. (dwarf_getscopes does not serve here: for
// a pc in inlined code it continues with the abstract definition's context and loses the caller.)
bool findScopes(Dwarf_Die* parent, Dwarf_Addr pc, std::vector<Dwarf_Die>& chain, int depth = 0) {
  Dwarf_Die child;
  if (depth > 64 || dwarf_child(parent, &child) != 0) return false;
  do {
    switch (dwarf_tag(&child)) {
      case DW_TAG_subprogram:
      case DW_TAG_inlined_subroutine:
      case DW_TAG_lexical_block:
      case DW_TAG_try_block:
      case DW_TAG_catch_block:
        if (dwarf_haspc(&child, pc) == 1) {
          chain.push_back(child);
          findScopes(&chain.back(), pc, chain, depth + 1);
          return true;
        }
        break;
      case DW_TAG_namespace:
      case DW_TAG_module:
      case DW_TAG_class_type:
      case DW_TAG_structure_type:
      case DW_TAG_union_type:
        if (findScopes(&child, pc, chain, depth + 1)) return true;
        break;
      default:
        break;
    }
  } while (dwarf_siblingof(&child, &child) == 0);
  return false;
}

struct Module {
  std::mutex mutex;  // one Dwfl is not safe for concurrent use
  Dwfl* dwfl = nullptr;
  Dwfl_Module* mod = nullptr;
  GElf_Addr bias = 0;
  std::string name;  // basename: what views show and what csp-diff matches on
  bool usable = false;
  ~Module() {
    if (dwfl) dwfl_end(dwfl);
  }
};

struct CacheKey {
  const Module* module;
  std::uint64_t offset;
  bool leaf;
  bool operator==(const CacheKey&) const = default;
};
struct CacheKeyHash {
  std::size_t operator()(const CacheKey& k) const noexcept {
    std::uint64_t h = reinterpret_cast<std::uintptr_t>(k.module) * 0x9E3779B97F4A7C15ULL;
    h ^= (k.offset << 1 | (k.leaf ? 1 : 0)) * 0xC2B2AE3D27D4EB4FULL;
    return static_cast<std::size_t>(h ^ (h >> 31));
  }
};

char* gDebuginfoPath = nullptr;
const Dwfl_Callbacks kCallbacks = {
    dwfl_build_id_find_elf,
    dwfl_standard_find_debuginfo,
    dwfl_offline_section_address,
    &gDebuginfoPath,
};

}  // namespace

struct Attributor::Impl {
  StringTable& strings;
  AttributionOptions options;
  std::mutex modulesMutex;
  std::map<std::pair<std::string, std::vector<std::uint8_t>>, std::unique_ptr<Module>> modules;
  tbb::concurrent_unordered_map<CacheKey, std::vector<ScopeKey>, CacheKeyHash> cache;
  std::atomic<std::uint64_t> lookups{0}, withLines{0}, symbolOnly{0}, unknown{0};
  mutable std::mutex warningsMutex;
  std::vector<std::string> warnings;

  Impl(StringTable& s, AttributionOptions o) : strings(s), options(std::move(o)) {}

  void warn(std::string text) {
    std::lock_guard lock(warningsMutex);
    warnings.push_back(std::move(text));
  }

  std::string resolvePath(const std::string& path) const {
    for (const auto& [from, to] : options.replacePaths)
      if (!from.empty() && path.rfind(from, 0) == 0) return to + path.substr(from.size());
    return path;
  }

  Module& module(const LoadModule& lm) {
    std::lock_guard lock(modulesMutex);
    auto& slot = modules[{lm.path, lm.buildId}];
    if (slot) return *slot;
    slot = std::make_unique<Module>();
    Module& m = *slot;
    m.name = baseName(lm.path);
    const std::string path = resolvePath(lm.path);
    m.dwfl = dwfl_begin(&kCallbacks);
    if (!m.dwfl) {
      warn(fmt::format("{}: cannot start elfutils: {}", path, dwfl_errmsg(-1)));
      return m;
    }
    dwfl_report_begin(m.dwfl);
    m.mod = dwfl_report_offline(m.dwfl, m.name.c_str(), path.c_str(), -1);
    dwfl_report_end(m.dwfl, nullptr, nullptr);
    if (!m.mod) {
      warn(fmt::format("{}: cannot read module: {}; its addresses are kept as {}+0xOFFSET", path, dwfl_errmsg(-1),
                       m.name));
      return m;
    }
    if (!dwfl_module_getelf(m.mod, &m.bias)) {
      warn(fmt::format("{}: not an ELF file; its addresses are kept as {}+0xOFFSET", path, m.name));
      return m;
    }
    const unsigned char* bits = nullptr;
    GElf_Addr vaddr = 0;
    const int len = dwfl_module_build_id(m.mod, &bits, &vaddr);
    if (!lm.buildId.empty() && len > 0 &&
        (static_cast<std::size_t>(len) != lm.buildId.size() || !std::equal(lm.buildId.begin(), lm.buildId.end(), bits))) {
      warn(fmt::format("{}: build-id differs from the measured module (rebuilt since?); its addresses are kept as "
                       "{}+0xOFFSET (use --replace-path to point at the measured binary)", path, m.name));
      return m;
    }
    m.usable = true;
    return m;
  }

  std::vector<ScopeKey> compute(Module& m, std::uint64_t offset, bool leaf) {
    std::vector<ScopeKey> chain;
    const std::uint32_t moduleId = strings.intern(m.name);
    const ScopeKind last = leaf ? ScopeKind::Stmt : ScopeKind::CallSite;
    if (!m.usable) {
      ++unknown;
      chain.push_back({ScopeKind::ProcFrame, strings.intern(fmt::format("{}+0x{:x}", m.name, offset)), 0, 0, moduleId});
      chain.push_back({last, 0, 0, 0, 0});
      return chain;
    }
    std::lock_guard lock(m.mutex);
    // A return address points after the call; look up the call instruction itself.
    const Dwarf_Addr addr = offset + m.bias - (leaf ? 0 : 1);
    Dwarf_Addr cuBias = 0;
    if (Dwarf_Die* cu = dwfl_module_addrdie(m.mod, addr, &cuBias)) {
      std::vector<Dwarf_Die> scopes;
      findScopes(cu, addr - cuBias, scopes);
      // The outermost subprogram is the procedure frame; inlined subroutines inside it are Alien
      // scopes, outermost first.
      if (!scopes.empty() && dwarf_tag(&scopes[0]) == DW_TAG_subprogram) {
        int declLine = 0;
        dwarf_decl_line(&scopes[0], &declLine);
        const char* declFile = dwarf_decl_file(&scopes[0]);
        std::string name = procedureName(&scopes[0]);
        if (name.empty()) name = fmt::format("{}+0x{:x}", m.name, offset);
        chain.push_back({ScopeKind::ProcFrame, strings.intern(name), strings.intern(declFile ? declFile : ""),
                         static_cast<std::uint32_t>(std::max(declLine, 0)), moduleId});
        Dwarf_Files* files = nullptr;
        std::size_t nfiles = 0;
        const bool haveFiles = dwarf_getsrcfiles(cu, &files, &nfiles) == 0;
        for (std::size_t i = 1; i < scopes.size(); ++i) {
          if (dwarf_tag(&scopes[i]) != DW_TAG_inlined_subroutine) continue;
          Dwarf_Attribute attr;
          Dwarf_Word callFile = 0, callLine = 0;
          if (dwarf_attr(&scopes[i], DW_AT_call_file, &attr)) dwarf_formudata(&attr, &callFile);
          if (dwarf_attr(&scopes[i], DW_AT_call_line, &attr)) dwarf_formudata(&attr, &callLine);
          const char* file = haveFiles && callFile < nfiles ? dwarf_filesrc(files, callFile, nullptr, nullptr) : nullptr;
          std::string inlined = procedureName(&scopes[i]);
          if (inlined.empty()) inlined = "<inlined>";
          chain.push_back({ScopeKind::Alien, strings.intern(inlined), strings.intern(file ? file : ""),
                           static_cast<std::uint32_t>(callLine), 0});
        }
      }
    }
    if (chain.empty()) {
      GElf_Off symOffset = 0;
      GElf_Sym sym;
      const char* symbol = dwfl_module_addrinfo(m.mod, addr, &symOffset, &sym, nullptr, nullptr, nullptr);
      if (symbol) {
        ++symbolOnly;
        chain.push_back({ScopeKind::ProcFrame, strings.intern(demangle(symbol)), 0, 0, moduleId});
      } else {
        ++unknown;
        chain.push_back({ScopeKind::ProcFrame, strings.intern(fmt::format("{}+0x{:x}", m.name, offset)), 0, 0, moduleId});
      }
    }
    int line = 0;
    const char* file = nullptr;
    if (Dwfl_Line* l = dwfl_module_getsrc(m.mod, addr)) file = dwfl_lineinfo(l, nullptr, &line, nullptr, nullptr, nullptr);
    if (file) ++withLines;
    chain.push_back({last, 0, strings.intern(file ? file : ""), static_cast<std::uint32_t>(std::max(line, 0)), 0});
    return chain;
  }
};

Attributor::Attributor(StringTable& strings, AttributionOptions options)
    : impl_(std::make_unique<Impl>(strings, std::move(options))) {}

Attributor::~Attributor() = default;

std::span<const ScopeKey> Attributor::attribute(const LoadModule& lm, std::uint64_t offset, bool leaf) {
  Module& m = impl_->module(lm);
  const CacheKey key{&m, offset, leaf};
  auto it = impl_->cache.find(key);
  if (it != impl_->cache.end()) return it->second;
  ++impl_->lookups;
  auto [inserted, fresh] = impl_->cache.emplace(key, impl_->compute(m, offset, leaf));
  return inserted->second;
}

AttributionStats Attributor::stats() const {
  AttributionStats s;
  s.lookups = impl_->lookups;
  s.withLines = impl_->withLines;
  s.symbolOnly = impl_->symbolOnly;
  s.unknown = impl_->unknown;
  std::lock_guard lock(impl_->warningsMutex);
  s.warnings = impl_->warnings;
  return s;
}

}  // namespace csp::reduce
