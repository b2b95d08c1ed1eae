// Parallel overhead (thesis §5.2.2; docs/postprocessing.md, "Work, idleness, overhead"): which
// samples of `work` were spent in the code of parallel runtimes (OpenMP, pthreads, MPI) rather
// than in the program's own computation. csp-prof-mpi classifies canonical CCT nodes by rules on
// the load module and procedure names, so that the rules cost nothing at run time.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "csp/reduce/canonical_cct.hpp"
#include "csp/reduce/scope.hpp"

namespace csp::reduce {

// MODULE_GLOB[:PROCEDURE_GLOB], shell globs (fnmatch) on the module's file name (not its
// directory) and the demangled procedure name; without a procedure glob, every procedure of
// the module matches.
struct OverheadRule {
  std::string module;
  std::string procedure;  // empty: any
  std::string text() const { return procedure.empty() ? module : module + ":" + procedure; }
};

class OverheadRules {
 public:
  // The rules csp-prof-mpi uses unless told otherwise: the OpenMP runtimes, pthread functions and
  // futex and lock waits of the C library, the MPI libraries and their transports.
  static const std::vector<std::string>& defaultRuleTexts();
  // Code of these modules is looked through: a sample in the C library (memcpy, a futex wait) is
  // classified by the procedure that called into it.
  static const std::vector<std::string>& transparentModules();

  OverheadRules();  // the defaults
  // Rules as given on the command line, in order: "default" stands for the default rules,
  // "none" for no rule (alone). Throws std::invalid_argument naming a malformed rule.
  static OverheadRules parse(const std::vector<std::string>& texts);

  const std::vector<OverheadRule>& rules() const { return rules_; }
  std::string describe() const;  // the rules' texts, comma-separated ("none" when empty)
  bool matches(const std::string& moduleName, const std::string& procedure) const;

  // Per canonical CCT node (by id): 1 where a statement's samples of work are overhead, i.e.
  // the innermost procedure outside the transparent modules (or an inlined procedure there)
  // matches a rule. Parents must precede children (FinalCct's preorder ids do).
  std::vector<std::uint8_t> classify(const FinalCct& cct, const StringTable& strings) const;

 private:
  std::vector<OverheadRule> rules_;
};

}  // namespace csp::reduce
