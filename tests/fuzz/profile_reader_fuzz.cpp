// Fuzz target: any byte string given to the profile reader yields a profile or a ProfileError,
// never a crash, a hang or a sanitizer report.
//
// The last input byte is a selector, not part of the profile: when its low four bits are 0 (one
// input in 16) the checksum is verified; otherwise it is skipped; when bit 0x10 is set the bytes
// are read as a bundle (a sequence of profile records, each parsed by itself), so that mutated inputs reach
// the message parser and the structural checks behind it (every profile starts with the same
// magic, so no byte of the profile itself can choose). Seeds carry an extra selector byte
// (scripts/fuzz.sh). At exit the target prints how far inputs got, so that a run that never
// passes the early checks is noticed: "profile_reader_fuzz: N inputs, P parsed, S rejected by
// the structural checks, E rejected earlier".
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "csp/storage/profile_io.hpp"

namespace {

struct Counts {
  std::uint64_t inputs = 0, parsed = 0, structural = 0, early = 0;
};
Counts counts;

void report() {
  std::fprintf(stderr,
               "profile_reader_fuzz: %llu inputs, %llu parsed, %llu rejected by the structural checks, %llu "
               "rejected earlier\n",
               static_cast<unsigned long long>(counts.inputs), static_cast<unsigned long long>(counts.parsed),
               static_cast<unsigned long long>(counts.structural), static_cast<unsigned long long>(counts.early));
}

// Defects found before the message is decoded: size, header, version, checksum, framing.
bool early(const std::string& defect) {
  for (const char* word : {"truncated", "magic", "version", "checksum", "payload", "header", "message"})
    if (defect.find(word) != std::string::npos) return true;
  return false;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static const bool registered = (std::atexit(report), true);
  (void)registered;
  if (size == 0) return 0;
  ++counts.inputs;
  csp::storage::ParseOptions options;
  options.verifyChecksum = (data[size - 1] & 0x0F) == 0;
  const std::span<const std::byte> bytes{reinterpret_cast<const std::byte*>(data), size - 1};
  auto parseOne = [&](std::span<const std::byte> image) {
    try {
      auto profile = csp::storage::parseProfile(image, "fuzz-input", options);
      ++counts.parsed;
      // A profile that parsed must serialize again (the writer validates too).
      (void)csp::storage::serializeProfile(profile, "fuzz-roundtrip");
    } catch (const csp::storage::ProfileError& e) {
      ++(early(e.defect()) ? counts.early : counts.structural);
    }
  };
  if ((data[size - 1] & 0x10) == 0) {
    parseOne(bytes);
    return 0;
  }
  // A bundle: every listed record lies inside the bytes, in increasing order.
  std::uint64_t previous = 0;
  bool first = true;
  for (const std::uint64_t offset : csp::storage::bundleRecordOffsets(bytes)) {
    if (offset >= bytes.size() || (!first && offset <= previous)) std::abort();
    first = false;
    previous = offset;
    const std::size_t length = csp::storage::bundleRecordLength(bytes, offset);
    if (length == 0 || length > bytes.size() - offset) std::abort();
    parseOne(bytes.subspan(offset, length));
  }
  return 0;
}
