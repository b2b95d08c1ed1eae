// A library whose constructor and destructor load and unload another library (CSP_OTHER_LIBRARY):
// both run outside the program's main. The constructor runs before those of a preloaded library
// such as csp-run's, the destructor after that library's static destructors
// (tests/measure/measure_safety_test.cpp).
#include <dlfcn.h>

namespace {

void loadAndUnload() {
  if (void* other = dlopen(CSP_OTHER_LIBRARY, RTLD_NOW | RTLD_LOCAL)) dlclose(other);
}

__attribute__((constructor)) void atLoad() { loadAndUnload(); }
__attribute__((destructor)) void atUnload() { loadAndUnload(); }

}  // namespace

extern "C" double csp_app_unload_work(long terms) {
  double sum = 0;
  for (long i = 1; i <= terms; ++i) sum += 1.0 / static_cast<double>(i);
  return sum;
}
