#include "csp/storage/atomic_file.hpp"

#include <fcntl.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace csp::storage {

namespace {

std::string errnoText(int err) { return std::strerror(err); }

std::filesystem::path directoryOf(const std::filesystem::path& path) {
  return path.parent_path().empty() ? std::filesystem::path(".") : path.parent_path();
}

// Writes all of `bytes` to `fd`; 0 or the errno of the failure.
int writeAll(int fd, std::span<const std::byte> bytes) {
  for (std::size_t done = 0; done < bytes.size();) {
    const ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return errno;
    if (n == 0) return ENOSPC;
    done += static_cast<std::size_t>(n);
  }
  return 0;
}

void syncDirectory(const std::filesystem::path& path) {
  const int dfd = ::open(directoryOf(path).c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {
    ::fsync(dfd);
    ::close(dfd);
  }
}

std::string temporaryName(const std::filesystem::path& path, const AtomicFileOptions& options) {
  return path.string() + ".tmp." + (options.temporaryTag.empty() ? "" : options.temporaryTag + ".");
}

std::string randomSuffix() {
  static constexpr char kChars[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
  unsigned char bytes[6] = {};
  if (::getrandom(bytes, sizeof bytes, 0) != static_cast<ssize_t>(sizeof bytes))
    for (auto& b : bytes) b = static_cast<unsigned char>(std::rand());
  std::string suffix;
  for (const unsigned char b : bytes) suffix.push_back(kChars[b % (sizeof kChars - 1)]);
  return suffix;
}

// Replaces `path` by the complete unnamed file `fd`: linked under a fresh temporary name, then
// renamed (the temporary exists, complete, only between the two calls). False if no name can
// be given (no /proc).
bool replaceByUnnamed(int fd, const std::filesystem::path& path, const AtomicFileOptions& options) {
  for (int attempt = 0; attempt < 100; ++attempt) {
    // A random name, as mkostemp would pick; linkat creates it exclusively.
    const std::string tmp = temporaryName(path, options) + randomSuffix();
    if (!nameUnnamedFile(fd, tmp)) {
      if (errno == EEXIST) continue;
      return false;
    }
    if (::rename(tmp.c_str(), path.c_str()) != 0) {
      const int err = errno;
      ::unlink(tmp.c_str());
      throw AtomicFileError("rename failed: " + errnoText(err));
    }
    return true;
  }
  return false;
}

// The file written without a name and linked in place when complete: a process killed at any
// point leaves either nothing or the whole file, never a partial temporary. False (nothing
// written) when the file system has no O_TMPFILE or /proc is missing: the caller then goes
// through a temporary file.
bool writeUnnamed(const std::filesystem::path& path, std::span<const std::byte> bytes,
                  const AtomicFileOptions& options) {
  const int fd = openUnnamedFile(directoryOf(path));
  if (fd < 0) return false;
  int err = writeAll(fd, bytes);
  if (err == 0 && options.fsync && ::fsync(fd) != 0) err = errno;
  if (err != 0) {
    ::close(fd);  // the file vanishes with its descriptor
    throw AtomicFileError(std::string(options.fsync ? "write or fsync failed: " : "write failed: ") + errnoText(err));
  }
  bool named = nameUnnamedFile(fd, path);
  try {
    if (!named && errno == EEXIST) named = replaceByUnnamed(fd, path, options);
  } catch (...) {
    ::close(fd);
    throw;
  }
  ::close(fd);
  if (named && options.fsync) syncDirectory(path);
  return named;
}

void writeThroughTemporary(const std::filesystem::path& path, std::span<const std::byte> bytes,
                           const AtomicFileOptions& options) {
  std::string tmp = temporaryName(path, options) + "XXXXXX";
  const int fd = ::mkostemp(tmp.data(), O_CLOEXEC);
  if (fd < 0) throw AtomicFileError("cannot create a temporary file next to it: " + errnoText(errno));
  auto fail = [&](const std::string& what, int err) {
    ::close(fd);
    ::unlink(tmp.c_str());
    throw AtomicFileError(what + ": " + errnoText(err));
  };
  ::fchmod(fd, 0644);
  if (const int err = writeAll(fd, bytes); err != 0) fail("write failed", err);
  if (options.fsync && ::fsync(fd) != 0) fail("fsync failed", errno);
  if (::close(fd) != 0) {
    const int err = errno;
    ::unlink(tmp.c_str());
    throw AtomicFileError("close failed: " + errnoText(err));
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    const int err = errno;
    ::unlink(tmp.c_str());
    throw AtomicFileError("rename failed: " + errnoText(err));
  }
  if (options.fsync) syncDirectory(path);
}

}  // namespace

int openUnnamedFile(const std::filesystem::path& dir) {
  const int fd = ::open(dir.c_str(), O_TMPFILE | O_WRONLY | O_CLOEXEC, 0644);
  if (fd >= 0) ::fchmod(fd, 0644);  // whatever the umask: profiles are read by other users' tools
  return fd;
}

bool nameUnnamedFile(int fd, const std::filesystem::path& path) {
  char self[64];
  std::snprintf(self, sizeof self, "/proc/self/fd/%d", fd);
  // linkat never replaces (EEXIST) and creates the name itself, never following a link there.
  return ::linkat(AT_FDCWD, self, AT_FDCWD, path.c_str(), AT_SYMLINK_FOLLOW) == 0;
}

void writeFileAtomically(const std::filesystem::path& path, std::span<const std::byte> bytes,
                         const AtomicFileOptions& options) {
  if (writeUnnamed(path, bytes, options)) return;
  writeThroughTemporary(path, bytes, options);
}

void writeFileAtomically(const std::filesystem::path& path, const std::string& text, const AtomicFileOptions& options) {
  writeFileAtomically(path, std::span<const std::byte>(reinterpret_cast<const std::byte*>(text.data()), text.size()),
                      options);
}

}  // namespace csp::storage
