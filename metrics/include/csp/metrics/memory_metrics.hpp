// Names in memory-access profiles (csp-run --memory, docs/memory-profiles.md), shared by the
// source that makes them (reduce/src/sources/memory_profile_source.cpp) and the analyses that
// read them back (analysis/src/memory.cpp).
//
// The dimensions of the 2-D histograms are calling-context nodes, not metrics: a routine's
// input-size bins are statement children of its procedure frame (file "[trms bin]" or
// "[rms bin]", line = the LogLinearHistogram bin), and a thread's footprint windows are loop
// nodes per window-length bin holding statements per footprint bin. The database keeps every
// (node, metric) densely, so a few metrics over sparse nodes reduce where a metric per bin would
// not; and they reduce like every other metric: counts and sums add, and the max statistic of a
// per-thread maximum is the maximum over all threads and ranks.
#pragma once

#include <cstdint>

namespace csp::metrics::memory {

// At the statement of a routine's entry line.
inline constexpr const char* kInstructions = "mem-instructions";     // exclusive guest instructions
inline constexpr const char* kCalls = "mem-calls";                   // routine activations
inline constexpr const char* kCost = "mem-cost";                     // their inclusive instructions, summed
inline constexpr const char* kTrms = "mem-trms";                     // their TRMS, summed
inline constexpr const char* kRms = "mem-rms";                       // their RMS, summed
inline constexpr const char* kInducedThread = "mem-induced-thread";  // induced first reads: other threads
inline constexpr const char* kInducedKernel = "mem-induced-kernel";  // induced first reads: the kernel
inline constexpr const char* kTime = "mem-time";  // their inclusive thread CPU time under the tool (ns), summed

// At a size-bin statement: the activations whose input size falls in the bin.
inline constexpr const char* kSizeCalls = "mem-size-calls";
inline constexpr const char* kSizeCost = "mem-size-cost";         // summed
inline constexpr const char* kSizeMax = "mem-size-max";           // the largest cost (read its max statistic)
inline constexpr const char* kSizeTime = "mem-size-time";         // their thread CPU time (ns), summed
inline constexpr const char* kSizeTimeMax = "mem-size-time-max";  // the largest (read its max statistic)
inline constexpr const char* kTrmsBinFile = "[trms bin]";
inline constexpr const char* kRmsBinFile = "[rms bin]";

// The thread's footprint: procedure frame kFootprintFrame > loop (file kLengthBinFile, line =
// window-length bin) > statement (file kFootprintBinFile, line = footprint bin) with kWindows.
inline constexpr const char* kFootprintFrame = "[footprint]";
inline constexpr const char* kLengthBinFile = "[window length bin]";
inline constexpr const char* kFootprintBinFile = "[footprint bin]";
inline constexpr const char* kWindows = "footprint-windows";

// The interleaving of the main thread and the first thread it starts (in the main thread's
// profile): procedure frame kInterleavingFrame > loop (kLengthBinFile, line = window-length bin)
// > statement (kDegreeBinFile, line = bin of min(accesses of each thread)) with kDegreeWindows.
inline constexpr const char* kInterleavingFrame = "[interleaving]";
inline constexpr const char* kDegreeBinFile = "[interleaving bin]";
inline constexpr const char* kDegreeWindows = "interleaving-windows";

enum class SizeKind : std::uint8_t { Trms = 0, Rms = 1 };

inline const char* toString(SizeKind k) { return k == SizeKind::Trms ? "trms" : "rms"; }

// The cost of an activation: guest instructions (exact, deterministic) or thread CPU time.
enum class CostMetric : std::uint8_t { Instructions = 0, Time = 1 };
inline const char* toString(CostMetric c) { return c == CostMetric::Instructions ? "instructions" : "time"; }
inline const char* binFile(SizeKind k) { return k == SizeKind::Trms ? kTrmsBinFile : kRmsBinFile; }

}  // namespace csp::metrics::memory
