// Storing the region event logs of one process in the database (docs/database-format.md,
// "Region event logs"), for csp-query: one call per process (regions.cpp).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "csp/storage/database_writer.hpp"
#include "csp/storage/profile.hpp"

namespace csp::reduce {

// Writes the logs of one process's threads. `profiles[i]` is the profile id of `threads[i]`
// (ascending), `regionIds[i]` maps its region nodes to reduced region ids. The process id is
// profiles.front(). Threads without events are listed with an empty log.
void putRegionLogs(storage::ShardWriter& shard, const std::string& hostname, std::uint64_t pid,
                   const std::vector<std::uint32_t>& profiles, const std::vector<ThreadProfile>& threads,
                   const std::vector<std::vector<std::uint32_t>>& regionIds);

}  // namespace csp::reduce
