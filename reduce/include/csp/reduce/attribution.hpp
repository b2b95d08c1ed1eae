// Attribution: module-relative addresses -> chains of typed scopes (docs/design.md, "Data model") using
// elfutils. A leaf address (where a sample landed) becomes ProcFrame, Alien..., Stmt; an interior
// address (a return address) becomes ProcFrame, Alien..., CallSite at the call's line. Loops
// recovered from the machine code (structure.hpp) lie between them, nested with the inlined
// scopes as their address ranges nest: ProcFrame, Loop, Alien, Loop, ..., Stmt.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "csp/reduce/perf_map.hpp"
#include "csp/reduce/scope.hpp"
#include "csp/reduce/structure.hpp"
#include "csp/storage/database.hpp"

namespace csp::reduce {

struct AttributionOptions {
  // --replace-path OLD=NEW: module paths starting with OLD are looked up under NEW.
  std::vector<std::pair<std::string, std::string>> replacePaths;
  // Loop scopes from the binary analysis of each module (--no-loops turns it off; then no module
  // is analysed and procedures of stripped code come from symbols and unwind information only).
  bool loops = true;
  // Directory of the structure cache (--structure-cache); "" = the default location
  // (CSP_STRUCTURE_CACHE, $XDG_CACHE_HOME/csp/structure, ~/.cache/csp/structure), "off" = none.
  std::string structureCache;
  // hpcstruct files (XML) of HPCToolkit measurements: the structure of modules whose binaries no
  // longer exist (docs/hpctoolkit-input.md, "Attribution"); the first file naming a module wins.
  std::vector<std::filesystem::path> hpcstructFiles;
};

// The structs/*.hpcstruct files of an hpcrun measurement directory, sorted; none without structs/.
std::vector<std::filesystem::path> hpcstructFiles(const std::filesystem::path& measurementDirectory);

// Whether loops were recovered in one module and why not, or why without lines
// (docs/postprocessing.md, "Loops"): one per module that attribution needed.
using storage::ModuleLoops;

struct AttributionStats {
  std::uint64_t lookups = 0;           // distinct (module, offset, leaf) attributed
  std::uint64_t withLines = 0;         // got file:line from DWARF
  std::uint64_t symbolOnly = 0;        // procedure from the ELF symbol table only
  std::uint64_t byUnwindInfo = 0;      // procedure = the .eh_frame/.debug_frame range around it
  std::uint64_t byFunctionBounds = 0;  // procedure = the recovered function bounds around it (call targets)
  std::uint64_t unknown = 0;           // kept as module+0xoffset
  // Binary analysis (loop recovery) of the modules that attribution needed.
  std::uint64_t modulesAnalysed = 0;   // analysed here
  std::uint64_t modulesFromCache = 0;  // read from the structure cache
  std::uint64_t loops = 0;             // loops of those modules (with a source line)
  double analysisSeconds = 0;          // time spent analysing (not reading the cache)
  std::string structureCache;          // the cache directory; empty when there is none
  std::vector<std::string> warnings;   // unreadable modules, build-id mismatches (once per module)
  std::vector<ModuleLoops> modules;    // per module, sorted by name
};

// Procedures at which a call path is complete although their unwind information may not say so.
inline constexpr const char* kThreadEntries[] = {"_start",
                                                 "__libc_start_main",
                                                 "__libc_start_main_impl",
                                                 "__libc_start_call_main",
                                                 "start_thread",
                                                 "clone",
                                                 "__clone",
                                                 "clone3",
                                                 "__clone3",
                                                 "__start_context"};

// Names given to frames that have no symbol (docs/postprocessing.md, "Attribution").
inline constexpr const char* kUnknownCodeName = "[unknown code]";             // address in no module
inline constexpr const char* kVdsoName = "[vdso]";                            // the kernel's vDSO
inline constexpr const char* kJitModuleName = "[jit]";                        // module of perf-map symbols
inline constexpr const char* kTruncatedPathsName = "[truncated call paths]";  // parent of incomplete paths
// Module of the procedure frames that stand for no code (PathStart::Placeholder of other formats).
inline constexpr const char* kPlaceholderModuleName = "[placeholder]";
// Path of a load module of an address profile that stands for no code (hpcrun's placeholders:
// "[placeholder NoActvty]"): attributed as one procedure ("NoActvty") in kPlaceholderModuleName.
inline constexpr const char* kPlaceholderModulePrefix = "[placeholder ";

class Attributor {
 public:
  Attributor(StringTable& strings, AttributionOptions options = {});
  ~Attributor();
  Attributor(const Attributor&) = delete;
  Attributor& operator=(const Attributor&) = delete;

  // Thread-safe. The returned span stays valid for the Attributor's lifetime.
  std::span<const ScopeKey> attribute(const LoadModule& module, std::uint64_t offset, bool leaf);

  // True if a call path whose outermost frame is this one is complete: the frame's procedure is
  // a known thread entry (kThreadEntries), or the module's unwind information marks the return
  // address there as undefined, which is how runtimes end the stack (glibc's _start and clone3).
  bool startsPath(const LoadModule& module, std::uint64_t offset, bool leaf);

  // Where the caller of a frame at `offset` is, from the binary analysis of its function (its
  // unwind recipe: docs/postprocessing.md, "Code without unwind information"); nullopt when the
  // function's code cannot be read or delimited. Computed once per function, then cached.
  std::optional<structure::FrameRule> frameRule(const LoadModule& module, std::uint64_t offset, bool leaf);

  // The JIT symbol map in `file` (read once, then shared); nullptr if there is no such file.
  // Unreadable files and malformed lines become warnings.
  const PerfMap* perfMap(const std::filesystem::path& file);

  AttributionStats stats() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace csp::reduce
