// Loop nests for the loop-recovery tests (tests/reduce/loops_test.cpp), built at -O2 and at -O3
// (csp-app-loops-O2, csp-app-loops-O3). Every loop's first line carries a marker comment
// (LOOP-...) that the tests look up, so no line number is written down anywhere.
//   usage: loops [kernel] [units=10]   kernel: all (default), triple, inlined, vector, search
// Each kernel runs about units x 0.05 s.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

namespace {

volatile double gSink = 0;
volatile int gIntSink = 0;

// The kernels are noipa: no constant propagation into them, no hoisting of their calls as pure.

// A triple nest with work at every level (an imperfect nest: not interchanged), and a serial
// dependency in the innermost loop (not vectorized).
__attribute__((noipa)) void triple(const double* a, double* c, int n) {
  for (int i = 0; i < n; ++i) {  // LOOP-I
    c[i] = c[i] * 0.5 + 1.0;
    for (int j = 0; j < n; ++j) {  // LOOP-J
      double s = c[j];
      for (int k = 0; k < n; ++k)      // LOOP-K
        s = s * 0.999 + a[j * n + k];  // STMT-K
      c[j] = s * 1e-3;
    }
  }
}

// A loop inside a procedure that is always inlined into a loop of its caller.
__attribute__((always_inline)) inline double smooth(const double* v, int n, double start) {
  double s = start;
  for (int i = 0; i < n; ++i)  // LOOP-INLINED
    s = s * 0.5 + v[i];        // STMT-INLINED
  return s;
}

__attribute__((noipa)) double repeatSmooth(const double* v, int n, int reps) {
  double t = 0;
  for (int r = 0; r < reps; ++r)  // LOOP-REPS
    t += smooth(v, n, r);         // CALL-SMOOTH
  return t;
}

// Unrolled (-O2: the pragma) and vectorized (-O3) loop; x and y may alias, so the vectorizer
// also keeps a scalar version.
__attribute__((noipa)) void saxpy(float* y, const float* x, float a, int n) {
#pragma GCC unroll 4
  for (int i = 0; i < n; ++i)  // LOOP-SAXPY
    y[i] = a * x[i] + y[i];    // STMT-SAXPY
}

// A loop left early on a data-dependent condition.
__attribute__((noipa)) int findFirst(const int* v, int n, int key) {
  for (int i = 0; i < n; ++i) {  // LOOP-SEARCH
    if (v[i] == key) return i;   // STMT-SEARCH
  }
  return -1;
}

void runTriple(int units) {
  const int n = 96;
  std::vector<double> a(static_cast<std::size_t>(n) * n), c(n, 1.0);
  for (std::size_t i = 0; i < a.size(); ++i) a[i] = static_cast<double>(i % 7) * 0.125;
  for (int u = 0; u < units * 48; ++u) triple(a.data(), c.data(), n);
  gSink = c[3];
}

void runInlined(int units) {
  std::vector<double> v(4096);
  for (std::size_t i = 0; i < v.size(); ++i) v[i] = static_cast<double>(i % 13);
  double t = 0;
  for (int u = 0; u < units; ++u) t += repeatSmooth(v.data(), static_cast<int>(v.size()), 7500);
  gSink = t;
}

void runVector(int units) {
  std::vector<float> x(8192, 1.0f), y(8192, 2.0f);
  for (int u = 0; u < units * 30000; ++u) saxpy(y.data(), x.data(), 1e-7f, static_cast<int>(x.size()));
  gSink = y[7];
}

void runSearch(int units) {
  std::vector<int> v(20000);
  for (std::size_t i = 0; i < v.size(); ++i) v[i] = static_cast<int>(i * 7 % 100003);
  int found = 0;
  for (int u = 0; u < units * 7500; ++u) found += findFirst(v.data(), static_cast<int>(v.size()), v[19000 + u % 1000]);
  gIntSink = found;
}

}  // namespace

int main(int argc, char** argv) {
  const char* kernel = argc > 1 ? argv[1] : "all";
  const int units = argc > 2 ? std::atoi(argv[2]) : 10;
  const bool all = std::strcmp(kernel, "all") == 0;
  if (all || std::strcmp(kernel, "triple") == 0) runTriple(units);
  if (all || std::strcmp(kernel, "inlined") == 0) runInlined(units);
  if (all || std::strcmp(kernel, "vector") == 0) runVector(units);
  if (all || std::strcmp(kernel, "search") == 0) runSearch(units);
  std::printf("loops: %s, %d units\n", kernel, units);
  return 0;
}
