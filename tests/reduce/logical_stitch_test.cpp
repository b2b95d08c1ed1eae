// The rewrite of OpenMP logical call paths (reduce/include/csp/reduce/logical.hpp) on a profile
// built by hand: a master and a worker in one parallel region created by main > solve, a worker
// sample in the runtime's dispatch, one in the pool.
#include <gtest/gtest.h>

#include <map>
#include <string>
#include <vector>

#include "csp/reduce/logical.hpp"
#include "csp/storage/profile_io.hpp"

using namespace csp;

namespace {

enum Frame : std::uint32_t { kMain, kSolve, kFork, kInvoke, kOutlined, kLoop, kStartThread, kMarker, kPool, kYield };

ThreadProfile regionProfile() {
  ThreadProfile p;
  p.identity.idTuple = {{IdKind::Thread, 0}};
  p.metrics = {{"cpu-time", "ns", MetricKind::Sampled, 1, ""}};
  p.strings = {""};
  p.frameKind = FrameKind::Address;
  p.modules = {{"/bin/app", {}, 0x1000, 0x2000, 0x1000},
               {"/usr/lib/libomp.so.5", {}, 0x5000, 0x6000, 0x5000},
               {"/lib/libc.so.6", {}, 0x7000, 0x8000, 0x7000},
               {kLogicalContextModule, {}, 0, 0, 0}};
  p.addressFrames = {{0, 0x10}, {0, 0x20}, {1, 0x100}, {1, 0x110},       {0, 0x30},
                     {0, 0x40}, {2, 0x10}, {3, 0},     {3, kPoolMarker}, {2, 0x20}};
  p.logical.parent = {kNoIndex};
  p.logical.kind = {LogicalKind::Parallel};
  p.logical.pathBegin = {0, 2};
  p.logical.pathFrame = {kMain, kSolve};
  // node: parent, frame
  const std::vector<std::pair<std::uint32_t, std::uint32_t>> nodes = {
      {kNoIndex, kNoIndex},  // 0 root
      {0, kMarker},         {1, kMain},         {2, kSolve},    {3, kFork},
      {4, kInvoke},         {5, kOutlined},                                   // 1-6 master
      {6, kLoop},                                                             // 7
      {1, kStartThread},    {8, kInvoke},       {9, kOutlined}, {10, kLoop},  // 8-11 worker
      {0, kPool},           {12, kStartThread}, {13, kInvoke},                // 12-14 pool
      {9, kYield}};  // 15: the worker in sched_yield, called by the runtime before the body
  for (const auto& [parent, frame] : nodes) {
    p.cct.parent.push_back(parent);
    p.cct.frame.push_back(frame);
  }
  const std::vector<std::pair<std::uint32_t, std::uint64_t>> values = {{7, 10}, {9, 3}, {11, 20}, {14, 5}, {15, 2}};
  for (const auto& [node, count] : values) {
    p.values.node.push_back(node);
    p.values.metric.push_back(0);
    p.values.count.push_back(count);
  }
  p.stats.samples = 40;
  return p;
}

// "module+offset > ..." of every node with a value, mapped to its count.
std::map<std::string, std::uint64_t> pathsOf(const ThreadProfile& p) {
  std::map<std::string, std::uint64_t> out;
  for (std::size_t v = 0; v < p.values.size(); ++v) {
    std::vector<std::string> names;
    for (auto n = p.values.node[v]; n != 0; n = p.cct.parent[n]) {
      const auto& f = p.addressFrames[p.cct.frame[n]];
      names.insert(names.begin(), baseName(p.modules[f.module].path) + "+" + std::to_string(f.offset));
    }
    std::string path;
    for (const auto& n : names) path += (path.empty() ? "" : " > ") + n;
    out[path] += p.values.count[v];
  }
  return out;
}

TEST(LogicalStitch, ProfileIsValid) {
  const auto p = regionProfile();
  EXPECT_NO_THROW(storage::validateProfile(p, "hand-made"));
  EXPECT_TRUE(reduce::hasLogicalMarkers(p));
}

TEST(LogicalStitch, BodiesGoBelowTheirCreationContextAndRuntimeFramesFold) {
  const auto out = reduce::stitchLogicalPaths(regionProfile(), true);
  const std::map<std::string, std::uint64_t> expected = {
      {"app+16 > app+32 > [omp runtime]+0 > app+48 > app+64", 30},  // master and worker alike
      {"app+16 > app+32 > [omp runtime]+0", 3 + 2},                 // the worker's dispatch, kept
      {"[omp runtime]+0", 5}};                                      // the pool
  EXPECT_EQ(pathsOf(out), expected);
  EXPECT_FALSE(reduce::hasLogicalMarkers(out));
}

TEST(LogicalStitch, PhysicalDropsTheMarkersOnly) {
  const auto out = reduce::stitchLogicalPaths(regionProfile(), false);
  const std::map<std::string, std::uint64_t> expected = {
      {"app+16 > app+32 > libomp.so.5+256 > libomp.so.5+272 > app+48 > app+64", 10},
      {"libc.so.6+16 > libomp.so.5+272 > app+48 > app+64", 20},
      {"libc.so.6+16 > libomp.so.5+272", 3 + 5},  // the worker's dispatch and the pool merge
      {"libc.so.6+16 > libomp.so.5+272 > libc.so.6+32", 2}};
  EXPECT_EQ(pathsOf(out), expected);
}

TEST(LogicalStitch, MarkersBelowTheRootAreInvalid) {
  auto p = regionProfile();
  p.cct.parent[12] = 1;  // the pool marker below the context's marker
  EXPECT_THROW(storage::validateProfile(p, "hand-made"), storage::ProfileError);
  p = regionProfile();
  p.logical.parent = {0};  // a context created in itself
  EXPECT_THROW(storage::validateProfile(p, "hand-made"), storage::ProfileError);
}

}  // namespace
