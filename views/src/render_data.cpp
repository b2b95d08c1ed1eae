// Machine-readable renderers: CSV, JSON, folded stacks, speedscope, and the experiment info.
#include <fmt/format.h>

#include <cmath>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <ostream>

#include "csp/metrics/scaling.hpp"
#include "csp/views/format.hpp"
#include "csp/views/render.hpp"
#include "json.hpp"

namespace csp::views {

namespace {

using Json = nlohmann::json;

// The region tree's nodes without its root (the state outside every region).
std::uint32_t annotatedRegions(const storage::DatabaseMetadata& m) { return m.regionCount > 0 ? m.regionCount - 1 : 0; }

using detail::dumpJson;
using detail::jsonNumber;

const char* scopeName(storage::MetricScope s) {
  return s == storage::MetricScope::Inclusive ? "inclusive" : "exclusive";
}

std::int64_t parentId(const ViewTree& tree, const TreeNode& n) {
  return n.parent == kNoIndex ? -1 : static_cast<std::int64_t>(tree.nodes[n.parent].viewId);
}

// The column whose sums make flame-graph weights: the first inclusive one.
std::size_t weightColumn(const ViewTree& tree) {
  if (tree.kind != ViewKind::CallingContext && tree.kind != ViewKind::Regions)
    throw ViewError(
        "folded stacks and speedscope need the calling context or regions view (Flat and Callers values do not nest)");
  for (std::size_t c = 0; c < tree.columns.size(); ++c)
    if (tree.columns[c].scope == storage::MetricScope::Inclusive) return c;
  throw ViewError("folded stacks and speedscope need an inclusive column (--scope inclusive)");
}

struct Frame {
  std::string name, file;
  std::uint32_t line = 0;
  // NOLINTNEXTLINE(modernize-use-nullptr): clang-tidy 14's false positive on a defaulted <=>
  auto operator<=>(const Frame&) const = default;
};

// Stacks of procedure (and inlined, region) frames with their self cost: a node's inclusive sum
// minus its shown children's, so that pruned subtrees stay in their parent's frame and the
// weights add up to the root's inclusive sum (up to rounding in the folded format).
std::map<std::vector<Frame>, double> stacks(const ViewTree& tree) {
  const std::size_t c = weightColumn(tree);
  std::map<std::vector<Frame>, double> out;
  std::vector<std::vector<Frame>> path(tree.nodes.size());
  for (std::size_t i = 0; i < tree.nodes.size(); ++i) {
    const auto& n = tree.nodes[i];
    if (n.parent != kNoIndex) path[i] = path[n.parent];
    if (n.kind == NodeKind::Procedure || n.kind == NodeKind::Region)
      path[i].push_back({n.name, n.file, n.line});
    else if (n.kind == NodeKind::Inlined)
      path[i].push_back({n.name + " [inlined]", n.file, n.line});
    double self = n.stats[c].sum;
    for (auto k : n.children) self -= tree.nodes[k].stats[c].sum;
    if (!(self > 0)) continue;
    // Outside any procedure frame (the root itself, or call sites and statements above the
    // first procedure): pruned or hidden top-level contexts and unattributed code. Kept as an
    // "[other]" frame, so that the stacks always add up to the root's total.
    if (path[i].empty())
      out[{Frame{"[other]", "", 0}}] += self;
    else
      out[path[i]] += self;
  }
  return out;
}

// A node's value in column c as an exact integer where it is one: counts, and sums, minima and
// maxima of integer metrics (their doubles round beyond 2^53); formulas are reals.
std::optional<metrics::Uint128> exactValue(const ViewTree& tree, const TreeNode& n, std::size_t c) {
  if (!tree.columns[c].formula.empty() || c >= n.stats.size() || std::isnan(n.values[c])) return std::nullopt;
  return metrics::exactValueOf(n.stats[c], tree.columns[c].statistic);
}

std::string csvValue(const ViewTree& tree, const TreeNode& n, std::size_t c) {
  const auto exact = exactValue(tree, n, c);
  return exact ? metrics::toDecimalString(*exact) : csvNumber(n.values[c]);
}

Json jsonValue(const ViewTree& tree, const TreeNode& n, std::size_t c) {
  const auto exact = exactValue(tree, n, c);
  if (exact && *exact <= UINT64_MAX) return Json(static_cast<std::uint64_t>(*exact));
  return jsonNumber(n.values[c]);
}

std::string speedscopeUnit(const std::string& unit) {
  if (unit == "ns" || unit == "nanoseconds") return "nanoseconds";
  if (unit == "us" || unit == "microseconds") return "microseconds";
  if (unit == "ms" || unit == "milliseconds") return "milliseconds";
  if (unit == "s" || unit == "seconds") return "seconds";
  if (unit == "bytes" || unit == "B") return "bytes";
  return "none";
}

}  // namespace

void renderCsv(const ViewTree& tree, std::ostream& out) {
  out << "id,parent,depth,kind,name,file,line,module";
  for (const auto& c : tree.columns) {
    out << "," << csvField(c.title());
    if (hasPercent(c.statistic)) out << "," << csvField(c.title() + ":percent");
  }
  out << ",instances,imbalanced,truncated" << (tree.hasNotes ? ",note" : "") << "\n";
  for (const auto& n : tree.nodes) {
    out << n.viewId << "," << parentId(tree, n) << "," << n.depth << "," << toString(n.kind) << "," << csvField(n.name)
        << "," << csvField(n.file) << "," << n.line << "," << csvField(n.module);
    for (std::size_t c = 0; c < tree.columns.size(); ++c) {
      out << "," << csvValue(tree, n, c);
      if (hasPercent(tree.columns[c].statistic)) out << "," << csvNumber(tree.percent(n, c));
    }
    out << "," << (n.instances.empty() ? 0 : n.instances[0]) << "," << (n.imbalanceOnly ? 1 : 0) << ","
        << (n.truncated ? 1 : 0);
    if (tree.hasNotes) out << "," << csvField(n.note);
    out << "\n";
  }
}

void renderJson(const ViewTree& tree, std::ostream& out) {
  Json j;
  j["view"] = toString(tree.kind);
  j["profiles"] = tree.profiles;
  j["threads"] = tree.threads.label;
  j["profiles_left_out"] = tree.threads.excluded;
  Json cols = Json::array();
  for (std::size_t c = 0; c < tree.columns.size(); ++c) {
    const auto& col = tree.columns[c];
    cols.push_back({{"title", col.title()},
                    {"metric", col.metric},
                    {"statistic", toString(col.statistic)},
                    {"scope", scopeName(col.scope)},
                    {"unit", tree.units[c]},
                    {"root_sum", jsonNumber(tree.rootSum[c])}});
  }
  j["columns"] = std::move(cols);
  Json nodes = Json::array();
  for (const auto& n : tree.nodes) {
    Json node;
    node["id"] = n.viewId;
    node["parent"] = parentId(tree, n);
    node["depth"] = n.depth;
    node["kind"] = toString(n.kind);
    node["name"] = n.name;
    node["file"] = n.file;
    node["line"] = n.line;
    node["module"] = n.module;
    if (n.cctNode) node["cct_node"] = *n.cctNode;
    Json values = Json::object(), percents = Json::object(), instances = Json::object(), errors = Json::object();
    Json noise = Json::array();
    for (std::size_t c = 0; c < tree.columns.size(); ++c) {
      values[tree.columns[c].title()] = jsonValue(tree, n, c);
      if (hasPercent(tree.columns[c].statistic)) percents[tree.columns[c].title()] = jsonNumber(tree.percent(n, c));
      instances[tree.columns[c].title()] = n.instances[c];
      if (c < n.errors.size() && !std::isnan(n.errors[c])) errors[tree.columns[c].title()] = n.errors[c];
      if (c < n.withinSamplingError.size() && n.withinSamplingError[c]) noise.push_back(tree.columns[c].title());
    }
    node["values"] = std::move(values);
    node["percent"] = std::move(percents);
    node["instances"] = std::move(instances);
    node["sampling_error"] = std::move(errors);        // worst-case bound per column (thesis App. A)
    node["within_sampling_error"] = std::move(noise);  // imbalance columns that sampling alone could explain
    node["imbalanced"] = n.imbalanceOnly;
    node["truncated"] = n.truncated;
    if (tree.hasNotes) node["note"] = n.note.empty() ? Json(nullptr) : Json(n.note);
    nodes.push_back(std::move(node));
  }
  j["nodes"] = std::move(nodes);
  const auto& p = tree.pruned;
  j["pruned"] = {{"below_threshold", p.belowThreshold}, {"kept_for_imbalance", p.keptForImbalance},
                 {"beyond_depth", p.beyondDepth},       {"hidden", p.hidden},
                 {"beyond_top", p.beyondTop},           {"off_hot_path", p.offHotPath}};
  out << dumpJson(j, 1) << "\n";
}

void renderFolded(const ViewTree& tree, std::ostream& out) {
  for (const auto& [stack, weight] : stacks(tree)) {
    const auto w = std::llround(weight);
    if (w <= 0) continue;
    std::string line;
    for (const auto& f : stack) {
      if (!line.empty()) line += ';';
      // ';' separates frames and a space ends the stack in this format.
      for (char ch : f.name) line += (ch == ';' || ch == '\n') ? ':' : ch;
    }
    out << line << " " << w << "\n";
  }
}

void renderSpeedscope(const ViewTree& tree, std::ostream& out, const std::string& title) {
  const auto all = stacks(tree);
  std::map<Frame, std::size_t> frameIds;
  Json frames = Json::array(), samples = Json::array(), weights = Json::array();
  double total = 0;
  for (const auto& [stack, weight] : all) {
    Json sample = Json::array();
    for (const auto& f : stack) {
      auto [it, fresh] = frameIds.try_emplace(f, frameIds.size());
      if (fresh) {
        Json fr = {{"name", f.name}};
        if (!f.file.empty()) fr["file"] = f.file;
        if (f.line) fr["line"] = f.line;
        frames.push_back(std::move(fr));
      }
      sample.push_back(it->second);
    }
    samples.push_back(std::move(sample));
    weights.push_back(weight);
    total += weight;
  }
  const std::size_t c = weightColumn(tree);
  Json j;
  j["$schema"] = "https://www.speedscope.app/file-format-schema.json";
  j["shared"] = {{"frames", std::move(frames)}};
  j["profiles"] =
      Json::array({{{"type", "sampled"},
                    {"name", fmt::format("{} ({} over {} profiles)", title, tree.columns[c].metric, tree.profiles)},
                    {"unit", speedscopeUnit(tree.units[c])},
                    {"startValue", 0},
                    {"endValue", total},
                    {"samples", std::move(samples)},
                    {"weights", std::move(weights)}}});
  j["name"] = title;
  j["activeProfileIndex"] = 0;
  j["exporter"] = "csp-views";
  out << dumpJson(j, -1) << "\n";
}

void renderDistributionCsv(const Distribution& d, std::ostream& out) {
  out << "profile,id_tuple,value\n";
  for (const auto& v : d.values) out << v.profile << "," << csvField(v.who) << "," << csvNumber(v.value) << "\n";
}

void renderDistributionJson(const Distribution& d, std::ostream& out) {
  auto stats = [](const metrics::Statistics& s) {
    return Json{{"inputs", s.inputs},
                {"count", s.count},
                {"sum", jsonNumber(s.sum)},
                {"mean", jsonNumber(s.mean)},
                {"min", jsonNumber(s.min)},
                {"max", jsonNumber(s.max)},
                {"stddev", jsonNumber(s.stddev)},
                {"cfvar", jsonNumber(s.cfvar)},
                {"imbalance", jsonNumber(s.imbalance)},
                {"p5", jsonNumber(s.p5)},
                {"p25", jsonNumber(s.p25)},
                {"p50", jsonNumber(s.p50)},
                {"p75", jsonNumber(s.p75)},
                {"p95", jsonNumber(s.p95)},
                {"imbmedian", jsonNumber(s.imbalanceMedian)}};
  };
  auto list = [](const std::vector<ThreadValue>& values) {
    Json a = Json::array();
    for (const auto& v : values) {
      Json e{{"profile", v.profile}, {"id", v.who}, {"value", v.value}};
      if (!v.threadClass.empty()) e["class"] = v.threadClass;
      a.push_back(std::move(e));
    }
    return a;
  };
  Json hist = Json::array();
  for (const auto& b : d.histogram) hist.push_back({{"low", b.low}, {"high", b.high}, {"count", b.count}});
  Json j{
      {"node", d.node},
      {"label", d.label},
      {"metric", d.metric},
      {"unit", d.unit},
      {"scope", scopeName(d.scope)},
      {"profiles", d.profiles},
      {"what", d.what},
      {"threads", d.threads.label},
      {"profiles_left_out", d.threads.excluded},
      {"sampling_error_per_thread", jsonNumber(d.perThreadError)},
      {"imbalance_within_sampling_error", metrics::withinSamplingError(d.all, Statistic::Imbalance, d.perThreadError)},
      {"all", stats(d.all)},
      {"present", stats(d.present)},
      {"outliers", list(d.outliers)},
      {"histogram", std::move(hist)},
      {"values", list(d.values)}};
  out << dumpJson(j, 1) << "\n";
}

namespace {

double shareOf(std::uint64_t part, std::uint64_t whole) {
  return whole ? 100.0 * static_cast<double>(part) / static_cast<double>(whole) : 0.0;
}

bool qualityWarrants(const storage::SamplingQuality& q, std::uint64_t part) {
  return static_cast<double>(part) > storage::kQualityWarningShare * static_cast<double>(q.samples);
}

// Sampling quality: the total, then every thread (at most 16; beyond, the 8 with the largest
// share of truncated and dropped samples).
void renderQualityText(const storage::DatabaseMetadata& m, std::ostream& out) {
  if (!m.hasQuality()) {
    out << "sampling     not recorded (databases before format 1.3)\n";
    return;
  }
  const auto total = m.qualityTotal();
  auto cell = [](std::uint64_t n, std::uint64_t of) { return fmt::format("{} ({:.1f} %)", n, shareOf(n, of)); };
  auto row = [&](const std::string& who, const storage::SamplingQuality& q) {
    out << fmt::format("  {:<24} {:>10}  {:<20} {:<20} {:<20} {}\n", who, q.samples,
                       cell(q.truncatedSamples, q.samples), cell(q.unwindFailures, q.samples),
                       cell(q.droppedSamples, q.samples), q.depthLimited);
  };
  out << "sampling     (truncated: the call path does not reach the program's or a thread's entry)\n";
  out << fmt::format("  {:<24} {:>10}  {:<20} {:<20} {:<20} {}\n", "profile", "samples", "truncated", "unwind failures",
                     "dropped", "depth limit");
  row("all", total);
  std::vector<std::size_t> shown(m.quality.size());
  for (std::size_t i = 0; i < shown.size(); ++i) shown[i] = i;
  if (shown.size() > 16) {
    auto bad = [&](std::size_t i) {
      return shareOf(m.quality[i].truncatedSamples + m.quality[i].droppedSamples, m.quality[i].samples);
    };
    std::stable_sort(shown.begin(), shown.end(), [&](auto a, auto b) { return bad(a) > bad(b); });
    shown.resize(8);
    std::sort(shown.begin(), shown.end());
    out << fmt::format("  (the 8 of {} threads with the largest share of truncated and dropped samples)\n",
                       m.quality.size());
  }
  for (auto i : shown) row(formatIdTuple(m.profiles[i]), m.quality[i]);
  const double limit = 100.0 * storage::kQualityWarningShare;
  if (qualityWarrants(total, total.truncatedSamples))
    out << fmt::format(
        "  warning: {:.1f} % of the samples have truncated call paths (more than {:.0f} %); they are "
        "below '[truncated call paths]'\n",
        shareOf(total.truncatedSamples, total.samples), limit);
  // Why, as the measurement counted it (csp-prof-mpi's property; databases before it lack it).
  for (const auto& p : m.properties)
    if (p.key == "dropped-samples-by-cause") out << "  dropped by cause: " << p.value << "\n";
  if (qualityWarrants(total, total.droppedSamples))
    out << fmt::format("  warning: {:.1f} % of the samples were dropped by the measurement (more than {:.0f} %)\n",
                       shareOf(total.droppedSamples, total.samples), limit);
  if (const auto& u = m.unwindRecovery; u && u->scannedSamples > 0)
    out << fmt::format(
        "  code without unwind tables on the call path: {} samples; {} completed by binary analysis, {} "
        "truncated\n",
        u->scannedSamples, u->recoveredSamples, u->scannedSamples - u->recoveredSamples);
}

// Loop recovery per module (format 1.5): which modules have loops, which are known by address
// only (no line table), and why the others have none.
void renderModuleLoopsText(const storage::DatabaseMetadata& m, std::ostream& out) {
  if (m.moduleLoops.empty()) return;
  out << "loops        (per module: loops recovered, of them known by header address; why)\n";
  for (const auto& l : m.moduleLoops)
    out << fmt::format("  {:<32} {:>7} {:>7}  {}\n", l.module, l.loops, l.byAddress, l.note);
}

Json moduleLoopsJson(const storage::DatabaseMetadata& m) {
  Json a = Json::array();
  for (const auto& l : m.moduleLoops)
    a.push_back({{"module", l.module}, {"loops", l.loops}, {"by_address", l.byAddress}, {"note", l.note}});
  return a;
}

Json qualityJson(const storage::SamplingQuality& q) {
  return Json{{"samples", q.samples},
              {"truncated", q.truncatedSamples},
              {"unwind_failures", q.unwindFailures},
              {"dropped", q.droppedSamples},
              {"depth_limited", q.depthLimited}};
}

}  // namespace

void renderInfoText(const DatabaseInfo& info, std::ostream& out) {
  const auto& m = info.metadata;
  const auto version = info.format;
  std::string command;
  for (const auto& a : m.commandLine) command += (command.empty() ? "" : " ") + a;
  out << fmt::format("database     {} (format {}.{}, {} on disk)\n", info.directory.string(), version.major,
                     version.minor, formatNumber(static_cast<double>(info.bytes), Statistic::Sum) + "B");
  if (!m.title.empty()) out << fmt::format("title        {}\n", m.title);
  // The program is what csp-run ran (or, without that record, the executable most threads ran);
  // other executables measured along (mpirun's helpers, a script's children) follow.
  out << fmt::format("program      {}\n", command.empty() ? m.executable : command);
  out << fmt::format("executable   {}\n", m.executable);
  for (const auto& p : m.properties)
    if (p.key == "executables") out << fmt::format("executables  {}\n", p.value);
  out << fmt::format("measured processes {} (the program's; not the post-processing ranks)\n", m.processCount);
  out << fmt::format("threads      {} profiles\n", m.profiles.size());
  if (!m.threadClasses.empty()) {
    std::uint64_t perClass[storage::kThreadClassCount + 1] = {};
    for (const auto& c : m.threadClasses) ++perClass[static_cast<std::size_t>(c.threadClass)];
    const auto helpers = perClass[static_cast<std::size_t>(storage::ThreadClass::Helper)];
    out << fmt::format("thread classes  main {}, worker {}, helper {}{}\n", perClass[1], perClass[2], perClass[3],
                       helpers > 0 && helpers < m.profiles.size()
                           ? " (views show main and worker threads by default; --threads all includes the helpers)"
                           : "");
    std::size_t shown = 0;
    for (std::size_t i = 0; i < m.threadClasses.size() && shown < 10; ++i) {
      const auto& c = m.threadClasses[i];
      if (c.threadClass != storage::ThreadClass::Helper) continue;
      out << fmt::format("  helper {}: {}{}\n", formatIdTuple(m.profiles[i]),
                         c.entry.empty() ? "" : "entry " + c.entry + "; ", c.reason);
      ++shown;
    }
    if (shown < helpers)
      out << fmt::format("  ... {} more helper threads (--format json lists them all)\n", helpers - shown);
  }
  std::string hosts;
  for (std::size_t i = 0; i < std::min<std::size_t>(m.hostnames.size(), 8); ++i)
    hosts += (i ? ", " : "") + m.hostnames[i];
  if (m.hostnames.size() > 8) hosts += fmt::format(", ... ({} hosts)", m.hostnames.size());
  out << fmt::format("hosts        {}\n", hosts);
  out << fmt::format("CCT          {} nodes\n", m.nodeCount);
  out << fmt::format("regions      {}\n", annotatedRegions(m));
  out << "metrics\n";
  for (std::size_t i = 0; i < m.metrics.size(); ++i) {
    const auto& d = m.metrics[i].descriptor;
    out << fmt::format("  {:<3} {:<20} {:<10} {:<8} period {:<10} {}{}\n", i, d.name, d.unit, toString(d.kind),
                       d.period, m.metrics[i].valueType == storage::ValueType::Real ? "real " : "", d.description);
  }
  if (m.regionCount > 1) {
    out << "region metrics\n";
    const auto& described = info.regionMetrics;
    for (std::size_t i = 0; i < described.size(); ++i) {
      const auto& r = described[i];
      out << fmt::format("  {:<3} {:<20} {:<10} {:<11} {}\n", i, r.name, r.unit,
                         std::string(r.exclusive ? "E" : "") + (r.inclusive ? (r.exclusive ? ",I" : "I") : "") +
                             (r.perProcess ? " process" : " thread"),
                         r.description);
    }
  }
  renderQualityText(m, out);
  renderModuleLoopsText(m, out);
  out << fmt::format("skipped      {} inputs\n", m.skipped.size());
  for (const auto& s : m.skipped) out << fmt::format("  {}: {}\n", s.path, s.reason);
  if (!m.properties.empty()) {
    out << "properties\n";
    for (const auto& p : m.properties) out << fmt::format("  {} = {}\n", p.key, p.value);
  }
}

void renderInfoJson(const DatabaseInfo& info, std::ostream& out) {
  const auto& m = info.metadata;
  Json metrics = Json::array();
  for (const auto& sm : m.metrics)
    metrics.push_back({{"name", sm.descriptor.name},
                       {"unit", sm.descriptor.unit},
                       {"kind", toString(sm.descriptor.kind)},
                       {"period", sm.descriptor.period},
                       {"value_type", sm.valueType == storage::ValueType::Real ? "real" : "count"},
                       {"description", sm.descriptor.description}});
  Json regionMetrics = Json::array();
  for (const auto& r : info.regionMetrics)
    regionMetrics.push_back({{"name", r.name},
                             {"unit", r.unit},
                             {"exclusive", r.exclusive},
                             {"inclusive", r.inclusive},
                             {"per", r.perProcess ? "process" : "thread"},
                             {"description", r.description}});
  Json skipped = Json::array();
  for (const auto& s : m.skipped) skipped.push_back({{"path", s.path}, {"reason", s.reason}});
  Json props = Json::object();
  for (const auto& p : m.properties) props[p.key] = p.value;
  Json j{{"database", info.directory.string()},
         {"format", fmt::format("{}.{}", info.format.major, info.format.minor)},
         {"bytes", info.bytes},
         {"title", m.title},
         {"executable", m.executable},
         {"command", m.commandLine},
         {"measured_processes", m.processCount},
         {"threads", m.profiles.size()},
         {"thread_classes",
          [&] {
            Json a = Json::array();
            for (std::size_t i = 0; i < m.threadClasses.size(); ++i)
              a.push_back({{"profile", formatIdTuple(m.profiles[i])},
                           {"class", storage::toString(m.threadClasses[i].threadClass)},
                           {"entry", m.threadClasses[i].entry},
                           {"reason", m.threadClasses[i].reason}});
            return a;
          }()},
         {"hosts", m.hostnames},
         {"cct_nodes", m.nodeCount},
         {"regions", annotatedRegions(m)},
         {"metrics", std::move(metrics)},
         {"region_metrics", std::move(regionMetrics)},
         {"sampling",
          [&] {
            if (!m.hasQuality()) return Json(nullptr);
            Json j = qualityJson(m.qualityTotal());
            Json perProfile = Json::array();
            for (std::size_t i = 0; i < m.quality.size(); ++i) {
              Json p = qualityJson(m.quality[i]);
              p["profile"] = formatIdTuple(m.profiles[i]);
              perProfile.push_back(std::move(p));
            }
            j["profiles"] = std::move(perProfile);
            if (m.unwindRecovery)
              j["unwind_recovery"] = {{"scanned", m.unwindRecovery->scannedSamples},
                                      {"completed", m.unwindRecovery->recoveredSamples}};
            return j;
          }()},
         {"module_loops", moduleLoopsJson(m)},
         {"skipped", std::move(skipped)},
         {"properties", std::move(props)}};
  out << dumpJson(j, 1) << "\n";
}

}  // namespace csp::views
