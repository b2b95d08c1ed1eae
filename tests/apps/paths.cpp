// Test application: call paths that post-processing must judge (docs/postprocessing.md, "Path
// quality"). The work runs in a worker thread; the program prints its pid first.
//   usage: paths MODE [units=60]
//   jit-map    spins in generated code (mapped anonymously, without unwind information) and
//              names it in /tmp/perf-<pid>.map, as JIT compilers do for perf: the samples must
//              carry the map's names (csp_jit_hot gets 3/4 of the work, csp_jit_cold 1/4)
//   jit-nomap  the same without the map: samples land in code outside every module, and their
//              call paths cannot be trusted beyond it (truncated)
//   own-entry  spins below csp_paths_entry, an assembler function whose unwind information ends
//              the stack (return address undefined), as glibc's _start and clone3 do: its paths
//              are complete although the function has no well-known name
//   vdso       calls clock_gettime, which runs in the kernel's vDSO (no file to read)
// The perf map is left in /tmp: the measurement copies it when the worker's profile is written.
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>

#include "kernel.hpp"

#if !defined(__x86_64__)
#error "tests/apps/paths.cpp generates x86-64 code"
#endif

extern "C" void csp_paths_entry(void (*fn)());
asm(R"(
  .text
  .globl csp_paths_entry
  .type csp_paths_entry, @function
csp_paths_entry:
  .cfi_startproc
  .cfi_undefined rip
  subq $8, %rsp
  .cfi_def_cfa_offset 16
  call *%rdi
  addq $8, %rsp
  .cfi_def_cfa_offset 8
  ret
  .cfi_endproc
  .size csp_paths_entry, .-csp_paths_entry
)");

namespace {

int g_units = 60;
volatile double g_sink = 0;

// mov %rdi,%rax; 1: dec %rax; jnz 1b; ret  -- n >= 1 iterations, no stack use.
constexpr unsigned char kCountdown[] = {0x48, 0x89, 0xf8, 0x48, 0xff, 0xc8, 0x75, 0xfb, 0xc3};
constexpr std::size_t kSlot = 64;  // bytes per generated function
using JitFn = std::uint64_t (*)(std::uint64_t);

int runJit(bool writeMap) {
  const std::size_t bytes = static_cast<std::size_t>(sysconf(_SC_PAGESIZE));
  void* code = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (code == MAP_FAILED) {
    std::perror("paths: mmap");
    return 1;
  }
  auto* base = static_cast<unsigned char*>(code);
  std::memcpy(base, kCountdown, sizeof kCountdown);
  std::memcpy(base + kSlot, kCountdown, sizeof kCountdown);
  if (mprotect(code, bytes, PROT_READ | PROT_EXEC) != 0) {
    std::perror("paths: mprotect");
    return 1;
  }
  const std::string map = "/tmp/perf-" + std::to_string(getpid()) + ".map";
  std::remove(map.c_str());  // a stale map of an earlier process with this pid
  if (writeMap) {
    FILE* f = std::fopen(map.c_str(), "w");
    if (f == nullptr) {
      std::perror(map.c_str());
      return 1;
    }
    const auto at = reinterpret_cast<std::uintptr_t>(base);
    std::fprintf(f, "%lx %zx csp_jit_hot\n%lx %zx csp_jit_cold\n", static_cast<unsigned long>(at), kSlot,
                 static_cast<unsigned long>(at + kSlot), kSlot);
    std::fclose(f);
  }
  const auto hot = reinterpret_cast<JitFn>(base);
  const auto cold = reinterpret_cast<JitFn>(base + kSlot);
  std::uint64_t sum = 0;
  std::thread worker([&] {
    for (int u = 0; u < g_units; ++u) {
      sum += hot(15'000'000);
      sum += cold(5'000'000);
    }
  });
  worker.join();
  std::printf("paths: jit %s, %d units, checksum %llu\n", writeMap ? "with map" : "without map", g_units,
              static_cast<unsigned long long>(sum));
  return 0;
}

__attribute__((noinline)) void entryWork() {
  double x = 1.0;
  for (int u = 0; u < g_units; ++u) x = csp_test::spin(2'500'000, x);
  g_sink = x;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: paths jit-map|jit-nomap|own-entry|vdso [units]\n");
    return 2;
  }
  const std::string mode = argv[1];
  if (argc > 2) g_units = std::atoi(argv[2]);
  std::printf("paths: pid %d\n", static_cast<int>(getpid()));
  std::fflush(stdout);
  if (mode == "jit-map" || mode == "jit-nomap") return runJit(mode == "jit-map");
  if (mode == "vdso") {
    std::thread worker([] {
      timespec t;
      long sum = 0;
      for (long i = 0; i < 200'000L * g_units; ++i) {
        clock_gettime(CLOCK_MONOTONIC, &t);
        sum += t.tv_nsec & 1;
      }
      g_sink = static_cast<double>(sum);
    });
    worker.join();
    std::printf("paths: vdso, %d units\n", g_units);
    return 0;
  }
  if (mode == "own-entry") {
    std::thread worker([] { csp_paths_entry(entryWork); });
    worker.join();
    std::printf("paths: own entry, %d units, checksum %g\n", g_units, g_sink);
    return 0;
  }
  std::fprintf(stderr, "paths: unknown mode '%s'\n", mode.c_str());
  return 2;
}
