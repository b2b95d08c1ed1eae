// The orphan watchdog of the MPI tools polls its parent every 200 ms. Ending a process must not
// wait out the rest of a poll: it did, which cost csp-prof-mpi up to 0.2 s of wall time per run
// after the database was published.
#include <gtest/gtest.h>

#include <chrono>
#include <thread>

#include "signal_cleanup.hpp"

TEST(OrphanWatchdog, StopsWithoutWaitingOutAPoll) {
  // Five watchdogs, each stopped 20 ms after it started, inside its first poll: waiting out the
  // polls takes at least 5 x 200 ms; stopping at once about 5 x 20 ms.
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < 5; ++i) {
    csp::cli::OrphanWatchdog watchdog("test");
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::milliseconds(5 * 200));
}
