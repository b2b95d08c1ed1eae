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
#include <dlfcn.h>

#include <atomic>
#include <cstdint>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

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
constexpr int kThreadBegin = 1, kParallelBegin = 3, kParallelEnd = 4, kTaskCreate = 5, kTaskSchedule = 6,
              kImplicitTask = 7, kSyncRegionWait = 16, kMutexAcquire = 26, kMutexAcquired = 27;
// ompt_thread_t
constexpr int kThreadWorker = 2, kThreadOther = 3;
// ompt_scope_endpoint_t
constexpr int kScopeBegin = 1, kScopeEnd = 2;
// ompt_task_flag_t
constexpr int kTaskInitial = 0x1, kTaskExplicit = 0x4, kTaskTarget = 0x8;
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

// ---- Logical call paths (thesis ch. 4; docs/measurement.md "OpenMP: logical call paths") ----
//
// A parallel region or explicit task is created in a context: the creator's logical context
// (the body it runs, or none) and the creator's frames from that body's entry (or the stack's
// start) down to the call into the runtime. Contexts are interned: the first creation with a
// given key unwinds the creator once, later ones cost a lookup in a per-thread cache. The key is
// (creator's context, return address of the construct, stack distance from the body's entry to
// the creation): the same construct reached by another call chain within the same body sits at
// another stack depth. A task's or region's data holds its context id (low 32 bits) and the low
// 32 bits of its body's stack pointer once it runs (high 32 bits).

constinit std::atomic<bool> g_logicalOn{false};
constinit std::uint64_t g_runtimeBegin = 0, g_runtimeEnd = 0;  // the runtime's code, from its lookup function
thread_local std::uint32_t tlsContext __attribute__((tls_model("initial-exec"))) = 0;
thread_local bool tlsOmpWorker __attribute__((tls_model("initial-exec"))) = false;

struct ContextKey {
  std::uint32_t parent;
  std::uint32_t distance;
  std::uint64_t codeptr;  // with the kind in its top bit
  bool operator==(const ContextKey&) const = default;
};
struct ContextKeyHash {
  std::size_t operator()(const ContextKey& k) const {
    std::uint64_t h = k.codeptr * 0x9E3779B97F4A7C15ull ^ (std::uint64_t{k.parent} << 32 | k.distance);
    return static_cast<std::size_t>(h ^ (h >> 31));
  }
};
struct ContextTable {
  std::mutex lock;
  std::unordered_map<ContextKey, std::uint32_t, ContextKeyHash> ids;
  std::vector<LogicalContextRecord> records;  // id - 1
};
ContextTable& contextTable() {
  static ContextTable* table = new ContextTable;  // never destroyed: writers run at exit
  return *table;
}
struct CacheEntry {
  ContextKey key;
  std::uint32_t id;
};
constexpr std::size_t kCacheSize = 256;
thread_local CacheEntry tlsCache[kCacheSize] __attribute__((tls_model("initial-exec")));

std::uint32_t stackLow() {
  return static_cast<std::uint32_t>(reinterpret_cast<std::uintptr_t>(__builtin_frame_address(0)));
}
std::uint32_t contextOf(const Data* d) { return d == nullptr ? 0 : static_cast<std::uint32_t>(d->value); }
std::uint32_t bodyStackOf(const Data* d) { return d == nullptr ? 0 : static_cast<std::uint32_t>(d->value >> 32); }

std::uint32_t internSlow(const ContextKey& key, std::uint8_t kind) {
  ThreadState* t = tlsThread;
  LogicalContextRecord record{key.parent, kind, {}};
  if (t != nullptr) {
    std::uint64_t frames[256];
    const std::uint32_t n = unwindCreator(*t, g_runtimeBegin, g_runtimeEnd, frames, 256);
    record.frames.assign(frames, frames + n);
  }
  TerminationGuard guard;
  ContextTable& table = contextTable();
  std::lock_guard<std::mutex> hold(table.lock);
  auto [it, inserted] = table.ids.try_emplace(key, static_cast<std::uint32_t>(table.records.size() + 1));
  if (inserted) table.records.push_back(std::move(record));
  return it->second;
}

// The context created here by the task whose data is `encountering` (called from a callback).
std::uint32_t createContext(const Data* encountering, const void* codeptr, std::uint8_t kind) {
  const std::uint32_t parent = contextOf(encountering);
  const std::uint32_t body = parent != 0 ? bodyStackOf(encountering) : 0;
  const ContextKey key{parent, body - stackLow(),
                       reinterpret_cast<std::uintptr_t>(codeptr) | std::uint64_t{kind} << 63};
  CacheEntry& e = tlsCache[ContextKeyHash{}(key) % kCacheSize];
  if (e.id != 0 && e.key == key) return e.id;
  e = {key, internSlow(key, kind)};
  return e.id;
}

void enterBody(Data* task, std::uint32_t context) {
  if (task == nullptr) return;
  if (task->value >> 32 == 0) task->value = context | std::uint64_t{stackLow()} << 32;
  tlsContext = context;
}

void onLogicalParallelBegin(Data* encountering, Data* parallel, const void* codeptr) {
  if (parallel != nullptr) parallel->value = createContext(encountering, codeptr, 0);
}

void onTaskCreate(Data* encountering, const void*, Data* task, int flags, int, const void* codeptr) {
  if (task == nullptr) return;
  const bool created = (flags & ompt::kTaskExplicit) != 0 && (flags & ompt::kTaskTarget) == 0;
  task->value = created && g_logicalOn.load(std::memory_order_relaxed) ? createContext(encountering, codeptr, 1) : 0;
}

void onTaskSchedule(Data*, int, Data* next) {
  if (next != nullptr) enterBody(next, contextOf(next));
}

void onThreadBegin(int type, Data*) {
  if (type == ompt::kThreadWorker) {
    tlsOmpWorker = true;
    if (g_logicalOn.load(std::memory_order_relaxed)) tlsContext = kPoolContext;
  }
  ThreadState* t = current();
  if (t == nullptr) return;
  if (type == ompt::kThreadWorker) {
    t->ompWorker = true;  // idle until its first implicit task
    updateWorking(*t);
  } else if (type == ompt::kThreadOther) {
    threadUncounted(*t);  // a runtime helper, not one of the program's threads
  }
}

void onParallelBegin(Data* encountering, const void*, Data* parallel, unsigned, int, const void* codeptr) {
  ++tlsParallelDepth;
  if (g_logicalOn.load(std::memory_order_relaxed)) onLogicalParallelBegin(encountering, parallel, codeptr);
}

void onParallelEnd(Data*, Data* encountering, int, const void*) {
  if (g_logicalOn.load(std::memory_order_relaxed)) tlsContext = contextOf(encountering);  // back in the creator
  if (tlsParallelDepth <= 0 || --tlsParallelDepth != 0) return;                           // a nested region ended
  const std::uint64_t k = g_regionEnds.load(std::memory_order_relaxed);
  g_regionEndNs[k % kEndRing].store(monotonicNs(), std::memory_order_relaxed);
  g_regionEnds.store(k + 1, std::memory_order_release);
}

void onImplicitTask(int endpoint, Data* parallel, Data* task, unsigned, unsigned, int flags) {
  if (g_logicalOn.load(std::memory_order_relaxed) && (flags & ompt::kTaskInitial) == 0) {
    if (endpoint == ompt::kScopeBegin)
      enterBody(task, contextOf(parallel));
    else if (endpoint == ompt::kScopeEnd)
      tlsContext = tlsOmpWorker ? kPoolContext : 0;  // a master gets its creator's back at parallel-end
  }
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
  struct dl_find_object runtime;
  if (config().logical && _dl_find_object(reinterpret_cast<void*>(lookup), &runtime) == 0) {
    g_runtimeBegin = reinterpret_cast<std::uintptr_t>(runtime.dlfo_map_start);
    g_runtimeEnd = reinterpret_cast<std::uintptr_t>(runtime.dlfo_map_end);
    g_logicalOn.store(true);
    set(ompt::kTaskCreate, cb(&onTaskCreate));
    set(ompt::kTaskSchedule, cb(&onTaskSchedule));
  }
  set(ompt::kThreadBegin, cb(&onThreadBegin));
  set(ompt::kParallelBegin, cb(&onParallelBegin));
  set(ompt::kParallelEnd, cb(&onParallelEnd));
  set(ompt::kImplicitTask, cb(&onImplicitTask));
  if (config().idleness) {
    set(ompt::kSyncRegionWait, cb(&onSyncRegionWait));
    set(ompt::kMutexAcquire, cb(&onMutexAcquire));
    set(ompt::kMutexAcquired, cb(&onMutexAcquired));
  }
  g_toolActive.store(true);
  // The thread that starts the runtime (usually the main thread) is the initial thread: it
  // works outside parallel regions, so nothing changes for it.
  return 1;  // keep the tool
}

void finalizeTool(Data*) { g_toolActive.store(false); }

}  // namespace

std::uint32_t currentLogicalContext() { return tlsContext; }

bool logicalContext(std::uint32_t id, LogicalContextRecord& out) {
  TerminationGuard guard;
  ContextTable& table = contextTable();
  std::lock_guard<std::mutex> hold(table.lock);
  if (id == 0 || id > table.records.size()) return false;
  out = table.records[id - 1];
  return true;
}

std::uint64_t logicalContextCount() {
  TerminationGuard guard;
  ContextTable& table = contextTable();
  std::lock_guard<std::mutex> hold(table.lock);
  return table.records.size();
}

std::string logicalContextsState() {
  if (g_logicalOn.load()) return "ompt";
  if (!config().logical) return "off";
  return openmpRuntime() == "none" ? "none" : "no-tool";
}

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

// Looked up by the OpenMP runtime at its start. Without idleness accounting and logical call
// paths csp declines, and the runtime goes on to OMP_TOOL_LIBRARIES as usual.
extern "C" __attribute__((visibility("default"))) csp::measure::ompt::StartToolResult* ompt_start_tool(
    unsigned int, const char* runtimeVersion) {
  using namespace csp::measure;
  if (!idlenessOn() && !config().logical) return nullptr;
  static ompt::StartToolResult result{&initializeTool, &finalizeTool, {0}};
  if (g_runtime == nullptr) g_runtime = new std::string(runtimeVersion != nullptr ? runtimeVersion : "");
  return &result;
}
