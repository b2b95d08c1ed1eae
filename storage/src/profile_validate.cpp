// Structural validation of a per-thread profile. Everything downstream (attribution, the CCT
// union, metric propagation) relies on these invariants instead of re-checking them.
#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <set>

#include "csp/storage/profile_io.hpp"

namespace csp::storage {

namespace {

__extension__ using Uint128 = unsigned __int128;

[[noreturn]] void fail(const std::string& name, std::string defect) { throw ProfileError(name, std::move(defect)); }

// Checks a parent column: node 0 is the root, every other parent precedes its child. A parent
// that does not precede its child is reported as a cycle when following parents from the node
// comes back to it.
void checkParents(const std::vector<std::uint32_t>& parent, const char* what, const std::string& name) {
  if (parent.empty()) fail(name, fmt::format("{} has no root node", what));
  if (parent[0] != kNoIndex) fail(name, fmt::format("{} node 0 must be the root (parent {})", what, parent[0]));
  const std::size_t n = parent.size();
  // Every parent precedes its child, in one branch-free pass (kNoIndex and parents beyond the
  // last node do not precede it either); only a column with a defect is walked again to name it.
  if (n <= kNoIndex) {
    std::uint32_t defects = 0;
    const std::uint32_t* column = parent.data();
    for (std::uint32_t i = 1; i < static_cast<std::uint32_t>(n); ++i) defects |= column[i] >= i ? 1U : 0U;
    if (defects == 0) return;
  }
  for (std::size_t i = 1; i < n; ++i) {
    const std::uint32_t p = parent[i];
    if (p == kNoIndex) fail(name, fmt::format("{} node {} has no parent (only node 0 may be a root)", what, i));
    if (p >= n) fail(name, fmt::format("{} node {} has parent {}, which does not exist ({} nodes)", what, i, p, n));
    if (p >= i) {
      std::uint32_t at = p;
      for (std::size_t steps = 0; steps <= n && at != kNoIndex && at < n; ++steps) {
        if (at == i) fail(name, fmt::format("{} has a cycle through node {} and its parent {}", what, i, p));
        at = parent[at];
      }
      fail(name, fmt::format("{} node {} has parent {}, which does not precede it", what, i, p));
    }
  }
}

void checkString(std::uint32_t id, std::size_t strings, const char* what, std::size_t frame, const std::string& name) {
  if (id >= strings)
    fail(name, fmt::format("symbolic frame {}: {} string id {} out of range ({} strings)", frame, what, id, strings));
}

// The unwind notes (docs/profile-format.md, "Frames found without unwind tables"): one per node
// of an address profile; the scanned words of a Stopped frame lie between it and the frame
// where unwinding resumed (or the root), and only frames that the unwind reached carry samples.
void checkUnwindNotes(const ThreadProfile& p, const std::string& name) {
  const auto& notes = p.cct.unwindNote;
  if (notes.empty()) return;
  if (p.frameKind != FrameKind::Address) fail(name, "unwind notes in a symbolic profile");
  if (notes.size() != p.cct.size())
    fail(name, fmt::format("CCT has {} nodes but {} unwind notes", p.cct.size(), notes.size()));
  if (notes[0] != 0) fail(name, "CCT root has an unwind note");
  auto kindOf = [&](std::uint32_t node) { return UnwindNote::decode(notes[node]).kind; };
  for (std::size_t i = 1; i < notes.size(); ++i) {
    const auto kind = kindOf(static_cast<std::uint32_t>(i));
    if (static_cast<std::uint8_t>(kind) > static_cast<std::uint8_t>(UnwindNoteKind::Resumed))
      fail(name, fmt::format("CCT node {}: unknown unwind note kind {}", i, static_cast<int>(kind)));
    if (kind != UnwindNoteKind::Stopped && kind != UnwindNoteKind::Candidate) continue;
    const auto parent = p.cct.parent[i];
    const auto above = parent == 0 ? UnwindNoteKind::Resumed : kindOf(parent);
    if (above != UnwindNoteKind::Candidate && above != UnwindNoteKind::Resumed)
      fail(name, fmt::format("CCT node {}: a {} frame below a frame that no stack scan found", i,
                             kind == UnwindNoteKind::Stopped ? "stopped" : "candidate"));
  }
  for (std::size_t i = 1; i < notes.size(); ++i) {
    const auto kind = kindOf(p.cct.parent[i]);
    if (kind == UnwindNoteKind::Candidate && kindOf(static_cast<std::uint32_t>(i)) != UnwindNoteKind::Candidate &&
        kindOf(static_cast<std::uint32_t>(i)) != UnwindNoteKind::Stopped)
      fail(name, fmt::format("CCT node {}: an unwound frame below a candidate frame", i));
  }
  for (auto node : p.values.node)
    if (node < notes.size() && (kindOf(node) == UnwindNoteKind::Candidate || kindOf(node) == UnwindNoteKind::Resumed))
      fail(name, fmt::format("CCT node {}: samples on a frame found by a stack scan", node));
}

// The typed-path rules of docs/design.md, "Data model" for symbolic profiles, which name scopes directly.
void checkSymbolicStructure(const ThreadProfile& p, const std::string& name) {
  const auto& parent = p.cct.parent;
  const std::size_t n = parent.size();
  std::vector<ScopeKind> scope(n, ScopeKind::Root);
  // The rules below as a table of which scope may lie below which, for one pass without a branch
  // per node; only a tree it refuses is walked again to name the defect. A node passing the rules
  // is inside a procedure frame, so "inside a procedure frame" means "not below the root".
  // Rows: the node's scope, columns: its parent's (ScopeKind's values, 6 and 7 unknown).
  static constexpr std::array<std::uint8_t, 64> kAllowed = [] {
    std::array<std::uint8_t, 64> a{};
    auto at = [](ScopeKind s, ScopeKind ps) { return static_cast<std::size_t>(s) * 8 + static_cast<std::size_t>(ps); };
    for (const ScopeKind ps : {ScopeKind::Root, ScopeKind::CallSite}) a[at(ScopeKind::ProcFrame, ps)] = 1;
    for (const ScopeKind s : {ScopeKind::Alien, ScopeKind::Loop, ScopeKind::CallSite, ScopeKind::Stmt})
      for (const ScopeKind ps : {ScopeKind::ProcFrame, ScopeKind::Alien, ScopeKind::Loop}) a[at(s, ps)] = 1;
    return a;
  }();
  std::uint32_t refused = 0;
  for (std::size_t i = 1; i < n; ++i) {
    const ScopeKind s = p.symbolicFrames[p.cct.frame[i]].scope;
    const ScopeKind ps = scope[parent[i]];
    scope[i] = s;
    refused |= kAllowed[(static_cast<std::size_t>(s) & 7) * 8 + (static_cast<std::size_t>(ps) & 7)] ^ 1U;
    refused |= static_cast<std::uint32_t>(s) >> 3;
  }
  std::vector<std::uint8_t> underProc(refused != 0 ? n : 0, 0);
  for (std::size_t i = 1; i < n && refused != 0; ++i) {  // `scope` is complete: the pass above filled it
    const ScopeKind s = scope[i];
    const ScopeKind ps = scope[parent[i]];
    if (ps == ScopeKind::Stmt) fail(name, fmt::format("CCT node {} lies below a statement (statements are leaves)", i));
    switch (s) {
      case ScopeKind::ProcFrame:
        if (ps != ScopeKind::Root && ps != ScopeKind::CallSite)
          fail(name, fmt::format("CCT node {}: a procedure frame must be an outermost frame or follow a call site "
                                 "(its parent is a {})",
                                 i, toString(ps)));
        underProc[i] = 1;
        break;
      case ScopeKind::CallSite:
      case ScopeKind::Stmt:
      case ScopeKind::Loop:
      case ScopeKind::Alien:
        if (underProc[parent[i]] == 0)
          fail(name, fmt::format("CCT node {}: a {} must lie inside a procedure frame", i, toString(s)));
        if (ps == ScopeKind::CallSite)
          fail(name, fmt::format("CCT node {}: a call site may only be followed by a procedure frame, not a {}", i,
                                 toString(s)));
        underProc[i] = 1;
        break;
      case ScopeKind::Root:
        fail(name, fmt::format("CCT node {} names a root frame", i));
    }
  }
  for (std::size_t v = 0; v < p.values.size(); ++v) {
    const auto node = p.values.node[v];
    if (scope[node] != ScopeKind::Stmt)
      fail(name, fmt::format("sample counts at CCT node {}, a {} (counts belong to statements)", node,
                             toString(scope[node])));
  }
}

void checkRegions(const RegionProfile& r, const std::string& name) {
  const std::size_t n = r.parent.size();
  if (n == 0 && r.staticId.empty() && r.dynamicId.empty() && r.count.empty() && r.inclusiveNs.empty() &&
      r.exclusiveNs.empty() && r.eventTimeNs.empty() && r.eventNode.empty() && r.eventIsEnter.empty())
    return;  // no regions recorded
  if (r.staticId.size() != n || r.dynamicId.size() != n || r.count.size() != n || r.inclusiveNs.size() != n ||
      r.exclusiveNs.size() != n)
    fail(name, "region tree columns have different lengths");
  checkParents(r.parent, "region tree", name);
  for (std::size_t i = 1; i < n; ++i) {
    if (r.staticId[i] >= r.names.size())
      fail(name,
           fmt::format("region node {} has static id {} but only {} region names", i, r.staticId[i], r.names.size()));
    if (r.exclusiveNs[i] > r.inclusiveNs[i])
      fail(name, fmt::format("region node {}: exclusive time {} ns exceeds inclusive time {} ns", i, r.exclusiveNs[i],
                             r.inclusiveNs[i]));
  }
  const std::size_t e = r.eventTimeNs.size();
  if (r.eventNode.size() != e || r.eventIsEnter.size() != e) fail(name, "region event columns have different lengths");
  if (r.eventAttr.size() != r.eventHasAttr.size() || (!r.eventAttr.empty() && r.eventAttr.size() != e))
    fail(name, "region event attribute columns do not match the event log");
  for (std::size_t i = 0; i < r.eventHasAttr.size(); ++i)
    if (r.eventHasAttr[i] && !r.eventIsEnter[i])
      fail(name, fmt::format("region event {} is an exit with an attribute", i));
  for (std::size_t i = 0; i < e; ++i) {
    if (r.eventNode[i] == 0 || r.eventNode[i] >= n)
      fail(name, fmt::format("region event {} refers to region node {} ({} nodes)", i, r.eventNode[i], n));
    if (i > 0 && r.eventTimeNs[i] < r.eventTimeNs[i - 1])
      fail(name, fmt::format("region event {} goes back in time ({} ns after {} ns)", i, r.eventTimeNs[i],
                             r.eventTimeNs[i - 1]));
  }
}

// Clocks across processes and communication events (docs/profile-format.md): the bounds must
// be intervals, the second exchange after the first, the event columns of one length.
void checkClockAndComm(const ThreadProfile& p, const std::string& name) {
  const ClockSync& c = p.clock;
  if (c.state == ClockState::Measured || c.state == ClockState::InitOnly) {
    if (c.initRefLoNs > c.initRefHiNs) fail(name, "clock bounds at MPI initialisation are not an interval");
    if (c.state == ClockState::Measured &&
        (c.finalRefLoNs > c.finalRefHiNs || c.finalLocalNs <= c.initLocalNs || c.finalRefLoNs < c.initRefHiNs))
      fail(name, "clock bounds at MPI finalisation are not an interval after those at initialisation");
  }
  const CommLog& m = p.commLog;
  const std::size_t n = m.kind.size();
  if (m.beginNs.size() != n || m.endNs.size() != n || m.peer.size() != n || m.tag.size() != n || m.comm.size() != n ||
      m.sequence.size() != n || m.region.size() != n || (!m.waitBeginNs.empty() && m.waitBeginNs.size() != n) ||
      (!m.op.empty() && m.op.size() != n))
    fail(name, "communication event columns have different lengths");
  for (std::size_t i = 0; i < n; ++i) {
    if (m.kind[i] < 1 || m.kind[i] > 4) fail(name, fmt::format("communication event {} has kind {}", i, m.kind[i]));
    if (m.endNs[i] < m.beginNs[i]) fail(name, fmt::format("communication event {} ends before it begins", i));
    if (!m.waitBeginNs.empty() && (m.waitBeginNs[i] < m.beginNs[i] || m.waitBeginNs[i] > m.endNs[i]))
      fail(name, fmt::format("communication event {} waits outside its own time", i));
    if (!m.op.empty() && m.op[i] >= kCollectiveOpCount)
      fail(name, fmt::format("communication event {} has collective {}", i, m.op[i]));
    if (m.region[i] != 0 && m.region[i] >= p.regions.size())
      fail(name, fmt::format("communication event {} refers to region node {}", i, m.region[i]));
  }
}

// Path starts (docs/profile-format.md, "Path starts"): marks of the root's children only; a
// placeholder stands for no code, so it is a procedure frame with a name.
void checkPathStarts(const ThreadProfile& p, const std::string& name) {
  const auto& starts = p.cct.pathStart;
  if (starts.empty()) return;
  if (starts.size() != p.cct.size())
    fail(name, fmt::format("CCT has {} nodes but {} path start marks", p.cct.size(), starts.size()));
  for (std::size_t i = 0; i < starts.size(); ++i) {
    if (starts[i] == PathStart::Unknown) continue;
    if (starts[i] > kLastPathStart)
      fail(name, fmt::format("CCT node {}: unknown path start {}", i, static_cast<int>(starts[i])));
    if (i == 0 || p.cct.parent[i] != 0)
      fail(name, fmt::format("CCT node {} has a path start mark but is no child of the root", i));
    if (starts[i] != PathStart::Placeholder) continue;
    if (p.frameKind != FrameKind::Symbolic || p.symbolicFrames[p.cct.frame[i]].scope != ScopeKind::ProcFrame)
      fail(name,
           fmt::format(
               "CCT node {}: a placeholder must be a symbolic procedure frame (its name says what it stands for)", i));
  }
}

// Logical contexts (profile format 1.2): columns of one length, creators before what they create,
// frames that exist; markers only as the root's address-frame children naming a context or the pool.
void checkLogicalContexts(const ThreadProfile& p, const std::string& name) {
  const LogicalContexts& l = p.logical;
  const std::size_t n = l.size();
  if (l.kind.size() != n || (n > 0 && l.pathBegin.size() != n + 1) || (n == 0 && !l.pathBegin.empty()))
    fail(name, "logical context columns (parent, kind, pathBegin) have different lengths");
  if (n > 0 && p.frameKind != FrameKind::Address) fail(name, "logical contexts in a symbolic profile");
  for (std::size_t i = 0; i < n; ++i) {
    if (l.parent[i] != kNoIndex && l.parent[i] >= i)
      fail(name, fmt::format("logical context {}: its creator's context {} does not come before it", i, l.parent[i]));
    if (l.pathBegin[i] > l.pathBegin[i + 1] || l.pathBegin[i + 1] > l.pathFrame.size())
      fail(name, fmt::format("logical context {}: its frames lie outside the frame list", i));
  }
  for (auto f : l.pathFrame)
    if (f >= p.frameCount())
      fail(name, fmt::format("a logical context refers to frame {} ({} frames)", f, p.frameCount()));
  if (p.frameKind != FrameKind::Address) return;
  for (std::size_t i = 1; i < p.cct.size(); ++i) {
    const AddressFrame& f = p.addressFrames[p.cct.frame[i]];
    if (p.modules[f.module].path != kLogicalContextModule) continue;
    if (p.cct.parent[i] != 0) fail(name, fmt::format("CCT node {}: a logical context marker below the root", i));
    if (f.offset != kPoolMarker && f.offset >= n)
      fail(name, fmt::format("CCT node {}: marks logical context {} ({} contexts)", i, f.offset, n));
  }
}

// The CCT's columns: as long as each other, a tree rooted in node 0, every other node naming a
// frame that exists.
void checkCct(const ThreadProfile& p, const std::string& name) {
  if (p.cct.frame.size() != p.cct.parent.size())
    fail(name, fmt::format("CCT has {} parents but {} frames", p.cct.parent.size(), p.cct.frame.size()));
  checkParents(p.cct.parent, "CCT", name);
  const std::size_t n = p.cct.size();
  const std::size_t frames = p.frameCount();
  if (p.cct.frame[0] != kNoIndex) fail(name, "CCT root names a frame");
  std::uint32_t badFrames = frames > kNoIndex ? 1U : 0U;  // one branch-free pass; the loop below names a defect
  const auto frameEnd = static_cast<std::uint32_t>(std::min<std::size_t>(frames, kNoIndex));
  for (std::size_t i = 1; i < n; ++i) badFrames |= p.cct.frame[i] >= frameEnd ? 1U : 0U;
  for (std::size_t i = 1; i < n && badFrames != 0; ++i) {
    if (p.cct.frame[i] >= frames)
      fail(name, fmt::format("CCT node {} refers to frame {} ({} frames)", i, p.cct.frame[i], frames));
  }
}

// The value checks of validateProfile for the common profile, whose metrics all count and whose
// counts are below 2^32, column by column without a branch per value: true when every value lies
// at a node other than the root, names a metric, is non-zero and follows the one before in (node,
// metric) order, and every metric's total count times its period fits 64 bits; `totals` then
// holds each metric's total count (zero ones are expected, and left zero on false). False leaves
// the exact checks to name the defect. Not inlined: inside validateProfile, whose other checks
// throw, GCC 12 vectorizes none of the loops (the values' checks took 40 instructions per value,
// now about 10, a third of them the totals).
[[gnu::noinline]] bool plainValuesValid(const ThreadProfile& p, std::size_t nodes, std::vector<std::uint64_t>& totals) {
  const std::size_t v = p.values.node.size();
  const std::size_t metrics = p.metrics.size();
  if (v == 0 || v >= (std::size_t{1} << 32) || metrics == 0 || metrics > 0xFFFF || nodes < 2 || nodes > kNoIndex)
    return false;
  for (const auto& m : p.metrics)
    if (m.valueType != ValueType::Count) return false;
  const std::uint32_t* node = p.values.node.data();
  const std::uint16_t* metric = p.values.metric.data();
  const std::uint64_t* count = p.values.count.data();
  const auto lastNode = static_cast<std::uint32_t>(nodes - 2);  // valid nodes: 1 .. nodes - 1
  std::uint32_t defects = 0;
  for (std::size_t i = 0; i < v; ++i) defects |= node[i] - 1U > lastNode ? 1U : 0U;
  const auto metricEnd = static_cast<std::uint16_t>(metrics);
  for (std::size_t i = 0; i < v; ++i) defects |= metric[i] >= metricEnd ? 1U : 0U;
  // The counts' bits together, and those of each count minus one: both below 2^32 when every
  // count is non-zero and below 2^32 (a zero count minus one has every bit set).
  std::uint64_t high = 0;
  for (std::size_t i = 0; i < v; ++i) high |= count[i] | (count[i] - 1);
  for (std::size_t i = 1; i < v; ++i) {  // strictly ascending (node, metric)
    const std::uint32_t before = node[i] < node[i - 1] ? 1U : 0U;
    const std::uint32_t same = node[i] == node[i - 1] ? 1U : 0U;
    const std::uint32_t notAfter = metric[i] <= metric[i - 1] ? 1U : 0U;
    defects |= before | (same & notAfter);
  }
  if (defects != 0 || (high >> 32) != 0) return false;
  for (std::size_t i = 0; i < v; ++i) totals[metric[i]] += count[i];  // below 2^32 values below 2^32: no wrap
  for (std::size_t m = 0; m < metrics; ++m) {
    if (static_cast<Uint128>(totals[m]) * p.metrics[m].period > std::numeric_limits<std::uint64_t>::max()) {
      std::fill(totals.begin(), totals.end(), 0);
      return false;
    }
  }
  return true;
}

}  // namespace

void validateProfile(const ThreadProfile& p, const std::string& name) {
  // Metrics.
  if (p.metrics.size() > 0xFFFF) fail(name, fmt::format("{} metrics, at most 65535 allowed", p.metrics.size()));
  std::set<std::string> metricNames;
  for (std::size_t m = 0; m < p.metrics.size(); ++m) {
    const auto& d = p.metrics[m];
    if (d.name.empty()) fail(name, fmt::format("metric {} has no name", m));
    if (!metricNames.insert(d.name).second) fail(name, fmt::format("metric name '{}' appears twice", d.name));
    if (d.period == 0) fail(name, fmt::format("metric '{}' has period 0", d.name));
    if (d.valueType > ValueType::Real)
      fail(name, fmt::format("metric '{}' has unknown value type {}", d.name, static_cast<int>(d.valueType)));
    if (d.valueType == ValueType::Real && d.period != 1)
      fail(name,
           fmt::format("metric '{}' is real-valued with period {} (real values are the values themselves: period 1)",
                       d.name, d.period));
  }
  for (const auto& e : p.identity.idTuple)
    if (e.kind > kLastIdKind) fail(name, fmt::format("id tuple has unknown kind {}", static_cast<int>(e.kind)));

  // Frames.
  if (p.frameKind == FrameKind::Address) {
    if (!p.symbolicFrames.empty()) fail(name, "address profile also holds symbolic frames");
    for (std::size_t f = 0; f < p.addressFrames.size(); ++f) {
      if (p.addressFrames[f].module >= p.modules.size())
        fail(name, fmt::format("address frame {} refers to load module {} ({} modules)", f, p.addressFrames[f].module,
                               p.modules.size()));
    }
  } else {
    if (!p.addressFrames.empty()) fail(name, "symbolic profile also holds address frames");
    for (std::size_t f = 0; f < p.symbolicFrames.size(); ++f) {
      const auto& s = p.symbolicFrames[f];
      if (s.scope == ScopeKind::Root) fail(name, fmt::format("symbolic frame {} has scope 'root'", f));
      if (s.name >= p.strings.size() || s.file >= p.strings.size() || s.module >= p.strings.size()) {
        checkString(s.name, p.strings.size(), "name", f, name);  // one of them fails, naming it
        checkString(s.file, p.strings.size(), "file", f, name);
        checkString(s.module, p.strings.size(), "module", f, name);
      }
      if ((s.scope == ScopeKind::ProcFrame || s.scope == ScopeKind::Alien) && p.strings[s.name].empty())
        fail(name, fmt::format("symbolic frame {} ({}) has no procedure name", f, toString(s.scope)));
    }
  }

  // CCT.
  checkCct(p, name);
  const std::size_t n = p.cct.size();
  checkUnwindNotes(p, name);
  checkPathStarts(p, name);

  // Values.
  const std::size_t v = p.values.node.size();
  if (p.values.metric.size() != v || p.values.count.size() != v)
    fail(name, "value columns (node, metric, count) have different lengths");
  // Per metric: its counts and its values (count x period) so far. Neither can wrap unnoticed: a
  // value or a total of values beyond 2^64 - 1 is refused below, and counts are at most values
  // (period >= 1).
  std::vector<std::uint64_t> totals(p.metrics.size(), 0), valueTotals(p.metrics.size(), 0);
  constexpr Uint128 kMaxValue = std::numeric_limits<std::uint64_t>::max();
  const bool plain = plainValuesValid(p, n, totals);
  for (std::size_t i = 0; i < v && !plain; ++i) {
    const auto node = p.values.node[i];
    const auto metric = p.values.metric[i];
    if (node >= n) fail(name, fmt::format("value {} is at CCT node {}, which does not exist ({} nodes)", i, node, n));
    if (node == 0) fail(name, fmt::format("value {} is at the CCT root", i));
    if (metric >= p.metrics.size())
      fail(name, fmt::format("value {} has metric id {}, out of range ({} metrics)", i, metric, p.metrics.size()));
    if (p.values.count[i] == 0) fail(name, fmt::format("value {} is zero (zeros are never stored)", i));
    if (i > 0) {
      const auto pn = p.values.node[i - 1];
      const auto pm = p.values.metric[i - 1];
      if (node < pn || (node == pn && metric <= pm))
        fail(name, fmt::format("values are not sorted by (node, metric) or repeat at value {} (node {}, metric {})", i,
                               node, metric));
    }
    if (p.metrics[metric].valueType == ValueType::Real) {  // a double's bits: no totals to bound
      if (!std::isfinite(realValue(p.values.count[i])))
        fail(name,
             fmt::format("value {} of real-valued metric '{}' is not a finite number", i, p.metrics[metric].name));
      continue;
    }
    totals[metric] += p.values.count[i];
    // Every per-thread value (a statement's, a scope's exclusive, the root's inclusive) is a sum
    // of count x period over some of the thread's values, stored in 64 bits: the thread's total
    // must fit, so that nothing downstream can wrap.
    std::uint64_t value = 0;
    if (__builtin_mul_overflow(p.values.count[i], p.metrics[metric].period, &value) ||
        __builtin_add_overflow(valueTotals[metric], value, &valueTotals[metric]))
      fail(name, fmt::format("metric '{}' at CCT node {}: {} counts x period {} bring the thread's total beyond "
                             "2^64 - 1, which per-thread values cannot hold",
                             p.metrics[metric].name, node, p.values.count[i], p.metrics[metric].period));
  }
  // Each handled sample lands in exactly one sampled metric or is counted as dropped.
  Uint128 sampled = p.stats.droppedSamples;
  for (std::size_t m = 0; m < p.metrics.size(); ++m)
    if (p.metrics[m].kind == MetricKind::Sampled && p.metrics[m].valueType == ValueType::Count) sampled += totals[m];
  if (sampled > kMaxValue)
    fail(name, fmt::format("sample counts are inconsistent: the sampled metrics' counts plus {} dropped add up to more "
                           "than 2^64 - 1, which the header's {} samples cannot record",
                           p.stats.droppedSamples, p.stats.samples));
  if (sampled != p.stats.samples) {
    fail(name, fmt::format("sample counts are inconsistent: {} samples recorded in the header, but the sampled "
                           "metrics' counts plus {} dropped add up to {}",
                           p.stats.samples, p.stats.droppedSamples, static_cast<std::uint64_t>(sampled)));
  }

  if (p.frameKind == FrameKind::Symbolic) checkSymbolicStructure(p, name);
  checkRegions(p.regions, name);
  checkLogicalContexts(p, name);
  checkClockAndComm(p, name);
}

}  // namespace csp::storage
