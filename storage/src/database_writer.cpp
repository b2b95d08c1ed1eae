// Writing: shard SST files, ingestion, atomic publication, cleanup of interrupted builds.
#include <fcntl.h>
#include <fmt/format.h>
#include <rocksdb/convenience.h>
#include <rocksdb/db.h>
#include <rocksdb/sst_file_writer.h>
#include <rocksdb/write_batch.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <mutex>
#include <set>
#include <sstream>
#include <tuple>

#include "csp/storage/atomic_file.hpp"
#include "csp/storage/database_writer.hpp"
#include "db_format.hpp"

namespace csp::storage {

namespace fs = std::filesystem;

namespace {

constexpr const char* kStagingName = "staging";
constexpr const char* kShardIndexName = "INDEX";  // its presence marks a finished shard
constexpr std::size_t kMaxOverlappingRuns = 4;
// Writes `text` to dir/name so that it appears complete or not at all.
void writeFileAtomically(const fs::path& dir, const std::string& name, const std::string& text) {
  try {
    storage::writeFileAtomically(dir / name, text, {.fsync = true, .temporaryTag = {}});
  } catch (const AtomicFileError& e) {
    throw DatabaseError(dir, fmt::format("cannot write {}: {}", name, e.what()));
  }
}

// Keys in shard INDEX files; "-" stands for the empty key so that fields never vanish.
std::string hex(std::string_view bytes) {
  if (bytes.empty()) return "-";
  std::string out;
  for (unsigned char c : bytes) out += fmt::format("{:02x}", c);
  return out;
}

std::string unhex(const std::string& text) {
  if (text == "-") return {};
  std::string out;
  for (std::size_t i = 0; i + 1 < text.size(); i += 2)
    out.push_back(static_cast<char>(std::stoi(text.substr(i, 2), nullptr, 16)));
  return out;
}

fs::path shardDir(const fs::path& stagingDir, std::uint32_t shard) {
  return stagingDir / fmt::format("shard-{:06}", shard);
}

bool isCspDatabase(const fs::path& dir) {
  std::ifstream in(dir / kDatabaseManifestName, std::ios::binary);
  if (!in) return false;
  std::ostringstream text;
  text << in.rdbuf();
  return format::parseManifest(text.str()).has_value();
}

}  // namespace

// --- ShardWriter -----------------------------------------------------------------------------

namespace {

// Adds the wall time of its scope to `seconds`: RocksDB's share of writing the values.
class StoreTimer {
 public:
  explicit StoreTimer(double& seconds) : seconds_(seconds) {}
  ~StoreTimer() { seconds_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count(); }
  StoreTimer(const StoreTimer&) = delete;
  StoreTimer& operator=(const StoreTimer&) = delete;

 private:
  double& seconds_;
  std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now();
};

}  // namespace

struct ShardWriter::Impl {
  struct Family {
    std::string name;
    std::unique_ptr<rocksdb::SstFileWriter> writer;
    std::string lastKey;
    std::uint64_t entries = 0;
  };

  fs::path dir;
  std::uint32_t shard = 0;
  std::vector<Family> families;
  bool finished = false;
  std::uint64_t values = 0;
  std::optional<ProfileId> lastProfile;
  std::optional<NodeId> lastValueNode;
  std::vector<ProfileValue> profileScratch;  // putProfileValues, reused
  NodeValueBlocks nodeScratch;               // putNodeValues from a list, reused
  std::vector<ValueScale> scales;            // by metric (ShardOptions::valueScales)
  double storeSeconds = 0;                   // in RocksDB's table writer

  const char* lastName = nullptr;  // family() of the previous put: most puts go to the same family
  Family* lastFamily = nullptr;

  Family& family(const char* name) {
    if (name == lastName) return *lastFamily;
    for (auto& f : families)
      if (f.name == name) {
        lastName = name;
        lastFamily = &f;
        return f;
      }
    throw std::logic_error(fmt::format("no shard family {}", name));
  }

  // Values by profile come in ascending profile order.
  void nextProfile(ProfileId profile) {
    if (lastProfile && profile <= *lastProfile)
      throw std::logic_error(
          fmt::format("ShardWriter: profile {} after profile {}; profiles must ascend", profile, *lastProfile));
    lastProfile = profile;
  }
  void put(const char* familyName, const std::string& key, std::string_view value) {
    if (finished) throw std::logic_error("ShardWriter: put after finish()");
    Family& f = family(familyName);
    if (f.entries > 0 && key <= f.lastKey)
      throw std::logic_error(fmt::format("ShardWriter: keys of column family {} must ascend ({} after {})", f.name,
                                         hex(key), hex(f.lastKey)));
    if (!f.writer) {
      const rocksdb::Options options(format::instanceOptions(), format::familyOptions(f.name));
      f.writer = std::make_unique<rocksdb::SstFileWriter>(rocksdb::EnvOptions(), options);
      const fs::path file = dir / (f.name + ".sst");
      const auto s = f.writer->Open(file.string());
      if (!s.ok())
        throw DatabaseError(dir, fmt::format("cannot create {}: {}", file.filename().string(), s.ToString()));
    }
    const auto s = f.writer->Put(key, rocksdb::Slice(value.data(), value.size()));
    if (!s.ok()) throw DatabaseError(dir, fmt::format("writing {}.sst: {}", f.name, s.ToString()));
    f.lastKey = key;
    ++f.entries;
  }
};

ShardWriter::ShardWriter(const fs::path& stagingDir, std::uint32_t shardIndex, const ShardOptions& options)
    : impl_(std::make_unique<Impl>()) {
  impl_->dir = shardDir(stagingDir, shardIndex);
  impl_->shard = shardIndex;
  impl_->nodeScratch = NodeValueBlocks(options.valueScales);
  for (const auto scale : options.valueScales) impl_->scales.emplace_back(scale);
  for (const auto& name : format::shardFamilies()) impl_->families.push_back({name, nullptr, {}, 0});
  std::error_code ec;
  if (!fs::is_directory(stagingDir, ec))
    throw DatabaseError(stagingDir, "staging directory does not exist (was the database builder created?)");
  // A shard index is written once: a rerun of the same shard starts from scratch.
  fs::remove_all(impl_->dir, ec);
  fs::create_directory(impl_->dir, ec);
  if (ec) throw DatabaseError(impl_->dir, "cannot create shard directory: " + ec.message());
}

ShardWriter::~ShardWriter() {
  if (impl_ && !impl_->finished) {
    impl_->families.clear();  // closes open files before removing them
    std::error_code ec;
    fs::remove_all(impl_->dir, ec);
  }
}

void ShardWriter::putNode(NodeId id, const CctNode& node) {
  impl_->put(format::kCctNodes, format::nodeKey(id), format::encodeCctNode(node));
}

void ShardWriter::putChild(NodeId parent, NodeId child) {
  impl_->put(format::kCctChildren, format::childKey(parent, child), {});
}

void ShardWriter::putCct(std::span<const CctNode> nodes) {
  std::vector<std::vector<NodeId>> children(nodes.size());
  for (NodeId id = 0; id < nodes.size(); ++id) {
    const NodeId parent = nodes[id].parent;
    if (id == 0 ? parent != kNoIndex : parent >= id)
      throw std::logic_error(
          fmt::format("ShardWriter::putCct: node {} has parent {}; parents must precede children", id, parent));
    putNode(id, nodes[id]);
    if (id != 0) children[parent].push_back(id);
  }
  for (NodeId parent = 0; parent < children.size(); ++parent)
    for (NodeId child : children[parent]) putChild(parent, child);
}

void ShardWriter::putSummary(NodeId node, MetricId metric, MetricScope scope, std::string_view bytes) {
  impl_->put(format::kSummaries, format::summaryKey(node, metric, scope), bytes);
}

void ShardWriter::putDistribution(NodeId node, MetricId metric, MetricScope scope, std::uint8_t population,
                                  std::string_view accumulator, std::string_view histogram) {
  impl_->put(format::kDistributions, format::distributionKey(node, metric, scope, population),
             format::encodeDistribution(accumulator, histogram));
}

void ShardWriter::putProfileValues(ProfileId profile, std::span<const ProfileValue> values) {
  impl_->nextProfile(profile);
  auto& nonZero = impl_->profileScratch;
  nonZero.clear();
  for (std::size_t i = 0; i < values.size(); ++i) {
    const auto& v = values[i];
    if (i > 0) {
      const auto& p = values[i - 1];
      if (std::tie(p.node, p.metric, p.scope) >= std::tie(v.node, v.metric, v.scope))
        throw std::logic_error(
            fmt::format("ShardWriter: values of profile {} not strictly sorted by (node, metric, scope)", profile));
    }
    if (v.value != 0) nonZero.push_back(v);
  }
  impl_->values += nonZero.size();
  format::encodeProfileBlocks(profile, nonZero, impl_->scales, [&](const std::string& k, std::string_view v) {
    impl_->put(format::kValuesByProfile, k, v);
  });
}

void ShardWriter::putProfileColumns(ProfileId profile, const ProfileValueColumns& values) {
  impl_->nextProfile(profile);
  const std::size_t n = values.node.size();
  if (values.metric.size() != n || values.exclusive.size() != n || values.inclusive.size() != n)
    throw std::logic_error(fmt::format("ShardWriter: value columns of profile {} differ in length", profile));
  for (std::size_t k = 1; k < n; ++k)
    if (std::tie(values.node[k - 1], values.metric[k - 1]) >= std::tie(values.node[k], values.metric[k]))
      throw std::logic_error(
          fmt::format("ShardWriter: values of profile {} not strictly sorted by (node, metric)", profile));
  impl_->values +=
      format::encodeProfileBlocks(profile, values, impl_->scales, [&](const std::string& k, std::string_view v) {
        const StoreTimer timer(impl_->storeSeconds);
        impl_->put(format::kValuesByProfile, k, v);
      });
}

void ShardWriter::putProfileBlocks(ProfileId profile, const ProfileBlocks& blocks) {
  impl_->nextProfile(profile);
  if (!blocks.made) throw std::logic_error(fmt::format("ShardWriter: profile {}: its blocks were not made", profile));
  impl_->values += format::emitProfileBlocks(profile, blocks, [&](const std::string& k, std::string_view v) {
    const StoreTimer timer(impl_->storeSeconds);
    impl_->put(format::kValuesByProfile, k, v);
  });
}

void ShardWriter::putNodeValues(NodeId node, std::span<const NodeValue> values) {
  for (std::size_t i = 1; i < values.size(); ++i) {
    const auto& p = values[i - 1];
    const auto& v = values[i];
    if (std::tie(p.metric, p.scope, p.profile) >= std::tie(v.metric, v.scope, v.profile))
      throw std::logic_error(
          fmt::format("ShardWriter: values of node {} not strictly sorted by (metric, scope, profile)", node));
  }
  auto& blocks = impl_->nodeScratch;
  for (const auto& v : values) blocks.add(v.metric, v.scope, v.profile, v.value);
  putNodeBlocks(node, blocks);
}

void ShardWriter::putNodeBlocks(NodeId node, NodeValueBlocks& blocks) {
  if (impl_->lastValueNode && node <= *impl_->lastValueNode)
    throw std::logic_error(
        fmt::format("ShardWriter: node {} after node {}; nodes must ascend", node, *impl_->lastValueNode));
  impl_->lastValueNode = node;
  const StoreTimer timer(impl_->storeSeconds);
  impl_->values += blocks.drain(
      node, [&](const std::string& key, std::string_view block) { impl_->put(format::kValuesByNode, key, block); });
}

std::uint64_t NodeValueBlocks::drain(NodeId node,
                                     const std::function<void(const std::string& key, std::string_view block)>& emit) {
  std::uint64_t values = 0;
  for (std::size_t c = 0; c < columns_.size(); ++c) {
    auto& col = columns_[c];
    if (col.count == 0 && col.sealedCount == 0) continue;
    const auto metric = static_cast<MetricId>(c >> 1);
    const auto scope = static_cast<MetricScope>(c & 1);
    for (std::size_t b = 0; b < col.sealedCount; ++b)
      emit(format::nodeBlockKey(node, metric, scope, col.sealed[b].first), col.sealed[b].second);
    if (col.count > 0) {
      if (visitor_) visitor_(metric, scope, {col.profiles.data(), col.count}, {col.values.data(), col.count});
      emit(format::nodeBlockKey(node, metric, scope, col.profiles[0]), encodeOpen(col));
    }
    values += col.count + col.sealedCount * std::uint64_t{blockValues_};
    col.count = 0;
    col.sealedCount = 0;
    col.next = 0;
  }
  return values;
}

NodeValueBlocks::NodeValueBlocks(std::vector<std::uint64_t> valueScales)
    : blockValues_(static_cast<std::uint32_t>(format::kNodeBlockValues)), scales_(std::move(valueScales)) {}

bool NodeValueBlocks::empty() const {
  return std::all_of(columns_.begin(), columns_.end(),
                     [](const Column& c) { return c.count == 0 && c.sealedCount == 0; });
}

void NodeValueBlocks::widen(std::size_t column) {
  const std::size_t from = columns_.size();
  columns_.resize(column + 1);
  columnCount_ = columns_.size();
  for (std::size_t c = from; c < columns_.size(); ++c) {
    if ((c >> 1) < scales_.size()) columns_[c].scale = ValueScale(scales_[c >> 1]);
    columns_[c].profiles.resize(blockValues_);
    columns_[c].values.resize(blockValues_);
  }
}

void NodeValueBlocks::seal(Column& column) {
  if (visitor_) {
    const auto c = static_cast<std::size_t>(&column - columns_.data());
    visitor_(static_cast<MetricId>(c >> 1), static_cast<MetricScope>(c & 1), {column.profiles.data(), column.count},
             {column.values.data(), column.count});
  }
  if (column.sealedCount == column.sealed.size()) column.sealed.emplace_back();
  auto& slot = column.sealed[column.sealedCount++];
  slot.first = column.profiles[0];
  slot.second.assign(encodeOpen(column));
  column.count = 0;
}

std::string_view NodeValueBlocks::encodeOpen(const Column& column) {
  return format::encodeNodeBlock({column.profiles.data(), column.count}, {column.values.data(), column.count},
                                 column.scale, buffer_);
}

void NodeValueBlocks::refuse(ProfileId profile, ProfileId previous) {
  throw std::logic_error(fmt::format(
      "NodeValueBlocks: profile {} after profile {}; profiles must ascend per (metric, scope)", profile, previous));
}

void ShardWriter::putRegion(RegionId id, const RegionNode& region) {
  impl_->put(format::kRegionNodes, format::nodeKey(id), format::encodeRegionNode(region));
}

void ShardWriter::putRegionLogProcess(const RegionLogProcess& process) {
  std::string key;
  format::putBe32(key, process.process);
  impl_->put(format::kRegionEvents, key, format::encodeRegionLogProcess(process));
}

void ShardWriter::putRegionLogThread(ProfileId process, const RegionLogThread& thread,
                                     std::span<const RegionLogEvent> events) {
  const std::size_t per = format::kRegionLogBlockEvents;
  const auto blocks = static_cast<std::uint32_t>((events.size() + per - 1) / per);
  RegionLogThread t = thread;
  t.events = events.size();
  impl_->put(format::kRegionEvents, format::regionLogThreadKey(process, thread.profile),
             format::encodeRegionLogThread(t, blocks));
  for (std::uint32_t b = 0; b < blocks; ++b) {
    const std::size_t begin = std::size_t{b} * per;
    impl_->put(format::kRegionEvents, format::regionLogBlockKey(process, thread.profile, b),
               format::encodeRegionLogBlock(events.subspan(begin, std::min(per, events.size() - begin))));
  }
}

void ShardWriter::putProcessClock(const ProcessClock& process) {
  impl_->put(format::kCommEvents, format::nodeKey(process.process), format::encodeProcessClock(process));
}

void ShardWriter::putCommEvents(ProfileId process, ProfileId thread, std::span<const CommEventRecord> events) {
  impl_->put(format::kCommEvents, format::regionLogThreadKey(process, thread), format::encodeCommEvents(events));
}

void ShardWriter::putRegionSummary(RegionId id, MetricId metric, MetricScope scope, std::string_view bytes) {
  impl_->put(format::kRegionSummaries, format::summaryKey(id, metric, scope), bytes);
}

std::uint64_t ShardWriter::valuesWritten() const { return impl_->values; }

double ShardWriter::storeSeconds() const { return impl_->storeSeconds; }

void ShardWriter::finish() {
  if (impl_->finished) throw std::logic_error("ShardWriter: finish() called twice");
  // INDEX lines: "<family> <file> <smallest key hex> <largest key hex> <entries>".
  std::string index;
  for (auto& f : impl_->families) {
    if (!f.writer) continue;
    rocksdb::ExternalSstFileInfo info;
    const StoreTimer timer(impl_->storeSeconds);
    const auto s = f.writer->Finish(&info);
    if (!s.ok()) throw DatabaseError(impl_->dir, fmt::format("finishing {}.sst: {}", f.name, s.ToString()));
    f.writer.reset();
    index += fmt::format("{} {}.sst {} {} {}\n", f.name, f.name, hex(info.smallest_key), hex(info.largest_key),
                         info.num_entries);
  }
  writeFileAtomically(impl_->dir, kShardIndexName, index.empty() ? std::string() : index);
  impl_->finished = true;
}

namespace {

// One line of a finished shard's INDEX ("<family> <file> <smallest key hex> <largest key hex>
// <entries>", written by ShardWriter::finish): a column family's SST file with its key range.
struct ShardIndexEntry {
  std::string family;
  fs::path file;
  std::string smallest, largest;  // keys
  std::uint64_t entries = 0;
};

// The INDEX of shard `k` in `dir` (its presence marks the shard finished); `where` names the
// directory in errors.
std::vector<ShardIndexEntry> readShardIndex(const fs::path& dir, std::uint32_t k, const fs::path& where) {
  std::ifstream index(dir / kShardIndexName);
  if (!index)
    throw DatabaseError(where, fmt::format("shard {} did not finish (no {} in {})", k, kShardIndexName, dir.string()));
  std::vector<ShardIndexEntry> out;
  std::string line;
  while (std::getline(index, line)) {
    std::istringstream fields(line);
    ShardIndexEntry e;
    std::string file, smallest, largest;
    if (!(fields >> e.family >> file >> smallest >> largest >> e.entries) ||
        std::find(format::shardFamilies().begin(), format::shardFamilies().end(), e.family) ==
            format::shardFamilies().end())
      throw DatabaseError(where, fmt::format("shard {}: unreadable index line '{}'", k, line));
    e.file = dir / file;
    e.smallest = unhex(smallest);
    e.largest = unhex(largest);
    out.push_back(std::move(e));
  }
  return out;
}

}  // namespace

// --- provisional runs of values by node ------------------------------------------------------
//
// A run: the magic, then records [u8 key length > 0][key][be32 block length][block], then the
// trailer [u8 0][be32 high][be32 low half of the number of records].

namespace {

// Version 2: a record's block length has the top bit set when the record (an exclusive block)
// also stands for the inclusive block with the same key but the scope (a CCT leaf's).
constexpr std::string_view kRunMagic = "CSPRUN2\n";
constexpr std::uint32_t kMirroredRecord = std::uint32_t{1} << 31;
constexpr std::size_t kKeyScope = 6;  // nodeBlockKey: be32 node, be16 metric, u8 scope, be32 first profile
constexpr std::size_t kRunBuffer = std::size_t{1} << 20;  // a writer's
// The readers of one merge share this much buffer (a run per batch: 512 runs at 65,536 profiles),
// each at least 4 KiB; a reader's buffer grows to its largest record.
constexpr std::size_t kMergeBuffers = std::size_t{16} << 20;
constexpr std::size_t kMinReadBuffer = 4096;

// `bytes` (4 or 8) big-endian bytes at p, which the caller has in its buffer.
std::uint64_t beAt(const char* p, std::size_t bytes) {
  ByteReader<> r(std::string_view(p, bytes), "run");
  return bytes == 4 ? r.be32() : std::uint64_t{r.be32()} << 32 | r.be32();
}

// Reads a run record by record through a buffer that grows to the largest record.
class RunReader {
 public:
  RunReader(fs::path file, std::size_t buffer) : file_(std::move(file)), buffer_(buffer) {
    fd_ = ::open(file_.c_str(), O_RDONLY | O_CLOEXEC);
    struct stat st {};
    if (fd_ < 0 || ::fstat(fd_, &st) != 0)
      throw DatabaseError(file_, fmt::format("cannot open run: {}", std::strerror(errno)));
    unread_ = static_cast<std::uint64_t>(st.st_size);
    if (!ensure(kRunMagic.size()) || std::string_view(at(), kRunMagic.size()) != kRunMagic)
      throw DatabaseError(file_, "not a run of values by node (bad magic)");
    begin_ += kRunMagic.size();
  }
  ~RunReader() {
    if (fd_ >= 0) ::close(fd_);
  }
  RunReader(const RunReader&) = delete;
  RunReader& operator=(const RunReader&) = delete;

  // The next record into key() and block() (valid until the next call); false after the trailer.
  bool next() {
    begin_ += pending_;
    pending_ = 0;
    if (!ensure(1)) damaged("cut short before its trailer");
    const auto keyLength = static_cast<std::size_t>(static_cast<unsigned char>(*at()));
    if (keyLength == 0) {
      if (!ensure(9)) damaged("cut short in its trailer");
      if (beAt(at() + 1, 8) != records_)
        damaged(fmt::format("trailer counts {} records, the run holds {}", beAt(at() + 1, 8), records_));
      return false;
    }
    if (!ensure(1 + keyLength + 4)) damaged("cut short in a record");
    const auto lengthField = static_cast<std::uint32_t>(beAt(at() + 1 + keyLength, 4));
    mirrored_ = (lengthField & kMirroredRecord) != 0;
    const std::size_t blockLength = lengthField & ~kMirroredRecord;
    const std::size_t length = 1 + keyLength + 4 + blockLength;
    if (!ensure(length)) damaged("cut short in a record");
    key_ = std::string_view(at() + 1, keyLength);
    block_ = std::string_view(at() + 1 + keyLength + 4, blockLength);
    if (mirrored_ && (keyLength <= kKeyScope || key_[kKeyScope] != 0)) damaged("mirrored record of no exclusive block");
    pending_ = length;
    ++records_;
    return true;
  }
  std::string_view key() const { return key_; }
  std::string_view block() const { return block_; }
  bool mirrored() const { return mirrored_; }  // also the inclusive block (kMirroredRecord)

 private:
  const char* at() const { return buffer_.data() + begin_; }
  [[noreturn]] void damaged(const std::string& what) const {
    throw DatabaseError(file_, "damaged run of values by node: " + what);
  }
  // At least n bytes from begin_ in the buffer, unless the file ends first (then the buffer is
  // not grown: a damaged length cannot make it huge).
  bool ensure(std::size_t n) {
    if (end_ - begin_ >= n) return true;
    if (n - (end_ - begin_) > unread_) return false;
    std::memmove(buffer_.data(), at(), end_ - begin_);
    end_ -= begin_;
    begin_ = 0;
    if (buffer_.size() < n) buffer_.resize(std::max(n, 2 * buffer_.size()));
    while (end_ < n) {
      const ssize_t got = ::read(fd_, buffer_.data() + end_, buffer_.size() - end_);
      if (got < 0 && errno == EINTR) continue;
      if (got < 0) throw DatabaseError(file_, fmt::format("cannot read run: {}", std::strerror(errno)));
      if (got == 0) return false;
      end_ += static_cast<std::size_t>(got);
      unread_ -= std::min<std::uint64_t>(unread_, static_cast<std::uint64_t>(got));
    }
    return true;
  }

  fs::path file_;
  int fd_ = -1;
  std::vector<char> buffer_;
  std::size_t begin_ = 0, end_ = 0, pending_ = 0;
  std::uint64_t unread_ = 0;  // bytes of the file not read into the buffer yet
  std::uint64_t records_ = 0;
  std::string_view key_, block_;
  bool mirrored_ = false;
};

// A run's blocks in key order, a mirrored record's inclusive copy included where its key sorts:
// after the run's exclusive blocks of that node and metric, before its next metric or node.
class RunStream {
 public:
  RunStream(fs::path file, std::size_t buffer) : reader_(std::move(file), buffer) {}
  // The next block into key() and block() (valid until the next call); false at the end.
  bool next() {
    if (from_ == From::Reader) {
      if (reader_.mirrored()) {
        if (used_ == copies_.size()) copies_.emplace_back();
        auto& [key, block] = copies_[used_++];  // reused: their strings keep their capacity
        key.assign(reader_.key());
        key[kKeyScope] = static_cast<char>(MetricScope::Inclusive);
        block.assign(reader_.block());
      }
      readerHas_ = reader_.next();
    } else if (from_ == From::Copy) {
      if (++head_ == used_) head_ = used_ = 0;
    } else {
      readerHas_ = reader_.next();
    }
    if (head_ < used_ && (!readerHas_ || std::string_view(copies_[head_].first) < reader_.key())) {
      from_ = From::Copy;
      return true;
    }
    from_ = readerHas_ ? From::Reader : From::None;
    return readerHas_;
  }
  std::string_view key() const { return from_ == From::Copy ? std::string_view(copies_[head_].first) : reader_.key(); }
  std::string_view block() const {
    return from_ == From::Copy ? std::string_view(copies_[head_].second) : reader_.block();
  }

 private:
  enum class From { None, Reader, Copy };
  RunReader reader_;
  bool readerHas_ = false;
  From from_ = From::None;
  std::vector<std::pair<std::string, std::string>> copies_;  // [head_, used_): inclusive copies not given out yet
  std::size_t head_ = 0, used_ = 0;
};

}  // namespace

NodeRunWriter::NodeRunWriter(fs::path file) : file_(std::move(file)) {
  fd_ = ::open(file_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd_ < 0) throw DatabaseError(file_, fmt::format("cannot create run: {}", std::strerror(errno)));
  buffer_.reserve(kRunBuffer + 64);
  buffer_ += kRunMagic;
}

NodeRunWriter::~NodeRunWriter() {
  if (fd_ >= 0) ::close(fd_);
}

void NodeRunWriter::putNodeBlocks(NodeId node, NodeValueBlocks& blocks, bool inclusiveIsExclusive) {
  if (node < nextNode_)
    throw std::logic_error(fmt::format("NodeRunWriter: node {} after node {}; nodes must ascend", node, nextNode_ - 1));
  nextNode_ = node + 1;
  // A leaf's exclusive blocks are written once, flagged: the merge writes each again as the
  // inclusive block (RunStream).
  blocks.drain(node, [&](const std::string& key, std::string_view block) {
    if (inclusiveIsExclusive && key[kKeyScope] != static_cast<char>(MetricScope::Exclusive))
      throw std::logic_error(
          fmt::format("NodeRunWriter: inclusive values of node {}, whose inclusive values are "
                      "to be its exclusive ones",
                      node));
    if (block.size() >= kMirroredRecord) throw std::logic_error("NodeRunWriter: a block of 2 GiB or more");
    buffer_.push_back(static_cast<char>(key.size()));
    buffer_ += key;
    putBe32(buffer_, static_cast<std::uint32_t>(block.size()) | (inclusiveIsExclusive ? kMirroredRecord : 0));
    buffer_ += block;
    ++records_;
  });
  if (buffer_.size() >= kRunBuffer) flush();
}

void NodeRunWriter::flush() {
  const StoreTimer timer(storeSeconds_);
  std::size_t done = 0;
  while (done < buffer_.size()) {
    const ssize_t n = ::write(fd_, buffer_.data() + done, buffer_.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) throw DatabaseError(file_, fmt::format("cannot write run: {}", std::strerror(errno)));
    done += static_cast<std::size_t>(n);
  }
  buffer_.clear();
}

void NodeRunWriter::finish() {
  if (fd_ < 0) throw std::logic_error("NodeRunWriter: finish() called twice");
  buffer_.push_back('\0');
  putBe32(buffer_, static_cast<std::uint32_t>(records_ >> 32));
  putBe32(buffer_, static_cast<std::uint32_t>(records_));
  flush();
  const int fd = fd_;
  fd_ = -1;
  if (::close(fd) != 0) throw DatabaseError(file_, fmt::format("cannot write run: {}", std::strerror(errno)));
}

void mergeNodeRuns(const fs::path& stagingDir, std::span<const fs::path> runs, std::uint32_t output) {
  std::vector<std::unique_ptr<RunStream>> readers;
  std::vector<std::size_t> heap;
  const std::size_t buffer = std::max(kMinReadBuffer, kMergeBuffers / std::max<std::size_t>(runs.size(), 1));
  for (const auto& run : runs) {
    readers.push_back(std::make_unique<RunStream>(run, std::min(buffer, kRunBuffer)));
    if (readers.back()->next()) heap.push_back(readers.size() - 1);
  }
  // Keys compare bytewise, as RocksDB's default comparator does; equal keys (which callers must
  // not produce) would come in run order.
  auto greater = [&](std::size_t a, std::size_t b) {
    const int c = readers[a]->key().compare(readers[b]->key());
    return c != 0 ? c > 0 : a > b;
  };
  std::make_heap(heap.begin(), heap.end(), greater);
  ShardWriter out(stagingDir, output);
  std::string key;
  while (!heap.empty()) {
    std::pop_heap(heap.begin(), heap.end(), greater);
    RunStream& r = *readers[heap.back()];
    key.assign(r.key());
    out.impl_->put(format::kValuesByNode, key, r.block());
    if (r.next())
      std::push_heap(heap.begin(), heap.end(), greater);
    else
      heap.pop_back();
  }
  out.finish();
  readers.clear();
  std::error_code ec;
  for (const auto& run : runs) fs::remove(run, ec);
}

// --- DatabaseBuilder -------------------------------------------------------------------------

struct DatabaseBuilder::Impl {
  fs::path target;
  fs::path temp;
  BuildOptions options;
  std::vector<LeftoverReport> leftovers;
  std::unique_ptr<rocksdb::DB> db;
  std::vector<rocksdb::ColumnFamilyHandle*> handles;
  std::map<std::string, rocksdb::ColumnFamilyHandle*, std::less<>> families;
  bool metadataWritten = false;
  bool ingested = false;
  bool published = false;
  bool registered = false;  // d.temp is claimed (claimBuildDirectory)

  ~Impl() {
    if (registered) releaseBuildDirectory(temp);
  }

  void step(std::string_view name) const {
    if (options.onStep) options.onStep(name);
  }

  void check(const rocksdb::Status& s, std::string_view doing) const {
    if (!s.ok()) throw DatabaseError(temp, fmt::format("{}: {}", doing, s.ToString()));
  }

  void closeDb() {
    if (!db) return;
    for (auto* h : handles) db->DestroyColumnFamilyHandle(h);
    handles.clear();
    families.clear();
    const auto s = db->Close();
    db.reset();
    check(s, "closing the database");
  }

  void requireOpen(const char* what) const {
    if (!db) throw std::logic_error(fmt::format("DatabaseBuilder::{} before openDatabase() or after publish()", what));
  }

  // Checks made at construction and again just before the rename.
  // Any entry at the target counts, a dangling symbolic link included; a link is never followed
  // to decide, nor replaced (publishing would swap the link itself, not what it points to).
  void checkTarget() const {
    std::error_code ec;
    const auto status = fs::symlink_status(target, ec);
    if (!fs::exists(status)) return;
    if (fs::is_symlink(status))
      throw DatabaseError(target,
                          "is a symbolic link; it is never replaced, even with --force: remove it, or give the "
                          "directory it points to");
    if (!isCspDatabase(target))
      throw DatabaseError(target, "exists and is not a CSP database; it is never replaced, even with --force");
    if (!options.force) throw DatabaseError(target, "already exists (use --force to replace it)");
  }
};

namespace {

// The build directory's contents before the database: its owner file and the staging directory.
void createBuildDirectory(DatabaseBuilder::Impl& d) {
  std::error_code ec;
  try {
    writeBuildOwner(d.temp);
  } catch (const PublishError& e) {
    throw DatabaseError(e.path(), e.problem());
  }
  fs::create_directory(d.temp / kStagingName, ec);
  if (ec) throw DatabaseError(d.temp, "cannot create the staging directory: " + ec.message());
}

// The RocksDB instance with every column family; then the step "created" (openDatabase).
void createDatabase(DatabaseBuilder::Impl& d) {
  rocksdb::DBOptions dbOptions = format::instanceOptions();
  dbOptions.create_if_missing = true;
  dbOptions.error_if_exists = true;
  // The families are created together after the open: RocksDB writes (and reads back) its options
  // file once for them, instead of once per family (0.04 s of a root's CPU time here).
  std::vector<rocksdb::ColumnFamilyDescriptor> descriptors;
  descriptors.emplace_back(rocksdb::kDefaultColumnFamilyName, format::familyOptions(rocksdb::kDefaultColumnFamilyName));
  rocksdb::DB* raw = nullptr;
  d.check(rocksdb::DB::Open(dbOptions, d.temp.string(), descriptors, &d.handles, &raw), "creating the database");
  d.db.reset(raw);
  std::vector<rocksdb::ColumnFamilyDescriptor> families;
  for (const auto& name : databaseColumnFamilies()) families.emplace_back(name, format::familyOptions(name));
  std::vector<rocksdb::ColumnFamilyHandle*> created;
  const auto status = d.db->CreateColumnFamilies(families, &created);
  d.handles.insert(d.handles.end(), created.begin(), created.end());  // whatever was made is closed
  d.check(status, "creating the database's column families");
  descriptors.insert(descriptors.end(), families.begin(), families.end());
  for (std::size_t i = 0; i < descriptors.size(); ++i) d.families[descriptors[i].name] = d.handles[i];
  d.step("created");
}

}  // namespace

DatabaseBuilder::DatabaseBuilder(fs::path target, BuildOptions options) : impl_(std::make_unique<Impl>()) {
  auto& d = *impl_;
  d.target = publicationTarget(std::move(target));
  d.options = std::move(options);
  d.checkTarget();
  const fs::path parent = temporaryDirectoryFor(d.target).parent_path();
  std::error_code ec;
  fs::create_directories(parent, ec);
  if (ec) throw DatabaseError(parent, "cannot create: " + ec.message());
  d.leftovers = cleanupLeftovers(d.target);

  d.temp = temporaryDirectoryFor(d.target);
  if (!claimBuildDirectory(d.temp))
    throw DatabaseError(d.target, "another build of this database is under way in this process");
  d.registered = true;
  if (!fs::create_directory(d.temp, ec) || ec) throw DatabaseError(d.temp, "cannot create: " + ec.message());
  // The destructor does not run for a constructor that throws: from here on a failure removes
  // the directory before it is reported (openDatabase has closed the database by then).
  try {
    createBuildDirectory(d);
    if (!d.options.openLater) openDatabase();
  } catch (...) {
    fs::remove_all(d.temp, ec);
    throw;
  }
}

DatabaseBuilder::~DatabaseBuilder() {
  if (!impl_ || impl_->published) return;
  try {
    impl_->closeDb();
  } catch (...) {
    // The directory goes away regardless.
  }
  std::error_code ec;
  fs::remove_all(impl_->temp, ec);
}

const fs::path& DatabaseBuilder::target() const { return impl_->target; }
const fs::path& DatabaseBuilder::tempDir() const { return impl_->temp; }
fs::path DatabaseBuilder::stagingDir() const { return stagingDirIn(impl_->temp); }

fs::path DatabaseBuilder::temporaryDirectoryFor(const fs::path& target) {
  return storage::temporaryDirectoryFor(target);
}

fs::path DatabaseBuilder::stagingDirIn(const fs::path& temporaryDirectory) { return temporaryDirectory / kStagingName; }
const std::vector<LeftoverReport>& DatabaseBuilder::leftovers() const { return impl_->leftovers; }

void DatabaseBuilder::openDatabase() {
  auto& d = *impl_;
  if (d.db || d.published) throw std::logic_error("DatabaseBuilder::openDatabase: the database is already open");
  try {
    createDatabase(d);
  } catch (...) {
    try {
      d.closeDb();
    } catch (...) {  // the first error is the one to report
    }
    throw;
  }
}

void DatabaseBuilder::writeMetadata(const DatabaseMetadata& metadata) {
  auto& d = *impl_;
  d.requireOpen("writeMetadata");
  if (d.metadataWritten) throw std::logic_error("DatabaseBuilder::writeMetadata called twice");
  if (metadata.metrics.size() > UINT16_MAX + 1u) throw std::invalid_argument("more than 65,536 metrics");
  std::set<std::string_view> keys;
  for (const auto& p : metadata.properties)
    if (!keys.insert(p.key).second) throw std::invalid_argument(fmt::format("property '{}' given twice", p.key));
  rocksdb::WriteBatch batch;
  auto* family = d.families.at(format::kMetadata);
  format::encodeMetadata(metadata, [&](const std::string& k, const std::string& v) { batch.Put(family, k, v); });
  // No WAL: publish() flushes, and an unpublished database is thrown away anyway.
  rocksdb::WriteOptions wo;
  wo.disableWAL = true;
  d.check(d.db->Write(wo, &batch), "writing metadata");
  d.metadataWritten = true;
  d.step("metadata");
}

void DatabaseBuilder::ingestShards(std::uint32_t shardCount) {
  auto& d = *impl_;
  d.requireOpen("ingestShards");
  if (d.ingested) throw std::logic_error("DatabaseBuilder::ingestShards called twice");
  struct File {
    std::string smallest, largest, path;
    std::uint32_t shard;
  };
  std::map<std::string, std::vector<File>> byFamily;
  for (std::uint32_t k = 0; k < shardCount; ++k) {
    const fs::path dir = shardDir(stagingDir(), k);
    for (auto& e : readShardIndex(dir, k, d.temp))
      byFamily[e.family].push_back({std::move(e.smallest), std::move(e.largest), e.file.string(), k});
  }
  std::vector<rocksdb::IngestExternalFileArg> args;
  for (auto& [family, files] : byFamily) {
    std::sort(files.begin(), files.end(), [](const File& a, const File& b) { return a.smallest < b.smallest; });
    // Values by node may come from many shards over the same node range (csp-prof-mpi writes one
    // per batch of profiles, which keeps its memory flat); their keys cannot collide because
    // every block key ends with the block's first profile id. Such files go to level 0 and are
    // compacted into one sorted run before publication.
    const bool overlapAllowed = family == format::kValuesByNode;
    for (std::size_t i = 1; i < files.size() && !overlapAllowed; ++i)
      if (files[i].smallest <= files[i - 1].largest)
        throw DatabaseError(d.temp, fmt::format("shards {} and {} overlap in column family {}: every key range must "
                                                "have one owner",
                                                files[i - 1].shard, files[i].shard, family));
    rocksdb::IngestExternalFileArg arg;
    arg.column_family = d.families.at(family);
    for (const auto& f : files) arg.external_files.push_back(f.path);
    arg.options.move_files = true;  // hard links: the staging copies cost no space or time
    arg.options.write_global_seqno = false;
    arg.options.verify_checksums_before_ingest = false;
    args.push_back(std::move(arg));
  }
  if (!args.empty()) d.check(d.db->IngestExternalFiles(args), "ingesting shard files");
  // A few overlapping runs read fast enough; many are compacted into one.
  if (byFamily[format::kValuesByNode].size() > kMaxOverlappingRuns) {
    rocksdb::CompactRangeOptions co;
    co.bottommost_level_compaction = rocksdb::BottommostLevelCompaction::kForceOptimized;
    d.check(d.db->CompactRange(co, d.families.at(format::kValuesByNode), nullptr, nullptr),
            "compacting values by node");
  }
  std::error_code ec;
  fs::remove_all(stagingDir(), ec);
  d.ingested = true;
  d.step("ingested");
}

void DatabaseBuilder::publish() {
  auto& d = *impl_;
  d.requireOpen("publish");
  if (!d.metadataWritten) throw std::logic_error("DatabaseBuilder::publish before writeMetadata");
  rocksdb::FlushOptions fo;
  fo.wait = true;
  d.check(d.db->Flush(fo, d.handles), "flushing");
  d.closeDb();
  d.step("closed");

  std::error_code ec;
  fs::remove_all(d.temp / kStagingName, ec);
  // Without OWNER a leftover is judged by the pid in its name alone, which is right here.
  removeBuildOwner(d.temp);
  // The manifest goes last: a directory with a manifest is a complete database.
  writeFileAtomically(d.temp, kDatabaseManifestName, format::manifestText());
  d.step("manifest");

  d.checkTarget();
  try {
    publishDirectory(d.temp, d.target, [&](std::string_view step) { d.step(step); });
  } catch (const PublishError& e) {
    throw DatabaseError(e.path(), e.problem());
  }
  d.published = true;
  d.step("published");
}

}  // namespace csp::storage
