// Reading and writing per-thread profile files (docs/profile-format.md).
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <system_error>
#include <vector>

#include "csp/storage/profile.hpp"

namespace csp::storage {

inline constexpr std::uint16_t kProfileFormatMajor = 1;
inline constexpr std::uint16_t kProfileFormatMinor =
    3;  // 1.1: Cct.unwindNote; 1.2: logical contexts; 1.3: clock bounds and communication events
inline constexpr std::size_t kProfileHeaderBytes = 32;
inline constexpr const char* kProfileExtension = ".cspprof";
// A bundle: the profiles of the threads of one process that ended while it ran, appended one
// after the other (each record is a complete profile image). One file per process instead of one
// per thread keeps thread churn cheap, above all on file systems where creating a file costs
// a metadata round trip (docs/profile-format.md, "Bundles").
inline constexpr const char* kBundleExtension = ".cspbundle";

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
  // Structural checks (validateProfile). csp-prof-mpi's source leaves them to the pipeline, which
  // validates every source's profiles alike.
  bool validate = true;
};

// The complete file image (header + message). Throws ProfileError if the profile is invalid or
// holds what this format cannot (checkStorable).
std::vector<std::byte> serializeProfile(const ThreadProfile& profile, const std::string& nameForErrors = "<profile>");

// The same without validation: only for tests and tools that must produce damaged files.
std::vector<std::byte> serializeProfileUnchecked(const ThreadProfile& profile);

// Writes atomically: the file appears complete under its name or not at all.
void writeProfile(const ThreadProfile& profile, const std::filesystem::path& path);

// Memory-maps, checks header and checksum, parses with traversal limits, validates (unless told not to).
ThreadProfile readProfile(const std::filesystem::path& path, const ParseOptions& options = {});

// Parses a file image held in memory; `name` is used in error messages.
ThreadProfile parseProfile(std::span<const std::byte> image, const std::string& name, const ParseOptions& options = {});

// Structural checks of docs/design.md, "Data model" (parents precede children, no cycles, indices in range,
// values sorted and consistent with the sample counts). Throws ProfileError naming `name`.
void validateProfile(const ThreadProfile& profile, const std::string& name);

// What the data model holds but this format does not (real-valued metrics, GPU id kinds, path
// starts: docs/profile-format.md): throws ProfileError naming `name` for a profile that has it.
void checkStorable(const ThreadProfile& profile, const std::string& name);

// One entry of a directory as readdir gives it: its name and what the directory says it is
// (Unknown where the file system does not say, and for a symbolic link: ask stat).
struct DirectoryEntry {
  enum class Kind : std::uint8_t { Regular, Other, Unknown };
  std::string name;
  Kind kind = Kind::Unknown;
};
// The entries directly inside `dir` (not "." and ".."), in the file system's order, from one
// readdir pass. std::filesystem::directory_iterator builds a path of every entry and splits it
// into components; over a measurement directory of 4,096 profiles that cost 3.5 ms per pass, and
// discovery passes over it once per input format and once more for each format's unfinished
// files. Sets `ec` when `dir` cannot be opened or read (the entries read until then are returned).
std::vector<DirectoryEntry> directoryEntries(const std::filesystem::path& dir, std::error_code& ec);
// Whether a directory entry's name has `extension` as std::filesystem::path::extension() sees it
// (".cspprof" alone is a hidden file without an extension).
inline bool hasExtension(std::string_view name, std::string_view extension) {
  return name.size() > extension.size() && name.ends_with(extension);
}

// The profiles directly inside `dir`: every *.cspprof file and every record of every *.cspbundle
// file (as the entry "BUNDLE@OFFSET"), files sorted by name, records in the order they were
// written. Throws ProfileError if `dir` is missing or not a directory. A damaged bundle lists
// the record where the damage starts; reading that entry reports it.
std::vector<std::string> listProfiles(const std::filesystem::path& dir);

// The records of a bundle's bytes: their offsets, in order. A record whose header is damaged or
// that runs past the end ends the list (it is listed itself, so that reading it reports the
// damage).
std::vector<std::uint64_t> bundleRecordOffsets(std::span<const std::byte> bundle);
// Length of the record at `offset` as its header announces it, clipped to what the bytes hold
// (a truncated record is then reported by the parser); 0 past the end.
std::size_t bundleRecordLength(std::span<const std::byte> bundle, std::uint64_t offset);
// Why a bundle is incomplete although its last record is whole (empty: it is not, or its last
// record reports its own damage): it is empty, or it ends inside one of its writer's writes (the
// last record lacks the end-of-write mark; bundles written before the marks have none and pass).
// listProfiles lists such a bundle's end as one more entry, "BUNDLE@SIZE", whose reading reports it.
std::string bundleIncompleteness(std::span<const std::byte> bundle);

// Where an entry of listProfiles is: a file of its own, or a record of a bundle.
struct ProfileLocation {
  std::filesystem::path file;
  bool inBundle = false;
  std::uint64_t offset = 0;  // of the record in the bundle
};
ProfileLocation locateProfile(const std::filesystem::path& entry);
// Bytes of the entry's profile image (0 if it cannot be read; reading it reports why).
std::uint64_t profileBytes(const std::filesystem::path& entry);

// Appends profiles to a bundle, created holding its first write (written without a name and
// linked when complete; exclusively: an existing file, link or anything else under the name is
// never opened; the name then gets a suffix). Every write marks its last record, so that a
// bundle cut between records is recognized (bundleIncompleteness). A failed append (a full disk)
// is cut off again, so that the bundle never holds part of a record; only a process killed in
// the middle of a write leaves a truncated last record, or a cut reported as such.
class ProfileBundleWriter {
 public:
  explicit ProfileBundleWriter(std::filesystem::path path) : path_(std::move(path)) {}
  ~ProfileBundleWriter();
  ProfileBundleWriter(const ProfileBundleWriter&) = delete;
  ProfileBundleWriter& operator=(const ProfileBundleWriter&) = delete;
  // Validates and appends; throws ProfileError naming the bundle.
  void append(const ThreadProfile& profile);
  // Validates and keeps the record for the next flush() (one write for many short threads);
  // past kStageBytes of staged records it flushes by itself. Throws ProfileError naming the
  // bundle. What is staged when a flush fails is lost, never half-written.
  void stage(const ThreadProfile& profile);
  void flush();
  static constexpr std::size_t kStageBytes = 4u << 20;
  const std::filesystem::path& path() const { return path_; }
  std::uint64_t records() const { return records_; }  // written (staged ones not counted)

 private:
  void open();
  std::filesystem::path suffixed(int k) const;
  bool createWhole(std::span<const std::byte> bytes);
  void writeOrCut(std::span<const std::byte> bytes);
  // Marks the record at `lastRecord` as the end of this write, then writes.
  void writeOut(std::span<std::byte> bytes, std::size_t lastRecord, std::uint64_t records);

  std::filesystem::path path_;
  int fd_ = -1;
  std::uint64_t size_ = 0;
  std::uint64_t records_ = 0;
  std::vector<std::byte> staged_;
  std::size_t lastStaged_ = 0;  // offset of the last staged record in staged_
  std::uint64_t stagedRecords_ = 0;
};

// Bundle name for a process: its id tuple without the thread, "<tuple>.<pid>.cspbundle", e.g.
// "r000003.12345.cspbundle".
std::string bundleFileName(const Identity& identity);

// File name for a profile of this identity: "<idtuple>.<pid>.cspprof", e.g.
// "r000003-t0001.12345.cspprof". Names sort by id tuple.
std::string profileFileName(const Identity& identity);

// The copy of a process's JIT symbol map (/tmp/perf-<pid>.map) that the measurement keeps next
// to its profiles: "perf-<pid>.<hostname>.map" (docs/measurement.md, "JIT code").
std::string perfMapFileName(std::uint32_t pid, const std::string& hostname);

}  // namespace csp::storage
