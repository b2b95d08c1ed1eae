// Decoding x86-64 machine code into basic blocks and their control-flow graph (structure.hpp),
// with capstone.
#include <capstone/capstone.h>

#include <algorithm>
#include <initializer_list>
#include <stdexcept>

#include "csp/reduce/structure.hpp"

namespace csp::reduce::structure {

namespace {

constexpr std::size_t kMaxJumpTableEntries = 4096;
constexpr std::size_t kJumpTableLookback = 16;  // instructions searched back for the table's lea

bool inGroup(const cs_detail* d, std::uint8_t group) {
  return std::find(d->groups, d->groups + d->groups_count, group) != d->groups + d->groups_count;
}

}  // namespace

Decoder::Decoder() {
  csh h = 0;
  if (cs_open(CS_ARCH_X86, CS_MODE_64, &h) != CS_ERR_OK)
    throw std::runtime_error("capstone: cannot open an x86-64 decoder");
  cs_option(h, CS_OPT_DETAIL, CS_OPT_ON);
  handle_ = h;
}

Decoder::~Decoder() {
  csh h = handle_;
  cs_close(&h);
}

FunctionCode Decoder::decode(std::span<const std::uint8_t> code, std::uint64_t address,
                             const ImageReader& image) const {
  FunctionCode out;
  const std::uint64_t begin = address, end = address + code.size();
  // Per instruction, what jump-table recognition needs: the address a RIP-relative lea loads,
  // and whether it is a sign-extending 32-bit load with index scale 4 (movsxd r, [b + i*4]).
  std::vector<std::uint64_t> leaAddress;
  std::vector<char> tableLoad;
  // The guard of a jump table: cmp r, N (its N + 1, 0 for none), ja/jae (kAbove/kAboveEqual).
  std::vector<std::int64_t> cmpLimit;
  std::vector<char> guard;
  constexpr char kAbove = 1, kAboveEqual = 2;
  {
    const csh h = handle_;
    cs_insn* insn = cs_malloc(h);
    out.instructions.reserve(code.size() / 4 + 1);
    leaAddress.reserve(code.size() / 4 + 1);
    tableLoad.reserve(code.size() / 4 + 1);
    cmpLimit.reserve(code.size() / 4 + 1);
    guard.reserve(code.size() / 4 + 1);
    const std::uint8_t* p = code.data();
    std::size_t left = code.size();
    std::uint64_t pc = address;
    while (left > 0) {
      Instruction ins;
      std::uint64_t lea = 0;
      bool load = false;
      std::int64_t limit = 0;
      char above = 0;
      if (!cs_disasm_iter(h, &p, &left, &pc, insn)) {
        ins.address = pc;
        ins.size = 1;
        ins.flow = Flow::Stop;  // not code (or not decodable): nothing follows
        ++p;
        --left;
        ++pc;
      } else {
        ins.address = insn->address;
        ins.size = static_cast<std::uint8_t>(insn->size);
        const cs_detail* d = insn->detail;
        const cs_x86& x = d->x86;
        const bool immediate = x.op_count > 0 && x.operands[0].type == X86_OP_IMM;
        if (insn->id == X86_INS_JMP) {
          ins.flow = immediate ? Flow::Jump : Flow::IndirectJump;
          if (immediate) ins.target = static_cast<std::uint64_t>(x.operands[0].imm);
        } else if (insn->id == X86_INS_LJMP) {
          ins.flow = Flow::Stop;
        } else if (inGroup(d, CS_GRP_JUMP)) {
          ins.flow = immediate ? Flow::Branch : Flow::IndirectJump;
          if (immediate) ins.target = static_cast<std::uint64_t>(x.operands[0].imm);
          above = insn->id == X86_INS_JA ? kAbove : insn->id == X86_INS_JAE ? kAboveEqual : 0;
        } else if (inGroup(d, CS_GRP_CALL)) {
          ins.call = true;
          if (immediate) ins.target = static_cast<std::uint64_t>(x.operands[0].imm);
        } else if (inGroup(d, CS_GRP_RET) || inGroup(d, CS_GRP_IRET)) {
          ins.flow = Flow::Return;
        } else if (insn->id == X86_INS_UD2 || insn->id == X86_INS_HLT || insn->id == X86_INS_INT3) {
          ins.flow = Flow::Stop;
          ins.padding = insn->id == X86_INS_INT3;
        } else if (insn->id == X86_INS_LEA && x.op_count == 2 && x.operands[1].type == X86_OP_MEM &&
                   x.operands[1].mem.base == X86_REG_RIP && x.operands[1].mem.index == X86_REG_INVALID) {
          lea = insn->address + insn->size + static_cast<std::uint64_t>(x.operands[1].mem.disp);
        } else if (insn->id == X86_INS_MOVSXD && x.op_count == 2 && x.operands[1].type == X86_OP_MEM &&
                   x.operands[1].mem.scale == 4 && x.operands[1].mem.index != X86_REG_INVALID) {
          load = true;
        } else if (insn->id == X86_INS_CMP && x.op_count == 2 && x.operands[0].type == X86_OP_REG &&
                   x.operands[1].type == X86_OP_IMM && x.operands[1].imm >= 0 &&
                   x.operands[1].imm < static_cast<std::int64_t>(kMaxJumpTableEntries)) {
          limit = x.operands[1].imm + 1;
        }
        if (insn->id == X86_INS_NOP) ins.padding = true;
        if (ins.call && ins.target != 0) out.callTargets.push_back(ins.target);
        if ((ins.flow == Flow::Jump || ins.flow == Flow::Branch) && (ins.target < begin || ins.target >= end))
          out.jumpTargets.push_back(ins.target);
        // call/jmp *SLOT(%rip): a pointer in the GOT (calls with -fno-plt, tail calls)
        if ((ins.call || ins.flow == Flow::IndirectJump) && x.op_count == 1 && x.operands[0].type == X86_OP_MEM &&
            x.operands[0].mem.base == X86_REG_RIP && x.operands[0].mem.index == X86_REG_INVALID)
          ins.slot = insn->address + insn->size + static_cast<std::uint64_t>(x.operands[0].mem.disp);
      }
      out.instructions.push_back(ins);
      leaAddress.push_back(lea);
      tableLoad.push_back(load ? 1 : 0);
      cmpLimit.push_back(limit);
      guard.push_back(above);
    }
    cs_free(insn, 1);
  }
  const auto& insns = out.instructions;
  auto isInstruction = [&](std::uint64_t a) {
    if (a < begin || a >= end) return false;
    auto it = std::lower_bound(insns.begin(), insns.end(), a,
                               [](const Instruction& i, std::uint64_t x) { return i.address < x; });
    return it != insns.end() && it->address == a;
  };

  for (auto a : leaAddress)
    if (a != 0 && isInstruction(a)) out.codeAddresses.push_back(a);

  // Jump tables: targets per indirect jump (instruction index).
  std::vector<std::pair<std::size_t, std::vector<std::uint64_t>>> tables;
  if (image) {
    // Re-decoding the jump instruction gives its operand.
    const csh h = handle_;
    cs_insn* insn = cs_malloc(h);
    for (std::size_t k = 0; k < insns.size(); ++k) {
      if (insns[k].flow != Flow::IndirectJump) continue;
      const std::uint8_t* p = code.data() + (insns[k].address - begin);
      std::size_t left = insns[k].size;
      std::uint64_t pc = insns[k].address;
      if (!cs_disasm_iter(h, &p, &left, &pc, insn) || insn->detail->x86.op_count < 1) continue;
      const cs_x86_op& op = insn->detail->x86.operands[0];
      // The table's size: from its guard (cmp r, N; ja default: N + 1 entries; jae: N) when the
      // code before the jump has one; then every entry must be an instruction of the function.
      // Without a guard, entries are read while they are.
      std::size_t entries = 0;
      for (std::size_t back = 1; back <= 2 * kJumpTableLookback && back < k; ++back) {
        if (guard[k - back] != 0 && cmpLimit[k - back - 1] > 0) {
          entries = static_cast<std::size_t>(cmpLimit[k - back - 1]) - (guard[k - back] == kAboveEqual ? 1 : 0);
          break;
        }
        if (insns[k - back].flow != Flow::Next && insns[k - back].flow != Flow::Branch) break;
      }
      std::vector<std::uint64_t> targets;
      auto collect = [&](std::uint64_t table, unsigned width, bool relative) {
        for (std::size_t e = 0; e < (entries ? entries : kMaxJumpTableEntries); ++e) {
          const auto raw = image(table + e * width, width);
          std::uint64_t target = raw ? *raw : 0;
          if (raw && relative)
            target = table + static_cast<std::uint64_t>(static_cast<std::int64_t>(static_cast<std::int32_t>(*raw)));
          if (!raw || !isInstruction(target)) {
            if (entries) targets.clear();  // the guard says it has more entries: not a table
            break;
          }
          targets.push_back(target);
        }
      };
      if (op.type == X86_OP_MEM && op.mem.base == X86_REG_INVALID && op.mem.index != X86_REG_INVALID &&
          op.mem.scale == 8) {
        collect(static_cast<std::uint64_t>(op.mem.disp), 8, false);  // jmp *TABLE(,%reg,8)
      } else if (op.type == X86_OP_REG) {
        // lea TABLE(%rip), %b; movslq (%b,%i,4), %r; add %b, %r; jmp *%r
        bool sawLoad = false;
        for (std::size_t back = 1; back <= kJumpTableLookback && back <= k; ++back) {
          sawLoad = sawLoad || tableLoad[k - back];
          if (leaAddress[k - back] != 0 && sawLoad) {
            collect(leaAddress[k - back], 4, true);
            break;
          }
          if (insns[k - back].flow != Flow::Next) break;  // only straight-line code before the jump
        }
      }
      std::sort(targets.begin(), targets.end());
      targets.erase(std::unique(targets.begin(), targets.end()), targets.end());
      if (targets.empty())
        ++out.unresolvedJumps;
      else
        tables.emplace_back(k, std::move(targets));
    }
    cs_free(insn, 1);
  } else {
    for (const auto& i : insns) out.unresolvedJumps += i.flow == Flow::IndirectJump;
  }

  // Leaders: the start, branch targets inside the range, what follows a control transfer.
  std::vector<std::uint64_t> leaders{begin};
  leaders.reserve(insns.size() / 2 + 1);
  for (std::size_t k = 0; k < insns.size(); ++k) {
    const auto& i = insns[k];
    if ((i.flow == Flow::Jump || i.flow == Flow::Branch) && isInstruction(i.target)) leaders.push_back(i.target);
    if ((i.flow != Flow::Next || i.call) && k + 1 < insns.size()) leaders.push_back(insns[k + 1].address);
  }
  for (const auto& [k, targets] : tables) leaders.insert(leaders.end(), targets.begin(), targets.end());
  std::sort(leaders.begin(), leaders.end());
  leaders.erase(std::unique(leaders.begin(), leaders.end()), leaders.end());

  if (insns.empty()) return out;
  {
    std::size_t next = 0;  // next leader
    for (std::uint32_t k = 0; k < insns.size(); ++k) {
      if (next < leaders.size() && insns[k].address == leaders[next]) {
        out.blocks.push_back({insns[k].address, insns[k].address, k, 0});
        ++next;
      }
      auto& b = out.blocks.back();
      b.end = insns[k].address + insns[k].size;
      ++b.count;
    }
  }
  auto blockAt = [&](std::uint64_t a) -> std::uint32_t {
    auto it = std::upper_bound(out.blocks.begin(), out.blocks.end(), a,
                               [](std::uint64_t x, const BasicBlock& b) { return x < b.start; });
    if (it == out.blocks.begin()) return kNone;
    --it;
    return a < it->end && it->start == a ? static_cast<std::uint32_t>(it - out.blocks.begin()) : kNone;
  };
  std::size_t table = 0;
  out.graph.resize(out.blocks.size());
  out.exits.reserve(out.blocks.size());
  for (const auto& b : out.blocks) out.exits.push_back(insns[b.first + b.count - 1]);
  for (std::uint32_t b = 0; b < out.blocks.size(); ++b) {
    const auto& block = out.blocks[b];
    const std::size_t lastIndex = block.first + block.count - 1;
    const auto& last = insns[lastIndex];
    auto& succ = out.graph.successors[b];
    const bool fallsThrough = last.flow == Flow::Next || last.flow == Flow::Branch;
    if ((last.flow == Flow::Jump || last.flow == Flow::Branch)) {
      if (const auto t = blockAt(last.target); t != kNone) succ.push_back(t);
    }
    if (fallsThrough && b + 1 < out.blocks.size() && out.blocks[b + 1].start == block.end) succ.push_back(b + 1);
    if (last.flow == Flow::IndirectJump) {
      while (table < tables.size() && tables[table].first < lastIndex) ++table;
      if (table < tables.size() && tables[table].first == lastIndex)
        for (auto t : tables[table].second)
          if (const auto s = blockAt(t); s != kNone) succ.push_back(s);
    }
    std::sort(succ.begin(), succ.end());
    succ.erase(std::unique(succ.begin(), succ.end()), succ.end());
  }
  return out;
}

std::vector<std::uint64_t> Decoder::addresses(std::span<const std::uint8_t> code, std::uint64_t address) const {
  std::vector<std::uint64_t> out;
  const csh h = handle_;
  cs_insn* insn = cs_malloc(h);
  const std::uint8_t* p = code.data();
  std::size_t left = code.size();
  std::uint64_t pc = address;
  while (left > 0) {
    out.push_back(pc);
    if (!cs_disasm_iter(h, &p, &left, &pc, insn)) {
      ++p;
      --left;
      ++pc;
    }
  }
  cs_free(insn, 1);
  return out;
}

namespace {

bool isReg(const cs_x86_op& op, std::initializer_list<x86_reg> regs) {
  return op.type == X86_OP_REG && std::find(regs.begin(), regs.end(), op.reg) != regs.end();
}
constexpr std::initializer_list<x86_reg> kSp = {X86_REG_RSP, X86_REG_ESP, X86_REG_SP, X86_REG_SPL};
constexpr std::initializer_list<x86_reg> kBp = {X86_REG_RBP, X86_REG_EBP, X86_REG_BP, X86_REG_BPL};

// The effect on rsp and rbp of one decoded instruction (structure.hpp, FrameOp).
FrameEffect frameEffectOf(csh h, const cs_insn* insn) {
  FrameEffect e{insn->address, FrameOp::None, 0};
  const cs_detail* d = insn->detail;
  const cs_x86& x = d->x86;
  const bool twoOps = x.op_count == 2;
  if (inGroup(d, CS_GRP_CALL) || inGroup(d, CS_GRP_RET) || inGroup(d, CS_GRP_JUMP))
    return e;                                             // calls return: no net change
  const std::int64_t word = x.prefix[2] == 0x66 ? 2 : 8;  // push/pop with an operand-size prefix move 2 bytes
  switch (insn->id) {
    case X86_INS_PUSH:
      if (x.op_count == 1 && isReg(x.operands[0], kBp) && word == 8)
        e.op = FrameOp::PushBp;
      else
        e = {insn->address, FrameOp::SpAdd, -word};
      return e;
    case X86_INS_POP:
      if (x.op_count == 1 && isReg(x.operands[0], kBp) && word == 8)
        e.op = FrameOp::PopBp;
      else if (x.op_count == 1 && isReg(x.operands[0], kSp))
        e.op = FrameOp::SpLost;
      else
        e = {insn->address, FrameOp::SpAdd, word};
      return e;
    case X86_INS_PUSHFQ:
      return {insn->address, FrameOp::SpAdd, -8};
    case X86_INS_POPFQ:
      return {insn->address, FrameOp::SpAdd, 8};
    case X86_INS_LEAVE:
      e.op = FrameOp::Leave;
      return e;
    case X86_INS_ENTER:
      return {insn->address, FrameOp::Enter,
              x.op_count > 0 && x.operands[0].type == X86_OP_IMM ? x.operands[0].imm : 0};
    default:
      break;
  }
  if (twoOps && isReg(x.operands[0], {X86_REG_RSP})) {
    const cs_x86_op& src = x.operands[1];
    if ((insn->id == X86_INS_SUB || insn->id == X86_INS_ADD) && src.type == X86_OP_IMM)
      return {insn->address, FrameOp::SpAdd, insn->id == X86_INS_SUB ? -src.imm : src.imm};
    if (insn->id == X86_INS_LEA && src.type == X86_OP_MEM && src.mem.index == X86_REG_INVALID &&
        src.mem.segment == X86_REG_INVALID) {
      if (src.mem.base == X86_REG_RSP) return {insn->address, FrameOp::SpAdd, src.mem.disp};
      if (src.mem.base == X86_REG_RBP) return {insn->address, FrameOp::SpFromBp, src.mem.disp};
    }
    if (insn->id == X86_INS_MOV && isReg(src, {X86_REG_RBP})) return {insn->address, FrameOp::SpFromBp, 0};
  }
  if (twoOps && insn->id == X86_INS_MOV && isReg(x.operands[0], {X86_REG_RBP}) && isReg(x.operands[1], {X86_REG_RSP})) {
    e.op = FrameOp::BpFromSp;
    return e;
  }
  cs_regs read, written;
  std::uint8_t nRead = 0, nWritten = 0;
  if (cs_regs_access(h, insn, read, &nRead, written, &nWritten) != CS_ERR_OK) return e;
  for (std::uint8_t k = 0; k < nWritten; ++k) {
    const auto r = static_cast<x86_reg>(written[k]);
    if (std::find(kSp.begin(), kSp.end(), r) != kSp.end()) return {insn->address, FrameOp::SpLost, 0};
    if (std::find(kBp.begin(), kBp.end(), r) != kBp.end()) e.op = FrameOp::BpLost;
  }
  return e;
}

}  // namespace

std::vector<FrameEffect> Decoder::frameEffects(std::span<const std::uint8_t> code, std::uint64_t address) const {
  std::vector<FrameEffect> out;
  const csh h = handle_;
  cs_insn* insn = cs_malloc(h);
  const std::uint8_t* p = code.data();
  std::size_t left = code.size();
  std::uint64_t pc = address;
  while (left > 0) {
    if (!cs_disasm_iter(h, &p, &left, &pc, insn)) {
      out.push_back({pc, FrameOp::None, 0});
      ++p;
      --left;
      ++pc;
      continue;
    }
    out.push_back(frameEffectOf(h, insn));
  }
  cs_free(insn, 1);
  return out;
}

std::optional<std::uint64_t> Decoder::callBefore(std::span<const std::uint8_t> code,
                                                 std::uint64_t returnAddress) const {
  const csh h = handle_;
  cs_insn* insn = cs_malloc(h);
  std::optional<std::uint64_t> found;
  auto callOf = [&](std::size_t n) {
    const std::uint8_t* p = code.data() + code.size() - n;
    std::size_t left = n;
    std::uint64_t pc = returnAddress - n;
    return cs_disasm_iter(h, &p, &left, &pc, insn) && left == 0 && inGroup(insn->detail, CS_GRP_CALL);
  };
  // The common direct call first; then the longest call (a REX prefix makes `call *%r12` end
  // with the bytes of `call *%rsp`).
  if (code.size() >= 5 && code[code.size() - 5] == 0xE8 && callOf(5)) found = returnAddress - 5;
  for (std::size_t n = std::min<std::size_t>(code.size(), 15); !found && n >= 2; --n)
    if (callOf(n)) found = returnAddress - n;
  cs_free(insn, 1);
  return found;
}

std::vector<std::uint64_t> FunctionCode::startsAfterPadding() const {
  std::vector<std::uint64_t> out;
  std::vector<char> reached(blocks.size(), 0);
  auto reach = [&](std::uint32_t from) {
    std::vector<std::uint32_t> work{from};
    reached[from] = 1;
    while (!work.empty()) {
      const auto b = work.back();
      work.pop_back();
      for (auto s : graph.successors[b])
        if (!reached[s]) reached[s] = 1, work.push_back(s);
    }
  };
  if (!blocks.empty()) reach(0);
  for (auto a : codeAddresses) {  // the block that holds it
    auto it = std::upper_bound(blocks.begin(), blocks.end(), a,
                               [](std::uint64_t v, const BasicBlock& x) { return v < x.start; });
    if (it == blocks.begin() || a >= std::prev(it)->end) continue;
    const auto b = static_cast<std::uint32_t>(std::prev(it) - blocks.begin());
    if (!reached[b]) reach(b);
  }
  // In address order, so that the loops and branches of a function found here are its own.
  for (std::uint32_t b = 1; b < blocks.size(); ++b) {
    if (reached[b]) continue;
    std::uint32_t k = blocks[b].first;
    while (k < blocks[b].first + blocks[b].count && instructions[k].padding) ++k;
    if (k == blocks[b].first + blocks[b].count || instructions[k].address % 16 != 0) continue;
    // Nothing may fall into it: before the padding, a return, a jump or a stop.
    std::uint32_t before = k;
    while (before > 0 && instructions[before - 1].padding) --before;
    if (before > 0) {
      const auto& prev = instructions[before - 1];
      if (prev.call || prev.flow == Flow::Next || prev.flow == Flow::Branch) continue;
    }
    out.push_back(instructions[k].address);
    reach(b);
  }
  return out;
}

bool FunctionCode::mayHaveCycles() const {
  for (std::uint32_t b = 0; b < graph.size(); ++b)
    for (auto s : graph.successors[b])
      if (s <= b) return true;
  return false;
}

bool FunctionCode::mayReturn(const std::function<bool(const Instruction&)>& noReturn,
                             const std::function<bool(const Instruction&)>& tailCallReturns) const {
  if (blocks.empty()) return true;
  std::vector<char> seen(blocks.size(), 0);
  std::vector<std::uint32_t> stack{0};
  seen[0] = 1;
  while (!stack.empty()) {
    const auto b = stack.back();
    stack.pop_back();
    const auto& i = last(b);
    const bool fallsOff = b + 1 == blocks.size() || blocks[b + 1].start != blocks[b].end;
    switch (i.flow) {
      case Flow::Return:
        return true;
      case Flow::Stop:
        break;
      case Flow::Jump:
        if (graph.successors[b].empty() && tailCallReturns(i)) return true;  // a tail call
        break;
      case Flow::IndirectJump:
        if (graph.successors[b].empty() && tailCallReturns(i)) return true;  // not a known jump table
        break;
      case Flow::Next:
      case Flow::Branch:
        if (i.call && noReturn(i)) continue;
        if (fallsOff) return true;  // runs into the next function: assume it may return
        break;
    }
    for (auto s : graph.successors[b])
      if (!seen[s]) {
        seen[s] = 1;
        stack.push_back(s);
      }
  }
  return false;
}

void FunctionCode::dropFallthroughOfCalls(const std::function<bool(const Instruction&)>& noReturn) {
  for (std::uint32_t b = 0; b < blocks.size(); ++b) {
    const auto& i = last(b);
    if (!i.call || !noReturn(i)) continue;
    auto& succ = graph.successors[b];
    succ.erase(std::remove(succ.begin(), succ.end(), b + 1), succ.end());
  }
}

bool noReturnName(std::string_view name) {
  if (const auto at = name.find('@'); at != std::string_view::npos) name = name.substr(0, at);
  static constexpr std::string_view kNames[] = {"abort",
                                                "exit",
                                                "_exit",
                                                "_Exit",
                                                "quick_exit",
                                                "__assert_fail",
                                                "__assert_perror_fail",
                                                "__assert",
                                                "__stack_chk_fail",
                                                "__stack_chk_fail_local",
                                                "__fortify_fail",
                                                "__chk_fail",
                                                "__libc_fatal",
                                                "longjmp",
                                                "_longjmp",
                                                "siglongjmp",
                                                "__longjmp_chk",
                                                "__libc_longjmp",
                                                "__libc_siglongjmp",
                                                "pthread_exit",
                                                "__pthread_unwind",
                                                "__pthread_unwind_next",
                                                "err",
                                                "errx",
                                                "verr",
                                                "verrx",
                                                "__cxa_throw",
                                                "__cxa_rethrow",
                                                "__cxa_bad_cast",
                                                "__cxa_bad_typeid",
                                                "__cxa_throw_bad_array_new_length",
                                                "__cxa_call_unexpected",
                                                "__cxa_call_terminate",
                                                "__cxa_pure_virtual",
                                                "__cxa_deleted_virtual",
                                                "_Unwind_Resume",
                                                "_ZSt9terminatev",
                                                "_ZSt10unexpectedv",
                                                "_gfortran_stop_string",
                                                "_gfortran_stop_numeric",
                                                "_gfortran_error_stop_string",
                                                "_gfortran_error_stop_numeric",
                                                "_gfortran_runtime_error",
                                                "_gfortran_runtime_error_at",
                                                "_gfortran_os_error",
                                                "_gfortran_os_error_at"};
  for (auto n : kNames)
    if (name == n) return true;
  if (name.starts_with("_ZSt") && name.find("__throw_") != std::string_view::npos) return true;  // std::__throw_*
  if (name.starts_with("__ubsan_handle_") && name.ends_with("_abort")) return true;
  if (name.starts_with("__asan_report_") && !name.ends_with("_noabort")) return true;
  return false;
}

}  // namespace csp::reduce::structure
