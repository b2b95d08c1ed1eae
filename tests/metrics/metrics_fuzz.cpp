// Fuzz target: the decoders and the expression parsers take any bytes without crashing, hanging
// or tripping a sanitizer. The first byte picks the entry point. Whatever a decoder accepts must
// re-encode to the same bytes (the encodings are canonical).
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>
#include <vector>

#include "csp/metrics/encoding.hpp"
#include "csp/metrics/expression.hpp"

using namespace csp::metrics;

namespace {

template <typename Decode>
void roundTrip(std::string_view bytes, Decode decode) {
  try {
    const auto value = decode(bytes);
    if (encode(value) != bytes) std::abort();
  } catch (const DecodeError&) {
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  const std::string_view rest(reinterpret_cast<const char*>(data + 1), size - 1);
  switch (data[0] % 5) {
    case 0: roundTrip(rest, decodeIntAccumulator); break;
    case 1: roundTrip(rest, decodeRealAccumulator); break;
    case 2: roundTrip(rest, decodeHistogram); break;
    case 3:
      try {
        const Expression e = Expression::parse(rest);
        const std::vector<double> ones(e.names().size(), 1.0);
        (void)e.evaluate(ones);
      } catch (const ExpressionError&) {
      }
      break;
    default:
      try {
        const SummaryFormula f = SummaryFormula::parse(rest);
        const std::vector<double> ones(f.references().size(), 1.0);
        (void)f.evaluate(ones);
      } catch (const ExpressionError&) {
      }
      break;
  }
  return 0;
}
