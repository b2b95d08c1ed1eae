/* All-window footprint of one thread's block trace, c-approximate (Ding and Chilimbi, "All-Window
 * Profiling of Concurrent Executions", section 3; docs/memory-profiles.md).
 *
 * Plain C with no library calls, so that the Valgrind tool (no libc) and the unit tests compile
 * the same code: the caller provides the allocator and the map from a block to the slot holding
 * the time of its last access.
 *
 * At access i the trace 1..i is divided into time ranges, each holding the number of blocks
 * whose last access lies in it (Bennett and Kruskal's last accesses). Every window ending at i
 * that starts in range j has footprint S_j + (last accesses of range j at or after its start),
 * where S_j counts the last accesses of the ranges after j; the windows of a one-time range get
 * that exactly, the others get the lower bound S_j. Ranges are merged only while
 * count_j <= (1 - c) / c * S_j, which keeps S_j >= c x the true footprint; S_j only grows and
 * count_j only shrinks later, so the bound holds for every later access too.
 *
 * The (window length, footprint) counts go to a 2-D histogram on the log-linear 8-wide bins of
 * csp::metrics::LogLinearHistogram. A range adds a run of window lengths with one footprint (a
 * trapezoid of lengths for a run of repeated accesses to one block); runs are added in O(1)
 * through difference arrays over the length bins.
 */
#ifndef CSP_MEM_FOOTPRINT_H
#define CSP_MEM_FOOTPRINT_H

#ifdef __cplusplus
extern "C" {
#endif

typedef unsigned long long fp_u64;
typedef long long fp_i64;

#define FP_LENGTH_BINS 496u
#define FP_SIZE_BINS 496u

typedef struct {
  fp_u64 start; /* first access time of the range; it ends where the next one starts */
  fp_u64 count; /* last accesses in it */
} FpRange;

typedef struct {
  void* (*alloc)(void* ctx, fp_u64 bytes); /* zeroed memory */
  void (*release)(void* ctx, void* p);
  fp_u64* (*lastAccess)(void* ctx, fp_u64 block); /* zero-initialised slot per block */
  void* ctx;
} FpHost;

typedef struct {
  FpHost host;
  unsigned precisionPct; /* c in percent, 1..100 */
  fp_u64 now;            /* accesses so far */
  fp_u64 blocks;         /* distinct blocks */
  FpRange* ranges;
  unsigned rangeCount, rangeCap, compressAt;
  /* Repeated accesses to one block (a scan through a cache line) change no footprint: the
     windows ending at them are those ending at the run's first access, one longer. A run is
     counted in one pass over the ranges when it ends (fp_flush). */
  fp_u64 lastBlock;
  fp_u64 base;     /* time of the run's first access */
  fp_u64 repeats;  /* accesses of the run after the first */
  int baseCounted; /* the windows ending at `base` are already counted */
  /* Per footprint bin, over the length bins: exact window counts, and the difference arrays of
     the coefficients of runs alpha + beta x length spanning whole bins. Allocated on first use. */
  fp_u64* exact[FP_SIZE_BINS];
  fp_i64* alpha[FP_SIZE_BINS];
  fp_i64* beta[FP_SIZE_BINS];
} Footprint;

unsigned fp_bin(fp_u64 value);
fp_u64 fp_bin_lower(unsigned bin);
fp_u64 fp_bin_upper(unsigned bin);

void fp_init(Footprint* fp, FpHost host, unsigned precisionPct);
void fp_access(Footprint* fp, fp_u64 block);
/* Counts the windows of a pending run of repeated accesses (fp_row calls it). */
void fp_flush(Footprint* fp);
/* Fills out[l] with the windows of footprint bin `sizeBin` and length bin l; returns 0 when no
   window has that footprint bin. Valid at any time. */
int fp_row(Footprint* fp, unsigned sizeBin, fp_u64 out[FP_LENGTH_BINS]);
void fp_free(Footprint* fp);

/* The interleaving of two threads over all windows of their merged trace (Ding and Chilimbi,
   section 2): a window's degree is the smaller of the two threads' access counts in it (0 when
   one thread runs alone, half the length when they alternate evenly). Same ranges and guarantee
   as the footprint: c x degree <= measured <= degree for every window. */
typedef struct {
  fp_u64 start, first, second; /* accesses of each thread in the range */
} IlRange;

typedef struct {
  Footprint hist; /* only its histogram is used */
  unsigned precisionPct;
  fp_u64 now;
  fp_u64 accesses[2];
  IlRange* ranges;
  unsigned rangeCount, rangeCap, compressAt;
} Interleave;

void il_init(Interleave* il, FpHost host, unsigned precisionPct);
void il_access(Interleave* il, int second); /* an access by the first (0) or second (1) thread */
int il_row(Interleave* il, unsigned degreeBin, fp_u64 out[FP_LENGTH_BINS]);
void il_free(Interleave* il);

#ifdef __cplusplus
}
#endif

#endif
