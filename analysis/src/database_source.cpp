#include "csp/analysis/database_source.hpp"

#include <fmt/format.h>

namespace csp::analysis {

namespace {

class DbStream final : public EventStream {
 public:
  explicit DbStream(std::unique_ptr<storage::RegionLogCursor> c) : cursor_(std::move(c)) {}
  bool next(Event& out) override {
    storage::RegionLogEvent e;
    if (!cursor_->next(e)) return false;
    out.timeNs = e.timeNs;
    out.region = e.region;
    out.enter = e.enter;
    out.hasAttr = e.hasAttr;
    out.attr = e.attr;
    return true;
  }

 private:
  std::unique_ptr<storage::RegionLogCursor> cursor_;
};

}  // namespace

DatabaseLogs loadLogs(const storage::Database& db) {
  DatabaseLogs out;
  const auto& meta = db.metadata();
  const auto regions = db.regions();
  for (std::size_t i = 1; i < regions.size(); ++i) {
    const auto& r = regions[i];
    if (r.parent >= i) throw storage::DatabaseError(db.directory(), "damaged database: region tree out of order");
    out.tree.parent.push_back(r.parent);
    out.tree.name.push_back(r.name < meta.strings.size() ? meta.strings[r.name] : "?");
    out.tree.dynamicId.push_back(r.dynamicId);
  }
  out.hasLogFamily = db.hasRegionLogFamily();
  for (const auto& p : db.regionLogProcesses()) {
    ProcessInput in;
    IdTuple processTuple;
    if (p.process < meta.profiles.size())
      for (const auto& e : meta.profiles[p.process])
        if (e.kind != IdKind::Thread) processTuple.push_back(e);
    // Without a process id (threads numbered, no rank): host and pid alone, not "(no id)".
    in.label = processTuple.empty() ? fmt::format("{} pid {}", p.hostname, p.pid)
                                    : fmt::format("{} {} pid {}", formatIdTuple(processTuple), p.hostname, p.pid);
    in.process = p.process;
    std::vector<storage::ProfileId> ids;
    for (const auto& t : p.threads) {
      std::uint64_t number = t.profile;
      if (t.profile < meta.profiles.size())
        for (const auto& e : meta.profiles[t.profile])
          if (e.kind == IdKind::Thread) number = e.value;
      in.threadNumbers.push_back(number);
      ids.push_back(t.profile);
      in.threadProfiles.push_back(t.profile);
      out.events += t.events;
      in.events += t.events;
      out.eventsLost += t.eventsLost;
    }
    const storage::Database* dbp = &db;
    const storage::ProfileId process = p.process;
    in.open = [dbp, process, ids] {
      std::vector<std::unique_ptr<EventStream>> s;
      s.reserve(ids.size());
      for (auto id : ids) s.push_back(std::make_unique<DbStream>(dbp->regionLog(process, id)));
      return s;
    };
    out.processes.push_back(std::move(in));
  }
  return out;
}

std::string noLogsExplanation(const storage::Database& db, const DatabaseLogs& logs) {
  if (!logs.hasLogFamily)
    return fmt::format(
        "{}: the database has no region event logs (format {}.{}, written before CSP stored them); "
        "run csp-prof-mpi again on the measurement directory to store them",
        db.directory().string(), db.formatVersion().major, db.formatVersion().minor);
  return fmt::format(
      "{}: the database has no region event logs: the program was measured without --region-log "
      "(or has no region annotations); measure it with `csp-run --region-log ...` and run csp-prof-mpi again",
      db.directory().string());
}

}  // namespace csp::analysis
