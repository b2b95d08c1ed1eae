// Frames (Benavides ch. 2.2): the golden sequence of Fig. 2.13 from the traces of Fig. 2.11, and
// the properties the k-way merge promises.
#include <gtest/gtest.h>

#include "analysis/log_fixtures.hpp"

namespace csp::analysis {
namespace {

using test::LogBuilder;

struct Seen {
  std::uint64_t begin, end;
  std::vector<std::string> states;  // per thread: "phi" or "R1>R2"
};

std::vector<Seen> frames(const LogBuilder& b, std::size_t* consumed = nullptr, FrameStats* stats = nullptr) {
  FrameBuilder fb(b.tree, b.streams(consumed));
  std::vector<Seen> out;
  Frame f;
  while (fb.next(f)) {
    Seen s{f.beginNs, f.endNs, {}};
    for (const auto& st : *f.states) {
      std::string path;
      for (std::uint32_t r = st.region; r != 0; r = b.tree.parent[r])
        path = b.tree.name[r] + (path.empty() ? "" : ">" + path);
      s.states.push_back(path.empty() ? "phi" : path);
    }
    out.push_back(std::move(s));
  }
  if (stats) *stats = fb.stats();
  return out;
}

// Fig. 2.11's traces, written so that they produce Fig. 2.13's frames: x_i = 10 i ns.
LogBuilder fig211() {
  LogBuilder b;
  const auto t1 = b.thread(1), t2 = b.thread(2);
  b.enter(t1, 20, "R1");
  b.enter(t1, 40, "R1/R2");
  b.exit(t1, 50, "R1/R2");
  b.exit(t1, 60, "R1");
  b.span(t1, 70, 80, "R3");
  b.span(t2, 30, 50, "R1");
  b.span(t2, 80, 90, "R3");
  return b;
}

TEST(Frames, Figure213FrameSequence) {
  const auto f = frames(fig211());
  // [x1,x2) and [x6,x7) (all threads in phi) are crossed out in the figure: not frames.
  const std::vector<Seen> expected = {
      {20, 30, {"R1", "phi"}}, {30, 40, {"R1", "R1"}},  {40, 50, {"R1>R2", "R1"}},
      {50, 60, {"R1", "phi"}}, {70, 80, {"R3", "phi"}}, {80, 90, {"phi", "R3"}},
  };
  ASSERT_EQ(f.size(), expected.size());
  for (std::size_t i = 0; i < f.size(); ++i) {
    EXPECT_EQ(f[i].begin, expected[i].begin) << i;
    EXPECT_EQ(f[i].end, expected[i].end) << i;
    EXPECT_EQ(f[i].states, expected[i].states) << i;
  }
}

TEST(Frames, SimultaneousEventsOfSeveralThreadsMakeOneBoundary) {
  LogBuilder b;
  const auto a = b.thread(0), c = b.thread(1);
  b.span(a, 0, 10, "X");
  b.span(c, 5, 10, "Y");  // both leave at 10
  b.span(a, 10, 20, "Y");
  const auto f = frames(b);
  ASSERT_EQ(f.size(), 3u);
  EXPECT_EQ(f[1].begin, 5u);
  EXPECT_EQ(f[1].end, 10u);
  EXPECT_EQ(f[2].begin, 10u);
  EXPECT_EQ(f[2].states, (std::vector<std::string>{"Y", "phi"}));
}

TEST(Frames, LeavingAndReenteringAtTheSameTimeKeepsTheFrame) {
  LogBuilder b;
  const auto a = b.thread(0);
  b.span(a, 0, 10, "X");
  b.span(a, 10, 30, "X");  // same state on both sides of t = 10: one maximal frame
  const auto f = frames(b);
  ASSERT_EQ(f.size(), 1u);
  EXPECT_EQ(f[0].begin, 0u);
  EXPECT_EQ(f[0].end, 30u);
}

TEST(Frames, DynamicIdsAreDifferentStates) {
  LogBuilder b;
  const auto a = b.thread(0);
  b.span(a, 0, 10, "it#1");
  b.span(a, 10, 30, "it#2");
  EXPECT_EQ(frames(b).size(), 2u);
}

TEST(Frames, MismatchedExitIsIgnoredAndCounted) {
  LogBuilder b;
  const auto a = b.thread(0);
  b.enter(a, 0, "X");
  b.exit(a, 5, "Y");  // not the open region
  b.exit(a, 10, "X");
  FrameStats st;
  const auto f = frames(b, nullptr, &st);
  ASSERT_EQ(f.size(), 1u);
  EXPECT_EQ(f[0].end, 10u);
  EXPECT_EQ(st.mismatchedExits, 1u);
  EXPECT_EQ(st.openAtEnd, 0u);
}

TEST(Frames, RegionOpenAfterTheLastEventHasNoEndAndIsCounted) {
  LogBuilder b;
  const auto a = b.thread(0), c = b.thread(1);
  b.enter(a, 0, "X");
  b.span(c, 5, 15, "Y");
  FrameStats st;
  const auto f = frames(b, nullptr, &st);
  ASSERT_EQ(f.size(), 2u);  // [0,5) and [5,15); after 15 thread 0's state has no end
  EXPECT_EQ(f[1].end, 15u);
  EXPECT_EQ(st.openAtEnd, 1u);
}

// Constant memory per thread: when a frame ending at time t is returned, the builder has read
// only events up to t plus one look-ahead event per thread.
TEST(Frames, StreamsAreReadLazily) {
  LogBuilder b;
  constexpr int kThreads = 4, kIterations = 1000;
  for (int t = 0; t < kThreads; ++t) b.thread(t);
  for (int i = 0; i < kIterations; ++i)
    for (int t = 0; t < kThreads; ++t)
      b.span(static_cast<std::size_t>(t), 100u * i + static_cast<unsigned>(t),
             100u * i + 50u + static_cast<unsigned>(t), "W");
  std::size_t consumed = 0;
  FrameBuilder fb(b.tree, b.streams(&consumed));
  Frame f;
  std::size_t frameCount = 0;
  while (fb.next(f)) {
    ++frameCount;
    std::size_t upTo = 0;  // events at or before the frame's end
    for (const auto& th : b.threads)
      for (const auto& e : th) upTo += e.timeNs <= f.endNs;
    EXPECT_LE(consumed, upTo + kThreads);
  }
  EXPECT_EQ(frameCount, static_cast<std::size_t>(kIterations) * (2 * kThreads - 1));
  EXPECT_EQ(fb.stats().events, static_cast<std::uint64_t>(2 * kThreads * kIterations));
}

}  // namespace
}  // namespace csp::analysis
