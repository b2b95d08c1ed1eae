// csp-web: look at CSP databases in a browser (docs/web.md). Argument parsing only: the server,
// the API and the report live in web/, every answer in views/.
#include <fmt/format.h>
#include <CLI/CLI.hpp>

#include <csignal>
#include <cstdlib>
#include <iostream>

#include "cli_parse.hpp"
#include "csp/web/web.hpp"

namespace {

csp::web::Server* running = nullptr;

// SIGINT/SIGTERM stop the server (its run() returns and the program ends normally).
void stopOnSignal(int) {
  if (running) running->stop();
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{
      "csp-web: CSP databases in a browser: Calling Context, Callers and Flat tables, flame graph, per-thread plots, "
      "source, scaling loss, imbalance causes, effort, regions and their timeline.\n"
      "  csp-web run/db                      serve on 127.0.0.1, print the URL (with its access token)\n"
      "  csp-web run-p64/db run-p4096/db scaling-db   several databases, side by side\n"
      "  csp-web --html report.html run/db   one self-contained page to share\n"
      "On a cluster: ssh -L 8080:127.0.0.1:8080 login-node, then csp-web --port 8080 DB there.\n"
      "Reference: docs/web.md",
      "csp-web"};
  std::vector<std::string> databases;
  std::string html;
  unsigned port = 0;
  bool quiet = false;
  app.add_option("DB", databases, "database directories (csp-prof-mpi or csp-diff -o)")->required();
  app.add_option("--port", port, "port on 127.0.0.1 (default: a free one)")->check(CLI::Range(1, 65535));
  app.add_option("--html", html,
                 "write one self-contained HTML page with the likely answers embedded, instead of serving");
  app.add_flag("-q,--quiet", quiet, "print only the URL");
  if (const auto exit = csp::cli::parseOrExit(app, "csp-web", [&] { app.parse(argc, argv); })) return *exit;

  try {
    std::vector<std::filesystem::path> paths(databases.begin(), databases.end());
    csp::web::Api api(paths);
    if (!html.empty()) {
      csp::web::writeReport(api, html);
      std::cout << "csp-web: wrote " << html << "\n";
      return 0;
    }
    if (csp::web::page().empty())
      std::cerr << "csp-web: warning: the page was not built (" << csp::web::assetsProblem()
                << "); the JSON API answers, the browser gets this message\n";
    csp::web::ServeOptions options;
    options.port = static_cast<std::uint16_t>(port);
    csp::web::Server server(api, options);
    api.warmUp();
    running = &server;
    std::signal(SIGINT, stopOnSignal);
    std::signal(SIGTERM, stopOnSignal);
    if (!quiet)
      std::cout << fmt::format("csp-web: serving {} database{} read-only on 127.0.0.1 port {}; open (Ctrl-C stops):\n",
                               paths.size(), paths.size() == 1 ? "" : "s", server.port());
    std::cout << server.url() << std::endl;
    server.run();
    running = nullptr;
    // A background build of a view cannot be interrupted; nothing is being written (the databases
    // are open read-only), so Ctrl-C ends the process without waiting for it.
    std::cout.flush();
    std::_Exit(0);
  } catch (const std::exception& e) {
    std::cerr << "csp-web: error: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
