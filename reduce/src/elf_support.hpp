// ELF helpers shared by attribution and the structure analysis (reduce/src/structure/).
#pragma once

#include <gelf.h>

#include <cstdint>
#include <span>
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

}  // namespace csp::reduce
