// csp-query: concurrency queries over the region event logs of a CSP database (docs/query.md).
// Argument parsing only: frames, the language and the analyses live in analysis/, the table of
// results and its renderers in views/.
#include <fmt/format.h>
#include <CLI/CLI.hpp>

#include <iostream>

#include "cli_parse.hpp"
#include "csp/analysis/query.hpp"
#include "csp/views/render.hpp"
#include "csp/views/request.hpp"
#include "csp/views/session.hpp"

int main(int argc, char** argv) {
  CLI::App app{
      "csp-query: concurrency queries over the region event logs of a CSP database.\n"
      "  csp-query DB 'Duration(exists t: (t, solve))'\n"
      "  csp-query DB 'Duration(∃1 t : (t, L) ∧ ∀u ≠ t : (u, B)) / Duration(∃t : (t, L))'\n"
      "  csp-query DB 'Duration((t, main))'           one value per thread t\n"
      "  csp-query DB --canned straggler compute barrier\n"
      "  csp-query DB --global 'Duration(exists t: (t, send) and exists u: (u, recv))'\n"
      "  csp-query DB --what-if 'solve=-20%'\n"
      "Reference: docs/query.md",
      "csp-query"};
  csp::views::QueryOptions o;
  std::string dbPath, format = "text";
  bool listCanned = false;
  app.add_option("database", dbPath, "the database (csp-prof-mpi's output)");
  app.add_option("query", o.query, "the query (docs/query.md); with --canned, the analysis's arguments");
  app.add_option("args", o.cannedArgs, "--canned: further arguments of the analysis");
  app.add_option("--canned", o.canned, "run a canned analysis (see --list-canned)");
  app.add_flag("--list-canned", listCanned, "list the canned analyses and exit");
  app.add_option("--format", format, "text, csv or json")
      ->check(CLI::IsMember({"text", "csv", "json"}))
      ->capture_default_str();
  app.add_option("--limit", o.limit, "pruned frames shown per process for a query without measure")
      ->capture_default_str();
  app.add_flag("--global", o.global,
               "frames across all processes on rank 0's clock (MPI runs measured with --region-log; threads are "
               "numbered rank * 1000 + thread)");
  app.add_option("--what-if", o.whatIf,
                 "REGION=-PERCENT%: dCOZ's predicted run time and speed-up if the region's compute time were "
                 "PERCENT % shorter (docs/query.md)");
  app.add_option("--what-if-rank", o.whatIfRank, "-PERCENT%: every region ranked by its predicted speed-up");
  app.add_flag("--mpi-waits", o.mpiWaits,
               "per rank, with guaranteed bounds: late-sender and late-receiver time, waits in collectives, "
               "straggler counts (MPI runs measured with --region-log)");
  if (const auto exit = csp::cli::parseOrExit(app, "csp-query", [&] { app.parse(argc, argv); })) return *exit;
  if (listCanned) {
    csp::views::renderCannedList(std::cout);
    return 0;
  }
  if (dbPath.empty()) {
    std::cerr << "csp-query: no database given (csp-query --help shows the options)\n";
    return 2;
  }
  if (o.canned.empty() && o.query.empty() && o.whatIf.empty() && o.whatIfRank.empty() && !o.mpiWaits) {
    std::cerr
        << "csp-query: no query given: csp-query DB 'QUERY' or csp-query DB --canned NAME ARGS... (docs/query.md)\n";
    return 2;
  }
  if (o.canned.empty() && !o.cannedArgs.empty()) {
    std::cerr << "csp-query: one query only; quote it as one argument: csp-query DB 'QUERY'\n";
    return 2;
  }

  using csp::analysis::QueryError;
  try {
    csp::views::QueryRequest request;
    try {
      request = csp::views::queryRequestFrom(o);
    } catch (const QueryError& e) {
      std::cerr << fmt::format("csp-query: error: query: column {}: {}\n  {}\n  {}^\n", e.column(), e.message(),
                               o.query, std::string(e.column() > 0 ? e.column() - 1 : 0, ' '));
      return 1;
    }
    const csp::views::Session session(dbPath);
    const auto answer = session.query(request);
    for (const auto& w : answer.warnings) std::cerr << "csp-query: " << w << "\n";
    csp::views::render(answer, *csp::views::parseFormat(format), std::cout);
    std::cout.flush();
    if (!std::cout) {
      std::cerr << "csp-query: error: writing the output failed\n";
      return 1;
    }
  } catch (const QueryError& e) {
    std::cerr << "csp-query: error: " << (e.column() ? std::string(e.what()) : e.message()) << "\n";
    return 1;
  } catch (const std::exception& e) {
    std::cerr << "csp-query: error: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
