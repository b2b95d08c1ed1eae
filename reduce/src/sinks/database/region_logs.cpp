#include "region_logs.hpp"

namespace csp::reduce {

void putRegionLogs(storage::ShardWriter& shard, const std::string& hostname, std::uint64_t pid,
                   const std::vector<std::uint32_t>& profiles, const std::vector<ThreadProfile>& threads,
                   const std::vector<std::vector<std::uint32_t>>& regionIds) {
  if (profiles.empty()) return;
  storage::RegionLogProcess process;
  process.process = profiles.front();
  process.hostname = hostname;
  process.pid = pid;
  for (std::size_t i = 0; i < threads.size(); ++i) {
    const RegionProfile& r = threads[i].regions;
    process.threads.push_back({profiles[i], r.eventTimeNs.size(), r.eventsLost, r.mismatchedEnds, r.unclosedAtExit});
  }
  shard.putRegionLogProcess(process);
  std::vector<storage::RegionLogEvent> events;
  for (std::size_t i = 0; i < threads.size(); ++i) {
    const RegionProfile& r = threads[i].regions;
    events.clear();
    events.reserve(r.eventTimeNs.size());
    const bool attrs = !r.eventHasAttr.empty();
    for (std::size_t e = 0; e < r.eventTimeNs.size(); ++e) {
      storage::RegionLogEvent ev;
      ev.timeNs = r.eventTimeNs[e];
      ev.region = regionIds[i][r.eventNode[e]];
      ev.enter = r.eventIsEnter[e];
      ev.hasAttr = attrs && r.eventHasAttr[e];
      ev.attr = ev.hasAttr ? r.eventAttr[e] : 0;
      events.push_back(ev);
    }
    shard.putRegionLogThread(process.process, process.threads[i], events);
  }
}

}  // namespace csp::reduce
