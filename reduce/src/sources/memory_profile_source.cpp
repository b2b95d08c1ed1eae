// Memory-access profiles (*.cspmem): the per-thread text files of csp-mem, the Valgrind tool of
// csp-run --memory (docs/memory-profiles.md, docs/profile-format.md). Symbolic frames: the tool
// names every routine itself. Each file becomes one ThreadProfile whose metrics are counts:
// exclusive instructions, activations and their summed cost and input sizes per calling
// context, the per-size-bin histograms of the cost functions and the thread's footprint windows
// (metric names in csp/metrics/memory_metrics.hpp).
#include <algorithm>
#include <array>
#include <charconv>
#include <fstream>
#include <map>
#include <string_view>
#include <system_error>
#include <tuple>
#include <unordered_map>

#include <fmt/format.h>

#include "csp/metrics/memory_metrics.hpp"
#include "csp/reduce/profile_source.hpp"
#include "csp/storage/profile_io.hpp"

namespace csp::reduce {

namespace {

namespace fs = std::filesystem;
namespace mm = csp::metrics::memory;

constexpr const char* kExtension = ".cspmem";

struct ToolFrame {
  std::string name, object, file;
  std::uint32_t line = 0;
};

struct NodeStat {
  std::uint64_t calls = 0, cost = 0, trms = 0, rms = 0, fromThreads = 0, fromKernel = 0, time = 0;
};

struct Bin {
  std::uint32_t node = 0, bin = 0;
  mm::SizeKind kind = mm::SizeKind::Trms;
  std::uint64_t calls = 0, cost = 0, max = 0, time = 0, timeMax = 0;
};

// The file as written, before it becomes a profile.
struct MemFile {
  std::map<std::string, std::string> header;
  std::vector<std::string> args;
  std::unordered_map<std::uint32_t, ToolFrame> frames;
  std::vector<std::uint32_t> parent{kNoIndex}, frame{kNoIndex};  // node 0 is the root
  std::vector<std::string> siteFile{""};                         // the call site of each node
  std::vector<std::uint32_t> siteLine{0};
  std::vector<NodeStat> stats{NodeStat{}};
  std::vector<Bin> bins;
  std::vector<std::uint64_t> footprint;               // precision, block, accesses, blocks; empty if none
  std::vector<std::array<std::uint64_t, 3>> windows;  // length bin, footprint bin, count
  std::vector<std::uint64_t> interleave;              // precision, accesses of each thread; empty if none
  std::vector<std::array<std::uint64_t, 3>> degrees;  // length bin, interleaving bin, count
  bool ended = false;
};

std::vector<std::string_view> splitTabs(std::string_view line) {
  std::vector<std::string_view> fields;
  for (std::size_t start = 0;;) {
    const auto tab = line.find('\t', start);
    fields.push_back(line.substr(start, tab == std::string_view::npos ? std::string_view::npos : tab - start));
    if (tab == std::string_view::npos) return fields;
    start = tab + 1;
  }
}

class Parser {
 public:
  Parser(const fs::path& file) : file_(file.string()) {}

  MemFile parse() {
    std::ifstream in(file_);
    if (!in) throw storage::ProfileError(file_, "cannot open");
    std::string line;
    while (std::getline(in, line)) {
      ++lineNo_;
      if (out_.ended) fail("text after the end line");
      parseLine(splitTabs(line));
    }
    const bool empty = lineNo_ == 0;
    lineNo_ = 0;  // what follows is about the whole file
    if (empty || (out_.header["cspmem"] != "1" && out_.header["cspmem"] != "2"))
      fail("not a csp-mem profile of format 1 or 2");
    if (!out_.ended) fail("truncated: no end line");
    return std::move(out_);
  }

 private:
  [[noreturn]] void fail(const std::string& defect) const {
    throw storage::ProfileError(file_, lineNo_ ? fmt::format("line {}: {}", lineNo_, defect) : defect);
  }

  std::uint64_t number(std::string_view s) const {
    std::uint64_t v = 0;
    const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
    if (ec != std::errc{} || end != s.data() + s.size()) fail(fmt::format("'{}' is not a number", s));
    return v;
  }
  std::uint32_t node(std::string_view s) const {
    const auto n = number(s);
    if (n == 0 || n >= out_.parent.size()) fail(fmt::format("node {} is not defined before", s));
    return static_cast<std::uint32_t>(n);
  }
  void need(const std::vector<std::string_view>& f, std::size_t n) const {
    if (f.size() != n) fail(fmt::format("'{}' line has {} fields, expected {}", f[0], f.size(), n));
  }

  void parseLine(const std::vector<std::string_view>& f) {
    const std::string_view kind = f[0];
    if (lineNo_ == 1 && kind != "cspmem") fail("not a csp-mem profile (no cspmem line)");
    if (kind == "frame") return parseFrame(f);
    if (kind == "node") return parseNode(f);
    if (kind == "stat") return parseStat(f);
    if (kind == "bin") return parseBin(f);
    if (kind == "windows") {
      need(f, 4);
      if (out_.footprint.empty()) fail("windows before the footprint line");
      out_.windows.push_back({number(f[1]), number(f[2]), number(f[3])});
      if (out_.windows.back()[0] >= 496 || out_.windows.back()[1] >= 496) fail("histogram bin out of range");
      return;
    }
    if (kind == "degree") {
      need(f, 4);
      if (out_.interleave.empty()) fail("degree before the interleave line");
      out_.degrees.push_back({number(f[1]), number(f[2]), number(f[3])});
      if (out_.degrees.back()[0] >= 496 || out_.degrees.back()[1] >= 496) fail("histogram bin out of range");
      return;
    }
    if (kind == "interleave") {
      need(f, 4);
      for (int i = 1; i < 4; ++i) out_.interleave.push_back(number(f[i]));
      return;
    }
    if (kind == "footprint") {
      need(f, 5);
      for (int i = 1; i < 5; ++i) out_.footprint.push_back(number(f[i]));
      return;
    }
    if (kind == "cspmem") {
      need(f, 2);
      version_ = f[1] == "1" ? 1 : 2;  // format 2 adds the time fields to stat and bin lines
    }
    if (kind == "arg") return out_.args.emplace_back(f.size() > 1 ? f[1] : std::string_view{}), void();
    if (kind == "end") return need(f, 1), void(out_.ended = true);
    need(f, 2);
    out_.header[std::string(kind)] = std::string(f[1]);
  }

  void parseFrame(const std::vector<std::string_view>& f) {
    need(f, 6);
    out_.frames[static_cast<std::uint32_t>(number(f[1]))] =
        ToolFrame{std::string(f[2]), std::string(f[3]), std::string(f[4]), static_cast<std::uint32_t>(number(f[5]))};
  }
  void parseNode(const std::vector<std::string_view>& f) {
    need(f, 6);
    if (number(f[1]) != out_.parent.size()) fail("nodes are not numbered in order");
    const auto p = number(f[2]);
    if (p >= out_.parent.size()) fail(fmt::format("parent {} is not defined before", p));
    const auto fr = static_cast<std::uint32_t>(number(f[3]));
    if (!out_.frames.contains(fr)) fail(fmt::format("frame {} is not defined", fr));
    out_.parent.push_back(static_cast<std::uint32_t>(p));
    out_.frame.push_back(fr);
    out_.siteFile.emplace_back(f[4]);
    out_.siteLine.push_back(static_cast<std::uint32_t>(number(f[5])));
    out_.stats.emplace_back();
  }
  void parseStat(const std::vector<std::string_view>& f) {
    need(f, version_ == 1 ? 8 : 9);
    auto& s = out_.stats[node(f[1])];
    s = {number(f[2]), number(f[3]), number(f[4]), number(f[5]), number(f[6]), number(f[7]), 0};
    if (version_ > 1) s.time = number(f[8]);
  }
  void parseBin(const std::vector<std::string_view>& f) {
    need(f, version_ == 1 ? 7 : 9);
    Bin b;
    b.node = node(f[1]);
    if (f[2] != "trms" && f[2] != "rms") fail(fmt::format("size kind '{}' is neither trms nor rms", f[2]));
    b.kind = f[2] == "trms" ? mm::SizeKind::Trms : mm::SizeKind::Rms;
    b.bin = static_cast<std::uint32_t>(number(f[3]));
    if (b.bin >= 496) fail("histogram bin out of range");
    b.calls = number(f[4]);
    b.cost = number(f[5]);
    b.max = number(f[6]);
    if (version_ > 1) b.time = number(f[7]), b.timeMax = number(f[8]);
    out_.bins.push_back(b);
  }

  std::string file_;
  std::size_t lineNo_ = 0;
  int version_ = 2;
  MemFile out_;
};

// Builds the profile: metrics by name, strings interned, values sorted.
class Builder {
 public:
  ThreadProfile build(const MemFile& m, const std::string& file) {
    identity(m, file);
    p_.frameKind = FrameKind::Symbolic;
    p_.strings.emplace_back();
    cct(m);
    nodeValues(m);
    for (const auto& b : m.bins) binValues(b);
    footprint(m);
    sortValues();
    return std::move(p_);
  }

 private:
  std::uint32_t str(const std::string& s) {
    const auto [it, added] = strings_.try_emplace(s, static_cast<std::uint32_t>(p_.strings.size()));
    if (added) p_.strings.push_back(s);
    return it->second;
  }
  std::uint16_t metric(const std::string& name, const char* unit, const char* description) {
    const auto [it, added] = metrics_.try_emplace(name, static_cast<std::uint16_t>(p_.metrics.size()));
    if (added) {
      if (p_.metrics.size() >= 65535) throw std::length_error("too many metrics");
      p_.metrics.push_back({name, unit, MetricKind::Counted, 1, description});
    }
    return it->second;
  }
  void value(std::uint32_t node, std::uint16_t m, std::uint64_t v) {
    if (v != 0) values_.push_back({node, m, v});
  }

  void identity(const MemFile& m, const std::string& file) {
    auto header = [&](const char* key) {
      const auto it = m.header.find(key);
      return it == m.header.end() ? std::string() : it->second;
    };
    auto numberOf = [&](const char* key) -> std::uint64_t {
      const auto s = header(key);
      std::uint64_t v = 0;
      const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
      if (s.empty() || ec != std::errc{} || end != s.data() + s.size())
        throw storage::ProfileError(file, fmt::format("header '{}' is missing or no number", key));
      return v;
    };
    auto& id = p_.identity;
    const auto rank = header("rank");
    if (rank.empty() || rank == "-")
      id.idTuple.push_back({IdKind::Process, 0});
    else
      id.idTuple.push_back({IdKind::Rank, numberOf("rank")});
    id.idTuple.push_back({IdKind::Thread, numberOf("thread")});
    id.pid = static_cast<std::uint32_t>(numberOf("pid"));
    id.executable = header("executable");
    id.commandLine.push_back(id.executable);
    id.commandLine.insert(id.commandLine.end(), m.args.begin(), m.args.end());
    id.settings.push_back({"measurer", "csp-mem"});
    id.settings.push_back({"cell-bytes", header("cell")});
    id.settings.push_back({"instructions", header("instructions")});
    if (!header("time").empty()) id.settings.push_back({"activation-time", header("time")});
    if (!header("routines").empty()) id.settings.push_back({"routines", header("routines")});
    if (m.footprint.size() == 4) {
      id.settings.push_back({"footprint-precision-percent", std::to_string(m.footprint[0])});
      id.settings.push_back({"footprint-block-bytes", std::to_string(m.footprint[1])});
      id.settings.push_back({"footprint-accesses", std::to_string(m.footprint[2])});
      id.settings.push_back({"footprint-blocks", std::to_string(m.footprint[3])});
    }
    if (m.interleave.size() == 3) {
      id.settings.push_back({"interleaving-accesses-main", std::to_string(m.interleave[1])});
      id.settings.push_back({"interleaving-accesses-second", std::to_string(m.interleave[2])});
    }
  }

  // Symbolic profiles hold typed paths (docs/design.md, "Data model"): a routine is a procedure
  // frame, reached from its caller's through a call site, and its values lie on a statement
  // child (its entry line).
  std::uint32_t addNode(std::uint32_t parent, SymbolicFrame frame) {
    const auto [it, added] = frameIndex_.try_emplace(frame, static_cast<std::uint32_t>(p_.symbolicFrames.size()));
    if (added) p_.symbolicFrames.push_back(frame);
    p_.cct.parent.push_back(parent);
    p_.cct.frame.push_back(it->second);
    return static_cast<std::uint32_t>(p_.cct.parent.size() - 1);
  }

  void cct(const MemFile& m) {
    p_.cct.parent = {kNoIndex};
    p_.cct.frame = {kNoIndex};
    auto& proc = proc_;
    proc.assign(m.parent.size(), 0);
    stmt_.assign(m.parent.size(), 0);
    for (std::size_t i = 1; i < m.parent.size(); ++i) {
      const auto& f = m.frames.at(m.frame[i]);
      std::uint32_t under = 0;
      if (m.parent[i] != 0)
        under = addNode(proc[m.parent[i]], {ScopeKind::CallSite, 0, str(m.siteFile[i]), m.siteLine[i], 0});
      proc[i] = addNode(under, {ScopeKind::ProcFrame, str(f.name.empty() ? "[unnamed]" : f.name), str(f.file), f.line,
                                str(f.object)});
      stmt_[i] = addNode(proc[i], {ScopeKind::Stmt, 0, str(f.file), f.line, 0});
    }
  }

  // Exclusive instructions: an activation's cost less its callees', which it contains.
  void nodeValues(const MemFile& m) {
    std::vector<std::uint64_t> callees(m.parent.size(), 0);
    for (std::size_t i = 1; i < m.parent.size(); ++i) callees[m.parent[i]] += m.stats[i].cost;
    for (std::uint32_t n = 1; n < m.parent.size(); ++n) {
      const auto& s = m.stats[n];
      const auto i = stmt_[n];
      value(i, metric(mm::kInstructions, "instructions", "guest instructions executed in the routine itself"),
            s.cost > callees[n] ? s.cost - callees[n] : 0);
      value(i, metric(mm::kCalls, "calls", "routine activations"), s.calls);
      value(i, metric(mm::kCost, "instructions", "inclusive instructions of the activations, summed"), s.cost);
      value(i, metric(mm::kTrms, "cells", "threaded read memory size of the activations, summed"), s.trms);
      value(i, metric(mm::kRms, "cells", "read memory size of the activations, summed"), s.rms);
      value(i, metric(mm::kInducedThread, "cells", "induced first reads of cells written by other threads"),
            s.fromThreads);
      value(i, metric(mm::kInducedKernel, "cells", "induced first reads of cells written by the kernel (input)"),
            s.fromKernel);
      value(i, metric(mm::kTime, "ns", "inclusive thread CPU time of the activations under the tool, summed"), s.time);
    }
  }

  void binValues(const Bin& b) {
    const auto node = addNode(proc_[b.node], {ScopeKind::Stmt, 0, str(mm::binFile(b.kind)), b.bin, 0});
    value(node, metric(mm::kSizeCalls, "calls", "activations of this input size"), b.calls);
    value(node, metric(mm::kSizeCost, "instructions", "their cost, summed"), b.cost);
    value(node, metric(mm::kSizeMax, "instructions", "their largest cost (read the max statistic)"), b.max);
    value(node, metric(mm::kSizeTime, "ns", "their thread CPU time, summed"), b.time);
    value(node, metric(mm::kSizeTimeMax, "ns", "their largest thread CPU time (read the max statistic)"), b.timeMax);
  }

  // A 2-D window histogram: frame > a loop per length bin > a statement per value bin.
  void windowHistogram(const std::vector<std::array<std::uint64_t, 3>>& cells, const char* frame, const char* valueFile,
                       const char* metricName, const char* description) {
    if (cells.empty()) return;
    const auto proc = addNode(0, {ScopeKind::ProcFrame, str(frame), 0, 0, 0});
    std::map<std::uint64_t, std::uint32_t> lengthNode;
    for (const auto& [l, v, count] : cells) {
      const auto [it, added] = lengthNode.try_emplace(l, 0);
      if (added)
        it->second = addNode(proc, {ScopeKind::Loop, 0, str(mm::kLengthBinFile), static_cast<std::uint32_t>(l), 0});
      const auto node = addNode(it->second, {ScopeKind::Stmt, 0, str(valueFile), static_cast<std::uint32_t>(v), 0});
      value(node, metric(metricName, "windows", description), count);
    }
  }

  void footprint(const MemFile& m) {
    windowHistogram(m.windows, mm::kFootprintFrame, mm::kFootprintBinFile, mm::kWindows,
                    "windows of this length bin with this footprint bin");
    windowHistogram(m.degrees, mm::kInterleavingFrame, mm::kDegreeBinFile, mm::kDegreeWindows,
                    "windows of this length bin with this interleaving bin");
  }

  void sortValues() {
    std::sort(values_.begin(), values_.end(),
              [](const auto& a, const auto& b) { return std::tie(a.node, a.metric) < std::tie(b.node, b.metric); });
    for (const auto& v : values_) {
      p_.values.node.push_back(v.node);
      p_.values.metric.push_back(v.metric);
      p_.values.count.push_back(v.count);
    }
  }

  struct Value {
    std::uint32_t node;
    std::uint16_t metric;
    std::uint64_t count;
  };
  ThreadProfile p_;
  std::map<SymbolicFrame, std::uint32_t> frameIndex_;
  std::vector<std::uint32_t> proc_;  // tool node -> its procedure frame node
  std::vector<std::uint32_t> stmt_;  // tool node -> the statement node of its entry line
  std::unordered_map<std::string, std::uint32_t> strings_;
  std::unordered_map<std::string, std::uint16_t> metrics_;
  std::vector<Value> values_;
};

class MemoryProfileSource final : public ProfileSource {
 public:
  SourceProvides provides() const override { return {.symbolicFrames = true}; }
  std::string pattern() const override { return std::string("*") + kExtension; }
  bool isProfile(const fs::path& file) const override { return file.extension() == kExtension; }
  std::uint64_t bytes(const fs::path& entry) const override {
    std::error_code ec;
    const auto n = fs::file_size(entry, ec);
    return ec ? 0 : n;
  }
  std::vector<std::string> list(const fs::path& directory) const override {
    std::vector<std::string> files;
    std::error_code ec;
    const auto entries = storage::directoryEntries(directory, ec);
    if (ec) throw storage::ProfileError(directory.string(), "cannot list: " + ec.message());
    for (const auto& e : entries)
      if (storage::hasExtension(e.name, kExtension)) files.push_back((directory / e.name).string());
    std::sort(files.begin(), files.end());
    return files;
  }
  ThreadProfile read(const fs::path& entry) const override {
    const MemFile m = Parser(entry).parse();
    return Builder().build(m, entry.string());
  }
  // The tool writes NAME.cspmem.tmp and renames it when complete.
  std::vector<std::string> unfinished(const fs::path& directory) const override {
    std::vector<std::string> found;
    std::error_code ec;
    for (const auto& e : storage::directoryEntries(directory, ec))
      if (e.name.ends_with(std::string(kExtension) + ".tmp")) found.push_back((directory / e.name).string());
    std::sort(found.begin(), found.end());
    return found;
  }
  std::string workMetric() const override { return mm::kInstructions; }
};

}  // namespace

std::shared_ptr<const ProfileSource> memoryProfileSource() { return std::make_shared<const MemoryProfileSource>(); }

}  // namespace csp::reduce
