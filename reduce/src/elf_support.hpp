// ELF helpers shared by attribution and the structure analysis (reduce/src/structure/).
#pragma once

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

}  // namespace csp::reduce
