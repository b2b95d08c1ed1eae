#include "output_dir.hpp"

#include <fmt/format.h>
#include <unistd.h>

namespace csp::cli {

namespace fs = std::filesystem;

StagedDirectory::StagedDirectory(fs::path target, bool force) : target_(std::move(target)), force_(force) {
  if (target_.filename().empty()) target_ = target_.parent_path();
  std::error_code ec;
  if (fs::exists(target_, ec) && !force_)
    throw OutputDirError(fmt::format("{}: already exists (use --force to replace it)", target_.string()));
  const fs::path parent = target_.has_parent_path() ? target_.parent_path() : fs::path(".");
  fs::create_directories(parent, ec);
  if (ec) throw OutputDirError(fmt::format("{}: cannot create: {}", parent.string(), ec.message()));
  staging_ = parent / fmt::format(".{}.tmp-{}", target_.filename().string(), ::getpid());
  fs::remove_all(staging_, ec);
  if (!fs::create_directory(staging_, ec) || ec)
    throw OutputDirError(fmt::format("{}: cannot create: {}", staging_.string(), ec.message()));
}

StagedDirectory::~StagedDirectory() {
  if (!published_) {
    std::error_code ec;
    fs::remove_all(staging_, ec);
  }
}

void StagedDirectory::publish() {
  std::error_code ec;
  if (fs::exists(target_, ec)) {
    if (!force_) throw OutputDirError(fmt::format("{}: appeared while writing; not replaced", target_.string()));
    // Move the old one aside first so that the target name is never missing a complete directory
    // for longer than two renames.
    const fs::path old = target_.parent_path() / fmt::format(".{}.old-{}", target_.filename().string(), ::getpid());
    fs::rename(target_, old, ec);
    if (ec) throw OutputDirError(fmt::format("{}: cannot replace: {}", target_.string(), ec.message()));
    fs::rename(staging_, target_, ec);
    if (ec) {
      std::error_code ignore;
      fs::rename(old, target_, ignore);
      throw OutputDirError(fmt::format("{}: cannot publish: {}", target_.string(), ec.message()));
    }
    fs::remove_all(old, ec);
  } else {
    fs::rename(staging_, target_, ec);
    if (ec) throw OutputDirError(fmt::format("{}: cannot publish: {}", target_.string(), ec.message()));
  }
  published_ = true;
}

}  // namespace csp::cli
