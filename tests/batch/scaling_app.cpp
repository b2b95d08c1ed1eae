// csp-app-scaling: an MPI program with a known strong-scaling problem, for the scaling-study
// test and the demo. A fixed total problem of WORK units is divided among the P ranks
// (solve_share: perfect strong scaling, its summed cost is the same for any P), but every rank
// also repeats the same SETUP units of initialization (replicated_setup: its summed cost grows
// as P x SETUP) and rank 0 combines one result per rank serially (combine_on_root: P x 20 units)
// while the other ranks wait for the result. Going from p to q ranks, the scaling loss in CPU
// time is in replicated_setup and combine_on_root, never in solve_share. The ranks wait without
// burning CPU (a non-blocking collective polled with sleeps): Open MPI's busy-polling waits
// would put CPU time into the waiting that depends on what else runs on the machine, and the
// loss measured in CPU time would change with the load (csp-run --idleness measures waiting as
// time instead: mpi-wait).
//   usage: csp-app-scaling [WORK=2000] [SETUP=100]      (one unit is about 1 ms of CPU)
#include <mpi.h>

#include <time.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <vector>

namespace {

constexpr std::uint64_t kUnitIterations = 400'000;

__attribute__((always_inline)) inline double spin(std::uint64_t iterations, double x) {
  for (std::uint64_t i = 0; i < iterations; ++i) {
    x = x * 1.0000001 + 1e-9;
    asm volatile("" : "+x"(x));
  }
  return x;
}

// Waits for a non-blocking MPI operation, 1 ms at a time, without using the CPU meanwhile.
void wait(MPI_Request* request) {
  for (int done = 0;;) {
    MPI_Test(request, &done, MPI_STATUS_IGNORE);
    if (done) return;
    const timespec pause{0, 1'000'000};
    nanosleep(&pause, nullptr);
  }
}

}  // namespace

extern "C" __attribute__((noinline)) double solve_share(int units, double x) {
  for (int u = 0; u < units; ++u) x = spin(kUnitIterations, x);
  return x;
}

extern "C" __attribute__((noinline)) double replicated_setup(int units, double x) {
  for (int u = 0; u < units; ++u) x = spin(kUnitIterations, x);
  return x;
}

extern "C" __attribute__((noinline)) double combine_on_root(const std::vector<double>& parts) {
  double x = 0;
  for (double p : parts) x = spin(20 * kUnitIterations, x + p);
  return x;
}

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  const int work = argc > 1 ? std::atoi(argv[1]) : 2000;
  const int setup = argc > 2 ? std::atoi(argv[2]) : 100;
  if (work <= 0 || setup < 0) {
    if (rank == 0) std::fprintf(stderr, "usage: csp-app-scaling [WORK>0] [SETUP>=0]\n");
    MPI_Abort(MPI_COMM_WORLD, 2);
  }
  // The share of rank r of a problem of `work` units (remainder spread over the first ranks).
  const int share = work / size + (rank < work % size ? 1 : 0);

  double x = replicated_setup(setup, 1.0);
  x = solve_share(share, x);

  std::vector<double> parts(static_cast<std::size_t>(size));
  MPI_Request request;
  MPI_Igather(&x, 1, MPI_DOUBLE, parts.data(), 1, MPI_DOUBLE, 0, MPI_COMM_WORLD, &request);
  wait(&request);
  double result = rank == 0 ? combine_on_root(parts) : 0.0;
  MPI_Ibcast(&result, 1, MPI_DOUBLE, 0, MPI_COMM_WORLD, &request);
  wait(&request);
  if (rank == 0)
    std::printf("csp-app-scaling: %d ranks, %d work units, %d setup units per rank, result %.6g\n", size, work, setup,
                result);
  MPI_Finalize();
  return 0;
}
