#include "csp/reduce/pipeline.hpp"

#include <fmt/format.h>
#include <tbb/enumerable_thread_specific.h>
#include <tbb/parallel_for.h>
#include <tbb/task_arena.h>

#include <sys/stat.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <future>
#include <map>
#include <mutex>
#include <optional>
#include <thread>
#include <tuple>

#include "csp/metrics/expression.hpp"
#include "csp/reduce/overhead.hpp"
#include "csp/storage/profile_io.hpp"

namespace csp::reduce {

namespace fs = std::filesystem;

namespace {

__extension__ using Uint128 = unsigned __int128;

constexpr std::size_t kMaxErrorsPerRank = 5;

class Stopwatch {
 public:
  double seconds() const { return std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count(); }

 private:
  std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now();
};

// A metric as first seen, with the profile it was first seen in (for messages).
struct MetricOrigin {
  MetricDescriptor descriptor;
  std::string file;
};

std::vector<std::byte> packMetrics(const std::vector<MetricOrigin>& metrics) {
  Packer p;
  p.u64(metrics.size());
  for (const auto& [m, file] : metrics) {
    p.text(m.name);
    p.text(m.unit);
    p.u64(static_cast<std::uint64_t>(m.kind));
    p.u64(m.period);
    p.text(m.description);
    p.text(file);
  }
  return p.take();
}

std::vector<MetricOrigin> unpackMetrics(const std::vector<std::byte>& bytes) {
  Unpacker u(bytes);
  std::vector<MetricOrigin> out(u.u64());
  for (auto& [m, file] : out) {
    m.name = u.text();
    m.unit = u.text();
    m.kind = static_cast<MetricKind>(u.u64());
    m.period = u.u64();
    m.description = u.text();
    file = u.text();
  }
  return out;
}

std::string describeMetric(const MetricDescriptor& m) {
  return fmt::format("{}{}", m.kind == MetricKind::Sampled ? "sampled" : "counted",
                     m.unit.empty() ? std::string() : ", unit " + m.unit);
}

// Appends the metrics not yet in `into` (by name), keeping first-appearance order. Metrics are
// merged by name, so one name must mean one thing: the same kind and unit everywhere (the period
// may differ: values are count x period already); otherwise values of different quantities
// would be added up.
void mergeMetric(std::vector<MetricOrigin>& into, const MetricOrigin& m) {
  const auto it =
      std::find_if(into.begin(), into.end(), [&](const auto& x) { return x.descriptor.name == m.descriptor.name; });
  if (it == into.end()) {
    into.push_back(m);
    return;
  }
  if (it->descriptor.kind != m.descriptor.kind || it->descriptor.unit != m.descriptor.unit)
    throw PipelineError(
        fmt::format("metric '{}' means different things in {} ({}) and {} ({}): these profiles are "
                    "not from compatible measurements",
                    m.descriptor.name, it->file, describeMetric(it->descriptor), m.file, describeMetric(m.descriptor)));
}

// Region trees are small (tens to thousands of nodes): a map under a mutex is enough.
class RegionUnion {
 public:
  RegionUnion() { nodes_.push_back({kNoIndex, "", 0}); }
  std::uint32_t child(std::uint32_t parent, const std::string& name, std::uint64_t dynamicId) {
    std::lock_guard lock(mutex_);
    auto [it, fresh] =
        index_.try_emplace(std::make_tuple(parent, name, dynamicId), static_cast<std::uint32_t>(nodes_.size()));
    if (fresh) nodes_.push_back({parent, name, dynamicId});
    return it->second;
  }
  // Adds a profile's region tree; returns the union id of each of its nodes.
  std::vector<std::uint32_t> add(const RegionProfile& r) {
    std::vector<std::uint32_t> id(r.size(), 0);
    for (std::size_t i = 1; i < r.size(); ++i) id[i] = child(id[r.parent[i]], r.names[r.staticId[i]], r.dynamicId[i]);
    return id;
  }
  std::vector<std::byte> serialize() const {
    Packer p;
    p.u64(nodes_.size());
    for (const auto& n : nodes_) {
      p.u64(n.parent);
      p.text(n.name);
      p.u64(n.dynamicId);
    }
    return p.take();
  }
  static std::vector<RegionTreeNode> deserialize(const std::vector<std::byte>& bytes) {
    Unpacker u(bytes);
    std::vector<RegionTreeNode> out(u.u64());
    for (std::size_t i = 0; i < out.size(); ++i) {
      out[i].parent = static_cast<std::uint32_t>(u.u64());
      out[i].name = u.text();
      out[i].dynamicId = u.u64();
      if (i == 0 ? out[i].parent != kNoIndex : out[i].parent >= i) throw std::runtime_error("region tree: bad parent");
    }
    return out;
  }
  void merge(const std::vector<RegionTreeNode>& other) {
    std::vector<std::uint32_t> id(other.size(), 0);
    for (std::size_t i = 1; i < other.size(); ++i)
      id[i] = child(id[other[i].parent], other[i].name, other[i].dynamicId);
  }
  // Deterministic preorder numbering.
  std::vector<RegionTreeNode> finalTree() const {
    std::vector<std::vector<std::uint32_t>> children(nodes_.size());
    for (std::size_t i = 1; i < nodes_.size(); ++i) children[nodes_[i].parent].push_back(static_cast<std::uint32_t>(i));
    for (auto& c : children)
      std::sort(c.begin(), c.end(), [&](auto a, auto b) {
        return std::tie(nodes_[a].name, nodes_[a].dynamicId) < std::tie(nodes_[b].name, nodes_[b].dynamicId);
      });
    std::vector<RegionTreeNode> out;
    std::vector<std::uint32_t> finalId(nodes_.size(), kNoIndex);
    std::vector<std::uint32_t> stack{0};
    while (!stack.empty()) {
      const auto id = stack.back();
      stack.pop_back();
      finalId[id] = static_cast<std::uint32_t>(out.size());
      out.push_back({id == 0 ? kNoIndex : finalId[nodes_[id].parent], nodes_[id].name, nodes_[id].dynamicId});
      for (auto it = children[id].rbegin(); it != children[id].rend(); ++it) stack.push_back(*it);
    }
    return out;
  }

 private:
  std::mutex mutex_;
  std::vector<RegionTreeNode> nodes_;
  std::map<std::tuple<std::uint32_t, std::string, std::uint64_t>, std::uint32_t> index_;
};

// Appends per-thread derived metrics to a profile's values, node by node: inputs are the raw
// values of the same node and scope (absent = 0), evaluated where at least one input is
// present; a non-finite result leaves the metric absent there.
template <typename Derived>
ThreadValues withDerived(const ThreadValues& v, const std::vector<Derived>& derived, std::size_t rawMetrics) {
  ThreadValues out;
  std::vector<double> e(rawMetrics), inc(rawMetrics), args;
  std::vector<bool> presentE(rawMetrics), presentI(rawMetrics);
  auto bits = [](double x) {
    std::uint64_t b;
    std::memcpy(&b, &x, sizeof b);
    return b;
  };
  for (std::size_t k = 0; k < v.size();) {
    const auto node = v.node[k];
    std::fill(e.begin(), e.end(), 0.0);
    std::fill(inc.begin(), inc.end(), 0.0);
    std::fill(presentE.begin(), presentE.end(), false);
    std::fill(presentI.begin(), presentI.end(), false);
    for (; k < v.size() && v.node[k] == node; ++k) {
      out.node.push_back(node);
      out.metric.push_back(v.metric[k]);
      out.exclusive.push_back(v.exclusive[k]);
      out.inclusive.push_back(v.inclusive[k]);
      e[v.metric[k]] = static_cast<double>(v.exclusive[k]);
      inc[v.metric[k]] = static_cast<double>(v.inclusive[k]);
      presentE[v.metric[k]] = v.exclusive[k] != 0;
      presentI[v.metric[k]] = v.inclusive[k] != 0;
    }
    for (std::size_t d = 0; d < derived.size(); ++d) {
      std::optional<double> de, di;
      const auto& inputs = derived[d].inputs;
      if (std::any_of(inputs.begin(), inputs.end(), [&](auto m) { return presentE[m]; })) {
        args.clear();
        for (auto m : inputs) args.push_back(e[m]);
        de = derived[d].metric.evaluate(args);
      }
      if (std::any_of(inputs.begin(), inputs.end(), [&](auto m) { return presentI[m]; })) {
        args.clear();
        for (auto m : inputs) args.push_back(inc[m]);
        di = derived[d].metric.evaluate(args);
      }
      const std::uint64_t be = de ? bits(*de) : 0, bi = di ? bits(*di) : 0;
      if (be == 0 && bi == 0) continue;  // +0.0 is absence, like a raw zero
      out.node.push_back(node);
      out.metric.push_back(static_cast<std::uint16_t>(rawMetrics + d));
      out.exclusive.push_back(be);
      out.inclusive.push_back(bi);
    }
  }
  return out;
}

// The JIT symbols of the profile's process: the copy of its perf map that the measurement left
// next to the profile (docs/measurement.md, "JIT code").
const PerfMap* jitSymbols(Attributor& attributor, const fs::path& profile, const ThreadProfile& p) {
  if (p.frameKind != FrameKind::Address) return nullptr;
  return attributor.perfMap(profile.parent_path() / storage::perfMapFileName(p.identity.pid, p.identity.hostname));
}

// The thread's work (recorded cpu-time samples, or samples of every metric when it has no
// cpu-time) and its entry procedure: the one under which most of that work was recorded.
ThreadFeatures threadFeatures(const ThreadProfile& p, const std::vector<StmtValue>& stmt, const EntryTracker& entries,
                              const LocalCct& cct, const StringTable& strings) {
  ThreadFeatures f;
  for (const auto& e : p.identity.idTuple)
    if (e.kind == IdKind::Process || e.kind == IdKind::Rank)
      f.process += fmt::format("{}{}.", static_cast<int>(e.kind), e.value);
  f.process += fmt::format("{}:{}", p.identity.hostname, p.identity.pid);
  f.initialThread = true;
  for (const auto& e : p.identity.idTuple)
    if (e.kind == IdKind::Thread) f.initialThread = e.value == 0;
  std::optional<std::uint16_t> cpu;
  std::vector<char> wait(p.metrics.size(), 0);  // the program's own waits, measured with --idleness
  for (std::size_t m = 0; m < p.metrics.size(); ++m) {
    if (p.metrics[m].name == "cpu-time") cpu = static_cast<std::uint16_t>(m);
    wait[m] = isProgramWaitMetric(p.metrics[m].name);
  }
  std::uint64_t waitedNs = 0;
  std::map<std::uint32_t, std::uint64_t> byEntry;
  for (const auto& v : stmt) {
    if (wait[v.metric]) waitedNs += v.value;
    if (cpu && v.metric != *cpu) continue;
    const std::uint64_t period = std::max<std::uint64_t>(p.metrics[v.metric].period, 1);
    const std::uint64_t samples = v.value / period;
    f.work += samples;
    if (const auto entry = entries.entryOf(v.node); entry != kNoIndex) byEntry[entry] += samples;
  }
  // A thread that waits in the program's locks, barriers or MPI calls takes part in the work
  // (it is a lock's waiter, not a runtime's idle helper): its waits count as work, in samples.
  if (cpu) f.waited = waitedNs / std::max<std::uint64_t>(p.metrics[*cpu].period, 1);
  std::uint32_t best = kNoIndex;
  std::uint64_t most = 0;
  for (const auto& [node, samples] : byEntry) {
    const auto key = cct.node(node).key;
    const auto better = [&] {  // ties by name, so that the choice does not depend on node ids
      if (samples != most) return samples > most;
      return best == kNoIndex || strings.text(key.name) < strings.text(cct.node(best).key.name);
    };
    if (better()) best = node, most = samples;
  }
  if (best != kNoIndex) {
    const auto key = cct.node(best).key;
    f.entry = strings.text(key.name);
    f.entryModule = strings.text(key.module);
  }
  return f;
}

}  // namespace

struct Pipeline::Impl {
  const Comm& comm;
  PipelineOptions options;
  ProgressSink* progress;
  StringTable strings;
  Attributor attributor;
  tbb::task_arena arena;

  std::vector<InputProfile> inputs;
  std::size_t begin = 0, end = 0;  // this rank's input range

  // Per local input (index - begin): set in the structure pass.
  std::vector<std::optional<ProfileInfo>> local;
  std::vector<std::vector<MetricDescriptor>> localMetrics;
  std::vector<ProfileInfo> localProfiles;
  std::vector<std::size_t> localInputOf;  // local valid profile -> input index
  std::vector<SkippedInput> skipped;
  std::vector<std::string> leftoverTemporaries;  // rank 0
  std::vector<MetricDescriptor> metrics;
  std::size_t rawMetrics = 0;
  struct Derived {
    metrics::PerThreadDerivedMetric metric;
    std::vector<std::uint16_t> inputs;  // raw metric ids
  };
  std::vector<Derived> derived;
  // Post-processing metrics of idleness accounting (docs/postprocessing.md, "Work, idleness,
  // overhead"): overhead = work in runtime code, effort = work + idleness. kNoMetric when absent.
  static constexpr std::uint16_t kNoMetric = 0xFFFF;
  OverheadRules overheadRules;
  std::uint16_t workMetric = kNoMetric, idlenessMetric = kNoMetric, overheadMetric = kNoMetric,
                effortMetric = kNoMetric;
  std::vector<std::uint8_t> overheadNode;  // per final CCT node
  std::uint32_t profileCount = 0;
  std::uint32_t firstId = 0;
  FinalCct cct;
  std::vector<RegionTreeNode> regions;
  std::map<std::tuple<std::uint32_t, std::string, std::uint64_t>, std::uint32_t> regionIndex;
  std::vector<PhaseTime> phases;
  std::vector<SkippedInput> localSkipped;               // this rank's, until shared
  std::vector<std::uint8_t> threadClassOf;              // all profiles
  std::vector<storage::ThreadClassInfo> threadClasses;  // all profiles, rank 0

  // The steps of discover() and buildStructure(), in order.
  std::vector<InputProfile> listInputs();  // rank 0
  std::uint64_t sourceIndex(const ProfileSource* source) const;
  void partition();
  void readAndAttribute(LocalCct& localCct, RegionUnion& regionUnion);
  void shareSkipped();
  void assignProfileIds();
  void checkDistinctIdentities();
  void classifyThreads();
  void unifyMetrics();
  void addStateMetrics();
  void addDerivedMetrics();
  void unifyCct(LocalCct& localCct);
  void unifyRegions(const RegionUnion& regionUnion);

  Impl(const Comm& c, PipelineOptions o, ProgressSink* p)
      : comm(c),
        options(std::move(o)),
        progress(comm.rank() == 0 ? p : nullptr),
        attributor(strings, options.attribution),
        arena(options.jobs ? static_cast<int>(options.jobs) : tbb::task_arena::automatic) {
    try {
      if (!options.overheadRules.empty()) overheadRules = OverheadRules::parse(options.overheadRules);
    } catch (const std::invalid_argument& e) {
      throw PipelineError(e.what());
    }
  }

  void beginPhase(const std::string& name, std::uint64_t total) {
    if (progress) progress->begin(name, total);
  }
  void endPhase(const std::string& name, const Stopwatch& watch) {
    if (progress) progress->end();
    phases.push_back({name, watch.seconds()});
  }

  // Parallel loop over this rank's inputs [0, count) with progress from rank 0's own share.
  template <typename F>
  void parallelOverLocal(std::size_t count, F&& body) {
    std::atomic<std::uint64_t> done{0};
    arena.execute([&] {
      tbb::parallel_for(tbb::blocked_range<std::size_t>(0, count, 1), [&](const tbb::blocked_range<std::size_t>& r) {
        for (std::size_t i = r.begin(); i != r.end(); ++i) {
          body(i);
          const auto d = ++done;
          // Updates come from workers; the sink only redraws when the percentage moves.
          if (progress && std::this_thread::get_id() == mainThread) progress->update(d);
        }
      });
    });
    if (progress) progress->update(count);
  }
  std::thread::id mainThread = std::this_thread::get_id();
};

Pipeline::Pipeline(const Comm& comm, PipelineOptions options, ProgressSink* progress)
    : impl_(std::make_unique<Impl>(comm, std::move(options), progress)) {}

Pipeline::~Pipeline() = default;

namespace {

// A stage's local errors end it on this rank: thrown as one PipelineError (the first few
// messages), which runProf turns into the job-wide failure (mpi_comm.hpp).
void throwIfAny(const std::vector<std::string>& errors) {
  if (errors.empty()) return;
  std::string message;
  const std::size_t shown = std::min(errors.size(), kMaxErrorsPerRank);
  for (std::size_t i = 0; i < shown; ++i) {
    if (i) message.push_back('\n');
    message += errors[i];
  }
  if (errors.size() > shown) message += fmt::format("\n(and {} more errors on this process)", errors.size() - shown);
  throw PipelineError(message);
}

}  // namespace

void Pipeline::discover() {
  Impl& s = *impl_;
  Stopwatch watch;
  // Rank 0 lists, everyone receives the same list: paths, sizes and each file's source.
  Packer packed;
  if (s.comm.rank() == 0) {
    const auto found = s.listInputs();
    packed.u64(found.size());
    for (const auto& f : found) {
      packed.text(f.path.string());
      packed.u64(f.bytes);
      packed.u64(s.sourceIndex(f.source));
    }
  }
  auto bytes = packed.take();
  s.comm.broadcast(bytes);
  Unpacker u(bytes);
  s.inputs.resize(u.u64());
  for (auto& f : s.inputs) {
    f.path = u.text();
    f.bytes = u.u64();
    f.source = profileSources().at(u.u64());
  }
  s.partition();
  s.phases.push_back({"discover", watch.seconds()});
}

namespace {

// Temporaries that a measurement killed while writing left in a measurement directory: the
// profile (or perf-map copy) each was to become is missing. Writers that can write without a
// name leave none (docs/profile-format.md).
std::vector<std::string> temporariesIn(const fs::path& dir) {
  std::vector<std::string> found;
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    const auto tmp = name.find(".tmp.");
    if (tmp == std::string::npos) continue;
    const std::string_view stem(name.data(), tmp);
    if (stem.ends_with(storage::kProfileExtension) || stem.ends_with(storage::kBundleExtension) ||
        (stem.starts_with("perf-") && stem.ends_with(".map")))
      found.push_back(it->path().string());
  }
  std::sort(found.begin(), found.end());
  return found;
}

}  // namespace

std::vector<InputProfile> Pipeline::Impl::listInputs() {
  std::vector<std::string> errors;
  std::vector<InputProfile> found;
  for (const auto& input : options.inputs) {
    std::error_code ec;
    if (fs::is_directory(input, ec)) {
      try {
        std::size_t before = found.size();
        for (const auto* source : profileSources())
          for (const auto& f : source->list(input)) found.push_back({f, source->bytes(f), source});
        if (found.size() == before)
          errors.push_back(
              fmt::format("{}: no profiles ({}) in this directory", input.string(), knownProfilePatterns()));
        for (auto& t : temporariesIn(input)) leftoverTemporaries.push_back(std::move(t));
      } catch (const std::exception& e) {
        errors.push_back(e.what());
      }
    } else if (const auto* source = sourceFor(input);
               source && fs::exists(fs::symlink_status(input, ec)) && !fs::is_directory(input, ec)) {
      found.push_back({input, source->bytes(input), source});
    } else if (!fs::exists(input, ec)) {
      errors.push_back(fmt::format("{}: no such file or directory", input.string()));
    } else {
      errors.push_back(fmt::format("{}: neither a measurement directory nor a profile ({})", input.string(),
                                   knownProfilePatterns()));
    }
  }
  if (options.inputs.empty()) errors.push_back("no measurement directory given");
  throwIfAny(errors);
  // A file listed twice (a directory given twice, a profile given beside its directory, links)
  // would count every value twice.
  std::map<std::tuple<dev_t, ino_t, std::uint64_t>, std::string> seen;
  for (const auto& f : found) {
    const auto [file, offset] = f.source->place(f.path);  // a bundle holds several profiles
    struct stat st {};
    if (::stat(file.c_str(), &st) != 0) continue;  // reported when it is read
    auto [it, fresh] = seen.try_emplace({st.st_dev, st.st_ino, offset}, f.path.string());
    if (!fresh)
      errors.push_back(
          fmt::format("{} and {} are the same profile: an input is given twice", it->second, f.path.string()));
  }
  throwIfAny(errors);
  return found;
}

std::uint64_t Pipeline::Impl::sourceIndex(const ProfileSource* source) const {
  const auto& all = profileSources();
  return static_cast<std::uint64_t>(std::find(all.begin(), all.end(), source) - all.begin());
}

// Contiguous ranges of whole batches, balanced by bytes: rank r starts at the first batch whose
// preceding bytes reach r/P of the total. Batches are fixed in input order whatever P is, and the
// database's per-node blocks follow them, so the same inputs give the same keys for any process
// count. Contiguity keeps ids and key ranges per rank sorted.
void Pipeline::Impl::partition() {
  const std::size_t batch = std::max<std::size_t>(options.batchProfiles, 1);
  std::uint64_t total = 0;
  for (const auto& f : inputs) total += f.bytes;
  auto startOf = [&](int r) -> std::size_t {
    if (r >= comm.size()) return inputs.size();
    const Uint128 target = static_cast<Uint128>(total) * static_cast<unsigned>(r) / static_cast<unsigned>(comm.size());
    std::uint64_t before = 0;
    for (std::size_t i = 0; i < inputs.size(); ++i) {
      if (i % batch == 0 && before >= target) return i;
      before += inputs[i].bytes;
    }
    return inputs.size();
  };
  begin = startOf(comm.rank());
  end = startOf(comm.rank() + 1);
}

void Pipeline::buildStructure() {
  Impl& s = *impl_;
  faultPoint(s.comm, "read");
  LocalCct localCct(s.strings);
  RegionUnion regionUnion;
  s.readAndAttribute(localCct, regionUnion);
  Stopwatch unify;
  s.shareSkipped();
  s.assignProfileIds();
  s.checkDistinctIdentities();
  s.classifyThreads();
  s.unifyMetrics();
  s.unifyCct(localCct);
  if (s.overheadMetric != Impl::kNoMetric) s.overheadNode = s.overheadRules.classify(s.cct, s.strings);
  s.unifyRegions(regionUnion);
  s.phases.push_back({"unify structure", unify.seconds()});
}

// Reads this rank's profiles in parallel, attributes them and unions their contexts into the
// local CCT and their region trees into the local region union. Keeps what later stages need
// of each profile (identity, statistics, metric descriptors).
void Pipeline::Impl::readAndAttribute(LocalCct& localCct, RegionUnion& regionUnion) {
  Stopwatch watch;
  const std::size_t count = end - begin;
  local.assign(count, std::nullopt);
  localMetrics.assign(count, {});
  std::mutex errorsMutex;
  std::vector<std::string> errors;
  beginPhase("read + attribute", count);
  parallelOverLocal(count, [&](std::size_t i) {
    const auto& input = inputs[begin + i];
    try {
      ThreadProfile p = input.source->read(input.path);
      std::uint64_t truncated = 0, scanned = 0, recovered = 0;
      EntryTracker entries(strings);
      const auto stmt = projectProfile(p, strings, attributor,
                                       [&](std::uint32_t parent, const ScopeKey& key) {
                                         const auto child = localCct.child(parent, key);
                                         entries.edge(parent, key, child);
                                         return child;
                                       },
                                       {jitSymbols(attributor, input.path, p), &truncated, &scanned, &recovered});
      const ThreadFeatures features = threadFeatures(p, stmt, entries, localCct, strings);
      regionUnion.add(p.regions);
      // Kept for every profile until the database is written, so only what the metadata needs:
      // the executable, the command csp-run ran, the OpenMP settings, the job's rank count and the
      // causes of dropped samples (settings), and a command line only for the first profile of
      // each executable in a row.
      std::erase_if(p.identity.settings, [](const Setting& st) {
        return st.key != "command" && st.key != "idleness" && st.key != "openmp-tool" && st.key != "openmp-runtime" &&
               st.key != "mpi-ranks" && !st.key.starts_with("dropped-");
      });
      local[i] = ProfileInfo{0, std::move(p.identity), p.stats, begin + i, !p.regions.eventTimeNs.empty(), 0, 0, 0, {}};
      local[i]->truncatedSamples = truncated;
      local[i]->scannedSamples = scanned;
      local[i]->recoveredSamples = recovered;
      local[i]->features = features;
      localMetrics[i] = std::move(p.metrics);
    } catch (const storage::ProfileError& e) {
      std::lock_guard lock(errorsMutex);
      if (options.skipInvalid)
        localSkipped.push_back({e.file(), e.defect()});
      else
        errors.push_back(e.what());
    } catch (const std::exception& e) {
      std::lock_guard lock(errorsMutex);
      errors.push_back(fmt::format("{}: {}", input.path.string(), e.what()));
    }
  });
  endPhase("read + attribute", watch);
  std::sort(errors.begin(), errors.end());
  throwIfAny(errors);
  const std::string* lastExecutable = nullptr;
  for (auto& l : local) {
    if (!l) continue;
    if (lastExecutable && *lastExecutable == l->identity.executable) l->identity.commandLine.clear();
    lastExecutable = &l->identity.executable;
  }
}

// Skipped inputs, everywhere, in input order.
void Pipeline::Impl::shareSkipped() {
  Packer p;
  std::sort(localSkipped.begin(), localSkipped.end(), [](const auto& a, const auto& b) { return a.path < b.path; });
  p.u64(localSkipped.size());
  for (const auto& k : localSkipped) {
    p.text(k.path);
    p.text(k.reason);
  }
  for (const auto& part : comm.allgather(p.take())) {
    Unpacker u(part);
    for (auto n = u.u64(); n > 0; --n) {
      SkippedInput k;
      k.path = u.text();
      k.reason = u.text();
      skipped.push_back(std::move(k));
    }
  }
}

// Dense profile ids among valid profiles, in input order.
void Pipeline::Impl::assignProfileIds() {
  std::uint32_t valid = 0;
  for (const auto& l : local) valid += l.has_value();
  Packer p;
  p.u64(valid);
  const auto counts = comm.allgather(p.take());
  std::uint64_t before = 0, all = 0;
  for (int r = 0; r < comm.size(); ++r) {
    Unpacker u(counts[static_cast<std::size_t>(r)]);
    const auto c = u.u64();
    if (r < comm.rank()) before += c;
    all += c;
  }
  if (all > 0xFFFFFFF0ULL) throw PipelineError(fmt::format("{} profiles: more than this format's 2^32 limit", all));
  firstId = static_cast<std::uint32_t>(before);
  profileCount = static_cast<std::uint32_t>(all);
  if (profileCount == 0) throw PipelineError("no readable profiles in the input");
  std::uint32_t next = firstId;
  for (std::size_t i = 0; i < local.size(); ++i) {
    if (!local[i]) continue;
    local[i]->id = next++;
    localProfiles.push_back(*local[i]);
    localInputOf.push_back(begin + i);
  }
}

// Every profile is one thread of one run: two with the same id tuple mean mixed runs or copies,
// whose values would be added up as if they were different threads.
void Pipeline::Impl::checkDistinctIdentities() {
  Packer p;
  p.u64(localProfiles.size());
  for (std::size_t k = 0; k < localProfiles.size(); ++k) {
    p.u64(localInputOf[k]);
    p.u64(localProfiles[k].identity.idTuple.size());
    for (const auto& e : localProfiles[k].identity.idTuple) {
      p.u64(static_cast<std::uint64_t>(e.kind));
      p.u64(e.value);
    }
  }
  const auto parts = comm.gather(p.take());
  if (comm.rank() != 0) return;
  std::vector<std::pair<IdTuple, std::size_t>> all;
  for (const auto& part : parts) {
    Unpacker u(part);
    for (auto n = u.u64(); n > 0; --n) {
      const auto input = static_cast<std::size_t>(u.u64());
      IdTuple tuple(u.u64());
      for (auto& e : tuple) {
        e.kind = static_cast<IdKind>(u.u64());
        e.value = u.u64();
      }
      all.emplace_back(std::move(tuple), input);
    }
  }
  auto key = [](const IdTuple& t) {
    std::vector<std::pair<int, std::uint64_t>> k;
    for (const auto& e : t) k.emplace_back(static_cast<int>(e.kind), e.value);
    return k;
  };
  std::sort(all.begin(), all.end(), [&](const auto& a, const auto& b) {
    return std::make_pair(key(a.first), a.second) < std::make_pair(key(b.first), b.second);
  });
  std::vector<std::string> errors;
  for (std::size_t i = 1; i < all.size(); ++i)
    if (key(all[i].first) == key(all[i - 1].first))
      errors.push_back(fmt::format(
          "{} and {} are the same thread ({}): profiles of different runs are mixed, or "
          "copied; post-process one run at a time",
          inputs[all[i - 1].second].path.string(), inputs[all[i].second].path.string(), formatIdTuple(all[i].first)));
  throwIfAny(errors);
}

// Thread classes (thread_classes.hpp): the features of every profile go to rank 0, which
// classifies them with the whole process in view (a process's threads may lie on several ranks)
// and sends every rank the class of every profile.
void Pipeline::Impl::classifyThreads() {
  Packer p;
  p.u64(localProfiles.size());
  for (const auto& info : localProfiles) {
    const auto& f = info.features;
    p.text(f.process);
    p.u64(f.initialThread ? 1 : 0);
    p.u64(f.work);
    p.u64(f.waited);
    p.text(f.entry);
    p.text(f.entryModule);
  }
  const auto parts = comm.gather(p.take());
  std::vector<std::byte> classes;
  if (comm.rank() == 0) {
    std::vector<ThreadFeatures> all;
    for (const auto& part : parts) {
      Unpacker u(part);
      for (auto n = u.u64(); n > 0; --n) {
        ThreadFeatures f;
        f.process = u.text();
        f.initialThread = u.u64() != 0;
        f.work = u.u64();
        f.waited = u.u64();
        f.entry = u.text();
        f.entryModule = u.text();
        all.push_back(std::move(f));
      }
    }
    threadClasses = reduce::classifyThreads(all, options.threadClasses);
    for (const auto& c : threadClasses) classes.push_back(static_cast<std::byte>(c.threadClass));
  }
  comm.broadcast(classes);
  threadClassOf.resize(classes.size());
  for (std::size_t i = 0; i < classes.size(); ++i) threadClassOf[i] = static_cast<std::uint8_t>(classes[i]);
  if (threadClassOf.size() != profileCount) throw std::logic_error("thread classes: one per profile expected");
  for (auto& info : localProfiles) info.features = {};  // not needed any more
}

// Global metric list: first appearance in profile-id order, which is rank order of the ranks'
// own first-appearance lists; then the --derive metrics.
void Pipeline::Impl::unifyMetrics() {
  std::vector<MetricOrigin> mine;
  for (std::size_t i = 0; i < local.size(); ++i)
    if (local[i])
      for (const auto& m : localMetrics[i]) mergeMetric(mine, {m, inputs[begin + i].path.string()});
  localMetrics = {};  // each profile's own list is not needed any more
  const auto parts = comm.gather(packMetrics(mine));
  std::vector<std::byte> merged;
  if (comm.rank() == 0) {
    std::vector<MetricOrigin> all;
    for (const auto& part : parts)
      for (const auto& m : unpackMetrics(part)) mergeMetric(all, m);
    merged = packMetrics(all);
  }
  comm.broadcast(merged);
  metrics.clear();
  for (auto& m : unpackMetrics(merged)) metrics.push_back(std::move(m.descriptor));
  addStateMetrics();
  rawMetrics = metrics.size();
  addDerivedMetrics();
  if (metrics.size() > 0xFFFF) throw PipelineError("more than 65535 distinct metrics");
}

// With idleness accounting (csp-run --idleness) the profiles carry `work` and `idleness`; the
// post-processing adds `overhead` (work whose context an overhead rule names) and `effort` (work
// + idleness), integer metrics like the measured ones, computed per statement of each thread.
void Pipeline::Impl::addStateMetrics() {
  auto find = [&](const char* name) -> std::uint16_t {
    for (std::size_t m = 0; m < metrics.size(); ++m)
      if (metrics[m].name == name && metrics[m].kind == MetricKind::Counted && metrics[m].unit == "ns")
        return static_cast<std::uint16_t>(m);
    return kNoMetric;
  };
  auto taken = [&](const char* name) {
    return std::any_of(metrics.begin(), metrics.end(), [&](const auto& m) { return m.name == name; });
  };
  workMetric = find("work");
  idlenessMetric = find("idleness");
  if (workMetric == kNoMetric) return;
  if (!taken("overhead")) {
    overheadMetric = static_cast<std::uint16_t>(metrics.size());
    metrics.push_back(
        {"overhead", "ns", MetricKind::Counted, 1,
         "work in parallel runtime code (csp-prof-mpi overhead rules: " + overheadRules.describe() + ")"});
  }
  if (idlenessMetric != kNoMetric && !taken("effort")) {
    effortMetric = static_cast<std::uint16_t>(metrics.size());
    metrics.push_back({"effort", "ns", MetricKind::Counted, 1, "work + idleness"});
  }
}

void Pipeline::Impl::addDerivedMetrics() {
  std::vector<std::string> defects;
  for (const auto& text : options.derive) {
    try {
      Derived d{metrics::PerThreadDerivedMetric::parse(text), {}};
      for (std::size_t i = 0; i < d.metric.inputs().size(); ++i) {
        const auto& name = d.metric.inputs()[i];
        auto it = std::find_if(metrics.begin(), metrics.begin() + static_cast<std::ptrdiff_t>(rawMetrics),
                               [&](const auto& m) { return m.name == name; });
        if (it == metrics.begin() + static_cast<std::ptrdiff_t>(rawMetrics))
          throw metrics::ExpressionError(d.metric.expression().column(i),
                                         fmt::format("unknown metric '{}' (the profiles have: {})", name, [&] {
                                           std::string all;
                                           for (std::size_t m = 0; m < rawMetrics; ++m)
                                             all += (m ? ", " : "") + metrics[m].name;
                                           return all;
                                         }()));
        d.inputs.push_back(static_cast<std::uint16_t>(it - metrics.begin()));
      }
      const bool clash =
          std::any_of(metrics.begin(), metrics.end(), [&](const auto& m) { return m.name == d.metric.name(); });
      if (clash) throw metrics::ExpressionError(1, fmt::format("metric '{}' already exists", d.metric.name()));
      metrics.push_back(
          {d.metric.name(), "", MetricKind::Counted, 1, "derived per thread: " + d.metric.expression().text()});
      derived.push_back(std::move(d));
    } catch (const metrics::ExpressionError& e) {
      defects.push_back(fmt::format("--derive '{}': {}", text, e.what()));
    }
  }
  if (!defects.empty()) throw PipelineError(defects.front());
}

// Binomial-tree reduction of the CCT structures towards rank 0, which numbers the canonical
// CCT; the result is broadcast.
void Pipeline::Impl::unifyCct(LocalCct& localCct) {
  faultPoint(comm, "structure");
  comm.reduceTree([&](const std::vector<std::byte>& theirs) { localCct.merge(theirs); },
                  [&] { return localCct.serialize(); });
  std::vector<std::byte> finalBytes;
  if (comm.rank() == 0) {
    cct = FinalCct::fromLocal(localCct, strings);
    if (comm.size() > 1) finalBytes = cct.serialize(strings);
  }
  if (comm.size() > 1) {
    comm.broadcast(finalBytes);
    if (comm.rank() != 0) cct = FinalCct::deserialize(finalBytes, strings);
  }
}

// Region trees are small: gathered at the root, merged, numbered and broadcast.
void Pipeline::Impl::unifyRegions(const RegionUnion& regionUnion) {
  const auto parts = comm.gather(regionUnion.serialize());
  std::vector<std::byte> merged;
  if (comm.rank() == 0) {
    RegionUnion all;
    for (const auto& part : parts) all.merge(RegionUnion::deserialize(part));
    Packer p;
    const auto tree = all.finalTree();
    p.u64(tree.size());
    for (const auto& n : tree) {
      p.u64(n.parent);
      p.text(n.name);
      p.u64(n.dynamicId);
    }
    merged = p.take();
  }
  comm.broadcast(merged);
  regions = RegionUnion::deserialize(merged);
  for (std::size_t i = 1; i < regions.size(); ++i)
    regionIndex[{regions[i].parent, regions[i].name, regions[i].dynamicId}] = static_cast<std::uint32_t>(i);
}

void Pipeline::computeMetrics(const BatchConsumer& consume) {
  Impl& s = *impl_;
  faultPoint(s.comm, "metrics");
  Stopwatch watch;
  std::map<std::string, std::uint16_t> globalMetric;
  for (std::size_t m = 0; m < s.metrics.size(); ++m) globalMetric[s.metrics[m].name] = static_cast<std::uint16_t>(m);

  tbb::enumerable_thread_specific<std::unique_ptr<ValueScratch>> scratch;
  const std::size_t total = s.localProfiles.size();
  const std::size_t batch = std::max<std::size_t>(s.options.batchProfiles, 1);
  std::vector<std::string> errors;
  std::mutex errorsMutex;
  s.beginPhase("metrics", total);
  std::future<void> pending;
  for (std::size_t first = 0; first < total;) {
    // The batch is the input batch of this profile: profiles whose inputs share index / batch.
    const std::size_t batchIndex = s.localInputOf[first] / batch;
    std::size_t n = 1;
    while (first + n < total && s.localInputOf[first + n] / batch == batchIndex) ++n;
    std::vector<ThreadValues> values(n);
    std::vector<RegionValues> regionValues(n);
    s.arena.execute([&] {
      tbb::parallel_for(tbb::blocked_range<std::size_t>(0, n, 1), [&](const tbb::blocked_range<std::size_t>& r) {
        for (std::size_t i = r.begin(); i != r.end(); ++i) {
          const auto& input = s.inputs[s.localInputOf[first + i]];
          const auto& path = input.path;
          try {
            // Re-reading keeps memory flat in the number of profiles; the attribution cache
            // makes the second walk cheap.
            ThreadProfile p = input.source->read(path);
            auto stmt =
                projectProfile(p, s.strings, s.attributor,
                               [&](std::uint32_t parent, const ScopeKey& key) {
                                 const auto id = s.cct.find(parent, key);
                                 if (id == kNoIndex)
                                   throw std::runtime_error("context missing from the canonical CCT (file changed?)");
                                 return id;
                               },
                               {jitSymbols(s.attributor, path, p), nullptr});
            for (auto& v : stmt) v.metric = globalMetric.at(p.metrics[v.metric].name);
            if (s.overheadMetric != Impl::kNoMetric || s.effortMetric != Impl::kNoMetric) {
              const std::size_t measured = stmt.size();
              for (std::size_t k = 0; k < measured; ++k) {
                const StmtValue v = stmt[k];
                if (v.metric == s.workMetric && s.overheadMetric != Impl::kNoMetric && s.overheadNode[v.node])
                  stmt.push_back({v.node, s.overheadMetric, v.value});
                if ((v.metric == s.workMetric || v.metric == s.idlenessMetric) && s.effortMetric != Impl::kNoMetric)
                  stmt.push_back({v.node, s.effortMetric, v.value});
              }
            }
            auto& mine = scratch.local();
            if (!mine) mine = std::make_unique<ValueScratch>(s.cct.size(), s.metrics.size());
            values[i] = mine->compute(s.cct, stmt);
            if (!s.derived.empty()) values[i] = withDerived(values[i], s.derived, s.rawMetrics);
            const auto& r = p.regions;
            std::vector<std::uint32_t> rid(r.size(), 0);
            auto& rv = regionValues[i];
            for (std::size_t k = 1; k < r.size(); ++k) {
              rid[k] = s.regionIndex.at({rid[r.parent[k]], r.names[r.staticId[k]], r.dynamicId[k]});
              rv.region.push_back(rid[k]);
            }
            std::vector<std::size_t> order(rv.region.size());
            for (std::size_t k = 0; k < order.size(); ++k) order[k] = k;
            std::sort(order.begin(), order.end(), [&](auto a, auto b) { return rv.region[a] < rv.region[b]; });
            std::vector<std::uint32_t> sorted;
            for (auto k : order) {
              // Two nodes of one profile can name the same region (a name registered twice).
              if (!sorted.empty() && sorted.back() == rv.region[k]) {
                rv.count.back() += r.count[k + 1];
                rv.inclusiveNs.back() += r.inclusiveNs[k + 1];
                rv.exclusiveNs.back() += r.exclusiveNs[k + 1];
                continue;
              }
              sorted.push_back(rv.region[k]);
              rv.count.push_back(r.count[k + 1]);
              rv.inclusiveNs.push_back(r.inclusiveNs[k + 1]);
              rv.exclusiveNs.push_back(r.exclusiveNs[k + 1]);
            }
            rv.region = std::move(sorted);
          } catch (const std::exception& e) {
            std::lock_guard lock(errorsMutex);
            errors.push_back(fmt::format("{}: {}", path.string(), e.what()));
          }
        }
      });
    });
    if (!errors.empty()) break;
    // The consumer (database writing) of this batch overlaps the computation of the next one;
    // at most two batches are alive at a time.
    if (pending.valid()) pending.get();
    pending =
        std::async(std::launch::async,
                   [&consume, batchIndex, profiles = std::span<const ProfileInfo>(s.localProfiles).subspan(first, n),
                    values = std::move(values), regionValues = std::move(regionValues)]() mutable {
                     consume(batchIndex, profiles, values, regionValues);
                   });
    first += n;
    if (s.progress) s.progress->update(first);
  }
  if (pending.valid()) pending.get();
  s.endPhase("metrics", watch);
  throwIfAny(errors);
}

const std::vector<InputProfile>& Pipeline::inputs() const { return impl_->inputs; }
const FinalCct& Pipeline::cct() const { return impl_->cct; }
const std::vector<RegionTreeNode>& Pipeline::regions() const { return impl_->regions; }
std::vector<std::uint32_t> Pipeline::regionIds(const RegionProfile& r) const {
  std::vector<std::uint32_t> id(r.size(), 0);
  for (std::size_t k = 1; k < r.size(); ++k)
    id[k] = impl_->regionIndex.at({id[r.parent[k]], r.names[r.staticId[k]], r.dynamicId[k]});
  return id;
}
StringTable& Pipeline::strings() { return impl_->strings; }
const std::vector<MetricDescriptor>& Pipeline::metrics() const { return impl_->metrics; }
std::size_t Pipeline::rawMetricCount() const { return impl_->rawMetrics; }
std::uint32_t Pipeline::profileCount() const { return impl_->profileCount; }
std::uint32_t Pipeline::firstProfileId() const { return impl_->firstId; }
const std::vector<std::uint8_t>& Pipeline::threadClassOf() const { return impl_->threadClassOf; }
const std::vector<storage::ThreadClassInfo>& Pipeline::threadClasses() const { return impl_->threadClasses; }
const std::vector<ProfileInfo>& Pipeline::localProfiles() const { return impl_->localProfiles; }
const std::vector<SkippedInput>& Pipeline::skipped() const { return impl_->skipped; }
const std::vector<std::string>& Pipeline::leftoverTemporaries() const { return impl_->leftoverTemporaries; }
AttributionStats Pipeline::attributionStats() const { return impl_->attributor.stats(); }
const std::vector<PhaseTime>& Pipeline::phaseTimes() const { return impl_->phases; }
tbb::task_arena& Pipeline::arena() { return impl_->arena; }
std::size_t Pipeline::localBatchCount() const {
  const std::size_t batch = std::max<std::size_t>(impl_->options.batchProfiles, 1);
  std::size_t count = 0, last = SIZE_MAX;
  for (auto input : impl_->localInputOf) {
    if (input / batch != last) ++count;
    last = input / batch;
  }
  return count;
}

}  // namespace csp::reduce
