// The list of input formats csp-prof-mpi understands.
#include "csp/reduce/profile_source.hpp"

namespace csp::reduce {

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
