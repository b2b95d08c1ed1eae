// Compact byte encodings of the non-finalized summary state, stored by the database as opaque
// values. Each starts with a tag byte naming the type (high nibble) and the encoding version
// (low nibble); integers are LEB128 varints, reals 8-byte little-endian IEEE doubles. The exact
// layouts are in docs/metrics.md ("Byte encodings").
//
// Decoding validates everything it reads (tag, truncation, overlong varints, trailing bytes,
// internal consistency) and throws DecodeError naming the defect; it never reads out of bounds.
#pragma once

#include <stdexcept>
#include <string>
#include <string_view>

#include "csp/metrics/accumulator.hpp"
#include "csp/metrics/histogram.hpp"

namespace csp::metrics {

class DecodeError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

inline constexpr unsigned char kIntAccumulatorTag = 0x11;
inline constexpr unsigned char kRealAccumulatorTag = 0x21;
inline constexpr unsigned char kHistogramTag = 0x31;

// Equal states give equal bytes, so encodings can be compared directly (determinism tests).
std::string encode(const IntAccumulator& accumulator);
std::string encode(const RealAccumulator& accumulator);
std::string encode(const LogLinearHistogram& histogram);

IntAccumulator decodeIntAccumulator(std::string_view bytes);
RealAccumulator decodeRealAccumulator(std::string_view bytes);
LogLinearHistogram decodeHistogram(std::string_view bytes);

}  // namespace csp::metrics
