// Test application (e): programs that are hard on an in-process sampler. Each mode reproduces one
// way a program can break the measurement (or be broken by it); the integration tests run them
// under csp-run and check both the program's own result and the profiles.
//   usage: hostile MODE [args...]
//     dlopen-storm PLUGIN SECONDS THREADS  THREADS threads compute while the main thread
//                                         dlopens and dlcloses PLUGIN in a loop and one more
//                                         walks the module list with dl_iterate_phdr (the
//                                         loader's locks are taken all the time); exit 0
//     dlopen-pairs PLUGIN PAIRS THREADS [RESIDENT...]
//                                         PAIRS dlopen/dlclose pairs while THREADS threads compute,
//                                         without the walker, the RESIDENT libraries loaded first
//                                         and kept (the cost of a load-map update:
//                                         tests/bench/measure_overhead.sh); exit 0
//     terminate THREADS [own-handler]      THREADS threads and the main thread compute until the
//                                         process is killed; "ready" on stdout once each has
//                                         computed for 80 ms of its CPU time.
//                                         own-handler: a SIGTERM/SIGINT handler of the program's
//                                         that makes main exit(3)
//   (longjmp, small-stack and itimer run for SECONDS of the thread's CPU time)
//     longjmp SECONDS                      a SIGALRM handler that siglongjmps out, every 50 us,
//                                         while the thread computes; exit 0
//     small-stack SECONDS                  a thread with a 64 KiB stack computes with all but 5 KiB
//                                         of it in use (about 52 KiB); exit 0
//     itimer SECONDS                       a profiler of the program's own: setitimer(ITIMER_PROF)
//                                         and a SIGPROF handler, with SIGPROF blocked during the
//                                         second half; exit 0 if it saw only its own SIGPROFs
//     exec-chain N                         computes briefly and execs itself N times; exit 0
//     chdir DIR                            one thread ends before chdir(DIR), one after; exit 0
//     threads N ITERATIONS                 N short threads, one after the other, each spinning
//                                         ITERATIONS times (the thread-churn benchmark); exit 0
//     immediate-exit _exit|_Exit|quick_exit SECONDS
//                                         two threads compute while main vforks 100 children
//                                         that _exit at once, forks one that computes for 0.1 s
//                                         of its CPU time and calls _exit(0), then computes for
//                                         SECONDS of its CPU time itself and ends the process
//                                         with _exit(5), _Exit(7) or quick_exit(9): no atexit
//                                         handler runs
//     fork-terminate                       forks a child that computes until it is killed; once the
//                                         child has computed for 50 ms of its CPU time, computes
//                                         for 0.3 s of its own, then sends the child SIGTERM;
//                                         exit 0 if the child died of it
#include <dlfcn.h>
#include <link.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "kernel.hpp"

namespace {

double seconds() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

// CPU time of the calling thread: modes whose tests count cpu-time samples run for a span of
// CPU time, so that a loaded machine stretches them instead of thinning their samples.
double cpuSeconds() {
  timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

std::atomic<bool> g_stop{false};

}  // namespace

extern "C" __attribute__((noinline)) double hostile_compute(double x) { return csp_test::spin(200'000, x); }

// ---- dlopen-storm -------------------------------------------------------------------------

// Walks the module list the way unwinders and JITs do: dl_iterate_phdr holds the loader's lock
// for the whole walk, callbacks included.
static int walkModule(dl_phdr_info* info, std::size_t, void* sum) {
  double x = static_cast<double>(info->dlpi_phnum);
  for (int i = 0; i < info->dlpi_phnum; ++i)
    x = csp_test::spin(200, x + static_cast<double>(info->dlpi_phdr[i].p_type));
  *static_cast<double*>(sum) += x;
  return 0;
}

// For `duration` seconds with a thread walking the module list, or `pairs` dlopen/dlclose pairs
// (when that is not 0) without it.
static int dlopenStorm(const char* plugin, double duration, int threads, long pairs = 0) {
  std::vector<std::thread> workers;
  std::atomic<long> units{0};
  if (pairs == 0) {
    workers.emplace_back([] {
      double sum = 0;
      while (!g_stop.load(std::memory_order_relaxed)) dl_iterate_phdr(walkModule, &sum);
      if (sum == 0) std::printf("impossible\n");
    });
  }
  for (int i = 0; i < threads; ++i) {
    workers.emplace_back([&] {
      double x = 1.0;
      while (!g_stop.load(std::memory_order_relaxed)) {
        x = hostile_compute(x);
        units.fetch_add(1, std::memory_order_relaxed);
      }
      if (x == 0) std::printf("impossible\n");
    });
  }
  long loads = 0;
  const double end = seconds() + duration;
  while (pairs > 0 ? loads < pairs : seconds() < end) {
    void* h = dlopen(plugin, RTLD_NOW | RTLD_LOCAL);
    if (h == nullptr) {
      std::fprintf(stderr, "hostile: %s\n", dlerror());
      g_stop = true;
      for (auto& w : workers) w.join();
      return 1;
    }
    auto work = reinterpret_cast<double (*)(double, int)>(dlsym(h, "plugin_work"));
    if (work != nullptr && loads % 16 == 0) {
      volatile double y = work(1.0, 1);
      (void)y;
    }
    dlclose(h);
    ++loads;
  }
  g_stop = true;
  for (auto& w : workers) w.join();
  std::printf("dlopen-storm: %ld loads, %ld compute units\n", loads, units.load());
  return loads > 0 ? 0 : 1;
}

// ---- terminate ----------------------------------------------------------------------------

extern "C" __attribute__((noinline)) double terminate_worker(double x) { return csp_test::spin(100'000, x); }
extern "C" __attribute__((noinline)) double terminate_main(double x) { return csp_test::spin(100'000, x); }

static volatile sig_atomic_t g_terminateSignal = 0;
static void onTerminate(int sig) { g_terminateSignal = sig; }

static int terminate(int threads, bool ownHandler) {
  if (ownHandler) {
    struct sigaction sa = {};
    sa.sa_handler = onTerminate;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGTERM, &sa, nullptr);
    sigaction(SIGINT, &sa, nullptr);
  }
  // "ready" once every thread has computed for 80 ms of its own CPU time, so that the tests'
  // sample counts (cpu-time at 1,000/s) do not depend on how loaded the machine is.
  constexpr double kWarm = 0.08;
  std::atomic<int> warmed{0};
  std::vector<std::thread> workers;
  for (int i = 0; i < threads; ++i) {
    workers.emplace_back([&] {
      double x = 1.0;
      while (cpuSeconds() < kWarm) x = terminate_worker(x);
      warmed.fetch_add(1);
      for (;;) x = terminate_worker(x);
    });
    workers.back().detach();
  }
  {
    double x = 1.0;
    while (cpuSeconds() < kWarm || warmed.load() < threads) x = terminate_main(x);
  }
  std::printf("ready\n");
  std::fflush(stdout);
  double x = 1.0;
  const double end = seconds() + 60;
  while (seconds() < end) {
    x = terminate_main(x);
    if (g_terminateSignal != 0) {
      std::printf("handled signal %d\n", static_cast<int>(g_terminateSignal));
      std::fflush(stdout);
      std::exit(3);
    }
  }
  std::fprintf(stderr, "hostile: terminate was never killed\n");
  return 1;
}

// ---- longjmp ------------------------------------------------------------------------------

static sigjmp_buf g_jump;
static volatile sig_atomic_t g_armed = 0;
static void onAlarm(int) {
  if (g_armed) siglongjmp(g_jump, 1);
}

extern "C" __attribute__((noinline)) double longjmp_work(double x) { return csp_test::spin(50'000, x); }

static int longjmpMode(double duration) {
  struct sigaction sa = {};
  sa.sa_handler = onAlarm;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGALRM, &sa, nullptr);
  itimerval every{{0, 50}, {0, 50}};
  setitimer(ITIMER_REAL, &every, nullptr);
  volatile long jumps = 0;
  volatile double x = 1.0;
  const double end = cpuSeconds() + duration;
  if (sigsetjmp(g_jump, 1) != 0) jumps = jumps + 1;
  g_armed = 1;
  while (cpuSeconds() < end) x = longjmp_work(x);
  g_armed = 0;
  itimerval off{};
  setitimer(ITIMER_REAL, &off, nullptr);
  std::printf("longjmp: %ld jumps out of the SIGALRM handler\n", static_cast<long>(jumps));
  return jumps > 0 ? 0 : 1;
}

// ---- small-stack --------------------------------------------------------------------------

extern "C" __attribute__((noinline)) double small_stack_work(double x) { return csp_test::spin(100'000, x); }

// Keeps all but `headroom` bytes of the thread's stack in use while the work runs in a callee.
extern "C" __attribute__((noinline)) double small_stack_frame(double duration, std::size_t bytes) {
  volatile char* used = static_cast<volatile char*>(__builtin_alloca(bytes));
  for (std::size_t i = bytes; i >= 64; i -= 64) used[i - 64] = static_cast<char>(i);  // from the top down
  double x = 1.0;
  const double end = cpuSeconds() + duration;
  while (cpuSeconds() < end) x = small_stack_work(x) + used[x > 2 ? 64 : 128];
  return x;
}

static double g_smallStackSeconds = 0;
static void* smallStackThread(void*) {
  static double result;
  pthread_attr_t attr;
  void* low = nullptr;
  std::size_t size = 0;
  pthread_getattr_np(pthread_self(), &attr);
  pthread_attr_getstack(&attr, &low, &size);
  pthread_attr_destroy(&attr);
  char here;
  const std::size_t free = static_cast<std::size_t>(&here - static_cast<char*>(low));
  // 5 KiB stay free: plenty for the program (a few small frames and the vDSO clock), too little
  // for a sampler's handler on this stack (the kernel's signal frame alone is 3-10 KiB).
  const std::size_t headroom = 5 * 1024;
  std::printf("small-stack: %zu of %zu KiB in use\n", (size - headroom) / 1024, size / 1024);
  result = small_stack_frame(g_smallStackSeconds, free - headroom);
  return &result;
}

static int smallStack(double duration) {
  g_smallStackSeconds = duration;
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  if (pthread_attr_setstacksize(&attr, 64 * 1024) != 0) return 1;
  pthread_t t;
  if (pthread_create(&t, &attr, smallStackThread, nullptr) != 0) return 1;
  void* r = nullptr;
  pthread_join(t, &r);
  std::printf("small-stack: done (%g)\n", *static_cast<double*>(r));
  return 0;
}

// ---- itimer -------------------------------------------------------------------------------

static std::atomic<long> g_ownProf{0}, g_foreignProf{0};
static void onProf(int, siginfo_t* info, void*) {
  // setitimer's signals come from the kernel; anything else is not ours.
  if (info->si_code == SI_KERNEL)
    g_ownProf.fetch_add(1, std::memory_order_relaxed);
  else
    g_foreignProf.fetch_add(1, std::memory_order_relaxed);
}

extern "C" __attribute__((noinline)) double itimer_work(double x) { return csp_test::spin(100'000, x); }
extern "C" __attribute__((noinline)) double itimer_blocked_work(double x) { return csp_test::spin(100'000, x); }

static int itimerMode(double duration) {
  struct sigaction sa = {};
  sa.sa_sigaction = onProf;
  sa.sa_flags = SA_SIGINFO | SA_RESTART;
  sigemptyset(&sa.sa_mask);
  if (sigaction(SIGPROF, &sa, nullptr) != 0) return 1;
  itimerval every{{0, 1000}, {0, 1000}};
  setitimer(ITIMER_PROF, &every, nullptr);
  double x = 1.0;
  double end = cpuSeconds() + duration / 2;
  while (cpuSeconds() < end) x = itimer_work(x);
  // A profiler keeps its own signal out of a critical section: that must not stop csp's sampling.
  sigset_t prof;
  sigemptyset(&prof);
  sigaddset(&prof, SIGPROF);
  pthread_sigmask(SIG_BLOCK, &prof, nullptr);
  end = cpuSeconds() + duration / 2;
  while (cpuSeconds() < end) x = itimer_blocked_work(x);
  itimerval off{};
  setitimer(ITIMER_PROF, &off, nullptr);
  pthread_sigmask(SIG_UNBLOCK, &prof, nullptr);  // the one pending SIGPROF is delivered here
  struct sigaction now = {};
  sigaction(SIGPROF, nullptr, &now);
  const bool stillOurs = (now.sa_flags & SA_SIGINFO) != 0 && now.sa_sigaction == onProf;
  std::printf("itimer: %ld own SIGPROF, %ld foreign, handler %s (%g)\n", g_ownProf.load(), g_foreignProf.load(),
              stillOurs ? "kept" : "changed", x);
  return g_ownProf.load() > 0 && g_foreignProf.load() == 0 && stillOurs ? 0 : 1;
}

// ---- exec-chain ---------------------------------------------------------------------------

static int execChain(const char* self, int n) {
  volatile double x = hostile_compute(1.0);
  (void)x;
  if (n <= 0) {
    std::printf("exec-chain: done\n");
    return 0;
  }
  const std::string next = std::to_string(n - 1);
  execl(self, self, "exec-chain", next.c_str(), static_cast<char*>(nullptr));
  std::perror("hostile: execl");
  return 1;
}

// ---- chdir --------------------------------------------------------------------------------

static int chdirMode(const char* dir) {
  std::thread before([] {
    volatile double x = hostile_compute(1.0);
    (void)x;
  });
  before.join();
  if (chdir(dir) != 0) {
    std::perror("hostile: chdir");
    return 1;
  }
  std::thread after([] {
    volatile double x = hostile_compute(2.0);
    (void)x;
  });
  after.join();
  std::printf("chdir: done\n");
  return 0;
}

// ---- threads ------------------------------------------------------------------------------

extern "C" __attribute__((noinline)) double churn_short_work(double x, long iterations) {
  for (long i = 0; i < iterations; ++i) {
    x = x * 1.0000001 + 1e-9;
    asm volatile("" : "+x"(x));
  }
  return x;
}

static int threadChurn(long n, long iterations) {
  double sum = 0;
  for (long i = 0; i < n; ++i) {
    double r = 0;
    std::thread t([&] { r = churn_short_work(1.0, iterations); });
    t.join();
    sum += r;
  }
  std::printf("threads: %ld threads, checksum %.6g\n", n, sum);
  return 0;
}

// ---- immediate-exit -----------------------------------------------------------------------

extern "C" __attribute__((noinline)) double exit_worker(double x) { return csp_test::spin(100'000, x); }
// Compute until the thread has used `seconds` of CPU time: the clock's system calls are made
// from inside, so that every sample of the work has the function on its call path.
extern "C" __attribute__((noinline)) double exit_main(double seconds) {
  double x = 1.0;
  while (cpuSeconds() < seconds) x = csp_test::spin(100'000, x);
  return x;
}
extern "C" __attribute__((noinline)) double exit_child_work(double seconds) {
  double x = 1.0;
  while (cpuSeconds() < seconds) x = csp_test::spin(100'000, x);
  return x;
}

static int immediateExit(const std::string& how, double cpu) {
  for (int i = 0; i < 2; ++i) {
    std::thread([] {
      double x = 1.0;
      for (;;) x = exit_worker(x);
    }).detach();
  }
  // vfork children share the parent's memory until they _exit: that _exit is not the parent's.
  for (int i = 0; i < 100; ++i) {
    const pid_t child = vfork();
    if (child == 0) _exit(0);
    if (child < 0 || waitpid(child, nullptr, 0) != child) return 1;
  }
  const pid_t child = fork();
  if (child == 0) {
    const double x = exit_child_work(0.1);
    _exit(x == 0 ? 1 : 0);
  }
  int status = 0;
  if (child < 0 || waitpid(child, &status, 0) != child || !WIFEXITED(status) || WEXITSTATUS(status) != 0) return 1;
  if (exit_main(cpu) == 0) std::printf("impossible\n");
  if (how == "_Exit") _Exit(7);
  if (how == "quick_exit") quick_exit(9);
  _exit(5);
}

// The fork child's whole life: it says so once it has computed for 50 ms of its CPU time,
// however loaded the machine, and computes until it is ended.
extern "C" __attribute__((noinline)) void forked_child_work(int ready) {
  double x = 1.0;
  while (cpuSeconds() < 0.05) x = csp_test::spin(100'000, x);
  if (write(ready, "r", 1) != 1) _exit(1);
  for (;;) x = csp_test::spin(100'000, x);
}

static int forkTerminate() {
  int ready[2];
  if (pipe(ready) != 0) return 1;
  const pid_t child = fork();
  if (child == 0) forked_child_work(ready[1]);
  if (child < 0) return 1;
  char byte = 0;
  if (read(ready[0], &byte, 1) != 1) return 1;
  const double x = exit_main(0.3);
  kill(child, SIGTERM);
  int status = 0;
  if (waitpid(child, &status, 0) != child) return 1;
  return WIFSIGNALED(status) && WTERMSIG(status) == SIGTERM && x != 0 ? 0 : 1;
}

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "";
  if (mode == "dlopen-storm" && argc == 5) return dlopenStorm(argv[2], std::atof(argv[3]), std::atoi(argv[4]));
  if (mode == "dlopen-pairs" && argc >= 5) {
    for (int i = 5; i < argc; ++i) {  // kept loaded: a load map as large as an MPI program's
      if (dlopen(argv[i], RTLD_NOW | RTLD_LOCAL) == nullptr) {
        std::fprintf(stderr, "hostile: %s\n", dlerror());
        return 1;
      }
    }
    return dlopenStorm(argv[2], 0, std::atoi(argv[4]), std::atol(argv[3]));
  }
  if (mode == "terminate" && (argc == 3 || argc == 4))
    return terminate(std::atoi(argv[2]), argc == 4 && std::strcmp(argv[3], "own-handler") == 0);
  if (mode == "longjmp" && argc == 3) return longjmpMode(std::atof(argv[2]));
  if (mode == "small-stack" && argc == 3) return smallStack(std::atof(argv[2]));
  if (mode == "itimer" && argc == 3) return itimerMode(std::atof(argv[2]));
  if (mode == "exec-chain" && argc == 3) return execChain(argv[0], std::atoi(argv[2]));
  if (mode == "chdir" && argc == 3) return chdirMode(argv[2]);
  if (mode == "threads" && argc == 4) return threadChurn(std::atol(argv[2]), std::atol(argv[3]));
  if (mode == "immediate-exit" && argc == 4) return immediateExit(argv[2], std::atof(argv[3]));
  if (mode == "fork-terminate" && argc == 2) return forkTerminate();
  std::fprintf(stderr, "usage: hostile MODE [args...] (see tests/apps/hostile.cpp)\n");
  return 2;
}
