// Internals of libcsp-measure.so shared by its translation units. Nothing here is exported:
// the library's only public symbols are the interposed functions (pthread_create, dlclose,
// MPI_Init, ...) and the region API; see measure/src/exports.map.
#pragma once

#include <signal.h>
#include <time.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace csp::measure {

inline constexpr int kMaxEvents = 4;
inline constexpr int kSampleSignal = SIGPROF;

struct EventConfig {
  std::string name;  // "cpu-time" or "real-time"
  clockid_t clock = CLOCK_THREAD_CPUTIME_ID;
  std::uint64_t periodNs = 5'000'000;
};

struct Config {
  std::string eventsText;  // as given, for the profile's settings
  std::vector<EventConfig> events;
  std::string output;  // measurement directory; empty until resolved
  std::string startDirectory;  // the working directory at start-up: relative outputs resolve here
  bool regionLog = false;
  std::uint32_t regionLogCapacity = 1u << 20;  // events per thread
  int verbose = 0;
  std::uint32_t maxDepth = 4096;
  std::uint32_t maxNodes = 1u << 18;
};

// Parses the CSP_* environment. Bad values are reported on stderr and replaced by defaults:
// a measurement tool must never stop the program it measures.
Config readConfig();

// ---------------------------------------------------------------------------------------------
// Per-thread sampled calling context tree in a pre-mapped arena. Only the owning thread's
// signal handler writes it; a writer reads it only after taking the thread's state to Closed.

struct CctNode {
  std::uint64_t address;  // leaf: interrupted PC; interior: return address
  std::uint32_t parent;
  std::uint64_t count[kMaxEvents];
};

struct CctArena {
  CctNode* nodes = nullptr;
  std::uint32_t* table = nullptr;  // open addressing, node index + 1, 0 = empty
  std::uint64_t* path = nullptr;   // scratch for one unwind, maxDepth entries
  std::uint32_t capacity = 0;
  std::uint32_t size = 0;
  std::uint32_t tableMask = 0;
  std::uint32_t maxDepth = 0;
  void* mapping = nullptr;
  std::size_t mappingBytes = 0;
};

bool mapArena(CctArena& a, std::uint32_t maxNodes, std::uint32_t maxDepth);
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

enum class Phase : int { Active = 0, Busy = 1, Closed = 2 };

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
  std::uint64_t foreignSignals = 0;  // SIGPROF not sent by our timers
  CctArena cct;
  RegionThreadState* regions = nullptr;  // created with the state, so that writers need no lock
  // The thread's alternate signal stack for the sampling handler, if the library installed it
  // (a program's own alternate stack is left in place): mapping, its size with the guard page.
  void* altStack = nullptr;
  std::size_t altStackBytes = 0;
};

// The calling thread's state, readable from the signal handler: initial-exec TLS never
// allocates, unlike the general dynamic model.
extern thread_local ThreadState* tlsThread __attribute__((tls_model("initial-exec")));

// Set while the thread runs code during which unwinding is unsafe (the loader changing its
// module list in dlclose); samples are then dropped and counted.
extern thread_local int tlsUnsafe __attribute__((tls_model("initial-exec")));

const Config& config();
std::uint64_t realtimeNs();
std::uint64_t monotonicNs();

bool installSampler();             // once per process, before any timer starts; false: no sampling
bool startTimers(ThreadState& t);  // in the thread itself
void stopTimers(ThreadState& t);
bool samplerStillInstalled();      // false if the program took over the sampling signal
// "no"; "intercepted" (the program asked for SIGPROF, csp kept it and forwards foreign
// SIGPROFs); "yes" (the handler was replaced behind the interposer: samples are lost).
const char* samplingSignalState();

// ---------------------------------------------------------------------------------------------
// Load map: every module seen in this process (kept after dlclose so that old samples still
// resolve).

struct ModuleRecord {
  std::string path;
  std::vector<std::uint8_t> buildId;
  std::uint64_t begin = 0, end = 0, bias = 0;
};
void refreshLoadMap();
std::vector<ModuleRecord> loadMapSnapshot();

// ---------------------------------------------------------------------------------------------
// Process identity (rank, fork generation) used for id tuples.

void setMpiRank(long rank);
// True in a process that descends (by fork, or fork + exec) from the one first measured: its
// id tuples then carry its pid, so that they never repeat the first process's (or the rank's).
bool isDescendantProcess();
void writeThreadProfile(ThreadState& t);  // t must be Closed
void reportOnce(const char* key, const std::string& message);
// Writes to stderr, ignoring failure: the program may have closed it (gawk does at exit), and a
// diagnostic must never throw or stop the program.
void say(const std::string& message) noexcept;

}  // namespace csp::measure
