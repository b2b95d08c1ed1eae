#include "csp/metrics/encoding.hpp"

#include <bit>
#include <cmath>
#include <cstring>

namespace csp::metrics {

namespace {

void putVarint(std::string& out, Uint128 v) {
  while (v >= 0x80) {
    out.push_back(static_cast<char>(static_cast<unsigned char>(v) | 0x80));
    v >>= 7;
  }
  out.push_back(static_cast<char>(static_cast<unsigned char>(v)));
}

void putDouble(std::string& out, double v) {
  auto bits = std::bit_cast<std::uint64_t>(v);
  for (int i = 0; i < 8; ++i, bits >>= 8) out.push_back(static_cast<char>(bits & 0xff));
}

class Reader {
 public:
  Reader(std::string_view bytes, const char* what) : bytes_(bytes), what_(what) {}

  [[noreturn]] void fail(const std::string& defect) const {
    throw DecodeError(std::string(what_) + ": " + defect + " (at byte " + std::to_string(pos_) + " of " +
                      std::to_string(bytes_.size()) + ")");
  }

  void expectTag(unsigned char tag) {
    if (bytes_.empty()) fail("empty value");
    const auto got = static_cast<unsigned char>(bytes_[0]);
    if ((got & 0xf0) != (tag & 0xf0)) fail("wrong type tag " + std::to_string(got));
    if (got != tag) fail("unsupported encoding version " + std::to_string(got & 0x0f));
    pos_ = 1;
  }

  // LEB128 of at most `bits` significant bits; rejects truncation, overlong forms (a redundant
  // trailing zero group) and values that do not fit.
  Uint128 varint(unsigned bits) {
    Uint128 v = 0;
    unsigned shift = 0;
    while (true) {
      if (pos_ >= bytes_.size()) fail("truncated varint");
      const auto byte = static_cast<unsigned char>(bytes_[pos_++]);
      const Uint128 group = byte & 0x7f;
      if (shift >= bits || (shift > 0 && bits - shift < 7 && (group >> (bits - shift)) != 0))
        fail("varint does not fit " + std::to_string(bits) + " bits");
      v |= group << shift;
      if ((byte & 0x80) == 0) {
        if (byte == 0 && shift > 0) fail("overlong varint");
        return v;
      }
      shift += 7;
    }
  }
  std::uint64_t u64() { return static_cast<std::uint64_t>(varint(64)); }
  std::uint32_t u32() { return static_cast<std::uint32_t>(varint(32)); }

  double real() {
    if (bytes_.size() - pos_ < 8) fail("truncated double");
    std::uint64_t bits = 0;
    for (int i = 7; i >= 0; --i) bits = (bits << 8) | static_cast<unsigned char>(bytes_[pos_ + i]);
    pos_ += 8;
    const double v = std::bit_cast<double>(bits);
    if (std::isnan(v)) fail("NaN");
    return v;
  }

  void expectEnd() const {
    if (pos_ != bytes_.size()) fail("trailing bytes");
  }

 private:
  std::string_view bytes_;
  const char* what_;
  std::size_t pos_ = 0;
};

}  // namespace

// Friend of the encoded classes: the only code besides theirs that sees their fields.
class AccumulatorCodec {
 public:
  // IntAccumulator v1: tag, count, instances; if count > 0: sum, sumSqLow, sumSqHigh, min,
  // max - min, argmin, argmax. An empty accumulator needs no more: its other fields are fixed.
  static std::string encode(const IntAccumulator& a) {
    std::string out(1, static_cast<char>(kIntAccumulatorTag));
    putVarint(out, a.count_);
    putVarint(out, a.instances_);
    if (a.count_ == 0) return out;
    putVarint(out, a.sum_);
    putVarint(out, a.sumSqLow_);
    putVarint(out, a.sumSqHigh_);
    putVarint(out, a.min_);
    putVarint(out, a.max_ - a.min_);
    putVarint(out, a.argmin_);
    putVarint(out, a.argmax_);
    return out;
  }

  static IntAccumulator decodeInt(std::string_view bytes) {
    Reader r(bytes, "integer accumulator");
    r.expectTag(kIntAccumulatorTag);
    IntAccumulator a;
    a.count_ = r.u64();
    a.instances_ = r.u64();
    if (a.count_ == 0) {
      r.expectEnd();
      return a;
    }
    a.sum_ = r.varint(128);
    a.sumSqLow_ = r.varint(128);
    a.sumSqHigh_ = r.u64();
    a.min_ = r.u64();
    const std::uint64_t spread = r.u64();
    a.argmin_ = r.u32();
    a.argmax_ = r.u32();
    r.expectEnd();
    if (a.instances_ == 0) r.fail("values but no instances");
    if (a.min_ == 0) r.fail("zero minimum (zeros are never accumulated)");
    if (__builtin_add_overflow(a.min_, spread, &a.max_)) r.fail("maximum overflows");
    if (a.argmin_ == kNoIndex || a.argmax_ == kNoIndex) r.fail("missing argmin/argmax");
    // The sum must lie in [count*min, count*max] (products < 2^128), and every value >= 1 makes
    // the sum of squares at least the sum.
    if (a.sum_ < static_cast<Uint128>(a.count_) * a.min_ || a.sum_ > static_cast<Uint128>(a.count_) * a.max_)
      r.fail("sum inconsistent with count, min and max");
    if (a.sumSqHigh_ == 0 && a.sumSqLow_ < a.sum_) r.fail("sum of squares smaller than sum");
    if (a.count_ == 1 && (a.min_ != a.max_ || a.argmin_ != a.argmax_ || a.sumSqHigh_ != 0 ||
                          a.sumSqLow_ != static_cast<Uint128>(a.min_) * a.min_))
      r.fail("single value inconsistent");
    return a;
  }

  // RealAccumulator v1: tag, count, instances; if count > 0: mean, m2, min, max as doubles,
  // argmin, argmax.
  static std::string encode(const RealAccumulator& a) {
    std::string out(1, static_cast<char>(kRealAccumulatorTag));
    putVarint(out, a.count_);
    putVarint(out, a.instances_);
    if (a.count_ == 0) return out;
    putDouble(out, a.mean_);
    putDouble(out, a.m2_);
    putDouble(out, a.min_);
    putDouble(out, a.max_);
    putVarint(out, a.argmin_);
    putVarint(out, a.argmax_);
    return out;
  }

  static RealAccumulator decodeReal(std::string_view bytes) {
    Reader r(bytes, "real accumulator");
    r.expectTag(kRealAccumulatorTag);
    RealAccumulator a;
    a.count_ = r.u64();
    a.instances_ = r.u64();
    if (a.count_ == 0) {
      r.expectEnd();
      return a;
    }
    a.mean_ = r.real();
    a.m2_ = r.real();
    a.min_ = r.real();
    a.max_ = r.real();
    a.argmin_ = r.u32();
    a.argmax_ = r.u32();
    r.expectEnd();
    if (a.instances_ == 0) r.fail("values but no instances");
    if (!std::isfinite(a.mean_) || !std::isfinite(a.m2_) || !std::isfinite(a.min_) || !std::isfinite(a.max_))
      r.fail("non-finite field");
    if (a.m2_ < 0) r.fail("negative M2");
    if (a.min_ > a.max_) r.fail("minimum above maximum");
    if (a.argmin_ == kNoIndex || a.argmax_ == kNoIndex) r.fail("missing argmin/argmax");
    return a;
  }

  // Histogram v1: tag, number of bins n; n times (gap, count) where gap is the bin index for the
  // first entry and (bin - previous bin - 1) after it, so bins strictly increase by construction.
  static std::string encode(const LogLinearHistogram& h) {
    std::string out(1, static_cast<char>(kHistogramTag));
    putVarint(out, h.bins_.size());
    std::uint32_t next = 0;
    for (const auto& [bin, count] : h.bins_) {
      putVarint(out, bin - next);
      putVarint(out, count);
      next = bin + 1;
    }
    return out;
  }

  static LogLinearHistogram decodeHistogram(std::string_view bytes) {
    Reader r(bytes, "histogram");
    r.expectTag(kHistogramTag);
    LogLinearHistogram h;
    const std::uint64_t n = r.u64();
    if (n > LogLinearHistogram::kBinCount) r.fail("more entries than bins");
    std::uint64_t next = 0;
    for (std::uint64_t i = 0; i < n; ++i) {
      const std::uint64_t bin = next + r.u32();
      if (bin >= LogLinearHistogram::kBinCount) r.fail("bin index out of range");
      const std::uint64_t count = r.u64();
      if (count == 0) r.fail("empty bin stored");
      if (__builtin_add_overflow(h.total_, count, &h.total_)) r.fail("total count overflows");
      h.bins_.emplace_back(static_cast<std::uint32_t>(bin), count);
      next = bin + 1;
    }
    r.expectEnd();
    return h;
  }
};

std::string encode(const IntAccumulator& accumulator) { return AccumulatorCodec::encode(accumulator); }
std::string encode(const RealAccumulator& accumulator) { return AccumulatorCodec::encode(accumulator); }
std::string encode(const LogLinearHistogram& histogram) { return AccumulatorCodec::encode(histogram); }

IntAccumulator decodeIntAccumulator(std::string_view bytes) { return AccumulatorCodec::decodeInt(bytes); }
RealAccumulator decodeRealAccumulator(std::string_view bytes) { return AccumulatorCodec::decodeReal(bytes); }
LogLinearHistogram decodeHistogram(std::string_view bytes) { return AccumulatorCodec::decodeHistogram(bytes); }

}  // namespace csp::metrics
