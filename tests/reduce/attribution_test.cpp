// Attribution of real machine code: names, inlined (Alien) scopes and lines from DWARF.
#include <gtest/gtest.h>

#include <array>
#include <cstdio>
#include <fstream>
#include <set>
#include <sstream>

#include "csp/reduce/attribution.hpp"

using namespace csp;
using namespace csp::reduce;

namespace {

const std::string kBinary = std::string(CSP_BINARY_DIR) + "/tests/reduce/csp_attr_sample";
const std::string kSource = std::string(CSP_SOURCE_DIR) + "/tests/reduce/attr_sample.cpp";

std::uint32_t lineOf(const std::string& needle) {
  std::ifstream in(kSource);
  std::string line;
  for (std::uint32_t n = 1; std::getline(in, line); ++n)
    if (line.find(needle) != std::string::npos) return n;
  return 0;
}

// [begin, end) of a function symbol, from nm.
std::pair<std::uint64_t, std::uint64_t> symbolRange(const std::string& demangled) {
  FILE* p = ::popen(("nm -C -S --defined-only " + kBinary).c_str(), "r");
  std::array<char, 1024> buf;
  std::pair<std::uint64_t, std::uint64_t> out{0, 0};
  while (std::fgets(buf.data(), buf.size(), p)) {
    std::istringstream line(buf.data());
    std::string addr, size, type, name;
    line >> addr >> size >> type;
    std::getline(line, name);
    if (name.size() > 1 && name.substr(1) == demangled) {
      out.first = std::stoull(addr, nullptr, 16);
      out.second = out.first + std::stoull(size, nullptr, 16);
    }
  }
  ::pclose(p);
  return out;
}

TEST(Attribution, ProcedureInlinedScopeAndLinesFromDwarf) {
  const auto [begin, end] = symbolRange("sample::accumulate(int)");
  ASSERT_LT(begin, end) << "symbol not found in " << kBinary;
  StringTable strings;
  Attributor attributor(strings);
  const LoadModule module{kBinary, {}, 0, 0, 0};
  const std::uint32_t scaledLine = lineOf("SCALED_LINE");
  const std::uint32_t callLine = lineOf("s = scaled(s, i)");
  bool sawInlined = false;
  for (std::uint64_t a = begin; a < end; ++a) {
    auto chain = attributor.attribute(module, a, true);
    ASSERT_GE(chain.size(), 2u);
    EXPECT_EQ(chain.front().kind, ScopeKind::ProcFrame);
    EXPECT_EQ(strings.text(chain.front().name), "sample::accumulate(int)");
    EXPECT_EQ(strings.text(chain.front().module), "csp_attr_sample");
    EXPECT_EQ(chain.back().kind, ScopeKind::Stmt);
    // The inlined call lies inside accumulate's loop: ProcFrame, Loop, Alien, Stmt.
    if (chain.size() == 4 && chain[2].kind == ScopeKind::Alien) {
      sawInlined = true;
      EXPECT_EQ(chain[1].kind, ScopeKind::Loop);
      EXPECT_EQ(chain[1].line, callLine);
      EXPECT_EQ(strings.text(chain[2].name), "sample::scaled(double, int)");
      EXPECT_EQ(chain[2].line, callLine);
      EXPECT_EQ(chain.back().line, scaledLine);
      EXPECT_NE(strings.text(chain.back().file).find("attr_sample.cpp"), std::string::npos);
    }
    for (std::size_t i = 1; i + 1 < chain.size(); ++i)
      EXPECT_TRUE(chain[i].kind == ScopeKind::Alien || (chain[i].kind == ScopeKind::Loop && chain[i].line == callLine));
  }
  EXPECT_TRUE(sawInlined) << "no address of accumulate() attributed to the inlined scaled()";
  // Interior (return address) lookups end in a call site.
  auto interior = attributor.attribute(module, begin + 4, false);
  EXPECT_EQ(interior.back().kind, ScopeKind::CallSite);
  EXPECT_EQ(attributor.stats().unknown, 0u);
}

TEST(Attribution, UnknownModuleKeepsModulePlusOffset) {
  StringTable strings;
  Attributor attributor(strings);
  const LoadModule module{"/nonexistent/libgone.so", {}, 0, 0, 0};
  auto chain = attributor.attribute(module, 0x1234, true);
  ASSERT_EQ(chain.size(), 2u);
  EXPECT_EQ(strings.text(chain[0].name), "libgone.so+0x1234");
  EXPECT_EQ(chain[1].kind, ScopeKind::Stmt);
  const auto stats = attributor.stats();
  EXPECT_EQ(stats.unknown, 1u);
  ASSERT_EQ(stats.warnings.size(), 1u);
  EXPECT_NE(stats.warnings[0].find("/nonexistent/libgone.so: cannot read module"), std::string::npos);
}

TEST(Attribution, BuildIdMismatchIsNotTrusted) {
  StringTable strings;
  Attributor attributor(strings);
  const LoadModule module{kBinary, {1, 2, 3, 4, 5, 6, 7, 8}, 0, 0, 0};
  const auto [begin, end] = symbolRange("sample::accumulate(int)");
  auto chain = attributor.attribute(module, begin, true);
  EXPECT_EQ(strings.text(chain[0].name).rfind("csp_attr_sample+0x", 0), 0u);
  EXPECT_NE(attributor.stats().warnings.at(0).find("build-id differs"), std::string::npos);
}

TEST(Attribution, ReplacePathFindsMovedBinaries) {
  StringTable strings;
  const std::string dir = kBinary.substr(0, kBinary.rfind('/'));
  AttributionOptions options;
  options.replacePaths = {{"/moved/away", dir}};
  Attributor attributor(strings, options);
  const LoadModule module{"/moved/away/csp_attr_sample", {}, 0, 0, 0};
  const auto [begin, end] = symbolRange("sample::accumulate(int)");
  auto chain = attributor.attribute(module, begin, true);
  EXPECT_EQ(strings.text(chain[0].name), "sample::accumulate(int)");
}

}  // namespace
