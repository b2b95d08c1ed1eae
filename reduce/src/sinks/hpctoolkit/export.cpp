// The parallel export of a CSP database to HPCToolkit's format (csp/reduce/hpctoolkit_export.hpp):
//
//  1. the root checks the output and creates a staging directory next to it; everyone learns it;
//  2. the per-thread blocks are encoded in chunks of consecutive profiles (profile.db) and of
//     consecutive CCT nodes (cct.db), round-robin over the ranks, one profile or node at a time;
//     after each round the ranks share their chunks' sizes, so that each knows where its chunk
//     goes, and a background thread writes it there while the next one is encoded;
//  3. each rank writes the headers of its profiles and contexts, and its node range's part of the
//     summary profile; the root writes the file headers, meta.db and metrics/default.yaml;
//  4. the root publishes the directory by rename.
// Blocks are position-independent and every size and offset depends on the data alone, so the
// files are the same bytes for any number of ranks.
#include "csp/reduce/hpctoolkit_export.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <exception>
#include <functional>
#include <mutex>
#include <optional>
#include <thread>

#include "csp/metrics/encoding.hpp"
#include "csp/storage/database.hpp"
#include "csp/storage/database_writer.hpp"
#include "export.hpp"
#include "format.hpp"

namespace csp::reduce {

namespace fs = std::filesystem;
using storage::MetricScope;
using storage::NodeId;

namespace {

[[noreturn]] void ioError(const fs::path& path, const char* what) {
  throw HpctoolkitExportError(fmt::format("{}: cannot {}: {}", path.string(), what, std::strerror(errno)));
}

class File {
 public:
  File(fs::path path, int flags) : path_(std::move(path)), fd_(::open(path_.c_str(), flags | O_CLOEXEC, 0644)) {
    if (fd_ < 0) ioError(path_, "open");
  }
  ~File() {
    if (fd_ >= 0) ::close(fd_);
  }
  File(const File&) = delete;
  File& operator=(const File&) = delete;
  int fd() const { return fd_; }
  const fs::path& path() const { return path_; }
  void writeAt(std::uint64_t at, std::string_view bytes) const {
    while (!bytes.empty()) {
      const auto n = ::pwrite(fd_, bytes.data(), bytes.size(), static_cast<off_t>(at));
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) ioError(path_, "write");
      bytes.remove_prefix(static_cast<std::size_t>(n));
      at += static_cast<std::uint64_t>(n);
    }
  }
  // Durable before the directory is published.
  void sync() const {
    if (::fdatasync(fd_) != 0) ioError(path_, "sync");
  }

 private:
  fs::path path_;
  int fd_;
};

// Writes chunks at their offsets on a thread of its own while the caller encodes the next ones:
// page-aligned chunks go around the page cache (O_DIRECT) where the file system allows it.
class ChunkWriter {
 public:
  explicit ChunkWriter(const fs::path& path) : buffered_(path, O_WRONLY | O_CREAT) {
    direct_ = ::open(path.c_str(), O_WRONLY | O_DIRECT | O_CLOEXEC);
    thread_ = std::thread([this] { run(); });
  }
  ~ChunkWriter() {
    stop();
    if (direct_ >= 0) ::close(direct_);
  }
  ChunkWriter(const ChunkWriter&) = delete;
  ChunkWriter& operator=(const ChunkWriter&) = delete;

  // An empty buffer, recycled from a written chunk when there is one.
  hpctk::ChunkBuffer buffer() {
    std::lock_guard lock(mutex_);
    if (free_.empty()) return {};
    auto b = std::move(free_.back());
    free_.pop_back();
    b.clear();
    return b;
  }
  // Two chunks at most are waiting: memory stays at a few chunks.
  void submit(std::uint64_t at, hpctk::ChunkBuffer bytes) {
    std::unique_lock lock(mutex_);
    changed_.wait(lock, [&] { return queue_.size() < 2 || error_; });
    rethrow();
    queue_.emplace_back(at, std::move(bytes));
    changed_.notify_all();
  }
  // Every chunk written and durable.
  void finish() {
    stop();
    rethrow();
    buffered_.sync();
  }

 private:
  void stop() {
    {
      std::lock_guard lock(mutex_);
      stopping_ = true;
      changed_.notify_all();
    }
    if (thread_.joinable()) thread_.join();
  }
  void rethrow() {
    if (error_) std::rethrow_exception(std::exchange(error_, nullptr));
  }
  void run() {
    for (;;) {
      std::pair<std::uint64_t, hpctk::ChunkBuffer> job;
      {
        std::unique_lock lock(mutex_);
        changed_.wait(lock, [&] { return !queue_.empty() || stopping_; });
        if (queue_.empty()) return;
        job = std::move(queue_.front());
        queue_.pop_front();
        changed_.notify_all();
      }
      try {
        write(job.first, std::string_view(job.second.data(), job.second.size()));
        std::lock_guard lock(mutex_);
        free_.push_back(std::move(job.second));
      } catch (...) {
        std::lock_guard lock(mutex_);
        error_ = std::current_exception();
        queue_.clear();
        changed_.notify_all();
        return;
      }
    }
  }
  // The buffer is 4096-aligned, as direct I/O needs it.
  void write(std::uint64_t at, std::string_view bytes) {
    if (direct_ >= 0 && at % kChunkAlignment == 0 && bytes.size() % kChunkAlignment == 0) {
      std::uint64_t done = 0;
      while (done < bytes.size()) {
        const auto n = ::pwrite(direct_, bytes.data() + done, bytes.size() - done, static_cast<off_t>(at + done));
        if (n < 0 && errno == EINTR) continue;
        if (n < 0 && errno == EINVAL) break;  // not for this file system after all
        if (n <= 0) ioError(buffered_.path(), "write");
        done += static_cast<std::uint64_t>(n);
      }
      if (done == bytes.size()) return;
      ::close(std::exchange(direct_, -1));
      bytes.remove_prefix(done);
      at += done;
    }
    buffered_.writeAt(at, bytes);
  }

  static constexpr std::uint64_t kChunkAlignment = hpctk::kChunkAlignment;
  File buffered_;
  int direct_ = -1;
  std::thread thread_;
  std::mutex mutex_;
  std::condition_variable changed_;
  std::deque<std::pair<std::uint64_t, hpctk::ChunkBuffer>> queue_;
  std::vector<hpctk::ChunkBuffer> free_;
  std::exception_ptr error_;
  bool stopping_ = false;
};

std::string fileName(const fs::path& p) {
  const auto name = p.filename().empty() ? p.parent_path().filename() : p.filename();
  return name.string();
}

}  // namespace

namespace hpctk {

// The root's staging directory: ".<name>.tmp-<pid>-XXXXXX" next to the output (the pattern
// storage::cleanupLeftovers recognizes), removed unless published.
class Staging {
 public:
  Staging(const fs::path& output, bool force, const HpctoolkitExportOptions& options) : target_(output) {
    if (target_.filename().empty()) target_ = target_.parent_path();
    if (const auto why = hpctoolkitOutputProblem(target_, force); !why.empty()) throw HpctoolkitExportError(why);
    force_ = force;
    const fs::path parent = target_.has_parent_path() ? target_.parent_path() : fs::path(".");
    std::error_code ec;
    fs::create_directories(parent, ec);
    if (ec) throw HpctoolkitExportError(fmt::format("{}: cannot create: {}", parent.string(), ec.message()));
    for (const auto& l : storage::cleanupLeftovers(target_))
      if (options.onLeftover) options.onLeftover(l.removed, fmt::format("{}: {}", l.path.string(), l.reason));
    std::string name = (parent / fmt::format(".{}.tmp-{}-XXXXXX", fileName(target_), ::getpid())).string();
    if (!::mkdtemp(name.data()))
      throw HpctoolkitExportError(
          fmt::format("{}: cannot create a staging directory next to it: {}", target_.string(), std::strerror(errno)));
    dir_ = name;
    ::chmod(dir_.c_str(), 0755);
  }
  ~Staging() {
    if (!published_) {
      std::error_code ec;
      fs::remove_all(dir_, ec);
    }
  }
  Staging(const Staging&) = delete;
  Staging& operator=(const Staging&) = delete;
  const fs::path& dir() const { return dir_; }
  void publish() {
    if (const auto why = hpctoolkitOutputProblem(target_, force_); !why.empty())
      throw HpctoolkitExportError(why + "; appeared while writing, not replaced");
    try {
      storage::publishDirectory(dir_, target_);
    } catch (const storage::DatabaseError& e) {
      throw HpctoolkitExportError(e.what());
    }
    published_ = true;
  }

 private:
  fs::path target_;
  fs::path dir_;
  bool force_ = false;
  bool published_ = false;
};

}  // namespace hpctk

namespace {

std::string hostName() {
  char name[256] = {};
  ::gethostname(name, sizeof name - 1);
  return name;
}

std::vector<std::byte> bytesOf(const std::string& s) {
  const auto* p = reinterpret_cast<const std::byte*>(s.data());
  return {p, p + s.size()};
}

// Every rank learns the staging directory (created by the root) and arms its removal.
fs::path shareStaging(const Comm& comm, const HpctoolkitExportOptions& options, hpctk::StagingPtr& staging) {
  std::vector<std::byte> owner;
  if (comm.rank() == 0) {
    staging.reset(new hpctk::Staging(options.output, options.force, options));
    owner = bytesOf(fmt::format("{} {}\n{}", ::getpid(), hostName(), staging->dir().string()));
  }
  comm.broadcast(owner);
  const std::string text(reinterpret_cast<const char*>(owner.data()), owner.size());
  const auto newline = text.find('\n');
  const auto space = text.find(' ');
  fs::path dir = text.substr(newline + 1);
  const bool sameHost = text.substr(space + 1, newline - space - 1) == hostName();
  if (options.onTempDir) options.onTempDir(dir, sameHost ? std::stoi(text.substr(0, space)) : 0);
  comm.onAbort([dir] {
    std::error_code ec;
    fs::remove_all(dir, ec);
  });
  return dir;
}

// [begin, end) of `count` items for this rank: contiguous, in rank order.
std::pair<std::uint64_t, std::uint64_t> rangeOf(const Comm& comm, std::uint64_t count) {
  const auto r = static_cast<std::uint64_t>(comm.rank());
  const auto p = static_cast<std::uint64_t>(comm.size());
  return {count * r / p, count * (r + 1) / p};
}

std::vector<storage::ValueType> valueTypes(const storage::DatabaseMetadata& meta) {
  std::vector<storage::ValueType> t;
  for (const auto& m : meta.metrics) t.push_back(m.valueType);
  return t;
}

// Profiles [begin, end) profile-major.
std::vector<hpctk::Block> encodeProfiles(const storage::Database& db, const std::vector<storage::ValueType>& types,
                                         std::uint64_t begin, std::uint64_t end, hpctk::ChunkBuffer& out) {
  std::vector<hpctk::Block> blocks;
  for (auto p = begin; p < end; ++p)
    blocks.push_back(hpctk::encodeProfileBlock(db.profileValues(static_cast<storage::ProfileId>(p)), types, out));
  return blocks;
}

// Nodes [begin, end) context-major: the global context first, before the root's.
std::vector<hpctk::Block> encodeContexts(const storage::Database& db, const std::vector<storage::ValueType>& types,
                                         std::uint64_t begin, std::uint64_t end, hpctk::ChunkBuffer& out) {
  std::vector<hpctk::Block> blocks;
  for (auto n = begin; n < end; ++n) {
    const auto values = db.nodeValues(static_cast<NodeId>(n));
    for (int copy = n == 0 ? 2 : 1; copy > 0; --copy) blocks.push_back(hpctk::encodeContextBlock(values, types, out));
  }
  return blocks;
}

// Encodes `chunks` chunks round-robin over the ranks (`encode(chunk, out)` returns the blocks of
// the chunk's items) and writes each where it goes: after every round the ranks share their
// chunks' sizes. `placed(chunk, blocks, offset)` writes the items' headers. Returns the offset
// just past the last chunk, the same on every rank.
std::uint64_t writeChunks(
    const Comm& comm, std::uint64_t chunks, std::uint64_t base, ChunkWriter& writer,
    const std::function<std::vector<hpctk::Block>(std::uint64_t, hpctk::ChunkBuffer&)>& encode,
    const std::function<void(std::uint64_t, const std::vector<hpctk::Block>&, std::uint64_t)>& placed) {
  const auto ranks = static_cast<std::uint64_t>(comm.size());
  const auto rank = static_cast<std::uint64_t>(comm.rank());
  for (std::uint64_t first = 0; first < chunks; first += ranks) {
    const auto chunk = first + rank;
    hpctk::ChunkBuffer bytes = writer.buffer();
    std::vector<hpctk::Block> blocks;
    if (chunk < chunks) {
      blocks = encode(chunk, bytes);
      bytes.padTo(hpctk::kChunkAlignment);
    }
    Packer size;
    size.u64(bytes.size());
    const auto sizes = comm.allgather(size.take());
    std::uint64_t at = base;
    for (std::uint64_t r = 0; r < sizes.size(); ++r) {
      Unpacker in(sizes[r], "chunk size");
      const auto n = in.u64();
      if (r < rank) at += n;
      base += n;
    }
    if (chunk < chunks) {
      placed(chunk, blocks, at);
      if (bytes.size() > 0) writer.submit(at, std::move(bytes));
    }
  }
  return base;
}

// The summary statistics of one (node, metric, scope), in partial order (format.hpp).
std::array<double, hpctk::kPartials> partials(std::string_view accumulator, storage::ValueType type) {
  std::array<double, hpctk::kPartials> out{};
  auto set = [&](hpctk::Partial p, double v) { out[static_cast<unsigned>(p)] = v; };
  if (type == storage::ValueType::Real) {
    const auto a = metrics::decodeRealAccumulator(accumulator);
    const auto n = static_cast<double>(a.count());
    set(hpctk::Partial::Count, n);
    set(hpctk::Partial::Sum, a.mean() * n);
    set(hpctk::Partial::SumSquares, a.m2() + n * a.mean() * a.mean());
    if (a.count() > 0) {
      set(hpctk::Partial::Min, a.min());
      set(hpctk::Partial::Max, a.max());
    }
    return out;
  }
  const auto a = metrics::decodeIntAccumulator(accumulator);
  set(hpctk::Partial::Count, static_cast<double>(a.count()));
  set(hpctk::Partial::Sum, static_cast<double>(a.sum()));
  set(hpctk::Partial::SumSquares,
      std::ldexp(static_cast<double>(a.sumSquaresHigh()), 128) + static_cast<double>(a.sumSquaresLow()));
  if (a.count() > 0) {
    set(hpctk::Partial::Min, static_cast<double>(a.min()));
    set(hpctk::Partial::Max, static_cast<double>(a.max()));
  }
  return out;
}

// This rank's part of the summary profile: the values and the context index of its node range.
struct SummaryPart {
  std::string values;
  std::vector<std::pair<std::uint32_t, std::uint64_t>> index;  // context, first value (local)
  std::uint64_t count = 0;
};

SummaryPart encodeSummaries(const storage::Database& db, std::uint64_t begin, std::uint64_t end) {
  const auto types = valueTypes(db.metadata());
  SummaryPart part;
  hpctk::ProfileBlockEncoder encoder;
  std::string scratch;
  for (auto n = begin; n < end; ++n) {
    // Per metric, both scopes' partials, then out in statistic-id order.
    std::vector<std::array<std::array<double, hpctk::kPartials>, 2>> byMetric(types.size());
    for (const auto& a : db.summaries(static_cast<NodeId>(n)))
      if (a.metric < types.size())
        byMetric[a.metric][static_cast<unsigned>(a.scope)] = partials(a.bytes, types[a.metric]);
    for (std::uint32_t context : n == 0 ? std::vector<std::uint32_t>{0, 1}
                                        : std::vector<std::uint32_t>{hpctk::contextOf(static_cast<NodeId>(n))})
      for (std::size_t m = 0; m < types.size(); ++m)
        for (unsigned k = 0; k < hpctk::kPartials; ++k)
          for (unsigned s = 0; s < 2; ++s)
            encoder.add(context, hpctk::statisticId(m, static_cast<hpctk::Partial>(k), static_cast<MetricScope>(s)),
                        byMetric[m][s][k]);
  }
  // The encoder's block holds values then index; split them apart again.
  const auto block = encoder.finish(scratch);
  part.count = block.values;
  part.values = scratch.substr(0, block.values * hpctk::kProfileValueSize);
  const auto index = hpctk::profileIndexOffset(block);
  for (std::uint32_t i = 0; i < block.indices; ++i) {
    std::uint32_t context = 0;
    std::uint64_t first = 0;
    std::memcpy(&context, scratch.data() + index + i * hpctk::kProfileIndexSize, 4);
    std::memcpy(&first, scratch.data() + index + i * hpctk::kProfileIndexSize + 4, 8);
    part.index.emplace_back(context, first);
  }
  return part;
}

std::string summaryIndexBytes(const SummaryPart& part, std::uint64_t firstValue) {
  std::string out;
  for (const auto& [context, first] : part.index) {
    const std::uint64_t start = first + firstValue;
    out.append(reinterpret_cast<const char*>(&context), 4);
    out.append(reinterpret_cast<const char*>(&start), 8);
  }
  return out;
}

// What each rank contributes to the summary profile (and the values it wrote), exchanged so that
// every rank knows where its part goes.
struct PartSizes {
  std::uint64_t summaryValues = 0, summaryContexts = 0, values = 0;
};

std::vector<PartSizes> exchangeSizes(const Comm& comm, const PartSizes& mine) {
  Packer out;
  for (auto v : {mine.summaryValues, mine.summaryContexts, mine.values}) out.u64(v);
  std::vector<PartSizes> all;
  for (const auto& bytes : comm.allgather(out.take())) {
    Unpacker in(bytes, "part sizes");
    PartSizes s;
    s.summaryValues = in.u64();
    s.summaryContexts = in.u64();
    s.values = in.u64();
    all.push_back(s);
  }
  return all;
}

std::string metaDescription(const storage::Database& db) {
  const auto& meta = db.metadata();
  std::string metrics;
  for (const auto& m : meta.metrics)
    metrics +=
        fmt::format("{}`{}` ({})", metrics.empty() ? "" : ", ", m.descriptor.name, hpctk::metricName(m.descriptor));
  std::string command;
  for (const auto& a : meta.commandLine) command += (command.empty() ? "" : " ") + a;
  return fmt::format(
      "Written by CSP (csp-prof-mpi --hpctoolkit) from the CSP database `{}`.\n\n"
      "- executable: `{}`\n- command line: `{}`\n- profiles: {} ({} processes)\n- calling contexts: {}\n"
      "- metrics (CSP name, name here): {}\n\n"
      "Exclusive values (scope \"function\") follow CSP's rules: a procedure's own statements, loops and "
      "inlined code; a loop's or inlined code's own statements.\n",
      fileName(db.directory()), meta.executable, command, meta.profiles.size(), meta.processCount, meta.nodeCount,
      metrics);
}

// The root's files: meta.db, metrics/default.yaml, the file headers and what is not per rank.
void writeRootParts(const storage::Database& db, const fs::path& dir, const File& profileDb, const File& cctDb,
                    const hpctk::ProfileDbLayout& pl, const hpctk::CctDbLayout& cl, std::uint64_t cctEnd,
                    const std::string& idTuples, std::uint64_t summaryValues, std::uint64_t summaryContexts) {
  const auto& meta = db.metadata();
  const auto cct = db.readCct();
  {
    File metaDb(dir / "meta.db", O_WRONLY | O_CREAT | O_TRUNC);
    metaDb.writeAt(0, hpctk::encodeMetaDb({&meta, &cct, metaDescription(db)}));
    metaDb.sync();
  }
  fs::create_directories(dir / "metrics");
  {
    File yaml(dir / "metrics" / "default.yaml", O_WRONLY | O_CREAT | O_TRUNC);
    yaml.writeAt(0, hpctk::encodeMetricsYaml(meta));
    yaml.sync();
  }
  profileDb.writeAt(0, hpctk::encodeProfileDbHeader(pl));
  profileDb.writeAt(pl.pProfileInfos, hpctk::encodeProfileInfoSectionHeader(pl));
  const hpctk::Block summary{summaryValues, static_cast<std::uint32_t>(summaryContexts), 0};
  profileDb.writeAt(pl.pProfiles, hpctk::encodeProfileInfo(summary, pl.pSummaryValues, 0, true));
  profileDb.writeAt(pl.pIdTuples, idTuples);
  profileDb.writeAt(pl.footer, std::string_view(hpctk::kProfileFooter, hpctk::kFooterSize));
  cctDb.writeAt(0, hpctk::encodeCctDbHeader(cl));
  cctDb.writeAt(cctEnd, std::string_view(hpctk::kCctFooter, hpctk::kFooterSize));
}

std::uint64_t chunksOf(std::uint64_t items, std::uint64_t perChunk) { return (items + perChunk - 1) / perChunk; }

// profile.db's per-thread blocks and their {PI} headers; returns the offset past the chunks and
// (through `values`) how many values this rank wrote.
std::uint64_t writeProfileBlocks(const Comm& comm, const storage::Database& db, const hpctk::ProfileDbLayout& pl,
                                 const std::vector<std::uint64_t>& tupleOffsets, const fs::path& path,
                                 const File& headers, std::uint64_t& values) {
  const auto types = valueTypes(db.metadata());
  const auto profiles = db.metadata().profiles.size();
  ChunkWriter writer(path);
  const auto end = writeChunks(
      comm, chunksOf(profiles, hpctk::kProfilesPerChunk), pl.pBlocks, writer,
      [&](std::uint64_t chunk, hpctk::ChunkBuffer& out) {
        const auto first = chunk * hpctk::kProfilesPerChunk;
        return encodeProfiles(db, types, first, std::min<std::uint64_t>(first + hpctk::kProfilesPerChunk, profiles),
                              out);
      },
      [&](std::uint64_t chunk, const std::vector<hpctk::Block>& blocks, std::uint64_t at) {
        const auto first = chunk * hpctk::kProfilesPerChunk;
        std::string infos;
        for (std::size_t i = 0; i < blocks.size(); ++i) {
          infos += hpctk::encodeProfileInfo(blocks[i], at, tupleOffsets[first + i], false);
          at += blocks[i].bytes;
          values += blocks[i].values;
        }
        headers.writeAt(pl.pProfiles + (first + 1) * hpctk::kProfileInfoSize, infos);
      });
  writer.finish();
  return end;
}

// cct.db's context blocks and their {CI} headers; returns the offset past the chunks.
std::uint64_t writeContextBlocks(const Comm& comm, const storage::Database& db, const hpctk::CctDbLayout& cl,
                                 const fs::path& path, const File& headers) {
  const auto types = valueTypes(db.metadata());
  const std::uint64_t nodes = db.metadata().nodeCount;
  ChunkWriter writer(path);
  const auto end = writeChunks(
      comm, chunksOf(nodes, hpctk::kNodesPerChunk), cl.pBlocks, writer,
      [&](std::uint64_t chunk, hpctk::ChunkBuffer& out) {
        const auto first = chunk * hpctk::kNodesPerChunk;
        return encodeContexts(db, types, first, std::min<std::uint64_t>(first + hpctk::kNodesPerChunk, nodes), out);
      },
      [&](std::uint64_t chunk, const std::vector<hpctk::Block>& blocks, std::uint64_t at) {
        // The first chunk starts with the global context 0; node n is context n + 1.
        const auto firstContext = chunk == 0 ? 0 : chunk * hpctk::kNodesPerChunk + 1;
        std::string infos;
        for (const auto& b : blocks) {
          infos += hpctk::encodeContextInfo(b, at);
          at += b.bytes;
        }
        headers.writeAt(cl.pCtxs + firstContext * hpctk::kContextInfoSize, infos);
      });
  writer.finish();
  return end;
}

}  // namespace

namespace hpctk {

void StagingDeleter::operator()(Staging* s) const noexcept { delete s; }

HpctoolkitExportSummary writeExport(const Comm& comm, const HpctoolkitExportOptions& options, StagingPtr& staging) {
  const auto start = std::chrono::steady_clock::now();
  const auto db = storage::Database::open(options.database);
  const auto& meta = db->metadata();
  if (meta.metrics.size() > hpctk::kMaxMetrics)
    throw HpctoolkitExportError(fmt::format("{}: {} metrics; HPCToolkit's 16-bit metric ids hold at most {}",
                                            options.database.string(), meta.metrics.size(), hpctk::kMaxMetrics));
  const fs::path dir = shareStaging(comm, options, staging);
  std::vector<std::uint64_t> tupleOffsets;
  auto pl = hpctk::profileDbLayout(meta.profiles.size(), 0);
  const auto idTuples = hpctk::encodeIdTuples(meta.profiles, pl.pIdTuples, tupleOffsets);
  pl = hpctk::profileDbLayout(meta.profiles.size(), idTuples.size());
  const auto cl = hpctk::cctDbLayout(std::uint64_t{meta.nodeCount} + 1);
  const File profileDb(dir / "profile.db", O_WRONLY | O_CREAT);
  const File cctDb(dir / "cct.db", O_WRONLY | O_CREAT);
  faultPoint(comm, "hpctoolkit");

  // The per-thread blocks, then the summary profile (this rank's node range) after them.
  std::uint64_t values = 0;
  const auto blocksEnd = writeProfileBlocks(comm, *db, pl, tupleOffsets, dir / "profile.db", profileDb, values);
  const auto cctEnd = writeContextBlocks(comm, *db, cl, dir / "cct.db", cctDb);
  const auto [nodeBegin, nodeEnd] = rangeOf(comm, meta.nodeCount);
  const auto summary = encodeSummaries(*db, nodeBegin, nodeEnd);
  const auto sizes = exchangeSizes(comm, {summary.count, summary.index.size(), values});
  PartSizes total, before;
  for (int r = 0; r < comm.size(); ++r) {
    const auto& s = sizes[static_cast<std::size_t>(r)];
    if (r < comm.rank()) {
      before.summaryValues += s.summaryValues;
      before.summaryContexts += s.summaryContexts;
    }
    total.summaryValues += s.summaryValues;
    total.summaryContexts += s.summaryContexts;
    total.values += s.values;
  }
  hpctk::placeSummary(pl, blocksEnd - pl.pBlocks, total.summaryValues, total.summaryContexts);
  profileDb.writeAt(pl.pSummaryValues + before.summaryValues * hpctk::kProfileValueSize, summary.values);
  profileDb.writeAt(pl.pSummaryIndex + before.summaryContexts * hpctk::kProfileIndexSize,
                    summaryIndexBytes(summary, before.summaryValues));
  if (comm.rank() == 0)
    writeRootParts(*db, dir, profileDb, cctDb, pl, cl, cctEnd, idTuples, total.summaryValues, total.summaryContexts);
  profileDb.sync();
  cctDb.sync();

  // Publish once every part is in place.
  comm.barrier();
  HpctoolkitExportSummary s;
  if (comm.rank() == 0) {
    staging->publish();
    s.bytes = storage::directoryBytes(options.output);
  }
  comm.barrier();
  s.profiles = meta.profiles.size();
  s.contexts = cl.contexts;
  s.metrics = meta.metrics.size();
  s.values = total.values;
  s.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return s;
}

}  // namespace hpctk

namespace {

bool isHpctoolkitDatabase(const fs::path& dir) {
  std::error_code ec;
  static const std::vector<std::string> kFiles = {"meta.db", "profile.db", "cct.db", "trace.db", "FORMATS.md"};
  static const std::vector<std::string> kDirs = {"metrics", "src"};
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    const auto name = it->path().filename().string();
    const auto type = it->symlink_status(ec).type();
    const bool known = (type == fs::file_type::regular && std::count(kFiles.begin(), kFiles.end(), name)) ||
                       (type == fs::file_type::directory && std::count(kDirs.begin(), kDirs.end(), name));
    if (!known) return false;
  }
  if (ec) return false;
  char magic[14] = {};
  const int fd = ::open((dir / "meta.db").c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  const bool ok = ::read(fd, magic, sizeof magic) == static_cast<ssize_t>(sizeof magic);
  ::close(fd);
  return ok && std::string_view(magic, sizeof magic) == "HPCTOOLKITmeta";
}

}  // namespace

std::string hpctoolkitOutputProblem(const fs::path& output, bool force) {
  if (output.empty()) return "the HPCToolkit database's directory name is empty";
  std::error_code ec;
  const auto st = fs::symlink_status(output, ec);
  if (!fs::exists(st)) return {};
  if (!force) return fmt::format("{}: already exists (use --force to replace it)", output.string());
  if (st.type() == fs::file_type::symlink)
    return fmt::format("{}: a symbolic link, not an HPCToolkit database (never followed or replaced)", output.string());
  if (st.type() != fs::file_type::directory || !isHpctoolkitDatabase(output))
    return fmt::format(
        "{}: not an HPCToolkit database (meta.db, profile.db, cct.db, metrics/ and nothing else); --force replaces "
        "only "
        "those: remove it yourself or choose another name",
        output.string());
  return {};
}

HpctoolkitExportSummary exportHpctoolkit(const Comm& comm, const HpctoolkitExportOptions& options) {
  hpctk::StagingPtr staging;
  try {
    return hpctk::writeExport(comm, options, staging);
  } catch (...) {
    const std::string message = failureMessageOfCurrentException();
    const auto failures = comm.fail(message);
    staging.reset();  // every rank has stopped writing: the staging directory goes
    throw HpctoolkitExportError(comm.rank() == 0 ? comm.describe(failures) : std::string("failed; rank 0 reports why"));
  }
}

}  // namespace csp::reduce
