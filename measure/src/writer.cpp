// Turning a closed thread's arena into a csp::ThreadProfile and writing it. Runs in normal
// context (thread exit, process exit), where allocation is fine.
#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <climits>
#include <cstdlib>
#include <fstream>
#include <map>
#include <memory>
#include <mutex>
#include <span>

#include "csp/storage/atomic_file.hpp"
#include "csp/storage/profile_io.hpp"
#include "runtime.hpp"

namespace csp::measure {

namespace {

constinit std::atomic<long> g_mpiRank{-1};
constinit std::atomic<long> g_mpiSize{-1};

long numberFromEnvironment(const char* name) {
  const char* v = name != nullptr ? std::getenv(name) : nullptr;
  if (v == nullptr || *v == '\0') return -1;
  char* end = nullptr;
  const long n = std::strtol(v, &end, 10);
  return *end == '\0' && n >= 0 ? n : -1;
}

// The launcher's rank and rank count when the program never calls MPI_Init (or uses an MPI whose
// handles we cannot pass): Open MPI, PMIx, MPICH/Hydra, Slurm.
struct LauncherVariables {
  const char* rank;
  const char* size;
};
constexpr LauncherVariables kLaunchers[] = {{"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"},
                                            {"PMIX_RANK", nullptr},
                                            {"PMI_RANK", "PMI_SIZE"},
                                            {"SLURM_PROCID", "SLURM_STEP_NUM_TASKS"}};

long rankFromEnvironment() {
  for (const auto& l : kLaunchers)
    if (const long r = numberFromEnvironment(l.rank); r >= 0) return r;
  return -1;
}

long rankCount() {
  if (const long size = g_mpiSize.load(); size > 0) return size;
  for (const auto& l : kLaunchers)
    if (numberFromEnvironment(l.rank) >= 0) return numberFromEnvironment(l.size);
  return -1;
}

IdTuple idTupleOf(const ThreadState& t) {
  IdTuple tuple;
  long rank = g_mpiRank.load();
  if (rank < 0) rank = rankFromEnvironment();
  if (rank >= 0)
    tuple.push_back({IdKind::Rank, static_cast<std::uint64_t>(rank)});
  else
    tuple.push_back({IdKind::Process, 0});
  if (isDescendantProcess()) tuple.push_back({IdKind::Process, static_cast<std::uint64_t>(getpid())});
  tuple.push_back({IdKind::Thread, t.index});
  return tuple;
}

// What every profile of this process repeats, read once per process (a fork child reads its own).
struct ProcessFacts {
  pid_t pid = 0;
  std::string hostname, executable;
  std::vector<std::string> commandLine;
  bool directoryReady = false;
  // Profiles of threads that end while the process runs (created at the first of them).
  std::unique_ptr<storage::ProfileBundleWriter> bundle;
};

constinit std::mutex g_factsMutex;

std::vector<std::string> readCommandLine() {
  std::vector<std::string> args;
  std::ifstream in("/proc/self/cmdline", std::ios::binary);
  std::string arg;
  while (std::getline(in, arg, '\0')) args.push_back(arg);
  return args;
}

std::string readExecutable() {
  char buf[PATH_MAX];
  const ssize_t n = readlink("/proc/self/exe", buf, sizeof buf - 1);
  return n > 0 ? std::string(buf, static_cast<std::size_t>(n)) : std::string();
}

// Callers hold g_factsMutex.
ProcessFacts& processFacts() {
  static auto* facts = new ProcessFacts;  // leaked: exit handlers may still write
  if (facts->pid != getpid()) {
    *facts = ProcessFacts{};
    facts->pid = getpid();
    char buf[256] = {};
    gethostname(buf, sizeof buf - 1);
    facts->hostname = buf;
    facts->executable = readExecutable();
    facts->commandLine = readCommandLine();
  }
  return *facts;
}

bool makeDirectories(const std::string& dir) {
  // Several ranks may race to create it: EEXIST is success.
  for (std::size_t pos = 1; pos <= dir.size(); ++pos) {
    if (pos == dir.size() || dir[pos] == '/') {
      const std::string prefix = dir.substr(0, pos);
      if (mkdir(prefix.c_str(), 0777) != 0 && errno != EEXIST) return false;
    }
  }
  struct stat st;
  return stat(dir.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

// The logical contexts that the thread's markers name, with their creators' contexts: global id
// -> index in the profile, in id order (a creator's context is interned before what it creates).
std::map<std::uint32_t, std::uint32_t> referencedContexts(const CctArena& a, std::vector<LogicalContextRecord>& out) {
  std::map<std::uint32_t, LogicalContextRecord> found;
  std::vector<std::uint32_t> pending;
  for (std::uint32_t i = 1; i < a.size; ++i) {
    const std::uint64_t address = a.nodes[i].address;
    if ((address & kLogicalMarker) == kLogicalMarker && address != (kLogicalMarker | kPoolContext))
      pending.push_back(static_cast<std::uint32_t>(address));
  }
  while (!pending.empty()) {
    const std::uint32_t id = pending.back();
    pending.pop_back();
    LogicalContextRecord r;
    if (id == 0 || found.count(id) != 0 || !logicalContext(id, r)) continue;
    if (r.parent != 0) pending.push_back(r.parent);
    found.emplace(id, std::move(r));
  }
  std::map<std::uint32_t, std::uint32_t> index;
  for (auto& [id, r] : found) {
    index.emplace(id, static_cast<std::uint32_t>(out.size()));
    out.push_back(std::move(r));
  }
  return index;
}

void fillAddressProfile(const ThreadState& t, ThreadProfile& p) {
  const CctArena& a = t.cct;
  p.cct.parent.push_back(kNoIndex);
  p.cct.frame.push_back(kNoIndex);
  if (a.size <= 1) return;  // never sampled (most short threads): no frame, so no module is needed
  const auto modules = loadMapSnapshot();
  for (const auto& m : modules) p.modules.push_back({m.path, m.buildId, m.begin, m.end, m.bias});
  std::uint32_t unknownModule = kNoIndex, contextModule = kNoIndex;
  std::map<std::uint64_t, std::uint32_t> frameOf;  // address -> frame index
  auto pseudoModule = [&](std::uint32_t& module, const char* path) {
    if (module == kNoIndex) {
      module = static_cast<std::uint32_t>(p.modules.size());
      p.modules.push_back({path, {}, 0, 0, 0});
    }
    return module;
  };
  std::vector<LogicalContextRecord> contexts;
  const auto contextIndex = referencedContexts(a, contexts);
  auto frameFor = [&](std::uint64_t address) {
    auto [it, inserted] = frameOf.try_emplace(address, static_cast<std::uint32_t>(p.addressFrames.size()));
    if (!inserted) return it->second;
    // The latest module covering the address wins: a range reused after dlclose belongs to
    // the module loaded last (docs/measurement.md, limits).
    AddressFrame f;
    bool found = false;
    if ((address & kLogicalMarker) == kLogicalMarker) {
      const auto c = contextIndex.find(static_cast<std::uint32_t>(address));
      f = {pseudoModule(contextModule, kLogicalContextModule), c == contextIndex.end() ? kPoolMarker : c->second};
      found = true;
    }
    for (std::size_t m = modules.size(); !found && m-- > 0;) {
      if (address >= modules[m].begin && address < modules[m].end) {
        f = {static_cast<std::uint32_t>(m), address - modules[m].bias};
        found = true;
      }
    }
    if (!found) f = {pseudoModule(unknownModule, kUnmappedModulePath), address};
    p.addressFrames.push_back(f);
    return it->second;
  };
  p.cct.parent.reserve(a.size);
  p.cct.frame.reserve(a.size);
  p.cct.unwindNote.assign(1, 0);  // the root's
  for (std::uint32_t i = 1; i < a.size; ++i) {
    p.cct.parent.push_back(a.nodes[i].parent);
    p.cct.frame.push_back(frameFor(a.nodes[i].address));
    p.cct.unwindNote.push_back(a.nodes[i].note);
  }
  for (const auto& c : contexts) {
    p.logical.parent.push_back(c.parent == 0 ? kNoIndex : contextIndex.at(c.parent));
    p.logical.kind.push_back(static_cast<LogicalKind>(c.kind));
    p.logical.pathBegin.push_back(static_cast<std::uint32_t>(p.logical.pathFrame.size()));
    for (auto address : c.frames) p.logical.pathFrame.push_back(frameFor(address));
  }
  if (!contexts.empty()) p.logical.pathBegin.push_back(static_cast<std::uint32_t>(p.logical.pathFrame.size()));
  // Notes only when some frame was found by a stack scan (older readers ignore them anyway).
  if (std::all_of(p.cct.unwindNote.begin(), p.cct.unwindNote.end(), [](std::uint32_t n) { return n == 0; }))
    p.cct.unwindNote.clear();
  const auto events = static_cast<std::uint32_t>(std::min<std::size_t>(config().events.size(), kMaxEvents));
  for (std::uint32_t i = 1; i < a.size; ++i) {
    for (std::uint32_t e = 0; e < events; ++e) {
      if (a.nodes[i].count[e] == 0) continue;
      p.values.node.push_back(i);
      p.values.metric.push_back(static_cast<std::uint16_t>(e));
      p.values.count.push_back(a.nodes[i].count[e]);
    }
    // The state metrics (idleness accounting) follow the events' metrics: counted, in ns.
    if (a.state == nullptr) continue;
    const std::uint64_t* v = a.state + std::size_t{i} * kStateMetrics;
    for (int m = 0; m < kStateMetrics; ++m) {
      if (v[m] == 0) continue;
      p.values.node.push_back(i);
      p.values.metric.push_back(static_cast<std::uint16_t>(events + static_cast<std::uint32_t>(m)));
      p.values.count.push_back(v[m]);
    }
  }
}

void fillRegions(const ThreadState& t, ThreadProfile& p) {
  if (t.regions == nullptr) return;
  RegionSnapshot s = snapshotRegions(t.regions);
  RegionProfile& r = p.regions;
  r.names = regionNames();
  r.eventsLost = s.eventsLost;
  r.mismatchedEnds = s.mismatchedEnds;
  r.unclosedAtExit = s.unclosedAtExit;
  for (const auto& n : s.nodes) {
    r.parent.push_back(n.parent);
    r.staticId.push_back(n.name);
    r.dynamicId.push_back(n.dynamicId);
    r.count.push_back(n.count);
    r.inclusiveNs.push_back(n.inclusiveNs);
    r.exclusiveNs.push_back(std::min(n.exclusiveNs, n.inclusiveNs));
  }
  bool anyAttr = false;
  for (const auto& e : s.events) {
    r.eventTimeNs.push_back(e.timeNs);
    r.eventNode.push_back(e.node);
    r.eventIsEnter.push_back((e.flags & kEventEnter) != 0);
    anyAttr = anyAttr || (e.flags & kEventHasAttr) != 0;
  }
  if (anyAttr) {
    for (const auto& e : s.events) {
      const bool has = (e.flags & kEventHasAttr) != 0;
      r.eventHasAttr.push_back(has);
      r.eventAttr.push_back(has ? e.attr : 0);
    }
  }
}

void fillClockAndComm(const ThreadState& t, ThreadProfile& p) {
  const ClockRecord c = clockRecord();
  p.clock = {static_cast<ClockState>(c.state),
             0,
             c.initLocalNs,
             c.initRefLoNs,
             c.initRefHiNs,
             c.finalLocalNs,
             c.finalRefLoNs,
             c.finalRefHiNs,
             c.rounds,
             c.costNs};
  if (t.regions == nullptr) return;
  const CommSnapshot s = snapshotComm(t.regions);
  CommLog& m = p.commLog;
  m.eventsLost = s.eventsLost;
  for (const auto& e : s.events) {
    m.kind.push_back(e.kind);
    m.beginNs.push_back(e.beginNs);
    m.endNs.push_back(e.endNs);
    m.peer.push_back(e.peer);
    m.tag.push_back(e.tag);
    m.comm.push_back(e.comm);
    m.sequence.push_back(e.sequence);
    m.region.push_back(e.region < p.regions.size() ? e.region : 0);
    m.waitBeginNs.push_back(e.waitBeginNs != 0 ? e.waitBeginNs : e.beginNs);
    m.op.push_back(e.op);
  }
}

// JIT code: runtimes that generate code describe it in /tmp/perf-<pid>.map (perf's format). The
// map is copied next to the profiles, so that post-processing on another node finds it, each
// time a profile is written and the map has changed since the last copy (it only grows, and the
// last thread to finish writes last). Costs one failed stat() per profile without a JIT.
void capturePerfMap(const std::string& dir, const Identity& identity) {
  static constinit std::mutex mutex;
  static struct {
    pid_t pid = 0;
    off_t size = -1;
    struct timespec mtime = {};
  } last;
  const pid_t pid = getpid();
  const std::string source = fmt::format("/tmp/perf-{}.map", pid);
  struct stat st;
  if (stat(source.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) return;
  std::lock_guard lock(mutex);
  if (last.pid == pid && last.size == st.st_size && last.mtime.tv_sec == st.st_mtim.tv_sec &&
      last.mtime.tv_nsec == st.st_mtim.tv_nsec)
    return;
  std::ifstream in(source, std::ios::binary);
  std::ostringstream text;
  text << in.rdbuf();
  if (!in.good() && !in.eof()) return;
  const std::string target = dir + "/" + storage::perfMapFileName(identity.pid, identity.hostname);
  try {
    // Created exclusively under a fresh name: a link planted where the copy goes is never followed.
    storage::writeFileAtomically(target, text.str(), {.fsync = false, .temporaryTag = std::to_string(pid)});
  } catch (const storage::AtomicFileError& e) {
    reportOnce("perfmap", fmt::format("csp: warning: cannot copy {} into {} ({}); JIT code stays unnamed\n", source,
                                      dir, e.what()));
    return;
  }
  last.pid = pid;
  last.size = st.st_size;
  last.mtime = st.st_mtim;
}

}  // namespace

const char* dropCauseName(int cause) {
  static constexpr const char* kNames[kDropCauses] = {"no-memory",      "no-frame",    "tree-full",
                                                      "recording-wait", "loader-busy", "throttled"};
  return cause >= 0 && cause < kDropCauses ? kNames[cause] : "unknown";
}

void setMpiRank(long rank, long size) {
  g_mpiRank.store(rank);
  g_mpiSize.store(size);
}

// fork: the writer thread may be appending to the bundle; the child must not inherit the lock
// held by a thread it does not have.
void lockWriterForFork() { g_factsMutex.lock(); }
void unlockWriterAfterFork() { g_factsMutex.unlock(); }

namespace {

// Settings dropped-<cause> (non-zero ones): why the profile's dropped samples were not
// recorded. What the counters do not explain (samples whose handler never finished) is
// dropped-abandoned.
void addDropCauses(const ThreadState& t, ThreadProfile& p) {
  std::uint64_t explained = 0;
  for (int c = 0; c < kDropCauses; ++c) {
    explained += t.droppedBy[c];
    if (t.droppedBy[c] != 0)
      p.identity.settings.push_back({std::string("dropped-") + dropCauseName(c), std::to_string(t.droppedBy[c])});
  }
  if (p.stats.droppedSamples > explained)
    p.identity.settings.push_back({"dropped-abandoned", std::to_string(p.stats.droppedSamples - explained)});
}

// Builds `t`'s profile into `p` and the measurement directory into `dir`; false if the
// directory cannot be made (reported once: the profile is lost).
bool buildThreadProfile(ThreadState& t, ThreadProfile& p, std::string& dir) {
  p.identity.idTuple = idTupleOf(t);
  {
    TerminationGuard guard;
    std::lock_guard lock(g_factsMutex);
    ProcessFacts& facts = processFacts();
    p.identity.pid = static_cast<std::uint32_t>(facts.pid);
    p.identity.hostname = facts.hostname;
    p.identity.executable = facts.executable;
    p.identity.commandLine = facts.commandLine;
    // The directory (absolute since start-up) is checked once per process.
    dir = config().output;
    if (!facts.directoryReady) facts.directoryReady = makeDirectories(dir);
    if (!facts.directoryReady) {
      reportOnce("outdir", fmt::format("csp: error: cannot create measurement directory {}; profiles are lost\n", dir));
      return false;
    }
  }
  p.identity.startTimeNs = t.startNs;
  p.identity.endTimeNs = std::max(t.endNs, t.startNs);
  const Config& c = config();
  const std::string signalState = samplingSignalState();
  const bool takenOver = signalState == "yes";
  auto& settings = p.identity.settings;
  settings.push_back({"measurer", "libcsp-measure"});
  settings.push_back({"events", c.eventsText});
  settings.push_back({"sampling-signal", signalName(samplingSignal())});
  settings.push_back({"sampling-signal-taken-over", signalState});
  settings.push_back({"region-log", c.regionLog ? "on" : "off"});
  settings.push_back({"max-depth", std::to_string(c.maxDepth)});
  settings.push_back({"max-nodes", std::to_string(c.maxNodes)});
  settings.push_back({"foreign-sampling-signals", std::to_string(t.foreignSignals)});
  // The job's rank count, so that post-processing can tell which ranks left no profile.
  if (const long ranks = rankCount(); ranks > 0 && p.identity.idTuple.front().kind == IdKind::Rank)
    settings.push_back({"mpi-ranks", std::to_string(ranks)});
  if (const char* command = std::getenv("CSP_COMMAND"); command != nullptr && *command != '\0')
    settings.push_back({"command", command});  // what csp-run ran (\x1f between arguments)
  if (takenOver) {
    reportOnce("takeover", fmt::format("csp: warning: the program replaced the {} handler, which csp uses "
                                       "for sampling; samples taken after that are missing (pid {})\n",
                                       signalName(samplingSignal()), getpid()));
  }
  for (const auto& e : c.events) {
    p.metrics.push_back({e.name, "ns", MetricKind::Sampled, e.periodNs,
                         e.name == "cpu-time" ? "thread CPU time, sampled by a per-thread CPU-clock timer"
                                              : "elapsed (wall-clock) time, sampled by a per-thread monotonic timer"});
  }
  if (c.idleness) {
    for (int m = 0; m < kStateMetrics; ++m)
      p.metrics.push_back({stateMetricName(m), "ns", MetricKind::Counted, 1, stateMetricDescription(m)});
    settings.push_back({"idleness", "on"});
    settings.push_back({"idleness-event", c.events.empty() ? std::string("none") : c.events.front().name});
    settings.push_back({"openmp-tool", openmpToolState()});
    settings.push_back({"openmp-runtime", openmpRuntime()});
    settings.push_back({"lock-table-overflows", std::to_string(lockTableOverflows())});
    settings.push_back({"unattributed-wait-ns", std::to_string(t.unattributedNs)});
    settings.push_back({"short-lock-wait-ns", std::to_string(t.shortLockWaitNs)});
  }
  if (c.logical || openmpRuntime() != "none") settings.push_back({"logical-contexts", logicalContextsState()});
  p.strings.push_back("");
  p.frameKind = FrameKind::Address;
  if (t.cct.size > 1) refreshLoadMap();  // a thread never sampled lists no module
  fillAddressProfile(t, p);
  fillRegions(t, p);
  fillClockAndComm(t, p);
  p.stats.samples = t.samples;
  p.stats.unwindFailures = t.unwindFailures;
  p.stats.droppedSamples = t.droppedSamples;
  p.stats.truncatedPaths = t.truncatedPaths;
  // A sample whose handler never finished (abandoned) was counted but not recorded: whatever
  // the counters say, every sample handled is either in the tree or dropped.
  std::uint64_t recorded = 0;
  for (std::size_t k = 0; k < p.values.size(); ++k)
    if (p.values.metric[k] < c.events.size()) recorded += p.values.count[k];  // sampled metrics only
  if (recorded + p.stats.droppedSamples != p.stats.samples) {
    if (p.stats.samples >= recorded)
      p.stats.droppedSamples = p.stats.samples - recorded;
    else
      p.stats.samples = recorded + p.stats.droppedSamples;
  }
  settings.push_back({"abandoned-samples", std::to_string(t.abandonedSamples)});
  settings.push_back({"throttled-samples", std::to_string(t.throttledSamples)});
  settings.push_back({"stack-scans", std::to_string(t.stackScans)});
  addDropCauses(t, p);
  return true;
}

// The line CSP_VERBOSE prints for a written profile.
std::string writtenLine(const ThreadState& t, const ThreadProfile& p, const std::string& file) {
  return fmt::format(
      "csp: {} (pid {}): {} samples, {} unwind failures, {} dropped, {} truncated, {} CCT nodes, "
      "{} regions -> {}\n",
      formatIdTuple(p.identity.idTuple), p.identity.pid, p.stats.samples, t.unwindFailures, p.stats.droppedSamples,
      t.truncatedPaths, p.cct.size(), p.regions.size() > 0 ? p.regions.size() - 1 : 0, file);
}

// The process's bundle (created at the first use); caller holds g_factsMutex.
storage::ProfileBundleWriter& bundleOf(const std::string& dir, const Identity& identity) {
  ProcessFacts& facts = processFacts();
  if (!facts.bundle)
    facts.bundle = std::make_unique<storage::ProfileBundleWriter>(dir + "/" + storage::bundleFileName(identity));
  return *facts.bundle;
}

}  // namespace

void writeThreadProfile(ThreadState& t) {
  try {
    ThreadProfile p;
    std::string dir;
    if (!buildThreadProfile(t, p, dir)) return;
    std::string file;
    if (t.toBundle) {
      TerminationGuard guard;
      std::lock_guard lock(g_factsMutex);
      auto& bundle = bundleOf(dir, p.identity);
      bundle.append(p);
      file = bundle.path().string();
    } else {
      file = dir + "/" + storage::profileFileName(p.identity);
      storage::writeProfile(p, file);
      // The JIT map only grows: the copy made when the process's last profiles are written (at
      // exit, or on a termination signal) is the complete one; a copy per ending thread would
      // only cost a stat each.
      capturePerfMap(dir, p.identity);
    }
    if (config().verbose > 0) say(writtenLine(t, p, file));
  } catch (const std::exception& e) {
    // The program must go on: a lost profile is reported, never fatal.
    say(std::string("csp: error: a thread profile was not written: ") + e.what() + "\n");
  }
}

void writeEndedThreadProfiles(std::span<ThreadState* const> threads) {
  std::vector<std::string> lines;
  std::size_t staged = 0;
  for (ThreadState* t : threads) {
    try {
      ThreadProfile p;
      std::string dir;
      if (!buildThreadProfile(*t, p, dir)) continue;
      TerminationGuard guard;
      std::lock_guard lock(g_factsMutex);
      auto& bundle = bundleOf(dir, p.identity);
      bundle.stage(p);
      ++staged;
      if (config().verbose > 0) lines.push_back(writtenLine(*t, p, bundle.path().string()));
    } catch (const std::exception& e) {
      say(std::string("csp: error: a thread profile was not written: ") + e.what() + "\n");
    }
  }
  if (staged == 0) return;
  try {
    TerminationGuard guard;
    std::lock_guard lock(g_factsMutex);
    if (processFacts().bundle) processFacts().bundle->flush();
  } catch (const std::exception& e) {
    say(fmt::format("csp: error: the profiles of {} ended threads were not written: {}\n", staged, e.what()));
    return;
  }
  for (const auto& line : lines) say(line);
}

}  // namespace csp::measure
