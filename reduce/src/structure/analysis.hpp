// The analysis of one load module (docs/postprocessing.md, "Loops"): function bounds from the
// symbol tables, the .eh_frame FDEs, the entry point and direct call targets; per function the
// control-flow graph and its loop nest (structure.hpp); per loop its inline depth and header
// line from DWARF.
#pragma once

#include <elfutils/libdwfl.h>

#include <cstdint>
#include <stdexcept>

#include "csp/reduce/structure.hpp"

namespace csp::reduce::structure {

// The module cannot be analysed (foreign architecture, unreadable code); the message says why.
class AnalysisError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

struct AnalysisStats {
  std::size_t functions = 0;        // function starts found
  std::size_t rawLoops = 0;         // loops of the control-flow graphs
  std::size_t loops = 0;            // loops kept
  std::size_t addressLoops = 0;     // of them, loops without a source line (known by their header address)
  std::size_t irreducible = 0;      // kept loops entered at more than one block
  std::size_t unresolvedJumps = 0;  // indirect jumps without a recognised jump table
};

// Analyses `mod` (reported offline, ELF available). The code is analysed in parallel with TBB
// (in the calling thread's task arena); DWARF is read by the calling thread only, so the caller
// must keep other users of the module's Dwfl out for the duration.
ModuleStructure analyseModule(Dwfl_Module* mod, AnalysisStats* stats = nullptr);

}  // namespace csp::reduce::structure
