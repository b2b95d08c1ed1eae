// The web viewer (docs/web.md): an HTTP server on the loopback interface that answers the
// presentation layer's requests as JSON (one views::Session per database), and the browser front
// end it serves, built from npm packages when CSP is built and embedded in the tools. Read-only:
// GET only, a random access token on every request, no file served but its own page and the
// source files the databases record.
//
//   csp::web::Api api({"run-p64/db", "scaling-db"});
//   auto r = api.get("/api/view", {{"db", "0"}, {"kind", "cc"}, {"depth", "1"}});  // JSON
//   csp::web::Server server(api, {});   // 127.0.0.1, a free port, a random token
//   std::cout << server.url();          // http://127.0.0.1:PORT/?token=...
//   server.run();
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace csp::web {

// A request that cannot be served as asked (unknown database index, parameter or endpoint).
struct Response {
  int status = 200;
  std::string contentType = "application/json";
  std::string body;
};

using Params = std::multimap<std::string, std::string>;

// The JSON API over several databases (docs/web.md, "API"): each answer is the presentation
// layer's JSON renderer's output, sent as {"answer": ..., "warnings": [...]}, or
// {"error": "..."} with status 400 (a request that cannot be served), 404 (no such endpoint) or
// 500 (a damaged database). Requests to different databases run side by side; one database
// answers one request at a time.
class Api {
 public:
  // Opens every database read-only; storage::DatabaseError for one that cannot be opened.
  explicit Api(const std::vector<std::filesystem::path>& databases);
  ~Api();
  Api(const Api&) = delete;
  Api& operator=(const Api&) = delete;

  Response get(const std::string& path, const Params& params);
  std::size_t databases() const;
  // Builds the Flat and Callers views of every database in the background (seconds for a CCT of
  // a million nodes), while the Calling Context view answers; the destructor waits for it.
  void warmUp();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// The front end: one HTML page (scripts and styles inline), empty when the build could not make
// it; then assetsProblem() says why.
std::string_view page();
std::string assetsProblem();

struct ServeOptions {
  std::string host = "127.0.0.1";
  std::uint16_t port = 0;  // 0: a free port
  std::string token;       // empty: a random one
};

// The HTTP server. Refuses (403) every request without the token (query parameter `token` or
// header X-CSP-Token), any method but GET and HEAD (405), and paths with ".." (400).
class Server {
 public:
  // Binds (std::runtime_error when it cannot).
  Server(Api& api, const ServeOptions& options);
  ~Server();
  std::uint16_t port() const;
  const std::string& token() const;
  std::string url() const;  // the page with its token
  void run();               // until stop()
  void stop();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// A random access token: 32 hex digits from the system's random source.
std::string randomToken();

// csp-web --html: one self-contained page with the answers a reader is likely to ask for
// embedded (the top of each view, the hot path opened, the per-thread values of its nodes, the
// flame graph's levels, the scaling-loss report, the imbalance causes, the timeline). Requests
// beyond them say that the report does not hold them. std::runtime_error when the page is not
// built or the file cannot be written.
void writeReport(Api& api, const std::filesystem::path& html);

// The key under which a report stores an answer: the path and the parameters sorted by name,
// without the token ("/api/view?db=0&depth=1&kind=cc"); the front end builds the same.
std::string requestKey(const std::string& path, const Params& params);

}  // namespace csp::web
