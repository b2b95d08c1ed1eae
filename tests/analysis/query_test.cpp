// The query language (Benavides ch. 3): every query of Fig. 3.2 on a hand-made log with exact
// values, the measures, attributes, constraints, intervals, attribute filters and classes, free
// variables, and the parser's errors.
#include <gtest/gtest.h>

#include <cmath>

#include "analysis/log_fixtures.hpp"
#include "csp/analysis/canned.hpp"
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
  const auto r =
      evaluate(parseQuery("(Duration((t, main)) - (Duration((t, read)) + Duration((t, write)))) / Duration((t, main))"),
               b.tree, b.process());
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
  expectError("Duration((t, x, attr in [1, 2))) @ [5, 2)", 36, "ends before it begins");
  expectError("Duration((t, x, HIGH))", 17, "class defined with");
  expectError("Duration((t, x)) @ [1xs, 2)", 22, "unknown unit 'xs'");
  expectError("", 1, "empty");
  expectError("Duration((t, x)) $", 18, "unexpected character '$'");
  expectError("WhichThreads((t, x)) + 1", 22, "expected the end of the query");
  expectError("Duration(WhichThreads((t,x)))", 10, "expected a predicate");
  expectError("1 + WhatRegions(exists r: (0, r))", 5, "is a set: use Count(");
  expectError("Duration(forall t != u and v != 1: (t, x))", 28, "on the quantified variable 't'");
}

std::string repeat(const std::string& s, std::size_t n) {
  std::string out;
  for (std::size_t i = 0; i < n; ++i) out += s;
  return out;
}

// Nesting used to recurse without bound: ~20,000 parentheses or ~30,000 'not's overflowed the
// stack (SIGSEGV). 256 levels are allowed; deeper queries are refused with the column.
TEST(QueryParser, DeepNestingIsRefusedWithTheColumn) {
  const auto b = fig32Log();
  // "Duration(" is one level; 255 parentheses more reach the limit.
  EXPECT_EQ(value(b, "Duration(" + repeat("(", 255) + "(0, 0)" + repeat(")", 255) + ")"), 100);
  expectError("Duration(" + repeat("(", 256) + "(0, 0)" + repeat(")", 256) + ")", 9 + 256,
              "nests more than 256 levels deep");
  expectError("Duration(" + repeat("(", 20000) + "(0, 0)" + repeat(")", 20000) + ")", 9 + 256,
              "nests more than 256 levels");
  EXPECT_EQ(value(b, "Duration(" + repeat("not ", 254) + "(0, 0))"), 100);
  expectError("Duration(" + repeat("not ", 30000) + "(0, 0))", 10 + 4 * 255, "nests more than 256 levels deep");
  expectError(repeat("not ", 30000) + "(0, 0)", 1 + 4 * 256, "nests more than 256 levels deep");
  EXPECT_EQ(value(b, repeat("-", 256) + "1"), 1);
  expectError(repeat("-", 257) + "1", 257, "nests more than 256 levels deep");
  expectError(repeat("(", 300) + "1" + repeat(")", 300), 257, "nests more than 256 levels deep");
  // Operators in a row nest as deep as the chain is long (a left-nested tree): also counted.
  EXPECT_EQ(value(b, "1" + repeat(" + 1", 255)), 256);
  expectError("1" + repeat(" + 1", 256), 3 + 4 * 255, "nests more than 256 levels deep");
  expectError("1" + repeat(" * 1", 5000), 3 + 4 * 255, "nests more than 256 levels deep");
  // 'and' and 'or' are associative: a long chain is a balanced tree, not a deep one.
  EXPECT_EQ(value(b, "Duration((0, 0)" + repeat(" or (0, 0)", 5000) + ")"), 100);
  EXPECT_EQ(value(b, "Duration((0, 0)" + repeat(" and (0, 0)", 5000) + ")"), 100);
  EXPECT_EQ(value(b, "Area(exists t: (t, 0) and (0, 0)" + repeat(" or (t, 1)", 100) + ")"),
            value(b, "Area(exists t: (t, 0) and (0, 0) or (t, 1))"));
}

// 26 nested 'exists t:' took 46 s and 100 grew to 10 GB: each level evaluated its body once per
// value of a variable the body did not use (the inner 't' hid it), and kept every binding's pairs.
TEST(QueryParser, NestedQuantifiersAreBoundedAndRebindingIsRefused) {
  const auto b = fig32Log();
  expectError("Duration(" + repeat("exists t: ", 100) + "(t, 0))", 27, "variable 't' is already bound at column 17");
  expectError("Duration(∃t : ∀t : (t, 0))", 16, "variable 't' is already bound at column 11");
  std::string deep;
  for (int i = 1; i <= 100; ++i) deep += "exists t" + std::to_string(i) + ": ";
  std::size_t column17 = 0;
  for (int i = 1; i <= 16; ++i) column17 += std::string("exists t" + std::to_string(i) + ": ").size();
  expectError("Duration(" + deep + "(t100, 0))", 10 + column17, "quantifiers nest more than 16 deep");
  // The same name in separate scopes is no rebinding.
  EXPECT_EQ(value(b, "Duration((exists t: (t, 0)) and (exists t: (t, 1)))"), 100);
  // 16 levels whose bodies do not use their variables: each body once (3^16 evaluations per
  // frame before), with the answer of the innermost quantifier.
  std::string sixteen;
  for (int i = 1; i <= 16; ++i) sixteen += "exists t" + std::to_string(i) + ": ";
  EXPECT_EQ(value(b, "Duration(" + sixteen + "(t16, 0))"), 140);
  EXPECT_EQ(value(b, "Area(" + sixteen + "(t16, 0))"), value(b, "Area(exists t: (t, 0))"));
  std::string forall;
  for (int i = 1; i <= 16; ++i) forall += "forall u" + std::to_string(i) + ": ";
  EXPECT_EQ(value(b, "Duration(" + forall + "(u16, 0))"), 60);
  // A quantifier that does not depend on the enclosing ones is evaluated once per frame.
  std::string closed = "(0, 0) or (0, 1)";
  for (int i = 1; i <= 15; ++i)
    closed = "exists a" + std::to_string(i) + ": (a" + std::to_string(i) + ", 0) and (" + closed + ")";
  EXPECT_EQ(value(b, "Duration(" + closed + ")"), 140);
  EXPECT_EQ(value(b, "Duration(exists a: (exists c: (c, 1)) and (a, 0))"),
            value(b, "Duration((exists c: (c, 1)) and (exists a: (a, 0)))"));
  EXPECT_EQ(value(b, "Area(exists a: (exists c: (c, 1)) and (a, 0))"),
            value(b, "Area((exists c: (c, 1)) and (exists a: (a, 0)))"));
  // Vacuous quantifiers keep their meaning: counts, empty domains.
  EXPECT_EQ(value(b, "Duration(exists2 t: (0, 0))"), 20);  // F2: two active threads
  EXPECT_EQ(value(b, "Duration(forall t: (0, 1))"), 50);
  EXPECT_EQ(value(b, "Duration(exists t in {}: (0, 0))"), 0);
  EXPECT_EQ(value(b, "Duration(forall t in {}: (0, 0))"), 150);
  EXPECT_EQ(value(b, "Duration(exists0 t in {7}: (0, 0))"), 150);
  // Dependent nesting; the pruned sub-frame is a set whatever the repetitions.
  EXPECT_EQ(value(b, "Duration(exists a: exists c: (a, 0) and (c, 1))"), 100);
  EXPECT_EQ(value(b, "MaxPar(exists a: exists c: exists d: (a, 0) or (c, 0) or (d, 1))"), 3);
  EXPECT_EQ(value(b, "Area(exists a: exists c: exists d: (a, 0) or (c, 0) or (d, 1))"),
            value(b, "Area(exists a: (a, 0) or (a, 1))"));
}

// Numbers went through a double: thread numbers of 2^64 and more became thread 0, 2^53 + 1
// became 2^53, and 'exists' with a count beyond 64 bits ended in "stoull".
TEST(QueryParser, NumbersAreExactAndTheirRangeIsChecked) {
  LogBuilder b;
  const auto lo = b.thread(9007199254740992ull), hi = b.thread(9007199254740993ull),
             max = b.thread(18446744073709551615ull);
  b.span(lo, 0, 10, "r");
  b.span(hi, 0, 30, "r");
  b.span(max, 0, 50, "s");
  b.span(lo, 100, 110, "iter#9007199254740992");
  b.span(lo, 110, 170, "iter#9007199254740993");
  EXPECT_EQ(value(b, "Duration((9007199254740993, r))"), 30);
  EXPECT_EQ(value(b, "Duration((9007199254740992, r))"), 10);
  EXPECT_EQ(value(b, "Duration((18446744073709551615, s))"), 50);
  EXPECT_EQ(value(b, "Duration(exists t in {9007199254740993}: (t, r))"), 30);
  EXPECT_EQ(value(b, "Duration(exists t = 9007199254740993: (t, r))"), 30);
  EXPECT_EQ(value(b, "Duration((9007199254740992, iter#9007199254740993))"), 60);
  EXPECT_EQ(value(b, "Duration((9007199254740992, iter#9007199254740992))"), 10);
  EXPECT_EQ(value(b, "Duration((9007199254740992, r)) @ [0, 18446744073709551615)"), 10);
  EXPECT_EQ(value(b, "Duration((9007199254740993, r)) @ [0.02us, 1s)"), 10);
  expectError("Duration((18446744073709551616, r))", 11, "the number 18446744073709551616 does not fit 64 bits");
  expectError("Duration((99999999999999999999999, r))", 11, "does not fit 64 bits");
  expectError("Duration((0, iter#18446744073709551616))", 19, "the number 18446744073709551616 does not fit 64 bits");
  expectError("Duration(exists t in {0, 18446744073709551616}: (t, r))", 26, "does not fit 64 bits");
  expectError("Duration(exists99999999999999999999 t: (t, r))", 10,
              "the count 99999999999999999999 of 'exists99999999999999999999' does not fit 64 bits");
  expectError("Duration(exists 99999999999999999999 t: (t, r))", 17, "does not fit 64 bits");
  expectError("Duration(∃₉₉₉₉₉₉₉₉₉₉₉₉₉₉₉₉₉₉₉₉ t : (t, r))", 11, "does not fit 64 bits");
  expectError("Duration((0, r, attr < 9223372036854775808))", 24, "does not fit a signed 64-bit integer");
  expectError("Duration((0, r, attr > -9223372036854775809))", 25, "does not fit a signed 64-bit integer");
  expectError("Duration((0, r)) @ [0, 18446744073709551616)", 24, "is beyond 2^64 - 1 ns");
  expectError("Duration((0, r)) @ [0, 20000000000s)", 24, "is beyond 2^64 - 1 ns");
  expectError("Duration((0, r)) @ [1.2.3, 5)", 21, "malformed number '1.2.3'");
  EXPECT_EQ(value(b, "Duration((9007199254740992, r, attr >= -9223372036854775808))"), 0);
  EXPECT_EQ(value(b, "18446744073709551616 * 0 + 1"), 1);  // arithmetic is real
}

TEST(QueryParser, ReversedRangesAreErrorsLikeReversedIntervals) {
  expectError("Duration((0, r, attr in (5, 3)))", 25, "the range ends before it begins");
  expectError("Duration((0, r, attr in [5, 4]))", 25, "the range ends before it begins");
  expectError("class C = (5, 3); Duration((0, r, C))", 11, "the range ends before it begins");
  expectError("Duration((0, r)) @ [5, 3)", 20, "the interval ends before it begins");
  EXPECT_NO_THROW(parseQuery("Duration((0, r, attr in [5, 5]))"));
  EXPECT_NO_THROW(parseQuery("Duration((0, r, attr in (5, 6)))"));  // holds no integer, but is not reversed
  EXPECT_NO_THROW(parseQuery("Duration((0, r, attr in (-inf, -3]))"));
}

TEST(QueryParser, QuotedNamesTakeEscapedQuotesAndBackslashes) {
  LogBuilder b;
  const auto t = b.thread(0);
  b.span(t, 0, 10, "say \"hi\"");
  b.span(t, 10, 30, "back\\slash");
  b.span(t, 30, 60,
         "bad\xff"
         "name");
  b.span(t, 60, 100, "cut\xe0");
  EXPECT_EQ(value(b, R"(Duration((0, "say \"hi\"")))"), 10);
  EXPECT_EQ(value(b, R"(Duration((0, "back\\slash")))"), 20);
  EXPECT_EQ(value(b, R"(Duration(exists r in {"say \"hi\"", "back\\slash"}: (0, r)))"), 30);
  // Names need not be UTF-8; a broken sequence does not swallow the closing quote.
  EXPECT_EQ(value(b,
                  "Duration((0, \"bad\xff"
                  "name\"))"),
            30);
  EXPECT_EQ(value(b, "Duration((0, \"cut\xe0\"))"), 40);
  expectError(R"(Duration((0, "a\nb")))", 16, "unknown escape in a quoted name");
  expectError(R"(Duration((0, "a\"))", 14, "unterminated string");
  // Columns after an escaped name count its characters as written.
  expectError(R"(Duration((0, "\"x\"") $))", 23, "unexpected character '$'");
  // Canned analyses quote region names the same way.
  const auto rows = runCanned("barrier", {"say \"hi\""}, b.tree, b.process());
  ASSERT_FALSE(rows.empty());
  EXPECT_EQ(rows[0].name, "any-waiting");
  EXPECT_EQ(rows[0].value.toDouble(), 10);
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
