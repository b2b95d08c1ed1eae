// Writing a whole file so that its name only ever holds a complete file: the one writer of the
// profiles, the database's small files and the measurement's perf-map copies.
#pragma once

#include <cstddef>
#include <filesystem>
#include <span>
#include <stdexcept>
#include <string>

namespace csp::storage {

class AtomicFileError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;  // what(): "<what failed>: <errno text>"
};

struct AtomicFileOptions {
  bool fsync = false;            // fsync the file before the rename, and the directory after
  std::string temporaryTag;      // inserted in the temporary name: NAME.tmp.TAG.XXXXXX
};

// Writes `bytes` to a temporary file created exclusively next to `path` (mkostemp: whatever
// already exists under a name we might pick -- a planted symbolic link, another process's file
// -- is never opened, let alone truncated), mode 0644, then renames it to `path`. On failure the
// temporary file is removed and AtomicFileError says what failed.
void writeFileAtomically(const std::filesystem::path& path, std::span<const std::byte> bytes,
                         const AtomicFileOptions& options = {});
void writeFileAtomically(const std::filesystem::path& path, const std::string& text, const AtomicFileOptions& options = {});

}  // namespace csp::storage
