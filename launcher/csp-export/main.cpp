// csp-export: a finished CSP database in another tool's format, in parallel.
//   [srun|mpirun -np P] csp-export DB --hpctoolkit DIR [--force]
// The same sink as csp-prof-mpi --hpctoolkit, for databases that exist already (docs/hpctoolkit.md).
#include <fmt/format.h>
#include <unistd.h>
#include <CLI/CLI.hpp>

#include <optional>

#include "cli_parse.hpp"
#include "csp/reduce/hpctoolkit_export.hpp"
#include "signal_cleanup.hpp"

int main(int argc, char** argv) {
  const csp::reduce::MpiSession mpi(argc, argv);  // ends MPI however main returns
  const int rank = mpi.rank(), size = mpi.size();

  CLI::App app{
      "csp-export: write a CSP database as an HPCToolkit database (meta.db, profile.db, cct.db) that hpcviewer and "
      "Hatchet open. Run it under srun or mpirun to write in parallel.\n"
      "  csp-export run/db --hpctoolkit run/hpctoolkit-database",
      "csp-export"};
  std::string database, hpctoolkit;
  bool force = false, quiet = false;
  app.add_option("DB", database, "the CSP database")->required();
  app.add_option("--hpctoolkit", hpctoolkit, "DIR: the HPCToolkit database to create")->required();
  app.add_flag("--force", force, "replace an existing HPCToolkit database (never anything else)");
  app.add_flag("-q,--quiet", quiet, "no summary (errors only)");
  // Rank 0 says what is wrong; every rank leaves with the same status.
  std::ostringstream silent;
  if (const auto exit = rank == 0 ? csp::cli::parseOrExit(app, "csp-export", [&] { app.parse(argc, argv); })
                                  : csp::cli::parseOrExit(
                                        app, "csp-export", [&] { app.parse(argc, argv); }, silent, silent))
    return *exit;
  csp::cli::installTerminationCleanup("csp-export", rank == 0);
  std::optional<csp::cli::OrphanWatchdog> watchdog;
  if (size > 1) watchdog.emplace("csp-export");
  csp::reduce::HpctoolkitExportOptions o;
  o.database = database;
  o.output = hpctoolkit;
  o.force = force;
  o.onTempDir = [](const std::filesystem::path& dir, int ownerPid) {
    csp::cli::removeOnTermination(dir, ownerPid == ::getpid() ? 0 : ownerPid);
  };
  o.onLeftover = [quiet](bool removed, const std::string& text) {
    if (!removed)
      fmt::print(stderr, "csp-export: warning: earlier staging directory {}\n", text);
    else if (!quiet)
      fmt::print(stderr, "csp-export: note: earlier staging directory {}\n", text);
  };
  int status = 0;
  try {
    csp::reduce::Comm comm(mpi.world());
    const auto s = csp::reduce::exportHpctoolkit(comm, o);
    csp::cli::removeOnTermination({});
    if (rank == 0 && !quiet)
      fmt::print(
          "csp-export: wrote {}: {} profiles, {} contexts, {} metrics, {:.1f} MiB ({:.2f} bytes per value), "
          "{} ranks, {:.2f} s\n",
          hpctoolkit, s.profiles, s.contexts, s.metrics, s.bytes / 1048576.0,
          s.values ? double(s.bytes) / double(s.values) : 0.0, size, s.seconds);
  } catch (const std::exception& e) {
    if (rank == 0) fmt::print(stderr, "csp-export: error: {}\n", e.what());
    status = 1;
  }
  watchdog.reset();
  return status;
}
