#include <gtest/gtest.h>

#include <cmath>

#include "csp/metrics/accumulator.hpp"
#include "csp/metrics/propagation.hpp"
#include "csp/metrics/scaling.hpp"

using namespace csp;
using namespace csp::metrics;

TEST(ScalingLoss, StrongScaling) {
  const ScalingStudy s{ScalingMode::Strong, 2, 4, 120};
  // A node that costs 20 more in total: 20/120 of the q run.
  const double excess = scalingExcess(s, 50, 70);
  EXPECT_EQ(excess, 20);
  EXPECT_DOUBLE_EQ(scalingLossPercent(s, excess), 100.0 * 20 / 120);
  // Perfect scaling: same total cost.
  EXPECT_EQ(scalingLossPercent(s, scalingExcess(s, 30, 30)), 0);
  // More than 100 % at one node (gains elsewhere) is legitimate.
  EXPECT_DOUBLE_EQ(scalingLossPercent(s, scalingExcess(s, 50, 200)), 125);
  // A node only in the p run is a gain.
  EXPECT_DOUBLE_EQ(scalingLossPercent(s, scalingExcess(s, 12, 0)), -10);
}

TEST(ScalingLoss, WeakScaling) {
  const ScalingStudy s{ScalingMode::Weak, 2, 8, 400};
  // 10 per process in both runs: perfect.
  EXPECT_EQ(scalingLossPercent(s, scalingExcess(s, 20, 80)), 0);
  // 20 per process on q vs 10 on p; the root costs 50 per process on q.
  const double excess = scalingExcess(s, 20, 160);
  EXPECT_EQ(excess, 10);
  EXPECT_DOUBLE_EQ(scalingLossPercent(s, excess), 20);
}

TEST(ScalingLoss, AgreesWithThePflotranFormula) {
  // Thesis: 100 (16 T_c,8192 - T_c,512) / (16 T_r,8192), T per process, for 512 -> 8192.
  const double tc8192 = 3, tc512 = 40, tr8192 = 10;
  const double thesis = 100 * (16 * tc8192 - tc512) / (16 * tr8192);
  const ScalingStudy s{ScalingMode::Strong, 512, 8192, 8192 * tr8192};
  EXPECT_DOUBLE_EQ(scalingLossPercent(s, scalingExcess(s, 512 * tc512, 8192 * tc8192)), thesis);
  EXPECT_DOUBLE_EQ(thesis, 5);
}

TEST(ScalingLoss, DegenerateInputs) {
  EXPECT_THROW(scalingExcess(ScalingStudy{ScalingMode::Weak, 0, 4, 1}, 1, 1), std::invalid_argument);
  EXPECT_TRUE(std::isnan(scalingLossPercent(ScalingStudy{ScalingMode::Strong, 1, 2, 0}, 5)));
}

TEST(SamplingNoise, BoundFollowsAppendixA) {
  // Each of 3 profiles is within period - 1 of its estimate.
  EXPECT_EQ(samplingErrorBound(3, 1000), 2997);
  EXPECT_EQ(samplingErrorBound(1000, 1), 0);  // counted metrics are exact
  EXPECT_THROW(samplingErrorBound(1, 0), std::invalid_argument);

  const ScalingStudy strong{ScalingMode::Strong, 2, 4, 1e6};
  EXPECT_TRUE(withinSamplingNoise(strong, 5000, 2997, 2997));
  EXPECT_TRUE(withinSamplingNoise(strong, -5994, 2997, 2997));
  EXPECT_FALSE(withinSamplingNoise(strong, 6000, 2997, 2997));
  const ScalingStudy weak{ScalingMode::Weak, 2, 4, 1e6};
  EXPECT_TRUE(withinSamplingNoise(weak, 2000, 2000, 4000));  // 1000 + 1000
  EXPECT_FALSE(withinSamplingNoise(weak, 2001, 2000, 4000));
  EXPECT_TRUE(withinSamplingNoise(weak, 0, 0, 0));  // exact metrics: only 0 is noise
  EXPECT_FALSE(withinSamplingNoise(weak, 1e-9, 0, 0));
}

namespace {

using K = ScopeKind;

// Thesis Fig. 7.5: main's loop nest x > y > z with a call to work() inside z.
struct Fig75 {
  std::vector<std::uint32_t> parent = {0, 0, 1, 2, 3, 3, 5, 5, 5, 8, 9};
  std::vector<ScopeKind> kind = {K::Root, K::ProcFrame, K::Loop,     K::Loop,      K::Stmt, K::Loop,
                                 K::Stmt, K::Stmt,      K::CallSite, K::ProcFrame, K::Stmt};
  std::vector<std::uint64_t> raw = {0, 0, 0, 0, 1, 0, 5, 5, 0, 0, 100};
  enum { Root, Main, LoopX, LoopY, Stmt12, LoopZ, Stmt14, Stmt15, Call16, Work, Stmt3 };
};

}  // namespace

TEST(Propagation, ThesisFigure75) {
  const Fig75 f;
  const ExclusiveInclusive r = propagate(f.parent, f.kind, f.raw);
  EXPECT_EQ(r.exclusive[Fig75::Main], 11u);
  EXPECT_EQ(r.inclusive[Fig75::Main], 111u);
  EXPECT_EQ(r.exclusive[Fig75::LoopX], 0u);
  EXPECT_EQ(r.inclusive[Fig75::LoopX], 111u);
  EXPECT_EQ(r.exclusive[Fig75::LoopY], 1u);
  EXPECT_EQ(r.inclusive[Fig75::LoopY], 111u);
  EXPECT_EQ(r.exclusive[Fig75::LoopZ], 10u);
  EXPECT_EQ(r.inclusive[Fig75::LoopZ], 110u);
  EXPECT_EQ(r.exclusive[Fig75::Call16], 0u);
  EXPECT_EQ(r.inclusive[Fig75::Call16], 100u);
  EXPECT_EQ(r.exclusive[Fig75::Work], 100u);
  EXPECT_EQ(r.inclusive[Fig75::Work], 100u);
  EXPECT_EQ(r.exclusive[Fig75::Stmt14], 5u);
  EXPECT_EQ(r.inclusive[Fig75::Stmt14], 5u);
  EXPECT_EQ(r.exclusive[Fig75::Root], 0u);
  EXPECT_EQ(r.inclusive[Fig75::Root], 111u);
}

TEST(Propagation, AlienScopesAndStatementsDirectlyInAFrame) {
  // Root > f (ProcFrame) > {Stmt 2, Alien g > {Stmt 3, Loop > Stmt 4}}
  const std::vector<std::uint32_t> parent = {0, 0, 1, 1, 3, 3, 5};
  const std::vector<ScopeKind> kind = {K::Root, K::ProcFrame, K::Stmt, K::Alien, K::Stmt, K::Loop, K::Stmt};
  const std::vector<std::uint64_t> raw = {0, 0, 2, 0, 3, 0, 4};
  const ExclusiveInclusive r = propagate(parent, kind, raw);
  EXPECT_EQ(r.exclusive[1], 9u);  // every Stmt in the frame, through Alien and Loop
  EXPECT_EQ(r.inclusive[1], 9u);
  EXPECT_EQ(r.exclusive[3], 3u);  // Alien: Stmt children only
  EXPECT_EQ(r.inclusive[3], 7u);
  EXPECT_EQ(r.exclusive[5], 4u);
  EXPECT_EQ(r.inclusive[5], 4u);
}

TEST(Propagation, RejectsMalformedTrees) {
  const std::vector<std::uint32_t> parent = {0, 2, 0};
  const std::vector<ScopeKind> kind = {K::Root, K::Stmt, K::ProcFrame};
  const std::vector<std::uint64_t> raw = {0, 1, 0};
  EXPECT_THROW(propagate(parent, kind, raw), std::invalid_argument);
  EXPECT_THROW(propagate(parent, kind, std::vector<std::uint64_t>{0}), std::invalid_argument);
  EXPECT_TRUE(propagate({}, {}, {}).exclusive.empty());
}

TEST(Propagation, PerThreadValuesThenAccumulators) {
  // tests/data/fig75.json: thread 1 does exactly twice the work of thread 0. E and I are
  // propagated per thread, then each gets its own accumulator (never derived from one another).
  const Fig75 f;
  std::vector<std::uint64_t> raw1 = f.raw;
  for (auto& v : raw1) v *= 2;
  const std::vector<std::uint64_t> raw0 = f.raw;
  const std::vector<std::uint64_t>& twice = raw1;
  std::vector<IntAccumulator> e(f.parent.size()), i(f.parent.size());
  std::uint32_t profile = 0;
  for (const std::vector<std::uint64_t>* raw : {&raw0, &twice}) {
    const ExclusiveInclusive r = propagate(f.parent, f.kind, *raw);
    for (std::size_t n = 0; n < f.parent.size(); ++n) {
      e[n].accumulate(profile, r.exclusive[n]);
      i[n].accumulate(profile, r.inclusive[n]);
    }
    ++profile;
  }
  const Statistics mainI = i[Fig75::Main].finalize(2, Population::All);
  EXPECT_EQ(mainI.sum, 333);
  EXPECT_EQ(mainI.mean, 166.5);
  EXPECT_EQ(mainI.stddev, 55.5);
  EXPECT_EQ(mainI.argmax, 1u);
  EXPECT_EQ(mainI.argmin, 0u);
  const Statistics loopZE = e[Fig75::LoopZ].finalize(2, Population::All);
  EXPECT_EQ(loopZE.sum, 30);
  // The CallSite has no exclusive value anywhere: absent in both profiles.
  EXPECT_EQ(e[Fig75::Call16].count(), 0u);
  EXPECT_EQ(i[Fig75::Call16].finalize(2, Population::All).sum, 300);
}

TEST(Propagation, PropagatorIsReusableAcrossProfiles) {
  const Fig75 f;
  const Propagator propagator(f.parent, f.kind);
  EXPECT_EQ(propagator.size(), f.parent.size());
  std::vector<std::uint64_t> e(f.parent.size(), 777), i(f.parent.size(), 777);  // overwritten
  propagator.run(f.raw, e, i);
  EXPECT_EQ(e[Fig75::Main], 11u);
  EXPECT_EQ(i[Fig75::Main], 111u);
  std::vector<std::uint64_t> other(f.parent.size(), 0);
  other[Fig75::Stmt3] = 7;
  propagator.run(other, e, i);
  EXPECT_EQ(e[Fig75::Main], 0u);
  EXPECT_EQ(i[Fig75::Main], 7u);
  EXPECT_EQ(e[Fig75::Work], 7u);
  std::vector<std::uint64_t> shortE(2);
  EXPECT_THROW(propagator.run(f.raw, shortE, i), std::invalid_argument);
}
