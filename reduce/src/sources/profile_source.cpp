// What every input format shares (profile_source.hpp).
#include "csp/reduce/profile_source.hpp"

#include <sys/stat.h>

#include <system_error>

namespace csp::reduce {

// For balancing only: what cannot be sized (no regular file) is reported when it is read.
std::uint64_t ProfileSource::bytes(const std::filesystem::path& entry) const {
  std::error_code ec;
  const auto size = std::filesystem::file_size(entry, ec);
  return ec ? 0 : static_cast<std::uint64_t>(size);
}

ProfileSource::EntryFacts ProfileSource::facts(const std::filesystem::path& entry) const {
  EntryFacts f;
  const auto [file, offset] = place(entry);
  f.offset = offset;
  struct stat st {};
  if (::stat(file.c_str(), &st) == 0) {
    f.found = true;
    f.device = static_cast<std::uint64_t>(st.st_dev);
    f.inode = static_cast<std::uint64_t>(st.st_ino);
  }
  f.bytes = bytes(entry);
  return f;
}

const ProfileSource* sourceFor(const ProfileSources& sources, const std::filesystem::path& file) {
  for (const auto& s : sources)
    if (s->isProfile(file)) return s.get();
  return nullptr;
}

std::string profilePatterns(const ProfileSources& sources) {
  std::string out;
  for (const auto& s : sources) out += (out.empty() ? "" : " or ") + s->pattern();
  return out;
}

}  // namespace csp::reduce
