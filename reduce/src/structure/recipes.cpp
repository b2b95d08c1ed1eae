// Unwind recipes of code without unwind tables (structure.hpp; thesis §3.2): the frame state
// (where the CFA is relative to rsp or rbp, where the caller's rbp is) followed from a
// function's entry through its control-flow graph.
#include <algorithm>

#include "csp/reduce/structure.hpp"

namespace csp::reduce::structure {

namespace {

struct FrameState {
  bool spKnown = true;
  std::int64_t spCfa = 8;  // CFA - rsp: at the entry, the return address is at rsp
  bool bpFrame = false;    // rbp = CFA - bpCfa
  std::int64_t bpCfa = 0;
  bool bpKept = true;
  bool bpSaved = false;
  std::int64_t bpSave = 0;
  bool operator==(const FrameState&) const = default;
};

void addToSp(FrameState& s, std::int64_t bytes) {
  if (s.spKnown) s.spCfa -= bytes;
}

void pushBp(FrameState& s) {
  addToSp(s, -8);
  if (s.spKnown && s.bpKept && !s.bpSaved) {
    s.bpSaved = true;
    s.bpSave = s.spCfa;
  }
}

void popBp(FrameState& s) {
  // Popping the saved value gives the caller's rbp back; anything else leaves rbp unknown.
  const bool restores = s.spKnown && s.bpSaved && s.spCfa == s.bpSave;
  s.bpFrame = false;
  s.bpKept = restores;
  if (restores) s.bpSaved = false;
  addToSp(s, 8);
}

void spFromBp(FrameState& s, std::int64_t offset) {
  s.spKnown = s.bpFrame;
  if (s.bpFrame) s.spCfa = s.bpCfa - offset;
}

void apply(FrameState& s, const FrameEffect& e) {
  switch (e.op) {
    case FrameOp::None:
      break;
    case FrameOp::SpAdd:
      addToSp(s, e.value);
      break;
    case FrameOp::PushBp:
      pushBp(s);
      break;
    case FrameOp::PopBp:
      popBp(s);
      break;
    case FrameOp::BpFromSp:
      s.bpFrame = s.spKnown;
      s.bpCfa = s.spCfa;
      s.bpKept = false;
      break;
    case FrameOp::SpFromBp:
      spFromBp(s, e.value);
      break;
    case FrameOp::Leave:
      spFromBp(s, 0);
      popBp(s);
      break;
    case FrameOp::Enter:
      pushBp(s);
      apply(s, {e.address, FrameOp::BpFromSp, 0});
      addToSp(s, -e.value);
      break;
    case FrameOp::SpLost:
      s.spKnown = false;
      break;
    case FrameOp::BpLost:
      s.bpFrame = false;
      s.bpKept = false;
      break;
  }
}

FrameRule ruleOf(const FrameState& s) {
  FrameRule r;
  if (s.spKnown) {
    r.base = FrameRule::Base::Sp;
    r.cfa = static_cast<std::int32_t>(s.spCfa);
  } else if (s.bpFrame) {
    r.base = FrameRule::Base::Bp;
    r.cfa = static_cast<std::int32_t>(s.bpCfa);
  }
  r.bpKept = s.bpKept;
  r.bpSaved = s.bpSaved;
  r.bpSave = s.bpSaved ? static_cast<std::int32_t>(s.bpSave) : 0;
  return r;
}

// The state that most instructions so far had: the function body's frame, which code reached
// only through computed jumps shares (its prologue and epilogue are a few instructions).
class CommonState {
 public:
  void add(const FrameState& s, std::size_t instructions) {
    for (auto& [state, n] : seen_)
      if (state == s) {
        n += instructions;
        return;
      }
    seen_.emplace_back(s, instructions);
  }
  FrameState get() const {
    const auto best =
        std::max_element(seen_.begin(), seen_.end(), [](const auto& a, const auto& b) { return a.second < b.second; });
    return best == seen_.end() ? FrameState{} : best->first;
  }

 private:
  std::vector<std::pair<FrameState, std::size_t>> seen_;
};

// Per block, the state at its entry: from the entry block through the graph (the first
// predecessor in reverse postorder wins). A block the entry does not reach (through a computed
// jump, or after a return) continues the block before it if that falls into it, and otherwise
// gets the state most of the code before it has (CommonState).
std::vector<FrameState> entryStates(const FunctionCode& code, std::span<const FrameEffect> effects) {
  const std::size_t n = code.blocks.size();
  std::vector<FrameState> in(n), out(n);
  std::vector<char> seen(n, 0);
  auto exitOf = [&](std::uint32_t b) {
    FrameState s = in[b];
    const auto& block = code.blocks[b];
    for (std::uint32_t k = block.first; k < block.first + block.count; ++k) apply(s, effects[k]);
    return s;
  };
  std::vector<std::uint32_t> work{0};
  seen[0] = 1;
  while (!work.empty()) {  // depth-first: a block's state is set by the first edge that reaches it
    const auto b = work.back();
    work.pop_back();
    out[b] = exitOf(b);
    for (auto it = code.graph.successors[b].rbegin(); it != code.graph.successors[b].rend(); ++it) {
      if (seen[*it]) continue;
      seen[*it] = 1;
      in[*it] = out[b];
      work.push_back(*it);
    }
  }
  CommonState common;
  for (std::uint32_t b = 0; b < n; ++b) {
    if (!seen[b]) {
      const auto& prev = code.last(b - 1);
      const bool fallsIn =
          (prev.flow == Flow::Next || prev.flow == Flow::Branch) && code.blocks[b - 1].end == code.blocks[b].start;
      in[b] = fallsIn ? out[b - 1] : common.get();
      out[b] = exitOf(b);
      seen[b] = 1;
    }
    FrameState s = in[b];
    const auto& block = code.blocks[b];
    for (std::uint32_t k = block.first; k < block.first + block.count; ++k) {
      common.add(s, 1);
      apply(s, effects[k]);
    }
  }
  return in;
}

}  // namespace

FrameRule FunctionRecipes::at(std::uint64_t address) const {
  auto it = std::upper_bound(at_.begin(), at_.end(), address);
  if (it == at_.begin()) return {};
  return rules_[static_cast<std::size_t>(std::prev(it) - at_.begin())];
}

FunctionRecipes computeRecipes(const FunctionCode& code, std::span<const FrameEffect> effects) {
  std::vector<std::uint64_t> at;
  std::vector<FrameRule> rules;
  if (code.blocks.empty() || effects.size() != code.instructions.size()) return {};
  const auto in = entryStates(code, effects);
  for (std::uint32_t b = 0; b < code.blocks.size(); ++b) {
    FrameState s = in[b];
    const auto& block = code.blocks[b];
    for (std::uint32_t k = block.first; k < block.first + block.count; ++k) {
      const FrameRule rule = ruleOf(s);
      if (rules.empty() || !(rules.back() == rule)) {
        at.push_back(effects[k].address);
        rules.push_back(rule);
      }
      apply(s, effects[k]);
    }
  }
  return FunctionRecipes(std::move(at), std::move(rules));
}

}  // namespace csp::reduce::structure
