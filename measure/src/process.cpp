// Process and thread life cycle of the preloaded library: start-up, the pthread_create and
// dlclose interposers, fork, exit, and the MPI wrappers that learn the rank.
#include <dlfcn.h>
#include <fcntl.h>
#include <linux/futex.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <sys/mman.h>
#include <sys/syscall.h>
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

void finalizeOwnThread(ThreadState* t, bool atExit);

// A thread that ends while the process goes on: its profile goes into the process's bundle.
void onThreadKeyDestroyed(void* p) { finalizeOwnThread(static_cast<ThreadState*>(p), false); }

ThreadState* beginThread(std::uint32_t index, bool participates = true) {
  auto* t = new (std::nothrow) ThreadState;
  if (t == nullptr) return nullptr;
  t->index = index;
  t->startNs = realtimeNs();
  t->regions = createRegionState();
  // The sample arena is mapped by the thread's first sample (a short thread may have none).
  giveAltStack(*t);
  {
    TerminationGuard guard;
    std::lock_guard lock(g_registryMutex);
    registry().push_back(t);
  }
  tlsThread = t;
  pthread_setspecific(g_threadKey, t);
  threadCounted(*t, participates);  // n and W (idleness accounting)
  if (!g_config->events.empty()) startTimers(*t);
  return t;
}

// Takes `t` out of the registry; true if the caller now owns its finalization.
bool claim(ThreadState* t) {
  TerminationGuard guard;
  std::lock_guard lock(g_registryMutex);
  auto& r = registry();
  // Short threads end soon after they start: search from the newest.
  for (std::size_t k = r.size(); k-- > 0;) {
    if (r[k] == t) {
      r.erase(r.begin() + static_cast<std::ptrdiff_t>(k));
      return true;
    }
  }
  return false;
}

// Waits for an in-flight sample of `t` to finish, then keeps the handler out for good.
void closeToHandler(ThreadState* t) {
  // The owning thread is never inside its own handler here: Busy means a sample that was
  // abandoned (a jump out of a fault inside the handler).
  const bool own = t == tlsThread;
  for (int spins = 0;; ++spins) {
    int expected = static_cast<int>(Phase::Active);
    if (t->phase.compare_exchange_strong(expected, static_cast<int>(Phase::Closed))) return;
    if (expected == static_cast<int>(Phase::Closed)) return;
    if (own || spins > 100000) {  // a handler that never finishes: write what is there
      if (t->phase.exchange(static_cast<int>(Phase::Closed)) == static_cast<int>(Phase::Busy)) ++t->abandonedSamples;
      return;
    }
    sched_yield();
  }
}

// Profiles being written right now (a termination waits for them before the process dies).
constinit std::atomic<int> g_writing{0};

void finalize(ThreadState* t) {
  g_writing.fetch_add(1);
  stopTimers(*t);
  closeToHandler(t);
  closeRegionState(t->regions);
  t->endNs = realtimeNs();
  writeThreadProfile(*t);
  g_writing.fetch_sub(1);
}

// Writing a profile (Cap'n Proto, file system) needs more stack than a thread created with a
// minimal stack (PTHREAD_STACK_MIN = 16 KiB) has left when it exits, so the exiting thread
// writes on a stack of our own.
constexpr std::size_t kWriterStackBytes = 1u << 20;
thread_local ThreadState* tlsWriting = nullptr;

void finalizeOnPrivateStack() { finalize(tlsWriting); }

__attribute__((noinline)) void finalizeOnStack(ThreadState* t, void* stack) {
  ucontext_t caller, writer;
  if (getcontext(&writer) != 0) {
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
}

// Writer stacks are recycled: mapping and faulting in a fresh one per thread was a good part of
// a short thread's cost.
constinit std::mutex g_writerStackMutex;
std::vector<void*>& writerStacks() {
  static auto* pool = new std::vector<void*>;
  return *pool;
}

void finalizeWithRoomToWrite(ThreadState* t) {
  void* stack = nullptr;
  {
    std::lock_guard lock(g_writerStackMutex);
    if (!writerStacks().empty()) {
      stack = writerStacks().back();
      writerStacks().pop_back();
    }
  }
  if (stack == nullptr) {
    stack = mmap(nullptr, kWriterStackBytes, PROT_READ | PROT_WRITE,
                 MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_STACK, -1, 0);
    if (stack == MAP_FAILED) {
      finalize(t);
      return;
    }
  }
  finalizeOnStack(t, stack);
  std::lock_guard lock(g_writerStackMutex);
  if (writerStacks().size() < 8)
    writerStacks().push_back(stack);
  else
    munmap(stack, kWriterStackBytes);
}

// ---- ended threads: written by a thread of ours ------------------------------------------------
// A thread that ends while the process runs only closes its state and queues it; the profile is
// built and appended to the process's bundle by a writer thread (created at the first end, all
// signals blocked, not measured), so that thread exit stays cheap on the program's critical
// path (pthread_join waits for it). The queue is bounded: past kMaxQueued an ending thread writes
// its own profile. Exit, a termination signal, exec and fork take what is queued first.

constexpr std::size_t kMaxQueued = 1024;
constinit std::mutex g_endedMutex;
constinit std::atomic<int> g_endedSignal{0};         // futex word: bumped on every enqueue
constinit std::atomic<bool> g_writerWaiting{false};  // a wake-up is needed (saves a system call per thread)
constinit bool g_bundleWriterStarted = false;        // under g_endedMutex
constinit bool g_bundleWriterFailed = false;
std::vector<ThreadState*>& endedQueue() {
  static auto* q = new std::vector<ThreadState*>;
  return *q;
}

long futexCall(std::atomic<int>* word, int op, int value) {
  return syscall(SYS_futex, reinterpret_cast<int*>(word), op, value, nullptr, nullptr, 0);
}

// Takes the whole queue. Every queued state still counts in g_writing (from its thread's
// claim) until it is written, so that a termination waiting for writes also waits for these.
std::vector<ThreadState*> takeEnded() {
  TerminationGuard guard;
  std::lock_guard lock(g_endedMutex);
  std::vector<ThreadState*> taken;
  taken.swap(endedQueue());
  return taken;
}

void writeTaken(std::vector<ThreadState*>& taken) {
  writeEndedThreadProfiles(taken);
  for (ThreadState* t : taken) {
    unmapArena(t->cct);
    destroyRegionState(t->regions);
    delete t;
    g_writing.fetch_sub(1);
  }
  taken.clear();
}

void* bundleWriterMain(void*) {
  for (;;) {
    const int seen = g_endedSignal.load();
    auto taken = takeEnded();
    if (taken.empty()) {
      // An enqueue after the take changed g_endedSignal since `seen`, so the wait returns at
      // once; one before it was in the take. Enqueuers wake only a writer that says it waits.
      g_writerWaiting.store(true);
      futexCall(&g_endedSignal, FUTEX_WAIT_PRIVATE, seen);
      g_writerWaiting.store(false);
      // Let a batch gather: one wake-up per batch instead of one per ended thread.
      usleep(2000);
      continue;
    }
    writeTaken(taken);
  }
  return nullptr;
}

// Caller holds g_endedMutex.
void startBundleWriter() {
  g_bundleWriterStarted = true;  // one attempt per process: if it fails, threads write their own
  sigset_t all, saved;
  sigfillset(&all);
  pthread_sigmask(SIG_SETMASK, &all, &saved);
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
  pthread_attr_setstacksize(&attr, 1u << 20);  // building a profile needs room (Cap'n Proto, fmt)
  pthread_t writer;
  if (g_realPthreadCreate != nullptr && g_realPthreadCreate(&writer, &attr, bundleWriterMain, nullptr) == 0)
    pthread_setname_np(writer, "csp-bundle");
  else
    g_bundleWriterStarted = false, g_bundleWriterFailed = true;
  pthread_attr_destroy(&attr);
  pthread_sigmask(SIG_SETMASK, &saved, nullptr);
}

// Queues a closed, unregistered state for the writer thread; false if the caller must write it.
bool enqueueEnded(ThreadState* t) {
  {
    TerminationGuard guard;
    std::lock_guard lock(g_endedMutex);
    if (!g_bundleWriterStarted && !g_bundleWriterFailed) startBundleWriter();
    if (!g_bundleWriterStarted || endedQueue().size() >= kMaxQueued) return false;
    endedQueue().push_back(t);
  }
  g_endedSignal.fetch_add(1);
  if (g_writerWaiting.load()) futexCall(&g_endedSignal, FUTEX_WAKE_PRIVATE, 1);
  return true;
}

}  // namespace

// Writes what is queued now, in the calling thread (exit, termination, exec).
void writeEndedThreadsNow() {
  auto taken = takeEnded();
  writeTaken(taken);
}

namespace {

void finalizeOwnThread(ThreadState* t, bool atExit) {
  if (t == nullptr) return;
  // A termination signal now would wait for this write; blocking it here keeps the writer of a
  // termination from finding this thread half-finished.
  TerminationGuard guard;
  // Counted from before the claim: a termination (handled by another thread) that no longer
  // finds this thread in the registry waits for its profile all the same.
  g_writing.fetch_add(1);
  if (!claim(t)) {
    g_writing.fetch_sub(1);
    return;
  }
  stopTimers(*t);  // before anything slow: samples of csp's own exit work are of no use
  // The thread no longer counts in n and W; its waits and blame not yet charged go to the
  // contexts where it last charged them.
  threadUncounted(*t);
  flushCredit(*t);
  t->toBundle = !atExit;
  if (!atExit) {
    // Close the state here (light work, fine on a small stack) and leave the writing to the
    // writer thread. The thread's own things go first: after the queueing, t is the writer's,
    // and so is the count in g_writing.
    closeToHandler(t);
    closeRegionState(t->regions);
    t->endNs = realtimeNs();
    tlsThread = nullptr;
    takeBackAltStack(*t);
    if (enqueueEnded(t)) return;
    finalizeWithRoomToWrite(t);  // the writer thread is busy enough: write it here
    unmapArena(t->cct);
    destroyRegionState(t->regions);
    delete t;
    g_writing.fetch_sub(1);
    return;
  }
  finalizeWithRoomToWrite(t);
  tlsThread = nullptr;
  takeBackAltStack(*t);
  // The arena goes only now that this thread's handler can no longer see it.
  unmapArena(t->cct);
  destroyRegionState(t->regions);
  delete t;
  g_writing.fetch_sub(1);
}

// Writes every registered thread's profile except the caller's. Other threads may still run
// and take pending signals: their states stay mapped.
void finalizeOthers() {
  for (;;) {
    ThreadState* t = nullptr;
    {
      TerminationGuard guard;
      std::lock_guard lock(g_registryMutex);
      if (registry().empty()) break;
      t = registry().back();
      registry().pop_back();
    }
    finalize(t);
  }
}

void finalizeAll() {
  TerminationGuard guard;  // the process is ending anyway; a signal now would only cut the writes short
  if (ThreadState* self = tlsThread; self != nullptr) stopTimers(*self);
  finalizeOwnThread(tlsThread, true);
  finalizeOthers();
  writeEndedThreadsNow();
  // A profile the writer thread took before is finished before the process ends.
  for (int spins = 0; g_writing.load() != 0 && spins < 20000; ++spins) usleep(100);
}

struct StartInfo {
  void* (*fn)(void*);
  void* arg;
  std::uint32_t index;
  bool participates;  // counts in n (idleness accounting): not a helper thread of MPI_Init
};

void* trampoline(void* p) {
  StartInfo s = *static_cast<StartInfo*>(p);
  std::free(p);
  beginThread(s.index, s.participates);
  // The key destructor writes the profile on return and on pthread_exit alike.
  return s.fn(s.arg);
}

// fork: the child keeps only the forking thread, which starts a fresh profile of its own. No
// handler may be inside libunwind while the address space is copied (the child would inherit
// its lock held by a thread that does not exist there).
void atforkPrepare() {
  pauseSampling();
  g_endedMutex.lock();
  g_registryMutex.lock();
  lockWriterForFork();
}
void atforkParent() {
  unlockWriterAfterFork();
  g_registryMutex.unlock();
  g_endedMutex.unlock();
  resumeSampling();
}
void atforkChild();

void initialize() {
  g_realPthreadCreate = reinterpret_cast<PthreadCreate>(dlsym(RTLD_NEXT, "pthread_create"));
  g_realDlclose = reinterpret_cast<Dlclose>(dlsym(RTLD_NEXT, "dlclose"));
  g_config = new Config(readConfig());
  initClockSkew();
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
  idlenessInit();
  refreshLoadMap();
  pthread_atfork(atforkPrepare, atforkParent, atforkChild);
  installTerminationHandlers();
  g_ready = true;
  beginThread(g_nextThreadIndex.fetch_add(1));
  std::atexit(finalizeAll);
}

void ensureInitialized() { pthread_once(&g_once, initialize); }

__attribute__((constructor)) void onLoad() { ensureInitialized(); }

}  // namespace

bool isDescendantProcess() { return g_descendant; }

void ensureLibraryInitialized() { ensureInitialized(); }

namespace {

void atforkChild() {
  unlockWriterAfterFork();
  g_registryMutex.unlock();
  // Queued states are the parent's to write; the writer thread is not in the child.
  endedQueue().clear();
  g_writing.store(0);  // the parent's writes in flight
  g_bundleWriterStarted = false;
  g_bundleWriterFailed = false;
  g_endedMutex.unlock();
  resumeSampling();
  // Other threads' states are copies of the parent's; their profiles are the parent's to write.
  ThreadState* self = tlsThread;
  for (ThreadState* t : registry()) {
    if (t == self) continue;
    unmapArena(t->cct);
  }
  registry().clear();
  g_descendant = true;
  g_nextThreadIndex.store(0);
  idlenessAfterForkChild();
  if (self == nullptr) return;
  // POSIX timers are not inherited; the arena is, with the parent's samples in it. So is the
  // alternate signal stack, which stays in use.
  unmapArena(self->cct);
  destroyRegionState(self->regions);
  tlsThread = nullptr;
  void* altStack = self->altStack;
  delete self;
  ThreadState* t = beginThread(g_nextThreadIndex.fetch_add(1));
  if (t != nullptr && t->altStack == nullptr) t->altStack = altStack;
  restartTerminationHelper();
}

}  // namespace

void writeAllProfilesNow() {
  finalizeOthers();  // the helper thread itself is not registered
  writeEndedThreadsNow();
  // Threads that are writing their own profile right now finish first.
  for (int spins = 0; g_writing.load() != 0 && spins < 2000; ++spins) usleep(1000);
}

const Config& config() { return *g_config; }

std::uint64_t realtimeNs() {
  timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return static_cast<std::uint64_t>(ts.tv_sec) * 1'000'000'000u + static_cast<std::uint64_t>(ts.tv_nsec);
}

std::uint64_t monotonicNs() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  const std::uint64_t ns =
      static_cast<std::uint64_t>(ts.tv_sec) * 1'000'000'000u + static_cast<std::uint64_t>(ts.tv_nsec);
  return clockSkewed() ? skewedClock(ns) : ns;
}

void reportOnce(const char* key, const std::string& message) {
  static std::mutex m;
  static auto* seen = new std::vector<std::string>;
  TerminationGuard guard;
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
  *s = {fn, arg, g_nextThreadIndex.fetch_add(1), !creatingHelperThreads()};
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
  // The loader may unmap code and unwind tables that a handler on another thread is reading:
  // samples are dropped (and counted) until it is done.
  ++tlsUnsafe;
  pauseSampling();
  const int rc = g_realDlclose(handle);
  resumeSampling();
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
  using CommQuery = int (*)(void*, int*);
  auto commRank = lookup<CommQuery>("PMPI_Comm_rank");
  auto commSize = lookup<CommQuery>("PMPI_Comm_size");
  void* world = dlsym(RTLD_DEFAULT, "ompi_mpi_comm_world");
  int rank = -1, size = -1;
  if (commRank == nullptr || world == nullptr || commRank(world, &rank) != 0 || rank < 0) return;
  if (commSize == nullptr || commSize(world, &size) != 0) size = -1;
  setMpiRank(rank, size);
}

}  // namespace

CSP_EXPORT int MPI_Init(int* argc, char*** argv) {
  using Fn = int (*)(int*, char***);
  static Fn real = lookup<Fn>("PMPI_Init");
  if (real == nullptr) {
    std::fprintf(stderr, "csp: error: MPI_Init called but PMPI_Init is not available\n");
    std::abort();
  }
  // Threads that the MPI library starts now (progress, PMIx, event loops) are its helpers: they
  // do not count in the process's threads for idleness; waits inside are mpi-wait.
  ThreadState* t = tlsThread;
  setCreatingHelperThreads(true);
  if (t != nullptr) ++t->mpiDepth;
  const int rc = real(argc, argv);
  if (t != nullptr && tlsThread == t) --t->mpiDepth;
  setCreatingHelperThreads(false);
  if (rc == 0) learnRank();
  if (rc == 0) clockSyncAtInit();
  return rc;
}

CSP_EXPORT int MPI_Init_thread(int* argc, char*** argv, int required, int* provided) {
  using Fn = int (*)(int*, char***, int, int*);
  static Fn real = lookup<Fn>("PMPI_Init_thread");
  if (real == nullptr) {
    std::fprintf(stderr, "csp: error: MPI_Init_thread called but PMPI_Init_thread is not available\n");
    std::abort();
  }
  ThreadState* t = tlsThread;
  setCreatingHelperThreads(true);
  if (t != nullptr) ++t->mpiDepth;
  const int rc = real(argc, argv, required, provided);
  if (t != nullptr && tlsThread == t) --t->mpiDepth;
  setCreatingHelperThreads(false);
  if (rc == 0) learnRank();
  if (rc == 0) clockSyncAtInit();
  return rc;
}

CSP_EXPORT int MPI_Finalize(void) {
  using Fn = int (*)();
  static Fn real = lookup<Fn>("PMPI_Finalize");
  if (real == nullptr) return 0;
  // The rank outlives MPI: profiles are written at exit and still carry it.
  ThreadState* t = tlsThread;
  clockSyncAtFinalize();
  if (t != nullptr) ++t->mpiDepth;
  const int rc = real();
  if (t != nullptr && tlsThread == t) --t->mpiDepth;
  return rc;
}

// ---- exec ---------------------------------------------------------------------------------
// exec ends the calling thread's timers but, on older kernels, not a timer signal already
// queued for it: the new image, whose handlers are reset to the default action, would be killed
// by it before our library is loaded again. So the calling thread's timers are deleted and its
// pending sampling signals consumed first; if exec fails, sampling resumes.

namespace {

template <class Fn>
Fn nextSymbol(const char* name) {
  return reinterpret_cast<Fn>(dlsym(RTLD_NEXT, name));
}

struct ExecGuard {
  ThreadState* t = tlsThread;
  ExecGuard() {
    // Profiles of threads that ended before are written now: the writer thread ends with the image.
    writeEndedThreadsNow();
    if (t == nullptr || t->timerCount == 0 || samplingSignal() == 0) return;
    sigset_t sampling, saved;
    sigemptyset(&sampling);
    sigaddset(&sampling, samplingSignal());
    pthread_sigmask(SIG_BLOCK, &sampling, &saved);
    stopTimers(*t);
    const timespec now{0, 0};
    while (sigtimedwait(&sampling, nullptr, &now) > 0) {
    }
    pthread_sigmask(SIG_SETMASK, &saved, nullptr);
  }
  ~ExecGuard() {  // exec failed
    if (t != nullptr && t->timerCount > 0 && tlsThread == t) startTimers(*t);
  }
};

std::vector<char*> collectArgs(const char* first, va_list ap) {
  std::vector<char*> args{const_cast<char*>(first)};
  while (args.back() != nullptr) args.push_back(va_arg(ap, char*));
  return args;
}

}  // namespace

CSP_EXPORT int execve(const char* path, char* const argv[], char* const envp[]) {
  using Fn = int (*)(const char*, char* const[], char* const[]);
  static Fn real = nextSymbol<Fn>("execve");
  ExecGuard guard;
  return real(path, argv, envp);
}

CSP_EXPORT int execv(const char* path, char* const argv[]) {
  using Fn = int (*)(const char*, char* const[]);
  static Fn real = nextSymbol<Fn>("execv");
  ExecGuard guard;
  return real(path, argv);
}

CSP_EXPORT int execvp(const char* file, char* const argv[]) {
  using Fn = int (*)(const char*, char* const[]);
  static Fn real = nextSymbol<Fn>("execvp");
  ExecGuard guard;
  return real(file, argv);
}

CSP_EXPORT int execvpe(const char* file, char* const argv[], char* const envp[]) {
  using Fn = int (*)(const char*, char* const[], char* const[]);
  static Fn real = nextSymbol<Fn>("execvpe");
  ExecGuard guard;
  return real(file, argv, envp);
}

CSP_EXPORT int fexecve(int fd, char* const argv[], char* const envp[]) {
  using Fn = int (*)(int, char* const[], char* const[]);
  static Fn real = nextSymbol<Fn>("fexecve");
  ExecGuard guard;
  return real(fd, argv, envp);
}

CSP_EXPORT int execl(const char* path, const char* arg, ...) {
  va_list ap;
  va_start(ap, arg);
  auto args = collectArgs(arg, ap);
  va_end(ap);
  return execv(path, args.data());
}

CSP_EXPORT int execlp(const char* file, const char* arg, ...) {
  va_list ap;
  va_start(ap, arg);
  auto args = collectArgs(arg, ap);
  va_end(ap);
  return execvp(file, args.data());
}

CSP_EXPORT int execle(const char* path, const char* arg, ...) {
  va_list ap;
  va_start(ap, arg);
  auto args = collectArgs(arg, ap);
  char* const* envp = va_arg(ap, char* const*);
  va_end(ap);
  return execve(path, args.data(), envp);
}
