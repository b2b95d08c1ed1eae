// The microbenchmark oracles of Benavides ch. 4.3 on synthetic logs, through the canned
// analyses: contention area W·T(T-1)/2, straggler degree 1/2 when one of 8 threads does double
// work, the pipeline waiting matrix, load imbalance and barrier waits.
#include <gtest/gtest.h>

#include <cmath>

#include "analysis/log_fixtures.hpp"
#include "csp/analysis/canned.hpp"

namespace csp::analysis {
namespace {

using test::LogBuilder;
using test::value;

double row(const std::vector<CannedRow>& rows, const std::string& name, const std::string& key = "") {
  for (const auto& r : rows)
    if (r.name == name && r.key == key) return r.value.toDouble();
  ADD_FAILURE() << "no row " << name << " " << key;
  return std::nan("");
}

// T threads released together, serialised on a lock: thread k waits k·W in region "lock", then
// holds the critical section "critical" for W; all wait at a barrier until the last is done.
LogBuilder contention(int threads, std::uint64_t w, int iterations) {
  LogBuilder b;
  for (int t = 0; t < threads; ++t) b.thread(static_cast<std::uint64_t>(t));
  std::uint64_t s = 1000;
  for (int i = 0; i < iterations; ++i) {
    for (int k = 0; k < threads; ++k) {
      const auto th = static_cast<std::size_t>(k);
      const std::uint64_t got = s + static_cast<std::uint64_t>(k) * w;
      if (k > 0) b.span(th, s, got, "lock");
      b.span(th, got, got + w, "critical");
      b.span(th, got + w, s + static_cast<std::uint64_t>(threads) * w, "barrier");
    }
    s += static_cast<std::uint64_t>(threads) * w + 100;
  }
  return b;
}

TEST(Oracle, ContentionAreaIsWTimesTChoose2) {
  constexpr std::uint64_t W = 32768;
  for (int T = 1; T <= 8; ++T) {
    const auto b = contention(T, W, 3);
    const double expected = 3.0 * W * T * (T - 1) / 2;
    EXPECT_EQ(value(b, "Area(∃t : (t, lock))"), expected) << T;
    const auto rows = runCanned("contention", {"lock"}, b.tree, b.process());
    EXPECT_EQ(row(rows, "contention-area"), expected) << T;
    if (T > 1) {
      EXPECT_EQ(row(rows, "max-waiting"), T - 1) << T;
      EXPECT_EQ(row(rows, "wait", "t=" + std::to_string(T - 1)), 3.0 * W * (T - 1)) << T;
    }
    // Who made whom wait (ch. 4.3.1): thread 1 waits for thread 0's critical section W.
    if (T > 1) {
      EXPECT_EQ(value(b, "Duration((1, lock) ∧ (0, critical))"), 3.0 * W) << T;
    }
  }
}

// 8 threads, a barrier at the end of every iteration; thread 7 does 2w, the others w.
LogBuilder straggler(int iterations, std::uint64_t w, int slow = 7) {
  LogBuilder b;
  for (int t = 0; t < 8; ++t) b.thread(static_cast<std::uint64_t>(t + 1));
  std::uint64_t s = 0;
  for (int i = 0; i < iterations; ++i) {
    for (int t = 0; t < 8; ++t) {
      const auto th = static_cast<std::size_t>(t);
      const std::uint64_t work = t == slow ? 2 * w : w;
      b.span(th, s, s + work, "loop");
      if (work < 2 * w) b.span(th, s + work, s + 2 * w, "barrier");
    }
    s += 2 * w;
  }
  return b;
}

TEST(Oracle, StragglerDegreeIsOneHalfWhenOneOfEightThreadsDoesDoubleWork) {
  const auto b = straggler(10, 1000);
  EXPECT_EQ(value(b, "Duration(∃1 t : (t, loop) ∧ ∀t' ≠ t : (t', barrier)) / Duration(∃t : (t, loop))"), 0.5);
  const auto rows = runCanned("straggler", {"loop", "barrier"}, b.tree, b.process());
  EXPECT_EQ(row(rows, "straggler-degree"), 0.5);
  EXPECT_EQ(row(rows, "loop-time"), 20000);
  EXPECT_EQ(row(rows, "straggler-time"), 10000);
  EXPECT_EQ(row(rows, "thread-degree", "t=8"), 0.5);
  for (int t = 1; t <= 7; ++t) EXPECT_EQ(row(rows, "thread-degree", "t=" + std::to_string(t)), 0) << t;
  EXPECT_EQ(row(rows, "straggler-thread"), 8);
}

TEST(Oracle, EvenWorkHasNoStraggler) {
  const auto b = straggler(10, 1000, /*slow=*/-1);
  const auto rows = runCanned("straggler", {"loop", "barrier"}, b.tree, b.process());
  EXPECT_EQ(row(rows, "straggler-degree"), 0);
  EXPECT_TRUE(std::isnan(row(rows, "straggler-thread")));
}

// Three stages (threads 0-2, 3-5, 6-7) synchronised every iteration; stage 3 has no work and
// waits the whole time (the thesis's "single stage imbalance": third row 1 1 0).
TEST(Oracle, PipelineWaitingMatrix) {
  LogBuilder b;
  for (int t = 0; t < 8; ++t) b.thread(static_cast<std::uint64_t>(t));
  std::uint64_t s = 0;
  for (int i = 0; i < 5; ++i) {
    for (int t = 0; t < 3; ++t) b.span(static_cast<std::size_t>(t), s, s + 100, "s1");
    for (int t = 3; t < 6; ++t) b.span(static_cast<std::size_t>(t), s, s + 100, "s2");
    for (int t = 6; t < 8; ++t) {
      b.span(static_cast<std::size_t>(t), s, s + 1, "s3");
      b.span(static_cast<std::size_t>(t), s + 1, s + 100, "wait");
    }
    s += 100;
  }
  const auto rows = runCanned("pipeline", {"wait", "s1", "s2", "s3"}, b.tree, b.process());
  EXPECT_EQ(row(rows, "pipeline-time"), 500);
  EXPECT_EQ(row(rows, "wait", "s3->s1"), 5 * 99);
  EXPECT_EQ(row(rows, "wait", "s3->s2"), 5 * 99);
  EXPECT_EQ(row(rows, "wait", "s3->s3"), 0);
  EXPECT_EQ(row(rows, "wait", "s1->s2"), 0);
  EXPECT_EQ(row(rows, "wait", "s2->s1"), 0);
  EXPECT_DOUBLE_EQ(row(rows, "wait-fraction", "s3->s1"), 0.99);
}

TEST(Oracle, LoadImbalancePerRegion) {
  LogBuilder b;
  for (int t = 0; t < 4; ++t) b.thread(static_cast<std::uint64_t>(t));
  b.span(0, 0, 100, "x");
  b.span(1, 0, 100, "x");
  b.span(2, 0, 100, "x");
  b.span(3, 0, 300, "x");
  b.span(0, 100, 150, "y");
  const auto rows = runCanned("imbalance", {}, b.tree, b.process());
  EXPECT_EQ(row(rows, "x:mean"), 150);
  EXPECT_DOUBLE_EQ(row(rows, "x:deviation", "t=3"), 1.0);
  EXPECT_DOUBLE_EQ(row(rows, "x:deviation", "t=0"), -1.0 / 3);
  EXPECT_EQ(row(rows, "x:time", "t=3"), 300);
  EXPECT_EQ(row(rows, "y:deviation", "t=0"), 0);
  for (const auto& r : rows) EXPECT_FALSE(r.name == "y:time" && r.key != "t=0") << "threads outside y are not listed";
}

TEST(Oracle, BarrierWaitPerThread) {
  const auto b = straggler(4, 1000);
  const auto rows = runCanned("barrier", {"barrier"}, b.tree, b.process());
  EXPECT_EQ(row(rows, "any-waiting"), 4000);
  EXPECT_EQ(row(rows, "wait", "t=1"), 4000);
  EXPECT_EQ(row(rows, "wait", "t=8"), 0);
  EXPECT_DOUBLE_EQ(row(rows, "wait-fraction", "t=1"), 0.5);
}

TEST(Canned, UnknownNamesAndWrongArgumentsAreErrors) {
  const auto b = straggler(1, 10);
  EXPECT_THROW(runCanned("nosuch", {}, b.tree, b.process()), QueryError);
  EXPECT_THROW(runCanned("straggler", {"loop"}, b.tree, b.process()), QueryError);
  EXPECT_THROW(runCanned("contention", {}, b.tree, b.process()), QueryError);
}

}  // namespace
}  // namespace csp::analysis
