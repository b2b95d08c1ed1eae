// One module's recovered structure: lookups and the byte form of the cache (structure.hpp).
#include <fmt/format.h>

#include <algorithm>
#include <stdexcept>

#include "csp/reduce/structure.hpp"
#include "csp/storage/bytes.hpp"

namespace csp::reduce::structure {

namespace {

constexpr std::uint64_t kMagic = 0x3153435453505343ULL;  // "CSPSTCS1" little-endian

struct StructureError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

}  // namespace

ModuleStructure::ModuleStructure(std::vector<std::uint64_t> starts,
                                 std::vector<std::pair<std::uint64_t, std::uint64_t>> code,
                                 std::vector<LoopScope> loops, std::vector<std::string> files,
                                 std::vector<AddressRange> ranges)
    : starts_(std::move(starts)),
      code_(std::move(code)),
      loops_(std::move(loops)),
      files_(std::move(files)),
      ranges_(std::move(ranges)) {
  validate();
}

std::optional<std::uint64_t> ModuleStructure::functionStart(std::uint64_t address) const {
  auto c =
      std::upper_bound(code_.begin(), code_.end(), address, [](std::uint64_t a, const auto& r) { return a < r.first; });
  if (c == code_.begin()) return std::nullopt;
  --c;
  if (address >= c->second) return std::nullopt;
  auto s = std::upper_bound(starts_.begin(), starts_.end(), address);
  if (s == starts_.begin() || *std::prev(s) < c->first) return c->first;
  return *std::prev(s);
}

std::optional<std::uint64_t> ModuleStructure::functionEnd(std::uint64_t address) const {
  auto c =
      std::upper_bound(code_.begin(), code_.end(), address, [](std::uint64_t a, const auto& r) { return a < r.first; });
  if (c == code_.begin() || address >= std::prev(c)->second) return std::nullopt;
  auto s = std::upper_bound(starts_.begin(), starts_.end(), address);
  return s != starts_.end() && *s < std::prev(c)->second ? *s : std::prev(c)->second;
}

std::uint32_t ModuleStructure::innermostLoop(std::uint64_t address) const {
  auto r = std::upper_bound(ranges_.begin(), ranges_.end(), address,
                            [](std::uint64_t a, const AddressRange& x) { return a < x.start; });
  if (r == ranges_.begin()) return kNone;
  --r;
  return address < r->end ? r->loop : kNone;
}

void ModuleStructure::validate() const {
  auto fail = [](const std::string& what) { throw StructureError("module structure: " + what); };
  for (std::size_t i = 1; i < starts_.size(); ++i)
    if (starts_[i] <= starts_[i - 1]) fail("function starts out of order");
  for (std::size_t i = 0; i < code_.size(); ++i)
    if (code_[i].second <= code_[i].first || (i > 0 && code_[i].first < code_[i - 1].second)) fail("bad code range");
  for (std::size_t i = 0; i < loops_.size(); ++i) {
    const auto& l = loops_[i];
    if (l.parent != kNone && l.parent >= i) fail(fmt::format("loop {} has parent {}", i, l.parent));
    if (l.file >= files_.size()) fail(fmt::format("loop {} names file {} of {}", i, l.file, files_.size()));
    if (l.parent != kNone && l.inlineDepth < loops_[l.parent].inlineDepth)
      fail(fmt::format("loop {} is less inlined than its parent", i));
  }
  for (std::size_t i = 0; i < ranges_.size(); ++i) {
    const auto& r = ranges_[i];
    if (r.end <= r.start || (i > 0 && r.start < ranges_[i - 1].end)) fail("bad loop range");
    if (r.loop >= loops_.size()) fail(fmt::format("loop range names loop {} of {}", r.loop, loops_.size()));
  }
}

std::vector<std::byte> ModuleStructure::encode() const {
  storage::ByteWriter<std::vector<std::byte>> w;
  w.u64(kMagic);
  w.u64(starts_.size());
  std::uint64_t last = 0;
  for (auto s : starts_) {
    w.u64(s - last);
    last = s;
  }
  w.u64(code_.size());
  for (const auto& [a, b] : code_) {
    w.u64(a);
    w.u64(b - a);
  }
  w.u64(files_.size());
  for (const auto& f : files_) w.text(f);
  w.u64(loops_.size());
  for (const auto& l : loops_) {
    w.u64(l.header);
    w.u64(l.parent == kNone ? 0 : std::uint64_t{l.parent} + 1);
    w.u64(l.inlineDepth);
    w.u64(l.file);
    w.u64(l.line);
    w.u8(l.irreducible ? 1 : 0);
  }
  w.u64(ranges_.size());
  last = 0;
  for (const auto& r : ranges_) {
    w.u64(r.start - last);
    w.u64(r.end - r.start);
    w.u64(r.loop);
    last = r.end;
  }
  return w.take();
}

ModuleStructure ModuleStructure::decode(std::span<const std::byte> bytes) {
  storage::ByteReader<StructureError> r(bytes, "module structure");
  if (r.u64() != kMagic) r.fail("bad magic");
  // Counts are bounded by the bytes left (every element takes at least one byte), so a damaged
  // count cannot make us allocate without bound.
  auto count = [&] {
    const auto n = r.u64();
    if (n > r.remaining()) r.fail("count larger than the data");
    return static_cast<std::size_t>(n);
  };
  ModuleStructure m;
  m.starts_.resize(count());
  std::uint64_t last = 0;
  for (auto& s : m.starts_) {
    const auto d = r.u64();
    if (d > ~last) r.fail("address overflow");
    s = last += d;
  }
  m.code_.resize(count());
  for (auto& [a, b] : m.code_) {
    a = r.u64();
    const auto n = r.u64();
    if (n > ~a) r.fail("address overflow");
    b = a + n;
  }
  m.files_.resize(count());
  for (auto& f : m.files_) f = r.text();
  m.loops_.resize(count());
  for (auto& l : m.loops_) {
    l.header = r.u64();
    const auto parent = r.u64();
    if (parent > kNone) r.fail("bad parent");
    l.parent = parent == 0 ? kNone : static_cast<std::uint32_t>(parent - 1);
    l.inlineDepth = r.u32();
    l.file = r.u32();
    l.line = r.u32();
    const auto flag = r.u8();
    if (flag > 1) r.fail("bad flag");
    l.irreducible = flag == 1;
  }
  m.ranges_.resize(count());
  last = 0;
  for (auto& x : m.ranges_) {
    const auto gap = r.u64();
    if (gap > ~last) r.fail("address overflow");
    x.start = last + gap;
    const auto n = r.u64();
    if (n > ~x.start) r.fail("address overflow");
    x.end = x.start + n;
    x.loop = r.u32();
    last = x.end;
  }
  r.expectDone();
  m.validate();
  return m;
}

}  // namespace csp::reduce::structure
