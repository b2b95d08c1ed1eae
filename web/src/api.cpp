// The JSON API (web.hpp, docs/web.md "API"): a URL's parameters become the options a CLI would
// have parsed (views::ViewOptions, QueryOptions, TimelineRequest), the presentation layer checks
// them and answers, and its JSON renderer's output is sent. Nothing here computes or renders a
// view.
#include <fmt/format.h>

#include <charconv>
#include <future>
#include <mutex>
#include <nlohmann/json.hpp>
#include <sstream>
#include <thread>

#include "csp/analysis/query.hpp"
#include "csp/views/memory.hpp"
#include "csp/views/render.hpp"
#include "csp/views/session.hpp"
#include "csp/web/web.hpp"

namespace csp::web {

namespace {

using views::ViewKind;
using Json = nlohmann::json;

// A request the API cannot serve as asked: status 400 with this message.
struct BadRequest : std::runtime_error {
  using std::runtime_error::runtime_error;
};
struct NotFound : std::runtime_error {
  using std::runtime_error::runtime_error;
};

std::string param(const Params& p, const std::string& key, const std::string& fallback = "") {
  const auto it = p.find(key);
  return it == p.end() ? fallback : it->second;
}

// Repeated or comma-separated values, as the CLIs take lists.
std::vector<std::string> list(const Params& p, const std::string& key) {
  std::vector<std::string> out;
  for (auto [it, end] = p.equal_range(key); it != end; ++it)
    if (!it->second.empty()) out.push_back(it->second);
  return out;
}

template <typename T>
T number(const Params& p, const std::string& key, T fallback) {
  const auto text = param(p, key);
  if (text.empty()) return fallback;
  T value{};
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc() || end != text.data() + text.size())
    throw BadRequest(fmt::format("parameter {}: '{}' is not a number", key, text));
  return value;
}

template <typename T>
std::optional<T> optionalNumber(const Params& p, const std::string& key) {
  if (param(p, key).empty()) return std::nullopt;
  return number<T>(p, key, T{});
}

ViewKind kindOf(const std::string& name) {
  if (name.empty() || name == "cc") return ViewKind::CallingContext;
  if (name == "callers") return ViewKind::Callers;
  if (name == "flat") return ViewKind::Flat;
  if (name == "regions") return ViewKind::Regions;
  throw BadRequest(fmt::format("parameter kind: '{}' is none of cc, callers, flat, regions", name));
}

storage::MetricScope scopeOf(const std::string& name) {
  if (name.empty() || name == "inclusive" || name == "i") return storage::MetricScope::Inclusive;
  if (name == "exclusive" || name == "e") return storage::MetricScope::Exclusive;
  throw BadRequest(fmt::format("parameter scope: '{}' is neither inclusive nor exclusive", name));
}

// The csp-views options a URL names (the same names as the CLI's, docs/web.md).
views::ViewOptions viewOptions(const Params& p) {
  views::ViewOptions o;
  o.kind = kindOf(param(p, "kind"));
  o.metrics = list(p, "metric");
  o.statistics = list(p, "stat");
  o.scopes = list(p, "scope");
  o.formulas = list(p, "formula");
  o.hide = list(p, "hide");
  o.keep = list(p, "keep");
  o.population = param(p, "population", "all");
  o.sort = param(p, "sort");
  o.focus = param(p, "focus");
  o.threads = param(p, "threads");
  o.effort = param(p, "effort") == "1";
  o.depth = optionalNumber<unsigned>(p, "depth");
  o.threshold = optionalNumber<double>(p, "threshold");
  o.hotPath = optionalNumber<double>(p, "hot_path");
  o.top = optionalNumber<std::size_t>(p, "top");
  o.format = views::Format::Json;
  return o;
}

template <typename Render, typename Answer>
std::string json(Render&& render, const Answer& answer) {
  std::ostringstream out;
  render(answer, out);
  return out.str();
}

// {"answer": <the renderer's JSON>, "warnings": [...]}: the answer's bytes as rendered.
Response wrap(std::string answer, const std::vector<std::string>& warnings) {
  while (!answer.empty() && answer.back() == '\n') answer.pop_back();
  Json w = Json::array();
  for (const auto& text : warnings) w.push_back(text.rfind("warning: ", 0) == 0 ? text.substr(9) : text);
  return {200, "application/json",
          "{\"warnings\":" + w.dump(-1, ' ', false, Json::error_handler_t::replace) + ",\"answer\":" + answer + "}"};
}

Response error(int status, const std::string& message) {
  return {status, "application/json", Json{{"error", message}}.dump(-1, ' ', false, Json::error_handler_t::replace)};
}

}  // namespace

struct Api::Impl {
  // Two sessions over one database: the Flat and Callers views (and the source pane, a Flat view
  // kept to a file) are built from scans of the whole database, seconds for a CCT of a million
  // nodes; in a session of their own that build never holds up the Calling Context view, and
  // warmUp() can make it before the user asks.
  struct Database {
    std::filesystem::path path;
    std::mutex mutex;  // a session answers one request at a time
    views::Session session;
    std::mutex procedureMutex;
    views::Session procedureSession;
    explicit Database(const std::filesystem::path& p) : path(p), session(p), procedureSession(p) {}
  };
  std::vector<std::unique_ptr<Database>> dbs;
  std::vector<std::thread> warming;

  ~Impl() {
    for (auto& t : warming) t.join();
  }

  // Whether a request is the procedure session's.
  static bool procedural(const std::string& what, const Params& p) {
    const auto kind = param(p, "kind");
    return what == "source" || what == "page" || kind == "flat" || kind == "callers";
  }

  // The Flat and Callers views' models of the page's default request, built in the background.
  void warm(Database& d, std::promise<void>& locked) {
    std::lock_guard lock(d.procedureMutex);
    locked.set_value();
    for (auto kind : {ViewKind::Flat, ViewKind::Callers}) {
      try {
        views::ViewOptions o;
        o.kind = kind;
        o.depth = 1;
        o.format = views::Format::Json;
        const auto request = views::requestFrom(d.procedureSession.database(), o);
        d.procedureSession.view(std::get<views::TreeRequest>(request));
      } catch (const std::exception&) {
        // The request, when the user makes it, says what is wrong.
      }
    }
  }

  Database& db(const Params& p) {
    const auto i = number<std::size_t>(p, "db", 0);
    if (i >= dbs.size()) throw BadRequest(fmt::format("parameter db: no database {} (0 to {})", i, dbs.size() - 1));
    return *dbs[i];
  }

  bool isDiff(const views::Session& s) const {
    for (const auto& prop : s.database().metadata().properties)
      if (prop.key == "generator") return prop.value == "csp-diff";
    return false;
  }

  Response databases() {
    Json list = Json::array();
    for (std::size_t i = 0; i < dbs.size(); ++i) {
      const auto& s = dbs[i]->session;
      const auto& m = s.database().metadata();
      Json metrics = Json::array();
      for (const auto& metric : m.metrics)
        metrics.push_back({{"name", metric.descriptor.name}, {"unit", metric.descriptor.unit}});
      list.push_back({{"index", i},
                      {"path", dbs[i]->path.string()},
                      {"title", s.title()},
                      {"diff", isDiff(s)},
                      {"region_logs", !s.database().regionLogProcesses().empty()},
                      {"regions", m.regionCount > 1},
                      {"nodes", m.nodeCount},
                      {"profiles", m.profiles.size()},
                      {"metrics", std::move(metrics)}});
    }
    return wrap(list.dump(-1, ' ', false, Json::error_handler_t::replace), {});
  }

  // Tree answers: the view's top, a node's children, a page of procedures.
  Response tree(views::Session& session, const std::string& what, const Params& p) {
    const auto request = views::requestFrom(session.database(), viewOptions(p));
    const auto* tree = std::get_if<views::TreeRequest>(&request);
    if (!tree) throw BadRequest("a view request (no node, info or imbalance options)");
    views::ViewTree answer;
    if (what == "view")
      answer = session.view(*tree);
    else if (what == "children")
      answer = session.children(tree->view, number<std::uint64_t>(p, "id", 0));
    else
      answer = session.page(tree->view, number<std::size_t>(p, "page", 0), number<std::size_t>(p, "per_page", 50));
    return wrap(json([](const auto& a, std::ostream& o) { views::renderJson(a, o); }, answer), answer.warnings);
  }

  Response node(Database& d, const Params& p) {
    auto o = viewOptions(p);
    o.node = param(p, "spec");
    if (o.node.empty()) throw BadRequest("parameter spec: a node id, procedure name or call path");
    o.bins = number<std::size_t>(p, "bins", 16);
    const auto request = views::requestFrom(d.session.database(), o);
    const auto answer = d.session.perThread(std::get<views::NodeRequest>(request));
    return wrap(json([](const auto& a, std::ostream& out) { views::renderDistributionJson(a, out); }, answer), {});
  }

  Response thread(Database& d, const Params& p) {
    auto metric = param(p, "metric");
    if (metric.empty() && !d.session.database().metrics().empty())
      metric = d.session.database().metrics()[0].descriptor.name;
    const auto answer =
        d.session.threadContexts(number<storage::ProfileId>(p, "profile", 0), metric,
                                 scopeOf(param(p, "scope", "exclusive")), number<std::size_t>(p, "top", 20));
    return wrap(json([](const auto& a, std::ostream& out) { views::renderThreadContextsJson(a, out); }, answer), {});
  }

  Response imbalance(Database& d, const Params& p) {
    auto o = viewOptions(p);
    o.kind = ViewKind::CallingContext;
    o.imbalance = param(p, "section");
    const auto request = views::requestFrom(d.session.database(), o);
    const auto answer = d.session.imbalance(std::get<views::ImbalanceRequest>(request).options);
    return wrap(json([](const auto& a, std::ostream& out) { views::renderImbalanceJson(a, out); }, answer), {});
  }

  Response diff(Database& d, const Params& p) {
    if (!isDiff(d.session)) throw BadRequest("not a csp-diff database: its scaling loss is made with csp-diff -o");
    const auto answer = d.session.diff(number<std::size_t>(p, "top", 20));
    return wrap(json([](const auto& a, std::ostream& out) { views::renderDiffJson(a, out); }, answer), {});
  }

  Response query(Database& d, const Params& p) {
    views::QueryOptions o;
    o.query = param(p, "q");
    o.canned = param(p, "canned");
    o.cannedArgs = list(p, "arg");
    o.limit = number<std::size_t>(p, "limit", 50);
    const auto answer = d.session.query(views::queryRequestFrom(o));
    return wrap(json([](const auto& a, std::ostream& out) { views::renderQueryJson(a, out); }, answer),
                answer.warnings);
  }

  Response timeline(Database& d, const Params& p) {
    views::TimelineRequest r;
    r.fromNs = number<std::uint64_t>(p, "from", 0);
    r.toNs = optionalNumber<std::uint64_t>(p, "to");
    r.pixels = std::clamp<std::size_t>(number<std::size_t>(p, "px", 1000), 1, 20000);
    if (const auto q = param(p, "q"); !q.empty()) {
      views::QueryOptions o;
      o.query = q;
      o.limit = 100000;  // frames of the whole run, of which the window's are sent
      r.query = views::queryRequestFrom(o);
    }
    const auto answer = d.session.timeline(r);
    return wrap(json([](const auto& a, std::ostream& out) { views::renderTimelineJson(a, out); }, answer),
                answer.warnings);
  }

  Response source(views::Session& session, const Params& p) {
    const auto request = views::requestFrom(session.database(), viewOptions(p));
    const auto& tree = std::get<views::TreeRequest>(request);
    const auto answer = session.source(param(p, "file"), tree.view);
    return wrap(json([](const auto& a, std::ostream& out) { views::renderSourceJson(a, out); }, answer),
                answer.warnings);
  }

  // Memory-access profiles (docs/memory-profiles.md): csp-views --cost, --growth, --footprint,
  // --interleaving with the CLI's parameter names.
  Response memory(Database& d, const std::string& what, const Params& p) {
    namespace mm = metrics::memory;
    views::MemoryRequest r;
    const auto size = param(p, "size", "trms"), cost = param(p, "cost_metric", "instructions");
    if (size != "trms" && size != "rms")
      throw BadRequest(fmt::format("parameter size: '{}' is neither trms nor rms", size));
    if (cost != "instructions" && cost != "time")
      throw BadRequest(fmt::format("parameter cost_metric: '{}' is neither instructions nor time", cost));
    r.size = size == "rms" ? mm::SizeKind::Rms : mm::SizeKind::Trms;
    r.costMetric = cost == "time" ? mm::CostMetric::Time : mm::CostMetric::Instructions;
    r.minSizes = number<std::size_t>(p, "min_sizes", 4);
    if (what == "cost") {
      r.cost = param(p, "routine");
      if (r.cost.empty()) throw BadRequest("parameter routine: the name of a routine");
    }
    r.growth = what == "growth", r.footprint = what == "footprint", r.interleaving = what == "interleaving";
    std::ostringstream out;
    views::renderMemory(d.session.database(), r, views::Format::Json, out);
    return wrap(out.str(), {});
  }

  Response info(Database& d) {
    const auto answer = d.session.info();
    return wrap(json([](const auto& a, std::ostream& out) { views::renderInfoJson(a, out); }, answer), {});
  }

  Response answer(const std::string& path, const Params& p) {
    if (path == "/api/databases") return databases();
    const std::string what = path.rfind("/api/", 0) == 0 ? path.substr(5) : "";
    auto& d = db(p);
    const bool isTree = what == "view" || what == "children" || what == "page";
    if ((isTree || what == "source") && procedural(what, p)) {
      std::lock_guard lock(d.procedureMutex);
      return what == "source" ? source(d.procedureSession, p) : tree(d.procedureSession, what, p);
    }
    std::lock_guard lock(d.mutex);
    if (isTree) return tree(d.session, what, p);
    if (what == "node") return node(d, p);
    if (what == "thread") return thread(d, p);
    if (what == "imbalance") return imbalance(d, p);
    if (what == "diff") return diff(d, p);
    if (what == "query") return query(d, p);
    if (what == "timeline") return timeline(d, p);
    if (what == "info") return info(d);
    if (what == "cost" || what == "growth" || what == "footprint" || what == "interleaving") return memory(d, what, p);
    throw NotFound(fmt::format("{}: no such request (docs/web.md lists them)", path));
  }
};

Api::Api(const std::vector<std::filesystem::path>& databases) : impl_(std::make_unique<Impl>()) {
  for (const auto& path : databases) impl_->dbs.push_back(std::make_unique<Impl::Database>(path));
}

Api::~Api() = default;

std::size_t Api::databases() const { return impl_->dbs.size(); }

void Api::warmUp() {
  // Returns once every build holds its session: a request made after warmUp() waits for the
  // build instead of racing it to the session and building the view itself.
  std::vector<std::promise<void>> locked(impl_->dbs.size());
  std::vector<std::future<void>> holding;
  holding.reserve(locked.size());
  for (auto& l : locked) holding.push_back(l.get_future());
  for (std::size_t i = 0; i < impl_->dbs.size(); ++i)
    impl_->warming.emplace_back(
        [this, db = impl_->dbs[i].get(), l = std::move(locked[i])]() mutable { impl_->warm(*db, l); });
  for (auto& h : holding) h.wait();
}

Response Api::get(const std::string& path, const Params& params) {
  try {
    return impl_->answer(path, params);
  } catch (const NotFound& e) {
    return error(404, e.what());
  } catch (const storage::DatabaseError& e) {
    return error(500, e.what());
  } catch (const std::bad_alloc&) {
    return error(500, "out of memory");
  } catch (const std::exception& e) {
    // ViewError, QueryError, DiffError, BadRequest: the request, not the server.
    return error(400, e.what());
  }
}

std::string requestKey(const std::string& path, const Params& params) {
  std::string key = path;
  char sep = '?';
  for (const auto& [k, v] : params) {  // a multimap: sorted by name, repeated names in order
    if (k == "token") continue;
    key += sep;
    key += k;
    key += '=';
    key += v;
    sep = '&';
  }
  return key;
}

}  // namespace csp::web
