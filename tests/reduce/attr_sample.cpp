// Attribution test subject: an out-of-line function with a loop that calls an always-inlined
// helper. The test looks up addresses of this binary by symbol and checks names, inlining and lines.
#include <cstdio>
#include <cstdlib>

namespace sample {

__attribute__((always_inline)) inline double scaled(double x, int i) {
  return x * 1.000001 + i;  // SCALED_LINE
}

__attribute__((noinline)) double accumulate(int n) {
  double s = 0;
  for (int i = 0; i < n; ++i) s = scaled(s, i);
  return s;
}

}  // namespace sample

int main(int argc, char** argv) {
  const int n = argc > 1 ? std::atoi(argv[1]) : 1000;
  std::printf("%f\n", sample::accumulate(n));
  return 0;
}
