// ELF helpers shared by attribution and the structure analysis (reduce/src/structure/).
#pragma once

#include <dwarf.h>
#include <elfutils/libdw.h>
#include <elfutils/libdwfl.h>
#include <gelf.h>

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

namespace csp::reduce {

// The start addresses (ELF virtual addresses, sorted) of the functions that .eh_frame describes,
// from the binary-search table of .eh_frame_hdr (PT_GNU_EH_FRAME), which stripping keeps. Only
// the table encoding that GNU ld, gold and lld write (datarel sdata4) is read; other files give
// an empty list.
std::vector<GElf_Addr> readFdeStarts(Elf* elf);

// The bytes of executable code at [start, end) (ELF virtual addresses), cut at the end of the
// section (or, without section headers, the executable segment) that holds `start`; empty if
// no code lies there.
std::span<const std::uint8_t> codeBytes(Elf* elf, GElf_Addr start, GElf_Addr end);

// A source path as the compiler recorded it may be relative to the compilation directory (`gcc
// -c ../src/x.c`, or ccache with base_dir): made absolute against the unit's DW_AT_comp_dir and
// normalized, so that every view names a file one way and a source pane can open it. "" for none.
std::string sourcePath(const char* file, Dwarf_Die* cu);

// The file a DIE is declared in (DW_AT_decl_file). libdw's dwarf_decl_file (0.188) refuses file
// index 0, which DWARF 5 makes the unit's primary source file and clang uses for it: then the
// unit's file table answers. nullptr for none.
const char* declFile(Dwarf_Die* die);

// A module's compilation units by address. libdw finds the unit of an address through
// .debug_aranges, which LLVM-based compilers (clang, flang-new, rustc, icx) do not write unless
// asked (-gdwarf-aranges): then every lookup fails, and code they compiled would have no
// procedure from DWARF, no inlined code, no line. Where libdw's lookup fails, the units' own
// address ranges (DW_AT_low_pc/high_pc or DW_AT_ranges, read once per module on first need)
// answer. Addresses are the module's as Dwfl reports them (with its bias). Not thread-safe: one
// per module, used under the module's lock.
class CompileUnits {
 public:
  explicit CompileUnits(Dwfl_Module* mod) : mod_(mod) {}

  // The unit holding `addr` and its bias (dwfl_module_addrdie's contract), or nullptr.
  Dwarf_Die* at(Dwarf_Addr addr, Dwarf_Addr* bias);

  // The source line of `addr`: file (absolute, sourcePath) and line; nullopt without one.
  struct Line {
    std::string file;
    int line = 0;
  };
  std::optional<Line> lineAt(Dwarf_Addr addr);

 private:
  struct Span {
    Dwarf_Addr low, high;  // [low, high), biased
    Dwarf_Die* cu;
    Dwarf_Addr bias;
  };
  void index();

  Dwfl_Module* mod_;
  bool indexed_ = false;
  std::vector<Span> spans_;
};

// The one walk over the scopes of DWARF (attribution's scope chain of an address, the structure
// analysis' inline map of a unit): calls visit(scope, depth) for each subprogram, inlined
// subroutine, lexical, try and catch block among the children of `parent`, in order, looking
// through namespaces, modules and types (their scopes count as the parent's own), until visit
// returns true (then returns true). `depth` counts the DIEs walked into from the unit; nothing
// deeper than kMaxScopeDepth is walked (malformed DWARF). A visitor that descends into `scope`
// calls forEachScope(&scope, depth + 1, ...) itself.
inline constexpr int kMaxScopeDepth = 64;

template <typename Visit>
bool forEachScope(Dwarf_Die* parent, int depth, Visit&& visit) {
  Dwarf_Die child;
  if (depth > kMaxScopeDepth || dwarf_child(parent, &child) != 0) return false;
  do {
    switch (dwarf_tag(&child)) {
      case DW_TAG_subprogram:
      case DW_TAG_inlined_subroutine:
      case DW_TAG_lexical_block:
      case DW_TAG_try_block:
      case DW_TAG_catch_block:
        if (visit(child, depth)) return true;
        break;
      case DW_TAG_namespace:
      case DW_TAG_module:
      case DW_TAG_class_type:
      case DW_TAG_structure_type:
      case DW_TAG_union_type:
        if (forEachScope(&child, depth + 1, visit)) return true;
        break;
      default:
        break;
    }
  } while (dwarf_siblingof(&child, &child) == 0);
  return false;
}

}  // namespace csp::reduce
