/* csp-mem: CSP's Valgrind tool for memory-access profiles (docs/memory-profiles.md).
 *
 * Per routine activation, in its calling context: cost (guest instructions of the thread), RMS
 * and TRMS with the read/write timestamping algorithm of Coppa et al. ("Multithreaded
 * Input-Sensitive Profiling", section 4, Fig. 11-12), and the induced first accesses by source
 * (another thread, the kernel). Per thread: the all-window footprint (footprint.c). One text
 * file per thread, read by csp-prof-mpi's memory-profile source (reduce/src/sources/).
 *
 * Valgrind serialises the threads, so the merged trace of the paper is the order of execution
 * here and needs no tie breaking. Timestamps are 64-bit: the counter cannot wrap in any run,
 * so the renumbering of section 4.4 is not needed. A timestamp is 2 x count; a kernel write
 * stores 2 x count + 1 so that a reader can tell the two sources of induced input apart.
 */
#include "pub_tool_aspacemgr.h"
#include "pub_tool_basics.h"
#include "pub_tool_clientstate.h"
#include "pub_tool_debuginfo.h"
#include "pub_tool_libcassert.h"
#include "pub_tool_libcbase.h"
#include "pub_tool_libcfile.h"
#include "pub_tool_libcprint.h"
#include "pub_tool_libcproc.h"
#include "pub_tool_machine.h"
#include "pub_tool_mallocfree.h"
#include "pub_tool_options.h"
#include "pub_tool_threadstate.h"
#include "pub_tool_tooliface.h"
#include "pub_tool_xarray.h"

#include "footprint.h"

/* ---- options ---- */
static const HChar* clo_out_dir = ".";
static Bool clo_footprint = True;
static Long clo_fp_block = 64;        /* bytes per footprint block (a cache line) */
static Long clo_fp_precision = 90;    /* c in percent */
static Long clo_cell = 4;             /* bytes per memory cell of RMS/TRMS */
static Bool clo_interleave = True;    /* interleaving of the main thread and the first one it starts */
static Bool clo_time = True;          /* thread CPU time per activation */
static Bool clo_all_routines = False; /* every routine with a symbol, libraries included */
static XArray* clo_objects;           /* of HChar*: objects whose routines are tracked (exact paths) */
static XArray* clo_libraries;         /* of HChar*: basename prefixes of tracked libraries */
static UInt cell_shift = 2, block_shift = 6;

/* ---- shadow memory: three levels over 48-bit addresses, 64 KiB chunks ---- */
typedef struct {
  UInt shift;
  ULong** top[1 << 16];
} Shadow;

static ULong shadow_dummy;

static Shadow* shadow_new(UInt shift) {
  Shadow* s = VG_(calloc)("csp.shadow", 1, sizeof(Shadow));
  s->shift = shift;
  return s;
}

static ULong* shadow_slot(Shadow* s, Addr a) {
  ULong** mid;
  ULong* chunk;
  if (a >> 48) return &shadow_dummy;
  mid = s->top[a >> 32];
  if (!mid) mid = s->top[a >> 32] = VG_(calloc)("csp.shadow.2", 1 << 16, sizeof(ULong*));
  chunk = mid[(a >> 16) & 0xffff];
  if (!chunk) chunk = mid[(a >> 16) & 0xffff] = VG_(calloc)("csp.shadow.3", 0x10000 >> s->shift, sizeof(ULong));
  return &chunk[(a & 0xffff) >> s->shift];
}

static void shadow_free(Shadow* s) {
  UInt i, j;
  for (i = 0; i < (1u << 16); ++i) {
    if (!s->top[i]) continue;
    for (j = 0; j < (1u << 16); ++j)
      if (s->top[i][j]) VG_(free)(s->top[i][j]);
    VG_(free)(s->top[i]);
  }
  VG_(free)(s);
}

/* ---- a hash map from 64-bit keys to 32-bit indices ---- */
typedef struct {
  ULong* keys; /* key + 1; 0 is empty */
  UInt* vals;
  UInt cap, used;
} Map;

static void map_init(Map* m) {
  m->cap = 1024;
  m->used = 0;
  m->keys = VG_(calloc)("csp.map", m->cap, sizeof(ULong));
  m->vals = VG_(calloc)("csp.map", m->cap, sizeof(UInt));
}

static UInt map_hash(ULong k) {
  k ^= k >> 33;
  k *= 0xff51afd7ed558ccdULL;
  k ^= k >> 33;
  return (UInt)k;
}

static void map_put(Map* m, ULong key, UInt val);

static void map_grow(Map* m) {
  Map bigger;
  UInt i;
  bigger.cap = m->cap * 2;
  bigger.used = 0;
  bigger.keys = VG_(calloc)("csp.map", bigger.cap, sizeof(ULong));
  bigger.vals = VG_(calloc)("csp.map", bigger.cap, sizeof(UInt));
  for (i = 0; i < m->cap; ++i)
    if (m->keys[i]) map_put(&bigger, m->keys[i] - 1, m->vals[i]);
  VG_(free)(m->keys);
  VG_(free)(m->vals);
  *m = bigger;
}

/* The slot of `key`: its index if present, else the empty slot where it goes. */
static UInt map_slot(const Map* m, ULong key) {
  UInt i = map_hash(key) & (m->cap - 1);
  while (m->keys[i] && m->keys[i] != key + 1) i = (i + 1) & (m->cap - 1);
  return i;
}

static Bool map_get(const Map* m, ULong key, UInt* val) {
  UInt i = map_slot(m, key);
  if (!m->keys[i]) return False;
  *val = m->vals[i];
  return True;
}

static void map_put(Map* m, ULong key, UInt val) {
  UInt i;
  if (2 * (m->used + 1) > m->cap) map_grow(m);
  i = map_slot(m, key);
  if (!m->keys[i]) m->used++;
  m->keys[i] = key + 1;
  m->vals[i] = val;
}

static void map_free(Map* m) {
  VG_(free)(m->keys);
  VG_(free)(m->vals);
}

/* ---- routines (frames), shared by all threads ---- */
typedef struct {
  Addr entry;
  HChar* name;
  HChar* object;
  HChar* file;
  UInt line;
} Frame;

static XArray* frames; /* of Frame */
static Map frame_ids;  /* entry address -> frame id */

static HChar* dup_or_empty(const HChar* s) { return VG_(strdup)("csp.frame", s ? s : ""); }

static UInt intern_frame(Addr entry, const HChar* name) {
  UInt id;
  Frame f;
  const HChar *file = 0, *dir = 0, *obj = 0;
  DiEpoch ep = VG_(current_DiEpoch)();
  if (map_get(&frame_ids, entry, &id)) return id;
  f.entry = entry;
  f.name = dup_or_empty(name);
  f.line = 0;
  VG_(get_filename_linenum)(ep, entry, &file, &dir, &f.line);
  f.file = dup_or_empty(file);
  VG_(get_objname)(ep, entry, &obj);
  f.object = dup_or_empty(obj);
  id = (UInt)VG_(addToXA)(frames, &f);
  map_put(&frame_ids, entry, id);
  return id;
}

/* ---- per-thread state ---- */
typedef struct {
  UInt frame, node;
  ULong ts;          /* 2 x count at the call */
  Long trms, rms;    /* partial sizes (Invariant 2 of the paper) */
  ULong fromThreads; /* induced first accesses in the activation and its callees, by source */
  ULong fromKernel;
  ULong cost0; /* thread instructions at the call */
  ULong time0; /* thread CPU time at the call (ns) */
  Addr sp;     /* stack pointer at the entry: the activation ends when SP rises above */
} Activation;

typedef struct {
  ULong calls, cost, trms, rms, fromThreads, fromKernel, time;
} NodeStat;

typedef struct {
  ULong calls, costSum, costMax, timeSum, timeMax;
} BinStat;

typedef struct {
  Bool live;
  ThreadId tid;
  Int osTid;
  Activation* stack; /* stack[0] is the thread's root: ts 0, never popped */
  Int top, cap;
  Shadow* ts;         /* ts_t: latest access by this thread, per cell */
  ULong instrs;       /* instructions of this thread up to its last switch out */
  ULong switchedIn;   /* g_instrs when it was switched in */
  ULong lastTime;     /* its CPU time at the last reading (ns) */
  ULong translating;  /* CPU time when it began translating code (0: it is not) */
  ULong translation;  /* CPU time spent translating code, left out of activations' time */
  ULong clockReads;   /* readings of the CPU clock for activations (each costs clock_cost) */
  XArray* nodeParent; /* of UInt: the calling context tree, node 0 the root */
  XArray* nodeFrame;  /* of UInt */
  XArray* nodeSite;   /* of Addr: the return address of the node's first call (0: unknown) */
  XArray* nodeStat;   /* of NodeStat */
  Map children;       /* (parent << 32 | frame) -> node */
  XArray* bins;       /* of BinStat */
  Map binIds;         /* node << 10 | kind << 9 | size bin -> index in bins */
  Footprint fp;
  Shadow* fpLast; /* last access time per block */
} Thread;

static ULong g_count = 1;  /* the paper's count: calls and thread switches */
static ULong g_instrs = 0; /* guest instructions, all threads (updated by the instrumentation) */
static Shadow* wts;        /* latest write by any thread (even) or by the kernel (odd) */
static Thread** threads;   /* by ThreadId, VG_N_THREADS entries */
static Thread* cur = 0;
static ThreadId cur_tid = VG_INVALID_THREADID;
static ULong peak_threads = 0;
static Interleave interleave; /* of Valgrind threads 1 (main) and 2, over their merged accesses */
static Bool interleaveLive = False;

static void* fp_alloc(void* ctx, fp_u64 bytes) { return VG_(calloc)("csp.fp", 1, bytes); }
static void fp_release(void* ctx, void* p) { VG_(free)(p); }
static fp_u64* fp_last(void* ctx, fp_u64 block) { return shadow_slot((Shadow*)ctx, (Addr)(block << block_shift)); }

static UInt new_node(Thread* t, UInt parent, UInt frame, Addr site) {
  NodeStat zero;
  VG_(memset)(&zero, 0, sizeof zero);
  VG_(addToXA)(t->nodeParent, &parent);
  VG_(addToXA)(t->nodeFrame, &frame);
  VG_(addToXA)(t->nodeSite, &site);
  return (UInt)VG_(addToXA)(t->nodeStat, &zero);
}

/* The return address at the entry's stack pointer names the call site (read only when the node
   is new, and only from readable client memory). */
static Addr call_site(Addr sp) {
  if (!VG_(am_is_valid_for_client)(sp, sizeof(Addr), VKI_PROT_READ)) return 0;
  return *(Addr*)sp;
}

static UInt child_node(Thread* t, UInt parent, UInt frame, Addr sp) {
  ULong key = ((ULong)parent << 32) | frame;
  UInt node;
  if (map_get(&t->children, key, &node)) return node;
  node = new_node(t, parent, frame, call_site(sp));
  map_put(&t->children, key, node);
  return node;
}

static Thread* thread_new(ThreadId tid) {
  Thread* t = VG_(calloc)("csp.thread", 1, sizeof(Thread));
  FpHost host;
  t->live = True;
  t->tid = tid;
  t->osTid = VG_(gettid)();
  t->cap = 64;
  t->stack = VG_(calloc)("csp.stack", t->cap, sizeof(Activation));
  t->top = 0;
  t->ts = shadow_new(cell_shift);
  t->nodeParent = VG_(newXA)(VG_(malloc), "csp.cct", VG_(free), sizeof(UInt));
  t->nodeFrame = VG_(newXA)(VG_(malloc), "csp.cct", VG_(free), sizeof(UInt));
  t->nodeSite = VG_(newXA)(VG_(malloc), "csp.cct", VG_(free), sizeof(Addr));
  t->nodeStat = VG_(newXA)(VG_(malloc), "csp.cct", VG_(free), sizeof(NodeStat));
  t->bins = VG_(newXA)(VG_(malloc), "csp.bins", VG_(free), sizeof(BinStat));
  map_init(&t->children);
  map_init(&t->binIds);
  new_node(t, 0, 0, 0);
  if (clo_footprint) {
    t->fpLast = shadow_new(block_shift);
    host.alloc = fp_alloc;
    host.release = fp_release;
    host.lastAccess = fp_last;
    host.ctx = t->fpLast;
    fp_init(&t->fp, host, (unsigned)clo_fp_precision);
  }
  return t;
}

static ULong thread_instrs(const Thread* t) { return t->instrs + (t == cur ? g_instrs - t->switchedIn : 0); }

/* The thread's CPU time: each guest thread is an OS thread of Valgrind, which runs one at a time,
   so the OS thread's CPU clock counts this thread's running (instrumented) code and neither the
   other threads' nor time off the CPU (blocked, or preempted by a loaded machine). It can only
   be read on the thread itself; elsewhere (activations ended at exit) the last reading stands. */
static ULong cpu_clock(void) {
  struct vki_timespec now;
  VG_(clock_gettime)(&now, VKI_CLOCK_THREAD_CPUTIME_ID);
  return (ULong)now.tv_sec * 1000000000ULL + (ULong)now.tv_nsec;
}

/* The time of one reading of the clock (a system call): the least difference of two readings in
   a row, measured at start-up. Every reading of a thread is left out of its time, so that an
   activation's time holds neither its own readings nor its callees'. */
static ULong clock_cost;

static void measure_clock_cost(void) {
  Int i;
  clock_cost = ~0ULL;
  for (i = 0; i < 200; ++i) {
    ULong a = cpu_clock(), b = cpu_clock();
    if (b - a < clock_cost) clock_cost = b - a;
  }
}

static ULong thread_time(Thread* t) {
  if (!clo_time || t->tid != VG_(get_running_tid)()) return t->lastTime;
  t->clockReads++;
  t->lastTime = cpu_clock() - t->translation - t->clockReads * clock_cost;
  return t->lastTime;
}

/* Translating a block for the first time costs Valgrind far more than running it, once: its
   time would be the first activation's that runs the block, a cold outlier of the cost
   function. It runs from the translator's first read of the code (translation_begins) until the
   block starts (translation_ends, at the next block of the thread), and is left out. */
static void translation_begins(ThreadId tid) {
  Thread* t = tid < VG_N_THREADS ? threads[tid] : 0;
  if (!clo_time || !t || t->translating || tid != VG_(get_running_tid)()) return;
  t->translating = cpu_clock();
}

static void translation_ends(Thread* t) {
  t->translation += cpu_clock() - t->translating;
  t->translating = 0;
}

static Thread* thread_of(ThreadId tid) {
  if (!threads[tid]) {
    threads[tid] = thread_new(tid);
    peak_threads++;
  }
  return threads[tid];
}

/* switchThread (Fig. 11): count++ whenever another thread runs. */
static void switch_to(ThreadId tid) {
  if (tid == cur_tid) return;
  if (cur) cur->instrs += g_instrs - cur->switchedIn;
  g_count++;
  cur_tid = tid;
  cur = thread_of(tid);
  cur->switchedIn = g_instrs;
}

static void bin_add(Thread* t, UInt node, UInt kind, ULong size, ULong cost, ULong time) {
  ULong key = ((ULong)node << 10) | ((ULong)kind << 9) | fp_bin(size);
  UInt id;
  BinStat* b;
  if (!map_get(&t->binIds, key, &id)) {
    BinStat zero;
    VG_(memset)(&zero, 0, sizeof zero);
    id = (UInt)VG_(addToXA)(t->bins, &zero);
    map_put(&t->binIds, key, id);
  }
  b = VG_(indexXA)(t->bins, id);
  b->calls++;
  b->costSum += cost;
  if (cost > b->costMax) b->costMax = cost;
  b->timeSum += time;
  if (time > b->timeMax) b->timeMax = time;
}

static void write_cell(Thread* t, Addr a);

/* call(r, t) of Fig. 11. The return address at the entry's stack pointer is stamped as the new
   activation's own write: the call instruction that pushed it is the callee's machinery, so the
   read of it at the return is no input of the callee (else every activation had two cells of
   input from its own call). */
static void do_call(Thread* t, UInt frame, Addr sp) {
  Activation* a;
  Addr c;
  if (t->top + 1 == t->cap) {
    t->cap *= 2;
    t->stack = VG_(realloc)("csp.stack", t->stack, t->cap * sizeof(Activation));
  }
  g_count++;
  a = &t->stack[++t->top];
  VG_(memset)(a, 0, sizeof *a);
  a->frame = frame;
  a->node = child_node(t, t->stack[t->top - 1].node, frame, sp);
  a->ts = 2 * g_count;
  a->cost0 = thread_instrs(t);
  a->time0 = thread_time(t);
  a->sp = sp;
  for (c = sp >> cell_shift; c <= (sp + sizeof(Addr) - 1) >> cell_shift; ++c) write_cell(t, c << cell_shift);
}

/* return(t) of Fig. 11: collect, then fold the partial sizes into the caller. */
static void do_return(Thread* t) {
  Activation* a = &t->stack[t->top];
  Activation* parent = &t->stack[t->top - 1];
  ULong cost = thread_instrs(t) - a->cost0;
  ULong now = thread_time(t);
  ULong time = now > a->time0 ? now - a->time0 : 0;
  NodeStat* s = VG_(indexXA)(t->nodeStat, a->node);
  s->calls++;
  s->cost += cost;
  s->time += time;
  s->trms += (ULong)a->trms;
  s->rms += (ULong)a->rms;
  s->fromThreads += a->fromThreads;
  s->fromKernel += a->fromKernel;
  bin_add(t, a->node, 0, (ULong)a->trms, cost, time);
  bin_add(t, a->node, 1, (ULong)a->rms, cost, time);
  parent->trms += a->trms;
  parent->rms += a->rms;
  parent->fromThreads += a->fromThreads;
  parent->fromKernel += a->fromKernel;
  t->top--;
}

/* The deepest activation whose timestamp is <= ts (stack timestamps increase upwards). */
static Int activation_at(const Thread* t, ULong ts) {
  Int lo = 0, hi = t->top;
  while (lo < hi) {
    Int mid = (lo + hi + 1) / 2;
    if (t->stack[mid].ts <= ts)
      lo = mid;
    else
      hi = mid - 1;
  }
  return lo;
}

/* Runs at the start of every superblock: ends the activations the stack pointer has left and
   starts one where the block is a routine's entry. A re-entry at the same stack pointer of the
   routine on top is a jump to its own entry (a loop), not a call. */
static VG_REGPARM(2) void on_block(Addr sp, UWord framePlus1) {
  Thread* t = cur;
  if (!t) return;
  if (t->translating) translation_ends(t);
  while (t->top > 0 && sp > t->stack[t->top].sp) do_return(t);
  if (framePlus1) {
    UInt frame = (UInt)(framePlus1 - 1);
    if (t->top > 0 && t->stack[t->top].frame == frame && t->stack[t->top].sp == sp) return;
    do_call(t, frame, sp);
  }
}

static void footprint_access(Thread* t, Addr a, SizeT size) {
  Addr b;
  if (!clo_footprint || size == 0) return;
  if (interleaveLive && (t->tid == 1 || t->tid == 2)) il_access(&interleave, t->tid == 2);
  for (b = a >> block_shift; b <= (a + size - 1) >> block_shift; ++b) fp_access(&t->fp, b);
}

/* read(l, t) of Fig. 11, with RMS beside TRMS. */
static void read_cell(Thread* t, Addr a) {
  ULong* mine = shadow_slot(t->ts, a);
  ULong written = *shadow_slot(wts, a);
  ULong old = *mine;
  Activation* top = &t->stack[t->top];
  if (old < top->ts) {
    top->rms++;
    if (old) t->stack[activation_at(t, old)].rms--;
  }
  if (old < written) {
    top->trms++;
    if (written & 1)
      top->fromKernel++;
    else
      top->fromThreads++;
  } else if (old < top->ts) {
    top->trms++;
    if (old) t->stack[activation_at(t, old)].trms--;
  }
  *mine = 2 * g_count;
}

static void write_cell(Thread* t, Addr a) {
  *shadow_slot(t->ts, a) = 2 * g_count;
  *shadow_slot(wts, a) = 2 * g_count;
}

static void read_range(Thread* t, Addr a, SizeT size) {
  Addr c;
  if (size == 0) return;
  for (c = a >> cell_shift; c <= (a + size - 1) >> cell_shift; ++c) read_cell(t, c << cell_shift);
}

static VG_REGPARM(2) void on_read(Addr a, UWord size) {
  if (!cur) return;
  read_range(cur, a, size);
  footprint_access(cur, a, size);
}

static VG_REGPARM(2) void on_write(Addr a, UWord size) {
  Addr c;
  if (!cur || size == 0) return;
  for (c = a >> cell_shift; c <= (a + size - 1) >> cell_shift; ++c) write_cell(cur, c << cell_shift);
  footprint_access(cur, a, size);
}

/* kernelRead (Fig. 12): the kernel reading the thread's memory (write(), send()) is a read by
   the thread. Valgrind's translator also reports the code it reads to translate a block
   (Vg_CoreTranslate): no access of the program, so not input (else the first activation to run
   a block had a cell of input per block translated), but the start of a translation. */
static void on_kernel_read(CorePart part, ThreadId tid, const HChar* s, Addr a, SizeT size) {
  if (part == Vg_CoreTranslate) return translation_begins(tid);
  if (tid == VG_INVALID_THREADID) return;
  switch_to(tid);
  read_range(cur, a, size);
}

static void on_kernel_read_asciiz(CorePart part, ThreadId tid, const HChar* s, Addr a) {
  on_kernel_read(part, tid, s, a, VG_(strlen)((const HChar*)a) + 1);
}

/* kernelWrite (Fig. 12): a later read by any thread is induced input from the kernel. The
   counter moves on afterwards too, so that the thread's next accesses stamp above it. */
static void on_kernel_write(CorePart part, ThreadId tid, Addr a, SizeT size) {
  Addr c;
  if (size == 0) return;
  g_count++;
  for (c = a >> cell_shift; c <= (a + size - 1) >> cell_shift; ++c)
    *shadow_slot(wts, c << cell_shift) = 2 * g_count + 1;
  g_count++;
}

static void on_start_client_code(ThreadId tid, ULong blocksDone) { switch_to(tid); }

/* ---- output ---- */
typedef struct {
  Int fd;
  HChar buf[1 << 16];
  Int used;
  Bool failed;
} Out;

static void out_flush(Out* o) {
  if (o->used && VG_(write)(o->fd, o->buf, o->used) != o->used) o->failed = True;
  o->used = 0;
}

static void out_line(Out* o, const HChar* fmt, ...) PRINTF_CHECK(2, 3);
static void out_line(Out* o, const HChar* fmt, ...) {
  HChar line[4096];
  va_list vargs;
  Int n;
  va_start(vargs, fmt);
  n = (Int)VG_(vsnprintf)(line, sizeof line, fmt, vargs);
  va_end(vargs);
  if (n >= (Int)sizeof line) n = sizeof line - 1;
  if (o->used + n > (Int)sizeof o->buf) out_flush(o);
  VG_(memcpy)(o->buf + o->used, line, n);
  o->used += n;
}

static void write_header(Out* o, Thread* t) {
  const HChar* rank = VG_(getenv)("OMPI_COMM_WORLD_RANK");
  Word i;
  if (!rank) rank = VG_(getenv)("PMI_RANK");
  out_line(o, "cspmem\t2\n");
  out_line(o, "pid\t%d\n", VG_(getpid)());
  out_line(o, "thread\t%u\n", (UInt)t->tid - 1);
  out_line(o, "rank\t%s\n", rank ? rank : "-");
  out_line(o, "executable\t%s\n", VG_(args_the_exename) ? VG_(args_the_exename) : "");
  for (i = 0; i < VG_(sizeXA)(VG_(args_for_client)); ++i)
    out_line(o, "arg\t%s\n", *(HChar**)VG_(indexXA)(VG_(args_for_client), i));
  out_line(o, "cell\t%lld\n", clo_cell);
  out_line(o, "instructions\t%llu\n", thread_instrs(t));
  out_line(o, "time\t%s\n", clo_time ? "thread-cpu-ns" : "none");
  out_line(o, "routines\t%s\n", clo_all_routines ? "all" : "program");
}

static void write_cct(Out* o, Thread* t) {
  Word n = VG_(sizeXA)(t->nodeStat), i;
  Bool* used = VG_(calloc)("csp.out", VG_(sizeXA)(frames) + 1, sizeof(Bool));
  for (i = 1; i < n; ++i) used[*(UInt*)VG_(indexXA)(t->nodeFrame, i)] = True;
  for (i = 0; i < VG_(sizeXA)(frames); ++i) {
    const Frame* f = VG_(indexXA)(frames, i);
    if (used[i]) out_line(o, "frame\t%ld\t%s\t%s\t%s\t%u\n", i, f->name, f->object, f->file, f->line);
  }
  VG_(free)(used);
  for (i = 1; i < n; ++i) {
    const NodeStat* s = VG_(indexXA)(t->nodeStat, i);
    Addr site = *(Addr*)VG_(indexXA)(t->nodeSite, i);
    const HChar *file = 0, *dir = 0;
    UInt line = 0;
    if (!site || !VG_(get_filename_linenum)(VG_(current_DiEpoch)(), site - 1, &file, &dir, &line)) file = "";
    out_line(o, "node\t%ld\t%u\t%u\t%s\t%u\n", i, *(UInt*)VG_(indexXA)(t->nodeParent, i),
             *(UInt*)VG_(indexXA)(t->nodeFrame, i), file, line);
    if (s->calls)
      out_line(o, "stat\t%ld\t%llu\t%llu\t%llu\t%llu\t%llu\t%llu\t%llu\n", i, s->calls, s->cost, s->trms, s->rms,
               s->fromThreads, s->fromKernel, s->time);
  }
}

static void write_bins(Out* o, Thread* t) {
  UInt i;
  for (i = 0; i < t->binIds.cap; ++i) {
    ULong key;
    const BinStat* b;
    if (!t->binIds.keys[i]) continue;
    key = t->binIds.keys[i] - 1;
    b = VG_(indexXA)(t->bins, t->binIds.vals[i]);
    out_line(o, "bin\t%llu\t%s\t%llu\t%llu\t%llu\t%llu\t%llu\t%llu\n", key >> 10, (key >> 9) & 1 ? "rms" : "trms",
             key & 511, b->calls, b->costSum, b->costMax, b->timeSum, b->timeMax);
  }
}

/* In the main thread's file, once a second thread has run. */
static void write_interleave(Out* o, Thread* t) {
  fp_u64 row[FP_LENGTH_BINS];
  UInt d, l;
  if (!interleaveLive || t->tid != 1 || interleave.accesses[1] == 0) return;
  out_line(o, "interleave\t%lld\t%llu\t%llu\n", clo_fp_precision, interleave.accesses[0], interleave.accesses[1]);
  for (d = 0; d < FP_SIZE_BINS; ++d) {
    if (!il_row(&interleave, d, row)) continue;
    for (l = 0; l < FP_LENGTH_BINS; ++l)
      if (row[l]) out_line(o, "degree\t%u\t%u\t%llu\n", l, d, row[l]);
  }
}

static void write_footprint(Out* o, Thread* t) {
  fp_u64 row[FP_LENGTH_BINS];
  UInt f, l;
  if (!clo_footprint) return;
  out_line(o, "footprint\t%lld\t%lld\t%llu\t%llu\n", clo_fp_precision, clo_fp_block, t->fp.now, t->fp.blocks);
  for (f = 0; f < FP_SIZE_BINS; ++f) {
    if (!fp_row(&t->fp, f, row)) continue;
    for (l = 0; l < FP_LENGTH_BINS; ++l)
      if (row[l]) out_line(o, "windows\t%u\t%u\t%llu\n", l, f, row[l]);
  }
}

/* Ends the thread's pending activations and writes its file, complete or not at all: written
   under a temporary name, renamed when finished. */
static void thread_finish(Thread* t) {
  HChar path[4096], tmp[4200];
  SysRes res;
  Out* o;
  if (!t->live) return;
  t->live = False;
  while (t->top > 0) do_return(t);
  VG_(snprintf)(path, sizeof path, "%s/csp-mem.%d.%u.cspmem", clo_out_dir, VG_(getpid)(), (UInt)t->tid - 1);
  VG_(snprintf)(tmp, sizeof tmp, "%s.tmp", path);
  res = VG_(open)(tmp, VKI_O_CREAT | VKI_O_TRUNC | VKI_O_WRONLY, 0644);
  if (sr_isError(res)) {
    VG_(umsg)("csp-mem: cannot create %s\n", tmp);
    return;
  }
  o = VG_(calloc)("csp.out", 1, sizeof(Out));
  o->fd = (Int)sr_Res(res);
  write_header(o, t);
  write_cct(o, t);
  write_bins(o, t);
  write_footprint(o, t);
  write_interleave(o, t);
  out_line(o, "end\n");
  out_flush(o);
  VG_(close)(o->fd);
  if (o->failed || VG_(rename)(tmp, path) != 0) VG_(umsg)("csp-mem: cannot write %s\n", path);
  VG_(free)(o);
}

static void thread_release(Thread* t) {
  shadow_free(t->ts);
  if (clo_footprint) {
    fp_free(&t->fp);
    shadow_free(t->fpLast);
  }
  VG_(free)(t->stack);
  VG_(deleteXA)(t->nodeParent);
  VG_(deleteXA)(t->nodeFrame);
  VG_(deleteXA)(t->nodeSite);
  VG_(deleteXA)(t->nodeStat);
  VG_(deleteXA)(t->bins);
  map_free(&t->children);
  map_free(&t->binIds);
}

static void on_thread_exit(ThreadId tid) {
  Thread* t = threads[tid];
  if (!t) return;
  if (t == cur) {
    cur->instrs += g_instrs - cur->switchedIn;
    cur->switchedIn = g_instrs;
  }
  thread_finish(t);
  thread_release(t);
  VG_(free)(t);
  threads[tid] = 0;
  if (cur == t) {
    cur = 0;
    cur_tid = VG_INVALID_THREADID;
  }
}

/* ---- instrumentation ---- */
static void add_call(IRSB* out, const HChar* name, void* fn, IRExpr* a, IRExpr* b, IRExpr* guard) {
  IRDirty* d = unsafeIRDirty_0_N(2, name, VG_(fnptr_to_fnentry)(fn), mkIRExprVec_2(a, b));
  if (guard) d->guard = guard;
  addStmtToIRSB(out, IRStmt_Dirty(d));
}

static void add_read(IRSB* out, IRExpr* addr, Int size, IRExpr* guard) {
  add_call(out, "on_read", on_read, addr, mkIRExpr_HWord(size), guard);
}

static void add_write(IRSB* out, IRExpr* addr, Int size, IRExpr* guard) {
  add_call(out, "on_write", on_write, addr, mkIRExpr_HWord(size), guard);
}

/* g_instrs += n, in IR, before each exit and at the end: exact counts without a call. */
static void add_instr_count(IRSB* out, UInt n) {
  IRTemp old, sum;
  if (n == 0) return;
  old = newIRTemp(out->tyenv, Ity_I64);
  sum = newIRTemp(out->tyenv, Ity_I64);
  addStmtToIRSB(out, IRStmt_WrTmp(old, IRExpr_Load(Iend_LE, Ity_I64, mkIRExpr_HWord((HWord)&g_instrs))));
  addStmtToIRSB(out, IRStmt_WrTmp(sum, IRExpr_Binop(Iop_Add64, IRExpr_RdTmp(old), IRExpr_Const(IRConst_U64(n)))));
  addStmtToIRSB(out, IRStmt_Store(Iend_LE, mkIRExpr_HWord((HWord)&g_instrs), IRExpr_RdTmp(sum)));
}

static const HChar* base_name(const HChar* path) {
  const HChar* slash = VG_(strrchr)(path, '/');
  return slash ? slash + 1 : path;
}

static Bool listed(XArray* list, const HChar* s, Bool prefix) {
  Word i;
  for (i = 0; list && i < VG_(sizeXA)(list); ++i) {
    const HChar* item = *(HChar**)VG_(indexXA)(list, i);
    if (prefix ? VG_(strncmp)(s, item, VG_(strlen)(item)) == 0 : VG_(strcmp)(s, item) == 0) return True;
  }
  return False;
}

/* --routines=program: the routines of the program's objects (--routine-object, else the
   executable named on the command line) and of the libraries named by --routine-library are
   activations; every other routine (the C library, MPI, ...) is folded into its caller, whose
   cost and input then include it. */
static Bool tracked_object(Addr entry) {
  const HChar* obj = 0;
  if (clo_all_routines) return True;
  if (!VG_(get_objname)(VG_(current_DiEpoch)(), entry, &obj) || !obj) return False;
  if (listed(clo_objects, obj, False) || listed(clo_libraries, base_name(obj), True)) return True;
  return VG_(sizeXA)(clo_objects) == 0 && VG_(args_the_exename) &&
         VG_(strcmp)(base_name(obj), base_name(VG_(args_the_exename))) == 0;
}

static void add_block_entry(IRSB* out, const VexGuestLayout* layout, Addr entry) {
  const HChar* name;
  UWord framePlus1 = 0;
  IRTemp sp = newIRTemp(out->tyenv, Ity_I64);
  if (VG_(get_fnname_if_entry)(VG_(current_DiEpoch)(), entry, &name) && tracked_object(entry))
    framePlus1 = intern_frame(entry, name) + 1;
  addStmtToIRSB(out, IRStmt_WrTmp(sp, IRExpr_Get(layout->offset_SP, Ity_I64)));
  add_call(out, "on_block", on_block, IRExpr_RdTmp(sp), mkIRExpr_HWord(framePlus1), 0);
}

static void instrument_dirty(IRSB* out, const IRDirty* d) {
  if (d->mFx == Ifx_None) return;
  if (d->mFx == Ifx_Read || d->mFx == Ifx_Modify) add_read(out, d->mAddr, d->mSize, 0);
  if (d->mFx == Ifx_Write || d->mFx == Ifx_Modify) add_write(out, d->mAddr, d->mSize, 0);
}

static void instrument_stmt(IRSB* out, IRStmt* st, UInt* pending) {
  switch (st->tag) {
    case Ist_IMark:
      (*pending)++;
      break;
    case Ist_WrTmp:
      if (st->Ist.WrTmp.data->tag == Iex_Load)
        add_read(out, st->Ist.WrTmp.data->Iex.Load.addr, sizeofIRType(st->Ist.WrTmp.data->Iex.Load.ty), 0);
      break;
    case Ist_Store:
      add_write(out, st->Ist.Store.addr, sizeofIRType(typeOfIRExpr(out->tyenv, st->Ist.Store.data)), 0);
      break;
    case Ist_StoreG:
      add_write(out, st->Ist.StoreG.details->addr, sizeofIRType(typeOfIRExpr(out->tyenv, st->Ist.StoreG.details->data)),
                st->Ist.StoreG.details->guard);
      break;
    case Ist_LoadG: {
      IRType ty, arg;
      typeOfIRLoadGOp(st->Ist.LoadG.details->cvt, &ty, &arg);
      add_read(out, st->Ist.LoadG.details->addr, sizeofIRType(arg), st->Ist.LoadG.details->guard);
      break;
    }
    case Ist_Dirty:
      instrument_dirty(out, st->Ist.Dirty.details);
      break;
    case Ist_CAS: {
      const IRCAS* cas = st->Ist.CAS.details;
      Int size = sizeofIRType(typeOfIRExpr(out->tyenv, cas->dataLo)) * (cas->dataHi ? 2 : 1);
      add_read(out, cas->addr, size, 0);
      add_write(out, cas->addr, size, 0);
      break;
    }
    case Ist_LLSC:
      if (st->Ist.LLSC.storedata == NULL)
        add_read(out, st->Ist.LLSC.addr, sizeofIRType(typeOfIRTemp(out->tyenv, st->Ist.LLSC.result)), 0);
      else
        add_write(out, st->Ist.LLSC.addr, sizeofIRType(typeOfIRExpr(out->tyenv, st->Ist.LLSC.storedata)), 0);
      break;
    case Ist_Exit:
      add_instr_count(out, *pending);
      *pending = 0;
      break;
    default:
      break;
  }
  addStmtToIRSB(out, st);
}

static IRSB* mem_instrument(VgCallbackClosure* closure, IRSB* in, const VexGuestLayout* layout,
                            const VexGuestExtents* vge, const VexArchInfo* archinfo, IRType gWordTy, IRType hWordTy) {
  IRSB* out = deepCopyIRSBExceptStmts(in);
  UInt pending = 0;
  Int i = 0;
  while (i < in->stmts_used && in->stmts[i]->tag != Ist_IMark) addStmtToIRSB(out, in->stmts[i++]);
  add_block_entry(out, layout, (Addr)vge->base[0]);
  for (; i < in->stmts_used; ++i) instrument_stmt(out, in->stmts[i], &pending);
  add_instr_count(out, pending);
  return out;
}

/* ---- tool interface ---- */
static Bool is_power_of_two(Long v) { return v > 0 && (v & (v - 1)) == 0; }

static UInt log2_of(Long v) {
  UInt s = 0;
  while ((1LL << s) < v) s++;
  return s;
}

static Bool mem_process_cmd_line_option(const HChar* arg) {
  const HChar* tmp;
  if VG_STR_CLO (arg, "--out-dir", tmp) {
    clo_out_dir = tmp;
  } else if VG_BOOL_CLO (arg, "--footprint", clo_footprint) {
  } else if VG_BINT_CLO (arg, "--footprint-block", clo_fp_block, 1, 1 << 20) {
  } else if VG_BINT_CLO (arg, "--footprint-precision", clo_fp_precision, 1, 100) {
  } else if VG_BINT_CLO (arg, "--cell", clo_cell, 1, 64) {
  } else if VG_BOOL_CLO (arg, "--interleave", clo_interleave) {
  } else if VG_BOOL_CLO (arg, "--time", clo_time) {
  } else if VG_STR_CLO (arg, "--routines", tmp) {
    if (VG_(strcmp)(tmp, "all") == 0)
      clo_all_routines = True;
    else if (VG_(strcmp)(tmp, "program") == 0)
      clo_all_routines = False;
    else
      VG_(fmsg_bad_option)(arg, "must be program or all\n");
  } else if VG_STR_CLO (arg, "--routine-object", tmp) {
    VG_(addToXA)(clo_objects, &tmp);
  } else if VG_STR_CLO (arg, "--routine-library", tmp) {
    VG_(addToXA)(clo_libraries, &tmp);
  } else {
    return False;
  }
  return True;
}

static void mem_print_usage(void) {
  VG_(printf)
  ("    --out-dir=DIR               directory of the per-thread .cspmem files [.]\n"
   "    --cell=N                    bytes per memory cell of RMS/TRMS, a power of two [4]\n"
   "    --footprint=yes|no          all-window footprint per thread [yes]\n"
   "    --footprint-block=N         bytes per footprint block, a power of two [64]\n"
   "    --footprint-precision=P     guaranteed precision c of the footprint, in percent [90]\n"
   "    --time=yes|no               thread CPU time per activation [yes]\n"
   "    --routines=program|all      activations of the program's routines only, or of every routine [program]\n"
   "    --routine-object=PATH       an object of the program (repeatable) [the executable]\n"
   "    --routine-library=NAME      also the routines of libraries whose file name starts with NAME (repeatable)\n");
}

static void mem_print_debug_usage(void) {}

static void mem_post_clo_init(void) {
  if (!is_power_of_two(clo_cell) || !is_power_of_two(clo_fp_block))
    VG_(fmsg_bad_option)("--cell / --footprint-block", "must be a power of two\n");
  cell_shift = log2_of(clo_cell);
  block_shift = log2_of(clo_fp_block);
  wts = shadow_new(cell_shift);
  threads = VG_(calloc)("csp.threads", VG_N_THREADS, sizeof(Thread*));
  if (clo_time) measure_clock_cost();
  if (clo_footprint && clo_interleave) {
    FpHost host;
    host.alloc = fp_alloc;
    host.release = fp_release;
    host.lastAccess = fp_last;
    host.ctx = 0; /* the interleaving keeps no last accesses */
    il_init(&interleave, host, (unsigned)clo_fp_precision);
    interleaveLive = True;
  }
}

static void mem_fini(Int exitcode) {
  Int i;
  for (i = 0; i < VG_N_THREADS; ++i)
    if (threads[i]) {
      if (threads[i] == cur) {
        cur->instrs += g_instrs - cur->switchedIn;
        cur->switchedIn = g_instrs;
      }
      thread_finish(threads[i]);
    }
  if (VG_(clo_verbosity) > 1) VG_(umsg)("csp-mem: %llu threads, %llu instructions\n", peak_threads, g_instrs);
}

static void mem_pre_clo_init(void) {
  VG_(details_name)("csp-mem");
  VG_(details_version)("1");
  VG_(details_description)("CSP memory-access profiles: input-sensitive costs and footprints");
  VG_(details_copyright_author)("CSP authors");
  VG_(details_bug_reports_to)("the CSP repository");
  VG_(details_avg_translation_sizeB)(400);
  VG_(basic_tool_funcs)(mem_post_clo_init, mem_instrument, mem_fini);
  VG_(needs_command_line_options)(mem_process_cmd_line_option, mem_print_usage, mem_print_debug_usage);
  VG_(track_pre_mem_read)(on_kernel_read);
  VG_(track_pre_mem_read_asciiz)(on_kernel_read_asciiz);
  VG_(track_post_mem_write)(on_kernel_write);
  VG_(track_start_client_code)(on_start_client_code);
  VG_(track_pre_thread_ll_exit)(on_thread_exit);
  /* A routine's entry must start a superblock to be seen: no chasing across jumps. */
  VG_(clo_vex_control).guest_chase = False;
  frames = VG_(newXA)(VG_(malloc), "csp.frames", VG_(free), sizeof(Frame));
  clo_objects = VG_(newXA)(VG_(malloc), "csp.clo", VG_(free), sizeof(HChar*));
  clo_libraries = VG_(newXA)(VG_(malloc), "csp.clo", VG_(free), sizeof(HChar*));
  map_init(&frame_ids);
}

VG_DETERMINE_INTERFACE_VERSION(mem_pre_clo_init)
