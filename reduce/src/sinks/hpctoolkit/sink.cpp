// csp-prof-mpi's HPCToolkit output (hpctoolkit_export.hpp, hpctoolkitSink): the export of the
// CSP database the sink before it published, inside runProf's failure discipline.
#include <fmt/format.h>

#include <filesystem>
#include <utility>

#include "csp/reduce/hpctoolkit_export.hpp"
#include "export.hpp"

namespace csp::reduce {

namespace {

namespace fs = std::filesystem;

class HpctoolkitSink final : public OutputSink {
 public:
  explicit HpctoolkitSink(HpctoolkitSinkOptions options) : options_(std::move(options)) {}

  // The staging directory is created only at publish(): the signal handlers of the launchers
  // remove one temporary directory at a time, the database sink's until then.
  void open(const Comm& comm) override {
    if (comm.rank() != 0) return;
    const auto& o = options_.output;
    if (const auto why = hpctoolkitOutputProblem(o.output, o.force); !why.empty()) throw HpctoolkitExportError(why);
    if (fs::weakly_canonical(o.output) == fs::weakly_canonical(o.database))
      throw HpctoolkitExportError(
          fmt::format("{}: the HPCToolkit database cannot be the CSP database's directory", o.output.string()));
  }
  void begin(const Comm&, Pipeline&) override {}
  void write(std::size_t, std::span<const ProfileInfo>, const std::vector<ThreadValues>&,
             const std::vector<RegionValues>&) override {}
  void finish(const Comm&, Pipeline&, ProfSummary&) override {}

  void publish(const Comm& comm, ProfSummary& summary) override {
    const auto s = hpctk::writeExport(comm, options_.output, staging_);
    summary.phases.push_back({"hpctoolkit", s.seconds});
    if (options_.onWritten) options_.onWritten(s);
  }
  void abandon() noexcept override { staging_.reset(); }

 private:
  HpctoolkitSinkOptions options_;
  hpctk::StagingPtr staging_;  // root; lives until every rank has stopped writing into it
};

}  // namespace

std::shared_ptr<OutputSink> hpctoolkitSink(HpctoolkitSinkOptions options) {
  return std::make_shared<HpctoolkitSink>(std::move(options));
}

}  // namespace csp::reduce
