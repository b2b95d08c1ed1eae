#include "csp/storage/profile_builder.hpp"

#include <algorithm>
#include <stdexcept>

namespace csp::storage {

ProfileBuilder::ProfileBuilder(FrameKind kind) {
  profile_.frameKind = kind;
  profile_.cct.parent.push_back(kNoIndex);
  profile_.cct.frame.push_back(kNoIndex);
  intern("");
}

std::uint32_t ProfileBuilder::intern(std::string_view text) {
  auto [it, inserted] = strings_.try_emplace(std::string(text), static_cast<std::uint32_t>(profile_.strings.size()));
  if (inserted) profile_.strings.emplace_back(text);
  return it->second;
}

std::uint32_t ProfileBuilder::frame(const SymbolicFrame& f) {
  if (profile_.frameKind != FrameKind::Symbolic) throw std::logic_error("symbolic frame in an address profile");
  auto [it, inserted] = symbolicFrames_.try_emplace(f, static_cast<std::uint32_t>(profile_.symbolicFrames.size()));
  if (inserted) profile_.symbolicFrames.push_back(f);
  return it->second;
}

std::uint32_t ProfileBuilder::frame(const AddressFrame& f) {
  if (profile_.frameKind != FrameKind::Address) throw std::logic_error("address frame in a symbolic profile");
  auto [it, inserted] = addressFrames_.try_emplace(f, static_cast<std::uint32_t>(profile_.addressFrames.size()));
  if (inserted) profile_.addressFrames.push_back(f);
  return it->second;
}

std::uint32_t ProfileBuilder::addMetric(MetricDescriptor metric) {
  profile_.metrics.push_back(std::move(metric));
  return static_cast<std::uint32_t>(profile_.metrics.size() - 1);
}

std::uint32_t ProfileBuilder::child(std::uint32_t parent, std::uint32_t frame) {
  auto [it, inserted] = edges_.try_emplace(edgeKey(parent, frame), static_cast<std::uint32_t>(profile_.cct.size()));
  if (inserted) {
    profile_.cct.parent.push_back(parent);
    profile_.cct.frame.push_back(frame);
  }
  return it->second;
}

std::uint32_t ProfileBuilder::path(std::span<const std::uint32_t> frames) {
  std::uint32_t node = 0;
  for (auto f : frames) node = child(node, f);
  return node;
}

void ProfileBuilder::addCount(std::uint32_t node, std::uint16_t metric, std::uint64_t count) {
  if (count == 0) return;
  auto& sum = counts_[(std::uint64_t{node} << 16) | metric];
  if (__builtin_add_overflow(sum, count, &sum))
    throw std::overflow_error("the counts of this path add up beyond 2^64 - 1");
}

ThreadProfile ProfileBuilder::finish() {
  std::vector<std::pair<std::uint64_t, std::uint64_t>> sorted(counts_.begin(), counts_.end());
  std::sort(sorted.begin(), sorted.end());
  auto& v = profile_.values;
  v.node.clear();
  v.metric.clear();
  v.count.clear();
  std::uint64_t samples = profile_.stats.droppedSamples;
  for (const auto& [key, count] : sorted) {
    const auto metric = static_cast<std::uint16_t>(key & 0xFFFF);
    v.node.push_back(static_cast<std::uint32_t>(key >> 16));
    v.metric.push_back(metric);
    v.count.push_back(count);
    if (metric < profile_.metrics.size() && profile_.metrics[metric].kind == MetricKind::Sampled &&
        __builtin_add_overflow(samples, count, &samples))
      throw std::overflow_error("the sampled counts add up to more than 2^64 - 1 samples");
  }
  profile_.stats.samples = samples;
  return std::move(profile_);
}

}  // namespace csp::storage
