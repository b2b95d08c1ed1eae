// JIT symbol maps in the format that perf reads from /tmp/perf-<pid>.map: one symbol per line,
// "START SIZE NAME" with START and SIZE in hexadecimal (an optional 0x prefix is accepted) and
// NAME the rest of the line. The measurement copies a process's map next to its profiles
// (storage::perfMapFileName); attribution names addresses outside every module with it.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

namespace csp::reduce {

class PerfMap {
 public:
  // Lines that do not parse (or have size 0) are skipped and counted. When ranges overlap, the
  // later line wins over the part it covers: JITs reuse code memory, and the newer code is the
  // one written later.
  static PerfMap parse(std::string_view text);
  // Throws std::runtime_error "<file>: cannot read (...)" when the file exists but cannot be read.
  static PerfMap read(const std::filesystem::path& file);

  // The symbol covering `address`, or nullptr.
  const std::string* find(std::uint64_t address) const;
  std::size_t size() const { return entries_.size(); }
  std::size_t malformedLines() const { return malformed_; }

 private:
  struct Entry {
    std::uint64_t begin = 0, end = 0;
    std::string name;
  };
  std::vector<Entry> entries_;  // sorted by begin, non-overlapping
  std::size_t malformed_ = 0;
};

}  // namespace csp::reduce
