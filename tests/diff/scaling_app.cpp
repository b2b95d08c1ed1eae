// Test application for csp-diff end to end: an MPI program with a part that scales and a part
// that does not.
//   solve:            a fixed total amount of CPU time split over the ranks (strong scaling ideal)
//   replicated_setup: the same CPU time on every rank, like a serial loop every rank repeats, so
//                     its total grows with the process count: the deliberate scaling loss
//   root_only:        optional CPU time rank 0 alone spends before the final MPI_Allreduce, which
//                     the other ranks wait for inside MPI_Allreduce (csp-run --idleness: mpi-wait)
// usage: csp-diff-scaling-app [solve-ms-total=400] [setup-ms-per-rank=300] [root-only-ms=0] [block|sleep]
// Costs are CPU time of the calling thread, so they do not depend on the machine's speed or load.
// The final reduction waits in a blocking MPI_Allreduce with `block` (what csp-run --idleness
// times as mpi-wait), else (`sleep`, the default) in a non-blocking one polled with 1 ms sleeps:
// Open MPI's blocking waits poll the CPU, and CPU time spent waiting for ranks that a loaded
// machine started late would be a scaling loss that depends on the load.
#include <mpi.h>
#include <time.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace {

double threadCpuMs() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) * 1e3 + static_cast<double>(ts.tv_nsec) / 1e6;
}

}  // namespace

extern "C" __attribute__((noinline)) double burn(double ms) {
  volatile double x = 1.0;
  const double end = threadCpuMs() + ms;
  while (threadCpuMs() < end)
    for (int i = 0; i < 1000; ++i) x = x * 1.0000001 + 1e-9;
  return x;
}

extern "C" __attribute__((noinline)) double solve(double totalMs, int ranks) { return burn(totalMs / ranks); }
extern "C" __attribute__((noinline)) double replicated_setup(double ms) { return burn(ms); }
extern "C" __attribute__((noinline)) double root_only(double ms) { return burn(ms); }

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  const double solveMs = argc > 1 ? std::atof(argv[1]) : 400;
  const double setupMs = argc > 2 ? std::atof(argv[2]) : 300;
  const double rootMs = argc > 3 ? std::atof(argv[3]) : 0;
  double local = replicated_setup(setupMs);
  local += solve(solveMs, size);
  if (rank == 0 && rootMs > 0) local += root_only(rootMs);
  double total = 0;
  if (argc > 4 && std::strcmp(argv[4], "block") == 0) {
    MPI_Allreduce(&local, &total, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
  } else {
    MPI_Request request;
    MPI_Iallreduce(&local, &total, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD, &request);
    for (int done = 0;;) {
      MPI_Test(&request, &done, MPI_STATUS_IGNORE);
      if (done) break;
      const timespec pause{0, 1000000};
      nanosleep(&pause, nullptr);
    }
  }
  if (rank == 0) std::printf("scaling_app: %d ranks, checksum %.6g\n", size, total);
  MPI_Finalize();
  return 0;
}
