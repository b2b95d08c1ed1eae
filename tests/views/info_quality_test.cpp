// csp-views --info: the sampling-quality table, its warning, and databases of format 1.0 that
// did not record it.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <sstream>

#include "csp/views/render.hpp"
#include "storage/db_fixtures.hpp"

using namespace csp;
using csp::test::Synthetic;

namespace {

void build(const std::filesystem::path& target, const Synthetic& s, bool withQuality,
           const std::vector<storage::SamplingQuality>& quality = {}) {
  storage::DatabaseBuilder b(target, {});
  auto meta = s.metadata("info");
  if (!withQuality) meta.quality.clear();
  if (!quality.empty()) meta.quality = quality;
  b.writeMetadata(meta);
  storage::ShardWriter w(b.stagingDir(), 0);
  s.writeShard(w, 0, 1);
  w.finish();
  b.ingestShards(1);
  b.publish();
}

}  // namespace

TEST(InfoQuality, TableTotalsWarningAndJson) {
  test::TempDir tmp;
  const Synthetic s{.profiles = 3, .nodes = 20};
  // Thread 1 has most of the truncated samples: 300 of 1,000 in all, above the 10 % threshold.
  build(tmp.path() / "db", s, true, {{200, 1, 0, 10, 0}, {500, 4, 2, 280, 7}, {300, 0, 0, 10, 0}});
  auto db = storage::Database::open(tmp.path() / "db");
  std::ostringstream text;
  views::renderInfoText(views::describe(*db), text);
  const std::string t = text.str();
  EXPECT_NE(
      t.find(
          "  all                            1000  300 (30.0 %)         5 (0.5 %)            2 (0.2 %)            7\n"),
      std::string::npos)
      << t;
  EXPECT_NE(t.find("280 (56.0 %)"), std::string::npos) << t;
  EXPECT_NE(t.find("warning: 30.0 % of the samples have truncated call paths (more than 10 %)"), std::string::npos)
      << t;
  EXPECT_EQ(t.find("were dropped"), std::string::npos) << t;
  std::ostringstream json;
  views::renderInfoJson(views::describe(*db), json);
  const auto j = nlohmann::json::parse(json.str());
  EXPECT_EQ(j["sampling"]["samples"], 1000);
  EXPECT_EQ(j["sampling"]["truncated"], 300);
  EXPECT_EQ(j["sampling"]["depth_limited"], 7);
  ASSERT_EQ(j["sampling"]["profiles"].size(), 3u);
  EXPECT_EQ(j["sampling"]["profiles"][1]["truncated"], 280);
  EXPECT_EQ(j["sampling"]["profiles"][1]["profile"], formatIdTuple(db->metadata().profiles[1]));
}

TEST(InfoQuality, ManyThreadsShowTheWorstAndNoWarningBelowTheThreshold) {
  test::TempDir tmp;
  const Synthetic s{.profiles = 40, .nodes = 20};
  std::vector<storage::SamplingQuality> q(40, {1000, 0, 0, 10, 0});
  q[33].truncatedSamples = 90;  // the worst thread, 9 %: still no warning overall
  build(tmp.path() / "db", s, true, q);
  auto db = storage::Database::open(tmp.path() / "db");
  std::ostringstream text;
  views::renderInfoText(views::describe(*db), text);
  const std::string t = text.str();
  EXPECT_NE(t.find("(the 8 of 40 threads with the largest share of truncated and dropped samples)"), std::string::npos)
      << t;
  EXPECT_NE(t.find(formatIdTuple(db->metadata().profiles[33])), std::string::npos) << t;
  EXPECT_EQ(t.find("warning"), std::string::npos) << t;
}

TEST(InfoQuality, Format10DatabasesSayNotRecorded) {
  test::TempDir tmp;
  build(tmp.path() / "db", Synthetic{.profiles = 2, .nodes = 10}, false);
  auto db = storage::Database::open(tmp.path() / "db");
  std::ostringstream text;
  views::renderInfoText(views::describe(*db), text);
  EXPECT_NE(text.str().find("sampling     not recorded (databases before format 1.3)"), std::string::npos)
      << text.str();
  std::ostringstream json;
  views::renderInfoJson(views::describe(*db), json);
  EXPECT_TRUE(nlohmann::json::parse(json.str())["sampling"].is_null());
}
