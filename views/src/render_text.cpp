// The terminal renderer: numbers first in fixed-width columns (so they align whatever the
// depth), then the indented tree with source locations and node ids for --node/--focus.
#include <fmt/format.h>

#include <cmath>
#include <ostream>

#include "csp/metrics/scaling.hpp"
#include "csp/views/format.hpp"
#include "csp/views/render.hpp"
#include "model.hpp"

namespace csp::views {

namespace {

struct Style {
  bool on;
  std::string operator()(const std::string& text, const char* code) const {
    if (!on || text.empty()) return text;
    return fmt::format("\x1b[{}m{}\x1b[0m", code, text);
  }
};

constexpr std::size_t kValueWidth = 9;
constexpr std::size_t kPercentWidth = 7;
constexpr std::size_t kBoundWidth = 9;  // " ±12.3M"

std::string label(const ViewTree& tree, const TreeNode& n, const TextOptions& o) {
  const auto name = [&](const std::string& s) { return o.fullNames ? s : shortenName(s, o.nameWidth); };
  switch (n.kind) {
    case NodeKind::Root:
      return n.name;
    case NodeKind::Module:
      return "module " + name(n.name);
    case NodeKind::File:
      return "file " + n.name;
    case NodeKind::Procedure:
      if (tree.kind == ViewKind::Callers && n.depth >= 2) return "<- " + name(n.name);
      return name(n.name);
    case NodeKind::Inlined:
      return "[inlined] " + name(n.name);
    // Code without a line table: "loop @0x1234 in libz.so.1", "call +0x1a4", "+0x1a4".
    case NodeKind::Loop:
      return n.name.empty() ? "loop" : n.name;
    case NodeKind::CallSite:
      return n.name.empty() ? "call" : "call " + n.name;
    case NodeKind::Statement:
      return n.name.empty() ? "line" : n.name;
    case NodeKind::Region:
      return name(n.name);
  }
  return n.name;
}

std::string location(const ViewTree& tree, const TreeNode& n) {
  switch (n.kind) {
    case NodeKind::Root:
    case NodeKind::Module:
    case NodeKind::File:
    case NodeKind::Region:
      return "";
    case NodeKind::Procedure:
      if (tree.kind == ViewKind::Callers && n.depth >= 2) {
        const auto site = detail::fileLine(baseName(n.file), n.line);
        return site.empty() ? site : "at " + site;
      }
      [[fallthrough]];
    default:
      return detail::fileLine(baseName(n.file), n.line);
  }
}

}  // namespace

void renderText(const ViewTree& tree, std::ostream& out, const TextOptions& o) {
  const Style style{o.color};
  const std::size_t columns = tree.columns.size();
  std::vector<bool> pct(columns);
  std::vector<std::size_t> width(columns);
  for (std::size_t c = 0; c < columns; ++c) {
    pct[c] = tree.columns[c].formula.empty() && hasPercent(tree.columns[c].statistic);
    width[c] = kValueWidth + (pct[c] ? kPercentWidth : 0) + (o.bounds ? kBoundWidth : 0);
  }

  // Two header lines: metric and scope, then statistic.
  std::string h1, h2;
  for (std::size_t c = 0; c < columns; ++c) {
    const auto& col = tree.columns[c];
    const auto scope = col.scope == storage::MetricScope::Inclusive ? "(I)" : "(E)";
    h1 += fmt::format("{:>{}} ", fmt::format("{} {}", col.metric, scope), width[c]);
    // Units only where the value is in them (not for ratios and counts), and only if they fit.
    std::string stat = col.formula.empty() ? toString(col.statistic) : "formula";
    // (Times carry their unit in every value.)
    if (pct[c] && !tree.units[c].empty() && tree.units[c] != "ns" && stat.size() + tree.units[c].size() + 3 <= width[c])
      stat += " [" + tree.units[c] + "]";
    h2 += fmt::format("{:>{}} ", stat, width[c]);
  }
  out << style(h1, "1") << "\n" << style(h2 + " scope", "1") << "\n";

  // A call site with a single callee is shown on the callee's row ("<- call file:line"), not as a
  // row of its own: its values are the callee's, and a path would otherwise take two lines per
  // call. Calls to several procedures (through pointers) keep their row.
  const auto oneCallee = [&](const TreeNode& n) {
    return n.kind == NodeKind::CallSite && n.children.size() == 1 && !n.truncated &&
           tree.nodes[n.children[0]].kind == NodeKind::Procedure;
  };
  std::vector<unsigned> lift(tree.nodes.size(), 0);  // collapsed calls above a node
  for (std::size_t i = 0; i < tree.nodes.size(); ++i) {
    const auto& n = tree.nodes[i];
    if (n.parent == kNoIndex) continue;
    lift[i] = lift[n.parent] + (oneCallee(tree.nodes[n.parent]) ? 1 : 0);
  }

  bool anyNoise = false;
  for (std::size_t i = 0; i < tree.nodes.size(); ++i) {
    const auto& n = tree.nodes[i];
    if (oneCallee(n)) continue;
    std::string line;
    for (std::size_t c = 0; c < columns; ++c) {
      const bool formula = !tree.columns[c].formula.empty();
      std::string value =
          formatNumber(n.values[c], formula ? Statistic::Sum : tree.columns[c].statistic, formula ? "" : tree.units[c]);
      const bool noise = c < n.withinSamplingError.size() && n.withinSamplingError[c];
      if (noise) value += "~", anyNoise = true;
      line += fmt::format("{:>{}}", value, kValueWidth);
      if (pct[c]) {
        const double p = tree.percent(n, c);
        std::string ptext = std::isnan(p) ? "" : fmt::format("{:.1f}%", p);
        ptext = fmt::format("{:>{}}", ptext, kPercentWidth);
        if (!std::isnan(p)) ptext = style(ptext, p >= 10 ? "1;31" : p >= 1 ? "33" : "2");
        line += ptext;
      }
      if (o.bounds) {
        const double e = c < n.errors.size() ? n.errors[c] : NAN;
        line += fmt::format(" {:<{}}",
                            std::isnan(e) ? "" : "±" + formatNumber(e, Statistic::Sum, formula ? "" : tree.units[c]),
                            kBoundWidth - 1);
      }
      line += ' ';
    }
    const unsigned indent = n.depth - lift[i];
    line += " " + std::string(2 * indent, ' ');
    std::string text = label(tree, n, o);
    if (n.kind == NodeKind::Procedure || n.kind == NodeKind::Inlined) text = style(text, "1");
    line += text;
    const auto where = location(tree, n);
    if (!where.empty()) line += "  " + style(where, "36");
    if (n.parent != kNoIndex && oneCallee(tree.nodes[n.parent])) {
      const auto& call = tree.nodes[n.parent];
      const auto site = detail::fileLine(baseName(call.file), call.line);
      line += "  " + style("<- call" + (site.empty() ? std::string() : " " + site), "2");
    }
    if (n.imbalanceOnly) line += "  " + style(fmt::format("[one thread {:.1f}%]", n.maxThreadPercent), "35");
    if (!n.note.empty()) line += "  " + style("[" + n.note + "]", "32");
    if (n.truncated) line += style(" ...", "2");
    if (n.kind != NodeKind::Root) line += "  " + style(fmt::format("#{}", n.viewId), "2");
    out << line << "\n";
  }

  const auto& p = tree.pruned;
  if (p.any() || p.keptForImbalance) {
    std::vector<std::string> parts;
    if (p.belowThreshold) parts.push_back(fmt::format("{} below the threshold", p.belowThreshold));
    if (p.beyondDepth) parts.push_back(fmt::format("{} not expanded at the depth limit", p.beyondDepth));
    if (p.hidden) parts.push_back(fmt::format("{} hidden by --hide/--keep", p.hidden));
    if (p.beyondTop) parts.push_back(fmt::format("{} beyond --top", p.beyondTop));
    if (p.offHotPath) parts.push_back(fmt::format("{} off the hot path", p.offHotPath));
    std::string s = "pruned: ";
    for (std::size_t i = 0; i < parts.size(); ++i) s += (i ? ", " : "") + parts[i];
    if (parts.empty()) s = "pruned: nothing";
    if (p.keptForImbalance)
      s += fmt::format("; {} shown only because one thread exceeds the threshold", p.keptForImbalance);
    out << style(s, "2") << "\n";
  }
  if (anyNoise)
    out << style(
               "~ within sampling error: the imbalance could come from sampling alone (thesis App. A bound: each "
               "thread's value is exact to one sampling period)",
               "2")
        << "\n";
  if (!tree.threads.all)
    out << style(fmt::format("statistics over the {} ({} profiles); {} other thread{} left out (--threads all "
                             "includes {})",
                             tree.threads.label, tree.threads.profiles, tree.threads.excluded,
                             tree.threads.excluded == 1 ? "" : "s", tree.threads.excluded == 1 ? "it" : "them"),
                 "2")
        << "\n";
}

std::string shortenName(const std::string& name, std::size_t width) {
  // Collapse nested template arguments and parameter lists: the outermost names say what it is.
  std::string s;
  int angle = 0, paren = 0;
  for (std::size_t i = 0; i < name.size(); ++i) {
    const char ch = name[i];
    // "operator<", "operator()" and friends are names, not brackets.
    if (name.compare(i, 8, "operator") == 0) {
      const auto end = name.find_first_of('(', i + 8 + 1);
      const auto stop = end == std::string::npos ? name.size() : end;
      if (angle == 0 && paren == 0) s += name.substr(i, stop - i);
      i = stop - 1;
      continue;
    }
    if (ch == '<') {
      if (angle == 0 && paren == 0) s += "<...>";
      ++angle;
      continue;
    }
    if (ch == '>' && angle > 0) {
      --angle;
      continue;
    }
    if (ch == '(' && angle == 0) {
      if (paren == 0) s += i + 1 < name.size() && name[i + 1] == ')' ? "()" : "(...)";
      ++paren;
      continue;
    }
    if (ch == ')' && angle == 0 && paren > 0) {
      --paren;
      continue;
    }
    if (angle == 0 && paren == 0) s += ch;
  }
  if (angle != 0 || paren != 0) s = name;  // unbalanced: not a C++ signature, keep it whole
  if (width < 8 || s.size() <= width) return s;
  const std::size_t keep = width - 3;
  const std::size_t head = keep / 3, tail = keep - head;
  return s.substr(0, head) + "..." + s.substr(s.size() - tail);
}

void renderDistributionText(const Distribution& d, std::ostream& out, const TextOptions& o) {
  const Style style{o.color};
  const auto scope = d.scope == storage::MetricScope::Inclusive ? "inclusive" : "exclusive";
  out << style(d.what.empty() || d.what.starts_with("CCT node") ? fmt::format("node #{}: {}", d.node, d.label)
                                                                : fmt::format("{}: {}", d.what, d.label),
               "1")
      << "\n";
  out << fmt::format("{} {} ({}), {} profiles{}, present in {}\n", d.metric, scope, d.unit, d.profiles,
                     d.threads.all ? "" : fmt::format(" ({}; {} others left out)", d.threads.label, d.threads.excluded),
                     d.values.size());
  auto num = [&](double v) { return formatNumber(v, Statistic::Sum, d.unit); };
  auto mark = [&](const metrics::Statistics& s, Statistic st, double v) {
    return formatNumber(v, st, d.unit) + (metrics::withinSamplingError(s, st, d.perThreadError) ? "~" : "");
  };
  out << fmt::format("  all:     sum {}  mean {}  min {}  max {}  stddev {}  cfvar {}  imbalance {}\n", num(d.all.sum),
                     num(d.all.mean), num(d.all.min), num(d.all.max), num(d.all.stddev),
                     formatNumber(d.all.cfvar, Statistic::Cfvar), mark(d.all, Statistic::Imbalance, d.all.imbalance));
  out << fmt::format("           p5 {}  p25 {}  median {}  p75 {}  p95 {}  max/median {}\n", num(d.all.p5),
                     num(d.all.p25), num(d.all.p50), num(d.all.p75), num(d.all.p95),
                     mark(d.all, Statistic::ImbalanceMedian, d.all.imbalanceMedian));
  out << fmt::format("  present: mean {}  min {}  max {}  stddev {}  median {}\n", num(d.present.mean),
                     num(d.present.min), num(d.present.max), num(d.present.stddev), num(d.present.p50));
  if (!std::isnan(d.perThreadError) && d.perThreadError > 0)
    out << fmt::format("  sampling error: each thread's value ±{}, the sum ±{}{}\n", num(d.perThreadError),
                       num(metrics::statisticError(d.all, Statistic::Sum, d.perThreadError)),
                       metrics::withinSamplingError(d.all, Statistic::Imbalance, d.perThreadError)
                           ? "; ~ marks an imbalance that sampling alone could produce"
                           : "");
  if (!d.values.empty()) {
    out << fmt::format("  max: {} = {}\n", d.values.front().who, num(d.values.front().value));
    if (d.values.size() < d.profiles)
      out << fmt::format("  min: 0 in {} profiles without a value\n", d.profiles - d.values.size());
    else
      out << fmt::format("  min: {} = {}\n", d.values.back().who, num(d.values.back().value));
  }
  if (!d.outliers.empty()) {
    out << style(fmt::format("outliers (more than 3 stddev from the mean): {}", d.outliers.size()), "35") << "\n";
    for (std::size_t i = 0; i < std::min<std::size_t>(d.outliers.size(), 10); ++i)
      out << fmt::format("  {:>12}  {}{}\n", num(d.outliers[i].value), d.outliers[i].who,
                         i < d.outlierWithinError.size() && d.outlierWithinError[i] ? "  (within sampling error)" : "");
  }
  const bool all = d.values.size() <= 32;
  out << (all ? "values:\n" : "highest 10:\n");
  const std::size_t shown = all ? d.values.size() : 10;
  auto who = [](const ThreadValue& v) {
    return v.threadClass.empty() ? v.who : fmt::format("{} ({})", v.who, v.threadClass);
  };
  for (std::size_t i = 0; i < shown; ++i)
    out << fmt::format("  {:>12}  {}\n", num(d.values[i].value), who(d.values[i]));
  if (!all) {
    out << "lowest 10 present:\n";
    for (std::size_t i = d.values.size() - 10; i < d.values.size(); ++i)
      out << fmt::format("  {:>12}  {}\n", num(d.values[i].value), who(d.values[i]));
  }
  std::uint64_t most = 1;
  for (const auto& b : d.histogram) most = std::max(most, b.count);
  out << "histogram (profiles per value range, absent profiles count as 0):\n";
  for (const auto& b : d.histogram) {
    const auto bar =
        static_cast<std::size_t>(std::llround(40.0 * static_cast<double>(b.count) / static_cast<double>(most)));
    std::string bars;
    for (std::size_t i = 0; i < bar; ++i) bars += "#";
    out << fmt::format("  [{:>9}, {:>9}) {:>8} {}\n", num(b.low), num(b.high), b.count, style(bars, "32"));
  }
}

}  // namespace csp::views
