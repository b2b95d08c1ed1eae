// The parallel export of a CSP database to HPCToolkit's format (csp/reduce/hpctoolkit_export.hpp):
//
//  1. the root checks the output and creates a staging directory next to it; everyone learns it;
//  2. each rank encodes its profile range (profile.db blocks) and its node range (cct.db blocks
//     and the summary profile's values) into spill files of the staging directory, one profile or
//     one node at a time;
//  3. the ranks exchange the sizes of their parts; every rank computes the same layout;
//  4. each rank copies its parts into place and writes the headers of its profiles and
//     contexts; the root writes the file headers, meta.db and metrics/default.yaml;
//  5. the root publishes the directory by rename.
// Blocks are position-independent and every size depends on the data alone, so the files are
// the same bytes for any number of ranks.
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
#include <cstring>
#include <optional>

#include "csp/metrics/encoding.hpp"
#include "csp/storage/database.hpp"
#include "csp/storage/database_writer.hpp"
#include "hpctoolkit_format.hpp"

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

// A rank's part of a file, written sequentially while it is encoded and copied into place once
// the layout is known.
class Spill {
 public:
  explicit Spill(fs::path path) : file_(std::move(path), O_WRONLY | O_CREAT | O_TRUNC) {}
  std::string& buffer() { return buffer_; }
  void flushIfLarge() {
    if (buffer_.size() >= kChunk) flush();
  }
  void flush() {
    file_.writeAt(size_, buffer_);
    size_ += buffer_.size();
    buffer_.clear();
  }
  std::uint64_t size() const { return size_ + buffer_.size(); }
  const fs::path& path() const { return file_.path(); }

  // Copies the whole spill to `at` in `out` (in the kernel where it can) and removes it.
  void copyInto(const File& out, std::uint64_t at) {
    flush();
    File in(file_.path(), O_RDONLY);
    loff_t from = 0;
    auto to = static_cast<loff_t>(at);
    std::uint64_t left = size_;
    while (left > 0) {
      const auto n = ::copy_file_range(in.fd(), &from, out.fd(), &to, left, 0);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) break;
      left -= static_cast<std::uint64_t>(n);
    }
    std::string chunk;
    while (left > 0) {  // file systems without copy_file_range
      chunk.resize(std::min<std::uint64_t>(left, kChunk));
      const auto n = ::pread(in.fd(), chunk.data(), chunk.size(), from);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) ioError(file_.path(), "read");
      out.writeAt(static_cast<std::uint64_t>(to), std::string_view(chunk.data(), static_cast<std::size_t>(n)));
      from += n;
      to += n;
      left -= static_cast<std::uint64_t>(n);
    }
    std::error_code ec;
    fs::remove(file_.path(), ec);
  }

 private:
  static constexpr std::size_t kChunk = 4 << 20;
  File file_;
  std::string buffer_;
  std::uint64_t size_ = 0;
};

std::string fileName(const fs::path& p) {
  const auto name = p.filename().empty() ? p.parent_path().filename() : p.filename();
  return name.string();
}

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
fs::path shareStaging(const Comm& comm, const HpctoolkitExportOptions& options, std::optional<Staging>& staging) {
  std::vector<std::byte> owner;
  if (comm.rank() == 0) {
    staging.emplace(options.output, options.force, options);
    owner = bytesOf(fmt::format("{} {}\n{}", ::getpid(), hostName(), staging->dir().string()));
  }
  comm.broadcast(owner);
  const std::string text(reinterpret_cast<const char*>(owner.data()), owner.size());
  const auto newline = text.find('\n');
  const auto space = text.find(' ');
  const fs::path dir = text.substr(newline + 1);
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

// This rank's profiles, profile-major: context 0 repeats the root's values.
std::vector<hpctk::Block> encodeProfiles(const storage::Database& db, std::uint64_t begin, std::uint64_t end,
                                         Spill& spill) {
  const auto types = valueTypes(db.metadata());
  std::vector<hpctk::Block> blocks;
  hpctk::ProfileBlockEncoder encoder;
  for (auto p = begin; p < end; ++p) {
    const auto values = db.profileValues(static_cast<storage::ProfileId>(p));
    for (const auto& v : values) {
      if (v.node != 0) break;
      encoder.add(0, hpctk::propagatedId(v.metric, v.scope), hpctk::valueOf(v.value, types.at(v.metric)));
    }
    for (const auto& v : values)
      encoder.add(hpctk::contextOf(v.node), hpctk::propagatedId(v.metric, v.scope),
                  hpctk::valueOf(v.value, types.at(v.metric)));
    blocks.push_back(encoder.finish(spill.buffer()));
    spill.flushIfLarge();
  }
  return blocks;
}

// This rank's contexts, context-major: the global context first when the rank holds the root.
std::vector<hpctk::Block> encodeContexts(const storage::Database& db, std::uint64_t begin, std::uint64_t end,
                                         Spill& spill) {
  const auto types = valueTypes(db.metadata());
  std::vector<hpctk::Block> blocks;
  hpctk::ContextBlockEncoder encoder;
  for (auto n = begin; n < end; ++n) {
    const auto values = db.nodeValues(static_cast<NodeId>(n));
    for (int copy = n == 0 ? 2 : 1; copy > 0; --copy) {
      for (const auto& v : values)
        encoder.add(hpctk::propagatedId(v.metric, v.scope), v.profile + 1, hpctk::valueOf(v.value, types.at(v.metric)));
      blocks.push_back(encoder.finish(spill.buffer()));
    }
    spill.flushIfLarge();
  }
  return blocks;
}

// The summary statistics of one (node, metric, scope), in partial order (hpctoolkit_format.hpp).
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

// What each rank contributes, exchanged so that every rank computes the same layout.
struct PartSizes {
  std::uint64_t profileBytes = 0, contextBytes = 0, summaryValues = 0, summaryContexts = 0, values = 0;
};

std::vector<PartSizes> exchangeSizes(const Comm& comm, const PartSizes& mine) {
  Packer out;
  for (auto v : {mine.profileBytes, mine.contextBytes, mine.summaryValues, mine.summaryContexts, mine.values})
    out.u64(v);
  std::vector<PartSizes> all;
  for (const auto& bytes : comm.allgather(out.take())) {
    Unpacker in(bytes, "part sizes");
    PartSizes s;
    s.profileBytes = in.u64();
    s.contextBytes = in.u64();
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
                    const hpctk::ProfileDbLayout& pl, const hpctk::CctDbLayout& cl, const std::string& idTuples,
                    std::uint64_t summaryValues, std::uint64_t summaryContexts) {
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
  cctDb.writeAt(cl.footer, std::string_view(hpctk::kCctFooter, hpctk::kFooterSize));
}

HpctoolkitExportSummary runExport(const Comm& comm, const HpctoolkitExportOptions& options,
                                  std::optional<Staging>& staging) {
  const auto start = std::chrono::steady_clock::now();
  const auto db = storage::Database::open(options.database);
  const auto& meta = db->metadata();
  if (meta.metrics.size() > hpctk::kMaxMetrics)
    throw HpctoolkitExportError(fmt::format("{}: {} metrics; HPCToolkit's 16-bit metric ids hold at most {}",
                                            options.database.string(), meta.metrics.size(), hpctk::kMaxMetrics));
  const fs::path dir = shareStaging(comm, options, staging);
  const auto [profileBegin, profileEnd] = rangeOf(comm, meta.profiles.size());
  const auto [nodeBegin, nodeEnd] = rangeOf(comm, meta.nodeCount);

  // Encode this rank's parts.
  Spill profileSpill(dir / fmt::format(".profile-part-{}", comm.rank()));
  Spill contextSpill(dir / fmt::format(".cct-part-{}", comm.rank()));
  const auto profileBlocks = encodeProfiles(*db, profileBegin, profileEnd, profileSpill);
  const auto contextBlocks = encodeContexts(*db, nodeBegin, nodeEnd, contextSpill);
  const auto summary = encodeSummaries(*db, nodeBegin, nodeEnd);

  // Agree on the layout.
  PartSizes mine{profileSpill.size(), contextSpill.size(), summary.count, summary.index.size(), 0};
  for (const auto& b : profileBlocks) mine.values += b.values;
  const auto sizes = exchangeSizes(comm, mine);
  PartSizes total, before;
  for (int r = 0; r < comm.size(); ++r) {
    const auto& s = sizes[static_cast<std::size_t>(r)];
    if (r < comm.rank()) {
      before.profileBytes += s.profileBytes;
      before.contextBytes += s.contextBytes;
      before.summaryValues += s.summaryValues;
      before.summaryContexts += s.summaryContexts;
    }
    total.profileBytes += s.profileBytes;
    total.contextBytes += s.contextBytes;
    total.summaryValues += s.summaryValues;
    total.summaryContexts += s.summaryContexts;
    total.values += s.values;
  }
  std::vector<std::uint64_t> tupleOffsets;
  const auto pIdTuples = hpctk::profileDbLayout(meta.profiles.size(), 0, 0, 0, 0).pIdTuples;
  const auto idTuples = hpctk::encodeIdTuples(meta.profiles, pIdTuples, tupleOffsets);
  const auto pl = hpctk::profileDbLayout(meta.profiles.size(), idTuples.size(), total.summaryValues,
                                         total.summaryContexts, total.profileBytes);
  const auto cl = hpctk::cctDbLayout(std::uint64_t{meta.nodeCount} + 1, total.contextBytes);

  // Write every part into place.
  faultPoint(comm, "hpctoolkit");
  File profileDb(dir / "profile.db", O_WRONLY | O_CREAT);
  File cctDb(dir / "cct.db", O_WRONLY | O_CREAT);
  const auto profileAt = pl.pBlocks + before.profileBytes;
  profileSpill.copyInto(profileDb, profileAt);
  std::string infos;
  for (auto at = profileAt; const auto& b : profileBlocks) {
    const auto p = profileBegin + static_cast<std::uint64_t>(&b - profileBlocks.data());
    infos += hpctk::encodeProfileInfo(b, at, tupleOffsets[p], false);
    at += b.bytes;
  }
  profileDb.writeAt(pl.pProfiles + (profileBegin + 1) * hpctk::kProfileInfoSize, infos);
  const auto contextAt = cl.pBlocks + before.contextBytes;
  contextSpill.copyInto(cctDb, contextAt);
  infos.clear();
  for (auto at = contextAt; const auto& b : contextBlocks) {
    infos += hpctk::encodeContextInfo(b, at);
    at += b.bytes;
  }
  const auto firstContext = nodeBegin == nodeEnd ? 0 : nodeBegin == 0 ? 0 : nodeBegin + 1;
  cctDb.writeAt(cl.pCtxs + firstContext * hpctk::kContextInfoSize, infos);
  profileDb.writeAt(pl.pSummaryValues + before.summaryValues * hpctk::kProfileValueSize, summary.values);
  profileDb.writeAt(pl.pSummaryIndex + before.summaryContexts * hpctk::kProfileIndexSize,
                    summaryIndexBytes(summary, before.summaryValues));
  if (comm.rank() == 0)
    writeRootParts(*db, dir, profileDb, cctDb, pl, cl, idTuples, total.summaryValues, total.summaryContexts);
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
  std::optional<Staging> staging;
  try {
    return runExport(comm, options, staging);
  } catch (...) {
    std::string message;
    try {
      throw;
    } catch (const PeerFailure&) {
      // another rank failed; it reports why
    } catch (const std::exception& e) {
      message = e.what();
      if (message.empty()) message = "unknown error";
    } catch (...) {
      message = "unknown error";
    }
    const auto failures = comm.fail(message);
    staging.reset();  // every rank has stopped writing: the staging directory goes
    throw HpctoolkitExportError(comm.rank() == 0 ? comm.describe(failures) : std::string("failed; rank 0 reports why"));
  }
}

}  // namespace csp::reduce
