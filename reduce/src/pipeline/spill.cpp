// Spill files (stages.hpp): unlinked temporary files for what csp-prof-mpi needs again later;
// the projection spill, what the values pass needs of each profile's values, written by the
// structure pass.
#include <fcntl.h>
#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <span>
#include <utility>

#include "csp/storage/bytes.hpp"
#include "stages.hpp"

namespace csp::reduce::stages {

namespace {

std::uint64_t zigzag(std::int64_t v) {
  return (static_cast<std::uint64_t>(v) << 1) ^ static_cast<std::uint64_t>(v >> 63);
}
std::int64_t unzigzag(std::uint64_t v) { return static_cast<std::int64_t>(v >> 1) ^ -static_cast<std::int64_t>(v & 1); }

// The bytes of put() and get(): kept by each thread from record to record (the structure pass
// spills every value it projects, the values pass reads every one back).
thread_local std::vector<char> spillBuffer;  // NOLINT(cppcoreguidelines-avoid-non-const-global-variables)

// CSP_SPILL_DIR, else $TMPDIR (a TMPDIR that is no directory falls back to /tmp, as
// temp_directory_path has it). CSP_SPILL_DIR is taken as given: a wrong one is an error naming it.
std::filesystem::path spillDirectory() {
  if (const char* dir = std::getenv("CSP_SPILL_DIR"); dir != nullptr && *dir != 0) return dir;
  std::error_code ec;
  auto dir = std::filesystem::temp_directory_path(ec);
  return ec ? std::filesystem::path("/tmp") : dir;
}

}  // namespace

SpillFile::SpillFile(std::string what) : what_(std::move(what)) {
  const auto dir = spillDirectory();
  std::string path = (dir / "csp-prof-spill-XXXXXX").string();
  fd_ = ::mkstemp(path.data());
  if (fd_ < 0)
    throw PipelineError(
        fmt::format("{}: cannot create the {} file: {} (set CSP_SPILL_DIR or TMPDIR to a writable "
                    "directory)",
                    path, what_, std::strerror(errno)));
  ::unlink(path.c_str());  // gone with the process, whatever way it ends
  dir_ = dir.string();
}

SpillFile::~SpillFile() {
  if (fd_ >= 0) ::close(fd_);
}

SpillRef SpillFile::write(const char* data, std::size_t size) {
  const std::uint64_t offset = next_.fetch_add(size);
  for (std::size_t done = 0; done < size;) {
    const auto n = ::pwrite(fd_, data + done, size - done, static_cast<off_t>(offset + done));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0)
      throw std::runtime_error(fmt::format("{} file in {}: cannot write: {} (disk full? set CSP_SPILL_DIR or TMPDIR)",
                                           what_, dir_, n < 0 ? std::strerror(errno) : "no space"));
    done += static_cast<std::size_t>(n);
  }
  return {offset, size, false};
}

void SpillFile::read(const SpillRef& ref, std::vector<char>& out) const {
  if (out.size() < ref.size) out.resize(ref.size);
  for (std::size_t done = 0; done < ref.size;) {
    const auto n = ::pread(fd_, out.data() + done, ref.size - done, static_cast<off_t>(ref.offset + done));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0)
      throw std::runtime_error(
          fmt::format("{} file: cannot read: {}", what_, n < 0 ? std::strerror(errno) : "truncated"));
    done += static_cast<std::size_t>(n);
  }
}

namespace {

// How many low bits of a value's first varint name its metric: codes below the mask are the
// metric, the mask itself is an escape (the metric follows as a varint of its own). Enough bits
// for every metric of the record and the escape, e.g. two for CSP's usual two metrics.
// Metric ids are 16 bits wide, so 16 bits are always enough.
unsigned metricBits(std::size_t metrics) { return std::min(16u, static_cast<unsigned>(std::bit_width(metrics))); }

}  // namespace

SpillRef ProjectionSpill::put(const std::vector<MetricDescriptor>& metrics, const std::vector<StmtValue>& stmt) {
  // Written in place, in the varints of storage::ByteWriter (a name is its length, then its
  // bytes, then the metric's period); room for the worst case, three varints of at most 10 bytes
  // and a scaled value of at most 20 per value. Each value is one varint of the node's step from
  // the previous value's node (zigzag) with its metric in the low bits, then the value in units
  // of its metric's period (storage::ValueScale): statement values are sample counts times the
  // period, so most take one byte instead of three or four, and reading a value back is mostly
  // two one-byte varints.
  std::size_t most = 20 + 50 * stmt.size();
  for (const auto& m : metrics) most += 20 + m.name.size();
  auto& bytes = spillBuffer;
  if (bytes.size() < most) bytes.resize(most);
  char* out = storage::varintAt(bytes.data(), metrics.size());
  std::vector<storage::ValueScale> scales;
  scales.reserve(metrics.size());
  for (const auto& m : metrics) {
    out = storage::varintAt(out, m.name.size());
    out = std::copy(m.name.begin(), m.name.end(), out);
    out = storage::varintAt(out, m.period);
    scales.emplace_back(m.period);
  }
  out = storage::varintAt(out, stmt.size());
  const unsigned bits = metricBits(metrics.size());
  const std::uint64_t escape = (std::uint64_t{1} << bits) - 1;
  const std::uint64_t direct = std::min<std::uint64_t>(escape, scales.size());  // metrics below it
  std::int64_t previous = 0;
  for (const auto& v : stmt) {
    const std::uint64_t step = zigzag(static_cast<std::int64_t>(v.node) - previous) << bits;
    previous = v.node;
    if (v.metric < direct) {
      out = storage::varintAt(out, step | v.metric);
      out = scales[v.metric].put(out, v.value);
    } else {
      out = storage::varintAt(out, step | escape);
      out = storage::varintAt(out, v.metric);
      out = v.metric < scales.size() ? scales[v.metric].put(out, v.value) : storage::varintAt(out, v.value);
    }
  }
  return file_.write(bytes.data(), static_cast<std::size_t>(out - bytes.data()));
}

namespace {

[[noreturn, gnu::cold]] void spillCorrupt(const char* problem) {
  throw std::runtime_error(fmt::format("projection spill file: {}", problem));
}

// The values of a record, read with the pointer and its end in registers (storage::ByteReader
// keeps its position in memory, which doubled the cost of reading a value back); the same checks,
// scaled values through storage::ValueScale::read.
class SpillCursor {
 public:
  SpillCursor(const char* begin, const char* end)
      : p_(reinterpret_cast<const unsigned char*>(begin)), end_(reinterpret_cast<const unsigned char*>(end)) {}
  [[gnu::always_inline]] std::uint64_t u64() {
    if (p_ < end_ && *p_ < 0x80) return *p_++;  // most are one byte
    const auto [v, next] = longVarint(p_, end_);
    p_ = next;
    return v;
  }
  [[noreturn]] static void fail(const char* problem) { spillCorrupt(problem); }  // for storage::ValueScale::read
  std::size_t remaining() const { return static_cast<std::size_t>(end_ - p_); }

 private:
  // Out of line and on copies, so that the reading loop keeps its pointer in a register.
  [[gnu::noinline]] static std::pair<std::uint64_t, const unsigned char*> longVarint(const unsigned char* p,
                                                                                     const unsigned char* end) {
    std::uint64_t v = 0;
    for (unsigned shift = 0;; shift += 7) {
      if (p >= end) spillCorrupt("truncated varint");
      const unsigned byte = *p++;
      if (shift == 63 && byte > 1) spillCorrupt("varint does not fit 64 bits");
      v |= std::uint64_t{byte & 0x7fu} << shift;
      if ((byte & 0x80) == 0) {
        if (byte == 0 && shift > 0) spillCorrupt("overlong varint");
        return {v, p};
      }
    }
  }
  const unsigned char* p_;
  const unsigned char* end_;
};

}  // namespace

ProjectionSpill::Projected ProjectionSpill::get(const SpillRef& ref) const {
  auto& bytes = spillBuffer;
  file_.read(ref, bytes);
  const std::span<const std::byte> record(reinterpret_cast<const std::byte*>(bytes.data()), ref.size);
  storage::ByteReader<std::runtime_error> r(record, "projection spill file");
  Projected out;
  const std::uint64_t names = r.u64();
  if (names > r.remaining()) r.fail("more metric names than bytes");
  out.metrics.resize(names);
  std::vector<storage::ValueScale> scales;
  scales.reserve(names);
  for (auto& name : out.metrics) {
    name = r.text();
    scales.emplace_back(r.u64());
  }
  const std::uint64_t count = r.u64();
  if (count > r.remaining() / 2) r.fail("more values than bytes");
  out.stmt.resize(count);
  SpillCursor c(bytes.data() + r.position(), bytes.data() + ref.size);
  const unsigned bits = metricBits(names);
  const std::uint64_t escape = (std::uint64_t{1} << bits) - 1;
  std::int64_t previous = 0;
  for (auto& v : out.stmt) {
    const std::uint64_t head = c.u64();
    previous += unzigzag(head >> bits);
    v.node = static_cast<std::uint32_t>(previous);
    std::uint64_t metric = head & escape;
    if (metric == escape) {
      metric = c.u64();
      if (metric > UINT16_MAX) spillCorrupt("metric id out of range");
    } else if (metric >= names) {
      spillCorrupt("metric id out of range");
    }
    v.metric = static_cast<std::uint16_t>(metric);
    v.value = metric < names ? scales[metric].read(c) : c.u64();
  }
  if (c.remaining() != 0) spillCorrupt("trailing bytes");
  return out;
}

std::vector<std::uint32_t> finalIdsOf(const LocalCct& local, const FinalCct& cct) {
  std::vector<std::uint32_t> id(local.size(), kNoIndex);
  id[0] = 0;
  for (std::uint32_t n = 1; n < id.size(); ++n) {
    const CctNode node = local.node(n);
    id[n] = cct.find(id[node.parent], node.key);
    if (id[n] == kNoIndex) throw std::logic_error("canonical CCT: a local context is missing");
  }
  return id;
}

}  // namespace csp::reduce::stages
