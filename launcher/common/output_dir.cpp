#include "output_dir.hpp"

#include "csp/storage/publish.hpp"

#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace csp::cli {

namespace fs = std::filesystem;

std::string notAMeasurementDirectory(const fs::path& existing) {
  std::error_code ec;
  const auto st = fs::symlink_status(existing, ec);
  if (!ec && st.type() == fs::file_type::symlink)
    return "a symbolic link, not a measurement directory (never followed)";
  if (ec || st.type() != fs::file_type::directory) return "not a directory";
  for (fs::directory_iterator it(existing, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    // Profiles, bundles, their temporaries and the JIT symbol maps kept beside them.
    const bool profileName = name.ends_with(".cspprof") || name.find(".cspprof.tmp.") != std::string::npos ||
                             name.ends_with(".cspbundle") || (name.starts_with("perf-") && name.ends_with(".map"));
    if (!profileName || it->symlink_status(ec).type() != fs::file_type::regular)
      return fmt::format("not a measurement directory (it holds '{}')", name);
  }
  if (ec) return "cannot be listed: " + ec.message();
  return {};
}

StagedDirectory::StagedDirectory(fs::path target, bool force, Guard guard)
    : target_(std::move(target)), force_(force), guard_(std::move(guard)) {
  if (target_.filename().empty()) target_ = target_.parent_path();
  std::error_code ec;
  if (fs::exists(fs::symlink_status(target_, ec)) && !force_)
    throw OutputDirError(fmt::format("{}: already exists (use --force to replace it)", target_.string()));
  if (fs::exists(fs::symlink_status(target_, ec)) && guard_)
    if (const auto why = guard_(target_); !why.empty())
      throw OutputDirError(
          fmt::format("{}: {}; --force replaces only what this tool writes: remove it yourself or "
                      "choose another name",
                      target_.string(), why));
  const fs::path parent = target_.has_parent_path() ? target_.parent_path() : fs::path(".");
  fs::create_directories(parent, ec);
  if (ec) throw OutputDirError(fmt::format("{}: cannot create: {}", parent.string(), ec.message()));
  // Staging directories of runs killed with SIGKILL (or before their cleanup was armed).
  leftovers_ = storage::cleanupLeftovers(target_);
  // A fresh, exclusively created name: an existing entry (a planted symlink, another run's
  // staging) is never reused or removed.
  std::string name = (parent / fmt::format(".{}.tmp-{}-XXXXXX", target_.filename().string(), ::getpid())).string();
  if (!::mkdtemp(name.data()))
    throw OutputDirError(
        fmt::format("{}: cannot create a staging directory next to it: {}", target_.string(), std::strerror(errno)));
  staging_ = name;
  ::chmod(staging_.c_str(), 0755);
}

StagedDirectory::~StagedDirectory() {
  if (!published_) {
    std::error_code ec;
    fs::remove_all(staging_, ec);
  }
}

void StagedDirectory::publish() {
  std::error_code ec;
  if (fs::exists(fs::symlink_status(target_, ec))) {
    if (!force_) throw OutputDirError(fmt::format("{}: appeared while writing; not replaced", target_.string()));
    if (guard_)
      if (const auto why = guard_(target_); !why.empty())
        throw OutputDirError(fmt::format("{}: {}; not replaced", target_.string(), why));
  }
  // The same atomic publication as databases (exchange or no-replace rename, parent synced).
  try {
    storage::publishDirectory(staging_, target_);
  } catch (const storage::PublishError& e) {
    throw OutputDirError(e.what());
  }
  published_ = true;
}

}  // namespace csp::cli
