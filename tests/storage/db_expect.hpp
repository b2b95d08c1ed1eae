// GoogleTest checks of a database against its Synthetic description.
#pragma once

#include <algorithm>
#include <filesystem>

#include <gtest/gtest.h>

#include <map>

#include "storage/db_fixtures.hpp"

namespace csp::test {

// Every column family's content, as read back through the public API.
inline void expectContent(const Database& db, const Synthetic& s, const std::string& title) {
  EXPECT_EQ(db.metadata(), s.metadata(title));
  for (NodeId n = 0; n < s.nodes; ++n) {
    ASSERT_EQ(db.node(n), s.node(n)) << "node " << n;
    ASSERT_EQ(db.children(n), s.children(n)) << "children of " << n;
    ASSERT_EQ(db.summaries(n), s.summaries(n)) << "summaries of " << n;
    ASSERT_EQ(db.nodeValues(n), s.nodeValues(n)) << "values of node " << n;
  }
  EXPECT_FALSE(db.node(s.nodes).has_value());
  for (ProfileId p = 0; p < s.profiles; ++p) ASSERT_EQ(db.profileValues(p), s.profileValues(p)) << "profile " << p;
  std::vector<RegionLogProcess> processes;
  for (ProfileId p = 0; p < s.profiles; p += 2) processes.push_back(s.logProcess(p));
  ASSERT_EQ(db.regionLogProcesses(), processes);
  for (const auto& process : processes)
    for (const auto& t : process.threads) {
      auto cursor = db.regionLog(process.process, t.profile);
      std::vector<RegionLogEvent> events;
      RegionLogEvent e;
      while (cursor->next(e)) events.push_back(e);
      ASSERT_EQ(events, s.regionLog(t.profile)) << "region log of " << t.profile;
    }
  std::vector<ProcessClock> clocks;
  for (ProfileId p = 0; p < s.profiles; p += 2) {
    clocks.push_back(s.processClock(p));
    ASSERT_EQ(db.commEvents(p), s.commEvents(p)) << "communication events of " << p;
  }
  ASSERT_EQ(db.processClocks(), clocks);
  for (RegionId r = 0; r < s.regions; ++r) {
    ASSERT_EQ(db.region(r), s.region(r));
    ASSERT_EQ(db.regionSummaries(r),
              (std::vector<Accumulator>{{0, MetricScope::Inclusive, s.summary(r, 0, MetricScope::Inclusive)}}));
  }
}

// The raw key/value stream of every column family.
inline std::map<std::string, std::vector<std::pair<std::string, std::string>>> dumpAll(const Database& db) {
  std::map<std::string, std::vector<std::pair<std::string, std::string>>> out;
  for (const auto& family : databaseColumnFamilies())
    db.forEachEntry(family, [&](std::string_view k, std::string_view v) { out[family].emplace_back(k, v); });
  return out;
}

// The names in a directory, sorted.
inline std::vector<std::string> dirEntries(const std::filesystem::path& dir) {
  std::vector<std::string> names;
  for (const auto& e : std::filesystem::directory_iterator(dir)) names.push_back(e.path().filename().string());
  std::sort(names.begin(), names.end());
  return names;
}

}  // namespace csp::test
