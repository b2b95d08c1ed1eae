// Program structure from HPCToolkit's hpcstruct files (XML: load module, file, procedure, alien =
// inlined code, loop, statement, each with its address ranges), for the load modules of an hpcrun
// measurement whose binaries no longer exist (docs/hpctoolkit-input.md, "Attribution").
// Attribution asks it for the chain of scopes around an address, as it asks DWARF otherwise.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "csp/storage/profile.hpp"

namespace csp::reduce::hpcstruct {

struct Scope {
  ScopeKind kind = ScopeKind::ProcFrame;  // ProcFrame, Alien or Loop
  std::string name;                       // procedure (ProcFrame, Alien)
  std::string file;
  std::uint32_t line = 0;
};

// What lies at an address: its enclosing scopes, outermost first, and its statement's line.
struct Place {
  std::vector<Scope> scopes;
  std::string file;
  std::uint32_t line = 0;
};

// One load module (<LM>) of an hpcstruct file.
class ModuleStructure {
 public:
  std::string path;  // the LM's name: the module's path at measurement
  std::filesystem::path file;
  std::uint64_t loops = 0;
  std::optional<Place> find(std::uint64_t address) const;

  struct Node {
    std::uint32_t parent;  // kNoIndex for a procedure's file
    char tag;              // 'F', 'P', 'A', 'L', 'S' (S also for C, a call statement)
    std::string name, file;
    std::uint32_t line;
  };
  struct Range {
    std::uint64_t begin, end;
    std::uint32_t node;
  };
  std::vector<Node> nodes;
  std::vector<Range> statements;  // sorted by begin
  std::vector<Range> scopes;      // procedures, aliens, loops: the fallback, sorted by begin
};

// Every load module of `file`. Throws std::runtime_error ("FILE: defect") for a file that cannot be
// read or parsed.
std::vector<std::unique_ptr<ModuleStructure>> parse(const std::filesystem::path& file);

}  // namespace csp::reduce::hpcstruct
