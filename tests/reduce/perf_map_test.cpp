// The perf-map reader (JIT symbols): format, overlapping entries, malformed lines, errors.
#include <gtest/gtest.h>

#include <fstream>

#include "common/test_support.hpp"
#include "csp/reduce/perf_map.hpp"

using csp::reduce::PerfMap;

namespace {

std::string at(const PerfMap& m, std::uint64_t address) {
  const std::string* s = m.find(address);
  return s ? *s : "<none>";
}

}  // namespace

TEST(PerfMap, ParsesHexadecimalRangesAndNamesWithSpaces) {
  const auto m = PerfMap::parse(
      "7f0000001000 40 csp_jit_hot\n"
      "0x7f0000001040 0x20 LFoo;::bar (Interpreted) \n"
      "7F0000002000\t10\tupper\r\n");
  EXPECT_EQ(m.size(), 3u);
  EXPECT_EQ(m.malformedLines(), 0u);
  EXPECT_EQ(at(m, 0x7f0000000fff), "<none>");
  EXPECT_EQ(at(m, 0x7f0000001000), "csp_jit_hot");
  EXPECT_EQ(at(m, 0x7f000000103f), "csp_jit_hot");
  EXPECT_EQ(at(m, 0x7f0000001040), "LFoo;::bar (Interpreted) ");
  EXPECT_EQ(at(m, 0x7f0000001060), "<none>");
  EXPECT_EQ(at(m, 0x7f000000200f), "upper");
}

TEST(PerfMap, LaterEntriesWinWhereRangesOverlap) {
  // Code memory reused: the second function replaces the middle of the first.
  const auto m = PerfMap::parse("1000 100 old\n1040 20 new\n10f0 40 tail\n");
  EXPECT_EQ(at(m, 0x103f), "old");
  EXPECT_EQ(at(m, 0x1040), "new");
  EXPECT_EQ(at(m, 0x105f), "new");
  EXPECT_EQ(at(m, 0x1060), "old");
  EXPECT_EQ(at(m, 0x10ef), "old");
  EXPECT_EQ(at(m, 0x10f0), "tail");
  EXPECT_EQ(at(m, 0x112f), "tail");
  EXPECT_EQ(at(m, 0x1130), "<none>");
  // Fully covered entries disappear.
  const auto n = PerfMap::parse("1000 10 a\n1010 10 b\n1000 40 c\n");
  EXPECT_EQ(n.size(), 1u);
  EXPECT_EQ(at(n, 0x1018), "c");
}

TEST(PerfMap, MalformedLinesAreCountedAndSkipped) {
  const auto m = PerfMap::parse(
      "\n1000 10 good\nnot a line\n2000 0 empty\n3000 10\nzz 10 x\n"
      "ffffffffffffffff 10 wraps\n11112222333344445 1 toolong\n4000 10 also good\n");
  EXPECT_EQ(m.size(), 2u);
  EXPECT_EQ(m.malformedLines(), 6u);
  EXPECT_EQ(at(m, 0x1000), "good");
  EXPECT_EQ(at(m, 0x4000), "also good");
}

TEST(PerfMap, UnreadableFileIsAnErrorNamingIt) {
  csp::test::TempDir dir("perf-map");
  try {
    PerfMap::read(dir.path());  // a directory
    ADD_FAILURE() << "reading a directory succeeded";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find(dir.path().string() + ": cannot read"), std::string::npos) << e.what();
  }
  std::ofstream(dir / "perf-1.map") << "1000 10 f\n";
  EXPECT_EQ(at(PerfMap::read(dir / "perf-1.map"), 0x1008), "f");
}
