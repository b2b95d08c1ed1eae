#include "signal_cleanup.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <csignal>
#include <cstring>
#include <ctime>
#include <mutex>
#include <thread>

namespace csp::cli {

namespace {

constexpr std::size_t kPathMax = 4096;
char g_dir[kPathMax];              // the directory to remove, NUL-terminated
std::atomic<int> g_owner{0};       // a process of this host that may write into it, or 0
std::atomic<bool> g_armed{false};  // g_dir is complete
const char* g_tool = "csp";
bool g_report = true;  // print the one line (rank 0 only)

void writeText(const char* s) {
  const auto n = std::strlen(s);
  [[maybe_unused]] auto rc = ::write(STDERR_FILENO, s, n);
}

// getdents64 records, as the kernel lays them out.
struct LinuxDirent64 {
  unsigned long long ino;
  long long off;
  unsigned short reclen;
  unsigned char type;
  char name[1];
};

void removeEntries(int dirFd, int depth) {
  if (depth > 32) return;
  alignas(8) char buffer[4096];
  for (;;) {
    const long n = ::syscall(SYS_getdents64, dirFd, buffer, sizeof buffer);
    if (n <= 0) return;
    bool removedAny = false;
    for (long at = 0; at < n;) {
      auto* d = reinterpret_cast<LinuxDirent64*>(buffer + at);
      at += d->reclen;
      const char* name = d->name;
      if (std::strcmp(name, ".") == 0 || std::strcmp(name, "..") == 0) continue;
      if (::unlinkat(dirFd, name, 0) == 0) {
        removedAny = true;
        continue;
      }
      const int child = ::openat(dirFd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
      if (child >= 0) {
        removeEntries(child, depth + 1);
        ::close(child);
      }
      if (::unlinkat(dirFd, name, AT_REMOVEDIR) == 0) removedAny = true;
    }
    // Entries were removed under the cursor: start the listing over until nothing goes.
    if (removedAny)
      ::lseek(dirFd, 0, SEEK_SET);
    else
      return;
  }
}

bool exists(const char* path) {
  struct stat st;
  return ::lstat(path, &st) == 0;
}

// Removes the directory and does not return while it exists, or while its owner process (whose
// threads may bring it back: a database being opened, a shard directory being created) lives,
// at most kGoneWaitMs: under mpirun every death hastens the SIGKILL of the other processes, and
// an owner killed before it got to remove what it created leaves that behind.
constexpr int kGoneWaitMs = 3000;
void removeUntilGone(const char* dir, int owner) {
  removeTreeNoAlloc(dir);
  for (int waited = 0; waited < kGoneWaitMs; waited += 5) {
    const bool ownerAlive = owner > 0 && (::kill(owner, 0) == 0 || errno == EPERM);
    if (!ownerAlive && !exists(dir)) return;
    const timespec pause{0, 5'000'000};
    ::nanosleep(&pause, nullptr);
    removeTreeNoAlloc(dir);
  }
}

void onTerminate(int sig) {
  const int saved = errno;
  if (g_armed.load()) {
    removeUntilGone(g_dir, g_owner.load());
    if (g_report) {
      writeText(g_tool);
      writeText(": stopped by a termination signal; removed the temporary directory ");
      writeText(g_dir);
      writeText("\n");
    }
  }
  errno = saved;
  ::signal(sig, SIG_DFL);
  ::raise(sig);
}

}  // namespace

void removeTreeNoAlloc(const char* dir) {
  // Other threads of the process may still be creating files in it (csp-gen's writers): list
  // and remove again until the directory itself goes.
  for (int attempt = 0; attempt < 100; ++attempt) {
    const int fd = ::open(dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd >= 0) {
      removeEntries(fd, 0);
      ::close(fd);
    }
    if (::rmdir(dir) == 0 || (errno != ENOTEMPTY && errno != EEXIST)) return;
  }
}

void installTerminationCleanup(const char* tool, bool report) {
  g_tool = tool;
  g_report = report;
  struct sigaction sa {};
  sa.sa_handler = onTerminate;
  sigemptyset(&sa.sa_mask);
  for (int sig : {SIGTERM, SIGINT, SIGHUP, SIGXCPU}) sigaddset(&sa.sa_mask, sig);
  sa.sa_flags = 0;
  for (int sig : {SIGTERM, SIGINT, SIGHUP, SIGXCPU}) ::sigaction(sig, &sa, nullptr);
}

void removeOnTermination(const std::filesystem::path& dir, int ownerPid) {
  g_armed.store(false);
  g_owner.store(ownerPid);
  const std::string text = dir.string();
  if (text.empty() || text.size() >= kPathMax) return;
  std::memcpy(g_dir, text.c_str(), text.size() + 1);
  g_armed.store(true);
}

struct OrphanWatchdog::Impl {
  std::mutex mutex;
  std::condition_variable wake;
  bool stop = false;  // under mutex
  std::thread thread;
};

// Polls the parent every 200 ms; stopping wakes it at once, so that ending a process does not
// wait out the rest of a poll interval (up to 0.2 s at the end of every csp-prof-mpi run).
OrphanWatchdog::OrphanWatchdog(const char* tool) : impl_(new Impl) {
  const pid_t parent = ::getppid();
  impl_->thread = std::thread([this, parent, tool] {
    std::unique_lock lock(impl_->mutex);
    while (!impl_->wake.wait_for(lock, std::chrono::milliseconds(200), [this] { return impl_->stop; })) {
      if (::getppid() == parent) continue;
      if (g_armed.load()) removeTreeNoAlloc(g_dir);
      writeText(tool);
      writeText(": the launcher of this process is gone (killed?); exiting\n");
      ::_exit(1);
    }
  });
}

OrphanWatchdog::~OrphanWatchdog() {
  {
    std::lock_guard lock(impl_->mutex);
    impl_->stop = true;
  }
  impl_->wake.notify_one();
  impl_->thread.join();
  delete impl_;
}

}  // namespace csp::cli
