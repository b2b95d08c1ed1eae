// Clocks across processes and communication events (docs/measurement.md "Clocks across
// processes"; Benavides, ch. 5, FreeZER).
//
// With --region-log under MPI, every rank's CLOCK_MONOTONIC is bounded against rank 0's at two
// moments, right after MPI_Init and right before MPI_Finalize: rank 0 reads its clock (lo),
// sends a byte, the rank reads its own clock on receipt and answers with it, rank 0 reads its
// clock again (hi). The causal order of the messages guarantees lo <= ref(local) <= hi: a zero
// (§5.2.2); two such zeros bound the relative frequency (§5.2.1). The round with the smallest
// round trip of a few is kept. Ranks whose kernel is rank 0's (same boot id) read the same clock
// and get exact bounds without messages. The messages travel on a duplicate of MPI_COMM_WORLD,
// never on the program's communicators.
//
// Only Open MPI's ABI is known here (handles are pointers to exported objects); with another MPI
// no clock data and no communication events are recorded, and the profiles say so.
#include <dlfcn.h>
#include <sched.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "runtime.hpp"

namespace csp::measure {

namespace {

using H = void*;
struct MpiApi {
  int (*commDup)(H, H*) = nullptr;
  int (*commFree)(H*) = nullptr;
  int (*commRank)(H, int*) = nullptr;
  int (*commSize)(H, int*) = nullptr;
  int (*commGroup)(H, H*) = nullptr;
  int (*groupTranslate)(H, int, const int*, H, int*) = nullptr;
  int (*groupFree)(H*) = nullptr;
  int (*send)(const void*, int, H, int, int, H) = nullptr;
  int (*recv)(void*, int, H, int, int, H, H) = nullptr;
  int (*irecv)(void*, int, H, int, int, H, H*) = nullptr;
  int (*test)(H*, int*, H) = nullptr;
  int (*allgather)(const void*, int, H, void*, int, H, H) = nullptr;
  H world = nullptr;
  H byteType = nullptr;
  bool ok = false;
};

template <class Fn>
void find(Fn& f, const char* name) {
  f = reinterpret_cast<Fn>(dlsym(RTLD_DEFAULT, name));
}

const MpiApi& mpi() {
  static const MpiApi api = [] {
    MpiApi a;
    find(a.commDup, "PMPI_Comm_dup");
    find(a.commFree, "PMPI_Comm_free");
    find(a.commRank, "PMPI_Comm_rank");
    find(a.commSize, "PMPI_Comm_size");
    find(a.commGroup, "PMPI_Comm_group");
    find(a.groupTranslate, "PMPI_Group_translate_ranks");
    find(a.groupFree, "PMPI_Group_free");
    find(a.send, "PMPI_Send");
    find(a.recv, "PMPI_Recv");
    find(a.irecv, "PMPI_Irecv");
    find(a.test, "PMPI_Test");
    find(a.allgather, "PMPI_Allgather");
    a.world = dlsym(RTLD_DEFAULT, "ompi_mpi_comm_world");
    a.byteType = dlsym(RTLD_DEFAULT, "ompi_mpi_byte");
    a.ok = a.commDup && a.commFree && a.commRank && a.commSize && a.commGroup && a.groupTranslate && a.groupFree &&
           a.send && a.recv && a.irecv && a.test && a.allgather && a.world && a.byteType;
    return a;
  }();
  return api;
}

// ---- test-only clock skew -------------------------------------------------------------------
// CSP_TEST_CLOCK_SKEW=RANK:OFFSET_NS:PPM makes that rank's clock read
// true * (1 + PPM / 1e6) + OFFSET_NS, and puts it on a host of its own, so that tests can check
// that converted times contain the true ones. The rank comes from the launcher's environment:
// events before MPI_Init are skewed too.
struct Skew {
  bool on = false;
  long double factor = 1;
  std::int64_t offsetNs = 0;
};
Skew readSkew() {
  Skew s;
  const char* v = std::getenv("CSP_TEST_CLOCK_SKEW");
  const char* r = std::getenv("OMPI_COMM_WORLD_RANK");
  if (r == nullptr) r = std::getenv("PMI_RANK");
  if (v == nullptr || r == nullptr) return s;
  long rank = -1;
  long long offset = 0;
  double ppm = 0;
  if (std::sscanf(v, "%ld:%lld:%lf", &rank, &offset, &ppm) != 3 || rank != std::atol(r)) return s;
  s.on = true;
  s.factor = 1 + static_cast<long double>(ppm) / 1e6L;
  s.offsetNs = offset;
  return s;
}
Skew g_skew;
const Skew& skew() { return g_skew; }

// CSP_TEST_CLOCK_DROP=RANK: that rank takes part in the exchanges but stores no clock data, as a
// process whose measurement lost it (tests of the analyses' refusal).
bool readDrop() {
  const char* v = std::getenv("CSP_TEST_CLOCK_DROP");
  const char* r = std::getenv("OMPI_COMM_WORLD_RANK");
  return v != nullptr && r != nullptr && *v != '\0' && std::atol(v) == std::atol(r);
}
bool g_dropClock = false;

// ---- the exchanges --------------------------------------------------------------------------
// Each exchange takes at least kMinRounds ping-pong rounds and keeps the one with the shortest
// round trip. When that is still longer than kGoodRoundTripNs (a loaded or oversubscribed node,
// where a round trip measures the scheduler), it goes on, up to kMaxRounds, for at most as long
// again as its first kMinRounds took: a lucky round narrows the bounds of every event of the run.
constexpr int kMinRounds = 8;
constexpr int kMaxRounds = 64;
constexpr std::uint64_t kGoodRoundTripNs = 50'000;
constexpr int kTag = 7;
constexpr char kPing = 1, kDone = 0;  // rank 0's one-byte messages: a round, or the end

struct SyncState {
  H comm = nullptr;  // our duplicate of MPI_COMM_WORLD
  int rank = -1;
  bool remote = false;  // a clock other than rank 0's
  ClockRecord record;
};
SyncState g_sync;

// The exchanges' cost is CPU time: their wall time under an oversubscribed or loaded node
// measures the scheduler (a rank waits for peers that are not running), not csp.
std::uint64_t cpuNs() {
  timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<std::uint64_t>(ts.tv_sec) * 1'000'000'000u + static_cast<std::uint64_t>(ts.tv_nsec);
}

std::string clockIdentity() {
  char id[64] = {};
  if (FILE* f = std::fopen("/proc/sys/kernel/random/boot_id", "r")) {
    if (std::fgets(id, sizeof id, f) == nullptr) id[0] = '\0';
    std::fclose(f);
  }
  if (id[0] == '\0') gethostname(id, sizeof id - 1);
  std::string s(id);
  if (skew().on) s += "#skewed";
  s.resize(63);
  return s;
}

// A receive that gives the CPU away while it waits: on an oversubscribed node the peer it waits
// for may need this core, and a blocking receive would spin until the scheduler intervenes.
void recvYielding(void* buf, int bytes, int from) {
  const MpiApi& m = mpi();
  H request = nullptr;
  if (m.irecv(buf, bytes, m.byteType, from, kTag, g_sync.comm, &request) != 0) return;
  int done = 0;
  while (m.test(&request, &done, nullptr) == 0 && !done) sched_yield();
}

// Rank 0's side of one exchange with `peer`: the tightest [lo, hi] around the peer's reading.
// Returns the number of rounds.
int exchangeAsReference(int peer) {
  const MpiApi& m = mpi();
  std::uint64_t best[3] = {0, 0, ~std::uint64_t{0}};  // lo, hi, round
  std::uint64_t bestWidth = ~std::uint64_t{0};
  const std::uint64_t start = monotonicNs();
  std::uint64_t budgetEnd = 0;
  int k = 0;
  for (; k < kMaxRounds; ++k) {
    if (k == kMinRounds) budgetEnd = monotonicNs() * 2 - start;
    if (k >= kMinRounds && (bestWidth <= kGoodRoundTripNs || monotonicNs() >= budgetEnd)) break;
    std::uint64_t local = 0;
    const std::uint64_t lo = monotonicNs();
    m.send(&kPing, 1, m.byteType, peer, kTag, g_sync.comm);
    recvYielding(&local, 8, peer);
    const std::uint64_t hi = monotonicNs();
    if (hi - lo < bestWidth) {
      bestWidth = hi - lo;
      best[0] = lo, best[1] = hi, best[2] = static_cast<std::uint64_t>(k);
    }
  }
  m.send(&kDone, 1, m.byteType, peer, kTag, g_sync.comm);
  m.send(best, 24, m.byteType, peer, kTag, g_sync.comm);
  return k;
}

// A remote rank's side: its readings, and the bounds rank 0 found for the best one. Returns the
// number of rounds.
int exchangeAsRemote(std::uint64_t& local, std::uint64_t& lo, std::uint64_t& hi) {
  const MpiApi& m = mpi();
  std::uint64_t readings[kMaxRounds];
  int k = 0;
  for (;; ++k) {
    char ping = kDone;
    recvYielding(&ping, 1, 0);
    if (ping == kDone || k == kMaxRounds) break;
    readings[k] = monotonicNs();
    m.send(&readings[k], 8, m.byteType, 0, kTag, g_sync.comm);
  }
  std::uint64_t best[3] = {};
  recvYielding(best, 24, 0);
  local = readings[best[2] < static_cast<std::uint64_t>(k) ? best[2] : 0];
  lo = best[0];
  hi = best[1];
  return k;
}

// Every rank: which ranks read another clock than rank 0's (one allgather of clock identities).
std::vector<char> remoteRanks(int size) {
  const MpiApi& m = mpi();
  const std::string mine = clockIdentity();
  std::vector<char> all(static_cast<std::size_t>(size) * 64);
  m.allgather(mine.c_str(), 64, m.byteType, all.data(), 64, m.byteType, g_sync.comm);
  std::vector<char> remote(static_cast<std::size_t>(size));
  for (int r = 0; r < size; ++r)
    remote[static_cast<std::size_t>(r)] = std::memcmp(all.data() + 64 * r, all.data(), 64) != 0;
  return remote;
}

// One exchange of every remote rank with rank 0, one after the other.
// The record keeps the most rounds any of the rank's exchanges took.
void exchange(const std::vector<char>& remote, bool atInit) {
  ClockRecord& c = g_sync.record;
  if (g_sync.rank == 0) {
    for (std::size_t r = 1; r < remote.size(); ++r)
      if (remote[r])
        c.rounds = std::max(c.rounds, static_cast<std::uint32_t>(exchangeAsReference(static_cast<int>(r))));
    return;
  }
  if (!g_sync.remote) return;
  const int rounds = atInit ? exchangeAsRemote(c.initLocalNs, c.initRefLoNs, c.initRefHiNs)
                            : exchangeAsRemote(c.finalLocalNs, c.finalRefLoNs, c.finalRefHiNs);
  c.rounds = std::max(c.rounds, static_cast<std::uint32_t>(rounds));
}

// Per rank of the communicator: whether its clock is another node's. Never destroyed, as the
// other tables MPI calls use: MPI_Finalize may come from an exit handler or another library's
// destructor, after this library's static destructors.
std::vector<char>& remoteFlags() {
  static auto* remote = new std::vector<char>;
  return *remote;
}

}  // namespace

bool g_clockSkewed = false;

void initClockSkew() {
  g_skew = readSkew();
  g_dropClock = readDrop();
  g_clockSkewed = g_skew.on;
}

std::uint64_t skewedClock(std::uint64_t trueNs) {
  const Skew& s = skew();
  if (!s.on) return trueNs;
  return static_cast<std::uint64_t>(static_cast<long double>(trueNs) * s.factor + static_cast<long double>(s.offsetNs));
}

void clockSyncAtInit() {
  if (!config().regionLog || !mpi().ok || g_sync.comm != nullptr) return;
  const MpiApi& m = mpi();
  const std::uint64_t start = cpuNs();
  int size = 0;
  if (m.commDup(m.world, &g_sync.comm) != 0 || m.commRank(g_sync.comm, &g_sync.rank) != 0 ||
      m.commSize(g_sync.comm, &size) != 0) {
    g_sync.comm = nullptr;
    return;
  }
  remoteFlags() = remoteRanks(size);
  g_sync.remote = remoteFlags()[static_cast<std::size_t>(g_sync.rank)] != 0;
  exchange(remoteFlags(), true);
  ClockRecord& c = g_sync.record;
  c.state = g_sync.rank == 0 ? kClockReference : g_sync.remote ? kClockInitOnly : kClockSameClock;
  c.costNs = cpuNs() - start;
  commLogStart(m.world != nullptr);
}

void clockSyncAtFinalize() {
  if (g_sync.comm == nullptr) return;
  commLogStop();
  const std::uint64_t start = cpuNs();
  exchange(remoteFlags(), false);
  ClockRecord& c = g_sync.record;
  if (g_sync.remote) c.state = kClockMeasured;
  mpi().commFree(&g_sync.comm);
  g_sync.comm = nullptr;
  c.costNs += cpuNs() - start;
}

ClockRecord clockRecord() { return g_dropClock ? ClockRecord{} : g_sync.record; }

// ---- communicators and sequence numbers -----------------------------------------------------
// Matching needs the same communicator name and the same peer numbering on both sides: peers are
// translated to world ranks, and a communicator other than MPI_COMM_WORLD is named by a hash of
// its members' world ranks (two communicators with the same members share a name: their
// sequences are then counted together, which keeps the matching right as long as the program
// uses them in the same order on every rank).

namespace {

struct CommInfo {
  std::uint64_t name = 0;
  std::vector<int> world;  // comm rank -> world rank; empty: the identity
  int self = -1;           // the caller's rank in it
};

// A non-blocking operation between its start and its completion. A receive from MPI_ANY_SOURCE
// or with MPI_ANY_TAG is numbered at completion, when its peer and tag are known: its
// communicator's ranks are kept for that (the program may free the communicator before).
struct Pending {
  int kind = 0, peer = 0, tag = 0;  // peer: a world rank, or -1 (any source)
  bool wildcard = false;
  std::uint64_t comm = 0, sequence = 0, beginNs = 0;
  std::vector<int> world;  // wildcard only: comm rank -> world rank
};

struct SequenceKey {
  int kind, peer, tag;
  std::uint64_t comm;
  bool operator==(const SequenceKey&) const = default;
};
struct SequenceKeyHash {
  std::size_t operator()(const SequenceKey& k) const {
    std::uint64_t h =
        (static_cast<std::uint64_t>(static_cast<std::uint32_t>(k.peer)) << 32 | static_cast<std::uint32_t>(k.tag)) *
        0x9E3779B97F4A7C15ull;
    h ^= (k.comm + static_cast<std::uint64_t>(k.kind)) * 0xC2B2AE3D27D4EB4Full;
    return static_cast<std::size_t>(h ^ (h >> 29));
  }
};

struct Tables {
  std::mutex mutex;
  std::unordered_map<H, CommInfo> comms;
  std::unordered_map<SequenceKey, std::uint64_t, SequenceKeyHash> sequences;  // -> next number
  std::unordered_map<H, Pending> pending;                                     // by request handle
  CommInfo world;
  bool worldKnown = false;
};
Tables& tables() {
  static Tables* t = new Tables;  // never destroyed: MPI calls may come from exit handlers
  return *t;
}
std::atomic<bool> g_commLog{false};

CommInfo describe(H comm) {
  const MpiApi& m = mpi();
  CommInfo info;
  if (comm == m.world) return info;
  int size = 0;
  H group = nullptr, worldGroup = nullptr;
  if (m.commSize(comm, &size) != 0 || m.commGroup(comm, &group) != 0) return info;
  m.commRank(comm, &info.self);
  m.commGroup(m.world, &worldGroup);
  std::vector<int> ranks(static_cast<std::size_t>(size));
  for (int i = 0; i < size; ++i) ranks[static_cast<std::size_t>(i)] = i;
  info.world.resize(ranks.size(), -1);
  m.groupTranslate(group, size, ranks.data(), worldGroup, info.world.data());
  m.groupFree(&group);
  m.groupFree(&worldGroup);
  std::uint64_t h = 0x9E3779B97F4A7C15ull ^ static_cast<std::uint64_t>(size);
  for (int w : info.world) h = (h ^ static_cast<std::uint64_t>(w + 1)) * 0x100000001B3ull;
  info.name = h | 1;  // never 0, the name of MPI_COMM_WORLD
  return info;
}

const CommInfo& commInfo(Tables& t, H comm) {
  if (comm == mpi().world) {
    if (!t.worldKnown) mpi().commRank(comm, &t.world.self);
    t.worldKnown = true;
    return t.world;
  }
  auto it = t.comms.find(comm);
  if (it == t.comms.end()) it = t.comms.emplace(comm, describe(comm)).first;
  return it->second;
}

// `world`: a communicator's comm rank -> world rank (empty: the identity).
int toWorld(const std::vector<int>& world, int rank) {
  if (rank < 0 || world.empty()) return rank;
  return static_cast<std::size_t>(rank) < world.size() ? world[static_cast<std::size_t>(rank)] : -1;
}

}  // namespace

void commLogStart(bool on) { g_commLog.store(on && config().regionLog, std::memory_order_relaxed); }
void commLogStop() { g_commLog.store(false, std::memory_order_relaxed); }
bool commLogOn() { return g_commLog.load(std::memory_order_relaxed); }

void commForget(H comm) {
  Tables& t = tables();
  std::lock_guard lock(t.mutex);
  t.comms.erase(comm);
}

namespace {

std::uint64_t nextSequence(Tables& t, int kind, int worldPeer, int tag, std::uint64_t comm) {
  const bool collective = kind == kCommCollective;
  return t.sequences[{kind, collective ? 0 : worldPeer, collective ? 0 : tag, comm}]++;
}

void logOwn(const CommEvent& e) {
  ThreadState* ts = tlsThread;
  if (ts != nullptr && ts->regions != nullptr) logCommEvent(ts->regions, e);
}

}  // namespace

void commRecord(CommRecordKind kind, H comm, int peer, int tag, std::uint64_t beginNs, std::uint64_t endNs) {
  ThreadState* ts = tlsThread;
  if (ts == nullptr || ts->regions == nullptr) return;
  std::uint64_t name = 0, sequence = 0;
  int worldPeer = peer;
  if (kind != kCommWait) {
    Tables& t = tables();
    std::lock_guard lock(t.mutex);
    const CommInfo& c = commInfo(t, comm);
    name = c.name;
    worldPeer = toWorld(c.world, peer);
    sequence = nextSequence(t, kind, worldPeer, tag, name);
  }
  logCommEvent(ts->regions, {beginNs, endNs, worldPeer, tag, name, sequence, static_cast<std::uint8_t>(kind)});
}

// The root as a world rank (-1 none, -2 a scan: kept for profiles of older readers); the tag is
// the caller's rank in the communicator, which orders a scan's members.
void commCollective(int op, H comm, int root, std::uint64_t beginNs, std::uint64_t endNs) {
  ThreadState* ts = tlsThread;
  if (ts == nullptr || ts->regions == nullptr) return;
  Tables& t = tables();
  std::unique_lock lock(t.mutex);
  const CommInfo& c = commInfo(t, comm);
  const int peer = toWorld(c.world, root);
  CommEvent e{beginNs,
              endNs,
              peer,
              c.self,
              c.name,
              nextSequence(t, kCommCollective, 0, 0, c.name),
              static_cast<std::uint8_t>(kCommCollective)};
  lock.unlock();
  e.op = static_cast<std::uint8_t>(op);
  logCommEvent(ts->regions, e);
}

void commStart(CommRecordKind kind, H comm, int peer, int tag, H request, std::uint64_t beginNs) {
  Tables& t = tables();
  std::lock_guard lock(t.mutex);
  const CommInfo& c = commInfo(t, comm);
  Pending p;
  p.kind = kind;
  p.comm = c.name;
  p.beginNs = beginNs;
  p.wildcard = kind == kCommRecv && (peer == kAnySource || tag == kAnyTag);
  if (p.wildcard) {
    p.world = c.world;
  } else {
    p.peer = toWorld(c.world, peer);
    p.tag = tag;
    p.sequence = nextSequence(t, kind, p.peer, tag, c.name);
  }
  t.pending[request] = std::move(p);
}

bool commPending(H request) {
  Tables& t = tables();
  std::lock_guard lock(t.mutex);
  return t.pending.count(request) != 0;
}

bool commComplete(H request, int source, int tag, std::uint64_t waitBeginNs, std::uint64_t endNs) {
  Tables& t = tables();
  std::unique_lock lock(t.mutex);
  auto it = t.pending.find(request);
  if (it == t.pending.end()) return false;
  Pending p = std::move(it->second);
  t.pending.erase(it);
  if (p.wildcard) {
    if (source < 0) return true;  // from MPI_PROC_NULL, or cancelled: no message
    p.peer = toWorld(p.world, source);
    p.tag = tag;
    p.sequence = nextSequence(t, p.kind, p.peer, p.tag, p.comm);
  }
  lock.unlock();
  CommEvent e{p.beginNs, endNs, p.peer, p.tag, p.comm, p.sequence, static_cast<std::uint8_t>(p.kind)};
  e.waitBeginNs = waitBeginNs;
  logOwn(e);
  return true;
}

void commDrop(H request, std::uint64_t endNs) {
  Tables& t = tables();
  std::unique_lock lock(t.mutex);
  auto it = t.pending.find(request);
  if (it == t.pending.end()) return;
  const Pending p = std::move(it->second);
  t.pending.erase(it);
  lock.unlock();
  // A freed send still goes out and began at its start; when it completes is never known (the
  // free's end stands for it). A freed receive's message is never known.
  if (p.kind != kCommSend) return;
  CommEvent e{p.beginNs, endNs, p.peer, p.tag, p.comm, p.sequence, static_cast<std::uint8_t>(p.kind)};
  e.waitBeginNs = endNs;
  logOwn(e);
}

}  // namespace csp::measure
