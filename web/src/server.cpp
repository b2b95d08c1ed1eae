// The HTTP server of the web viewer (web.hpp): cpp-httplib on the loopback interface. Every
// request passes one gate first: the token, the method, the path; then the page or the API.
#include <fmt/format.h>
#include <httplib.h>

#include <cctype>
#include <random>
#include <stdexcept>

#include "csp/web/web.hpp"

namespace csp::web {

namespace {

// Equal without telling by the time taken how much of a guess was right.
bool sameToken(const std::string& given, const std::string& token) {
  if (given.size() != token.size()) return false;
  unsigned char diff = 0;
  for (std::size_t i = 0; i < token.size(); ++i) diff |= static_cast<unsigned char>(given[i] ^ token[i]);
  return diff == 0;
}

// A path that names a parent directory, also percent-encoded ("%2e%2e", "%2E.").
bool traverses(const std::string& path) {
  std::string plain;  // lower case, "%2e" read as '.'
  for (std::size_t i = 0; i < path.size(); ++i) {
    const char c = static_cast<char>(std::tolower(static_cast<unsigned char>(path[i])));
    if (c == '%' && i + 2 < path.size() && path[i + 1] == '2' && (path[i + 2] == 'e' || path[i + 2] == 'E')) {
      plain += '.';
      i += 2;
    } else {
      plain += c;
    }
  }
  return plain.find("..") != std::string::npos;
}

void refuse(httplib::Response& res, int status, const std::string& message) {
  res.status = status;
  res.set_content(fmt::format("{{\"error\":\"{}\"}}\n", message), "application/json");
}

// No caching (answers change with the databases), no referrer (the URL holds the token), and the
// page may run only its own inline code and talk only to this server.
const httplib::Headers& securityHeaders() {
  static const httplib::Headers headers = {
      {"Cache-Control", "no-store"},
      {"Referrer-Policy", "no-referrer"},
      {"X-Content-Type-Options", "nosniff"},
      {"X-Frame-Options", "DENY"},
      {"Content-Security-Policy",
       "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; img-src data: blob:; connect-src "
       "'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"}};
  return headers;
}

}  // namespace

std::string randomToken() {
  std::random_device rd;  // getrandom(2) on Linux
  std::string token;
  for (int i = 0; i < 4; ++i) token += fmt::format("{:08x}", rd());
  return token;
}

struct Server::Impl {
  Api& api;
  ServeOptions options;
  httplib::Server http;
  int port = 0;

  Impl(Api& a, ServeOptions o) : api(a), options(std::move(o)) {
    if (options.token.empty()) options.token = randomToken();
  }

  // The gate: token, method, path. Handled here means refused.
  httplib::Server::HandlerResponse gate(const httplib::Request& req, httplib::Response& res) const {
    const auto given = req.has_param("token") ? req.get_param_value("token") : req.get_header_value("X-CSP-Token");
    if (!sameToken(given, options.token)) {
      refuse(res, 403, "this server needs the access token it printed when it started (?token=...)");
      return httplib::Server::HandlerResponse::Handled;
    }
    if (req.method != "GET" && req.method != "HEAD") {
      refuse(res, 405, "read-only: GET only");
      return httplib::Server::HandlerResponse::Handled;
    }
    if (traverses(req.path) || traverses(req.target.substr(0, req.target.find('?')))) {
      refuse(res, 400, "no path with '..' is served");
      return httplib::Server::HandlerResponse::Handled;
    }
    return httplib::Server::HandlerResponse::Unhandled;
  }

  void routes() {
    http.set_default_headers(securityHeaders());
    http.set_pre_routing_handler([this](const auto& req, auto& res) { return gate(req, res); });
    http.Get("/", [](const httplib::Request&, httplib::Response& res) {
      const auto p = page();
      if (p.empty()) {
        res.status = 503;
        res.set_content("CSP's web viewer was built without its page: " + assetsProblem() + "\n", "text/plain");
        return;
      }
      res.set_content(std::string(p), "text/html; charset=utf-8");
    });
    http.Get(R"(/api/[a-z]+)", [this](const httplib::Request& req, httplib::Response& res) {
      Params params;
      for (const auto& [k, v] : req.params) params.emplace(k, v);
      const auto r = api.get(req.path, params);
      res.status = r.status;
      res.set_content(r.body, r.contentType);
    });
    http.set_error_handler([](const httplib::Request&, httplib::Response& res) {
      if (res.body.empty()) refuse(res, res.status, res.status == 404 ? "not found" : "refused");
    });
  }
};

Server::Server(Api& api, const ServeOptions& options) : impl_(std::make_unique<Impl>(api, options)) {
  impl_->routes();
  const auto& o = impl_->options;
  if (o.port == 0) {
    impl_->port = impl_->http.bind_to_any_port(o.host);
    if (impl_->port <= 0) throw std::runtime_error(fmt::format("cannot listen on {}", o.host));
  } else {
    if (!impl_->http.bind_to_port(o.host, o.port))
      throw std::runtime_error(fmt::format("cannot listen on {} port {} (in use?)", o.host, o.port));
    impl_->port = o.port;
  }
}

Server::~Server() { stop(); }

std::uint16_t Server::port() const { return static_cast<std::uint16_t>(impl_->port); }
const std::string& Server::token() const { return impl_->options.token; }
std::string Server::url() const { return fmt::format("http://{}:{}/?token={}", impl_->options.host, port(), token()); }
void Server::run() { impl_->http.listen_after_bind(); }
void Server::stop() { impl_->http.stop(); }

}  // namespace csp::web
