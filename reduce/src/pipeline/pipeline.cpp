// The Pipeline (pipeline.hpp): the stages of stages.hpp in order, and their results.
#include "csp/reduce/pipeline.hpp"

#include "stages.hpp"

namespace csp::reduce {

using namespace stages;

struct Pipeline::Impl {
  const Comm& comm;
  PipelineOptions options;
  OverheadRules overheadRules;
  StringTable strings;    // MT: thread-safe interning
  Attributor attributor;  // MT: thread-safe
  Workers workers;

  // Stage results, each set once by its stage.
  Discovery discovery;                         // discover
  ProfileTable profiles;                       // buildStructure
  ThreadClassification threadClasses;          // buildStructure
  MetricPlan metrics;                          // buildStructure
  FinalCct cct;                                // buildStructure
  std::vector<std::uint8_t> overheadNode;      // buildStructure: per final node, when `overhead` is computed
  RegionTree regions;                          // buildStructure
  std::unique_ptr<ProjectionSpill> spill;      // buildStructure to computeMetrics
  std::vector<std::uint64_t> byProfileScales;  // encodeValuesByProfile's
  std::unique_ptr<SpillFile> kept;             // from buildStructure: the profiles (LocalProfiles), thread classes
  std::vector<std::uint32_t> finalIdOf;        // buildStructure: per local CCT node
  Comm::NeighbourWords neighbourWords;         // discover to buildStructure: the read's balancing

  Impl(const Comm& c, PipelineOptions o, ProgressSink* p)
      : comm(c),
        options(std::move(o)),
        overheadRules(parseRules(options.overheadRules)),
        attributor(strings, options.attribution),
        workers(options.jobs, comm.rank() == 0 ? p : nullptr) {}

  static OverheadRules parseRules(const std::vector<std::string>& rules) {
    if (rules.empty()) return {};
    try {
      return OverheadRules::parse(rules);
    } catch (const std::invalid_argument& e) {
      throw PipelineError(e.what());
    }
  }
  Attribution attribution() { return {strings, attributor, options.physical, spill.get()}; }
};

Pipeline::Pipeline(const Comm& comm, PipelineOptions options, ProgressSink* progress)
    : impl_(std::make_unique<Impl>(comm, std::move(options), progress)) {}

Pipeline::~Pipeline() = default;

void Pipeline::discover() {
  Stopwatch watch;
  impl_->discovery = stages::discover(impl_->comm, impl_->options);
  // Before the read phase begins, so that a rank that starts reading late finds the shared
  // batches already taken instead of holding up the others here.
  if (impl_->options.balanceRead) impl_->neighbourWords = impl_->comm.shareWithNeighbours(BatchClaims::kWords);
  impl_->workers.record("discover", watch.seconds());
}

void Pipeline::buildStructure() {
  Impl& s = *impl_;
  faultPoint(s.comm, "read");
  LocalCct localCct(s.strings);
  RegionUnion regionUnion;
  s.spill = std::make_unique<ProjectionSpill>();
  s.kept = std::make_unique<SpillFile>("profile spool");
  ReadResult read = readAndAttribute(s.discovery, s.options, s.workers, s.attribution(), localCct, regionUnion, *s.kept,
                                     s.neighbourWords);
  Stopwatch unify;
  s.comm.release(s.neighbourWords);  // every rank has finished claiming
  s.profiles = tabulateProfiles(s.comm, s.discovery, read, s.options, *s.kept);
  s.threadClasses = stages::classifyThreads(s.comm, s.profiles, s.options.threadClasses, *s.kept);
  if (s.threadClasses.classOf.size() != s.profiles.count)
    throw std::logic_error("thread classes: one per profile expected");
  s.metrics = planMetrics(s.comm, s.discovery, read, s.options, s.overheadRules);
  {  // each profile's input is kept with it (LocalProfiles); swapped out: a move-assignment
     // would keep the names' buffer
    InputList released;
    std::swap(s.discovery.inputs, released);
  }
  s.cct = unifyCct(s.comm, localCct, s.strings);
  s.finalIdOf = finalIdsOf(localCct, s.cct);
  if (s.metrics.state.overhead != kNoMetric) s.overheadNode = s.overheadRules.classify(s.cct, s.strings);
  s.regions = RegionTree::unify(s.comm, regionUnion);
  s.workers.record("unify structure", unify.seconds());
}

void Pipeline::computeMetrics(const BatchConsumer& consume) {
  Impl& s = *impl_;
  faultPoint(s.comm, "metrics");
  computeValues(s.profiles, s.options, s.workers, s.attribution(),
                {s.cct, s.finalIdOf, s.metrics, s.overheadNode, s.regions, s.byProfileScales}, consume);
  s.spill.reset();
}

void Pipeline::encodeValuesByProfile(std::vector<std::uint64_t> scales) { impl_->byProfileScales = std::move(scales); }

std::size_t Pipeline::inputCount() const { return impl_->discovery.total; }
std::size_t Pipeline::batchProfiles() const { return impl_->discovery.batchProfiles; }
const ProfileSource* Pipeline::source(std::size_t index) const { return impl_->options.sources.at(index).get(); }
std::size_t Pipeline::sourceIndex(const ProfileSource* source) const {
  return stages::sourceIndex(impl_->options.sources, source);
}
const FinalCct& Pipeline::cct() const { return impl_->cct; }
const std::vector<RegionTreeNode>& Pipeline::regions() const { return impl_->regions.nodes(); }
std::vector<std::uint32_t> Pipeline::regionIds(const RegionProfile& r) const { return impl_->regions.idsOf(r); }
StringTable& Pipeline::strings() { return impl_->strings; }
const std::vector<MetricDescriptor>& Pipeline::metrics() const { return impl_->metrics.metrics; }
std::uint32_t Pipeline::profileCount() const { return impl_->profiles.count; }
std::uint32_t Pipeline::firstProfileId() const { return impl_->profiles.firstId; }
const std::vector<std::uint8_t>& Pipeline::threadClassOf() const { return impl_->threadClasses.classOf; }
std::vector<storage::ThreadClassInfo> Pipeline::threadClasses() const { return impl_->threadClasses.infos(); }
std::uint32_t Pipeline::localProfileCount() const { return impl_->profiles.local.size(); }
void Pipeline::forEachLocalProfile(const LocalProfileVisitor& visit) const {
  const LocalProfiles& local = impl_->profiles.local;
  for (const auto& batch : local.batches()) {
    const auto loaded = local.load(batch);
    for (std::uint32_t i = 0; i < batch.count; ++i) visit(loaded.infos[i], loaded.records[i], loaded.inputs[i]);
  }
}
const std::vector<Identity>& Pipeline::commonIdentities() const { return impl_->profiles.common; }
const std::vector<SkippedInput>& Pipeline::skipped() const { return impl_->profiles.skipped; }
bool Pipeline::physicalPaths() const { return impl_->options.physical; }
const std::vector<std::string>& Pipeline::leftoverTemporaries() const { return impl_->discovery.leftoverTemporaries; }
AttributionStats Pipeline::attributionStats() const { return impl_->attributor.stats(); }
const std::vector<PhaseTime>& Pipeline::phaseTimes() const { return impl_->workers.phases(); }
unsigned Pipeline::workerThreads() const { return impl_->workers.threads(); }
tbb::task_arena& Pipeline::arena() { return impl_->workers.arena(); }

}  // namespace csp::reduce
