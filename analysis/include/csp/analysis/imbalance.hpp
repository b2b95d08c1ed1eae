// Why the threads of a parallel section are out of balance: cause attribution in the spirit of
// LIME (Oh et al., ICSE 2011), on the per-thread values of a database (docs/views.md, "Load
// imbalance: which contexts cause it").
//
// The threads (ranks x threads, of the selected thread classes) are the samples. For a section --
// a CCT subtree, by default the whole program -- T[t] is thread t's inclusive value of the
// section; for a region (`region:NAME`), thread t's wall-clock time inside it from the region
// event logs. The analysis runs as named stages:
//   1. verdict on the section: an imbalance (max / mean) that sampling alone could produce
//      (thesis App. A: each thread's value is exact to one period) or below `minImbalance` is
//      not explained at all;
//   2. contexts: every context inside the section holding a noticeable share of it gives a vector
//      x_c[t] of its per-thread inclusive values (one scan of the by-node order per context);
//   3. own costs: a static scope (procedure frame, inlined code, loop) owns what it costs beyond
//      the static scopes analysed below it, e_c = x_c - sum of x_d over its nearest analysed static
//      descendants d; the own costs of all scopes and the section's remainder add up to T;
//   4. shares: a scope's share of the imbalance is cov(e_c, T) / var(T), what it explains
//      exclusively of its descendants (the shares add up to 1: a caller that merely contains the
//      cause, or a heavy procedure that costs the same everywhere, has a share near 0);
//   5. causes: the scopes with a share of at least `minShare` whose own cost varies by more than
//      sampling can make it vary -- beyond its worst-case error (one period per value) and beyond
//      chance by the dispersion test of its sample counts (chi-square, Bonferroni-corrected for
//      the number of scopes tested) -- ranked by share; a cause whose own cost varies like a
//      higher-ranked one's (correlation >= clusterThreshold) is another site of it;
//   6. each cause gets the context where it enters the tree (the outermost context above it that
//      is essentially the cause: it costs little more and carries no more of the imbalance),
//      its hottest line and the threads where it costs most.
// Limits: correlation is not causation (a context whose cost merely follows the slow threads is
// reported as well); sampling noise limits what small contexts can show.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "csp/storage/database.hpp"

namespace csp::analysis {

struct ImbalanceOptions {
  std::string section;            // CCT node id, procedure name (all its outermost contexts) or
                                  // "region:NAME" (needs region event logs); "": the root
  std::string metric;             // "": the database's first metric
  std::string threads;            // thread selection (storage::selectThreads); "": the worker threads
                                  // if there are two or more, else the views' default
  double minImbalance = 0.05;     // a section with max / mean below 1 + this is called balanced
  double clusterThreshold = 0.9;  // scopes whose own costs correlate at least this much with a
                                  // cause's are listed as further sites of it
  double minContextShare = 0.01;  // contexts below this share of the section's total are left out
  double minShare = 0.05;         // causes explain at least this share of the imbalance
  double significance = 0.05;     // level of the dispersion tests (after the correction)
  std::size_t maxContexts = 400;  // largest contexts analysed
};

struct SlowThread {
  storage::ProfileId profile = 0;
  std::string who;   // "rank 3 thread 1"
  double value = 0;  // section time (or the cause's cost) in this thread
};

struct ImbalanceCause {
  storage::NodeId context = 0;  // the static scope whose own cost explains it
  std::string label;            // "loop solve.c:40"
  std::string path;             // procedures from the root to the scope's procedure: "main/solve"
  storage::NodeId entry = 0;    // where the cause enters the tree: the outermost context above
  std::string entryLabel;       // `context` that carries nothing else ("call solve.c:12")
  storage::NodeId focus = 0;    // its hottest line (== context when it has none analysed)
  std::string focusLabel;
  double share = 0;                 // what it explains exclusively (with its sites), of the imbalance
  double correlation = 0;           // corr(own cost, T)
  double beta = 0;                  // standardized coefficient in the final regression
  double pValue = 1;                // of its dispersion test, corrected for the scopes tested
  double mean = 0, max = 0;         // its own cost per thread
  std::vector<SlowThread> threads;  // where its own cost is highest, descending (at most 5)
  struct Site {
    storage::NodeId context = 0;
    std::string label;
    std::string path;
    double share = 0;
    double correlation = 0;  // of its own cost with the cause's
  };
  std::vector<Site> sites;  // other scopes whose own cost varies the same way (same cause)
};

// What the analysis concluded about the section as a whole.
enum class ImbalanceVerdict : std::uint8_t {
  Explained,            // causes are listed
  WithinSamplingError,  // max / mean could be 1 once every thread's value moves within its error
  BelowThreshold,       // max / mean below 1 + minImbalance
  NotSignificant,       // scopes with minShare, but their differences are what sampling produces
  NoCauseAboveShare,    // no scope explains minShare beyond its worst-case sampling error
  NothingToAnalyse,     // no context inside the section varies over the threads
};
const char* toString(ImbalanceVerdict verdict);

struct ImbalanceReport {
  std::string section;  // label of the section
  std::string metric, unit;
  std::string sectionMeasure = "inclusive";  // what T is: the metric's inclusive value, or a region's time
  std::string threadsLabel;                  // which threads were the samples
  std::size_t threads = 0;                   // samples
  double sum = 0, mean = 0, max = 0, stddev = 0, imbalance = 0;  // of T
  double samplingError = 0;           // worst-case error of one thread's T (period - 1; 0 for counted metrics)
  std::vector<SlowThread> slowest;    // threads with T above mean + stddev (at most 10), descending
  std::size_t contextsInSection = 0;  // CCT nodes below the section
  std::size_t contextsAnalysed = 0;   // with a share >= minContextShare and varying over threads
  std::size_t scopesTested = 0;       // static scopes among them that vary over the threads
  ImbalanceVerdict verdict = ImbalanceVerdict::NothingToAnalyse;
  std::string verdictText;             // one sentence: why nothing is listed, or what was found
  double modelPValue = 1;              // smallest corrected dispersion p-value of the scopes with minShare
  double r2 = 0;                       // of T regressed on the causes (0 without causes)
  std::vector<ImbalanceCause> causes;  // ranked by share
  std::vector<std::string> notes;      // caveats about the data (lost region events)
};

// Throws std::invalid_argument for a bad section, metric, option or thread selection (one line),
// and storage::DatabaseError for a damaged database.
ImbalanceReport analyzeImbalance(const storage::Database& db, const ImbalanceOptions& options);

// P(F > f) for an F-distributed variable with (d1, d2) degrees of freedom (the regularized
// incomplete beta function).
double fTestPValue(double f, double d1, double d2);
// P(X > x) for a chi-square variable with df degrees of freedom (the regularized upper incomplete
// gamma function): the p-value of a dispersion test.
double chiSquarePValue(double x, double df);

}  // namespace csp::analysis
