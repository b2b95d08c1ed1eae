// Writing a CSP database as an HPCToolkit database (meta.db, profile.db, cct.db,
// metrics/default.yaml; HPCToolkit's format 4.0) that hpcviewer and Hatchet open
// (docs/hpctoolkit.md): csp-export's exportHpctoolkit and csp-prof-mpi's hpctoolkitSink. A step
// over a finished CSP database, collective over the communicator,
// in parallel the way the CSP database is written: each process encodes a profile range
// (profile.db) and a CCT node range (cct.db, the summary profile) from the database's two
// orders, the processes agree on where each part goes, write it there, and the root publishes
// the directory by rename. No process holds more than one profile's or one node's values.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>

#include "csp/reduce/mpi_comm.hpp"
#include "csp/reduce/prof.hpp"

namespace csp::reduce {

class HpctoolkitExportError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

struct HpctoolkitExportOptions {
  std::filesystem::path database;  // a finished CSP database
  std::filesystem::path output;    // the HPCToolkit database directory to create
  bool force = false;              // replace an existing HPCToolkit database (never anything else)
  // Rank 0: what was found of earlier interrupted exports to the same output.
  std::function<void(bool removed, const std::string& text)> onLeftover;
  // Every rank, once the staging directory exists (for signal handlers that remove it);
  // `ownerPid`: the root's pid when it runs on this host, else 0.
  std::function<void(const std::filesystem::path&, int ownerPid)> onTempDir;
};

struct HpctoolkitExportSummary {
  std::uint64_t profiles = 0;  // thread profiles (profile.db adds the summary profile)
  std::uint64_t contexts = 0;  // contexts of cct.db, the global context included
  std::uint64_t metrics = 0;
  std::uint64_t values = 0;  // per-thread values written (each in profile.db and in cct.db)
  std::uint64_t bytes = 0;   // of the directory
  double seconds = 0;        // rank 0, start to publication
};

// Why `output` cannot be written (one line naming it), or empty: it does not exist, or `force`
// is set and it is an HPCToolkit database (meta.db and the other files of one, nothing else).
std::string hpctoolkitOutputProblem(const std::filesystem::path& output, bool force);

// Collective. Throws HpctoolkitExportError on every rank if any rank fails (rank 0's message
// names every failing rank's reason); then nothing is left under `output` (an existing database
// there is untouched) and the staging directory is removed.
HpctoolkitExportSummary exportHpctoolkit(const Comm& comm, const HpctoolkitExportOptions& options);

// csp-prof-mpi --hpctoolkit: the HPCToolkit database of the run, as an OutputSink placed after
// cspDatabaseSink() in ProfOptions::sinks. It takes no batches: profile.db and cct.db need the
// values in both orders and the summary statistics, which the database sink has already
// transposed and combined across ranks, so its publish step runs writeExport over the database
// that sink has just published (`options.database`), as csp-export does. open() refuses a bad
// output before the pipeline's work. A failure of this step fails the run and leaves no
// HPCToolkit output, but the CSP database, already published, stays (csp-export can redo the step).
struct HpctoolkitSinkOptions {
  HpctoolkitExportOptions output;
  std::function<void(const HpctoolkitExportSummary&)> onWritten;  // every rank, once published
};
std::shared_ptr<OutputSink> hpctoolkitSink(HpctoolkitSinkOptions options);

}  // namespace csp::reduce
