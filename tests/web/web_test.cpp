// The web viewer's server and API (docs/web.md), on a real measured database (csp-run
// --region-log on tests/apps/regions.cpp, csp-prof-mpi) and on a database with long region logs
// written here: the server refuses requests without the token, paths with "..", other methods
// and files the database does not record; the API's answers are the presentation layer's JSON;
// a thread's top contexts are its own values; a source file's line costs are the Flat view's;
// a timeline window reads only the log blocks it needs and agrees with the whole log.
#include <gtest/gtest.h>
#include <httplib.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <thread>

#include "common/test_support.hpp"
#include "csp/storage/database_writer.hpp"
#include "csp/views/render.hpp"
#include "csp/views/session.hpp"
#include "csp/web/web.hpp"

namespace fs = std::filesystem;
using csp::test::run;
using csp::test::tool;
using Json = nlohmann::json;

namespace {

// csp-app-regions measured with its region log: 1 process, the main thread and 8 workers.
fs::path measured() {
  return csp::test::sharedInput("web-regions",
                                [](const fs::path& dir) {
                                  const std::string app = std::string(CSP_BINARY_DIR) + "/tests/apps/csp-app-regions";
                                  auto r = run("timeout -k 5 120 " + tool("csp-run") + " --region-log -o " +
                                               (dir / "meas").string() + " -- " + app + " " +
                                               (dir / "expected.txt").string() + " 6");
                                  if (r.status != 0) return ADD_FAILURE() << r.output, false;
                                  r = run("timeout -k 5 120 " + tool("csp-prof-mpi") + " -q " +
                                          (dir / "meas").string() + " -o " + (dir / "db").string());
                                  if (r.status != 0) return ADD_FAILURE() << r.output, false;
                                  return true;
                                }) /
         "db";
}

Json answerOf(const csp::web::Response& r) {
  EXPECT_EQ(r.status, 200) << r.body;
  const auto j = Json::parse(r.body);
  EXPECT_TRUE(j.contains("answer")) << r.body;
  return j["answer"];
}

// A server on a free port, running until the test ends.
struct Running {
  csp::web::Api api;
  csp::web::Server server;
  std::thread thread;
  explicit Running(const fs::path& db) : api({db}), server(api, {}), thread([this] { server.run(); }) {}
  ~Running() {
    server.stop();
    thread.join();
  }
};

// A file recorded in the database as a CCT node's file that exists here (the test program's source).
std::string recordedSource(const csp::views::Session& s) {
  for (const auto& n : s.database().readCct()) {
    const auto& f = s.database().metadata().strings[n.file];
    if (f.size() > 12 && f.ends_with("regions.cpp") && fs::exists(f)) return f;
  }
  return {};
}

}  // namespace

TEST(Web, ServerRefusesWithoutTokenDotDotPathsOtherMethodsAndForeignFiles) {
  Running r(measured());
  // Wait until it accepts connections.
  httplib::Client c("127.0.0.1", r.server.port());
  c.set_connection_timeout(5);
  const std::string t = "token=" + r.server.token();
  for (int i = 0; i < 50 && !c.Get("/"); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(50));

  // The token: missing, wrong, right (as a parameter and as a header).
  EXPECT_EQ(c.Get("/api/databases")->status, 403);
  EXPECT_EQ(c.Get("/")->status, 403);
  EXPECT_EQ(c.Get("/api/databases?token=" + std::string(32, '0'))->status, 403);
  EXPECT_EQ(c.Get("/api/databases?" + t)->status, 200);
  EXPECT_EQ(c.Get("/api/databases", {{"X-CSP-Token", r.server.token()}})->status, 200);
  const auto page = c.Get("/?" + t);
  EXPECT_EQ(page->status, csp::web::page().empty() ? 503 : 200);
  EXPECT_NE(page->get_header_value("Content-Security-Policy").find("default-src 'none'"), std::string::npos);
  EXPECT_EQ(page->get_header_value("Referrer-Policy"), "no-referrer");

  // Paths that climb, plain or percent-encoded, and paths that are no route.
  for (const char* path :
       {"/../../etc/passwd", "/%2e%2e/%2e%2e/etc/passwd", "/api/..%2F..%2Fetc%2Fpasswd", "/.%2E/x"}) {
    const auto res = c.Get(std::string(path) + "?" + t);
    ASSERT_TRUE(res) << path;
    EXPECT_EQ(res->status, 400) << path << " " << res->body;
    EXPECT_EQ(res->body.find("root:"), std::string::npos) << path;
  }
  EXPECT_EQ(c.Get("/etc/passwd?" + t)->status, 404);
  EXPECT_EQ(c.Get("/api/nosuch?" + t)->status, 404);

  // Read-only.
  EXPECT_EQ(c.Post("/api/databases?" + t, "x", "text/plain")->status, 405);
  EXPECT_EQ(c.Delete("/api/databases?" + t)->status, 405);

  // Only the database's recorded source files, checked before the file system is asked.
  for (const std::string& file : std::vector<std::string>{"/etc/passwd", "../../../../etc/passwd",
                                                          std::string(CSP_SOURCE_DIR) + "/CMakeLists.txt"}) {
    const auto res = c.Get("/api/source?" + t + "&db=0&file=" + httplib::detail::encode_query_param(file));
    ASSERT_TRUE(res);
    EXPECT_EQ(res->status, 400) << file << " " << res->body;
    EXPECT_NE(res->body.find("not a source file of this database"), std::string::npos) << res->body;
    EXPECT_EQ(res->body.find("root:"), std::string::npos);
  }
  csp::views::Session s(measured());
  const auto source = recordedSource(s);
  ASSERT_FALSE(source.empty());
  const auto res = c.Get("/api/source?" + t + "&db=0&file=" + httplib::detail::encode_query_param(source));
  ASSERT_EQ(res->status, 200) << res->body;
  std::ifstream in(source);
  const std::string text((std::istreambuf_iterator<char>(in)), {});
  const auto answer = Json::parse(res->body)["answer"];
  EXPECT_TRUE(answer["readable"].get<bool>());
  EXPECT_EQ(answer["text"], text);
}

TEST(Web, ApiAnswersAreThePresentationLayersJson) {
  const auto db = measured();
  csp::web::Api api({db});
  csp::views::Session s(db);
  // The top of the Calling Context view, and a node's children.
  csp::views::ViewOptions o;
  o.depth = 1;
  o.format = csp::views::Format::Json;
  const auto top = s.view(std::get<csp::views::TreeRequest>(csp::views::requestFrom(s.database(), o)));
  std::ostringstream expected;
  csp::views::renderJson(top, expected);
  EXPECT_EQ(answerOf(api.get("/api/view", {{"db", "0"}, {"kind", "cc"}, {"depth", "1"}})), Json::parse(expected.str()));
  const auto child = top.nodes.back().viewId;
  const auto children =
      s.children(std::get<csp::views::TreeRequest>(csp::views::requestFrom(s.database(), o)).view, child);
  expected.str("");
  csp::views::renderJson(children, expected);
  EXPECT_EQ(answerOf(api.get("/api/children", {{"db", "0"}, {"kind", "cc"}, {"id", std::to_string(child)}})),
            Json::parse(expected.str()));
  // A node per thread: what csp-views --node prints.
  const auto cli = run("(" + tool("csp-views") + " --node region_work --format json " + db.string() + " 2>/dev/null)");
  ASSERT_EQ(cli.status, 0) << cli.output;
  EXPECT_EQ(answerOf(api.get("/api/node", {{"db", "0"}, {"kind", "cc"}, {"spec", "region_work"}})),
            Json::parse(cli.output));
  // Refusals are one line with status 400.
  const auto bad = api.get("/api/view", {{"db", "0"}, {"stat", "nosuch"}});
  EXPECT_EQ(bad.status, 400);
  EXPECT_NE(Json::parse(bad.body)["error"].get<std::string>().find("nosuch"), std::string::npos) << bad.body;
  EXPECT_EQ(api.get("/api/view", {{"db", "7"}}).status, 400);
  EXPECT_EQ(api.get("/api/view", {{"db", "0"}, {"depth", "x"}}).status, 400);
}

// A thread's top contexts are its own exclusive values, largest first.
TEST(Web, AThreadsTopContextsAreItsOwnValues) {
  const auto db = measured();
  csp::views::Session s(db);
  const auto metric = s.database().metrics()[0].descriptor.name;
  const auto d = s.perThread(
      {.spec = "region_work", .metric = metric, .scope = csp::storage::MetricScope::Inclusive, .threads = "all"});
  ASSERT_GE(d.values.size(), 8u);
  const auto slowest = d.values.front().profile;
  const auto t = s.threadContexts(slowest, metric, csp::storage::MetricScope::Exclusive, 5);
  ASSERT_FALSE(t.contexts.empty());
  EXPECT_EQ(t.who, d.values.front().who);
  double sum = 0;
  for (std::size_t i = 0; i < t.contexts.size(); ++i) {
    const auto& c = t.contexts[i];
    if (i > 0) {
      EXPECT_LE(c.value, t.contexts[i - 1].value);
    }
    sum += c.value;
    const auto per = csp::views::drillDown(s.database(), c.node, metric, csp::storage::MetricScope::Exclusive);
    const auto it =
        std::find_if(per.values.begin(), per.values.end(), [&](const auto& v) { return v.profile == slowest; });
    ASSERT_NE(it, per.values.end()) << c.label;
    EXPECT_EQ(it->value, c.value) << c.label;
  }
  EXPECT_LE(sum, t.total);
  // The straggler's time is in region_work's inlined kernel: most of it in the listed contexts.
  EXPECT_GT(sum, 0.9 * t.total);
  EXPECT_THROW(s.threadContexts(100000, metric, csp::storage::MetricScope::Exclusive, 5), csp::views::ViewError);
}

// The source pane's line costs: statements of the file wherever its code was inlined, adding up
// to the file's share of the Flat view's statements.
TEST(Web, SourceLineCostsAreTheFlatViewsRowsOfTheFile) {
  const auto db = measured();
  csp::views::Session s(db);
  std::string kernel;
  for (const auto& n : s.database().readCct()) {
    const auto& f = s.database().metadata().strings[n.file];
    if (f.ends_with("kernel.hpp")) kernel = f;
  }
  ASSERT_FALSE(kernel.empty());
  const auto src = s.source(kernel, {});
  EXPECT_TRUE(src.readable) << src.reason;
  ASSERT_FALSE(src.lines.empty());
  std::size_t exclusive = src.columns.size();
  for (std::size_t c = 0; c < src.columns.size(); ++c)
    if (src.columns[c].scope == csp::storage::MetricScope::Exclusive) exclusive = c;
  ASSERT_LT(exclusive, src.columns.size());
  // kernel.hpp's spin() is inlined into region_work (regions.cpp): almost all samples land on
  // its lines, and its loop header is marked.
  double statements = 0;
  bool loop = false;
  for (const auto& l : src.lines) {
    if (l.kind == "statement") statements += l.values[exclusive];
    loop |= l.kind == "loop";
  }
  EXPECT_TRUE(loop);
  EXPECT_GT(statements, 0.8 * src.rootSum[exclusive]);
  EXPECT_LE(statements, src.rootSum[exclusive] * (1 + 1e-12));
  EXPECT_THROW(s.source("/etc/passwd", {}), csp::views::ViewError);
}

namespace {

// Two threads, each in region "run" (1) for the whole log, with `steps` visits of "step" (2)
// inside, 100 ns apart: several log blocks per thread.
fs::path longLogDatabase(const fs::path& dir, std::uint32_t steps) {
  using namespace csp::storage;
  const fs::path target = dir / "db";
  DatabaseBuilder b(target);
  {
    ShardWriter w(b.stagingDir(), 0);
    RegionLogProcess proc{0, "host", 1, {{0, 0, 0, 0, 0}, {1, 0, 0, 0, 0}}};
    w.putRegionLogProcess(proc);
    for (std::size_t t = 0; t < 2; ++t) {
      std::vector<RegionLogEvent> log;
      std::uint64_t now = 1'000'000 + t * 10;
      log.push_back({now, 1, true, false, 0});
      for (std::uint32_t i = 0; i < steps; ++i) {
        log.push_back({now += 50, 2, true, false, 0});
        log.push_back({now += 50, 2, false, false, 0});
      }
      log.push_back({now += 50, 1, false, false, 0});
      proc.threads[t].events = log.size();
      w.putRegionLogThread(0, proc.threads[t], log);
    }
    w.putRegion(0, {csp::kNoIndex, 0, 0});
    w.putRegion(1, {0, 1, 0});
    w.putRegion(2, {1, 2, 0});
    w.finish();
  }
  DatabaseMetadata m;
  m.strings = {"", "run", "step"};
  m.regionCount = 3;
  m.profiles = {{{csp::IdKind::Thread, 0}}, {{csp::IdKind::Thread, 1}}};
  b.writeMetadata(m);
  b.ingestShards(1);
  b.publish();
  return target;
}

}  // namespace

TEST(Web, ATimelineWindowReadsItsBlocksAndAgreesWithTheWholeLog) {
  csp::test::TempDir tmp("web-timeline");
  const std::uint32_t steps = 10000;  // 20,002 events per thread: 5 blocks
  csp::views::Session s(longLogDatabase(tmp.path(), steps));
  // The whole run at full resolution (nothing merged): every visit.
  csp::views::TimelineRequest all;
  all.pixels = 100'000'000;
  const auto whole = s.timeline(all);
  ASSERT_EQ(whole.processes.size(), 1u);
  ASSERT_EQ(whole.processes[0].lanes.size(), 2u);
  const auto& lane = whole.processes[0].lanes[0];
  EXPECT_EQ(lane.intervals.size(), steps + 1);
  EXPECT_EQ(lane.eventsRead, 2u * steps + 2);
  EXPECT_EQ(whole.regions.at(lane.intervals[0].region), "run");
  // A window in the middle, starting inside a visit: the visits it overlaps, clipped, "run" open
  // on both sides; only the blocks it needs are read.
  csp::views::TimelineRequest window = all;
  window.fromNs = 500'075;
  window.toNs = 600'000;
  const auto part = s.timeline(window);
  const auto& w = part.processes[0].lanes[0];
  EXPECT_LT(w.eventsRead, 4096u + 2 * (600'000 - 500'025) / 100 + 10) << "blocks outside the window were read";
  std::vector<csp::views::TimelineInterval> expected;
  for (const auto& iv : lane.intervals) {
    if (iv.endNs < window.fromNs || iv.beginNs > *window.toNs) continue;
    auto clipped = iv;
    clipped.openBefore = iv.beginNs < window.fromNs;
    clipped.openAfter = iv.endNs > *window.toNs;
    clipped.beginNs = std::max(iv.beginNs, window.fromNs);
    clipped.endNs = std::min(iv.endNs, *window.toNs);
    expected.push_back(clipped);
  }
  ASSERT_EQ(w.intervals.size(), expected.size());
  for (std::size_t i = 0; i < expected.size(); ++i) {
    EXPECT_EQ(w.intervals[i].beginNs, expected[i].beginNs) << i;
    EXPECT_EQ(w.intervals[i].endNs, expected[i].endNs) << i;
    EXPECT_EQ(w.intervals[i].region, expected[i].region) << i;
    EXPECT_EQ(w.intervals[i].depth, expected[i].depth) << i;
    EXPECT_EQ(w.intervals[i].openBefore, expected[i].openBefore) << i;
    EXPECT_EQ(w.intervals[i].openAfter, expected[i].openAfter) << i;
  }
  // At 100 pixels the steps (100 ns each) merge into a few intervals that count every visit.
  csp::views::TimelineRequest coarse;
  coarse.pixels = 100;
  const auto merged = s.timeline(coarse).processes[0].lanes[0];
  EXPECT_LT(merged.intervals.size(), 300u);
  std::uint64_t visits = 0;
  for (const auto& iv : merged.intervals)
    if (iv.depth == 1) visits += iv.visits;
  EXPECT_EQ(visits, steps);
}

namespace {

// A synthetic database of `nodes` CCT nodes per thread (csp-gen, one process, two threads): its
// files do not exist.
fs::path syntheticDatabase(std::uint32_t nodes) {
  return csp::test::sharedInput("web-synthetic-" + std::to_string(nodes),
                                [nodes](const fs::path& dir) {
                                  auto r = run("timeout -k 5 120 " + tool("csp-gen") +
                                               " -q --ranks 1 --threads 2 --groups 1 --seed 4 --nodes " +
                                               std::to_string(nodes) + " -o " + (dir / "meas").string());
                                  if (r.status != 0) return ADD_FAILURE() << r.output, false;
                                  r = run("timeout -k 5 120 " + tool("csp-prof-mpi") + " -q " +
                                          (dir / "meas").string() + " -o " + (dir / "db").string());
                                  if (r.status != 0) return ADD_FAILURE() << r.output, false;
                                  return true;
                                }) /
         "db";
}

// CPU time of this thread: what a request computed here costs, whatever else the machine runs.
double threadCpuSeconds() {
  timespec t{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) + 1e-9 * static_cast<double>(t.tv_nsec);
}

}  // namespace

// The page's first request and a node's opening send one level of the tree, whatever the CCT's
// size: a tree of 100 times more nodes answers with about as many bytes.
TEST(Web, AViewsTopAndANodesChildrenAreOneLevelWhateverTheTreesSize) {
  const auto small = syntheticDatabase(400);
  const auto large = syntheticDatabase(40000);
  csp::web::Api api({small, large});
  std::size_t topBytes[2] = {0, 0};
  for (int d = 0; d < 2; ++d) {
    const auto nodes = answerOf(api.get("/api/databases", {}))[d]["nodes"].get<std::size_t>();
    const auto r = api.get("/api/view", {{"db", std::to_string(d)}, {"kind", "cc"}, {"depth", "1"}});
    const auto top = answerOf(r);
    topBytes[d] = r.body.size();
    // The root and its children (the program's entry points), nothing deeper.
    EXPECT_LT(top["nodes"].size(), 50u) << "of " << nodes;
    std::size_t deeper = 0;
    for (const auto& n : top["nodes"]) deeper += n["parent"].get<std::int64_t>() > 0;
    EXPECT_EQ(deeper, 0u);
    // Opening the first child: it and its own children.
    const auto child = top["nodes"][1]["id"].get<std::uint64_t>();
    const auto open =
        answerOf(api.get("/api/children", {{"db", std::to_string(d)}, {"kind", "cc"}, {"id", std::to_string(child)}}));
    for (const auto& n : open["nodes"]) {
      if (n["id"] != child) {
        EXPECT_EQ(n["parent"], child);
      }
    }
  }
  EXPECT_GT(answerOf(api.get("/api/databases", {}))[1]["nodes"].get<std::size_t>(),
            50 * answerOf(api.get("/api/databases", {}))[0]["nodes"].get<std::size_t>());
  EXPECT_LT(topBytes[1], 2 * topBytes[0]) << topBytes[0] << " and " << topBytes[1] << " bytes";
}

// A file the database records but this machine does not have: the answer says so and still
// holds the lines' costs (the page shows them without the text).
TEST(Web, ASourceFileNotOnThisMachineIsSaidToBeUnreadableWithItsLinesCosts) {
  const auto db = syntheticDatabase(400);
  csp::web::Api api({db});
  csp::views::Session s(db);
  std::string file;
  for (const auto& n : s.database().readCct())
    if (const auto& f = s.database().metadata().strings[n.file]; !f.empty() && n.line > 0) file = f;
  ASSERT_FALSE(file.empty());
  ASSERT_FALSE(fs::exists(file)) << file;
  const auto answer = answerOf(api.get("/api/source", {{"db", "0"}, {"file", file}}));
  EXPECT_FALSE(answer["readable"].get<bool>());
  EXPECT_NE(answer["reason"].get<std::string>().find("not found on this machine"), std::string::npos)
      << answer["reason"];
  EXPECT_EQ(answer["text"], "");
  EXPECT_FALSE(answer["lines"].empty());
}

// csp-web builds the Flat and Callers views in the background (warmUp) in a session of their own:
// asked for afterwards, they are answered without building them in the request (its CPU time a
// small fraction of a cold build's), and the Calling Context view's answers are unchanged.
TEST(Web, WarmedUpFlatAndCallersViewsAnswerWithoutBuildingInTheRequest) {
  const auto db = syntheticDatabase(40000);
  const csp::web::Params flat = {{"db", "0"}, {"kind", "flat"}, {"depth", "1"}};
  const csp::web::Params callers = {{"db", "0"}, {"kind", "callers"}, {"depth", "1"}};
  const csp::web::Params cc = {{"db", "0"}, {"kind", "cc"}, {"depth", "1"}};
  double cold[2], warm[2];
  std::string coldBody[2], ccCold;
  {
    csp::web::Api api({db});
    ccCold = api.get("/api/view", cc).body;
    for (int i = 0; i < 2; ++i) {
      const double start = threadCpuSeconds();
      coldBody[i] = api.get("/api/view", i == 0 ? flat : callers).body;
      cold[i] = threadCpuSeconds() - start;
    }
  }
  csp::web::Api api({db});
  api.warmUp();
  EXPECT_EQ(api.get("/api/view", cc).body, ccCold);
  for (int i = 0; i < 2; ++i) {
    const double start = threadCpuSeconds();
    const auto body = api.get("/api/view", i == 0 ? flat : callers).body;  // waits for the build if still running
    warm[i] = threadCpuSeconds() - start;
    EXPECT_EQ(body, coldBody[i]);
    // A cold Flat view is two scans of the database; a cold Callers view builds the procedures'
    // chains of the top only: both far above answering from a built model.
    EXPECT_LT(warm[i] * (i == 0 ? 10 : 2), cold[i])
        << (i == 0 ? "flat" : "callers") << ": " << warm[i] << " s vs " << cold[i] << " s of CPU";
  }
}
