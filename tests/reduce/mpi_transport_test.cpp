// Open MPI's cm PML is left out before MPI starts only where it cannot be selected and nobody
// chose PMLs (reduce/src/mpi_comm.cpp, pmlLeavingOutCm).
#include <gtest/gtest.h>

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

}  // namespace
