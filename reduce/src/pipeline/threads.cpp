// Thread classes (thread_classes.hpp): each profile's features from the structure pass, the
// classification at rank 0 with every process in view.
#include <fmt/format.h>

#include <algorithm>
#include <unordered_map>
#include <utility>

#include "stages.hpp"

namespace csp::reduce::stages {

namespace {

constexpr std::size_t kFewEntries = 16;  // entry procedures a profile's are searched among in a list

// The process of a thread (its process and rank elements, host and pid), and whether it is the
// process's initial thread: thread index 0, or none; a GPU stream or context is no initial thread.
void identify(const Identity& identity, ThreadFeatures& f) {
  for (const auto& e : identity.idTuple)
    if (e.kind == IdKind::Process || e.kind == IdKind::Rank)
      f.process += fmt::format("{}{}.", static_cast<int>(e.kind), e.value);
  f.process += fmt::format("{}:{}", identity.hostname, identity.pid);
  f.initialThread = true;
  for (const auto& e : identity.idTuple) {
    if (e.kind == IdKind::Thread) f.initialThread = e.value == 0;
    if (e.kind == IdKind::GpuContext || e.kind == IdKind::GpuStream) {
      f.initialThread = false;
      break;
    }
  }
}

// The entry procedure: the one under which most work was recorded; ties by name, so that the
// choice does not depend on node ids.
void chooseEntry(const std::vector<std::pair<std::uint32_t, std::uint64_t>>& byEntry, const LocalCct& cct,
                 const StringTable& strings, ThreadFeatures& f) {
  std::uint32_t best = kNoIndex;
  std::uint64_t most = 0;
  for (const auto& [node, samples] : byEntry) {
    const auto key = cct.node(node).key;
    const bool better = samples != most
                            ? samples > most
                            : best == kNoIndex || strings.text(key.name) < strings.text(cct.node(best).key.name);
    if (better) best = node, most = samples;
  }
  if (best == kNoIndex) return;
  const auto key = cct.node(best).key;
  f.entry = strings.text(key.name);
  f.entryModule = strings.text(key.module);
}

}  // namespace

// The thread's work (recorded samples of the work metric, or of every count metric when the
// profile has none) and its entry procedure.
ThreadFeatures threadFeatures(const ThreadProfile& p, const std::string& workMetric, const std::vector<StmtValue>& stmt,
                              const EntryTracker& entries, const LocalCct& cct, const StringTable& strings) {
  ThreadFeatures f;
  identify(p.identity, f);
  std::optional<std::uint16_t> work;
  std::vector<storage::ExactDivisor> period;
  for (std::size_t m = 0; m < p.metrics.size(); ++m) {
    if (!workMetric.empty() && p.metrics[m].name == workMetric) work = static_cast<std::uint16_t>(m);
    period.emplace_back(std::max<std::uint64_t>(p.metrics[m].period, 1));
  }
  // Per metric what its values count for, looked up once per value: the program's own waits
  // (measured with --idleness), work (the work metric's samples, or every count metric's when the
  // profile lacks it); real-valued metrics count for neither.
  constexpr std::uint8_t kWait = 1, kWork = 2;
  std::vector<std::uint8_t> role(p.metrics.size(), 0);
  for (std::size_t m = 0; m < p.metrics.size(); ++m) {
    if (p.metrics[m].valueType != ValueType::Count) continue;
    role[m] = static_cast<std::uint8_t>((isProgramWaitMetric(p.metrics[m].name) ? kWait : 0) |
                                        (!work || m == *work ? kWork : 0));
  }
  std::uint64_t waitedNs = 0;
  // Samples per entry procedure: a profile has a few, and its statements come by node, so most
  // values go to the same entry as the one before.
  std::vector<std::pair<std::uint32_t, std::uint64_t>> byEntry;
  std::unordered_map<std::uint32_t, std::size_t> entryIndex;  // only when there are many
  auto slotOf = [&](std::uint32_t entry) {
    if (byEntry.size() <= kFewEntries) {
      for (std::size_t i = 0; i < byEntry.size(); ++i)
        if (byEntry[i].first == entry) return i;
    } else {
      if (entryIndex.empty())
        for (std::size_t i = 0; i < byEntry.size(); ++i) entryIndex.emplace(byEntry[i].first, i);
      if (const auto it = entryIndex.find(entry); it != entryIndex.end()) return it->second;
      entryIndex.emplace(entry, byEntry.size());
    }
    byEntry.emplace_back(entry, 0);
    return byEntry.size() - 1;
  };
  std::size_t last = 0;
  for (const auto& v : stmt) {
    const std::uint8_t r = role[v.metric];
    if (r & kWait) waitedNs += v.value;
    if ((r & kWork) == 0) continue;
    const std::uint64_t samples = period[v.metric].divide(v.value);
    f.work += samples;
    const auto entry = entries.entryOf(v.node);
    if (entry == kNoIndex) continue;
    if (last >= byEntry.size() || byEntry[last].first != entry) last = slotOf(entry);
    byEntry[last].second += samples;
  }
  std::sort(byEntry.begin(), byEntry.end());
  // A thread that waits in the program's locks, barriers or MPI calls takes part in the work
  // (it is a lock's waiter, not a runtime's idle helper): its waits count as work, in samples.
  if (work) f.waited = waitedNs / std::max<std::uint64_t>(p.metrics[*work].period, 1);
  chooseEntry(byEntry, cct, strings, f);
  return f;
}

ThreadClassification classifyThreads(const Comm& comm, ProfileTable& table, const ThreadClassOptions& options,
                                     SpillFile& kept) {
  auto parts = comm.gather(table.features);
  std::vector<std::byte>().swap(table.features);  // not needed any more
  ThreadClassification out;
  std::vector<std::byte> classes;
  if (comm.rank() == 0) {
    std::vector<ThreadFeatures> all;
    for (const auto& part : parts) {
      Unpacker u(part);
      for (auto n = u.u64(); n > 0; --n) all.push_back(getFeatures(u));
    }
    std::vector<std::vector<std::byte>>().swap(parts);  // unpacked
    const auto infos = reduce::classifyThreads(all, options);
    std::vector<ThreadFeatures>().swap(all);
    storage::ByteWriter<std::string> packed;
    for (const auto& c : infos) {
      classes.push_back(static_cast<std::byte>(c.threadClass));
      packed.text(c.entry);
      packed.text(c.reason);
    }
    const std::string texts = packed.take();
    out.kept = &kept;
    out.entriesAndReasons = kept.write(texts.data(), texts.size());
  }
  comm.broadcast(classes);
  out.classOf.resize(classes.size());
  for (std::size_t i = 0; i < classes.size(); ++i) out.classOf[i] = static_cast<std::uint8_t>(classes[i]);
  return out;
}

std::vector<storage::ThreadClassInfo> ThreadClassification::infos() const {
  std::vector<storage::ThreadClassInfo> out;
  if (kept == nullptr) return out;  // not rank 0
  out.resize(classOf.size());
  std::vector<char> texts;
  kept->read(entriesAndReasons, texts);
  storage::ByteReader<std::runtime_error> in(std::string_view(texts.data(), entriesAndReasons.size), "thread classes");
  for (std::size_t i = 0; i < out.size(); ++i) {
    out[i].threadClass = static_cast<storage::ThreadClass>(classOf[i]);
    out[i].entry = in.text();
    out[i].reason = in.text();
  }
  in.expectDone();
  return out;
}

}  // namespace csp::reduce::stages
