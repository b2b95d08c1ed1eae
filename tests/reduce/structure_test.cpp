// Loop recovery from machine code (csp/reduce/structure.hpp): the loop nesting forest of hand-made
// graphs (reducible and irreducible) against dominator-based natural loops, basic blocks and
// edges of hand-assembled x86-64 code (loops, an irreducible region, a jump table, calls that do
// not return), the byte form of a module's structure and the cache's validation, and attribution
// of every address of the test program's loops (tests/apps/loops.cpp at -O2 and -O3).
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <map>
#include <random>
#include <set>
#include <sstream>
#include <thread>

#include "common/test_support.hpp"
#include "csp/reduce/attribution.hpp"
#include "csp/reduce/structure.hpp"
#include "csp/storage/checksum.hpp"
#include "structure/cache.hpp"

using namespace csp;
using namespace csp::reduce;
using namespace csp::reduce::structure;

namespace {

Graph graphOf(std::size_t n, std::initializer_list<std::pair<std::uint32_t, std::uint32_t>> edges) {
  Graph g;
  g.resize(n);
  for (auto [a, b] : edges) g.edge(a, b);
  return g;
}

const LoopForest::Loop* loopWithHeader(const LoopForest& f, std::uint32_t header) {
  for (const auto& l : f.loops)
    if (l.header == header) return &l;
  return nullptr;
}

TEST(LoopForest, SimpleNestedAndSelfLoops) {
  // 0 -> 1 -> 2 -> 3 -> 2 (inner), 3 -> 4 -> 1 (outer), 4 -> 5; 5 -> 5 (self loop), 5 -> 6
  const auto g = graphOf(7, {{0, 1}, {1, 2}, {2, 3}, {3, 2}, {3, 4}, {4, 1}, {4, 5}, {5, 5}, {5, 6}});
  const auto f = findLoops(g);
  ASSERT_EQ(f.loops.size(), 3u);
  const auto* outer = loopWithHeader(f, 1);
  const auto* inner = loopWithHeader(f, 2);
  const auto* self = loopWithHeader(f, 5);
  ASSERT_TRUE(outer && inner && self);
  EXPECT_EQ(outer->blocks, (std::vector<std::uint32_t>{1, 2, 3, 4}));
  EXPECT_EQ(inner->blocks, (std::vector<std::uint32_t>{2, 3}));
  EXPECT_EQ(self->blocks, (std::vector<std::uint32_t>{5}));
  EXPECT_EQ(inner->parent, static_cast<std::uint32_t>(outer - f.loops.data()));
  EXPECT_EQ(outer->parent, kNone);
  EXPECT_EQ(self->parent, kNone);
  EXPECT_FALSE(outer->irreducible || inner->irreducible || self->irreducible);
  EXPECT_EQ(f.innermost, (std::vector<std::uint32_t>{kNone, static_cast<std::uint32_t>(outer - f.loops.data()),
                                                     static_cast<std::uint32_t>(inner - f.loops.data()),
                                                     static_cast<std::uint32_t>(inner - f.loops.data()),
                                                     static_cast<std::uint32_t>(outer - f.loops.data()),
                                                     static_cast<std::uint32_t>(self - f.loops.data()), kNone}));
}

TEST(LoopForest, BackEdgesToOneHeaderMakeOneLoop) {
  // while (...) { if (a) continue; ...; }: two back edges 2 -> 1 and 3 -> 1
  const auto f = findLoops(graphOf(5, {{0, 1}, {1, 2}, {1, 4}, {2, 1}, {2, 3}, {3, 1}}));
  ASSERT_EQ(f.loops.size(), 1u);
  EXPECT_EQ(f.loops[0].header, 1u);
  EXPECT_EQ(f.loops[0].blocks, (std::vector<std::uint32_t>{1, 2, 3}));
}

TEST(LoopForest, IrreducibleRegionIsOneLoopHeadedByItsFirstEnteredBlock) {
  // 0 -> 1, 0 -> 2, 1 <-> 2, 2 -> 3: the cycle {1, 2} is entered at 1 and at 2.
  const auto f = findLoops(graphOf(4, {{0, 1}, {0, 2}, {1, 2}, {2, 1}, {2, 3}}));
  ASSERT_EQ(f.loops.size(), 1u);
  EXPECT_EQ(f.loops[0].header, 1u);  // the depth-first search from 0 enters 1 first
  EXPECT_TRUE(f.loops[0].irreducible);
  EXPECT_EQ(f.loops[0].blocks, (std::vector<std::uint32_t>{1, 2}));
  // The same region entered first at 2 (0's successors in the other order).
  const auto g = findLoops(graphOf(4, {{0, 2}, {0, 1}, {1, 2}, {2, 1}, {2, 3}}));
  ASSERT_EQ(g.loops.size(), 1u);
  EXPECT_EQ(g.loops[0].header, 2u);
}

TEST(LoopForest, PaddingThatFallsIntoALoopIsNoSecondEntry) {
  // 0 jumps to the loop's header 2; 1 is alignment padding after that jump (nothing reaches it)
  // and falls into 3, the body's first block, aligned as the back branch's target: 2 -> 3 -> 2.
  const auto f = findLoops(graphOf(5, {{0, 2}, {1, 3}, {3, 2}, {2, 3}, {2, 4}}));
  ASSERT_EQ(f.loops.size(), 1u);
  EXPECT_EQ(f.loops[0].header, 2u);
  EXPECT_FALSE(f.loops[0].irreducible);
}

TEST(LoopForest, CycleThatNothingReachesIsStillALoop) {
  // 2 <-> 3 reached from no block (code behind an unresolved indirect jump)
  const auto f = findLoops(graphOf(4, {{0, 1}, {2, 3}, {3, 2}}));
  ASSERT_EQ(f.loops.size(), 1u);
  EXPECT_EQ(f.loops[0].header, 2u);
  EXPECT_FALSE(f.loops[0].irreducible);
}

TEST(Dominators, DiamondAndLoop) {
  const auto g = graphOf(6, {{0, 1}, {0, 2}, {1, 3}, {2, 3}, {3, 4}, {4, 3}, {4, 0}});
  const auto idom = dominators(g);
  EXPECT_EQ(idom, (std::vector<std::uint32_t>{0, 0, 0, 0, 3, kNone}));
}

// Natural loops: for every back edge u -> h (h dominates u), the blocks that reach u without
// passing h, plus h; merged by header.
std::map<std::uint32_t, std::set<std::uint32_t>> naturalLoops(const Graph& g) {
  const auto idom = dominators(g);
  std::vector<std::vector<std::uint32_t>> preds(g.size());
  for (std::uint32_t v = 0; v < g.size(); ++v)
    for (auto w : g.successors[v]) preds[w].push_back(v);
  auto dominates = [&](std::uint32_t h, std::uint32_t v) {
    for (; v != kNone; v = idom[v]) {
      if (v == h) return true;
      if (idom[v] == v) break;
    }
    return false;
  };
  std::map<std::uint32_t, std::set<std::uint32_t>> out;
  for (std::uint32_t u = 0; u < g.size(); ++u) {
    if (idom[u] == kNone) continue;
    for (auto h : g.successors[u]) {
      if (!dominates(h, u)) continue;
      auto& body = out[h];
      body.insert(h);
      std::vector<std::uint32_t> stack{u};
      while (!stack.empty()) {
        const auto v = stack.back();
        stack.pop_back();
        if (!body.insert(v).second) continue;
        for (auto p : preds[v]) stack.push_back(p);
      }
    }
  }
  return out;
}

// Random structured (reducible) control flow: sequences, if/else, while loops with breaks and
// continues, nested at random.
struct StructuredGraph {
  Graph g;
  std::mt19937 rng{12345};
  std::uint32_t node() {
    g.resize(g.size() + 1);
    return static_cast<std::uint32_t>(g.size() - 1);
  }
  // Builds a region entered at `entry`; returns its exit node.
  std::uint32_t region(std::uint32_t entry, int depth, std::uint32_t loopHead, std::uint32_t loopExit) {
    std::uint32_t at = entry;
    const int parts = 1 + static_cast<int>(rng() % 3);
    for (int p = 0; p < parts; ++p) {
      const int kind = depth <= 0 ? 0 : static_cast<int>(rng() % 5);
      if (kind == 1) {  // if / else
        const auto a = node(), b = node(), join = node();
        g.edge(at, a);
        g.edge(at, b);
        g.edge(region(a, depth - 1, loopHead, loopExit), join);
        g.edge(region(b, depth - 1, loopHead, loopExit), join);
        at = join;
      } else if (kind == 2 || kind == 3) {  // while loop
        const auto head = node(), body = node(), exit = node();
        g.edge(at, head);
        g.edge(head, body);
        g.edge(head, exit);
        g.edge(region(body, depth - 1, head, exit), head);
        at = exit;
      } else if (kind == 4 && loopHead != kNone) {  // break or continue, then more code
        const auto rest = node();
        g.edge(at, rng() % 2 ? loopHead : loopExit);
        g.edge(at, rest);
        at = rest;
      } else {
        const auto next = node();
        g.edge(at, next);
        at = next;
      }
    }
    return at;
  }
};

TEST(LoopForest, ReducibleGraphsGiveTheNaturalLoopsMergedByHeader) {
  for (int trial = 0; trial < 200; ++trial) {
    StructuredGraph s;
    s.rng.seed(static_cast<unsigned>(trial));
    s.node();
    s.region(0, 4, kNone, kNone);
    const auto f = findLoops(s.g);
    const auto natural = naturalLoops(s.g);
    std::map<std::uint32_t, std::set<std::uint32_t>> found;
    for (const auto& l : f.loops) {
      EXPECT_FALSE(l.irreducible) << "trial " << trial;
      found[l.header] = {l.blocks.begin(), l.blocks.end()};
      if (l.parent != kNone) {  // nested loops lie inside their parent
        const auto& p = f.loops[l.parent].blocks;
        EXPECT_TRUE(std::includes(p.begin(), p.end(), l.blocks.begin(), l.blocks.end()));
      }
    }
    EXPECT_EQ(found, natural) << "trial " << trial;
  }
}

TEST(LoopForest, RandomGraphsKeepTheForestInvariants) {
  std::mt19937 rng(7);
  for (int trial = 0; trial < 300; ++trial) {
    const std::uint32_t n = 2 + rng() % 14;
    Graph g;
    g.resize(n);
    for (std::uint32_t e = 0, m = rng() % (3 * n); e < m; ++e) g.edge(rng() % n, rng() % n);
    const auto f = findLoops(g);
    const auto idom = dominators(g);
    // Every block on a cycle is in a loop; loops are strongly connected; reducible loops are
    // dominated by their header.
    for (std::uint32_t v = 0; v < n; ++v) {
      // v is on a cycle iff it reaches itself
      std::vector<char> seen(n, 0);
      std::vector<std::uint32_t> stack(g.successors[v].begin(), g.successors[v].end());
      bool cycle = false;
      while (!stack.empty() && !cycle) {
        const auto w = stack.back();
        stack.pop_back();
        if (w == v) cycle = true;
        if (seen[w]++) continue;
        for (auto x : g.successors[w]) stack.push_back(x);
      }
      EXPECT_EQ(cycle, f.innermost[v] != kNone) << "trial " << trial << " node " << v;
    }
    for (const auto& l : f.loops) {
      EXPECT_TRUE(std::binary_search(l.blocks.begin(), l.blocks.end(), l.header));
      if (!l.irreducible && idom[l.header] != kNone)
        for (auto v : l.blocks) {
          auto d = v;
          while (d != l.header && idom[d] != d && d != kNone) d = idom[d];
          EXPECT_EQ(d, l.header) << "trial " << trial;
        }
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Decoding

std::vector<std::uint64_t> starts(const FunctionCode& c) {
  std::vector<std::uint64_t> out;
  for (const auto& b : c.blocks) out.push_back(b.start);
  return out;
}

TEST(Decoder, CountedLoop) {
  const std::uint8_t code[] = {
      0x31, 0xc0,        // 1000: xor eax, eax
      0xff, 0xc0,        // 1002: inc eax
      0x83, 0xf8, 0x0a,  // 1004: cmp eax, 10
      0x75, 0xf9,        // 1007: jne 1002
      0xc3,              // 1009: ret
  };
  Decoder d;
  const auto c = d.decode(code, 0x1000);
  EXPECT_EQ(starts(c), (std::vector<std::uint64_t>{0x1000, 0x1002, 0x1009}));
  EXPECT_EQ(c.graph.successors, (std::vector<std::vector<std::uint32_t>>{{1}, {1, 2}, {}}));
  const auto f = findLoops(c.graph);
  ASSERT_EQ(f.loops.size(), 1u);
  EXPECT_EQ(c.blocks[f.loops[0].header].start, 0x1002u);
}

TEST(Decoder, IrreducibleRegion) {
  const std::uint8_t code[] = {
      0x85, 0xff,        // 0: test edi, edi
      0x74, 0x04,        // 2: je 8          -> C
      0xff, 0xc0,        // 4: inc eax       A
      0xeb, 0x02,        // 6: jmp a         -> B
      0xff, 0xc8,        // 8: dec eax       C, falls into B
      0x83, 0xf8, 0x64,  // a: cmp eax, 100  B
      0x7c, 0xf5,        // d: jl 4          -> A
      0x83, 0xf8, 0x32,  // f: cmp eax, 50   D
      0x7c, 0xf4,        // 12: jl 8         -> C
      0xc3,              // 14: ret
  };
  Decoder d;
  const auto c = d.decode(code, 0);
  EXPECT_EQ(starts(c), (std::vector<std::uint64_t>{0x0, 0x4, 0x8, 0xa, 0xf, 0x14}));
  EXPECT_EQ(c.graph.successors, (std::vector<std::vector<std::uint32_t>>{{1, 2}, {3}, {3}, {1, 4}, {2, 5}, {}}));
  const auto f = findLoops(c.graph);
  // {A, B, C, D} entered at A and at C: one irreducible loop headed by A (entered first); inside
  // it, without A, the cycle C -> B -> D -> C, entered at C (from 0) and at B (from A).
  ASSERT_EQ(f.loops.size(), 2u);
  EXPECT_EQ(f.loops[0].header, 1u);
  EXPECT_TRUE(f.loops[0].irreducible);
  EXPECT_EQ(f.loops[0].blocks, (std::vector<std::uint32_t>{1, 2, 3, 4}));
  EXPECT_EQ(f.loops[1].parent, 0u);
  EXPECT_EQ(f.loops[1].blocks, (std::vector<std::uint32_t>{2, 3, 4}));
  EXPECT_TRUE(f.loops[1].irreducible);
}

TEST(Decoder, JumpTableTargetsAreEdges) {
  const std::uint8_t code[] = {
      0x48, 0x8d, 0x15, 0xf9, 0x00, 0x00, 0x00,  // 0: lea rdx, [rip + 0xf9]   (table at 0x100)
      0x48, 0x63, 0x04, 0x82,                    // 7: movsxd rax, [rdx + rax*4]
      0x48, 0x01, 0xd0,                          // b: add rax, rdx
      0xff, 0xe0,                                // e: jmp rax
      0xc3,                                      // 10: ret   (case 0)
      0xeb, 0xfe,                                // 11: jmp 11 (case 1: a loop)
  };
  const std::map<std::uint64_t, std::int32_t> table{{0x100, 0x10 - 0x100}, {0x104, 0x11 - 0x100}, {0x108, 0x7fffffff}};
  const ImageReader image = [&](std::uint64_t a, unsigned bytes) -> std::optional<std::uint64_t> {
    auto it = table.find(a);
    if (it == table.end() || bytes != 4) return std::nullopt;
    return static_cast<std::uint32_t>(it->second);
  };
  Decoder d;
  const auto c = d.decode(code, 0, image);
  EXPECT_EQ(starts(c), (std::vector<std::uint64_t>{0x0, 0x10, 0x11}));
  EXPECT_EQ(c.graph.successors, (std::vector<std::vector<std::uint32_t>>{{1, 2}, {}, {2}}));
  EXPECT_EQ(c.unresolvedJumps, 0u);
  // Without the table's data the jump is unresolved and has no successors.
  const auto blind = d.decode(code, 0);
  EXPECT_EQ(blind.unresolvedJumps, 1u);
  EXPECT_TRUE(blind.graph.successors[0].empty());
}

TEST(Decoder, JumpTableGuardBoundsTheTable) {
  const std::uint8_t code[] = {
      0x83, 0xf8, 0x01,                          // 0: cmp eax, 1
      0x77, 0x11,                                // 3: ja 16   (default)
      0x48, 0x8d, 0x15, 0xf4, 0x00, 0x00, 0x00,  // 5: lea rdx, [rip + 0xf4]   (table at 0x100)
      0x48, 0x63, 0x04, 0x82,                    // c: movsxd rax, [rdx + rax*4]
      0x48, 0x01, 0xd0,                          // 10: add rax, rdx
      0xff, 0xe0,                                // 13: jmp rax
      0xc3,                                      // 15: ret   (case 0)
      0xc3,                                      // 16: ret   (case 1, default)
  };
  // A third word after the table happens to be an offset to an instruction (the lea): read as
  // an entry it would make a false loop. The guard says the table has two entries.
  const std::map<std::uint64_t, std::int32_t> table{{0x100, 0x15 - 0x100}, {0x104, 0x16 - 0x100}, {0x108, 0x5 - 0x100}};
  const ImageReader image = [&](std::uint64_t a, unsigned bytes) -> std::optional<std::uint64_t> {
    auto it = table.find(a);
    if (it == table.end() || bytes != 4) return std::nullopt;
    return static_cast<std::uint32_t>(it->second);
  };
  Decoder d;
  const auto c = d.decode(code, 0, image);
  EXPECT_EQ(starts(c), (std::vector<std::uint64_t>{0x0, 0x5, 0x15, 0x16}));
  EXPECT_EQ(c.graph.successors, (std::vector<std::vector<std::uint32_t>>{{1, 3}, {2, 3}, {}, {}}));
  EXPECT_TRUE(findLoops(c.graph).loops.empty());
}

TEST(Decoder, CallsThatDoNotReturnHaveNoFallthrough) {
  const std::uint8_t code[] = {
      0xe8, 0xfb, 0x0f, 0x00, 0x00,  // 0: call 1000 (never returns)
      0x31, 0xc0,                    // 5: xor eax, eax  (reached by the loop's branch only)
      0xff, 0xc0,                    // 7: inc eax
      0x75, 0xfa,                    // 9: jne 5
      0xc3,                          // b: ret
  };
  Decoder d;
  auto c = d.decode(code, 0);
  EXPECT_EQ(starts(c), (std::vector<std::uint64_t>{0x0, 0x5, 0xb}));
  EXPECT_EQ(c.graph.successors[0], (std::vector<std::uint32_t>{1}));
  EXPECT_EQ(c.callTargets, (std::vector<std::uint64_t>{0x1000}));
  auto never = [](const Instruction& i) { return i.call && i.target == 0x1000; };
  auto returns = [](const Instruction&) { return true; };
  EXPECT_TRUE(c.mayReturn([](const Instruction&) { return false; }, returns));
  EXPECT_FALSE(c.mayReturn(never, returns));
  c.dropFallthroughOfCalls(never);
  EXPECT_TRUE(c.graph.successors[0].empty());
}

// Unwind recipes (thesis §3.2): where the caller's frame is at each instruction, from the moves
// of rsp and rbp along the graph.
TEST(UnwindRecipes, FramePointerAndAlignedStack) {
  const std::uint8_t code[] = {
      0x55,                          // 0: push rbp
      0x48, 0x89, 0xe5,              // 1: mov rbp, rsp
      0x48, 0x83, 0xe4, 0xe0,        // 4: and rsp, -32
      0x48, 0x83, 0xec, 0x40,        // 8: sub rsp, 64
      0xe8, 0x00, 0x00, 0x00, 0x00,  // c: call 11
      0x48, 0x89, 0xec,              // 11: mov rsp, rbp
      0x5d,                          // 14: pop rbp
      0xc3,                          // 15: ret
  };
  Decoder d;
  const auto r = computeRecipes(d.decode(code, 0), d.frameEffects(code, 0));
  using B = FrameRule::Base;
  EXPECT_EQ(r.at(0x0), (FrameRule{B::Sp, 8, true, false, 0}));
  EXPECT_EQ(r.at(0x1), (FrameRule{B::Sp, 16, true, true, 16}));
  EXPECT_EQ(r.at(0x4), (FrameRule{B::Sp, 16, false, true, 16}));  // rbp = CFA - 16 from here
  EXPECT_EQ(r.at(0x8), (FrameRule{B::Bp, 16, false, true, 16}));  // rsp aligned: only rbp says where the frame is
  EXPECT_EQ(r.at(0xc), (FrameRule{B::Bp, 16, false, true, 16}));
  EXPECT_EQ(r.at(0x14), (FrameRule{B::Sp, 16, false, true, 16}));
  EXPECT_EQ(r.at(0x15), (FrameRule{B::Sp, 8, true, false, 0}));
}

TEST(UnwindRecipes, SavedRegistersAndCodeAfterAReturn) {
  const std::uint8_t code[] = {
      0x53,                          // 0: push rbx
      0x48, 0x83, 0xec, 0x18,        // 1: sub rsp, 24
      0x85, 0xff,                    // 5: test edi, edi
      0x74, 0x06,                    // 7: je f
      0x48, 0x83, 0xc4, 0x18,        // 9: add rsp, 24
      0x5b,                          // d: pop rbx
      0xc3,                          // e: ret
      0xe8, 0x00, 0x00, 0x00, 0x00,  // f: call 14 (the body's frame, reached by the branch)
      0xeb, 0xf3,                    // 14: jmp 9
  };
  Decoder d;
  const auto r = computeRecipes(d.decode(code, 0), d.frameEffects(code, 0));
  EXPECT_EQ(r.at(0x5).cfa, 40);
  EXPECT_EQ(r.at(0xd).cfa, 16);
  EXPECT_EQ(r.at(0xe).cfa, 8);
  EXPECT_EQ(r.at(0xf).cfa, 40);
  EXPECT_EQ(r.at(0x14).cfa, 40);
  for (std::uint64_t a : {0x0, 0x5, 0xe, 0xf}) EXPECT_EQ(r.at(a).base, FrameRule::Base::Sp) << a;
}

TEST(Decoder, CallBeforeAReturnAddress) {
  Decoder d;
  const std::uint8_t direct[] = {0x90, 0x90, 0xe8, 0x10, 0x00, 0x00, 0x00};  // nop; nop; call +0x10
  EXPECT_EQ(d.callBefore(direct, 0x107), std::optional<std::uint64_t>(0x102));
  const std::uint8_t indirect[] = {0x48, 0x89, 0xc7, 0x41, 0xff, 0xd4};  // mov rdi, rax; call r12
  EXPECT_EQ(d.callBefore(indirect, 0x206), std::optional<std::uint64_t>(0x203));
  const std::uint8_t none[] = {0x48, 0x89, 0xc7};  // mov rdi, rax
  EXPECT_EQ(d.callBefore(none, 0x303), std::nullopt);
}

// Code that nothing reaches after a return and padding, at a 16-byte boundary, starts a
// function (hand-written assembler called through pointers); code reached by a jump does not.
// Appends bytes one by one (vector::insert of a list trips GCC 12's -Warray-bounds).
void append(std::vector<std::uint8_t>& code, std::initializer_list<std::uint8_t> bytes) {
  for (auto b : bytes) code.push_back(b);
}

TEST(Decoder, StartsAfterPadding) {
  std::vector<std::uint8_t> code{0xeb, 0x2e};  // 0: jmp 30
  auto at = [&](std::size_t address, std::uint8_t pad, std::initializer_list<std::uint8_t> bytes) {
    code.resize(address, pad);
    append(code, bytes);
  };
  at(0x10, 0xcc, {0x31, 0xc0, 0x75, 0x0c, 0xc3});  // 10: xor eax, eax; jne 20; ret  (after int3 padding)
  at(0x20, 0x90, {0x31, 0xc0, 0xc3});              // 20: reached from 12
  at(0x30, 0x90, {0x31, 0xc0, 0xc3});              // 30: reached from the entry
  at(0x40, 0x90, {0x31, 0xc0, 0xeb, 0xfc});        // 40: xor eax, eax; jmp 40 (its own loop)
  Decoder d;
  EXPECT_EQ(d.decode(code, 0x1000).startsAfterPadding(), (std::vector<std::uint64_t>{0x1010, 0x1040}));
}

// A block reached only through a computed jump (its address taken by a RIP-relative lea, as in
// GMP's __gmpn_mul_basecase) is no function start, and its recipe is the body's frame. Before:
// a start after the padding, with the frame of a function's entry, which truncated every path.
TEST(UnwindRecipes, CodeReachedThroughAComputedJump) {
  std::vector<std::uint8_t> code{
      0x53,                                      // 0: push rbx
      0x4c, 0x8d, 0x35, 0x08, 0x00, 0x00, 0x00,  // 1: lea r14, [rip + 8] (= 10)
      0x41, 0xff, 0xe6,                          // 8: jmp r14
  };
  code.resize(0x10, 0x90);
  append(code, {0x31, 0xc0, 0x5b, 0xc3});  // 10: xor eax, eax; pop rbx; ret
  Decoder d;
  const auto c = d.decode(code, 0);
  EXPECT_EQ(c.codeAddresses, (std::vector<std::uint64_t>{0x10}));
  EXPECT_TRUE(c.startsAfterPadding().empty());
  const auto r = computeRecipes(c, d.frameEffects(code, 0));
  EXPECT_EQ(r.at(0x10).cfa, 16);
  EXPECT_EQ(r.at(0x13).cfa, 8);
}

TEST(Decoder, NoReturnNames) {
  for (const char* n :
       {"abort", "exit@GLIBC_2.2.5", "__stack_chk_fail", "__cxa_throw", "_Unwind_Resume",
        "_ZSt20__throw_length_errorPKc", "__ubsan_handle_builtin_unreachable_abort", "__asan_report_load8"})
    EXPECT_TRUE(noReturnName(n)) << n;
  for (const char* n : {"malloc", "exit_handler", "__asan_report_load8_noabort",
                        "_ZSt4endlIcSt11char_traitsIcEERSt13basic_ostreamIT_T0_ES6_"})
    EXPECT_FALSE(noReturnName(n)) << n;
}

// ---------------------------------------------------------------------------------------------
// A module's structure and its cache

ModuleStructure sampleStructure() {
  std::vector<LoopScope> loops{{0x1010, kNone, 0, 0, 10, false}, {0x1020, 0, 1, 1, 20, true}};
  return ModuleStructure({0x1000, 0x1100}, {{0x1000, 0x2000}}, loops, {"a.c", "b.h"},
                         {{0x1010, 0x1020, 0}, {0x1020, 0x1040, 1}, {0x1040, 0x1050, 0}});
}

TEST(ModuleStructure, LookupsAndByteForm) {
  const auto s = sampleStructure();
  EXPECT_EQ(s.functionStart(0x1050), 0x1000u);
  EXPECT_EQ(s.functionStart(0x1100), 0x1100u);
  EXPECT_EQ(s.functionStart(0x2000), std::nullopt);
  EXPECT_EQ(s.innermostLoop(0x1008), kNone);
  EXPECT_EQ(s.innermostLoop(0x1010), 0u);
  EXPECT_EQ(s.innermostLoop(0x1030), 1u);
  EXPECT_EQ(s.innermostLoop(0x104f), 0u);
  EXPECT_EQ(s.innermostLoop(0x1050), kNone);
  const auto bytes = s.encode();
  EXPECT_EQ(ModuleStructure::decode(bytes), s);
  // Every truncation and every single-byte change is rejected or decodes to a valid structure;
  // none crashes.
  for (std::size_t n = 0; n < bytes.size(); ++n)
    EXPECT_THROW(ModuleStructure::decode(std::span(bytes).first(n)), std::runtime_error) << n;
  for (std::size_t i = 0; i < bytes.size(); ++i) {
    auto damaged = bytes;
    damaged[i] ^= std::byte{0x5a};
    try {
      (void)ModuleStructure::decode(damaged);
    } catch (const std::runtime_error&) {
    }
  }
}

TEST(StructureCache, StoresLoadsAndRejectsDamagedEntries) {
  csp::test::TempDir dir("structure-cache");
  const StructureCache cache(dir.path() / "cache");
  const CacheIdentity id{"0123abcd", "build-id 0123abcd; DWARF in the file", "/bin/sample"};
  std::string problem;
  EXPECT_FALSE(cache.load(id, problem).has_value());
  EXPECT_EQ(problem, "");  // absent: not a problem
  ASSERT_TRUE(cache.store(id, sampleStructure(), problem)) << problem;
  const auto path = cache.entryPath(id);
  EXPECT_EQ(path.filename().string(), fmt::format("0123abcd.v{}.cspstruct", kCacheVersion));
  auto loaded = cache.load(id, problem);
  ASSERT_TRUE(loaded.has_value()) << problem;
  EXPECT_EQ(*loaded, sampleStructure());
  // No temporary file is left behind.
  for (const auto& e : std::filesystem::directory_iterator(dir.path() / "cache"))
    EXPECT_EQ(e.path().string().find(".tmp."), std::string::npos) << e.path();

  // Another file's entry under the same name: not used.
  const CacheIdentity other{id.key, "build-id 0123abcd; no DWARF", id.module};
  EXPECT_FALSE(cache.load(other, problem).has_value());
  EXPECT_NE(problem.find("belongs to another file"), std::string::npos) << problem;

  std::string bytes;
  {
    std::ifstream in(path, std::ios::binary);
    bytes.assign(std::istreambuf_iterator<char>(in), {});
  }
  // The entry ends with the one checksum of CSP's files over the rest of it.
  ASSERT_GT(bytes.size(), 8u);
  std::uint64_t stored = 0;
  std::memcpy(&stored, bytes.data() + bytes.size() - 8, 8);
  EXPECT_EQ(stored, csp::storage::checksum64(std::as_bytes(std::span(bytes).first(bytes.size() - 8))));
  auto rewrite = [&](const std::string& content) {
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out << content;
  };
  for (std::size_t cut : {std::size_t{0}, std::size_t{5}, bytes.size() / 2, bytes.size() - 1}) {
    rewrite(bytes.substr(0, cut));
    EXPECT_FALSE(cache.load(id, problem).has_value()) << cut;
    EXPECT_NE(problem.find("is damaged"), std::string::npos) << problem;
  }
  for (std::size_t at = 0; at < bytes.size(); ++at) {
    auto flipped = bytes;
    flipped[at] = static_cast<char>(flipped[at] ^ 0x10);
    rewrite(flipped);
    EXPECT_FALSE(cache.load(id, problem).has_value()) << at;
    EXPECT_FALSE(problem.empty()) << at;
  }
  // A symbolic link in place of the entry is not followed.
  std::filesystem::remove(path);
  std::filesystem::create_symlink("/etc/hostname", path);
  EXPECT_FALSE(cache.load(id, problem).has_value());
  EXPECT_FALSE(problem.empty());
  std::filesystem::remove(path);
  rewrite(bytes);
  EXPECT_TRUE(cache.load(id, problem).has_value()) << problem;
}

// The lock of an entry excludes other holders, also across the removal of its file by the
// previous holder, and leaves no .lock file behind.
TEST(StructureCache, LocksExcludeEachOtherAndLeaveNoFiles) {
  csp::test::TempDir dir("structure-lock");
  const StructureCache cache(dir.path() / "cache");
  const CacheIdentity id{"0123abcd", "build-id 0123abcd", "/bin/sample"};
  auto never = [] { return false; };
  auto lockFiles = [&] {
    std::size_t n = 0;
    for (const auto& e : std::filesystem::directory_iterator(dir.path() / "cache"))
      n += e.path().extension() == ".lock";
    return n;
  };
  auto first = cache.lock(id, 0, never);
  ASSERT_TRUE(first.held());
  EXPECT_FALSE(cache.lock(id, 0.1, never).held());
  std::atomic<bool> waiting{false};
  StructureCache::Lock second;
  std::thread waiter([&] {
    waiting = true;
    second = cache.lock(id, 60, never);
  });
  while (!waiting) std::this_thread::yield();
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  first = {};  // released: its file is removed
  waiter.join();
  ASSERT_TRUE(second.held());
  EXPECT_FALSE(cache.lock(id, 0.1, never).held()) << "two holders of one entry's lock";
  second = {};
  EXPECT_EQ(lockFiles(), 0u);
  // A waiter that sees the entry appear stops waiting without a lock.
  auto third = cache.lock(id, 0, never);
  ASSERT_TRUE(third.held());
  EXPECT_FALSE(cache.lock(id, 60, [] { return true; }).held());
  third = {};
  EXPECT_EQ(lockFiles(), 0u);
}

// ---------------------------------------------------------------------------------------------
// Attribution of the loop test program, address by address

const std::string kLoopsSource = std::string(CSP_SOURCE_DIR) + "/tests/apps/loops.cpp";

std::uint32_t markerLine(const std::string& marker) {
  std::ifstream in(kLoopsSource);
  std::string line;
  for (std::uint32_t n = 1; std::getline(in, line); ++n)
    if (line.find("// " + marker) != std::string::npos) return n;
  ADD_FAILURE() << "no marker " << marker << " in " << kLoopsSource;
  return 0;
}

// [begin, end) of the function symbols whose demangled name starts with `prefix` (clones too).
std::vector<std::pair<std::uint64_t, std::uint64_t>> symbolRanges(const std::string& binary,
                                                                  const std::string& prefix) {
  FILE* p = ::popen(("nm -C -S --defined-only " + binary).c_str(), "r");
  std::array<char, 2048> buf;
  std::vector<std::pair<std::uint64_t, std::uint64_t>> out;
  while (std::fgets(buf.data(), buf.size(), p)) {
    std::istringstream line(buf.data());
    std::string addr, size, type, name;
    line >> addr >> size >> type;
    std::getline(line, name);
    if ((type == "t" || type == "T") && name.size() > 1 && name.substr(1).rfind(prefix, 0) == 0)
      out.emplace_back(std::stoull(addr, nullptr, 16), std::stoull(addr, nullptr, 16) + std::stoull(size, nullptr, 16));
  }
  ::pclose(p);
  return out;
}

class LoopAttribution : public ::testing::TestWithParam<std::string> {
 protected:
  std::string binary() const { return std::string(CSP_LOOP_APPS_DIR) + "/csp-app-loops-" + GetParam(); }

  // The loops (lines, outermost first) and the inlined procedures of every address's chain in
  // the functions named `prefix`.
  struct Seen {
    std::vector<std::uint32_t> loops;
    std::vector<std::string> path;     // "loop:LINE", "inlined@LINE"
    std::vector<std::string> inlined;  // names of the inlined procedures
    std::uint32_t stmtLine = 0;
  };
  std::vector<Seen> chains(const std::string& prefix) {
    const auto ranges = symbolRanges(binary(), prefix);
    EXPECT_FALSE(ranges.empty()) << prefix << " not in " << binary();
    std::vector<Seen> out;
    for (const auto& [begin, end] : ranges)
      for (std::uint64_t a = begin; a < end; ++a) {
        const auto chain = attributor.attribute(module, a, true);
        Seen s;
        EXPECT_EQ(chain.front().kind, ScopeKind::ProcFrame);
        for (std::size_t i = 1; i + 1 < chain.size(); ++i) {
          if (chain[i].kind == ScopeKind::Loop) {
            s.loops.push_back(chain[i].line);
            s.path.push_back(fmt::format("loop:{}", chain[i].line));
            EXPECT_NE(strings.text(chain[i].file).find("tests/apps/loops.cpp"), std::string::npos)
                << strings.text(chain[i].file);
          } else {
            s.path.push_back(fmt::format("inlined@{}", chain[i].line));
            s.inlined.push_back(strings.text(chain[i].name));
          }
        }
        s.stmtLine = chain.back().line;
        out.push_back(std::move(s));
      }
    return out;
  }

  StringTable strings;
  Attributor attributor{strings, {{}, true, "off", {}}};
  LoadModule module{binary(), {}, 0, 0, 0};
};

#ifdef CSP_CLANG_LOOPS_APP
// Code compiled by clang as it compiles by default: DWARF 5 and no .debug_aranges, through which
// libdw finds the unit of an address (LLVM-based compilers write them only when asked). Before,
// nothing of such a program had a file or a line: every loop was known by its address. Its
// `main` holds the triple nest inlined (clang ignores noipa); every address of main is in main's
// file, and the innermost statement lies in the triple loop nest, inside the inlined `triple`.
// (The outermost loop, LOOP-I, is known by its header's address here: in clang's code its header
// instruction has line 0 and its other instructions belong to the inlined `triple`, deeper than
// the level the loop is placed at, from which its line would come; gcc's build names it by line.)
TEST(ClangDwarf, UnitsWithoutArangesGiveFilesLinesInlinedCodeAndLoops) {
  const std::string binary = CSP_CLANG_LOOPS_APP;
  FILE* p = ::popen(("readelf -S " + binary + " | grep -c debug_aranges").c_str(), "r");
  std::array<char, 64> buf{};
  ASSERT_NE(std::fgets(buf.data(), buf.size(), p), nullptr);
  ::pclose(p);
  ASSERT_EQ(std::string(buf.data()), "0\n") << "the test needs a binary without .debug_aranges";
  StringTable strings;
  Attributor attributor{strings, {{}, true, "off", {}}};
  const LoadModule module{binary, {}, 0, 0, 0};
  const auto j = markerLine("LOOP-J"), k = markerLine("LOOP-K");
  const auto stmt = markerLine("STMT-K");
  const auto ranges = symbolRanges(binary, "main");
  ASSERT_EQ(ranges.size(), 1u);
  std::size_t inStatement = 0;
  for (std::uint64_t a = ranges[0].first; a < ranges[0].second; ++a) {
    const auto chain = attributor.attribute(module, a, true);
    ASSERT_EQ(chain.front().kind, ScopeKind::ProcFrame);
    EXPECT_EQ(strings.text(chain.front().name), "main");
    EXPECT_EQ(strings.text(chain.front().file), kLoopsSource) << fmt::format("0x{:x}", a);
    if (chain.back().line != stmt) continue;
    std::vector<std::uint32_t> loops;
    bool inTriple = false;
    for (const auto& s : chain) {
      if (s.kind == ScopeKind::Loop) loops.push_back(s.line);
      if (s.kind == ScopeKind::Alien && strings.text(s.name).find("triple") != std::string::npos) inTriple = true;
    }
    EXPECT_TRUE(inTriple) << fmt::format("0x{:x}", a);
    EXPECT_GE(loops.size(), 3u);
    EXPECT_TRUE(std::find(loops.begin(), loops.end(), k) != loops.end()) << fmt::format("0x{:x}", a);
    EXPECT_TRUE(std::find(loops.begin(), loops.end(), j) != loops.end()) << fmt::format("0x{:x}", a);
    EXPECT_EQ(strings.text(chain.back().file), kLoopsSource);
    ++inStatement;
  }
  EXPECT_GT(inStatement, 0u);
}
#endif

TEST_P(LoopAttribution, TripleNest) {
  const auto i = markerLine("LOOP-I"), j = markerLine("LOOP-J"), k = markerLine("LOOP-K");
  std::size_t inK = 0;
  for (const auto& s : chains("(anonymous namespace)::triple")) {
    // Loops appear only in their nesting order, and only these three.
    const std::vector<std::uint32_t> full{i, j, k};
    ASSERT_LE(s.loops.size(), 3u);
    EXPECT_TRUE(std::equal(s.loops.begin(), s.loops.end(), full.begin())) << fmt::format("{}", fmt::join(s.loops, " "));
    // The body statement's code lies in all three loops (copies outside a machine loop, as
    // unrolling leaves them, lie in the loops that enclose them: a prefix, checked above).
    inK += s.loops == full && s.stmtLine == markerLine("STMT-K");
  }
  EXPECT_GT(inK, 0u);
}

TEST_P(LoopAttribution, LoopInsideInlinedProcedureInsideLoop) {
  const auto reps = markerLine("LOOP-REPS"), inner = markerLine("LOOP-INLINED"), call = markerLine("CALL-SMOOTH");
  std::size_t inInner = 0;
  const std::vector<std::string> expected{fmt::format("loop:{}", reps), fmt::format("inlined@{}", call),
                                          fmt::format("loop:{}", inner)};
  for (const auto& s : chains("(anonymous namespace)::repeatSmooth")) {
    if (std::find(s.loops.begin(), s.loops.end(), inner) != s.loops.end()) {
      EXPECT_EQ(s.path, expected);
      ASSERT_EQ(s.inlined.size(), 1u);
      EXPECT_NE(s.inlined[0].find("smooth"), std::string::npos) << s.inlined[0];
    }
    inInner += s.path == expected && s.stmtLine == markerLine("STMT-INLINED");
    for (auto l : s.loops) EXPECT_TRUE(l == reps || l == inner) << l;
  }
  EXPECT_GT(inInner, 0u);
}

TEST_P(LoopAttribution, UnrolledOrVectorizedLoop) {
  const auto line = markerLine("LOOP-SAXPY");
  std::size_t inLoop = 0;
  for (const auto& s : chains("(anonymous namespace)::saxpy")) {
    // Versions of the loop (vector, scalar remainder, the aliasing fallback) are one scope.
    for (auto l : s.loops) EXPECT_EQ(l, line);
    EXPECT_LE(s.loops.size(), 1u);
    // Unrolling leaves copies of the body outside the machine loop: some of the statement's code
    // is in the loop, not necessarily all.
    inLoop += !s.loops.empty() && s.stmtLine == markerLine("STMT-SAXPY");
  }
  EXPECT_GT(inLoop, 0u);
}

TEST_P(LoopAttribution, LoopWithEarlyExit) {
  const auto line = markerLine("LOOP-SEARCH");
  std::size_t inLoop = 0;
  for (const auto& s : chains("(anonymous namespace)::findFirst")) {
    EXPECT_LE(s.loops.size(), 1u);
    for (auto l : s.loops) EXPECT_EQ(l, line);
    inLoop += !s.loops.empty() && s.stmtLine == markerLine("STMT-SEARCH");
  }
  EXPECT_GT(inLoop, 0u);
}

INSTANTIATE_TEST_SUITE_P(OptimizationLevels, LoopAttribution, ::testing::Values("O2", "O3"));

// A stripped program without unwind tables: no symbol and no FDE covers its functions, but
// main calls them directly, so each is one procedure named after its start, not one per address.
TEST(FunctionBounds, DirectCallTargetsGroupStrippedCodePerFunction) {
  const std::string binary = std::string(CSP_LOOP_APPS_DIR) + "/csp-app-loops-nounwind";
  const auto ranges = symbolRanges(binary + ".full", "(anonymous namespace)::findFirst");
  ASSERT_EQ(ranges.size(), 1u);
  const auto [begin, end] = ranges[0];
  for (const bool loops : {true, false}) {
    StringTable strings;
    AttributionOptions options;
    options.loops = loops;
    options.structureCache = "off";
    Attributor attributor(strings, options);
    const LoadModule module{binary, {}, 0, 0, 0};
    std::set<std::string> names;
    for (std::uint64_t a = begin; a < end; ++a)
      names.insert(strings.text(attributor.attribute(module, a, true).front().name));
    if (loops) {
      EXPECT_EQ(names, (std::set<std::string>{fmt::format("func@0x{:x} in csp-app-loops-nounwind", begin)}));
      EXPECT_EQ(attributor.stats().byFunctionBounds, end - begin);
    } else {
      EXPECT_EQ(names.size(), end - begin);  // without the analysis: one procedure per address
    }
  }
}

TEST(LoopAttributionOff, NoLoopsWhenTurnedOff) {
  StringTable strings;
  Attributor attributor(strings, {{}, false, "", {}});
  const std::string binary = std::string(CSP_LOOP_APPS_DIR) + "/csp-app-loops-O2";
  const LoadModule module{binary, {}, 0, 0, 0};
  for (const auto& [begin, end] : symbolRanges(binary, "(anonymous namespace)::triple"))
    for (std::uint64_t a = begin; a < end; ++a)
      for (const auto& k : attributor.attribute(module, a, true)) EXPECT_NE(k.kind, ScopeKind::Loop);
  EXPECT_EQ(attributor.stats().modulesAnalysed, 0u);
}

}  // namespace
