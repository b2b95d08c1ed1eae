// Clocks across processes and communication events in the database (docs/database-format.md
// "Communication events", docs/postprocessing.md "Clocks across processes"): collected per
// process by the rank that stores its region logs, exchanged so that every rank sees every
// process, consolidated the same way on every rank (analysis/causal.hpp), written by the rank
// that collected them.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "csp/analysis/causal.hpp"
#include "csp/reduce/mpi_comm.hpp"
#include "csp/storage/database_writer.hpp"
#include "csp/storage/profile.hpp"

namespace csp::reduce {

class CommEventsCollector {
 public:
  // One process: `profiles[i]` is the id of `threads[i]` (ascending; the process id is the
  // first), `regionIds[i]` maps its region nodes to reduced ids.
  void add(const std::string& hostname, std::uint64_t pid, const std::vector<std::uint32_t>& profiles,
           const std::vector<ThreadProfile>& threads, const std::vector<std::vector<std::uint32_t>>& regionIds);
  // Collective: every rank calls it once.
  void write(const Comm& comm, storage::ShardWriter& shard);

 private:
  std::vector<analysis::ProcessComm> mine_;
};

}  // namespace csp::reduce
