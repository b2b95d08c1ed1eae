// The reader must reject every kind of damage with a message naming the file and the defect,
// and never crash (this suite also runs under ASan/UBSan).
#include <gtest/gtest.h>

#include <cstring>
#include <functional>

#include "csp/storage/profile_io.hpp"
#include "storage/profile_fixtures.hpp"

using namespace csp;

namespace {

std::string parseError(const std::vector<std::byte>& image, bool verifyChecksum = true) {
  try {
    storage::parseProfile(image, "bad.cspprof", {verifyChecksum});
  } catch (const storage::ProfileError& e) {
    EXPECT_EQ(e.file(), "bad.cspprof");
    EXPECT_EQ(std::string(e.what()).rfind("bad.cspprof: ", 0), 0u) << e.what();
    return e.defect();
  }
  return "";
}

std::string mutatedError(const std::function<void(ThreadProfile&)>& mutate) {
  ThreadProfile p = test::fullSymbolicProfile();
  mutate(p);
  return parseError(storage::serializeProfileUnchecked(p));
}

TEST(ProfileReject, EveryTruncationIsReported) {
  const auto image = storage::serializeProfile(test::fullSymbolicProfile());
  for (std::size_t len = 0; len < image.size(); ++len) {
    std::vector<std::byte> cut(image.begin(), image.begin() + static_cast<std::ptrdiff_t>(len));
    const auto err = parseError(cut);
    ASSERT_NE(err.find("truncated"), std::string::npos) << "length " << len << ": " << err;
  }
}

TEST(ProfileReject, FlippedBytesFailTheChecksum) {
  const auto image = storage::serializeProfile(test::fullSymbolicProfile());
  for (std::size_t at = storage::kProfileHeaderBytes; at < image.size(); ++at) {
    auto bad = image;
    bad[at] ^= std::byte{0x40};
    ASSERT_EQ(parseError(bad), "checksum mismatch: the file is damaged") << "byte " << at;
  }
}

TEST(ProfileReject, FlippedBytesWithoutChecksumNeverCrash) {
  // Past the checksum, the message parser and the structural checks must cope on their own.
  const auto image = storage::serializeProfile(test::fullSymbolicProfile());
  std::size_t rejected = 0;
  for (std::size_t at = storage::kProfileHeaderBytes; at < image.size(); ++at) {
    for (std::byte mask : {std::byte{0x01}, std::byte{0x80}, std::byte{0xFF}}) {
      auto bad = image;
      bad[at] ^= mask;
      if (!parseError(bad, false).empty()) ++rejected;
    }
  }
  EXPECT_GT(rejected, 0u);
}

TEST(ProfileReject, ValuesBeyond64BitsNeverWrap) {
  // Two statements of ~9.3e18 each: their procedure's inclusive value would wrap in 64 bits.
  auto err = mutatedError([](ThreadProfile& p) {
    p.metrics[1].kind = MetricKind::Counted;  // keeps the sample bookkeeping out of the way
    for (std::size_t i = 0; i < p.values.size(); ++i)
      if (p.values.metric[i] == 1) p.values.count[i] = 9'300'000'000'000'000'000ULL;
  });
  EXPECT_NE(err.find("beyond 2^64 - 1"), std::string::npos) << err;
  EXPECT_NE(err.find("at CCT node"), std::string::npos) << err;
  // count x period alone beyond 64 bits.
  err = mutatedError([](ThreadProfile& p) {
    p.metrics[1].kind = MetricKind::Counted;
    p.metrics[1].period = std::uint64_t{1} << 40;
    for (std::size_t i = 0; i < p.values.size(); ++i)
      if (p.values.metric[i] == 1) p.values.count[i] = std::uint64_t{1} << 30;
  });
  EXPECT_NE(err.find("counts x period"), std::string::npos) << err;
}

TEST(ProfileReject, SampleTotalBeyond64BitsIsNamedNotTruncated) {
  // The samples handled (sampled counts + dropped) cannot be recorded in 64 bits: the message
  // says so instead of printing the sum cut to 64 bits.
  const auto err = mutatedError([](ThreadProfile& p) { p.stats.droppedSamples = ~std::uint64_t{0}; });
  EXPECT_NE(err.find("add up to more than 2^64 - 1"), std::string::npos) << err;
}

TEST(ProfileReject, WrongMagic) {
  auto image = storage::serializeProfile(test::fullSymbolicProfile());
  image[0] = std::byte{'X'};
  EXPECT_EQ(parseError(image), "not a CSP profile (bad magic)");
}

TEST(ProfileReject, NewerMajorVersion) {
  auto image = storage::serializeProfile(test::fullSymbolicProfile());
  const std::uint16_t major = 2, minor = 3;
  std::memcpy(image.data() + 8, &major, 2);
  std::memcpy(image.data() + 10, &minor, 2);
  EXPECT_EQ(parseError(image), "unsupported format version 2.3 (this build reads major version 1)");
}

TEST(ProfileReject, NewerMinorVersionIsRead) {
  auto image = storage::serializeProfile(test::fullSymbolicProfile());
  const std::uint16_t minor = 9;
  std::memcpy(image.data() + 10, &minor, 2);
  EXPECT_EQ(parseError(image), "");
}

TEST(ProfileReject, TrailingBytes) {
  auto image = storage::serializeProfile(test::fullSymbolicProfile());
  image.resize(image.size() + 8);
  EXPECT_EQ(parseError(image), "8 trailing bytes after the payload");
}

TEST(ProfileReject, DanglingParent) {
  EXPECT_EQ(mutatedError([](ThreadProfile& p) { p.cct.parent[3] = 999; }),
            "CCT node 3 has parent 999, which does not exist (" +
                std::to_string(test::fullSymbolicProfile().cct.size()) + " nodes)");
}

TEST(ProfileReject, Cycle) {
  EXPECT_EQ(mutatedError([](ThreadProfile& p) {
              p.cct.parent[2] = 3;  // 3's parent is 2
            }),
            "CCT has a cycle through node 2 and its parent 3");
}

TEST(ProfileReject, ParentAfterChildWithoutCycle) {
  EXPECT_EQ(mutatedError([](ThreadProfile& p) { p.cct.parent[2] = 8; }),
            "CCT node 2 has parent 8, which does not precede it");
}

TEST(ProfileReject, SecondRoot) {
  EXPECT_EQ(mutatedError([](ThreadProfile& p) { p.cct.parent[2] = kNoIndex; }),
            "CCT node 2 has no parent (only node 0 may be a root)");
}

TEST(ProfileReject, MetricIdOutOfRange) {
  EXPECT_EQ(mutatedError([](ThreadProfile& p) { p.values.metric.back() = 3; }),
            "value 4 has metric id 3, out of range (3 metrics)");
}

TEST(ProfileReject, ValueAtMissingNode) {
  EXPECT_NE(mutatedError([](ThreadProfile& p) {
              p.values.node.back() = 500;
            }).find("value 4 is at CCT node 500, which does not exist"),
            std::string::npos);
}

TEST(ProfileReject, UnsortedValues) {
  EXPECT_NE(
      mutatedError([](ThreadProfile& p) { std::swap(p.values.node.front(), p.values.node.back()); }).find("not sorted"),
      std::string::npos);
}

TEST(ProfileReject, ZeroValue) {
  EXPECT_EQ(mutatedError([](ThreadProfile& p) {
              p.stats.samples -= p.values.count[0];
              p.values.count[0] = 0;
            }),
            "value 0 is zero (zeros are never stored)");
}

TEST(ProfileReject, InconsistentSampleTotal) {
  EXPECT_EQ(mutatedError([](ThreadProfile& p) { p.stats.samples += 1; }),
            "sample counts are inconsistent: 122 samples recorded in the header, but the sampled metrics' counts "
            "plus 3 dropped add up to 121");
}

TEST(ProfileReject, FrameOutOfRange) {
  EXPECT_NE(mutatedError([](ThreadProfile& p) { p.cct.frame[1] = 77; }).find("CCT node 1 refers to frame 77"),
            std::string::npos);
}

TEST(ProfileReject, StringOutOfRange) {
  EXPECT_NE(mutatedError([](ThreadProfile& p) { p.symbolicFrames[0].file = 1000; }).find("file string id 1000"),
            std::string::npos);
}

TEST(ProfileReject, CountsOnANonStatement) {
  EXPECT_NE(mutatedError([](ThreadProfile& p) {
              // Move the first value to node 1 (main, a procedure frame).
              p.values.node[0] = 1;
            }).find("counts belong to statements"),
            std::string::npos);
}

TEST(ProfileReject, StatementWithChildren) {
  EXPECT_NE(mutatedError([](ThreadProfile& p) {
              // Hang a statement below the last statement.
              const auto leaf = static_cast<std::uint32_t>(p.cct.size() - 1);
              p.cct.parent.push_back(leaf);
              p.cct.frame.push_back(p.cct.frame[leaf]);
            }).find("lies below a statement"),
            std::string::npos);
}

TEST(ProfileReject, ProcedureWithoutCallSite) {
  EXPECT_NE(mutatedError([](ThreadProfile& p) {
              // main -> main without a call site between.
              p.cct.parent.push_back(1);
              p.cct.frame.push_back(p.cct.frame[1]);
            }).find("must be an outermost frame or follow a call site"),
            std::string::npos);
}

TEST(ProfileReject, AddressFrameWithUnknownModule) {
  ThreadProfile p = test::fullAddressProfile();
  p.addressFrames[1].module = 9;
  EXPECT_EQ(parseError(storage::serializeProfileUnchecked(p)), "address frame 1 refers to load module 9 (2 modules)");
}

// Unwind notes (format 1.1): one per node of an address profile; a scan's candidates lie
// between the frame without tables and the frame where unwinding resumed, and carry no samples.
TEST(ProfileReject, UnwindNoteDefects) {
  auto error = [](const std::function<void(ThreadProfile&)>& mutate) {
    ThreadProfile p = test::scannedAddressProfile();
    mutate(p);
    return parseError(storage::serializeProfileUnchecked(p));
  };
  EXPECT_EQ(error([](ThreadProfile&) {}), "");
  EXPECT_EQ(error([](ThreadProfile& p) { p.cct.unwindNote.pop_back(); }), "CCT has 5 nodes but 4 unwind notes");
  EXPECT_EQ(error([](ThreadProfile& p) { p.cct.unwindNote[0] = 1; }), "CCT root has an unwind note");
  EXPECT_EQ(error([](ThreadProfile& p) { p.cct.unwindNote[2] = 7u << 28; }), "CCT node 2: unknown unwind note kind 7");
  // A candidate below a frame that no scan found (node 2's parent is the resumed node 1; node 2's
  // child would need to be a candidate or a stopped frame).
  EXPECT_EQ(error([](ThreadProfile& p) { p.cct.unwindNote[1] = 0; }),
            "CCT node 3: a candidate frame below a frame that no stack scan found");
  EXPECT_EQ(error([](ThreadProfile& p) { p.cct.unwindNote[4] = 0; }),
            "CCT node 4: an unwound frame below a candidate frame");
  EXPECT_EQ(error([](ThreadProfile& p) {
              p.cct.unwindNote[2] = UnwindNote{UnwindNoteKind::Candidate, 1, 0}.encode();
            }),
            "CCT node 2: samples on a frame found by a stack scan");
}

TEST(ProfileReject, RegionDefects) {
  EXPECT_NE(mutatedError([](ThreadProfile& p) { p.regions.staticId[2] = 9; }).find("static id 9"), std::string::npos);
  EXPECT_NE(mutatedError([](ThreadProfile& p) { p.regions.exclusiveNs[1] = 1000; }).find("exceeds inclusive"),
            std::string::npos);
  EXPECT_NE(mutatedError([](ThreadProfile& p) { p.regions.eventTimeNs[2] = 1; }).find("goes back in time"),
            std::string::npos);
  EXPECT_NE(mutatedError([](ThreadProfile& p) { p.regions.eventNode[0] = 0; }).find("refers to region node 0"),
            std::string::npos);
  EXPECT_NE(mutatedError([](ThreadProfile& p) { p.regions.parent[1] = 2; }).find("region tree has a cycle"),
            std::string::npos);
  // Attributes of enter events: one per event, never on an exit.
  EXPECT_NE(mutatedError([](ThreadProfile& p) {
              p.regions.eventAttr = {1};
              p.regions.eventHasAttr = {true};
            }).find("attribute columns do not match"),
            std::string::npos);
  EXPECT_NE(mutatedError([](ThreadProfile& p) {
              p.regions.eventAttr.assign(p.regions.eventTimeNs.size(), 7);
              p.regions.eventHasAttr.assign(p.regions.eventTimeNs.size(), true);
            }).find("is an exit with an attribute"),
            std::string::npos);
}

TEST(ProfileReject, RegionAttributesRoundTrip) {
  auto p = csp::test::fullSymbolicProfile();
  const std::size_t n = p.regions.eventTimeNs.size();
  p.regions.eventAttr.assign(n, 0);
  p.regions.eventHasAttr.assign(n, false);
  p.regions.eventAttr[0] = INT64_MIN;
  p.regions.eventHasAttr[0] = true;
  p.regions.eventAttr[1] = -42;
  p.regions.eventHasAttr[1] = true;
  const auto image = storage::serializeProfile(p);
  EXPECT_EQ(storage::parseProfile(image, "attrs"), p);
}

TEST(ProfileReject, DuplicateMetricName) {
  EXPECT_EQ(mutatedError([](ThreadProfile& p) { p.metrics[1].name = "cpu-time"; }),
            "metric name 'cpu-time' appears twice");
}

// Validation takes a vectorized pass over the values of a profile whose metrics all count and
// whose counts are below 2^32, and the exact checks only when that pass finds something (they
// name the defect). The fixture's counts reach 2^32 (so its profile always takes the exact
// checks): here every defect of the values once more with small counts, where it must be the
// vectorized pass that sends the profile to the exact checks.
ThreadProfile smallCountProfile() {
  ThreadProfile p = test::fullSymbolicProfile();
  for (std::size_t i = 0; i < p.values.size(); ++i)
    if (p.values.metric[i] == 2) p.values.count[i] = 12345;  // "instructions", counted: no samples
  return p;
}

std::string smallCountError(const std::function<void(ThreadProfile&)>& mutate) {
  ThreadProfile p = smallCountProfile();
  mutate(p);
  return parseError(storage::serializeProfileUnchecked(p));
}

TEST(ProfileReject, ValueDefectsWithSmallCounts) {
  EXPECT_EQ(smallCountError([](ThreadProfile&) {}), "");
  const std::string nodes = std::to_string(smallCountProfile().cct.size());
  EXPECT_EQ(smallCountError([](ThreadProfile& p) { p.values.metric.back() = 3; }),
            "value 4 has metric id 3, out of range (3 metrics)");
  EXPECT_EQ(smallCountError([](ThreadProfile& p) { p.values.node.back() = 500; }),
            "value 4 is at CCT node 500, which does not exist (" + nodes + " nodes)");
  EXPECT_EQ(smallCountError([&](ThreadProfile& p) { p.values.node.back() = static_cast<std::uint32_t>(p.cct.size()); }),
            "value 4 is at CCT node " + nodes + ", which does not exist (" + nodes + " nodes)");
  EXPECT_EQ(smallCountError([](ThreadProfile& p) { p.values.node[0] = 0; }), "value 0 is at the CCT root");
  EXPECT_EQ(smallCountError([](ThreadProfile& p) {
              p.stats.samples -= p.values.count[0];
              p.values.count[0] = 0;
            }),
            "value 0 is zero (zeros are never stored)");
  EXPECT_NE(smallCountError([](ThreadProfile& p) {
              std::swap(p.values.node.front(), p.values.node.back());
            }).find("not sorted"),
            std::string::npos);
  // The same (node, metric) twice.
  const std::string repeat = smallCountError([](ThreadProfile& p) {
    p.values.metric[1] = p.values.metric[0];
    p.values.node[1] = p.values.node[0];
  });
  EXPECT_NE(repeat.find("not sorted by (node, metric) or repeat at value 1"), std::string::npos) << repeat;
  // Same node, metric ids descending.
  const std::string descending =
      smallCountError([](ThreadProfile& p) { std::swap(p.values.metric[0], p.values.metric[1]); });
  EXPECT_NE(descending.find("repeat at value 1"), std::string::npos) << descending;
  // Small counts whose total times the period is beyond 64 bits.
  const std::string beyond = smallCountError([](ThreadProfile& p) {
    p.metrics[2].period = std::uint64_t{1} << 50;
    for (std::size_t i = 0; i < p.values.size(); ++i)
      if (p.values.metric[i] == 2) p.values.count[i] = 1 << 15;
  });
  EXPECT_NE(beyond.find("beyond 2^64 - 1"), std::string::npos) << beyond;
  // A real-valued metric takes the exact checks too; a count of 2^32 exactly is valid.
  EXPECT_EQ(smallCountError([](ThreadProfile& p) {
              for (std::size_t i = 0; i < p.values.size(); ++i)
                if (p.values.metric[i] == 2) p.values.count[i] = std::uint64_t{1} << 32;
            }),
            "");
}

TEST(ProfileReject, EveryScopeRuleIsNamed) {
  // Validation checks the scopes' nesting with a table in one pass and walks the tree again only
  // to name a defect it found: a new leaf below a node of scope `above`, of scope `scope`.
  auto addLeaf = [](ScopeKind above, ScopeKind scope) {
    return mutatedError([=](ThreadProfile& p) {
      std::uint32_t frame = 0, parent = 0;
      for (std::uint32_t f = 0; f < p.symbolicFrames.size(); ++f)
        if (p.symbolicFrames[f].scope == scope) frame = f;
      for (std::uint32_t n = 1; n < p.cct.size() && above != ScopeKind::Root; ++n)
        if (p.symbolicFrames[p.cct.frame[n]].scope == above) parent = n;
      p.cct.parent.push_back(parent);
      p.cct.frame.push_back(frame);
    });
  };
  const std::string leaf = std::to_string(test::fullSymbolicProfile().cct.size());
  EXPECT_EQ(addLeaf(ScopeKind::Root, ScopeKind::Stmt),
            "CCT node " + leaf + ": a statement must lie inside a procedure frame");
  EXPECT_EQ(addLeaf(ScopeKind::Root, ScopeKind::Loop),
            "CCT node " + leaf + ": a loop must lie inside a procedure frame");
  EXPECT_EQ(addLeaf(ScopeKind::CallSite, ScopeKind::Loop),
            "CCT node " + leaf + ": a call site may only be followed by a procedure frame, not a loop");
  EXPECT_EQ(addLeaf(ScopeKind::CallSite, ScopeKind::Stmt),
            "CCT node " + leaf + ": a call site may only be followed by a procedure frame, not a statement");
  EXPECT_EQ(addLeaf(ScopeKind::Loop, ScopeKind::ProcFrame),
            "CCT node " + leaf +
                ": a procedure frame must be an outermost frame or follow a call site (its parent is a loop)");
  EXPECT_EQ(addLeaf(ScopeKind::Stmt, ScopeKind::Loop),
            "CCT node " + leaf + " lies below a statement (statements are leaves)");
  // Allowed: a loop in a loop, a call site in an inlined scope, a procedure frame after a call site.
  EXPECT_EQ(addLeaf(ScopeKind::Loop, ScopeKind::Loop), "");
  EXPECT_EQ(addLeaf(ScopeKind::Alien, ScopeKind::CallSite), "");
  EXPECT_EQ(addLeaf(ScopeKind::CallSite, ScopeKind::ProcFrame), "");
}

TEST(ProfileReject, ParentDefectsAreNamed) {
  // The vectorized pass over the parents sends a column with a defect to the exact checks.
  EXPECT_EQ(mutatedError([](ThreadProfile& p) { p.cct.parent.back() = static_cast<std::uint32_t>(p.cct.size() - 1); }),
            "CCT has a cycle through node " + std::to_string(test::fullSymbolicProfile().cct.size() - 1) +
                " and its parent " + std::to_string(test::fullSymbolicProfile().cct.size() - 1));
  EXPECT_EQ(mutatedError([](ThreadProfile& p) { p.cct.frame.back() = 4000; }),
            "CCT node " + std::to_string(test::fullSymbolicProfile().cct.size() - 1) + " refers to frame 4000 (" +
                std::to_string(test::fullSymbolicProfile().symbolicFrames.size()) + " frames)");
}

TEST(ProfileReject, WriterRefusesInvalidProfiles) {
  ThreadProfile p = test::fullSymbolicProfile();
  p.cct.parent[2] = 3;
  EXPECT_THROW(storage::serializeProfile(p, "x"), storage::ProfileError);
}

TEST(ProfileReject, MissingFile) {
  try {
    storage::readProfile("/nonexistent/p.cspprof");
    FAIL();
  } catch (const storage::ProfileError& e) {
    EXPECT_EQ(std::string(e.what()), "/nonexistent/p.cspprof: cannot open: No such file or directory");
  }
}

}  // namespace
