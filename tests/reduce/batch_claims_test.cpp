// The read's balancing between neighbouring ranks (stages.hpp, BatchClaims): ranks claim batches
// from the intervals they share with their neighbours, concurrently; every batch is read exactly
// once, each rank's batches form one contiguous range, and neighbouring ranks' ranges meet.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <memory>
#include <thread>
#include <vector>

#include "stages.hpp"

using csp::reduce::stages::BatchClaims;

namespace {

std::vector<std::size_t> drain(BatchClaims& claims) {
  std::vector<std::size_t> out;
  while (const auto b = claims.next()) out.push_back(*b);
  return out;
}

// `ranks` ranks over `batches` batches in equal static shares, each pair of neighbours sharing
// the interval between their middles; every rank claims on its own thread. `slow` (if any)
// starts only once the others have claimed everything they could.
struct Outcome {
  std::vector<std::vector<std::size_t>> taken;  // per rank, in claim order
  std::vector<std::pair<std::size_t, std::size_t>> range;
};
Outcome claimConcurrently(std::size_t ranks, std::size_t batches, int slow = -1) {
  std::vector<std::size_t> low(ranks + 1), middle(ranks);
  for (std::size_t r = 0; r <= ranks; ++r) low[r] = batches * r / ranks;
  for (std::size_t r = 0; r < ranks; ++r) middle[r] = low[r] + (low[r + 1] - low[r]) / 2;
  std::vector<std::uint64_t> words(ranks, 0);  // words[r]: shared by r and r + 1
  std::vector<std::unique_ptr<BatchClaims>> claims;
  for (std::size_t r = 0; r < ranks; ++r) {
    const BatchClaims::Side lower = r == 0 ? BatchClaims::Side{nullptr, low[0], middle[0]}
                                           : BatchClaims::Side{&words[r - 1], middle[r - 1], middle[r]};
    const BatchClaims::Side upper = r + 1 == ranks ? BatchClaims::Side{nullptr, middle[r], low[ranks]}
                                                   : BatchClaims::Side{&words[r], middle[r], middle[r + 1]};
    claims.push_back(std::make_unique<BatchClaims>(lower, upper));
  }
  Outcome out;
  out.taken.resize(ranks);
  std::atomic<std::size_t> finished{0};
  std::atomic<bool> go{false};
  std::vector<std::thread> threads;
  for (std::size_t r = 0; r < ranks; ++r)
    threads.emplace_back([&, r] {
      while (!go) std::this_thread::yield();
      if (static_cast<int>(r) == slow)
        while (finished < ranks - 1) std::this_thread::yield();
      out.taken[r] = drain(*claims[r]);
      ++finished;
    });
  go = true;
  for (auto& t : threads) t.join();
  for (const auto& c : claims) out.range.emplace_back(c->first(), c->last());
  return out;
}

void expectPartition(const Outcome& o, std::size_t batches) {
  std::vector<int> readBy(batches, -1);
  for (std::size_t r = 0; r < o.taken.size(); ++r) {
    const auto [first, last] = o.range[r];
    ASSERT_LE(first, last) << "rank " << r;
    ASSERT_EQ(o.taken[r].size(), last - first) << "rank " << r << ": its batches are not its range";
    for (const std::size_t b : o.taken[r]) {
      ASSERT_LT(b, batches);
      EXPECT_EQ(readBy[b], -1) << "batch " << b << " read by rank " << readBy[b] << " and rank " << r;
      readBy[b] = static_cast<int>(r);
      EXPECT_TRUE(b >= first && b < last)
          << "rank " << r << " read batch " << b << " outside [" << first << ", " << last << ")";
    }
    if (r > 0) {
      EXPECT_EQ(o.range[r - 1].second, first) << "ranks " << r - 1 << " and " << r << " do not meet";
    }
  }
  EXPECT_EQ(o.range.front().first, 0U);
  EXPECT_EQ(o.range.back().second, batches);
  for (std::size_t b = 0; b < batches; ++b) EXPECT_NE(readBy[b], -1) << "batch " << b << " read by no rank";
}

}  // namespace

TEST(BatchClaims, ARankAloneReadsItsShareInOrder) {
  BatchClaims claims({nullptr, 3, 7}, {nullptr, 7, 12});
  std::vector<std::size_t> expected;
  for (std::size_t b = 3; b < 12; ++b) expected.push_back(b);
  EXPECT_EQ(drain(claims), expected);
  EXPECT_EQ(claims.first(), 3U);
  EXPECT_EQ(claims.last(), 12U);
  EXPECT_FALSE(claims.next());
}

TEST(BatchClaims, OwnPartsFirstThenTheSharedSidesOutwardsByTurns) {
  std::uint64_t below = 0, above = 0;
  BatchClaims claims({&below, 2, 6}, {&above, 6, 9});
  EXPECT_EQ(drain(claims), (std::vector<std::size_t>{5, 6, 4, 7, 3, 8, 2}));
  EXPECT_EQ(claims.first(), 2U);
  EXPECT_EQ(claims.last(), 9U);
  // A rank with its own lower part and a shared upper side: its own part first, ascending.
  std::uint64_t word = 0;
  BatchClaims edge({nullptr, 0, 3}, {&word, 3, 5});
  EXPECT_EQ(drain(edge), (std::vector<std::size_t>{0, 1, 2, 3, 4}));
}

TEST(BatchClaims, EmptyIntervalsGiveAnEmptyRangeAtTheMiddle) {
  std::uint64_t word = 0;
  BatchClaims claims({&word, 4, 4}, {nullptr, 4, 4});
  EXPECT_FALSE(claims.next());
  EXPECT_EQ(claims.first(), 4U);
  EXPECT_EQ(claims.last(), 4U);
}

TEST(BatchClaims, SidesThatDoNotMeetAreRefused) {
  EXPECT_THROW(BatchClaims({nullptr, 0, 4}, {nullptr, 5, 8}), std::logic_error);
  EXPECT_THROW(BatchClaims({nullptr, 4, 2}, {nullptr, 2, 8}), std::logic_error);
}

// Two to eight ranks claiming at once, many times: whatever the interleaving, a partition into
// contiguous ranges that meet.
TEST(BatchClaims, ConcurrentNeighboursPartitionTheBatches) {
  for (std::size_t ranks = 2; ranks <= 8; ++ranks)
    for (const std::size_t batches : {std::size_t{0}, std::size_t{1}, ranks - 1, ranks, std::size_t{64}})
      for (int round = 0; round < 20; ++round) {
        SCOPED_TRACE(testing::Message() << ranks << " ranks, " << batches << " batches, round " << round);
        expectPartition(claimConcurrently(ranks, batches), batches);
      }
}

// A rank that starts late finds its shared sides taken: its neighbours read them, and it keeps
// only what it does not share (nothing, for a rank between two others).
TEST(BatchClaims, ALateRankLeavesItsSharedSidesToItsNeighbours) {
  const std::size_t batches = 64;
  for (std::size_t ranks = 2; ranks <= 4; ++ranks)
    for (int slow = 0; slow < static_cast<int>(ranks); ++slow) {
      SCOPED_TRACE(testing::Message() << ranks << " ranks, rank " << slow << " late");
      const auto o = claimConcurrently(ranks, batches, slow);
      expectPartition(o, batches);
      // The first rank's own part is the lower half of its share, the last rank's the upper half.
      const std::size_t firstShare = batches / ranks, lastShare = batches - batches * (ranks - 1) / ranks;
      const std::size_t own = slow == 0                             ? firstShare / 2
                              : slow + 1 == static_cast<int>(ranks) ? lastShare - lastShare / 2
                                                                    : 0;
      EXPECT_EQ(o.taken[static_cast<std::size_t>(slow)].size(), own);
    }
}
