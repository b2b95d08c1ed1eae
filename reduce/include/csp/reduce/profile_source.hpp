// Input formats as plug-ins (in the manner of hpcprof's sources): a ProfileSource recognises its
// profile files, lists those of a measurement directory, and reads one into the common
// ThreadProfile that the rest of the pipeline works on. Nothing keeps a global list of them:
// csp-prof-mpi's main() builds the list (cspProfileSource() and any other) and passes it in
// PipelineOptions::sources, which is also how a test passes a fake one.
//
// A source only reads. The pipeline validates every profile a source returns
// (storage::validateProfile) and checks it against what the source says it provides, so a
// source need not repeat the structural checks. Where the pipeline needs something that only
// the format knows (where JIT symbols lie, what a half-written profile looks like, which metric
// measures a thread's work), it asks the source through the hooks below; their defaults suit a
// format that has no such thing.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "csp/storage/profile.hpp"

namespace csp::reduce {

// What a source's profiles may hold: a profile with something its source does not declare is
// rejected (a source's defect, reported like bad input). Later stages may specialise on it.
struct SourceProvides {
  bool addressFrames = false;   // frames as (load module, offset), attributed through the binaries
  bool symbolicFrames = false;  // frames already as scopes (procedure, file, line)
  bool realMetrics = false;     // real-valued metrics (ValueType::Real: seconds, bytes) beside counts
  bool regions = false;         // region trees and event logs
  bool pathStarts = false;      // marks of partial and placeholder path roots (RawCct::pathStart)
  bool gpuIdentities = false;   // GPU id kinds (IdKind::GpuContext, GpuStream)
};

class ProfileSource {
 public:
  virtual ~ProfileSource() = default;
  virtual SourceProvides provides() const = 0;
  // The file-name pattern of its profiles, for messages ("*.cspprof").
  virtual std::string pattern() const = 0;
  // Whether `file` names one of this format's profiles (by name only; nothing is opened).
  virtual bool isProfile(const std::filesystem::path& file) const = 0;
  // This format's profiles in a measurement directory, in the order that fixes profile ids
  // (sorted by name). Throws storage::ProfileError for an entry that cannot be listed. Strings,
  // not paths: a std::filesystem::path also keeps each of its components, which at 65,536
  // profiles is tens of megabytes while the list is built.
  virtual std::vector<std::string> list(const std::filesystem::path& directory) const = 0;
  // The file an entry of list() is in and where in it (a bundle file holds several profiles):
  // two entries at the same place of the same file are one profile given twice.
  virtual std::pair<std::filesystem::path, std::uint64_t> place(const std::filesystem::path& entry) const {
    return {entry, 0};
  }
  // Size of the entry's profile in bytes (it balances the work between ranks); 0 if unknown.
  virtual std::uint64_t bytes(const std::filesystem::path& entry) const;
  // What discovery needs of every entry: bytes(), and the file it is in (place()) as the device
  // and inode that tell one file reached by two paths. found: that file could be stat'ed (if not,
  // reading the entry reports why). By default place(), a stat and bytes(); a format whose size is
  // the file's takes both from one stat (at 65,536 profiles the second stat of every input cost
  // rank 0 0.16 s while the others waited).
  struct EntryFacts {
    std::uint64_t bytes = 0;
    std::uint64_t offset = 0;  // place(entry).second
    bool found = false;
    std::uint64_t device = 0, inode = 0;
  };
  virtual EntryFacts facts(const std::filesystem::path& entry) const;
  // Reads one profile. Throws storage::ProfileError (file and defect) for bad input, so that
  // --skip-invalid can record it. Called from several threads at once.
  virtual ThreadProfile read(const std::filesystem::path& entry) const = 0;

  // Hooks for what only the format knows.
  // The symbol map (perf-map text: "START SIZE NAME") of the code outside every module (JIT code)
  // of the profile's process; empty when the format keeps none.
  virtual std::filesystem::path jitSymbols(const std::filesystem::path& entry, const ThreadProfile& profile) const {
    return {};
  }
  // Files in a measurement directory that a measurement killed while writing left unfinished
  // (each a profile that is missing), sorted; they are reported, never read.
  virtual std::vector<std::string> unfinished(const std::filesystem::path& directory) const { return {}; }
  // The metric whose samples measure a thread's work, for the thread classes (thread_classes.hpp);
  // empty, or absent from a profile: the samples of all its count metrics.
  virtual std::string workMetric() const { return {}; }
};

using ProfileSources = std::vector<std::shared_ptr<const ProfileSource>>;

// CSP's own profiles (docs/profile-format.md): *.cspprof files and *.cspbundle bundles, written
// by csp-run and csp-gen.
std::shared_ptr<const ProfileSource> cspProfileSource();
// Memory-access profiles (*.cspmem) of csp-run --memory, written by the csp-mem Valgrind tool
// (docs/memory-profiles.md).
std::shared_ptr<const ProfileSource> memoryProfileSource();
// HPCToolkit's measurements: *.hpcrun files (format 4.0) written by hpcrun
// (docs/hpctoolkit-input.md).
std::shared_ptr<const ProfileSource> hpcrunProfileSource();
// What an hpcrun measurement directory holds that the hpcrun source does not read (traces, GPU
// binaries), for a note: "DIR: 4 trace files (*.hpctrace) ... are not read"; empty if nothing.
std::string hpcrunNotRead(const std::filesystem::path& directory);

// The source of `sources` whose profiles `file` is named like; nullptr if none.
const ProfileSource* sourceFor(const ProfileSources& sources, const std::filesystem::path& file);
// The sources' patterns, for messages: "*.cspprof, *.cspbundle" (joined with " or ").
std::string profilePatterns(const ProfileSources& sources);

}  // namespace csp::reduce
