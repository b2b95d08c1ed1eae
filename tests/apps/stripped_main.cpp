// Driver of the stripped test library (tests/apps/stripped_lib.cpp); stripped itself, so that
// its entry point and main have no symbols either.
//   usage: stripped [units=40]
#include <cstdio>
#include <cstdlib>

extern "C" double stripped_work(int units, double x);

int main(int argc, char** argv) {
  const int units = argc > 1 ? std::atoi(argv[1]) : 40;
  std::printf("stripped: %d units, checksum %.6g\n", units, stripped_work(units, 1.0));
  return 0;
}
