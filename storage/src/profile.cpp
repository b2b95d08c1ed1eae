#include "csp/storage/profile.hpp"

#include <fmt/format.h>

namespace csp {

const char* toString(IdKind kind) {
  switch (kind) {
    case IdKind::Node:
      return "node";
    case IdKind::Rank:
      return "rank";
    case IdKind::Thread:
      return "thread";
    case IdKind::Core:
      return "core";
    case IdKind::Process:
      return "process";
    case IdKind::GpuContext:
      return "gpu-context";
    case IdKind::GpuStream:
      return "gpu-stream";
  }
  return "unknown";
}

const char* collectiveOpName(CollectiveOp op) {
  static constexpr const char* kNames[kCollectiveOpCount] = {
      "collective", "barrier",  "bcast",     "reduce",         "allreduce",
      "gather",     "gatherv",  "scatter",   "scatterv",       "allgather",
      "allgatherv", "alltoall", "alltoallv", "reduce-scatter", "reduce-scatter-block",
      "scan",       "exscan"};
  const auto i = static_cast<std::uint8_t>(op);
  return i < kCollectiveOpCount ? kNames[i] : "collective";
}

const char* toString(MetricKind kind) {
  switch (kind) {
    case MetricKind::Sampled:
      return "sampled";
    case MetricKind::Counted:
      return "counted";
  }
  return "unknown";
}

const char* toString(ScopeKind kind) {
  switch (kind) {
    case ScopeKind::Root:
      return "root";
    case ScopeKind::ProcFrame:
      return "procedure";
    case ScopeKind::Alien:
      return "inlined";
    case ScopeKind::Loop:
      return "loop";
    case ScopeKind::CallSite:
      return "call site";
    case ScopeKind::Stmt:
      return "statement";
  }
  return "unknown";
}

std::string formatIdTuple(const IdTuple& tuple) {
  std::string out;
  for (const auto& e : tuple) {
    if (!out.empty()) out += ' ';
    out += fmt::format("{} {}", toString(e.kind), e.value);
  }
  return out.empty() ? std::string("(no id)") : out;
}

}  // namespace csp
