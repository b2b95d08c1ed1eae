// Scope keys and the string table shared by attribution and the canonical CCT.
#pragma once

#include <cstdint>
#include <deque>
#include <mutex>
#include <shared_mutex>
#include <string>
#include <string_view>
#include <unordered_map>

#include "csp/storage/profile.hpp"

namespace csp::reduce {

// Thread-safe string interner. Ids are stable for the table's lifetime but depend on insertion
// order, so they never leave the process: persisted and exchanged forms use the text.
class StringTable {
 public:
  StringTable() { intern(""); }
  std::uint32_t intern(std::string_view text);
  const std::string& text(std::uint32_t id) const;
  std::size_t size() const;

 private:
  mutable std::shared_mutex mutex_;
  std::deque<std::string> texts_;  // deque: references stay valid while it grows
  std::unordered_map<std::string_view, std::uint32_t> ids_;
};

// A canonical CCT node's identity below its parent (docs/design.md, "Data model"). Unused fields are 0 (the
// empty string): ProcFrame uses name, file, line (entry), module; Alien name and file:line of
// the inlining call; Loop, CallSite and Stmt file:line.
struct ScopeKey {
  ScopeKind kind = ScopeKind::Root;
  std::uint32_t name = 0;
  std::uint32_t file = 0;
  std::uint32_t line = 0;
  std::uint32_t module = 0;
  bool operator==(const ScopeKey&) const = default;
};

struct ScopeKeyHash {
  std::size_t operator()(const ScopeKey& k) const noexcept {
    std::uint64_t h = static_cast<std::uint64_t>(k.kind) * 0x9E3779B97F4A7C15ULL;
    for (std::uint64_t v :
         {std::uint64_t{k.name}, std::uint64_t{k.file}, std::uint64_t{k.line}, std::uint64_t{k.module}})
      h = (h ^ v) * 0xFF51AFD7ED558CCDULL + 0x632BE59BD9B4E019ULL;
    return static_cast<std::size_t>(h ^ (h >> 29));
  }
};

// Orders keys by their text, which does not depend on interning order.
int compareByText(const ScopeKey& a, const ScopeKey& b, const StringTable& strings);

// "procedure foo (libm.so) foo.c:12"-style rendering for messages and tests.
std::string describe(const ScopeKey& key, const StringTable& strings);

}  // namespace csp::reduce
