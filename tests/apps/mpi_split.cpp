// Test application (a): MPI ranks x threads with a known split and a known imbalance.
//   Every thread calls work_heavy and work_light with 2:1 cost, in small interleaved chunks so
//   that both see the same machine conditions. Rank r does (1 + r/4) times the base work.
//   usage: mpi_split [units=40] [workers=2]   (one unit is about 10 ms of CPU)
//   With MPI_SPLIT_READY set, each rank writes "mpi_split: rank R working" to stderr once MPI has
//   started and its threads work: tests that stop the job mid-run wait for it.
//   With MPI_SPLIT_ABORT=R, rank R calls MPI_Abort(MPI_COMM_WORLD, 3) once its threads are done.
#include <mpi.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <thread>
#include <vector>

#include "kernel.hpp"

namespace {

constexpr std::uint64_t kUnitIterations = 2'500'000;

}  // namespace

extern "C" __attribute__((noinline)) double work_heavy(double x) { return csp_test::spin(2 * kUnitIterations, x); }
extern "C" __attribute__((noinline)) double work_light(double x) { return csp_test::spin(kUnitIterations, x); }

static double threadWork(int units) {
  double x = 1.0;
  for (int u = 0; u < units; ++u) {
    x = work_heavy(x);
    x = work_light(x);
  }
  return x;
}

int main(int argc, char** argv) {
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_FUNNELED, &provided);
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  const int base = argc > 1 ? std::atoi(argv[1]) : 40;
  const int workers = argc > 2 ? std::atoi(argv[2]) : 2;
  const int units = base + base * rank / 4;  // the known imbalance: (1 + r/4) x base

  std::vector<double> results(static_cast<std::size_t>(workers) + 1, 0.0);
  std::vector<std::thread> threads;
  for (int w = 0; w < workers; ++w)
    threads.emplace_back([&, w] { results[static_cast<std::size_t>(w) + 1] = threadWork(units); });
  if (std::getenv("MPI_SPLIT_READY") != nullptr) {
    std::fprintf(stderr, "mpi_split: rank %d working\n", rank);
    std::fflush(stderr);
  }
  results[0] = threadWork(units);
  for (auto& t : threads) t.join();
  if (const char* abortRank = std::getenv("MPI_SPLIT_ABORT"); abortRank != nullptr && std::atoi(abortRank) == rank) {
    std::fprintf(stderr, "mpi_split: rank %d aborts\n", rank);
    std::fflush(stderr);
    MPI_Abort(MPI_COMM_WORLD, 3);
  }

  double local = 0, total = 0;
  for (double r : results) local += r;
  MPI_Allreduce(&local, &total, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
  if (rank == 0) std::printf("mpi_split: %d ranks x %d threads, checksum %.6g\n", size, workers + 1, total);
  MPI_Finalize();
  return 0;
}
