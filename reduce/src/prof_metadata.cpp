// The database metadata: profile identities gathered at the root, the canonical CCT's texts,
// metric descriptors, hosts and processes.
#include <fmt/format.h>

#include <algorithm>
#include <filesystem>
#include <map>
#include <set>

#include "prof_stages.hpp"

namespace csp::reduce::prof {

namespace {

// (Pipeline keeps these settings of the profiles: command, idleness, openmp-tool, openmp-runtime.)
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

}  // namespace

std::vector<std::vector<std::byte>> gatherIdentities(const Comm& comm, const Pipeline& pipeline) {
  Packer p;
  p.u64(pipeline.localProfiles().size());
  for (const auto& info : pipeline.localProfiles()) {
    p.u64(info.id);
    p.u64(info.identity.idTuple.size());
    for (const auto& e : info.identity.idTuple) {
      p.u64(static_cast<std::uint64_t>(e.kind));
      p.u64(e.value);
    }
    p.text(info.identity.hostname);
    p.u64(info.identity.pid);
    p.text(info.identity.executable);
    p.u64(info.identity.commandLine.size());
    for (const auto& a : info.identity.commandLine) p.text(a);
    p.text(settingOf(info.identity, "command"));
    p.text(openmpWithoutTool(info.identity));
    // Sampling quality (docs/postprocessing.md, "Path quality").
    p.u64(info.stats.samples);
    p.u64(info.stats.unwindFailures);
    p.u64(info.stats.droppedSamples);
    p.u64(info.truncatedSamples);
    p.u64(info.stats.truncatedPaths);
    p.u64(info.scannedSamples);
    p.u64(info.recoveredSamples);
  }
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

std::vector<storage::CctNode> cctNodes(Pipeline& pipeline, storage::StringIds& strings) {
  const FinalCct& cct = pipeline.cct();
  const auto& text = pipeline.strings();
  std::vector<storage::CctNode> nodes(cct.size());
  for (std::uint32_t i = 0; i < cct.size(); ++i) {
    const auto& n = cct.node(i);
    nodes[i] = {n.parent, n.key.kind, strings.id(text.text(n.key.name)), strings.id(text.text(n.key.file)),
                strings.id(text.text(n.key.module)), n.key.line};
  }
  return nodes;
}

storage::DatabaseMetadata assembleMetadata(const ProfOptions& options, Pipeline& pipeline,
                                           const std::vector<std::vector<std::byte>>& identities) {
  storage::DatabaseMetadata meta;
  meta.title = options.title;
  meta.profiles.resize(pipeline.profileCount());
  meta.quality.resize(pipeline.profileCount());
  std::set<std::string> hosts;
  std::set<std::pair<std::string, std::uint64_t>> processes;
  // The measured program: the command csp-run ran (recorded by every process it started), the
  // most frequent if several; without one (profiles not written by csp-run), the executable
  // that most threads ran. Other executables (mpirun's helpers, a script's children) are listed.
  std::map<std::string, std::uint64_t> commands, threadsOf;
  std::map<std::string, std::vector<std::string>> commandLineOf;
  std::set<std::string> openmpUnmeasured;  // OpenMP runtimes that found no tool
  std::set<storage::ModuleLoops> moduleLoops;
  storage::UnwindRecovery unwind;
  for (const auto& part : identities) {
    Unpacker u(part);
    for (auto n = u.u64(); n > 0; --n) {
      const auto id = u.u64();
      IdTuple tuple(u.u64());
      for (auto& e : tuple) {
        e.kind = static_cast<IdKind>(u.u64());
        e.value = u.u64();
      }
      const std::string host = u.text();
      const auto pid = u.u64();
      const std::string exe = u.text();
      std::vector<std::string> cmd(u.u64());
      for (auto& a : cmd) a = u.text();
      const std::string command = u.text();
      if (auto runtime = u.text(); !runtime.empty()) openmpUnmeasured.insert(std::move(runtime));
      storage::SamplingQuality q;
      q.samples = u.u64();
      q.unwindFailures = u.u64();
      q.droppedSamples = u.u64();
      q.truncatedSamples = u.u64();
      q.depthLimited = u.u64();
      unwind.scannedSamples += u.u64();
      unwind.recoveredSamples += u.u64();
      meta.quality.at(id) = q;
      meta.profiles.at(id) = std::move(tuple);
      hosts.insert(host);
      processes.insert({host, pid});
      if (!command.empty()) ++commands[command];
      if (!exe.empty()) ++threadsOf[exe];
      if (!exe.empty() && !cmd.empty() && !commandLineOf.count(exe)) commandLineOf[exe] = cmd;
    }
    for (auto n = u.u64(); n > 0; --n) {
      storage::ModuleLoops m;
      m.module = u.text();
      m.loops = u.u64();
      m.byAddress = u.u64();
      m.note = u.text();
      moduleLoops.insert(std::move(m));
    }
  }
  meta.moduleLoops.assign(moduleLoops.begin(), moduleLoops.end());
  meta.unwindRecovery = unwind;
  auto mostFrequent = [](const std::map<std::string, std::uint64_t>& counts) {
    std::string best;
    std::uint64_t n = 0;
    for (const auto& [text, c] : counts)
      if (c > n) best = text, n = c;  // ties: the first by name, so the choice is deterministic
    return best;
  };
  if (const auto command = mostFrequent(commands); !command.empty()) {
    meta.commandLine.clear();
    for (std::size_t at = 0;;) {
      const auto sep = command.find('\x1f', at);
      meta.commandLine.push_back(command.substr(at, sep == std::string::npos ? std::string::npos : sep - at));
      if (sep == std::string::npos) break;
      at = sep + 1;
    }
    // The executable of the program: the one whose name the command starts with, if any ran.
    const std::string program = std::filesystem::path(meta.commandLine.front()).filename().string();
    for (const auto& [exe, n] : threadsOf)
      if (std::filesystem::path(exe).filename() == program) meta.executable = exe;
    if (meta.executable.empty()) meta.executable = meta.commandLine.front();
  } else if (const auto exe = mostFrequent(threadsOf); !exe.empty()) {
    meta.executable = exe;
    meta.commandLine = commandLineOf[exe];
  }
  meta.hostnames.assign(hosts.begin(), hosts.end());
  meta.processCount = processes.size();
  meta.threadCount = pipeline.profileCount();
  meta.threadClasses = pipeline.threadClasses();
  meta.nodeCount = static_cast<std::uint32_t>(pipeline.cct().size());
  meta.regionCount = static_cast<std::uint32_t>(pipeline.regions().size());
  const std::size_t rawCount = pipeline.rawMetricCount();
  for (std::size_t m = 0; m < pipeline.metrics().size(); ++m)
    meta.metrics.push_back({pipeline.metrics()[m], m < rawCount ? storage::ValueType::Count : storage::ValueType::Real});
  meta.regionMetrics = storage::standardRegionMetrics();
  for (const auto& k : pipeline.skipped()) meta.skipped.push_back({k.path, k.reason});
  meta.properties = {{"generator", "csp-prof-mpi"},
                     {"inputs", std::to_string(pipeline.inputs().size())}};
  if (threadsOf.size() > 1) {
    std::vector<std::pair<std::uint64_t, std::string>> byThreads;
    for (const auto& [exe, n] : threadsOf) byThreads.emplace_back(n, exe);
    std::sort(byThreads.begin(), byThreads.end(), [](const auto& a, const auto& b) {
      return a.first != b.first ? a.first > b.first : a.second < b.second;
    });
    std::string list;
    for (const auto& [n, exe] : byThreads) list += fmt::format("{}{} ({} thread{})", list.empty() ? "" : ", ", exe, n, n == 1 ? "" : "s");
    meta.properties.push_back({"executables", list});
  }
  if (!openmpUnmeasured.empty()) {
    std::string list;
    for (const auto& r : openmpUnmeasured) list += (list.empty() ? "" : ", ") + r;
    meta.properties.push_back({std::string(storage::kOpenmpIdlenessProperty),
                               "not measured: " + list + " ran without an OpenMP tool (OMPT)"});
  }
  return meta;
}

}  // namespace csp::reduce::prof
