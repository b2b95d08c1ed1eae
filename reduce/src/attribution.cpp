#include "csp/reduce/attribution.hpp"

#include <cxxabi.h>
#include <dwarf.h>
#include <elfutils/libdw.h>
#include <elfutils/libdwfl.h>
#include <fmt/format.h>
#include <tbb/concurrent_unordered_map.h>

#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <algorithm>
#include <cstring>
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

// Modules that are no file: addresses outside every module (offset = absolute address) and the
// kernel's vDSO (its image exists only in the measured process).
enum class ModuleKind { File, Unmapped, Vdso };

ModuleKind kindOf(const std::string& path) {
  if (path == kUnmappedModulePath) return ModuleKind::Unmapped;
  const std::string base = path.substr(path.rfind('/') == std::string::npos ? 0 : path.rfind('/') + 1);
  if (base == "linux-vdso.so.1" || base == "linux-gate.so.1" || base == "linux-vdso64.so.1" || base == "[vdso]")
    return ModuleKind::Vdso;
  return ModuleKind::File;
}

struct Module {
  std::mutex mutex;  // one Dwfl is not safe for concurrent use
  Dwfl* dwfl = nullptr;
  Dwfl_Module* mod = nullptr;
  GElf_Addr bias = 0;
  std::string name;  // basename: what views show and what csp-diff matches on
  ModuleKind kind = ModuleKind::File;
  bool usable = false;
  std::optional<GElf_Addr> entry;  // ELF e_entry of an executable (virtual address)
  bool fdeStartsRead = false;
  std::vector<GElf_Addr> fdeStarts;  // sorted start addresses (ELF virtual) of the .eh_frame FDEs
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
  if (const char* x = std::getenv("XDG_CACHE_HOME"); x != nullptr && *x != '\0') return std::string(x) + "/debuginfod_client";
  if (const char* h = std::getenv("HOME"); h != nullptr && *h != '\0') return std::string(h) + "/.cache/debuginfod_client";
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

// The start addresses (ELF virtual addresses, sorted) of the functions that .eh_frame describes,
// from the binary-search table of .eh_frame_hdr (PT_GNU_EH_FRAME), which stripping keeps. Only
// the table encoding that GNU ld, gold and lld write (datarel sdata4) is read; other files give
// an empty list.
std::vector<GElf_Addr> readFdeStarts(Elf* elf) {
  std::vector<GElf_Addr> out;
  std::size_t phnum = 0;
  if (elf == nullptr || elf_getphdrnum(elf, &phnum) != 0) return out;
  for (std::size_t i = 0; i < phnum; ++i) {
    GElf_Phdr ph;
    if (gelf_getphdr(elf, static_cast<int>(i), &ph) == nullptr || ph.p_type != PT_GNU_EH_FRAME) continue;
    Elf_Data* data = elf_getdata_rawchunk(elf, static_cast<int64_t>(ph.p_offset), ph.p_filesz, ELF_T_BYTE);
    if (data == nullptr || data->d_size < 4) return out;
    const auto* b = static_cast<const unsigned char*>(data->d_buf);
    const std::size_t size = data->d_size;
    constexpr unsigned char kDatarelSdata4 = 0x3b, kUdata4 = 0x03, kSdata4 = 0x0b, kPcrelSdata4 = 0x1b;
    if (b[0] != 1 || (b[1] != kPcrelSdata4 && b[1] != kSdata4 && b[1] != kUdata4 && b[1] != kDatarelSdata4) ||
        (b[2] != kUdata4 && b[2] != kSdata4) || b[3] != kDatarelSdata4 || size < 12)
      return out;
    auto u32 = [&](std::size_t at) {
      std::uint32_t v;
      std::memcpy(&v, b + at, 4);
      return v;  // .eh_frame_hdr is in the target's byte order, which is this host's for local profiles
    };
    const std::uint32_t count = u32(8);
    if (count > (size - 12) / 8) return out;
    out.reserve(count);
    for (std::uint32_t k = 0; k < count; ++k) {
      const auto rel = static_cast<std::int32_t>(u32(12 + 8 * std::size_t{k}));
      out.push_back(ph.p_vaddr + static_cast<GElf_Addr>(static_cast<std::int64_t>(rel)));
    }
    std::sort(out.begin(), out.end());
    return out;
  }
  return out;
}

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
      r.returnAddressUndefined = dwarf_frame_register(frame, ra, opsMem, &ops, &nops) == 0 && nops == 0 && ops == opsMem;
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
  std::atomic<std::uint64_t> lookups{0}, withLines{0}, symbolOnly{0}, byUnwindInfo{0}, unknown{0};
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
    m.kind = kindOf(lm.path);
    if (m.kind != ModuleKind::File) return m;  // no file to read, and nothing to warn about
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
    if (m.kind != ModuleKind::File) {
      // One procedure for all of it: its addresses mean nothing outside the measured process.
      ++unknown;
      chain.push_back({ScopeKind::ProcFrame, strings.intern(m.kind == ModuleKind::Vdso ? kVdsoName : kUnknownCodeName), 0, 0,
                       moduleId});
      chain.push_back({last, 0, 0, 0, 0});
      return chain;
    }
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
      } else if (auto start = functionStart(m, addr)) {
        // Stripped code: the unwind information still delimits functions, so all addresses of
        // one function become one procedure, named after its start (an ELF virtual address as
        // objdump shows it). The program's entry point is _start.
        ++byUnwindInfo;
        const std::string name =
            m.entry && *m.entry == *start ? std::string("_start") : fmt::format("func@0x{:x} in {}", *start, m.name);
        chain.push_back({ScopeKind::ProcFrame, strings.intern(name), 0, 0, moduleId});
      } else if (m.entry && *m.entry == offset) {
        ++symbolOnly;
        chain.push_back({ScopeKind::ProcFrame, strings.intern("_start"), 0, 0, moduleId});
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

bool Attributor::startsPath(const LoadModule& lm, std::uint64_t offset, bool leaf) {
  Module& m = impl_->module(lm);
  if (!m.usable) return false;
  const CacheKey key{&m, offset, leaf};
  auto it = impl_->pathStarts.find(key);
  if (it != impl_->pathStarts.end()) return it->second;
  const auto chain = attribute(lm, offset, leaf);
  const std::string& name = impl_->strings.text(chain.front().name);
  bool starts = std::any_of(std::begin(kThreadEntries), std::end(kThreadEntries), [&](const char* e) { return name == e; });
  if (!starts) {
    std::lock_guard lock(m.mutex);
    const auto range = unwindRange(m.mod, offset + m.bias - (leaf ? 0 : 1));
    starts = range && range->returnAddressUndefined;
  }
  impl_->pathStarts.emplace(key, starts);
  return starts;
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
  s.unknown = impl_->unknown;
  std::lock_guard lock(impl_->warningsMutex);
  s.warnings = impl_->warnings;
  return s;
}

}  // namespace csp::reduce
