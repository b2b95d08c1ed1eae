// The database metadata: profile identities gathered at the root, the canonical CCT's texts,
// metric descriptors, hosts and processes.
#include <fmt/format.h>

#include <algorithm>
#include <filesystem>
#include <map>
#include <set>

#include "stages.hpp"

namespace csp::reduce::dbsink {

namespace {

// (Pipeline keeps these settings of the profiles: command, idleness, openmp-tool, openmp-runtime,
// mpi-ranks and dropped-*.)
std::string settingOf(const Identity& identity, const std::string& key) {
  for (const auto& st : identity.settings)
    if (st.key == key) return st.value;
  return "";
}

// The OpenMP runtime of a profile measured with --idleness where that runtime found no OpenMP
// tool (libgomp; libomp with OMPT disabled): its OpenMP threads were plain, always-working
// threads, so OpenMP idleness was not measured (docs/measurement.md, "OpenMP"). Else "".
std::string openmpWithoutTool(const Identity& identity) {
  const std::string runtime = settingOf(identity, "openmp-runtime");
  if (settingOf(identity, "idleness") != "on" || settingOf(identity, "openmp-tool") != "none") return "";
  return runtime == "none" ? "" : runtime;
}

// The profile's logical call paths as measured (setting logical-contexts): "ompt", "no-tool
// (<runtime>)", "none" (no OpenMP runtime), "off", or "" (older profiles).
std::string logicalContexts(const Identity& identity) { return settingOf(identity, "logical-contexts"); }

// The property kOpenmpCallPathsProperty from the profiles' logical-contexts settings ("": none).
std::string openmpCallPaths(const std::set<std::string>& states, bool physical) {
  std::string noTool;
  for (const auto& s : states)
    if (s.starts_with("no-tool (")) noTool += (noTool.empty() ? "" : ", ") + s.substr(9, s.size() - 10);
  if (!noTool.empty()) return "physical: " + noTool + " ran without an OpenMP tool (OMPT)";
  if (states.count("ompt") == 0) return states.count("off") != 0 ? "physical (csp-run --no-logical)" : "";
  return physical ? "physical (csp-prof-mpi --physical)" : "logical";
}

}  // namespace

std::vector<std::vector<std::byte>> gatherIdentities(const Comm& comm, const Pipeline& pipeline) {
  Packer p;
  p.u64(pipeline.localProfileCount());
  const auto& commons = pipeline.commonIdentities();
  const Identity* previous = nullptr;
  pipeline.forEachLocalProfile([&](const ProfileInfo& info, const ProfileRecord& record, const InputProfile&) {
    const Identity& common = commons.at(record.identity.common);
    p.u64(info.id);
    putIdTuple(p, record.identity.idTuple);
    p.text(record.identity.hostname);
    p.u64(record.identity.pid);
    p.text(common.executable);
    // A command line only for the first profile of each executable in a row: the threads and
    // processes of a run share one.
    const bool again = previous != nullptr && previous->executable == common.executable;
    previous = &common;
    p.u64(again ? 0 : common.commandLine.size());
    if (!again)
      for (const auto& a : common.commandLine) p.text(a);
    std::string command, ranks;
    std::vector<const Setting*> dropped;
    for (const auto& st : common.settings) {
      if (st.key == "command") command = st.value;
      if (st.key == "mpi-ranks") ranks = st.value;
      if (st.key.starts_with("dropped-")) dropped.push_back(&st);
    }
    p.text(command);
    p.text(openmpWithoutTool(common));
    p.text(logicalContexts(common));
    p.text(ranks);
    p.u64(dropped.size());
    for (const Setting* st : dropped) {
      p.text(st->key.substr(std::string_view("dropped-").size()));
      p.u64(std::strtoull(st->value.c_str(), nullptr, 10));
    }
    // Sampling quality (docs/postprocessing.md, "Path quality").
    p.u64(record.stats.samples);
    p.u64(record.stats.unwindFailures);
    p.u64(record.stats.droppedSamples);
    p.u64(record.truncatedSamples);
    p.u64(record.stats.truncatedPaths);
    p.u64(record.scannedSamples);
    p.u64(record.recoveredSamples);
  });
  // The loops of the modules this rank's attribution needed (the root takes their union).
  const auto modules = pipeline.attributionStats().modules;
  p.u64(modules.size());
  for (const auto& m : modules) {
    p.text(m.module);
    p.u64(m.loops);
    p.u64(m.byAddress);
    p.text(m.note);
  }
  return comm.gather(p.take());
}

namespace {

constexpr std::size_t kNamedTemporaries = 5;

// "1, 3-5, 9": sorted numbers as ranges.
std::string numberRanges(const std::vector<std::uint64_t>& sorted) {
  std::string out;
  for (std::size_t i = 0; i < sorted.size();) {
    std::size_t j = i;
    while (j + 1 < sorted.size() && sorted[j + 1] == sorted[j] + 1) ++j;
    out += fmt::format("{}{}", out.empty() ? "" : ", ",
                       j == i ? fmt::format("{}", sorted[i]) : fmt::format("{}-{}", sorted[i], sorted[j]));
    i = j + 1;
  }
  return out;
}

// Ranks of the measured job without any profile (gaps in the numbering, and ranks up to the
// recorded rank count), and ranks with fewer thread profiles than most ranks have: what a rank
// killed before it wrote everything leaves (docs/postprocessing.md, "Incomplete measurements").
std::vector<std::string> missingRanksAndThreads(const std::map<std::uint64_t, std::uint64_t>& profilesOfRank,
                                                std::uint64_t rankCount) {
  std::vector<std::string> warnings;
  if (profilesOfRank.empty()) return warnings;
  const std::uint64_t ranks = std::max(rankCount, profilesOfRank.rbegin()->first + 1);
  std::vector<std::uint64_t> absent;
  for (std::uint64_t r = 0; r < ranks && absent.size() <= ranks; ++r)
    if (!profilesOfRank.count(r)) absent.push_back(r);
  const std::string which = fmt::format("rank{} {}", absent.size() == 1 ? "" : "s", numberRanges(absent));
  if (!absent.empty() && rankCount > 0)
    warnings.push_back(fmt::format("{} of {} ranks left no profile ({}): killed before they wrote them?", absent.size(),
                                   ranks, which));
  else if (!absent.empty())
    warnings.push_back(
        fmt::format("{} left no profile, though ranks up to {} did: killed before they wrote them?", which, ranks - 1));
  // The most common number of thread profiles per rank (ties: the larger).
  std::map<std::uint64_t, std::uint64_t> ranksWith;
  for (const auto& [rank, n] : profilesOfRank) ++ranksWith[n];
  std::uint64_t usual = 0, most = 0;
  for (const auto& [n, count] : ranksWith)
    if (count >= most) usual = n, most = count;
  std::map<std::uint64_t, std::vector<std::uint64_t>> fewer;  // thread count -> ranks
  for (const auto& [rank, n] : profilesOfRank)
    if (n < usual) fewer[n].push_back(rank);
  for (const auto& [n, list] : fewer)
    warnings.push_back(fmt::format(
        "rank{} {} ha{} {} thread profile{}, most ranks have {}: profiles may be missing "
        "(killed while writing them?)",
        list.size() == 1 ? "" : "s", numberRanges(list), list.size() == 1 ? "s" : "ve", n, n == 1 ? "" : "s", usual));
  return warnings;
}

// "loader-busy 72803 (93.1 %), throttled 5000 (6.4 %)": the measurement's causes of dropped
// samples (docs/measurement.md, "Health counters"), the most frequent first.
std::string droppedByCause(const std::map<std::string, std::uint64_t>& droppedBy) {
  std::vector<std::pair<std::uint64_t, std::string>> causes;
  std::uint64_t total = 0;
  for (const auto& [cause, n] : droppedBy) {
    if (n == 0) continue;
    causes.emplace_back(n, cause);
    total += n;
  }
  std::stable_sort(causes.begin(), causes.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
  std::string text;
  for (const auto& [n, cause] : causes)
    text += fmt::format("{}{} {} ({:.1f} %)", text.empty() ? "" : ", ", cause, n, 100.0 * double(n) / double(total));
  return text;
}

}  // namespace

std::vector<storage::CctNode> cctNodes(Pipeline& pipeline, storage::StringIds& strings) {
  const FinalCct& cct = pipeline.cct();
  const auto& text = pipeline.strings();
  std::vector<storage::CctNode> nodes(cct.size());
  for (std::uint32_t i = 0; i < cct.size(); ++i) {
    const auto& n = cct.node(i);
    nodes[i] = {n.parent,
                n.key.kind,
                strings.id(text.text(n.key.name)),
                strings.id(text.text(n.key.file)),
                strings.id(text.text(n.key.module)),
                n.key.line};
  }
  return nodes;
}

namespace {

// What the gathered identities say about the run as a whole, besides the per-profile tables.
struct RunIdentity {
  std::map<std::uint64_t, std::uint64_t> profilesOfRank;
  std::uint64_t rankCount = 0;                     // the measured job's, as the measurement recorded it (0: unknown)
  std::map<std::string, std::uint64_t> droppedBy;  // dropped samples by the measurement's cause
  std::set<std::string> hosts;
  std::set<std::pair<std::string, std::uint64_t>> processes;
  std::map<std::string, std::uint64_t> commands, threadsOf;
  std::map<std::string, std::vector<std::string>> commandLineOf;
  std::set<std::string> openmpUnmeasured;  // OpenMP runtimes that found no tool
  std::set<std::string> logicalStates;     // the profiles' logical-contexts settings
  std::set<storage::ModuleLoops> moduleLoops;
  storage::UnwindRecovery unwind;
};

// One rank's part of gatherIdentities: its profiles' id tuples and sampling quality into `meta`,
// the rest into `run`.
void readIdentities(Unpacker& u, storage::DatabaseMetadata& meta, RunIdentity& run) {
  for (auto n = u.u64(); n > 0; --n) {
    const auto id = u.u64();
    IdTuple tuple = getIdTuple(u);
    const std::string host = u.text();
    const auto pid = u.u64();
    const std::string exe = u.text();
    std::vector<std::string> cmd(u.u64());
    for (auto& a : cmd) a = u.text();
    const std::string command = u.text();
    if (auto runtime = u.text(); !runtime.empty()) run.openmpUnmeasured.insert(std::move(runtime));
    if (auto state = u.text(); !state.empty()) run.logicalStates.insert(std::move(state));
    const std::string ranks = u.text();
    for (auto n = u.u64(); n > 0; --n) {
      const std::string cause = u.text();
      run.droppedBy[cause] += u.u64();
    }
    for (const auto& e : tuple)
      if (e.kind == IdKind::Rank) ++run.profilesOfRank[e.value];
    run.rankCount = std::max<std::uint64_t>(run.rankCount, std::strtoull(ranks.c_str(), nullptr, 10));
    storage::SamplingQuality q;
    q.samples = u.u64();
    q.unwindFailures = u.u64();
    q.droppedSamples = u.u64();
    q.truncatedSamples = u.u64();
    q.depthLimited = u.u64();
    run.unwind.scannedSamples += u.u64();
    run.unwind.recoveredSamples += u.u64();
    meta.quality.at(id) = q;
    meta.profiles.at(id) = std::move(tuple);
    run.hosts.insert(host);
    run.processes.insert({host, pid});
    if (!command.empty()) ++run.commands[command];
    if (!exe.empty()) ++run.threadsOf[exe];
    if (!exe.empty() && !cmd.empty() && !run.commandLineOf.count(exe)) run.commandLineOf[exe] = cmd;
  }
  for (auto n = u.u64(); n > 0; --n) {
    storage::ModuleLoops m;
    m.module = u.text();
    m.loops = u.u64();
    m.byAddress = u.u64();
    m.note = u.text();
    run.moduleLoops.insert(std::move(m));
  }
}

// The measured program: the command csp-run ran (recorded by every process it started), the
// most frequent if several; without one (profiles not written by csp-run), the executable that
// most threads ran. Other executables (mpirun's helpers, a script's children) are listed.
void chooseProgram(RunIdentity& run, storage::DatabaseMetadata& meta) {
  auto mostFrequent = [](const std::map<std::string, std::uint64_t>& counts) {
    std::string best;
    std::uint64_t n = 0;
    for (const auto& [text, c] : counts)
      if (c > n) best = text, n = c;  // ties: the first by name, so the choice is deterministic
    return best;
  };
  if (const auto command = mostFrequent(run.commands); !command.empty()) {
    meta.commandLine.clear();
    for (std::size_t at = 0;;) {
      const auto sep = command.find('\x1f', at);
      meta.commandLine.push_back(command.substr(at, sep == std::string::npos ? std::string::npos : sep - at));
      if (sep == std::string::npos) break;
      at = sep + 1;
    }
    // The executable of the program: the one whose name the command starts with, if any ran.
    const std::string program = std::filesystem::path(meta.commandLine.front()).filename().string();
    for (const auto& [exe, n] : run.threadsOf)
      if (std::filesystem::path(exe).filename() == program) meta.executable = exe;
    if (meta.executable.empty()) meta.executable = meta.commandLine.front();
  } else if (const auto exe = mostFrequent(run.threadsOf); !exe.empty()) {
    meta.executable = exe;
    meta.commandLine = run.commandLineOf[exe];
  }
  if (run.threadsOf.size() > 1) {
    std::vector<std::pair<std::uint64_t, std::string>> byThreads;
    byThreads.reserve(run.threadsOf.size());
    for (const auto& [exe, n] : run.threadsOf) byThreads.emplace_back(n, exe);
    std::sort(byThreads.begin(), byThreads.end(), [](const auto& a, const auto& b) {
      return a.first != b.first ? a.first > b.first : a.second < b.second;
    });
    std::string list;
    for (const auto& [n, exe] : byThreads)
      list += fmt::format("{}{} ({} thread{})", list.empty() ? "" : ", ", exe, n, n == 1 ? "" : "s");
    meta.properties.push_back({"executables", list});
  }
}

// What the profiles say is missing from the measurement (see assembleMetadata).
std::vector<std::string> measurementWarnings(const RunIdentity& run, const Pipeline& pipeline) {
  auto warnings = missingRanksAndThreads(run.profilesOfRank, run.rankCount);
  const auto& temporaries = pipeline.leftoverTemporaries();
  if (!temporaries.empty()) {
    std::string names;
    for (std::size_t i = 0; i < std::min<std::size_t>(temporaries.size(), kNamedTemporaries); ++i)
      names += fmt::format("{}{}", i ? ", " : "", temporaries[i]);
    if (temporaries.size() > kNamedTemporaries)
      names += fmt::format(" and {} more", temporaries.size() - kNamedTemporaries);
    warnings.push_back(
        fmt::format("{} unfinished profile temporar{} left by a measurement killed while writing (those "
                    "profiles are missing; remove them): {}",
                    temporaries.size(), temporaries.size() == 1 ? "y" : "ies", names));
  }
  return warnings;
}

}  // namespace

storage::DatabaseMetadata assembleMetadata(const std::string& title, Pipeline& pipeline,
                                           const std::vector<std::vector<std::byte>>& identities,
                                           std::vector<std::string>& warnings) {
  storage::DatabaseMetadata meta;
  meta.title = title;
  meta.profiles.resize(pipeline.profileCount());
  meta.quality.resize(pipeline.profileCount());
  meta.properties = {{"generator", "csp-prof-mpi"}, {"inputs", std::to_string(pipeline.inputCount())}};
  RunIdentity run;
  for (const auto& part : identities) {
    Unpacker u(part);
    readIdentities(u, meta, run);
  }
  meta.moduleLoops.assign(run.moduleLoops.begin(), run.moduleLoops.end());
  meta.unwindRecovery = run.unwind;
  chooseProgram(run, meta);
  meta.hostnames.assign(run.hosts.begin(), run.hosts.end());
  meta.processCount = run.processes.size();
  meta.threadCount = pipeline.profileCount();
  meta.threadClasses = pipeline.threadClasses();
  meta.nodeCount = static_cast<std::uint32_t>(pipeline.cct().size());
  meta.regionCount = static_cast<std::uint32_t>(pipeline.regions().size());
  for (const auto& m : pipeline.metrics()) meta.metrics.push_back({m, m.valueType});
  meta.regionMetrics = storage::standardRegionMetrics();
  for (const auto& k : pipeline.skipped()) meta.skipped.push_back({k.path, k.reason});
  if (!run.openmpUnmeasured.empty()) {
    std::string list;
    for (const auto& r : run.openmpUnmeasured) list += (list.empty() ? "" : ", ") + r;
    meta.properties.push_back({std::string(storage::kOpenmpIdlenessProperty),
                               "not measured: " + list + " ran without an OpenMP tool (OMPT)"});
  }
  if (const auto paths = openmpCallPaths(run.logicalStates, pipeline.physicalPaths()); !paths.empty())
    meta.properties.push_back({std::string(storage::kOpenmpCallPathsProperty), paths});
  if (const auto causes = droppedByCause(run.droppedBy); !causes.empty())
    meta.properties.push_back({"dropped-samples-by-cause", causes});
  warnings = measurementWarnings(run, pipeline);
  if (!warnings.empty()) {
    std::string joined;
    for (const auto& w : warnings) joined += (joined.empty() ? "" : "; ") + w;
    meta.properties.push_back({"measurement-warnings", joined});
  }
  return meta;
}

}  // namespace csp::reduce::dbsink
