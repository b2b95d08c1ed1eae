// The read's balancing between neighbouring ranks (stages.hpp, BatchClaims): ranks claim batches
// from the intervals they share with their neighbours, concurrently; every batch is read exactly
// once, each rank's batches form one contiguous range, and neighbouring ranks' ranges meet.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
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
// the interval between their middles; every rank claims on its own thread, reading each batch in
// about the same time. `slow` (if any) starts only once the others have claimed everything they
// could.
struct Outcome {
  std::vector<std::vector<std::size_t>> taken;  // per rank, in claim order
  std::vector<std::pair<std::size_t, std::size_t>> range;
};
Outcome claimConcurrently(std::size_t ranks, std::size_t batches, int slow = -1) {
  std::vector<std::size_t> low(ranks + 1), middle(ranks);
  for (std::size_t r = 0; r <= ranks; ++r) low[r] = batches * r / ranks;
  for (std::size_t r = 0; r < ranks; ++r) middle[r] = low[r] + (low[r + 1] - low[r]) / 2;
  constexpr std::size_t kWords = BatchClaims::kWords;
  std::vector<std::uint64_t> words(ranks * kWords, 0);  // rank r's at r * kWords, as in a shared window
  auto of = [&](std::size_t r) { return words.data() + r * kWords; };
  Outcome out;
  out.taken.resize(ranks);
  out.range.resize(ranks);
  std::atomic<std::size_t> finished{0};
  std::atomic<bool> go{false};
  std::vector<std::thread> threads;
  for (std::size_t r = 0; r < ranks; ++r)
    threads.emplace_back([&, r] {
      while (!go) std::this_thread::yield();
      if (static_cast<int>(r) == slow)
        while (finished < ranks - 1) std::this_thread::yield();
      const BatchClaims::Side lower =
          r == 0 ? BatchClaims::Side{nullptr, nullptr, low[0], middle[0], low[0]}
                 : BatchClaims::Side{of(r - 1) + BatchClaims::kQueue, of(r - 1), middle[r - 1], middle[r], low[r]};
      const BatchClaims::Side upper =
          r + 1 == ranks
              ? BatchClaims::Side{nullptr, nullptr, middle[r], low[ranks], low[ranks]}
              : BatchClaims::Side{of(r) + BatchClaims::kQueue, of(r + 1), middle[r], middle[r + 1], low[r + 1]};
      BatchClaims claims(lower, upper, of(r));
      while (const auto b = claims.next()) {
        out.taken[r].push_back(*b);
        std::this_thread::sleep_for(std::chrono::microseconds(200));  // reading the batch
        claims.finished();
      }
      out.range[r] = {claims.first(), claims.last()};
      ++finished;
    });
  go = true;
  for (auto& t : threads) t.join();
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
  BatchClaims claims({nullptr, nullptr, 3, 7, 3}, {nullptr, nullptr, 7, 12, 12});
  std::vector<std::size_t> expected;
  for (std::size_t b = 3; b < 12; ++b) expected.push_back(b);
  EXPECT_EQ(drain(claims), expected);
  EXPECT_EQ(claims.first(), 3U);
  EXPECT_EQ(claims.last(), 12U);
  EXPECT_FALSE(claims.next());
}

TEST(BatchClaims, OwnPartsFirstThenTheSharedSidesOutwardsByTurns) {
  // Neighbours that have not begun reading: this rank takes their batches too.
  std::uint64_t below[BatchClaims::kWords] = {}, above[BatchClaims::kWords] = {};
  BatchClaims claims({below, below, 2, 6, 4}, {above, above, 6, 9, 8});
  EXPECT_EQ(drain(claims), (std::vector<std::size_t>{5, 6, 4, 7, 3, 8, 2}));
  EXPECT_EQ(claims.first(), 2U);
  EXPECT_EQ(claims.last(), 9U);
  // A rank with its own lower part and a shared upper side: its own part first, ascending.
  std::uint64_t next[BatchClaims::kWords] = {};
  BatchClaims edge({nullptr, nullptr, 0, 3, 0}, {next, next, 3, 5, 4});
  EXPECT_EQ(drain(edge), (std::vector<std::size_t>{0, 1, 2, 3, 4}));
}

// Beyond the static boundary a batch is taken only while this rank would still end first and
// the neighbour is clearly slower. This rank (clock: 10 time units a batch) reads its own 0..3 of
// the shared [0, 8) (boundary 4); the upper neighbour has claimed `theirTaken` from the top and
// `theirClaims` in all; it began at `n.start` and finished its `n.done`-th batch at `n.last` (0:
// at its start). Returns whether this rank then takes batch 4 (at 40), and the end of its range
// once it has claimed all it would.
struct Neighbour {
  std::uint64_t start, done, last = 0;
};
std::pair<bool, std::size_t> takesBatch4(std::uint64_t theirTaken, std::uint64_t theirClaims, Neighbour n) {
  std::uint64_t clock = 0;
  std::uint64_t queue[BatchClaims::kWords] = {theirTaken << 32};
  std::uint64_t theirs[BatchClaims::kWords] = {};
  theirs[BatchClaims::kStart] = n.start;
  theirs[BatchClaims::kDone] = n.done;
  theirs[BatchClaims::kClaimed] = theirClaims;
  theirs[BatchClaims::kLast] = n.last != 0 ? n.last : n.start;
  BatchClaims claims({nullptr, nullptr, 0, 0, 0}, {queue, theirs, 0, 8, 4}, nullptr, [&] { return clock; });
  for (std::size_t b = 0; b < 4; ++b) {
    EXPECT_EQ(claims.next(), b);
    clock += 10;
    claims.finished();
  }
  const bool taken = claims.next().has_value();
  if (taken) claims.finished();
  while (claims.next()) claims.finished();
  return {taken, claims.last()};
}

TEST(BatchClaims, ANeighboursBatchIsTakenOnlyWhenThatEndsTheReadSooner) {
  struct Case {
    Neighbour neighbour;
    bool taken;
  };
  // The neighbour has claimed 7, 6, 5: batch 4 is its last. At 40 this rank has read 4 batches
  // in 40 (9.75 a batch from its start at 1); taking batch 4 ends it near 50, the neighbour ends
  // at 4 x its time per batch. As fast: the shares stay; slower, or not reading yet: taken.
  for (const Case c : {Case{{10, 3, 40}, false}, Case{{1, 1, 40}, true}, Case{{0, 0}, true}, Case{{30, 0}, false},
                       Case{{5, 0}, true}}) {
    SCOPED_TRACE(testing::Message() << "neighbour began at " << c.neighbour.start << ", read " << c.neighbour.done);
    EXPECT_EQ(takesBatch4(3, 3, c.neighbour), std::make_pair(c.taken, c.taken ? 5UL : 4UL));
  }
  // A neighbour with much left (claims on its other side count: 5 in all, and 3 unclaimed
  // here), slower per batch: taken only when it is slower by more than kSlowerBy (12 against
  // 9.75 is not; 15 is).
  for (const Case c : {Case{{28, 1, 40}, false}, Case{{25, 1, 40}, true}}) {
    SCOPED_TRACE(testing::Message() << "neighbour began at " << c.neighbour.start);
    EXPECT_EQ(takesBatch4(1, 5, c.neighbour).first, c.taken);
  }
}

// A neighbour's seconds per batch are those of the batches it has finished: the part of the
// batch it is reading does not count as if it were finished ones, unless that batch has already
// taken longer than they did.
TEST(BatchClaims, ANeighboursRateCountsOnlyItsFinishedBatches) {
  struct Case {
    Neighbour neighbour;
    bool taken;
  };
  for (const Case c : {
           // 3 batches from 1 to 34 (11 each, within kSlowerBy of 9.75), 6 into its fourth:
           // (40 - 1) / 3 = 13 a batch would count it slower.
           Case{{1, 3, 34}, false},
           // 2 batches by 25 (12 each), 15 into its third: already longer than kSlowerBy x 9.75.
           Case{{1, 2, 25}, true},
           // 1 batch by 11 (10), stalled since: 29 and counting.
           Case{{1, 1, 11}, true},
           // 3 batches by 40 (13 each): slower.
           Case{{1, 3, 40}, true},
       }) {
    SCOPED_TRACE(testing::Message() << "neighbour read " << c.neighbour.done << ", the last ending at "
                                    << c.neighbour.last);
    EXPECT_EQ(takesBatch4(1, 5, c.neighbour).first, c.taken);
  }
}

TEST(BatchClaims, EmptyIntervalsGiveAnEmptyRangeAtTheMiddle) {
  std::uint64_t words[BatchClaims::kWords] = {};
  BatchClaims claims({words, words, 4, 4, 4}, {nullptr, nullptr, 4, 4, 4});
  EXPECT_FALSE(claims.next());
  EXPECT_EQ(claims.first(), 4U);
  EXPECT_EQ(claims.last(), 4U);
}

TEST(BatchClaims, SidesThatDoNotMeetAreRefused) {
  EXPECT_THROW(BatchClaims({nullptr, nullptr, 0, 4, 0}, {nullptr, nullptr, 5, 8, 8}), std::logic_error);
  EXPECT_THROW(BatchClaims({nullptr, nullptr, 4, 2, 4}, {nullptr, nullptr, 2, 8, 8}), std::logic_error);
  std::uint64_t words[BatchClaims::kWords] = {};
  EXPECT_THROW(BatchClaims({nullptr, nullptr, 0, 4, 0}, {words, nullptr, 4, 8, 6}), std::logic_error);  // no neighbour
  EXPECT_THROW(BatchClaims({nullptr, nullptr, 0, 4, 0}, {words, words, 4, 8, 9}),
               std::logic_error);  // boundary outside
}

// Two to eight ranks claiming at once, eight times each: whatever the interleaving, a partition into
// contiguous ranges that meet.
TEST(BatchClaims, ConcurrentNeighboursPartitionTheBatches) {
  for (std::size_t ranks = 2; ranks <= 8; ++ranks)
    for (const std::size_t batches : {std::size_t{0}, std::size_t{1}, ranks - 1, ranks, std::size_t{64}})
      for (int round = 0; round < 8; ++round) {
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
