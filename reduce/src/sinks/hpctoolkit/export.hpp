// The steps of one export to HPCToolkit's format (export.cpp), shared by exportHpctoolkit
// (csp-export) and the output sink of csp-prof-mpi (sink.cpp), which differ only in how a failure
// is handled: the sink leaves that to runProf.
#pragma once

#include <memory>

#include "csp/reduce/hpctoolkit_export.hpp"

namespace csp::reduce::hpctk {

// The root's staging directory next to the output, removed when destroyed unless published.
class Staging;
struct StagingDeleter {
  void operator()(Staging* s) const noexcept;
};
using StagingPtr = std::unique_ptr<Staging, StagingDeleter>;

// Collective: the root checks the output and creates `staging`, every rank writes its parts of
// the files into it, the root publishes it. On an exception `staging` still owns what was
// written: destroy it once every rank has stopped writing.
HpctoolkitExportSummary writeExport(const Comm& comm, const HpctoolkitExportOptions& options, StagingPtr& staging);

}  // namespace csp::reduce::hpctk
