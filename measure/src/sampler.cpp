// The sampling signal handler and the per-thread timers.
//
// Everything reachable from onSample() is async-signal-safe and takes no lock that the
// interrupted code can hold:
// - it touches only the interrupted thread's arena (mapped with mmap at the first sample);
// - libunwind finds unwind tables through our findProcInfo(), which asks glibc's lock-free
//   _dl_find_object() instead of libunwind's own dl_iterate_phdr() walk (that takes the loader
//   lock: a thread sampled inside dlopen while taking it, or another thread's handler waiting
//   for it while holding libunwind's cache mutex, deadlocked the program);
// - libunwind's register-state cache is off (UNW_CACHE_NONE): the global cache is guarded by a
//   mutex held across the table lookup, and this libunwind build has no per-thread cache. The
//   remaining mutex inside libunwind (its small allocation pool) is only ever held with all
//   signals blocked, so an interrupted thread never holds it; fork waits for handlers to leave
//   it (pauseSampling) so that no child inherits it locked;
// - all signals are blocked while it runs (sa_mask), so no other handler can interrupt it and
//   jump out of it, and it runs on the thread's alternate signal stack (SA_ONSTACK);
// - above a frame without unwind tables it scans the stack (scanStack): the stack is copied
//   with process_vm_readv, which fails instead of faulting, and code bytes are read only inside
//   the executable segments of objects that _dl_find_object knows; nothing is decoded or
//   allocated (csp-prof-mpi does the binary analysis).
//
// libunwind is loaded with dlopen(RTLD_LOCAL) rather than linked: a linked dependency of a
// preloaded library joins the program's global scope, where libunwind's _Unwind_* compatibility
// symbols would replace the C++ runtime's exception unwinder (libgcc's, or LLVM's libunwind)
// for the whole program. We load the generic build (libunwind-<arch>.so), whose local unwinder
// goes through the address space's accessors, so that findProcInfo() can be put in place; the
// local-only libunwind.so calls its dl_iterate_phdr lookup directly.
#include <libunwind.h>

#include <dlfcn.h>
#include <elf.h>
#include <errno.h>
#include <link.h>
#include <sched.h>
#include <stddef.h>
#include <string.h>

#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <ucontext.h>
#include <unistd.h>
#include <algorithm>
#include <mutex>
#include <string>
#include <vector>

#include "csp/storage/profile.hpp"
#include "runtime.hpp"

namespace csp::measure {

thread_local ThreadState* tlsThread __attribute__((tls_model("initial-exec"))) = nullptr;
thread_local int tlsUnsafe __attribute__((tls_model("initial-exec"))) = 0;

namespace {

constexpr std::uint32_t kFull = 0xFFFFFFFFu;

// The entry points we use, by their real (target-specific) names: the libunwind.h macros map
// unw_step to _Ux86_64_step and so on.
#define CSP_STRINGIFY2(x) #x
#define CSP_STRINGIFY(x) CSP_STRINGIFY2(x)
using SearchTableFn = int (*)(unw_addr_space_t, unw_word_t, unw_dyn_info_t*, unw_proc_info_t*, int, void*);
struct Unwinder {
  int (*initLocal2)(unw_cursor_t*, unw_context_t*, int) = nullptr;
  int (*initLocal)(unw_cursor_t*, unw_context_t*) = nullptr;
  int (*step)(unw_cursor_t*) = nullptr;
  int (*getReg)(unw_cursor_t*, unw_regnum_t, unw_word_t*) = nullptr;
  int (*setCachingPolicy)(unw_addr_space_t, unw_caching_policy_t) = nullptr;
  int (*getContext)(unw_context_t*) = nullptr;
  unw_accessors_t* (*getAccessors)(unw_addr_space_t) = nullptr;
  SearchTableFn searchTable = nullptr;  // libunwind's .eh_frame_hdr binary search
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
                  resolve(lib, CSP_STRINGIFY(unw_get_accessors), u.getAccessors) &&
                  resolve(lib, CSP_STRINGIFY(UNW_OBJ(dwarf_search_unwind_table)), u.searchTable) &&
                  resolve(lib, CSP_STRINGIFY(unw_local_addr_space), u.localAddrSpace);
  if (!ok) return false;
  g_unwinder = u;
  return true;
}

// ---- Unwind tables without the loader lock -------------------------------------------------

// Size in bytes of a DWARF pointer encoding's value (the low nibble); 0 if unsupported.
std::size_t encodedSize(std::uint8_t encoding) {
  switch (encoding & 0x0F) {
    case 0x00:
      return sizeof(void*);  // DW_EH_PE_absptr
    case 0x02:
    case 0x0A:
      return 2;  // udata2, sdata2
    case 0x03:
    case 0x0B:
      return 4;  // udata4, sdata4
    case 0x04:
    case 0x0C:
      return 8;  // udata8, sdata8
    default:
      return 0;
  }
}

// The value data-relative FDE pointers are relative to: DT_PLTGOT of the object (what
// libunwind's own lookup uses).
unw_word_t globalPointer(const struct link_map* map) {
  if (map == nullptr || map->l_ld == nullptr) return 0;
  for (const ElfW(Dyn)* d = map->l_ld; d->d_tag != DT_NULL; ++d)
    if (d->d_tag == DT_PLTGOT) return d->d_un.d_ptr;
  return 0;
}

// Set by findProcInfo when no unwind table covers an address: unwind() then knows that
// libunwind's step from a frame was a guess (its frame-pointer heuristic), not the tables'.
thread_local int tlsNoTables __attribute__((tls_model("initial-exec"))) = 0;

// The FDE of `ip` from the binary search table of its object's .eh_frame_hdr: _dl_find_object()
// (glibc >= 2.35, lock-free and async-signal-safe) gives the object and its PT_GNU_EH_FRAME,
// whose table libunwind then searches as it would after its own dl_iterate_phdr walk.
int searchTables(unw_addr_space_t as, unw_word_t ip, unw_proc_info_t* pi, int needUnwindInfo, void* arg) {
  struct dl_find_object found;
  if (_dl_find_object(reinterpret_cast<void*>(ip), &found) != 0 || found.dlfo_eh_frame == nullptr) return -UNW_ENOINFO;
  const auto* hdr = static_cast<const std::uint8_t*>(found.dlfo_eh_frame);
  // version, eh_frame_ptr encoding, fde_count encoding, table encoding
  if (hdr[0] != 1 || hdr[3] != 0x3B) return -UNW_ENOINFO;  // only the datarel|sdata4 table is searchable
  const std::uint8_t* p = hdr + 4;
  if (hdr[1] != 0xFF) {  // DW_EH_PE_omit
    const std::size_t n = encodedSize(hdr[1]);
    if (n == 0) return -UNW_ENOINFO;
    p += n;
  }
  std::uint64_t count = 0;
  switch (hdr[2]) {
    case 0x03: {
      std::uint32_t v;
      memcpy(&v, p, 4);
      count = v;
      p += 4;
      break;
    }
    case 0x04:
    case 0x00: {
      memcpy(&count, p, 8);
      p += 8;
      break;
    }
    default:
      return -UNW_ENOINFO;
  }
  unw_dyn_info_t di;
  memset(&di, 0, sizeof di);
  di.format = UNW_INFO_FORMAT_REMOTE_TABLE;
  di.start_ip = reinterpret_cast<unw_word_t>(found.dlfo_map_start);
  di.end_ip = reinterpret_cast<unw_word_t>(found.dlfo_map_end);
  di.gp = globalPointer(found.dlfo_link_map);
  di.u.rti.segbase = reinterpret_cast<unw_word_t>(hdr);
  di.u.rti.table_data = reinterpret_cast<unw_word_t>(p);
  di.u.rti.table_len = count * 8 / sizeof(unw_word_t);  // entries of two int32
  pi->gp = di.gp;
  return g_unwinder.searchTable(as, ip, &di, pi, needUnwindInfo, arg);
}

// libunwind's find_proc_info accessor for the local address space.
int findProcInfo(unw_addr_space_t as, unw_word_t ip, unw_proc_info_t* pi, int needUnwindInfo, void* arg) {
  const int result = searchTables(as, ip, pi, needUnwindInfo, arg);
  if (result == -UNW_ENOINFO) tlsNoTables = 1;
  return result;
}

// ---- The arena -----------------------------------------------------------------------------

inline std::uint64_t mix(std::uint32_t parent, std::uint64_t address) {
  std::uint64_t h =
      address * 0x9E3779B97F4A7C15ull ^ (std::uint64_t{parent} + 0x632BE59BD9B4E019ull) * 0xC2B2AE3D27D4EB4Full;
  return h ^ (h >> 29);
}

// The child of `parent` for `address` (found as `note` says), inserted if new; kFull when the
// arena has no room. The node is complete before the table points to it and before it is
// counted in `size`.
inline std::uint32_t child(CctArena& a, std::uint32_t parent, std::uint64_t address, std::uint32_t note = 0) {
  const std::uint64_t key = address ^ std::uint64_t{note} << 32;
  for (std::uint32_t i = static_cast<std::uint32_t>(mix(parent, key)) & a.tableMask;; i = (i + 1) & a.tableMask) {
    const std::uint32_t e = a.table[i];
    if (e == 0) {
      if (a.size == a.capacity) return kFull;
      const std::uint32_t n = a.size;
      ArenaNode& node = a.nodes[n];
      node.address = address;
      node.parent = parent;
      node.note = note;
      for (auto& c : node.count) c = 0;
      a.table[i] = n + 1;
      a.size = n + 1;
      return n;
    }
    const ArenaNode& node = a.nodes[e - 1];
    if (node.address == address && node.parent == parent && node.note == note) return e - 1;
  }
}

// ---- Signals ---------------------------------------------------------------------------------

constinit int g_signal = 0;  // the sampling signal

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

// A sampling signal that our timers did not send (kill, sigqueue) belongs to the program: run
// its handler if it installed one. Its default action (terminate) is not reproduced: a stray
// signal must not end a measured run.
void forwardToProgram(siginfo_t* info, void* ucontext) {
  const struct sigaction& a = g_programActions[g_programSlot.load(std::memory_order_acquire)];
  if ((a.sa_flags & SA_SIGINFO) != 0) {
    if (a.sa_sigaction != nullptr) a.sa_sigaction(g_signal, info, ucontext);
  } else if (a.sa_handler != SIG_DFL && a.sa_handler != SIG_IGN && a.sa_handler != nullptr) {
    a.sa_handler(g_signal);
  }
}

constexpr std::uint64_t kThrottleThresholdNs = 100'000;

std::uint64_t clockNs(clockid_t clock) {
  timespec ts;
  clock_gettime(clock, &ts);
  return static_cast<std::uint64_t>(ts.tv_sec) * 1'000'000'000u + static_cast<std::uint64_t>(ts.tv_nsec);
}

// The calling thread's CPU time (a system call for this clock; async-signal-safe).
std::uint64_t threadCpuNs() { return clockNs(CLOCK_THREAD_CPUTIME_ID); }

// Handlers between their entry and exit, and pause requests (pauseSampling).
constinit std::atomic<int> g_inHandler{0};
constinit std::atomic<int> g_paused{0};

// Unwinds from the interrupted context into a.path (innermost first); returns the depth.
struct UnwindResult {
  std::uint32_t depth = 0;
  bool failed = false;
  bool truncated = false;
};

// ---- Frames without unwind tables --------------------------------------------------------------
//
// Hand-written assembler (x264, FFmpeg, ...) often has no CFI. Where no table covers a frame of
// a loaded object (or stepping from it fails), libunwind's guess from the frame pointer is not
// trusted. The stack above the frame is copied and scanned instead: every word that looks like a
// return address (it points into an executable segment of a loaded object, just after a call
// instruction) is recorded as a Candidate frame, up to the first one whose code has tables,
// where libunwind goes on (Resumed). csp-prof-mpi then computes by binary analysis where each
// frame keeps its return address (its unwind recipe, thesis §3.2), keeps the candidates that are
// the frames, and checks that they lead to the resumed one (docs/postprocessing.md, "Code without
// unwind information"). No decoding, no allocation here: only reads of the stack and of code.

constexpr std::uint32_t kMaxCandidates = 64;  // per scan
constexpr int kMaxScans = 4;                  // per sample
constinit std::uint64_t g_pageSize = 4096;

// Copies up to `words` stack words from `sp` into `out`; returns how many. process_vm_readv
// reads our own memory without faulting where the stack ends; where it is not allowed (a
// seccomp filter), only the rest of sp's page, which the interrupted code was using, is copied.
std::uint32_t copyStack(std::uint64_t* out, std::uint64_t sp, std::uint32_t words) {
  if (sp % 8 != 0 || sp == 0) return 0;
  const std::uint64_t pageEnd = (sp / g_pageSize + 1) * g_pageSize;
  const std::uint64_t bytes = std::uint64_t{words} * 8;
  struct iovec local = {out, bytes};
  struct iovec remote[2];
  remote[0] = {reinterpret_cast<void*>(sp), std::min(bytes, pageEnd - sp)};
  remote[1] = {reinterpret_cast<void*>(pageEnd), bytes - remote[0].iov_len};
  const ssize_t n = process_vm_readv(getpid(), &local, 1, remote, remote[1].iov_len > 0 ? 2 : 1, 0);
  if (n >= 0) return static_cast<std::uint32_t>(n / 8);
  if (errno == EFAULT) return 0;
  memcpy(out, reinterpret_cast<const void*>(sp), remote[0].iov_len);
  return static_cast<std::uint32_t>(remote[0].iov_len / 8);
}

// Whether `before` bytes of code are readable before `address`: both lie in an executable
// segment of a loaded object (found without the loader lock; gaps between segments are
// inaccessible, so the whole object's range is not enough).
bool codeBefore(std::uint64_t address, std::uint64_t before) {
  struct dl_find_object o;
  if (_dl_find_object(reinterpret_cast<void*>(address), &o) != 0 || o.dlfo_link_map == nullptr) return false;
  const auto* eh = static_cast<const ElfW(Ehdr)*>(o.dlfo_map_start);
  if (memcmp(eh->e_ident, ELFMAG, SELFMAG) != 0 || eh->e_phentsize != sizeof(ElfW(Phdr)) ||
      eh->e_phoff + std::uint64_t{eh->e_phnum} * sizeof(ElfW(Phdr)) > g_pageSize)
    return false;  // program headers outside the first page: not where the loader left them
  const auto* ph = reinterpret_cast<const ElfW(Phdr)*>(reinterpret_cast<const char*>(eh) + eh->e_phoff);
  const std::uint64_t base = o.dlfo_link_map->l_addr;
  for (unsigned k = 0; k < eh->e_phnum; ++k) {
    if (ph[k].p_type != PT_LOAD || (ph[k].p_flags & PF_X) == 0) continue;
    const std::uint64_t begin = base + ph[k].p_vaddr, end = begin + ph[k].p_filesz;
    if (address >= begin + before && address < end) return true;
  }
  return false;
}

// Whether the 8 bytes before `ra` end with a call: E8 rel32, or FF /2 (through a register or
// memory) with an optional REX prefix.
bool endsWithCall(const std::uint8_t* ra) {
  if (ra[-5] == 0xE8) return true;
  for (unsigned n = 2; n <= 8; ++n) {
    const std::uint8_t* p = ra - n;
    unsigned at = (p[0] & 0xF0) == 0x40 ? 1 : 0;
    if (p[at] != 0xFF || at + 1 >= n) continue;
    const std::uint8_t modrm = p[at + 1];
    if (((modrm >> 3) & 7) != 2) continue;
    const unsigned mod = modrm >> 6, rm = modrm & 7;
    unsigned length = at + 2;
    if (mod != 3 && rm == 4) {
      if (at + 2 >= n) continue;
      ++length;                                           // SIB
      if (mod == 0 && (p[at + 2] & 7) == 5) length += 4;  // no base: disp32
    }
    if (mod == 1) length += 1;
    if (mod == 2 || (mod == 0 && rm == 5)) length += 4;
    if (length == n) return true;
  }
  return false;
}

bool looksLikeReturnAddress(std::uint64_t v) {
  return v >= g_pageSize && v < (std::uint64_t{1} << 47) && codeBefore(v, 8) &&
         endsWithCall(reinterpret_cast<const std::uint8_t*>(v));
}

bool hasTables(std::uint64_t returnAddress) {
  unw_proc_info_t pi;
  memset(&pi, 0, sizeof pi);
  return searchTables(*g_unwinder.localAddrSpace, returnAddress - 1, &pi, 0, nullptr) == 0;
}

bool inObject(std::uint64_t address) {
  struct dl_find_object o;
  return _dl_find_object(reinterpret_cast<void*>(address), &o) == 0;
}

// The words of the last stack scan of an unwind: frames that the tables find above it, whose
// return address was read from one of these words, are noted with its index (Resumed), so that
// csp-prof-mpi can join its own unwinding of the scanned frames to them (docs/profile-format.md).
struct ScanWindow {
  std::uint64_t sp = 0;
  std::uint32_t words = 0;
  // 1 + the word `v` points at, 0 if outside.
  std::uint32_t slotOf(std::uint64_t v) const {
    return v >= sp && v - sp < std::uint64_t{words} * 8 && (v - sp) % 8 == 0
               ? static_cast<std::uint32_t>((v - sp) / 8 + 1)
               : 0;
  }
  // The note of a frame with stack pointer `frameSp` found by the tables: its return address was
  // read just below it.
  std::uint32_t noteOf(const CctArena& a, std::uint64_t frameSp) const {
    const std::uint32_t slot = frameSp >= 8 ? slotOf(frameSp - 8) : 0;
    if (slot == 0) return 0;
    const std::uint32_t link = slot > 1 ? slotOf(a.scan[slot - 2]) : 0;
    return UnwindNote{UnwindNoteKind::Resumed, slot - 1, link}.encode();
  }
};

// The frame at path[r.depth - 1] has no unwind tables; `sp` and `bp` are its stack and frame
// pointers. Records the return-address candidates above it and sets `cursor` (registers in
// `context`, which must outlive it) at the first one that has tables. False if there is none:
// the path ends here. The first candidate with tables may be stale (left by an earlier call in
// the part of the stack that a frame without tables reserved but did not write): then the
// tables' unwind from it usually comes back to the real frames, whose return addresses lie in
// the scanned words too (ScanWindow::noteOf).
bool scanStack(CctArena& a, UnwindResult& r, std::uint64_t sp, std::uint64_t bp, const void* ucontext,
               ucontext_t& context, unw_cursor_t& cursor, ScanWindow& window) {
  window = {sp, copyStack(a.scan, sp, kScanWords)};
  a.pathNote[r.depth - 1] = UnwindNote{UnwindNoteKind::Stopped, 0, window.slotOf(bp)}.encode();
  std::uint32_t candidates = 0;
  for (std::uint32_t i = 0; i < window.words; ++i) {
    const std::uint64_t v = a.scan[i];
    if (!looksLikeReturnAddress(v)) continue;
    if (hasTables(v)) {
      // The kernel's ucontext in the signal frame is shorter than glibc's ucontext_t: copy the
      // registers only (all that libunwind reads).
      memcpy(&context, ucontext, offsetof(ucontext_t, uc_sigmask));
      auto& g = context.uc_mcontext.gregs;
      g[REG_RIP] = static_cast<greg_t>(v);
      const std::uint64_t callerSp = sp + 8 * (std::uint64_t{i} + 1);
      g[REG_RSP] = static_cast<greg_t>(callerSp);
      // A callee that set up a frame pointer (push %rbp; mov %rsp, %rbp) and still has it keeps
      // its caller's just below its return address.
      if (i > 0 && bp == sp + 8 * (std::uint64_t{i} - 1)) g[REG_RBP] = static_cast<greg_t>(a.scan[i - 1]);
      return g_unwinder.initLocal2(&cursor, reinterpret_cast<unw_context_t*>(&context), 0) >= 0;
    }
    if (r.depth == a.maxDepth) {
      r.truncated = true;
      return false;
    }
    if (++candidates > kMaxCandidates) return false;
    const std::uint32_t link = i > 0 ? window.slotOf(a.scan[i - 1]) : 0;
    a.path[r.depth] = v;
    a.pathNote[r.depth] = UnwindNote{UnwindNoteKind::Candidate, i, link}.encode();
    ++r.depth;
  }
  return false;
}

UnwindResult unwind(ThreadState& t, CctArena& a, void* ucontext) {
  UnwindResult r;
  unw_cursor_t cursor;
  ucontext_t resumeContext;  // the registers where unwinding resumes after a stack scan
  if (g_unwinder.initLocal2(&cursor, static_cast<unw_context_t*>(ucontext), UNW_INIT_SIGNAL_FRAME) < 0) {
    r.failed = true;
    return r;
  }
  ScanWindow window;
  for (int scans = 0;;) {
    unw_word_t ip = 0, sp = 0, bp = 0;
    if (g_unwinder.getReg(&cursor, UNW_REG_IP, &ip) < 0) {
      r.failed = true;
      break;
    }
    if (ip == 0) break;  // some outermost frames end the chain with a null return address
    const bool haveSp = g_unwinder.getReg(&cursor, UNW_X86_64_RSP, &sp) == 0;
    if (g_unwinder.getReg(&cursor, UNW_X86_64_RBP, &bp) < 0) bp = 0;
    a.path[r.depth] = ip;
    a.pathNote[r.depth++] = haveSp && window.words > 0 ? window.noteOf(a, sp) : 0;
    tlsNoTables = 0;
    const int step = g_unwinder.step(&cursor);
    if ((tlsNoTables != 0 || step < 0) && haveSp && scans < kMaxScans && inObject(ip)) {
      ++scans;
      ++t.stackScans;
      if (!scanStack(a, r, sp, bp, ucontext, resumeContext, cursor, window)) break;
      if (r.depth == a.maxDepth) {
        r.truncated = true;
        break;
      }
      continue;
    }
    if (step == 0) break;
    if (step < 0) {
      r.failed = true;
      break;
    }
    if (r.depth == a.maxDepth) {
      r.truncated = true;
      break;
    }
  }
  return r;
}

// Records one sample of `event` with `weight` periods into the thread's tree; returns its node,
// kFull if it was dropped.
std::uint32_t recordSample(ThreadState& t, int event, std::uint64_t weight, void* ucontext) {
  CctArena& a = t.cct;
  if (a.mapping == nullptr && !mapArena(a, config().maxNodes, config().maxDepth)) {
    dropSample(t, kDropNoMemory, weight);
    return kFull;
  }
  const UnwindResult r = unwind(t, a, ucontext);
  if (r.depth == 0) {
    // Nothing to attribute the sample to.
    ++t.unwindFailures;
    dropSample(t, kDropNoFrame, weight);
    return kFull;
  }
  if (r.failed) ++t.unwindFailures;
  if (r.truncated) ++t.truncatedPaths;
  std::uint32_t node = logicalRoot(a);
  for (std::uint32_t i = r.depth; i-- > 0 && node != kFull;) node = child(a, node, a.path[i], a.pathNote[i]);
  if (node == kFull)
    dropSample(t, kDropTreeFull, weight);
  else
    a.nodes[node].count[event] += weight;
  return node;
}

// The address range of this library's code: charges from normal context skip these frames.
constinit std::uintptr_t g_selfBegin = 0, g_selfEnd = 0;

void findSelf() {
  struct dl_find_object self;
  if (_dl_find_object(reinterpret_cast<void*>(&findSelf), &self) == 0) {
    g_selfBegin = reinterpret_cast<std::uintptr_t>(self.dlfo_map_start);
    g_selfEnd = reinterpret_cast<std::uintptr_t>(self.dlfo_map_end);
  }
}

// Unwinds the calling thread from here (normal context) into a.path, leaving out the innermost
// frames that lie in this library. The leaf is the return address into the caller of csp's
// frames minus one, i.e. inside the call instruction: its statement is the line of the call.
UnwindResult unwindFromHere(CctArena& a) {
  UnwindResult r;
  unw_context_t context;
  unw_cursor_t cursor;
  if (g_unwinder.getContext(&context) != 0 || g_unwinder.initLocal(&cursor, &context) < 0) {
    r.failed = true;
    return r;
  }
  bool inSelf = true;
  for (;;) {
    unw_word_t ip = 0;
    if (g_unwinder.getReg(&cursor, UNW_REG_IP, &ip) < 0) {
      r.failed = true;
      break;
    }
    if (ip == 0) break;
    if (inSelf && ip >= g_selfBegin && ip < g_selfEnd) {
      // one of our own frames
    } else {
      if (inSelf) {
        inSelf = false;
        --ip;  // a return address: keep the call's line
      }
      a.path[r.depth++] = ip;
      if (r.depth == a.maxDepth) {
        r.truncated = true;
        break;
      }
    }
    const int step = g_unwinder.step(&cursor);
    if (step == 0) break;
    if (step < 0) {
      r.failed = true;
      break;
    }
  }
  return r;
}

// Takes the thread from Active to Charging (its handler then drops samples); false if the
// thread is closed or a sample of its own is being recorded (a program handler calling in).
bool enterCharging(ThreadState& t) {
  int expected = static_cast<int>(Phase::Active);
  if (!t.phase.compare_exchange_strong(expected, static_cast<int>(Phase::Charging), std::memory_order_acquire))
    return false;
  g_inHandler.fetch_add(1, std::memory_order_seq_cst);
  if (tlsUnsafe != 0 || g_paused.load(std::memory_order_seq_cst) != 0) {
    g_inHandler.fetch_sub(1, std::memory_order_release);
    t.phase.store(static_cast<int>(Phase::Active), std::memory_order_release);
    return false;
  }
  return true;
}

void leaveCharging(ThreadState& t) {
  g_inHandler.fetch_sub(1, std::memory_order_release);
  t.phase.store(static_cast<int>(Phase::Active), std::memory_order_release);
}

timespec toTimespec(std::uint64_t ns) {
  timespec ts;
  ts.tv_sec = static_cast<time_t>(ns / 1'000'000'000u);
  ts.tv_nsec = static_cast<long>(ns % 1'000'000'000u);
  return ts;
}

// No samples of `event` until its clock reads `until`: the timer is re-armed to expire then
// (`quietNs` from now), so that no signal at all arrives in between -- at a period of a few
// microseconds, delivering signals only to drop them would still take all of the thread's time.
// The periods skipped count as samples dropped by the throttle. Async-signal-safe
// (timer_settime); a timer already deleted (the thread is ending) refuses, which is harmless.
void beQuiet(ThreadState& t, int event, std::uint64_t until, std::uint64_t quietNs, std::uint64_t periodNs) {
  t.quietUntilNs[event] = until;
  if (quietNs < periodNs || t.timersStopped) return;
  const struct itimerspec spec = {toTimespec(periodNs), toTimespec(quietNs)};
  if (timer_settime(t.timers[event], 0, &spec, nullptr) != 0) return;
  // The timer starts over: the periods of the quiet time bring no signal (and no overrun).
  const std::uint64_t skipped = quietNs / periodNs;
  t.samples += skipped;
  dropSample(t, kDropThrottled, skipped);
  t.throttledSamples += skipped;
}

void onSample(int, siginfo_t* info, void* ucontext) {
  const int savedErrno = errno;
  ThreadState* t = tlsThread;
  // Our timers carry the event index; anything else (kill, raise, sigqueue) is not a sample.
  const int event = info->si_code == SI_TIMER ? info->si_value.sival_int : -1;
  if (t == nullptr || event < 0 || event >= t->timerCount) {
    if (t != nullptr) ++t->foreignSignals;
    if (info->si_code != SI_TIMER) forwardToProgram(info, ucontext);
    errno = savedErrno;
    return;
  }
  int expected = static_cast<int>(Phase::Active);
  if (!t->phase.compare_exchange_strong(expected, static_cast<int>(Phase::Busy), std::memory_order_acquire)) {
    if (expected == static_cast<int>(Phase::Charging)) {
      // The thread is recording a wait or blame in its tree (idleness.cpp): this sample is
      // dropped rather than interleaved with that insertion.
      const std::uint64_t w = 1 + static_cast<std::uint64_t>(info->si_overrun > 0 ? info->si_overrun : 0);
      t->samples += w;
      dropSample(*t, kDropRecordingWait, w);
      errno = savedErrno;
      return;
    }
    if (expected != static_cast<int>(Phase::Busy)) {
      errno = savedErrno;  // Closed: being written, the profile is final
      return;
    }
    // Busy on entry: all signals are blocked while this handler runs, so the thread's previous
    // sample never finished: a synchronous fault inside it was handled by the program with a
    // jump out of the handler. Its sample was counted but not recorded (it shows as dropped);
    // carry on with this one.
    ++t->abandonedSamples;
  }
  // A timer signal that arrives late (CPU-clock timers are checked at the kernel tick) carries
  // the periods it missed; counting them keeps value = count x period right at high rates.
  const std::uint64_t weight = 1 + static_cast<std::uint64_t>(info->si_overrun > 0 ? info->si_overrun : 0);
  t->samples += weight;
  const std::uint64_t start = threadCpuNs();
  // The throttle window runs on the event's own clock: a real-time event samples threads that
  // wait in the kernel, whose CPU time hardly advances (a window in CPU time would silence them
  // for most of the wait).
  const clockid_t eventClock = config().events[static_cast<std::size_t>(event)].clock;
  const std::uint64_t eventNow = eventClock == CLOCK_THREAD_CPUTIME_ID ? start : clockNs(eventClock);
  g_inHandler.fetch_add(1, std::memory_order_seq_cst);
  if (tlsUnsafe != 0 || g_paused.load(std::memory_order_seq_cst) != 0) {
    dropSample(*t, kDropLoaderBusy, weight);  // the loader is unmapping code, or a fork is under way
  } else if (eventNow < t->quietUntilNs[event]) {
    dropSample(*t, kDropThrottled, weight);
    t->throttledSamples += weight;
  } else {
    const std::uint32_t node = recordSample(*t, event, weight, ucontext);
    // Work and idleness ride on the first event (idleness.cpp).
    if (event == 0 && node != kFull && t->cct.state != nullptr) accountSample(*t, node, weight);
  }
  // A slow unwind (a deep stack, or libunwind validating every read after a frame without
  // unwind information) must not eat the program, nor may a period shorter than what a signal
  // costs on this machine: after a signal that cost d of CPU time in the handler, with d above
  // 100 us or above a fifth of the period, the next 4d of the event's clock (the thread's CPU
  // time, or elapsed time) are not sampled, so the handler never takes more than about a fifth
  // of that time, whatever the rate. Ordinary samples (about 15 us) are far below the threshold
  // at ordinary rates.
  const std::uint64_t cost = threadCpuNs() - start;
  const std::uint64_t period = config().events[static_cast<std::size_t>(event)].periodNs;
  if (cost > kThrottleThresholdNs || 5 * cost > period) beQuiet(*t, event, eventNow + 5 * cost, 4 * cost, period);
  g_inHandler.fetch_sub(1, std::memory_order_release);
  t->phase.store(static_cast<int>(Phase::Active), std::memory_order_release);
  errno = savedErrno;
}

struct sigaction g_ourAction;

// The first real-time signal from SIGRTMIN+6 up that nobody handles yet (libraries that use
// real-time signals, such as old LinuxThreads or some MPI progress engines, use the lowest ones).
int chooseSignal() {
  if (config().signal != 0) return config().signal;
  for (int s = SIGRTMIN + 6; s <= SIGRTMAX - 2; ++s) {
    struct sigaction current;
    if (realSigaction()(s, nullptr, &current) != 0) continue;
    if ((current.sa_flags & SA_SIGINFO) == 0 && current.sa_handler == SIG_DFL) return s;
  }
  return SIGRTMIN + 6;
}

// ---- Alternate signal stacks -----------------------------------------------------------------

// Our handler needs about 10 KiB beyond the kernel's signal frame (AT_MINSIGSTKSZ, 3-10 KiB
// with AVX-512 or AMX state); 64 KiB leaves room for the program's own SA_ONSTACK handlers.
constexpr std::size_t kAltStackBytes = 64 * 1024;
constexpr std::size_t kGuardBytes = 4096;
constinit std::mutex g_altStackMutex;
std::vector<void*>& altStackPool() {
  static auto* pool = new std::vector<void*>;  // recycled: thread churn must not mmap per thread
  return *pool;
}

}  // namespace

SigactionFn realSigaction() {
  static SigactionFn real = reinterpret_cast<SigactionFn>(dlsym(RTLD_NEXT, "sigaction"));
  return real;
}

int samplingSignal() { return g_signal; }

std::string signalName(int sig) {
  if (sig >= SIGRTMIN && sig <= SIGRTMAX) return "SIGRTMIN+" + std::to_string(sig - SIGRTMIN);
  const char* abbrev = sigabbrev_np(sig);
  return abbrev != nullptr ? std::string("SIG") + abbrev : "signal " + std::to_string(sig);
}

void pauseSampling() {
  g_paused.fetch_add(1, std::memory_order_seq_cst);
  // Handlers are short and take no lock we could hold; the bound only guards against a handler
  // that never returned (left by a jump out of a fault), which would otherwise stop us forever.
  for (int spins = 0; g_inHandler.load(std::memory_order_seq_cst) != 0 && spins < 200000; ++spins) sched_yield();
}

void resumeSampling() { g_paused.fetch_sub(1, std::memory_order_seq_cst); }

void giveAltStack(ThreadState& t) {
  stack_t current;
  if (sigaltstack(nullptr, &current) != 0 || (current.ss_flags & SS_DISABLE) == 0) return;  // the program's
  void* block = nullptr;
  {
    std::lock_guard lock(g_altStackMutex);
    if (!altStackPool().empty()) {
      block = altStackPool().back();
      altStackPool().pop_back();
    }
  }
  if (block == nullptr) {
    block = mmap(nullptr, kGuardBytes + kAltStackBytes, PROT_READ | PROT_WRITE,
                 MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_STACK, -1, 0);
    if (block == MAP_FAILED) return;
    mprotect(block, kGuardBytes, PROT_NONE);  // an overflow faults instead of corrupting memory
  }
  stack_t ss;
  ss.ss_sp = static_cast<char*>(block) + kGuardBytes;
  ss.ss_size = kAltStackBytes;
  ss.ss_flags = 0;
  if (sigaltstack(&ss, nullptr) != 0) {
    std::lock_guard lock(g_altStackMutex);
    altStackPool().push_back(block);
    return;
  }
  t.altStack = block;
}

void takeBackAltStack(ThreadState& t) {
  if (t.altStack == nullptr) return;
  stack_t current;
  if (sigaltstack(nullptr, &current) == 0 && current.ss_sp == static_cast<char*>(t.altStack) + kGuardBytes &&
      (current.ss_flags & SS_ONSTACK) == 0) {
    stack_t off;
    memset(&off, 0, sizeof off);
    off.ss_flags = SS_DISABLE;
    if (sigaltstack(&off, nullptr) == 0) {
      std::lock_guard lock(g_altStackMutex);
      altStackPool().push_back(t.altStack);
    }
  }
  // Otherwise the program replaced it (or runs on it): the block stays with the thread.
  t.altStack = nullptr;
}

bool mapArena(CctArena& a, std::uint32_t maxNodes, std::uint32_t maxDepth) {
  std::uint32_t tableSize = 1;
  while (tableSize < 2 * maxNodes) tableSize <<= 1;  // load factor <= 1/2 keeps probes short
  const std::size_t nodeBytes = std::size_t{maxNodes} * sizeof(ArenaNode);
  const std::size_t tableBytes = std::size_t{tableSize} * sizeof(std::uint32_t);
  const std::size_t pathBytes = std::size_t{maxDepth} * sizeof(std::uint64_t);
  const std::size_t scanBytes = std::size_t{kScanWords} * sizeof(std::uint64_t);
  const std::size_t stateBytes = config().idleness ? std::size_t{maxNodes} * kStateMetrics * sizeof(std::uint64_t) : 0;
  const std::size_t noteBytes = std::size_t{maxDepth} * sizeof(std::uint32_t);
  const std::size_t bytes = nodeBytes + tableBytes + pathBytes + scanBytes + stateBytes + noteBytes;
  // NORESERVE: only the pages a thread touches cost memory, so the limit can be generous.
  void* m = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (m == MAP_FAILED) return false;
  auto* base = static_cast<char*>(m);
  a.nodes = reinterpret_cast<ArenaNode*>(base);
  a.table = reinterpret_cast<std::uint32_t*>(base + nodeBytes);
  a.path = reinterpret_cast<std::uint64_t*>(base + nodeBytes + tableBytes);
  a.scan = reinterpret_cast<std::uint64_t*>(base + nodeBytes + tableBytes + pathBytes);
  a.state = stateBytes != 0 ? reinterpret_cast<std::uint64_t*>(base + nodeBytes + tableBytes + pathBytes + scanBytes)
                            : nullptr;
  a.pathNote = reinterpret_cast<std::uint32_t*>(base + nodeBytes + tableBytes + pathBytes + scanBytes + stateBytes);
  a.capacity = maxNodes;
  a.tableMask = tableSize - 1;
  a.maxDepth = maxDepth;
  a.nodes[0].address = 0;
  a.nodes[0].parent = 0xFFFFFFFFu;
  a.nodes[0].note = 0;
  a.size = 1;  // the root, never in the table
  a.mappingBytes = bytes;
  a.mapping = m;
  return true;
}

void unmapArena(CctArena& a) {
  if (a.mapping != nullptr) munmap(a.mapping, a.mappingBytes);
  a = CctArena{};
}

std::uint32_t logicalRoot(CctArena& a) {
  const std::uint32_t context = currentLogicalContext();
  return context == 0 ? 0 : child(a, 0, kLogicalMarker | context);
}

std::uint32_t chargeAtCaller(ThreadState& t, int metric, std::uint64_t value) {
  if (g_unwinder.initLocal == nullptr || !enterCharging(t)) return 0;
  std::uint32_t node = 0;
  CctArena& a = t.cct;
  if (a.mapping != nullptr || mapArena(a, config().maxNodes, config().maxDepth)) {
    const UnwindResult r = unwindFromHere(a);
    if (r.depth > 0 && a.state != nullptr) {
      node = logicalRoot(a);
      for (std::uint32_t i = r.depth; i-- > 0 && node != kFull;) node = child(a, node, a.path[i]);
      if (node == kFull)
        node = 0;
      else
        a.state[std::size_t{node} * kStateMetrics + static_cast<std::size_t>(metric)] += value;
    }
  }
  leaveCharging(t);
  return node;
}

std::uint32_t unwindCreator(ThreadState& t, std::uint64_t runtimeBegin, std::uint64_t runtimeEnd, CreatorFrame* out,
                            std::uint32_t max, std::uint64_t& boundarySlot) {
  boundarySlot = 0;
  if (g_unwinder.initLocal == nullptr || !enterCharging(t)) return 0;
  unw_context_t context;
  unw_cursor_t cursor;
  std::uint32_t n = 0;
  if (g_unwinder.getContext(&context) == 0 && g_unwinder.initLocal(&cursor, &context) >= 0) {
    bool top = true;  // still in csp's frames or the runtime's frames that called it
    for (;;) {
      unw_word_t ip = 0, sp = 0;
      if (g_unwinder.getReg(&cursor, UNW_REG_IP, &ip) < 0 || ip == 0) break;
      if (g_unwinder.getReg(&cursor, UNW_REG_SP, &sp) < 0) break;
      const bool runtime = ip >= runtimeBegin && ip < runtimeEnd;
      if (!(top && (runtime || (ip >= g_selfBegin && ip < g_selfEnd)))) {
        if (runtime) boundarySlot = sp - 8;  // the call pushed the return address just below sp
        if (runtime || n == max) break;      // the creator's body starts here (or the path is too deep)
        top = false;
        out[n++] = {ip, sp - 8};
      }
      if (g_unwinder.step(&cursor) <= 0) break;
    }
  }
  leaveCharging(t);
  return n;
}

bool chargeNode(ThreadState& t, std::uint32_t node, int metric, std::uint64_t value) {
  if (node == 0 || !enterCharging(t)) return false;
  CctArena& a = t.cct;
  const bool ok = a.state != nullptr && node < a.size;
  if (ok) a.state[std::size_t{node} * kStateMetrics + static_cast<std::size_t>(metric)] += value;
  leaveCharging(t);
  return ok;
}

bool installSampler() {
  findSelf();
  if (const long page = sysconf(_SC_PAGESIZE); page > 0) g_pageSize = static_cast<std::uint64_t>(page);
  if (!loadUnwinder()) {
    const char* why = dlerror();
    say(std::string("csp: error: cannot use " CSP_LIBUNWIND_SONAME ": ") + (why != nullptr ? why : "symbols missing") +
        "; threads are not sampled\n");
    return false;
  }
  g_unwinder.setCachingPolicy(*g_unwinder.localAddrSpace, UNW_CACHE_NONE);
  // libunwind initializes itself on first use; let that happen here, in normal context, rather
  // than inside the first signal handler. Then our table lookup replaces its dl_iterate_phdr.
  unw_context_t context;
  unw_cursor_t cursor;
  if (g_unwinder.getContext(&context) == 0 && g_unwinder.initLocal(&cursor, &context) == 0) {
    for (int i = 0; i < 64 && g_unwinder.step(&cursor) > 0; ++i) {
    }
  }
  g_unwinder.getAccessors(*g_unwinder.localAddrSpace)->find_proc_info = findProcInfo;
  if (realSigaction() == nullptr) return false;
  g_signal = chooseSignal();
  memset(&g_ourAction, 0, sizeof g_ourAction);
  g_ourAction.sa_sigaction = onSample;
  // SA_RESTART: a sample must not make the program's system calls fail with EINTR. SA_ONSTACK:
  // the thread's alternate stack (giveAltStack). All signals blocked: nothing can interrupt the
  // handler, so nothing can jump out of it.
  g_ourAction.sa_flags = SA_SIGINFO | SA_RESTART | SA_ONSTACK;
  sigfillset(&g_ourAction.sa_mask);
  struct sigaction previous;
  memset(&previous, 0, sizeof previous);
  if (realSigaction()(g_signal, &g_ourAction, &previous) != 0) return false;
  setProgramAction(previous);  // a handler installed before we were loaded still gets its signals
  // Unblocked in this thread (a blocked signal is inherited by threads created later).
  sigset_t ours;
  sigemptyset(&ours);
  sigaddset(&ours, g_signal);
  pthread_sigmask(SIG_UNBLOCK, &ours, nullptr);
  g_installed.store(true);
  return true;
}

const char* samplingSignalState() {
  if (g_installed.load() && !samplerStillInstalled()) return "yes";
  return g_intercepted.load() ? "intercepted" : "no";
}

bool samplerStillInstalled() {
  struct sigaction current;
  if (realSigaction() == nullptr || realSigaction()(g_signal, nullptr, &current) != 0) return true;
  return (current.sa_flags & SA_SIGINFO) != 0 && current.sa_sigaction == onSample;
}

bool startTimers(ThreadState& t) {
  const auto& events = config().events;
  t.tid = static_cast<pid_t>(syscall(SYS_gettid));
  t.timerCount = 0;
  t.timersStopped = false;
  for (std::size_t e = 0; e < events.size() && e < static_cast<std::size_t>(kMaxEvents); ++e) {
    struct sigevent sev;
    memset(&sev, 0, sizeof sev);
    sev.sigev_notify = SIGEV_THREAD_ID;
    sev.sigev_signo = g_signal;
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
    const timespec period = toTimespec(events[static_cast<std::size_t>(e)].periodNs);
    const struct itimerspec spec = {period, period};
    timer_settime(t.timers[e], 0, &spec, nullptr);
  }
  return t.timerCount > 0;
}

void stopTimers(ThreadState& t) {
  // Once only: a timer id may be reused by another thread's new timer.
  if (t.timersStopped) return;
  t.timersStopped = true;
  for (int e = 0; e < t.timerCount; ++e) timer_delete(t.timers[e]);
  // timerCount stays: a signal already pending still carries a valid index and is ignored by
  // the phase check.
}

}  // namespace csp::measure

// The program installing a handler for the sampling signal would end sampling, or, with the
// default action, kill the program at the next sample. So the interposers keep our handler in
// place, remember the program's, and hand it the signals our timers did not send. The takeover
// attempt is reported. Termination signals have their own rules (termination.cpp); every other
// signal goes straight to the C library.
extern "C" __attribute__((visibility("default"))) int sigaction(int sig, const struct sigaction* act,
                                                                struct sigaction* old) {
  using namespace csp::measure;
  SigactionFn real = realSigaction();
  if (real == nullptr) {
    errno = ENOSYS;
    return -1;
  }
  if (isTerminationSignal(sig)) return terminationSigaction(sig, act, old);
  if (sig != g_signal || !g_installed.load()) return real(sig, act, old);
  if (old != nullptr) *old = g_programActions[g_programSlot.load(std::memory_order_acquire)];
  if (act != nullptr) {
    setProgramAction(*act);
    if (!g_intercepted.exchange(true)) {
      say("csp: warning: the program installs its own handler for " + signalName(g_signal) +
          ", which csp uses for sampling (CSP_SIGNAL chooses another); csp keeps it and passes the program the "
          "signals that csp's timers did not send\n");
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
