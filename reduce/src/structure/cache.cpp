// The on-disk cache of module structures (cache.hpp).
#include "cache.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <thread>

#include "csp/storage/atomic_file.hpp"
#include "csp/storage/bytes.hpp"
#include "csp/storage/checksum.hpp"

namespace csp::reduce::structure {

namespace fs = std::filesystem;

namespace {

constexpr char kFileMagic[8] = {'C', 'S', 'P', 'S', 'T', 'R', 'U', 'C'};
constexpr std::uint64_t kMaxEntryBytes = 1ULL << 31;

std::string errnoText() { return std::strerror(errno); }

}  // namespace

fs::path defaultCacheDirectory() {
  if (const char* c = std::getenv("CSP_STRUCTURE_CACHE"); c != nullptr && *c != '\0')
    return std::string(c) == "off" ? fs::path() : fs::path(c);
  if (const char* x = std::getenv("XDG_CACHE_HOME"); x != nullptr && *x != '\0')
    return fs::path(x) / "csp" / "structure";
  if (const char* h = std::getenv("HOME"); h != nullptr && *h != '\0')
    return fs::path(h) / ".cache" / "csp" / "structure";
  return {};
}

fs::path StructureCache::entryPath(const CacheIdentity& id) const {
  return dir_ / fmt::format("{}.v{}.cspstruct", id.key, kCacheVersion);
}

std::optional<ModuleStructure> StructureCache::load(const CacheIdentity& id, std::string& problem) const {
  problem.clear();
  if (!enabled()) return std::nullopt;
  const fs::path path = entryPath(id);
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
  if (fd < 0) {
    if (errno != ENOENT) problem = fmt::format("structure cache entry {}: cannot open: {}", path.string(), errnoText());
    return std::nullopt;
  }
  std::vector<std::byte> bytes;
  {
    struct stat st {};
    if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || static_cast<std::uint64_t>(st.st_size) > kMaxEntryBytes) {
      ::close(fd);
      problem = fmt::format("structure cache entry {}: not a regular file of a plausible size; ignored", path.string());
      return std::nullopt;
    }
    bytes.resize(static_cast<std::size_t>(st.st_size));
    std::size_t got = 0;
    while (got < bytes.size()) {
      const auto n = ::read(fd, bytes.data() + got, bytes.size() - got);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) break;
      got += static_cast<std::size_t>(n);
    }
    ::close(fd);
    bytes.resize(got);
  }
  auto damaged = [&](const std::string& why) {
    problem = fmt::format("structure cache entry {} is damaged ({}); analysing the module again", path.string(), why);
    return std::nullopt;
  };
  if (bytes.size() < sizeof kFileMagic + 8) return damaged("truncated");
  if (std::memcmp(bytes.data(), kFileMagic, sizeof kFileMagic) != 0) return damaged("not a structure cache file");
  std::uint64_t stored = 0;
  std::memcpy(&stored, bytes.data() + bytes.size() - 8, 8);
  if (storage::checksum64(std::span<const std::byte>(bytes).first(bytes.size() - 8)) != stored)
    return damaged("checksum mismatch: truncated or overwritten");
  try {
    storage::ByteReader<std::runtime_error> r(
        std::span<const std::byte>(bytes).subspan(sizeof kFileMagic, bytes.size() - sizeof kFileMagic - 8),
        "structure cache entry");
    if (r.u64() != kCacheVersion) return damaged("another version");
    if (r.textView() != id.check) {
      problem = fmt::format(
          "structure cache entry {} belongs to another file with this name ({}); analysing the module again",
          path.string(), id.module);
      return std::nullopt;
    }
    const auto payload = r.bytes();
    r.expectDone();
    return ModuleStructure::decode(payload);
  } catch (const std::exception& e) {
    return damaged(e.what());
  }
}

bool StructureCache::store(const CacheIdentity& id, const ModuleStructure& structure, std::string& problem) const {
  problem.clear();
  if (!enabled()) return false;
  std::error_code ec;
  fs::create_directories(dir_, ec);
  if (ec) {
    problem = fmt::format("structure cache {}: cannot create the directory: {}", dir_.string(), ec.message());
    return false;
  }
  storage::ByteWriter<std::vector<std::byte>> w;
  w.raw(std::string_view(kFileMagic, sizeof kFileMagic));
  w.u64(kCacheVersion);
  w.text(id.check);
  w.bytes(structure.encode());
  auto bytes = w.take();
  const std::uint64_t sum = storage::checksum64(bytes);
  const auto* sp = reinterpret_cast<const std::byte*>(&sum);
  bytes.insert(bytes.end(), sp, sp + 8);
  // Readers see the old entry, none or the new one, never a part; concurrent writers of one
  // entry write the same bytes.
  const fs::path final = entryPath(id);
  try {
    storage::writeFileAtomically(final, bytes, {.fsync = true, .temporaryTag = {}});
  } catch (const storage::AtomicFileError& e) {
    problem =
        fmt::format("structure cache {}: cannot write {}: {}", dir_.string(), final.filename().string(), e.what());
    return false;
  }
  return true;
}

StructureCache::Lock& StructureCache::Lock::operator=(Lock&& o) noexcept {
  if (this != &o) {
    release();
    fd_ = o.fd_;
    path_ = std::move(o.path_);
    o.fd_ = -1;
  }
  return *this;
}

// The file goes while the lock is held: a process waiting on it then holds a lock on a file no
// longer in the directory, which lockImpl notices (sameFile) and opens the path again.
void StructureCache::Lock::release() noexcept {
  if (fd_ < 0) return;
  ::unlink(path_.c_str());
  ::close(fd_);  // closing releases the flock
  fd_ = -1;
}

namespace {

// Whether `fd` is still the file at `path` (and not one a previous holder removed).
bool sameFile(int fd, const fs::path& path) {
  struct stat open {
  }, named{};
  return ::fstat(fd, &open) == 0 && ::stat(path.c_str(), &named) == 0 && open.st_dev == named.st_dev &&
         open.st_ino == named.st_ino;
}

}  // namespace

StructureCache::Lock StructureCache::lockImpl(const CacheIdentity& id, double timeoutSeconds,
                                              const std::function<bool()>& ready) const {
  if (!enabled()) return {};
  std::error_code ec;
  fs::create_directories(dir_, ec);
  const fs::path path = dir_ / fmt::format(".{}.v{}.lock", id.key, kCacheVersion);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeoutSeconds);
  int fd = -1;
  for (;;) {
    if (fd < 0) fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0644);
    if (fd < 0) return {};
    if (::flock(fd, LOCK_EX | LOCK_NB) == 0) {
      if (sameFile(fd, path)) return Lock(fd, path);
      ::close(fd);  // the previous holder removed it: lock the path's file
      fd = -1;
      continue;
    }
    if (errno != EWOULDBLOCK && errno != EINTR) break;  // no flock here: go on without
    if (ready() || std::chrono::steady_clock::now() >= deadline) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  ::close(fd);
  return {};
}

}  // namespace csp::reduce::structure
