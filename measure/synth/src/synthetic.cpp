#include "csp/synth/synthetic.hpp"

#include <fmt/format.h>
#include <algorithm>
#include <atomic>
#include <cmath>
#include <exception>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "csp/storage/profile_builder.hpp"
#include "csp/storage/profile_io.hpp"

namespace csp::synth {

namespace {

// SplitMix64: small, fast, and fully determined by its seed on every platform (unlike the
// standard library's distributions), which keeps generated files byte-identical.
class Rng {
 public:
  explicit Rng(std::uint64_t seed) : state_(seed) {}
  std::uint64_t next() {
    std::uint64_t z = (state_ += 0x9E3779B97F4A7C15ULL);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
  }
  std::uint32_t below(std::uint32_t n) { return static_cast<std::uint32_t>(next() % n); }
  double uniform() { return static_cast<double>(next() >> 11) * 0x1.0p-53; }

 private:
  std::uint64_t state_;
};

std::uint64_t mix(std::uint64_t a, std::uint64_t b) {
  Rng r(a * 0x100000001B3ULL ^ (b + 0x632BE59BD9B4E019ULL));
  return r.next();
}

struct Procedure {
  std::string name;
  std::string file;
  std::string module;
  std::uint32_t line;
};

// Symbolic frame with its strings spelled out; interned per profile.
struct TemplateFrame {
  ScopeKind scope;
  std::uint32_t procedure;      // index into the procedure pool (ProcFrame, Alien)
  std::uint32_t fileProcedure;  // procedure whose file the line belongs to
  std::uint32_t line;
};

// One group's call tree, parent before child. Leaves are statements with a weight.
struct GroupTemplate {
  std::vector<std::uint32_t> parent;
  std::vector<TemplateFrame> frame;
  std::vector<std::uint32_t> leaves;
  std::vector<double> leafWeight;
  std::vector<bool> leafHot;
};

const char* const kVerbs[] = {"solve",  "update",      "compute", "exchange", "assemble", "apply",     "reduce", "pack",
                              "unpack", "interpolate", "smooth",  "restrict", "prolong",  "integrate", "advance"};
const char* const kNouns[] = {"flux",   "halo", "matrix", "residual", "boundary", "grid",    "particles",
                              "forces", "mesh", "field",  "stencil",  "tracers",  "density", "pressure"};
const char* const kModules[] = {"app", "libsolver.so", "libphysics.so", "libmpi.so.40"};

std::vector<Procedure> makeProcedurePool(std::uint32_t count, std::uint64_t seed) {
  Rng rng(mix(seed, 0xA11CE));
  std::vector<Procedure> pool;
  pool.push_back({"main", "src/main.c", "app", 12});
  for (std::uint32_t i = 1; i < count; ++i) {
    const char* verb = kVerbs[rng.below(std::size(kVerbs))];
    const char* noun = kNouns[rng.below(std::size(kNouns))];
    const char* module = kModules[rng.below(std::size(kModules))];
    pool.push_back({fmt::format("{}_{}_{}", verb, noun, i), fmt::format("src/{}_{}.c", noun, i % 37), module,
                    10 + rng.below(2000)});
  }
  return pool;
}

GroupTemplate makeGroupTemplate(const SyntheticOptions& o, std::uint32_t group, std::uint32_t poolSize) {
  Rng rng(mix(o.seed, 0x6000 + group));
  GroupTemplate t;
  std::vector<std::uint32_t> depth;
  std::vector<std::uint32_t> enclosingProc;  // procedure whose body a node lies in
  std::vector<std::uint32_t> expandable;     // ProcFrame and Loop nodes that may get children
  auto add = [&](std::uint32_t parent, TemplateFrame f, std::uint32_t proc) {
    const auto id = static_cast<std::uint32_t>(t.parent.size());
    t.parent.push_back(parent);
    t.frame.push_back(f);
    depth.push_back(parent == kNoIndex ? 0 : depth[parent] + 1);
    enclosingProc.push_back(proc);
    return id;
  };
  const std::uint32_t target = std::max<std::uint32_t>(o.nodes, 4);
  const std::uint32_t maxDepth = std::max<std::uint32_t>(o.depth, 3);
  add(kNoIndex, {ScopeKind::Root, 0, 0, 0}, 0);
  const auto mainNode = add(0, {ScopeKind::ProcFrame, 0, 0, 0}, 0);
  expandable.push_back(mainNode);
  auto line = [&](std::uint32_t proc) { return 1 + rng.below(400) + proc % 7; };

  while (t.parent.size() < target && !expandable.empty()) {
    // Prefer recently created scopes half of the time so that the tree reaches its depth.
    const std::size_t pick = rng.below(2) == 0
                                 ? expandable.size() - 1 - rng.below(std::min<std::size_t>(expandable.size(), 8))
                                 : rng.below(static_cast<std::uint32_t>(expandable.size()));
    const std::uint32_t at = expandable[pick];
    const std::uint32_t proc = enclosingProc[at];
    const std::uint32_t room = maxDepth - depth[at];
    const std::uint32_t roll = rng.below(100);
    if (roll < 45 && room >= 3) {
      // Call: CallSite -> ProcFrame -> Stmt.
      const std::uint32_t callee = 1 + rng.below(poolSize - 1);
      const auto cs = add(at, {ScopeKind::CallSite, proc, proc, line(proc)}, proc);
      const auto pf = add(cs, {ScopeKind::ProcFrame, callee, callee, 0}, callee);
      t.leaves.push_back(add(pf, {ScopeKind::Stmt, callee, callee, line(callee)}, callee));
      expandable.push_back(pf);
    } else if (roll < 55 && room >= 2) {
      const auto lp = add(at, {ScopeKind::Loop, proc, proc, line(proc)}, proc);
      t.leaves.push_back(add(lp, {ScopeKind::Stmt, proc, proc, line(proc)}, proc));
      expandable.push_back(lp);
    } else if (roll < 60 && room >= 2) {
      const std::uint32_t inlined = 1 + rng.below(poolSize - 1);
      const auto al = add(at, {ScopeKind::Alien, inlined, proc, line(proc)}, proc);
      t.leaves.push_back(add(al, {ScopeKind::Stmt, inlined, inlined, line(inlined)}, proc));
    } else if (room >= 1) {
      t.leaves.push_back(add(at, {ScopeKind::Stmt, proc, proc, line(proc)}, proc));
    } else {
      expandable.erase(expandable.begin() + static_cast<std::ptrdiff_t>(pick));
    }
  }

  // Heavy-tailed weights; a few hot statements carry a large share.
  t.leafWeight.resize(t.leaves.size());
  t.leafHot.assign(t.leaves.size(), false);
  for (auto& w : t.leafWeight) w = 1.0 + std::floor(-std::log(1.0 - rng.uniform()) * 6.0);
  for (std::uint32_t h = 0; h < o.hotPaths && !t.leaves.empty(); ++h) {
    const auto leaf = rng.below(static_cast<std::uint32_t>(t.leaves.size()));
    t.leafHot[leaf] = true;
    t.leafWeight[leaf] *= 60.0;
  }
  return t;
}

std::vector<MetricDescriptor> syntheticMetrics(std::uint32_t count) {
  std::vector<MetricDescriptor> m;
  constexpr std::uint64_t kPeriodNs = 5'000'000;  // 200 samples per second
  m.push_back({"cpu-time", "ns", MetricKind::Sampled, kPeriodNs, "thread CPU time, sampled"});
  if (count >= 2) m.push_back({"real-time", "ns", MetricKind::Sampled, kPeriodNs, "wall-clock time, sampled"});
  for (std::uint32_t i = 2; i < count; ++i)
    m.push_back({fmt::format("event-{}", i), "events", MetricKind::Counted, 1, "synthetic counted event"});
  return m;
}

// Everything shared by all profiles of one generation run.
struct Universe {
  SyntheticOptions options;
  std::vector<Procedure> pool;
  std::vector<GroupTemplate> groups;
  std::vector<MetricDescriptor> metrics;

  explicit Universe(const SyntheticOptions& o)
      : options(o), metrics(syntheticMetrics(std::max<std::uint32_t>(o.metrics, 1))) {
    const std::uint32_t poolSize = std::max<std::uint32_t>(16, o.nodes / 25);
    pool = makeProcedurePool(poolSize, o.seed);
    for (std::uint32_t g = 0; g < std::max<std::uint32_t>(o.groups, 1); ++g)
      groups.push_back(makeGroupTemplate(o, g, poolSize));
  }

  std::uint32_t groupOf(std::uint32_t rank, std::uint32_t thread) const {
    // Main threads and worker threads run different code; ranks alternate among the rest.
    const auto g = static_cast<std::uint32_t>(groups.size());
    if (g == 1) return 0;
    if (options.threads == 1) return rank % g;
    return thread == 0 ? rank % (g - 1) : g - 1;
  }

  ThreadProfile make(std::uint32_t rank, std::uint32_t thread) const;
};

ThreadProfile Universe::make(std::uint32_t rank, std::uint32_t thread) const {
  const auto& o = options;
  const GroupTemplate& t = groups[groupOf(rank, thread)];
  Rng rng(mix(mix(o.seed, rank), thread + 0x7EAD));
  storage::ProfileBuilder b(FrameKind::Symbolic);
  ThreadProfile& p = b.profile();
  p.metrics = metrics;
  p.identity.idTuple = {{IdKind::Node, rank / std::max<std::uint32_t>(o.ranksPerNode, 1)},
                        {IdKind::Rank, rank},
                        {IdKind::Thread, thread}};
  p.identity.pid = 100000 + rank;
  p.identity.hostname = fmt::format("node{:04}", rank / std::max<std::uint32_t>(o.ranksPerNode, 1));
  p.identity.executable = "synthetic-app";
  p.identity.commandLine = {"synthetic-app", "--steps", "100"};
  p.identity.startTimeNs = 1'700'000'000'000'000'000ULL;
  p.identity.settings = {{"generator", "csp-gen synthetic"},
                         {"seed", std::to_string(o.seed)},
                         {"nodes", std::to_string(o.nodes)},
                         {"groups", std::to_string(o.groups)}};

  // Which statements this thread executed, and which template nodes lead to them.
  const std::size_t n = t.parent.size();
  std::vector<std::uint8_t> keep(n, 0);
  std::vector<std::uint32_t> leafCount(t.leaves.size(), 0);
  const double rankFactor = 1.0 + o.imbalance * (o.ranks > 1 ? double(rank) / double(o.ranks - 1) : 0.0);
  for (std::size_t l = 0; l < t.leaves.size(); ++l) {
    const double u = rng.uniform();
    const double noise = rng.uniform();
    if (!t.leafHot[l] && u >= o.presence) continue;
    leafCount[l] =
        static_cast<std::uint32_t>(std::max(1.0, std::round(t.leafWeight[l] * rankFactor * (0.8 + 0.4 * noise))));
    keep[t.leaves[l]] = 1;
  }
  for (std::size_t i = n; i-- > 1;)
    if (keep[i]) keep[t.parent[i]] = 1;

  std::vector<std::uint32_t> profileNode(n, kNoIndex);
  std::vector<std::uint32_t> frameOf(n, kNoIndex);
  profileNode[0] = 0;
  for (std::size_t i = 1; i < n; ++i) {
    if (!keep[i]) continue;
    const TemplateFrame& f = t.frame[i];
    SymbolicFrame s;
    s.scope = f.scope;
    const Procedure& fileProc = pool[f.fileProcedure];
    s.file = b.intern(fileProc.file);
    s.line = f.line;
    if (f.scope == ScopeKind::ProcFrame) {
      s.name = b.intern(pool[f.procedure].name);
      s.module = b.intern(pool[f.procedure].module);
      s.line = pool[f.procedure].line;
    } else if (f.scope == ScopeKind::Alien) {
      s.name = b.intern(pool[f.procedure].name);
    }
    profileNode[i] = b.child(profileNode[t.parent[i]], b.frame(s));
  }
  for (std::size_t l = 0; l < t.leaves.size(); ++l) {
    if (leafCount[l] == 0) continue;
    const auto node = profileNode[t.leaves[l]];
    b.addCount(node, 0, leafCount[l]);
    if (metrics.size() >= 2) {
      // Real time adds waiting on top of CPU time on about a third of the statements.
      const auto wait = (rng.below(3) == 0) ? static_cast<std::uint64_t>(leafCount[l] * rng.uniform() * 0.5) : 0;
      b.addCount(node, 1, leafCount[l] + wait);
    }
    for (std::size_t m = 2; m < metrics.size(); ++m) {
      if (rng.below(2) == 0)
        b.addCount(node, static_cast<std::uint16_t>(m), std::uint64_t{leafCount[l]} * (1000 + rng.below(1000)));
    }
  }

  if (o.regions) {
    auto& r = p.regions;
    r.names = {"main", "compute", "communicate"};
    std::uint64_t total = 0;
    for (auto c : leafCount) total += c;
    const std::uint64_t computeNs = total * 5'000'000ULL;
    const std::uint64_t commNs = static_cast<std::uint64_t>(computeNs * (0.1 + 0.2 * rng.uniform()));
    const std::uint64_t steps = 100;
    r.parent = {kNoIndex, 0, 1, 1};
    r.staticId = {0, 0, 1, 2};
    r.dynamicId = {0, 0, 0, 0};
    r.count = {0, 1, steps, steps};
    r.inclusiveNs = {0, computeNs + commNs + 1000, computeNs, commNs};
    r.exclusiveNs = {0, 1000, computeNs, commNs};
  }
  p.identity.endTimeNs = p.identity.startTimeNs + 1'000'000'000ULL;
  return b.finish();
}

}  // namespace

ThreadProfile makeSyntheticProfile(const SyntheticOptions& options, std::uint32_t rank, std::uint32_t thread) {
  return Universe(options).make(rank, thread);
}

GenerationSummary writeSynthetic(const SyntheticOptions& options, const std::filesystem::path& dir,
                                 const std::function<void(std::uint64_t, std::uint64_t)>& progress) {
  const Universe universe(options);
  const std::uint64_t total = std::uint64_t{options.ranks} * options.threads;
  unsigned jobs = options.jobs ? options.jobs : std::max(1u, std::thread::hardware_concurrency());
  jobs = static_cast<unsigned>(std::min<std::uint64_t>(jobs, std::max<std::uint64_t>(total, 1)));

  std::atomic<std::uint64_t> next{0}, done{0}, nodes{0}, values{0}, bytes{0};
  std::exception_ptr failure;
  std::mutex failureMutex;
  std::atomic<bool> failed{false};
  auto work = [&] {
    try {
      for (std::uint64_t i = next++; i < total; i = next++) {
        const auto rank = static_cast<std::uint32_t>(i / options.threads);
        const auto thread = static_cast<std::uint32_t>(i % options.threads);
        ThreadProfile p = universe.make(rank, thread);
        const auto path = dir / storage::profileFileName(p.identity);
        storage::writeProfile(p, path);
        nodes += p.cct.size();
        values += p.values.size();
        bytes += std::filesystem::file_size(path);
        ++done;
      }
    } catch (...) {
      std::lock_guard lock(failureMutex);
      if (!failure) failure = std::current_exception();
      failed = true;
      next = total;  // stop the others
    }
  };
  std::vector<std::thread> workers;
  for (unsigned j = 1; j < jobs; ++j) workers.emplace_back(work);
  if (progress) {
    // The calling thread reports while the workers write.
    std::thread last(work);
    while (done < total && !failed) {
      progress(done, total);
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
    }
    last.join();
  } else {
    work();
  }
  for (auto& w : workers) w.join();
  if (failure) std::rethrow_exception(failure);
  if (progress) progress(done, total);
  return {done, nodes, values, bytes};
}

}  // namespace csp::synth
