// Quantifier chains (docs/query.md, "Cost"): independent quantified variables are evaluated one
// after the other, not in every combination; the factoring keeps every measure and pruned
// sub-frame of random queries on random logs (checked against a direct evaluation of the
// definitions); a query that cannot be factored and is too big is refused before any frame.
#include <gtest/gtest.h>

#include <map>
#include <random>
#include <set>

#include "analysis/log_fixtures.hpp"
#include "csp/analysis/evaluate.hpp"
#include "csp/analysis/query.hpp"

namespace csp::analysis {
namespace {

using test::LogBuilder;
using test::value;

// 4 threads with 120 visits of `compute` each (240 events), overlapping at random.
LogBuilder computeLog(unsigned seed) {
  LogBuilder b;
  std::mt19937 rng(seed);
  for (std::uint64_t t = 0; t < 4; ++t) {
    const auto th = b.thread(t);
    std::uint64_t at = t * 3;
    for (int i = 0; i < 120; ++i) {
      const std::uint64_t end = at + 5 + rng() % 16;
      b.span(th, at, end, "compute");
      at = end + 1 + rng() % 10;
    }
  }
  return b;
}

std::string chain(const std::string& quantifier, int k, const std::string& join = " and ") {
  std::string q;
  for (int i = 0; i < k; ++i) q += quantifier + " t" + std::to_string(i) + ": ";
  for (int i = 0; i < k; ++i) q += (i ? join : "") + "(t" + std::to_string(i) + ", compute)";
  return q;
}

// Took 1.7 s for K = 8, 111 s for K = 11 (4^K combinations per frame); the documented bound of
// 16 allowed days. The ctest timeout is the only clock here: the answers must come at all.
TEST(QueryCost, ChainsOfIndependentQuantifiersAreLinear) {
  const auto b = computeLog(1);
  const double any = value(b, "Duration(exists t: (t, compute))");
  ASSERT_GT(any, 0);
  for (int k : {8, 11, 16}) {
    // Every active thread is in compute (the log has no other region).
    EXPECT_EQ(value(b, "Duration(" + chain("forall", k) + ")"), any) << k;
    EXPECT_EQ(value(b, "Duration(" + chain("exists", k) + ")"), any) << k;
    EXPECT_EQ(value(b, "MaxPar(" + chain("forall", k) + ")"), value(b, "MaxPar(forall t: (t, compute))")) << k;
    EXPECT_EQ(value(b, "Area(" + chain("exists", k) + ")"), value(b, "Area(exists t: (t, compute))")) << k;
    EXPECT_EQ(value(b, "Area(" + chain("exists", k, " or ") + ")"), value(b, "Area(exists t: (t, compute))")) << k;
  }
}

TEST(QueryCost, QueriesThatCannotBeFactoredAndAreTooBigAreRefused) {
  const auto b = computeLog(1);
  // Exactly-k quantifiers count every combination: 4^16 per frame.
  try {
    evaluate(parseQuery("Duration(" + chain("exists1", 16) + ")"), b.tree, b.process());
    FAIL() << "no error";
  } catch (const QueryError& e) {
    EXPECT_NE(e.message().find("evaluations"), std::string::npos) << e.message();
    EXPECT_NE(e.message().find("more than the limit"), std::string::npos) << e.message();
    EXPECT_NE(e.message().find("restrict their domains"), std::string::npos) << e.message();
  }
  // `forall` does not distribute over `or` (it keeps the pairs of the bodies that hold).
  EXPECT_THROW(evaluate(parseQuery("Area(" + chain("forall", 16, " or ") + ")"), b.tree, b.process()), QueryError);
  // Free variables: 4^16 bindings.
  std::string free;
  for (int i = 0; i < 16; ++i) free += (i ? " and " : "") + std::string("(f") + std::to_string(i) + ", compute)";
  try {
    evaluate(parseQuery("Duration(" + free + ")"), b.tree, b.process());
    FAIL() << "no error";
  } catch (const QueryError& e) {
    EXPECT_NE(e.message().find("bindings of its free variables"), std::string::npos) << e.message();
  }
  // The same kinds of query, small enough, are answered.
  EXPECT_GT(value(b, "Duration(" + chain("exists1", 3) + ")"), 0);
  EXPECT_EQ(value(b, "Duration(" + chain("forall", 3, " or ") + ")"), value(b, "Duration(exists t: (t, compute))"));
}

// ---------------------------------------------------------------------------------------------
// The definitions evaluated directly: every value of every quantifier, no factoring, no caches.

struct Reference {
  const Query& q;
  const RegionTree& tree;
  const std::vector<ThreadState>* states = nullptr;
  std::vector<std::uint64_t> numbers;     // thread slot -> number
  std::vector<std::string> names;         // all region names
  std::map<int, std::int64_t> threadEnv;  // variable -> thread slot
  std::map<int, std::string> regionEnv;   // variable -> region name
  using Pairs = std::set<std::pair<std::size_t, std::string>>;

  std::int64_t slotOf(const Term& t) const {
    if (t.kind == Term::Kind::Var) return threadEnv.at(t.var);
    for (std::size_t s = 0; s < numbers.size(); ++s)
      if (numbers[s] == t.number) return static_cast<std::int64_t>(s);
    return -1;
  }
  std::string nameOf(const Term& t) const { return t.kind == Term::Kind::Var ? regionEnv.at(t.var) : t.name; }
  bool inRegion(std::int64_t slot, const std::string& name) const {
    if (slot < 0) return false;
    for (auto r = (*states)[static_cast<std::size_t>(slot)].region; r != 0; r = tree.parent[r])
      if (tree.name[r] == name) return true;
    return false;
  }
  bool passes(const Formula& f, bool thread, std::int64_t slot, const std::string& name) const {
    bool result = true, first = true;
    for (const auto& c : f.constraints) {
      bool in = false;
      for (const auto& v : c.values) in = in || (thread ? slotOf(v) == slot : nameOf(v) == name);
      const bool ok = c.op == Constraint::Op::Equal || c.op == Constraint::Op::In ? in : !in;
      result = first ? ok : c.join == Constraint::Join::And ? result && ok : result || ok;
      first = false;
    }
    return result;
  }
  bool eval(const Formula& f, Pairs& w) {
    switch (f.kind) {
      case Formula::Kind::Predicate: {
        const auto slot = slotOf(f.thread);
        const auto name = nameOf(f.region);
        if (!inRegion(slot, name)) return false;
        w.emplace(static_cast<std::size_t>(slot), name);
        return true;
      }
      case Formula::Kind::And: {
        Pairs a, b;
        if (!eval(*f.a, a) || !eval(*f.b, b)) return false;
        w.insert(a.begin(), a.end());
        w.insert(b.begin(), b.end());
        return true;
      }
      case Formula::Kind::Or: {
        Pairs a, b;
        const bool x = eval(*f.a, a), y = eval(*f.b, b);
        if (x) w.insert(a.begin(), a.end());
        if (y) w.insert(b.begin(), b.end());
        return x || y;
      }
      case Formula::Kind::Not: {
        Pairs ignored;
        return !eval(*f.a, ignored);
      }
      default:
        return quantify(f, w);
    }
  }
  bool quantify(const Formula& f, Pairs& w) {
    const bool thread = q.variables[static_cast<std::size_t>(f.var)].type == VarType::Thread;
    std::uint64_t holds = 0, values = 0;
    Pairs all;
    auto visit = [&](bool ok, Pairs& p) {
      ++values;
      if (!ok) return;
      ++holds;
      all.insert(p.begin(), p.end());
    };
    if (thread) {
      for (std::size_t s = 0; s < states->size(); ++s) {
        if ((*states)[s].region == 0 || !passes(f, true, static_cast<std::int64_t>(s), "")) continue;
        threadEnv[f.var] = static_cast<std::int64_t>(s);
        Pairs p;
        visit(eval(*f.a, p), p);
      }
    } else {
      for (const auto& n : names) {
        if (!passes(f, false, -1, n)) continue;
        regionEnv[f.var] = n;
        Pairs p;
        visit(eval(*f.a, p), p);
      }
    }
    const bool ok = f.kind == Formula::Kind::ForAll   ? holds == values
                    : f.kind == Formula::Kind::Exists ? holds > 0
                                                      : holds == f.k;
    if (ok) w.insert(all.begin(), all.end());
    return ok;
  }
};

struct Measures {
  double duration = 0, maxPar = 0, area = 0;
  std::set<std::uint64_t> threads;
  std::set<std::string> regions;
};

Measures reference(const LogBuilder& b, const std::string& formula) {
  const Query q = parseQuery("Duration(" + formula + ")");
  const std::set<std::string> names(b.tree.name.begin() + 1, b.tree.name.end());
  Reference ref{q, b.tree, nullptr, b.numbers, {names.begin(), names.end()}, {}, {}};
  FrameBuilder frames(b.tree, b.streams());
  Frame f;
  Measures m;
  while (frames.next(f)) {
    ref.states = f.states;
    Reference::Pairs w;
    if (!ref.eval(*q.calls[0].formula, w)) continue;
    std::set<std::size_t> threads;
    for (const auto& [slot, name] : w) {
      threads.insert(slot);
      m.threads.insert(b.numbers[slot]);
      m.regions.insert(name);
    }
    const double dt = static_cast<double>(f.endNs - f.beginNs);
    m.duration += dt;
    m.maxPar = std::max(m.maxPar, static_cast<double>(threads.size()));
    m.area += dt * static_cast<double>(threads.size());
  }
  return m;
}

// A random formula over thread variables t*, region variables r*, threads 0..3, regions a b c.
struct FormulaGen {
  std::mt19937 rng;
  int nextVar = 0;
  std::string pick(const std::vector<std::string>& from) { return from[rng() % from.size()]; }
  std::string formula(int depth, std::vector<std::string> threads, std::vector<std::string> regions) {
    const unsigned choice = depth == 0 ? 0 : rng() % 6;
    if (choice == 0) {
      auto t = threads;
      t.push_back(std::to_string(rng() % 4));
      auto r = regions;
      for (const char* n : {"a", "b", "c"}) r.push_back(n);
      return "(" + pick(t) + ", " + pick(r) + ")";
    }
    if (choice == 1)
      return "(" + formula(depth - 1, threads, regions) + " and " + formula(depth - 1, threads, regions) + ")";
    if (choice == 2)
      return "(" + formula(depth - 1, threads, regions) + " or " + formula(depth - 1, threads, regions) + ")";
    if (choice == 3) return "not " + formula(depth - 1, threads, regions);
    const bool thread = rng() % 3 != 0;
    const std::string var = (thread ? "t" : "r") + std::to_string(nextVar++);
    const std::string q = pick({"forall", "exists", "exists1", "exists2"});
    auto& same = thread ? threads : regions;
    // (A region variable that its body does not use is typed a thread: no region constraints.)
    std::string constraint;
    if (thread && !same.empty() && rng() % 3 == 0)
      constraint = " != " + pick(same);
    else if (thread && rng() % 4 == 0)
      constraint = " in {0, 2}";
    same.push_back(var);
    // Bodies that mix the new variable with others in conjunctions and disjunctions: the shapes
    // the factoring rewrites.
    std::string body = formula(depth - 1, threads, regions);
    if (rng() % 2) body = "(" + body + (rng() % 2 ? " and " : " or ") + formula(depth - 1, threads, regions) + ")";
    return "(" + q + " " + var + constraint + ": " + body + ")";
  }
};

// 4 threads, regions a, b, c (b also inside a); events on a coarse grid so that many happen at
// the same nanosecond.
LogBuilder randomLog(unsigned seed) {
  std::mt19937 rng(seed);
  LogBuilder b;
  for (std::uint64_t t = 0; t < 4; ++t) {
    const auto th = b.thread(t);
    std::uint64_t at = rng() % 3 * 10;
    for (int i = 0; i < 6; ++i) {
      const std::string outer = std::vector<std::string>{"a", "b", "c"}[rng() % 3];
      const std::uint64_t end = at + 10 * (1 + rng() % 4);
      if (outer == "a" && rng() % 2) {
        b.enter(th, at, "a");
        b.span(th, at + 10, end + 10, "a/b");
        b.exit(th, end + 10, "a");
        at = end + 10 + 10 * (rng() % 2);
      } else {
        b.span(th, at, end, outer);
        at = end + 10 * (rng() % 2);
      }
    }
  }
  return b;
}

TEST(QueryCost, FactoringKeepsEveryMeasureOfRandomQueries) {
  for (unsigned seed = 1; seed <= 4; ++seed) {
    const auto b = randomLog(seed);
    FormulaGen gen{std::mt19937(seed), 0};
    for (int i = 0; i < 150; ++i) {
      gen.nextVar = 0;
      const std::string f = gen.formula(1 + static_cast<int>(gen.rng() % 4), {}, {});
      const auto expected = reference(b, f);
      EXPECT_EQ(value(b, "Duration(" + f + ")"), expected.duration) << f;
      EXPECT_EQ(value(b, "MaxPar(" + f + ")"), expected.maxPar) << f;
      EXPECT_EQ(value(b, "Area(" + f + ")"), expected.area) << f;
      const auto threads = evaluate(parseQuery("WhichThreads(" + f + ")"), b.tree, b.process()).bindings.at(0).members;
      std::set<std::uint64_t> got;
      for (const auto& t : threads) got.insert(std::stoull(t));
      EXPECT_EQ(got, expected.threads) << f;
      const auto regions = evaluate(parseQuery("WhatRegions(" + f + ")"), b.tree, b.process()).bindings.at(0).members;
      EXPECT_EQ(std::set<std::string>(regions.begin(), regions.end()), expected.regions) << f;
    }
  }
}

}  // namespace
}  // namespace csp::analysis
