// Internals of libcsp-measure.so shared by its translation units. Nothing here is exported:
// the library's only public symbols are the interposed functions (pthread_create, dlclose,
// MPI_Init, ...) and the region API; see measure/src/exports.map.
#pragma once

#include <signal.h>
#include <time.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "csp/measure/events.hpp"

namespace csp::measure {

inline constexpr int kMaxEvents = kMaxEventCount;

struct EventConfig {
  std::string name;  // "cpu-time" or "real-time"
  clockid_t clock = CLOCK_THREAD_CPUTIME_ID;
  std::uint64_t periodNs = 5'000'000;
};

struct Config {
  std::string eventsText;  // as given, for the profile's settings
  std::vector<EventConfig> events;
  std::string output;  // measurement directory, absolute (resolved once at start-up)
  int signal = 0;      // sampling signal from CSP_SIGNAL; 0: the first free real-time signal
  bool regionLog = false;
  std::uint32_t regionLogCapacity = 1u << 20;  // events per thread
  int verbose = 0;
  std::uint32_t maxDepth = 1024;
  std::uint32_t maxNodes = 1u << 18;
  // Work, idleness, waits and lock blame (idleness.cpp, docs/measurement.md "Threads: work,
  // idleness, waiting"): CSP_IDLENESS / csp-run --idleness. Off: no metric, no OMPT tool, and the
  // pthread and MPI wrappers forward at once.
  bool idleness = false;
  // Logical call paths of OpenMP (ompt.cpp, docs/measurement.md "OpenMP: logical call paths"):
  // CSP_LOGICAL, on unless "0"; csp-run --no-logical. Off: no OMPT tool unless idleness wants one.
  bool logical = true;
};

// Parses the CSP_* environment. Bad values are reported on stderr and replaced by defaults:
// a measurement tool must never stop the program it measures. A relative CSP_OUTPUT (and the
// default directory name) is made absolute against the working directory at start-up, so that
// a program that changes directory still writes every profile to one place.
Config readConfig();

// ---------------------------------------------------------------------------------------------
// Per-thread sampled calling context tree in an arena that the thread's signal handler maps at
// the thread's first sample (a thread that is never sampled costs no mapping). Only the owning
// thread's signal handler writes it; a writer reads it only after taking the thread's state to
// Closed.

// One node of the sampled tree: keyed by address (return addresses, the leaf PC), not yet a
// canonical CCT node (storage::CctNode, built by csp-prof-mpi from these).
struct ArenaNode {
  std::uint64_t address;  // leaf: interrupted PC; interior: return address
  std::uint32_t parent;
  std::uint32_t note;  // storage UnwindNote, encoded: how the unwind found the frame (0: by its tables)
  std::uint64_t count[kMaxEvents];
};

// Stack words copied above a frame that has no unwind tables (sampler.cpp, scanStack): the
// deepest frame of hand-written assembler that the stack scan can step over.
inline constexpr std::uint32_t kScanWords = 512;

// The thread-state metrics that idleness accounting adds to every node (idleness.cpp): counted
// metrics in ns, stored after the sampled events' metrics in the profile.
enum StateMetric : int { kWork = 0, kIdleness, kSyncWait, kLockWait, kLockBlame, kMpiWait, kStateMetrics };
const char* stateMetricName(int metric);
const char* stateMetricDescription(int metric);

struct CctArena {
  ArenaNode* nodes = nullptr;
  std::uint64_t* state = nullptr;     // kStateMetrics values per node, only with idleness accounting
  std::uint32_t* table = nullptr;     // open addressing, node index + 1, 0 = empty
  std::uint64_t* path = nullptr;      // scratch for one unwind, maxDepth entries
  std::uint32_t* pathNote = nullptr;  // the unwind notes of `path`
  std::uint64_t* scan = nullptr;      // scratch: kScanWords stack words (scanStack)
  std::uint32_t capacity = 0;
  std::uint32_t size = 0;
  std::uint32_t tableMask = 0;
  std::uint32_t maxDepth = 0;
  void* mapping = nullptr;
  std::size_t mappingBytes = 0;
};

bool mapArena(CctArena& a, std::uint32_t maxNodes, std::uint32_t maxDepth);  // async-signal-safe
void unmapArena(CctArena& a);

// ---------------------------------------------------------------------------------------------
// Regions (normal context only; the signal handler never touches them).

struct RegionNode {
  std::uint32_t parent;
  std::uint32_t name;  // index into the process-wide region name table
  std::uint64_t dynamicId;
  std::uint64_t count = 0;
  std::uint64_t inclusiveNs = 0;
  std::uint64_t exclusiveNs = 0;
};

struct RegionEvent {
  std::uint64_t timeNs;
  std::uint32_t node;
  std::uint32_t flags;  // kEventEnter | kEventHasAttr
  std::int64_t attr;    // csp_region_begin_attr's attribute, when kEventHasAttr
};
inline constexpr std::uint32_t kEventEnter = 1;
inline constexpr std::uint32_t kEventHasAttr = 2;

struct RegionThreadState;  // regions.cpp
RegionThreadState* createRegionState();
void closeRegionState(RegionThreadState* r);  // waits out a region call in progress
void destroyRegionState(RegionThreadState* r);
// Fills the region part of a profile and the names it uses.
struct RegionSnapshot {
  std::vector<RegionNode> nodes;
  std::vector<RegionEvent> events;
  std::uint64_t eventsLost = 0;
  std::uint64_t mismatchedEnds = 0;
  std::uint64_t unclosedAtExit = 0;
};
RegionSnapshot snapshotRegions(const RegionThreadState* r);
std::vector<std::string> regionNames();

// ---------------------------------------------------------------------------------------------
// Clocks across processes and communication events (clocksync.cpp, docs/measurement.md).

enum ClockRecordState : int { kClockNone = 0, kClockReference, kClockSameClock, kClockMeasured, kClockInitOnly };
struct ClockRecord {
  int state = kClockNone;
  std::uint64_t initLocalNs = 0, initRefLoNs = 0, initRefHiNs = 0;
  std::uint64_t finalLocalNs = 0, finalRefLoNs = 0, finalRefHiNs = 0;
  std::uint32_t rounds = 0;
  std::uint64_t costNs = 0;
};
void clockSyncAtInit();      // after PMPI_Init: the first exchange (all ranks, collective)
void clockSyncAtFinalize();  // before PMPI_Finalize: the second one
ClockRecord clockRecord();
// CSP_TEST_CLOCK_SKEW (tests only): read once at start-up; monotonicNs() then returns the
// skewed clock. Plain loads, usable in the signal handler.
void initClockSkew();
std::uint64_t skewedClock(std::uint64_t trueNs);
extern bool g_clockSkewed;
inline bool clockSkewed() { return g_clockSkewed; }

// Open MPI's MPI_ANY_SOURCE and MPI_ANY_TAG (the only MPI whose handles clocksync.cpp knows).
inline constexpr int kAnySource = -1, kAnyTag = -1;
enum CommRecordKind : int { kCommSend = 1, kCommRecv = 2, kCommCollective = 3, kCommWait = 4 };
struct CommEvent {
  std::uint64_t beginNs, endNs;
  std::int32_t peer, tag;
  std::uint64_t comm, sequence;
  std::uint8_t kind;
  std::uint8_t op = 0;            // CollectiveOp
  std::uint64_t waitBeginNs = 0;  // 0: beginNs (a blocking call)
  std::uint32_t region = 0;       // filled by logCommEvent
};
void commLogStart(bool on);
void commLogStop();
bool commLogOn();             // between the two exchanges, with --region-log
void commForget(void* comm);  // MPI_Comm_free: its handle may name another communicator later
// A blocking MPI call of the calling thread; `peer` in `comm`'s numbering (or a root, or -1).
void commRecord(CommRecordKind kind, void* comm, int peer, int tag, std::uint64_t beginNs, std::uint64_t endNs);
// A collective `op` (CollectiveOp) with its root in `comm`'s numbering (-1: none).
void commCollective(int op, void* comm, int root, std::uint64_t beginNs, std::uint64_t endNs);
// Non-blocking point-to-point (docs/measurement.md "Communication events"): the operation's
// matching is taken when it starts (MPI_Isend, MPI_Irecv), keyed by its request handle, and
// recorded as one event when a wait or test completes it (`source`, `tag` from its status: a
// receive from MPI_ANY_SOURCE or with MPI_ANY_TAG learns its peer only then). commComplete
// returns false for a request that was not started while recording.
void commStart(CommRecordKind kind, void* comm, int peer, int tag, void* request, std::uint64_t beginNs);
bool commPending(void* request);
bool commComplete(void* request, int source, int tag, std::uint64_t waitBeginNs, std::uint64_t endNs);
void commDrop(void* request, std::uint64_t endNs);     // MPI_Request_free: a send is recorded, a receive forgotten
void logCommEvent(RegionThreadState* r, CommEvent e);  // regions.cpp: with the open region
struct CommSnapshot {
  std::vector<CommEvent> events;
  std::uint64_t eventsLost = 0;
};
CommSnapshot snapshotComm(const RegionThreadState* r);

// ---------------------------------------------------------------------------------------------

// Why a sample was not recorded (ThreadState::droppedBy; the profile's settings dropped-<name>,
// docs/measurement.md "Health counters").
enum DropCause : int {
  kDropNoMemory,       // the thread's tree could not be mapped
  kDropNoFrame,        // the unwind found no frame at all
  kDropTreeFull,       // the tree reached CSP_MAX_NODES
  kDropRecordingWait,  // the thread was recording a wait or blame (idleness accounting)
  kDropLoaderBusy,     // a dlclose or fork was under way in some thread: unwinding was unsafe
  kDropThrottled,      // within the quiet time after a slow sample
  kDropCauses
};
const char* dropCauseName(int cause);  // "loader-busy", ...

// Active: the handler may record; Busy: the handler is recording; Closed: the profile is final;
// Charging: the thread itself records a wait or blame in normal context (idleness.cpp), and a
// sample arriving meanwhile is dropped.
enum class Phase : int { Active = 0, Busy = 1, Closed = 2, Charging = 3 };

struct ThreadState {
  std::atomic<int> phase{static_cast<int>(Phase::Active)};
  std::uint32_t index = 0;  // creation order within the process; the main thread is 0
  pid_t tid = 0;
  timer_t timers[kMaxEvents]{};
  int timerCount = 0;
  std::uint64_t startNs = 0;  // CLOCK_REALTIME
  std::uint64_t endNs = 0;
  // Written by the signal handler only.
  std::uint64_t samples = 0;
  std::uint64_t unwindFailures = 0;
  std::uint64_t droppedSamples = 0;
  std::uint64_t truncatedPaths = 0;
  std::uint64_t foreignSignals = 0;        // sampling signals not sent by our timers
  std::uint64_t abandonedSamples = 0;      // handlers left by a jump out of a nested handler
  std::uint64_t throttledSamples = 0;      // dropped to keep the handler's share of CPU time bounded
  std::uint64_t stackScans = 0;            // frames without unwind tables whose stack was scanned
  std::uint64_t droppedBy[kDropCauses]{};  // droppedSamples by cause
  // Per event, the time on the event's clock (thread CPU time, or CLOCK_MONOTONIC for real-time)
  // before which its samples are throttled.
  std::uint64_t quietUntilNs[kMaxEvents]{};
  bool timersStopped = false;
  // The thread ended while the process runs: its profile is appended to the process's bundle
  // (one file per process, docs/profile-format.md) instead of a file of its own.
  bool toBundle = false;
  CctArena cct;
  void* altStack = nullptr;              // our alternate signal stack, if the thread got one from us
  RegionThreadState* regions = nullptr;  // created with the state, so that writers need no lock

  // Thread state for work and idleness (idleness.cpp). Changed by the thread itself in normal
  // context; `working` is also read by its own signal handler.
  std::atomic<bool> working{false};  // counted in W, the process's working threads
  bool counted = false;              // counted in n, the process's threads
  bool ompWorker = false;            // an OpenMP worker: idle while outside implicit tasks
  int ompImplicitTasks = 0;
  int waitDepth = 0;                           // nested waits (a wrapped call, an OMPT wait); the outermost counts
  std::uint64_t waitStartNs = 0;               // CLOCK_MONOTONIC at the start of the outermost wait
  std::uint64_t waitRegionEnds = 0;            // OpenMP parallel-region ends seen when the wait began
  bool waitCharged = false;                    // the outermost wait began while working: its time is charged
  std::uint64_t idleRemainder = 0;             // handler: fraction of a ns of idleness carried to the next sample
  std::uint64_t credit[kStateMetrics]{};       // waits and blame (ns) not yet charged to a context
  std::uint32_t lastCharged[kStateMetrics]{};  // arena node of the last charge per metric (0: none)
  std::uint64_t unattributedNs = 0;            // credit left at the end with no context to go to
  std::uint32_t contendedHeld = 0;             // locks taken after a wait and not yet released
  std::uint64_t shortLockWaitNs = 0;           // lock-wait of waits that ended within the short wait (no blame)
  int mpiDepth = 0;                            // inside MPI_Init, MPI_Init_thread or MPI_Finalize: waits are mpi-wait
};

// A sample of `weight` periods not recorded, for `cause` (signal handler or the owning thread).
inline void dropSample(ThreadState& t, DropCause cause, std::uint64_t weight) {
  t.droppedSamples += weight;
  t.droppedBy[cause] += weight;
}

// The calling thread's state, readable from the signal handler: initial-exec TLS never
// allocates, unlike the general dynamic model.
extern thread_local ThreadState* tlsThread __attribute__((tls_model("initial-exec")));

// Set while the thread runs code during which unwinding is unsafe (the loader changing its
// module list in dlclose); samples are then dropped and counted.
extern thread_local int tlsUnsafe __attribute__((tls_model("initial-exec")));

const Config& config();
std::uint64_t realtimeNs();
std::uint64_t monotonicNs();

bool installSampler();  // once per process, before any timer starts; false: no sampling
// Records `value` of state metric `metric` at the caller of csp's own frames (the unlock, join,
// MPI call...), from normal context in the owning thread: unwinds from here, skipping the frames
// of libcsp-measure.so. Returns the arena node, 0 if nothing was recorded (the thread is closed,
// sampling is paused, the arena is full).
std::uint32_t chargeAtCaller(ThreadState& t, int metric, std::uint64_t value);
// Adds `value` to a node's state metric in normal context (the final flush of a thread's credit).
bool chargeNode(ThreadState& t, std::uint32_t node, int metric, std::uint64_t value);
bool startTimers(ThreadState& t);  // in the thread itself
void stopTimers(ThreadState& t);
bool samplerStillInstalled();  // false if the program took over the sampling signal
// "no"; "intercepted" (the program asked for the sampling signal, csp kept it and forwards
// foreign ones); "yes" (the handler was replaced behind the interposer: samples are lost).
const char* samplingSignalState();
int samplingSignal();             // the signal our timers raise (0 before set-up)
std::string signalName(int sig);  // "SIGRTMIN+6", "SIGPROF"
// The sampling and termination handlers; also the handler of any program signal: csp's
// sigaction interposer consults it (sampler.cpp).
using SigactionFn = int (*)(int, const struct sigaction*, struct sigaction*);
SigactionFn realSigaction();

// Keeps every thread's sample handler out of libunwind and the loader's data (new samples are
// dropped and counted) until resumeSampling(); returns once no handler is running. Used around
// dlclose (which unmaps code the unwinder reads) and fork (whose child must not inherit a lock
// that libunwind holds in another thread). Normal context only; nests.
void pauseSampling();
void resumeSampling();

// The calling thread's alternate signal stack for our handlers (so that a thread with little
// stack left survives a sample): installed unless the thread already has one of its own.
void giveAltStack(ThreadState& t);
void takeBackAltStack(ThreadState& t);  // by the owning thread, after its handler is closed

// Termination signals (termination.cpp): SIGTERM, SIGINT, SIGHUP and SIGXCPU with their default
// action are caught; every thread's profile is written (by a helper thread, in normal context)
// and the signal is raised again with the default action.
void installTerminationHandlers();  // once, after the sampler
void restartTerminationHelper();    // in a fork child
bool isTerminationSignal(int sig);
// _exit, _Exit and quick_exit of the program: every thread's profile is written first (through
// the helper, bounded by CSP_TERMINATION_WAIT), in the measured process only.
void writeBeforeImmediateExit();
[[noreturn]] void endProcess(int status);  // libc's _exit
// The sigaction interposer's part for termination signals: returns the result of the call.
int terminationSigaction(int sig, const struct sigaction* act, struct sigaction* old);
// Holds off termination in the calling thread while it holds a lock that the writer of a
// termination needs (the registry, the load map, the bundle): a termination signal that arrives
// meanwhile is recorded and acted on when the outermost guard ends, instead of deadlocking the
// writer. No system call (a thread-local depth and a deferred signal number): thread start and
// exit take several guards, and a short thread's cost is counted in system calls.
class TerminationGuard {
 public:
  TerminationGuard();
  ~TerminationGuard();
  TerminationGuard(const TerminationGuard&) = delete;
  TerminationGuard& operator=(const TerminationGuard&) = delete;
};
// Ranks of one node that end together on a termination signal (peers.cpp): under mpirun every
// rank's death shortens the time the others have before SIGKILL, so a rank that has written
// waits for the node's other terminating ranks (at most until deadlineNs, CLOCK_MONOTONIC).
void initTerminationPeers();  // at start-up and in a fork child: this process's local rank, if any
void announceTerminating();   // the writer of a termination starts
void waitForTerminatingPeers(std::uint64_t deadlineNs);
// Writes the profile of every thread still registered (termination: the threads keep running;
// their arenas stay mapped).
void writeAllProfilesNow();
// Writes the profiles of ended threads still queued for the writer thread (exit, exec).
void writeEndedThreadsNow();

// ---------------------------------------------------------------------------------------------
// Load map: every module seen in this process (kept after dlclose so that old samples still
// resolve).

struct ModuleRecord {
  std::string path;
  std::vector<std::uint8_t> buildId;
  std::uint64_t begin = 0, end = 0, bias = 0;
  bool unnamed = false;  // the loader gave no name (the main program, anonymous objects)
};
// Records the modules loaded since the last call. Without a load or unload since, it costs two
// counter reads; otherwise one walk of the loader's list with a lookup per module, and only a
// module not seen before (at its address) is recorded: no allocation for a module reloaded
// where it was (a dlopen/dlclose loop).
void refreshLoadMap();
// The modules recorded so far, in order of first sight. Records are never changed or freed, so
// the view stays valid; modules recorded after it was taken are not in it.
class LoadMapView {
 public:
  explicit LoadMapView(std::size_t size) : size_(size) {}
  std::size_t size() const { return size_; }
  const ModuleRecord& operator[](std::size_t i) const;
  struct Iterator {
    const LoadMapView* view;
    std::size_t i;
    const ModuleRecord& operator*() const { return (*view)[i]; }
    Iterator& operator++() { return ++i, *this; }
    bool operator!=(const Iterator& o) const { return i != o.i; }
  };
  Iterator begin() const { return {this, 0}; }
  Iterator end() const { return {this, size_}; }

 private:
  std::size_t size_;
};
LoadMapView loadMapSnapshot();

// ---------------------------------------------------------------------------------------------
// Process identity (rank, fork generation) used for id tuples.

void setMpiRank(long rank, long size);  // MPI_COMM_WORLD's, learnt in MPI_Init

// ---------------------------------------------------------------------------------------------
// Work and idleness (idleness.cpp, ompt.cpp).

bool idlenessOn();                                      // config().idleness; initializes the library first
void ensureLibraryInitialized();                        // the constructor's work, if it has not run yet
void idlenessInit();                                    // once, in initialize(), after the sampler
void threadCounted(ThreadState& t, bool participates);  // in beginThread
void threadUncounted(ThreadState& t);                   // when the thread ends (or stops participating)
void idlenessAfterForkChild();                          // resets the process-wide counts and the lock table
// In the handler: a sample of the first event with `weight` periods landed on arena node `node`.
void accountSample(ThreadState& t, std::uint32_t node, std::uint64_t weight);
void updateWorking(ThreadState& t);  // after a change of the thread's state fields
// A wait the thread enters and leaves (normal context); the outermost one is charged to `metric`.
void beginWait(ThreadState& t, std::uint64_t nowNs = 0);  // nowNs: CLOCK_MONOTONIC if already read
// With `clipAtRegionEnd`, a wait that outlasted the end of an outermost OpenMP parallel region
// (a worker's barrier wait goes on while the pool is idle) counts only up to that end.
void endWait(ThreadState& t, int metric, bool clipAtRegionEnd = false);
void addCredit(ThreadState& t, int metric, std::uint64_t ns);  // charges when a period is full
void flushCredit(ThreadState& t);                              // the thread ends: leftover credit to its last contexts
std::uint64_t chargePeriodNs();                                // the period a credit must reach before it is charged
bool creatingHelperThreads();                                  // inside MPI_Init: threads created now do not count
void setCreatingHelperThreads(bool on);
std::string openmpToolState();  // "ompt (<runtime>)" or "none", for the settings

// OpenMP logical call paths (ompt.cpp). A sample taken in the body of a parallel region or an
// explicit task is recorded below a marker node at the root of the thread's tree, whose address
// is kLogicalMarker | the context's id; the writer turns markers into frames of the pseudo module
// "[omp context]" and adds the contexts that they reference (docs/profile-format.md).
inline constexpr std::uint64_t kLogicalMarker = 0xFFFF'F000'0000'0000ull;
inline constexpr std::uint32_t kPoolContext = 0xFFFF'FFFFu;  // a worker in the pool, between regions
// The context of the body the calling thread runs (0: none); read by the signal handler.
std::uint32_t currentLogicalContext();
// The arena node under which a path of the calling thread goes: the root, or its context's marker.
std::uint32_t logicalRoot(CctArena& a);  // sampler.cpp
struct LogicalContextRecord {
  std::uint32_t parent = 0;           // creator's context id, 0: created outside any context
  std::uint8_t kind = 0;              // 0: parallel region, 1: explicit task
  std::vector<std::uint64_t> frames;  // creator's return addresses, outermost first
};
// The record of context `id` (1-based); false if unknown.
bool logicalContext(std::uint32_t id, LogicalContextRecord& out);
std::uint64_t logicalContextCount();
// "ompt" (captured), "no-tool (<runtime>)" (an OpenMP runtime without OMPT: physical paths), "none" (no
// OpenMP runtime), "off" (CSP_LOGICAL=0); the profile's setting logical-contexts.
std::string logicalContextsState();
// Unwinds from here (normal context) over csp's frames and the runtime's frames in [runtimeBegin,
// runtimeEnd) at the top, then keeps the caller's frames until the next runtime frame or the
// stack's start: their return addresses (innermost first) and the stack words that hold them.
// `boundarySlot`: the word holding the runtime frame's return address that ended the walk (0:
// the stack's start). Returns how many frames, 0 on failure. sampler.cpp.
struct CreatorFrame {
  std::uint64_t address;  // return address
  std::uint64_t slot;     // where on the stack it is kept
};
std::uint32_t unwindCreator(ThreadState& t, std::uint64_t runtimeBegin, std::uint64_t runtimeEnd, CreatorFrame* out,
                            std::uint32_t max, std::uint64_t& boundarySlot);
std::string openmpRuntime();  // the OpenMP runtime's file name (ever loaded) or "none"
std::uint64_t lockTableOverflows();
// Locks (pthread mutexes and spin locks; waits.cpp wraps them).
bool lockAccountingOn();
// True when a release may have blame to collect: some thread waits for a lock, or this thread
// took a lock after waiting for it. One relaxed load in the common case.
bool lockMayCarryBlame(const ThreadState& t);
// The lock was busy since `sinceNs` (CLOCK_MONOTONIC): waits for it in acquire(call), idle,
// registered with the lock as a waiter; charges the wait from sinceNs as lock-wait. Returns
// acquire's result; errno is preserved.
int waitForLock(ThreadState& t, const void* lock, int (*acquire)(void*), void* call, std::uint64_t sinceNs);
// Before a release: the waiting the lock caused since its last release (ns), taken from it.
std::uint64_t takeBlame(ThreadState& t, const void* lock);
// After the release: charges the blame to the releasing context (errno preserved).
void chargeBlame(ThreadState& t, std::uint64_t blameNs);
// OpenMP: the end of an outermost parallel region, for clipping workers' barrier waits (ompt.cpp).
std::uint64_t parallelRegionEnds();
std::uint64_t parallelRegionEndNs(std::uint64_t index);
// True in a process that descends (by fork, or fork + exec) from the one first measured: its
// id tuples then carry its pid, so that they never repeat the first process's (or the rank's).
bool isDescendantProcess();
void writeThreadProfile(ThreadState& t);  // t must be Closed
// Appends the profiles of closed threads that ended while the process runs to the process's
// bundle, with one write for all of them.
void writeEndedThreadProfiles(std::span<ThreadState* const> threads);
void lockWriterForFork();
void unlockWriterAfterFork();
void reportOnce(const char* key, const std::string& message);
// Writes to stderr, ignoring failure: the program may have closed it (gawk does at exit), and a
// diagnostic must never throw or stop the program.
void say(const std::string& message) noexcept;

}  // namespace csp::measure
