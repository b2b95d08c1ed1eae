// CSP's own per-thread profiles (Cap'n Proto, docs/profile-format.md), written by csp-run and
// csp-gen.
#include "csp/reduce/profile_source.hpp"
#include "csp/storage/profile_io.hpp"

namespace csp::reduce {

namespace {

class CspProfileSource final : public ProfileSource {
 public:
  std::string name() const override { return "cspprof"; }
  std::string pattern() const override { return std::string("*") + storage::kProfileExtension; }
  bool isProfile(const std::filesystem::path& file) const override {
    return file.extension() == storage::kProfileExtension;
  }
  std::vector<std::filesystem::path> list(const std::filesystem::path& directory) const override {
    return storage::listProfiles(directory);
  }
  ThreadProfile read(const std::filesystem::path& file) const override { return storage::readProfile(file); }
};

}  // namespace

const ProfileSource& cspProfileSource() {
  static const CspProfileSource source;
  return source;
}

}  // namespace csp::reduce
