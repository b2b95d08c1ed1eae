// Synthetic measurement directories: deterministic per-thread profiles with symbolic frames,
// shaped like SPMD codes (a few groups of call paths, per-rank imbalance, hot paths), so that
// tests and benchmarks need no binaries.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>

#include "csp/storage/profile.hpp"

namespace csp::synth {

struct SyntheticOptions {
  std::uint32_t ranks = 4;
  std::uint32_t threads = 1;        // per rank
  std::uint32_t ranksPerNode = 64;  // node id in the id tuple = rank / ranksPerNode
  std::uint32_t nodes = 5000;       // CCT nodes of each group's call tree
  std::uint32_t depth = 16;         // maximum CCT depth
  std::uint32_t groups = 2;         // distinct call-path groups
  std::uint32_t metrics = 2;        // 1: cpu-time; 2: + real-time; more: counted events
  double imbalance = 0.25;          // rank r works (1 + imbalance * r/(ranks-1)) times as much
  std::uint32_t hotPaths = 3;       // statements that carry most of the samples
  double presence = 0.9;            // chance that a statement occurs in a given profile
  bool regions = false;             // add a small region tree to every profile
  std::uint64_t seed = 1;
  unsigned jobs = 0;  // writer threads; 0 = all cores
};

// The profile of one (rank, thread); deterministic in (options, rank, thread).
ThreadProfile makeSyntheticProfile(const SyntheticOptions& options, std::uint32_t rank, std::uint32_t thread);

struct GenerationSummary {
  std::uint64_t profiles = 0;
  std::uint64_t nodes = 0;   // raw CCT nodes over all profiles
  std::uint64_t values = 0;  // non-zero values over all profiles
  std::uint64_t bytes = 0;   // file bytes written
};

// Writes ranks x threads profiles into `dir` (which must exist). `progress(done, total)` is
// called from the calling thread only.
GenerationSummary writeSynthetic(const SyntheticOptions& options, const std::filesystem::path& dir,
                                 const std::function<void(std::uint64_t, std::uint64_t)>& progress = {});

}  // namespace csp::synth
