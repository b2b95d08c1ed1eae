#include "csp/synth/json_spec.hpp"

#include <fmt/format.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include <fstream>
#include <limits>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <stdexcept>

#include "csp/storage/profile_builder.hpp"
#include "csp/storage/profile_io.hpp"

namespace csp::synth {

namespace {

using nlohmann::json;

class Context {
 public:
  Context(std::string file) : file_(std::move(file)) {}
  [[noreturn]] void fail(const std::string& where, const std::string& defect) const {
    throw SpecError(fmt::format("{}: {}: {}", file_, where, defect));
  }
  const json& require(const json& obj, const char* key, const std::string& where) const {
    if (!obj.is_object()) fail(where, "expected an object");
    auto it = obj.find(key);
    if (it == obj.end()) fail(where, fmt::format("missing \"{}\"", key));
    return *it;
  }
  std::uint64_t unsignedValue(const json& v, const std::string& where) const {
    if (!v.is_number_unsigned() && !(v.is_number_integer() && v.get<std::int64_t>() >= 0))
      fail(where, "expected a non-negative integer");
    return v.get<std::uint64_t>();
  }
  std::string text(const json& v, const std::string& where) const {
    if (!v.is_string()) fail(where, "expected a string");
    return v.get<std::string>();
  }
  const std::string& file() const { return file_; }

 private:
  std::string file_;
};

// "file.c:42" -> ("file.c", 42). The line is after the last colon.
std::pair<std::string, std::uint32_t> fileLine(const Context& cx, const std::string& s, const std::string& where) {
  auto colon = s.rfind(':');
  if (colon == std::string::npos || colon + 1 == s.size())
    cx.fail(where, fmt::format("\"{}\" is not of the form file:line", s));
  std::uint64_t line = 0;
  for (char c : s.substr(colon + 1)) {
    if (c < '0' || c > '9') cx.fail(where, fmt::format("\"{}\" is not of the form file:line", s));
    line = line * 10 + static_cast<std::uint64_t>(c - '0');
    if (line > 0xFFFFFFFFULL) cx.fail(where, "line number too large");
  }
  return {s.substr(0, colon), static_cast<std::uint32_t>(line)};
}

struct Defaults {
  std::string module;
};

SymbolicFrame parseFrame(const Context& cx, storage::ProfileBuilder& b, const json& f, const Defaults& d,
                         const std::string& where) {
  if (!f.is_object()) cx.fail(where, "a frame must be an object such as {\"proc\": \"main\"}");
  static const std::map<std::string, ScopeKind> kScopes = {{"proc", ScopeKind::ProcFrame},
                                                           {"alien", ScopeKind::Alien},
                                                           {"loop", ScopeKind::Loop},
                                                           {"callsite", ScopeKind::CallSite},
                                                           {"stmt", ScopeKind::Stmt}};
  static const std::map<std::string, bool> kAttributes = {{"file", true}, {"line", true}, {"module", true}};
  const std::string* scopeKey = nullptr;
  for (auto it = f.begin(); it != f.end(); ++it) {
    if (kScopes.count(it.key())) {
      if (scopeKey) cx.fail(where, fmt::format("frame has both \"{}\" and \"{}\"", *scopeKey, it.key()));
      scopeKey = &it.key();
    } else if (!kAttributes.count(it.key())) {
      cx.fail(where, fmt::format("unknown frame key \"{}\" (expected proc, alien, loop, callsite or stmt, "
                                 "with optional file, line, module)",
                                 it.key()));
    }
  }
  if (!scopeKey) cx.fail(where, "frame names no scope (proc, alien, loop, callsite or stmt)");

  SymbolicFrame s;
  s.scope = kScopes.at(*scopeKey);
  const json& main = f.at(*scopeKey);
  std::string file;
  std::uint64_t line = 0;
  if (s.scope == ScopeKind::ProcFrame || s.scope == ScopeKind::Alien) {
    const std::string name = cx.text(main, where + "." + *scopeKey);
    if (name.empty()) cx.fail(where, "empty procedure name");
    s.name = b.intern(name);
  } else {
    auto [fl, ln] = fileLine(cx, cx.text(main, where + "." + *scopeKey), where + "." + *scopeKey);
    file = fl;
    line = ln;
  }
  if (f.contains("file")) file = cx.text(f["file"], where + ".file");
  if (f.contains("line")) {
    line = cx.unsignedValue(f["line"], where + ".line");
    if (line > 0xFFFFFFFFULL) cx.fail(where + ".line", "line number too large");
  }
  s.file = b.intern(file);
  s.line = static_cast<std::uint32_t>(line);
  if (s.scope == ScopeKind::ProcFrame) {
    s.module = b.intern(f.contains("module") ? cx.text(f["module"], where + ".module") : d.module);
  } else if (f.contains("module")) {
    cx.fail(where, "only procedure frames name a module");
  }
  return s;
}

IdTuple parseId(const Context& cx, const json& id, const std::string& where) {
  if (!id.is_object()) cx.fail(where, "\"id\" must be an object such as {\"rank\": 0, \"thread\": 1}");
  // Outermost first, whatever order the keys were written in.
  static const std::pair<const char*, IdKind> kOrder[] = {{"node", IdKind::Node},
                                                          {"process", IdKind::Process},
                                                          {"rank", IdKind::Rank},
                                                          {"thread", IdKind::Thread},
                                                          {"core", IdKind::Core}};
  for (auto it = id.begin(); it != id.end(); ++it) {
    bool known = false;
    for (const auto& [k, kind] : kOrder) known |= it.key() == k;
    if (!known) cx.fail(where, fmt::format("unknown id kind \"{}\" (node, process, rank, thread, core)", it.key()));
  }
  IdTuple t;
  for (const auto& [k, kind] : kOrder)
    if (id.contains(k)) t.push_back({kind, cx.unsignedValue(id[k], where + "." + k)});
  if (t.empty()) cx.fail(where, "empty id tuple");
  return t;
}

// Region paths: "solve/iter#3" = region "solve" (dynamic id 0), inside it "iter" with dynamic id 3.
std::uint32_t regionNode(
    const Context& cx, RegionProfile& r,
    std::map<std::pair<std::uint32_t, std::pair<std::uint32_t, std::uint64_t>>, std::uint32_t>& children,
    const std::string& path, const std::string& where) {
  if (path.empty()) cx.fail(where, "empty region path");
  std::uint32_t node = 0;
  std::stringstream ss(path);
  std::string part;
  while (std::getline(ss, part, '/')) {
    std::uint64_t dynamicId = 0;
    auto hash = part.find('#');
    std::string name = part.substr(0, hash);
    if (hash != std::string::npos) {
      const std::string digits = part.substr(hash + 1);
      if (digits.empty() || digits.find_first_not_of("0123456789") != std::string::npos)
        cx.fail(where, fmt::format("bad dynamic id in region \"{}\"", part));
      dynamicId = std::stoull(digits);
    }
    if (name.empty()) cx.fail(where, fmt::format("empty region name in \"{}\"", path));
    auto nameIt = std::find(r.names.begin(), r.names.end(), name);
    const auto staticId = static_cast<std::uint32_t>(nameIt - r.names.begin());
    if (nameIt == r.names.end()) r.names.push_back(name);
    auto key = std::make_pair(node, std::make_pair(staticId, dynamicId));
    auto it = children.find(key);
    if (it == children.end()) {
      const auto id = static_cast<std::uint32_t>(r.parent.size());
      r.parent.push_back(node);
      r.staticId.push_back(staticId);
      r.dynamicId.push_back(dynamicId);
      r.count.push_back(0);
      r.inclusiveNs.push_back(0);
      r.exclusiveNs.push_back(0);
      it = children.emplace(key, id).first;
    }
    node = it->second;
  }
  return node;
}

void parseRegions(const Context& cx, const json& thread, RegionProfile& r, const std::string& where) {
  const bool hasTree = thread.contains("regions");
  const bool hasEvents = thread.contains("events");
  if (!hasTree && !hasEvents) return;
  std::map<std::pair<std::uint32_t, std::pair<std::uint32_t, std::uint64_t>>, std::uint32_t> children;
  r.parent = {kNoIndex};
  r.staticId = {0};
  r.dynamicId = {0};
  r.count = {0};
  r.inclusiveNs = {0};
  r.exclusiveNs = {0};
  if (hasTree) {
    const json& list = thread["regions"];
    if (!list.is_array()) cx.fail(where + ".regions", "expected an array");
    for (std::size_t i = 0; i < list.size(); ++i) {
      const std::string w = fmt::format("{}.regions[{}]", where, i);
      const auto node = regionNode(cx, r, children, cx.text(cx.require(list[i], "path", w), w + ".path"), w);
      if (list[i].contains("count")) r.count[node] = cx.unsignedValue(list[i]["count"], w + ".count");
      if (list[i].contains("inclusive_ns"))
        r.inclusiveNs[node] = cx.unsignedValue(list[i]["inclusive_ns"], w + ".inclusive_ns");
      if (list[i].contains("exclusive_ns"))
        r.exclusiveNs[node] = cx.unsignedValue(list[i]["exclusive_ns"], w + ".exclusive_ns");
      else
        r.exclusiveNs[node] = r.inclusiveNs[node];
    }
  }
  if (hasEvents) {
    const json& list = thread["events"];
    if (!list.is_array()) cx.fail(where + ".events", "expected an array");
    std::vector<std::pair<std::uint32_t, std::uint64_t>> stack;  // open node, enter time
    std::vector<std::uint64_t> childTime(1, 0);
    for (std::size_t i = 0; i < list.size(); ++i) {
      const std::string w = fmt::format("{}.events[{}]", where, i);
      const json& e = list[i];
      const std::uint64_t t = cx.unsignedValue(cx.require(e, "t", w), w + ".t");
      const bool enter = e.contains("enter");
      if (enter == e.contains("exit")) cx.fail(w, "an event has exactly one of \"enter\" and \"exit\"");
      const auto node = regionNode(cx, r, children, cx.text(enter ? e["enter"] : e["exit"], w), w);
      if (!r.eventTimeNs.empty() && t < r.eventTimeNs.back()) cx.fail(w, "events must be in time order");
      r.eventTimeNs.push_back(t);
      r.eventNode.push_back(node);
      r.eventIsEnter.push_back(enter);
      if (e.contains("attr")) {
        if (!enter) cx.fail(w + ".attr", "only enter events carry an attribute");
        if (!e["attr"].is_number_integer() ||
            (e["attr"].is_number_unsigned() &&
             e["attr"].get<std::uint64_t>() > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max())))
          cx.fail(w + ".attr", "expected a 64-bit signed integer");
        if (r.eventAttr.empty()) {  // the first attribute: earlier events have none
          r.eventAttr.assign(r.eventTimeNs.size() - 1, 0);
          r.eventHasAttr.assign(r.eventTimeNs.size() - 1, false);
        }
        r.eventAttr.push_back(e["attr"].get<std::int64_t>());
        r.eventHasAttr.push_back(true);
      } else if (!r.eventAttr.empty()) {
        r.eventAttr.push_back(0);
        r.eventHasAttr.push_back(false);
      }
      if (hasTree) continue;  // counts and times were given
      // Derive counts and times by replaying the log.
      if (enter) {
        if (r.parent[node] != (stack.empty() ? 0 : stack.back().first))
          cx.fail(w, "entered region is not a child of the open region");
        stack.emplace_back(node, t);
        childTime.push_back(0);
      } else {
        if (stack.empty() || stack.back().first != node) cx.fail(w, "exit does not match the open region");
        const std::uint64_t inclusive = t - stack.back().second;
        const std::uint64_t inner = childTime.back();
        stack.pop_back();
        childTime.pop_back();
        r.count[node] += 1;
        r.inclusiveNs[node] += inclusive;
        r.exclusiveNs[node] += inclusive - std::min(inner, inclusive);
        childTime.back() += inclusive;
      }
    }
    if (!hasTree && !stack.empty()) cx.fail(where + ".events", "regions are still open at the end of the log");
  }
}

ThreadProfile parseThread(const Context& cx, const json& thread, const std::vector<MetricDescriptor>& metrics,
                          const json& top, const std::string& where) {
  storage::ProfileBuilder b(FrameKind::Symbolic);
  ThreadProfile& p = b.profile();
  p.metrics = metrics;
  p.identity.idTuple = parseId(cx, cx.require(thread, "id", where), where + ".id");
  p.identity.executable = top.value("executable", std::string("app"));
  p.identity.hostname = thread.contains("hostname") ? cx.text(thread["hostname"], where + ".hostname") : "localhost";
  p.identity.pid =
      thread.contains("pid") ? static_cast<std::uint32_t>(cx.unsignedValue(thread["pid"], where + ".pid")) : 1;
  p.identity.commandLine = {p.identity.executable};
  p.identity.settings = {{"generator", "csp-gen from-json"}};
  Defaults defaults{top.value("module", p.identity.executable)};

  std::map<std::string, std::uint16_t> metricIndex;
  for (std::size_t m = 0; m < metrics.size(); ++m) metricIndex[metrics[m].name] = static_cast<std::uint16_t>(m);

  const json& samples = thread.contains("samples") ? thread["samples"] : json::array();
  if (!samples.is_array()) cx.fail(where + ".samples", "expected an array");
  std::vector<std::uint32_t> frames;
  for (std::size_t i = 0; i < samples.size(); ++i) {
    const std::string w = fmt::format("{}.samples[{}]", where, i);
    const json& path = cx.require(samples[i], "path", w);
    if (!path.is_array() || path.empty()) cx.fail(w + ".path", "expected a non-empty array of frames");
    frames.clear();
    for (std::size_t f = 0; f < path.size(); ++f)
      frames.push_back(b.frame(parseFrame(cx, b, path[f], defaults, fmt::format("{}.path[{}]", w, f))));
    if (p.symbolicFrames[frames.back()].scope != ScopeKind::Stmt)
      cx.fail(w + ".path", "a sampled path must end with a statement (\"stmt\": \"file:line\")");
    const auto node = b.path(frames);
    const json& counts = cx.require(samples[i], "counts", w);
    if (!counts.is_object()) cx.fail(w + ".counts", "expected an object of metric name -> count");
    for (auto it = counts.begin(); it != counts.end(); ++it) {
      auto m = metricIndex.find(it.key());
      if (m == metricIndex.end()) cx.fail(w + ".counts", fmt::format("unknown metric \"{}\"", it.key()));
      const std::string at = w + ".counts." + it.key();
      try {
        b.addCount(node, m->second, cx.unsignedValue(it.value(), at));
      } catch (const std::overflow_error& e) {
        cx.fail(at, e.what());
      }
    }
  }
  if (thread.contains("stats")) {
    const json& s = thread["stats"];
    if (s.contains("dropped_samples"))
      p.stats.droppedSamples = cx.unsignedValue(s["dropped_samples"], where + ".stats");
    if (s.contains("unwind_failures"))
      p.stats.unwindFailures = cx.unsignedValue(s["unwind_failures"], where + ".stats");
    if (s.contains("truncated_paths"))
      p.stats.truncatedPaths = cx.unsignedValue(s["truncated_paths"], where + ".stats");
  }
  parseRegions(cx, thread, p.regions, where);
  ThreadProfile out;
  try {
    out = b.finish();
  } catch (const std::overflow_error& e) {
    cx.fail(where, e.what());
  }
  try {
    storage::validateProfile(out, where);
  } catch (const storage::ProfileError& e) {
    cx.fail(e.file(), e.defect());
  }
  return out;
}

}  // namespace

std::vector<ThreadProfile> profilesFromJsonText(const std::string& text, const std::string& name) {
  Context cx(name);
  json top;
  // Checked while parsing, before any value is built: nesting depth (a description nests a few
  // levels; a deep one would exhaust the stack of whatever walks it) and duplicate keys (JSON
  // leaves them undefined; the last one would silently win).
  constexpr int kMaxDepth = 64;
  std::vector<std::set<std::string>> keys;
  const json::parser_callback_t check = [&](int depth, json::parse_event_t event, json& parsed) {
    switch (event) {
      case json::parse_event_t::object_start:
      case json::parse_event_t::array_start:
        if (depth >= kMaxDepth)
          throw SpecError(fmt::format("{}: JSON: nested more than {} levels deep", name, kMaxDepth));
        if (event == json::parse_event_t::object_start) keys.emplace_back();
        break;
      case json::parse_event_t::object_end:
        if (!keys.empty()) keys.pop_back();
        break;
      case json::parse_event_t::key:
        if (!keys.empty() && !keys.back().insert(parsed.get<std::string>()).second)
          throw SpecError(
              fmt::format("{}: JSON: key \"{}\" appears twice in one object", name, parsed.get<std::string>()));
        break;
      default:
        break;
    }
    return true;
  };
  try {
    top = json::parse(text, check);
  } catch (const json::exception& e) {
    // parse_error, and out_of_range for numbers beyond a double (1e400).
    cx.fail("JSON", e.what());
  }
  if (!top.is_object()) cx.fail("top level", "expected an object with \"metrics\" and \"threads\"");
  const json& metricList = cx.require(top, "metrics", "top level");
  if (!metricList.is_array() || metricList.empty()) cx.fail("metrics", "expected a non-empty array");
  std::vector<MetricDescriptor> metrics;
  for (std::size_t m = 0; m < metricList.size(); ++m) {
    const std::string w = fmt::format("metrics[{}]", m);
    MetricDescriptor d;
    d.name = cx.text(cx.require(metricList[m], "name", w), w + ".name");
    d.unit = metricList[m].value("unit", std::string("samples"));
    const std::string kind = metricList[m].value("kind", std::string("sampled"));
    if (kind == "sampled")
      d.kind = MetricKind::Sampled;
    else if (kind == "counted")
      d.kind = MetricKind::Counted;
    else
      cx.fail(w + ".kind", fmt::format("\"{}\" is neither \"sampled\" nor \"counted\"", kind));
    d.period = metricList[m].contains("period") ? cx.unsignedValue(metricList[m]["period"], w + ".period") : 1;
    d.description = metricList[m].value("description", std::string());
    metrics.push_back(std::move(d));
  }
  const json& threads = cx.require(top, "threads", "top level");
  if (!threads.is_array() || threads.empty()) cx.fail("threads", "expected a non-empty array");
  std::vector<ThreadProfile> out;
  std::map<IdTuple, std::size_t> seen;
  for (std::size_t t = 0; t < threads.size(); ++t) {
    const std::string w = fmt::format("threads[{}]", t);
    out.push_back(parseThread(cx, threads[t], metrics, top, w));
    auto [it, fresh] = seen.emplace(out.back().identity.idTuple, t);
    if (!fresh) cx.fail(w + ".id", fmt::format("same id tuple as threads[{}]", it->second));
  }
  return out;
}

std::vector<ThreadProfile> profilesFromJsonFile(const std::filesystem::path& path) {
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) throw SpecError(fmt::format("{}: no such file", path.string()));
  if (std::filesystem::is_directory(path, ec))
    throw SpecError(fmt::format("{}: is a directory, not a JSON file", path.string()));
  std::ifstream in(path, std::ios::binary);
  if (!in) throw SpecError(fmt::format("{}: cannot open: {}", path.string(), std::strerror(errno)));
  std::stringstream buffer;
  buffer << in.rdbuf();
  return profilesFromJsonText(buffer.str(), path.string());
}

}  // namespace csp::synth
