// Work, idleness, waiting and lock blame of the threads of a process (docs/measurement.md,
// "Threads: work, idleness and waiting"; thesis §5.2.1 and §6.4).
//
// The process keeps n (threads that take part) and W (those of them that are working) in one
// 64-bit atomic, so that a sample reads a consistent pair with one load. A thread is working
// unless it is inside a wait csp knows of: a wrapped pthread or MPI call that blocks, or an
// OpenMP wait reported through OMPT (ompt.cpp); an OpenMP worker outside its implicit tasks is
// idle too. A sample of the first event in a working thread charges one sample of `work` and
// I/W samples of `idleness` (I = n - W) to its context; samples in idle threads charge neither.
//
// Waits are timed with CLOCK_MONOTONIC in the wrappers (a blocked thread gets no CPU-time
// samples). The time of the outermost wait goes to the thread's credit for its metric; once a
// credit reaches one sampling period it is charged, whole, to the context of the wait that made
// it full (one unwind per period of waiting, however many waits there are).
//
// Lock blame (§6.4): a mutex or spin lock that a thread had to wait for gets an entry in a
// lock-free table keyed by its address. The entry integrates the number of waiters over time;
// the thread that releases the lock takes the integral (the idleness its hold caused) and
// charges it as `lock-blame` to the context of its release, after the release, so that the
// critical section is not made longer.
#include <errno.h>
#include <sys/mman.h>

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>

#include "runtime.hpp"

namespace csp::measure {

namespace {

constinit std::atomic<bool> g_on{false};
// n in the high 32 bits, W in the low 32 bits.
constinit std::atomic<std::uint64_t> g_counts{0};
constexpr std::uint64_t kOneThread = std::uint64_t{1} << 32;
constinit std::uint64_t g_periodNs = 5'000'000;
constinit std::atomic<bool> g_creatingHelpers{false};
__extension__ typedef unsigned __int128 Wide;

}  // namespace

const char* stateMetricName(int metric) {
  switch (metric) {
    case kWork:
      return "work";
    case kIdleness:
      return "idleness";
    case kSyncWait:
      return "sync-wait";
    case kLockWait:
      return "lock-wait";
    case kLockBlame:
      return "lock-blame";
    case kMpiWait:
      return "mpi-wait";
    default:
      return "?";
  }
}

const char* stateMetricDescription(int metric) {
  switch (metric) {
    case kWork:
      return "time of the first event's samples taken while the thread was working";
    case kIdleness:
      return "idleness charged to working threads: each work sample adds I/W of its time (I idle, W working "
             "threads of the process)";
    case kSyncWait:
      return "time the thread waited in barriers, condition variables, joins and OpenMP synchronization";
    case kLockWait:
      return "time the thread waited for a mutex, spin lock or OpenMP lock or critical section";
    case kLockBlame:
      return "time other threads waited for a lock while this thread held it, charged where it released the lock";
    case kMpiWait:
      return "time the thread spent in blocking MPI calls";
    default:
      return "";
  }
}

bool idlenessOn() {
  ensureLibraryInitialized();
  return g_on.load(std::memory_order_relaxed);
}

std::uint64_t chargePeriodNs() { return g_periodNs; }

bool creatingHelperThreads() { return g_creatingHelpers.load(std::memory_order_relaxed); }
void setCreatingHelperThreads(bool on) { g_creatingHelpers.store(on, std::memory_order_relaxed); }

void updateWorking(ThreadState& t) {
  const bool working = t.counted && t.waitDepth == 0 && !(t.ompWorker && t.ompImplicitTasks <= 0);
  if (working == t.working.load(std::memory_order_relaxed)) return;
  // Ordered so that the thread's own handler never sees itself working but not counted in W.
  if (working) {
    g_counts.fetch_add(1, std::memory_order_relaxed);
    t.working.store(true, std::memory_order_relaxed);
  } else {
    t.working.store(false, std::memory_order_relaxed);
    g_counts.fetch_sub(1, std::memory_order_relaxed);
  }
  std::atomic_signal_fence(std::memory_order_seq_cst);
}

void threadCounted(ThreadState& t, bool participates) {
  if (!g_on.load(std::memory_order_relaxed) || !participates || t.counted) return;
  g_counts.fetch_add(kOneThread, std::memory_order_relaxed);
  t.counted = true;
  updateWorking(t);
}

void threadUncounted(ThreadState& t) {
  if (!t.counted) return;
  t.counted = false;
  updateWorking(t);  // leaves W first
  g_counts.fetch_sub(kOneThread, std::memory_order_relaxed);
}

// Async-signal-safe: called by the handler of the thread itself.
void accountSample(ThreadState& t, std::uint32_t node, std::uint64_t weight) {
  if (!t.working.load(std::memory_order_relaxed)) return;  // idle: its samples are not charged
  std::uint64_t* v = t.cct.state + std::size_t{node} * kStateMetrics;
  const std::uint64_t ns = weight * g_periodNs;
  v[kWork] += ns;
  const std::uint64_t counts = g_counts.load(std::memory_order_relaxed);
  const std::uint64_t n = counts >> 32, w = counts & 0xFFFFFFFFu;
  if (w == 0 || n <= w) return;
  // I/W of the sample's time, in whole ns; the fraction is carried to the thread's next sample
  // so that the thread's total stays exact.
  const Wide total = static_cast<Wide>(ns) * (n - w) + t.idleRemainder;
  v[kIdleness] += static_cast<std::uint64_t>(total / w);
  t.idleRemainder = static_cast<std::uint64_t>(total % w);
}

void beginWait(ThreadState& t, std::uint64_t nowNs) {
  if (t.waitDepth++ != 0) return;  // a wait inside a wait is part of the outer one
  // A thread that is idle already (an OpenMP worker in the pool) is not charged for how it idles.
  t.waitCharged = t.working.load(std::memory_order_relaxed);
  t.waitStartNs = nowNs != 0 ? nowNs : monotonicNs();
  t.waitRegionEnds = parallelRegionEnds();
  updateWorking(t);
}

void endWait(ThreadState& t, int metric, bool clipAtRegionEnd) {
  if (t.waitDepth <= 0) {
    t.waitDepth = 0;  // an end without a begin (a runtime's unpaired callback)
    return;
  }
  if (--t.waitDepth != 0) return;
  std::uint64_t now = monotonicNs();
  if (clipAtRegionEnd && parallelRegionEnds() != t.waitRegionEnds) {
    const std::uint64_t end = parallelRegionEndNs(t.waitRegionEnds);
    if (end >= t.waitStartNs && end < now) now = end;
  }
  updateWorking(t);
  if (t.waitCharged && now > t.waitStartNs) addCredit(t, metric, now - t.waitStartNs);
}

void addCredit(ThreadState& t, int metric, std::uint64_t ns) {
  t.credit[metric] += ns;
  if (t.credit[metric] < g_periodNs) return;
  const std::uint32_t node = chargeAtCaller(t, metric, t.credit[metric]);
  if (node == 0) return;  // not recordable now (closed, paused): kept for a later charge
  t.lastCharged[metric] = node;
  t.credit[metric] = 0;
}

void flushCredit(ThreadState& t) {
  for (int m = 0; m < kStateMetrics; ++m) {
    if (t.credit[m] == 0) continue;
    if (!chargeNode(t, t.lastCharged[m], m, t.credit[m])) t.unattributedNs += t.credit[m];
    t.credit[m] = 0;
  }
}

// ---- the lock table ------------------------------------------------------------------------
//
// Per lock, one 64-bit word holds the number of waiters (high 16 bits) and the sum of their
// "waiting since" times (low 48 bits, µs after the process's epoch), so that the integral of the
// waiters over time since the last release is n·now − Σsince, and every update is one atomic
// operation: an arrival adds (1, its arrival time); a release takes the integral and resets every
// waiter's "since" to the release time (one compare-and-swap); a departure (the waiter got the
// lock) removes (1, max(its arrival, the last reset)), which is exactly what it contributed. The
// release happens inside the critical section (before the real unlock: after it, a woken waiter
// could leave before the integral is taken, and its waiting would be lost); it costs one table
// probe, one clock reading and one compare-and-swap. 2^48 µs is 8.9 years: a lock with n waiters
// is tracked for 8.9/n years of the process's life; beyond that its blame is no longer taken
// (counted in `lock-table-overflows`).
//
// The integral covers a registered waiter from its registration to the last release before it
// got the lock. The rest of its lock-wait is put in the entry's pending time, which the next
// release takes with the integral: the short wait before the registration (the holder's doing;
// it lasts 20 µs on paper but a timed futex wait wakes up 50-150 µs late, timer slack and wake-up
// latency, which lost 60 % of the blame of 100 µs holds), and the time from the last release to
// its acquisition (the hand-over, which a sleeping or preempted waiter makes long). So a
// registered wait is blamed in full, to the ns: the lock-wait of registered waits and the blame
// are equal (docs/measurement.md).

namespace {

struct alignas(32) LockEntry {
  std::atomic<std::uintptr_t> key;         // the lock's address; 0 = free
  std::atomic<std::uint64_t> state;        // waiters << 48 | Σ since (µs)
  std::atomic<std::uint64_t> lastResetUs;  // the time the last release reset the waiters' "since"
  std::atomic<std::uint64_t> pendingNs;    // registered waiting outside the integral, for the next release
};
static_assert(sizeof(LockEntry) == 32);

constexpr std::size_t kLockSlots = std::size_t{1} << 14;  // 512 KiB, pages touched on use
constexpr std::size_t kLockProbes = 64;
constexpr std::uint64_t kOneWaiter = std::uint64_t{1} << 48;
constexpr std::uint64_t kSinceMask = kOneWaiter - 1;
constinit LockEntry* g_locks = nullptr;
constinit std::uint64_t g_epochNs = 0;
constinit std::atomic<int> g_lockWaiters{0};  // threads waiting for a wrapped lock right now
constinit std::atomic<std::uint64_t> g_lockOverflows{0};

std::uint64_t sinceEpochUs(std::uint64_t ns) { return ns > g_epochNs ? (ns - g_epochNs) / 1000 : 0; }

std::uint64_t epochUsToNs(std::uint64_t us) { return g_epochNs + us * 1000; }

std::uint64_t takePending(LockEntry& e) {
  return e.pendingNs.load(std::memory_order_relaxed) == 0 ? 0 : e.pendingNs.exchange(0, std::memory_order_acq_rel);
}

void addPending(LockEntry& e, std::uint64_t fromNs, std::uint64_t toNs) {
  if (fromNs != 0 && toNs > fromNs) e.pendingNs.fetch_add(toNs - fromNs, std::memory_order_acq_rel);
}

std::size_t slotOf(std::uintptr_t key) {
  std::uint64_t h = key * 0x9E3779B97F4A7C15ull;
  return static_cast<std::size_t>(h >> 50) & (kLockSlots - 1);
}

LockEntry* findLock(const void* lock, bool insert) {
  if (g_locks == nullptr) return nullptr;
  const auto key = reinterpret_cast<std::uintptr_t>(lock);
  std::size_t i = slotOf(key);
  for (std::size_t probe = 0; probe < kLockProbes; ++probe, i = (i + 1) & (kLockSlots - 1)) {
    LockEntry& e = g_locks[i];
    std::uintptr_t k = e.key.load(std::memory_order_acquire);
    if (k == key) return &e;
    if (k == 0) {
      if (!insert) return nullptr;
      if (e.key.compare_exchange_strong(k, key, std::memory_order_acq_rel) || k == key) return &e;
    }
  }
  if (insert) g_lockOverflows.fetch_add(1, std::memory_order_relaxed);
  return nullptr;
}

}  // namespace

std::uint64_t lockTableOverflows() { return g_lockOverflows.load(); }

bool lockAccountingOn() { return g_locks != nullptr && g_on.load(std::memory_order_relaxed); }

bool lockMayCarryBlame(const ThreadState& t) {
  return g_lockWaiters.load(std::memory_order_relaxed) != 0 || t.contendedHeld != 0;
}

// A thread found the lock taken: it waits in `acquire` (the real call), idle and registered
// with the lock as a waiter. Returns the real call's result.
int waitForLock(ThreadState& t, const void* lock, int (*acquire)(void*), void* call, std::uint64_t sinceNs) {
  const int savedErrno = errno;
  // Blame accrues from the registration on (a release before it did not see this waiter). The
  // arrival time is read after the lock's word and added only if the word is unchanged: every
  // release whose reset this arrival follows then has a reset time no later than the arrival, so
  // the departure's max(arrival, last reset) is exactly what this waiter contributed. (With the
  // clock read first, a release between the reading and the addition made the departure take
  // more than was added, which could borrow from the waiter count.)
  LockEntry* e = findLock(lock, true);
  g_lockWaiters.fetch_add(1, std::memory_order_relaxed);
  std::uint64_t arrivalUs = 0;
  if (e != nullptr) {
    std::uint64_t state = e->state.load(std::memory_order_acquire);
    do {
      arrivalUs = sinceEpochUs(monotonicNs());
    } while (!e->state.compare_exchange_weak(state, state + kOneWaiter + arrivalUs, std::memory_order_acq_rel,
                                             std::memory_order_acquire));
    addPending(*e, sinceNs, epochUsToNs(arrivalUs));  // the short wait before the registration
  }
  beginWait(t, sinceNs);
  const int rc = acquire(call);
  if (e != nullptr) {
    const std::uint64_t since = std::max(arrivalUs, e->lastResetUs.load(std::memory_order_acquire));
    e->state.fetch_sub(kOneWaiter + since, std::memory_order_acq_rel);
    addPending(*e, epochUsToNs(since), monotonicNs());  // the hand-over after the last release
  }
  g_lockWaiters.fetch_sub(1, std::memory_order_relaxed);
  endWait(t, kLockWait);
  if (rc == 0 || rc == EOWNERDEAD) ++t.contendedHeld;
  errno = savedErrno;
  return rc;
}

// The blame accumulated on `lock` since its last release, with the pending time; taken before
// the lock is released.
std::uint64_t takeBlame(ThreadState& t, const void* lock) {
  if (t.contendedHeld > 0) --t.contendedHeld;
  LockEntry* e = findLock(lock, false);
  if (e == nullptr) return 0;
  std::uint64_t state = e->state.load(std::memory_order_acquire);
  for (;;) {
    const std::uint64_t waiters = state >> 48, since = state & kSinceMask;
    if (waiters == 0) return takePending(*e);  // nobody waits
    // The clock is read after the word it resets: every arrival in that word then has an arrival
    // time no later than this reset time (waitForLock reads its clock after the word, too).
    const std::uint64_t nowUs = sinceEpochUs(monotonicNs());
    if (nowUs > kSinceMask / waiters) {  // n·now no longer fits the word: this lock is no longer tracked
      g_lockOverflows.fetch_add(1, std::memory_order_relaxed);
      return takePending(*e);
    }
    const std::uint64_t reset = waiters * nowUs;
    if (e->state.compare_exchange_weak(state, (waiters << 48) | reset, std::memory_order_acq_rel)) {
      e->lastResetUs.store(nowUs, std::memory_order_release);
      return (reset > since ? (reset - since) * 1000 : 0) + takePending(*e);
    }
  }
}

void chargeBlame(ThreadState& t, std::uint64_t blameNs) {
  if (blameNs == 0) return;
  const int savedErrno = errno;
  addCredit(t, kLockBlame, blameNs);
  errno = savedErrno;
}

void idlenessInit() {
  const Config& c = config();
  if (!c.events.empty()) g_periodNs = c.events.front().periodNs;
  if (!c.idleness) return;
  g_epochNs = monotonicNs();
  void* m = mmap(nullptr, kLockSlots * sizeof(LockEntry), PROT_READ | PROT_WRITE,
                 MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (m != MAP_FAILED) g_locks = static_cast<LockEntry*>(m);
  g_on.store(true);
}

void idlenessAfterForkChild() {
  // The other threads (and their waits) stayed in the parent.
  g_counts.store(0);
  g_lockWaiters.store(0);
  if (g_locks != nullptr) madvise(g_locks, kLockSlots * sizeof(LockEntry), MADV_DONTNEED);  // zero again
}

}  // namespace csp::measure
