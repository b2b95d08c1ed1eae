// A cap on the test process's address space, for tests of damaged sizes and counts.
#pragma once

#include <sys/resource.h>
#include <unistd.h>

#include <cstddef>
#include <fstream>
#include <stdexcept>

namespace csp::test {

// While it lives, the process may map at most `extra` bytes more than it has mapped now: an
// allocation sized by a damaged count fails instead of succeeding on a machine with memory to spare.
class AddressSpaceCap {
 public:
  explicit AddressSpaceCap(std::size_t extra) {
    std::size_t pages = 0;
    std::ifstream("/proc/self/statm") >> pages;
    if (getrlimit(RLIMIT_AS, &saved_) != 0 || pages == 0)
      throw std::runtime_error("AddressSpaceCap: cannot read the address-space limit or size");
    struct rlimit cap = saved_;
    cap.rlim_cur = pages * static_cast<std::size_t>(sysconf(_SC_PAGESIZE)) + extra;
    if (cap.rlim_max != RLIM_INFINITY && cap.rlim_cur > cap.rlim_max) cap.rlim_cur = cap.rlim_max;
    if (setrlimit(RLIMIT_AS, &cap) != 0) throw std::runtime_error("AddressSpaceCap: cannot set the limit");
  }
  ~AddressSpaceCap() { setrlimit(RLIMIT_AS, &saved_); }
  AddressSpaceCap(const AddressSpaceCap&) = delete;
  AddressSpaceCap& operator=(const AddressSpaceCap&) = delete;

 private:
  struct rlimit saved_ {};
};

}  // namespace csp::test
