#include "csp/reduce/thread_classes.hpp"

#include <fmt/format.h>
#include <fnmatch.h>

#include <algorithm>
#include <map>
#include <memory>
#include <stdexcept>

#include "csp/reduce/attribution.hpp"

namespace csp::reduce {

namespace {

constexpr const char* kRuntimeHelperModules[] = {
    "libopen-pal.so*", "libopen-rte.so*", "libmpi.so*",    "mca_*.so",         "libpmix.so*",   "libevent*.so*",
    "libucs.so*",      "libucp.so*",      "libuct.so*",    "libucm.so*",       "libfabric.so*", "libpsm2.so*",
    "libibverbs.so*",  "librdmacm.so*",   "libmlx*.so*",   "libhwloc.so*",     "libcuda.so*",   "libnvidia-*.so*",
    "libmunge.so*",    "libpmi*.so*",     "libslurm*.so*", "libcsp-measure.so"};

// Modules whose frames at the start of a thread are trampolines, not the thread's own code: the
// C library (clone, start_thread), the C++ runtime (std::thread's routine), the loader.
constexpr const char* kPassThroughModules[] = {"libc.so*",        "libc-*.so",     "libpthread.so*",
                                               "libpthread-*.so", "libstdc++.so*", "libc++*.so*",
                                               "ld-linux*",       "ld-*.so*",      "libgcc_s.so*"};

bool glob(const std::string& pattern, const std::string& text) {
  return !text.empty() && ::fnmatch(pattern.c_str(), text.c_str(), 0) == 0;
}

}  // namespace

ThreadClassRule parseThreadClassRule(std::string_view text) {
  const auto eq = text.find('=');
  if (eq == std::string_view::npos || eq == 0 || eq + 1 == text.size())
    throw std::invalid_argument(fmt::format("'{}': expected CLASS=PATTERN, CLASS one of main, worker, helper", text));
  const auto cls = storage::parseThreadClass(text.substr(0, eq));
  if (!cls)
    throw std::invalid_argument(
        fmt::format("'{}': unknown thread class '{}' (main, worker, helper)", text, text.substr(0, eq)));
  return {*cls, std::string(text.substr(eq + 1))};
}

std::vector<storage::ThreadClassInfo> classifyThreads(const std::vector<ThreadFeatures>& threads,
                                                      const ThreadClassOptions& options) {
  std::map<std::string, std::uint64_t> busiest;  // process -> most effort of one of its threads
  for (const auto& t : threads) {
    auto& b = busiest[t.process];
    b = std::max(b, t.work + t.waited);
  }
  std::vector<storage::ThreadClassInfo> out;
  out.reserve(threads.size());
  for (const auto& t : threads) {
    storage::ThreadClassInfo info;
    info.entry = t.entry;
    const std::string module = baseName(t.entryModule);
    auto decide = [&]() {
      for (const auto& rule : options.rules) {
        if (glob(rule.pattern, t.entry) || glob(rule.pattern, module)) {
          info.threadClass = rule.threadClass;
          info.reason = fmt::format("--thread-class {}={}", storage::toString(rule.threadClass), rule.pattern);
          return;
        }
      }
      if (t.initialThread) {
        info.threadClass = storage::ThreadClass::Main;
        info.reason = "the process's initial thread";
        return;
      }
      for (const char* pattern : kRuntimeHelperModules) {
        if (glob(pattern, module)) {
          info.threadClass = storage::ThreadClass::Helper;
          info.reason = fmt::format("starts in the runtime library {}", module);
          return;
        }
      }
      const std::uint64_t most = busiest[t.process];
      const std::uint64_t effort = t.work + t.waited;
      if (options.helperFraction > 0 &&
          static_cast<double>(effort) < options.helperFraction * static_cast<double>(most)) {
        info.threadClass = storage::ThreadClass::Helper;
        info.reason = fmt::format("{} samples{}, under {:g} % of its process's busiest thread ({})", effort,
                                  t.waited ? " of work and waits" : "", 100 * options.helperFraction, most);
        return;
      }
      info.threadClass = storage::ThreadClass::Worker;
      info.reason = t.waited ? fmt::format("{} samples of its own work, {} of waits in the program's synchronization",
                                           t.work, t.waited)
                             : fmt::format("{} samples of its own work", t.work);
    };
    decide();
    out.push_back(std::move(info));
  }
  return out;
}

bool isProgramWaitMetric(std::string_view name) {
  return name == "sync-wait" || name == "lock-wait" || name == "mpi-wait";
}

bool EntryTracker::isThreadStart(std::uint32_t name, std::uint32_t module) {
  auto [it, fresh] = startNames_.try_emplace(std::uint64_t{name} << 32 | module, false);
  if (fresh) {
    const std::string& text = strings_.text(name);
    for (const char* entry : kThreadEntries)
      if (text == entry) it->second = true;
    const std::string file = baseName(strings_.text(module));
    for (const char* pattern : kPassThroughModules)
      if (glob(pattern, file)) it->second = true;
    if (file == kPlaceholderModuleName) it->second = true;  // stands for no code: no thread's own
  }
  return it->second;
}

namespace {

// Free tables of this thread: a tracker takes one and gives it back (a pool, not one table, in
// case a thread runs a second profile inside the first's work).
std::vector<std::unique_ptr<EntryTracker::Table>>& freeTables() {
  thread_local std::vector<std::unique_ptr<EntryTracker::Table>> tables;
  return tables;
}

}  // namespace

EntryTracker::EntryTracker(const StringTable& strings, std::uint64_t numbering) : strings_(strings) {
  auto& pool = freeTables();
  if (pool.empty()) pool.push_back(std::make_unique<Table>());
  // The table that keeps this tree's entries, if the pool has it; else the last one.
  auto it = std::find_if(pool.begin(), pool.end(), [&](const auto& t) { return t->numbering == numbering; });
  if (it == pool.end()) it = pool.end() - 1;
  table_ = std::move(*it);
  pool.erase(it);
  if (table_->numbering != numbering) {  // entries of another tree: none of them holds here
    std::fill(table_->entry.begin(), table_->entry.end(), kUnset);
    table_->numbering = numbering;
  }
}

EntryTracker::~EntryTracker() { freeTables().push_back(std::move(table_)); }

void EntryTracker::learn(std::uint32_t parent, const ScopeKey& key, std::uint32_t child) {
  auto& entry = table_->entry;
  if (child >= entry.size()) entry.resize(std::max<std::size_t>(std::size_t{child} + 1, 2 * entry.size()), kUnset);
  std::uint32_t inherited = kNoIndex;
  if (parent != 0 && parent < entry.size() && entry[parent] != kUnset) inherited = entry[parent];
  if (inherited == kNoIndex && key.kind == ScopeKind::ProcFrame) {
    if (parent == 0 && strings_.text(key.name) == kTruncatedPathsName)
      inherited = kTruncated;
    else if (!isThreadStart(key.name, key.module))
      inherited = child;
  }
  entry[child] = inherited;
}

}  // namespace csp::reduce
