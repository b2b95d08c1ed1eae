// Process and thread life cycle of the preloaded library: start-up, the pthread_create and
// dlclose interposers, fork, exit, and the MPI wrappers that learn the rank.
#include <dlfcn.h>
#include <fcntl.h>
#include <signal.h>
#include <pthread.h>
#include <sys/mman.h>
#include <ucontext.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <vector>

#include "runtime.hpp"

#define CSP_EXPORT extern "C" __attribute__((visibility("default")))

namespace csp::measure {

namespace {

using PthreadCreate = int (*)(pthread_t*, const pthread_attr_t*, void* (*)(void*), void*);
using Dlclose = int (*)(void*);

// Every global here is constant-initialized: the constructor below may run before this
// file's dynamic initializers, and pthread_create may be called even earlier by another
// library's constructor.
constinit Config* g_config = nullptr;
constinit bool g_ready = false;  // initialization succeeded: threads can be measured
constinit pthread_once_t g_once = PTHREAD_ONCE_INIT;
pthread_key_t g_threadKey;
constinit PthreadCreate g_realPthreadCreate = nullptr;
constinit Dlclose g_realDlclose = nullptr;
constinit std::atomic<std::uint32_t> g_nextThreadIndex{0};
constinit bool g_descendant = false;  // see isDescendantProcess()

// Threads whose profile is not written yet. Touched at thread start and end only.
// Leaked on purpose (as are all containers of this library): exit handlers registered after
// ours would otherwise destroy them before finalizeAll() runs.
constinit std::mutex g_registryMutex;
std::vector<ThreadState*>& registry() {
  static auto* r = new std::vector<ThreadState*>;
  return *r;
}

void finalizeOwnThread(ThreadState* t);

void onThreadKeyDestroyed(void* p) { finalizeOwnThread(static_cast<ThreadState*>(p)); }

// An alternate signal stack for this thread, unless it has one (the program's, or inherited
// across fork): the sampling handler then never runs on the program's own stack, which a thread
// may have nearly used up. A guard page below catches an overflow of the handler itself.
constexpr std::size_t kAltStackBytes = 64 * 1024;

void installAltStack(ThreadState& t) {
  stack_t current {};
  if (::sigaltstack(nullptr, &current) != 0 || !(current.ss_flags & SS_DISABLE)) return;
  const std::size_t page = static_cast<std::size_t>(::sysconf(_SC_PAGESIZE));
  void* m = ::mmap(nullptr, kAltStackBytes + page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_STACK, -1, 0);
  if (m == MAP_FAILED) return;
  ::mprotect(m, page, PROT_NONE);
  stack_t ss {};
  ss.ss_sp = static_cast<char*>(m) + page;
  ss.ss_size = kAltStackBytes;
  if (::sigaltstack(&ss, nullptr) != 0) {
    ::munmap(m, kAltStackBytes + page);
    return;
  }
  t.altStack = m;
  t.altStackBytes = kAltStackBytes + page;
}

// On the owning thread only, once its handler can no longer run.
void removeAltStack(ThreadState& t) {
  if (t.altStack == nullptr) return;
  stack_t off {};
  off.ss_flags = SS_DISABLE;
  ::sigaltstack(&off, nullptr);
  ::munmap(t.altStack, t.altStackBytes);
  t.altStack = nullptr;
}

ThreadState* beginThread(std::uint32_t index) {
  auto* t = new (std::nothrow) ThreadState;
  if (t == nullptr) return nullptr;
  installAltStack(*t);
  t->index = index;
  t->startNs = realtimeNs();
  t->regions = createRegionState();
  if (!mapArena(t->cct, g_config->maxNodes, g_config->maxDepth)) {
    reportOnce("mmap", "csp: warning: cannot map a sample arena; a thread is not measured\n");
    destroyRegionState(t->regions);
    removeAltStack(*t);
    delete t;
    return nullptr;
  }
  {
    std::lock_guard lock(g_registryMutex);
    registry().push_back(t);
  }
  tlsThread = t;
  pthread_setspecific(g_threadKey, t);
  if (!g_config->events.empty()) startTimers(*t);
  return t;
}

// Takes `t` out of the registry; true if the caller now owns its finalization.
bool claim(ThreadState* t) {
  std::lock_guard lock(g_registryMutex);
  for (auto it = registry().begin(); it != registry().end(); ++it) {
    if (*it == t) {
      registry().erase(it);
      return true;
    }
  }
  return false;
}

// Waits for an in-flight sample of `t` to finish, then keeps the handler out for good.
void closeToHandler(ThreadState* t) {
  for (int spins = 0;; ++spins) {
    int expected = static_cast<int>(Phase::Active);
    if (t->phase.compare_exchange_strong(expected, static_cast<int>(Phase::Closed))) return;
    if (expected == static_cast<int>(Phase::Closed)) return;
    if (spins > 100000) return;  // a handler that never finishes: write what is there
    sched_yield();
  }
}

void finalize(ThreadState* t) {
  stopTimers(*t);
  closeToHandler(t);
  closeRegionState(t->regions);
  t->endNs = realtimeNs();
  writeThreadProfile(*t);
}

// Writing a profile (Cap'n Proto, file system) needs more stack than a thread created with a
// minimal stack (PTHREAD_STACK_MIN = 16 KiB) has left when it exits, so the exiting thread
// writes on a stack of our own.
constexpr std::size_t kWriterStackBytes = 1u << 20;
thread_local ThreadState* tlsWriting = nullptr;

void finalizeOnPrivateStack() { finalize(tlsWriting); }

void finalizeWithRoomToWrite(ThreadState* t) {
  void* stack = mmap(nullptr, kWriterStackBytes, PROT_READ | PROT_WRITE,
                     MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_STACK, -1, 0);
  ucontext_t caller, writer;
  if (stack == MAP_FAILED || getcontext(&writer) != 0) {
    if (stack != MAP_FAILED) munmap(stack, kWriterStackBytes);
    finalize(t);
    return;
  }
  writer.uc_stack.ss_sp = stack;
  writer.uc_stack.ss_size = kWriterStackBytes;
  writer.uc_link = &caller;  // return here when the writer function ends
  tlsWriting = t;
  makecontext(&writer, finalizeOnPrivateStack, 0);
  if (swapcontext(&caller, &writer) != 0) finalize(t);
  tlsWriting = nullptr;
  munmap(stack, kWriterStackBytes);
}

void finalizeOwnThread(ThreadState* t) {
  if (t == nullptr || !claim(t)) return;
  finalizeWithRoomToWrite(t);
  tlsThread = nullptr;
  // The arena goes only now that this thread's handler can no longer see it.
  unmapArena(t->cct);
  removeAltStack(*t);
  destroyRegionState(t->regions);
  delete t;
}

// At exit, other threads may still run and take pending signals: their states stay mapped.
void finalizeAll() {
  ThreadState* self = tlsThread;
  finalizeOwnThread(self);
  for (;;) {
    ThreadState* t = nullptr;
    {
      std::lock_guard lock(g_registryMutex);
      if (registry().empty()) break;
      t = registry().back();
      registry().pop_back();
    }
    finalize(t);
  }
}

// --- Termination signals --------------------------------------------------------------------
// SIGTERM (a batch system's time limit, `kill`, mpirun forwarding), SIGINT, SIGHUP and SIGXCPU
// would end the program without exit handlers, losing every profile. Where their disposition is
// the default, the handler only wakes a finisher thread (one write to a pipe: async-signal-safe;
// the interrupted code may hold any lock, so nothing else happens in the handler). The finisher
// writes every thread's profile, restores the default action and sends the signal again, so the
// program still ends by that signal. A program that installs its own handler keeps it (its exit
// path writes the profiles as usual). A forked child without exec has no finisher: there the
// handler ends the child by the signal at once (docs/measurement.md).
constexpr int kTerminationSignals[] = {SIGTERM, SIGINT, SIGHUP, SIGXCPU};
constinit std::atomic<int> g_terminationSignal{0};
constinit int g_terminationPipe[2] = {-1, -1};
constinit pid_t g_terminationOwner = 0;  // the process whose finisher reads the pipe

void finalizeAll();

void onTerminationSignal(int sig) {
  const int saved = errno;
  if (g_terminationOwner == getpid()) {
    int expected = 0;
    if (g_terminationSignal.compare_exchange_strong(expected, sig)) {
      const char byte = 1;
      [[maybe_unused]] const ssize_t n = ::write(g_terminationPipe[1], &byte, 1);
    }
  } else {
    ::signal(sig, SIG_DFL);
    ::raise(sig);
  }
  errno = saved;
}

void* terminationFinisher(void*) {
  char byte = 0;
  while (::read(g_terminationPipe[0], &byte, 1) < 0 && errno == EINTR) {
  }
  const int sig = g_terminationSignal.load();
  if (sig == 0) return nullptr;
  std::size_t threads = 0;
  {
    std::lock_guard lock(g_registryMutex);
    threads = registry().size();
  }
  say(std::string("csp: ") + strsignal(sig) + ": writing the profiles of " + std::to_string(threads) +
      " thread(s), then ending with the signal (pid " + std::to_string(getpid()) + ")\n");
  finalizeAll();
  struct sigaction dfl {};
  dfl.sa_handler = SIG_DFL;
  sigemptyset(&dfl.sa_mask);
  ::sigaction(sig, &dfl, nullptr);
  sigset_t only;
  sigemptyset(&only);
  sigaddset(&only, sig);
  pthread_sigmask(SIG_UNBLOCK, &only, nullptr);
  ::kill(getpid(), sig);
  for (;;) ::pause();  // the signal ends the process
}

void installTerminationHandlers() {
  std::vector<int> defaults;
  for (int sig : kTerminationSignals) {
    struct sigaction current {};
    if (::sigaction(sig, nullptr, &current) == 0 && !(current.sa_flags & SA_SIGINFO) && current.sa_handler == SIG_DFL)
      defaults.push_back(sig);
  }
  if (defaults.empty() || ::pipe2(g_terminationPipe, O_CLOEXEC) != 0) return;
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
  pthread_t finisher;
  const int rc = g_realPthreadCreate(&finisher, &attr, terminationFinisher, nullptr);
  pthread_attr_destroy(&attr);
  if (rc != 0) {
    ::close(g_terminationPipe[0]);
    ::close(g_terminationPipe[1]);
    g_terminationPipe[0] = g_terminationPipe[1] = -1;
    return;
  }
  pthread_setname_np(finisher, "csp-finisher");
  g_terminationOwner = getpid();
  struct sigaction act {};
  act.sa_handler = onTerminationSignal;
  sigemptyset(&act.sa_mask);
  for (int sig : kTerminationSignals) sigaddset(&act.sa_mask, sig);
  act.sa_flags = SA_RESTART;
  for (int sig : defaults) ::sigaction(sig, &act, nullptr);
}

struct StartInfo {
  void* (*fn)(void*);
  void* arg;
  std::uint32_t index;
};

void* trampoline(void* p) {
  StartInfo s = *static_cast<StartInfo*>(p);
  std::free(p);
  beginThread(s.index);
  // The key destructor writes the profile on return and on pthread_exit alike.
  return s.fn(s.arg);
}

// fork: the child keeps only the forking thread, which starts a fresh profile of its own.
void atforkPrepare() { g_registryMutex.lock(); }
void atforkParent() { g_registryMutex.unlock(); }
void atforkChild();

void initialize() {
  g_realPthreadCreate = reinterpret_cast<PthreadCreate>(dlsym(RTLD_NEXT, "pthread_create"));
  g_realDlclose = reinterpret_cast<Dlclose>(dlsym(RTLD_NEXT, "dlclose"));
  g_config = new Config(readConfig());
  // The first measured process of a lineage leaves its pid in the environment; a process that
  // finds another pid there was started (fork + exec) by a measured one. Under mpirun each rank
  // is a first process: the launcher's daemons are not measured.
  const std::string self = std::to_string(getpid());
  if (const char* root = std::getenv("CSP_ROOT_PID"); root != nullptr && *root != '\0')
    g_descendant = self != root;
  else
    setenv("CSP_ROOT_PID", self.c_str(), 1);
  if (pthread_key_create(&g_threadKey, onThreadKeyDestroyed) != 0) return;
  if (!installSampler()) g_config->events.clear();  // regions still work
  refreshLoadMap();
  pthread_atfork(atforkPrepare, atforkParent, atforkChild);
  g_ready = true;
  beginThread(g_nextThreadIndex.fetch_add(1));
  std::atexit(finalizeAll);
  installTerminationHandlers();
}

void ensureInitialized() { pthread_once(&g_once, initialize); }

__attribute__((constructor)) void onLoad() { ensureInitialized(); }

}  // namespace

bool isDescendantProcess() { return g_descendant; }

namespace {

void atforkChild() {
  g_registryMutex.unlock();
  // Other threads' states are copies of the parent's; their profiles are the parent's to write.
  ThreadState* self = tlsThread;
  for (ThreadState* t : registry()) {
    if (t == self) continue;
    unmapArena(t->cct);
  }
  registry().clear();
  g_descendant = true;
  g_nextThreadIndex.store(0);
  if (self == nullptr) return;
  // POSIX timers are not inherited; the arena is, with the parent's samples in it.
  unmapArena(self->cct);
  destroyRegionState(self->regions);
  tlsThread = nullptr;
  delete self;
  beginThread(g_nextThreadIndex.fetch_add(1));
}

}  // namespace

const Config& config() { return *g_config; }

std::uint64_t realtimeNs() {
  timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return static_cast<std::uint64_t>(ts.tv_sec) * 1'000'000'000u + static_cast<std::uint64_t>(ts.tv_nsec);
}

std::uint64_t monotonicNs() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<std::uint64_t>(ts.tv_sec) * 1'000'000'000u + static_cast<std::uint64_t>(ts.tv_nsec);
}

void reportOnce(const char* key, const std::string& message) {
  static std::mutex m;
  static auto* seen = new std::vector<std::string>;
  std::lock_guard lock(m);
  for (const auto& s : *seen)
    if (s == key) return;
  seen->emplace_back(key);
  say(message);
}

void say(const std::string& message) noexcept {
  const char* p = message.data();
  std::size_t left = message.size();
  while (left > 0) {
    const ssize_t n = ::write(2, p, left);
    if (n <= 0) return;
    p += n;
    left -= static_cast<std::size_t>(n);
  }
}

}  // namespace csp::measure

using namespace csp::measure;

CSP_EXPORT int pthread_create(pthread_t* thread, const pthread_attr_t* attr, void* (*fn)(void*), void* arg) {
  ensureInitialized();
  if (g_realPthreadCreate == nullptr) return EAGAIN;  // dlsym failed: nothing sane to forward to
  if (!g_ready) return g_realPthreadCreate(thread, attr, fn, arg);
  auto* s = static_cast<StartInfo*>(std::malloc(sizeof(StartInfo)));
  if (s == nullptr) return g_realPthreadCreate(thread, attr, fn, arg);
  *s = {fn, arg, g_nextThreadIndex.fetch_add(1)};
  const int rc = g_realPthreadCreate(thread, attr, trampoline, s);
  if (rc != 0) std::free(s);
  return rc;
}

// dlopen is deliberately not interposed: glibc resolves a relative name against the RUNPATH
// of the *calling* object, and a wrapper would become that caller. Capturing the load map
// before every dlclose and at write time covers every module that could have been sampled.
CSP_EXPORT int dlclose(void* handle) {
  ensureInitialized();
  if (g_ready) refreshLoadMap();
  if (g_realDlclose == nullptr) return -1;
  ++tlsUnsafe;  // the loader's module list is in flux: no unwinding meanwhile
  const int rc = g_realDlclose(handle);
  --tlsUnsafe;
  return rc;
}

// ---- MPI ----------------------------------------------------------------------------------
// Defined here so that an MPI program calls them first; the real work is done by the PMPI
// entry points looked up at run time, so non-MPI programs never need an MPI library.

namespace {

template <class Fn>
Fn lookup(const char* name) {
  void* p = dlsym(RTLD_NEXT, name);
  if (p == nullptr) p = dlsym(RTLD_DEFAULT, name);
  return reinterpret_cast<Fn>(p);
}

void learnRank() {
  // MPI_Comm is an ABI detail: Open MPI passes MPI_COMM_WORLD as &ompi_mpi_comm_world. With
  // other MPIs the launcher's rank variables (read at write time) supply the rank.
  using CommRank = int (*)(void*, int*);
  auto commRank = lookup<CommRank>("PMPI_Comm_rank");
  void* world = dlsym(RTLD_DEFAULT, "ompi_mpi_comm_world");
  int rank = -1;
  if (commRank != nullptr && world != nullptr && commRank(world, &rank) == 0 && rank >= 0) setMpiRank(rank);
}

}  // namespace

CSP_EXPORT int MPI_Init(int* argc, char*** argv) {
  using Fn = int (*)(int*, char***);
  static Fn real = lookup<Fn>("PMPI_Init");
  if (real == nullptr) {
    std::fprintf(stderr, "csp: error: MPI_Init called but PMPI_Init is not available\n");
    std::abort();
  }
  const int rc = real(argc, argv);
  if (rc == 0) learnRank();
  return rc;
}

CSP_EXPORT int MPI_Init_thread(int* argc, char*** argv, int required, int* provided) {
  using Fn = int (*)(int*, char***, int, int*);
  static Fn real = lookup<Fn>("PMPI_Init_thread");
  if (real == nullptr) {
    std::fprintf(stderr, "csp: error: MPI_Init_thread called but PMPI_Init_thread is not available\n");
    std::abort();
  }
  const int rc = real(argc, argv, required, provided);
  if (rc == 0) learnRank();
  return rc;
}

CSP_EXPORT int MPI_Finalize(void) {
  using Fn = int (*)();
  static Fn real = lookup<Fn>("PMPI_Finalize");
  if (real == nullptr) return 0;
  // The rank outlives MPI: profiles are written at exit and still carry it.
  return real();
}
