// What csp-prof-mpi keeps of every profile through the run, in compact form: the input list
// (directories once, names packed), the profiles' records (varints, host names once) and the
// thread classes' entries and reasons. Each must give back exactly what was put in.
#include <gtest/gtest.h>

#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "stages.hpp"

using namespace csp;
using csp::reduce::InputList;
using csp::reduce::InputProfile;
using csp::reduce::ProfileRecord;
using csp::reduce::ProfileRecords;

namespace {

// Sources are kept by address only: any distinct addresses do.
const reduce::ProfileSource* sourceAt(std::uintptr_t k) { return reinterpret_cast<const reduce::ProfileSource*>(k); }

}  // namespace

TEST(InputList, GivesBackEveryPathSizeAndSourceAsAdded) {
  // Directories that come back, a file without a directory, the root, names that are prefixes
  // of one another, an empty name after a slash, a bundle record.
  const std::vector<std::string> paths = {"/m/a/n0-t0.cspprof",        "/m/a/n0-t1.cspprof", "/m/b/x.cspprof",
                                          "/m/a/n0-t2.cspprof",        "plain.cspprof",      "/top.cspprof",
                                          "rel/dir/y.hpcrun",          "/m/a/n0-t",          "/m/a/",
                                          "/m/b/bundle.cspbundle@4096"};
  InputList list;
  for (std::size_t i = 0; i < paths.size(); ++i)
    list.add(
        {paths[i], i * 1000 + (i == 3 ? std::numeric_limits<std::uint64_t>::max() - 5 : 0), sourceAt(8 * (i % 3 + 1))});
  list.shrinkToFit();
  ASSERT_EQ(list.size(), paths.size());
  for (std::size_t i = 0; i < paths.size(); ++i) {
    const InputProfile f = list[i];
    EXPECT_EQ(f.path, paths[i]) << i;
    EXPECT_EQ(f.bytes, i * 1000 + (i == 3 ? std::numeric_limits<std::uint64_t>::max() - 5 : 0)) << i;
    EXPECT_EQ(list.bytes(i), f.bytes) << i;
    EXPECT_EQ(f.source, sourceAt(8 * (i % 3 + 1))) << i;
  }
  EXPECT_THROW((void)list[paths.size()], std::out_of_range);
}

TEST(ProfileRecords, ReadBackInOrderExactly) {
  std::vector<ProfileRecord> records;
  for (std::uint32_t k = 0; k < 300; ++k) {
    ProfileRecord r;
    r.identity.idTuple = {{IdKind::Node, k / 64}, {IdKind::Rank, k / 4}, {IdKind::Thread, k % 4}};
    if (k % 7 == 0) r.identity.idTuple.push_back({IdKind::GpuStream, std::numeric_limits<std::uint64_t>::max()});
    if (k == 5) r.identity.idTuple.clear();
    // Hosts in runs, one coming back after others, one empty.
    r.identity.hostname = k < 100 ? "nid00001" : k < 200 ? "nid00002" : k % 2 ? "nid00001" : "";
    r.identity.pid = 4000000000U - k;
    r.identity.common = k % 3;
    r.stats.samples = std::uint64_t{1} << (k % 64);
    r.stats.unwindFailures = k;
    r.stats.droppedSamples = k * 3;
    r.stats.truncatedPaths = k % 5;
    r.truncatedSamples = k * 7;
    r.scannedSamples = k * 11;
    r.recoveredSamples = std::numeric_limits<std::uint64_t>::max() - k;
    records.push_back(r);
  }
  ProfileRecords packed;
  for (const auto& r : records) packed.add(r);
  packed.shrinkToFit();
  ASSERT_EQ(packed.size(), records.size());
  auto in = packed.read();
  for (std::size_t k = 0; k < records.size(); ++k) {
    const ProfileRecord r = in.next();
    EXPECT_EQ(r.identity.idTuple, records[k].identity.idTuple) << k;
    EXPECT_EQ(r.identity.hostname, records[k].identity.hostname) << k;
    EXPECT_EQ(r.identity.pid, records[k].identity.pid) << k;
    EXPECT_EQ(r.identity.common, records[k].identity.common) << k;
    EXPECT_EQ(r.stats, records[k].stats) << k;
    EXPECT_EQ(r.truncatedSamples, records[k].truncatedSamples) << k;
    EXPECT_EQ(r.scannedSamples, records[k].scannedSamples) << k;
    EXPECT_EQ(r.recoveredSamples, records[k].recoveredSamples) << k;
  }
  EXPECT_THROW(in.next(), std::logic_error);  // past the last record
}

TEST(ThreadClassification, EntriesAndReasonsComeBackPerProfile) {
  // What stages::classifyThreads keeps at rank 0, packed; infos() unpacks it with the classes.
  reduce::stages::ThreadClassification c;
  storage::ByteWriter<std::string> packed;
  std::vector<storage::ThreadClassInfo> expected;
  for (std::uint8_t k = 0; k < 40; ++k) {
    storage::ThreadClassInfo info;
    info.threadClass = static_cast<storage::ThreadClass>(k % 3);
    info.entry = k % 4 ? "solver_loop" : "";
    info.reason = std::string(k * 5, 'r') + std::to_string(k);
    c.classOf.push_back(static_cast<std::uint8_t>(info.threadClass));
    packed.text(info.entry);
    packed.text(info.reason);
    expected.push_back(info);
  }
  c.entriesAndReasons = packed.take();
  EXPECT_EQ(c.infos(), expected);
  c.classOf.push_back(0);  // one profile more than the texts: refused, not read past the end
  EXPECT_THROW(c.infos(), std::logic_error);
  reduce::stages::ThreadClassification other;  // a rank other than 0 keeps no texts
  other.classOf = {0, 1};
  EXPECT_TRUE(other.infos().empty());
}
