// Threaded test program for idleness accounting (csp-run --idleness; docs/measurement.md).
//
//   csp-app-threads blame HOLD_MS
//     One thread takes a mutex in hold_lock() and keeps it while three others wait for it: it
//     first waits until all three are asleep in pthread_mutex_lock (read from /proc), then
//     computes for HOLD_MS of wall-clock time. Each waiter takes the lock in wait_for_lock() and
//     releases it at once. The holder's critical section should get about 3x its own time as
//     lock-blame; the waiters get lock-wait. Prints the time the lock was held: "held NS ns".
//   csp-app-threads spin-blame HOLD_MS
//     The same with a pthread spin lock: the waiters spin in pthread_spin_lock.
//   csp-app-threads blame-rounds HOLD_US ROUNDS, spin-blame-rounds HOLD_US ROUNDS
//     Many holds of HOLD_US with the same three waiters (see "blame rounds" below). Prints
//     "held NS ns, waited NS ns, waited-in-hold NS ns, release-window NS ns, all-release-window NS ns".
//   csp-app-threads barrier UNIT_MS ROUNDS
//     Four threads compute (i+1) * UNIT_MS of thread CPU time in work_share(), then meet at
//     pthread_barrier_wait, ROUNDS times. Each thread prints the wall-clock time it spent in the
//     barrier, as measured by the program itself: "barrier thread I: NS ns".
//   csp-app-threads kinds ITERATIONS
//     Every kind of mutex under contention and its single-thread rules (see kinds() below).
//   csp-app-threads heavy THREADS ITERATIONS
//     Lock-heavy: every thread takes one shared mutex ITERATIONS times for a short critical
//     section, with some computation outside it (the overhead benchmark). Prints its CPU time.
#include <pthread.h>
#include <sched.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

namespace {

std::uint64_t nowNs(clockid_t clock) {
  timespec ts{};
  clock_gettime(clock, &ts);
  return static_cast<std::uint64_t>(ts.tv_sec) * 1'000'000'000u + static_cast<std::uint64_t>(ts.tv_nsec);
}

volatile double g_sink = 0;

// Computes until `clock` has advanced by `ns`.
__attribute__((noinline)) void burn(clockid_t clock, std::uint64_t ns) {
  double x = g_sink;
  const std::uint64_t end = nowNs(clock) + ns;
  while (nowNs(clock) < end)
    for (int i = 0; i < 2000; ++i) x = x * 1.0000001 + 1e-9;
  g_sink = x;
}

// ---- blame ----------------------------------------------------------------------------------

pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
std::atomic<bool> g_held{false};
std::atomic<int> g_waiterTid[3];
std::atomic<int> g_announced{0};
std::atomic<int> g_released{0};
std::uint64_t g_holdNs = 0;

// True when the thread sleeps (state S) in a futex wait.
bool asleep(int tid) {
  std::ifstream stat("/proc/self/task/" + std::to_string(tid) + "/stat");
  std::string text((std::istreambuf_iterator<char>(stat)), std::istreambuf_iterator<char>());
  const auto close = text.rfind(')');
  if (close == std::string::npos || close + 2 >= text.size()) return false;
  if (text[close + 2] != 'S') return false;
  std::ifstream wchan("/proc/self/task/" + std::to_string(tid) + "/wchan");
  std::string w;
  wchan >> w;
  return w.empty() || w.find("futex") != std::string::npos || w == "0";
}

std::uint64_t g_heldNs = 0;  // from the acquisition to the release, as the program measures it
bool g_spin = false;         // spin-blame: a pthread spin lock instead of the mutex
pthread_spinlock_t g_spinLock;

void takeLock() {
  if (g_spin)
    pthread_spin_lock(&g_spinLock);
  else
    pthread_mutex_lock(&g_lock);
}

void releaseLock() {
  if (g_spin)
    pthread_spin_unlock(&g_spinLock);
  else
    pthread_mutex_unlock(&g_lock);
}

__attribute__((noinline)) void hold_lock() {
  takeLock();
  const std::uint64_t acquired = nowNs(CLOCK_MONOTONIC);
  g_held.store(true);
  // The three waiters announce themselves and then wait in pthread_mutex_lock; the hold starts
  // for real once all of them are asleep (several consecutive readings, since sampling signals
  // wake them briefly). Spinning waiters cannot be seen waiting: 20 ms more after they announced.
  while (g_announced.load() < 3) sched_yield();
  if (g_spin) burn(CLOCK_MONOTONIC, 20'000'000);
  for (int stable = 0; !g_spin && stable < 5;) {
    bool all = true;
    for (auto& tid : g_waiterTid) all = all && asleep(tid.load());
    stable = all ? stable + 1 : 0;
    burn(CLOCK_MONOTONIC, 200'000);
  }
  burn(CLOCK_MONOTONIC, g_holdNs);
  g_heldNs = nowNs(CLOCK_MONOTONIC) - acquired;
  releaseLock();
  // Not a tail call: the release's context is this function (a release that ends a function is
  // compiled as a jump, and its blame would go to the caller).
  g_released.fetch_add(1);
}

__attribute__((noinline)) void wait_for_lock() {
  takeLock();
  releaseLock();
  g_released.fetch_add(1);
}

void* holder(void*) {
  hold_lock();
  return nullptr;
}

void* waiter(void* arg) {
  const auto i = reinterpret_cast<std::intptr_t>(arg);
  while (!g_held.load()) sched_yield();
  g_waiterTid[i].store(static_cast<int>(syscall(SYS_gettid)));
  g_announced.fetch_add(1);
  wait_for_lock();
  return nullptr;
}

int blame(std::uint64_t holdMs, bool spin) {
  g_holdNs = holdMs * 1'000'000u;
  g_spin = spin;
  pthread_spin_init(&g_spinLock, PTHREAD_PROCESS_PRIVATE);
  pthread_t h, w[3];
  pthread_create(&h, nullptr, holder, nullptr);
  for (std::intptr_t i = 0; i < 3; ++i) pthread_create(&w[i], nullptr, waiter, reinterpret_cast<void*>(i));
  pthread_join(h, nullptr);
  for (auto& t : w) pthread_join(t, nullptr);
  std::printf("blame: held %llu ns\n", static_cast<unsigned long long>(g_heldNs));
  return 0;
}

// ---- blame rounds ---------------------------------------------------------------------------
//
// Many short holds: in each of ROUNDS rounds the holder takes the lock, lets the three waiters
// start (each calls takeLock as soon as it sees the round begin), holds the lock for HOLD_US of
// wall-clock time once all three have announced themselves, and releases it; the round ends
// when every waiter has taken and released the lock. The program measures, by CLOCK_MONOTONIC:
// the holder's holds ("held"), the waiters' time in takeLock ("waited"), and the part of that
// time before the holder's release of the round ("waited-in-hold": what the holder is to blame
// for), and the holder's time from its reading of the clock before the release to the return of
// the release ("release-window": a holder preempted there releases later than it measured, and
// a waiter's blame runs to the actual release), and the same for every release, the waiters'
// hand-overs included ("all-release-window").

std::atomic<int> g_round{0};
std::atomic<int> g_roundDone{0};
std::uint64_t g_releaseNs = 0;  // the holder's release time of the current round (read under the lock)
std::atomic<std::uint64_t> g_waitedNs{0}, g_waitedInHoldNs{0};
std::uint64_t g_releaseWindowNs = 0;                 // the holder's releases (written by the holder only)
std::atomic<std::uint64_t> g_allReleaseWindowNs{0};  // every release's, the waiters' hand-overs too

__attribute__((noinline)) void hold_lock_round(int round) {
  takeLock();
  const std::uint64_t acquired = nowNs(CLOCK_MONOTONIC);
  g_announced.store(0);
  g_round.store(round);
  while (g_announced.load() < 3) sched_yield();
  burn(CLOCK_MONOTONIC, g_holdNs);
  g_releaseNs = nowNs(CLOCK_MONOTONIC);
  g_heldNs += g_releaseNs - acquired;
  const std::uint64_t before = g_releaseNs;
  releaseLock();
  const std::uint64_t window = nowNs(CLOCK_MONOTONIC) - before;
  g_releaseWindowNs += window;
  g_allReleaseWindowNs.fetch_add(window);
  g_released.fetch_add(1);  // not a tail call (see hold_lock)
}

__attribute__((noinline)) void wait_for_lock_round() {
  const std::uint64_t start = nowNs(CLOCK_MONOTONIC);
  takeLock();
  const std::uint64_t got = nowNs(CLOCK_MONOTONIC);
  const std::uint64_t release = g_releaseNs;
  const std::uint64_t before = nowNs(CLOCK_MONOTONIC);
  releaseLock();
  g_allReleaseWindowNs.fetch_add(nowNs(CLOCK_MONOTONIC) - before);
  g_waitedNs.fetch_add(got - start);
  g_waitedInHoldNs.fetch_add(release > start ? release - start : 0);
}

void* roundHolder(void* arg) {
  const int rounds = static_cast<int>(reinterpret_cast<std::intptr_t>(arg));
  for (int r = 1; r <= rounds; ++r) {
    hold_lock_round(r);
    while (g_roundDone.load() < 3 * r) sched_yield();
  }
  return nullptr;
}

void* roundWaiter(void* arg) {
  const int rounds = static_cast<int>(reinterpret_cast<std::intptr_t>(arg));
  for (int r = 1; r <= rounds; ++r) {
    while (g_round.load() < r) sched_yield();
    g_announced.fetch_add(1);
    wait_for_lock_round();
    g_roundDone.fetch_add(1);
  }
  return nullptr;
}

int blameRounds(std::uint64_t holdUs, int rounds, bool spin) {
  g_holdNs = holdUs * 1'000u;
  g_spin = spin;
  pthread_spin_init(&g_spinLock, PTHREAD_PROCESS_PRIVATE);
  const auto arg = reinterpret_cast<void*>(static_cast<std::intptr_t>(rounds));
  pthread_t h, w[3];
  pthread_create(&h, nullptr, roundHolder, arg);
  for (auto& t : w) pthread_create(&t, nullptr, roundWaiter, arg);
  pthread_join(h, nullptr);
  for (auto& t : w) pthread_join(t, nullptr);
  std::printf(
      "blame-rounds: %d rounds, held %llu ns, waited %llu ns, waited-in-hold %llu ns, release-window %llu ns, "
      "all-release-window %llu ns\n",
      rounds, static_cast<unsigned long long>(g_heldNs), static_cast<unsigned long long>(g_waitedNs.load()),
      static_cast<unsigned long long>(g_waitedInHoldNs.load()), static_cast<unsigned long long>(g_releaseWindowNs),
      static_cast<unsigned long long>(g_allReleaseWindowNs.load()));
  return 0;
}

// ---- barrier --------------------------------------------------------------------------------

pthread_barrier_t g_barrier;
std::uint64_t g_unitNs = 0;
int g_rounds = 0;
std::uint64_t g_barrierNs[4];

__attribute__((noinline)) void work_share(int i) {
  burn(CLOCK_THREAD_CPUTIME_ID, g_unitNs * static_cast<std::uint64_t>(i + 1));
}

void* barrierWorker(void* arg) {
  const int i = static_cast<int>(reinterpret_cast<std::intptr_t>(arg));
  for (int r = 0; r < g_rounds; ++r) {
    work_share(i);
    const std::uint64_t start = nowNs(CLOCK_MONOTONIC);
    pthread_barrier_wait(&g_barrier);
    g_barrierNs[i] += nowNs(CLOCK_MONOTONIC) - start;
  }
  return nullptr;
}

int barrier(std::uint64_t unitMs, int rounds) {
  g_unitNs = unitMs * 1'000'000u;
  g_rounds = rounds;
  pthread_barrier_init(&g_barrier, nullptr, 4);
  pthread_t t[4];
  for (std::intptr_t i = 0; i < 4; ++i) pthread_create(&t[i], nullptr, barrierWorker, reinterpret_cast<void*>(i));
  for (auto& x : t) pthread_join(x, nullptr);
  for (int i = 0; i < 4; ++i)
    std::printf("barrier thread %d: %llu ns\n", i, static_cast<unsigned long long>(g_barrierNs[i]));
  return 0;
}

// ---- heavy ----------------------------------------------------------------------------------

long g_iterations = 0;
std::uint64_t g_counter = 0;

__attribute__((noinline)) void outside_work() {
  double x = g_sink;
  for (int i = 0; i < 200; ++i) x = x * 1.0000001 + 1e-9;
  g_sink = x;
}

void* heavyWorker(void*) {
  for (long k = 0; k < g_iterations; ++k) {
    pthread_mutex_lock(&g_lock);
    ++g_counter;
    pthread_mutex_unlock(&g_lock);
    outside_work();
  }
  return nullptr;
}

int heavy(int threads, long iterations) {
  g_iterations = iterations;
  std::vector<pthread_t> t(static_cast<std::size_t>(threads));
  const std::uint64_t cpu0 = nowNs(CLOCK_PROCESS_CPUTIME_ID);
  for (auto& x : t) pthread_create(&x, nullptr, heavyWorker, nullptr);
  for (auto& x : t) pthread_join(x, nullptr);
  std::printf("heavy: %llu acquisitions, %.3f s CPU\n", static_cast<unsigned long long>(g_counter),
              static_cast<double>(nowNs(CLOCK_PROCESS_CPUTIME_ID) - cpu0) / 1e9);
  return g_counter == static_cast<std::uint64_t>(threads) * static_cast<std::uint64_t>(iterations) ? 0 : 1;
}

// ---- kinds ----------------------------------------------------------------------------------
//
// Every kind of mutex keeps its semantics under contention (the lock wrappers of --idleness wait
// for a taken mutex with a timed acquisition first): normal, recursive, error-checking,
// priority-inheritance and robust mutexes, 4 threads x ITERATIONS acquisitions each with a
// counter check; then the single-thread rules: a recursive relock succeeds, an error-checking
// relock is EDEADLK, a robust mutex whose owner died is EOWNERDEAD and can be made consistent.
// Prints one line per check; exits non-zero at the first difference.

struct KindRun {
  pthread_mutex_t* m;
  long iterations;
  std::uint64_t* counter;
};

void* kindWorker(void* arg) {
  auto* k = static_cast<KindRun*>(arg);
  for (long i = 0; i < k->iterations; ++i) {
    if (pthread_mutex_lock(k->m) != 0) std::abort();
    ++*k->counter;
    if ((i & 255) == 0) burn(CLOCK_MONOTONIC, 30'000);  // now and then a hold that outlasts the short wait
    if (pthread_mutex_unlock(k->m) != 0) std::abort();
  }
  return nullptr;
}

void* dieHolding(void* arg) {
  pthread_mutex_lock(static_cast<pthread_mutex_t*>(arg));
  return nullptr;  // ends without unlocking
}

int kinds(long iterations) {
  struct Kind {
    const char* name;
    int type, protocol, robust;
  };
  const Kind all[] = {{"normal", PTHREAD_MUTEX_NORMAL, PTHREAD_PRIO_NONE, PTHREAD_MUTEX_STALLED},
                      {"recursive", PTHREAD_MUTEX_RECURSIVE, PTHREAD_PRIO_NONE, PTHREAD_MUTEX_STALLED},
                      {"errorcheck", PTHREAD_MUTEX_ERRORCHECK, PTHREAD_PRIO_NONE, PTHREAD_MUTEX_STALLED},
                      {"prio-inherit", PTHREAD_MUTEX_NORMAL, PTHREAD_PRIO_INHERIT, PTHREAD_MUTEX_STALLED},
                      {"robust", PTHREAD_MUTEX_NORMAL, PTHREAD_PRIO_NONE, PTHREAD_MUTEX_ROBUST}};
  for (const auto& k : all) {
    pthread_mutexattr_t a;
    pthread_mutexattr_init(&a);
    pthread_mutexattr_settype(&a, k.type);
    pthread_mutexattr_setprotocol(&a, k.protocol);
    pthread_mutexattr_setrobust(&a, k.robust);
    pthread_mutex_t m;
    if (pthread_mutex_init(&m, &a) != 0) {
      std::printf("%s: not available\n", k.name);
      continue;
    }
    std::uint64_t counter = 0;
    KindRun run{&m, iterations, &counter};
    pthread_t t[4];
    for (auto& x : t) pthread_create(&x, nullptr, kindWorker, &run);
    for (auto& x : t) pthread_join(x, nullptr);
    std::printf("%s: %llu acquisitions\n", k.name, static_cast<unsigned long long>(counter));
    if (counter != 4 * static_cast<std::uint64_t>(iterations)) return 1;
    if (k.type == PTHREAD_MUTEX_RECURSIVE) {
      const int a1 = pthread_mutex_lock(&m), a2 = pthread_mutex_lock(&m);
      pthread_mutex_unlock(&m);
      pthread_mutex_unlock(&m);
      std::printf("recursive relock: %d %d\n", a1, a2);
      if (a1 != 0 || a2 != 0) return 1;
    }
    if (k.type == PTHREAD_MUTEX_ERRORCHECK) {
      pthread_mutex_lock(&m);
      const int again = pthread_mutex_lock(&m);
      pthread_mutex_unlock(&m);
      std::printf("errorcheck relock: %s\n", again == EDEADLK ? "EDEADLK" : std::strerror(again));
      if (again != EDEADLK) return 1;
    }
    if (k.robust == PTHREAD_MUTEX_ROBUST) {
      pthread_t dead;
      pthread_create(&dead, nullptr, dieHolding, &m);
      pthread_join(dead, nullptr);
      const int rc = pthread_mutex_lock(&m);
      std::printf("robust after owner died: %s\n", rc == EOWNERDEAD ? "EOWNERDEAD" : std::strerror(rc));
      if (rc != EOWNERDEAD) return 1;
      pthread_mutex_consistent(&m);
      pthread_mutex_unlock(&m);
    }
    pthread_mutex_destroy(&m);
    pthread_mutexattr_destroy(&a);
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "";
  if (mode == "blame" || mode == "spin-blame")
    return blame(argc > 2 ? std::strtoull(argv[2], nullptr, 10) : 400, mode == "spin-blame");
  if (mode == "blame-rounds" || mode == "spin-blame-rounds")
    return blameRounds(argc > 2 ? std::strtoull(argv[2], nullptr, 10) : 1000, argc > 3 ? std::atoi(argv[3]) : 100,
                       mode == "spin-blame-rounds");
  if (mode == "barrier")
    return barrier(argc > 2 ? std::strtoull(argv[2], nullptr, 10) : 50, argc > 3 ? std::atoi(argv[3]) : 2);
  if (mode == "kinds") return kinds(argc > 2 ? std::atol(argv[2]) : 20'000);
  if (mode == "heavy") return heavy(argc > 2 ? std::atoi(argv[2]) : 4, argc > 3 ? std::atol(argv[3]) : 1'000'000);
  std::fprintf(stderr,
               "usage: csp-app-threads blame HOLD_MS | spin-blame HOLD_MS | blame-rounds HOLD_US ROUNDS | "
               "spin-blame-rounds HOLD_US ROUNDS | barrier UNIT_MS ROUNDS | heavy THREADS "
               "ITERATIONS | kinds ITERATIONS\n");
  return 2;
}
