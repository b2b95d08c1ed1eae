// Links unload_lib.cpp, whose constructor and destructor load and unload another library, and
// computes for a moment: csp-app-unload [TERMS].
#include <cstdio>
#include <cstdlib>

extern "C" double csp_app_unload_work(long terms);

int main(int argc, char** argv) {
  const long terms = argc > 1 ? std::atol(argv[1]) : 200000000L;
  std::printf("%.6f\n", csp_app_unload_work(terms));
  return 0;
}
