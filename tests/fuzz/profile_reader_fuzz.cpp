// Fuzz target: any byte string given to the profile reader yields a profile or a ProfileError,
// never a crash, a hang or a sanitizer report. Checksums are skipped for most inputs so that the
// fuzzer reaches the message parser and the structural checks behind it.
#include <cstddef>
#include <cstdint>

#include "csp/storage/profile_io.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  csp::storage::ParseOptions options;
  options.verifyChecksum = size > 0 && (data[0] & 1);
  try {
    auto profile = csp::storage::parseProfile({reinterpret_cast<const std::byte*>(data), size}, "fuzz-input", options);
    // A profile that parsed must serialize again (the writer validates too).
    (void)csp::storage::serializeProfile(profile, "fuzz-roundtrip");
  } catch (const csp::storage::ProfileError&) {
  }
  return 0;
}
