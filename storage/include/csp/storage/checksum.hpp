// The one checksum of CSP's files: profile headers (docs/profile-format.md) and the structure
// cache's entries (docs/postprocessing.md). A word-at-a-time multiply/rotate mix over four
// independent lanes, then a final avalanche. Not cryptographic: it detects damage, it does not
// resist forgery. Library csp_profile.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

namespace csp::storage {

std::uint64_t checksum64(std::span<const std::byte> bytes);

}  // namespace csp::storage
