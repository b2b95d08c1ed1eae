// The list of input formats csp-prof-mpi understands.
#include "csp/reduce/profile_source.hpp"

#include <system_error>

namespace csp::reduce {

// For balancing only: what cannot be sized (no regular file) is reported when it is read.
std::uint64_t ProfileSource::bytes(const std::filesystem::path& entry) const {
  std::error_code ec;
  const auto size = std::filesystem::file_size(entry, ec);
  return ec ? 0 : static_cast<std::uint64_t>(size);
}

// The sources, one file each in reduce/src/sources/: a new input format adds its accessor here
// and to the list below.
const ProfileSource& cspProfileSource();

const std::vector<const ProfileSource*>& profileSources() {
  static const std::vector<const ProfileSource*> sources{&cspProfileSource()};
  return sources;
}

const ProfileSource* sourceFor(const std::filesystem::path& file) {
  for (const auto* s : profileSources())
    if (s->isProfile(file)) return s;
  return nullptr;
}

std::string knownProfilePatterns() {
  std::string out;
  for (const auto* s : profileSources()) out += (out.empty() ? "" : " or ") + s->pattern();
  return out;
}

}  // namespace csp::reduce
