// CSP's own per-thread profiles (Cap'n Proto, docs/profile-format.md), written by csp-run and
// csp-gen: files of one profile each and bundles (one file per process of the threads that
// ended while it ran).
#include "csp/reduce/profile_source.hpp"
#include "csp/storage/profile_io.hpp"

namespace csp::reduce {

namespace {

class CspProfileSource final : public ProfileSource {
 public:
  std::string name() const override { return "cspprof"; }
  std::string pattern() const override {
    return std::string("*") + storage::kProfileExtension + ", *" + storage::kBundleExtension;
  }
  bool isProfile(const std::filesystem::path& file) const override {
    return file.extension() == storage::kProfileExtension || file.extension() == storage::kBundleExtension;
  }
  std::pair<std::filesystem::path, std::uint64_t> place(const std::filesystem::path& entry) const override {
    const auto where = storage::locateProfile(entry);
    return {where.file, where.offset};
  }
  std::uint64_t bytes(const std::filesystem::path& entry) const override { return storage::profileBytes(entry); }
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
