/* See footprint.h. */
#include "footprint.h"

__extension__ typedef __int128 fp_i128; /* exact sums of runs (GCC, also in the tool) */

unsigned fp_bin(fp_u64 value) {
  if (value < 8) return (unsigned)value;
  unsigned e = 63u - (unsigned)__builtin_clzll(value);
  return 8u * (e - 2u) + (unsigned)((value >> (e - 3u)) & 7u);
}

fp_u64 fp_bin_lower(unsigned bin) {
  if (bin < 8) return bin;
  unsigned e = bin / 8u + 2u;
  return (8ull + (bin & 7u)) << (e - 3u);
}

fp_u64 fp_bin_upper(unsigned bin) {
  if (bin < 8) return bin;
  unsigned e = bin / 8u + 2u;
  return fp_bin_lower(bin) + ((1ull << (e - 3u)) - 1u);
}

void fp_init(Footprint* fp, FpHost host, unsigned precisionPct) {
  unsigned i;
  fp->host = host;
  fp->precisionPct = precisionPct < 1 ? 1 : precisionPct > 100 ? 100 : precisionPct;
  fp->now = 0;
  fp->blocks = 0;
  fp->rangeCap = 64;
  fp->rangeCount = 0;
  fp->compressAt = 32;
  fp->ranges = (FpRange*)host.alloc(host.ctx, sizeof(FpRange) * fp->rangeCap);
  fp->lastBlock = 0;
  fp->base = 0;
  fp->repeats = 0;
  fp->baseCounted = 1;
  for (i = 0; i < FP_SIZE_BINS; ++i) {
    fp->exact[i] = 0;
    fp->alpha[i] = 0;
    fp->beta[i] = 0;
  }
}

static void fp_row_alloc(Footprint* fp, unsigned sizeBin) {
  if (fp->exact[sizeBin]) return;
  fp->exact[sizeBin] = (fp_u64*)fp->host.alloc(fp->host.ctx, sizeof(fp_u64) * FP_LENGTH_BINS);
  fp->alpha[sizeBin] = (fp_i64*)fp->host.alloc(fp->host.ctx, sizeof(fp_i64) * (FP_LENGTH_BINS + 1));
  fp->beta[sizeBin] = (fp_i64*)fp->host.alloc(fp->host.ctx, sizeof(fp_i64) * (FP_LENGTH_BINS + 1));
}

/* sum of alpha + beta * l over l = x..y */
static fp_u64 fp_linear_sum(fp_i64 a, fp_i64 b, fp_u64 x, fp_u64 y) {
  fp_i128 n = (fp_i128)(y - x + 1);
  return (fp_u64)(a * n + b * ((fp_i128)x + (fp_i128)y) * n / 2);
}

/* Windows of lengths x..y, alpha + beta * length of each length, all of footprint `size`. */
static void fp_add_linear(Footprint* fp, fp_u64 size, fp_u64 x, fp_u64 y, fp_i64 a, fp_i64 b) {
  unsigned f = fp_bin(size), lb, hb;
  if (x > y) return;
  lb = fp_bin(x);
  hb = fp_bin(y);
  fp_row_alloc(fp, f);
  if (lb == hb) {
    fp->exact[f][lb] += fp_linear_sum(a, b, x, y);
    return;
  }
  fp->exact[f][lb] += fp_linear_sum(a, b, x, fp_bin_upper(lb));
  fp->exact[f][hb] += fp_linear_sum(a, b, fp_bin_lower(hb), y);
  if (hb > lb + 1) {
    fp->alpha[f][lb + 1] += a;
    fp->alpha[f][hb] -= a;
    fp->beta[f][lb + 1] += b;
    fp->beta[f][hb] -= b;
  }
}

/* The windows of lengths lo..hi, each shifted by 0..shifts-1 (the same windows ending at the
   accesses of a run): a trapezoid of weights rising by one, flat at min(width, shifts), falling. */
static void fp_add_trapezoid(Footprint* fp, fp_u64 size, fp_u64 lo, fp_u64 hi, fp_u64 shifts) {
  fp_u64 width = hi - lo + 1, m = width < shifts ? width : shifts, top = hi + shifts - 1;
  fp_add_linear(fp, size, lo, lo + m - 2, (fp_i64)(1 - lo), 1);
  fp_add_linear(fp, size, lo + m - 1, top - m + 1, (fp_i64)m, 0);
  fp_add_linear(fp, size, top - m + 2, top, (fp_i64)(top + 1), -1);
}

/* The range holding time t (ranges are sorted by start; t >= ranges[0].start). */
static unsigned fp_find(const Footprint* fp, fp_u64 t) {
  unsigned lo = 0, hi = fp->rangeCount - 1;
  while (lo < hi) {
    unsigned mid = (lo + hi + 1) / 2;
    if (fp->ranges[mid].start <= t)
      lo = mid;
    else
      hi = mid - 1;
  }
  return lo;
}

/* Merges adjacent ranges, newest to oldest, while the merged range keeps
   count * c <= (1 - c) * (last accesses after it). */
static void fp_compress(Footprint* fp) {
  const fp_u64 c = fp->precisionPct, rest = 100u - fp->precisionPct;
  unsigned out = fp->rangeCount - 1; /* write position, filled downwards */
  FpRange cur = fp->ranges[fp->rangeCount - 1];
  fp_u64 after = 0;
  int j;
  for (j = (int)fp->rangeCount - 2; j >= 0; --j) {
    FpRange older = fp->ranges[j];
    if ((cur.count + older.count) * c <= rest * after) {
      cur.start = older.start;
      cur.count += older.count;
    } else {
      fp->ranges[out--] = cur;
      after += cur.count;
      cur = older;
    }
  }
  fp->ranges[out] = cur;
  {
    unsigned kept = fp->rangeCount - out, i;
    for (i = 0; i < kept; ++i) fp->ranges[i] = fp->ranges[out + i];
    fp->rangeCount = kept;
  }
  fp->compressAt = 2 * fp->rangeCount + 32;
}

static void fp_push_range(Footprint* fp) {
  if (fp->rangeCount == fp->rangeCap) {
    FpRange* grown = (FpRange*)fp->host.alloc(fp->host.ctx, sizeof(FpRange) * fp->rangeCap * 2);
    unsigned i;
    for (i = 0; i < fp->rangeCount; ++i) grown[i] = fp->ranges[i];
    fp->host.release(fp->host.ctx, fp->ranges);
    fp->ranges = grown;
    fp->rangeCap *= 2;
  }
  fp->ranges[fp->rangeCount].start = fp->now;
  fp->ranges[fp->rangeCount].count = 1;
  fp->rangeCount++;
}

/* The windows ending at the accesses base+t of the current run, t from 0 (or 1 when the base's
   are counted) to repeats: per range, its lengths at the base shifted by t; and the windows
   inside the run (footprint 1). Then the ranges as of the run's last access. */
void fp_flush(Footprint* fp) {
  const fp_u64 first = fp->baseCounted ? 1 : 0, k = fp->repeats, base = fp->base;
  fp_u64 after = 0, end = base;
  int j;
  if (fp->now == 0 || first > k) return;
  for (j = (int)fp->rangeCount - 1; j >= 0; --j) {
    const FpRange* r = &fp->ranges[j];
    fp_u64 size = r->start == end ? after + r->count : after;
    fp_add_trapezoid(fp, size, base - end + 1 + first, base - r->start + 1 + first, k - first + 1);
    after += r->count;
    end = r->start - 1;
  }
  if (k > 0) {
    fp_add_linear(fp, 1, 1, k, (fp_i64)(k + 1), -1);
    /* base..now-1 hold no last access any more; the run's last access is a range of its own */
    fp->ranges[fp->rangeCount - 1].count = 0;
    fp_push_range(fp);
    *fp->host.lastAccess(fp->host.ctx, fp->lastBlock) = fp->now;
  }
  fp->base = fp->now;
  fp->repeats = 0;
  fp->baseCounted = 1;
}

void fp_access(Footprint* fp, fp_u64 block) {
  fp_u64* last;
  if (fp->now > 0 && block == fp->lastBlock) {
    fp->now++;
    fp->repeats++;
    return;
  }
  fp_flush(fp);
  last = fp->host.lastAccess(fp->host.ctx, block);
  fp->now++;
  if (*last)
    fp->ranges[fp_find(fp, *last)].count--;
  else
    fp->blocks++;
  *last = fp->now;
  fp_push_range(fp);
  fp->lastBlock = block;
  fp->base = fp->now;
  fp->repeats = 0;
  fp->baseCounted = 0;
  if (fp->rangeCount >= fp->compressAt) fp_compress(fp);
}

int fp_row(Footprint* fp, unsigned sizeBin, fp_u64 out[FP_LENGTH_BINS]) {
  fp_i64 a = 0, b = 0;
  unsigned l;
  fp_flush(fp);
  if (sizeBin >= FP_SIZE_BINS || !fp->exact[sizeBin]) return 0;
  for (l = 0; l < FP_LENGTH_BINS; ++l) {
    fp_i128 lower = fp_bin_lower(l), width = (fp_i128)(fp_bin_upper(l) - fp_bin_lower(l)) + 1;
    a += fp->alpha[sizeBin][l];
    b += fp->beta[sizeBin][l];
    out[l] = fp->exact[sizeBin][l] + (fp_u64)(a * width + b * (2 * lower + width - 1) * width / 2);
  }
  return 1;
}

void fp_free(Footprint* fp) {
  unsigned i;
  for (i = 0; i < FP_SIZE_BINS; ++i) {
    if (!fp->exact[i]) continue;
    fp->host.release(fp->host.ctx, fp->exact[i]);
    fp->host.release(fp->host.ctx, fp->alpha[i]);
    fp->host.release(fp->host.ctx, fp->beta[i]);
  }
  fp->host.release(fp->host.ctx, fp->ranges);
}

/* ---- interleaving ---- */

void il_init(Interleave* il, FpHost host, unsigned precisionPct) {
  fp_init(&il->hist, host, precisionPct);
  il->precisionPct = il->hist.precisionPct;
  il->now = 0;
  il->accesses[0] = il->accesses[1] = 0;
  il->rangeCap = 64;
  il->rangeCount = 0;
  il->compressAt = 32;
  il->ranges = (IlRange*)host.alloc(host.ctx, sizeof(IlRange) * il->rangeCap);
}

static fp_u64 il_min(fp_u64 a, fp_u64 b) { return a < b ? a : b; }

/* Merges adjacent ranges, newest to oldest, while the merged range's count of each thread stays
   within (1 - c) / c of that thread's accesses after it. */
static void il_compress(Interleave* il) {
  const fp_u64 c = il->precisionPct, rest = 100u - il->precisionPct;
  unsigned out = il->rangeCount - 1, kept, i;
  IlRange cur = il->ranges[il->rangeCount - 1];
  fp_u64 after0 = 0, after1 = 0;
  int j;
  for (j = (int)il->rangeCount - 2; j >= 0; --j) {
    IlRange older = il->ranges[j];
    if ((cur.first + older.first) * c <= rest * after0 && (cur.second + older.second) * c <= rest * after1) {
      cur.start = older.start;
      cur.first += older.first;
      cur.second += older.second;
    } else {
      il->ranges[out--] = cur;
      after0 += cur.first;
      after1 += cur.second;
      cur = older;
    }
  }
  il->ranges[out] = cur;
  kept = il->rangeCount - out;
  for (i = 0; i < kept; ++i) il->ranges[i] = il->ranges[out + i];
  il->rangeCount = kept;
  il->compressAt = 2 * il->rangeCount + 32;
}

void il_access(Interleave* il, int second) {
  fp_u64 after0 = 0, after1 = 0, end;
  int j;
  if (il->rangeCount == il->rangeCap) {
    IlRange* grown = (IlRange*)il->hist.host.alloc(il->hist.host.ctx, sizeof(IlRange) * il->rangeCap * 2);
    unsigned i;
    for (i = 0; i < il->rangeCount; ++i) grown[i] = il->ranges[i];
    il->hist.host.release(il->hist.host.ctx, il->ranges);
    il->ranges = grown;
    il->rangeCap *= 2;
  }
  il->now++;
  il->accesses[second ? 1 : 0]++;
  il->ranges[il->rangeCount].start = il->now;
  il->ranges[il->rangeCount].first = second ? 0 : 1;
  il->ranges[il->rangeCount].second = second ? 1 : 0;
  il->rangeCount++;
  /* every window ending now: exact for one-access ranges, the lower bound for the others */
  end = il->now;
  for (j = (int)il->rangeCount - 1; j >= 0; --j) {
    const IlRange* r = &il->ranges[j];
    fp_u64 degree = r->start == end ? il_min(after0 + r->first, after1 + r->second) : il_min(after0, after1);
    fp_add_linear(&il->hist, degree, il->now - end + 1, il->now - r->start + 1, 1, 0);
    after0 += r->first;
    after1 += r->second;
    end = r->start - 1;
  }
  if (il->rangeCount >= il->compressAt) il_compress(il);
}

int il_row(Interleave* il, unsigned degreeBin, fp_u64 out[FP_LENGTH_BINS]) { return fp_row(&il->hist, degreeBin, out); }

void il_free(Interleave* il) {
  il->hist.host.release(il->hist.host.ctx, il->ranges);
  fp_free(&il->hist);
}
