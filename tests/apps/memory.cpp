// Routines of known cost functions and input sources for csp-run --memory
// (tests/measure/memory_profile_test.cpp, docs/memory-profiles.md).
//   costs                 linear, n log n and quadratic routines over inputs of many sizes
//   producer N            Fig. 2 of Coppa et al.: a consumer thread reads one cell that a producer
//                         thread rewrites N times (synchronised by pipes, which carry no data it reads)
//   external N            Fig. 3: a routine reads one of the two cells of a buffer that read()
//                         refills N times from /dev/zero
// In both patterns the routine's only input is the paper's cell: the pipes' file descriptors are
// arguments (registers), each thread's pipe byte is its own, and the system calls are made
// directly (raw_read/raw_write), not through the C library, whose wrappers read cells of their
// own (the PLT's GOT slot, the thread descriptor's cancellation state, under contention a lock
// word the other thread wrote) that would be the routine's input too under csp-mem. So the test
// can assert the paper's RMS = 1 and TRMS = N exactly.
//   overhead N            the quadratic routine on N ints, 4 times (tests/bench/memory_overhead.sh)
// Every routine keeps its name (noinline, C linkage) so the test finds it.
#include <fcntl.h>
#include <pthread.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

extern "C" {

volatile long g_sink;

__attribute__((noinline)) long linear_sum(const int* a, int n) {
  long s = 0;
  for (int i = 0; i < n; ++i) s += a[i];
  return s;
}

__attribute__((noinline)) long quadratic_pairs(const int* a, int n) {
  long s = 0;
  for (int i = 0; i < n; ++i)
    for (int j = 0; j < n; ++j) s += a[i] < a[j];
  return s;
}

// Heapsort of a copy of a[0..n): n log n comparisons whatever the order, no recursion.
__attribute__((noinline)) void sift_down(int* h, int root, int n) {
  for (;;) {
    int child = 2 * root + 1;
    if (child >= n) return;
    if (child + 1 < n && h[child + 1] > h[child]) ++child;
    if (h[root] >= h[child]) return;
    const int t = h[root];
    h[root] = h[child];
    h[child] = t;
    root = child;
  }
}

__attribute__((noinline)) long nlogn_sort(const int* a, int* work, int n) {
  for (int i = 0; i < n; ++i) work[i] = a[i];
  for (int i = n / 2 - 1; i >= 0; --i) sift_down(work, i, n);
  for (int end = n - 1; end > 0; --end) {
    const int t = work[0];
    work[0] = work[end];
    work[end] = t;
    sift_down(work, 0, end);
  }
  return work[n / 2];
}

// read(2) and write(2) without the C library (see the header); elsewhere its wrappers.
long raw_read(int fd, void* buffer, unsigned long bytes) {
#if defined(__x86_64__)
  long r = 0;  // SYS_read
  __asm__ volatile("syscall" : "+a"(r) : "D"(fd), "S"(buffer), "d"(bytes) : "rcx", "r11", "memory");
  return r;
#else
  return read(fd, buffer, bytes);
#endif
}

long raw_write(int fd, const void* buffer, unsigned long bytes) {
#if defined(__x86_64__)
  long r = 1;  // SYS_write
  __asm__ volatile("syscall" : "+a"(r) : "D"(fd), "S"(buffer), "d"(bytes) : "rcx", "r11", "memory");
  return r;
#else
  return write(fd, buffer, bytes);
#endif
}

int g_cell;  // Fig. 2's x
// Each thread's pipe byte: written by the thread before write() reads it, written by the kernel at
// read() and never read by the thread, so neither is input of the thread's routines.
alignas(64) char g_consumerByte;  // in cells of their own: a cell is 4 bytes
alignas(64) char g_producerByte;

__attribute__((noinline)) void wait_pipe(int fd, char* byte) {
  if (raw_read(fd, byte, 1) != 1) std::abort();
}

__attribute__((noinline)) void signal_pipe(int fd, char* byte) {
  *static_cast<volatile char*>(byte) = 1;
  if (raw_write(fd, byte, 1) != 1) std::abort();
}

// `ready`: "a value is ready" (read end), `done`: "the value was read" (write end).
__attribute__((noinline)) long consumer(int n, int ready, int done) {
  long s = 0;
  for (int i = 0; i < n; ++i) {
    wait_pipe(ready, &g_consumerByte);
    s += *static_cast<volatile int*>(&g_cell);
    signal_pipe(done, &g_consumerByte);
  }
  return s;
}

__attribute__((noinline)) void producer(int n, int ready, int done) {
  for (int i = 0; i < n; ++i) {
    *static_cast<volatile int*>(&g_cell) = i;
    signal_pipe(ready, &g_producerByte);
    wait_pipe(done, &g_producerByte);
  }
}

struct ProducerArgs {
  int n, ready, done;
};

void* producer_thread(void* arg) {
  const auto* a = static_cast<const ProducerArgs*>(arg);
  producer(a->n, a->ready, a->done);
  return nullptr;
}

__attribute__((noinline)) long external_read(int fd, int n) {
  int b[2];
  long s = 0;
  for (int i = 0; i < n; ++i) {
    if (raw_read(fd, b, sizeof b) != static_cast<long>(sizeof b)) std::abort();
    s += *static_cast<volatile int*>(&b[0]);
  }
  return s;
}

}  // extern "C"

namespace {

int costs() {
  std::vector<int> a(8192), work(8192);
  for (int i = 0; i < 8192; ++i) a[i] = static_cast<int>((i * 2654435761u) >> 8);
  // Sizes grow by 2^(1/4): several per log-linear bin octave.
  for (double x = 32; x <= 8192; x *= 1.189207115) {
    const int n = static_cast<int>(x);
    g_sink = linear_sum(a.data(), n);
    g_sink = nlogn_sort(a.data(), work.data(), n);
    if (n <= 1024) g_sink = quadratic_pairs(a.data(), n);
  }
  return 0;
}

int producerConsumer(int n) {
  int toConsumer[2], toProducer[2];
  if (pipe(toConsumer) != 0 || pipe(toProducer) != 0) return 1;
  ProducerArgs args{n, toConsumer[1], toProducer[0]};
  pthread_t t;
  if (pthread_create(&t, nullptr, producer_thread, &args) != 0) return 1;
  g_sink = consumer(n, toConsumer[0], toProducer[1]);
  pthread_join(t, nullptr);
  return 0;
}

int external(int n) {
  const int fd = open("/dev/zero", O_RDONLY);
  if (fd < 0) return 1;
  g_sink = external_read(fd, n);
  close(fd);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const char* mode = argc > 1 ? argv[1] : "costs";
  const int n = argc > 2 ? std::atoi(argv[2]) : 100;
  if (std::strcmp(mode, "costs") == 0) return costs();
  if (std::strcmp(mode, "producer") == 0) return producerConsumer(n);
  if (std::strcmp(mode, "external") == 0) return external(n);
  if (std::strcmp(mode, "overhead") == 0) {
    std::vector<int> a(static_cast<std::size_t>(n));
    for (int i = 0; i < n; ++i) a[static_cast<std::size_t>(i)] = i * 7 % 1000;
    for (int r = 0; r < 4; ++r) g_sink = quadratic_pairs(a.data(), n);
    return 0;
  }
  std::fprintf(stderr, "usage: %s costs | producer N | external N | overhead N\n", argv[0]);
  return 2;
}
