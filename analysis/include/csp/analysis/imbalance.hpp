// Why the threads of a parallel section are out of balance: cause attribution in the spirit of
// LIME (Oh et al., ICSE 2011), on the per-thread values of a database (docs/views.md, "Load
// imbalance: which contexts cause it").
//
// The threads (ranks x threads, of the selected thread classes) are the samples. For a section --
// a CCT subtree, by default the whole program -- T[t] is thread t's inclusive value of the
// section; for a region (`region:NAME`), thread t's wall-clock time inside it from the region
// event logs, and the contexts are all of the CCT's (samples carry no region), less the spine
// that holds a thread's whole time. Every context c inside it that holds a noticeable share of the section gives a vector
// x_c[t] of its per-thread inclusive values (one scan of the by-node order per context). Then:
//   1. contexts whose vectors are highly correlated are clustered (hierarchical clustering,
//      average linkage over Pearson correlation, merging while the closest pair correlates at
//      least `clusterThreshold`): a cluster is one cause seen at several levels of the tree;
//   2. each cluster's leaders are its outermost contexts (no ancestor in the cluster), where the
//      cause enters the calling context tree; its focus is its deepest context that still
//      carries most of the cluster's share, where the work happens (a loop, a line);
//   3. a context's share of the imbalance is cov(x_c, T) / var(T): the part of the threads'
//      variation in section time that varies with it (shares of disjoint contexts add up);
//   4. a forward-selection multiple regression of T (standardized) on the clusters (averaged
//      z-scores of their members) keeps the clusters that add significantly (F-test) to what the
//      model explains, and gives each a standardized coefficient beta;
//   5. a leader's score is beta of its cluster x its share; causes are the leaders of kept
//      clusters with a share of at least `minShare`, ranked by score, with the threads in which
//      they cost most; a cause inside a higher-ranked one is listed as a part of it.
// Limits: correlation is not causation (a context whose cost merely follows the slow threads
// is reported as well); with few threads (< 8) no regression is meaningful and none is made;
// sampling noise limits what small contexts can show (their per-thread values are exact only to
// one period).
#pragma once

#include <cstdint>
#include <iosfwd>
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
  double clusterThreshold = 0.9;  // merge clusters while their average correlation is at least this
  double minContextShare = 0.01;  // contexts below this share of the section's total are left out
  double minShare = 0.05;         // causes explain at least this share of the imbalance
  double significance = 0.05;     // F-test level of the forward selection
  std::size_t maxContexts = 400;  // largest contexts analysed (correlations are quadratic in them)
};

struct SlowThread {
  storage::ProfileId profile = 0;
  std::string who;     // "rank 3 thread 1"
  double value = 0;    // section time (or the cause's cost) in this thread
};

struct ImbalanceCause {
  storage::NodeId leader = 0;  // the context where the cause enters the tree
  std::string leaderLabel;     // "call solve.c:40 -> solve"
  std::string path;            // the leader's call path: "main/solve"
  storage::NodeId focus = 0;   // the deepest context that still carries the cause
  std::string focusLabel;
  std::size_t cluster = 0;     // index into ImbalanceReport::clusters
  double share = 0;            // cov(x, T) / var(T) of the leader
  double correlation = 0;      // corr(x, T) of the leader
  double beta = 0;             // standardized regression coefficient of the cluster
  double score = 0;            // beta x share
  double mean = 0, max = 0;    // the leader's per-thread cost
  std::vector<SlowThread> threads;  // where the leader costs most, descending (at most 5)
  struct Part {
    storage::NodeId node = 0;
    std::string label;
    double share = 0;
  };
  std::vector<Part> parts;  // lower-ranked causes inside this one's subtree
};

struct ImbalanceCluster {
  std::vector<storage::NodeId> members;
  bool kept = false;          // selected by the regression
  double pValue = 1;          // of its F-test when it was added (or when it was rejected)
};

struct ImbalanceReport {
  std::string section;        // label of the section
  std::string metric, unit;
  std::string sectionMeasure = "inclusive";  // what T is: the metric's inclusive value, or a region's time
  std::string threadsLabel;   // which threads were the samples
  std::size_t threads = 0;    // samples
  double sum = 0, mean = 0, max = 0, stddev = 0, imbalance = 0;  // of T
  std::vector<SlowThread> slowest;    // threads with T above mean + stddev (at most 10), descending
  std::size_t contextsInSection = 0;  // CCT nodes below the section
  std::size_t contextsAnalysed = 0;   // with a share >= minContextShare and varying over threads
  std::vector<ImbalanceCluster> clusters;
  double r2 = 0;                      // of the final regression
  bool regression = false;            // false: too few threads for one
  std::vector<ImbalanceCause> causes; // ranked
  std::vector<std::string> notes;     // caveats about the data (lost region events)
};

// Throws std::invalid_argument for a bad section, metric or thread selection (one line), and
// storage::DatabaseError for a damaged database.
ImbalanceReport analyzeImbalance(const storage::Database& db, const ImbalanceOptions& options);

void renderImbalanceText(const ImbalanceReport& report, std::ostream& out);
// P(F > f) for an F-distributed variable with (d1, d2) degrees of freedom (the regularized
// incomplete beta function): the p-value of the forward selection's F-tests.
double fTestPValue(double f, double d1, double d2);
void renderImbalanceJson(const ImbalanceReport& report, std::ostream& out);

}  // namespace csp::analysis
