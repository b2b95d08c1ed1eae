// The values pass: every profile of this rank taken from the projection spill (or, with regions,
// re-read and projected onto the final CCT), its per-thread exclusive and inclusive values (with
// the state and derived metrics) and its region values computed, and handed out batch by batch.
#include <fmt/format.h>
#include <tbb/enumerable_thread_specific.h>

#include <future>
#include <map>
#include <span>
#include <stdexcept>

#include "stages.hpp"

namespace csp::reduce::stages {

namespace {

// The post-processing's own integer metrics at each statement (docs/postprocessing.md, "Work,
// idleness, overhead"): overhead = work at nodes the overhead rules name, effort = work + idleness.
void addStateValues(std::vector<StmtValue>& stmt, const StateMetrics& state,
                    const std::vector<std::uint8_t>& overheadNode) {
  if (!state.any()) return;
  const std::size_t measured = stmt.size();
  for (std::size_t k = 0; k < measured; ++k) {
    const StmtValue v = stmt[k];
    if (v.metric == state.work && state.overhead != kNoMetric && overheadNode[v.node])
      stmt.push_back({v.node, state.overhead, v.value});
    if ((v.metric == state.work || v.metric == state.idleness) && state.effort != kNoMetric)
      stmt.push_back({v.node, state.effort, v.value});
  }
}

// One profile's values (MT: called from the workers; `scratch` is the calling worker's own).
class ProfileValues {
 public:
  ProfileValues(const ValueInputs& in, Attribution a) : in_(in), a_(a) {
    for (std::size_t m = 0; m < in.plan.metrics.size(); ++m)
      globalMetric_[in.plan.metrics[m].name] = static_cast<std::uint16_t>(m);
    for (const auto& m : in.plan.metrics) real_.push_back(m.valueType == ValueType::Real);
    // Encoded while collected only when the collected values are the ones stored: derived
    // metrics are added after (withDerived), and more metrics than a group's mask holds take the
    // by-profile writer's general path.
    if (!in.byProfileScales.empty() && in.byProfileScales.size() != in.plan.metrics.size())
      throw std::logic_error(fmt::format("values by profile: {} scales for {} metrics", in.byProfileScales.size(),
                                         in.plan.metrics.size()));
    if (!in.byProfileScales.empty() && in.plan.derived.empty() &&
        in.byProfileScales.size() <= storage::ProfileBlockEncoder::kMaxMetrics)
      for (const std::uint64_t scale : in.byProfileScales) byProfileScales_.emplace_back(scale);
  }

  void compute(const InputProfile& input, const SpillRef& spilled, ThreadValues& values, RegionValues& regionValues) {
    std::vector<StmtValue> stmt;
    if (spilled.reread || !a_.spill) {
      stmt = reproject(input, regionValues);
    } else {
      auto projected = a_.spill->get(spilled);
      stmt = std::move(projected.stmt);
      toGlobalMetrics(projected.metrics, stmt);
      for (auto& v : stmt) v.node = in_.finalIdOf[v.node];
    }
    addStateValues(stmt, in_.plan.state, in_.overheadNode);
    auto& mine = scratch_.local();
    if (!mine) mine = std::make_unique<ValueScratch>(in_.cct.size(), real_);
    auto& encoder = encoder_.local();
    if (!encoder && !byProfileScales_.empty())
      encoder = std::make_unique<storage::ProfileBlockEncoder>(byProfileScales_);
    values = mine->compute(in_.cct, stmt, encoder.get());
    if (!in_.plan.derived.empty()) values = withDerived(values, in_.plan);
  }

 private:
  // A profile with regions is read and projected again (onto the final CCT this time).
  std::vector<StmtValue> reproject(const InputProfile& input, RegionValues& regionValues) {
    ThreadProfile p = readInput(input);
    auto stmt = projectProfile(p, a_.strings, a_.attributor,
                               [&](std::uint32_t parent, const ScopeKey& key) {
                                 const auto id = in_.cct.find(parent, key);
                                 if (id == kNoIndex)
                                   throw std::runtime_error("context missing from the canonical CCT (file changed?)");
                                 return id;
                               },
                               {jitSymbolsOf(a_.attributor, input, p), nullptr, nullptr, nullptr, a_.physical});
    std::vector<std::string> names;
    for (const auto& m : p.metrics) names.push_back(m.name);
    toGlobalMetrics(names, stmt);
    regionValues = in_.regions.valuesOf(p.regions);
    return stmt;
  }
  void toGlobalMetrics(const std::vector<std::string>& names, std::vector<StmtValue>& stmt) const {
    std::vector<std::uint16_t> global(names.size());  // the profile's metric index -> global id
    for (std::size_t m = 0; m < names.size(); ++m) global[m] = globalMetric_.at(names[m]);
    for (auto& v : stmt) v.metric = global[v.metric];
  }

  const ValueInputs& in_;
  Attribution a_;
  std::map<std::string, std::uint16_t> globalMetric_;  // MT: read-only
  std::vector<bool> real_;                             // MT: read-only; per global metric
  tbb::enumerable_thread_specific<std::unique_ptr<ValueScratch>> scratch_;
  std::vector<storage::ValueScale> byProfileScales_;  // empty: values by profile not encoded here
  tbb::enumerable_thread_specific<std::unique_ptr<storage::ProfileBlockEncoder>> encoder_;
};

}  // namespace

void computeValues(const ProfileTable& profiles, const PipelineOptions& options, Workers& workers,
                   Attribution attribution, const ValueInputs& inputs, const Pipeline::BatchConsumer& consume) {
  Stopwatch watch;
  ProfileValues profileValues(inputs, attribution);
  const std::size_t total = profiles.local.size();
  std::vector<std::string> errors;  // MT: under errorsMutex
  std::mutex errorsMutex;
  workers.begin("metrics", total);
  std::future<void> pending;
  std::size_t done = 0;
  // A batch is the input batch of its profiles: profiles whose inputs share index / batchProfiles.
  for (const auto& batch : profiles.local.batches()) {
    auto loaded = std::make_shared<LocalProfiles::Loaded>(profiles.local.load(batch));
    const std::size_t n = batch.count;
    std::vector<ThreadValues> values(n);
    std::vector<RegionValues> regionValues(n);
    workers.arena().execute([&] {
      tbb::parallel_for(tbb::blocked_range<std::size_t>(0, n, 1), [&](const tbb::blocked_range<std::size_t>& r) {
        for (std::size_t i = r.begin(); i != r.end(); ++i) {
          try {
            profileValues.compute(loaded->inputs[i], loaded->spill[i], values[i], regionValues[i]);
          } catch (const std::exception& e) {
            std::lock_guard lock(errorsMutex);
            errors.push_back(fmt::format("{}: {}", loaded->inputs[i].path, e.what()));
          }
        }
      });
    });
    if (!errors.empty()) break;
    // The consumer (database writing) of this batch overlaps the computation of the next one;
    // at most two batches are alive at a time.
    if (pending.valid()) pending.get();
    pending =
        std::async(std::launch::async, [&consume, batchIndex = batch.index, loaded = std::move(loaded),
                                        values = std::move(values), regionValues = std::move(regionValues)]() mutable {
          consume(batchIndex, std::span<const ProfileInfo>(loaded->infos), values, regionValues);
        });
    done += n;
    if (workers.progress()) workers.progress()->update(done);
  }
  if (pending.valid()) pending.get();
  workers.end("metrics", watch);
  throwIfAny(errors);
}

}  // namespace csp::reduce::stages
