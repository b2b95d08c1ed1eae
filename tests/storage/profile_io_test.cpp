#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <iterator>

#include "csp/storage/profile_io.hpp"
#include "storage/profile_fixtures.hpp"

namespace fs = std::filesystem;
using namespace csp;

namespace {

class TempDir {
 public:
  TempDir() {
    path_ = fs::temp_directory_path() / ("csp-test-" + std::to_string(::getpid()) + "-" +
                                         ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(path_);
    fs::create_directories(path_);
  }
  ~TempDir() { fs::remove_all(path_); }
  const fs::path& path() const { return path_; }

 private:
  fs::path path_;
};

TEST(ProfileRoundTrip, EverySymbolicFieldSurvives) {
  TempDir dir;
  const ThreadProfile original = test::fullSymbolicProfile();
  const auto path = dir.path() / storage::profileFileName(original.identity);
  storage::writeProfile(original, path);
  const ThreadProfile back = storage::readProfile(path);
  EXPECT_EQ(back.identity, original.identity);
  EXPECT_EQ(back.metrics, original.metrics);
  EXPECT_EQ(back.strings, original.strings);
  EXPECT_EQ(back.symbolicFrames, original.symbolicFrames);
  EXPECT_EQ(back.cct, original.cct);
  EXPECT_EQ(back.values, original.values);
  EXPECT_EQ(back.regions, original.regions);
  EXPECT_EQ(back.stats, original.stats);
  EXPECT_EQ(back, original);
  // Samples = sampled counts (10 + 100 + 7 + 1) + 3 dropped; the counted metric is not a sample.
  EXPECT_EQ(back.stats.samples, 121u);
}

TEST(ProfileRoundTrip, EveryAddressFieldSurvives) {
  TempDir dir;
  const ThreadProfile original = test::fullAddressProfile();
  const auto path = dir.path() / "a.cspprof";
  storage::writeProfile(original, path);
  const ThreadProfile back = storage::readProfile(path);
  EXPECT_EQ(back.frameKind, FrameKind::Address);
  EXPECT_EQ(back.modules, original.modules);
  EXPECT_EQ(back.addressFrames, original.addressFrames);
  EXPECT_EQ(back, original);
}

TEST(ProfileWriter, NeverFollowsAPlantedSymlink) {
  // A symlink planted where the writer used to put its temporary file (NAME.tmp.PID) must not
  // make it overwrite the link's target; nothing temporary stays behind.
  TempDir dir;
  const auto victim = dir.path() / "victim.txt";
  { std::ofstream(victim) << "precious"; }
  const ThreadProfile original = test::fullAddressProfile();
  const auto path = dir.path() / "a.cspprof";
  fs::create_symlink(victim, path.string() + ".tmp." + std::to_string(::getpid()));
  storage::writeProfile(original, path);
  std::ifstream in(victim);
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_EQ(text, "precious");
  EXPECT_EQ(storage::readProfile(path), original);
  std::size_t entries = 0;
  for (const auto& e : fs::directory_iterator(dir.path())) {
    ++entries;
    EXPECT_EQ(e.path().filename().string().find(".tmp.") == std::string::npos || fs::is_symlink(e.symlink_status()), true)
        << e.path();
  }
  EXPECT_EQ(entries, 3u);  // the victim, the planted link, the profile
}

TEST(ProfileRoundTrip, SerializationIsDeterministic) {
  EXPECT_EQ(storage::serializeProfile(test::fullSymbolicProfile()), storage::serializeProfile(test::fullSymbolicProfile()));
}

TEST(ProfileRoundTrip, WriteLeavesNoTemporaryFiles) {
  TempDir dir;
  storage::writeProfile(test::fullAddressProfile(), dir.path() / "x.cspprof");
  std::size_t files = 0;
  for ([[maybe_unused]] const auto& e : fs::directory_iterator(dir.path())) ++files;
  EXPECT_EQ(files, 1u);
  EXPECT_EQ(storage::listProfiles(dir.path()).size(), 1u);
}

TEST(ProfileNames, SortByIdTuple) {
  Identity a, b;
  a.idTuple = {{IdKind::Rank, 2}, {IdKind::Thread, 10}};
  b.idTuple = {{IdKind::Rank, 10}, {IdKind::Thread, 2}};
  a.pid = b.pid = 7;
  EXPECT_EQ(storage::profileFileName(a), "r000002-t0010.7.cspprof");
  EXPECT_LT(storage::profileFileName(a), storage::profileFileName(b));
  EXPECT_EQ(formatIdTuple(a.idTuple), "rank 2 thread 10");
}

TEST(ListProfiles, MissingDirectoryIsAClearError) {
  try {
    storage::listProfiles("/nonexistent/csp-measurements");
    FAIL() << "no error";
  } catch (const storage::ProfileError& e) {
    EXPECT_STREQ(e.what(), "/nonexistent/csp-measurements: no such directory");
  }
}

}  // namespace
