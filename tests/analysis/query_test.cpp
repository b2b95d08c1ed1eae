// The query language (Benavides ch. 3): every query of Fig. 3.2 on a hand-made log with exact
// values, the measures, attributes, constraints, intervals, attribute filters and classes, free
// variables, and the parser's errors.
#include <gtest/gtest.h>

#include <cmath>

#include "analysis/log_fixtures.hpp"
#include "csp/analysis/query.hpp"

namespace csp::analysis {
namespace {

using test::LogBuilder;
using test::value;

// Three threads, regions 0 and 1 (named as csp_region_begin_id names them). Frames:
//   F1 [0,20)    T0=0  T1=phi  T2=phi
//   F2 [20,40)   T0=0  T1=1    T2=phi
//   F3 [40,60)   T0=0  T1=1    T2=0
//   F4 [60,80)   T0=0  T1=0    T2=0
//   F5 [80,100)  T0=0  T1=0>1  T2=0
//   F6 [100,120) T0=1  T1=0    T2=0
//   F7 [120,140) T0=1  T1=phi  T2=0
//   F8 [140,150) T0=1  T1=phi  T2=phi
LogBuilder fig32Log() {
  LogBuilder b;
  const auto t0 = b.thread(0), t1 = b.thread(1), t2 = b.thread(2);
  b.span(t0, 0, 100, "region-0");
  b.span(t0, 100, 150, "region-1");
  b.span(t1, 20, 60, "region-1");
  b.enter(t1, 60, "region-0");
  b.span(t1, 80, 100, "region-0/region-1");
  b.exit(t1, 120, "region-0");
  b.span(t2, 40, 140, "region-0");
  return b;
}

TEST(Figure32, ThreadZeroInRegionZero) {
  const auto b = fig32Log();
  EXPECT_EQ(value(b, "Duration((0, 0))"), 100);
  EXPECT_EQ(value(b, "MaxPar((0, 0))"), 1);
  EXPECT_EQ(value(b, "Area((0, 0))"), 100);
}

TEST(Figure32, ThreadsZeroAndOneInRegionsZeroAndOne) {
  const auto b = fig32Log();
  EXPECT_EQ(value(b, "Duration((0, 0) ∧ (1, 1))"), 60);  // F2, F3, F5
  EXPECT_EQ(value(b, "MaxPar((0, 0) and (1, 1))"), 2);
  EXPECT_EQ(value(b, "Area((0, 0) && (1, 1))"), 120);
}

TEST(Figure32, AllThreadsInRegionZero) {
  const auto b = fig32Log();
  // The quantifier ranges over the active threads of each frame: F1, F4, F5 (T1 is in 0 > 1).
  EXPECT_EQ(value(b, "Duration(∀t : (t, 0))"), 60);
  EXPECT_EQ(value(b, "MaxPar(forall t: (t, 0))"), 3);
  EXPECT_EQ(value(b, "Area(forall t: (t, 0))"), 20 * 1 + 20 * 3 + 20 * 3);
}

TEST(Figure32, SomeThreadInRegionZero) {
  const auto b = fig32Log();
  EXPECT_EQ(value(b, "Duration(∃t : (t, 0))"), 140);  // F1..F7
  // Pruned sub-frames hold only the threads in region 0.
  EXPECT_EQ(value(b, "Area(exists t: (t, 0))"), 20 + 20 + 40 + 60 + 60 + 40 + 20);
  EXPECT_EQ(value(b, "MaxPar(exists t: (t, 0))"), 3);
}

TEST(Figure32, ExactlyOneThreadInRegionZero) {
  const auto b = fig32Log();
  EXPECT_EQ(value(b, "Duration(∃1 t : (t, 0))"), 60);  // F1, F2, F7
  EXPECT_EQ(value(b, "Duration(exists1 t: (t, 0))"), 60);
  EXPECT_EQ(value(b, "Duration(exists 1 t: (t, 0))"), 60);
  EXPECT_EQ(value(b, "Duration(∃₁ t : (t, 0))"), 60);
  EXPECT_EQ(value(b, "Duration(∃_1 t : (t, 0))"), 60);
  EXPECT_EQ(value(b, "Duration(exists2 t: (t, 0))"), 40);  // F3 (T0, T2), F6 (T1, T2)
  EXPECT_EQ(value(b, "Area(exists1 t: (t, 0))"), 60);
}

TEST(Figure32, SomeThreadInEveryRegion) {
  const auto b = fig32Log();
  // Region variables range over the regions of the profile: 0 and 1. F2, F3, F5, F6, F7.
  EXPECT_EQ(value(b, "Duration(∀r : ∃t : (t, r))"), 100);
  EXPECT_EQ(value(b, "Area(forall r: exists t: (t, r))"), 40 + 60 + 60 + 60 + 40);
}

TEST(Figure32, EachThreadInItsOutermostRegionOnly) {
  const auto b = fig32Log();
  // Every active thread is in exactly one region (no nesting): all frames but F5.
  EXPECT_EQ(value(b, "Duration(∀t : ∃1 r : (t, r))"), 130);
  EXPECT_EQ(value(b, "Duration(forall t: exists1 r: (t, r))"), 130);
}

TEST(Query, NegationConstraintsSetsAndIntervals) {
  const auto b = fig32Log();
  EXPECT_EQ(value(b, "Duration(¬(0, 0))"), 50);  // F6, F7, F8
  EXPECT_EQ(value(b, "Duration(not (0, 0))"), 50);
  EXPECT_EQ(value(b, "Duration(∃t ≠ 0 : (t, 0))"), 100);  // F3..F7
  EXPECT_EQ(value(b, "Duration(exists t != 0: (t, 0))"), 100);
  EXPECT_EQ(value(b, "Duration(exists t in {1}: (t, 1))"), 60);
  EXPECT_EQ(value(b, "Duration(exists t ∈ {0, 2}: (t, 1))"), 50);
  EXPECT_EQ(value(b, "Duration(exists t = 1 or t = 2: (t, 0))"), 100);
  EXPECT_EQ(value(b, "Duration(forall t not in {1}: (t, 0))"), 100);  // F1..F5
  // Interval [30, 90) relative to the first event (t = 0 here).
  EXPECT_EQ(value(b, "Duration(∃t : (t, 0)) @ [30, 90)"), 10 + 20 + 20 + 10);
  EXPECT_EQ(value(b, "Duration(exists t: (t, 0)) during [30ns, 0.09us)"), 60);
  EXPECT_EQ(value(b, "Duration((0,0)) + Duration((0,1)) - 2 * 0"), 150);
  EXPECT_EQ(value(b, "Duration((0, 0)) / Duration((0, 1))"), 2);
  EXPECT_TRUE(std::isnan(value(b, "Duration((0, 0)) / Duration((5, 1))")));
}

TEST(Query, AttributesWhichThreadsWhatRegions) {
  const auto b = fig32Log();
  const auto threads = evaluate(parseQuery("WhichThreads(∃t : (t, 1))"), b.tree, b.process());
  EXPECT_EQ(threads.bindings.at(0).members, (std::vector<std::string>{"0", "1"}));
  const auto regions = evaluate(parseQuery("WhatRegions(exists r: (1, r))"), b.tree, b.process());
  EXPECT_EQ(regions.bindings.at(0).members, (std::vector<std::string>{"region-0", "region-1"}));
  EXPECT_EQ(value(b, "Count(WhichThreads(exists t: (t, 0)))"), 3);
}

TEST(Query, FreeThreadVariableGivesOneValuePerThread) {
  const auto b = fig32Log();
  const auto r = evaluate(parseQuery("Duration((t, 0))"), b.tree, b.process());
  ASSERT_EQ(r.bindings.size(), 3u);
  EXPECT_EQ(r.bindings[0].label, "t=0");
  EXPECT_EQ(r.bindings[0].value, 100);
  EXPECT_EQ(r.bindings[1].value, 60);
  EXPECT_EQ(r.bindings[2].value, 100);
  // The thesis's shorthand Duration(t, 0) for Duration((t, 0)).
  const auto s = evaluate(parseQuery("Duration(t, 0)"), b.tree, b.process());
  EXPECT_EQ(s.bindings[1].value, 60);
}

TEST(Query, PrunedFramesAreTheResultOfABareFrameQuery) {
  const auto b = fig32Log();
  const auto r = evaluate(parseQuery("∃t : (t, 1)"), b.tree, b.process());
  const auto& x = r.bindings.at(0);
  EXPECT_EQ(x.frameCount, 6u);  // F2, F3, F5, F6, F7, F8
  EXPECT_EQ(x.durationNs, 20u * 5 + 10);
  ASSERT_FALSE(x.frames.empty());
  EXPECT_EQ(x.frames[0].beginNs, 20u);
  EXPECT_EQ(x.frames[0].members, (std::vector<std::pair<std::uint64_t, std::string>>{{1, "region-1"}}));
}

// Section 3.2's upper bound for hiding the main thread's I/O (blackscholes), per thread.
TEST(Query, BlackscholesUpperBound) {
  LogBuilder b;
  const auto m = b.thread(0), w1 = b.thread(1), w2 = b.thread(2);
  b.enter(m, 0, "main");
  b.span(m, 0, 200, "main/read");
  b.span(m, 800, 1000, "main/write");
  b.exit(m, 1000, "main");
  b.span(w1, 200, 780, "bs_thread");
  b.span(w2, 210, 800, "bs_thread");
  const auto r = evaluate(
      parseQuery("(Duration((t, main)) - (Duration((t, read)) + Duration((t, write)))) / Duration((t, main))"), b.tree,
      b.process());
  ASSERT_EQ(r.bindings.size(), 3u);
  EXPECT_DOUBLE_EQ(r.bindings[0].value, 0.6);
  EXPECT_TRUE(std::isnan(r.bindings[1].value));
  const auto whole = evaluate(parseQuery("Duration((t, main) || (t, bs_thread))"), b.tree, b.process());
  EXPECT_EQ(whole.bindings[0].value, 1000);
  EXPECT_EQ(whole.bindings[1].value, 580);
  const auto which = evaluate(parseQuery("WhatRegions((0, main) || (0, bs_thread))"), b.tree, b.process());
  EXPECT_EQ(which.bindings.at(0).members, (std::vector<std::string>{"main"}));
}

// Section 3.3: data-centric filters on the attribute of region visits, by range and by class.
TEST(Query, AttributeRangesAndClasses) {
  LogBuilder b;
  const auto t = b.thread(0), u = b.thread(1);
  b.enterAttr(t, 0, "update", 5);
  b.exit(t, 10, "update");
  b.enterAttr(t, 10, "update", 150);
  b.exit(t, 40, "update");
  b.enterAttr(t, 40, "update", 100);
  b.exit(t, 60, "update");
  b.span(t, 60, 67, "update");  // no attribute: matches no filter
  b.enterAttr(u, 0, "batch", -3);
  b.span(u, 0, 5, "batch/update");
  b.exit(u, 5, "batch");
  EXPECT_EQ(value(b, "Duration((0, update, attr in (100, inf)))"), 30);
  EXPECT_EQ(value(b, "Duration((0, update, attr ∈ [100, ∞)))"), 50);
  EXPECT_EQ(value(b, "Duration((0, update, attr >= 100))"), 50);
  EXPECT_EQ(value(b, "Duration((0, update, attr < 100))"), 10);
  EXPECT_EQ(value(b, "Duration((0, update, attr = 150))"), 30);
  EXPECT_EQ(value(b, "Duration((0, update, attr in [5, 100]))"), 30);
  EXPECT_EQ(value(b, "Duration((0, update))"), 67);
  EXPECT_EQ(value(b, "class HIGH = [100, inf); class LOW = attr < 100; Duration((0, update, HIGH))"), 50);
  EXPECT_EQ(value(b, "class HIGH = [100, inf); class LOW = attr < 100; Duration((0, update, LOW))"), 10);
  // The attribute belongs to the visit of the named region, here the outer one.
  EXPECT_EQ(value(b, "Duration((1, batch, attr in [-5, -1]))"), 5);
  EXPECT_EQ(value(b, "Duration((1, update, attr in [-5, -1]))"), 0);
  EXPECT_EQ(value(b, "Duration(exists t: (t, batch, attr < 0) and (t, update))"), 5);
}

TEST(Query, UnknownRegionsAndThreadsAreWarnedAbout) {
  const auto b = fig32Log();
  const auto r = evaluate(parseQuery("Duration((7, nosuch))"), b.tree, b.process());
  EXPECT_EQ(r.bindings.at(0).value, 0);
  ASSERT_EQ(r.warnings.size(), 2u);
  EXPECT_EQ(r.warnings[0], "no thread 7 in this process");
  EXPECT_EQ(r.warnings[1], "no region named 'nosuch'");
}

void expectError(const std::string& q, std::size_t column, const std::string& contains) {
  try {
    parseQuery(q);
    ADD_FAILURE() << q << ": no error";
  } catch (const QueryError& e) {
    EXPECT_EQ(e.column(), column) << q << ": " << e.what();
    EXPECT_NE(std::string(e.what()).find(contains), std::string::npos) << q << ": " << e.what();
  }
}

TEST(QueryParser, ErrorsNameTheColumn) {
  expectError("Duration(exists t (t, x))", 19, "expected ':'");
  expectError("Duration(∃t : (t, x) ∧)", 23, "expected a predicate");
  expectError("Duration((t, x)", 16, "expected ')'");
  expectError("Duration((t, x)) +", 19, "expected a number, a measure");
  expectError("exists x: (x, x)", 15, "'x' is used as a thread and as a region");
  expectError("Duration((t, x, attr in [1, 2))) @ [5, 2)", 42, "ends before it begins");
  expectError("Duration((t, x, HIGH))", 17, "class defined with");
  expectError("Duration((t, x)) @ [1xs, 2)", 22, "unknown unit 'xs'");
  expectError("", 1, "empty");
  expectError("Duration((t, x)) $", 18, "unexpected character '$'");
  expectError("WhichThreads((t, x)) + 1", 22, "expected the end of the query");
  expectError("Duration(WhichThreads((t,x)))", 10, "expected a predicate");
  expectError("1 + WhatRegions(exists r: (0, r))", 5, "is a set: use Count(");
  expectError("Duration(forall t != u and v != 1: (t, x))", 28, "on the quantified variable 't'");
}

TEST(QueryParser, UnicodeAndAsciiSpellingsAreTheSameQuery) {
  const auto b = fig32Log();
  const std::pair<const char*, const char*> pairs[] = {
      {"Duration(∃1 t : (t, 0) ∧ ∀u ≠ t : (u, 1))", "Duration(exists1 t: (t, 0) and forall u != t: (u, 1))"},
      {"Area(∃t : ¬(t, 1) ∨ (t, 0))", "Area(exists t: not (t, 1) or (t, 0))"},
      {"Duration(∀t ∉ {1} : (t, 0))", "Duration(forall t not in {1}: (t, 0))"},
  };
  for (const auto& [u, a] : pairs) EXPECT_EQ(value(b, u), value(b, a)) << u;
}

}  // namespace
}  // namespace csp::analysis
