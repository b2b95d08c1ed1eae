// Views of a database whose metric is real-valued (as csp-diff writes them): written directly
// with the storage API, read back through the views, values decoded as doubles.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <tuple>

#include "common/test_support.hpp"
#include "csp/metrics/encoding.hpp"
#include "csp/storage/database_writer.hpp"
#include "csp/views/render.hpp"

using namespace csp;
using namespace csp::views;

namespace {

constexpr auto kIncl = storage::MetricScope::Inclusive;
constexpr auto kExcl = storage::MetricScope::Exclusive;

// root -> main -> call main.c:5 -> p -> p.c:2
//              -> call main.c:6 -> p -> p.c:2
// Two profiles; p's per-thread values (both scopes, also at its statement): site 5 {0.5, 1.5},
// site 6 {1.5, absent}; main and the root hold the per-thread sums inclusively, nothing exclusively.
std::filesystem::path writeRealDatabase(const std::filesystem::path& target) {
  storage::DatabaseBuilder builder(target);
  std::vector<storage::CctNode> nodes = {
      {kNoIndex, ScopeKind::Root, 0, 0, 0, 0}, {0, ScopeKind::ProcFrame, 1, 2, 3, 1},
      {1, ScopeKind::CallSite, 0, 2, 0, 5},    {2, ScopeKind::ProcFrame, 4, 5, 3, 1},
      {3, ScopeKind::Stmt, 0, 5, 0, 2},        {1, ScopeKind::CallSite, 0, 2, 0, 6},
      {5, ScopeKind::ProcFrame, 4, 5, 3, 1},   {6, ScopeKind::Stmt, 0, 5, 0, 2},
  };
  // Per node and profile: the value (NaN = absent), same for kExcl and kIncl except where noted.
  const double nan = NAN;
  const std::vector<std::array<double, 2>> incl = {{2.0, 1.5}, {2.0, 1.5}, {0.5, 1.5}, {0.5, 1.5},
                                                   {0.5, 1.5}, {1.5, nan}, {1.5, nan}, {1.5, nan}};
  const std::vector<std::array<double, 2>> excl = {{nan, nan}, {nan, nan}, {nan, nan}, {0.5, 1.5},
                                                   {0.5, 1.5}, {nan, nan}, {1.5, nan}, {1.5, nan}};
  storage::ShardWriter shard(builder.stagingDir(), 0);
  shard.putCct(nodes);
  std::vector<std::vector<storage::ProfileValue>> byProfile(2);
  for (storage::NodeId n = 0; n < nodes.size(); ++n) {
    std::vector<storage::NodeValue> byNode;
    for (auto scope : {kExcl, kIncl}) {
      const auto& table = scope == kIncl ? incl : excl;
      metrics::RealAccumulator acc;
      for (storage::ProfileId p = 0; p < 2; ++p) {
        const double v = table[n][p];
        if (std::isnan(v)) continue;
        acc.accumulate(p, v);
        byNode.push_back({0, scope, p, std::bit_cast<std::uint64_t>(v)});
        byProfile[p].push_back({n, 0, scope, std::bit_cast<std::uint64_t>(v)});
      }
      if (acc.count() > 0) shard.putSummary(n, 0, scope, metrics::encode(acc));
    }
    std::sort(byNode.begin(), byNode.end(), [](const auto& a, const auto& b) {
      return std::tie(a.metric, a.scope, a.profile) < std::tie(b.metric, b.scope, b.profile);
    });
    shard.putNodeValues(n, byNode);
  }
  for (storage::ProfileId p = 0; p < 2; ++p) shard.putProfileValues(p, byProfile[p]);
  shard.finish();
  storage::DatabaseMetadata meta;
  meta.executable = "real";
  meta.processCount = 2;
  meta.threadCount = 2;
  meta.nodeCount = static_cast<std::uint32_t>(nodes.size());
  meta.metrics = {{{"ratio", "", MetricKind::Counted, 1, "a real-valued metric"}, storage::ValueType::Real}};
  meta.profiles = {{{IdKind::Rank, 0}}, {{IdKind::Rank, 1}}};
  meta.strings = {"", "main", "main.c", "real", "p", "p.c"};
  builder.writeMetadata(meta);
  builder.ingestShards(1);
  builder.publish();
  return target;
}

}  // namespace

TEST(ViewsRealMetric, FlatCallersAndDrillDownDecodeDoubles) {
  test::TempDir dir("views-real");
  const auto path = writeRealDatabase(dir / "db");
  const auto db = storage::Database::open(path);

  ViewRequest r;
  r.kind = ViewKind::Flat;
  r.thresholdPercent = 0;
  auto t = buildView(*db, r);
  const TreeNode* p = nullptr;
  for (const auto& n : t.nodes)
    if (n.kind == NodeKind::Procedure && n.name == "p") p = &n;
  ASSERT_NE(p, nullptr);
  // Instances: 2; inputs 2 x 2 = 4: {0.5, 1.5, 1.5, absent}.
  EXPECT_EQ(p->instances[0], 2u);
  EXPECT_DOUBLE_EQ(p->stats[0].sum, 3.5);
  EXPECT_DOUBLE_EQ(p->stats[0].mean, 3.5 / 4);
  EXPECT_DOUBLE_EQ(p->stats[0].max, 1.5);
  EXPECT_DOUBLE_EQ(t.rootSum[0], 3.5);

  r.kind = ViewKind::Callers;
  t = buildView(*db, r);
  std::vector<double> sites;
  for (const auto& n : t.nodes)
    if (n.depth == 2) sites.push_back(n.stats[0].sum);
  std::sort(sites.begin(), sites.end());
  ASSERT_EQ(sites.size(), 2u);  // p <- main at line 5 and at line 6
  EXPECT_DOUBLE_EQ(sites[0], 1.5);
  EXPECT_DOUBLE_EQ(sites[1], 2.0);

  const auto d = drillDown(*db, 3, "ratio", kIncl);
  ASSERT_EQ(d.values.size(), 2u);
  EXPECT_DOUBLE_EQ(d.values[0].value, 1.5);
  EXPECT_EQ(d.values[0].who, "rank 1");
  EXPECT_DOUBLE_EQ(d.all.mean, 1.0);
}
