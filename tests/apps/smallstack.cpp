// A thread with a 64 KiB stack that uses about 52 KiB of it while it computes: fine on its own,
// and must stay fine when sampled (the sampling handler must not run on what is left).
//   usage: smallstack [seconds=1]
#include <pthread.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "kernel.hpp"

namespace {

double g_seconds = 1.0;

extern "C" __attribute__((noinline)) double smallstack_deep(int level, double x) {
  volatile char frame[6 * 1024];  // 9 levels: ~55 KiB with the frames' own overhead
  std::memset(const_cast<char*>(frame), level, sizeof frame);
  if (level > 0) return smallstack_deep(level - 1, x + frame[level]);
  const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(g_seconds);
  while (std::chrono::steady_clock::now() < end) x = csp_test::spin(200'000, x);
  return x + frame[0];
}

void* worker(void*) {
  static double result;
  result = smallstack_deep(8, 1.0);
  return &result;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc > 1) g_seconds = std::atof(argv[1]);
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  pthread_attr_setstacksize(&attr, 64 * 1024);
  pthread_t t;
  if (pthread_create(&t, &attr, worker, nullptr) != 0) return 2;
  void* r = nullptr;
  pthread_join(t, &r);
  std::printf("smallstack: %.3g\n", *static_cast<double*>(r));
  return 0;
}
