// Attribution: module-relative addresses -> chains of typed scopes (docs/design.md, "Data model") using
// elfutils. A leaf address (where a sample landed) becomes ProcFrame, Alien..., Stmt; an interior
// address (a return address) becomes ProcFrame, Alien..., CallSite at the call's line.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "csp/reduce/scope.hpp"

namespace csp::reduce {

struct AttributionOptions {
  // --replace-path OLD=NEW: module paths starting with OLD are looked up under NEW.
  std::vector<std::pair<std::string, std::string>> replacePaths;
};

struct AttributionStats {
  std::uint64_t lookups = 0;           // distinct (module, offset, leaf) attributed
  std::uint64_t withLines = 0;         // got file:line from DWARF
  std::uint64_t symbolOnly = 0;        // procedure from the ELF symbol table only
  std::uint64_t unknown = 0;           // kept as module+0xoffset
  std::vector<std::string> warnings;   // unreadable modules, build-id mismatches (once per module)
};

class Attributor {
 public:
  Attributor(StringTable& strings, AttributionOptions options = {});
  ~Attributor();
  Attributor(const Attributor&) = delete;
  Attributor& operator=(const Attributor&) = delete;

  // Thread-safe. The returned span stays valid for the Attributor's lifetime.
  std::span<const ScopeKey> attribute(const LoadModule& module, std::uint64_t offset, bool leaf);

  AttributionStats stats() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace csp::reduce
