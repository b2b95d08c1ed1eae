// Publishing a fully written directory in one atomic step, and cleaning up what interrupted builds
// left next to its target (docs/database-format.md, "Publication and interrupted runs"). The
// database builder (database_writer.hpp) and csp-gen's staged measurement directories
// (launcher/common/output_dir.hpp) both use it; it links no RocksDB (library csp_publish).
#pragma once

#include <filesystem>
#include <functional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace csp::storage {

// A directory that cannot be published or prepared. what(): "<path>: <problem>".
class PublishError : public std::runtime_error {
 public:
  PublishError(std::filesystem::path path, std::string problem);
  const std::filesystem::path& path() const { return path_; }
  const std::string& problem() const { return problem_; }

 private:
  std::filesystem::path path_;
  std::string problem_;
};

// What a build found next to its target from earlier runs.
struct LeftoverReport {
  std::filesystem::path path;
  bool removed = false;  // false: its owner may still be running, left alone
  std::string reason;
};

// The name a target is published under ("db/" is "db").
std::filesystem::path publicationTarget(std::filesystem::path target);

// The temporary directory ".<name>.tmp-<pid>" that a build of `target` by this process uses,
// next to it: the name cleanupLeftovers recognizes.
std::filesystem::path temporaryDirectoryFor(const std::filesystem::path& target);

// A build's temporary directory while this process writes it: registered as live in this
// process (cleanupLeftovers leaves it alone), with an OWNER file saying which process on which
// host and boot owns it (later runs tell a live owner from a dead one). claim() is false when
// this process already builds there; release() forgets it (the directory stays).
bool claimBuildDirectory(const std::filesystem::path& dir);
void writeBuildOwner(const std::filesystem::path& dir);  // throws PublishError
void removeBuildOwner(const std::filesystem::path& dir);
void releaseBuildDirectory(const std::filesystem::path& dir);

// Puts a fully written directory `staging` (a sibling of `target`) in place of `target` in one
// atomic step and syncs the parent directory: a new name appears complete or not at all; an
// existing `target` is exchanged with it (RENAME_EXCHANGE; on file systems without it, two renames
// via ".<name>.old-<pid>") and removed. Callers decide beforehand whether replacing is allowed.
// `step` hears "exchanged" (crash tests). Throws PublishError naming `target`.
void publishDirectory(const std::filesystem::path& staging, const std::filesystem::path& target,
                      const std::function<void(std::string_view)>& step = {});

// Cleans up what interrupted builds of `target` left behind: ".<name>.tmp-<pid>" directories
// (databases) and ".<name>.tmp-<pid>-XXXXXX" ones (csp-gen's staged measurement directories)
// whose process is dead on this host are removed, others reported; a ".<name>.old-<pid>" of a
// dead process is restored as `target` when that is missing, else removed. Called by
// DatabaseBuilder and csp::cli::StagedDirectory; public for tools that want to report without
// building.
std::vector<LeftoverReport> cleanupLeftovers(const std::filesystem::path& target);

}  // namespace csp::storage
