// The analysis of one load module (analysis.hpp).
#include "analysis.hpp"

#include <dwarf.h>
#include <elfutils/libdw.h>
#include <fmt/format.h>
#include <gelf.h>
#include <tbb/enumerable_thread_specific.h>
#include <tbb/parallel_for.h>

#include <algorithm>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <string_view>
#include <unordered_map>
#include <unordered_set>

#include "../elf_support.hpp"

namespace csp::reduce::structure {

namespace {

using Range = std::pair<std::uint64_t, std::uint64_t>;

struct Section {
  std::uint64_t address = 0, size = 0;
  const std::uint8_t* data = nullptr;
  bool executable = false;
  bool plt = false;  // .plt, .plt.sec, .plt.got: stubs that jump through the GOT
};

// A loop of one function's graph, before DWARF gives it a line.
struct RawLoop {
  std::uint64_t header = 0;      // the header block's address
  std::uint32_t parent = kNone;  // in the same chunk
  bool irreducible = false;
  std::vector<Range> ranges;              // its blocks, merged
  std::vector<std::uint64_t> candidates;  // instructions whose line may name it
};

struct ChunkResult {
  std::vector<RawLoop> loops;
  std::vector<AddressRange> innermost;  // loop = index into loops
  std::uint32_t unresolvedJumps = 0;
};

void addRange(std::vector<Range>& ranges, std::uint64_t start, std::uint64_t end) {
  if (!ranges.empty() && ranges.back().second == start)
    ranges.back().second = end;
  else
    ranges.emplace_back(start, end);
}

// The loops of one function's (pruned) graph, with what DWARF needs to name them.
template <typename Redecode>
ChunkResult loopsOf(const FunctionCode& code, Redecode&& redecode) {
  ChunkResult out;
  const auto forest = findLoops(code.graph);
  out.loops.resize(forest.loops.size());
  for (std::size_t i = 0; i < forest.loops.size(); ++i) {
    const auto& l = forest.loops[i];
    auto& raw = out.loops[i];
    raw.header = code.blocks[l.header].start;
    raw.parent = l.parent;
    raw.irreducible = l.irreducible;
    for (auto b : l.blocks) addRange(raw.ranges, code.blocks[b].start, code.blocks[b].end);
    // Candidates for the loop's line: the header block's instructions and the branches back to
    // the header (the loop's continuation tests: the thesis' "bbranch" heuristic).
    const auto& header = code.blocks[l.header];
    raw.candidates = redecode(header.start, header.end);
    for (auto b : l.blocks) {
      const auto& succ = code.graph.successors[b];
      if (std::find(succ.begin(), succ.end(), l.header) != succ.end()) raw.candidates.push_back(code.last(b).address);
    }
    std::sort(raw.candidates.begin(), raw.candidates.end());
    raw.candidates.erase(std::unique(raw.candidates.begin(), raw.candidates.end()), raw.candidates.end());
  }
  for (std::uint32_t b = 0; b < code.blocks.size(); ++b) {
    const auto loop = forest.innermost[b];
    if (loop == kNone) continue;
    if (!out.innermost.empty() && out.innermost.back().loop == loop && out.innermost.back().end == code.blocks[b].start)
      out.innermost.back().end = code.blocks[b].end;
    else
      out.innermost.push_back({code.blocks[b].start, code.blocks[b].end, loop});
  }
  return out;
}

// GOT slot -> name of the symbol it is bound to (R_X86_64_JUMP_SLOT and R_X86_64_GLOB_DAT
// relocations): what a call through the PLT or the GOT calls.
std::unordered_map<std::uint64_t, std::string> slotNames(Elf* elf) {
  std::unordered_map<std::uint64_t, std::string> out;
  for (Elf_Scn* scn = elf_nextscn(elf, nullptr); scn != nullptr; scn = elf_nextscn(elf, scn)) {
    GElf_Shdr sh;
    if (gelf_getshdr(scn, &sh) == nullptr || sh.sh_type != SHT_RELA || sh.sh_entsize == 0) continue;
    Elf_Scn* symScn = elf_getscn(elf, sh.sh_link);
    GElf_Shdr symSh;
    if (symScn == nullptr || gelf_getshdr(symScn, &symSh) == nullptr) continue;
    Elf_Data* rel = elf_getdata(scn, nullptr);
    Elf_Data* syms = elf_getdata(symScn, nullptr);
    if (rel == nullptr || syms == nullptr) continue;
    const std::size_t n = sh.sh_size / sh.sh_entsize;
    for (std::size_t i = 0; i < n; ++i) {
      GElf_Rela r;
      if (gelf_getrela(rel, static_cast<int>(i), &r) == nullptr) break;
      const auto type = GELF_R_TYPE(r.r_info);
      if (type != R_X86_64_JUMP_SLOT && type != R_X86_64_GLOB_DAT) continue;
      GElf_Sym sym;
      if (gelf_getsym(syms, static_cast<int>(GELF_R_SYM(r.r_info)), &sym) == nullptr) continue;
      if (const char* name = elf_strptr(elf, symSh.sh_link, sym.st_name); name != nullptr && *name != '\0')
        out.emplace(r.r_offset, name);
    }
  }
  return out;
}

// The inlined-subroutine structure of the DWARF compile units, read per unit on first use:
// which inlined subroutines contain an address, as attribution's scope search sees them
// (attribution.cpp, findScopes: the first subprogram containing it, then the first inlined
// subroutine containing it at each level, through lexical blocks that contain it).
class InlineMap {
 public:
  InlineMap(Dwfl_Module* mod, GElf_Addr bias) : bias_(bias), cus_(mod) {}

  // Inlined-subroutine levels around an address (0: in the procedure itself).
  std::uint32_t depthAt(std::uint64_t address) { return depthCovering({{address, address + 1}}); }

  // The levels of the innermost inlined subroutine that contains all of the ranges.
  std::uint32_t depthCovering(const std::vector<Range>& ranges) {
    if (ranges.empty()) return 0;
    const Unit* unit = unitAt(ranges.front().first);
    if (unit == nullptr) return 0;
    const std::vector<std::uint32_t>* level = &unit->roots;
    std::uint32_t depth = 0;
    bool root = true;
    for (;;) {
      const Node* next = nullptr;
      for (auto n : *level)
        if (covers(unit->nodes[n], ranges)) {
          next = &unit->nodes[n];
          break;
        }
      if (next == nullptr) return depth;
      if (!root) ++depth;
      root = false;
      level = &next->children;
    }
  }

 private:
  struct Node {
    std::vector<Range> ranges;  // merged, ascending
    std::vector<std::uint32_t> children;
  };
  struct Unit {
    std::vector<Node> nodes;
    std::vector<std::uint32_t> roots;  // the concrete subprograms
  };

  static bool covers(const Node& n, const std::vector<Range>& ranges) {
    for (const auto& [a, b] : ranges) {
      auto it = std::upper_bound(n.ranges.begin(), n.ranges.end(), a,
                                 [](std::uint64_t x, const Range& r) { return x < r.first; });
      if (it == n.ranges.begin()) return false;
      --it;
      if (a < it->first || b > it->second) return false;
    }
    return true;
  }

  const Unit* unitAt(std::uint64_t address) {
    Dwarf_Addr cuBias = 0;
    Dwarf_Die* cu = cus_.at(address + bias_, &cuBias);
    if (cu == nullptr) return nullptr;
    const Dwarf_Off key = dwarf_dieoffset(cu);
    auto [it, fresh] = units_.try_emplace(key);
    if (fresh) {
      shift_ = cuBias - bias_;
      walk(cu, kNone, it->second, 0);
    }
    return &it->second;
  }

  std::vector<Range> rangesOf(Dwarf_Die* die) const {
    std::vector<Range> out;
    Dwarf_Addr base = 0, start = 0, end = 0;
    for (ptrdiff_t off = 0; (off = dwarf_ranges(die, off, &base, &start, &end)) > 0;)
      if (end > start) out.emplace_back(start + shift_, end + shift_);
    std::sort(out.begin(), out.end());
    std::vector<Range> merged;
    for (const auto& r : out) {
      if (!merged.empty() && r.first <= merged.back().second)
        merged.back().second = std::max(merged.back().second, r.second);
      else
        merged.push_back(r);
    }
    return merged;
  }

  // Subprograms and inlined subroutines with code become nodes; lexical blocks with code are
  // looked through; a subprogram nested in another counts as its parent's level (attribution
  // counts only inlined subroutines as levels).
  void walk(Dwarf_Die* parent, std::uint32_t parentNode, Unit& unit, int depth) {
    forEachScope(parent, depth, [&](Dwarf_Die& child, int at) {
      const int tag = dwarf_tag(&child);
      if (tag == DW_TAG_lexical_block || tag == DW_TAG_try_block || tag == DW_TAG_catch_block) {
        if (!rangesOf(&child).empty()) walk(&child, parentNode, unit, at + 1);
        return false;
      }
      auto ranges = rangesOf(&child);
      if (ranges.empty()) return false;  // a declaration or an abstract instance: no code
      if (tag == DW_TAG_subprogram && parentNode != kNone) {
        walk(&child, parentNode, unit, at + 1);
        return false;
      }
      const auto id = static_cast<std::uint32_t>(unit.nodes.size());
      unit.nodes.push_back({std::move(ranges), {}});
      (parentNode == kNone ? unit.roots : unit.nodes[parentNode].children).push_back(id);
      walk(&child, id, unit, at + 1);
      return false;
    });
  }

  GElf_Addr bias_;
  CompileUnits cus_;
  Dwarf_Addr shift_ = 0;  // DIE address + shift_ = ELF virtual address (for the unit being read)
  std::unordered_map<Dwarf_Off, Unit> units_;
};

// A truncated file (a copy cut short, a build still being written) reads as far as it goes;
// what it lacks must not be taken for the absence of code.
void checkComplete(Elf* elf, const GElf_Ehdr& ehdr) {
  std::size_t size = 0;
  if (elf_rawfile(elf, &size) == nullptr) return;
  std::uint64_t need = 0;
  std::string what;
  auto want = [&](std::uint64_t end, const char* part) {
    if (end > need) {
      need = end;
      what = part;
    }
  };
  if (ehdr.e_phnum > 0) want(ehdr.e_phoff + std::uint64_t{ehdr.e_phnum} * ehdr.e_phentsize, "program headers");
  if (ehdr.e_shnum > 0) want(ehdr.e_shoff + std::uint64_t{ehdr.e_shnum} * ehdr.e_shentsize, "section headers");
  if (need <= size) {
    std::size_t phnum = 0;
    elf_getphdrnum(elf, &phnum);
    for (std::size_t i = 0; i < phnum; ++i) {
      GElf_Phdr ph;
      if (gelf_getphdr(elf, static_cast<int>(i), &ph) != nullptr && ph.p_type == PT_LOAD)
        want(ph.p_offset + ph.p_filesz, "segments");
    }
  }
  if (need > size)
    throw AnalysisError(fmt::format("truncated file: {} bytes, but its {} extend to byte {}", size, what, need));
}

// The loaded image of a module: its allocated sections with contents (the code, and the data
// that jump tables are read from), sorted by address, and the code among them.
struct Image {
  Elf* elf = nullptr;
  GElf_Addr bias = 0;
  GElf_Ehdr ehdr{};
  std::vector<Section> sections;
  std::vector<Section> code;

  bool inCode(std::uint64_t a) const {
    auto it =
        std::upper_bound(code.begin(), code.end(), a, [](std::uint64_t x, const Section& s) { return x < s.address; });
    return it != code.begin() && a - std::prev(it)->address < std::prev(it)->size;
  }
  std::optional<std::uint64_t> read(std::uint64_t address, unsigned bytes) const {
    auto it = std::upper_bound(sections.begin(), sections.end(), address,
                               [](std::uint64_t a, const Section& s) { return a < s.address; });
    if (it == sections.begin()) return std::nullopt;
    --it;
    if (address - it->address > it->size || it->size - (address - it->address) < bytes || bytes > 8)
      return std::nullopt;
    std::uint64_t v = 0;
    std::memcpy(&v, it->data + (address - it->address), bytes);  // x86-64: little-endian like this host
    return v;
  }
};

// The ELF of an x86-64 module, complete, and its sections (or, without section headers or code
// sections, its loadable segments).
Image readImage(Dwfl_Module* mod) {
  Image im;
  im.elf = dwfl_module_getelf(mod, &im.bias);
  if (im.elf == nullptr) throw AnalysisError("not an ELF file");
  if (gelf_getehdr(im.elf, &im.ehdr) == nullptr) throw AnalysisError(fmt::format("no ELF header: {}", elf_errmsg(-1)));
  if (im.ehdr.e_machine != EM_X86_64)
    throw AnalysisError(
        fmt::format("machine code of ELF machine {} (loops are recovered from x86-64 code only)", im.ehdr.e_machine));
  checkComplete(im.elf, im.ehdr);
  std::size_t shstrndx = 0;
  elf_getshdrstrndx(im.elf, &shstrndx);
  for (Elf_Scn* scn = elf_nextscn(im.elf, nullptr); scn != nullptr; scn = elf_nextscn(im.elf, scn)) {
    GElf_Shdr sh;
    if (gelf_getshdr(scn, &sh) == nullptr || !(sh.sh_flags & SHF_ALLOC) || sh.sh_type != SHT_PROGBITS ||
        sh.sh_size == 0)
      continue;
    const bool executable = (sh.sh_flags & SHF_EXECINSTR) != 0;
    Elf_Data* data = elf_getdata(scn, nullptr);
    if (data == nullptr || data->d_buf == nullptr || data->d_size < sh.sh_size) {
      if (!executable) continue;
      const char* name = elf_strptr(im.elf, shstrndx, sh.sh_name);
      throw AnalysisError(fmt::format("cannot read section {}: {}", name ? name : "?", elf_errmsg(-1)));
    }
    const char* name = elf_strptr(im.elf, shstrndx, sh.sh_name);
    const bool plt = name != nullptr && std::string_view(name).starts_with(".plt");
    im.sections.push_back({sh.sh_addr, sh.sh_size, static_cast<const std::uint8_t*>(data->d_buf), executable, plt});
  }
  if (std::none_of(im.sections.begin(), im.sections.end(), [](const Section& x) { return x.executable; })) {
    // No section headers (sstrip) or none of code: the loadable segments instead.
    im.sections.clear();
    std::size_t phnum = 0;
    elf_getphdrnum(im.elf, &phnum);
    for (std::size_t i = 0; i < phnum; ++i) {
      GElf_Phdr ph;
      if (gelf_getphdr(im.elf, static_cast<int>(i), &ph) == nullptr || ph.p_type != PT_LOAD || ph.p_filesz == 0)
        continue;
      Elf_Data* data = elf_getdata_rawchunk(im.elf, static_cast<int64_t>(ph.p_offset), ph.p_filesz, ELF_T_BYTE);
      if (data == nullptr || data->d_buf == nullptr)
        throw AnalysisError(fmt::format("cannot read a segment: {}", elf_errmsg(-1)));
      im.sections.push_back(
          {ph.p_vaddr, ph.p_filesz, static_cast<const std::uint8_t*>(data->d_buf), (ph.p_flags & PF_X) != 0, false});
    }
  }
  std::sort(im.sections.begin(), im.sections.end(), [](const auto& a, const auto& b) { return a.address < b.address; });
  for (const auto& sec : im.sections)
    if (sec.executable && (im.code.empty() || sec.address >= im.code.back().address + im.code.back().size))
      im.code.push_back(sec);
  return im;
}

// Function starts known without decoding: symbols (also those of a separate debug file),
// .eh_frame FDEs, the entry point, and the start of each code section; and the starts of the
// functions whose name says that they never return.
struct KnownStarts {
  std::vector<std::uint64_t> starts;  // sorted, unique
  std::unordered_set<std::uint64_t> noReturn;
};

KnownStarts knownStarts(Dwfl_Module* mod, const Image& im) {
  KnownStarts out;
  const int symbols = dwfl_module_getsymtab(mod);
  for (int i = 1; i < symbols; ++i) {
    GElf_Sym sym;
    GElf_Addr addr = 0;
    GElf_Word shndx = 0;
    Elf* symElf = nullptr;
    Dwarf_Addr symBias = 0;
    const char* name = dwfl_module_getsym_info(mod, i, &sym, &addr, &shndx, &symElf, &symBias);
    const int type = GELF_ST_TYPE(sym.st_info);
    if (name == nullptr || (type != STT_FUNC && type != STT_GNU_IFUNC) || sym.st_shndx == SHN_UNDEF ||
        !im.inCode(addr - im.bias))
      continue;
    out.starts.push_back(addr - im.bias);
    if (noReturnName(name)) out.noReturn.insert(addr - im.bias);  // any of its aliases
  }
  for (auto s : readFdeStarts(im.elf))
    if (im.inCode(s)) out.starts.push_back(s);
  if (im.ehdr.e_entry != 0 && im.inCode(im.ehdr.e_entry)) out.starts.push_back(im.ehdr.e_entry);
  for (const auto& s : im.code) out.starts.push_back(s.address);
  std::sort(out.starts.begin(), out.starts.end());
  out.starts.erase(std::unique(out.starts.begin(), out.starts.end()), out.starts.end());
  return out;
}

// The code between consecutive starts: the functions.
struct Chunk {
  const Section* section;
  std::uint64_t begin, end;
};

std::vector<Chunk> chunksOf(const Image& im, const std::vector<std::uint64_t>& starts) {
  std::vector<Chunk> chunks;
  for (const auto& s : im.code) {
    auto it = std::lower_bound(starts.begin(), starts.end(), s.address);
    for (; it != starts.end() && *it < s.address + s.size; ++it) {
      const auto next = std::next(it);
      const std::uint64_t end = next != starts.end() && *next < s.address + s.size ? *next : s.address + s.size;
      chunks.push_back({&s, *it, end});
    }
  }
  return chunks;
}

// What calls through the PLT and the GOT call: PLT stubs jump through a GOT slot that a
// relocation binds to a symbol.
struct CallNames {
  std::unordered_map<std::uint64_t, std::string> slots;  // GOT slot -> symbol
  std::unordered_map<std::uint64_t, std::string> stubs;  // PLT stub -> symbol
};

CallNames callNames(const Image& im, Decoder& decoder) {
  CallNames out;
  out.slots = slotNames(im.elf);
  for (const auto& sec : im.code) {
    if (!sec.plt) continue;
    const auto stubs = decoder.decode({sec.data, sec.size}, sec.address);
    for (std::size_t k = 0; k < stubs.instructions.size(); ++k) {
      const auto& i = stubs.instructions[k];
      if (i.flow != Flow::IndirectJump || i.slot == 0) continue;
      const auto it = out.slots.find(i.slot);
      if (it == out.slots.end()) continue;
      out.stubs.emplace(i.address, it->second);
      // endbr64 in front (.plt.sec): calls go to the stub's first instruction
      if (k > 0 && stubs.instructions[k - 1].size == 4 && stubs.instructions[k - 1].flow == Flow::Next &&
          stubs.instructions[k - 1].address + 4 == i.address)
        out.stubs.emplace(stubs.instructions[k - 1].address, it->second);
    }
  }
  return out;
}

// The functions of a module: decoded in parallel, whether each returns, and its loops.
//
// Which functions never return matters: calls to them end the path, the code after such a call
// belongs to something else, and an edge into it would make false loops. A callee is named
// (noReturnName: through the PLT or the GOT, or a symbol of this module), or it is a function of
// this module without a way out: no return instruction, no jump that may leave it to a returning
// function, and every path ending in a call that does not return. Functions with a return
// instruction are taken to return (compilers drop the code after calls that they know do not
// return); those without one are decided by a fixpoint over the calls between them (exit ->
// __run_exit_handlers -> _exit).
class FunctionAnalysis {
 public:
  FunctionAnalysis(const Image& im, const std::vector<Chunk>& chunks, const KnownStarts& known, const CallNames& names)
      : im_(im), chunks_(chunks), names_(names), returns_(chunks.size(), Returns::Yes), results_(chunks.size()) {
    for (std::uint32_t i = 0; i < chunks.size(); ++i) chunkAt_.emplace(chunks[i].begin, i);
    for (std::uint32_t i = 0; i < chunks.size(); ++i)
      if (known.noReturn.count(chunks[i].begin)) returns_[i] = Returns::No;
    seeded_ = returns_;
  }

  // The three steps, in order; then results() and the extra function starts.
  void decodeAll();
  void settleReturns();
  void reanalyseDoubtful();
  std::vector<ChunkResult>& results() { return results_; }
  // Procedure bounds of stripped code also come from the direct calls into it, and from code
  // after padding that no jump reaches (hand-written assembler called through pointers).
  void addStarts(std::vector<std::uint64_t>& starts) const;

 private:
  enum class Returns : std::uint8_t { Yes, No, Depends };

  Decoder& decoder() {
    auto& d = decoders_.local();
    if (!d) d = std::make_unique<Decoder>();
    return *d;
  }
  FunctionCode decodeChunk(Decoder& d, std::size_t i) const {
    const auto& c = chunks_[i];
    return d.decode({c.section->data + (c.begin - c.section->address), c.end - c.begin}, c.begin, reader_);
  }
  // 1 = never returns, 0 = returns, -1 = a function of this module whose answer is not known yet.
  int namedIn(const std::vector<Returns>& known, const Instruction& i) const {
    if (i.slot != 0) {
      const auto it = names_.slots.find(i.slot);
      return it != names_.slots.end() && noReturnName(it->second) ? 1 : 0;
    }
    if (i.target == 0) return 0;
    if (const auto it = names_.stubs.find(i.target); it != names_.stubs.end()) return noReturnName(it->second) ? 1 : 0;
    if (const auto it = chunkAt_.find(i.target); it != chunkAt_.end()) return known[it->second] == Returns::No ? 1 : -1;
    return 0;
  }
  // What the parallel decoding may read: the answers known before it.
  int named(const Instruction& i) const { return namedIn(seeded_, i); }
  bool calleeNoReturn(const Instruction& i) const {
    const int n = named(i);
    return n >= 0 ? n == 1 : returns_[chunkAt_.at(i.target)] == Returns::No;
  }
  // Whether a block's end may leave the function to its caller.
  bool leaves(const FunctionCode& fc, std::uint32_t b) const {
    const auto& x = fc.last(b);
    if (x.flow == Flow::Return) return true;
    // a tail call: to a function of this module, it leaves as that function does (fixpoint)
    if ((x.flow == Flow::Jump || x.flow == Flow::IndirectJump) && fc.graph.successors[b].empty()) return named(x) == 0;
    return false;
  }
  void findChunkLoops(Decoder& d, std::size_t i, FunctionCode& fc,
                      const std::function<bool(const Instruction&)>& noReturn);
  void decodeOne(Decoder& d, std::size_t i);

  const Image& im_;
  const ImageReader reader_ = [this](std::uint64_t a, unsigned n) { return im_.read(a, n); };
  const std::vector<Chunk>& chunks_;
  const CallNames& names_;
  std::unordered_map<std::uint64_t, std::uint32_t> chunkAt_;
  std::vector<Returns> returns_;  // MT: decodeAll's workers write their own function's only
  std::vector<Returns> seeded_;
  tbb::enumerable_thread_specific<std::unique_ptr<Decoder>> decoders_;
  // Per function (MT: each written by the worker that decodes it).
  std::vector<ChunkResult> results_;
  std::vector<FunctionCode> codes_;  // graphs of the functions whose return Depends
  std::vector<std::vector<std::uint64_t>> callTargets_, doubtful_, paddingStarts_, jumpTargets_;
};

void FunctionAnalysis::findChunkLoops(Decoder& d, std::size_t i, FunctionCode& fc,
                                      const std::function<bool(const Instruction&)>& noReturn) {
  fc.dropFallthroughOfCalls(noReturn);
  const auto& c = chunks_[i];
  const auto unresolved = fc.unresolvedJumps;
  results_[i] = loopsOf(fc, [&](std::uint64_t start, std::uint64_t end) {
    return d.addresses({c.section->data + (start - c.section->address), end - start}, start);
  });
  results_[i].unresolvedJumps = unresolved;
}

// One function: decoded, whether it may return, its loops taking the calls to functions of this
// module whose return is not known yet as returning. Kept for later: its graph if its return
// Depends, and the callees whose answer would change its loops (calls inside a loop: if the
// callee turns out not to return, the function is analysed again).
void FunctionAnalysis::decodeOne(Decoder& d, std::size_t i) {
  auto fc = decodeChunk(d, i);
  callTargets_[i] = std::move(fc.callTargets);
  jumpTargets_[i] = std::move(fc.jumpTargets);
  paddingStarts_[i] = fc.startsAfterPadding();
  results_[i].unresolvedJumps = fc.unresolvedJumps;
  if (returns_[i] == Returns::Yes) {
    bool exit = false;
    for (std::uint32_t b = 0; b < fc.blocks.size() && !exit; ++b) exit = leaves(fc, b);
    if (!exit)
      returns_[i] = fc.mayReturn([&](const Instruction& x) { return named(x) == 1; },
                                 [&](const Instruction& x) { return named(x) != 1; })
                        ? Returns::Depends
                        : Returns::No;
  }
  if (fc.mayHaveCycles()) {
    findChunkLoops(d, i, fc, [&](const Instruction& x) { return named(x) == 1; });
    const auto& ranges = results_[i].innermost;
    for (std::uint32_t b = 0; b < fc.blocks.size(); ++b) {
      const auto& x = fc.last(b);
      if (!x.call || named(x) != -1) continue;
      auto it = std::upper_bound(ranges.begin(), ranges.end(), fc.blocks[b].start,
                                 [](std::uint64_t a, const AddressRange& y) { return a < y.start; });
      if (it != ranges.begin() && fc.blocks[b].start < std::prev(it)->end) doubtful_[i].push_back(x.target);
    }
  }
  if (returns_[i] == Returns::Depends) {
    fc.instructions = {};
    codes_[i] = std::move(fc);
  }
}

void FunctionAnalysis::decodeAll() {
  const std::size_t n = chunks_.size();
  codes_.resize(n);
  callTargets_.resize(n);
  doubtful_.resize(n);
  paddingStarts_.resize(n);
  jumpTargets_.resize(n);
  tbb::parallel_for(tbb::blocked_range<std::size_t>(0, n, 8), [&](const tbb::blocked_range<std::size_t>& r) {
    auto& d = decoder();
    for (std::size_t i = r.begin(); i != r.end(); ++i) decodeOne(d, i);
  });
}

// The fixpoint over the functions whose return Depends on their callees.
void FunctionAnalysis::settleReturns() {
  std::vector<std::vector<std::uint32_t>> callers(chunks_.size());
  std::vector<std::uint32_t> work;
  for (std::uint32_t c = 0; c < chunks_.size(); ++c) {
    if (returns_[c] != Returns::Depends) continue;
    work.push_back(c);
    for (const auto& x : codes_[c].exits)
      if ((x.call || x.flow == Flow::Jump) && x.target != 0)
        if (const auto it = chunkAt_.find(x.target); it != chunkAt_.end()) callers[it->second].push_back(c);
  }
  std::reverse(work.begin(), work.end());
  auto noReturn = [&](const Instruction& i) { return calleeNoReturn(i); };
  while (!work.empty()) {
    const auto c = work.back();
    work.pop_back();
    if (returns_[c] != Returns::Depends) continue;
    if (codes_[c].mayReturn(noReturn, [&](const Instruction& i) { return !calleeNoReturn(i); })) continue;
    returns_[c] = Returns::No;
    for (auto caller : callers[c])
      if (returns_[caller] == Returns::Depends) work.push_back(caller);
  }
  for (auto& r : returns_)
    if (r == Returns::Depends) r = Returns::Yes;
  codes_ = {};
}

// Functions with a loop around a call that turned out not to return: their loops again.
void FunctionAnalysis::reanalyseDoubtful() {
  std::vector<std::size_t> again;
  for (std::size_t i = 0; i < chunks_.size(); ++i)
    if (std::any_of(doubtful_[i].begin(), doubtful_[i].end(),
                    [&](auto t) { return returns_[chunkAt_.at(t)] == Returns::No; }))
      again.push_back(i);
  doubtful_ = {};
  tbb::parallel_for(tbb::blocked_range<std::size_t>(0, again.size(), 1), [&](const tbb::blocked_range<std::size_t>& r) {
    auto& d = decoder();
    for (std::size_t k = r.begin(); k != r.end(); ++k) {
      auto fc = decodeChunk(d, again[k]);
      findChunkLoops(d, again[k], fc, [&](const Instruction& x) { return calleeNoReturn(x); });
    }
  });
}

void FunctionAnalysis::addStarts(std::vector<std::uint64_t>& starts) const {
  for (const auto& targets : callTargets_)
    for (auto t : targets)
      if (im_.inCode(t)) starts.push_back(t);
  std::unordered_set<std::uint64_t> jumpedTo;
  for (const auto& targets : jumpTargets_) jumpedTo.insert(targets.begin(), targets.end());
  for (const auto& found : paddingStarts_)
    for (auto t : found)
      if (!jumpedTo.count(t)) starts.push_back(t);
  std::sort(starts.begin(), starts.end());
  starts.erase(std::unique(starts.begin(), starts.end()), starts.end());
}

// The loops of all functions with their inline depth and line from DWARF (read here, by this
// thread only). Loops without a line (no line table for their code) keep line 0 and are known
// by their header.
class LoopNaming {
 public:
  LoopNaming(Dwfl_Module* mod, GElf_Addr bias) : bias_(bias), cus_(mod), inlines_(mod, bias) {}
  void add(const ChunkResult& r, const Section& section, AnalysisStats& s);
  std::vector<LoopScope> loops;
  std::vector<std::string> files;
  std::vector<AddressRange> ranges;

 private:
  // The smallest line among the instructions at `addresses` that belong to the procedure or
  // inlined subroutine at `depth` (not to code inlined deeper). `lines` tells whether any of
  // them has a line at all.
  std::optional<std::pair<std::uint32_t, std::string>> smallestLine(const std::vector<std::uint64_t>& addresses,
                                                                    std::uint32_t depth, bool* lines = nullptr);
  // The instructions of a loop's own blocks (`own`), or of all of its blocks.
  std::vector<std::uint64_t> instructionsOf(const ChunkResult& r, std::size_t loop, const Section& sec, bool own);
  std::uint32_t fileId(const std::string& file) {
    auto [it, fresh] = fileIds_.try_emplace(file, static_cast<std::uint32_t>(files.size()));
    if (fresh) files.push_back(file);
    return it->second;
  }

  GElf_Addr bias_;
  CompileUnits cus_;
  InlineMap inlines_;
  std::map<std::string, std::uint32_t> fileIds_;
  Decoder sweep_;
};

std::optional<std::pair<std::uint32_t, std::string>> LoopNaming::smallestLine(
    const std::vector<std::uint64_t>& addresses, std::uint32_t depth, bool* lines) {
  std::optional<std::pair<std::uint32_t, std::string>> best;
  for (auto c : addresses) {
    auto l = cus_.lineAt(c + bias_);
    if (!l || l->file.empty() || l->line <= 0) continue;
    if (lines) *lines = true;
    if (inlines_.depthAt(c) != depth) continue;
    std::pair<std::uint32_t, std::string> here{static_cast<std::uint32_t>(l->line), std::move(l->file)};
    if (!best || here < *best) best = std::move(here);
  }
  return best;
}

std::vector<std::uint64_t> LoopNaming::instructionsOf(const ChunkResult& r, std::size_t loop, const Section& sec,
                                                      bool own) {
  std::vector<std::uint64_t> out;
  auto add = [&](std::uint64_t a, std::uint64_t b) {
    for (auto x : sweep_.addresses({sec.data + (a - sec.address), b - a}, a)) out.push_back(x);
  };
  if (!own) {
    for (const auto& [a, b] : r.loops[loop].ranges) add(a, b);
  } else {
    for (const auto& x : r.innermost)
      if (x.loop == loop) add(x.start, x.end);
  }
  return out;
}

// One function's loops, nested in the order found, and the address ranges of their bodies.
void LoopNaming::add(const ChunkResult& r, const Section& sec, AnalysisStats& s) {
  s.unresolvedJumps += r.unresolvedJumps;
  s.rawLoops += r.loops.size();
  std::vector<std::uint32_t> kept(r.loops.size(), kNone);  // nearest kept loop at or around each raw loop
  for (std::size_t i = 0; i < r.loops.size(); ++i) {
    const auto& raw = r.loops[i];
    const std::uint32_t parent = raw.parent == kNone ? kNone : kept[raw.parent];
    kept[i] = parent;
    std::uint32_t depth = inlines_.depthCovering(raw.ranges);
    if (parent != kNone) depth = std::max(depth, loops[parent].inlineDepth);
    // The line: from the header and the branches back to it; when all of these belong to
    // code inlined into the loop (a loop-invariant test hoisted into its header, say), from
    // the loop's own blocks, then from all of its blocks.
    bool lines = false;
    auto best = smallestLine(raw.candidates, depth, &lines);
    if (!best && lines)
      best = smallestLine(instructionsOf(r, i, sec, true), depth);  // (no lines here: no DWARF for this code)
    if (!best && lines) best = smallestLine(instructionsOf(r, i, sec, false), depth);
    if (!best) {
      // No line at all (no line table for this code): the loop is known by its header.
      best.emplace(0, std::string());
      ++s.addressLoops;
    }
    kept[i] = static_cast<std::uint32_t>(loops.size());
    loops.push_back({raw.header, parent, depth, fileId(best->second), best->first, raw.irreducible});
    s.irreducible += raw.irreducible;
  }
  for (const auto& x : r.innermost) {
    const auto loop = kept[x.loop];
    if (loop == kNone) continue;
    if (!ranges.empty() && ranges.back().loop == loop && ranges.back().end == x.start)
      ranges.back().end = x.end;
    else
      ranges.push_back({x.start, x.end, loop});
  }
}

}  // namespace

ModuleStructure analyseModule(Dwfl_Module* mod, AnalysisStats* stats) {
  const Image image = readImage(mod);
  KnownStarts known = knownStarts(mod, image);
  const std::vector<Chunk> chunks = chunksOf(image, known.starts);
  Decoder decoder;
  const CallNames names = callNames(image, decoder);

  FunctionAnalysis functions(image, chunks, known, names);
  functions.decodeAll();
  functions.settleReturns();
  functions.reanalyseDoubtful();
  std::vector<std::uint64_t> starts = std::move(known.starts);
  functions.addStarts(starts);

  AnalysisStats s;
  s.functions = starts.size();
  LoopNaming naming(mod, image.bias);
  for (std::size_t ci = 0; ci < chunks.size(); ++ci) naming.add(functions.results()[ci], *chunks[ci].section, s);
  s.loops = naming.loops.size();
  if (stats) *stats = s;
  std::vector<Range> codeRanges;
  for (const auto& c : image.code) codeRanges.emplace_back(c.address, c.address + c.size);
  return ModuleStructure(std::move(starts), std::move(codeRanges), std::move(naming.loops), std::move(naming.files),
                         std::move(naming.ranges));
}

}  // namespace csp::reduce::structure
