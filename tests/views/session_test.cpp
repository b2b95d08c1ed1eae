// The presentation layer as a web server uses it (docs/views.md, "The presentation layer"): a
// view session answering node by node and page by page, requests built from csp-views' options,
// and every answer rendered by the one set of renderers -- byte for byte what the CLIs print.
#include <gtest/gtest.h>

#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <sstream>

#include "common/test_support.hpp"
#include "csp/storage/database.hpp"
#include "csp/views/render.hpp"
#include "csp/views/request.hpp"
#include "csp/views/session.hpp"

using namespace csp;
using namespace csp::views;
using test::run;
using test::tool;

namespace {

// Two processes of two threads with region event logs (csp-query) and the idleness-accounting
// metrics (--effort); thread 1 of rank 1 works twice as long in `solve` (--imbalance).
std::string logSpec() {
  nlohmann::json threads = nlohmann::json::array();
  for (int rank = 0; rank < 2; ++rank)
    for (int t = 0; t < 2; ++t) {
      const int solve = rank == 1 && t == 1 ? 200 : 100;
      auto path = [](const char* proc, const char* stmt) {
        return nlohmann::json::array({{{"proc", "main"}, {"file", "main.c"}, {"line", 1}},
                                      {{"callsite", "main.c:5"}},
                                      {{"proc", proc}, {"file", std::string(proc) + ".c"}, {"line", 1}},
                                      {{"stmt", stmt}}});
      };
      threads.push_back({{"id", {{"rank", rank}, {"thread", t}}},
                         {"pid", 10 + rank},
                         {"samples",
                          {{{"path", path("solve", "solve.c:2")}, {"counts", {{"work", solve}, {"idleness", 10}}}},
                           {{"path", path("setup", "setup.c:3")}, {"counts", {{"work", 50}, {"idleness", 40}}}}}},
                         {"events",
                          {{{"t", 0}, {"enter", "compute"}},
                           {{"t", solve}, {"exit", "compute"}},
                           {{"t", solve + 1}, {"enter", "barrier"}},
                           {{"t", 260}, {"exit", "barrier"}}}}});
    }
  return nlohmann::json{{"executable", "app"},
                        {"metrics",
                         {{{"name", "work"}, {"unit", "ns"}, {"kind", "counted"}, {"period", 1}},
                          {{"name", "idleness"}, {"unit", "ns"}, {"kind", "counted"}, {"period", 1}}}},
                        {"threads", threads}}
      .dump();
}

// A command's standard output (its errors dropped); fails the test when it fails.
std::string stdoutOf(const std::string& command) {
  const auto r = run("(" + command + " 2>/dev/null)");
  EXPECT_EQ(r.status, 0) << command;
  return r.output;
}

std::string rendered(const Answer& answer, Format format, const std::string& title = {}) {
  std::ostringstream out;
  render(answer, format, out, {}, title);
  return out.str();
}

class Presentation : public ::testing::Test {
 protected:
  test::TempDir dir{"presentation"};

  // csp-gen OPTIONS -> csp-prof-mpi: the database's path.
  std::filesystem::path database(const std::string& name, const std::string& genOptions) {
    const auto meas = dir / (name + "-meas"), db = dir / name;
    auto r = run("timeout 120 " + tool("csp-gen") + " -q " + genOptions + " -o " + meas.string());
    EXPECT_EQ(r.status, 0) << r.output;
    r = run("timeout 120 " + tool("csp-prof-mpi") + " -q " + meas.string() + " -o " + db.string());
    EXPECT_EQ(r.status, 0) << r.output;
    return db;
  }
  std::filesystem::path synthetic(const std::string& name, int ranks) {
    return database(name, "--ranks " + std::to_string(ranks) + " --threads 2 --nodes 400 --seed 3");
  }
  std::filesystem::path withLogs() {
    std::ofstream(dir / "logs.json") << logSpec();
    return database("logs", "--from-json " + (dir / "logs.json").string());
  }
};

// What the children of a node are, for comparing two trees: their kinds, names, places and values.
std::vector<std::string> childrenOf(const ViewTree& t, std::uint32_t node) {
  std::vector<std::string> out;
  for (auto c : t.nodes[node].children) {
    const auto& n = t.nodes[c];
    std::ostringstream row;
    row << toString(n.kind) << ' ' << n.name << ' ' << n.file << ':' << n.line;
    for (double v : n.values) row << ' ' << v;
    out.push_back(row.str());
  }
  return out;
}

}  // namespace

// A browser opens the top of a view, then the nodes it wants: each answer is one level, and
// together they are the whole view -- also for Callers chains, whose ids exist only once built.
TEST_F(Presentation, ChildrenOfANodeAreWhatTheWholeViewShowsBelowIt) {
  const auto db = synthetic("run", 4);
  for (auto kind : {ViewKind::CallingContext, ViewKind::Flat, ViewKind::Callers}) {
    SCOPED_TRACE(toString(kind));
    ViewRequest request;
    request.kind = kind;
    request.thresholdPercent = 2;
    const auto whole = buildView(*storage::Database::open(db), request);
    Session session(db);
    ViewRequest top = request;
    top.depth = 1;
    const auto first = session.view(TreeRequest{top, std::nullopt});
    std::size_t opened = 0;
    std::function<void(const ViewTree&, std::uint32_t, std::uint32_t)> compare =
        [&](const ViewTree& part, std::uint32_t at, std::uint32_t wholeAt) {
          ASSERT_EQ(childrenOf(part, at), childrenOf(whole, wholeAt));
          for (std::size_t k = 0; k < whole.nodes[wholeAt].children.size(); ++k) {
            const auto wholeChild = whole.nodes[wholeAt].children[k];
            if (whole.nodes[wholeChild].children.empty()) continue;
            const auto& shown = part.nodes[part.nodes[at].children[k]];
            EXPECT_TRUE(shown.truncated);  // not built beyond the level asked for
            const auto below = session.children(request, shown.viewId);
            ASSERT_EQ(below.roots.size(), 1u);
            EXPECT_EQ(below.nodes[below.roots[0]].viewId, shown.viewId);
            ++opened;
            compare(below, below.roots[0], wholeChild);
          }
        };
    compare(first, first.roots[0], whole.roots[0]);
    EXPECT_GT(opened, 10u);
  }
}

TEST_F(Presentation, PagesSplitTheHottestProceduresOfFlatAndCallers) {
  const auto db = synthetic("run", 4);
  Session session(db);
  for (auto kind : {ViewKind::Flat, ViewKind::Callers}) {
    SCOPED_TRACE(toString(kind));
    ViewRequest request;
    request.kind = kind;
    request.thresholdPercent = 0;
    const auto all = session.page(request, 0, 100000);
    const auto procedures = childrenOf(all, all.roots[0]);
    ASSERT_GT(procedures.size(), 8u);
    std::vector<std::string> joined;
    for (std::size_t page = 0;; ++page) {
      const auto part = session.page(request, page, 3);
      const auto rows = childrenOf(part, part.roots[0]);
      EXPECT_EQ(part.pruned.beyondTop, procedures.size() - rows.size());
      if (rows.empty()) break;
      EXPECT_LE(rows.size(), 3u);
      joined.insert(joined.end(), rows.begin(), rows.end());
    }
    EXPECT_EQ(joined, procedures);
  }
  ViewRequest cc;
  try {
    session.page(cc, 0, 10);
    ADD_FAILURE() << "a page of the calling context view";
  } catch (const ViewError& e) {
    EXPECT_STREQ(e.what(), "pages are of the flat and callers views (their procedures)");
  }
}

TEST_F(Presentation, AnUnknownNodeIsOneClearLine) {
  Session session(synthetic("run", 2));
  ViewRequest request;
  request.kind = ViewKind::Callers;
  try {
    session.children(request, 1000000000);
    ADD_FAILURE() << "no such node";
  } catch (const ViewError& e) {
    EXPECT_STREQ(e.what(), "node 1000000000: no node with this id in the callers view");
  }
}

// csp-views' defaults and checks, made by the library for every front end.
TEST_F(Presentation, RequestsCarryTheDefaultsAndChecksOfCspViews) {
  const auto db = storage::Database::open(withLogs());
  constexpr auto I = storage::MetricScope::Inclusive;
  constexpr auto E = storage::MetricScope::Exclusive;
  ViewOptions o;
  auto tree = [&] { return std::get<TreeRequest>(requestFrom(*db, o)); };
  EXPECT_EQ(tree().view.columns, (std::vector<Column>{{"work", Statistic::Sum, I}, {"work", Statistic::Sum, E}}));
  o.kind = ViewKind::Flat;  // self cost first
  EXPECT_EQ(tree().view.columns, (std::vector<Column>{{"work", Statistic::Sum, E}, {"work", Statistic::Sum, I}}));
  EXPECT_FALSE(tree().view.depth);
  o.kind = ViewKind::Callers;
  EXPECT_EQ(tree().view.depth, 2u);
  o.effort = true;  // the inclusive sums the reading needs and the idleness as a percentage
  const auto effort = tree();
  ASSERT_TRUE(effort.effort);
  // csp-prof-mpi adds effort and overhead to work and idleness (docs/views.md).
  std::vector<std::string> titles;
  for (const auto& c : effort.view.columns) titles.push_back(c.title());
  EXPECT_EQ(titles, (std::vector<std::string>{"effort:sum:I", "work:sum:I", "idleness:sum:I", "overhead:sum:I",
                                              "idleness_pct:I", "overhead_pct:I"}));
  EXPECT_EQ(effort.view.columns[4].formula, "idleness_pct = 100 * idleness.sum / effort.sum");
  o.effortThresholds = "20";
  EXPECT_THROW(requestFrom(*db, o), ViewError);

  auto refusal = [&](const ViewOptions& options) {
    try {
      requestFrom(*db, options);
    } catch (const ViewError& e) {
      return std::string(e.what());
    }
    return std::string("accepted");
  };
  ViewOptions info;
  info.info = true;
  info.format = Format::Csv;
  EXPECT_EQ(refusal(info), "--info is available as text or json");
  info.statistics = {"sum,nosuch"};  // statistics are checked first, as csp-views always did
  EXPECT_EQ(refusal(info).rfind("unknown statistic 'nosuch'", 0), 0u) << refusal(info);
  ViewOptions node;
  node.node = "solve";
  node.metrics = {"work,idleness"};
  EXPECT_EQ(refusal(node), "--node shows one metric in one scope");
  ViewOptions top;
  top.kind = ViewKind::Flat;
  top.top = 0;
  EXPECT_EQ(refusal(top), "--top needs a positive number");
}

// A server answers what a CLI answers by calling the layer: the same bytes.
TEST_F(Presentation, LibraryAnswersAreWhatTheToolsPrint) {
  const auto logs = withLogs();
  const auto views = tool("csp-views") + " " + logs.string();
  Session session(logs);
  auto viewsAnswer = [&](const ViewOptions& o) { return session.answer(requestFrom(session.database(), o)); };
  ViewOptions flat;
  flat.kind = ViewKind::Flat;
  flat.top = 2;
  EXPECT_EQ(rendered(viewsAnswer(flat), Format::Text), stdoutOf(views + " --flat --top 2"));
  ViewOptions callers;
  callers.kind = ViewKind::Callers;
  callers.format = Format::Json;
  EXPECT_EQ(rendered(viewsAnswer(callers), Format::Json), stdoutOf(views + " --callers --format json"));
  ViewOptions effort;
  effort.effort = true;
  EXPECT_EQ(rendered(viewsAnswer(effort), Format::Text), stdoutOf(views + " --effort"));
  ViewOptions node;
  node.node = "solve";
  node.format = Format::Csv;
  EXPECT_EQ(rendered(viewsAnswer(node), Format::Csv), stdoutOf(views + " --node solve --format csv"));
  ViewOptions imbalance;
  imbalance.imbalance = "";
  imbalance.format = Format::Json;
  EXPECT_EQ(rendered(viewsAnswer(imbalance), Format::Json), stdoutOf(views + " --imbalance --format json"));
  ViewOptions speedscope;
  speedscope.format = Format::Speedscope;
  EXPECT_EQ(rendered(viewsAnswer(speedscope), Format::Speedscope, session.title()),
            stdoutOf(views + " --format speedscope"));

  const std::string q = "Duration((t, compute))";
  const auto answer = session.query(queryRequestFrom({q, "", {}, 50}));
  EXPECT_EQ(rendered(answer, Format::Text), stdoutOf(tool("csp-query") + " " + logs.string() + " '" + q + "'"));
  const auto canned = session.query(queryRequestFrom({"compute", "straggler", {"barrier"}, 50}));
  EXPECT_EQ(rendered(canned, Format::Csv),
            stdoutOf(tool("csp-query") + " " + logs.string() + " --canned straggler compute barrier --format csv"));

  const auto p = synthetic("p", 2), q4 = synthetic("q", 4);
  const auto report = Session(p).diff(Session(q4), {}, 5);
  EXPECT_EQ(rendered(report, Format::Text),
            stdoutOf(tool("csp-diff") + " " + p.string() + " " + q4.string() + " --top 5"));
  EXPECT_EQ(rendered(report, Format::Json),
            stdoutOf(tool("csp-diff") + " " + p.string() + " " + q4.string() + " --top 5 --format json"));
}

// A diff database holds the report: read back, it lists the same contexts with the same values.
TEST_F(Presentation, ADiffDatabaseAnswersTheReportOfItsRuns) {
  const auto p = synthetic("p", 2), q = synthetic("q", 4), out = dir / "diff";
  const auto r = run("(" + tool("csp-diff") + " " + p.string() + " " + q.string() + " -o " + out.string() +
                     " --format json 2>" + (dir / "err").string() + ")");
  ASSERT_EQ(r.status, 0) << r.output;
  const auto printed = nlohmann::json::parse(r.output);  // nothing else on stdout
  std::ifstream err(dir / "err");
  EXPECT_EQ(std::string(std::istreambuf_iterator<char>(err), {}), "csp-diff: wrote " + out.string() + "\n");
  const auto readBack = nlohmann::json::parse(rendered(Session(out).diff(10), Format::Json));
  ASSERT_FALSE(printed["contexts"]["losses"].empty());
  EXPECT_EQ(readBack["contexts"], printed["contexts"]);
  EXPECT_EQ(readBack["total"], printed["total"]);
  EXPECT_EQ(readBack["hot_path"], printed["hot_path"]);
  EXPECT_EQ(readBack["study"], printed["study"]);
  // The runs' profile counts are not stored: the read-back report says nothing of them.
  EXPECT_FALSE(readBack["runs"]["p"].contains("profiles"));
  EXPECT_EQ(readBack["runs"]["p"]["processes"], printed["runs"]["p"]["processes"]);
  try {
    Session(p).diff(10);
    ADD_FAILURE() << "a run is no diff database";
  } catch (const analysis::DiffError& e) {
    EXPECT_EQ(std::string(e.what()), p.string() + ": is no csp-diff result (csp-diff -o writes one)");
  }
}

// Every answer has a JSON form (all a server sends) and refuses formats it has not in one line.
TEST_F(Presentation, EveryAnswerHasJsonAndRefusesOtherFormatsClearly) {
  const auto logs = withLogs();
  Session session(logs);
  const std::vector<std::pair<Answer, std::string>> answers{
      {session.view(TreeRequest{}), "nodes"},
      {session.perThread({"solve", ViewKind::CallingContext, "work", storage::MetricScope::Inclusive, 4, ""}),
       "values"},
      {session.info(), "metrics"},
      {session.imbalance({}), "causes"},
      {session.query(queryRequestFrom({"Duration(exists t: (t, barrier))", "", {}, 50})), "rows"}};
  for (const auto& [answer, key] : answers) {
    const auto j = nlohmann::json::parse(rendered(answer, Format::Json));
    EXPECT_TRUE(j.contains(key)) << key;
  }
  auto refusal = [](const Answer& a, Format f) {
    try {
      rendered(a, f);
    } catch (const ViewError& e) {
      return std::string(e.what());
    }
    return std::string("rendered");
  };
  EXPECT_EQ(refusal(answers[1].first, Format::Folded), "--node is available as text, csv or json");
  EXPECT_EQ(refusal(answers[2].first, Format::Csv), "--info is available as text or json");
  EXPECT_EQ(refusal(answers[3].first, Format::Speedscope), "--imbalance is available as text or json");
  EXPECT_EQ(refusal(answers[4].first, Format::Folded), "a query is available as text, csv or json");
}
