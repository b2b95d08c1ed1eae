// Wrapped waits (docs/measurement.md, "Threads: work, idleness and waiting"): pthread mutexes,
// spin locks, condition variables, barriers and joins, and the blocking MPI calls. Each wrapper
// forwards to the real function found with dlsym at run time; with idleness accounting off (the
// default) that is all it does.
//
// Mutex and spin lock acquisition look at the lock first: an uncontended acquisition costs one
// read of the lock word before the real call, and no clock reading. A thread that finds the lock
// taken waits up to 20 µs on its own (see acquire); only a thread still waiting then is counted
// idle and registered as a waiter (idleness.cpp). A release
// checks one global counter of waiting threads (and a thread-local count) before it looks for
// blame to collect.
#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <time.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <type_traits>
#include <vector>

#include "csp/storage/profile.hpp"

#include "runtime.hpp"

#define CSP_EXPORT extern "C" __attribute__((visibility("default")))

namespace csp::measure {
namespace {

// The next definition of `name` (the C library's, or the MPI library's PMPI entry), resolved on
// first use: wrappers can be called by other libraries' constructors before ours has run.
// `version` pins a symbol version where the C library keeps an old one for binary compatibility
// (pthread_cond_* of glibc 2.2.5), which an unversioned dlsym could return.
template <class Fn>
Fn nextFunction(std::atomic<Fn>& slot, const char* name, const char* version = nullptr) {
  Fn f = slot.load(std::memory_order_relaxed);
  if (f != nullptr) return f;
  void* p = version != nullptr ? dlvsym(RTLD_NEXT, name, version) : nullptr;
  if (p == nullptr) p = dlsym(RTLD_NEXT, name);
  f = reinterpret_cast<Fn>(p);
  slot.store(f, std::memory_order_relaxed);
  return f;
}

#define CSP_REAL(fnType, name, ...)                             \
  [] {                                                          \
    static constinit std::atomic<fnType> slot{nullptr};         \
    return nextFunction(slot, name __VA_OPT__(, ) __VA_ARGS__); \
  }()

using MutexFn = int (*)(pthread_mutex_t*);
using MutexTimedFn = int (*)(pthread_mutex_t*, const timespec*);
using MutexClockFn = int (*)(pthread_mutex_t*, clockid_t, const timespec*);
using SpinFn = int (*)(pthread_spinlock_t*);
using CondWaitFn = int (*)(pthread_cond_t*, pthread_mutex_t*);
using CondTimedFn = int (*)(pthread_cond_t*, pthread_mutex_t*, const timespec*);
using CondClockFn = int (*)(pthread_cond_t*, pthread_mutex_t*, clockid_t, const timespec*);
using BarrierFn = int (*)(pthread_barrier_t*);
using JoinFn = int (*)(pthread_t, void**);
using TimedJoinFn = int (*)(pthread_t, void**, const timespec*);
using ClockJoinFn = int (*)(pthread_t, void**, clockid_t, const timespec*);

// The calling thread when idleness accounting applies to it, else nullptr.
inline ThreadState* accountedThread() {
  ThreadState* t = tlsThread;
  return t != nullptr && t->counted ? t : nullptr;
}

// The lock's address as the key of its blame entry (spin locks are volatile ints).
inline const void* keyOf(const volatile void* lock) { return const_cast<const void*>(lock); }

// A blocking call that makes the thread idle for its duration, charged to `metric`.
template <class Call>
int idleCall(ThreadState& t, int metric, Call&& call) {
  // A wait inside MPI's own start-up or shutdown (a condition variable waiting for the PMIx
  // server, a join of a progress thread) is time in MPI.
  if (t.mpiDepth > 0) metric = kMpiWait;
  beginWait(t);
  const int rc = call();
  const int savedErrno = errno;
  endWait(t, metric);
  errno = savedErrno;
  return rc;
}

// Whether the lock looks taken. A mutex: from a plain read of its lock word in the C library's
// layout (0 when free; a robust mutex whose owner died reads as taken, and the real call then
// reports EOWNERDEAD). A spin lock, whose word has no portable meaning (x86-64 glibc counts down
// from 1), and a mutex without glibc: a trylock, which leaves its result in `rc` when it did not
// find the lock busy.
inline bool looksTaken(pthread_mutex_t* m, int& rc) {
#ifdef __GLIBC__
  (void)rc;
  return __atomic_load_n(&m->__data.__lock, __ATOMIC_RELAXED) != 0;
#else
  static const auto tryLock = reinterpret_cast<MutexFn>(dlsym(RTLD_NEXT, "pthread_mutex_trylock"));
  rc = tryLock(m);
  return rc == EBUSY;
#endif
}
inline bool looksTaken(pthread_spinlock_t* s, int& rc) {
  static const auto tryLock = reinterpret_cast<SpinFn>(dlsym(RTLD_NEXT, "pthread_spin_trylock"));
  rc = tryLock(s);
  return rc == EBUSY;
}

inline void cpuRelax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

// How long a contended acquisition waits before it registers as a waiter (docs/measurement.md).
constexpr std::uint64_t kShortWaitNs = 20'000;

// A wait that ended before registration: lock-wait of the waiter (when it was working), nothing
// else; its total is the profile setting short-lock-wait-ns, the lock-wait that carries no blame.
inline int shortWaitEnded(ThreadState& t, std::uint64_t start, int rc, int savedErrno) {
  if (t.working.load(std::memory_order_relaxed) && t.waitDepth == 0) {
    const std::uint64_t ns = monotonicNs() - start;
    t.shortLockWaitNs += ns;
    addCredit(t, kLockWait, ns);
  }
  errno = savedErrno;
  return rc;
}

// Acquisition. A lock that looks free is acquired with the real call and nothing else: the
// uncontended path costs one plain read of the lock word (a trylock first would cost a second
// atomic operation on the lock's cache line and, on a heavily contended lock, changes how the
// threads queue: 25 % more CPU time on tests/apps/threads.cpp `heavy`). A lock that looks taken
// is waited for in two phases:
//  - first for up to kShortWaitNs with only the thread's own bookkeeping: `shortWait(deadline)`
//    (a real timed acquisition, CLOCK_MONOTONIC), or for spin locks (SpinFirst) retries of
//    `tryLock`, as the real spin lock would spin. The program's own timed acquisitions
//    (RegisterAtOnce: their deadlines are the program's) skip this phase. Most
//    waits on a lock with short critical sections end here; they count as lock-wait of the waiter,
//    carry no blame and leave W alone (a wait of a few µs is far below a sampling period);
//  - then registered with the lock as a waiter (waitForLock): idle, and blamed on the holder at
//    its release. Its lock-wait and its blame are timed from the start of the first phase (a
//    timed futex wait of 20 µs lasts 50-150 µs: timer slack and wake-up).
// A lock taken between the read and the real call is waited for unaccounted (a window of a few
// nanoseconds).
struct SpinFirst {};
struct RegisterAtOnce {};

template <class Lock, class TryFn, class Call, class Short>
int acquire(Lock* lock, TryFn tryLock, Call&& lockCall, Short shortWait) {
  ThreadState* t = accountedThread();
  if (t == nullptr || !lockAccountingOn()) return lockCall();
  int rc = EBUSY;
  if (!looksTaken(lock, rc)) return rc == EBUSY ? lockCall() : rc;
  const int savedErrno = errno;
  const std::uint64_t start = monotonicNs();
  if constexpr (std::is_same_v<Short, RegisterAtOnce>) {
    (void)shortWait;
    (void)tryLock;
  } else if constexpr (!std::is_same_v<Short, SpinFirst>) {
    const std::uint64_t deadline = start + kShortWaitNs;
    const timespec ts{static_cast<time_t>(deadline / 1'000'000'000u), static_cast<long>(deadline % 1'000'000'000u)};
    rc = shortWait(ts);
    // EINVAL/ENOTSUP: this mutex has no timed acquisition on CLOCK_MONOTONIC (a priority-
    // inheritance mutex on a kernel without FUTEX_LOCK_PI2): wait in the real call instead.
    if (rc != ETIMEDOUT && rc != EINVAL && rc != ENOTSUP) return shortWaitEnded(*t, start, rc, savedErrno);
  } else {
    (void)shortWait;
    for (;;) {
      for (int i = 0; i < 16; ++i) cpuRelax();
      rc = tryLock(lock);
      if (rc != EBUSY) return shortWaitEnded(*t, start, rc, savedErrno);
      if (monotonicNs() - start >= kShortWaitNs) break;
    }
  }
  errno = savedErrno;
  using Target = std::remove_reference_t<Call>;
  return waitForLock(
      *t, keyOf(lock), [](void* c) { return (*static_cast<Target*>(c))(); }, &lockCall, start);
}

// Release with blame collection when some thread may have waited for this lock.
template <class Lock, class Fn>
int release(Lock* lock, Fn unlock) {
  ThreadState* t = tlsThread;
  if (t == nullptr || !lockMayCarryBlame(*t)) return unlock(lock);
  const std::uint64_t blame = takeBlame(*t, keyOf(lock));
  const int rc = unlock(lock);
  chargeBlame(*t, blame);
  return rc;
}

// A condition wait releases the mutex inside the C library (no unlock call we could see): the
// blame of the hold ends there, and the wait itself is idle.
template <class Call>
int conditionWait(pthread_mutex_t* mutex, Call&& call) {
  ThreadState* t = accountedThread();
  if (t == nullptr) return call();
  const std::uint64_t blame = lockMayCarryBlame(*t) ? takeBlame(*t, mutex) : 0;
  const int rc = idleCall(*t, kSyncWait, call);
  chargeBlame(*t, blame);
  return rc;
}

// A blocking call that makes an accounted thread idle, charged to `metric` (kSyncWait, kMpiWait).
template <class Call>
int accountedWait(int metric, Call&& call) {
  ThreadState* t = accountedThread();
  if (t == nullptr) return call();
  return idleCall(*t, metric, call);
}

template <class Call>
int syncWait(Call&& call) {
  return accountedWait(kSyncWait, call);
}

}  // namespace
}  // namespace csp::measure

using namespace csp::measure;

CSP_EXPORT int pthread_mutex_lock(pthread_mutex_t* m) {
  const auto lock = CSP_REAL(MutexFn, "pthread_mutex_lock");
  const auto clockLock = CSP_REAL(MutexClockFn, "pthread_mutex_clocklock");
  return acquire(
      m, CSP_REAL(MutexFn, "pthread_mutex_trylock"), [&] { return lock(m); },
      [&](const timespec& deadline) { return clockLock(m, CLOCK_MONOTONIC, &deadline); });
}

CSP_EXPORT int pthread_mutex_timedlock(pthread_mutex_t* m, const timespec* abstime) {
  const auto lock = CSP_REAL(MutexTimedFn, "pthread_mutex_timedlock");
  return acquire(
      m, CSP_REAL(MutexFn, "pthread_mutex_trylock"), [&] { return lock(m, abstime); }, RegisterAtOnce{});
}

CSP_EXPORT int pthread_mutex_clocklock(pthread_mutex_t* m, clockid_t clock, const timespec* abstime) {
  const auto lock = CSP_REAL(MutexClockFn, "pthread_mutex_clocklock");
  return acquire(
      m, CSP_REAL(MutexFn, "pthread_mutex_trylock"), [&] { return lock(m, clock, abstime); }, RegisterAtOnce{});
}

CSP_EXPORT int pthread_mutex_unlock(pthread_mutex_t* m) {
  return release(m, CSP_REAL(MutexFn, "pthread_mutex_unlock"));
}

CSP_EXPORT int pthread_spin_lock(pthread_spinlock_t* s) {
  const auto lock = CSP_REAL(SpinFn, "pthread_spin_lock");
  return acquire(
      s, CSP_REAL(SpinFn, "pthread_spin_trylock"), [&] { return lock(s); }, SpinFirst{});
}

CSP_EXPORT int pthread_spin_unlock(pthread_spinlock_t* s) {
  return release(s, CSP_REAL(SpinFn, "pthread_spin_unlock"));
}

CSP_EXPORT int pthread_cond_wait(pthread_cond_t* c, pthread_mutex_t* m) {
  const auto wait = CSP_REAL(CondWaitFn, "pthread_cond_wait", "GLIBC_2.3.2");
  return conditionWait(m, [&] { return wait(c, m); });
}

CSP_EXPORT int pthread_cond_timedwait(pthread_cond_t* c, pthread_mutex_t* m, const timespec* abstime) {
  const auto wait = CSP_REAL(CondTimedFn, "pthread_cond_timedwait", "GLIBC_2.3.2");
  return conditionWait(m, [&] { return wait(c, m, abstime); });
}

CSP_EXPORT int pthread_cond_clockwait(pthread_cond_t* c, pthread_mutex_t* m, clockid_t clock, const timespec* abstime) {
  const auto wait = CSP_REAL(CondClockFn, "pthread_cond_clockwait");
  return conditionWait(m, [&] { return wait(c, m, clock, abstime); });
}

CSP_EXPORT int pthread_barrier_wait(pthread_barrier_t* b) {
  const auto wait = CSP_REAL(BarrierFn, "pthread_barrier_wait");
  return syncWait([&] { return wait(b); });
}

CSP_EXPORT int pthread_join(pthread_t thread, void** result) {
  const auto join = CSP_REAL(JoinFn, "pthread_join");
  return syncWait([&] { return join(thread, result); });
}

CSP_EXPORT int pthread_timedjoin_np(pthread_t thread, void** result, const timespec* abstime) {
  const auto join = CSP_REAL(TimedJoinFn, "pthread_timedjoin_np");
  return syncWait([&] { return join(thread, result, abstime); });
}

CSP_EXPORT int pthread_clockjoin_np(pthread_t thread, void** result, clockid_t clock, const timespec* abstime) {
  const auto join = CSP_REAL(ClockJoinFn, "pthread_clockjoin_np");
  return syncWait([&] { return join(thread, result, clock, abstime); });
}

// ---- MPI ------------------------------------------------------------------------------------
// Blocking MPI calls make the calling thread idle; their time is `mpi-wait` at the call's
// context. Handles (communicators, datatypes, operations, requests) are passed through
// untouched as pointer-sized arguments, which covers both Open MPI (pointers) and MPICH (ints)
// on x86-64, where either travels in a full register or stack slot. The call goes on to the next
// definition of the same function (another PMPI tool preloaded after csp, else the MPI library's
// own), or to the PMPI entry if there is none; it is looked up at the first call, so programs
// without MPI never need an MPI library.

namespace {

[[noreturn]] void mpiMissing(const char* name) {
  std::fprintf(stderr, "csp: error: %s called but P%s is not available\n", name, name);
  std::abort();
}

template <class Call>
int mpiWait(Call&& call) {
  return accountedWait(kMpiWait, call);
}

}  // namespace

using H = void*;  // an MPI handle, pointer-sized

namespace {

template <class Fn>
Fn mpiNext(std::atomic<Fn>& slot, const char* name, const char* pname) {
  Fn real = slot.load(std::memory_order_relaxed);
  if (real != nullptr) return real;
  void* p = dlsym(RTLD_NEXT, name);
  if (p == nullptr) p = dlsym(RTLD_NEXT, pname);
  // RTLD_NEXT misses an MPI loaded before us in the search order.
  if (p == nullptr) p = dlsym(RTLD_DEFAULT, pname);
  if (p == nullptr) mpiMissing(name);
  real = reinterpret_cast<Fn>(p);
  slot.store(real, std::memory_order_relaxed);
  return real;
}

// Open MPI's MPI_Status (the only MPI whose handles clocksync.cpp knows): MPI_SOURCE and
// MPI_TAG first; an array of statuses has this stride. A receive whose status the program ignores
// gets one of ours.
struct StatusHead {
  int source, tag, error, cancelled;
  std::size_t count;
};
static_assert(sizeof(StatusHead) == 24);
inline StatusHead* statusFor(H status, StatusHead& own) {
  return status != nullptr ? static_cast<StatusHead*>(status) : &own;
}

// Times a call when communication events are recorded; `record(t0, t1)` after a success.
template <class Call, class Record>
int mpiEvent(Call&& call, Record&& record) {
  if (!commLogOn()) return mpiWait(call);
  const std::uint64_t t0 = monotonicNs();
  const int rc = mpiWait(call);
  const int savedErrno = errno;
  if (rc == 0) record(t0, monotonicNs());
  errno = savedErrno;
  return rc;
}

}  // namespace

#define CSP_MPI_NEXT(NAME, PARAMS)                                                     \
  using Fn = int(*) PARAMS; /* NOLINT(bugprone-macro-parentheses): a parameter list */ \
  static constinit std::atomic<Fn> slot{nullptr};                                      \
  const Fn real = mpiNext(slot, #NAME, "P" #NAME)

#define CSP_MPI_WAIT(NAME, PARAMS, ARGS)       \
  CSP_EXPORT int NAME PARAMS {                 \
    CSP_MPI_NEXT(NAME, PARAMS);                \
    return mpiWait([&] { return real ARGS; }); \
  }

// A call recorded as a communication event: RECORD is evaluated with t0, t1 (its begin and end).
#define CSP_MPI_EVENT(NAME, PARAMS, ARGS, RECORD)                                                    \
  CSP_EXPORT int NAME PARAMS {                                                                       \
    CSP_MPI_NEXT(NAME, PARAMS);                                                                      \
    return mpiEvent([&] { return real ARGS; }, [&](std::uint64_t t0, std::uint64_t t1) { RECORD; }); \
  }

#define CSP_COLLECTIVE(OP, ROOT) commCollective(static_cast<int>(csp::CollectiveOp::OP), comm, ROOT, t0, t1)

CSP_EXPORT int MPI_Recv(H buf, int count, H type, int source, int tag, H comm, H status) {
  CSP_MPI_NEXT(MPI_Recv, (H, int, H, int, int, H, H));
  StatusHead own;
  StatusHead* st = statusFor(status, own);
  return mpiEvent(
      [&] { return real(buf, count, type, source, tag, comm, commLogOn() ? st : status); },
      [&](std::uint64_t t0, std::uint64_t t1) { commRecord(kCommRecv, comm, st->source, st->tag, t0, t1); });
}

CSP_EXPORT int MPI_Sendrecv(const void* sbuf, int scount, H stype, int dest, int stag, H rbuf, int rcount, H rtype,
                            int source, int rtag, H comm, H status) {
  CSP_MPI_NEXT(MPI_Sendrecv, (const void*, int, H, int, int, H, int, H, int, int, H, H));
  StatusHead own;
  StatusHead* st = statusFor(status, own);
  return mpiEvent(
      [&] {
        return real(sbuf, scount, stype, dest, stag, rbuf, rcount, rtype, source, rtag, comm,
                    commLogOn() ? st : status);
      },
      [&](std::uint64_t t0, std::uint64_t t1) {
        commRecord(kCommSend, comm, dest, stag, t0, t1);
        commRecord(kCommRecv, comm, st->source, st->tag, t0, t1);
      });
}

CSP_EXPORT int MPI_Comm_free(H* comm) {
  CSP_MPI_NEXT(MPI_Comm_free, (H*));
  if (comm != nullptr) commForget(*comm);
  return real(comm);
}

CSP_MPI_EVENT(MPI_Send, (const void* buf, int count, H type, int dest, int tag, H comm),
              (buf, count, type, dest, tag, comm), commRecord(kCommSend, comm, dest, tag, t0, t1))
CSP_MPI_EVENT(MPI_Ssend, (const void* buf, int count, H type, int dest, int tag, H comm),
              (buf, count, type, dest, tag, comm), commRecord(kCommSend, comm, dest, tag, t0, t1))
CSP_MPI_WAIT(MPI_Probe, (int source, int tag, H comm, H status), (source, tag, comm, status))
CSP_MPI_EVENT(MPI_Barrier, (H comm), (comm), CSP_COLLECTIVE(Barrier, -1))
CSP_MPI_EVENT(MPI_Bcast, (H buf, int count, H type, int root, H comm), (buf, count, type, root, comm),
              CSP_COLLECTIVE(Bcast, root))
CSP_MPI_EVENT(MPI_Reduce, (const void* sbuf, H rbuf, int count, H type, H op, int root, H comm),
              (sbuf, rbuf, count, type, op, root, comm), CSP_COLLECTIVE(Reduce, root))
CSP_MPI_EVENT(MPI_Allreduce, (const void* sbuf, H rbuf, int count, H type, H op, H comm),
              (sbuf, rbuf, count, type, op, comm), CSP_COLLECTIVE(Allreduce, -1))
CSP_MPI_EVENT(MPI_Gather, (const void* sbuf, int scount, H stype, H rbuf, int rcount, H rtype, int root, H comm),
              (sbuf, scount, stype, rbuf, rcount, rtype, root, comm), CSP_COLLECTIVE(Gather, root))
CSP_MPI_EVENT(MPI_Gatherv,
              (const void* sbuf, int scount, H stype, H rbuf, const int* rcounts, const int* displs, H rtype, int root,
               H comm),
              (sbuf, scount, stype, rbuf, rcounts, displs, rtype, root, comm), CSP_COLLECTIVE(Gatherv, root))
CSP_MPI_EVENT(MPI_Scatter, (const void* sbuf, int scount, H stype, H rbuf, int rcount, H rtype, int root, H comm),
              (sbuf, scount, stype, rbuf, rcount, rtype, root, comm), CSP_COLLECTIVE(Scatter, root))
CSP_MPI_EVENT(MPI_Scatterv,
              (const void* sbuf, const int* scounts, const int* displs, H stype, H rbuf, int rcount, H rtype, int root,
               H comm),
              (sbuf, scounts, displs, stype, rbuf, rcount, rtype, root, comm), CSP_COLLECTIVE(Scatterv, root))
CSP_MPI_EVENT(MPI_Allgather, (const void* sbuf, int scount, H stype, H rbuf, int rcount, H rtype, H comm),
              (sbuf, scount, stype, rbuf, rcount, rtype, comm), CSP_COLLECTIVE(Allgather, -1))
CSP_MPI_EVENT(MPI_Allgatherv,
              (const void* sbuf, int scount, H stype, H rbuf, const int* rcounts, const int* displs, H rtype, H comm),
              (sbuf, scount, stype, rbuf, rcounts, displs, rtype, comm), CSP_COLLECTIVE(Allgatherv, -1))
CSP_MPI_EVENT(MPI_Alltoall, (const void* sbuf, int scount, H stype, H rbuf, int rcount, H rtype, H comm),
              (sbuf, scount, stype, rbuf, rcount, rtype, comm), CSP_COLLECTIVE(Alltoall, -1))
CSP_MPI_EVENT(MPI_Alltoallv,
              (const void* sbuf, const int* scounts, const int* sdispls, H stype, H rbuf, const int* rcounts,
               const int* rdispls, H rtype, H comm),
              (sbuf, scounts, sdispls, stype, rbuf, rcounts, rdispls, rtype, comm), CSP_COLLECTIVE(Alltoallv, -1))
CSP_MPI_EVENT(MPI_Reduce_scatter, (const void* sbuf, H rbuf, const int* rcounts, H type, H op, H comm),
              (sbuf, rbuf, rcounts, type, op, comm), CSP_COLLECTIVE(ReduceScatter, -1))
CSP_MPI_EVENT(MPI_Reduce_scatter_block, (const void* sbuf, H rbuf, int rcount, H type, H op, H comm),
              (sbuf, rbuf, rcount, type, op, comm), CSP_COLLECTIVE(ReduceScatterBlock, -1))
// A prefix reduction does not wait for the ranks after the caller: peer -2, not -1.
CSP_MPI_EVENT(MPI_Scan, (const void* sbuf, H rbuf, int count, H type, H op, H comm),
              (sbuf, rbuf, count, type, op, comm), CSP_COLLECTIVE(Scan, -2))
CSP_MPI_EVENT(MPI_Exscan, (const void* sbuf, H rbuf, int count, H type, H op, H comm),
              (sbuf, rbuf, count, type, op, comm), CSP_COLLECTIVE(Exscan, -2))

// ---- non-blocking point-to-point ---------------------------------------------------------------
// A start records the operation's matching under its request handle; the wait or test that
// completes it records the event (runtime.hpp commStart). Persistent requests (MPI_Send_init,
// MPI_Recv_init, MPI_Start) are not followed: their waits are plain waits.

namespace {

template <class Call>
int nonBlockingStart(CommRecordKind kind, H comm, int peer, int tag, H* request, Call&& call) {
  if (!commLogOn()) return call();
  const std::uint64_t t0 = monotonicNs();
  const int rc = call();
  const int savedErrno = errno;
  if (rc == 0 && request != nullptr) commStart(kind, comm, peer, tag, *request, t0);
  errno = savedErrno;
  return rc;
}

// The requests a wait or test may complete, copied before the call (which sets each completed
// one to MPI_REQUEST_NULL), and statuses of our own where the program ignores them: a receive
// from MPI_ANY_SOURCE learns its peer from its status.
class Completion {
 public:
  Completion(int count, const H* requests, H statuses, int ownStatuses) {
    if (!commLogOn() || requests == nullptr || count <= 0) return;
    for (int i = 0; i < count && !tracked_; ++i) tracked_ = commPending(requests[i]);
    if (!tracked_) return;
    // Most waits complete a request or a few: no allocation for those.
    const auto n = static_cast<std::size_t>(count);
    if (n > kInline) moreHandles_.resize(n);
    H* handles = n > kInline ? moreHandles_.data() : inlineHandles_;
    std::copy(requests, requests + count, handles);
    handles_ = handles;
    count_ = count;
    if (statuses != nullptr) {
      statuses_ = static_cast<StatusHead*>(statuses);
    } else if (static_cast<std::size_t>(ownStatuses) > kInline) {
      moreStatuses_.resize(static_cast<std::size_t>(ownStatuses));
      statuses_ = moreStatuses_.data();
    } else {
      statuses_ = inlineStatuses_;
    }
  }
  Completion(const Completion&) = delete;
  Completion& operator=(const Completion&) = delete;
  bool tracked() const { return tracked_; }
  H statuses(H program) const { return tracked_ ? statuses_ : program; }
  // Request `request` completed with status number `status`.
  void complete(int request, int status, std::uint64_t t0, std::uint64_t t1) const {
    if (request < 0 || request >= count_) return;
    const StatusHead& s = statuses_[status];
    commComplete(handles_[request], s.source, s.tag, t0, t1);
  }

 private:
  static constexpr std::size_t kInline = 4;
  bool tracked_ = false;
  int count_ = 0;
  const H* handles_ = nullptr;
  StatusHead* statuses_ = nullptr;
  H inlineHandles_[kInline];
  StatusHead inlineStatuses_[kInline];
  std::vector<H> moreHandles_;
  std::vector<StatusHead> moreStatuses_;
};

constexpr int kUndefined = -32766;  // Open MPI's MPI_UNDEFINED

// A wait or test: `call(statuses)` with the statuses to pass, `done(c, t0, t1)` after a success
// records what completed. A wait that completed nothing followed is a plain wait event.
template <class Call, class Done>
int completing(bool blocking, int count, const H* requests, H statuses, int ownStatuses, Call&& call, Done&& done) {
  const Completion c(count, requests, statuses, ownStatuses);
  auto invoke = [&] { return call(c.statuses(statuses)); };
  if (!c.tracked()) {
    if (!blocking) return invoke();
    return mpiEvent(invoke, [](std::uint64_t t0, std::uint64_t t1) { commRecord(kCommWait, nullptr, -1, 0, t0, t1); });
  }
  const std::uint64_t t0 = monotonicNs();
  const int rc = blocking ? mpiWait(invoke) : invoke();
  const int savedErrno = errno;
  if (rc == 0) done(c, t0, monotonicNs());
  errno = savedErrno;
  return rc;
}

}  // namespace

CSP_EXPORT int MPI_Isend(const void* buf, int count, H type, int dest, int tag, H comm, H* request) {
  CSP_MPI_NEXT(MPI_Isend, (const void*, int, H, int, int, H, H*));
  return nonBlockingStart(kCommSend, comm, dest, tag, request,
                          [&] { return real(buf, count, type, dest, tag, comm, request); });
}

CSP_EXPORT int MPI_Issend(const void* buf, int count, H type, int dest, int tag, H comm, H* request) {
  CSP_MPI_NEXT(MPI_Issend, (const void*, int, H, int, int, H, H*));
  return nonBlockingStart(kCommSend, comm, dest, tag, request,
                          [&] { return real(buf, count, type, dest, tag, comm, request); });
}

CSP_EXPORT int MPI_Irecv(H buf, int count, H type, int source, int tag, H comm, H* request) {
  CSP_MPI_NEXT(MPI_Irecv, (H, int, H, int, int, H, H*));
  return nonBlockingStart(kCommRecv, comm, source, tag, request,
                          [&] { return real(buf, count, type, source, tag, comm, request); });
}

CSP_EXPORT int MPI_Wait(H* request, H status) {
  CSP_MPI_NEXT(MPI_Wait, (H*, H));
  return completing(
      true, 1, request, status, 1, [&](H st) { return real(request, st); },
      [](const Completion& c, std::uint64_t t0, std::uint64_t t1) { c.complete(0, 0, t0, t1); });
}

CSP_EXPORT int MPI_Waitall(int count, H* requests, H statuses) {
  CSP_MPI_NEXT(MPI_Waitall, (int, H*, H));
  return completing(
      true, count, requests, statuses, count, [&](H st) { return real(count, requests, st); },
      [&](const Completion& c, std::uint64_t t0, std::uint64_t t1) {
        for (int i = 0; i < count; ++i) c.complete(i, i, t0, t1);
      });
}

CSP_EXPORT int MPI_Waitany(int count, H* requests, int* index, H status) {
  CSP_MPI_NEXT(MPI_Waitany, (int, H*, int*, H));
  return completing(
      true, count, requests, status, 1, [&](H st) { return real(count, requests, index, st); },
      [&](const Completion& c, std::uint64_t t0, std::uint64_t t1) {
        if (*index != kUndefined) c.complete(*index, 0, t0, t1);
      });
}

CSP_EXPORT int MPI_Waitsome(int count, H* requests, int* outcount, int* indices, H statuses) {
  CSP_MPI_NEXT(MPI_Waitsome, (int, H*, int*, int*, H));
  return completing(
      true, count, requests, statuses, count, [&](H st) { return real(count, requests, outcount, indices, st); },
      [&](const Completion& c, std::uint64_t t0, std::uint64_t t1) {
        for (int k = 0; *outcount != kUndefined && k < *outcount; ++k) c.complete(indices[k], k, t0, t1);
      });
}

CSP_EXPORT int MPI_Test(H* request, int* flag, H status) {
  CSP_MPI_NEXT(MPI_Test, (H*, int*, H));
  return completing(
      false, 1, request, status, 1, [&](H st) { return real(request, flag, st); },
      [&](const Completion& c, std::uint64_t t0, std::uint64_t t1) {
        if (*flag != 0) c.complete(0, 0, t0, t1);
      });
}

CSP_EXPORT int MPI_Testall(int count, H* requests, int* flag, H statuses) {
  CSP_MPI_NEXT(MPI_Testall, (int, H*, int*, H));
  return completing(
      false, count, requests, statuses, count, [&](H st) { return real(count, requests, flag, st); },
      [&](const Completion& c, std::uint64_t t0, std::uint64_t t1) {
        for (int i = 0; *flag != 0 && i < count; ++i) c.complete(i, i, t0, t1);
      });
}

CSP_EXPORT int MPI_Testany(int count, H* requests, int* index, int* flag, H status) {
  CSP_MPI_NEXT(MPI_Testany, (int, H*, int*, int*, H));
  return completing(
      false, count, requests, status, 1, [&](H st) { return real(count, requests, index, flag, st); },
      [&](const Completion& c, std::uint64_t t0, std::uint64_t t1) {
        if (*flag != 0 && *index != kUndefined) c.complete(*index, 0, t0, t1);
      });
}

CSP_EXPORT int MPI_Testsome(int count, H* requests, int* outcount, int* indices, H statuses) {
  CSP_MPI_NEXT(MPI_Testsome, (int, H*, int*, int*, H));
  return completing(
      false, count, requests, statuses, count, [&](H st) { return real(count, requests, outcount, indices, st); },
      [&](const Completion& c, std::uint64_t t0, std::uint64_t t1) {
        for (int k = 0; *outcount != kUndefined && k < *outcount; ++k) c.complete(indices[k], k, t0, t1);
      });
}

CSP_EXPORT int MPI_Request_free(H* request) {
  CSP_MPI_NEXT(MPI_Request_free, (H*));
  const H handle = request != nullptr && commLogOn() ? *request : nullptr;
  const int rc = real(request);
  if (rc == 0 && handle != nullptr) commDrop(handle, monotonicNs());
  return rc;
}
