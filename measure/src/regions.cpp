// The recording region API (interposes libcsp-regions' no-ops). Per-thread state only, except
// for the process-wide name table, which is locked when a thread meets a name for the first
// time.
#include <sched.h>
#include <sys/mman.h>

#include <cstring>
#include <mutex>
#include <string>
#include <unordered_map>

#include "csp/measure/regions.h"
#include "runtime.hpp"

#define CSP_EXPORT extern "C" __attribute__((visibility("default")))

namespace csp::measure {

namespace {

// Built on first use: region calls can come from other libraries' constructors, before this
// file's dynamic initializers would have run.
struct NameTable {
  std::mutex mutex;
  std::vector<std::string> names;
  std::unordered_map<std::string, std::uint32_t> index;
  std::unordered_map<std::uint32_t, std::string> registeredIds;
};
NameTable& nameTable() {
  static NameTable* table = new NameTable;  // never destroyed: threads may outlive exit handlers
  return *table;
}

std::uint32_t internName(const std::string& name) {
  NameTable& t = nameTable();
  std::lock_guard lock(t.mutex);
  auto [it, inserted] = t.index.try_emplace(name, static_cast<std::uint32_t>(t.names.size()));
  if (inserted) t.names.push_back(name);
  return it->second;
}

struct ChildKey {
  std::uint32_t parent, name;
  std::uint64_t dynamicId;
  bool operator==(const ChildKey&) const = default;
};
struct ChildKeyHash {
  std::size_t operator()(const ChildKey& k) const {
    std::uint64_t h = (std::uint64_t{k.parent} << 32 | k.name) * 0x9E3779B97F4A7C15ull;
    h ^= k.dynamicId * 0xC2B2AE3D27D4EB4Full;
    return static_cast<std::size_t>(h ^ (h >> 31));
  }
};

struct CachedName {
  std::uint32_t id;
  std::string text;  // to notice a buffer that was reused for another name
};

struct OpenRegion {
  std::uint32_t node;
  std::uint64_t enterNs;
  std::uint64_t childNs;  // inclusive time of completed child regions
};

}  // namespace

struct RegionThreadState {
  // Active (0) / in a region call (1) / closed (2). A thread still running at process exit may
  // be inside a region call while the exit handler writes its profile: the writer closes the
  // state first, and calls after that do nothing.
  std::atomic<int> phase{0};
  std::vector<RegionNode> nodes;
  std::unordered_map<ChildKey, std::uint32_t, ChildKeyHash> children;
  std::unordered_map<const char*, CachedName> byPointer;
  std::unordered_map<std::uint32_t, std::uint32_t> byStaticId;
  std::vector<OpenRegion> stack;
  // Event log: a fixed mapping; once full, later events are counted as lost, so the log is
  // always a complete prefix of what happened.
  RegionEvent* log = nullptr;
  std::uint32_t logCapacity = 0;
  std::uint32_t logSize = 0;
  bool logFailed = false;
  std::uint64_t eventsLost = 0;
  std::uint64_t mismatchedEnds = 0;
  // MPI calls (clocksync.cpp), bounded like the region log.
  std::vector<CommEvent> comm;
  std::uint64_t commLost = 0;

  RegionThreadState() { nodes.push_back({0xFFFFFFFFu, 0, 0}); }
  ~RegionThreadState() {
    if (log != nullptr) munmap(log, std::size_t{logCapacity} * sizeof(RegionEvent));
  }

  void logEvent(std::uint32_t node, std::uint64_t now, std::uint32_t flags, std::int64_t attr) {
    if (!config().regionLog) return;
    if (log == nullptr && !logFailed) {
      const std::size_t bytes = std::size_t{config().regionLogCapacity} * sizeof(RegionEvent);
      void* m = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
      if (m == MAP_FAILED) {
        logFailed = true;
      } else {
        log = static_cast<RegionEvent*>(m);
        logCapacity = config().regionLogCapacity;
      }
    }
    if (logSize < logCapacity)
      log[logSize++] = {now, node, flags, attr};
    else
      ++eventsLost;
  }

  void enter(std::uint32_t name, std::uint64_t dynamicId, std::uint32_t flags = kEventEnter, std::int64_t attr = 0) {
    const std::uint32_t parent = stack.empty() ? 0 : stack.back().node;
    auto [it, inserted] =
        children.try_emplace(ChildKey{parent, name, dynamicId}, static_cast<std::uint32_t>(nodes.size()));
    if (inserted) nodes.push_back({parent, name, dynamicId});
    const std::uint64_t now = monotonicNs();
    stack.push_back({it->second, now, 0});
    logEvent(it->second, now, flags, attr);
  }

  void leave() {
    if (stack.empty()) {
      ++mismatchedEnds;
      return;
    }
    const std::uint64_t now = monotonicNs();
    const OpenRegion open = stack.back();
    stack.pop_back();
    const std::uint64_t inclusive = now - open.enterNs;
    RegionNode& n = nodes[open.node];
    n.count += 1;
    n.inclusiveNs += inclusive;
    n.exclusiveNs += inclusive > open.childNs ? inclusive - open.childNs : 0;
    if (!stack.empty()) stack.back().childNs += inclusive;
    logEvent(open.node, now, 0, 0);
  }
};

namespace {

// The calling thread's region state, entered for one API call; null when the thread is not
// measured or its profile is being written.
class RegionCall {
 public:
  RegionCall() {
    ThreadState* t = tlsThread;
    if (t == nullptr || t->regions == nullptr) return;
    int expected = 0;
    if (t->regions->phase.compare_exchange_strong(expected, 1, std::memory_order_acquire)) state_ = t->regions;
  }
  ~RegionCall() {
    if (state_ != nullptr) state_->phase.store(0, std::memory_order_release);
  }
  RegionCall(const RegionCall&) = delete;
  RegionCall& operator=(const RegionCall&) = delete;
  RegionThreadState* operator->() const { return state_; }
  explicit operator bool() const { return state_ != nullptr; }

 private:
  RegionThreadState* state_ = nullptr;
};

}  // namespace

RegionThreadState* createRegionState() { return new (std::nothrow) RegionThreadState; }

void closeRegionState(RegionThreadState* r) {
  if (r == nullptr) return;
  for (int spins = 0; spins < 100000; ++spins) {
    int expected = 0;
    if (r->phase.compare_exchange_strong(expected, 2, std::memory_order_acquire) || expected == 2) return;
    sched_yield();
  }
}

void destroyRegionState(RegionThreadState* r) { delete r; }

RegionSnapshot snapshotRegions(const RegionThreadState* r) {
  RegionSnapshot s;
  if (r == nullptr) return s;
  s.nodes = r->nodes;
  s.events.assign(r->log, r->log + r->logSize);
  s.eventsLost = r->eventsLost;
  s.mismatchedEnds = r->mismatchedEnds;
  s.unclosedAtExit = r->stack.size();
  return s;
}

void logCommEvent(RegionThreadState* r, CommEvent e) {
  if (r == nullptr) return;
  int expected = 0;
  if (!r->phase.compare_exchange_strong(expected, 1, std::memory_order_acquire)) return;
  try {
    e.region = r->stack.empty() ? 0 : r->stack.back().node;
    if (r->comm.size() < config().regionLogCapacity)
      r->comm.push_back(e);
    else
      ++r->commLost;
  } catch (...) {
    ++r->commLost;
  }
  r->phase.store(0, std::memory_order_release);
}

CommSnapshot snapshotComm(const RegionThreadState* r) {
  CommSnapshot s;
  if (r == nullptr) return s;
  s.events = r->comm;
  s.eventsLost = r->commLost;
  return s;
}

std::vector<std::string> regionNames() {
  NameTable& t = nameTable();
  std::lock_guard lock(t.mutex);
  return t.names;
}

}  // namespace csp::measure

using namespace csp::measure;

namespace {

void beginNamed(const char* name, std::uint64_t dynamicId, std::uint32_t flags, std::int64_t attr) {
  RegionCall r;
  if (!r) return;
  if (name == nullptr) name = "(null)";
  try {
    auto it = r->byPointer.find(name);
    if (it == r->byPointer.end() || std::strcmp(it->second.text.c_str(), name) != 0) {
      std::string text(name);
      const std::uint32_t id = internName(text);
      it = r->byPointer.insert_or_assign(name, CachedName{id, std::move(text)}).first;
    }
    r->enter(it->second.id, dynamicId, flags, attr);
  } catch (...) {
    // Out of memory: the region is not recorded; its end will count as mismatched.
  }
}

void beginNumbered(std::uint32_t static_id, std::uint64_t dynamic_id, std::uint32_t flags, std::int64_t attr) {
  RegionCall r;
  if (!r) return;
  try {
    auto it = r->byStaticId.find(static_id);
    if (it == r->byStaticId.end()) {
      std::string name;
      {
        NameTable& t = nameTable();
        std::lock_guard lock(t.mutex);
        auto reg = t.registeredIds.find(static_id);
        name = reg != t.registeredIds.end() ? reg->second : "region-" + std::to_string(static_id);
      }
      it = r->byStaticId.emplace(static_id, internName(name)).first;
    }
    r->enter(it->second, dynamic_id, flags, attr);
  } catch (...) {
  }
}

}  // namespace

CSP_EXPORT void csp_region_begin(const char* name, uint64_t dynamic_id) {
  beginNamed(name, dynamic_id, kEventEnter, 0);
}

CSP_EXPORT void csp_region_begin_attr(const char* name, uint64_t dynamic_id, int64_t attr) {
  beginNamed(name, dynamic_id, kEventEnter | kEventHasAttr, attr);
}

CSP_EXPORT void csp_region_begin_id(uint32_t static_id, uint64_t dynamic_id) {
  beginNumbered(static_id, dynamic_id, kEventEnter, 0);
}

CSP_EXPORT void csp_region_begin_id_attr(uint32_t static_id, uint64_t dynamic_id, int64_t attr) {
  beginNumbered(static_id, dynamic_id, kEventEnter | kEventHasAttr, attr);
}

CSP_EXPORT void csp_region_register(uint32_t static_id, const char* name) {
  if (name == nullptr) return;
  try {
    NameTable& t = nameTable();
    std::lock_guard lock(t.mutex);
    t.registeredIds[static_id] = name;
  } catch (...) {
  }
}

CSP_EXPORT void csp_region_end(void) {
  RegionCall r;
  if (!r) return;
  try {
    r->leave();
  } catch (...) {
  }
}

CSP_EXPORT int csp_region_active(void) { return tlsThread != nullptr ? 1 : 0; }
