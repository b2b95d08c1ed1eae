// Test application for clocks across processes, distributed frames and what-if speed-ups: a
// known critical path. Each iteration, after a barrier:
//   rank 1: region "R" (R_MS, made PERCENT % shorter by the last argument), then sends to rank 0;
//   rank 0: region "Q" (Q_MS < R_MS), then receives from rank 1 inside region "recv" (alone: Q only);
//   ranks >= 2: region "S" (Q_MS / 2).
// So R lies on the critical path (rank 0 waits for it) and Q and S do not; R and Q overlap in
// time for Q_MS every iteration. Work is sleeping, so that the run time does not depend on how
// loaded the machine is.
//   usage: mpi_causal [iterations=6] [R_MS=40] [Q_MS=10] [PERCENT=0] [nofinalize]
//          (nofinalize: exit without MPI_Finalize, as a program that dies late)
//          mpi_causal pingpong N: ranks 0 and 1 exchange N one-int messages inside a region
//          each and rank 0 prints the loop's wall time in ns (tests/bench/comm_overhead.sh);
//          mpi_causal ipingpong N: the same with MPI_Isend/MPI_Irecv, each completed by MPI_Wait.
//          mpi_causal nonblocking [iterations R_MS Q_MS PERCENT]: the same critical path with
//          non-blocking messages: rank 0 posts an MPI_Irecv from MPI_ANY_SOURCE with MPI_ANY_TAG
//          before Q and waits for it with MPI_Wait and MPI_STATUS_IGNORE inside "recv"; rank 1
//          starts an MPI_Isend after R and completes it with MPI_Waitall; ranks >= 2 send
//          themselves a message after S (MPI_Testany, then MPI_Waitsome), and one whose send
//          request they free.
//          mpi_causal rooted [iterations R_MS Q_MS]: no barrier in the loop. Rank 1 runs R, then
//          every rank meets in MPI_Bcast rooted at rank 1 (ranks 0 and 2.. run Q before it: they
//          wait for R); then rank 2 (or 1 with 2 ranks) runs "T" (Q_MS) before an MPI_Reduce
//          rooted at rank 0, which waits for it while the others do not; then an MPI_Scan.
#include <mpi.h>
#include <time.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>

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

std::uint64_t nowNs() {
  timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return static_cast<std::uint64_t>(t.tv_sec) * 1'000'000'000u + static_cast<std::uint64_t>(t.tv_nsec);
}

// One message to `peer` and back, blocking, or started with MPI_Isend/MPI_Irecv and completed
// with MPI_Wait (2 more calls per message).
void send(int* token, int peer, bool nonBlocking) {
  if (!nonBlocking) {
    MPI_Send(token, 1, MPI_INT, peer, 1, MPI_COMM_WORLD);
    return;
  }
  MPI_Request r;
  MPI_Isend(token, 1, MPI_INT, peer, 1, MPI_COMM_WORLD, &r);
  MPI_Wait(&r, MPI_STATUS_IGNORE);
}

void receive(int* token, int peer, bool nonBlocking) {
  if (!nonBlocking) {
    MPI_Recv(token, 1, MPI_INT, peer, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    return;
  }
  MPI_Request r;
  MPI_Irecv(token, 1, MPI_INT, peer, 1, MPI_COMM_WORLD, &r);
  MPI_Wait(&r, MPI_STATUS_IGNORE);
}

void pingPong(int rank, long n, bool nonBlocking) {
  int token = 0;
  MPI_Barrier(MPI_COMM_WORLD);
  const std::uint64_t start = nowNs();
  for (long i = 0; i < n && rank < 2; ++i) {
    csp_region_begin("exchange", 0);
    if (rank == 0) {
      send(&token, 1, nonBlocking);
      receive(&token, 1, nonBlocking);
    } else {
      receive(&token, 0, nonBlocking);
      send(&token, 0, nonBlocking);
    }
    csp_region_end();
  }
  if (rank == 0) std::printf("%llu\n", static_cast<unsigned long long>(nowNs() - start));
}

// A message to itself, completed by MPI_Testany (polling) and then MPI_Waitsome, statuses
// ignored; then one whose send request is freed, received with MPI_Recv.
void selfMessage(int rank, int value) {
  int in = -1;
  MPI_Request r[2];
  MPI_Irecv(&in, 1, MPI_INT, MPI_ANY_SOURCE, 7, MPI_COMM_WORLD, &r[0]);
  MPI_Isend(&value, 1, MPI_INT, rank, 7, MPI_COMM_WORLD, &r[1]);
  int index = 0, flag = 0, count = 0, indices[2];
  while (flag == 0) MPI_Testany(2, r, &index, &flag, MPI_STATUS_IGNORE);
  MPI_Waitsome(2, r, &count, indices, MPI_STATUSES_IGNORE);
  // A send whose request is freed: it still goes out.
  MPI_Isend(&value, 1, MPI_INT, rank, 8, MPI_COMM_WORLD, &r[1]);
  MPI_Request_free(&r[1]);
  MPI_Recv(&in, 1, MPI_INT, rank, 8, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
}

void nonBlocking(int rank, int size, int iterations, double rMs, double qMs, double percent) {
  for (int i = 0; i < iterations; ++i) {
    MPI_Barrier(MPI_COMM_WORLD);
    int token = i;
    MPI_Request request;
    if (rank == 1) {
      region("R", rMs * (1 - percent / 100));
      MPI_Isend(&token, 1, MPI_INT, 0, 5, MPI_COMM_WORLD, &request);
      MPI_Waitall(1, &request, MPI_STATUSES_IGNORE);
    } else if (rank == 0) {
      if (size > 1) MPI_Irecv(&token, 1, MPI_INT, MPI_ANY_SOURCE, MPI_ANY_TAG, MPI_COMM_WORLD, &request);
      region("Q", qMs);
      if (size == 1) continue;
      csp_region_begin("recv", 0);
      MPI_Wait(&request, MPI_STATUS_IGNORE);
      csp_region_end();
    } else {
      region("S", qMs / 2);
      selfMessage(rank, i);
    }
  }
}

void rooted(int rank, int size, int iterations, double rMs, double qMs) {
  const int late = size > 2 ? 2 : 1;  // enters the reduce late
  for (int i = 0; i < iterations; ++i) {
    int token = i, sum = 0;
    region(rank == 1 ? "R" : "Q", rank == 1 ? rMs : qMs);
    MPI_Bcast(&token, 1, MPI_INT, size > 1 ? 1 : 0, MPI_COMM_WORLD);
    if (rank == late) region("T", qMs);
    MPI_Reduce(&token, &sum, 1, MPI_INT, MPI_SUM, 0, MPI_COMM_WORLD);
    MPI_Scan(&token, &sum, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  }
}

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  if (argc > 2 && (std::strcmp(argv[1], "pingpong") == 0 || std::strcmp(argv[1], "ipingpong") == 0)) {
    pingPong(rank, std::atol(argv[2]), argv[1][0] == 'i');
    MPI_Finalize();
    return 0;
  }
  if (argc > 1 && (std::strcmp(argv[1], "nonblocking") == 0 || std::strcmp(argv[1], "rooted") == 0)) {
    const int iterations = argc > 2 ? std::atoi(argv[2]) : 6;
    const double rMs = argc > 3 ? std::atof(argv[3]) : 40, qMs = argc > 4 ? std::atof(argv[4]) : 10;
    if (argv[1][0] == 'n')
      nonBlocking(rank, size, iterations, rMs, qMs, argc > 5 ? std::atof(argv[5]) : 0);
    else
      rooted(rank, size, iterations, rMs, qMs);
    MPI_Barrier(MPI_COMM_WORLD);
    MPI_Finalize();
    return 0;
  }
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
      if (size == 1) continue;  // alone: nobody to wait for
      csp_region_begin("recv", 0);
      MPI_Recv(&token, 1, MPI_INT, 1, 5, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
      csp_region_end();
    } else {
      region("S", qMs / 2);
    }
  }
  MPI_Barrier(MPI_COMM_WORLD);
  if (argc > 5 && std::strcmp(argv[5], "nofinalize") == 0) std::exit(0);
  MPI_Finalize();
  return 0;
}
