// Minimal leaf symbolization for the measurement tests: function symbols of an ELF file
// (.symtab, else .dynsym) looked up by module-relative offset. Attribution proper (inlining,
// lines, loops) belongs to reduce/; the tests only need "which procedure was interrupted".
#pragma once

#include <fcntl.h>
#include <gelf.h>
#include <libelf.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "csp/storage/profile.hpp"

namespace csp::test {

class ElfSymbols {
 public:
  explicit ElfSymbols(const std::string& path) {
    elf_version(EV_CURRENT);
    const int fd = open(path.c_str(), O_RDONLY);
    if (fd < 0) return;
    if (Elf* elf = elf_begin(fd, ELF_C_READ, nullptr); elf != nullptr) {
      load(elf, SHT_SYMTAB);
      if (symbols_.empty()) load(elf, SHT_DYNSYM);
      elf_end(elf);
    }
    close(fd);
    std::sort(symbols_.begin(), symbols_.end(), [](const Symbol& a, const Symbol& b) { return a.begin < b.begin; });
  }

  // Name of the function containing `offset` (an ELF virtual address), or "".
  std::string lookup(std::uint64_t offset) const {
    auto it = std::upper_bound(symbols_.begin(), symbols_.end(), offset,
                               [](std::uint64_t v, const Symbol& s) { return v < s.begin; });
    while (it != symbols_.begin()) {
      --it;
      if (offset < it->begin + std::max<std::uint64_t>(it->size, 1)) return it->name;
      if (it->begin + 0x100000 < offset) break;
    }
    return "";
  }
  bool empty() const { return symbols_.empty(); }

  struct Symbol {
    std::uint64_t begin, size;
    std::string name;
  };
  // Every function symbol whose name starts with `prefix`.
  std::vector<Symbol> named(const std::string& prefix) const {
    std::vector<Symbol> out;
    for (const auto& s : symbols_)
      if (s.name.rfind(prefix, 0) == 0) out.push_back(s);
    return out;
  }

 private:
  void load(Elf* elf, Elf64_Word type) {
    Elf_Scn* scn = nullptr;
    while ((scn = elf_nextscn(elf, scn)) != nullptr) {
      GElf_Shdr sh;
      if (gelf_getshdr(scn, &sh) == nullptr || sh.sh_type != type || sh.sh_entsize == 0) continue;
      Elf_Data* data = elf_getdata(scn, nullptr);
      if (data == nullptr) continue;
      for (std::size_t i = 0; i < sh.sh_size / sh.sh_entsize; ++i) {
        GElf_Sym sym;
        if (gelf_getsym(data, static_cast<int>(i), &sym) == nullptr) continue;
        if (GELF_ST_TYPE(sym.st_info) != STT_FUNC || sym.st_value == 0) continue;
        const char* name = elf_strptr(elf, sh.sh_link, sym.st_name);
        symbols_.push_back({sym.st_value, sym.st_size, name != nullptr ? name : ""});
      }
    }
  }
  std::vector<Symbol> symbols_;
};

// Symbolizes address frames of profiles, caching one symbol table per module path.
class LeafSymbolizer {
 public:
  std::string procedure(const ThreadProfile& p, std::uint32_t frame) {
    const AddressFrame& f = p.addressFrames.at(frame);
    const std::string& path = p.modules.at(f.module).path;
    auto it = tables_.find(path);
    if (it == tables_.end()) it = tables_.emplace(path, ElfSymbols(path)).first;
    return it->second.lookup(f.offset);
  }

 private:
  std::map<std::string, ElfSymbols> tables_;
};

}  // namespace csp::test
