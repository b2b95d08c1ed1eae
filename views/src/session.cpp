// The view session (session.hpp): a database opened once and the view models built on it, kept
// so that a node's children are built from the model that showed the node.
#include "csp/views/session.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <deque>

#include "model.hpp"

namespace csp::views {

namespace {

// Models a session keeps: a browser switches between a few views; each model holds what it has
// built of its view (for the Callers view of a large CCT, a copy of the CCT index).
constexpr std::size_t kKeptModels = 4;

// Two metric sets that load the same accumulators of the same threads share a model.
std::string modelKey(ViewKind kind, const detail::MetricSet& m) {
  std::string key = fmt::format("{}|{}|{}|", toString(kind), m.byClass, m.histograms);
  for (bool c : m.classes) key += c ? '1' : '0';
  for (auto id : m.ids) key += fmt::format("|{}", id);
  return key;
}

}  // namespace

struct Session::Impl {
  std::filesystem::path path;
  std::unique_ptr<storage::Database> db;
  struct Kept {
    std::string key;
    std::unique_ptr<detail::ViewModel> model;
  };
  std::deque<Kept> models;  // most recently used first

  detail::ViewModel& modelFor(const detail::PreparedView& view) {
    const auto key = modelKey(view.tree.kind, view.metrics);
    for (auto it = models.begin(); it != models.end(); ++it)
      if (it->key == key) {
        std::rotate(models.begin(), it, it + 1);
        return *models.front().model;
      }
    models.push_front({key, detail::makeModel(*db, view.tree.kind, view.metrics)});
    if (models.size() > kKeptModels) models.pop_back();
    return *models.front().model;
  }

  ViewTree select(detail::PreparedView view, std::optional<std::uint64_t> startId = std::nullopt) {
    auto& model = modelFor(view);
    std::optional<std::uint32_t> start;
    if (startId) {
      start = model.built(*startId);
      if (!start)
        throw ViewError(
            fmt::format("node {}: no node with this id in the {} view", *startId, toString(view.tree.kind)));
    }
    detail::selectView(model, view, start);
    return std::move(view.tree);
  }
};

Session::Session(const std::filesystem::path& path) : impl_(std::make_unique<Impl>()) {
  impl_->path = path;
  impl_->db = storage::Database::open(path);
}

Session::~Session() = default;
Session::Session(Session&&) noexcept = default;
Session& Session::operator=(Session&&) noexcept = default;

const storage::Database& Session::database() const { return *impl_->db; }

std::string Session::title() const {
  const auto& executable = database().metadata().executable;
  return executable.empty() ? impl_->path.string() : executable;
}

Answer Session::answer(const Request& request) {
  struct Visitor {
    Session& s;
    Answer operator()(const TreeRequest& r) const { return s.view(r); }
    Answer operator()(const NodeRequest& r) const { return s.perThread(r); }
    Answer operator()(const InfoRequest&) const { return s.info(); }
    Answer operator()(const ImbalanceRequest& r) const { return s.imbalance(r.options); }
  };
  return std::visit(Visitor{*this}, request);
}

ViewTree Session::view(const TreeRequest& request) {
  auto tree = impl_->select(detail::prepareView(database(), request.view));
  if (!request.effort) return tree;
  bool idlenessMeasured = true;
  for (const auto& p : database().metadata().properties)
    if (p.key == storage::kOpenmpIdlenessProperty) {
      tree.warnings.push_back(fmt::format("OpenMP idleness {}; --effort draws no conclusions", p.value));
      idlenessMeasured = false;
    }
  interpretEffort(tree, request.effort->highIdlenessPercent, request.effort->highOverheadPercent, idlenessMeasured);
  return tree;
}

ViewTree Session::children(const ViewRequest& request, std::uint64_t viewId) {
  auto view = detail::prepareView(database(), request);
  // One level below the node, all of it that passes the filters and the threshold.
  view.request.depth = 1;
  view.request.focus.clear();
  view.request.top.reset();
  view.request.hotPathPercent.reset();
  return impl_->select(std::move(view), viewId);
}

ViewTree Session::page(const ViewRequest& request, std::size_t page, std::size_t perPage) {
  if (request.kind != ViewKind::Flat && request.kind != ViewKind::Callers)
    throw ViewError("pages are of the flat and callers views (their procedures)");
  if (perPage == 0) throw ViewError("a page needs at least one procedure");
  ViewRequest paged = request;
  paged.top = perPage;
  paged.topOffset = page * perPage;
  return impl_->select(detail::prepareView(database(), paged));
}

Distribution Session::perThread(const NodeRequest& request) const {
  const auto target = resolveDrillTarget(database(), request.spec, request.kind);
  return drillDown(database(), target, request.metric, request.scope, request.bins, request.threads);
}

DatabaseInfo describe(const storage::Database& db) {
  return {db.directory(), db.formatVersion(), storage::directoryBytes(db.directory()), db.metadata(),
          regionMetricsOf(db)};
}

DatabaseInfo Session::info() const { return describe(database()); }

analysis::ImbalanceReport Session::imbalance(const analysis::ImbalanceOptions& options) const {
  try {
    return analysis::analyzeImbalance(database(), options);
  } catch (const std::invalid_argument& e) {
    throw ViewError(std::string("--imbalance: ") + e.what());
  }
}

DiffReport Session::diff(std::size_t top) const { return diffReport(analysis::readScalingDiff(database()), top); }

DiffReport Session::diff(const Session& q, const analysis::DiffOptions& options, std::size_t top) const {
  const auto d = analysis::computeScalingDiff(database(), q.database(), options);
  return diffReport(d, top, analysis::stateExcess(database(), q.database(), d));
}

}  // namespace csp::views
