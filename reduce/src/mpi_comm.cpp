#include "csp/reduce/mpi_comm.hpp"

#include <fmt/format.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <sys/stat.h>

#include <algorithm>
#include <atomic>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <string_view>
#include <thread>

#include "csp/storage/profile_io.hpp"

namespace csp::reduce {

namespace {

void mpiCheck(int rc, const char* what) {
  if (rc != MPI_SUCCESS) {
    char text[MPI_MAX_ERROR_STRING];
    int len = 0;
    MPI_Error_string(rc, text, &len);
    throw std::runtime_error(fmt::format("MPI {} failed: {}", what, std::string(text, static_cast<std::size_t>(len))));
  }
}

// MPI counts are ints: large buffers travel in chunks.
constexpr std::size_t kChunk = std::size_t{1} << 30;
constexpr std::size_t kMaxMessage = 64 * 1024;  // of one rank's failure message

constexpr int kEagerTests = 100;  // Comm::wait's tests before it sleeps between tests
constexpr int kGatherTag = 7101;
constexpr int kAlltoallTag = 7202;
constexpr int kTreeTag = 7301;

std::size_t chunks(std::uint64_t n) { return static_cast<std::size_t>((n + kChunk - 1) / kChunk); }
int chunkLength(std::uint64_t n, std::size_t c) {
  return static_cast<int>(std::min<std::uint64_t>(kChunk, n - c * kChunk));
}

std::chrono::milliseconds graceFromEnvironment() {
  if (const char* v = std::getenv("CSP_FAILURE_GRACE_SECONDS"); v && *v) {
    char* end = nullptr;
    const double s = std::strtod(v, &end);
    if (end && *end == '\0' && s > 0 && s < 1e6) return std::chrono::milliseconds(static_cast<long long>(s * 1000));
  }
  return std::chrono::milliseconds(10'000);
}

// CSP_MPI: "always" starts MPI even without a launcher (a singleton), "never" never starts it;
// unset, empty or "auto": started when a launcher started this process. Anything else is refused
// before MPI starts (exit 2, as for a bad option), on every process alike.
bool startMpi() {
  const char* v = std::getenv("CSP_MPI");
  const std::string mode = v ? v : "";
  if (mode == "always") return true;
  if (mode == "never") return false;
  if (!mode.empty() && mode != "auto") {
    std::fprintf(stderr, "error: CSP_MPI='%s': expected auto, always or never\n", mode.c_str());
    std::exit(2);
  }
  return launchedByMpiLauncher();
}

std::string_view trimmed(std::string_view t) {
  const auto b = t.find_first_not_of(" \t\r");
  const auto e = t.find_last_not_of(" \t\r");
  return b == std::string_view::npos ? std::string_view() : t.substr(b, e - b + 1);
}

}  // namespace

std::string pmlOfParamFile(const std::filesystem::path& file) {
  std::ifstream in(file);
  std::string line, value;
  while (std::getline(in, line)) {
    const std::string_view text = std::string_view(line).substr(0, line.find('#'));
    const auto eq = text.find('=');
    if (eq == std::string_view::npos) continue;
    if (trimmed(text.substr(0, eq)) == "pml") value = trimmed(text.substr(eq + 1));  // the last one counts
  }
  return value;
}

std::string pmlLeavingOutCm(const TransportFacts& f) {
  if (f.keep || f.pmlInEnvironment || f.paramFilesChosen || f.networkDevice) return "";
  if (f.pmlInFiles.empty()) return "^cm";
  if (f.pmlInFiles.front() != '^') return "";  // the site selects PMLs: its choice
  std::string_view list(f.pmlInFiles);
  list.remove_prefix(1);
  while (!list.empty()) {
    const auto comma = list.find(',');
    if (trimmed(list.substr(0, comma)) == "cm") return "";
    list = comma == std::string_view::npos ? std::string_view() : list.substr(comma + 1);
  }
  return f.pmlInFiles + ",cm";
}

TransportFacts transportFacts() {
  TransportFacts f;
  const char* keep = std::getenv("CSP_MPI_TRANSPORT");
  f.keep = keep && std::string_view(keep) == "keep";
  f.pmlInEnvironment = std::getenv("OMPI_MCA_pml") != nullptr;
  f.paramFilesChosen = std::getenv("OMPI_MCA_mca_base_param_files") != nullptr;
  if (f.keep || f.pmlInEnvironment || f.paramFilesChosen) return f;
  f.networkDevice = networkDevicePresent();
  // The user's file overrides the system's (Debian's Open MPI: sysconfdir /etc/openmpi).
  if (const char* home = std::getenv("HOME"); home && *home)
    f.pmlInFiles = pmlOfParamFile(std::filesystem::path(home) / ".openmpi" / "mca-params.conf");
  if (f.pmlInFiles.empty()) f.pmlInFiles = pmlOfParamFile("/etc/openmpi/openmpi-mca-params.conf");
  return f;
}

bool networkDevicePresent() {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (fs::directory_iterator it("/sys/class/infiniband", ec); !ec && it != fs::directory_iterator()) return true;
  for (fs::directory_iterator it("/dev", ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (name.starts_with("hfi1_") || name.starts_with("ipath") || name.starts_with("cxi")) return true;
  }
  return false;
}

std::size_t disableNagleOnTcpSockets() {
  // The descriptors are listed first: the directory's own descriptor is open while it is read.
  std::error_code ec;
  std::size_t changed = 0;
  for (const auto& entry : storage::directoryEntries("/proc/self/fd", ec)) {
    int fd = -1;
    if (std::sscanf(entry.name.c_str(), "%d", &fd) != 1 || fd < 0) continue;
    struct stat st {};
    if (::fstat(fd, &st) != 0 || !S_ISSOCK(st.st_mode)) continue;
    int value = 0;
    socklen_t length = sizeof value;
    if (::getsockopt(fd, SOL_SOCKET, SO_PROTOCOL, &value, &length) != 0 || value != IPPROTO_TCP) continue;
    length = sizeof value;
    if (::getsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &value, &length) != 0 || value != 0) continue;
    const int on = 1;
    if (::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &on, sizeof on) == 0) ++changed;
  }
  return changed;
}

bool launchedByMpiLauncher() {
  // Open MPI's mpirun, PMIx (srun --mpi=pmix, prterun), PMI-1/2 (MPICH's and Intel MPI's hydra,
  // srun --mpi=pmi2), MVAPICH, Cray's aprun, and any srun task.
  for (const char* name : {"OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "PMI_RANK", "PMI_SIZE", "PMI_FD", "MV2_COMM_WORLD_RANK",
                           "ALPS_APP_PE", "SLURM_STEP_ID"})
    if (const char* v = std::getenv(name); v && *v) return true;
  return false;
}

MpiSession::MpiSession(int& argc, char**& argv) : started_(startMpi()) {
  if (!started_) return;
  const TransportFacts facts = transportFacts();
  if (const std::string pml = pmlLeavingOutCm(facts); !pml.empty())
    ::setenv("OMPI_MCA_pml", pml.c_str(), 0);  // read by MPI_Init (mca_base_var): before it
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_FUNNELED, &provided);
  if (!facts.keep) disableNagleOnTcpSockets();
  MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
  MPI_Comm_size(MPI_COMM_WORLD, &size_);
}

MpiSession::~MpiSession() {
  if (started_) MPI_Finalize();
}

Comm::Comm(MPI_Comm comm) : comm_(comm), grace_(graceFromEnvironment()) {
  if (comm == MPI_COMM_NULL) return;  // one process, no MPI: rank 0 of 1, no collective calls MPI
  mpiCheck(MPI_Comm_rank(comm, &rank_), "Comm_rank");
  mpiCheck(MPI_Comm_size(comm, &size_), "Comm_size");
}

// Tests the request instead of MPI_Wait, which polls a core at full speed: a rank that reaches a
// collective before the others would take that core from the threads of the processes still
// working on the node (each runs its workers, a writer and RocksDB's threads). So it tests a
// few times at once, then sleeps between tests, from 20 us doubling up to 1 ms: a collective
// that was waited for ends at most about 1 ms later.
bool Comm::wait(MPI_Request& request, bool bounded) const {
  const auto deadline = std::chrono::steady_clock::now() + grace_;
  auto pause = std::chrono::microseconds(20);
  for (int tests = 0;; ++tests) {
    int done = 0;
    mpiCheck(MPI_Test(&request, &done, MPI_STATUS_IGNORE), "Test");
    if (done) return true;
    if (tests < kEagerTests) continue;
    if (bounded && std::chrono::steady_clock::now() >= deadline) return false;
    std::this_thread::sleep_for(pause);
    pause = std::min(2 * pause, std::chrono::microseconds(1000));
  }
}

void Comm::check() const {
  if (size_ == 1) return;
  int mine = 0, any = 0;
  MPI_Request request;
  mpiCheck(MPI_Iallreduce(&mine, &any, 1, MPI_INT, MPI_MAX, comm_, &request), "Iallreduce");
  wait(request, false);
  if (any) {
    failureAgreed_ = true;
    throw PeerFailure();
  }
}

void Comm::onAbort(std::function<void()> hook) const { abortHooks_.push_back(std::move(hook)); }

void Comm::abortJob(const std::string& why) const {
  // The same first line as the agreed failure path, so that the message reads alike either way.
  std::fprintf(stderr, "csp-prof-mpi: error: %s\n(reported by rank %d of %d processes)\n", why.c_str(), rank_, size_);
  std::fprintf(
      stderr, "csp-prof-mpi: the other processes did not reach the failure agreement within %.0f s; aborting the job\n",
      static_cast<double>(grace_.count()) / 1000.0);
  std::fflush(stderr);
  for (const auto& hook : abortHooks_) {
    try {
      hook();
    } catch (...) {
    }
  }
  MPI_Abort(comm_, 1);
  std::_Exit(1);  // MPI_Abort does not return; this is for implementations that do
}

std::vector<Comm::RankMessage> Comm::fail(const std::string& message) const {
  const std::string mine = message.substr(0, kMaxMessage);
  if (size_ == 1) return mine.empty() ? std::vector<RankMessage>{} : std::vector<RankMessage>{{0, mine}};
  const std::string shown = mine.empty() ? "another process failed" : mine;
  if (!failureAgreed_) {
    // This rank failed on its own: its flag joins the others' next failure check.
    int flag = 1, any = 0;
    MPI_Request request;
    mpiCheck(MPI_Iallreduce(&flag, &any, 1, MPI_INT, MPI_MAX, comm_, &request), "Iallreduce");
    if (!wait(request, true)) abortJob(shown);
    failureAgreed_ = true;
  }
  // Every rank is here now (or on its way out of a collective): gather the messages, bounded.
  const int length = static_cast<int>(mine.size());
  std::vector<int> lengths(rank_ == 0 ? static_cast<std::size_t>(size_) : 0);
  MPI_Request request;
  mpiCheck(MPI_Igather(&length, 1, MPI_INT, lengths.data(), 1, MPI_INT, 0, comm_, &request), "Igather");
  if (!wait(request, true)) abortJob(shown);
  std::vector<int> displacements(lengths.size(), 0);
  int total = 0;
  for (std::size_t r = 0; r < lengths.size(); ++r) {
    displacements[r] = total;
    total += lengths[r];
  }
  std::string all(static_cast<std::size_t>(total), '\0');
  mpiCheck(MPI_Igatherv(mine.data(), length, MPI_CHAR, all.data(), lengths.data(), displacements.data(), MPI_CHAR, 0,
                        comm_, &request),
           "Igatherv");
  if (!wait(request, true)) abortJob(shown);
  std::vector<RankMessage> out;
  for (std::size_t r = 0; r < lengths.size(); ++r)
    if (lengths[r] > 0)
      out.push_back({static_cast<int>(r),
                     all.substr(static_cast<std::size_t>(displacements[r]), static_cast<std::size_t>(lengths[r]))});
  return out;
}

std::string Comm::describe(const std::vector<RankMessage>& failures) const {
  if (failures.empty()) return "a process failed without a message";
  std::string text;
  std::vector<std::string> seen;
  for (const auto& f : failures) {
    if (std::find(seen.begin(), seen.end(), f.message) != seen.end()) continue;
    seen.push_back(f.message);
    if (!text.empty()) text.push_back('\n');
    text += f.message;
  }
  if (size_ > 1) {
    std::string ranks;
    for (const auto& f : failures) ranks += (ranks.empty() ? "" : ", ") + std::to_string(f.rank);
    text += fmt::format("\n(reported by {} {} of {} processes)", failures.size() == 1 ? "rank" : "ranks", ranks, size_);
  }
  return text;
}

void Comm::sendBytes(int to, const std::vector<std::byte>& bytes, int tag) const {
  std::uint64_t n = bytes.size();
  mpiCheck(MPI_Send(&n, 1, MPI_UINT64_T, to, tag, comm_), "Send");
  for (std::size_t c = 0; c < chunks(n); ++c)
    mpiCheck(MPI_Send(bytes.data() + c * kChunk, chunkLength(n, c), MPI_BYTE, to, tag, comm_), "Send");
}

std::vector<std::byte> Comm::recvBytes(int from, int tag) const {
  std::uint64_t n = 0;
  mpiCheck(MPI_Recv(&n, 1, MPI_UINT64_T, from, tag, comm_, MPI_STATUS_IGNORE), "Recv");
  std::vector<std::byte> bytes(n);
  for (std::size_t c = 0; c < chunks(n); ++c)
    mpiCheck(MPI_Recv(bytes.data() + c * kChunk, chunkLength(n, c), MPI_BYTE, from, tag, comm_, MPI_STATUS_IGNORE),
             "Recv");
  return bytes;
}

void Comm::broadcast(std::vector<std::byte>& bytes, int root) const {
  check();
  broadcastBytes(bytes, root);
}

void Comm::broadcastBytes(std::vector<std::byte>& bytes, int root) const {
  if (size_ == 1) return;
  std::uint64_t n = bytes.size();
  mpiCheck(MPI_Bcast(&n, 1, MPI_UINT64_T, root, comm_), "Bcast");
  bytes.resize(n);
  for (std::size_t c = 0; c < chunks(n); ++c)
    mpiCheck(MPI_Bcast(bytes.data() + c * kChunk, chunkLength(n, c), MPI_BYTE, root, comm_), "Bcast");
}

std::vector<std::vector<std::byte>> Comm::gather(const std::vector<std::byte>& bytes, int root) const {
  check();
  return gatherBytes(bytes, root);
}

std::vector<std::vector<std::byte>> Comm::gatherBytes(const std::vector<std::byte>& bytes, int root) const {
  // Point to point keeps per-message sizes unbounded by int displacements.
  std::vector<std::vector<std::byte>> out;
  if (rank_ == root) {
    out.resize(static_cast<std::size_t>(size_));
    for (int r = 0; r < size_; ++r) out[static_cast<std::size_t>(r)] = r == root ? bytes : recvBytes(r, kGatherTag);
  } else {
    sendBytes(root, bytes, kGatherTag);
  }
  return out;
}

std::vector<std::vector<std::byte>> Comm::allgather(const std::vector<std::byte>& bytes) const {
  check();
  // At the root, then one broadcast of all parts. If the root cannot pack them it still
  // broadcasts (nothing), so that no rank is left inside the collective; every rank then fails.
  auto parts = gatherBytes(bytes, 0);
  std::vector<std::byte> all;
  std::exception_ptr error;
  if (rank_ == 0) {
    try {
      Packer p;
      for (const auto& part : parts) p.bytes(part);
      all = p.take();
    } catch (...) {
      error = std::current_exception();
      all.clear();
    }
  }
  broadcastBytes(all, 0);
  if (error) std::rethrow_exception(error);
  Unpacker u(all);
  std::vector<std::vector<std::byte>> out;
  out.reserve(static_cast<std::size_t>(size_));
  for (int r = 0; r < size_; ++r) out.push_back(u.bytes());
  return out;
}

std::vector<std::vector<std::byte>> Comm::alltoall(const std::vector<std::vector<std::byte>>& outgoing) const {
  check();
  if (outgoing.size() != static_cast<std::size_t>(size_))
    throw std::logic_error("alltoall: one buffer per rank expected");
  std::vector<std::vector<std::byte>> incoming(static_cast<std::size_t>(size_));
  incoming[static_cast<std::size_t>(rank_)] = outgoing[static_cast<std::size_t>(rank_)];
  if (size_ == 1) return incoming;
  // Each side knows both sizes before any data moves, so the number of chunk messages between
  // two ranks is computed identically by the sender and the receiver.
  std::vector<std::uint64_t> sendSizes(static_cast<std::size_t>(size_)), recvSizes(static_cast<std::size_t>(size_));
  for (int r = 0; r < size_; ++r) sendSizes[static_cast<std::size_t>(r)] = outgoing[static_cast<std::size_t>(r)].size();
  mpiCheck(MPI_Alltoall(sendSizes.data(), 1, MPI_UINT64_T, recvSizes.data(), 1, MPI_UINT64_T, comm_), "Alltoall");
  std::vector<MPI_Request> requests;
  for (int r = 0; r < size_; ++r) {
    if (r == rank_) continue;
    auto& in = incoming[static_cast<std::size_t>(r)];
    const auto n = recvSizes[static_cast<std::size_t>(r)];
    in.resize(n);
    for (std::size_t c = 0; c < chunks(n); ++c) {
      requests.emplace_back();
      mpiCheck(MPI_Irecv(in.data() + c * kChunk, chunkLength(n, c), MPI_BYTE, r, kAlltoallTag, comm_, &requests.back()),
               "Irecv");
    }
  }
  for (int k = 1; k < size_; ++k) {
    const int r = (rank_ + k) % size_;  // staggered, so that no rank is everyone's first target
    const auto& out = outgoing[static_cast<std::size_t>(r)];
    const auto n = sendSizes[static_cast<std::size_t>(r)];
    for (std::size_t c = 0; c < chunks(n); ++c) {
      requests.emplace_back();
      mpiCheck(
          MPI_Isend(out.data() + c * kChunk, chunkLength(n, c), MPI_BYTE, r, kAlltoallTag, comm_, &requests.back()),
          "Isend");
    }
  }
  mpiCheck(MPI_Waitall(static_cast<int>(requests.size()), requests.data(), MPI_STATUSES_IGNORE), "Waitall");
  return incoming;
}

std::uint64_t Comm::sum(std::uint64_t value) const {
  check();
  std::uint64_t out = value;
  if (size_ > 1) mpiCheck(MPI_Allreduce(&value, &out, 1, MPI_UINT64_T, MPI_SUM, comm_), "Allreduce");
  return out;
}

void Comm::barrier() const { check(); }

Comm::NeighbourWords Comm::shareWithNeighbours(std::size_t count) const {
  NeighbourWords words;
  if (size_ == 1 || count == 0) return words;
  check();
  mpiCheck(MPI_Comm_split_type(comm_, MPI_COMM_TYPE_SHARED, rank_, MPI_INFO_NULL, &words.host), "Comm_split_type");
  std::uint64_t* mine = nullptr;
  mpiCheck(MPI_Win_allocate_shared(static_cast<MPI_Aint>(count * sizeof(std::uint64_t)), sizeof(std::uint64_t),
                                   MPI_INFO_NULL, words.host, &mine, &words.window),
           "Win_allocate_shared");
  for (std::size_t i = 0; i < count; ++i) std::atomic_ref<std::uint64_t>(mine[i]).store(0);
  words.mine = mine;
  // The neighbours' ranks on this host (MPI_UNDEFINED: on another host).
  MPI_Group all = MPI_GROUP_NULL, host = MPI_GROUP_NULL;
  mpiCheck(MPI_Comm_group(comm_, &all), "Comm_group");
  mpiCheck(MPI_Comm_group(words.host, &host), "Comm_group");
  const int neighbours[2] = {rank_ > 0 ? rank_ - 1 : MPI_PROC_NULL, rank_ + 1 < size_ ? rank_ + 1 : MPI_PROC_NULL};
  int there[2] = {MPI_UNDEFINED, MPI_UNDEFINED};
  mpiCheck(MPI_Group_translate_ranks(all, 2, neighbours, host, there), "Group_translate_ranks");
  MPI_Group_free(&all);
  MPI_Group_free(&host);
  std::uint64_t** into[2] = {&words.lower, &words.upper};
  for (int side = 0; side < 2; ++side) {
    if (there[side] == MPI_UNDEFINED || there[side] == MPI_PROC_NULL) continue;
    MPI_Aint bytes = 0;
    int unit = 0;
    void* base = nullptr;
    mpiCheck(MPI_Win_shared_query(words.window, there[side], &bytes, &unit, &base), "Win_shared_query");
    *into[side] = static_cast<std::uint64_t*>(base);
  }
  // Every word is zero before any rank uses it.
  mpiCheck(MPI_Barrier(words.host), "Barrier");
  return words;
}

void Comm::release(NeighbourWords& words) const {
  if (words.window == MPI_WIN_NULL) return;
  check();
  mpiCheck(MPI_Win_free(&words.window), "Win_free");
  mpiCheck(MPI_Comm_free(&words.host), "Comm_free");
  words.mine = words.lower = words.upper = nullptr;
}

void Comm::reduceTree(const std::function<void(const std::vector<std::byte>&)>& absorb,
                      const std::function<std::vector<std::byte>()>& produce) const {
  check();
  std::exception_ptr error;
  for (int step = 1; step < size_; step <<= 1) {
    if (rank_ & step) {
      // A one-word status first: 0 = bytes follow, 1 = this subtree failed, nothing follows.
      std::vector<std::byte> mine;
      if (!error) {
        try {
          mine = produce();
        } catch (...) {
          error = std::current_exception();
        }
      }
      std::uint64_t failed = error ? 1 : 0;
      mpiCheck(MPI_Send(&failed, 1, MPI_UINT64_T, rank_ - step, kTreeTag, comm_), "Send");
      if (!failed) sendBytes(rank_ - step, mine, kTreeTag);
      break;
    }
    if (rank_ + step < size_) {
      std::uint64_t failed = 0;
      mpiCheck(MPI_Recv(&failed, 1, MPI_UINT64_T, rank_ + step, kTreeTag, comm_, MPI_STATUS_IGNORE), "Recv");
      if (failed) continue;  // that rank fails at its next check; the job fails with its message
      const auto theirs = recvBytes(rank_ + step, kTreeTag);
      if (error) continue;  // keep receiving: the children must not block on this rank
      try {
        absorb(theirs);
      } catch (...) {
        error = std::current_exception();
      }
    }
  }
  if (error) std::rethrow_exception(error);
}

void faultPoint(const Comm& comm, const char* phase) {
  const char* spec = std::getenv("CSP_FAULT_INJECT");
  if (!spec || !*spec) return;
  std::string all(spec);
  std::size_t at = 0;
  while (at <= all.size()) {
    const auto end = std::min(all.find(',', at), all.size());
    const std::string item = all.substr(at, end - at);
    at = end + 1;
    const auto colon = item.find(':');
    if (colon == std::string::npos) continue;
    const auto colon2 = item.find(':', colon + 1);
    const std::string rank = item.substr(0, colon);
    const std::string where =
        item.substr(colon + 1, colon2 == std::string::npos ? std::string::npos : colon2 - colon - 1);
    const std::string action = colon2 == std::string::npos ? "fail" : item.substr(colon2 + 1);
    if (rank != std::to_string(comm.rank()) || where != phase) continue;
    if (action == "stall") {
      std::this_thread::sleep_for(std::chrono::minutes(10));
      return;
    }
    if (action.starts_with("sleep")) {  // a slow process: "sleep2000" waits 2 s, then goes on
      std::this_thread::sleep_for(std::chrono::milliseconds(std::stoul(action.substr(5))));
      return;
    }
    if (action == "kill") std::raise(SIGKILL);
    throw std::runtime_error(fmt::format("injected failure in phase '{}' (CSP_FAULT_INJECT)", phase));
  }
}

std::string failureMessageOfCurrentException() {
  try {
    throw;
  } catch (const PeerFailure&) {
    return {};
  } catch (const std::exception& e) {
    return *e.what() != '\0' ? e.what() : "unknown error";
  } catch (...) {
    return "unknown error";
  }
}

}  // namespace csp::reduce
