// Test application: hand-written assembler without unwind information (no CFI), as in x264 or
// FFmpeg (docs/postprocessing.md, "Code without unwind information"). main itself is compiled
// code with CFI; the assembler functions below have none.
//   usage: asm-frames MODE [units=30]
//   nocfi      main -> csp_asm_outer -> csp_asm_caller -> csp_asm_leaf, a loop. csp_asm_outer
//              keeps a frame pointer and aligns its stack (and $-32, %rsp), csp_asm_caller saves
//              registers and reserves stack space: the call paths must still be complete.
//   zero-size  main -> csp_asm_calls_hidden -> code without a symbol, reached by a direct call,
//              right after csp_asm_zero_size, a function symbol of size 0 (like x264's
//              x264_8_trellis_coefn): its samples must not be charged to csp_asm_zero_size.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#if !defined(__x86_64__)
#error "tests/apps/asm_frames.cpp is x86-64 assembler"
#endif

extern "C" std::uint64_t csp_asm_outer(std::uint64_t n);
extern "C" std::uint64_t csp_asm_calls_hidden(std::uint64_t n);

asm(R"(
  .text
  .p2align 4
  .globl csp_asm_leaf
  .type csp_asm_leaf, @function
csp_asm_leaf:
  movq %rdi, %rcx
  xorl %eax, %eax
1:
  addq %rcx, %rax
  rorq $7, %rax
  decq %rcx
  jnz 1b
  ret
  .size csp_asm_leaf, .-csp_asm_leaf

  .p2align 4
  .globl csp_asm_caller
  .type csp_asm_caller, @function
csp_asm_caller:
  pushq %rbx
  pushq %r12
  subq $24, %rsp
  movq %rdi, %r12
  call csp_asm_leaf
  movq %rax, %rbx
  movq %r12, %rdi
  call csp_asm_leaf
  addq %rbx, %rax
  addq $24, %rsp
  popq %r12
  popq %rbx
  ret
  .size csp_asm_caller, .-csp_asm_caller

  .p2align 4
  .globl csp_asm_outer
  .type csp_asm_outer, @function
csp_asm_outer:
  pushq %rbp
  movq %rsp, %rbp
  andq $-32, %rsp
  subq $64, %rsp
  movq %rdi, (%rsp)
  call csp_asm_caller
  movq %rbp, %rsp
  popq %rbp
  ret
  .size csp_asm_outer, .-csp_asm_outer

  .p2align 4
  .globl csp_asm_zero_size
  .type csp_asm_zero_size, @function
csp_asm_zero_size:
  ret
  .p2align 4
.Lcsp_asm_hidden:
  movq %rdi, %rcx
  xorl %eax, %eax
2:
  addq %rcx, %rax
  rorq $3, %rax
  decq %rcx
  jnz 2b
  ret

  .p2align 4
  .globl csp_asm_calls_hidden
  .type csp_asm_calls_hidden, @function
csp_asm_calls_hidden:
  subq $8, %rsp
  call .Lcsp_asm_hidden
  addq $8, %rsp
  ret
  .size csp_asm_calls_hidden, .-csp_asm_calls_hidden
)");

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: asm-frames nocfi|zero-size [units]\n");
    return 2;
  }
  const std::string mode = argv[1];
  const int units = argc > 2 ? std::atoi(argv[2]) : 30;
  std::uint64_t (*work)(std::uint64_t) = nullptr;
  if (mode == "nocfi") work = csp_asm_outer;
  if (mode == "zero-size") work = csp_asm_calls_hidden;
  if (work == nullptr) {
    std::fprintf(stderr, "asm-frames: unknown mode '%s'\n", mode.c_str());
    return 2;
  }
  std::uint64_t sum = 0;
  for (int u = 0; u < units; ++u) sum += work(20'000'000);
  std::printf("asm-frames: %s, %d units, checksum %llu\n", mode.c_str(), units, static_cast<unsigned long long>(sum));
  return 0;
}
