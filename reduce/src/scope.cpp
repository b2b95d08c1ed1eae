#include "csp/reduce/scope.hpp"

#include <fmt/format.h>

#include <atomic>

namespace csp::reduce {

namespace {

std::atomic<std::uint64_t> nextSerial{1};  // NOLINT(cppcoreguidelines-avoid-non-const-global-variables)

// Each thread's own index of the texts it has interned, for the table it used last: ids never
// change once given, so a repeat (every profile interns its few hundred names, mostly those of
// the profiles before it) takes neither the shared lock nor the shared map's cache lines, which
// the other workers write. The views point into the table's own texts.
struct ThreadIndex {
  std::uint64_t table = 0;  // StringTable::serial_ of the table it holds ids of
  std::unordered_map<std::string_view, std::uint32_t> ids;
};
thread_local ThreadIndex threadIndex;  // NOLINT(cppcoreguidelines-avoid-non-const-global-variables)

}  // namespace

StringTable::StringTable() : serial_(nextSerial.fetch_add(1)) { intern(""); }

std::uint32_t StringTable::intern(std::string_view text) {
  ThreadIndex& mine = threadIndex;
  if (mine.table != serial_) {
    mine.ids.clear();
    mine.table = serial_;
  }
  if (const auto it = mine.ids.find(text); it != mine.ids.end()) return it->second;
  const auto [stored, id] = internShared(text);
  mine.ids.emplace(stored, id);
  return id;
}

std::pair<std::string_view, std::uint32_t> StringTable::internShared(std::string_view text) {
  {
    std::shared_lock lock(mutex_);
    auto it = ids_.find(text);
    if (it != ids_.end()) return *it;
  }
  std::unique_lock lock(mutex_);
  auto it = ids_.find(text);
  if (it != ids_.end()) return *it;
  const auto id = static_cast<std::uint32_t>(texts_.size());
  texts_.emplace_back(text);
  ids_.emplace(texts_.back(), id);
  return {texts_.back(), id};
}

const std::string& StringTable::text(std::uint32_t id) const {
  std::shared_lock lock(mutex_);
  return texts_.at(id);
}

std::size_t StringTable::size() const {
  std::shared_lock lock(mutex_);
  return texts_.size();
}

int compareByText(const ScopeKey& a, const ScopeKey& b, const StringTable& strings) {
  if (a.kind != b.kind) return a.kind < b.kind ? -1 : 1;
  auto cmp = [&](std::uint32_t x, std::uint32_t y) { return x == y ? 0 : strings.text(x).compare(strings.text(y)); };
  if (int c = cmp(a.name, b.name)) return c;
  if (int c = cmp(a.file, b.file)) return c;
  if (a.line != b.line) return a.line < b.line ? -1 : 1;
  return cmp(a.module, b.module);
}

std::string describe(const ScopeKey& k, const StringTable& s) {
  const std::string where = k.file || k.line ? fmt::format(" {}:{}", s.text(k.file), k.line) : std::string();
  switch (k.kind) {
    case ScopeKind::ProcFrame:
      return fmt::format("procedure {}{}{}", s.text(k.name), k.module ? " (" + s.text(k.module) + ")" : "", where);
    case ScopeKind::Alien:
      return fmt::format("inlined {}{}", s.text(k.name), where);
    default:
      return fmt::format("{}{}", toString(k.kind), where);
  }
}

}  // namespace csp::reduce
