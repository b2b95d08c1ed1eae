// The projection spill (stages.hpp): what the values pass needs of each profile, written by the
// structure pass to an unlinked temporary file.
#include <fcntl.h>
#include <fmt/format.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>

#include "csp/storage/bytes.hpp"
#include "stages.hpp"

namespace csp::reduce::stages {

namespace {

std::uint64_t zigzag(std::int64_t v) {
  return (static_cast<std::uint64_t>(v) << 1) ^ static_cast<std::uint64_t>(v >> 63);
}
std::int64_t unzigzag(std::uint64_t v) { return static_cast<std::int64_t>(v >> 1) ^ -static_cast<std::int64_t>(v & 1); }

// CSP_SPILL_DIR, else $TMPDIR (a TMPDIR that is no directory falls back to /tmp, as
// temp_directory_path has it). CSP_SPILL_DIR is taken as given: a wrong one is an error naming it.
std::filesystem::path spillDirectory() {
  if (const char* dir = std::getenv("CSP_SPILL_DIR"); dir != nullptr && *dir != 0) return dir;
  std::error_code ec;
  auto dir = std::filesystem::temp_directory_path(ec);
  return ec ? std::filesystem::path("/tmp") : dir;
}

}  // namespace

ProjectionSpill::ProjectionSpill() {
  const auto dir = spillDirectory();
  std::string path = (dir / "csp-prof-spill-XXXXXX").string();
  fd_ = ::mkstemp(path.data());
  if (fd_ < 0)
    throw PipelineError(
        fmt::format("{}: cannot create the projection spill file: {} (set CSP_SPILL_DIR or TMPDIR to a writable "
                    "directory)",
                    path, std::strerror(errno)));
  ::unlink(path.c_str());  // gone with the process, whatever way it ends
  dir_ = dir.string();
}

ProjectionSpill::~ProjectionSpill() {
  if (fd_ >= 0) ::close(fd_);
}

SpillRef ProjectionSpill::put(const std::vector<MetricDescriptor>& metrics, const std::vector<StmtValue>& stmt) {
  storage::ByteWriter<std::vector<std::byte>> w;
  w.u64(metrics.size());
  for (const auto& m : metrics) w.text(m.name);
  w.u64(stmt.size());
  std::int64_t previous = 0;
  for (const auto& v : stmt) {
    w.u64(zigzag(static_cast<std::int64_t>(v.node) - previous));
    previous = v.node;
    w.u64(v.metric);
    w.u64(v.value);
  }
  const auto bytes = w.take();
  const std::uint64_t offset = next_.fetch_add(bytes.size());
  for (std::size_t done = 0; done < bytes.size();) {
    const auto n = ::pwrite(fd_, bytes.data() + done, bytes.size() - done, static_cast<off_t>(offset + done));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0)
      throw std::runtime_error(
          fmt::format("projection spill file in {}: cannot write: {} (disk full? set CSP_SPILL_DIR or TMPDIR)", dir_,
                      n < 0 ? std::strerror(errno) : "no space"));
    done += static_cast<std::size_t>(n);
  }
  return {offset, bytes.size(), false};
}

ProjectionSpill::Projected ProjectionSpill::get(const SpillRef& ref) const {
  std::vector<std::byte> bytes(ref.size);
  for (std::size_t done = 0; done < bytes.size();) {
    const auto n = ::pread(fd_, bytes.data() + done, bytes.size() - done, static_cast<off_t>(ref.offset + done));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0)
      throw std::runtime_error(
          fmt::format("projection spill file: cannot read: {}", n < 0 ? std::strerror(errno) : "truncated"));
    done += static_cast<std::size_t>(n);
  }
  storage::ByteReader<std::runtime_error> r(bytes, "projection spill file");
  Projected out;
  out.metrics.resize(r.u64());
  for (auto& name : out.metrics) name = r.text();
  out.stmt.resize(r.u64());
  std::int64_t previous = 0;
  for (auto& v : out.stmt) {
    previous += unzigzag(r.u64());
    v.node = static_cast<std::uint32_t>(previous);
    v.metric = static_cast<std::uint16_t>(r.u64());
    v.value = r.u64();
  }
  r.expectDone();
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
