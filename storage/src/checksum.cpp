#include "csp/storage/checksum.hpp"

#include <cstring>

namespace csp::storage {

std::uint64_t checksum64(std::span<const std::byte> bytes) {
  constexpr std::uint64_t k1 = 0x9E3779B185EBCA87ULL, k2 = 0xC2B2AE3D27D4EB4FULL;
  std::uint64_t lane[4] = {k1, k2, k1 ^ k2, ~k1};
  const std::size_t words = bytes.size() / 8;
  const std::byte* p = bytes.data();
  auto rotl = [](std::uint64_t x, int r) { return (x << r) | (x >> (64 - r)); };
  std::size_t i = 0;
  for (; i + 4 <= words; i += 4) {
    for (int l = 0; l < 4; ++l) {
      std::uint64_t w;
      std::memcpy(&w, p + (i + l) * 8, 8);
      lane[l] = rotl(lane[l] + w * k2, 31) * k1;
    }
  }
  std::uint64_t h = bytes.size() * k1;
  for (int l = 0; l < 4; ++l) h = rotl(h ^ lane[l], 27) * k1 + k2;
  for (; i < words; ++i) {
    std::uint64_t w;
    std::memcpy(&w, p + i * 8, 8);
    h = rotl(h ^ (w * k2), 29) * k1;
  }
  for (std::size_t b = words * 8; b < bytes.size(); ++b) h = (h ^ static_cast<std::uint8_t>(p[b])) * k1;
  h ^= h >> 33;
  h *= k2;
  h ^= h >> 29;
  return h;
}

}  // namespace csp::storage
