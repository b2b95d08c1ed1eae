// The MPI operations csp-prof-mpi needs, on byte buffers, and the one failure discipline that
// keeps every rank in step when any of them fails (docs/postprocessing.md, "Failures"):
//
//  * Every collective below begins with a failure check: a non-blocking allreduce of one flag.
//  * A rank whose own work throws calls fail(message) instead of its next collective. Its flag
//    joins the other ranks' next check, which throws PeerFailure there; they unwind and call
//    fail("") too. Each rank has then made the same number of checks, whatever phase it was in.
//  * fail() collects the failing ranks' messages at rank 0, bounded in time. If the others do not
//    reach a check within the grace period (long local work, a stuck peer), the failing rank prints
//    its message, runs the abort hooks (removing temporary files) and calls MPI_Abort.
//  * Callbacks that run between the MPI calls of one collective (the merge of reduceTree) are
//    caught inside it, so a collective is never left half done.
// No other code calls MPI, so a new phase cannot desynchronize the ranks. Without a launcher
// (no MPI or PMI rank in the environment) MPI is not started at all: one process, no collective
// calls MPI, and no MPI runtime daemon is spawned for a singleton (docs/postprocessing.md).
#pragma once

#ifndef OMPI_SKIP_MPICXX
#define OMPI_SKIP_MPICXX 1
#endif
#include <mpi.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <stdexcept>
#include <string>
#include <vector>

#include "csp/storage/bytes.hpp"

namespace csp::reduce {

// MPI for the lifetime of this object (csp-prof-mpi's main()): MPI_Init_thread (funneled: only
// the thread that made it calls MPI) on construction, MPI_Finalize on destruction, so that every
// way out of main ends MPI once. Started by a launcher (launchedByMpiLauncher()) or when
// CSP_MPI=always; otherwise (or CSP_MPI=never) the process is rank 0 of 1 and world() is
// MPI_COMM_NULL, which Comm takes as "one process, no MPI".
class MpiSession {
 public:
  MpiSession(int& argc, char**& argv);
  ~MpiSession();
  MpiSession(const MpiSession&) = delete;
  MpiSession& operator=(const MpiSession&) = delete;
  int rank() const { return rank_; }
  int size() const { return size_; }
  MPI_Comm world() const { return started_ ? MPI_COMM_WORLD : MPI_COMM_NULL; }

 private:
  int rank_ = 0;
  int size_ = 1;
  bool started_ = false;
};

// What decides whether Open MPI's cm PML is left out before MPI starts (pmlLeavingOutCm).
struct TransportFacts {
  bool keep = false;              // CSP_MPI_TRANSPORT=keep
  bool pmlInEnvironment = false;  // OMPI_MCA_pml is set (by the user, mpirun -mca or the site)
  bool paramFilesChosen = false;  // OMPI_MCA_mca_base_param_files is set
  bool networkDevice = false;     // a device that cm's transports drive (see networkDevicePresent)
  std::string pmlInFiles;         // `pml` of the user's, else the system's mca-params.conf ("": none)
};

// The value OMPI_MCA_pml gets so that Open MPI does not try its cm PML, or "" to leave Open MPI's
// own choice alone. cm drives its transports (MTLs: PSM for True Scale, PSM2 for Omni-Path,
// libfabric for Slingshot, EFA, ...) through libraries that Open MPI loads while it decides, and
// the PSM and PSM2 libraries calibrate a clock in their constructors with about 100 ms of sleep
// each, even on a node without their hardware. There cm cannot be selected (libfabric's providers
// for plain networks are excluded by default): left out, MPI_Init takes 0.03 s instead of 0.23 s
// and the same PML (ob1) carries the messages. Left alone: when CSP_MPI_TRANSPORT=keep, when the
// environment or a parameter-file list names PML choices, when a parameter file selects PMLs
// (no leading ^) or already excludes cm, and when such a network device is present.
std::string pmlLeavingOutCm(const TransportFacts& facts);
// The facts of this process and node (environment, parameter files, devices).
TransportFacts transportFacts();
// `pml` of an Open MPI parameter file (`name = value` lines, # comments; the last one counts),
// "" when it has none or cannot be read.
std::string pmlOfParamFile(const std::filesystem::path& file);

// Whether this node has a device of a network that Open MPI's cm PML drives: an entry of
// /sys/class/infiniband (InfiniBand, RoCE, Omni-Path, EFA), /dev/hfi1_*, /dev/ipath* or /dev/cxi*.
bool networkDevicePresent();

// Sets TCP_NODELAY on every TCP socket this process has open and returns how many it changed.
// Called once MPI has started (unless CSP_MPI_TRANSPORT=keep): the only TCP sockets then are
// MPI's, among them the connection to the process manager's PMIx server (mpirun, or slurmd under
// srun), which Open MPI 4.1's PMIx client opens over loopback TCP without it. Its exchanges are
// short messages sent back to back: Nagle's algorithm holds each one until the previous one is
// acknowledged, and the server acknowledges late (delayed ACKs, about 40 ms). MPI_Finalize, a few
// such messages, took 45 ms here for that reason and 4 ms with the option set. Disabling Nagle
// on a connection changes when its bytes go out, never what arrives.
std::size_t disableNagleOnTcpSockets();

// Whether this process was started by an MPI launcher (mpirun/mpiexec of Open MPI, MPICH, Intel
// MPI, MVAPICH; srun; aprun): a rank or PMI variable one of them sets is in the environment.
bool launchedByMpiLauncher();

// Thrown by a collective on the healthy ranks when another rank has failed.
class PeerFailure : public std::runtime_error {
 public:
  PeerFailure() : std::runtime_error("another process failed") {}
};

// Inside a catch block: the message Comm::fail() takes for the exception being handled; empty for
// a PeerFailure (the rank that failed reports why), "unknown error" when nothing better is known.
std::string failureMessageOfCurrentException();

class Comm {
 public:
  // `grace`: how long fail() waits for the other ranks before aborting the job
  // (CSP_FAILURE_GRACE_SECONDS overrides the default of 10 s).
  // MPI_COMM_NULL: one process without MPI (MpiSession without a launcher).
  explicit Comm(MPI_Comm comm);
  Comm(const Comm&) = delete;
  Comm& operator=(const Comm&) = delete;

  int rank() const { return rank_; }
  int size() const { return size_; }
  std::chrono::milliseconds grace() const { return grace_; }

  // Collectives: every rank calls them in the same order. Each may throw PeerFailure.
  // Root's bytes to everyone.
  void broadcast(std::vector<std::byte>& bytes, int root = 0) const;
  // Every rank's bytes at the root, in rank order (empty elsewhere).
  std::vector<std::vector<std::byte>> gather(const std::vector<std::byte>& bytes, int root = 0) const;
  // Every rank's bytes everywhere, in rank order.
  std::vector<std::vector<std::byte>> allgather(const std::vector<std::byte>& bytes) const;
  // outgoing[r] goes to rank r; returns what each rank sent here, in rank order.
  std::vector<std::vector<std::byte>> alltoall(const std::vector<std::vector<std::byte>>& outgoing) const;
  std::uint64_t sum(std::uint64_t value) const;
  // Binomial-tree reduction towards rank 0: `absorb(theirs)` folds a child's bytes into this
  // rank's state, `produce()` serializes that state for the parent (called once, on every rank
  // but 0, after its children). If either throws, the tree still completes (the parent is told
  // that nothing comes and skips it) and the exception is rethrown afterwards on that rank only.
  void reduceTree(const std::function<void(const std::vector<std::byte>&)>& absorb,
                  const std::function<std::vector<std::byte>()>& produce) const;
  // A check with no data: every rank is past the same point without failure.
  void barrier() const;

  // Words of memory that neighbouring ranks running on the same host share, for claims by
  // compare-and-swap that never wait for the other rank, and progress each publishes for the
  // other: balancing the read between neighbours (docs/postprocessing.md, "Balancing").
  // MPI_Win_allocate_shared on the host's communicator (MPI_Comm_split_type), so a rank that fails
  // or stalls cannot block its neighbour. `mine` is this rank's `count` words; `lower` and
  // `upper` are rank - 1's and rank + 1's, null where that neighbour runs on another host or does
  // not exist. Every word starts at zero.
  struct NeighbourWords {
    std::uint64_t* mine = nullptr;
    std::uint64_t* lower = nullptr;
    std::uint64_t* upper = nullptr;
    MPI_Win window = MPI_WIN_NULL;
    MPI_Comm host = MPI_COMM_NULL;
  };
  // Collective. Without MPI or with one process: no word at all.
  NeighbourWords shareWithNeighbours(std::size_t count) const;
  // Collective: frees the words once no rank uses them any more. Not called on the failure path:
  // a window left allocated ends with MPI_Finalize or MPI_Abort.
  void release(NeighbourWords& words) const;

  // The failure path, called once on every rank after its work threw (`message` says why) or a
  // collective threw PeerFailure (`message` empty). Returns, on rank 0, the non-empty messages of
  // the ranks that failed, in rank order; empty elsewhere. Aborts the job (after printing and the
  // abort hooks) if the ranks do not all arrive within the grace period.
  struct RankMessage {
    int rank = 0;
    std::string message;
  };
  std::vector<RankMessage> fail(const std::string& message) const;
  // One text for rank 0 to show: the distinct messages in rank order, and with several processes
  // the ranks they came from.
  std::string describe(const std::vector<RankMessage>& failures) const;
  // Run on this rank just before MPI_Abort (in registration order); must not throw.
  void onAbort(std::function<void()> hook) const;

 private:
  void check() const;                                   // the failure check every collective begins with
  bool wait(MPI_Request& request, bool bounded) const;  // false: the grace period ran out
  [[noreturn]] void abortJob(const std::string& why) const;
  void broadcastBytes(std::vector<std::byte>& bytes, int root) const;  // without the check
  std::vector<std::vector<std::byte>> gatherBytes(const std::vector<std::byte>& bytes, int root) const;
  void sendBytes(int to, const std::vector<std::byte>& bytes, int tag) const;
  std::vector<std::byte> recvBytes(int from, int tag) const;

  MPI_Comm comm_;
  int rank_ = 0;
  int size_ = 1;
  std::chrono::milliseconds grace_{10'000};
  mutable bool failureAgreed_ = false;  // a check has already seen a failure
  mutable std::vector<std::function<void()>> abortHooks_;
};

// The messages between ranks are written and read with the one byte codec
// (csp/storage/bytes.hpp); a malformed message throws std::runtime_error.
using Packer = storage::ByteWriter<std::vector<std::byte>>;
using Unpacker = storage::ByteReader<std::runtime_error>;

// Test hook (docs/postprocessing.md): CSP_FAULT_INJECT="RANK:PHASE[:ACTION],..." makes rank RANK
// fail at the start of PHASE (read, structure, metrics, exchange, merge, publish). ACTION is
// `fail` (throw, the default), `stall` (sleep for 10 minutes: long local work) or `kill`
// (SIGKILL itself).
void faultPoint(const Comm& comm, const char* phase);

}  // namespace csp::reduce
