#include "csp/reduce/scope.hpp"

#include <fmt/format.h>

namespace csp::reduce {

std::uint32_t StringTable::intern(std::string_view text) {
  {
    std::shared_lock lock(mutex_);
    auto it = ids_.find(text);
    if (it != ids_.end()) return it->second;
  }
  std::unique_lock lock(mutex_);
  auto it = ids_.find(text);
  if (it != ids_.end()) return it->second;
  const auto id = static_cast<std::uint32_t>(texts_.size());
  texts_.emplace_back(text);
  ids_.emplace(texts_.back(), id);
  return id;
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
