// The reader: opening, checking and querying a database.
#include <fmt/format.h>
#include <rocksdb/db.h>
#include <rocksdb/metadata.h>

#include <algorithm>
#include <fstream>
#include <map>
#include <sstream>

#include "csp/storage/database.hpp"
#include "db_format.hpp"

namespace csp::storage {

namespace fs = std::filesystem;

DatabaseError::DatabaseError(fs::path directory, std::string problem)
    : std::runtime_error(fmt::format("{}: {}", directory.string(), problem)),
      directory_(std::move(directory)),
      problem_(std::move(problem)) {}

const std::vector<std::string>& databaseColumnFamilies() {
  static const std::vector<std::string> families = [] {
    std::vector<std::string> f{format::kMetadata};
    for (const auto& s : format::shardFamilies()) f.push_back(s);
    f.push_back(format::kViewCache);
    return f;
  }();
  return families;
}

struct Database::Impl {
  fs::path dir;
  Mode mode = Mode::ReadOnly;
  FormatVersion version;
  DatabaseMetadata metadata;
  std::unique_ptr<rocksdb::DB> db;
  std::vector<rocksdb::ColumnFamilyHandle*> handles;
  std::map<std::string, rocksdb::ColumnFamilyHandle*, std::less<>> families;

  ~Impl() {
    if (!db) return;
    for (auto* h : handles) db->DestroyColumnFamilyHandle(h);
    db->Close();
  }

  [[noreturn]] void damaged(const std::string& what) const { throw DatabaseError(dir, "damaged database: " + what); }

  void check(const rocksdb::Status& s, std::string_view doing) const {
    if (!s.ok()) damaged(fmt::format("{}: {}", doing, s.ToString()));
  }

  rocksdb::ColumnFamilyHandle* family(std::string_view name) const {
    const auto it = families.find(name);
    if (it == families.end()) throw std::invalid_argument(fmt::format("no column family '{}'", name));
    return it->second;
  }

  // Every entry whose key starts with `prefix`, in key order.
  template <typename Fn>
  void scan(std::string_view familyName, const std::string& prefix, Fn&& fn) const {
    rocksdb::ReadOptions ro;
    const std::string end = format::prefixEnd(prefix);
    rocksdb::Slice upper(end);
    if (!end.empty()) ro.iterate_upper_bound = &upper;
    std::unique_ptr<rocksdb::Iterator> it(db->NewIterator(ro, family(familyName)));
    try {
      for (it->Seek(prefix); it->Valid(); it->Next())
        fn(std::string_view(it->key().data(), it->key().size()),
           std::string_view(it->value().data(), it->value().size()));
    } catch (const format::FormatError& e) {
      damaged(fmt::format("column family {}: {}", familyName, e.what()));
    }
    check(it->status(), fmt::format("reading column family {}", familyName));
  }

  std::optional<std::string> get(std::string_view familyName, const std::string& key) const {
    std::string value;
    const auto s = db->Get(rocksdb::ReadOptions(), family(familyName), key, &value);
    if (s.IsNotFound()) return std::nullopt;
    check(s, fmt::format("reading column family {}", familyName));
    return value;
  }

  template <typename T, typename Decode>
  std::optional<T> decodeOne(std::string_view familyName, const std::string& key, Decode&& decode) const {
    auto value = get(familyName, key);
    if (!value) return std::nullopt;
    try {
      return decode(*value);
    } catch (const format::FormatError& e) {
      damaged(fmt::format("column family {}: {}", familyName, e.what()));
    }
  }

  std::vector<Accumulator> accumulators(std::string_view familyName, std::uint32_t id) const {
    std::vector<Accumulator> out;
    scan(familyName, format::nodeKey(id), [&](std::string_view key, std::string_view value) {
      format::Reader r(key, "accumulator key");
      const auto head = format::readAccumulatorKeyHead(r);
      r.expectDone();
      Accumulator a;
      a.metric = head.metric;
      a.scope = head.scope;
      a.bytes = std::string(value);
      out.push_back(std::move(a));
    });
    return out;
  }
};

namespace {

FormatVersion readManifest(const fs::path& dir) {
  std::error_code ec;
  if (!fs::exists(dir, ec)) throw DatabaseError(dir, "no such database (the directory does not exist)");
  if (!fs::is_directory(dir, ec)) throw DatabaseError(dir, "not a CSP database (not a directory)");
  const fs::path manifest = dir / kDatabaseManifestName;
  std::ifstream in(manifest, std::ios::binary);
  if (!in)
    throw DatabaseError(dir, fmt::format("not a CSP database (no {} manifest; an interrupted build leaves none)",
                                         kDatabaseManifestName));
  std::ostringstream text;
  text << in.rdbuf();
  const auto version = format::parseManifest(text.str());
  if (!version)
    throw DatabaseError(dir, fmt::format("not a CSP database ({} is not a CSP manifest)", kDatabaseManifestName));
  if (version->major > kDatabaseFormatMajor)
    throw DatabaseError(dir,
                        fmt::format("database format {}.{} is newer than this CSP reads ({}.x to {}.x); use a "
                                    "newer CSP",
                                    version->major, version->minor, kOldestReadableFormatMajor, kDatabaseFormatMajor));
  if (version->major < kOldestReadableFormatMajor)
    throw DatabaseError(dir,
                        fmt::format("database format {}.{} is older than this CSP reads ({}.x to {}.x); rebuild it",
                                    version->major, version->minor, kOldestReadableFormatMajor, kDatabaseFormatMajor));
  return *version;
}

}  // namespace

std::unique_ptr<Database> Database::open(const fs::path& dir, Mode mode) {
  auto impl = std::make_unique<Impl>();
  impl->dir = dir;
  impl->mode = mode;
  impl->version = readManifest(dir);

  rocksdb::DBOptions options = format::instanceOptions();
  std::vector<std::string> present;
  impl->check(rocksdb::DB::ListColumnFamilies(options, dir.string(), &present), "listing column families");
  for (const auto& name : databaseColumnFamilies())
    if (name != format::kRegionEvents &&   // added in 1.2: older databases have none
        name != format::kDistributions &&  // added in 1.4
        name != format::kCommEvents &&     // added in 1.7
        std::find(present.begin(), present.end(), name) == present.end())
      impl->damaged(fmt::format("column family '{}' is missing", name));

  // Open every family present: a read-write open requires it, and families added by a newer
  // minor version are harmless.
  std::vector<rocksdb::ColumnFamilyDescriptor> descriptors;
  descriptors.reserve(present.size());
  for (const auto& name : present) descriptors.emplace_back(name, format::familyOptions(name));
  rocksdb::DB* raw = nullptr;
  const rocksdb::Status s = mode == Mode::ReadOnly
                                ? rocksdb::DB::OpenForReadOnly(options, dir.string(), descriptors, &impl->handles, &raw)
                                : rocksdb::DB::Open(options, dir.string(), descriptors, &impl->handles, &raw);
  if (!s.ok()) {
    if (s.IsIOError() && s.ToString().find("lock") != std::string::npos)
      throw DatabaseError(dir, "is open for writing by another process: " + s.ToString());
    impl->damaged("opening: " + s.ToString());
  }
  impl->db.reset(raw);
  for (std::size_t i = 0; i < present.size(); ++i) impl->families[present[i]] = impl->handles[i];

  format::MetadataDecoder decoder;
  impl->scan(format::kMetadata, "", [&](std::string_view k, std::string_view v) { decoder.add(k, v); });
  try {
    impl->metadata = decoder.finish();
  } catch (const format::FormatError& e) {
    impl->damaged(e.what());
  }
  const FormatVersion stored = decoder.version();
  if (stored.major != impl->version.major)
    impl->damaged(fmt::format("manifest says format {}.{}, metadata says {}.{}", impl->version.major,
                              impl->version.minor, stored.major, stored.minor));
  return std::unique_ptr<Database>(new Database(std::move(impl)));
}

Database::Database(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Database::~Database() = default;

const fs::path& Database::directory() const { return impl_->dir; }
FormatVersion Database::formatVersion() const { return impl_->version; }
const DatabaseMetadata& Database::metadata() const { return impl_->metadata; }

std::optional<CctNode> Database::node(NodeId id) const {
  return impl_->decodeOne<CctNode>(format::kCctNodes, format::nodeKey(id), format::decodeCctNode);
}

std::uint64_t directoryBytes(const std::filesystem::path& dir) {
  std::uint64_t total = 0;
  std::error_code ec;
  for (const auto& e : std::filesystem::recursive_directory_iterator(dir, ec))
    if (e.is_regular_file(ec)) total += e.file_size(ec);
  return total;
}

std::vector<CctNode> Database::readCct() const {
  const auto& meta = metadata();
  std::vector<CctNode> nodes(meta.nodeCount);
  std::vector<char> seen(meta.nodeCount, 0);
  auto damaged = [&](const std::string& what) { impl_->damaged("CCT nodes: " + what); };
  impl_->scan(format::kCctNodes, std::string(), [&](std::string_view key, std::string_view value) {
    NodeId id = 0;
    CctNode n;
    try {
      format::Reader r(key, "CCT node key");
      id = r.be32();
      r.expectDone();
      n = format::decodeCctNode(value);
    } catch (const format::FormatError& e) {
      damaged(e.what());
    }
    if (id >= meta.nodeCount) damaged(fmt::format("node {} beyond the node count {}", id, meta.nodeCount));
    if (std::max({n.name, n.file, n.module}) >= meta.strings.size()) damaged(fmt::format("node {}: bad string id", id));
    if (id != 0 && n.parent >= meta.nodeCount) damaged(fmt::format("node {}: bad parent", id));
    nodes[id] = n;
    seen[id] = 1;
  });
  for (std::uint32_t i = 0; i < meta.nodeCount; ++i)
    if (!seen[i]) damaged(fmt::format("node {} is missing", i));
  return nodes;
}

std::vector<NodeId> Database::children(NodeId id) const {
  std::vector<NodeId> out;
  impl_->scan(format::kCctChildren, format::nodeKey(id), [&](std::string_view key, std::string_view) {
    format::Reader r(key, "children index key");
    r.be32();
    out.push_back(r.be32());
    r.expectDone();
  });
  return out;
}

std::vector<Accumulator> Database::summaries(NodeId id) const { return impl_->accumulators(format::kSummaries, id); }

bool Database::hasDistributions() const { return impl_->families.count(format::kDistributions) > 0; }

void Database::forEachSummary(const std::function<void(NodeId, MetricId, MetricScope, std::string_view)>& fn) const {
  impl_->scan(format::kSummaries, std::string(), [&](std::string_view key, std::string_view value) {
    format::Reader k(key, "summary key");
    const auto head = format::readAccumulatorKeyHead(k);
    k.expectDone();
    fn(head.id, head.metric, head.scope, value);
  });
}

void Database::forEachDistribution(const std::function<void(NodeId, MetricId, MetricScope, std::uint8_t,
                                                            std::string_view, std::string_view)>& fn) const {
  if (!hasDistributions()) return;
  impl_->scan(format::kDistributions, std::string(), [&](std::string_view key, std::string_view value) {
    const auto d = format::decodeDistributionView(key, value);
    fn(d.head.id, d.head.metric, d.head.scope, d.population, d.accumulator, d.histogram);
  });
}

std::vector<DistributionEntry> Database::distributions(NodeId id) const {
  std::vector<DistributionEntry> out;
  if (!hasDistributions()) return out;
  impl_->scan(format::kDistributions, format::nodeKey(id), [&](std::string_view k, std::string_view v) {
    try {
      out.push_back(format::decodeDistribution(k, v));
    } catch (const format::FormatError& e) {
      impl_->damaged(fmt::format("column family {}: {}", format::kDistributions, e.what()));
    }
  });
  return out;
}

const std::vector<RegionMetricInfo>& standardRegionMetrics() {
  static const std::vector<RegionMetricInfo> table = {
      {"visits", "visits", "completed visits", true, false, false},
      {"time", "ns", "time in the region", true, true, false},
      {"any-time", "ns", "time with at least one thread of the process in the region", true, false, true},
      {"all-time", "ns", "time with every logging thread of the process in the region", true, false, true},
      {"area", "thread-ns", "thread time in the region (threads x time)", true, false, true},
      {"straggler-time", "ns", "time with exactly one thread in the region while the process has others", true, false,
       true},
      {"max-parallelism", "threads", "most threads of the process in the region at once", true, false, true}};
  return table;
}

ThreadSelection selectThreads(const DatabaseMetadata& meta, const std::string& threads) {
  ThreadSelection sel;
  sel.profiles = meta.profiles.size();
  sel.label = "all threads";
  const bool hasClasses = !meta.threadClasses.empty();
  std::uint64_t perClass[kThreadClassCount + 1] = {};
  for (const auto& c : meta.threadClasses) ++perClass[static_cast<std::size_t>(c.threadClass)];
  const auto helpers = perClass[static_cast<std::size_t>(ThreadClass::Helper)];
  std::string spec = threads;
  if (spec.empty()) spec = hasClasses && helpers > 0 && helpers < meta.profiles.size() ? "work" : "all";
  if (spec == "all") return sel;
  if (!hasClasses)
    throw std::invalid_argument(
        fmt::format("--threads {}: this database has no thread classes (written before "
                    "format 1.4); rebuild it with this csp-prof-mpi, or use --threads all",
                    spec));
  bool chosen[kThreadClassCount + 1] = {};
  std::size_t at = 0;
  while (at <= spec.size()) {
    const auto comma = std::min(spec.find(',', at), spec.size());
    const std::string word = spec.substr(at, comma - at);
    if (word == "work") {
      chosen[static_cast<std::size_t>(ThreadClass::Main)] = true;
      chosen[static_cast<std::size_t>(ThreadClass::Worker)] = true;
    } else if (const auto c = parseThreadClass(word)) {
      chosen[static_cast<std::size_t>(*c)] = true;
    } else {
      throw std::invalid_argument(
          fmt::format("--threads: unknown thread class '{}' (all, work, main, worker, helper)", word));
    }
    at = comma + 1;
  }
  std::uint64_t n = 0;
  std::string names;
  bool everything = true;
  for (std::uint8_t c = 1; c <= kThreadClassCount; ++c) {
    if (chosen[c]) {
      n += perClass[c];
      names += (names.empty() ? "" : ", ") + std::string(toString(static_cast<ThreadClass>(c)));
    }
    if (!chosen[c] && perClass[c] > 0) everything = false;
  }
  if (everything) return sel;  // the classes chosen are all there are: the summaries say it all
  if (n == 0) throw std::invalid_argument(fmt::format("--threads {}: the database has no such threads", spec));
  sel.all = false;
  std::copy(std::begin(chosen), std::end(chosen), std::begin(sel.classes));
  sel.profiles = n;
  sel.excluded = meta.profiles.size() - n;
  sel.label = names + " threads";
  return sel;
}

const char* toString(ThreadClass c) {
  switch (c) {
    case ThreadClass::Main:
      return "main";
    case ThreadClass::Worker:
      return "worker";
    case ThreadClass::Helper:
      return "helper";
  }
  return "?";
}

std::optional<ThreadClass> parseThreadClass(std::string_view text) {
  for (std::uint8_t c = 1; c <= kThreadClassCount; ++c)
    if (text == toString(static_cast<ThreadClass>(c))) return static_cast<ThreadClass>(c);
  return std::nullopt;
}

std::vector<ProfileValue> Database::profileValues(ProfileId profile) const {
  std::vector<ProfileValue> out;
  impl_->scan(format::kValuesByProfile, format::nodeKey(profile),
              [&, major = impl_->version.major](std::string_view k, std::string_view v) {
                format::decodeProfileBlock(k, v, out, major);
              });
  return out;
}

std::vector<NodeValue> Database::nodeValues(NodeId node) const {
  std::vector<NodeValue> out;
  impl_->scan(format::kValuesByNode, format::nodeKey(node),
              [&, major = impl_->version.major](std::string_view k, std::string_view v) {
                format::decodeNodeBlock(k, v, out, major);
              });
  return out;
}

std::vector<NodeValue> Database::nodeValues(NodeId node, MetricId metric, MetricScope scope) const {
  std::vector<NodeValue> out;
  impl_->scan(format::kValuesByNode, format::summaryKey(node, metric, scope),
              [&, major = impl_->version.major](std::string_view k, std::string_view v) {
                format::decodeNodeBlock(k, v, out, major);
              });
  return out;
}

std::optional<RegionNode> Database::region(RegionId id) const {
  return impl_->decodeOne<RegionNode>(format::kRegionNodes, format::nodeKey(id), format::decodeRegionNode);
}

std::vector<RegionNode> Database::regions() const {
  std::vector<RegionNode> out;
  out.reserve(impl_->metadata.regionCount);
  impl_->scan(format::kRegionNodes, "", [&](std::string_view key, std::string_view value) {
    format::Reader r(key, "region key");
    const RegionId id = r.be32();
    r.expectDone();
    if (id != out.size()) throw format::FormatError(fmt::format("region {} is missing", out.size()));
    out.push_back(format::decodeRegionNode(value));
  });
  return out;
}

bool Database::hasRegionLogFamily() const { return impl_->families.count(format::kRegionEvents) > 0; }

std::vector<RegionLogProcess> Database::regionLogProcesses() const {
  std::vector<RegionLogProcess> out;
  if (!hasRegionLogFamily()) return out;
  auto* family = impl_->family(format::kRegionEvents);
  std::unique_ptr<rocksdb::Iterator> it(impl_->db->NewIterator(rocksdb::ReadOptions(), family));
  try {
    // Process entries have 4-byte keys; after each, skip its threads' entries with one seek.
    for (it->SeekToFirst(); it->Valid();) {
      const std::string_view key(it->key().data(), it->key().size());
      if (key.size() != 4) throw format::FormatError("region log: thread entry without its process entry");
      RegionLogProcess p =
          format::decodeRegionLogProcess(key, std::string_view(it->value().data(), it->value().size()));
      for (auto& t : p.threads) {
        const auto v = impl_->get(format::kRegionEvents, format::regionLogThreadKey(p.process, t.profile));
        if (!v)
          throw format::FormatError(
              fmt::format("region log of process {}: thread {} is missing", p.process, t.profile));
        t = format::decodeRegionLogThread(format::regionLogThreadKey(p.process, t.profile), *v);
      }
      const ProfileId next = p.process + 1;
      out.push_back(std::move(p));
      if (next == 0) break;
      std::string seek;
      format::putBe32(seek, next);
      it->Seek(seek);
    }
  } catch (const format::FormatError& e) {
    impl_->damaged(fmt::format("column family {}: {}", format::kRegionEvents, e.what()));
  }
  impl_->check(it->status(), "reading column family region_events");
  return out;
}

bool Database::hasCommFamily() const { return impl_->families.count(format::kCommEvents) > 0; }

std::vector<ProcessClock> Database::processClocks() const {
  std::vector<ProcessClock> out;
  if (!hasCommFamily()) return out;
  impl_->scan(format::kCommEvents, std::string(), [&](std::string_view key, std::string_view value) {
    if (key.size() == 4) out.push_back(format::decodeProcessClock(key, value));
  });
  return out;
}

std::vector<CommEventRecord> Database::commEvents(ProfileId process) const {
  std::vector<CommEventRecord> out;
  if (!hasCommFamily()) return out;
  impl_->scan(format::kCommEvents, format::nodeKey(process), [&](std::string_view key, std::string_view value) {
    if (key.size() == 8)
      format::decodeCommEvents(key, value, out, impl_->version.major > 1 || impl_->version.minor >= 8);
  });
  return out;
}

namespace {

class DbRegionLogCursor final : public RegionLogCursor {
 public:
  // From block `firstBlock` on (0: the whole log).
  DbRegionLogCursor(const Database::Impl& impl, rocksdb::ColumnFamilyHandle* family, ProfileId process,
                    ProfileId thread, std::uint32_t firstBlock = 0)
      : impl_(impl), prefix_(format::regionLogThreadKey(process, thread)), end_(format::prefixEnd(prefix_)) {
    rocksdb::ReadOptions ro;
    upper_ = rocksdb::Slice(end_);
    ro.iterate_upper_bound = &upper_;
    ro.fill_cache = firstBlock > 0;  // a whole log is streamed once; windows are read again
    it_.reset(impl.db->NewIterator(ro, family));
    it_->Seek(firstBlock > 0 ? format::regionLogBlockKey(process, thread, firstBlock) : prefix_);
    if (it_->Valid() && it_->key().size() == prefix_.size()) it_->Next();  // the thread entry
  }

  bool next(RegionLogEvent& out) override {
    while (pos_ == block_.size()) {
      if (!it_->Valid()) {
        impl_.check(it_->status(), "reading column family region_events");
        return false;
      }
      block_.clear();
      pos_ = 0;
      try {
        format::decodeRegionLogBlock(std::string_view(it_->value().data(), it_->value().size()), block_);
      } catch (const format::FormatError& e) {
        impl_.damaged(fmt::format("column family {}: {}", format::kRegionEvents, e.what()));
      }
      it_->Next();
    }
    out = block_[pos_++];
    return true;
  }

 private:
  const Database::Impl& impl_;
  std::string prefix_, end_;
  rocksdb::Slice upper_;
  std::unique_ptr<rocksdb::Iterator> it_;
  std::vector<RegionLogEvent> block_;
  std::size_t pos_ = 0;
};

class EmptyRegionLogCursor final : public RegionLogCursor {
 public:
  bool next(RegionLogEvent&) override { return false; }
};

}  // namespace

std::unique_ptr<RegionLogCursor> Database::regionLog(ProfileId process, ProfileId thread) const {
  if (!hasRegionLogFamily()) return std::make_unique<EmptyRegionLogCursor>();
  return std::make_unique<DbRegionLogCursor>(*impl_, impl_->family(format::kRegionEvents), process, thread);
}

std::unique_ptr<RegionLogCursor> Database::regionLog(ProfileId process, ProfileId thread, std::uint64_t fromNs) const {
  if (!hasRegionLogFamily()) return std::make_unique<EmptyRegionLogCursor>();
  const auto entry = impl_->get(format::kRegionEvents, format::regionLogThreadKey(process, thread));
  if (!entry) return std::make_unique<EmptyRegionLogCursor>();
  // Blocks [0, hi) are stored; find the last one that starts before fromNs.
  std::uint32_t lo = 0, hi = 0;
  try {
    hi = format::regionLogThreadBlocks(*entry);
    while (hi - lo > 1) {
      const std::uint32_t mid = lo + (hi - lo) / 2;
      const auto block = impl_->get(format::kRegionEvents, format::regionLogBlockKey(process, thread, mid));
      if (!block) throw format::FormatError(fmt::format("region log of thread {}: block {} is missing", thread, mid));
      (format::regionLogBlockStart(*block) < fromNs ? lo : hi) = mid;
    }
  } catch (const format::FormatError& e) {
    impl_->damaged(fmt::format("column family {}: {}", format::kRegionEvents, e.what()));
  }
  return std::make_unique<DbRegionLogCursor>(*impl_, impl_->family(format::kRegionEvents), process, thread, lo);
}

std::vector<Accumulator> Database::regionSummaries(RegionId id) const {
  return impl_->accumulators(format::kRegionSummaries, id);
}

std::vector<std::pair<std::string, std::uint64_t>> Database::columnFamilySizes() const {
  std::vector<std::pair<std::string, std::uint64_t>> out;
  for (const auto& [name, handle] : impl_->families) {
    rocksdb::ColumnFamilyMetaData meta;
    impl_->db->GetColumnFamilyMetaData(handle, &meta);
    out.emplace_back(name, meta.size);
  }
  return out;
}

void Database::forEachEntry(const std::string& columnFamily,
                            const std::function<void(std::string_view, std::string_view)>& fn) const {
  if (columnFamily == format::kRegionEvents && !hasRegionLogFamily()) return;  // older formats: empty
  if (columnFamily == format::kDistributions && !hasDistributions()) return;
  impl_->scan(columnFamily, "", fn);
}

}  // namespace csp::storage
