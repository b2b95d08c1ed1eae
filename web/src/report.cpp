// csp-web --html (web.hpp): the page with the answers of the requests a reader is likely to make
// embedded under the keys the front end looks them up by. The requests are made through the same
// Api as a browser's, with the parameters the front end sends for its default state.
#include <fmt/format.h>

#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <stdexcept>

#include "csp/web/web.hpp"

namespace csp::web {

namespace {

using Json = nlohmann::json;

// Must match the front end (flame.js FLAME_DEPTH, main.js, threads.js, timeline.js).
constexpr int kFlameDepth = 32;
constexpr std::size_t kHotPathLevels = 40;
constexpr std::size_t kMaxAnswers = 600;

class Crawler {
 public:
  Crawler(Api& api) : api_(api) {}

  // The answer (parsed) of a request, kept for the report; null for a refused one.
  Json get(const std::string& path, const Params& params) {
    const auto key = requestKey(path, params);
    if (const auto it = parsed_.find(key); it != parsed_.end()) return it->second;
    if (answers_.size() >= kMaxAnswers) return nullptr;
    const auto r = api_.get(path, params);
    answers_[key] = r.body;
    Json j = Json::parse(r.body, nullptr, false);
    Json answer = r.status == 200 && j.is_object() ? j["answer"] : Json(nullptr);
    parsed_[key] = answer;
    return answer;
  }

  // A tree view: its top, then the hottest child level after level, and the first few children of
  // the first levels; with the per-thread values of the hot path (Calling Context).
  void tree(const Params& base, bool perThread) {
    Params top = base;
    top.emplace("depth", "1");
    const auto answer = get("/api/view", top);
    if (!answer.is_object()) return;
    std::vector<std::uint64_t> hot;
    for (const auto& n : answer["nodes"])
      if (n["parent"] == -1 && n["kind"] == "Root") hot.push_back(n["id"]);
    const auto firsts = childrenOf(answer, hot.empty() ? -1 : static_cast<std::int64_t>(hot[0]));
    for (std::size_t i = 0; i < firsts.size() && i < 3; ++i) open(base, firsts[i], 2);
    if (!firsts.empty()) hotPath(base, firsts[0], hot);
    if (!perThread) return;
    for (auto id : hot) {
      Params p{{"db", base.find("db")->second}, {"kind", "cc"}, {"spec", std::to_string(id)}};
      get("/api/node", p);
    }
  }

  void threads(const std::string& db, std::size_t profiles) {
    for (std::size_t p = 0; p < profiles && p < 64; ++p)
      get("/api/thread", {{"db", db}, {"profile", std::to_string(p)}, {"scope", "exclusive"}, {"top", "12"}});
  }

  void source(const std::string& db, const std::vector<std::string>& files) {
    for (std::size_t i = 0; i < files.size() && i < 5; ++i) get("/api/source", {{"db", db}, {"file", files[i]}});
  }

  std::vector<std::string> files() const { return files_; }

  void write(const std::filesystem::path& html) const {
    std::string data = "{";
    for (const auto& [key, body] : answers_) {
      if (data.size() > 1) data += ",\n";
      data += Json(key).dump(-1, ' ', false, Json::error_handler_t::replace) + ":" + body;
    }
    data += "}";
    // In a <script> element "</" must not occur; in JSON it only can inside strings.
    for (std::size_t at = 0; (at = data.find("</", at)) != std::string::npos; at += 3) data.replace(at, 2, "<\\/");
    std::string out(page());
    const std::string marker = "<script type=\"application/json\" id=\"csp-report\">";
    const auto at = out.find(marker);
    if (at == std::string::npos) throw std::runtime_error("the built page has no place for a report's data");
    out.insert(at + marker.size(), data);
    writeAtomically(html, out);
  }

 private:
  static std::vector<std::uint64_t> childrenOf(const Json& answer, std::int64_t parent) {
    std::vector<std::uint64_t> out;
    for (const auto& n : answer["nodes"])
      if (n["parent"] == parent) out.push_back(n["id"]);
    return out;
  }

  Json children(const Params& base, std::uint64_t id) {
    Params p = base;
    p.emplace("id", std::to_string(id));
    auto answer = get("/api/children", p);
    if (answer.is_object())
      for (const auto& n : answer["nodes"])
        if (n.contains("file") && !n["file"].get<std::string>().empty() && files_.size() < 5 &&
            std::find(files_.begin(), files_.end(), n["file"].get<std::string>()) == files_.end())
          files_.push_back(n["file"]);
    return answer;
  }

  void open(const Params& base, std::uint64_t id, int levels) {
    const auto answer = children(base, id);
    if (!answer.is_object() || levels <= 1) return;
    const auto kids = childrenOf(answer, static_cast<std::int64_t>(id));
    for (std::size_t i = 0; i < kids.size() && i < 3; ++i) open(base, kids[i], levels - 1);
  }

  void hotPath(const Params& base, std::uint64_t id, std::vector<std::uint64_t>& path) {
    for (std::size_t level = 0; level < kHotPathLevels; ++level) {
      path.push_back(id);
      const auto answer = children(base, id);
      if (!answer.is_object()) return;
      const auto kids = childrenOf(answer, static_cast<std::int64_t>(id));
      if (kids.empty()) return;
      id = kids[0];
    }
  }

  static void writeAtomically(const std::filesystem::path& path, const std::string& text) {
    const auto tmp = path.string() + ".tmp";
    {
      std::ofstream f(tmp, std::ios::binary | std::ios::trunc);
      f << text;
      f.flush();
      if (!f) {
        std::remove(tmp.c_str());
        throw std::runtime_error(fmt::format("{}: cannot write", path.string()));
      }
    }
    std::error_code ec;
    std::filesystem::rename(tmp, path, ec);
    if (ec) {
      std::remove(tmp.c_str());
      throw std::runtime_error(fmt::format("{}: {}", path.string(), ec.message()));
    }
  }

  Api& api_;
  std::map<std::string, std::string> answers_;
  std::map<std::string, Json> parsed_;
  std::vector<std::string> files_;
};

void crawlDatabase(Crawler& c, const Json& d) {
  const std::string db = std::to_string(d["index"].get<std::size_t>());
  c.get("/api/info", {{"db", db}});
  std::set<std::string> metrics;
  for (const auto& m : d["metrics"]) metrics.insert(m["name"].get<std::string>());
  if (d["diff"].get<bool>()) {
    c.get("/api/diff", {{"db", db}, {"top", "20"}});
    c.tree({{"db", db},
            {"kind", "cc"},
            {"metric", "loss"},
            {"metric", "excess"},
            {"metric", "noise"},
            {"scope", "inclusive"}},
           false);
  } else {
    c.get("/api/imbalance", {{"db", db}});
  }
  c.tree({{"db", db}, {"kind", "cc"}}, !d["diff"].get<bool>());
  c.tree({{"db", db}, {"kind", "flat"}}, false);
  c.tree({{"db", db}, {"kind", "callers"}}, false);
  c.get("/api/view", {{"db", db},
                      {"depth", std::to_string(kFlameDepth)},
                      {"kind", "cc"},
                      {"scope", "inclusive"},
                      {"stat", "sum"},
                      {"stat", "imbalance"}});
  if (metrics.count("work") && metrics.count("idleness"))
    c.get("/api/view", {{"db", db}, {"depth", "1"}, {"effort", "1"}, {"kind", "cc"}});
  if (d["regions"].get<bool>()) c.tree({{"db", db}, {"kind", "regions"}}, false);
  if (d["region_logs"].get<bool>()) c.get("/api/timeline", {{"db", db}, {"from", "0"}, {"px", "1000"}});
  c.threads(db, d["profiles"].get<std::size_t>());
  c.source(db, c.files());
}

}  // namespace

void writeReport(Api& api, const std::filesystem::path& html) {
  if (page().empty()) throw std::runtime_error("the web viewer's page was not built: " + assetsProblem());
  Crawler c(api);
  const auto list = c.get("/api/databases", {});
  for (const auto& d : list) crawlDatabase(c, d);
  c.write(html);
}

}  // namespace csp::web
