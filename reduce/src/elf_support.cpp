#include "elf_support.hpp"

#include <dwarf.h>

#include <filesystem>

#include <algorithm>
#include <cstdint>
#include <cstring>

namespace csp::reduce {

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

std::span<const std::uint8_t> codeBytes(Elf* elf, GElf_Addr start, GElf_Addr end) {
  if (elf == nullptr || end <= start) return {};
  auto cut = [&](const void* data, GElf_Addr at, GElf_Addr size) -> std::span<const std::uint8_t> {
    if (data == nullptr || start < at || start >= at + size) return {};
    return {static_cast<const std::uint8_t*>(data) + (start - at), std::min(end, at + size) - start};
  };
  bool sections = false;
  for (Elf_Scn* scn = elf_nextscn(elf, nullptr); scn != nullptr; scn = elf_nextscn(elf, scn)) {
    GElf_Shdr sh;
    if (gelf_getshdr(scn, &sh) == nullptr || sh.sh_type != SHT_PROGBITS || (sh.sh_flags & SHF_EXECINSTR) == 0) continue;
    sections = true;
    if (start < sh.sh_addr || start >= sh.sh_addr + sh.sh_size) continue;
    Elf_Data* data = elf_getdata(scn, nullptr);
    return data != nullptr && data->d_size >= sh.sh_size ? cut(data->d_buf, sh.sh_addr, sh.sh_size)
                                                         : std::span<const std::uint8_t>{};
  }
  if (sections) return {};
  std::size_t phnum = 0;
  if (elf_getphdrnum(elf, &phnum) != 0) return {};
  for (std::size_t i = 0; i < phnum; ++i) {
    GElf_Phdr ph;
    if (gelf_getphdr(elf, static_cast<int>(i), &ph) == nullptr || ph.p_type != PT_LOAD || (ph.p_flags & PF_X) == 0)
      continue;
    if (start < ph.p_vaddr || start >= ph.p_vaddr + ph.p_filesz) continue;
    Elf_Data* data = elf_getdata_rawchunk(elf, static_cast<int64_t>(ph.p_offset), ph.p_filesz, ELF_T_BYTE);
    return data != nullptr ? cut(data->d_buf, ph.p_vaddr, ph.p_filesz) : std::span<const std::uint8_t>{};
  }
  return {};
}

std::string sourcePath(const char* file, Dwarf_Die* cu) {
  if (!file || !*file) return {};
  std::filesystem::path path(file);
  if (path.is_absolute() || !cu) return path.lexically_normal().string();
  Dwarf_Attribute attr;
  const char* dir = dwarf_attr(cu, DW_AT_comp_dir, &attr) ? dwarf_formstring(&attr) : nullptr;
  if (!dir || !*dir) return path.lexically_normal().string();
  return (std::filesystem::path(dir) / path).lexically_normal().string();
}

const char* declFile(Dwarf_Die* die) {
  if (const char* file = dwarf_decl_file(die)) return file;
  Dwarf_Attribute attr;
  Dwarf_Word index = 0;
  if (dwarf_attr_integrate(die, DW_AT_decl_file, &attr) == nullptr || dwarf_formudata(&attr, &index) != 0 || index != 0)
    return nullptr;
  Dwarf_Die cu;
  Dwarf_Files* files = nullptr;
  std::size_t count = 0;
  if (dwarf_diecu(die, &cu, nullptr, nullptr) == nullptr || dwarf_getsrcfiles(&cu, &files, &count) != 0 || count == 0)
    return nullptr;
  return dwarf_filesrc(files, 0, nullptr, nullptr);
}

Dwarf_Die* CompileUnits::at(Dwarf_Addr addr, Dwarf_Addr* bias) {
  if (Dwarf_Die* cu = dwfl_module_addrdie(mod_, addr, bias)) return cu;
  if (!indexed_) index();
  auto it = std::upper_bound(spans_.begin(), spans_.end(), addr, [](Dwarf_Addr a, const Span& s) { return a < s.low; });
  if (it == spans_.begin()) return nullptr;
  --it;
  if (addr >= it->high) return nullptr;
  *bias = it->bias;
  return it->cu;
}

std::optional<CompileUnits::Line> CompileUnits::lineAt(Dwarf_Addr addr) {
  int line = 0;
  if (Dwfl_Line* l = dwfl_module_getsrc(mod_, addr)) {
    std::string file = sourcePath(dwfl_lineinfo(l, nullptr, &line, nullptr, nullptr, nullptr), dwfl_linecu(l));
    return Line{std::move(file), line};
  }
  Dwarf_Addr bias = 0;
  Dwarf_Die* cu = at(addr, &bias);
  if (cu == nullptr) return std::nullopt;
  Dwarf_Line* l = dwarf_getsrc_die(cu, addr - bias);
  if (l == nullptr || dwarf_lineno(l, &line) != 0) return std::nullopt;
  return Line{sourcePath(dwarf_linesrc(l, nullptr, nullptr), cu), line};
}

void CompileUnits::index() {
  indexed_ = true;
  Dwarf_Addr bias = 0;
  for (Dwarf_Die* cu = nullptr; (cu = dwfl_module_nextcu(mod_, cu, &bias)) != nullptr;) {
    Dwarf_Addr base = 0, start = 0, end = 0;
    for (ptrdiff_t off = 0; (off = dwarf_ranges(cu, off, &base, &start, &end)) > 0;)
      if (end > start) spans_.push_back({start + bias, end + bias, cu, bias});
  }
  std::sort(spans_.begin(), spans_.end(), [](const Span& a, const Span& b) { return a.low < b.low; });
}

}  // namespace csp::reduce
