// The global metric list: the measured metrics of all profiles merged by name, the state metrics
// of idleness accounting, the --derive metrics; and the evaluation of the derived ones.
#include <fmt/format.h>

#include <algorithm>
#include <optional>

#include "stages.hpp"

namespace csp::reduce::stages {

namespace {

// A metric as first seen, with the profile it was first seen in (for messages).
struct MetricOrigin {
  MetricDescriptor descriptor;
  std::string file;
};

std::vector<std::byte> packMetrics(const std::vector<MetricOrigin>& metrics) {
  Packer p;
  p.u64(metrics.size());
  for (const auto& [m, file] : metrics) {
    p.text(m.name);
    p.text(m.unit);
    p.u64(static_cast<std::uint64_t>(m.kind));
    p.u64(m.period);
    p.text(m.description);
    p.u64(static_cast<std::uint64_t>(m.valueType));
    p.text(file);
  }
  return p.take();
}

std::vector<MetricOrigin> unpackMetrics(const std::vector<std::byte>& bytes) {
  Unpacker u(bytes);
  std::vector<MetricOrigin> out(u.u64());
  for (auto& [m, file] : out) {
    m.name = u.text();
    m.unit = u.text();
    m.kind = static_cast<MetricKind>(u.u64());
    m.period = u.u64();
    m.description = u.text();
    m.valueType = static_cast<ValueType>(u.u64());
    file = u.text();
  }
  return out;
}

std::string describeMetric(const MetricDescriptor& m) {
  return fmt::format("{}{}{}", m.kind == MetricKind::Sampled ? "sampled" : "counted",
                     m.valueType == ValueType::Real ? ", real-valued" : "",
                     m.unit.empty() ? std::string() : ", unit " + m.unit);
}

// Appends the metrics not yet in `into` (by name), keeping first-appearance order. Metrics are
// merged by name, so one name must mean one thing: the same kind, value type and unit everywhere
// (the period may differ: values are count x period already); otherwise values of different
// quantities would be added up.
void mergeMetric(std::vector<MetricOrigin>& into, const MetricOrigin& m) {
  const auto it =
      std::find_if(into.begin(), into.end(), [&](const auto& x) { return x.descriptor.name == m.descriptor.name; });
  if (it == into.end()) {
    into.push_back(m);
    return;
  }
  const auto& a = it->descriptor;
  const auto& b = m.descriptor;
  if (a.kind != b.kind || a.unit != b.unit || a.valueType != b.valueType)
    throw PipelineError(
        fmt::format("metric '{}' means different things in {} ({}) and {} ({}): these profiles are "
                    "not from compatible measurements",
                    b.name, it->file, describeMetric(a), m.file, describeMetric(b)));
}

// Global metric list: first appearance in profile-id order, which is rank order of the ranks'
// own first-appearance lists.
std::vector<MetricDescriptor> measuredMetrics(const Comm& comm, const Discovery& discovery, ReadResult& read) {
  std::vector<MetricOrigin> mine;
  for (std::size_t i = 0; i < read.profiles.size(); ++i) {
    if (!read.profiles[i].valid()) continue;
    for (const auto& m : read.metricLists.at(read.profiles[i].metrics))
      mergeMetric(mine, {m, discovery.inputs[i].path});
  }
  std::vector<std::vector<MetricDescriptor>>().swap(read.metricLists);  // not needed any more
  const auto parts = comm.gather(packMetrics(mine));
  std::vector<std::byte> merged;
  if (comm.rank() == 0) {
    std::vector<MetricOrigin> all;
    for (const auto& part : parts)
      for (const auto& m : unpackMetrics(part)) mergeMetric(all, m);
    merged = packMetrics(all);
  }
  comm.broadcast(merged);
  std::vector<MetricDescriptor> out;
  for (auto& m : unpackMetrics(merged)) out.push_back(std::move(m.descriptor));
  return out;
}

// With idleness accounting (csp-run --idleness) the profiles carry `work` and `idleness`; the
// post-processing adds `overhead` (work whose context an overhead rule names) and `effort` (work
// + idleness), integer metrics like the measured ones, computed per statement of each thread.
void addStateMetrics(MetricPlan& plan, const OverheadRules& overheadRules) {
  auto& metrics = plan.metrics;
  auto find = [&](const char* name) -> std::uint16_t {
    for (std::size_t m = 0; m < metrics.size(); ++m)
      if (metrics[m].name == name && metrics[m].kind == MetricKind::Counted && metrics[m].unit == "ns" &&
          metrics[m].valueType == ValueType::Count)
        return static_cast<std::uint16_t>(m);
    return kNoMetric;
  };
  auto taken = [&](const char* name) {
    return std::any_of(metrics.begin(), metrics.end(), [&](const auto& m) { return m.name == name; });
  };
  plan.state.work = find("work");
  plan.state.idleness = find("idleness");
  if (plan.state.work == kNoMetric) return;
  if (!taken("overhead")) {
    plan.state.overhead = static_cast<std::uint16_t>(metrics.size());
    metrics.push_back(
        {"overhead", "ns", MetricKind::Counted, 1,
         "work in parallel runtime code (csp-prof-mpi overhead rules: " + overheadRules.describe() + ")"});
  }
  if (plan.state.idleness != kNoMetric && !taken("effort")) {
    plan.state.effort = static_cast<std::uint16_t>(metrics.size());
    metrics.push_back({"effort", "ns", MetricKind::Counted, 1, "work + idleness"});
  }
}

std::string rawMetricNames(const MetricPlan& plan) {
  std::string all;
  for (std::size_t m = 0; m < plan.raw; ++m) all += (m ? ", " : "") + plan.metrics[m].name;
  return all;
}

// One --derive metric over the raw metrics of the plan.
DerivedMetric parseDerived(const std::string& text, const MetricPlan& plan) {
  const auto rawEnd = plan.metrics.begin() + static_cast<std::ptrdiff_t>(plan.raw);
  DerivedMetric d{metrics::PerThreadDerivedMetric::parse(text), {}};
  for (std::size_t i = 0; i < d.metric.inputs().size(); ++i) {
    const auto& name = d.metric.inputs()[i];
    const auto it = std::find_if(plan.metrics.begin(), rawEnd, [&](const auto& m) { return m.name == name; });
    if (it == rawEnd)
      throw metrics::ExpressionError(
          d.metric.expression().column(i),
          fmt::format("unknown metric '{}' (the profiles have: {})", name, rawMetricNames(plan)));
    d.inputs.push_back(static_cast<std::uint16_t>(it - plan.metrics.begin()));
  }
  const bool clash =
      std::any_of(plan.metrics.begin(), plan.metrics.end(), [&](const auto& m) { return m.name == d.metric.name(); });
  if (clash) throw metrics::ExpressionError(1, fmt::format("metric '{}' already exists", d.metric.name()));
  return d;
}

void addDerivedMetrics(MetricPlan& plan, const std::vector<std::string>& derive) {
  std::vector<std::string> defects;
  for (const auto& text : derive) {
    try {
      auto d = parseDerived(text, plan);
      plan.metrics.push_back({d.metric.name(), "", MetricKind::Counted, 1,
                              "derived per thread: " + d.metric.expression().text(), ValueType::Real});
      plan.derived.push_back(std::move(d));
    } catch (const metrics::ExpressionError& e) {
      defects.push_back(fmt::format("--derive '{}': {}", text, e.what()));
    }
  }
  if (!defects.empty()) throw PipelineError(defects.front());
}

}  // namespace

MetricPlan planMetrics(const Comm& comm, const Discovery& discovery, ReadResult& read, const PipelineOptions& options,
                       const OverheadRules& overheadRules) {
  MetricPlan plan;
  plan.metrics = measuredMetrics(comm, discovery, read);
  addStateMetrics(plan, overheadRules);
  plan.raw = plan.metrics.size();
  addDerivedMetrics(plan, options.derive);
  if (plan.metrics.size() > 0xFFFF) throw PipelineError("more than 65535 distinct metrics");
  return plan;
}

namespace {

// One node's raw values, dense by metric, as the expressions read them.
struct NodeInputs {
  explicit NodeInputs(std::size_t raw) : exclusive(raw), inclusive(raw), presentE(raw), presentI(raw) {}
  std::vector<double> exclusive, inclusive;
  std::vector<bool> presentE, presentI;
  void clear() {
    std::fill(exclusive.begin(), exclusive.end(), 0.0);
    std::fill(inclusive.begin(), inclusive.end(), 0.0);
    std::fill(presentE.begin(), presentE.end(), false);
    std::fill(presentI.begin(), presentI.end(), false);
  }
};

// A derived metric where at least one input is present in the scope; nullopt elsewhere.
std::optional<double> evaluate(const DerivedMetric& d, const std::vector<double>& values,
                               const std::vector<bool>& present, std::vector<double>& args) {
  if (std::none_of(d.inputs.begin(), d.inputs.end(), [&](auto m) { return present[m]; })) return std::nullopt;
  args.clear();
  for (auto m : d.inputs) args.push_back(values[m]);
  return d.metric.evaluate(args);
}

}  // namespace

// Appends per-thread derived metrics to a profile's values, node by node: inputs are the raw
// values of the same node and scope (absent = 0), evaluated where at least one input is
// present; a non-finite result leaves the metric absent there.
ThreadValues withDerived(const ThreadValues& v, const MetricPlan& plan) {
  ThreadValues out;
  NodeInputs in(plan.raw);
  std::vector<double> args;
  auto number = [&](std::uint16_t m, std::uint64_t stored) {
    return plan.metrics[m].valueType == ValueType::Real ? realValue(stored) : static_cast<double>(stored);
  };
  for (std::size_t k = 0; k < v.size();) {
    const auto node = v.rows[k].node;
    in.clear();
    for (; k < v.size() && v.rows[k].node == node; ++k) {
      const ThreadValue& r = v.rows[k];
      out.rows.push_back(r);
      in.exclusive[r.metric] = number(r.metric, r.exclusive);
      in.inclusive[r.metric] = number(r.metric, r.inclusive);
      in.presentE[r.metric] = r.exclusive != 0;
      in.presentI[r.metric] = r.inclusive != 0;
    }
    for (std::size_t d = 0; d < plan.derived.size(); ++d) {
      const auto de = evaluate(plan.derived[d], in.exclusive, in.presentE, args);
      const auto di = evaluate(plan.derived[d], in.inclusive, in.presentI, args);
      const std::uint64_t be = de ? realBits(*de) : 0, bi = di ? realBits(*di) : 0;
      if (be == 0 && bi == 0) continue;  // +0.0 is absence, like a raw zero
      out.rows.push_back({node, static_cast<std::uint16_t>(plan.raw + d), be, bi});
    }
  }
  return out;
}

}  // namespace csp::reduce::stages
