#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <map>

#include "csp/storage/profile_io.hpp"
#include "csp/synth/json_spec.hpp"
#include "csp/synth/synthetic.hpp"

namespace fs = std::filesystem;
using namespace csp;

namespace {

fs::path freshDir(const std::string& name) {
  auto p = fs::temp_directory_path() / ("csp-synth-" + std::to_string(::getpid()) + "-" + name);
  fs::remove_all(p);
  fs::create_directories(p);
  return p;
}

std::string fileBytes(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), {}};
}

TEST(Synthetic, SameSeedGivesByteIdenticalFilesWhateverTheThreadCount) {
  synth::SyntheticOptions o;
  o.ranks = 6;
  o.threads = 2;
  o.nodes = 400;
  o.regions = true;
  o.seed = 42;
  const auto a = freshDir("a"), b = freshDir("b");
  o.jobs = 1;
  const auto sa = synth::writeSynthetic(o, a);
  o.jobs = 3;
  const auto sb = synth::writeSynthetic(o, b);
  EXPECT_EQ(sa.profiles, 12u);
  EXPECT_EQ(sa.bytes, sb.bytes);
  const auto fa = storage::listProfiles(a), fb = storage::listProfiles(b);
  ASSERT_EQ(fa.size(), 12u);
  ASSERT_EQ(fb.size(), 12u);
  for (std::size_t i = 0; i < fa.size(); ++i) {
    EXPECT_EQ(std::filesystem::path(fa[i]).filename(), std::filesystem::path(fb[i]).filename());
    EXPECT_EQ(fileBytes(fa[i]), fileBytes(fb[i])) << fa[i];
  }
  fs::remove_all(a);
  fs::remove_all(b);
}

TEST(Synthetic, DifferentSeedsDiffer) {
  synth::SyntheticOptions o;
  o.nodes = 200;
  auto p1 = synth::makeSyntheticProfile(o, 1, 0);
  o.seed = 2;
  auto p2 = synth::makeSyntheticProfile(o, 1, 0);
  EXPECT_NE(p1, p2);
}

TEST(Synthetic, ShapeFollowsTheOptions) {
  synth::SyntheticOptions o;
  o.ranks = 8;
  o.nodes = 3000;
  o.depth = 10;
  o.metrics = 3;
  o.presence = 1.0;
  o.groups = 1;
  const ThreadProfile p = synth::makeSyntheticProfile(o, 3, 0);
  EXPECT_NO_THROW(storage::validateProfile(p, "synthetic"));
  EXPECT_EQ(p.metrics.size(), 3u);
  EXPECT_GT(p.cct.size(), 2900u);
  EXPECT_LE(p.cct.size(), 3001u);
  std::vector<std::uint32_t> depth(p.cct.size(), 0);
  std::uint32_t maxDepth = 0;
  for (std::size_t i = 1; i < p.cct.size(); ++i) maxDepth = std::max(maxDepth, depth[i] = depth[p.cct.parent[i]] + 1);
  EXPECT_LE(maxDepth, 10u);
  EXPECT_GE(maxDepth, 6u);
  EXPECT_EQ(p.identity.idTuple, (IdTuple{{IdKind::Node, 0}, {IdKind::Rank, 3}, {IdKind::Thread, 0}}));
}

TEST(Synthetic, ImbalanceGrowsWithRank) {
  synth::SyntheticOptions o;
  o.ranks = 16;
  o.nodes = 1000;
  o.imbalance = 1.0;  // the last rank does twice the work of rank 0
  o.presence = 1.0;
  auto total = [&](std::uint32_t rank) {
    const auto p = synth::makeSyntheticProfile(o, rank, 0);
    std::uint64_t t = 0;
    for (std::size_t v = 0; v < p.values.size(); ++v)
      if (p.values.metric[v] == 0) t += p.values.count[v];
    return static_cast<double>(t);
  };
  const double ratio = total(15) / total(0);
  EXPECT_GT(ratio, 1.8);
  EXPECT_LT(ratio, 2.2);
}

TEST(JsonSpec, ExactPathsCountsAndRegions) {
  const char* spec = R"({
    "executable": "fig75",
    "metrics": [{"name": "cycles", "unit": "cycles", "kind": "sampled", "period": 1}],
    "threads": [{
      "id": {"thread": 0, "rank": 1},
      "samples": [
        {"path": [{"proc": "main", "file": "main.c", "line": 1}, {"loop": "main.c:3"}, {"stmt": "main.c:4"}],
         "counts": {"cycles": 10}},
        {"path": [{"proc": "main", "file": "main.c", "line": 1}, {"callsite": "main.c:7"},
                  {"proc": "f", "module": "libf.so"}, {"alien": "g", "file": "f.c", "line": 3}, {"stmt": "g.h:2"}],
         "counts": {"cycles": 100}}
      ],
      "events": [{"t": 0, "enter": "solve"}, {"t": 10, "enter": "solve/iter#1"}, {"t": 30, "exit": "solve/iter#1"},
                 {"t": 50, "exit": "solve"}]
    }]
  })";
  auto profiles = synth::profilesFromJsonText(spec, "spec.json");
  ASSERT_EQ(profiles.size(), 1u);
  const auto& p = profiles[0];
  EXPECT_EQ(p.identity.idTuple, (IdTuple{{IdKind::Rank, 1}, {IdKind::Thread, 0}}));
  EXPECT_EQ(p.cct.size(), 8u);  // root, main, loop, stmt, callsite, f, alien, stmt
  EXPECT_EQ(p.stats.samples, 110u);
  std::map<ScopeKind, int> kinds;
  for (std::size_t i = 1; i < p.cct.size(); ++i) kinds[p.symbolicFrames[p.cct.frame[i]].scope]++;
  EXPECT_EQ(kinds[ScopeKind::ProcFrame], 2);
  EXPECT_EQ(kinds[ScopeKind::Loop], 1);
  EXPECT_EQ(kinds[ScopeKind::Alien], 1);
  EXPECT_EQ(kinds[ScopeKind::CallSite], 1);
  EXPECT_EQ(kinds[ScopeKind::Stmt], 2);
  const auto& f = p.symbolicFrames[p.cct.frame[5]];
  EXPECT_EQ(p.strings[f.name], "f");
  EXPECT_EQ(p.strings[f.module], "libf.so");
  const auto& main = p.symbolicFrames[p.cct.frame[1]];
  EXPECT_EQ(p.strings[main.module], "fig75");
  // Region times derived from the event log.
  const auto& r = p.regions;
  ASSERT_EQ(r.size(), 3u);
  EXPECT_EQ(r.names, (std::vector<std::string>{"solve", "iter"}));
  EXPECT_EQ(r.dynamicId[2], 1u);
  EXPECT_EQ(r.inclusiveNs[1], 50u);
  EXPECT_EQ(r.exclusiveNs[1], 30u);
  EXPECT_EQ(r.inclusiveNs[2], 20u);
  EXPECT_EQ(r.count[2], 1u);
  EXPECT_EQ(r.eventTimeNs.size(), 4u);
}

std::string specError(const std::string& text) {
  try {
    synth::profilesFromJsonText(text, "s.json");
  } catch (const synth::SpecError& e) {
    return e.what();
  }
  return "";
}

TEST(JsonSpec, DefectsAreNamedWithTheirPlace) {
  const std::string metrics = R"("metrics": [{"name": "t"}])";
  EXPECT_NE(specError("{").find("s.json: JSON:"), std::string::npos);
  EXPECT_EQ(specError(R"({"threads": []})"), "s.json: top level: missing \"metrics\"");
  EXPECT_EQ(
      specError("{" + metrics +
                R"(, "threads": [{"id": {"rank": 0}, "samples": [{"path": [{"proc": "m"}], "counts": {"t": 1}}]}]})"),
      "s.json: threads[0].samples[0].path: a sampled path must end with a statement (\"stmt\": \"file:line\")");
  EXPECT_EQ(
      specError(
          "{" + metrics +
          R"(, "threads": [{"id": {"rank": 0}, "samples": [{"path": [{"proc": "m"}, {"stmt": "a.c:1"}], "counts": {"x": 1}}]}]})"),
      "s.json: threads[0].samples[0].counts: unknown metric \"x\"");
  EXPECT_EQ(
      specError(
          "{" + metrics +
          R"(, "threads": [{"id": {"rank": 0}, "samples": [{"path": [{"proc": "m"}, {"stmt": "a.c"}], "counts": {"t": 1}}]}]})"),
      "s.json: threads[0].samples[0].path[1].stmt: \"a.c\" is not of the form file:line");
  EXPECT_EQ(specError("{" + metrics + R"(, "threads": [{"id": {"rank": 0}}, {"id": {"rank": 0}}]})"),
            "s.json: threads[1].id: same id tuple as threads[0]");
  EXPECT_NE(
      specError(
          "{" + metrics +
          R"(, "threads": [{"id": {"rank": 0}, "samples": [{"path": [{"proc": "m"}, {"proc": "n"}, {"stmt": "a.c:1"}], "counts": {"t": 1}}]}]})")
          .find("must be an outermost frame or follow a call site"),
      std::string::npos);
  EXPECT_EQ(specError("{" + metrics + R"(, "threads": [{"id": {"rank": 0}, "events": [{"t": 0, "enter": "a"}]}]})"),
            "s.json: threads[0].events: regions are still open at the end of the log");
  EXPECT_EQ(
      specError(
          "{" + metrics +
          R"(, "threads": [{"id": {"rank": 0}, "events": [{"t": 0, "enter": "a"}, {"t": 1, "exit": "a", "attr": 3}]}]})"),
      "s.json: threads[0].events[1].attr: only enter events carry an attribute");
  EXPECT_EQ(
      specError(
          "{" + metrics +
          R"(, "threads": [{"id": {"rank": 0}, "events": [{"t": 0, "enter": "a", "attr": 1.5}, {"t": 1, "exit": "a"}]}]})"),
      "s.json: threads[0].events[0].attr: expected a 64-bit signed integer");
  EXPECT_EQ(
      specError(
          "{" + metrics +
          R"(, "threads": [{"id": {"rank": 0}, "events": [{"t": 0, "enter": "a", "attr": 9223372036854775808}, {"t": 1, "exit": "a"}]}]})"),
      "s.json: threads[0].events[0].attr: expected a 64-bit signed integer");
}

TEST(JsonSpec, RegionAttributesOnEnterEvents) {
  const char* spec = R"({
    "metrics": [{"name": "cycles"}],
    "threads": [{"id": {"thread": 0},
      "events": [{"t": 0, "enter": "a"}, {"t": 1, "exit": "a"}, {"t": 2, "enter": "a", "attr": -9223372036854775808},
                 {"t": 3, "enter": "a/b", "attr": 9223372036854775807}, {"t": 4, "exit": "a/b"}, {"t": 5, "exit": "a"}]}]
  })";
  const auto p = synth::profilesFromJsonText(spec, "spec.json").at(0);
  EXPECT_EQ(p.regions.eventHasAttr, (std::vector<bool>{false, false, true, true, false, false}));
  EXPECT_EQ(p.regions.eventAttr, (std::vector<std::int64_t>{0, 0, INT64_MIN, INT64_MAX, 0, 0}));
}

}  // namespace
