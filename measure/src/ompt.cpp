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
#include <pthread.h>

#include <algorithm>
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
// start) down to the call into the runtime. Unwinding is slow (libunwind without its cache, some
// µs a frame), so the creator's frames are unwound once per *frame set*: the return addresses
// and the stack words that held them, relative to the callback's frame. A later creation at the
// same construct whose stack holds the same return addresses in the same words has the same
// frames (a different caller anywhere on the chain puts another return address in its word; a
// frame of another size moves them), which costs a few loads to check. Contexts are interned by
// (creator's context, frame set); a per-thread cache remembers the last context per (creator's
// context, construct). A region's or task's data holds its context id.

constinit std::atomic<bool> g_logicalOn{false};
constinit std::uint64_t g_runtimeBegin = 0, g_runtimeEnd = 0;  // the runtime's code, from its lookup function
thread_local std::uint32_t tlsContext __attribute__((tls_model("initial-exec"))) = 0;
thread_local bool tlsOmpWorker __attribute__((tls_model("initial-exec"))) = false;
thread_local std::uintptr_t tlsStackEnd __attribute__((tls_model("initial-exec"))) = 0;  // 1: unknown

struct FrameSet {
  std::uint64_t codeptr;
  std::vector<std::uint64_t> frames;  // return addresses, innermost first
  std::vector<std::uint32_t> slots;   // the words that hold them, bytes above the callback's frame
  std::uint32_t boundary = 0;         // 1 + the word of the runtime's return address that ends them; 0: none
  std::uint32_t highest = 0;          // the highest word read
};

// The highest stack address of the calling thread (once per thread; 1 if unknown).
std::uintptr_t stackEnd() {
  if (tlsStackEnd != 0) return tlsStackEnd;
  tlsStackEnd = 1;
  pthread_attr_t attr;
  if (pthread_getattr_np(pthread_self(), &attr) == 0) {
    void* addr = nullptr;
    std::size_t size = 0;
    if (pthread_attr_getstack(&attr, &addr, &size) == 0) tlsStackEnd = reinterpret_cast<std::uintptr_t>(addr) + size;
    pthread_attr_destroy(&attr);
  }
  return tlsStackEnd;
}

// Whether the stack above the callback's frame `base` holds the frame set's return addresses.
// (It reads the words of the callers' frames: not a sanitizer's business.)
__attribute__((no_sanitize("address", "undefined"))) bool onStack(const FrameSet& f, std::uintptr_t base) {
  if (base + f.highest + 8 > stackEnd()) return false;
  auto word = [&](std::uint32_t offset) { return *reinterpret_cast<const std::uint64_t*>(base + offset); };
  for (std::size_t i = 0; i < f.frames.size(); ++i)
    if (word(f.slots[i]) != f.frames[i]) return false;
  if (f.boundary == 0) return true;
  const std::uint64_t ra = word(f.boundary - 1);
  return ra >= g_runtimeBegin && ra < g_runtimeEnd;
}

struct ContextKey {
  std::uint32_t parent;
  const FrameSet* frames;
  bool operator==(const ContextKey&) const = default;
};
struct ContextKeyHash {
  std::size_t operator()(const ContextKey& k) const {
    const std::uint64_t h = reinterpret_cast<std::uintptr_t>(k.frames) * 0x9E3779B97F4A7C15ull ^ k.parent;
    return static_cast<std::size_t>(h ^ (h >> 31));
  }
};
struct ContextTable {
  std::mutex lock;
  std::unordered_map<std::uint64_t, std::vector<const FrameSet*>> frameSets;  // by construct; never freed
  std::unordered_map<ContextKey, std::uint32_t, ContextKeyHash> ids;
  std::vector<std::pair<ContextKey, std::uint8_t>> records;  // id - 1: key and kind
};
ContextTable& contextTable() {
  static ContextTable* table = new ContextTable;  // never destroyed: writers run at exit
  return *table;
}
struct CacheEntry {
  std::uint32_t parent;
  std::uint32_t id;
  std::uint64_t codeptr;
  const FrameSet* frames;
};
constexpr std::size_t kCacheSize = 256;
thread_local CacheEntry tlsCache[kCacheSize] __attribute__((tls_model("initial-exec")));

std::uint32_t contextOf(const Data* d) { return d == nullptr ? 0 : static_cast<std::uint32_t>(d->value); }

// A frame set of `codeptr` that the stack above `base` holds (table locked), nullptr if none.
const FrameSet* knownFrameSet(ContextTable& table, std::uint64_t codeptr, std::uintptr_t base) {
  for (const FrameSet* f : table.frameSets[codeptr])
    if (onStack(*f, base)) return f;
  return nullptr;
}

// Unwinds the creator (table not locked); its frames as a frame set, not yet in the table.
FrameSet* unwoundFrameSet(std::uint64_t codeptr, std::uintptr_t base) {
  auto* f = new FrameSet{codeptr, {}, {}, 0, 0};
  ThreadState* t = tlsThread;
  if (t == nullptr) return f;
  CreatorFrame frames[256];
  std::uint64_t boundary = 0;
  const std::uint32_t n = unwindCreator(*t, g_runtimeBegin, g_runtimeEnd, frames, 256, boundary);
  auto offset = [&](std::uint64_t slot) { return slot > base && slot - base < (1u << 30); };
  bool checkable = boundary == 0 || offset(boundary);
  for (std::uint32_t i = 0; i < n; ++i) {
    f->frames.push_back(frames[i].address);
    checkable = checkable && offset(frames[i].slot);
    f->slots.push_back(checkable ? static_cast<std::uint32_t>(frames[i].slot - base) : 0);
    f->highest = std::max(f->highest, f->slots.back());
  }
  if (boundary != 0 && checkable) f->boundary = static_cast<std::uint32_t>(boundary - base) + 1;
  f->highest = std::max(f->highest, f->boundary);
  if (!checkable) f->highest = ~0u >> 1;  // never matches: every creation like it unwinds again
  return f;
}

std::uint32_t internSlow(std::uint32_t parent, std::uint64_t codeptr, std::uint8_t kind, std::uintptr_t base,
                         const FrameSet*& frames) {
  ContextTable& table = contextTable();
  {
    TerminationGuard guard;
    std::lock_guard<std::mutex> hold(table.lock);
    frames = knownFrameSet(table, codeptr, base);
  }
  FrameSet* fresh = frames == nullptr ? unwoundFrameSet(codeptr, base) : nullptr;
  TerminationGuard guard;
  std::lock_guard<std::mutex> hold(table.lock);
  if (fresh != nullptr) {
    table.frameSets[codeptr].push_back(fresh);
    frames = fresh;
  }
  const ContextKey key{parent, frames};
  auto [it, inserted] = table.ids.try_emplace(key, static_cast<std::uint32_t>(table.records.size() + 1));
  if (inserted) table.records.emplace_back(key, kind);
  return it->second;
}

// The context created by the task whose data is `encountering`, at the construct `codeptr`, from
// a callback whose frame is `base`.
std::uint32_t createContext(const Data* encountering, const void* codeptr, std::uint8_t kind, std::uintptr_t base) {
  const std::uint32_t parent = contextOf(encountering);
  const std::uint64_t construct = reinterpret_cast<std::uintptr_t>(codeptr);
  CacheEntry& e = tlsCache[(construct * 0x9E3779B97F4A7C15ull ^ parent) % kCacheSize];
  if (e.id != 0 && e.parent == parent && e.codeptr == construct && onStack(*e.frames, base)) return e.id;
  const FrameSet* frames = nullptr;
  const std::uint32_t id = internSlow(parent, construct, kind, base, frames);
  e = {parent, id, construct, frames};
  return id;
}

// The frame of the callback (noinline, so that it always has one at the same place relative to
// the runtime's frames): frame sets count their words from it.
#define CSP_FRAME_BASE() reinterpret_cast<std::uintptr_t>(__builtin_frame_address(0))

void enterBody(std::uint32_t context) { tlsContext = context; }

__attribute__((noinline)) void onLogicalParallelBegin(Data* encountering, Data* parallel, const void* codeptr) {
  if (parallel != nullptr) parallel->value = createContext(encountering, codeptr, 0, CSP_FRAME_BASE());
}

__attribute__((noinline)) void onTaskCreate(Data* encountering, const void*, Data* task, int flags, int,
                                            const void* codeptr) {
  if (task == nullptr) return;
  const bool created = (flags & ompt::kTaskExplicit) != 0 && (flags & ompt::kTaskTarget) == 0;
  task->value = created && g_logicalOn.load(std::memory_order_relaxed)
                    ? createContext(encountering, codeptr, 1, CSP_FRAME_BASE())
                    : 0;
}

void onTaskSchedule(Data*, int, Data* next) {
  if (next != nullptr) enterBody(contextOf(next));
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
    if (endpoint == ompt::kScopeBegin && task != nullptr)
      enterBody(static_cast<std::uint32_t>(task->value = contextOf(parallel)));
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
  const auto& [key, kind] = table.records[id - 1];
  out.parent = key.parent;
  out.kind = kind;
  out.frames.assign(key.frames->frames.rbegin(), key.frames->frames.rend());
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
  const std::string runtime = openmpRuntime();
  return runtime == "none" ? "none" : "no-tool (" + runtime + ")";
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
    std::string name = m.path.substr(m.path.find_last_of('/') + 1);
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
