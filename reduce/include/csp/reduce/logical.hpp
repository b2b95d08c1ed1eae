// OpenMP logical call paths (thesis ch. 4; docs/postprocessing.md, "Logical call paths"): the raw
// CCT of a profile with logical context markers rewritten so that every sample taken in the body of
// a parallel region or task hangs below the context that created it.
#pragma once

#include "csp/storage/profile.hpp"

namespace csp::reduce {

// Whether the profile holds markers of logical contexts (profile format 1.2).
bool hasLogicalMarkers(const ThreadProfile& profile);

// The profile with its raw CCT (and values) rewritten. Logical: below a marker, the runtime's
// frames that lead to the body (and those before it on the thread's stack) fold into one frame of
// the pseudo module kOmpRuntimeName, placed below the creator's logical path (the creator's
// context's path, [omp runtime], the creator's frames); a worker's samples in the pool go below a
// root-level [omp runtime]. Physical: the markers are dropped and the paths are the native ones.
// Values keep their counts; only the nodes they sit on change.
ThreadProfile stitchLogicalPaths(const ThreadProfile& profile, bool logical);

}  // namespace csp::reduce
