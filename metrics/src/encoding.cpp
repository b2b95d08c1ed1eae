#include "csp/metrics/encoding.hpp"

#include "csp/storage/bytes.hpp"

#include <bit>
#include <cmath>
#include <cstring>

namespace csp::metrics {

namespace {

using storage::putDouble;
using storage::putVarint;

// The one byte codec (csp/storage/bytes.hpp), with the type tag every encoding starts with.
class Reader : public storage::ByteReader<DecodeError> {
 public:
  using ByteReader::ByteReader;
  void expectTag(unsigned char tag) {
    if (done()) fail("empty value");
    const auto got = u8();
    if ((got & 0xf0) != (tag & 0xf0)) fail("wrong type tag " + std::to_string(got));
    if (got != tag) fail("unsupported encoding version " + std::to_string(got & 0x0f));
  }
};

}  // namespace

// Friend of the encoded classes: the only code besides theirs that sees their fields.
class AccumulatorCodec {
 public:
  // IntAccumulator v1: tag, count, instances; if count > 0: sum, sumSqLow, sumSqHigh, min,
  // max - min, argmin, argmax. An empty accumulator needs no more: its other fields are fixed.
  // Made in a buffer of the largest size and copied into the string once (appended varint by
  // varint, the string grew twice for most accumulators).
  static std::string encode(const IntAccumulator& a) {
    char bytes[1 + 10 + 10 + 19 + 19 + 10 + 10 + 10 + 5 + 5];
    char* at = bytes;
    *at++ = static_cast<char>(kIntAccumulatorTag);
    at = storage::varintAt(at, a.count_);
    at = storage::varintAt(at, a.instances_);
    if (a.count_ != 0) {
      at = storage::varint128At(at, a.sum_);
      at = storage::varint128At(at, a.sumSqLow_);
      at = storage::varintAt(at, a.sumSqHigh_);
      at = storage::varintAt(at, a.min_);
      at = storage::varintAt(at, a.max_ - a.min_);
      at = storage::varintAt(at, std::uint64_t{a.argmin_});
      at = storage::varintAt(at, std::uint64_t{a.argmax_});
    }
    return {bytes, static_cast<std::size_t>(at - bytes)};
  }

  static IntAccumulator decodeInt(std::string_view bytes) {
    Reader r(bytes, "integer accumulator");
    r.expectTag(kIntAccumulatorTag);
    IntAccumulator a;
    a.count_ = r.u64();
    a.instances_ = r.u64();
    if (a.count_ == 0) {
      r.expectDone();
      return a;
    }
    a.sum_ = r.varint(128);
    a.sumSqLow_ = r.varint(128);
    a.sumSqHigh_ = r.u64();
    a.min_ = r.u64();
    const std::uint64_t spread = r.u64();
    a.argmin_ = r.u32();
    a.argmax_ = r.u32();
    r.expectDone();
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
      r.expectDone();
      return a;
    }
    a.mean_ = r.real();
    a.m2_ = r.real();
    a.min_ = r.real();
    a.max_ = r.real();
    a.argmin_ = r.u32();
    a.argmax_ = r.u32();
    r.expectDone();
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
    std::string out(1 + 10 + 20 * h.bins_.size(), '\0');  // room for the largest bins, cut below
    char* at = out.data();
    *at++ = static_cast<char>(kHistogramTag);
    at = storage::varintAt(at, std::uint64_t{h.bins_.size()});
    std::uint32_t next = 0;
    for (const auto& [bin, count] : h.bins_) {
      at = storage::varintAt(at, std::uint64_t{bin - next});
      at = storage::varintAt(at, count);
      next = bin + 1;
    }
    out.resize(static_cast<std::size_t>(at - out.data()));
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
    r.expectDone();
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
