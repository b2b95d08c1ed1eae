// Fuzz target: the decoders and the expression parsers take any bytes without crashing, hanging
// or tripping a sanitizer. The first byte picks the entry point. Whatever a decoder accepts must
// re-encode to the same bytes (the encodings are canonical).
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string_view>
#include <vector>

#include "csp/metrics/encoding.hpp"
#include "csp/metrics/expression.hpp"

using namespace csp::metrics;

namespace {

// Per entry point: inputs that were accepted, so that a run in which some entry point never gets
// past its first check is noticed (printed at exit; scripts/fuzz.sh checks it).
std::uint64_t accepted[5];
const char* const kEntry[5] = {"int-accumulator", "real-accumulator", "histogram", "expression", "formula"};

void report() {
  std::fprintf(stderr, "metrics_fuzz: accepted");
  for (int i = 0; i < 5; ++i) std::fprintf(stderr, " %s %llu", kEntry[i], static_cast<unsigned long long>(accepted[i]));
  std::fprintf(stderr, "\n");
}

template <typename Decode>
void roundTrip(std::string_view bytes, Decode decode, int entry) {
  try {
    const auto value = decode(bytes);
    ++accepted[entry];
    if (encode(value) != bytes) std::abort();
  } catch (const DecodeError&) {
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static const bool registered = (std::atexit(report), true);
  (void)registered;
  if (size == 0) return 0;
  const std::string_view rest(reinterpret_cast<const char*>(data + 1), size - 1);
  switch (data[0] % 5) {
    case 0:
      roundTrip(rest, decodeIntAccumulator, 0);
      break;
    case 1:
      roundTrip(rest, decodeRealAccumulator, 1);
      break;
    case 2:
      roundTrip(rest, decodeHistogram, 2);
      break;
    case 3:
      try {
        const Expression e = Expression::parse(rest);
        const std::vector<double> ones(e.names().size(), 1.0);
        (void)e.evaluate(ones);
        ++accepted[3];
      } catch (const ExpressionError&) {
      }
      break;
    default:
      try {
        const SummaryFormula f = SummaryFormula::parse(rest);
        const std::vector<double> ones(f.references().size(), 1.0);
        (void)f.evaluate(ones);
        ++accepted[4];
      } catch (const ExpressionError&) {
      }
      break;
  }
  return 0;
}
