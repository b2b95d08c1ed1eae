// A program whose own signal handler leaves by siglongjmp, fired often (2 kHz timer) while the
// program computes for a while. Under csp-run no sample handler may be cut short by it: sampling
// must go on to the end and the profile must be written.
//   usage: longjmp [seconds=1]
#include <setjmp.h>
#include <signal.h>
#include <time.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>

#include "kernel.hpp"

namespace {

sigjmp_buf g_back;
volatile sig_atomic_t g_jumps = 0;

void onUsr1(int) {
  g_jumps = g_jumps + 1;
  siglongjmp(g_back, 1);
}

}  // namespace

extern "C" __attribute__((noinline)) double longjmp_work(double x) { return csp_test::spin(50'000, x); }

int main(int argc, char** argv) {
  const double seconds = argc > 1 ? std::atof(argv[1]) : 1.0;
  struct sigaction sa {};
  sa.sa_handler = onUsr1;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGUSR1, &sa, nullptr);
  timer_t timer;
  struct sigevent sev {};
  sev.sigev_notify = SIGEV_SIGNAL;
  sev.sigev_signo = SIGUSR1;
  timer_create(CLOCK_MONOTONIC, &sev, &timer);
  struct itimerspec its {};
  its.it_interval.tv_nsec = 500'000;
  its.it_value.tv_nsec = 500'000;
  timer_settime(timer, 0, &its, nullptr);
  const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  volatile double x = 1.0;
  sigsetjmp(g_back, 1);
  while (std::chrono::steady_clock::now() < end) x = longjmp_work(x);
  its = {};
  timer_settime(timer, 0, &its, nullptr);
  std::printf("longjmp: %d jumps\n", static_cast<int>(g_jumps));
  return 0;
}
