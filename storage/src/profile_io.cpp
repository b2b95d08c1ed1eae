#include "csp/storage/profile_io.hpp"
#include "csp/storage/atomic_file.hpp"
#include "csp/storage/checksum.hpp"

#include <capnp/any.h>
#include <capnp/message.h>
#include <capnp/serialize.h>
#include <dirent.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fmt/format.h>
#include <kj/exception.h>
#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstddef>
#include <cstring>
#include <optional>
#include <span>
#include <type_traits>

#include "profile.capnp.h"

namespace csp::storage {

namespace {

constexpr char kMagic[8] = {'C', 'S', 'P', 'P', 'R', 'O', 'F', '\x1a'};
constexpr unsigned kNestingLimit = 16;

// Header layout (little-endian): magic[8], major u16, minor u16, flags u32, payload bytes u64,
// checksum u64.
struct Header {
  char magic[8];
  std::uint16_t major;
  std::uint16_t minor;
  std::uint32_t flags;
  std::uint64_t payloadBytes;
  std::uint64_t checksum;
};
static_assert(sizeof(Header) == kProfileHeaderBytes);

// Header flags. Standalone profiles have none. A bundle's writer marks every record it writes
// and the last record of each write, so that a bundle cut between two records of one write
// (every record whole, some missing) is still recognized as cut. Readers that predate the marks
// ignore the flags.
constexpr std::uint32_t kFlagBundleRecord = 1;
constexpr std::uint32_t kFlagEndOfWrite = 2;
constexpr std::size_t kFlagsOffset = offsetof(Header, flags);

void addFlags(std::span<std::byte> record, std::uint32_t flags) {
  std::uint32_t f;
  std::memcpy(&f, record.data() + kFlagsOffset, sizeof f);
  f |= flags;
  std::memcpy(record.data() + kFlagsOffset, &f, sizeof f);
}

std::string errnoText() { return std::strerror(errno); }

// A list of T as Cap'n Proto lays it out when that is this host's layout (little-endian, packed,
// at a word boundary, so a T* is aligned): its elements in place, without Cap'n Proto's accessor
// per element. Empty when the list is laid out otherwise (a newer schema's struct list; bits,
// which reading refuses): the caller then reads it element by element, as Cap'n Proto does.
template <typename T, typename L>
std::optional<std::span<const T>> packedSpan(L list) {
  if constexpr (std::is_arithmetic_v<T> && !std::is_same_v<T, bool> && std::endian::native == std::endian::little) {
    const capnp::AnyList::Reader any(list);
    constexpr capnp::ElementSize packed = sizeof(T) == 1   ? capnp::ElementSize::BYTE
                                          : sizeof(T) == 2 ? capnp::ElementSize::TWO_BYTES
                                          : sizeof(T) == 4 ? capnp::ElementSize::FOUR_BYTES
                                                           : capnp::ElementSize::EIGHT_BYTES;
    const auto raw = any.getRawBytes();
    if (any.getElementSize() == packed && raw.size() == std::size_t{list.size()} * sizeof(T) &&
        reinterpret_cast<std::uintptr_t>(raw.begin()) % alignof(T) == 0)
      return std::span<const T>(reinterpret_cast<const T*>(raw.begin()), list.size());
  }
  return std::nullopt;
}

template <typename T, typename L>
std::vector<T> toVector(L list) {
  // Assigned from the list in place: no zero-fill of the vector first (as resize would: a pass
  // over every node and value of every profile).
  if constexpr (std::is_same_v<L, typename capnp::List<T>::Reader>)
    if (const auto in = packedSpan<T>(list)) return std::vector<T>(in->begin(), in->end());
  std::vector<T> out;
  out.reserve(list.size());
  for (auto v : list) out.push_back(static_cast<T>(v));
  return out;
}

template <typename B, typename T>
void fillList(B builder, const std::vector<T>& values) {
  for (unsigned i = 0; i < values.size(); ++i) builder.set(i, values[i]);
}

// Written only when measured, so that profiles without them stay as small as before.
void buildClockAndComm(const ThreadProfile& p, schema::ThreadProfile::Builder root) {
  const ClockSync& c = p.clock;
  if (c.state != ClockState::None) {
    auto b = root.initClock();
    b.setState(static_cast<schema::ClockState>(c.state));
    b.setReferenceRank(c.referenceRank);
    b.setInitLocalNs(c.initLocalNs);
    b.setInitRefLoNs(c.initRefLoNs);
    b.setInitRefHiNs(c.initRefHiNs);
    b.setFinalLocalNs(c.finalLocalNs);
    b.setFinalRefLoNs(c.finalRefLoNs);
    b.setFinalRefHiNs(c.finalRefHiNs);
    b.setRounds(c.rounds);
    b.setCostNs(c.costNs);
  }
  const CommLog& m = p.commLog;
  if (m.size() == 0 && m.eventsLost == 0) return;
  auto b = root.initCommLog();
  fillList(b.initKind(m.kind.size()), m.kind);
  fillList(b.initBeginNs(m.beginNs.size()), m.beginNs);
  fillList(b.initEndNs(m.endNs.size()), m.endNs);
  fillList(b.initPeer(m.peer.size()), m.peer);
  fillList(b.initTag(m.tag.size()), m.tag);
  fillList(b.initComm(m.comm.size()), m.comm);
  fillList(b.initSequence(m.sequence.size()), m.sequence);
  fillList(b.initRegion(m.region.size()), m.region);
  b.setEventsLost(m.eventsLost);
  if (!m.waitBeginNs.empty()) fillList(b.initWaitBeginNs(m.waitBeginNs.size()), m.waitBeginNs);
  if (!m.op.empty()) fillList(b.initOp(m.op.size()), m.op);
}

void buildMessage(const ThreadProfile& p, schema::ThreadProfile::Builder root) {
  auto id = root.initIdentity();
  auto tuple = id.initIdTuple(p.identity.idTuple.size());
  for (unsigned i = 0; i < p.identity.idTuple.size(); ++i) {
    tuple[i].setKind(static_cast<schema::IdKind>(p.identity.idTuple[i].kind));
    tuple[i].setValue(p.identity.idTuple[i].value);
  }
  id.setPid(p.identity.pid);
  id.setHostname(p.identity.hostname);
  id.setExecutable(p.identity.executable);
  auto cmd = id.initCommandLine(p.identity.commandLine.size());
  for (unsigned i = 0; i < p.identity.commandLine.size(); ++i) cmd.set(i, p.identity.commandLine[i]);
  id.setStartTimeNs(p.identity.startTimeNs);
  id.setEndTimeNs(p.identity.endTimeNs);
  auto settings = id.initSettings(p.identity.settings.size());
  for (unsigned i = 0; i < p.identity.settings.size(); ++i) {
    settings[i].setKey(p.identity.settings[i].key);
    settings[i].setValue(p.identity.settings[i].value);
  }

  auto metrics = root.initMetrics(p.metrics.size());
  for (unsigned i = 0; i < p.metrics.size(); ++i) {
    metrics[i].setName(p.metrics[i].name);
    metrics[i].setUnit(p.metrics[i].unit);
    metrics[i].setKind(static_cast<schema::MetricKind>(p.metrics[i].kind));
    metrics[i].setPeriod(p.metrics[i].period);
    metrics[i].setDescription(p.metrics[i].description);
  }

  auto modules = root.initModules(p.modules.size());
  for (unsigned i = 0; i < p.modules.size(); ++i) {
    const auto& m = p.modules[i];
    modules[i].setPath(m.path);
    modules[i].setBuildId(kj::arrayPtr(reinterpret_cast<const capnp::byte*>(m.buildId.data()), m.buildId.size()));
    modules[i].setLoadBegin(m.loadBegin);
    modules[i].setLoadEnd(m.loadEnd);
    modules[i].setLoadBias(m.loadBias);
  }

  auto strings = root.initStrings(p.strings.size());
  for (unsigned i = 0; i < p.strings.size(); ++i) strings.set(i, p.strings[i]);

  auto frames = root.initFrames();
  frames.setKind(static_cast<schema::FrameKind>(p.frameKind));
  if (p.frameKind == FrameKind::Address) {
    auto mod = frames.initAddressModule(p.addressFrames.size());
    auto off = frames.initAddressOffset(p.addressFrames.size());
    for (unsigned i = 0; i < p.addressFrames.size(); ++i) {
      mod.set(i, p.addressFrames[i].module);
      off.set(i, p.addressFrames[i].offset);
    }
  } else {
    const auto n = p.symbolicFrames.size();
    auto scope = frames.initSymbolicScope(n);
    auto name = frames.initSymbolicName(n);
    auto file = frames.initSymbolicFile(n);
    auto line = frames.initSymbolicLine(n);
    auto module = frames.initSymbolicModule(n);
    for (unsigned i = 0; i < n; ++i) {
      const auto& f = p.symbolicFrames[i];
      scope.set(i, static_cast<schema::ScopeKind>(f.scope));
      name.set(i, f.name);
      file.set(i, f.file);
      line.set(i, f.line);
      module.set(i, f.module);
    }
  }

  auto cct = root.initCct();
  fillList(cct.initParent(p.cct.parent.size()), p.cct.parent);
  fillList(cct.initFrame(p.cct.frame.size()), p.cct.frame);
  if (!p.cct.unwindNote.empty()) fillList(cct.initUnwindNote(p.cct.unwindNote.size()), p.cct.unwindNote);

  auto values = root.initValues();
  fillList(values.initNode(p.values.node.size()), p.values.node);
  fillList(values.initMetric(p.values.metric.size()), p.values.metric);
  fillList(values.initCount(p.values.count.size()), p.values.count);

  const auto& r = p.regions;
  auto regions = root.initRegions();
  auto names = regions.initNames(r.names.size());
  for (unsigned i = 0; i < r.names.size(); ++i) names.set(i, r.names[i]);
  fillList(regions.initParent(r.parent.size()), r.parent);
  fillList(regions.initStaticId(r.staticId.size()), r.staticId);
  fillList(regions.initDynamicId(r.dynamicId.size()), r.dynamicId);
  fillList(regions.initCount(r.count.size()), r.count);
  fillList(regions.initInclusiveNs(r.inclusiveNs.size()), r.inclusiveNs);
  fillList(regions.initExclusiveNs(r.exclusiveNs.size()), r.exclusiveNs);
  fillList(regions.initEventTimeNs(r.eventTimeNs.size()), r.eventTimeNs);
  fillList(regions.initEventNode(r.eventNode.size()), r.eventNode);
  auto enter = regions.initEventIsEnter(r.eventIsEnter.size());
  for (unsigned i = 0; i < r.eventIsEnter.size(); ++i) enter.set(i, r.eventIsEnter[i]);
  if (!r.eventAttr.empty()) {
    fillList(regions.initEventAttr(r.eventAttr.size()), r.eventAttr);
    auto has = regions.initEventHasAttr(r.eventHasAttr.size());
    for (unsigned i = 0; i < r.eventHasAttr.size(); ++i) has.set(i, r.eventHasAttr[i]);
  }
  regions.setEventsLost(r.eventsLost);
  regions.setMismatchedEnds(r.mismatchedEnds);
  regions.setUnclosedAtExit(r.unclosedAtExit);

  if (p.logical.size() > 0) {
    auto logical = root.initLogical();
    fillList(logical.initParent(p.logical.parent.size()), p.logical.parent);
    auto kind = logical.initKind(p.logical.kind.size());
    for (std::size_t i = 0; i < p.logical.kind.size(); ++i) kind.set(i, static_cast<std::uint8_t>(p.logical.kind[i]));
    fillList(logical.initPathBegin(p.logical.pathBegin.size()), p.logical.pathBegin);
    fillList(logical.initPathFrame(p.logical.pathFrame.size()), p.logical.pathFrame);
  }

  auto stats = root.initStats();
  stats.setSamples(p.stats.samples);
  stats.setUnwindFailures(p.stats.unwindFailures);
  stats.setDroppedSamples(p.stats.droppedSamples);
  stats.setTruncatedPaths(p.stats.truncatedPaths);
  buildClockAndComm(p, root);
}

// Enum values outside the range this reader knows come from a newer minor version or from
// damage; either way the profile cannot be interpreted.
[[noreturn, gnu::cold]] void unknownEnum(std::uint16_t raw, const char* what, const std::string& name) {
  throw ProfileError(name, fmt::format("unknown {} value {}", what, raw));
}
template <typename E>
E checkedEnum(std::uint16_t raw, std::uint16_t limit, const char* what, const std::string& name) {
  if (raw > limit) [[unlikely]]
    unknownEnum(raw, what, name);
  return static_cast<E>(raw);
}

void readClockAndComm(schema::ThreadProfile::Reader root, ThreadProfile& p, const std::string& name) {
  if (root.hasClock()) {
    auto c = root.getClock();
    p.clock = {checkedEnum<ClockState>(static_cast<std::uint16_t>(c.getState()), 4, "clock state", name),
               c.getReferenceRank(),
               c.getInitLocalNs(),
               c.getInitRefLoNs(),
               c.getInitRefHiNs(),
               c.getFinalLocalNs(),
               c.getFinalRefLoNs(),
               c.getFinalRefHiNs(),
               c.getRounds(),
               c.getCostNs()};
  }
  if (!root.hasCommLog()) return;
  auto m = root.getCommLog();
  auto& out = p.commLog;
  out.kind = toVector<std::uint8_t>(m.getKind());
  out.beginNs = toVector<std::uint64_t>(m.getBeginNs());
  out.endNs = toVector<std::uint64_t>(m.getEndNs());
  out.peer = toVector<std::int32_t>(m.getPeer());
  out.tag = toVector<std::int32_t>(m.getTag());
  out.comm = toVector<std::uint64_t>(m.getComm());
  out.sequence = toVector<std::uint64_t>(m.getSequence());
  out.region = toVector<std::uint32_t>(m.getRegion());
  out.eventsLost = m.getEventsLost();
  // Profiles written before CSP recorded them: every call blocking, collectives unnamed.
  out.waitBeginNs = m.getWaitBeginNs().size() > 0 ? toVector<std::uint64_t>(m.getWaitBeginNs()) : out.beginNs;
  out.op = m.getOp().size() > 0 ? toVector<std::uint8_t>(m.getOp()) : std::vector<std::uint8_t>(out.kind.size(), 0);
}

ThreadProfile fromMessage(schema::ThreadProfile::Reader root, const std::string& name) {
  ThreadProfile p;
  auto id = root.getIdentity();
  for (auto e : id.getIdTuple()) {
    p.identity.idTuple.push_back(
        {checkedEnum<IdKind>(static_cast<std::uint16_t>(e.getKind()), 4, "id kind", name), e.getValue()});
  }
  p.identity.pid = id.getPid();
  p.identity.hostname = id.getHostname();
  p.identity.executable = id.getExecutable();
  for (auto c : id.getCommandLine()) p.identity.commandLine.emplace_back(c);
  p.identity.startTimeNs = id.getStartTimeNs();
  p.identity.endTimeNs = id.getEndTimeNs();
  for (auto s : id.getSettings()) p.identity.settings.push_back({s.getKey(), s.getValue()});

  for (auto m : root.getMetrics()) {
    p.metrics.push_back({m.getName(), m.getUnit(),
                         checkedEnum<MetricKind>(static_cast<std::uint16_t>(m.getKind()), 1, "metric kind", name),
                         m.getPeriod(), m.getDescription()});
  }
  for (auto m : root.getModules()) {
    auto b = m.getBuildId();
    p.modules.push_back({m.getPath(), std::vector<std::uint8_t>(b.begin(), b.end()), m.getLoadBegin(), m.getLoadEnd(),
                         m.getLoadBias()});
  }
  p.strings.reserve(root.getStrings().size());
  for (auto s : root.getStrings()) p.strings.emplace_back(s);

  auto frames = root.getFrames();
  p.frameKind = checkedEnum<FrameKind>(static_cast<std::uint16_t>(frames.getKind()), 1, "frame kind", name);
  if (p.frameKind == FrameKind::Address) {
    auto mod = frames.getAddressModule();
    auto off = frames.getAddressOffset();
    if (mod.size() != off.size())
      throw ProfileError(name,
                         fmt::format("address frame table has {} modules but {} offsets", mod.size(), off.size()));
    p.addressFrames.resize(mod.size());
    for (unsigned i = 0; i < mod.size(); ++i) p.addressFrames[i] = {mod[i], off[i]};
  } else {
    auto scope = frames.getSymbolicScope();
    auto fname = frames.getSymbolicName();
    auto file = frames.getSymbolicFile();
    auto line = frames.getSymbolicLine();
    auto module = frames.getSymbolicModule();
    const auto n = scope.size();
    if (fname.size() != n || file.size() != n || line.size() != n || module.size() != n)
      throw ProfileError(name, "symbolic frame table columns have different lengths");
    p.symbolicFrames.resize(n);
    const auto scopes = packedSpan<std::uint16_t>(scope);  // an enum list: 16 bits an element
    const auto names = packedSpan<std::uint32_t>(fname), files = packedSpan<std::uint32_t>(file),
               lines = packedSpan<std::uint32_t>(line), modules = packedSpan<std::uint32_t>(module);
    if (scopes && names && files && lines && modules) {  // the columns in place: most profiles
      for (unsigned i = 0; i < n; ++i)
        p.symbolicFrames[i] = {checkedEnum<ScopeKind>((*scopes)[i], 5, "scope kind", name), (*names)[i], (*files)[i],
                               (*lines)[i], (*modules)[i]};
    } else {
      for (unsigned i = 0; i < n; ++i)
        p.symbolicFrames[i] = {checkedEnum<ScopeKind>(static_cast<std::uint16_t>(scope[i]), 5, "scope kind", name),
                               fname[i], file[i], line[i], module[i]};
    }
  }

  auto cct = root.getCct();
  p.cct.parent = toVector<std::uint32_t>(cct.getParent());
  p.cct.frame = toVector<std::uint32_t>(cct.getFrame());
  p.cct.unwindNote = toVector<std::uint32_t>(cct.getUnwindNote());

  auto values = root.getValues();
  p.values.node = toVector<std::uint32_t>(values.getNode());
  p.values.metric = toVector<std::uint16_t>(values.getMetric());
  p.values.count = toVector<std::uint64_t>(values.getCount());

  auto r = root.getRegions();
  auto& out = p.regions;
  for (auto s : r.getNames()) out.names.emplace_back(s);
  out.parent = toVector<std::uint32_t>(r.getParent());
  out.staticId = toVector<std::uint32_t>(r.getStaticId());
  out.dynamicId = toVector<std::uint64_t>(r.getDynamicId());
  out.count = toVector<std::uint64_t>(r.getCount());
  out.inclusiveNs = toVector<std::uint64_t>(r.getInclusiveNs());
  out.exclusiveNs = toVector<std::uint64_t>(r.getExclusiveNs());
  out.eventTimeNs = toVector<std::uint64_t>(r.getEventTimeNs());
  out.eventNode = toVector<std::uint32_t>(r.getEventNode());
  out.eventIsEnter = toVector<bool>(r.getEventIsEnter());
  out.eventAttr = toVector<std::int64_t>(r.getEventAttr());
  out.eventHasAttr = toVector<bool>(r.getEventHasAttr());
  out.eventsLost = r.getEventsLost();
  out.mismatchedEnds = r.getMismatchedEnds();
  out.unclosedAtExit = r.getUnclosedAtExit();

  if (root.hasLogical()) {
    auto logical = root.getLogical();
    p.logical.parent = toVector<std::uint32_t>(logical.getParent());
    for (auto k : logical.getKind())
      p.logical.kind.push_back(checkedEnum<LogicalKind>(k, 1, "logical context kind", name));
    p.logical.pathBegin = toVector<std::uint32_t>(logical.getPathBegin());
    p.logical.pathFrame = toVector<std::uint32_t>(logical.getPathFrame());
  }

  auto stats = root.getStats();
  p.stats = {stats.getSamples(), stats.getUnwindFailures(), stats.getDroppedSamples(), stats.getTruncatedPaths()};
  readClockAndComm(root, p, name);
  return p;
}

class MappedFile {
 public:
  explicit MappedFile(const std::filesystem::path& path) {
    // O_NONBLOCK: opening a FIFO named like a profile must not wait for a writer.
    fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
    if (fd_ < 0) {
      const int err = errno;
      struct stat link {};
      if (err == ELOOP) throw ProfileError(path.string(), "a symbolic link loop, not a profile");
      if (err == ENOENT && ::lstat(path.c_str(), &link) == 0 && S_ISLNK(link.st_mode))
        throw ProfileError(path.string(), "a dangling symbolic link, not a profile");
      throw ProfileError(path.string(), "cannot open: " + std::string(std::strerror(err)));
    }
    struct stat st {};
    if (::fstat(fd_, &st) != 0) fail(path, "cannot stat: " + errnoText());
    if (!S_ISREG(st.st_mode)) {
      const char* what = S_ISDIR(st.st_mode)    ? "a directory"
                         : S_ISFIFO(st.st_mode) ? "a FIFO"
                         : S_ISCHR(st.st_mode)  ? "a character device"
                         : S_ISBLK(st.st_mode)  ? "a block device"
                         : S_ISSOCK(st.st_mode) ? "a socket"
                                                : "no regular file";
      fail(path, fmt::format("{}, not a profile", what));
    }
    size_ = static_cast<std::size_t>(st.st_size);
    if (size_ == 0) return;
    data_ = ::mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, fd_, 0);
    if (data_ == MAP_FAILED) {
      data_ = nullptr;
      fail(path, "cannot map: " + errnoText());
    }
  }
  ~MappedFile() {
    if (data_) ::munmap(data_, size_);
    if (fd_ >= 0) ::close(fd_);
  }
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;
  // Throws from the constructor, which the destructor does not clean up after.
  [[noreturn]] void fail(const std::filesystem::path& path, const std::string& defect) {
    ::close(fd_);
    fd_ = -1;
    throw ProfileError(path.string(), defect);
  }
  std::span<const std::byte> bytes() const { return {static_cast<const std::byte*>(data_), size_}; }

 private:
  int fd_ = -1;
  void* data_ = nullptr;
  std::size_t size_ = 0;
};

}  // namespace

ProfileError::ProfileError(std::string file, std::string defect)
    : std::runtime_error(file + ": " + defect), file_(std::move(file)), defect_(std::move(defect)) {}

std::vector<std::byte> serializeProfile(const ThreadProfile& profile, const std::string& nameForErrors) {
  validateProfile(profile, nameForErrors);
  checkStorable(profile, nameForErrors);
  return serializeProfileUnchecked(profile);
}

// The data model holds what other formats' sources read (real-valued metrics, GPU id kinds,
// path starts); this format does not, and writing them would lose them silently.
void checkStorable(const ThreadProfile& p, const std::string& name) {
  const auto format = fmt::format("CSP profiles (format {}.{})", kProfileFormatMajor, kProfileFormatMinor);
  for (const auto& m : p.metrics)
    if (m.valueType != ValueType::Count)
      throw ProfileError(name, fmt::format("metric '{}' is real-valued, which {} cannot hold", m.name, format));
  for (const auto& e : p.identity.idTuple)
    if (e.kind > IdKind::Process)
      throw ProfileError(name, fmt::format("id tuple element '{}', which {} cannot hold", toString(e.kind), format));
  for (auto start : p.cct.pathStart)
    if (start != PathStart::Unknown)
      throw ProfileError(name, fmt::format("path start marks, which {} cannot hold", format));
}

std::vector<std::byte> serializeProfileUnchecked(const ThreadProfile& profile) {
  capnp::MallocMessageBuilder message;
  buildMessage(profile, message.initRoot<schema::ThreadProfile>());
  kj::Array<capnp::word> words = capnp::messageToFlatArray(message);
  auto payload = words.asBytes();

  Header h{};
  std::memcpy(h.magic, kMagic, sizeof kMagic);
  h.major = kProfileFormatMajor;
  h.minor = kProfileFormatMinor;
  h.payloadBytes = payload.size();
  h.checksum = checksum64({reinterpret_cast<const std::byte*>(payload.begin()), payload.size()});

  std::vector<std::byte> image(sizeof h + payload.size());
  std::memcpy(image.data(), &h, sizeof h);
  std::memcpy(image.data() + sizeof h, payload.begin(), payload.size());
  return image;
}

void writeProfile(const ThreadProfile& profile, const std::filesystem::path& path) {
  const auto image = serializeProfile(profile, path.string());
  // A fresh temporary name in the same directory (so that rename() is atomic), created
  // exclusively (atomic_file.hpp).
  try {
    writeFileAtomically(path, image, {.fsync = false, .temporaryTag = std::to_string(::getpid())});
  } catch (const AtomicFileError& e) {
    throw ProfileError(path.string(), e.what());
  }
}

ThreadProfile parseProfile(std::span<const std::byte> image, const std::string& name, const ParseOptions& options) {
  if (image.size() < sizeof(Header)) {
    throw ProfileError(
        name, fmt::format("truncated: {} bytes, shorter than the {}-byte header", image.size(), sizeof(Header)));
  }
  Header h;
  std::memcpy(&h, image.data(), sizeof h);
  if (std::memcmp(h.magic, kMagic, sizeof kMagic) != 0) throw ProfileError(name, "not a CSP profile (bad magic)");
  if (h.major != kProfileFormatMajor) {
    throw ProfileError(name, fmt::format("unsupported format version {}.{} (this build reads major version {})",
                                         h.major, h.minor, kProfileFormatMajor));
  }
  const std::size_t available = image.size() - sizeof h;
  if (h.payloadBytes != available) {
    throw ProfileError(
        name, h.payloadBytes > available
                  ? fmt::format("truncated: header announces {} payload bytes, file has {}", h.payloadBytes, available)
                  : fmt::format("{} trailing bytes after the payload", available - h.payloadBytes));
  }
  if (available % sizeof(capnp::word) != 0 || available == 0)
    throw ProfileError(name, fmt::format("payload of {} bytes is not a whole number of words", available));
  auto payload = image.subspan(sizeof h);
  if (options.verifyChecksum && checksum64(payload) != h.checksum)
    throw ProfileError(name, "checksum mismatch: the file is damaged");

  // Cap'n Proto wants word alignment; an mmap'ed file is page aligned and the header is 32
  // bytes. Buffers from elsewhere (the fuzzer) may not be aligned: copy those.
  kj::Array<capnp::word> aligned;
  const capnp::word* words = reinterpret_cast<const capnp::word*>(payload.data());
  const std::size_t wordCount = available / sizeof(capnp::word);
  if (reinterpret_cast<std::uintptr_t>(payload.data()) % alignof(capnp::word) != 0) {
    aligned = kj::heapArray<capnp::word>(wordCount);
    std::memcpy(aligned.begin(), payload.data(), available);
    words = aligned.begin();
  }

  ThreadProfile profile;
  try {
    capnp::ReaderOptions ro;
    // A valid message is read once; allow some slack for the segment table and re-reads.
    ro.traversalLimitInWords = wordCount * 2 + 1024;
    ro.nestingLimit = kNestingLimit;
    capnp::FlatArrayMessageReader reader(kj::arrayPtr(words, wordCount), ro);
    if (reader.getEnd() != words + wordCount) throw ProfileError(name, "extra data after the message");
    profile = fromMessage(reader.getRoot<schema::ThreadProfile>(), name);
  } catch (const kj::Exception& e) {
    throw ProfileError(name, fmt::format("malformed message: {}", e.getDescription().cStr()));
  }
  if (options.validate) validateProfile(profile, name);
  return profile;
}

namespace {

bool isBundle(const std::filesystem::path& file) { return file.extension() == kBundleExtension; }

}  // namespace

std::size_t bundleRecordLength(std::span<const std::byte> bundle, std::uint64_t offset) {
  if (offset >= bundle.size()) return 0;
  const std::uint64_t left = bundle.size() - offset;
  if (left < sizeof(Header)) return static_cast<std::size_t>(left);
  Header h;
  std::memcpy(&h, bundle.data() + offset, sizeof h);
  if (std::memcmp(h.magic, kMagic, sizeof kMagic) != 0) return static_cast<std::size_t>(left);
  if (h.payloadBytes > left - sizeof h) return static_cast<std::size_t>(left);
  return static_cast<std::size_t>(sizeof h + h.payloadBytes);
}

std::vector<std::uint64_t> bundleRecordOffsets(std::span<const std::byte> bundle) {
  std::vector<std::uint64_t> offsets;
  std::uint64_t at = 0;
  while (at < bundle.size()) {
    offsets.push_back(at);
    const std::size_t n = bundleRecordLength(bundle, at);
    Header h;
    if (n < sizeof h) break;
    std::memcpy(&h, bundle.data() + at, sizeof h);
    if (std::memcmp(h.magic, kMagic, sizeof kMagic) != 0 || n != sizeof h + h.payloadBytes) break;
    at += n;
  }
  return offsets;
}

std::string bundleIncompleteness(std::span<const std::byte> bundle) {
  if (bundle.empty())
    return "an empty bundle: its process was killed during its first write, whose thread profiles are lost";
  const auto offsets = bundleRecordOffsets(bundle);
  const std::uint64_t last = offsets.back();
  Header h;
  if (bundle.size() - last < sizeof h) return {};  // a damaged last record reports itself
  std::memcpy(&h, bundle.data() + last, sizeof h);
  if (std::memcmp(h.magic, kMagic, sizeof kMagic) != 0 || h.payloadBytes != bundle.size() - last - sizeof h) return {};
  if ((h.flags & kFlagBundleRecord) == 0 || (h.flags & kFlagEndOfWrite) != 0) return {};  // unmarked (older) or whole
  return fmt::format(
      "cut after its record {} (byte {}), inside one of the measurement's writes: the profiles of "
      "threads in the rest of that write and later are missing (the file was truncated, or its "
      "process was killed while writing)",
      offsets.size(), bundle.size());
}

ProfileLocation locateProfile(const std::filesystem::path& entry) {
  const std::string name = entry.filename().string();
  const auto at = name.rfind('@');
  if (at == std::string::npos || at + 1 == name.size()) return {entry, false, 0};
  const std::string file = name.substr(0, at);
  if (!file.ends_with(kBundleExtension)) return {entry, false, 0};
  std::uint64_t offset = 0;
  for (std::size_t i = at + 1; i < name.size(); ++i) {
    if (name[i] < '0' || name[i] > '9' || offset > (UINT64_MAX - 9) / 10) return {entry, false, 0};
    offset = offset * 10 + static_cast<std::uint64_t>(name[i] - '0');
  }
  return {entry.parent_path() / file, true, offset};
}

std::uint64_t profileBytes(const std::filesystem::path& entry) {
  const ProfileLocation where = locateProfile(entry);
  std::error_code ec;
  if (!where.inBundle) {
    const auto size = std::filesystem::file_size(entry, ec);
    return ec ? 0 : size;
  }
  const int fd = ::open(where.file.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
  if (fd < 0) return 0;
  Header h{};
  const bool whole = ::pread(fd, &h, sizeof h, static_cast<off_t>(where.offset)) == static_cast<ssize_t>(sizeof h);
  ::close(fd);
  return whole && std::memcmp(h.magic, kMagic, sizeof kMagic) == 0 ? sizeof h + h.payloadBytes : 0;
}

ThreadProfile readProfile(const std::filesystem::path& path, const ParseOptions& options) {
  const ProfileLocation where = locateProfile(path);
  if (!where.inBundle) {
    MappedFile file(path);
    if (isBundle(path)) {
      if (const auto cut = bundleIncompleteness(file.bytes()); !cut.empty()) throw ProfileError(path.string(), cut);
      const auto records = bundleRecordOffsets(file.bytes());
      if (records.size() != 1)
        throw ProfileError(path.string(), fmt::format("a bundle of {} thread profiles; give its measurement "
                                                      "directory instead",
                                                      records.size()));
    }
    return parseProfile(file.bytes(), path.string(), options);
  }
  MappedFile file(where.file);
  const auto bytes = file.bytes();
  if (where.offset == bytes.size())
    if (const auto cut = bundleIncompleteness(bytes); !cut.empty()) throw ProfileError(path.string(), cut);
  if (where.offset >= bytes.size())
    throw ProfileError(path.string(),
                       fmt::format("no record at byte {} of a {}-byte bundle", where.offset, bytes.size()));
  return parseProfile(bytes.subspan(where.offset, bundleRecordLength(bytes, where.offset)), path.string(), options);
}

std::vector<DirectoryEntry> directoryEntries(const std::filesystem::path& dir, std::error_code& ec) {
  ec.clear();
  std::vector<DirectoryEntry> out;
  DIR* d = ::opendir(dir.c_str());
  if (d == nullptr) {
    ec.assign(errno, std::generic_category());
    return out;
  }
  for (;;) {
    errno = 0;
    const dirent* e = ::readdir(d);
    if (e == nullptr) {
      if (errno != 0) ec.assign(errno, std::generic_category());
      break;
    }
    const std::string_view name(e->d_name);
    if (name == "." || name == "..") continue;
    const auto kind = e->d_type == DT_REG                              ? DirectoryEntry::Kind::Regular
                      : e->d_type == DT_UNKNOWN || e->d_type == DT_LNK ? DirectoryEntry::Kind::Unknown
                                                                       : DirectoryEntry::Kind::Other;
    out.push_back({std::string(name), kind});
  }
  ::closedir(d);
  return out;
}

std::vector<std::string> listProfiles(const std::filesystem::path& dir) {
  std::error_code ec;
  if (!std::filesystem::is_directory(dir, ec))
    throw ProfileError(dir.string(), std::filesystem::exists(dir) ? "not a directory" : "no such directory");
  // Names in one directory: sorting the whole paths as strings sorts them by name.
  std::vector<std::string> files;
  // Every entry named like a profile, whatever it is: one that is no regular file (a FIFO, a
  // directory, a dangling link, a link loop, a device) is reported when read, naming it, or
  // skipped and recorded with --skip-invalid; never silently left out.
  const auto entries = directoryEntries(dir, ec);
  if (ec) throw ProfileError(dir.string(), "cannot list: " + ec.message());
  const std::string prefix = (dir / "").string();  // the directory's paths as the iterator made them
  for (const auto& e : entries)
    if (hasExtension(e.name, kProfileExtension) || hasExtension(e.name, kBundleExtension))
      files.push_back(prefix + e.name);
  std::sort(files.begin(), files.end());
  auto inBundle = [](const std::string& f) { return f.ends_with(kBundleExtension); };
  if (std::none_of(files.begin(), files.end(), inBundle)) return files;
  std::vector<std::string> out;
  for (auto& name : files) {
    if (!inBundle(name)) {
      out.push_back(std::move(name));
      continue;
    }
    const std::filesystem::path f = name;
    std::optional<MappedFile> bundle;
    try {
      bundle.emplace(f);
    } catch (const ProfileError&) {
      out.push_back(f);  // not a regular file, unreadable: reading it reports why
      continue;
    }
    for (const std::uint64_t offset : bundleRecordOffsets(bundle->bytes()))
      out.push_back((f.parent_path() / fmt::format("{}@{}", f.filename().string(), offset)).string());
    // A cut bundle's end is an entry too: reading it reports the missing profiles.
    if (!bundleIncompleteness(bundle->bytes()).empty())
      out.push_back((f.parent_path() / fmt::format("{}@{}", f.filename().string(), bundle->bytes().size())).string());
  }
  return out;
}

ProfileBundleWriter::~ProfileBundleWriter() {
  try {
    flush();
  } catch (const ProfileError&) {
    // A destructor cannot report: whoever stages flushes explicitly and sees the error.
  }
  if (fd_ >= 0) ::close(fd_);
}

void ProfileBundleWriter::open() {
  // Exclusively, never through a link: a name that exists (a planted link, a file of a
  // process with the same pid on another run) gets a suffix instead.
  std::filesystem::path candidate = path_;
  for (int k = 1; fd_ < 0; ++k) {
    fd_ = ::open(candidate.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_APPEND | O_NOFOLLOW | O_CLOEXEC, 0644);
    if (fd_ >= 0) break;
    if (errno != EEXIST || k == 100) throw ProfileError(candidate.string(), "cannot create the bundle: " + errnoText());
    candidate = suffixed(k);
  }
  path_ = candidate;
}

std::filesystem::path ProfileBundleWriter::suffixed(int k) const {
  return path_.parent_path() / fmt::format("{}.{}{}", path_.stem().string(), k, kBundleExtension);
}

// The first write creates the bundle already holding it: written into a file without a name,
// which is linked under the bundle's name (or a suffixed one, as in open()) once complete. A
// process killed during it leaves no bundle, rather than an empty or partial one. False, with
// nothing written, where the file system cannot (open() then creates the name first).
bool ProfileBundleWriter::createWhole(std::span<const std::byte> bytes) {
  const int fd = openUnnamedFile(path_.parent_path().empty() ? std::filesystem::path(".") : path_.parent_path());
  if (fd < 0) return false;
  fd_ = fd;
  try {
    writeOrCut(bytes);
  } catch (const ProfileError&) {
    ::close(fd_);  // never named: nothing is left
    fd_ = -1;
    size_ = 0;
    throw;
  }
  std::filesystem::path candidate = path_;
  for (int k = 1;; ++k) {
    if (nameUnnamedFile(fd_, candidate)) break;
    if (errno == EEXIST && k < 100) {
      candidate = suffixed(k);
      continue;
    }
    ::close(fd_);  // no /proc to name it by, or no room for a name: the file goes with its descriptor
    fd_ = -1;
    size_ = 0;
    return false;
  }
  path_ = candidate;
  ::fcntl(fd_, F_SETFL, O_APPEND);
  return true;
}

void ProfileBundleWriter::writeOrCut(std::span<const std::byte> bytes) {
  std::size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = ::write(fd_, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const std::string err = n < 0 ? errnoText() : "no progress";
      // Cut the partial records off: the bundle keeps only whole records. (If even that fails,
      // the reader reports the truncated last record.)
      [[maybe_unused]] const int cut = ::ftruncate(fd_, static_cast<off_t>(size_));
      throw ProfileError(path_.string(), "append failed: " + err);
    }
    done += static_cast<std::size_t>(n);
  }
  size_ += bytes.size();
}

void ProfileBundleWriter::writeOut(std::span<std::byte> bytes, std::size_t lastRecord, std::uint64_t records) {
  addFlags(bytes.subspan(lastRecord), kFlagEndOfWrite);
  if (fd_ >= 0) {
    writeOrCut(bytes);
  } else if (!createWhole(bytes)) {
    open();
    writeOrCut(bytes);
  }
  records_ += records;
}

void ProfileBundleWriter::append(const ThreadProfile& profile) {
  flush();
  auto image = serializeProfile(profile, path_.string());
  addFlags(image, kFlagBundleRecord);
  writeOut(image, 0, 1);
}

void ProfileBundleWriter::stage(const ThreadProfile& profile) {
  auto image = serializeProfile(profile, path_.string());
  addFlags(image, kFlagBundleRecord);
  lastStaged_ = staged_.size();
  staged_.insert(staged_.end(), image.begin(), image.end());
  ++stagedRecords_;
  if (staged_.size() >= kStageBytes) flush();
}

void ProfileBundleWriter::flush() {
  if (stagedRecords_ == 0) return;
  std::vector<std::byte> bytes;
  bytes.swap(staged_);
  const std::uint64_t records = stagedRecords_;
  stagedRecords_ = 0;
  writeOut(bytes, lastStaged_, records);
}

namespace {

std::string tupleName(const Identity& identity, bool withThread) {
  std::string name;
  for (const auto& e : identity.idTuple) {
    if (!withThread && e.kind == IdKind::Thread) continue;
    if (!name.empty()) name += '-';
    switch (e.kind) {
      case IdKind::Node:
        name += fmt::format("n{:04}", e.value);
        break;
      case IdKind::Rank:
        name += fmt::format("r{:06}", e.value);
        break;
      case IdKind::Thread:
        name += fmt::format("t{:04}", e.value);
        break;
      case IdKind::Core:
        name += fmt::format("c{:04}", e.value);
        break;
      case IdKind::Process:
        name += fmt::format("p{:06}", e.value);
        break;
      case IdKind::GpuContext:
        name += fmt::format("gc{:04}", e.value);
        break;
      case IdKind::GpuStream:
        name += fmt::format("gs{:04}", e.value);
        break;
    }
  }
  return name;
}

}  // namespace

std::string bundleFileName(const Identity& identity) {
  std::string name = tupleName(identity, false);
  if (name.empty()) name = "process";
  return fmt::format("{}.{}{}", name, identity.pid, kBundleExtension);
}

std::string profileFileName(const Identity& identity) {
  std::string name = tupleName(identity, true);
  if (name.empty()) name = "thread";
  return fmt::format("{}.{}{}", name, identity.pid, kProfileExtension);
}

std::string perfMapFileName(std::uint32_t pid, const std::string& hostname) {
  return fmt::format("perf-{}.{}.map", pid, hostname.empty() ? "localhost" : hostname);
}

}  // namespace csp::storage
