// The tools' reaction to their command line: --help prints the help, a parse error one line
// "TOOL: what (TOOL --help shows the options)" and exit status 2 (docs/cli.md).
#pragma once

#include <CLI/CLI.hpp>

#include <iostream>
#include <optional>
#include <sstream>
#include <string>

namespace csp::cli {

// Runs `parse` (which parses into `app`); the exit status to leave with when it did not parse or
// asked for help, none when the tool goes on.
// `err` takes the messages (and `out` the help): the other ranks of an MPI tool pass a sink.
template <typename Parse>
std::optional<int> parseOrExit(CLI::App& app, const std::string& tool, Parse&& parse, std::ostream& err = std::cerr,
                               std::ostream& out = std::cout) {
  try {
    parse();
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e, out, err);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e, out, err);
  } catch (const CLI::Success& e) {
    return app.exit(e, out, err);
  } catch (const CLI::ParseError& e) {
    err << tool << ": " << e.what() << " (" << tool << " --help shows the options)\n";
    return 2;
  }
  return std::nullopt;
}

}  // namespace csp::cli
