#include "csp/reduce/perf_map.hpp"

#include <fmt/format.h>

#include <fcntl.h>
#include <unistd.h>
#include <algorithm>
#include <cerrno>
#include <cstring>

#include <iterator>
#include <map>
#include <optional>
#include <stdexcept>

namespace csp::reduce {

namespace {

std::optional<std::uint64_t> hexField(std::string_view& rest) {
  while (!rest.empty() && (rest.front() == ' ' || rest.front() == '\t')) rest.remove_prefix(1);
  if (rest.starts_with("0x") || rest.starts_with("0X")) rest.remove_prefix(2);
  std::uint64_t v = 0;
  std::size_t digits = 0;
  while (!rest.empty()) {
    const char c = rest.front();
    int d = -1;
    if (c >= '0' && c <= '9')
      d = c - '0';
    else if (c >= 'a' && c <= 'f')
      d = c - 'a' + 10;
    else if (c >= 'A' && c <= 'F')
      d = c - 'A' + 10;
    if (d < 0) break;
    if (digits == 16) return std::nullopt;  // more than 64 bits
    v = v << 4 | static_cast<std::uint64_t>(d);
    ++digits;
    rest.remove_prefix(1);
  }
  if (digits == 0 || rest.empty() || (rest.front() != ' ' && rest.front() != '\t')) return std::nullopt;
  return v;
}

}  // namespace

PerfMap PerfMap::parse(std::string_view text) {
  PerfMap out;
  // Later lines overwrite the ranges of earlier ones: an interval map keyed by begin.
  std::map<std::uint64_t, Entry> ranges;
  auto insert = [&](Entry e) {
    auto it = ranges.upper_bound(e.begin);
    if (it != ranges.begin() && std::prev(it)->second.end > e.begin) --it;
    while (it != ranges.end() && it->second.begin < e.end) {
      Entry old = std::move(it->second);
      it = ranges.erase(it);
      if (old.begin < e.begin) ranges.emplace(old.begin, Entry{old.begin, e.begin, old.name});
      if (old.end > e.end) ranges.emplace(e.end, Entry{e.end, old.end, std::move(old.name)});
    }
    const auto begin = e.begin;
    ranges.emplace(begin, std::move(e));
  };
  while (!text.empty()) {
    const auto eol = text.find('\n');
    std::string_view line = text.substr(0, eol);
    text.remove_prefix(eol == std::string_view::npos ? text.size() : eol + 1);
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line.find_first_not_of(" \t") == std::string_view::npos) continue;
    std::string_view rest = line;
    std::uint64_t start = 0, size = 0;
    bool ok = false;
    if (auto a = hexField(rest)) {
      start = *a;
      if (auto b = hexField(rest)) {
        size = *b;
        ok = true;
      }
    }
    while (!rest.empty() && (rest.front() == ' ' || rest.front() == '\t')) rest.remove_prefix(1);
    if (!ok || size == 0 || rest.empty() || start > UINT64_MAX - size) {
      ++out.malformed_;
      continue;
    }
    insert({start, start + size, std::string(rest)});
  }
  out.entries_.reserve(ranges.size());
  for (auto& [begin, e] : ranges) out.entries_.push_back(std::move(e));
  return out;
}

PerfMap PerfMap::read(const std::filesystem::path& file) {
  const int fd = ::open(file.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw std::runtime_error(fmt::format("{}: cannot read ({})", file.string(), std::strerror(errno)));
  std::string text;
  char buf[65536];
  for (;;) {
    const ssize_t n = ::read(fd, buf, sizeof buf);
    if (n == 0) break;
    if (n < 0) {
      if (errno == EINTR) continue;
      const int err = errno;
      ::close(fd);
      throw std::runtime_error(fmt::format("{}: cannot read ({})", file.string(), std::strerror(err)));
    }
    text.append(buf, static_cast<std::size_t>(n));
  }
  ::close(fd);
  return parse(text);
}

const std::string* PerfMap::find(std::uint64_t address) const {
  auto it = std::upper_bound(entries_.begin(), entries_.end(), address,
                             [](std::uint64_t a, const Entry& e) { return a < e.begin; });
  if (it == entries_.begin()) return nullptr;
  --it;
  return address < it->end ? &it->name : nullptr;
}

}  // namespace csp::reduce
