// Test application (c): many short-lived threads, fork, dlopen/dlclose of a working plugin, a
// handler of its own for SIGUSR1 (the measurement must coexist with it), and a detached thread
// that is still running (inside regions) when the process exits.
//   usage: churn PLUGIN.so [threads=64]
//   Threads are created in batches of 4 (one of them with a minimal stack) and joined; every
//   8th ends with pthread_exit. The child process forked halfway does work in
//   churn_child_work and exits normally.
#include <dlfcn.h>
#include <pthread.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <climits>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <stdexcept>

#include "csp/measure/regions.h"
#include "kernel.hpp"

namespace {

std::atomic<int> g_usr1{0};
void onUsr1(int) { g_usr1.fetch_add(1); }

// C++ exceptions and pthread_exit's forced unwinding run through the unwinder of the C++
// runtime while the measurement library (and its libunwind) are loaded: both must still work.
std::atomic<long> g_caught{0}, g_cleanups{0};
struct Cleanup {
  ~Cleanup() { g_cleanups.fetch_add(1); }
};
__attribute__((noinline)) void mayThrow(long i) {
  if (i % 2 == 0) throw std::runtime_error("even");
}

}  // namespace

extern "C" __attribute__((noinline)) double churn_thread_work(double x) { return csp_test::spin(1'500'000, x); }
extern "C" __attribute__((noinline)) double churn_child_work(double x) { return csp_test::spin(40'000'000, x); }

static void* threadMain(void* arg) {
  const long i = reinterpret_cast<long>(arg);
  Cleanup cleanup;
  volatile double x = churn_thread_work(1.0 + static_cast<double>(i));
  (void)x;
  try {
    mayThrow(i);
  } catch (const std::exception&) {
    g_caught.fetch_add(1);
  }
  if (i % 8 == 7) pthread_exit(nullptr);  // must still run ~Cleanup
  return nullptr;
}

// Never returns: the exit handler must write its profile while it runs.
static std::atomic<std::uint64_t> g_spins{0};  // spin regions completed
static void* spinner(void*) {
  double x = 1.0;
  for (std::uint64_t i = 0;; ++i) {
    csp_region_begin("spin", i);
    x = churn_thread_work(x);
    csp_region_end();
    g_spins.fetch_add(1);
  }
  return nullptr;
}

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: churn PLUGIN.so [threads]\n");
    return 2;
  }
  const long threads = argc > 2 ? std::atol(argv[2]) : 64;
  struct sigaction sa = {};
  sa.sa_handler = onUsr1;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGUSR1, &sa, nullptr);

  for (long i = 0; i < threads; i += 4) {
    pthread_t t[4];
    const long n = threads - i < 4 ? threads - i : 4;
    // One thread per batch gets the smallest stack allowed: the profile must still be written.
    pthread_attr_t small;
    pthread_attr_init(&small);
    pthread_attr_setstacksize(&small, PTHREAD_STACK_MIN);
    for (long k = 0; k < n; ++k)
      pthread_create(&t[k], k == 3 ? &small : nullptr, threadMain, reinterpret_cast<void*>(i + k));
    pthread_attr_destroy(&small);
    for (long k = 0; k < n; ++k) pthread_join(t[k], nullptr);
    raise(SIGUSR1);
    if (i == threads / 2) {
      const pid_t child = fork();
      if (child == 0) {
        volatile double x = churn_child_work(2.0);
        (void)x;
        std::exit(0);
      }
      int status = 0;
      waitpid(child, &status, 0);
      if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        std::fprintf(stderr, "churn: child failed\n");
        return 1;
      }
    }
  }

  void* plugin = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
  if (plugin == nullptr) {
    std::fprintf(stderr, "churn: %s\n", dlerror());
    return 1;
  }
  auto work = reinterpret_cast<double (*)(double, int)>(dlsym(plugin, "plugin_work"));
  if (work == nullptr) return 1;
  volatile double y = work(3.0, 60);
  (void)y;
  dlclose(plugin);
  pthread_t spin;
  pthread_create(&spin, nullptr, spinner, nullptr);
  pthread_detach(spin);
  // Some spin regions done before main exits, however loaded the machine (a fixed 100 ms once
  // saw none in a CI run).
  for (int i = 0; i < 60'000 && g_spins.load() < 3; ++i) usleep(1000);
  std::printf("churn: %ld threads, 1 fork, plugin done, %d SIGUSR1 handled, %ld exceptions caught, %ld cleanups\n",
              threads, g_usr1.load(), g_caught.load(), g_cleanups.load());
  const bool ok =
      g_usr1.load() == (threads + 3) / 4 && g_caught.load() == (threads + 1) / 2 && g_cleanups.load() == threads;
  return ok ? 0 : 1;
}
