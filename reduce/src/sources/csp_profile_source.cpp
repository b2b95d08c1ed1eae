// CSP's own per-thread profiles (Cap'n Proto, docs/profile-format.md), written by csp-run and
// csp-gen: files of one profile each and bundles (one file per process of the threads that
// ended while it ran).
#include <sys/stat.h>

#include <algorithm>
#include <string_view>
#include <system_error>

#include "csp/reduce/profile_source.hpp"
#include "csp/storage/profile_io.hpp"

namespace csp::reduce {

namespace {

namespace fs = std::filesystem;

class CspProfileSource final : public ProfileSource {
 public:
  SourceProvides provides() const override { return {.addressFrames = true, .symbolicFrames = true, .regions = true}; }
  std::string pattern() const override {
    return std::string("*") + storage::kProfileExtension + ", *" + storage::kBundleExtension;
  }
  bool isProfile(const fs::path& file) const override {
    return file.extension() == storage::kProfileExtension || file.extension() == storage::kBundleExtension;
  }
  std::pair<fs::path, std::uint64_t> place(const fs::path& entry) const override {
    const auto where = storage::locateProfile(entry);
    return {where.file, where.offset};
  }
  std::uint64_t bytes(const fs::path& entry) const override { return storage::profileBytes(entry); }
  // A profile file's size is its profile's: one stat for both (a bundle's record reads its header).
  EntryFacts facts(const fs::path& entry) const override {
    const auto where = storage::locateProfile(entry);
    EntryFacts f;
    f.offset = where.offset;
    struct stat st {};
    if (::stat(where.file.c_str(), &st) != 0) return f;  // bytes 0, as profileBytes gives it
    f.found = true;
    f.device = static_cast<std::uint64_t>(st.st_dev);
    f.inode = static_cast<std::uint64_t>(st.st_ino);
    if (where.inBundle)
      f.bytes = storage::profileBytes(entry);
    else
      f.bytes = S_ISREG(st.st_mode) ? static_cast<std::uint64_t>(st.st_size) : 0;  // as file_size
    return f;
  }
  std::vector<std::string> list(const fs::path& directory) const override { return storage::listProfiles(directory); }
  // The pipeline validates.
  ThreadProfile read(const fs::path& entry) const override { return storage::readProfile(entry, {.validate = false}); }

  // The copy of its perf map that the measurement left next to the profile (docs/measurement.md,
  // "JIT code").
  fs::path jitSymbols(const fs::path& entry, const ThreadProfile& p) const override {
    if (p.frameKind != FrameKind::Address) return {};
    return entry.parent_path() / storage::perfMapFileName(p.identity.pid, p.identity.hostname);
  }

  // Temporaries of profiles, bundles and perf-map copies: writers that can write without a name
  // leave none (docs/profile-format.md).
  std::vector<std::string> unfinished(const fs::path& directory) const override {
    std::vector<std::string> found;
    std::error_code ec;
    for (const auto& e : storage::directoryEntries(directory, ec)) {
      const auto tmp = e.name.find(".tmp.");
      if (tmp == std::string::npos) continue;
      const std::string_view stem(e.name.data(), tmp);
      if (stem.ends_with(storage::kProfileExtension) || stem.ends_with(storage::kBundleExtension) ||
          (stem.starts_with("perf-") && stem.ends_with(".map")))
        found.push_back((directory / e.name).string());
    }
    std::sort(found.begin(), found.end());
    return found;
  }

  std::string workMetric() const override { return "cpu-time"; }
};

}  // namespace

std::shared_ptr<const ProfileSource> cspProfileSource() { return std::make_shared<const CspProfileSource>(); }

}  // namespace csp::reduce
