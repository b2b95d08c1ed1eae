// Publication of staged directories and the cleanup of interrupted builds (publish.hpp).
#include "csp/storage/publish.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <mutex>
#include <set>
#include <sstream>

#include "csp/storage/atomic_file.hpp"

namespace csp::storage {

namespace fs = std::filesystem;

namespace {

constexpr const char* kOwnerName = "OWNER";  // "pid P\nhost H\nstart TICKS\nboot ID\n" of the building process

std::string hostName() {
  char buf[256] = {};
  if (::gethostname(buf, sizeof buf - 1) != 0) return "?";
  return buf;
}

std::string errnoText(int err) { return std::strerror(err); }

// When a process started, in clock ticks since boot (field 22 of /proc/PID/stat); 0 if unknown.
// With the boot id it tells a live owner from an unrelated process that reuses its pid.
std::uint64_t processStartTicks(pid_t pid) {
  std::ifstream in(fmt::format("/proc/{}/stat", pid));
  std::string line;
  if (!std::getline(in, line)) return 0;
  const auto close = line.rfind(')');
  if (close == std::string::npos) return 0;
  std::istringstream rest(line.substr(close + 1));
  std::string field;
  for (int i = 3; i <= 22; ++i)
    if (!(rest >> field)) return 0;
  std::uint64_t ticks = 0;
  for (char c : field) {
    if (c < '0' || c > '9') return 0;
    ticks = ticks * 10 + static_cast<std::uint64_t>(c - '0');
  }
  return ticks;
}

std::string bootId() {
  std::ifstream in("/proc/sys/kernel/random/boot_id");
  std::string id;
  in >> id;
  return id;
}

void fsyncPath(const fs::path& path, bool directory) {
  const int fd = ::open(path.c_str(), O_RDONLY | (directory ? O_DIRECTORY : 0) | O_CLOEXEC);
  if (fd < 0) throw PublishError(path, "cannot open to sync: " + errnoText(errno));
  const int rc = ::fsync(fd);
  const int err = errno;
  ::close(fd);
  if (rc != 0) throw PublishError(path, "fsync failed: " + errnoText(err));
}

fs::path normalizedTarget(fs::path target) {
  if (target.filename().empty()) target = target.parent_path();
  return target;
}

fs::path parentOf(const fs::path& target) { return target.has_parent_path() ? target.parent_path() : fs::path("."); }

// Temporary directories of the builders alive in this process. A leftover carrying our own pid
// but absent here comes from an earlier process that had the same pid (containers reuse small
// pids from run to run) and is as dead as any other.
class LiveBuilds {
 public:
  static LiveBuilds& instance() {
    static LiveBuilds live;
    return live;
  }
  bool add(const fs::path& dir) {
    std::lock_guard lock(mutex_);
    return dirs_.insert(fs::absolute(dir).lexically_normal()).second;
  }
  void remove(const fs::path& dir) {
    std::lock_guard lock(mutex_);
    dirs_.erase(fs::absolute(dir).lexically_normal());
  }
  bool contains(const fs::path& dir) {
    std::lock_guard lock(mutex_);
    return dirs_.count(fs::absolute(dir).lexically_normal()) != 0;
  }

 private:
  std::mutex mutex_;
  std::set<fs::path> dirs_;
};

}  // namespace

PublishError::PublishError(fs::path path, std::string problem)
    : std::runtime_error(fmt::format("{}: {}", path.string(), problem)),
      path_(std::move(path)),
      problem_(std::move(problem)) {}

fs::path publicationTarget(fs::path target) { return normalizedTarget(std::move(target)); }

fs::path temporaryDirectoryFor(const fs::path& target) {
  const fs::path t = normalizedTarget(target);
  return parentOf(t) / fmt::format(".{}.tmp-{}", t.filename().string(), ::getpid());
}

bool claimBuildDirectory(const fs::path& dir) { return LiveBuilds::instance().add(dir); }
void releaseBuildDirectory(const fs::path& dir) { LiveBuilds::instance().remove(dir); }

void writeBuildOwner(const fs::path& dir) {
  try {
    writeFileAtomically(dir / kOwnerName,
                        fmt::format("pid {}\nhost {}\nstart {}\nboot {}\n", ::getpid(), hostName(),
                                    processStartTicks(::getpid()), bootId()),
                        {.fsync = true, .temporaryTag = {}});
  } catch (const AtomicFileError& e) {
    throw PublishError(dir, fmt::format("cannot write {}: {}", kOwnerName, e.what()));
  }
}

// Without OWNER a leftover is judged by the pid in its name alone.
void removeBuildOwner(const fs::path& dir) {
  std::error_code ec;
  fs::remove(dir / kOwnerName, ec);
}

std::vector<LeftoverReport> cleanupLeftovers(const fs::path& targetIn) {
  const fs::path target = normalizedTarget(targetIn);
  const fs::path parent = parentOf(target);
  const std::string name = target.filename().string();
  const std::string tmpPrefix = "." + name + ".tmp-";
  const std::string oldPrefix = "." + name + ".old-";
  const std::string host = hostName();
  std::vector<LeftoverReport> reports;
  std::error_code ec;
  for (fs::directory_iterator it(parent, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string entry = it->path().filename().string();
    const bool isTmp = entry.starts_with(tmpPrefix);
    const bool isOld = entry.starts_with(oldPrefix);
    if (!isTmp && !isOld) continue;
    // ".<name>.tmp-<pid>" (a database), ".<name>.tmp-<pid>-XXXXXX" (a measurement directory of
    // csp-gen, made by mkdtemp), ".<name>.old-<pid>" (an interrupted two-rename replacement).
    std::string pidText = entry.substr((isTmp ? tmpPrefix : oldPrefix).size());
    if (const auto dash = pidText.find('-'); isTmp && dash != std::string::npos) {
      const std::string suffix = pidText.substr(dash + 1);
      if (suffix.size() != 6 || !std::all_of(suffix.begin(), suffix.end(),
                                             [](char c) { return std::isalnum(static_cast<unsigned char>(c)); }))
        continue;
      pidText.resize(dash);
    }
    if (pidText.empty() || pidText.size() > 9 || !std::all_of(pidText.begin(), pidText.end(), ::isdigit)) continue;
    const pid_t pid = static_cast<pid_t>(std::stol(pidText));

    LeftoverReport r{it->path(), false, {}};
    // Builds leave real directories: anything else at these names (a planted symbolic link) is
    // never followed, neither to read an OWNER nor to be restored as the target; it is removed
    // itself (remove_all does not follow links) or left alone like any other leftover.
    std::error_code typeError;
    const bool realDirectory = it->symlink_status(typeError).type() == fs::file_type::directory;
    std::string ownerHost = host, ownerBoot;
    std::uint64_t ownerStart = 0;
    if (std::ifstream owner; realDirectory && (owner.open(it->path() / kOwnerName), owner)) {
      std::string key, value;
      while (owner >> key >> value) {
        if (key == "host") ownerHost = value;
        if (key == "boot") ownerBoot = value;
        if (key == "start") ownerStart = std::strtoull(value.c_str(), nullptr, 10);
      }
    }
    bool alive = false;
    if (pid == ::getpid()) {
      alive = LiveBuilds::instance().contains(it->path());
    } else {
      alive = ::kill(pid, 0) == 0 || errno == EPERM;
      // A reboot since, or another process under the same pid, means the owner is gone.
      if (alive && !ownerBoot.empty() && ownerBoot != bootId()) alive = false;
      if (alive && ownerStart != 0) {
        const auto start = processStartTicks(pid);
        if (start != 0 && start != ownerStart) alive = false;
      }
    }
    if (ownerHost != host) {
      r.reason = fmt::format(
          "left alone: written by pid {} on host {}; if no CSP tool writing {} is active there, "
          "remove it with: rm -rf '{}'",
          pid, ownerHost, target.string(), it->path().string());
    } else if (alive) {
      r.reason = fmt::format(
          "left alone: its owner, process {}, is still running (another run writing {}?); if that process is stuck, "
          "stop it and the next run removes this directory",
          pid, target.string());
    } else if (isOld && realDirectory && !fs::exists(target)) {
      // A replacement was interrupted between its two renames: the old database is complete.
      fs::rename(it->path(), target, ec);
      r.removed = !ec;
      r.reason = ec ? "could not restore the previous database: " + ec.message()
                    : fmt::format("restored as {} (interrupted replacement by dead process {})", target.string(), pid);
      ec.clear();
    } else {
      fs::remove_all(it->path(), ec);
      r.removed = !ec;
      r.reason = ec ? "could not remove: " + ec.message() : fmt::format("removed (process {} is dead)", pid);
      ec.clear();
    }
    reports.push_back(std::move(r));
  }
  return reports;
}

void publishDirectory(const fs::path& staging, const fs::path& target,
                      const std::function<void(std::string_view)>& step) {
  std::error_code ec;
  const fs::path parent = parentOf(target);
  auto note = [&](std::string_view s) {
    if (step) step(s);
  };
  if (fs::exists(fs::symlink_status(target, ec))) {
    // Swap in one step so that the target name always holds a complete directory. The previous
    // one ends up under the staging name and is removed (a leftover if we die now).
    if (::renameat2(AT_FDCWD, staging.c_str(), AT_FDCWD, target.c_str(), RENAME_EXCHANGE) == 0) {
      fsyncPath(parent, true);
      note("exchanged");
      fs::remove_all(staging, ec);
    } else if (errno == EINVAL || errno == ENOSYS) {
      // File systems without RENAME_EXCHANGE: two renames, the previous directory moved aside
      // under ".<name>.old-<pid>" (cleanupLeftovers() restores it if we die between them).
      const fs::path old = parent / fmt::format(".{}.old-{}", target.filename().string(), ::getpid());
      fs::rename(target, old, ec);
      if (ec) throw PublishError(target, "cannot move the previous one aside: " + ec.message());
      fs::rename(staging, target, ec);
      if (ec) {
        std::error_code ignore;
        fs::rename(old, target, ignore);
        throw PublishError(target, "cannot publish: " + ec.message());
      }
      fsyncPath(parent, true);
      note("exchanged");
      fs::remove_all(old, ec);
    } else {
      throw PublishError(target, "cannot replace: " + errnoText(errno));
    }
    return;
  }
  // NOREPLACE: a directory that appeared meanwhile (another run) is not silently replaced.
  if (::renameat2(AT_FDCWD, staging.c_str(), AT_FDCWD, target.c_str(), RENAME_NOREPLACE) != 0) {
    if (errno != EINVAL && errno != ENOSYS) throw PublishError(target, "cannot publish: " + errnoText(errno));
    fs::rename(staging, target, ec);
    if (ec) throw PublishError(target, "cannot publish: " + ec.message());
  }
  fsyncPath(parent, true);
}

}  // namespace csp::storage
