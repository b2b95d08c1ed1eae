// Byte encodings: round trips, canonical form, and rejection of damage without crashing (this
// suite also runs under ASan/UBSan).
#include <gtest/gtest.h>

#include <functional>
#include <random>

#include "csp/metrics/encoding.hpp"

using namespace csp;
using namespace csp::metrics;
using H = LogLinearHistogram;

namespace {

IntAccumulator sampleInt() {
  IntAccumulator a;
  a.accumulate(3, 5);
  a.accumulate(1, UINT64_MAX);
  a.accumulate(7, 1);
  a.accumulate(2, UINT64_MAX);  // sum of squares spills into the high word
  a.accumulate(9, UINT64_MAX);
  return a;
}

RealAccumulator sampleReal() {
  RealAccumulator a;
  a.accumulate(3, -1.5);
  a.accumulate(0, 2.25);
  a.accumulate(8, 1e100);
  return a;
}

H sampleHistogram() {
  H h;
  h.add(0, 3);
  h.add(7);
  h.add(1000, 12);
  h.add(UINT64_MAX);
  return h;
}

std::string rejection(const std::function<void()>& decode) {
  try {
    decode();
  } catch (const DecodeError& e) {
    return e.what();
  }
  return "";
}

// Every proper prefix is rejected; so is every extension.
template <typename Decode>
void expectTruncationsAndExtensionsRejected(const std::string& bytes, Decode decode) {
  for (std::size_t len = 0; len < bytes.size(); ++len)
    EXPECT_NE(rejection([&] { decode(bytes.substr(0, len)); }), "") << "prefix of " << len;
  EXPECT_NE(rejection([&] { decode(bytes + '\0'); }).find("trailing"), std::string::npos);
}

// Random damage never crashes, and whatever is accepted is canonical: it re-encodes to the same
// bytes (so no two byte strings decode to the same state).
template <typename Decode>
void expectDamageRejectedOrCanonical(const std::string& bytes, Decode decode) {
  std::mt19937_64 rng(99);
  for (int i = 0; i < 20000; ++i) {
    std::string damaged = bytes;
    const int flips = 1 + static_cast<int>(rng() % 3);
    for (int f = 0; f < flips; ++f) damaged[rng() % damaged.size()] ^= static_cast<char>(1 + rng() % 255);
    try {
      const auto value = decode(damaged);
      ASSERT_EQ(encode(value), damaged);
    } catch (const DecodeError&) {
    }
  }
}

}  // namespace

// The bytes of the format (docs/database-format.md), spelled out here: the encoders write them
// into a buffer at once, and a database of every earlier version must still read the same.
namespace {
std::string varintBytes(Uint128 v) {
  std::string out;
  for (; v >= 0x80; v >>= 7) out.push_back(static_cast<char>((static_cast<unsigned>(v) & 0x7f) | 0x80));
  out.push_back(static_cast<char>(v));
  return out;
}
}  // namespace

TEST(Encoding, BytesAreTheFormatsVarints) {
  const IntAccumulator a = sampleInt();  // sums beyond 64 bits, squares beyond 128
  const std::string expected = std::string(1, static_cast<char>(kIntAccumulatorTag)) + varintBytes(a.count()) +
                               varintBytes(a.instances()) + varintBytes(a.sum()) + varintBytes(a.sumSquaresLow()) +
                               varintBytes(a.sumSquaresHigh()) + varintBytes(a.min()) + varintBytes(a.max() - a.min()) +
                               varintBytes(a.argmin()) + varintBytes(a.argmax());
  EXPECT_EQ(encode(a), expected);
  EXPECT_EQ(encode(IntAccumulator{}),
            std::string(1, static_cast<char>(kIntAccumulatorTag)) + varintBytes(0) + varintBytes(1));
  H h;
  for (const std::uint64_t v : {std::uint64_t{0}, std::uint64_t{3}, std::uint64_t{3}, std::uint64_t{1000}, UINT64_MAX})
    h.add(v);
  std::string hist = std::string(1, static_cast<char>(kHistogramTag)) + varintBytes(h.bins().size());
  std::uint32_t next = 0;
  for (const auto& [bin, count] : h.bins()) {
    hist += varintBytes(bin - next) + varintBytes(count);
    next = bin + 1;
  }
  EXPECT_EQ(encode(h), hist);
  EXPECT_EQ(encode(H{}), std::string(1, static_cast<char>(kHistogramTag)) + varintBytes(0));
}

TEST(Encoding, IntAccumulatorRoundTrips) {
  for (const IntAccumulator& a : {IntAccumulator(), IntAccumulator::forCombinedNode(), sampleInt()}) {
    const std::string bytes = encode(a);
    EXPECT_EQ(static_cast<unsigned char>(bytes[0]), kIntAccumulatorTag);
    EXPECT_EQ(decodeIntAccumulator(bytes), a);
  }
  EXPECT_EQ(encode(IntAccumulator()).size(), 3u);  // tag, count 0, instances 1
  IntAccumulator small;
  small.accumulate(0, 100);
  EXPECT_LE(encode(small).size(), 12u);
}

TEST(Encoding, RealAccumulatorRoundTrips) {
  for (const RealAccumulator& a : {RealAccumulator(), sampleReal()}) {
    const std::string bytes = encode(a);
    EXPECT_EQ(static_cast<unsigned char>(bytes[0]), kRealAccumulatorTag);
    EXPECT_EQ(decodeRealAccumulator(bytes), a);
  }
}

TEST(Encoding, HistogramRoundTrips) {
  for (const H& h : {H(), sampleHistogram()}) {
    const std::string bytes = encode(h);
    EXPECT_EQ(static_cast<unsigned char>(bytes[0]), kHistogramTag);
    EXPECT_EQ(decodeHistogram(bytes), h);
  }
}

TEST(Encoding, TruncationsAndExtensionsAreRejected) {
  expectTruncationsAndExtensionsRejected(encode(sampleInt()), decodeIntAccumulator);
  expectTruncationsAndExtensionsRejected(encode(sampleReal()), decodeRealAccumulator);
  expectTruncationsAndExtensionsRejected(encode(sampleHistogram()), decodeHistogram);
}

TEST(Encoding, RandomDamageIsRejectedOrCanonical) {
  expectDamageRejectedOrCanonical(encode(sampleInt()), decodeIntAccumulator);
  expectDamageRejectedOrCanonical(encode(sampleReal()), decodeRealAccumulator);
  expectDamageRejectedOrCanonical(encode(sampleHistogram()), decodeHistogram);
}

TEST(Encoding, WrongTagsAndVersionsAreNamed) {
  std::string bytes = encode(sampleInt());
  EXPECT_NE(rejection([&] { decodeRealAccumulator(bytes); }).find("wrong type tag"), std::string::npos);
  bytes[0] = static_cast<char>(kIntAccumulatorTag + 1);
  EXPECT_NE(rejection([&] { decodeIntAccumulator(bytes); }).find("unsupported encoding version 2"), std::string::npos);
  EXPECT_NE(rejection([&] { decodeHistogram(""); }).find("empty"), std::string::npos);
}

TEST(Encoding, InconsistentFieldsAreRejected) {
  // Overlong varint: count 0 written as 0x80 0x00.
  EXPECT_NE(rejection([] { decodeIntAccumulator(std::string("\x11\x80\x00\x01", 4)); }).find("overlong"),
            std::string::npos);
  // count 1, instances 1, sum 9, sumsq 9 (should be 81), min 9, spread 0, argmin 0, argmax 0.
  EXPECT_NE(rejection([] {
              decodeIntAccumulator(std::string("\x11\x01\x01\x09\x09\x00\x09\x00\x00\x00", 10));
            }).find("single value"),
            std::string::npos);
  // Sum outside [count*min, count*max]: count 2, sum 100, min 1, max 2.
  EXPECT_NE(rejection([] {
              decodeIntAccumulator(std::string("\x11\x02\x01\x64\x05\x00\x01\x01\x00\x01", 10));
            }).find("sum inconsistent"),
            std::string::npos);
  // A varint too wide for 64 bits (count).
  EXPECT_NE(rejection([] {
              decodeIntAccumulator(std::string("\x11\xff\xff\xff\xff\xff\xff\xff\xff\xff\x7f\x01", 12));
            }).find("does not fit"),
            std::string::npos);
  // Histogram: bin out of range, empty bin.
  EXPECT_NE(rejection([] { decodeHistogram(std::string("\x31\x01\xf0\x03\x01", 5)); }).find("out of range"),
            std::string::npos);
  EXPECT_NE(rejection([] { decodeHistogram(std::string("\x31\x01\x05\x00", 4)); }).find("empty bin"),
            std::string::npos);
  // Real: negative M2.
  RealAccumulator r;
  r.accumulate(0, 1);
  r.accumulate(1, 3);
  std::string bytes = encode(r);
  bytes[3 + 8 + 7] = static_cast<char>(bytes[3 + 8 + 7] | 0x80);  // sign bit of M2
  EXPECT_NE(rejection([&] { decodeRealAccumulator(bytes); }).find("negative M2"), std::string::npos);
}
