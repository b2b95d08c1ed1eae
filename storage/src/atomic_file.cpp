#include "csp/storage/atomic_file.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace csp::storage {

namespace {

std::string errnoText(int err) { return std::strerror(err); }

}  // namespace

void writeFileAtomically(const std::filesystem::path& path, std::span<const std::byte> bytes,
                         const AtomicFileOptions& options) {
  std::string tmp = path.string() + ".tmp." + (options.temporaryTag.empty() ? "" : options.temporaryTag + ".") + "XXXXXX";
  const int fd = ::mkostemp(tmp.data(), O_CLOEXEC);
  if (fd < 0) throw AtomicFileError("cannot create a temporary file next to it: " + errnoText(errno));
  auto fail = [&](const std::string& what, int err) {
    ::close(fd);
    ::unlink(tmp.c_str());
    throw AtomicFileError(what + ": " + errnoText(err));
  };
  ::fchmod(fd, 0644);
  for (std::size_t done = 0; done < bytes.size();) {
    const ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) fail("write failed", errno);
    if (n == 0) fail("write failed", ENOSPC);
    done += static_cast<std::size_t>(n);
  }
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
  if (options.fsync) {
    const auto dir = path.parent_path().empty() ? std::filesystem::path(".") : path.parent_path();
    const int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd >= 0) {
      ::fsync(dfd);
      ::close(dfd);
    }
  }
}

void writeFileAtomically(const std::filesystem::path& path, const std::string& text, const AtomicFileOptions& options) {
  writeFileAtomically(path, std::span<const std::byte>(reinterpret_cast<const std::byte*>(text.data()), text.size()),
                      options);
}

}  // namespace csp::storage
