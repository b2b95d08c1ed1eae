// Input formats as plug-ins (in the manner of hpcprof's sources): a ProfileSource recognises its
// profile files, lists those of a measurement directory, and reads one into the common
// ThreadProfile that the rest of the pipeline works on. Adding a format is one new file in
// reduce/src/sources/ that defines a source and registers it in profileSources().
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <utility>
#include <vector>

#include "csp/storage/profile.hpp"

namespace csp::reduce {

class ProfileSource {
 public:
  virtual ~ProfileSource() = default;
  // Short name of the format, for messages ("cspprof").
  virtual std::string name() const = 0;
  // The file-name pattern of its profiles, for messages ("*.cspprof").
  virtual std::string pattern() const = 0;
  // Whether `file` names one of this format's profiles (by name only; nothing is opened).
  virtual bool isProfile(const std::filesystem::path& file) const = 0;
  // This format's profiles in a measurement directory, in the order that fixes profile ids
  // (sorted by name). Throws storage::ProfileError for an entry that cannot be listed.
  virtual std::vector<std::filesystem::path> list(const std::filesystem::path& directory) const = 0;
  // The file an entry of list() is in and where in it (a bundle file holds several profiles):
  // two entries at the same place of the same file are one profile given twice.
  virtual std::pair<std::filesystem::path, std::uint64_t> place(const std::filesystem::path& entry) const {
    return {entry, 0};
  }
  // Size of the entry's profile in bytes (it balances the work between ranks); 0 if unknown.
  virtual std::uint64_t bytes(const std::filesystem::path& entry) const;
  // Reads and validates one profile. Throws storage::ProfileError (file and defect) for bad
  // input, so that --skip-invalid can record it.
  virtual ThreadProfile read(const std::filesystem::path& file) const = 0;
};

// Every known source, in a fixed order (its index identifies it between processes).
const std::vector<const ProfileSource*>& profileSources();
// The source whose profiles `file` is named like; nullptr if none.
const ProfileSource* sourceFor(const std::filesystem::path& file);
// The known patterns, for messages: "*.cspprof" (joined with " or " when there are several).
std::string knownProfilePatterns();

}  // namespace csp::reduce
