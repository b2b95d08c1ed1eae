// Termination signals: a program ended by SIGTERM (Slurm's time limit, `kill`, mpirun passing on
// its own SIGTERM), SIGINT (Ctrl-C), SIGHUP or SIGXCPU (CPU-time limit) keeps every thread's
// profile.
//
// csp's handler stands in for the default action only. It is installed at start-up for each of
// these signals whose disposition is the default; a signal that is ignored (nohup) stays
// ignored, and a handler the program installs (before or after us) replaces ours, exactly as
// without csp: the program then decides how to end, and a normal exit writes the profiles. When
// the program sets the default action again, csp's handler comes back. Queries
// (sigaction(sig, NULL, &old)) report what the program would see without csp.
//
// The handler writes nothing itself: writing a profile allocates, and the interrupted code may
// hold the allocator's lock. It wakes a helper thread (created at start-up, all signals blocked,
// idle in a futex wait) that writes every thread's profile in normal context, waits for it (at
// most CSP_TERMINATION_WAIT seconds), and then raises the signal again with the default action,
// so the exit status is the signal's. Locks that the helper needs (the thread registry, the load
// map, the bundle) are only ever held inside a TerminationGuard: a termination signal that lands
// in a guarded thread is deferred to the end of the guard.
//
// `_exit`, `_Exit` and `quick_exit` end a process without its atexit handlers, so csp's at-exit
// writer never runs.
// Open MPI's ranks end that way when they lose mpirun (mpirun killed, or stopped by a second
// SIGTERM or SIGINT: it then exits at once), and so does the rank that calls MPI_Abort. They are
// interposed: the helper writes every thread's profile as for a signal (without waiting for
// peers: no SIGKILL follows), and then the process ends with the status it asked for.
#include <dlfcn.h>
#include <linux/futex.h>
#include <pthread.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <climits>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <string>

#include "runtime.hpp"

namespace csp::measure {

namespace {

constexpr int kSignals[] = {SIGTERM, SIGINT, SIGHUP, SIGXCPU};

struct SignalState {
  std::atomic<bool> ours{false};  // our handler is installed in place of the default action
  struct sigaction program {};    // what the program last set (reported back to it)
};
// Constant-initialized: a dynamic initializer could run after the library's constructor has
// installed the handlers (the order of the two is the link order) and forget them; it did, and
// fork children then had no writer for a termination signal.
constinit SignalState g_state[_NSIG];

constinit std::atomic<int> g_request{0};               // set by a handler: write everything
constinit std::atomic<int> g_done{0};                  // set by the helper when done
constinit std::atomic<int> g_requester{0};             // the signal being handled
constinit std::atomic<std::uint64_t> g_deadlineNs{0};  // CLOCK_MONOTONIC: the process dies then at the latest
constinit bool g_helperRunning = false;
constinit pid_t g_helperPid = 0;    // the process whose helper runs (a vfork child shares the memory, not the helper)
constexpr int kImmediateExit = -1;  // g_requester: _exit, _Exit or quick_exit, no signal

using ExitFunction = void (*)(int);
constinit ExitFunction g_realExit = nullptr;  // libc's _exit, looked up at start-up (dlsym is not for _exit's callers)

// The helper thread (initial-exec TLS: readable from a signal handler).
thread_local bool tlsIsHelper __attribute__((tls_model("initial-exec"))) = false;

long futex(std::atomic<int>* word, int op, int value, const timespec* timeout) {
  return syscall(SYS_futex, reinterpret_cast<int*>(word), op, value, timeout, nullptr, 0);
}

void* helperMain(void*) {
  tlsIsHelper = true;
  for (;;) {
    while (g_request.load() == 0) futex(&g_request, FUTEX_WAIT_PRIVATE, 0, nullptr);
    const std::uint64_t start = monotonicNs();
    const int requester = g_requester.load();
    const bool signalled = requester != kImmediateExit;
    // CSP_VERBOSE: when a terminated process starts and ends writing, and how long it waited for
    // its peers (a job that lost profiles at a time limit shows how far each rank got).
    const bool verbose = config().verbose > 0;
    const std::string who =
        verbose ? "csp: pid " + std::to_string(::getpid()) +
                      (signalled ? ", signal " + std::to_string(requester) : std::string(", _exit")) + ": "
                : std::string();
    if (verbose) say(who + "writing the profiles\n");
    if (signalled) announceTerminating();
    writeAllProfilesNow();
    const std::uint64_t written = monotonicNs();
    if (signalled) waitForTerminatingPeers(g_deadlineNs.load());  // under mpirun: die together (peers.cpp)
    if (verbose)
      say(who + "profiles written in " + std::to_string((written - start) / 1'000'000u) + " ms" +
          (signalled ? ", then " + std::to_string((monotonicNs() - written) / 1'000'000u) + " ms waiting for peers"
                     : std::string()) +
          "; ending\n");
    g_done.store(1);
    futex(&g_done, FUTEX_WAKE_PRIVATE, INT_MAX, nullptr);
    // One termination per process: the handler raises the signal again, and the process ends.
    for (;;) pause();
  }
  return nullptr;
}

void startHelper() {
  // All signals blocked in the helper (the mask is inherited from the creating thread).
  sigset_t all, saved;
  sigfillset(&all);
  pthread_sigmask(SIG_SETMASK, &all, &saved);
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
  pthread_attr_setstacksize(&attr, 1u << 20);  // writing a profile needs room (Cap'n Proto, fmt)
  using PthreadCreate = int (*)(pthread_t*, const pthread_attr_t*, void* (*)(void*), void*);
  static auto realCreate = reinterpret_cast<PthreadCreate>(dlsym(RTLD_NEXT, "pthread_create"));
  pthread_t helper;
  g_helperRunning = realCreate != nullptr && realCreate(&helper, &attr, helperMain, nullptr) == 0;
  g_helperPid = ::getpid();
  if (g_helperRunning) pthread_setname_np(helper, "csp-writer");
  pthread_attr_destroy(&attr);
  pthread_sigmask(SIG_SETMASK, &saved, nullptr);
}

std::uint64_t waitNs() {
  static const std::uint64_t ns = [] {
    const char* v = std::getenv("CSP_TERMINATION_WAIT");
    const long s = v != nullptr && *v != '\0' ? std::strtol(v, nullptr, 10) : 20;
    return static_cast<std::uint64_t>(s > 0 && s < 3600 ? s : 20) * 1'000'000'000u;
  }();
  return ns;
}

// Guard depth of the thread and the termination signal it deferred (initial-exec TLS: readable
// from a handler without allocation).
thread_local int tlsGuardDepth __attribute__((tls_model("initial-exec"))) = 0;
thread_local int tlsDeferredSignal __attribute__((tls_model("initial-exec"))) = 0;

// Has the helper write every profile, unless a write was requested before (by `requester`: a
// signal number or kImmediateExit), and waits until it is done. Bounded: a helper stuck on a lock
// must not keep the process alive until SIGKILL.
void writeThroughHelper(int requester) {
  int none = 0;
  if (g_requester.compare_exchange_strong(none, requester) && g_helperRunning) {
    g_deadlineNs.store(monotonicNs() + waitNs());
    g_request.store(1);
    futex(&g_request, FUTEX_WAKE_PRIVATE, 1, nullptr);
  }
  if (!g_helperRunning) return;
  // Every thread that ends the process waits for the one write, until the first request's
  // deadline (not yet stored if that request is only just being made).
  const std::uint64_t first = g_deadlineNs.load();
  const std::uint64_t deadline = first != 0 ? first : monotonicNs() + waitNs();
  while (g_done.load() == 0) {
    const std::uint64_t now = monotonicNs();
    if (now >= deadline) break;
    const std::uint64_t left = std::min<std::uint64_t>(deadline - now, 100'000'000u);
    timespec ts{static_cast<time_t>(left / 1'000'000'000u), static_cast<long>(left % 1'000'000'000u)};
    futex(&g_done, FUTEX_WAIT_PRIVATE, 0, &ts);
  }
}

// Writes every profile (through the helper), then dies of `sig`. Called by the handler, or by
// the end of a guard for a signal that arrived inside it.
void terminate(int sig) {
  writeThroughHelper(sig);
  // Die of the signal: default action, raised again, then unblocked (it is blocked while this
  // handler runs).
  struct sigaction dfl;
  memset(&dfl, 0, sizeof dfl);
  dfl.sa_handler = SIG_DFL;
  sigemptyset(&dfl.sa_mask);
  realSigaction()(sig, &dfl, nullptr);
  raise(sig);
  sigset_t s;
  sigemptyset(&s);
  sigaddset(&s, sig);
  pthread_sigmask(SIG_UNBLOCK, &s, nullptr);
}

void onTerminationSignal(int sig, siginfo_t*, void*) {
  if (tlsGuardDepth > 0) {  // this thread holds a lock the writer needs: finish that first
    if (tlsDeferredSignal == 0) tlsDeferredSignal = sig;
    return;
  }
  terminate(sig);
}

bool isDefault(const struct sigaction& a) { return (a.sa_flags & SA_SIGINFO) == 0 && a.sa_handler == SIG_DFL; }

int installOurs(int sig) {
  struct sigaction ours;
  memset(&ours, 0, sizeof ours);
  ours.sa_sigaction = onTerminationSignal;
  ours.sa_flags = SA_SIGINFO | SA_RESTART | SA_ONSTACK;
  sigfillset(&ours.sa_mask);  // samples and other signals wait until the process ends
  const int rc = realSigaction()(sig, &ours, nullptr);
  if (rc == 0) g_state[sig].ours.store(true);
  return rc;
}

}  // namespace

bool isTerminationSignal(int sig) {
  for (int s : kSignals)
    if (s == sig) return true;
  return false;
}

void installTerminationHandlers() {
  g_realExit = reinterpret_cast<ExitFunction>(dlsym(RTLD_NEXT, "_exit"));
  if (realSigaction() == nullptr) return;
  startHelper();
  if (!g_helperRunning) {
    say("csp: warning: cannot start the writer thread; profiles are lost if the program is killed by a signal\n");
    return;
  }
  initTerminationPeers();
  for (int sig : kSignals) {
    struct sigaction current;
    if (realSigaction()(sig, nullptr, &current) != 0) continue;
    g_state[sig].program = current;
    if (isDefault(current)) installOurs(sig);
  }
}

void restartTerminationHelper() {
  // The fork child has none of the parent's threads: a new helper, a fresh request.
  g_request.store(0);
  g_done.store(0);
  g_requester.store(0);
  g_deadlineNs.store(0);
  g_helperRunning = false;
  initTerminationPeers();  // off: a fork child is no rank
  bool any = false;
  for (int sig : kSignals) any = any || g_state[sig].ours.load();
  if (any) startHelper();
}

int terminationSigaction(int sig, const struct sigaction* act, struct sigaction* old) {
  SignalState& s = g_state[sig];
  if (!s.ours.load()) {
    if (act == nullptr || !isDefault(*act) || !g_helperRunning) {
      const int rc = realSigaction()(sig, act, old);
      if (rc == 0 && act != nullptr) s.program = *act;
      return rc;
    }
    // The program restores the default action: our handler stands in for it again.
    struct sigaction previous;
    if (realSigaction()(sig, nullptr, &previous) != 0) return -1;
    if (installOurs(sig) != 0) return realSigaction()(sig, act, old);
    if (old != nullptr) *old = previous;
    s.program = *act;
    return 0;
  }
  if (old != nullptr) *old = s.program;
  if (act == nullptr) return 0;
  if (isDefault(*act)) {
    s.program = *act;
    return 0;
  }
  // A handler of the program's, or SIG_IGN: it replaces ours, as it would replace the default.
  s.ours.store(false);
  const int rc = realSigaction()(sig, act, nullptr);
  if (rc == 0) s.program = *act;
  return rc;
}

TerminationGuard::TerminationGuard() {
  ++tlsGuardDepth;
  std::atomic_signal_fence(std::memory_order_seq_cst);  // the depth is set before the lock is taken
}

TerminationGuard::~TerminationGuard() {
  std::atomic_signal_fence(std::memory_order_seq_cst);  // the lock is released before the depth drops
  if (--tlsGuardDepth > 0) return;
  std::atomic_signal_fence(std::memory_order_seq_cst);
  if (const int sig = tlsDeferredSignal; sig != 0) {
    tlsDeferredSignal = 0;
    // As the handler would have: every other signal held off while the profiles are written.
    sigset_t all;
    sigfillset(&all);
    pthread_sigmask(SIG_BLOCK, &all, nullptr);
    terminate(sig);
  }
}

void writeBeforeImmediateExit() {
  // Not in the helper (the library's own code ending the process while writing), not while this
  // thread holds a lock the helper needs (a handler of the program's that interrupted csp: the
  // profiles are lost, as before, rather than the process held up), and not in a vfork child,
  // which shares the parent's memory but not its helper.
  if (!g_helperRunning || tlsIsHelper || tlsGuardDepth > 0 || ::getpid() != g_helperPid) return;
  writeThroughHelper(kImmediateExit);
}

[[noreturn]] void endProcess(int status) {
  if (g_realExit != nullptr) g_realExit(status);
  for (;;) syscall(SYS_exit_group, status);
}

}  // namespace csp::measure

// The program's _exit, _Exit and quick_exit (libc's own calls, as in exit(), are not interposed).
extern "C" __attribute__((visibility("default"))) void _exit(int status) {
  csp::measure::writeBeforeImmediateExit();
  csp::measure::endProcess(status);
}

extern "C" __attribute__((visibility("default"))) void _Exit(int status) noexcept {
  csp::measure::writeBeforeImmediateExit();
  csp::measure::endProcess(status);
}

// quick_exit runs the at_quick_exit handlers and ends in libc's own _exit: the profiles first.
extern "C" __attribute__((visibility("default"))) void quick_exit(int status) noexcept {
  csp::measure::writeBeforeImmediateExit();
  using QuickExit = void (*)(int);
  static const auto real = reinterpret_cast<QuickExit>(dlsym(RTLD_NEXT, "quick_exit"));
  if (real != nullptr) real(status);
  csp::measure::endProcess(status);
}
