// Open MPI's cm PML is left out before MPI starts only where it cannot be selected and nobody
// chose PMLs (reduce/src/mpi_comm.cpp, pmlLeavingOutCm); once MPI has started, its TCP sockets
// send without Nagle's delay (disableNagleOnTcpSockets).
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <fstream>

#include "common/test_support.hpp"

#include "csp/reduce/mpi_comm.hpp"

namespace {

using csp::reduce::pmlLeavingOutCm;
using csp::reduce::TransportFacts;

// Facts with one field changed from the defaults (nothing chosen, no device, no parameter file).
template <typename F>
TransportFacts facts(F change) {
  TransportFacts f;
  change(f);
  return f;
}
TransportFacts files(const char* pml, bool device = false) {
  return facts([&](TransportFacts& f) {
    f.pmlInFiles = pml;
    f.networkDevice = device;
  });
}

TEST(MpiTransport, CmIsLeftOutOnlyWhereNothingWasChosenAndNoNetworkDeviceExists) {
  EXPECT_EQ(pmlLeavingOutCm(TransportFacts{}), "^cm");
  EXPECT_EQ(pmlLeavingOutCm(facts([](TransportFacts& f) { f.keep = true; })), "");
  EXPECT_EQ(pmlLeavingOutCm(facts([](TransportFacts& f) { f.pmlInEnvironment = true; })), "");
  EXPECT_EQ(pmlLeavingOutCm(facts([](TransportFacts& f) { f.paramFilesChosen = true; })), "");
  EXPECT_EQ(pmlLeavingOutCm(files("", true)), "");
  EXPECT_EQ(pmlLeavingOutCm(files("^ucx", true)), "");
}

TEST(MpiTransport, AnExclusionListOfTheParameterFilesIsKeptAndExtended) {
  // Debian's /etc/openmpi/openmpi-mca-params.conf: pml = ^ucx.
  EXPECT_EQ(pmlLeavingOutCm(files("^ucx")), "^ucx,cm");
  EXPECT_EQ(pmlLeavingOutCm(files("^ucx,v")), "^ucx,v,cm");
  // Already excluded, in any position and spacing: nothing to add.
  EXPECT_EQ(pmlLeavingOutCm(files("^cm")), "");
  EXPECT_EQ(pmlLeavingOutCm(files("^ucx, cm")), "");
  // "cm" inside another name is not cm.
  EXPECT_EQ(pmlLeavingOutCm(files("^cmx")), "^cmx,cm");
  // A selection (no ^) is the site's choice, cm in it or not.
  EXPECT_EQ(pmlLeavingOutCm(files("ob1")), "");
  EXPECT_EQ(pmlLeavingOutCm(files("cm")), "");
}

// Open MPI's parameter file syntax: `name = value`, comments, blanks; the last setting counts.
TEST(MpiTransport, ThePmlOfAParameterFileIsItsLastSetting) {
  csp::test::TempDir dir("mca-params");
  const auto file = dir.path() / "mca-params.conf";
  std::ofstream(file) << "# pml = ob1\nbtl_base_warn_component_unused=0\n  pml   =  ^ucx  # Debian\n"
                         "pml_ucx_priority = 5\nmtl = ^ofi\n";
  EXPECT_EQ(csp::reduce::pmlOfParamFile(file), "^ucx");
  std::ofstream(file, std::ios::app) << "pml=ob1,cm\n";
  EXPECT_EQ(csp::reduce::pmlOfParamFile(file), "ob1,cm");
  EXPECT_EQ(csp::reduce::pmlOfParamFile(dir.path() / "none.conf"), "");
}

// A descriptor closed when the test ends.
struct Fd {
  explicit Fd(int f) : fd(f) {}
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  int fd;
};

int noDelay(int fd) {
  int value = -1;
  socklen_t length = sizeof value;
  if (::getsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &value, &length) != 0) return -1;
  return value != 0 ? 1 : 0;
}

// A loopback connection as MPI's process-manager client has one (listener, both ends), beside a
// UDP socket and a Unix socket pair, which have no Nagle to disable and are left alone.
TEST(MpiTransport, NagleIsDisabledOnEveryTcpSocketAndNothingElse) {
  Fd listener(::socket(AF_INET, SOCK_STREAM, 0));
  ASSERT_GE(listener.fd, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  address.sin_port = 0;
  ASSERT_EQ(::bind(listener.fd, reinterpret_cast<sockaddr*>(&address), sizeof address), 0);
  ASSERT_EQ(::listen(listener.fd, 1), 0);
  socklen_t length = sizeof address;
  ASSERT_EQ(::getsockname(listener.fd, reinterpret_cast<sockaddr*>(&address), &length), 0);
  Fd client(::socket(AF_INET, SOCK_STREAM, 0));
  ASSERT_EQ(::connect(client.fd, reinterpret_cast<sockaddr*>(&address), sizeof address), 0);
  Fd server(::accept(listener.fd, nullptr, nullptr));
  ASSERT_GE(server.fd, 0);
  Fd udp(::socket(AF_INET, SOCK_DGRAM, 0));
  int pair[2];
  ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM, 0, pair), 0);
  Fd unixA(pair[0]), unixB(pair[1]);
  for (int fd : {listener.fd, client.fd, server.fd}) ASSERT_EQ(noDelay(fd), 0) << "Linux's default is Nagle on";

  const std::size_t changed = csp::reduce::disableNagleOnTcpSockets();
  EXPECT_GE(changed, 3u);  // the test's three, and any other TCP socket of the process
  for (int fd : {listener.fd, client.fd, server.fd}) EXPECT_EQ(noDelay(fd), 1);
  EXPECT_EQ(noDelay(udp.fd), -1);  // not a TCP socket: the option does not exist there
  EXPECT_EQ(noDelay(unixA.fd), -1);
  // Set already: a second pass changes nothing, and the connection still carries bytes.
  EXPECT_EQ(csp::reduce::disableNagleOnTcpSockets(), 0u);
  const char out[] = "fence";
  ASSERT_EQ(::write(client.fd, out, sizeof out), static_cast<ssize_t>(sizeof out));
  char in[sizeof out] = {};
  ASSERT_EQ(::read(server.fd, in, sizeof in), static_cast<ssize_t>(sizeof in));
  EXPECT_STREQ(in, out);
}

}  // namespace
