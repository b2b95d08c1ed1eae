// Incremental construction of a ThreadProfile: interns strings and frames, inserts call paths
// into the raw CCT, and accumulates sparse counts. Used by csp-gen and by tests; the
// measurement library builds its CCT signal-safely and converts at thread exit.
#pragma once

#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>

#include "csp/storage/profile.hpp"

namespace csp::storage {

class ProfileBuilder {
 public:
  explicit ProfileBuilder(FrameKind kind);

  ThreadProfile& profile() { return profile_; }

  std::uint32_t intern(std::string_view text);
  std::uint32_t frame(const SymbolicFrame& frame);
  std::uint32_t frame(const AddressFrame& frame);
  std::uint32_t addMetric(MetricDescriptor metric);

  // The child of `parent` with this frame, created if absent.
  std::uint32_t child(std::uint32_t parent, std::uint32_t frame);
  // Follows (creating as needed) a path of frame ids from the root; returns the last node.
  std::uint32_t path(std::span<const std::uint32_t> frames);

  // Counts of one node and metric add up; std::overflow_error if they exceed 2^64 - 1.
  void addCount(std::uint32_t node, std::uint16_t metric, std::uint64_t count);

  // Sorts and packs the values, fills stats.samples for sampled metrics (plus
  // `droppedSamples` already set), and returns the profile. The builder is spent afterwards.
  // std::overflow_error if the samples exceed 2^64 - 1.
  ThreadProfile finish();

 private:
  static std::uint64_t edgeKey(std::uint32_t parent, std::uint32_t frame) {
    return (std::uint64_t{parent} << 32) | frame;
  }
  ThreadProfile profile_;
  std::unordered_map<std::string, std::uint32_t> strings_;
  std::map<SymbolicFrame, std::uint32_t> symbolicFrames_;
  std::map<AddressFrame, std::uint32_t> addressFrames_;
  std::unordered_map<std::uint64_t, std::uint32_t> edges_;
  std::unordered_map<std::uint64_t, std::uint64_t> counts_;  // (node << 16 | metric) -> count
};

}  // namespace csp::storage
