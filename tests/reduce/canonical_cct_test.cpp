#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <random>
#include <thread>

#include "csp/reduce/canonical_cct.hpp"
#include "csp/reduce/projection.hpp"
#include "csp/synth/json_spec.hpp"
#include "csp/synth/synthetic.hpp"

using namespace csp;
using namespace csp::reduce;

namespace {

struct Reduced {
  StringTable strings;
  FinalCct cct;
  std::vector<std::vector<StmtValue>> values;  // per profile, in final ids
};

// Pass 1 inserts into a local CCT, pass 2 maps onto the final one: the pipeline's two passes.
void reduce(Reduced& out, const std::vector<ThreadProfile>& profiles) {
  Attributor attributor(out.strings);
  LocalCct local(out.strings);
  for (const auto& p : profiles)
    projectProfile(p, out.strings, attributor,
                   [&](std::uint32_t parent, const ScopeKey& k) { return local.child(parent, k); });
  out.cct = FinalCct::fromLocal(local, out.strings);
  for (const auto& p : profiles) {
    out.values.push_back(projectProfile(p, out.strings, attributor, [&](std::uint32_t parent, const ScopeKey& k) {
      const auto id = out.cct.find(parent, k);
      EXPECT_NE(id, kNoIndex);
      return id;
    }));
  }
}

// Synthetic profiles of ranks x threads (synth::makeSyntheticProfile).
std::vector<ThreadProfile> syntheticProfiles(const synth::SyntheticOptions& o) {
  std::vector<ThreadProfile> profiles;
  for (std::uint32_t r = 0; r < o.ranks; ++r)
    for (std::uint32_t t = 0; t < o.threads; ++t) profiles.push_back(synth::makeSyntheticProfile(o, r, t));
  return profiles;
}

std::string pathOf(const Reduced& r, std::uint32_t id) {
  std::string s;
  for (; id != 0; id = r.cct.node(id).parent)
    s = describe(r.cct.node(id).key, r.strings) + (s.empty() ? "" : " / ") + s;
  return s;
}

TEST(CanonicalCct, Figure75ExclusiveAndInclusive) {
  Reduced r;
  reduce(r, synth::profilesFromJsonFile(std::string(CSP_TEST_DATA_DIR) + "/fig75.json"));
  ASSERT_EQ(r.cct.size(), 11u);  // root main loop10 loop11 stmt12 loop13 stmt14 stmt15 cs16 work stmt3
  ValueScratch scratch(r.cct.size(), {false});
  const ThreadValues v = scratch.compute(r.cct, r.values[0]);
  std::map<std::string, std::pair<std::uint64_t, std::uint64_t>> byPath;
  for (const ThreadValue& t : v.rows) byPath[pathOf(r, t.node)] = {t.exclusive, t.inclusive};
  using P = std::pair<std::uint64_t, std::uint64_t>;
  const std::string main = "procedure main (fig75) main.c:1";
  EXPECT_EQ(byPath[""], P(0, 111));  // root: the thread's total
  EXPECT_EQ(byPath[main], P(11, 111));
  EXPECT_EQ(byPath[main + " / loop main.c:10"], P(0, 111));
  EXPECT_EQ(byPath[main + " / loop main.c:10 / loop main.c:11"], P(1, 111));
  EXPECT_EQ(byPath[main + " / loop main.c:10 / loop main.c:11 / statement main.c:12"], P(1, 1));
  EXPECT_EQ(byPath[main + " / loop main.c:10 / loop main.c:11 / loop main.c:13"], P(10, 110));
  EXPECT_EQ(byPath[main + " / loop main.c:10 / loop main.c:11 / loop main.c:13 / statement main.c:14"], P(5, 5));
  EXPECT_EQ(byPath[main + " / loop main.c:10 / loop main.c:11 / loop main.c:13 / call site main.c:16"], P(0, 100));
  EXPECT_EQ(byPath[main + " / loop main.c:10 / loop main.c:11 / loop main.c:13 / call site main.c:16 / procedure work "
                          "(fig75) work.c:1"],
            P(100, 100));
  EXPECT_EQ(v.size(), 11u);
  // Thread 2 doubles every count.
  const ThreadValues w = scratch.compute(r.cct, r.values[1]);
  ASSERT_EQ(w.size(), v.size());
  for (std::size_t i = 0; i < v.size(); ++i) {
    EXPECT_EQ(w.rows[i].node, v.rows[i].node);
    EXPECT_EQ(w.rows[i].exclusive, 2 * v.rows[i].exclusive);
    EXPECT_EQ(w.rows[i].inclusive, 2 * v.rows[i].inclusive);
  }
  // With a real-valued metric among the metrics the passes test each metric's type (the other
  // form adds integers only): the count metric's values are the same either way.
  ValueScratch mixed(r.cct.size(), {false, true});
  const ThreadValues x = mixed.compute(r.cct, r.values[0]);
  EXPECT_EQ(x.rows, v.rows);
}

// The values by profile encoded while the values are collected (the values pass with a database
// to write) are the blocks the same values give from their rows, for every metric count the
// collecting loop is unrolled for and one it is not; the values themselves are unchanged. (That
// the encoder writes the general writer's bytes is ProfileBlockCodec's test.)
TEST(CanonicalCct, ValuesEncodedByProfileWhileCollected) {
  synth::SyntheticOptions o;
  o.ranks = 3;
  o.threads = 2;
  o.nodes = 3000;
  Reduced r;
  reduce(r, syntheticProfiles(o));
  for (std::size_t metrics : {1, 2, 3, 4, 5}) {
    std::vector<storage::ValueScale> scales;
    for (std::size_t m = 0; m < metrics; ++m) scales.emplace_back(m % 2 == 0 ? 1 : 1000);
    storage::ProfileBlockEncoder encoder(scales), fromRows(scales);
    ValueScratch scratch(r.cct.size(), std::vector<bool>(metrics, false));
    for (std::size_t p = 0; p < r.values.size(); ++p) {
      auto stmt = r.values[p];
      for (std::size_t k = 0; k < stmt.size(); ++k) {  // spread over the metrics, some scaled values not whole
        stmt[k].metric = static_cast<std::uint16_t>((stmt[k].node + k) % metrics);
        stmt[k].value = stmt[k].value * 1000 + (k % 7 == 0 ? 3 : 0);
      }
      const ThreadValues plain = scratch.compute(r.cct, stmt);
      const ThreadValues encoded = scratch.compute(r.cct, stmt, &encoder);
      EXPECT_FALSE(plain.byProfile.made);
      ASSERT_TRUE(encoded.byProfile.made);
      EXPECT_EQ(encoded.rows, plain.rows);
      auto encoding = fromRows.begin();
      std::vector<std::uint64_t> e(metrics), i(metrics);
      std::uint64_t nonZero = 0;
      for (std::size_t k = 0, end = 0; k < plain.size(); k = end) {
        std::fill(e.begin(), e.end(), 0);
        std::fill(i.begin(), i.end(), 0);
        for (end = k; end < plain.size() && plain.rows[end].node == plain.rows[k].node; ++end) {
          const ThreadValue& t = plain.rows[end];
          e[t.metric] = t.exclusive;
          i[t.metric] = t.inclusive;
          nonZero += (t.exclusive != 0 ? 1 : 0) + (t.inclusive != 0 ? 1 : 0);
        }
        encoding.addNode(plain.rows[k].node, e.data(), i.data());
      }
      const storage::ProfileBlocks expected = fromRows.finish(encoding);
      EXPECT_EQ(encoded.byProfile.bytes, expected.bytes) << metrics << " metrics, profile " << p;
      ASSERT_EQ(encoded.byProfile.blocks.size(), expected.blocks.size()) << metrics << " metrics, profile " << p;
      for (std::size_t b = 0; b < expected.blocks.size(); ++b) {
        EXPECT_EQ(encoded.byProfile.blocks[b].firstNode, expected.blocks[b].firstNode);
        EXPECT_EQ(encoded.byProfile.blocks[b].end, expected.blocks[b].end);
      }
      EXPECT_EQ(encoded.byProfile.values, nonZero);
      EXPECT_GT(expected.blocks.size(), 1u);
    }
  }
  // An encoder for other metrics than the scratch's is a caller's error.
  storage::ProfileBlockEncoder three(std::vector<storage::ValueScale>(3));
  ValueScratch two(r.cct.size(), {false, false});
  EXPECT_THROW(two.compute(r.cct, r.values[0], &three), std::logic_error);
}

TEST(CanonicalCct, RecursionCountsEachSampleOncePerAncestor) {
  const char* spec = R"({"metrics": [{"name": "t"}], "threads": [{"id": {"rank": 0}, "samples": [
    {"path": [{"proc": "f"}, {"callsite": "f.c:3"}, {"proc": "f"}, {"callsite": "f.c:3"}, {"proc": "f"}, {"stmt": "f.c:2"}],
     "counts": {"t": 4}},
    {"path": [{"proc": "f"}, {"stmt": "f.c:2"}], "counts": {"t": 1}}]}]})";
  Reduced r;
  reduce(r, synth::profilesFromJsonText(spec, "rec.json"));
  ValueScratch scratch(r.cct.size(), {false});
  const ThreadValues v = scratch.compute(r.cct, r.values[0]);
  std::map<std::string, std::pair<std::uint64_t, std::uint64_t>> byPath;
  for (const ThreadValue& t : v.rows) byPath[pathOf(r, t.node)] = {t.exclusive, t.inclusive};
  using P = std::pair<std::uint64_t, std::uint64_t>;
  const std::string f = "procedure f (app)";
  EXPECT_EQ(byPath[f], P(1, 5));
  EXPECT_EQ(byPath[f + " / call site f.c:3 / " + f], P(0, 4));
  EXPECT_EQ(byPath[f + " / call site f.c:3 / " + f + " / call site f.c:3 / " + f], P(4, 4));
}

TEST(CanonicalCct, FinalIdsDoNotDependOnOrderOrSplit) {
  synth::SyntheticOptions o;
  o.ranks = 12;
  o.threads = 2;
  o.nodes = 800;
  o.groups = 3;
  const std::vector<ThreadProfile> profiles = syntheticProfiles(o);

  auto finalBytes = [](std::vector<ThreadProfile> ps, std::size_t parts) {
    StringTable strings;
    Attributor attributor(strings);
    std::vector<std::unique_ptr<LocalCct>> locals;
    for (std::size_t i = 0; i < parts; ++i) locals.push_back(std::make_unique<LocalCct>(strings));
    for (std::size_t i = 0; i < ps.size(); ++i) {
      auto& local = *locals[i % parts];
      projectProfile(ps[i], strings, attributor,
                     [&](std::uint32_t parent, const ScopeKey& k) { return local.child(parent, k); });
    }
    // Merge through the serialized form, as processes do.
    for (std::size_t i = 1; i < parts; ++i) locals[0]->merge(locals[i]->serialize());
    const FinalCct final = FinalCct::fromLocal(*locals[0], strings);
    // Re-serialized through a fresh string table so that interning order cannot leak in.
    StringTable fresh;
    return FinalCct::deserialize(final.serialize(strings), fresh).serialize(fresh);
  };
  const auto reference = finalBytes(profiles, 1);
  std::mt19937 rng(5);
  auto shuffled = profiles;
  std::shuffle(shuffled.begin(), shuffled.end(), rng);
  EXPECT_EQ(finalBytes(shuffled, 1), reference);
  EXPECT_EQ(finalBytes(shuffled, 3), reference);
  EXPECT_EQ(finalBytes(profiles, 4), reference);
}

TEST(CanonicalCct, ChildrenAreListedInIdOrderAndFindable) {
  Reduced r;
  reduce(r, synth::profilesFromJsonFile(std::string(CSP_TEST_DATA_DIR) + "/fig75.json"));
  std::size_t seen = 0;
  for (std::uint32_t id = 0; id < r.cct.size(); ++id) {
    auto kids = r.cct.children(id);
    EXPECT_TRUE(std::is_sorted(kids.begin(), kids.end()));
    for (auto k : kids) {
      EXPECT_EQ(r.cct.node(k).parent, id);
      EXPECT_EQ(r.cct.find(id, r.cct.node(k).key), k);
      ++seen;
    }
  }
  EXPECT_EQ(seen, r.cct.size() - 1);
  // An edge that is not in the tree: the same key under another parent, an unknown key.
  for (std::uint32_t id = 1; id < r.cct.size(); ++id) {
    const CctNode& n = r.cct.node(id);
    if (n.parent != 0) {
      EXPECT_NE(r.cct.find(0, n.key), id);
    }
    EXPECT_EQ(r.cct.find(n.parent, ScopeKey{n.key.kind, n.key.name, n.key.file, n.key.line + 100000, n.key.module}),
              kNoIndex);
  }
}

// The edge hash feeds open-addressing tables (FinalCct's, LocalCct's per-thread index): the low
// bits are the home slot and the high half the tag. Edges that differ in one field only, as a
// tree's siblings (lines, names) and its levels (parents) do, must still spread over the slots and
// get distinct tags: a weak mix of one field would pile them into a few slots.
TEST(CanonicalCct, EdgeHashSpreadsEveryFieldOverSlotsAndTags) {
  constexpr std::uint32_t kEdges = 1 << 16;
  constexpr std::size_t kSlots = std::size_t{1} << 18;  // as the tables: at most half full
  auto field = [](std::uint32_t which, std::uint32_t i) {
    ScopeKey key{ScopeKind::Stmt, 3, 5, 7, 11};
    std::uint32_t parent = 13;
    switch (which) {
      case 0:
        parent = i;
        break;
      case 1:
        key.name = i;
        break;
      case 2:
        key.file = i;
        break;
      case 3:
        key.line = i;
        break;
      case 4:
        key.module = i;
        break;
      default:
        key.line = i & 0xFF, key.name = i >> 8, key.kind = static_cast<ScopeKind>(1 + i % 5);
        break;
    }
    return FinalCct::edgeHash(parent, key);
  };
  for (std::uint32_t which = 0; which <= 5; ++which) {
    std::vector<std::uint32_t> load(kSlots, 0);
    std::vector<std::uint32_t> tags;
    for (std::uint32_t i = 0; i < kEdges; ++i) {
      const std::size_t h = field(which, i);
      ++load[h & (kSlots - 1)];
      tags.push_back(static_cast<std::uint32_t>(std::uint64_t{h} >> 32));
    }
    // A uniform hash puts at most about 8 of 65,536 keys into one of 262,144 slots; a field that
    // reaches only some bits would put hundreds there.
    EXPECT_LE(*std::max_element(load.begin(), load.end()), 12u) << "field " << which;
    std::sort(tags.begin(), tags.end());
    const auto distinct = static_cast<std::size_t>(std::unique(tags.begin(), tags.end()) - tags.begin());
    EXPECT_GE(distinct, kEdges - 16) << "field " << which;  // 32-bit tags: about 0.5 collisions expected
  }
}

// Threads that intern the same texts concurrently, in their own orders and into two tables in
// turn (and tables made where destroyed ones were), get one id per text and table, and every id
// names its text.
TEST(StringTable, ThreadsAndTablesInTurnAgreeOnIds) {
  constexpr std::uint32_t kTexts = 3000, kThreads = 4;
  auto textOf = [](std::uint32_t i) { return "name-" + std::to_string(i); };
  for (int round = 0; round < 2; ++round) {  // the second round's tables may reuse the first's memory
    StringTable a, b;
    std::vector<std::vector<std::uint32_t>> idsA(kThreads, std::vector<std::uint32_t>(kTexts)), idsB = idsA;
    std::vector<std::thread> threads;
    for (std::uint32_t t = 0; t < kThreads; ++t)
      threads.emplace_back([&, t] {
        for (int pass = 0; pass < 2; ++pass)
          for (std::uint32_t k = 0; k < kTexts; ++k) {
            const std::uint32_t i = (k * 7919 + t * 104729) % kTexts;
            const auto idA = a.intern(textOf(i));
            const auto idB = b.intern(textOf(kTexts - 1 - i));
            if (pass == 0) idsA[t][i] = idA, idsB[t][kTexts - 1 - i] = idB;
            if (pass == 1 && (idsA[t][i] != idA || idsB[t][kTexts - 1 - i] != idB)) idsA[t][i] = kNoIndex;
          }
      });
    for (auto& th : threads) th.join();
    ASSERT_EQ(a.size(), kTexts + 1);  // and ""
    ASSERT_EQ(b.size(), kTexts + 1);
    for (std::uint32_t i = 0; i < kTexts; ++i) {
      for (std::uint32_t t = 1; t < kThreads; ++t) {
        ASSERT_EQ(idsA[t][i], idsA[0][i]) << i;
        ASSERT_EQ(idsB[t][i], idsB[0][i]) << i;
      }
      ASSERT_EQ(a.text(idsA[0][i]), textOf(i));
      ASSERT_EQ(b.text(idsB[0][i]), textOf(i));
      ASSERT_EQ(a.intern(textOf(i)), idsA[0][i]);
    }
    EXPECT_EQ(a.intern(""), 0u);
  }
}

// Threads insert and look up the same edges concurrently, each through its own edge index,
// which grows several times (20,000 edges) and whose 32-bit tags must never stand for the edge
// itself: every lookup of an edge gives the one id it got, and every id names its own edge.
TEST(CanonicalCct, ConcurrentLookupsAgreeWithTheNodeList) {
  StringTable s;
  LocalCct local(s);
  constexpr std::uint32_t kEdges = 20000, kThreads = 4;
  const std::uint32_t file = s.intern("f.c");
  auto keyOf = [&](std::uint32_t e) { return ScopeKey{ScopeKind::Stmt, 0, file, e, 0}; };
  auto parentOf = [](std::uint32_t e) { return e % 7; };  // nodes 0-6 exist before any lookup
  for (std::uint32_t p = 1; p < 7; ++p) ASSERT_EQ(local.child(0, ScopeKey{ScopeKind::Stmt, 0, file, kEdges + p, 0}), p);
  std::vector<std::vector<std::uint32_t>> ids(kThreads, std::vector<std::uint32_t>(kEdges));
  std::vector<std::thread> threads;
  for (std::uint32_t t = 0; t < kThreads; ++t)
    threads.emplace_back([&, t] {
      for (int round = 0; round < 2; ++round)
        for (std::uint32_t k = 0; k < kEdges; ++k) {
          const std::uint32_t e = (k * 7919 + t * 104729) % kEdges;  // each thread its own order
          const auto id = local.child(parentOf(e), keyOf(e));
          if (round == 1 && ids[t][e] != id) ids[t][e] = kNoIndex;
          if (round == 0) ids[t][e] = id;
        }
    });
  for (auto& th : threads) th.join();
  ASSERT_EQ(local.size(), 7u + kEdges);
  for (std::uint32_t e = 0; e < kEdges; ++e) {
    for (std::uint32_t t = 1; t < kThreads; ++t) ASSERT_EQ(ids[t][e], ids[0][e]) << e;
    ASSERT_NE(ids[0][e], kNoIndex) << e;
    const CctNode n = local.node(ids[0][e]);
    ASSERT_EQ(n.parent, parentOf(e));
    ASSERT_EQ(n.key, keyOf(e));
  }
}

TEST(CanonicalCct, MalformedStructureBytesAreRejected) {
  StringTable s;
  LocalCct local(s);
  local.child(0, ScopeKey{ScopeKind::ProcFrame, s.intern("main"), 0, 0, 0});
  auto bytes = local.serialize();
  for (std::size_t cut = 0; cut < bytes.size(); ++cut) {
    LocalCct other(s);
    EXPECT_THROW(other.merge(std::span(bytes).first(cut)), std::runtime_error) << cut;
  }
}

}  // namespace
