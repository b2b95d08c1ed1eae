// Program structure recovered from machine code (docs/postprocessing.md, "Loops"): function
// bounds and loop nests of a load module, with the loops' source lines, as hpcstruct recovers
// them (thesis §3.3.3). Three layers, each usable on its own:
//   - graphs: dominators and the loop nesting forest of a control-flow graph (pure, no I/O);
//   - code: decoding of x86-64 machine code into basic blocks (capstone) and their graph;
//   - ModuleStructure: the result for one module (functions, loops with header file:line and
//     inline depth, address ranges of loop bodies), its byte form for the on-disk cache.
// The analysis of a module and the cache live in reduce/src/structure/ (used by attribution).
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace csp::reduce::structure {

inline constexpr std::uint32_t kNone = 0xFFFFFFFFu;

// ---------------------------------------------------------------------------------------------
// Graphs

// A directed graph on nodes 0..n-1 (basic blocks); node 0 is the function's entry.
struct Graph {
  std::vector<std::vector<std::uint32_t>> successors;
  std::size_t size() const { return successors.size(); }
  void resize(std::size_t n) { successors.resize(n); }
  void edge(std::uint32_t from, std::uint32_t to) { successors[from].push_back(to); }
};

// Immediate dominators from `entry` (Cooper, Harvey and Kennedy's iterative algorithm over the
// reverse postorder): idom[entry] = entry, kNone for nodes that `entry` does not reach.
std::vector<std::uint32_t> dominators(const Graph& g, std::uint32_t entry = 0);

// The loop nesting forest: every cycle of the graph is a loop. A loop is a strongly connected
// region; its header is its entry block (the block that control enters it by); the loops nested
// in it are the strongly connected regions of its blocks without its header (Havlak's and
// Ramalingam's loop nesting forests agree with this for reducible graphs). For a reducible graph
// the loops are exactly the natural loops of the back edges, merged by header. A region entered
// at more than one block (irreducible: no block dominates it) is one loop whose header is the
// entry reached first by a depth-first search from the function's entry; it is marked irreducible.
struct LoopForest {
  struct Loop {
    std::uint32_t header = 0;
    std::uint32_t parent = kNone;  // enclosing loop
    bool irreducible = false;
    std::vector<std::uint32_t> blocks;  // every block of the loop (nested loops' too), ascending
  };
  std::vector<Loop> loops;               // enclosing loops before the loops inside them
  std::vector<std::uint32_t> innermost;  // per node: its innermost loop, or kNone
};

// Nodes that no other node reaches (e.g. code reached only through an unresolved indirect jump)
// are searched from too, in node order after the entry, so that every cycle is found.
LoopForest findLoops(const Graph& g);

// ---------------------------------------------------------------------------------------------
// Machine code

enum class Flow : std::uint8_t {
  Next,          // falls through to the next instruction (calls too)
  Jump,          // unconditional direct jump
  Branch,        // conditional direct jump: target or next
  IndirectJump,  // jmp through a register or memory (a jump table or a tail call)
  Return,
  Stop,  // no successor: ud2, hlt, int3, undecodable bytes
};

struct Instruction {
  std::uint64_t address = 0;
  std::uint8_t size = 0;
  Flow flow = Flow::Next;
  bool call = false;         // a direct call (target set) or an indirect one
  bool padding = false;      // nop or int3: what assemblers put between functions
  std::uint64_t target = 0;  // direct jumps, branches and calls
  std::uint64_t slot = 0;    // calls and jumps through a RIP-relative pointer (GOT slot): its address
};

struct BasicBlock {
  std::uint64_t start = 0, end = 0;    // [start, end) addresses
  std::uint32_t first = 0, count = 0;  // its instructions in FunctionCode::instructions
};

// Whether a function of this (linkage) name never returns: abort, exit, __stack_chk_fail,
// __cxa_throw, _Unwind_Resume, std::__throw_*, ... (the ones compilers call at the end of a path
// and put other code after). Version suffixes (@GLIBC_2.2.5) are ignored.
bool noReturnName(std::string_view name);

// Reads the module's initialized data at an address (jump tables); nullopt if it has none there.
using ImageReader = std::function<std::optional<std::uint64_t>(std::uint64_t address, unsigned bytes)>;

struct FunctionCode {
  std::vector<Instruction> instructions;   // may be dropped once decoded: the rest stays valid
  std::vector<BasicBlock> blocks;          // in address order; block 0 starts at the function's start
  std::vector<Instruction> exits;          // per block: its last instruction
  Graph graph;                             // over blocks
  std::vector<std::uint64_t> callTargets;  // direct call targets, as found
  // Where code that nothing in the range reaches (from its start, or from an address that the
  // range takes with a RIP-relative lea: a computed jump) starts after a return or jump and the
  // padding behind it, at a 16-byte boundary: the start of a function without symbol, unwind
  // table or direct call (hand-written assembler called through pointers).
  std::vector<std::uint64_t> startsAfterPadding() const;
  std::vector<std::uint64_t> jumpTargets;  // direct jump and branch targets outside the range
  std::vector<std::uint64_t>
      codeAddresses;  // instructions of the range whose address a RIP-relative lea takes (computed jumps)
  std::uint32_t unresolvedJumps = 0;  // indirect jumps that are neither a jump table nor followed

  const Instruction& last(std::uint32_t block) const { return exits[block]; }
  // Whether some edge leads back to its own block or an earlier one: without such an edge the
  // graph has no cycle (and no loop).
  bool mayHaveCycles() const;
  // Whether control can reach a return (or leave through a jump that may return) from the entry
  // when calls for which `noReturn` is true do not come back.
  bool mayReturn(const std::function<bool(const Instruction&)>& noReturn,
                 const std::function<bool(const Instruction&)>& tailCallReturns) const;
  // Removes the edges from calls that do not return to the code after them (a call ends its
  // block, and its block falls through to the next one unless the callee never returns).
  void dropFallthroughOfCalls(const std::function<bool(const Instruction&)>& noReturn);
};

// Decodes [address, address + code.size()) as x86-64 code (linear sweep) and builds its basic
// blocks and control-flow graph. Calls end blocks, with an edge to the code after them (see
// FunctionCode::dropFallthroughOfCalls for callees that never return). Direct jumps and branches outside the range
// (tail calls, other parts of a split function) have no edge. Indirect jumps through a jump table of the patterns that
// GCC and Clang emit (a table of 32-bit offsets relative to its own address loaded with a RIP-relative lea, or of
// 64-bit absolute addresses) get an edge to each entry; the entries are as many as the table's guard says (cmp r, N;
// ja) and must all be instructions of the range, or without a guard are read while they are. Other indirect jumps have
// no edge (a conservative choice: a loop whose only way back passes through such a jump is not found). A Decoder is not
// thread-safe; use one per thread.
// What an instruction does to the stack pointer (rsp) and the frame pointer (rbp), for unwind
// recipes (below). `value` is the byte count of SpAdd (rsp += value), SpFromBp (rsp = rbp +
// value) and Enter (its frame size).
enum class FrameOp : std::uint8_t {
  None,
  SpAdd,     // push, pop, sub/add/lea of rsp by a constant
  PushBp,    // push %rbp
  PopBp,     // pop %rbp
  BpFromSp,  // mov %rsp, %rbp
  SpFromBp,  // mov %rbp, %rsp; lea value(%rbp), %rsp
  Leave,
  Enter,
  SpLost,  // any other change of rsp (and $-32, %rsp; sub %rax, %rsp; mov ..., %rsp)
  BpLost,  // any other change of rbp
};
struct FrameEffect {
  std::uint64_t address = 0;
  FrameOp op = FrameOp::None;
  std::int64_t value = 0;
};

class Decoder {
 public:
  Decoder();
  ~Decoder();
  Decoder(const Decoder&) = delete;
  Decoder& operator=(const Decoder&) = delete;
  FunctionCode decode(std::span<const std::uint8_t> code, std::uint64_t address, const ImageReader& image = {}) const;
  // Only the addresses of the instructions (the same linear sweep).
  std::vector<std::uint64_t> addresses(std::span<const std::uint8_t> code, std::uint64_t address) const;
  // Per instruction (the same linear sweep), its effect on rsp and rbp.
  std::vector<FrameEffect> frameEffects(std::span<const std::uint8_t> code, std::uint64_t address) const;
  // The start of the call instruction that ends just before `returnAddress`, if `code` (the
  // bytes before it, at most 15) ends with one.
  std::optional<std::uint64_t> callBefore(std::span<const std::uint8_t> code, std::uint64_t returnAddress) const;

 private:
  std::size_t handle_ = 0;
};

// ---------------------------------------------------------------------------------------------
// Unwind recipes (thesis §3.2, "Computing Unwind Recipes"): for code without unwind tables,
// where a frame's caller is, per instruction, from the moves of rsp and rbp since the function's
// start, followed along its control-flow graph.

struct FrameRule {
  enum class Base : std::uint8_t { Sp, Bp, Unknown };
  Base base = Base::Unknown;
  // The canonical frame address (CFA: the caller's rsp after the return) is base + cfa; the
  // return address is at CFA - 8.
  std::int32_t cfa = 0;
  bool bpKept = true;    // rbp still holds the caller's
  bool bpSaved = false;  // else the caller's rbp is saved at CFA - bpSave
  std::int32_t bpSave = 0;
  bool operator==(const FrameRule&) const = default;
};

// The rules of one function: changes in address order; the rule at an address is that of the
// last change at or before it (the state before the instruction there executes).
class FunctionRecipes {
 public:
  FunctionRecipes() = default;
  FunctionRecipes(std::vector<std::uint64_t> at, std::vector<FrameRule> rules)
      : at_(std::move(at)), rules_(std::move(rules)) {}
  FrameRule at(std::uint64_t address) const;
  std::size_t size() const { return at_.size(); }

 private:
  std::vector<std::uint64_t> at_;
  std::vector<FrameRule> rules_;
};

// The recipes of the function decoded into `code` (its start is its first block), with
// `effects` of the same instructions. The state at a block's entry comes from its first
// predecessor in reverse postorder; a block that the entry does not reach takes that of the
// code before it (after a return: the state before the return's block).
FunctionRecipes computeRecipes(const FunctionCode& code, std::span<const FrameEffect> effects);

// ---------------------------------------------------------------------------------------------
// One module's structure

struct LoopScope {
  std::uint64_t header = 0;       // address of the header block (ELF virtual address)
  std::uint32_t parent = kNone;   // enclosing loop (index into loops())
  std::uint32_t inlineDepth = 0;  // inlined-subroutine levels between the procedure and the loop
  std::uint32_t file = 0;         // index into files()
  std::uint32_t line = 0;         // 0: its code has no line (no line table): the loop is known by its header
  bool irreducible = false;
  bool operator==(const LoopScope&) const = default;
};

struct AddressRange {
  std::uint64_t start = 0, end = 0;
  std::uint32_t loop = kNone;  // innermost loop of these addresses
  bool operator==(const AddressRange&) const = default;
};

class ModuleStructure {
 public:
  // The start of the function around `address` (an ELF virtual address): the closest function
  // start at or below it in the same executable section; nullopt outside executable code.
  std::optional<std::uint64_t> functionStart(std::uint64_t address) const;
  // Where that function ends: the next start, or the end of its section.
  std::optional<std::uint64_t> functionEnd(std::uint64_t address) const;
  // The innermost loop around `address`, or kNone.
  std::uint32_t innermostLoop(std::uint64_t address) const;

  const std::vector<LoopScope>& loops() const { return loops_; }
  const std::vector<std::string>& files() const { return files_; }
  const std::vector<std::pair<std::uint64_t, std::uint64_t>>& codeRanges() const { return code_; }

  // The byte form of the cache (docs/postprocessing.md, "The structure cache"); decode throws
  // std::runtime_error naming the defect on anything it did not write.
  std::vector<std::byte> encode() const;
  static ModuleStructure decode(std::span<const std::byte> bytes);

  // Built by the analysis: sorted starts, sorted disjoint code ranges (executable sections),
  // loops with parents before children, sorted disjoint loop ranges.
  ModuleStructure(std::vector<std::uint64_t> starts, std::vector<std::pair<std::uint64_t, std::uint64_t>> code,
                  std::vector<LoopScope> loops, std::vector<std::string> files, std::vector<AddressRange> ranges);
  ModuleStructure() = default;
  bool operator==(const ModuleStructure&) const = default;

 private:
  void validate() const;
  std::vector<std::uint64_t> starts_;
  std::vector<std::pair<std::uint64_t, std::uint64_t>> code_;
  std::vector<LoopScope> loops_;
  std::vector<std::string> files_;
  std::vector<AddressRange> ranges_;
};

}  // namespace csp::reduce::structure
