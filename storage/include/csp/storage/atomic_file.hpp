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
  bool fsync = false;        // fsync the file before the rename, and the directory after
  std::string temporaryTag;  // inserted in the temporary name: NAME.tmp.TAG.XXXXXX
};

// Writes `bytes` to a file that has no name yet (O_TMPFILE) and links it as `path` when it is
// complete: a process killed meanwhile leaves nothing behind. Where that is not possible (no
// O_TMPFILE on the file system, no /proc, or `path` exists and is replaced), writes a temporary
// file created exclusively next to `path` (mkostemp: whatever already exists under a name we
// might pick -- a planted symbolic link, another process's file -- is never opened, let alone
// truncated), mode 0644, and renames it to `path`. On failure nothing is left and
// AtomicFileError says what failed.
void writeFileAtomically(const std::filesystem::path& path, std::span<const std::byte> bytes,
                         const AtomicFileOptions& options = {});
void writeFileAtomically(const std::filesystem::path& path, const std::string& text,
                         const AtomicFileOptions& options = {});

// The two steps of the unnamed write, for writers that keep appending after the first write
// (profile bundles): a writable file without a name in `dir`, mode 0644 (-1 and errno when the
// file system cannot), and its naming as `path`, which fails (false, errno EEXIST) if anything
// has that name already, a symbolic link included.
int openUnnamedFile(const std::filesystem::path& dir);
bool nameUnnamedFile(int fd, const std::filesystem::path& path);

}  // namespace csp::storage
