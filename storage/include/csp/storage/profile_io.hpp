// Reading and writing per-thread profile files (docs/profile-format.md).
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include "csp/storage/profile.hpp"

namespace csp::storage {

inline constexpr std::uint16_t kProfileFormatMajor = 1;
inline constexpr std::uint16_t kProfileFormatMinor = 0;
inline constexpr std::size_t kProfileHeaderBytes = 32;
inline constexpr const char* kProfileExtension = ".cspprof";

// A profile that cannot be used. what() reads "<file>: <defect>".
class ProfileError : public std::runtime_error {
 public:
  ProfileError(std::string file, std::string defect);
  const std::string& file() const { return file_; }
  const std::string& defect() const { return defect_; }

 private:
  std::string file_;
  std::string defect_;
};

struct ParseOptions {
  // The fuzz target turns this off so that it reaches the structural checks behind it.
  bool verifyChecksum = true;
};

// The complete file image (header + message). Throws ProfileError if the profile is invalid.
std::vector<std::byte> serializeProfile(const ThreadProfile& profile, const std::string& nameForErrors = "<profile>");

// The same without validation: only for tests and tools that must produce damaged files.
std::vector<std::byte> serializeProfileUnchecked(const ThreadProfile& profile);

// Writes atomically: the file appears complete under its name or not at all.
void writeProfile(const ThreadProfile& profile, const std::filesystem::path& path);

// Memory-maps, checks header and checksum, parses with traversal limits, validates.
ThreadProfile readProfile(const std::filesystem::path& path, const ParseOptions& options = {});

// Parses a file image held in memory; `name` is used in error messages.
ThreadProfile parseProfile(std::span<const std::byte> image, const std::string& name,
                           const ParseOptions& options = {});

// Structural checks of docs/design.md, "Data model" (parents precede children, no cycles, indices in range,
// values sorted and consistent with the sample counts). Throws ProfileError naming `name`.
void validateProfile(const ThreadProfile& profile, const std::string& name);

// 64-bit checksum used in the file header.
std::uint64_t profileChecksum(std::span<const std::byte> bytes);

// Every *.cspprof file directly inside `dir`, sorted by name. Throws ProfileError if `dir` is
// missing or not a directory.
std::vector<std::filesystem::path> listProfiles(const std::filesystem::path& dir);

// File name for a profile of this identity: "<idtuple>.<pid>.cspprof", e.g.
// "r000003-t0001.12345.cspprof". Names sort by id tuple.
std::string profileFileName(const Identity& identity);

// The copy of a process's JIT symbol map (/tmp/perf-<pid>.map) that the measurement keeps next
// to its profiles: "perf-<pid>.<hostname>.map" (docs/measurement.md, "JIT code").
std::string perfMapFileName(std::uint32_t pid, const std::string& hostname);

}  // namespace csp::storage
