// ELF helpers shared by attribution and the structure analysis (reduce/src/structure/).
#pragma once

#include <dwarf.h>
#include <elfutils/libdw.h>
#include <gelf.h>

#include <cstdint>
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
