#include "csp/analysis/evaluate.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <set>
#include <stdexcept>

#include "csp/metrics/accumulator.hpp"

namespace csp::analysis {

namespace {

constexpr std::int64_t kNone = -1;

// A term with its constants resolved against this process.
struct CTerm {
  enum class Kind : std::uint8_t { Var, Const } kind = Kind::Const;
  int var = -1;
  std::int64_t value = kNone;  // thread slot or region symbol; kNone matches nothing
  std::optional<std::uint64_t> dynamicId;
};

struct CConstraint {
  Constraint::Op op;
  Constraint::Join join;
  std::vector<CTerm> values;
};

struct CFormula {
  Formula::Kind kind;
  CTerm thread, region;
  std::optional<Range> filter;
  std::unique_ptr<CFormula> a, b;
  int var = -1;
  VarType varType = VarType::Thread;
  std::uint64_t k = 0;
  std::vector<CConstraint> constraints;
  // The quantified variables this formula uses without binding them itself (sorted): what its
  // value can depend on within one evaluation of a measure's frame query.
  std::vector<int> deps;
  bool bodyUsesVar = true;  // quantifiers: the body depends on the quantified variable
  int cache = -1;           // a quantifier that depends on no enclosing variable: its slot in cache_
};

// a + b, a - b, a * b or a / b (docs/query.md, "Numbers").
Number arithmetic(Expr::Kind op, const Number& a, const Number& b) {
  using K = Number::Kind;
  if (a.kind == K::None || b.kind == K::None) return {};
  if (op == Expr::Kind::Div) {
    const double d = b.toDouble();
    return d == 0 ? Number{} : Number::ofReal(a.toDouble() / d);
  }
  if (a.kind == K::Integer && b.kind == K::Integer) {
    Number::Int r = 0;
    const bool overflow = op == Expr::Kind::Add   ? __builtin_add_overflow(a.integer, b.integer, &r)
                          : op == Expr::Kind::Sub ? __builtin_sub_overflow(a.integer, b.integer, &r)
                                                  : __builtin_mul_overflow(a.integer, b.integer, &r);
    if (!overflow) return Number::ofInteger(r);
  }
  const double x = a.toDouble(), y = b.toDouble();
  return Number::ofReal(op == Expr::Kind::Add ? x + y : op == Expr::Kind::Sub ? x - y : x * y);
}

bool isQuantifier(Formula::Kind k) {
  return k == Formula::Kind::ForAll || k == Formula::Kind::Exists || k == Formula::Kind::ExistsExactly;
}

bool usesVar(const CFormula& f, int var) {
  auto is = [&](const CTerm& t) { return t.kind == CTerm::Kind::Var && t.var == var; };
  if (f.kind == Formula::Kind::Predicate && (is(f.thread) || is(f.region))) return true;
  for (const auto& c : f.constraints)
    if (std::any_of(c.values.begin(), c.values.end(), is)) return true;
  return (f.a && usesVar(*f.a, var)) || (f.b && usesVar(*f.b, var));
}

// The operands of a chain of `kind` (And or Or), moved out of it.
void flatten(std::unique_ptr<CFormula> f, Formula::Kind kind, std::vector<std::unique_ptr<CFormula>>& out) {
  if (f->kind != kind) {
    out.push_back(std::move(f));
    return;
  }
  flatten(std::move(f->a), kind, out);
  flatten(std::move(f->b), kind, out);
}

std::unique_ptr<CFormula> join(std::vector<std::unique_ptr<CFormula>> parts, Formula::Kind kind) {
  auto out = std::move(parts.front());
  for (std::size_t i = 1; i < parts.size(); ++i) {
    auto n = std::make_unique<CFormula>();
    n->kind = kind;
    n->a = std::move(out);
    n->b = std::move(parts[i]);
    out = std::move(n);
  }
  return out;
}

// A quantifier like q (kind, variable, constraints) over another body.
std::unique_ptr<CFormula> requantify(const CFormula& q, std::unique_ptr<CFormula> body) {
  auto n = std::make_unique<CFormula>();
  n->kind = q.kind;
  n->var = q.var;
  n->varType = q.varType;
  n->k = q.k;
  n->constraints = q.constraints;
  n->a = std::move(body);
  return n;
}

// Moves quantifiers inward, bottom-up, so that independent quantified variables are evaluated
// one after the other instead of for every combination (docs/query.md, "Cost"):
//   Qx : B               -> B                     x not in B, no constraints on x (Q = forall, exists)
//   Qx : A(x) and B      -> (Qx : B) and (Qx : A(x))   Q = forall, exists
//   exists x : A(x) or B -> (exists x : B) or (exists x : A(x))
// and the first rule again on (Qx : B). Each keeps the value and the pruned sub-frame of every
// frame: the domains are never empty without constraints (a frame has an active thread, a
// database with frames a region), and `forall` keeps no pair of a body that fails (so it does
// not distribute over `or`); exactly-k quantifiers count and are left as they are.
std::unique_ptr<CFormula> factor(std::unique_ptr<CFormula> f) {
  if (f->a) f->a = factor(std::move(f->a));
  if (f->b) f->b = factor(std::move(f->b));
  if (f->kind != Formula::Kind::ForAll && f->kind != Formula::Kind::Exists) return f;
  if (!usesVar(*f->a, f->var)) return f->constraints.empty() ? std::move(f->a) : std::move(f);
  const Formula::Kind over = f->a->kind;
  if (over != Formula::Kind::And && !(over == Formula::Kind::Or && f->kind == Formula::Kind::Exists)) return f;
  std::vector<std::unique_ptr<CFormula>> parts, dependent, independent;
  flatten(std::move(f->a), over, parts);
  for (auto& p : parts) (usesVar(*p, f->var) ? dependent : independent).push_back(std::move(p));
  if (independent.empty()) {
    f->a = join(std::move(dependent), over);
    return f;
  }
  auto rest = join(std::move(independent), over);
  if (!f->constraints.empty()) rest = requantify(*f, std::move(rest));
  auto n = std::make_unique<CFormula>();
  n->kind = over;
  n->a = std::move(rest);
  n->b = requantify(*f, join(std::move(dependent), over));
  return n;
}

// The value and pruned sub-frame of a quantifier that does not depend on any enclosing
// quantifier's variable, kept for the rest of one evaluation (epoch) of a frame query.
struct CachedFormula {
  std::uint64_t epoch = 0;
  bool result = false;
  std::vector<std::pair<std::uint32_t, std::uint32_t>> witness;
};

struct Accum {
  std::uint64_t duration = 0;
  std::uint64_t maxPar = 0;
  Number::Int area = 0;  // thread-ns: exact, where 64 bits may not do on long runs
  std::set<std::uint32_t> threads, regions;
};

class Evaluator {
 public:
  Evaluator(const Query& q, const RegionTree& tree, const ProcessInput& p, std::vector<std::string>& warnings)
      : q_(q), tree_(tree), p_(p), warnings_(warnings) {
    // Region symbols: distinct static names.
    std::map<std::string, std::uint32_t> symOf;
    sym_.assign(tree.size(), 0);
    depth_.assign(tree.size(), 0);
    for (std::size_t r = 1; r < tree.size(); ++r) {
      auto [it, fresh] = symOf.try_emplace(tree.name[r], static_cast<std::uint32_t>(names_.size()));
      if (fresh) names_.push_back(tree.name[r]);
      sym_[r] = it->second;
      depth_[r] = depth_[tree.parent[r]] + 1;
    }
    symOf_ = std::move(symOf);
    for (std::size_t s = 0; s < p.threadNumbers.size(); ++s) slotOf_.try_emplace(p.threadNumbers[s], s);
    for (const auto& c : q.calls) calls_.push_back(compile(*c.formula));
    env_.assign(q.variables.size(), kNone);
    needSets_.assign(q.calls.size(), q.kind == Query::Kind::Attribute);
    if (q.expr) markCounts(*q.expr);
    mark_.assign(p.threadNumbers.size(), 0);
  }

  // The formula with its terms resolved, factored, then annotated (deps, caches).
  std::unique_ptr<CFormula> compile(const Formula& f) {
    auto c = factor(translate(f));
    annotate(*c, false);
    return c;
  }

  std::unique_ptr<CFormula> translate(const Formula& f) {
    auto c = std::make_unique<CFormula>();
    c->kind = f.kind;
    c->filter = f.filter;
    c->var = f.var;
    c->k = f.k;
    if (f.var >= 0) c->varType = q_.variables[static_cast<std::size_t>(f.var)].type;
    if (f.kind == Formula::Kind::Predicate) {
      c->thread = term(f.thread, VarType::Thread);
      c->region = term(f.region, VarType::Region);
    }
    for (const auto& k : f.constraints) {
      CConstraint cc{k.op, k.join, {}};
      for (const auto& v : k.values) cc.values.push_back(term(v, c->varType));
      c->constraints.push_back(std::move(cc));
    }
    if (f.a) c->a = translate(*f.a);
    if (f.b) c->b = translate(*f.b);
    return c;
  }

  // deps, bodyUsesVar and cache slots. `inQuantifier`: f is part of a quantifier's body, so it
  // may be evaluated many times for one frame; those that depend on no enclosing variable are
  // evaluated once and cached.
  void annotate(CFormula& c, bool inQuantifier) {
    const bool quantifier = isQuantifier(c.kind);
    auto use = [&](const CTerm& t) {
      // Free variables are fixed for a whole evaluation: only quantified ones count.
      if (t.kind == CTerm::Kind::Var && !q_.variables[static_cast<std::size_t>(t.var)].free) c.deps.push_back(t.var);
    };
    c.deps.clear();
    if (c.kind == Formula::Kind::Predicate) {
      use(c.thread);
      use(c.region);
    }
    for (const auto& k : c.constraints)
      for (const auto& t : k.values) use(t);
    for (CFormula* child : {c.a.get(), c.b.get()}) {
      if (!child) continue;
      annotate(*child, inQuantifier || quantifier);
      for (const int v : child->deps)
        if (!quantifier || v != c.var) c.deps.push_back(v);
    }
    std::sort(c.deps.begin(), c.deps.end());
    c.deps.erase(std::unique(c.deps.begin(), c.deps.end()), c.deps.end());
    if (quantifier) {
      c.bodyUsesVar = usesVar(*c.a, c.var);
      if (inQuantifier && c.deps.empty()) {
        c.cache = static_cast<int>(cache_.size());
        cache_.emplace_back();
      }
    }
  }

  void markCounts(const Expr& e) {
    if (e.kind == Expr::Kind::Count) needSets_[static_cast<std::size_t>(e.call)] = true;
    if (e.a) markCounts(*e.a);
    if (e.b) markCounts(*e.b);
  }

  CTerm term(const Term& t, VarType type) {
    CTerm c;
    if (t.kind == Term::Kind::Var) {
      c.kind = CTerm::Kind::Var;
      c.var = t.var;
      return c;
    }
    c.dynamicId = t.dynamicId;
    if (type == VarType::Thread) {
      const auto it = slotOf_.find(t.number);
      if (it != slotOf_.end())
        c.value = static_cast<std::int64_t>(it->second);
      else
        warn("no thread " + std::to_string(t.number) + " in this process");
      return c;
    }
    std::vector<std::string> candidates;
    if (t.kind == Term::Kind::Number)
      candidates = {"region-" + std::to_string(t.number), std::to_string(t.number)};
    else
      candidates = {t.name};
    for (const auto& n : candidates) {
      const auto it = symOf_.find(n);
      if (it != symOf_.end()) {
        c.value = it->second;
        return c;
      }
    }
    warn("no region named '" + candidates.front() + "'");
    return c;
  }

  void warn(const std::string& w) {
    if (std::find(warnings_.begin(), warnings_.end(), w) == warnings_.end()) warnings_.push_back(w);
  }

  std::int64_t valueOf(const CTerm& t) const {
    return t.kind == CTerm::Kind::Var ? env_[static_cast<std::size_t>(t.var)] : t.value;
  }

  bool inRegion(std::size_t slot, std::int64_t sym, const std::optional<std::uint64_t>& dyn,
                const std::optional<Range>& filter) const {
    if (sym == kNone || slot >= states_->size()) return false;
    const ThreadState& s = (*states_)[slot];
    for (std::uint32_t r = s.region; r != 0; r = tree_.parent[r]) {
      if (sym_[r] != static_cast<std::uint32_t>(sym)) continue;
      if (dyn && tree_.dynamicId[r] != *dyn) continue;
      if (filter) {
        const std::size_t level = depth_[r] - 1;
        if (level >= s.attrs.size() || !s.attrs[level] || !filter->contains(*s.attrs[level])) continue;
      }
      return true;
    }
    return false;
  }

  bool constraintsHold(const CFormula& f, std::int64_t v) const {
    bool result = true;
    bool first = true;
    for (const auto& c : f.constraints) {
      bool in = false;
      for (const auto& t : c.values) in = in || valueOf(t) == v;
      const bool ok = c.op == Constraint::Op::Equal || c.op == Constraint::Op::In ? in : !in;
      if (first)
        result = ok;
      else if (c.join == Constraint::Join::And)
        result = result && ok;
      else
        result = result || ok;
      first = false;
    }
    return result;
  }

  bool eval(const CFormula& f) {
    switch (f.kind) {
      case Formula::Kind::Predicate: {
        const std::int64_t th = valueOf(f.thread);
        const std::int64_t rg = valueOf(f.region);
        if (th == kNone || !inRegion(static_cast<std::size_t>(th), rg, f.region.dynamicId, f.filter)) return false;
        witness_.emplace_back(static_cast<std::uint32_t>(th), static_cast<std::uint32_t>(rg));
        return true;
      }
      case Formula::Kind::And: {
        const std::size_t mark = witness_.size();
        if (eval(*f.a) && eval(*f.b)) return true;
        witness_.resize(mark);
        return false;
      }
      case Formula::Kind::Or: {
        const bool a = eval(*f.a);
        const bool b = eval(*f.b);
        return a || b;
      }
      case Formula::Kind::Not: {
        const std::size_t mark = witness_.size();
        const bool a = eval(*f.a);
        witness_.resize(mark);
        return !a;
      }
      case Formula::Kind::ForAll:
      case Formula::Kind::Exists:
      case Formula::Kind::ExistsExactly: {
        if (f.cache >= 0) {
          CachedFormula& c = cache_[static_cast<std::size_t>(f.cache)];
          if (c.epoch != epoch_) {
            const std::size_t mark = witness_.size();
            c.result = quantify(f);
            c.witness.assign(witness_.begin() + static_cast<std::ptrdiff_t>(mark), witness_.end());
            c.epoch = epoch_;
            return c.result;
          }
          if (c.result) witness_.insert(witness_.end(), c.witness.begin(), c.witness.end());
          return c.result;
        }
        return quantify(f);
      }
    }
    return false;
  }

  // A quantifier: its body for each value of the domain that passes the constraints.
  bool quantify(const CFormula& f) {
    const std::size_t start = witness_.size();
    const auto& domain = f.varType == VarType::Thread ? activeSlots_ : allSyms_;
    const std::int64_t saved = env_[static_cast<std::size_t>(f.var)];
    std::uint64_t count = 0;
    bool all = true;
    if (!f.bodyUsesVar) {
      // The body is the same for every value: evaluated once, counted for each value.
      std::uint64_t values = 0;
      for (const std::int64_t v : domain) values += constraintsHold(f, v) ? 1 : 0;
      bool holds = false;
      if (values > 0) {
        holds = eval(*f.a);
        if (!holds) witness_.resize(start);
      }
      count = holds ? values : 0;
      const bool ok = f.kind == Formula::Kind::ForAll   ? values == 0 || holds
                      : f.kind == Formula::Kind::Exists ? count > 0
                                                        : count == f.k;
      if (!ok) witness_.resize(start);
      return ok;
    }
    for (const std::int64_t v : domain) {
      if (!constraintsHold(f, v)) continue;
      env_[static_cast<std::size_t>(f.var)] = v;
      const std::size_t mark = witness_.size();
      if (eval(*f.a)) {
        ++count;
      } else {
        witness_.resize(mark);
        all = false;
        if (f.kind == Formula::Kind::ForAll) break;
      }
    }
    env_[static_cast<std::size_t>(f.var)] = saved;
    const bool ok = f.kind == Formula::Kind::ForAll ? all : f.kind == Formula::Kind::Exists ? count > 0 : count == f.k;
    if (!ok) {
      witness_.resize(start);
    } else if (witness_.size() - start > kWitnessDedup + 4 * activeSlots_.size()) {
      // Nested quantifiers repeat the same (thread, region) pairs once per binding: the pruned
      // sub-frame is a set, so keep each pair once and memory stays bounded (a single level, with
      // one pair or a few per thread, stays below the threshold and is never sorted).
      const auto from = witness_.begin() + static_cast<std::ptrdiff_t>(start);
      std::sort(from, witness_.end());
      witness_.erase(std::unique(from, witness_.end()), witness_.end());
    }
    return ok;
  }

  ProcessResult run(const EvalOptions& options) {
    ProcessResult out;
    out.label = p_.label;
    out.threads = p_.threadNumbers.size();
    for (std::size_t s = 0; s < names_.size(); ++s) allSyms_.push_back(static_cast<std::int64_t>(s));
    // Bindings of the free variables: every combination of threads.
    const auto free = q_.freeVariables();
    checkWork(options.maxWork,
              std::pow(static_cast<double>(p_.threadNumbers.size()), static_cast<double>(free.size())));
    std::vector<std::vector<std::int64_t>> bindings(1);
    for (const int v : free) {
      std::vector<std::vector<std::int64_t>> next;
      for (const auto& b : bindings)
        for (std::size_t s = 0; s < p_.threadNumbers.size(); ++s) {
          auto c = b;
          c.push_back(static_cast<std::int64_t>(s));
          next.push_back(std::move(c));
        }
      bindings = std::move(next);
      (void)v;
    }
    const std::size_t nb = bindings.size(), nc = calls_.size();
    std::vector<Accum> acc(nb * nc);
    out.bindings.resize(nb);
    for (std::size_t b = 0; b < nb; ++b) {
      std::string label;
      for (std::size_t i = 0; i < free.size(); ++i) {
        if (!label.empty()) label += " ";
        label += q_.variables[static_cast<std::size_t>(free[i])].name + "=" +
                 std::to_string(p_.threadNumbers[static_cast<std::size_t>(bindings[b][i])]);
      }
      out.bindings[b].label = label;
    }

    FrameBuilder builder(tree_, p_.open());
    const std::uint64_t origin = builder.originNs();
    Frame frame;
    std::uint32_t generation = 0;
    while (builder.next(frame)) {
      states_ = frame.states;
      activeSlots_.clear();
      for (std::size_t s = 0; s < frame.states->size(); ++s)
        if ((*frame.states)[s].region != 0) activeSlots_.push_back(static_cast<std::int64_t>(s));
      const std::uint64_t fb = frame.beginNs - origin, fe = frame.endNs - origin;
      for (std::size_t c = 0; c < nc; ++c) {
        const auto& iv = q_.calls[c].interval;
        const std::uint64_t lo = iv ? std::max(fb, iv->beginNs) : fb;
        const std::uint64_t hi = iv ? std::min(fe, iv->endNs) : fe;
        if (hi <= lo) continue;
        const std::uint64_t dt = hi - lo;
        for (std::size_t b = 0; b < nb; ++b) {
          for (std::size_t i = 0; i < free.size(); ++i) env_[static_cast<std::size_t>(free[i])] = bindings[b][i];
          witness_.clear();
          ++epoch_;  // cached quantifiers are valid for this frame, binding and call only
          if (!eval(*calls_[c])) continue;
          // Distinct threads of the pruned sub-frame.
          if (++generation == 0) {
            std::fill(mark_.begin(), mark_.end(), 0);
            generation = 1;
          }
          std::uint64_t par = 0;
          for (const auto& [th, rg] : witness_)
            if (mark_[th] != generation) {
              mark_[th] = generation;
              ++par;
            }
          Accum& a = acc[b * nc + c];
          a.duration += dt;
          a.maxPar = std::max(a.maxPar, par);
          a.area += static_cast<Number::Int>(dt) * static_cast<Number::Int>(par);  // < 2^96 per frame
          if (needSets_[c])
            for (const auto& [th, rg] : witness_) {
              a.threads.insert(th);
              a.regions.insert(rg);
            }
          if (q_.kind == Query::Kind::Frames) {
            BindingResult& r = out.bindings[b];
            ++r.frameCount;
            r.durationNs += dt;
            if (r.frames.size() < options.maxFrames) {
              FrameRow row{lo, hi, {}};
              auto w = witness_;
              std::sort(w.begin(), w.end());
              w.erase(std::unique(w.begin(), w.end()), w.end());
              for (const auto& [th, rg] : w) row.members.emplace_back(p_.threadNumbers[th], names_[rg]);
              r.frames.push_back(std::move(row));
            }
          }
        }
      }
    }
    out.stats = builder.stats();
    for (std::size_t b = 0; b < nb; ++b) {
      BindingResult& r = out.bindings[b];
      if (q_.kind == Query::Kind::Value) {
        r.number = value(*q_.expr, &acc[b * nc]);
        r.value = r.number.toDouble();
      } else if (q_.kind == Query::Kind::Attribute) {
        const Accum& a = acc[b * nc];
        if (q_.attribute == Attribute::WhichThreads) {
          std::vector<std::uint64_t> nums;
          for (auto th : a.threads) nums.push_back(p_.threadNumbers[th]);
          std::sort(nums.begin(), nums.end());
          for (auto n : nums) r.members.push_back(std::to_string(n));
        } else {
          for (auto rg : a.regions) r.members.push_back(names_[rg]);
          std::sort(r.members.begin(), r.members.end());
        }
      }
    }
    return out;
  }

  Number value(const Expr& e, const Accum* acc) const {
    switch (e.kind) {
      case Expr::Kind::Number:
        return e.integer ? Number::ofInteger(*e.integer) : Number::ofReal(e.number);
      case Expr::Kind::Measure: {
        const Accum& a = acc[e.call];
        switch (e.measure) {
          case Measure::Duration:
            return Number::ofInteger(a.duration);
          case Measure::MaxPar:
            return Number::ofInteger(a.maxPar);
          case Measure::Area:
            return Number::ofInteger(a.area);
        }
        return {};
      }
      case Expr::Kind::Count: {
        const Accum& a = acc[e.call];
        return Number::ofInteger(
            static_cast<Number::Int>(e.attribute == Attribute::WhichThreads ? a.threads.size() : a.regions.size()));
      }
      case Expr::Kind::Neg:
        return arithmetic(Expr::Kind::Sub, Number::ofInteger(0), value(*e.a, acc));
      default:
        return arithmetic(e.kind, value(*e.a, acc), value(*e.b, acc));
    }
  }

  // At most how many predicates and constraint checks one evaluation of f takes; a quantifier
  // evaluated once per frame (cached) adds its cost to `once` and 1 where it is used.
  double cost(const CFormula& f, double& once) const {
    switch (f.kind) {
      case Formula::Kind::Predicate:
        return 1;
      case Formula::Kind::And:
      case Formula::Kind::Or:
        return cost(*f.a, once) + cost(*f.b, once);
      case Formula::Kind::Not:
        return cost(*f.a, once);
      default:
        break;
    }
    const double domain = static_cast<double>(f.varType == VarType::Thread ? p_.threadNumbers.size() : names_.size());
    const double body = cost(*f.a, once);
    const double c = f.bodyUsesVar ? domain * (1 + body) : domain + body;
    if (f.cache < 0) return c;
    once += c;
    return 1;
  }

  // Refuses, before reading a frame, a query whose worst case is beyond `maxWork` and beyond 64
  // one-level scans of the same logs (so that long logs alone never refuse a query): quantifiers
  // that factoring could not separate cost the product of their domains in every frame, and
  // each free variable multiplies the bindings by the threads.
  void checkWork(double maxWork, double bindings) const {
    if (bindings > kMaxBindings)
      throw QueryError(
          0, fmt::format("the query has {:.3g} bindings of its free variables in {} ({} threads to the "
                         "power of {} free variables), more than {:.0g}: bind some of them with a "
                         "quantifier (docs/query.md, \"Cost\")",
                         bindings, p_.label, p_.threadNumbers.size(), q_.freeVariables().size(), kMaxBindings));
    double perFrame = 0;
    for (const auto& c : calls_) {
      double once = 0;
      perFrame += cost(*c, once) + once;
    }
    const double frames = std::max(1.0, static_cast<double>(p_.events));
    const double work = perFrame * bindings * frames;
    const double scans =
        64 * frames * static_cast<double>(calls_.size()) * static_cast<double>(p_.threadNumbers.size() + names_.size());
    if (work <= std::max(maxWork, scans)) return;
    throw QueryError(
        0, fmt::format("the query needs up to {:.3g} evaluations in {} ({:.3g} per frame{}, up to {:.0f} "
                       "frames), more than the limit of {:.3g}: its quantified variables depend on each "
                       "other, so their values are tried in every combination; restrict their domains "
                       "(forall t in {{0, 1}}: ...) or nest fewer quantifiers (docs/query.md, \"Cost\")",
                       work, p_.label, perFrame * bindings,
                       bindings > 1 ? fmt::format(" with {:.0f} bindings of the free variables", bindings) : "", frames,
                       std::max(maxWork, scans)));
  }

 private:
  const Query& q_;
  const RegionTree& tree_;
  const ProcessInput& p_;
  std::vector<std::string>& warnings_;
  std::vector<std::uint32_t> sym_, depth_;
  std::vector<std::string> names_;
  std::map<std::string, std::uint32_t> symOf_;
  std::map<std::uint64_t, std::size_t> slotOf_;
  std::vector<std::unique_ptr<CFormula>> calls_;
  std::vector<std::int64_t> env_;
  std::vector<std::int64_t> activeSlots_, allSyms_;
  std::vector<std::pair<std::uint32_t, std::uint32_t>> witness_;
  std::vector<std::uint32_t> mark_;
  std::vector<bool> needSets_;
  const std::vector<ThreadState>* states_ = nullptr;
  std::vector<CachedFormula> cache_;
  std::uint64_t epoch_ = 0;
  static constexpr std::size_t kWitnessDedup = 64;
  static constexpr double kMaxBindings = 1e6;
};

}  // namespace

double Number::toDouble() const {
  switch (kind) {
    case Kind::Integer:
      return static_cast<double>(integer);
    case Kind::Real:
      return real;
    case Kind::None:
      break;
  }
  return std::numeric_limits<double>::quiet_NaN();
}

std::string toString(const Number& n) {
  switch (n.kind) {
    case Number::Kind::Integer: {
      const auto magnitude =
          n.integer < 0 ? -static_cast<metrics::Uint128>(n.integer) : static_cast<metrics::Uint128>(n.integer);
      std::string out(n.integer < 0 ? 1 : 0, '-');
      out += metrics::toDecimalString(magnitude);
      return out;
    }
    case Number::Kind::Real:
      return fmt::format("{}", n.real);
    case Number::Kind::None:
      break;
  }
  return "nan";
}

bool operator<(const Number& a, const Number& b) {
  if (a.kind == Number::Kind::None || b.kind == Number::Kind::None)
    return a.kind == Number::Kind::None && b.kind != Number::Kind::None;
  if (a.kind == Number::Kind::Integer && b.kind == Number::Kind::Integer) return a.integer < b.integer;
  return a.toDouble() < b.toDouble();
}

Number median(const std::vector<Number>& sorted) {
  if (sorted.empty()) return {};
  const std::size_t n = sorted.size();
  if (n % 2) return sorted[n / 2];
  const Number& a = sorted[n / 2 - 1];
  const Number& b = sorted[n / 2];
  Number::Int sum = 0;
  if (a.kind == Number::Kind::Integer && b.kind == Number::Kind::Integer &&
      !__builtin_add_overflow(a.integer, b.integer, &sum) && sum % 2 == 0)
    return Number::ofInteger(sum / 2);
  return Number::ofReal(a.toDouble() / 2 + b.toDouble() / 2);
}

ProcessResult evaluate(const Query& query, const RegionTree& tree, const ProcessInput& process,
                       const EvalOptions& options) {
  std::vector<std::string> warnings;
  Evaluator ev(query, tree, process, warnings);
  ProcessResult r = ev.run(options);
  r.warnings = std::move(warnings);
  return r;
}

}  // namespace csp::analysis
