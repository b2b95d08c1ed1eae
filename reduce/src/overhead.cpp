// Parallel overhead rules (overhead.hpp).
#include "csp/reduce/overhead.hpp"

#include <fnmatch.h>

#include <fmt/format.h>

namespace csp::reduce {

namespace {

std::string baseName(const std::string& path) {
  const auto slash = path.rfind('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

bool glob(const std::string& pattern, const std::string& text) {
  return ::fnmatch(pattern.c_str(), text.c_str(), 0) == 0;
}

OverheadRule parseRule(const std::string& text) {
  const auto colon = text.find(':');
  OverheadRule r{text.substr(0, colon), colon == std::string::npos ? std::string() : text.substr(colon + 1)};
  if (r.module.empty() || (colon != std::string::npos && r.procedure.empty()))
    throw std::invalid_argument(
        fmt::format("overhead rule '{}': expected MODULE_GLOB or MODULE_GLOB:PROCEDURE_GLOB", text));
  return r;
}

}  // namespace

const std::vector<std::string>& OverheadRules::defaultRuleTexts() {
  static const std::vector<std::string> rules = {
      // OpenMP runtimes (with GCC's libgomp, which has no OMPT, waiting threads spin in it)
      "libomp.so*", "libiomp5.so*", "libgomp.so*",
      // pthreads: the library of glibc before 2.34, and the functions and low-level waits of the C library
      "libpthread.so*", "libc.so*:pthread_*", "libc.so*:__pthread_*", "libc.so*:*futex*", "libc.so*:__lll_*",
      "libc.so*:sched_yield",
      // MPI libraries, their progress engines and transports
      "libmpi.so*", "libmpich*.so*", "libopen-pal.so*", "libopen-rte.so*", "libpmix.so*", "mca_*.so", "libucp.so*",
      "libucs.so*", "libuct*.so*", "libfabric.so*", "libpsm2.so*"};
  return rules;
}

const std::vector<std::string>& OverheadRules::transparentModules() {
  static const std::vector<std::string> modules = {"libc.so*", "libc-*.so",     "ld-linux*",    "ld-*.so*",
                                                   "libm.so*", "libstdc++.so*", "libgcc_s.so*", "libcsp-measure.so*",
                                                   "[vdso]",   "linux-vdso.so*"};
  return modules;
}

OverheadRules::OverheadRules() {
  for (const auto& t : defaultRuleTexts()) rules_.push_back(parseRule(t));
}

OverheadRules OverheadRules::parse(const std::vector<std::string>& texts) {
  OverheadRules r;
  r.rules_.clear();
  for (const auto& t : texts) {
    if (t == "none") {
      if (texts.size() != 1) throw std::invalid_argument("overhead rule 'none' cannot be combined with other rules");
      continue;
    }
    if (t == "default") {
      for (const auto& d : defaultRuleTexts()) r.rules_.push_back(parseRule(d));
      continue;
    }
    r.rules_.push_back(parseRule(t));
  }
  return r;
}

std::string OverheadRules::describe() const {
  if (rules_.empty()) return "none";
  std::string out;
  for (const auto& r : rules_) out += (out.empty() ? "" : ", ") + r.text();
  return out;
}

bool OverheadRules::matches(const std::string& moduleName, const std::string& procedure) const {
  // The folded frames of an OpenMP runtime (logical call paths) are LLVM's runtime for the rules.
  static const std::string kFoldedRuntime = "libomp.so";
  const std::string& module = moduleName == kOmpRuntimeName ? kFoldedRuntime : moduleName;
  for (const auto& r : rules_)
    if (glob(r.module, module) && (r.procedure.empty() || glob(r.procedure, procedure))) return true;
  return false;
}

std::vector<std::uint8_t> OverheadRules::classify(const FinalCct& cct, const StringTable& strings) const {
  std::vector<std::uint8_t> overhead(cct.size(), 0);
  if (rules_.empty()) return overhead;
  std::vector<std::uint32_t> module(cct.size(), 0);  // string id of the enclosing procedure's module
  auto transparent = [&](const std::string& name) {
    for (const auto& m : transparentModules())
      if (glob(m, name)) return true;
    return false;
  };
  for (std::uint32_t id = 1; id < cct.size(); ++id) {
    const CctNode& n = cct.node(id);
    const std::uint32_t p = n.parent;
    switch (n.key.kind) {
      case ScopeKind::ProcFrame: {
        module[id] = n.key.module;
        const std::string name = baseName(strings.text(n.key.module));
        if (matches(name, strings.text(n.key.name)))
          overhead[id] = 1;
        else if (transparent(name))
          overhead[id] = p != kNoIndex ? overhead[p] : 0;  // as the caller's code
        break;
      }
      case ScopeKind::Alien: {
        module[id] = p != kNoIndex ? module[p] : 0;
        const std::string name = baseName(strings.text(module[id]));
        overhead[id] = matches(name, strings.text(n.key.name)) ? 1 : (p != kNoIndex ? overhead[p] : 0);
        break;
      }
      default:
        module[id] = p != kNoIndex ? module[p] : 0;
        overhead[id] = p != kNoIndex ? overhead[p] : 0;
    }
  }
  return overhead;
}

}  // namespace csp::reduce
