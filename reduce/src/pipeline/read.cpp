// The structure pass: every profile of this rank read through its source, validated, attributed
// and unioned into the local CCT and region union; what later stages need of it is kept.
#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <chrono>

#include "csp/storage/profile_io.hpp"
#include "stages.hpp"

namespace csp::reduce {

namespace {

// A profile holding what its source does not declare: the source is wrong about its format, and
// later stages that trust the declaration would go wrong.
void checkDeclared(const ThreadProfile& p, const SourceProvides& provides, const std::string& name) {
  auto refuse = [&](const char* what) {
    throw storage::ProfileError(name, fmt::format("holds {}, which its format's source does not declare", what));
  };
  if (p.frameKind == FrameKind::Address && !p.addressFrames.empty() && !provides.addressFrames)
    refuse("address frames");
  if (p.frameKind == FrameKind::Symbolic && !p.symbolicFrames.empty() && !provides.symbolicFrames)
    refuse("symbolic frames");
  if (!provides.realMetrics &&
      std::any_of(p.metrics.begin(), p.metrics.end(), [](const auto& m) { return m.valueType == ValueType::Real; }))
    refuse("real-valued metrics");
  if (!provides.regions && p.regions.size() > 1) refuse("regions");
  if (!provides.pathStarts &&
      std::any_of(p.cct.pathStart.begin(), p.cct.pathStart.end(), [](auto s) { return s != PathStart::Unknown; }))
    refuse("path start marks");
  if (!provides.gpuIdentities && std::any_of(p.identity.idTuple.begin(), p.identity.idTuple.end(), [](const auto& e) {
        return e.kind == IdKind::GpuContext || e.kind == IdKind::GpuStream;
      }))
    refuse("GPU identities");
}

}  // namespace

ThreadProfile readInput(const InputProfile& input) {
  ThreadProfile p = input.source->read(input.path);
  const std::string name = input.path;
  storage::validateProfile(p, name);
  checkDeclared(p, input.source->provides(), name);
  return p;
}

namespace stages {

const PerfMap* jitSymbolsOf(Attributor& attributor, const InputProfile& input, const ThreadProfile& profile) {
  const auto file = input.source->jitSymbols(input.path, profile);
  return file.empty() ? nullptr : attributor.perfMap(file);
}

namespace {

// Kept until the database is written, so only what the metadata needs: the executable, the
// command line, the command csp-run ran, the OpenMP settings, the job's rank count and the
// causes of dropped samples (settings). The threads of a run mostly share them
// (CommonIdentities).
void keepMetadataSettings(Identity& identity) {
  std::erase_if(identity.settings, [](const Setting& st) {
    return st.key != "command" && st.key != "idleness" && st.key != "openmp-tool" && st.key != "openmp-runtime" &&
           st.key != "logical-contexts" && st.key != "mpi-ranks" && !st.key.starts_with("dropped-");
  });
}

// Wall nanoseconds the workers spent reading + validating and attributing (the --verbose breakdown).
struct BusyTimes {
  std::atomic<std::int64_t> readNs{0}, attributeNs{0};
  static std::int64_t since(std::chrono::steady_clock::time_point start) {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - start).count();
  }
};

// One profile: its contexts into the local CCT, its regions into the union, and what is kept.
ReadProfile readOne(const InputProfile& input, std::size_t index, Attribution a, LocalCct& localCct,
                    RegionUnion& regions, CommonIdentities& common, MetricLists& metricLists, BusyTimes& busy) {
  const auto start = std::chrono::steady_clock::now();
  ThreadProfile p = readInput(input);
  const auto read = std::chrono::steady_clock::now();
  busy.readNs += BusyTimes::since(start);
  std::uint64_t truncated = 0, scanned = 0, recovered = 0;
  EntryTracker entries(a.strings, localCct.numbering());
  auto lookup = localCct.lookup();
  const auto stmt =
      projectProfile(p, a.strings, a.attributor,
                     [&](std::uint32_t parent, const ScopeKey& key) {
                       const auto child = lookup.child(parent, key);
                       entries.edge(parent, key, child);
                       return child;
                     },
                     {jitSymbolsOf(a.attributor, input, p), &truncated, &scanned, &recovered, a.physical});
  ReadProfile out;
  out.features = threadFeatures(p, input.source->workMetric(), stmt, entries, localCct, a.strings);
  regions.add(p.regions);
  keepMetadataSettings(p.identity);
  out.record.identity.idTuple = std::move(p.identity.idTuple);
  out.record.identity.hostname = std::move(p.identity.hostname);
  out.record.identity.pid = p.identity.pid;
  out.record.identity.common = common.add(p.identity);
  out.record.stats = p.stats;
  out.record.truncatedSamples = truncated;
  out.record.scannedSamples = scanned;
  out.record.recoveredSamples = recovered;
  out.info.input = index;
  out.info.hasRegionEvents = !p.regions.eventTimeNs.empty();
  // A region-less profile's region values are empty: the spill holds all the values pass needs.
  if (a.spill && p.regions.size() <= 1) out.spill = a.spill->put(p.metrics, stmt);
  out.metrics = metricLists.add(std::move(p.metrics));
  busy.attributeNs += BusyTimes::since(read);
  return out;
}

}  // namespace

std::uint32_t CommonIdentities::add(Identity& identity) {
  storage::ByteWriter<std::string> key;
  key.text(identity.executable);
  key.u64(identity.commandLine.size());
  for (const auto& a : identity.commandLine) key.text(a);
  key.u64(identity.settings.size());
  for (const auto& st : identity.settings) {
    key.text(st.key);
    key.text(st.value);
  }
  std::lock_guard lock(mutex_);
  const auto [it, added] = index_.try_emplace(key.take(), static_cast<std::uint32_t>(entries_.size()));
  if (added) {
    Identity& entry = entries_.emplace_back();
    entry.executable = std::move(identity.executable);
    entry.commandLine = std::move(identity.commandLine);
    entry.settings = std::move(identity.settings);
  }
  return it->second;
}

std::uint32_t MetricLists::add(std::vector<MetricDescriptor>&& metrics) {
  std::lock_guard lock(mutex_);
  // Few distinct lists (one per kind of thread of a run, at most): a search is enough.
  for (std::size_t i = 0; i < lists_.size(); ++i)
    if (lists_[i] == metrics) return static_cast<std::uint32_t>(i);
  lists_.push_back(std::move(metrics));
  return static_cast<std::uint32_t>(lists_.size() - 1);
}

std::vector<std::vector<MetricDescriptor>> MetricLists::take() {
  std::lock_guard lock(mutex_);
  return std::move(lists_);
}

std::vector<Identity> CommonIdentities::take() {
  std::lock_guard lock(mutex_);
  index_.clear();
  return std::move(entries_);
}

std::uint64_t BatchClaims::steadyNanoseconds() {
  // CLOCK_MONOTONIC: one clock for every process of a host.
  return static_cast<std::uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
          .count());
}

BatchClaims::BatchClaims(Side lower, Side upper, std::uint64_t* mine, Clock now)
    : mine_(mine ? mine : own_),
      now_(std::move(now)),
      queues_{{lower.queue ? lower.queue : &own_[kWords], lower.neighbour, lower.begin, lower.end, lower.boundary,
               lower.queue != nullptr, lower.queue != nullptr},
              {upper.queue ? upper.queue : &own_[kWords + 1], upper.neighbour, upper.begin, upper.end, upper.boundary,
               false, upper.queue != nullptr}} {
  if (lower.end != upper.begin || lower.begin > lower.end || upper.begin > upper.end)
    throw std::logic_error("batch claims: the two sides must meet at the middle");
  for (const auto& q : queues_) {
    if (q.end - q.begin > UINT32_MAX) throw std::logic_error("batch claims: more than 2^32 batches");
    if (q.shared && (q.neighbour == nullptr || q.boundary < q.begin || q.boundary > q.end))
      throw std::logic_error("batch claims: a shared side needs its neighbour and a boundary inside it");
  }
  const std::uint64_t start = std::max<std::uint64_t>(now_(), 1);
  std::atomic_ref<std::uint64_t>(mine_[kLast]).store(start);
  std::atomic_ref<std::uint64_t>(mine_[kStart]).store(start);
}

std::uint64_t BatchClaims::taken(const Queue& q, bool top) {
  const std::uint64_t w = std::atomic_ref<std::uint64_t>(*q.word).load();
  return top ? w >> 32 : w & UINT32_MAX;
}

// Taking batch b of the neighbour's share now: this rank ends after its claimed batches and b,
// the neighbour after its own and the `unclaimed` left, b among them, at the seconds per batch
// each has shown so far. Worth it when this rank would still end first, and the neighbour is
// clearly the slower (kSlowerBy): the metrics work follows the batches, and only a lasting
// difference (a core shared with another program) still holds in the metrics phase. A rank's
// seconds per batch are those of the batches it has finished (from its start to the end of its
// last one), or the time its current batch has taken so far if that is longer: time since the
// start over the batches finished would count the current batch's part as if it were the
// finished ones' (a neighbour half-way through its seventh batch would look 8 % slower than it
// is, which with the passing differences of a virtual machine's cores moved batches between
// ranks of the same speed). A neighbour that has not begun reading gets nothing more; one that
// has read no batch yet has taken at least as long for its first as it has been reading.
bool BatchClaims::worthTaking(const Queue& q, std::uint64_t unclaimed) const {
  auto load = [](std::uint64_t* w, Word i) { return std::atomic_ref<std::uint64_t>(w[i]).load(); };
  const std::uint64_t theirStart = load(q.neighbour, kStart);
  if (theirStart == 0) return true;
  const std::uint64_t now = now_();
  auto since = [now](std::uint64_t t) { return now > t ? static_cast<double>(now - t) : 0.0; };
  auto perBatch = [&](std::uint64_t* words) {
    // finished() counts a batch before it publishes its end, and the end is read here before
    // the count: a pair read across a finished() holds the end of the batch before with one batch
    // more, a rank that looks faster than it is (never one that looks slower).
    const std::uint64_t start = load(words, kStart), last = std::max(load(words, kLast), start);
    const std::uint64_t done = load(words, kDone);
    const double finished = done > 0 ? static_cast<double>(last - start) / static_cast<double>(done) : 0.0;
    return std::max(finished, since(last));
  };
  const double theirs = perBatch(q.neighbour);
  const std::uint64_t myDone = load(mine_, kDone);
  const double mine = myDone > 0 ? perBatch(mine_) : theirs;
  const auto myClaims = static_cast<double>(load(mine_, kClaimed) + 1);
  const auto theirClaims = static_cast<double>(load(q.neighbour, kClaimed) + unclaimed);
  return theirs > kSlowerBy * mine && myClaims * mine < theirClaims * theirs;
}

std::optional<std::size_t> BatchClaims::take(Queue& q) {
  if (q.closed) return std::nullopt;
  std::atomic_ref<std::uint64_t> word(*q.word);
  std::uint64_t w = word.load();
  for (;;) {
    const std::uint64_t bottom = w & UINT32_MAX, top = w >> 32, size = q.end - q.begin;
    if (bottom + top >= size) return std::nullopt;
    const std::size_t b = q.fromTop ? q.end - 1 - top : q.begin + bottom;
    const bool theirs = q.shared && (q.fromTop ? b < q.boundary : b >= q.boundary);
    if (theirs && !worthTaking(q, size - bottom - top)) {
      q.closed = true;
      return std::nullopt;
    }
    if (word.compare_exchange_weak(w, q.fromTop ? w + (std::uint64_t{1} << 32) : w + 1)) {
      std::atomic_ref<std::uint64_t>(mine_[kClaimed]).fetch_add(1);
      return b;
    }
  }
}

std::optional<std::size_t> BatchClaims::next() {
  for (auto& q : queues_)
    if (!q.shared)
      if (const auto b = take(q)) return b;
  for (std::size_t k = 0; k < 2; ++k) {
    const std::size_t s = (turn_ + k) % 2;
    if (!queues_[s].shared) continue;
    if (const auto b = take(queues_[s])) {
      turn_ = 1 - s;
      return b;
    }
  }
  return std::nullopt;
}

void BatchClaims::finished() {
  std::atomic_ref<std::uint64_t>(mine_[kDone]).fetch_add(1);
  std::atomic_ref<std::uint64_t>(mine_[kLast]).store(now_());
}

std::size_t BatchClaims::first() const {
  const Queue& q = queues_[0];
  return q.fromTop ? q.end - taken(q, true) : q.begin;
}

std::size_t BatchClaims::last() const {
  const Queue& q = queues_[1];
  return q.begin + taken(q, false);
}

ReadResult readAndAttribute(Discovery& discovery, const PipelineOptions& options, Workers& workers,
                            Attribution attribution, LocalCct& localCct, RegionUnion& regions, SpillFile& kept,
                            const Comm::NeighbourWords& words) {
  Stopwatch watch;
  // Both ranks of a pair see each other's words, so they agree on whether they share the interval
  // between their middles; if not, each reads its own part of it, up to their shares' boundary.
  using W = BatchClaims::Word;
  const BatchClaims::Side lower =
      words.lower ? BatchClaims::Side{words.lower + W::kQueue, words.lower, discovery.lowerMiddle, discovery.middle,
                                      discovery.shareLow}
                  : BatchClaims::Side{nullptr, nullptr, discovery.shareLow, discovery.middle, discovery.shareLow};
  const BatchClaims::Side upper =
      words.upper ? BatchClaims::Side{words.mine + W::kQueue, words.upper, discovery.middle, discovery.upperMiddle,
                                      discovery.shareHigh}
                  : BatchClaims::Side{nullptr, nullptr, discovery.middle, discovery.shareHigh, discovery.shareHigh};
  BatchClaims claims(lower, upper, words.mine);
  ReadResult out;
  out.profiles.assign(discovery.end - discovery.begin, KeptProfile{});  // MT: one element per worker iteration
  std::mutex errorsMutex;
  std::vector<std::string> errors;  // MT: under errorsMutex, as out.skipped
  BusyTimes busy;
  CommonIdentities common;
  MetricLists metricLists;
  const std::size_t share = discovery.firstInputOf(discovery.shareHigh) - discovery.firstInputOf(discovery.shareLow);
  workers.begin("read + attribute", share);
  std::atomic<std::uint64_t> done{0};
  while (const auto b = claims.next()) {
    const std::size_t first = discovery.firstInputOf(*b), count = discovery.firstInputOf(*b + 1) - first;
    workers.forEach(
        count,
        [&](std::size_t k) {
          const std::size_t i = first + k - discovery.begin;
          const auto input = discovery.input(first + k);
          try {
            const ReadProfile profile =
                readOne(input, first + k, attribution, localCct, regions, common, metricLists, busy);
            const std::string bytes = encodeReadProfile(profile);
            const SpillRef where = kept.write(bytes.data(), bytes.size());
            out.profiles[i] = {where.offset, static_cast<std::uint32_t>(where.size), profile.metrics};
          } catch (const storage::ProfileError& e) {
            std::lock_guard lock(errorsMutex);
            if (options.skipInvalid)
              out.skipped.push_back({e.file(), e.defect()});
            else
              errors.push_back(e.what());
          } catch (const std::exception& e) {
            std::lock_guard lock(errorsMutex);
            errors.push_back(fmt::format("{}: {}", input.path, e.what()));
          }
        },
        done, share);
    claims.finished();
  }
  workers.end("read + attribute", watch);
  workers.record("  busy reading + validating", 1e-9 * static_cast<double>(busy.readNs.load()));
  workers.record("  busy attributing + merging", 1e-9 * static_cast<double>(busy.attributeNs.load()));
  std::sort(errors.begin(), errors.end());
  throwIfAny(errors);
  std::sort(out.skipped.begin(), out.skipped.end(), [](const auto& a, const auto& b) { return a.path < b.path; });
  // From here on the rank's inputs are the ones it read.
  const std::size_t begin = discovery.firstInputOf(claims.first()), end = discovery.firstInputOf(claims.last());
  if (begin < discovery.begin || end > discovery.end || begin > end)
    throw std::logic_error("read: claimed batches outside the inputs sent");
  out.profiles.erase(out.profiles.begin() + static_cast<std::ptrdiff_t>(end - discovery.begin), out.profiles.end());
  out.profiles.erase(out.profiles.begin(), out.profiles.begin() + static_cast<std::ptrdiff_t>(begin - discovery.begin));
  InputList mine;
  for (std::size_t i = begin; i < end; ++i) mine.add(discovery.input(i));
  mine.shrinkToFit();
  std::swap(discovery.inputs, mine);
  discovery.begin = begin;
  discovery.end = end;
  out.common = common.take();
  out.metricLists = metricLists.take();
  return out;
}

}  // namespace stages

}  // namespace csp::reduce
