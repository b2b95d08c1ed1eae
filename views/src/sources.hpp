// Reading helpers shared by the view sources.
#pragma once

#include <functional>
#include <future>
#include <string>

#include "model.hpp"

namespace csp::views::detail {

NodeKind kindOf(ScopeKind kind);

// A CCT node as a view node (labels resolved, no values yet).
ModelNode labelOf(const storage::Database& db, storage::NodeId id, const storage::CctNode& node);

// The selected metrics' accumulators of one node; absent ones as empty instances.
std::vector<Acc> nodeAccumulators(const storage::Database& db, const MetricSet& metrics, storage::NodeId id);

// One scan of the summary family for the selected metrics, started on another thread so that it
// overlaps reading the CCT structure (the two scans are most of the cost of Flat and Callers on
// a large CCT). The encoded accumulators are kept raw until forEach().
class SummaryScan {
 public:
  SummaryScan(const storage::Database& db, const MetricSet& metrics);
  ~SummaryScan();
  SummaryScan(const SummaryScan&) = delete;
  SummaryScan& operator=(const SummaryScan&) = delete;

  // Waits for the scan (rethrowing its error), then calls fn(node, slot, accumulator) for the
  // nodes with wanted[node], and once more with an empty instance for every wanted (node, slot)
  // without a stored summary, so that instance counts include nodes whose values are all zero.
  void forEach(const std::vector<char>& wanted,
               const std::function<void(storage::NodeId, std::size_t, const Acc&)>& fn);

 private:
  struct Entry {
    storage::NodeId node;
    std::uint32_t slot;
    std::uint64_t accOffset;  // into bytes_
    std::uint32_t accSize;
    std::uint64_t histOffset;
    std::uint32_t histSize;
    bool hasHist;  // a distributions entry (its own histogram)
  };
  void run();
  const storage::Database& db_;
  MetricSet metrics_;
  std::vector<Entry> entries_;
  std::vector<Entry> histograms_;
  std::string bytes_;
  std::future<void> done_;
};

}  // namespace csp::views::detail
