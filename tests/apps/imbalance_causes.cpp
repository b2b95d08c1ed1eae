// Test application for the load-imbalance causes (csp-views --imbalance, issue 25): the shape
// that made the attribution name the common caller. Every thread (or, built with CSP_WITH_MPI,
// every rank) runs `work`, inlined into its caller, which holds:
//   - scan_items: a loop whose trip count comes from the thread's data (the main cause, 80 % of
//     the variance of the threads' times),
//   - refine_items: a smaller loop driven by other data, independent of the first (20 %),
//   - balanced_heavy: the most expensive procedure, the same in every thread;
// and before it, outside `work`, a little balanced set-up (about 5 %). With `balanced` every
// thread gets the same trips: the control, for which no cause may be named.
// Work is counted in iterations of a fixed kernel, not calibrated per process, so that balanced
// work is balanced in CPU time whatever the machine's load.
//   usage: imbalance-causes [threads=8] [unit=1000000] [balanced]
//          mpirun -np 8 imbalance-causes-mpi [unit=1000000] [balanced]
#include <time.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>

#ifdef CSP_WITH_MPI
#include <mpi.h>
#endif

namespace {

// The data of sample t of n: two independent +-1 patterns (bits 0 and 1 of a permutation of the
// sample numbers, so that slow threads are not simply the first ones). For n a multiple of 4 they
// are orthogonal with mean 0: the two causes vary independently.
struct Trips {
  int scan = 0, refine = 0;
};

Trips tripsOf(int t, int n, bool balanced) {
  const int q = (t * 5 + 3) % n;
  const int u = (q & 1) ? 1 : -1, v = (q & 2) ? 1 : -1;
  if (balanced) return {20, 10};
  return {20 + 8 * u, 10 + 4 * v};  // variances 64 : 16, i.e. 80 % and 20 %
}

}  // namespace

extern "C" {

__attribute__((noinline)) double scan_items(int trips, std::uint64_t unit, double x) {
  const std::uint64_t n = static_cast<std::uint64_t>(trips) * unit;
  for (std::uint64_t i = 0; i < n; ++i) {  // THE DATA-DEPENDENT LOOP
    x = x * 1.0000001 + 1e-9;
    asm volatile("" : "+x"(x));
  }
  return x;
}

__attribute__((noinline)) double refine_items(int trips, std::uint64_t unit, double x) {
  const std::uint64_t n = static_cast<std::uint64_t>(trips) * unit;
  for (std::uint64_t i = 0; i < n; ++i) {  // THE SECOND CAUSE
    x = x * 0.9999999 + 1e-9;
    asm volatile("" : "+x"(x));
  }
  return x;
}

__attribute__((noinline)) double balanced_heavy(std::uint64_t unit, double x) {
  const std::uint64_t n = 40 * unit;
  for (std::uint64_t i = 0; i < n; ++i) {
    x = x * 1.0000002 - 1e-9;
    asm volatile("" : "+x"(x));
  }
  return x;
}

__attribute__((noinline)) double set_up(std::uint64_t unit, double x) {
  const std::uint64_t n = 4 * unit;
  for (std::uint64_t i = 0; i < n; ++i) {
    x = x * 1.0000003 + 2e-9;
    asm volatile("" : "+x"(x));
  }
  return x;
}

}  // extern "C"

// The common caller of the three, inlined: it contains every cause and is none itself.
__attribute__((always_inline)) inline double work(const Trips& trips, std::uint64_t unit, double x) {
  x = scan_items(trips.scan, unit, x);
  x = balanced_heavy(unit, x);
  x = refine_items(trips.refine, unit, x);
  return x;
}

__attribute__((noinline)) double run_sample(int t, int n, std::uint64_t unit, bool balanced) {
  double x = set_up(unit, 1.0 + t);
  return work(tripsOf(t, n, balanced), unit, x);
}

int main(int argc, char** argv) {
#ifdef CSP_WITH_MPI
  MPI_Init(&argc, &argv);
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  const std::uint64_t unit = argc > 1 ? std::strtoull(argv[1], nullptr, 10) : 1000000;
  const bool balanced = argc > 2 && std::strcmp(argv[2], "balanced") == 0;
  double x = run_sample(rank, size, unit, balanced);
  // Wait for the others without burning CPU time (a busy-polling barrier would give the faster
  // ranks the CPU time the slower ones spend working, and hide the imbalance in CPU time).
  MPI_Request request;
  MPI_Ibarrier(MPI_COMM_WORLD, &request);
  for (int done = 0; !done;) {
    MPI_Test(&request, &done, MPI_STATUS_IGNORE);
    if (!done) {
      const timespec pause{0, 1000000};
      nanosleep(&pause, nullptr);
    }
  }
  if (rank == 0) std::printf("imbalance-causes: %d ranks, checksum %.6g\n", size, x);
  MPI_Finalize();
#else
  const int threads = argc > 1 ? std::atoi(argv[1]) : 8;
  const std::uint64_t unit = argc > 2 ? std::strtoull(argv[2], nullptr, 10) : 1000000;
  const bool balanced = argc > 3 && std::strcmp(argv[3], "balanced") == 0;
  if (threads < 1 || unit == 0) {
    std::fprintf(stderr, "usage: imbalance-causes [threads>=1] [unit>=1] [balanced]\n");
    return 2;
  }
  std::vector<double> results(static_cast<std::size_t>(threads));
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t)
    pool.emplace_back([&, t] { results[static_cast<std::size_t>(t)] = run_sample(t, threads, unit, balanced); });
  for (auto& th : pool) th.join();
  double sum = 0;
  for (double r : results) sum += r;
  std::printf("imbalance-causes: %d threads, checksum %.6g\n", threads, sum);
#endif
  return 0;
}
