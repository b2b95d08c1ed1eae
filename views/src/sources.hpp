// Reading helpers shared by the view sources.
#pragma once

#include <functional>

#include "model.hpp"

namespace csp::views::detail {

NodeKind kindOf(ScopeKind kind);

// A CCT node as a view node (labels resolved, no values yet).
ModelNode labelOf(const storage::Database& db, storage::NodeId id, const storage::CctNode& node);

// The selected metrics' accumulators of one node; absent ones as empty instances.
std::vector<Acc> nodeAccumulators(const storage::Database& db, const MetricSet& metrics, storage::NodeId id);

// One scan of the summary family: fn(node, slot, accumulator) for the selected metrics of nodes
// with wanted(node). Afterwards fn is called with an empty instance for every wanted
// (node, slot) that had no stored summary, so that instance counts include nodes whose values
// are all zero.
void scanSummaries(const storage::Database& db, const MetricSet& metrics, const std::vector<char>& wanted,
                   const std::function<void(storage::NodeId, std::size_t, const Acc&)>& fn);

}  // namespace csp::views::detail
