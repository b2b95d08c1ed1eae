// The sampling signal handler and the per-thread timers.
//
// Everything reachable from onSample() is async-signal-safe: it touches only the interrupted
// thread's pre-mapped arena, unwinds with libunwind's local-only unwinder (documented as
// signal-safe when its cache is per-thread), and neither allocates nor locks.
//
// libunwind is loaded with dlopen(RTLD_LOCAL) rather than linked: a linked dependency of a
// preloaded library joins the program's global scope, where libunwind's _Unwind_* compatibility
// symbols would replace the C++ runtime's exception unwinder (libgcc's, or LLVM's libunwind)
// for the whole program.
#define UNW_LOCAL_ONLY
#include <libunwind.h>

#include <dlfcn.h>
#include <errno.h>
#include <string.h>

#include <string>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "runtime.hpp"

namespace csp::measure {

thread_local ThreadState* tlsThread __attribute__((tls_model("initial-exec"))) = nullptr;
thread_local int tlsUnsafe __attribute__((tls_model("initial-exec"))) = 0;

namespace {

constexpr std::uint32_t kFull = 0xFFFFFFFFu;

// The entry points we use, by their real (target-specific) names: the libunwind.h macros map
// unw_step to _ULx86_64_step and so on.
#define CSP_STRINGIFY2(x) #x
#define CSP_STRINGIFY(x) CSP_STRINGIFY2(x)
struct Unwinder {
  int (*initLocal2)(unw_cursor_t*, unw_context_t*, int) = nullptr;
  int (*initLocal)(unw_cursor_t*, unw_context_t*) = nullptr;
  int (*step)(unw_cursor_t*) = nullptr;
  int (*getReg)(unw_cursor_t*, unw_regnum_t, unw_word_t*) = nullptr;
  int (*setCachingPolicy)(unw_addr_space_t, unw_caching_policy_t) = nullptr;
  int (*getContext)(unw_context_t*) = nullptr;
  unw_addr_space_t* localAddrSpace = nullptr;
};
constinit Unwinder g_unwinder;

template <class T>
bool resolve(void* lib, const char* name, T& out) {
  out = reinterpret_cast<T>(dlsym(lib, name));
  return out != nullptr;
}

bool loadUnwinder() {
  void* lib = dlopen(CSP_LIBUNWIND_SONAME, RTLD_NOW | RTLD_LOCAL);
  if (lib == nullptr) return false;
  Unwinder u;
  const bool ok = resolve(lib, CSP_STRINGIFY(unw_init_local2), u.initLocal2) &&
                  resolve(lib, CSP_STRINGIFY(unw_init_local), u.initLocal) &&
                  resolve(lib, CSP_STRINGIFY(unw_step), u.step) && resolve(lib, CSP_STRINGIFY(unw_get_reg), u.getReg) &&
                  resolve(lib, CSP_STRINGIFY(unw_set_caching_policy), u.setCachingPolicy) &&
                  resolve(lib, CSP_STRINGIFY(unw_tdep_getcontext), u.getContext) &&
                  resolve(lib, CSP_STRINGIFY(unw_local_addr_space), u.localAddrSpace);
  if (!ok) return false;
  g_unwinder = u;
  return true;
}

inline std::uint64_t mix(std::uint32_t parent, std::uint64_t address) {
  std::uint64_t h = address * 0x9E3779B97F4A7C15ull ^ (std::uint64_t{parent} + 0x632BE59BD9B4E019ull) * 0xC2B2AE3D27D4EB4Full;
  return h ^ (h >> 29);
}

// The child of `parent` for `address`, inserted if new; kFull when the arena has no room.
inline std::uint32_t child(CctArena& a, std::uint32_t parent, std::uint64_t address) {
  for (std::uint32_t i = static_cast<std::uint32_t>(mix(parent, address)) & a.tableMask;; i = (i + 1) & a.tableMask) {
    const std::uint32_t e = a.table[i];
    if (e == 0) {
      if (a.size == a.capacity) return kFull;
      const std::uint32_t n = a.size++;
      CctNode& node = a.nodes[n];
      node.address = address;
      node.parent = parent;
      for (auto& c : node.count) c = 0;
      a.table[i] = n + 1;
      return n;
    }
    const CctNode& node = a.nodes[e - 1];
    if (node.address == address && node.parent == parent) return e - 1;
  }
}

using SigactionFn = int (*)(int, const struct sigaction*, struct sigaction*);
SigactionFn realSigaction() {
  static SigactionFn real = reinterpret_cast<SigactionFn>(dlsym(RTLD_NEXT, "sigaction"));
  return real;
}

// What the program asked for the sampling signal. Written by the sigaction/signal interposers
// (normal context) into the slot the handler is not reading, then published.
struct sigaction g_programActions[2];
std::atomic<int> g_programSlot{0};
std::atomic<bool> g_installed{false};
std::atomic<bool> g_intercepted{false};

void setProgramAction(const struct sigaction& a) {
  const int next = 1 - g_programSlot.load(std::memory_order_relaxed);
  g_programActions[next] = a;
  g_programSlot.store(next, std::memory_order_release);
}

// A SIGPROF that our timers did not send (kill, setitimer) belongs to the program: run its
// handler if it installed one. Its default action (terminate) is not reproduced: a stray
// signal must not end a measured run.
void forwardToProgram(siginfo_t* info, void* ucontext) {
  const struct sigaction& a = g_programActions[g_programSlot.load(std::memory_order_acquire)];
  if ((a.sa_flags & SA_SIGINFO) != 0) {
    if (a.sa_sigaction != nullptr) a.sa_sigaction(kSampleSignal, info, ucontext);
  } else if (a.sa_handler != SIG_DFL && a.sa_handler != SIG_IGN && a.sa_handler != nullptr) {
    a.sa_handler(kSampleSignal);
  }
}

void onSample(int, siginfo_t* info, void* ucontext) {
  const int savedErrno = errno;
  ThreadState* t = tlsThread;
  if (t == nullptr) {
    if (info->si_code != SI_TIMER) forwardToProgram(info, ucontext);
    errno = savedErrno;
    return;
  }
  // Our timers carry the event index; anything else (kill, raise) is not a sample.
  const int event = info->si_code == SI_TIMER ? info->si_value.sival_int : -1;
  if (event < 0 || event >= t->timerCount) {
    ++t->foreignSignals;
    errno = savedErrno;
    forwardToProgram(info, ucontext);
    return;
  }
  int expected = static_cast<int>(Phase::Active);
  if (!t->phase.compare_exchange_strong(expected, static_cast<int>(Phase::Busy), std::memory_order_acquire)) {
    errno = savedErrno;  // being written: the profile is final
    return;
  }
  // A timer signal that arrives late (CPU-clock timers are checked at the kernel tick) carries
  // the periods it missed; counting them keeps value = count x period right at high rates.
  const std::uint64_t weight = 1 + static_cast<std::uint64_t>(info->si_overrun > 0 ? info->si_overrun : 0);
  t->samples += weight;
  CctArena& a = t->cct;
  if (tlsUnsafe != 0) {
    t->droppedSamples += weight;
  } else {
    unw_cursor_t cursor;
    std::uint32_t depth = 0;
    bool failed = false, truncated = false;
    if (g_unwinder.initLocal2(&cursor, static_cast<unw_context_t*>(ucontext), UNW_INIT_SIGNAL_FRAME) < 0) {
      failed = true;
    } else {
      for (;;) {
        unw_word_t ip = 0;
        if (g_unwinder.getReg(&cursor, UNW_REG_IP, &ip) < 0) {
          failed = true;
          break;
        }
        if (ip == 0) break;  // some outermost frames end the chain with a null return address
        a.path[depth++] = ip;
        const int step = g_unwinder.step(&cursor);
        if (step == 0) break;
        if (step < 0) {
          failed = true;
          break;
        }
        if (depth == a.maxDepth) {
          truncated = true;
          break;
        }
      }
    }
    if (depth == 0) {
      // Nothing to attribute the sample to.
      ++t->unwindFailures;
      t->droppedSamples += weight;
    } else {
      if (failed) ++t->unwindFailures;
      if (truncated) ++t->truncatedPaths;
      std::uint32_t node = 0;
      for (std::uint32_t i = depth; i-- > 0 && node != kFull;) node = child(a, node, a.path[i]);
      if (node == kFull)
        t->droppedSamples += weight;
      else
        a.nodes[node].count[event] += weight;
    }
  }
  t->phase.store(static_cast<int>(Phase::Active), std::memory_order_release);
  errno = savedErrno;
}

struct sigaction g_ourAction;

}  // namespace

bool mapArena(CctArena& a, std::uint32_t maxNodes, std::uint32_t maxDepth) {
  std::uint32_t tableSize = 1;
  while (tableSize < 2 * maxNodes) tableSize <<= 1;  // load factor <= 1/2 keeps probes short
  const std::size_t nodeBytes = std::size_t{maxNodes} * sizeof(CctNode);
  const std::size_t tableBytes = std::size_t{tableSize} * sizeof(std::uint32_t);
  const std::size_t pathBytes = std::size_t{maxDepth} * sizeof(std::uint64_t);
  const std::size_t bytes = nodeBytes + tableBytes + pathBytes;
  // NORESERVE: only the pages a thread touches cost memory, so the limit can be generous.
  void* m = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (m == MAP_FAILED) return false;
  auto* base = static_cast<char*>(m);
  a.mapping = m;
  a.mappingBytes = bytes;
  a.nodes = reinterpret_cast<CctNode*>(base);
  a.table = reinterpret_cast<std::uint32_t*>(base + nodeBytes);
  a.path = reinterpret_cast<std::uint64_t*>(base + nodeBytes + tableBytes);
  a.capacity = maxNodes;
  a.tableMask = tableSize - 1;
  a.maxDepth = maxDepth;
  a.size = 1;  // the root, never in the table
  a.nodes[0].address = 0;
  a.nodes[0].parent = 0xFFFFFFFFu;
  return true;
}

void unmapArena(CctArena& a) {
  if (a.mapping != nullptr) munmap(a.mapping, a.mappingBytes);
  a = CctArena{};
}

bool installSampler() {
  if (!loadUnwinder()) {
    const char* why = dlerror();
    say(std::string("csp: error: cannot use " CSP_LIBUNWIND_SONAME ": ") + (why != nullptr ? why : "symbols missing") +
        "; threads are not sampled\n");
    return false;
  }
  // The global cache takes a lock; per-thread caching is the signal-safe choice.
  g_unwinder.setCachingPolicy(*g_unwinder.localAddrSpace, UNW_CACHE_PER_THREAD);
  // libunwind initializes itself on first use; let that happen here, in normal context, rather
  // than inside the first signal handler.
  unw_context_t context;
  unw_cursor_t cursor;
  if (g_unwinder.getContext(&context) == 0 && g_unwinder.initLocal(&cursor, &context) == 0) {
    for (int i = 0; i < 64 && g_unwinder.step(&cursor) > 0; ++i) {
    }
  }
  memset(&g_ourAction, 0, sizeof g_ourAction);
  g_ourAction.sa_sigaction = onSample;
  // SA_RESTART: a sample must not make the program's system calls fail with EINTR.
  // SA_ONSTACK: the handler (unwinding needs ~10 KiB) runs on the thread's alternate signal
  // stack, not on whatever is left of a small thread stack (process.cpp installs one per thread).
  g_ourAction.sa_flags = SA_SIGINFO | SA_RESTART | SA_ONSTACK;
  sigemptyset(&g_ourAction.sa_mask);
  struct sigaction previous;
  memset(&previous, 0, sizeof previous);
  if (realSigaction() == nullptr || realSigaction()(kSampleSignal, &g_ourAction, &previous) != 0) return false;
  setProgramAction(previous);  // a handler installed before we were loaded still gets its signals
  g_installed.store(true);
  return true;
}

const char* samplingSignalState() {
  if (g_installed.load() && !samplerStillInstalled()) return "yes";
  return g_intercepted.load() ? "intercepted" : "no";
}

bool samplerStillInstalled() {
  struct sigaction current;
  if (realSigaction() == nullptr || realSigaction()(kSampleSignal, nullptr, &current) != 0) return true;
  return (current.sa_flags & SA_SIGINFO) != 0 && current.sa_sigaction == onSample;
}

bool startTimers(ThreadState& t) {
  const auto& events = config().events;
  t.tid = static_cast<pid_t>(syscall(SYS_gettid));
  t.timerCount = 0;
  for (std::size_t e = 0; e < events.size() && e < static_cast<std::size_t>(kMaxEvents); ++e) {
    struct sigevent sev;
    memset(&sev, 0, sizeof sev);
    sev.sigev_notify = SIGEV_THREAD_ID;
    sev.sigev_signo = kSampleSignal;
    sev.sigev_value.sival_int = static_cast<int>(e);
    sev._sigev_un._tid = t.tid;
    timer_t timer;
    if (timer_create(events[e].clock, &sev, &timer) != 0) {
      reportOnce("timer_create", std::string("csp: warning: timer_create failed (") + strerror(errno) +
                                     "); some threads are not sampled\n");
      break;
    }
    t.timers[t.timerCount++] = timer;
  }
  // Arm only after every timer exists, so that sival_int always indexes a live timer.
  for (int e = 0; e < t.timerCount; ++e) {
    const std::uint64_t p = events[static_cast<std::size_t>(e)].periodNs;
    struct itimerspec spec;
    spec.it_interval.tv_sec = static_cast<time_t>(p / 1'000'000'000u);
    spec.it_interval.tv_nsec = static_cast<long>(p % 1'000'000'000u);
    spec.it_value = spec.it_interval;
    timer_settime(t.timers[e], 0, &spec, nullptr);
  }
  return t.timerCount > 0;
}

void stopTimers(ThreadState& t) {
  for (int e = 0; e < t.timerCount; ++e) timer_delete(t.timers[e]);
  // timerCount stays: a signal already pending still carries a valid index and is ignored by
  // the phase check.
}

}  // namespace csp::measure

// The program installing a handler for the sampling signal would end sampling, or, with the
// default action, kill the program at the next sample (GNU sort catches SIGPROF to clean up and
// re-raises it). So the interposers keep our handler in place, remember the program's, and
// hand it the SIGPROFs our timers did not send. The takeover attempt is reported.
extern "C" __attribute__((visibility("default"))) int sigaction(int sig, const struct sigaction* act,
                                                                struct sigaction* old) {
  using namespace csp::measure;
  SigactionFn real = realSigaction();
  if (real == nullptr) {
    errno = ENOSYS;
    return -1;
  }
  if (sig != kSampleSignal || !g_installed.load()) return real(sig, act, old);
  if (old != nullptr) *old = g_programActions[g_programSlot.load(std::memory_order_acquire)];
  if (act != nullptr) {
    setProgramAction(*act);
    if (!g_intercepted.exchange(true)) {
      say("csp: warning: the program installs its own SIGPROF handler; csp keeps SIGPROF for sampling and "
          "passes it the SIGPROF signals that csp's timers did not send\n");
    }
  }
  return 0;
}

extern "C" __attribute__((visibility("default"))) sighandler_t signal(int sig, sighandler_t handler) {
  struct sigaction act, old;
  memset(&act, 0, sizeof act);
  act.sa_handler = handler;
  act.sa_flags = SA_RESTART;  // glibc's signal() has BSD semantics
  sigemptyset(&act.sa_mask);
  if (sigaction(sig, &act, &old) != 0) return SIG_ERR;
  return old.sa_handler;  // shares storage with sa_sigaction, as signal() callers expect
}
