// Ranks of one node that a launcher terminates end together.
//
// Open MPI's mpirun ends a job by sending its ranks SIGTERM, waiting odls_base_sigkill_timeout
// seconds (1 by default) and sending SIGKILL. Every rank that dies meanwhile interrupts that
// wait, which then resumes with its remaining whole seconds only: with the default, the first
// rank to finish writing its profiles and die has the others killed at once, and in general
// the k-th death leaves the rest at most (timeout - k) seconds. So a rank that has written its
// profiles does not die yet: it waits until every rank of its node that is terminating has
// written too (bounded by the termination wait), and then all die within milliseconds.
//
// The ranks meet through abstract Unix socket names (no file, gone when the process is):
// "csp-term/<uid>/<job>/<local rank>/alive" from start-up, ".../started" when a rank's writer
// starts, ".../done" when it has written. A rank waits for every peer that started and is not
// done, and, for a grace period, for live peers that have not started yet: the launcher signals
// them one after the other, and on a loaded node a signalled rank may wait a while for a CPU.
// A rank terminated alone (`kill` of one pid) is held up by that grace period; ranks that have
// ended hold up nobody.
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "runtime.hpp"

namespace csp::measure {

namespace {

constexpr int kMaxPeers = 1024;                    // local ranks followed; beyond, no waiting
constexpr std::uint64_t kGraceNs = 3'000'000'000;  // for live peers whose signal is still on its way
constexpr std::uint64_t kPollNs = 2'000'000;

struct Peers {
  bool on = false;
  int localRank = -1;
  int localSize = 0;
  char prefix[96] = {};  // "csp-term/<uid>/<job>/"
};
Peers g_peers;

bool readInt(const char* name, int& out) {
  const char* v = std::getenv(name);
  if (v == nullptr || *v == '\0') return false;
  char* end = nullptr;
  const long n = std::strtol(v, &end, 10);
  if (*end != '\0' || n < 0 || n > 1'000'000) return false;
  out = static_cast<int>(n);
  return true;
}

socklen_t addressOf(int rank, const char* state, sockaddr_un& a) {
  std::memset(&a, 0, sizeof a);
  a.sun_family = AF_UNIX;
  // Abstract name: a leading NUL, not terminated.
  const int n = std::snprintf(a.sun_path + 1, sizeof a.sun_path - 1, "%s%d/%s", g_peers.prefix, rank, state);
  return static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + static_cast<std::size_t>(n));
}

// Holds the name (rank, state) until the process ends; returns the socket (-1 if none).
int bindName(int rank, const char* state) {
  const int fd = ::socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  sockaddr_un a;
  const socklen_t len = addressOf(rank, state, a);
  if (::bind(fd, reinterpret_cast<sockaddr*>(&a), len) == 0) return fd;
  ::close(fd);
  return -1;
}

constinit int g_aliveSocket = -1;

bool nameExists(int probe, int rank, const char* state) {
  sockaddr_un a;
  const socklen_t len = addressOf(rank, state, a);
  return ::connect(probe, reinterpret_cast<sockaddr*>(&a), len) == 0;
}

}  // namespace

void initTerminationPeers() {
  g_peers = Peers{};
  if (g_aliveSocket >= 0) ::close(g_aliveSocket);  // a fork child's copy: the parent is the rank
  g_aliveSocket = -1;
  if (isDescendantProcess()) return;  // a rank's child is no rank of its own
  Peers p;
  const bool local =
      (readInt("OMPI_COMM_WORLD_LOCAL_RANK", p.localRank) && readInt("OMPI_COMM_WORLD_LOCAL_SIZE", p.localSize)) ||
      (readInt("MPI_LOCALRANKID", p.localRank) && readInt("MPI_LOCALNRANKS", p.localSize));
  if (!local || p.localSize < 2 || p.localSize > kMaxPeers || p.localRank >= p.localSize) return;
  const char* job = nullptr;
  for (const char* name : {"PMIX_NAMESPACE", "OMPI_MCA_ess_base_jobid", "PMI_JOBID"})
    if (const char* v = std::getenv(name); job == nullptr && v != nullptr && *v != '\0') job = v;
  if (job == nullptr) return;
  const int n = std::snprintf(p.prefix, sizeof p.prefix, "csp-term/%u/%.60s/", static_cast<unsigned>(::getuid()), job);
  if (n <= 0 || static_cast<std::size_t>(n) >= sizeof p.prefix) return;
  p.on = true;
  g_peers = p;
  g_aliveSocket = bindName(p.localRank, "alive");
}

void announceTerminating() {
  if (g_peers.on) bindName(g_peers.localRank, "started");
}

void waitForTerminatingPeers(std::uint64_t deadlineNs) {
  if (!g_peers.on) return;
  bindName(g_peers.localRank, "done");
  const int probe = ::socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (probe < 0) return;
  static bool done[kMaxPeers];
  std::memset(done, 0, sizeof done);
  done[g_peers.localRank] = true;
  const std::uint64_t graceEnd = monotonicNs() + kGraceNs;
  for (;;) {
    bool waiting = false;
    const bool inGrace = monotonicNs() < graceEnd;
    for (int r = 0; r < g_peers.localSize; ++r) {
      if (done[r]) continue;
      done[r] = nameExists(probe, r, "done");
      // A peer that is writing is waited for; a live one not yet signalled, during the grace.
      if (!done[r] && (nameExists(probe, r, "started") || (inGrace && nameExists(probe, r, "alive")))) waiting = true;
    }
    if (!waiting || monotonicNs() >= deadlineNs) break;
    const timespec pause{0, static_cast<long>(kPollNs)};
    ::nanosleep(&pause, nullptr);
  }
  ::close(probe);
}

}  // namespace csp::measure
