// The database metadata: profile identities gathered at the root, the canonical CCT's texts,
// metric descriptors, hosts and processes.
#include <set>

#include "prof_stages.hpp"

namespace csp::reduce::prof {

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
  std::set<std::string> hosts;
  std::set<std::pair<std::string, std::uint64_t>> processes;
  bool first = true;
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
      meta.profiles.at(id) = std::move(tuple);
      hosts.insert(host);
      processes.insert({host, pid});
      if (first && !exe.empty()) {
        meta.executable = exe;
        meta.commandLine = cmd;
        first = false;
      }
    }
  }
  meta.hostnames.assign(hosts.begin(), hosts.end());
  meta.processCount = processes.size();
  meta.threadCount = pipeline.profileCount();
  meta.nodeCount = static_cast<std::uint32_t>(pipeline.cct().size());
  meta.regionCount = static_cast<std::uint32_t>(pipeline.regions().size());
  const std::size_t rawCount = pipeline.rawMetricCount();
  for (std::size_t m = 0; m < pipeline.metrics().size(); ++m)
    meta.metrics.push_back({pipeline.metrics()[m], m < rawCount ? storage::ValueType::Count : storage::ValueType::Real});
  for (const auto& r : regionMetrics())
    meta.regionMetrics.push_back({r.name, r.unit, r.description, r.exclusive, r.inclusive, r.perProcess});
  for (const auto& k : pipeline.skipped()) meta.skipped.push_back({k.path, k.reason});
  meta.properties = {{"generator", "csp-prof-mpi"},
                     {"inputs", std::to_string(pipeline.inputs().size())}};
  return meta;
}

}  // namespace csp::reduce::prof
