// Test application for clocks across processes, distributed frames and what-if speed-ups: a
// known critical path. Each iteration, after a barrier:
//   rank 1: region "R" (R_MS, made PERCENT % shorter by the last argument), then sends to rank 0;
//   rank 0: region "Q" (Q_MS < R_MS), then receives from rank 1 inside region "recv";
//   ranks >= 2: region "S" (Q_MS / 2).
// So R lies on the critical path (rank 0 waits for it) and Q and S do not; R and Q overlap in
// time for Q_MS every iteration. Work is sleeping, so that the run time does not depend on how
// loaded the machine is.
//   usage: mpi_causal [iterations=6] [R_MS=40] [Q_MS=10] [PERCENT=0]
#include <mpi.h>
#include <time.h>

#include <cstdlib>

#include "csp/measure/regions.h"

namespace {

void sleepMs(double ms) {
  const long ns = static_cast<long>(ms * 1e6);
  timespec t{ns / 1'000'000'000, ns % 1'000'000'000};
  while (nanosleep(&t, &t) != 0) {
  }
}

void region(const char* name, double ms) {
  csp_region_begin(name, 0);
  sleepMs(ms);
  csp_region_end();
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  const int iterations = argc > 1 ? std::atoi(argv[1]) : 6;
  const double rMs = argc > 2 ? std::atof(argv[2]) : 40;
  const double qMs = argc > 3 ? std::atof(argv[3]) : 10;
  const double percent = argc > 4 ? std::atof(argv[4]) : 0;
  for (int i = 0; i < iterations; ++i) {
    MPI_Barrier(MPI_COMM_WORLD);
    int token = i;
    if (rank == 1) {
      region("R", rMs * (1 - percent / 100));
      MPI_Send(&token, 1, MPI_INT, 0, 5, MPI_COMM_WORLD);
    } else if (rank == 0) {
      region("Q", qMs);
      csp_region_begin("recv", 0);
      MPI_Recv(&token, 1, MPI_INT, 1, 5, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
      csp_region_end();
    } else {
      region("S", qMs / 2);
    }
  }
  MPI_Barrier(MPI_COMM_WORLD);
  MPI_Finalize();
  return 0;
}
