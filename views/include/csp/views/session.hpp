// A view session: one database opened once (read-only), answering every request of the
// presentation layer as data (views.hpp, answers.hpp). The CLIs answer one request with it; a
// web server keeps one per database and answers a browser's requests node by node: the top of a
// view, then the children of the nodes the user opens, so that a CCT of a million nodes is never
// built or sent whole. JSON of every answer: render.hpp.
//
//   Session s("run/db");
//   ViewTree top = s.view(request);                 // request.depth = 1: the root and its children
//   ViewTree more = s.children(request, node.viewId);  // a node shown and its children
//   Distribution d = s.perThread({.spec = "42"});   // node 42 per thread
//
// A session answers one request at a time (a server serializes them or opens one per thread).
// Views keep the models they have built (at most a few): ids of lazily built nodes, such as
// Callers chains, stay valid for children() for the session's life.
#pragma once

#include <filesystem>
#include <memory>
#include <string>
#include <variant>

#include "csp/analysis/diff.hpp"
#include "csp/analysis/imbalance.hpp"
#include "csp/views/answers.hpp"
#include "csp/views/request.hpp"
#include "csp/views/views.hpp"

namespace csp::views {

// Any answer of a request (render() prints each in the formats it has).
using Answer = std::variant<ViewTree, Distribution, DatabaseInfo, analysis::ImbalanceReport, QueryAnswer, DiffReport>;

class Session {
 public:
  // Opens the database read-only (storage::DatabaseError when it cannot); `path` as the user gave
  // it, for titles.
  explicit Session(const std::filesystem::path& path);
  ~Session();
  Session(Session&&) noexcept;
  Session& operator=(Session&&) noexcept;

  const storage::Database& database() const;
  // What exports call the profile: the program's executable, else the database path as given.
  std::string title() const;

  // csp-views' requests (requestFrom) and the answer each gets.
  Answer answer(const Request& request);

  // A view: built, pruned and sorted (buildView), with --effort's reading when asked for.
  ViewTree view(const TreeRequest& request);
  // The node with this view id (TreeNode::viewId) and its children, one level, under the
  // request's columns, sorting and pruning; the children's own children are not built (they are
  // marked truncated). ViewError for an id the view has not (in the Callers view: one not built
  // yet in this session).
  ViewTree children(const ViewRequest& request, std::uint64_t viewId);
  // Flat and Callers: page `page` (from 0) of the procedures, `perPage` a page, hottest first;
  // the procedures on other pages count as beyond the top.
  ViewTree page(const ViewRequest& request, std::size_t page, std::size_t perPage);
  // One node, a procedure's contexts, or a Flat or Callers node per thread.
  Distribution perThread(const NodeRequest& request) const;
  DatabaseInfo info() const;
  // ViewError ("--imbalance: ...") for a section, metric or option that cannot be analysed.
  analysis::ImbalanceReport imbalance(const analysis::ImbalanceOptions& options) const;
  // csp-query (queryRequestFrom): ViewError when the database has no region event logs,
  // analysis::QueryError for a query refused while evaluated.
  QueryAnswer query(const QueryRequest& request) const;
  // The scaling loss report: of this diff database (csp-diff -o), or between this run (p) and
  // `q`. analysis::DiffError for unsuitable databases.
  DiffReport diff(std::size_t top) const;
  DiffReport diff(const Session& q, const analysis::DiffOptions& options, std::size_t top) const;

  // What a browser asks beside the views (docs/web.md):
  // one thread's top contexts (ViewError for an unknown profile or metric);
  ThreadContexts threadContexts(storage::ProfileId profile, const std::string& metric, storage::MetricScope scope,
                                std::size_t top) const;
  // a source file recorded in the database (as a CCT node's file; ViewError for any other path,
  // before the file system is asked) with its text when readable here, and the costs of its lines
  // from the Flat view under `request`'s columns and threads;
  SourceFile source(const std::string& file, const ViewRequest& request);
  // the regions of a time window per thread from the region event logs, reading only the log
  // blocks the window needs (ViewError when the database has no logs, analysis::QueryError for a
  // highlight query that is refused).
  Timeline timeline(const TimelineRequest& request) const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace csp::views
