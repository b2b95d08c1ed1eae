// The one byte codec of CSP: what the database values (storage/src/db_format.cpp), the
// accumulator encodings (metrics/src/encoding.cpp), csp-prof-mpi's messages between ranks and
// the canonical CCT's structure messages (reduce/) are written with and read back by.
//
// Primitives: u8, big-endian be16/be32 (database keys: they sort numerically), LEB128 varints of
// up to 128 bits, little-endian IEEE doubles, and length-prefixed byte strings (varint length).
// The reader never reads out of bounds and rejects truncation, overlong varints, values that do
// not fit and NaN doubles with an error that names what was being decoded and the byte offset.
// Header-only: metrics/ uses it without linking storage.
#pragma once

#include <bit>
#include <cmath>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace csp::storage {

__extension__ using Uint128 = unsigned __int128;

// Undecodable bytes (the default error type of ByteReader).
class BytesError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Appends to a std::string (database keys and values) or a std::vector<std::byte> (messages).
template <class Out = std::string>
class ByteWriter {
 public:
  ByteWriter() = default;
  explicit ByteWriter(Out initial) : out_(std::move(initial)) {}

  void u8(std::uint8_t v) { out_.push_back(static_cast<Elem>(v)); }
  void be16(std::uint16_t v) {
    u8(static_cast<std::uint8_t>(v >> 8));
    u8(static_cast<std::uint8_t>(v));
  }
  void be32(std::uint32_t v) {
    for (int shift = 24; shift >= 0; shift -= 8) u8(static_cast<std::uint8_t>(v >> shift));
  }
  void varint(Uint128 v) {
    while (v >= 0x80) {
      u8(static_cast<std::uint8_t>((static_cast<unsigned>(v) & 0x7f) | 0x80));
      v >>= 7;
    }
    u8(static_cast<std::uint8_t>(v));
  }
  void u64(std::uint64_t v) { varint(v); }
  void real(double v) {
    auto bits = std::bit_cast<std::uint64_t>(v);
    for (int i = 0; i < 8; ++i, bits >>= 8) u8(static_cast<std::uint8_t>(bits & 0xff));
  }
  // Varint length, then the bytes.
  void text(std::string_view s) {
    varint(s.size());
    raw(s);
  }
  void bytes(std::span<const std::byte> b) {
    text(std::string_view(reinterpret_cast<const char*>(b.data()), b.size()));
  }
  void raw(std::string_view s) {
    const auto* p = reinterpret_cast<const Elem*>(s.data());
    out_.insert(out_.end(), p, p + s.size());
  }

  const Out& view() const { return out_; }
  Out take() { return std::move(out_); }

 private:
  using Elem = typename Out::value_type;
  Out out_;
};

// Free-function forms for appending to an existing string (key and value builders).
inline void putBe16(std::string& out, std::uint16_t v) {
  out.push_back(static_cast<char>(v >> 8));
  out.push_back(static_cast<char>(v));
}
inline void putBe32(std::string& out, std::uint32_t v) {
  for (int shift = 24; shift >= 0; shift -= 8) out.push_back(static_cast<char>(v >> shift));
}
// The varint of v written at `out` (at most 10 bytes, the caller's room); returns the end.
inline char* varintAt(char* out, std::uint64_t v) {
  for (; v >= 0x80; v >>= 7) *out++ = static_cast<char>((v & 0x7f) | 0x80);
  *out++ = static_cast<char>(v);
  return out;
}
// Unsigned values of up to 64 bits (ids, counts, per-thread values: the bulk of a database)
// take this form: the bytes are made in a register-sized buffer and appended at once.
template <std::unsigned_integral T>
requires(sizeof(T) <= 8) inline void putVarint(std::string& out, T value) {
  char bytes[10];
  out.append(bytes, static_cast<std::size_t>(varintAt(bytes, value) - bytes));
}
// The same for 128 bits (at most 19 bytes).
inline char* varint128At(char* out, Uint128 v) {
  for (; v >= 0x80; v >>= 7) *out++ = static_cast<char>((static_cast<unsigned>(v) & 0x7f) | 0x80);
  *out++ = static_cast<char>(v);
  return out;
}
inline void putVarint(std::string& out, Uint128 v) {
  char bytes[19];
  out.append(bytes, static_cast<std::size_t>(varint128At(bytes, v) - bytes));
}
inline void putDouble(std::string& out, double v) {
  auto bits = std::bit_cast<std::uint64_t>(v);
  for (int i = 0; i < 8; ++i, bits >>= 8) out.push_back(static_cast<char>(bits & 0xff));
}
inline void putBytes(std::string& out, std::string_view bytes) {
  putVarint(out, bytes.size());
  out.append(bytes);
}

// Reads what ByteWriter wrote. Errors are thrown as `Error` (constructible from a string):
// "WHAT: PROBLEM at byte N of SIZE".
template <class Error = BytesError>
class ByteReader {
 public:
  ByteReader(std::string_view data, std::string_view what) : data_(data), what_(what) {}
  ByteReader(std::span<const std::byte> data, std::string_view what)
      : data_(reinterpret_cast<const char*>(data.data()), data.size()), what_(what) {}
  explicit ByteReader(const std::vector<std::byte>& data, std::string_view what = "internal message")
      : ByteReader(std::span<const std::byte>(data), what) {}

  [[noreturn]] void fail(const std::string& problem) const {
    throw Error(std::string(what_) + ": " + problem + " at byte " + std::to_string(pos_) + " of " +
                std::to_string(data_.size()));
  }

  bool done() const { return pos_ == data_.size(); }
  std::size_t position() const { return pos_; }
  std::size_t remaining() const { return data_.size() - pos_; }
  void expectDone() const {
    if (!done()) fail("trailing bytes");
  }

  std::uint8_t u8() {
    if (pos_ >= data_.size()) fail("truncated");
    return static_cast<std::uint8_t>(data_[pos_++]);
  }
  std::uint16_t be16() {
    const std::uint16_t hi = u8();
    return static_cast<std::uint16_t>(hi << 8 | u8());
  }
  std::uint32_t be32() {
    std::uint32_t v = 0;
    for (int i = 0; i < 4; ++i) v = v << 8 | u8();
    return v;
  }

  // LEB128 of at most `bits` significant bits; rejects truncation, overlong forms (a redundant
  // trailing zero group) and values that do not fit.
  Uint128 varint(unsigned bits) {
    Uint128 v = 0;
    unsigned shift = 0;
    for (;;) {
      if (pos_ >= data_.size()) fail("truncated varint");
      const auto byte = static_cast<unsigned char>(data_[pos_++]);
      const Uint128 group = byte & 0x7f;
      if (shift >= bits || (bits - shift < 7 && (group >> (bits - shift)) != 0))
        fail("varint does not fit " + std::to_string(bits) + " bits");
      v |= group << shift;
      if ((byte & 0x80) == 0) {
        if (byte == 0 && shift > 0) fail("overlong varint");
        return v;
      }
      shift += 7;
    }
  }
  // varint(64) without 128-bit arithmetic: the per-thread values of a database are millions of
  // these, and this loop is what reading them costs. Always inlined into the loops that read
  // them: left to the compiler, it went out of line in a unity build (4 % of post-processing's
  // CPU time).
  [[gnu::always_inline]] std::uint64_t u64() {
    if (pos_ < data_.size() && static_cast<unsigned char>(data_[pos_]) < 0x80)  // most are one byte
      return static_cast<unsigned char>(data_[pos_++]);
    std::uint64_t v = 0;
    for (unsigned shift = 0;; shift += 7) {
      if (pos_ >= data_.size()) fail("truncated varint");
      const auto byte = static_cast<unsigned char>(data_[pos_++]);
      if (shift == 63 && byte > 1) fail("varint does not fit 64 bits");
      v |= std::uint64_t{byte & 0x7fu} << shift;
      if ((byte & 0x80) == 0) {
        if (byte == 0 && shift > 0) fail("overlong varint");
        return v;
      }
    }
  }
  std::uint32_t u32() { return static_cast<std::uint32_t>(varint(32)); }

  double real() {
    if (remaining() < 8) fail("truncated double");
    std::uint64_t bits = 0;
    for (int i = 7; i >= 0; --i)
      bits = (bits << 8) | static_cast<unsigned char>(data_[pos_ + static_cast<std::size_t>(i)]);
    pos_ += 8;
    const double v = std::bit_cast<double>(bits);
    if (std::isnan(v)) fail("NaN");
    return v;
  }

  // The next `n` bytes, as a view into the input; `problem` names their absence.
  std::string_view take(std::size_t n, const char* problem = "truncated") {
    if (n > remaining()) fail(problem);
    const std::string_view s = data_.substr(pos_, n);
    pos_ += n;
    return s;
  }
  // A length-prefixed byte string, as a view into the input.
  std::string_view textView() { return take(u64(), "truncated string"); }
  std::string text() { return std::string(textView()); }
  std::vector<std::byte> bytes() {
    const std::string_view s = textView();
    const auto* p = reinterpret_cast<const std::byte*>(s.data());
    return std::vector<std::byte>(p, p + s.size());
  }

 private:
  std::string_view data_;
  std::string_view what_;
  std::size_t pos_ = 0;
};

// v / d, exact (the floor), without a 64-bit division per value: a multiplication by a rounded-up
// reciprocal and a shift (Granlund and Montgomery, "Division by invariant integers using
// multiplication", 1994, Thm. 4.2). With l = ceil(log2 d) and m = ceil(2^(63+l) / d) (< 2^64),
// floor(v / d) = floor(v * m / 2^(63+l)) for every v < 2^63, because 0 <= m*d - 2^(63+l) < d <= 2^l.
// Values from 2^63 up take the hardware division.
class ExactDivisor {
 public:
  explicit ExactDivisor(std::uint64_t d = 1) : d_(d == 0 ? 1 : d) {
    if (d_ == 1) return;
    const auto l = static_cast<unsigned>(64 - __builtin_clzll(d_ - 1));  // ceil(log2 d), 1..64
    // ceil(2^(63+l) / d) in 128 bits; below 2^64 (see above).
    const Uint128 numerator = Uint128{1} << (63 + l);
    magic_ = static_cast<std::uint64_t>((numerator + d_ - 1) / d_);
    highShift_ = l - 1;
  }
  std::uint64_t divisor() const { return d_; }
  // The product's high word shifted by 63 + l - 64: one multiply and one shift of 64 bits (a
  // 128-bit shift by a variable count costs three more dependent instructions per value).
  std::uint64_t divide(std::uint64_t v) const { return d_ == 1 ? v : divideNotByOne(v); }
  // divide() of a divisor known not to be 1.
  std::uint64_t divideNotByOne(std::uint64_t v) const {
    if (v >> 63 != 0) return v / d_;
    return static_cast<std::uint64_t>((static_cast<Uint128>(v) * magic_) >> 64) >> highShift_;
  }

 private:
  std::uint64_t d_;
  std::uint64_t magic_ = 0;
  unsigned highShift_ = 0;  // ceil(log2 d) - 1
};

// A per-thread value of a metric stored in units of its scale (database format 2.0: the period of
// a sampled count metric, so that a value is its sample count): v = q * scale + r is written as
// varint(q << 1 | (r != 0)) and, if r != 0, varint(r). Scale 1 writes varint(v), as format 1 did.
// Exact for every value; at most 20 bytes.
class ValueScale {
 public:
  explicit ValueScale(std::uint64_t scale = 1) : divisor_(scale) {}
  std::uint64_t scale() const { return divisor_.divisor(); }
  char* put(char* out, std::uint64_t v) const { return scale() == 1 ? varintAt(out, v) : putScaled(out, v); }
  // put() of a scale known not to be 1 (the caller tested it once for many values).
  char* putScaled(char* out, std::uint64_t v) const {
    const std::uint64_t q = divisor_.divideNotByOne(v), r = v - q * scale();
    out = varintAt(out, q << 1 | (r != 0 ? 1 : 0));
    return r != 0 ? varintAt(out, r) : out;
  }
  // Always inlined into the loops that read values (a call per value cost a third of the loop).
  // `Reader`: a ByteReader, or a reader of its own with u64() and a [[noreturn]] fail(problem).
  template <class Reader>
  [[gnu::always_inline]] std::uint64_t read(Reader& r) const {
    const std::uint64_t x = r.u64(), s = scale();
    if (s == 1) return x;
    std::uint64_t v = 0;  // (x >> 1) * s, checked without a division
    if (__builtin_mul_overflow(x >> 1, s, &v)) r.fail("scaled value out of range");
    if (x & 1) {
      const std::uint64_t rest = r.u64();
      if (rest == 0 || rest >= s) r.fail("remainder of a scaled value out of range");
      if (v > UINT64_MAX - rest) r.fail("scaled value out of range");
      v += rest;
    }
    return v;
  }

 private:
  ExactDivisor divisor_;
};

}  // namespace csp::storage
