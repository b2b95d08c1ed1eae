// The OpenMP tool (OMPT, OpenMP 5.0 §4): where an OpenMP runtime with OMPT support (LLVM's
// libomp, Intel's libiomp5) finds `ompt_start_tool` in the process, it asks it for a tool, and
// csp's answer (with idleness accounting on) registers callbacks that tell it when threads wait:
//   - a worker thread (ompt_thread_worker) is idle outside its implicit tasks (in the pool);
//   - a sync region wait (barriers, taskwait, taskgroup) is idle, charged as sync-wait, but a
//     worker's wait at a region's closing barrier counts only up to the end of that region (the
//     runtime reports it as going on while the worker idles in the pool until the next region);
//   - waiting for an OpenMP lock, critical section or ordered region is idle, charged as
//     lock-wait (nest locks are left out: their re-acquisition has no "acquired" callback);
//   - runtime threads other than workers (ompt_thread_other) do not count in n.
// GCC's libgomp has no OMPT: it never calls ompt_start_tool, and its threads are plain threads
// for csp (docs/measurement.md).
//
// The declarations below are the parts of the OMPT interface that csp uses, with the values and
// signatures the OpenMP 5.0 specification gives them; they are declared here so that building
// csp needs no OpenMP runtime's headers.
#include <atomic>
#include <cstdint>
#include <mutex>
#include <string>

#include "runtime.hpp"

namespace csp::measure::ompt {

union Data {
  std::uint64_t value;
  void* ptr;
};
using Callback = void (*)();
using InterfaceFn = void (*)();
using FunctionLookup = InterfaceFn (*)(const char* name);
using SetCallback = int (*)(int event, Callback callback);
using Initialize = int (*)(FunctionLookup lookup, int initialDeviceNum, Data* toolData);
using Finalize = void (*)(Data* toolData);
struct StartToolResult {
  Initialize initialize;
  Finalize finalize;
  Data toolData;
};

// ompt_callbacks_t
constexpr int kThreadBegin = 1, kParallelBegin = 3, kParallelEnd = 4, kImplicitTask = 7, kSyncRegionWait = 16,
              kMutexAcquire = 26, kMutexAcquired = 27;
// ompt_thread_t
constexpr int kThreadWorker = 2, kThreadOther = 3;
// ompt_scope_endpoint_t
constexpr int kScopeBegin = 1, kScopeEnd = 2;
// ompt_task_flag_t
constexpr int kTaskInitial = 0x1;
// ompt_mutex_t
constexpr int kMutexLock = 1, kMutexCritical = 5, kMutexOrdered = 7;

}  // namespace csp::measure::ompt

namespace csp::measure {
namespace {

using ompt::Data;

constinit std::atomic<bool> g_toolActive{false};
std::string* g_runtime = nullptr;  // the runtime's version string, set once by ompt_start_tool

// Ends of outermost parallel regions: a counter and the times of the last 64.
constexpr std::size_t kEndRing = 64;
constinit std::atomic<std::uint64_t> g_regionEnds{0};
constinit std::atomic<std::uint64_t> g_regionEndNs[kEndRing] = {};
thread_local int tlsParallelDepth __attribute__((tls_model("initial-exec"))) = 0;
thread_local bool tlsMutexWait __attribute__((tls_model("initial-exec"))) = false;

ThreadState* current() {
  ThreadState* t = tlsThread;
  return t != nullptr && t->counted ? t : nullptr;
}

void onThreadBegin(int type, Data*) {
  ThreadState* t = current();
  if (t == nullptr) return;
  if (type == ompt::kThreadWorker) {
    t->ompWorker = true;  // idle until its first implicit task
    updateWorking(*t);
  } else if (type == ompt::kThreadOther) {
    threadUncounted(*t);  // a runtime helper, not one of the program's threads
  }
}

void onParallelBegin(Data*, const void*, Data*, unsigned, int, const void*) { ++tlsParallelDepth; }

void onParallelEnd(Data*, Data*, int, const void*) {
  if (tlsParallelDepth <= 0 || --tlsParallelDepth != 0) return;  // a nested region ended
  const std::uint64_t k = g_regionEnds.load(std::memory_order_relaxed);
  g_regionEndNs[k % kEndRing].store(monotonicNs(), std::memory_order_relaxed);
  g_regionEnds.store(k + 1, std::memory_order_release);
}

void onImplicitTask(int endpoint, Data*, Data*, unsigned, unsigned, int flags) {
  ThreadState* t = current();
  if (t == nullptr || (flags & ompt::kTaskInitial) != 0) return;
  if (endpoint == ompt::kScopeBegin)
    ++t->ompImplicitTasks;
  else if (endpoint == ompt::kScopeEnd && t->ompImplicitTasks > 0)
    --t->ompImplicitTasks;
  updateWorking(*t);
}

void onSyncRegionWait(int, int endpoint, Data*, Data*, const void*) {
  ThreadState* t = current();
  if (t == nullptr) return;
  if (endpoint == ompt::kScopeBegin)
    beginWait(*t);
  else if (endpoint == ompt::kScopeEnd)
    endWait(*t, kSyncWait, true);
}

bool blockingMutex(int kind) {
  return kind == ompt::kMutexLock || kind == ompt::kMutexCritical || kind == ompt::kMutexOrdered;
}

void onMutexAcquire(int kind, unsigned, unsigned, std::uint64_t, const void*) {
  ThreadState* t = current();
  if (t == nullptr || !blockingMutex(kind) || tlsMutexWait) return;
  tlsMutexWait = true;
  beginWait(*t);
}

void onMutexAcquired(int kind, std::uint64_t, const void*) {
  ThreadState* t = current();
  if (t == nullptr || !blockingMutex(kind) || !tlsMutexWait) return;
  tlsMutexWait = false;
  endWait(*t, kLockWait);
}

int initializeTool(ompt::FunctionLookup lookup, int, Data*) {
  auto set = reinterpret_cast<ompt::SetCallback>(lookup("ompt_set_callback"));
  if (set == nullptr) return 0;
  auto cb = [](auto fn) { return reinterpret_cast<ompt::Callback>(fn); };
  set(ompt::kThreadBegin, cb(&onThreadBegin));
  set(ompt::kParallelBegin, cb(&onParallelBegin));
  set(ompt::kParallelEnd, cb(&onParallelEnd));
  set(ompt::kImplicitTask, cb(&onImplicitTask));
  set(ompt::kSyncRegionWait, cb(&onSyncRegionWait));
  set(ompt::kMutexAcquire, cb(&onMutexAcquire));
  set(ompt::kMutexAcquired, cb(&onMutexAcquired));
  g_toolActive.store(true);
  // The thread that starts the runtime (usually the main thread) is the initial thread: it
  // works outside parallel regions, so nothing changes for it.
  return 1;  // keep the tool
}

void finalizeTool(Data*) { g_toolActive.store(false); }

}  // namespace

std::uint64_t parallelRegionEnds() { return g_regionEnds.load(std::memory_order_acquire); }

std::uint64_t parallelRegionEndNs(std::uint64_t index) {
  return g_regionEndNs[index % kEndRing].load(std::memory_order_relaxed);
}

std::string openmpToolState() {
  if (g_runtime == nullptr) return "none";
  return "ompt (" + *g_runtime + ")";
}

// The OpenMP runtime in the load map, known by its file name, with or without OMPT (libgomp has
// none, libomp's can be disabled with OMP_TOOL=disabled): where it found no tool, its threads are
// plain threads to csp, working while they wait in the runtime, so OpenMP idleness was not
// measured (post-processing and csp-views --effort say so).
std::string openmpRuntime() {
  refreshLoadMap();
  for (const auto& m : loadMapSnapshot()) {
    const std::string name = m.path.substr(m.path.find_last_of('/') + 1);
    for (const char* runtime : {"libgomp.so", "libgomp-", "libomp.so", "libiomp5.so"})
      if (name.rfind(runtime, 0) == 0) return name;
  }
  return "none";
}

}  // namespace csp::measure

// Looked up by the OpenMP runtime at its start. Without idleness accounting csp declines, and
// the runtime goes on to OMP_TOOL_LIBRARIES as usual.
extern "C" __attribute__((visibility("default"))) csp::measure::ompt::StartToolResult* ompt_start_tool(
    unsigned int, const char* runtimeVersion) {
  using namespace csp::measure;
  if (!idlenessOn()) return nullptr;
  static ompt::StartToolResult result{&initializeTool, &finalizeTool, {0}};
  if (g_runtime == nullptr) g_runtime = new std::string(runtimeVersion != nullptr ? runtimeVersion : "");
  return &result;
}
