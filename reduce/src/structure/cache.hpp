// The on-disk cache of module structures (docs/postprocessing.md, "The structure cache"): one
// file per module and analysis version, written atomically, validated on every read, shared by
// the processes of a csp-prof-mpi job and by later runs.
#pragma once

#include <filesystem>
#include <functional>
#include <optional>
#include <string>

#include "csp/reduce/structure.hpp"

namespace csp::reduce::structure {

// Bump when the analysis or the byte form changes: entries of other versions are never read.
// 2: loops without a line, starts after padding; 3: loop files absolute; 4: the one checksum
// (storage::checksum64) instead of FNV-1a; 5: lines of code without .debug_aranges (clang).
inline constexpr unsigned kCacheVersion = 5;

// What a cache entry belongs to.
struct CacheIdentity {
  std::string key;     // the file name's stem: the build-id in hex, or "path-" + a hash of path, size and mtime
  std::string check;   // everything the entry must match, stored in it and compared on reading
  std::string module;  // the module's path, for messages
};

// The default directory: $CSP_STRUCTURE_CACHE, else $XDG_CACHE_HOME/csp/structure, else
// $HOME/.cache/csp/structure; empty (no cache) when CSP_STRUCTURE_CACHE is "off" or nothing is set.
std::filesystem::path defaultCacheDirectory();

class StructureCache {
 public:
  explicit StructureCache(std::filesystem::path directory) : dir_(std::move(directory)) {}
  bool enabled() const { return !dir_.empty(); }
  const std::filesystem::path& directory() const { return dir_; }
  std::filesystem::path entryPath(const CacheIdentity& id) const;

  // The cached structure; nullopt when there is none. A damaged, truncated or foreign entry is
  // not used: `problem` then says why (the caller warns and analyses afresh).
  std::optional<ModuleStructure> load(const CacheIdentity& id, std::string& problem) const;
  // Writes the entry with the atomic file writer (storage/atomic_file.hpp: readers see the old
  // entry, none, or the new one, never a part). False with `problem` set when it cannot.
  bool store(const CacheIdentity& id, const ModuleStructure& structure, std::string& problem) const;

  // An advisory lock on one entry (flock), so that the processes of a job on one host analyse a
  // module once: held until destroyed, when its lock file is removed (no empty .lock files stay
  // in the cache). Without a lock (read-only directory, a file system without flock) `held()`
  // is false and everybody analyses.
  class Lock {
   public:
    Lock() = default;
    Lock(int fd, std::filesystem::path path) : fd_(fd), path_(std::move(path)) {}
    Lock(Lock&& o) noexcept : fd_(o.fd_), path_(std::move(o.path_)) { o.fd_ = -1; }
    Lock& operator=(Lock&& o) noexcept;
    ~Lock() { release(); }
    bool held() const { return fd_ >= 0; }

   private:
    void release() noexcept;
    int fd_ = -1;
    std::filesystem::path path_;
  };
  // Waits for the entry's lock, at most `timeoutSeconds`; `ready` is asked between attempts
  // (another process may have written the entry meanwhile) and ends the wait when it is true.
  template <typename Ready>
  Lock lock(const CacheIdentity& id, double timeoutSeconds, Ready&& ready) const {
    return lockImpl(id, timeoutSeconds, [&] { return static_cast<bool>(ready()); });
  }

 private:
  Lock lockImpl(const CacheIdentity& id, double timeoutSeconds, const std::function<bool()>& ready) const;
  std::filesystem::path dir_;
};

}  // namespace csp::reduce::structure
