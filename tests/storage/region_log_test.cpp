// Region event logs in the database (format 1.2, docs/database-format.md "Region event logs"):
// round trip over several blocks with attributes, databases of format 1.0 (no region_events
// family) still open, and a damaged block is reported as damage.
#include <gtest/gtest.h>
#include <rocksdb/db.h>

#include <fstream>

#include "common/db_dump.hpp"
#include "storage/db_fixtures.hpp"

namespace fs = std::filesystem;
using namespace csp;
using namespace csp::storage;
using csp::test::TempDir;

namespace {

std::vector<RegionLogEvent> makeLog(std::size_t n, std::uint64_t seed) {
  std::vector<RegionLogEvent> out;
  std::uint64_t t = 1'700'000'000'000'000'000ull + seed;
  std::vector<RegionId> open;
  for (std::size_t i = 0; i < n; ++i) {
    t += (i * 7919 + seed) % 100000;  // includes equal times (delta 0) now and then
    RegionLogEvent e;
    e.timeNs = t;
    if (open.empty() || (open.size() < 3 && (i + seed) % 3 != 0)) {
      e.region = static_cast<RegionId>(1 + (i % 5));
      e.enter = true;
      e.hasAttr = i % 4 == 0;
      const std::int64_t attrs[] = {0, -1, INT64_MIN, INT64_MAX, 123456789, -987654321};
      e.attr = e.hasAttr ? attrs[(i / 4) % 6] : 0;
      open.push_back(e.region);
    } else {
      e.region = open.back();
      open.pop_back();
    }
    out.push_back(e);
  }
  return out;
}

void buildWithLogs(const fs::path& target, const std::vector<RegionLogProcess>& processes,
                   const std::vector<std::vector<std::vector<RegionLogEvent>>>& logs) {
  DatabaseBuilder b(target);
  {
    ShardWriter w(b.stagingDir(), 0);
    for (std::size_t p = 0; p < processes.size(); ++p) {
      w.putRegionLogProcess(processes[p]);
      for (std::size_t t = 0; t < processes[p].threads.size(); ++t)
        w.putRegionLogThread(processes[p].process, processes[p].threads[t], logs[p][t]);
    }
    w.finish();
  }
  test::publishBare(b, 1);
}

}  // namespace

TEST(RegionLogs, RoundTripOverSeveralBlocksWithAttributes) {
  TempDir tmp;
  const fs::path target = tmp.path() / "db";
  std::vector<RegionLogProcess> processes = {
      {0, "node-a", 4242, {{0, 0, 3, 1, 2}, {1, 0, 0, 0, 0}, {5, 0, 0, 0, 0}}},
      {7, "node-b", 17, {{7, 0, 0, 0, 0}}},
  };
  std::vector<std::vector<std::vector<RegionLogEvent>>> logs = {
      {makeLog(10000, 1), makeLog(0, 2), makeLog(4096, 3)},
      {makeLog(4097, 4)},
  };
  buildWithLogs(target, processes, logs);
  auto db = Database::open(target);
  EXPECT_EQ(db->formatVersion().minor, kDatabaseFormatMinor);
  ASSERT_TRUE(db->hasRegionLogFamily());
  auto read = db->regionLogProcesses();
  for (std::size_t p = 0; p < processes.size(); ++p)
    for (std::size_t t = 0; t < processes[p].threads.size(); ++t) processes[p].threads[t].events = logs[p][t].size();
  EXPECT_EQ(read, processes);
  for (std::size_t p = 0; p < processes.size(); ++p)
    for (std::size_t t = 0; t < processes[p].threads.size(); ++t) {
      auto cursor = db->regionLog(processes[p].process, processes[p].threads[t].profile);
      std::vector<RegionLogEvent> back;
      RegionLogEvent e;
      while (cursor->next(e)) back.push_back(e);
      EXPECT_EQ(back, logs[p][t]) << p << " " << t;
    }
  RegionLogEvent e;
  EXPECT_FALSE(db->regionLog(0, 3)->next(e));  // no such thread
  EXPECT_FALSE(db->regionLog(9, 9)->next(e));  // no such process
}

// A window of a long log is read from the block holding its start: every event at or after the
// start is delivered, with the last one before it, and the blocks before are not.
TEST(RegionLogs, AWindowStartsAtTheBlockHoldingItsStart) {
  TempDir tmp;
  const fs::path target = tmp.path() / "db";
  const auto log = makeLog(5 * 4096 + 17, 5);
  buildWithLogs(target, {{0, "h", 1, {{0, 0, 0, 0, 0}}}}, {{log}});
  auto db = Database::open(target);
  auto readFrom = [&](std::uint64_t from) {
    std::vector<RegionLogEvent> back;
    RegionLogEvent e;
    for (auto c = db->regionLog(0, 0, from); c->next(e);) back.push_back(e);
    return back;
  };
  for (std::size_t at : {std::size_t{0}, std::size_t{1}, std::size_t{4095}, std::size_t{4096}, std::size_t{9000},
                         std::size_t{5 * 4096 + 16}}) {
    const std::uint64_t from = log[at].timeNs;
    const auto back = readFrom(from);
    // A suffix of the log from a block boundary: every event at or after `from`, the last one
    // before it, and no block more than that needs.
    std::size_t first = 0;  // the first event at or after from
    while (log[first].timeNs < from) ++first;
    const std::size_t skipped = log.size() - back.size();
    EXPECT_EQ(skipped % 4096, 0u) << at;
    EXPECT_TRUE(std::equal(back.begin(), back.end(), log.begin() + static_cast<std::ptrdiff_t>(skipped))) << at;
    if (first > 0) {
      EXPECT_LT(skipped, first) << at;
    }
    EXPECT_GE(skipped + 4096, first) << at;
  }
  EXPECT_EQ(readFrom(0), log);                  // before the first event: the whole log
  EXPECT_EQ(readFrom(UINT64_MAX).size(), 17u);  // after the last: the last block
  RegionLogEvent e;
  EXPECT_FALSE(db->regionLog(0, 3, 0)->next(e));  // no such thread
}

TEST(RegionLogs, ShardWriterRejectsEventsOutOfOrder) {
  TempDir tmp;
  DatabaseBuilder b(tmp.path() / "db");
  ShardWriter w(b.stagingDir(), 0);
  w.putRegionLogProcess({3, "h", 1, {{3, 0, 0, 0, 0}}});
  std::vector<RegionLogEvent> back = {{10, 1, true, false, 0}, {5, 1, false, false, 0}};
  EXPECT_THROW(w.putRegionLogThread(3, {3, 0, 0, 0, 0}, back), std::logic_error);
}

// A database written before format 1.2 has no region_events family: it opens and has no logs.
TEST(RegionLogs, DatabaseWithoutTheFamilyOpens) {
  TempDir tmp;
  const fs::path target = tmp.path() / "db";
  buildWithLogs(target, {{0, "h", 1, {{0, 0, 0, 0, 0}}}}, {{makeLog(10, 1)}});
  {
    rocksdb::DBOptions options;
    std::vector<std::string> names;
    ASSERT_TRUE(rocksdb::DB::ListColumnFamilies(options, target.string(), &names).ok());
    std::vector<rocksdb::ColumnFamilyDescriptor> descriptors;
    for (const auto& n : names) descriptors.emplace_back(n, rocksdb::ColumnFamilyOptions());
    std::vector<rocksdb::ColumnFamilyHandle*> handles;
    rocksdb::DB* raw = nullptr;
    ASSERT_TRUE(rocksdb::DB::Open(options, target.string(), descriptors, &handles, &raw).ok());
    for (std::size_t i = 0; i < names.size(); ++i)
      if (names[i] == "region_events") {
        ASSERT_TRUE(raw->DropColumnFamily(handles[i]).ok());
      }
    for (auto* h : handles) raw->DestroyColumnFamilyHandle(h);
    delete raw;
    test::pretendFormat(target, 1, 0);
  }
  auto db = Database::open(target);
  EXPECT_EQ(db->formatVersion().minor, 0u);
  EXPECT_FALSE(db->hasRegionLogFamily());
  EXPECT_TRUE(db->regionLogProcesses().empty());
  RegionLogEvent e;
  EXPECT_FALSE(db->regionLog(0, 0)->next(e));
  // Tools that dump every family see it as empty.
  std::size_t entries = 0;
  for (const auto& family : databaseColumnFamilies()) db->forEachEntry(family, [&](auto, auto) { ++entries; });
  EXPECT_GT(entries, 0u);
}

TEST(RegionLogs, UndecodableBlockIsDamage) {
  TempDir tmp;
  const fs::path target = tmp.path() / "db";
  buildWithLogs(target, {{0, "h", 1, {{0, 0, 0, 0, 0}}}}, {{makeLog(10, 1)}});
  {
    rocksdb::DBOptions options;
    std::vector<std::string> names;
    ASSERT_TRUE(rocksdb::DB::ListColumnFamilies(options, target.string(), &names).ok());
    std::vector<rocksdb::ColumnFamilyDescriptor> descriptors;
    for (const auto& n : names) descriptors.emplace_back(n, rocksdb::ColumnFamilyOptions());
    std::vector<rocksdb::ColumnFamilyHandle*> handles;
    rocksdb::DB* raw = nullptr;
    ASSERT_TRUE(rocksdb::DB::Open(options, target.string(), descriptors, &handles, &raw).ok());
    for (std::size_t i = 0; i < names.size(); ++i)
      if (names[i] == "region_events") {
        std::string key("\0\0\0\0\0\0\0\0\0\0\0\0", 12);  // process 0, thread 0, block 0
        ASSERT_TRUE(raw->Put(rocksdb::WriteOptions(), handles[i], key, std::string("\x05\x01", 2)).ok());
      }
    for (auto* h : handles) raw->DestroyColumnFamilyHandle(h);
    delete raw;
  }
  auto db = Database::open(target);
  auto cursor = db->regionLog(0, 0);
  RegionLogEvent e;
  try {
    while (cursor->next(e)) {
    }
    ADD_FAILURE() << "no error";
  } catch (const DatabaseError& err) {
    EXPECT_NE(std::string(err.what()).find("damaged database: column family region_events: region log block"),
              std::string::npos)
        << err.what();
  }
}
