#include "csp/reduce/attribution.hpp"

#include "csp/storage/checksum.hpp"
#include "elf_support.hpp"
#include "hpcstruct.hpp"
#include "structure/analysis.hpp"
#include "structure/cache.hpp"

#include <cxxabi.h>
#include <dwarf.h>
#include <elfutils/libdw.h>
#include <elfutils/libdwfl.h>
#include <fmt/format.h>
#include <tbb/collaborative_call_once.h>
#include <tbb/concurrent_unordered_map.h>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <map>
#include <mutex>
#include <optional>
#include <string_view>

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
void findScopes(Dwarf_Die* parent, Dwarf_Addr pc, std::vector<Dwarf_Die>& chain, int depth = 0) {
  forEachScope(parent, depth, [&](Dwarf_Die& scope, int at) {
    if (dwarf_haspc(&scope, pc) != 1) return false;
    chain.push_back(scope);
    findScopes(&chain.back(), pc, chain, at + 1);
    return true;
  });
}

// Modules that are no file: addresses outside every module (offset = absolute address) and the
// kernel's vDSO (its image exists only in the measured process).
// Placeholders: frames of address profiles of other formats that stand for no code (hpcrun's).
enum class ModuleKind { File, Unmapped, Vdso, Placeholder };

ModuleKind kindOf(const std::string& path) {
  if (path == kUnmappedModulePath) return ModuleKind::Unmapped;
  if (path.starts_with(kPlaceholderModulePrefix) && path.ends_with("]")) return ModuleKind::Placeholder;
  const std::string base = path.substr(path.rfind('/') == std::string::npos ? 0 : path.rfind('/') + 1);
  if (base == "linux-vdso.so.1" || base == "linux-gate.so.1" || base == "linux-vdso64.so.1" || base == "[vdso]")
    return ModuleKind::Vdso;
  return ModuleKind::File;
}

struct Module {
  std::mutex mutex;  // one Dwfl is not safe for concurrent use
  Dwfl* dwfl = nullptr;
  Dwfl_Module* mod = nullptr;
  std::optional<CompileUnits> units;  // DWARF units by address (also without .debug_aranges), under `mutex`
  GElf_Addr bias = 0;
  std::string name;  // basename: what views show and what csp-diff matches on
  std::string path;  // the file read (after --replace-path)
  ModuleKind kind = ModuleKind::File;
  bool usable = false;
  std::optional<GElf_Addr> entry;  // ELF e_entry of an executable (virtual address)
  bool fdeStartsRead = false;
  std::vector<GElf_Addr> fdeStarts;  // sorted start addresses (ELF virtual) of the .eh_frame FDEs
  tbb::collaborative_once_flag structureOnce;
  std::unique_ptr<structure::ModuleStructure> structure;  // loops and function bounds; null: none
  std::string noStructure;                                // why there is none (not analysed, analysis failed)
  bool dwarf = false;                                     // the module has DWARF (its own or a separate debug file)
  std::unique_ptr<structure::Decoder> decoder;            // call sites and unwind recipes, under `mutex`
  std::map<std::uint64_t, std::unique_ptr<structure::FunctionRecipes>> recipes;  // by function start
  const hpcstruct::ModuleStructure* hpcstruct = nullptr;                         // no binary, but an hpcstruct file
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

// The debuginfod client's cache: DEBUGINFOD_CACHE_PATH, else its default location.
std::string debuginfodCache() {
  if (const char* p = std::getenv("DEBUGINFOD_CACHE_PATH"); p != nullptr && *p != '\0') return p;
  if (const char* x = std::getenv("XDG_CACHE_HOME"); x != nullptr && *x != '\0')
    return std::string(x) + "/debuginfod_client";
  if (const char* h = std::getenv("HOME"); h != nullptr && *h != '\0')
    return std::string(h) + "/.cache/debuginfod_client";
  return {};
}

// Separate debug files: first a file that debuginfod already downloaded
// (<cache>/<build-id>/debuginfo: found without asking a server), then elfutils' standard search
// (/usr/lib/debug/.build-id/xx/yyyy.debug, .gnu_debuglink next to the file and under
// /usr/lib/debug, and debuginfod servers when DEBUGINFOD_URLS is set).
int findDebuginfo(Dwfl_Module* mod, void** userdata, const char* modname, GElf_Addr base, const char* file,
                  const char* debuglink, GElf_Word crc, char** debugName) {
  const unsigned char* bits = nullptr;
  GElf_Addr vaddr = 0;
  const int len = dwfl_module_build_id(mod, &bits, &vaddr);
  if (len > 0) {
    const std::string cache = debuginfodCache();
    if (!cache.empty()) {
      std::string hex;
      for (int i = 0; i < len; ++i) hex += fmt::format("{:02x}", bits[i]);
      const std::string path = cache + "/" + hex + "/debuginfo";
      const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
      if (fd >= 0) {
        *debugName = strdup(path.c_str());
        return fd;
      }
    }
  }
  return dwfl_standard_find_debuginfo(mod, userdata, modname, base, file, debuglink, crc, debugName);
}

char* gDebuginfoPath = nullptr;
const Dwfl_Callbacks kCallbacks = {
    dwfl_build_id_find_elf,
    findDebuginfo,
    dwfl_offline_section_address,
    &gDebuginfoPath,
};

// The [start, end) range (module addresses) of the unwind-information entry (FDE) covering
// `addr`, and whether it leaves the return address undefined there (the end of a stack).
struct UnwindRange {
  Dwarf_Addr start = 0, end = 0;
  bool returnAddressUndefined = false;
};

std::optional<UnwindRange> unwindRange(Dwfl_Module* mod, Dwarf_Addr addr) {
  for (int which = 0; which < 2; ++which) {
    Dwarf_Addr cfiBias = 0;
    Dwarf_CFI* cfi = which == 0 ? dwfl_module_eh_cfi(mod, &cfiBias) : dwfl_module_dwarf_cfi(mod, &cfiBias);
    if (cfi == nullptr) continue;
    Dwarf_Frame* frame = nullptr;
    if (dwarf_cfi_addrframe(cfi, addr - cfiBias, &frame) != 0 || frame == nullptr) continue;
    UnwindRange r;
    bool signal = false;
    const int ra = dwarf_frame_info(frame, &r.start, &r.end, &signal);
    r.start += cfiBias;
    r.end += cfiBias;
    if (ra >= 0) {
      Dwarf_Op opsMem[3];
      Dwarf_Op* ops = nullptr;
      std::size_t nops = 0;
      // No operations, pointing at opsMem: "undefined" (a null pointer would mean "same value").
      r.returnAddressUndefined =
          dwarf_frame_register(frame, ra, opsMem, &ops, &nops) == 0 && nops == 0 && ops == opsMem;
    }
    std::free(frame);
    return r;
  }
  return std::nullopt;
}

}  // namespace

struct Attributor::Impl {
  StringTable& strings;
  AttributionOptions options;
  std::mutex modulesMutex;
  std::map<std::pair<std::string, std::vector<std::uint8_t>>, std::unique_ptr<Module>> modules;
  tbb::concurrent_unordered_map<CacheKey, std::vector<ScopeKey>, CacheKeyHash> cache;
  tbb::concurrent_unordered_map<CacheKey, bool, CacheKeyHash> pathStarts;
  std::mutex perfMapsMutex;
  std::map<std::filesystem::path, std::unique_ptr<PerfMap>> perfMaps;  // null: no such file
  std::atomic<std::uint64_t> lookups{0}, withLines{0}, symbolOnly{0}, byUnwindInfo{0}, byFunctionBounds{0}, unknown{0};
  std::atomic<std::uint64_t> modulesAnalysed{0}, modulesFromCache{0}, loopsFound{0}, analysisNs{0};
  structure::StructureCache structureCache;
  mutable std::mutex warningsMutex;
  std::vector<std::string> warnings;
  bool hpcstructsRead = false;  // under modulesMutex
  std::vector<std::unique_ptr<hpcstruct::ModuleStructure>> hpcstructs;

  Impl(StringTable& s, AttributionOptions o)
      : strings(s), options(std::move(o)), structureCache(cacheDirectory(options)) {}

  static std::filesystem::path cacheDirectory(const AttributionOptions& o) {
    if (!o.loops || o.structureCache == "off") return {};
    if (o.structureCache.empty()) return structure::defaultCacheDirectory();
    return o.structureCache;
  }

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
    m.kind = kindOf(lm.path);
    if (m.kind == ModuleKind::Placeholder) {
      m.name = kPlaceholderModuleName;
      m.path = lm.path;
    }
    if (m.kind != ModuleKind::File) return m;  // no file to read, and nothing to warn about
    const std::string path = resolvePath(lm.path);
    m.path = path;
    m.dwfl = dwfl_begin(&kCallbacks);
    if (!m.dwfl) {
      warn(fmt::format("{}: cannot start elfutils: {}", path, dwfl_errmsg(-1)));
      return m;
    }
    dwfl_report_begin(m.dwfl);
    m.mod = dwfl_report_offline(m.dwfl, m.name.c_str(), path.c_str(), -1);
    if (m.mod != nullptr) m.units.emplace(m.mod);
    dwfl_report_end(m.dwfl, nullptr, nullptr);
    if (!m.mod) {
      const std::string why = dwfl_errmsg(-1);
      if (useHpcstruct(m, lm.path, fmt::format("{}: cannot read module: {}", path, why))) return m;
      warn(fmt::format("{}: cannot read module: {}; its addresses are kept as {}+0xOFFSET", path, why, m.name));
      m.noStructure = "not analysed: the file cannot be read";
      return m;
    }
    if (!dwfl_module_getelf(m.mod, &m.bias)) {
      warn(fmt::format("{}: not an ELF file; its addresses are kept as {}+0xOFFSET", path, m.name));
      m.noStructure = "not analysed: not an ELF file";
      return m;
    }
    const unsigned char* bits = nullptr;
    GElf_Addr vaddr = 0;
    const int len = dwfl_module_build_id(m.mod, &bits, &vaddr);
    if (!lm.buildId.empty() && len > 0 &&
        (static_cast<std::size_t>(len) != lm.buildId.size() ||
         !std::equal(lm.buildId.begin(), lm.buildId.end(), bits))) {
      warn(
          fmt::format("{}: build-id differs from the measured module (rebuilt since?); its addresses are kept as "
                      "{}+0xOFFSET (use --replace-path to point at the measured binary)",
                      path, m.name));
      m.noStructure = "not analysed: its build-id differs from the measured module's";
      return m;
    }
    GElf_Addr elfBias = 0;
    if (Elf* elf = dwfl_module_getelf(m.mod, &elfBias)) {
      GElf_Ehdr ehdr;
      // Shared libraries may have an entry point too (libc.so.6 does), but only a program's
      // entry starts a stack.
      if (gelf_getehdr(elf, &ehdr) != nullptr && ehdr.e_entry != 0 &&
          (ehdr.e_type == ET_EXEC || (ehdr.e_type == ET_DYN && hasInterpreter(elf))))
        m.entry = ehdr.e_entry;
    }
    m.usable = true;
    return m;
  }

  // What a module's cache entry must match: its build-id, or without one its path, size and
  // modification time; and whether its DWARF came from a separate debug file (installing a
  // -dbg package later must not keep the loops of the analysis without lines).
  structure::CacheIdentity identityOf(Module& m) const {
    structure::CacheIdentity id;
    id.module = m.path;
    auto stamp = [](const std::string& file) {
      struct stat st {};
      if (::stat(file.c_str(), &st) != 0) return std::string("unreadable");
      return fmt::format("size {} mtime {}.{:09}", st.st_size, st.st_mtim.tv_sec, st.st_mtim.tv_nsec);
    };
    const unsigned char* bits = nullptr;
    GElf_Addr vaddr = 0;
    const int len = dwfl_module_build_id(m.mod, &bits, &vaddr);
    if (len > 0) {
      for (int i = 0; i < len; ++i) id.key += fmt::format("{:02x}", bits[i]);
      id.check = "build-id " + id.key;
    } else {
      std::error_code ec;
      const auto canonical = std::filesystem::weakly_canonical(m.path, ec);
      id.check = fmt::format("path {} {}", ec ? m.path : canonical.string(), stamp(m.path));
      id.key = fmt::format("path-{:016x}", storage::checksum64(std::as_bytes(std::span(id.check))));
    }
    Dwarf_Addr dwarfBias = 0;
    const bool dwarf = dwfl_module_getdwarf(m.mod, &dwarfBias) != nullptr;
    m.dwarf = dwarf;
    const char* mainFile = nullptr;
    const char* debugFile = nullptr;
    dwfl_module_info(m.mod, nullptr, nullptr, nullptr, nullptr, nullptr, &mainFile, &debugFile);
    const bool separate =
        dwarf && debugFile != nullptr && (mainFile == nullptr || std::strcmp(mainFile, debugFile) != 0);
    id.check += !dwarf ? "; no DWARF" : !separate ? "; DWARF in the file" : "; DWARF in a separate file";
    if (separate && len <= 0) id.check += fmt::format(" {} {}", debugFile, stamp(debugFile));
    return id;
  }

  // The module's structure (loops, function bounds), from the cache or analysed now, once per
  // module; threads that need it meanwhile help with the analysis (collaborative_call_once).
  void ensureStructure(Module& m) {
    if (!options.loops && m.noStructure.empty()) m.noStructure = "not analysed: --no-loops";
    if (!options.loops || !m.usable) return;
    tbb::collaborative_call_once(m.structureOnce, [&] {
      std::lock_guard lock(m.mutex);
      const auto id = identityOf(m);
      std::string problem;
      structure::StructureCache::Lock held;  // until the entry is written
      if (structureCache.enabled()) {
        auto cached = structureCache.load(id, problem);
        if (!problem.empty()) warn(problem);
        if (!cached) {
          // Another process of the job (or another job) may be analysing this module: wait for
          // its entry rather than analysing it once more.
          held = structureCache.lock(id, 120.0, [&] {
            std::string ignored;
            cached = structureCache.load(id, ignored);
            return cached.has_value();
          });
          if (!cached && held.held()) cached = structureCache.load(id, problem);
        }
        if (cached) {
          ++modulesFromCache;
          loopsFound += cached->loops().size();
          m.structure = std::make_unique<structure::ModuleStructure>(std::move(*cached));
          return;
        }
      }
      const auto start = std::chrono::steady_clock::now();
      try {
        auto analysed = structure::analyseModule(m.mod);
        ++modulesAnalysed;
        loopsFound += analysed.loops().size();
        if (structureCache.enabled() && !structureCache.store(id, analysed, problem))
          warn(problem + "; the analysis is not cached");
        m.structure = std::make_unique<structure::ModuleStructure>(std::move(analysed));
      } catch (const std::exception& e) {
        warn(fmt::format("{}: no loops recovered: {}", m.path, e.what()));
        m.noStructure = fmt::format("not analysed: {}", e.what());
      }
      analysisNs += static_cast<std::uint64_t>(
          std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - start).count());
    });
  }

  // The start (ELF virtual address) of the function whose unwind information covers `addr` (a
  // module address); the caller holds m.mutex.
  static std::optional<GElf_Addr> functionStart(Module& m, Dwarf_Addr addr) {
    if (!m.fdeStartsRead) {
      GElf_Addr bias = 0;
      m.fdeStarts = readFdeStarts(dwfl_module_getelf(m.mod, &bias));
      m.fdeStartsRead = true;
    }
    if (m.fdeStarts.empty() || !unwindRange(m.mod, addr)) return std::nullopt;  // no FDE covers it
    const GElf_Addr vaddr = addr - m.bias;
    auto it = std::upper_bound(m.fdeStarts.begin(), m.fdeStarts.end(), vaddr);
    if (it == m.fdeStarts.begin()) return std::nullopt;
    return *std::prev(it);
  }

  // The unwind recipe at `offset` (Attributor::frameRule).
  std::optional<structure::FrameRule> frameRule(Module& m, std::uint64_t offset, bool leaf) {
    if (!m.usable) return std::nullopt;
    ensureStructure(m);
    std::lock_guard lock(m.mutex);
    const std::uint64_t vaddr = offset - (leaf ? 0 : 1);  // a return address: the call instruction
    const auto bounds = functionBounds(m, vaddr);
    if (!bounds) return std::nullopt;
    auto& recipes = m.recipes[bounds->first];
    if (!recipes) {
      GElf_Addr bias = 0;
      const auto bytes = codeBytes(dwfl_module_getelf(m.mod, &bias), bounds->first, bounds->second);
      if (!m.decoder) m.decoder = std::make_unique<structure::Decoder>();
      const auto code = m.decoder->decode(bytes, bounds->first);
      const auto effects = m.decoder->frameEffects(bytes, bounds->first);
      recipes = std::make_unique<structure::FunctionRecipes>(structure::computeRecipes(code, effects));
    }
    if (recipes->size() == 0) return std::nullopt;
    return recipes->at(vaddr);
  }

  // [start, end) (ELF virtual addresses) of the function around `vaddr`: the bounds of the binary
  // analysis, else a symbol with a size, else its FDE. The caller holds m.mutex.
  static std::optional<std::pair<std::uint64_t, std::uint64_t>> functionBounds(Module& m, std::uint64_t vaddr) {
    constexpr std::uint64_t kMaxFunctionBytes = 1u << 20;
    std::optional<std::pair<std::uint64_t, std::uint64_t>> b;
    if (m.structure) {
      const auto start = m.structure->functionStart(vaddr), end = m.structure->functionEnd(vaddr);
      if (start && end) b.emplace(*start, *end);
    } else {
      GElf_Off off = 0;
      GElf_Sym sym;
      if (dwfl_module_addrinfo(m.mod, vaddr + m.bias, &off, &sym, nullptr, nullptr, nullptr) && sym.st_size > 0)
        b.emplace(vaddr - off, vaddr - off + sym.st_size);
      else if (const auto r = unwindRange(m.mod, vaddr + m.bias))
        b.emplace(r->start - m.bias, r->end - m.bias);
    }
    if (!b) return std::nullopt;
    b->second = std::min(b->second, b->first + kMaxFunctionBytes);
    if (vaddr < b->first || vaddr >= b->second) return std::nullopt;
    return b;
  }

  // What loops each module got, and why none or why without lines (AttributionStats::modules).
  std::vector<ModuleLoops> moduleLoops() {
    std::vector<ModuleLoops> out;
    std::lock_guard lock(modulesMutex);
    for (const auto& [key, m] : modules) {
      if (m->kind == ModuleKind::Unmapped || m->kind == ModuleKind::Placeholder) continue;
      ModuleLoops r;
      r.module = m->name;
      if (m->kind == ModuleKind::Vdso) {
        r.note = "not analysed: no file (the kernel's vDSO)";
      } else if (m->hpcstruct) {
        r.loops = m->hpcstruct->loops;
        r.note = fmt::format("from the hpcstruct file {} (no binary)", m->hpcstruct->file.filename().string());
      } else if (m->structure) {
        r.loops = m->structure->loops().size();
        for (const auto& l : m->structure->loops()) r.byAddress += l.line == 0 ? 1 : 0;
        if (r.loops == 0)
          r.note = "none in its code";
        else if (r.byAddress == r.loops && !m->dwarf)
          r.note = "known by address: no line table (no DWARF, no debug file found)";
        else if (r.byAddress > 0)
          r.note = "partly known by address: no line table for some of its code";
      } else {
        r.note = m->noStructure.empty() ? std::string("not analysed") : m->noStructure;
      }
      out.push_back(std::move(r));
    }
    std::sort(out.begin(), out.end());
    return out;
  }

  // A module whose binary cannot be read, structured by the hpcstruct file that names its path
  // (or, failing that, its file name); the hpcstruct files are read once, at the first need.
  bool useHpcstruct(Module& m, const std::string& path, const std::string& why) {
    if (!hpcstructsRead) {
      hpcstructsRead = true;
      for (const auto& f : options.hpcstructFiles) try {
          for (auto& s : hpcstruct::parse(f)) hpcstructs.push_back(std::move(s));
        } catch (const std::exception& e) {
          warn(fmt::format("{}; it is not used", e.what()));
        }
    }
    for (bool byName : {false, true})
      for (const auto& s : hpcstructs)
        if (!m.hpcstruct && (byName ? baseName(s->path) == m.name : s->path == path)) m.hpcstruct = s.get();
    if (!m.hpcstruct) return false;
    warn(fmt::format("{}; its structure comes from the hpcstruct file {}", why, m.hpcstruct->file.string()));
    return true;
  }

  // The chain of a module structured by its hpcstruct file; addresses it does not cover are named
  // by offset as in modules without structure.
  std::vector<ScopeKey> fromHpcstruct(Module& m, std::uint64_t offset, bool leaf, std::uint32_t moduleId) {
    std::vector<ScopeKey> chain;
    const auto place = m.hpcstruct->find(leaf || offset == 0 ? offset : offset - 1);
    if (!place) {
      ++unknown;
      chain.push_back({ScopeKind::ProcFrame, strings.intern(fmt::format("{}+0x{:x}", m.name, offset)), 0, 0, moduleId});
      chain.push_back({leaf ? ScopeKind::Stmt : ScopeKind::CallSite, 0, 0, 0, 0});
      return chain;
    }
    ++withLines;
    for (const auto& s : place->scopes)
      chain.push_back({s.kind, strings.intern(s.name), strings.intern(s.file), s.line,
                       s.kind == ScopeKind::ProcFrame ? moduleId : 0});
    chain.push_back({leaf ? ScopeKind::Stmt : ScopeKind::CallSite, 0, strings.intern(place->file), place->line, 0});
    return chain;
  }

  static bool hasInterpreter(Elf* elf) {
    std::size_t n = 0;
    if (elf_getphdrnum(elf, &n) != 0) return false;
    for (std::size_t i = 0; i < n; ++i) {
      GElf_Phdr ph;
      if (gelf_getphdr(elf, static_cast<int>(i), &ph) != nullptr && ph.p_type == PT_INTERP) return true;
    }
    return false;
  }

  std::vector<ScopeKey> compute(Module& m, std::uint64_t offset, bool leaf) {
    std::vector<ScopeKey> chain;
    const std::uint32_t moduleId = strings.intern(m.name);
    const ScopeKind last = leaf ? ScopeKind::Stmt : ScopeKind::CallSite;
    if (m.kind == ModuleKind::Placeholder) {
      // One procedure per placeholder, named by what it stands for.
      const std::string_view text = std::string_view(m.path).substr(std::string_view(kPlaceholderModulePrefix).size());
      chain.push_back({ScopeKind::ProcFrame, strings.intern(text.substr(0, text.size() - 1)), 0, 0, moduleId});
      chain.push_back({last, 0, 0, 0, 0});
      return chain;
    }
    if (m.kind != ModuleKind::File) {
      // One procedure for all of it: its addresses mean nothing outside the measured process.
      ++unknown;
      chain.push_back({ScopeKind::ProcFrame, strings.intern(m.kind == ModuleKind::Vdso ? kVdsoName : kUnknownCodeName),
                       0, 0, moduleId});
      chain.push_back({last, 0, 0, 0, 0});
      return chain;
    }
    if (m.hpcstruct) return fromHpcstruct(m, offset, leaf, moduleId);
    if (!m.usable) {
      ++unknown;
      chain.push_back({ScopeKind::ProcFrame, strings.intern(fmt::format("{}+0x{:x}", m.name, offset)), 0, 0, moduleId});
      chain.push_back({last, 0, 0, 0, 0});
      return chain;
    }
    std::lock_guard lock(m.mutex);
    // A return address points after the call; look up the call instruction itself.
    const Dwarf_Addr addr = offset + m.bias - (leaf ? 0 : 1);
    std::optional<std::uint64_t> procStart;  // ELF virtual address, when known
    Dwarf_Addr cuBias = 0;
    if (Dwarf_Die* cu = m.units->at(addr, &cuBias)) {
      std::vector<Dwarf_Die> scopes;
      findScopes(cu, addr - cuBias, scopes);
      // The outermost subprogram is the procedure frame; inlined subroutines inside it are Alien
      // scopes, outermost first.
      if (!scopes.empty() && dwarf_tag(&scopes[0]) == DW_TAG_subprogram) {
        if (Dwarf_Addr entry = 0; dwarf_entrypc(&scopes[0], &entry) == 0) procStart = entry + cuBias - m.bias;
        int declLine = 0;
        dwarf_decl_line(&scopes[0], &declLine);
        const char* declared = declFile(&scopes[0]);
        std::string name = procedureName(&scopes[0]);
        if (name.empty()) name = fmt::format("{}+0x{:x}", m.name, offset);
        chain.push_back({ScopeKind::ProcFrame, strings.intern(name), strings.intern(sourcePath(declared, cu)),
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
          const char* file =
              haveFiles && callFile < nfiles ? dwarf_filesrc(files, callFile, nullptr, nullptr) : nullptr;
          std::string inlined = procedureName(&scopes[i]);
          if (inlined.empty()) inlined = "<inlined>";
          chain.push_back({ScopeKind::Alien, strings.intern(inlined), strings.intern(sourcePath(file, cu)),
                           static_cast<std::uint32_t>(callLine), 0});
        }
      }
    }
    if (chain.empty()) {
      GElf_Off symOffset = 0;
      GElf_Sym sym;
      const char* symbol = dwfl_module_addrinfo(m.mod, addr, &symOffset, &sym, nullptr, nullptr, nullptr);
      if (symbol && sym.st_size == 0 && symOffset != 0 && !sizelessSymbolReaches(m, addr - symOffset - m.bias, addr))
        symbol = nullptr;
      if (symbol) {
        ++symbolOnly;
        procStart = addr - symOffset - m.bias;
        chain.push_back({ScopeKind::ProcFrame, strings.intern(demangle(symbol)), 0, 0, moduleId});
      } else if (auto start = functionStart(m, addr)) {
        // Stripped code: the unwind information still delimits functions, so all addresses of
        // one function become one procedure, named after its start (an ELF virtual address as
        // objdump shows it). The program's entry point is _start.
        ++byUnwindInfo;
        procStart = *start;
        const std::string name =
            m.entry && *m.entry == *start ? std::string("_start") : fmt::format("func@0x{:x} in {}", *start, m.name);
        chain.push_back({ScopeKind::ProcFrame, strings.intern(name), 0, 0, moduleId});
      } else if (m.entry && *m.entry == offset) {
        ++symbolOnly;
        procStart = offset;
        chain.push_back({ScopeKind::ProcFrame, strings.intern("_start"), 0, 0, moduleId});
      } else if (const auto bound = m.structure ? m.structure->functionStart(addr - m.bias) : std::nullopt) {
        // No unwind information either: the function bounds of the binary analysis (symbols,
        // unwind information and direct call targets) still group the code per function.
        ++byFunctionBounds;
        procStart = *bound;
        const std::string name =
            m.entry && *m.entry == *bound ? std::string("_start") : fmt::format("func@0x{:x} in {}", *bound, m.name);
        chain.push_back({ScopeKind::ProcFrame, strings.intern(name), 0, 0, moduleId});
      } else {
        ++unknown;
        procStart = offset;
        chain.push_back(
            {ScopeKind::ProcFrame, strings.intern(fmt::format("{}+0x{:x}", m.name, offset)), 0, 0, moduleId});
      }
    }
    int line = 0;
    std::string file;
    if (auto l = m.units->lineAt(addr)) file = std::move(l->file), line = l->line;
    if (!file.empty()) ++withLines;
    if (m.structure) insertLoops(*m.structure, addr - m.bias, chain, m.name);
    // Without a line, the statement or call is known by its instruction's offset in its procedure.
    const std::uint32_t where = !file.empty() ? 0 : strings.intern(instructionOffset(m, offset, leaf, procStart));
    chain.push_back({last, where, strings.intern(file), static_cast<std::uint32_t>(std::max(line, 0)), 0});
    return chain;
  }

  // Whether a symbol without size at `symbol` (ELF virtual address) names the code at `addr`: no
  // function start that the analysis knows (symbols, FDEs, call targets, code after padding)
  // lies between them. Where nothing is known (no analysis), it names only itself, never code far
  // behind it. The caller holds m.mutex.
  static bool sizelessSymbolReaches(Module& m, std::uint64_t symbol, Dwarf_Addr addr) {
    std::optional<std::uint64_t> start;
    if (m.structure)
      start = m.structure->functionStart(addr - m.bias);
    else if (auto fde = functionStart(m, addr))
      start = *fde;
    else
      return false;
    return !start || *start <= symbol;
  }

  // "+0x1a4": the offset of the statement's instruction (a leaf) or of the call instruction before
  // a return address in its procedure. The caller holds m.mutex.
  std::string instructionOffset(Module& m, std::uint64_t offset, bool leaf, std::optional<std::uint64_t> procStart) {
    std::uint64_t at = offset;
    if (!leaf) {
      at = offset - 1;
      GElf_Addr bias = 0;
      const std::uint64_t from = offset >= 15 ? offset - 15 : 0;
      const auto bytes = codeBytes(dwfl_module_getelf(m.mod, &bias), from, offset);
      if (bytes.size() == offset - from) {
        if (!m.decoder) m.decoder = std::make_unique<structure::Decoder>();
        if (const auto call = m.decoder->callBefore(bytes, offset)) at = *call;
      }
    }
    if (procStart && *procStart <= at) return fmt::format("+0x{:x}", at - *procStart);
    return fmt::format("0x{:x}", at);
  }

  // Puts the loops around `vaddr` into a chain of ProcFrame, Alien...: each loop below the
  // inlined scopes it lies in (its inline depth), above those inlined into it.
  void insertLoops(const structure::ModuleStructure& s, std::uint64_t vaddr, std::vector<ScopeKey>& chain,
                   const std::string& moduleName) {
    auto loop = s.innermostLoop(vaddr);
    if (loop == structure::kNone || chain.empty()) return;
    std::vector<std::uint32_t> nest;
    for (; loop != structure::kNone; loop = s.loops()[loop].parent) nest.push_back(loop);
    std::vector<ScopeKey> out{chain.front()};
    const std::size_t aliens = chain.size() - 1;
    std::size_t placed = 0;
    for (auto it = nest.rbegin(); it != nest.rend(); ++it) {
      const auto& l = s.loops()[*it];
      // The DWARF that attribution saw may nest fewer inlined scopes here than the analysis
      // counted over the loop's whole body (only with damaged DWARF): never deeper than the chain.
      const std::size_t depth = std::min<std::size_t>(l.inlineDepth, aliens);
      while (placed < depth) out.push_back(chain[1 + placed++]);
      if (l.line == 0)  // no line table for its code: known by its header
        out.push_back(
            {ScopeKind::Loop, strings.intern(fmt::format("loop @0x{:x} in {}", l.header, moduleName)), 0, 0, 0});
      else
        out.push_back({ScopeKind::Loop, 0, strings.intern(s.files()[l.file]), l.line, 0});
    }
    while (placed < aliens) out.push_back(chain[1 + placed++]);
    chain = std::move(out);
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
  impl_->ensureStructure(m);
  auto [inserted, fresh] = impl_->cache.emplace(key, impl_->compute(m, offset, leaf));
  return inserted->second;
}

bool Attributor::startsPath(const LoadModule& lm, std::uint64_t offset, bool leaf) {
  Module& m = impl_->module(lm);
  if (!m.usable) return false;
  const CacheKey key{&m, offset, leaf};
  auto it = impl_->pathStarts.find(key);
  if (it != impl_->pathStarts.end()) return it->second;
  const auto chain = attribute(lm, offset, leaf);
  const std::string& name = impl_->strings.text(chain.front().name);
  bool starts =
      std::any_of(std::begin(kThreadEntries), std::end(kThreadEntries), [&](const char* e) { return name == e; });
  if (!starts) {
    std::lock_guard lock(m.mutex);
    const auto range = unwindRange(m.mod, offset + m.bias - (leaf ? 0 : 1));
    starts = range && range->returnAddressUndefined;
  }
  impl_->pathStarts.emplace(key, starts);
  return starts;
}

std::optional<structure::FrameRule> Attributor::frameRule(const LoadModule& lm, std::uint64_t offset, bool leaf) {
  return impl_->frameRule(impl_->module(lm), offset, leaf);
}

const PerfMap* Attributor::perfMap(const std::filesystem::path& file) {
  std::lock_guard lock(impl_->perfMapsMutex);
  auto [it, fresh] = impl_->perfMaps.try_emplace(file);
  if (!fresh) return it->second.get();
  std::error_code ec;
  if (!std::filesystem::exists(file, ec)) return nullptr;
  try {
    it->second = std::make_unique<PerfMap>(PerfMap::read(file));
    if (it->second->malformedLines() > 0)
      impl_->warn(fmt::format("{}: {} malformed lines ignored (expected 'START SIZE NAME', hexadecimal)", file.string(),
                              it->second->malformedLines()));
  } catch (const std::exception& e) {
    impl_->warn(fmt::format("{}; its JIT symbols are not used", e.what()));
  }
  return it->second.get();
}

AttributionStats Attributor::stats() const {
  AttributionStats s;
  s.lookups = impl_->lookups;
  s.withLines = impl_->withLines;
  s.symbolOnly = impl_->symbolOnly;
  s.byUnwindInfo = impl_->byUnwindInfo;
  s.byFunctionBounds = impl_->byFunctionBounds;
  s.unknown = impl_->unknown;
  s.modulesAnalysed = impl_->modulesAnalysed;
  s.modulesFromCache = impl_->modulesFromCache;
  s.loops = impl_->loopsFound;
  s.analysisSeconds = static_cast<double>(impl_->analysisNs.load()) / 1e9;
  s.structureCache = impl_->structureCache.directory().string();
  s.modules = impl_->moduleLoops();
  std::lock_guard lock(impl_->warningsMutex);
  s.warnings = impl_->warnings;
  return s;
}

}  // namespace csp::reduce
