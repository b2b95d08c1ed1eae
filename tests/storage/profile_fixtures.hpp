// Profiles with every field of the format set, for round-trip and rejection tests.
#pragma once

#include "csp/storage/profile_builder.hpp"

namespace csp::test {

inline ThreadProfile fullSymbolicProfile() {
  storage::ProfileBuilder b(FrameKind::Symbolic);
  auto& p = b.profile();
  p.identity.idTuple = {{IdKind::Node, 2}, {IdKind::Rank, 7}, {IdKind::Thread, 3}, {IdKind::Core, 11}};
  p.identity.pid = 4242;
  p.identity.hostname = "nid00042";
  p.identity.executable = "/opt/app/bin/solver";
  p.identity.commandLine = {"solver", "-n", "64", "in.deck"};
  p.identity.startTimeNs = 1'700'000'000'123'456'789ULL;
  p.identity.endTimeNs = 1'700'000'010'000'000'000ULL;
  p.identity.settings = {{"events", "cpu-time@200"}, {"regions.log", "on"}};
  b.addMetric({"cpu-time", "ns", MetricKind::Sampled, 5'000'000, "thread CPU time"});
  b.addMetric({"real-time", "ns", MetricKind::Sampled, 1'000'000, "wall time"});
  b.addMetric({"instructions", "events", MetricKind::Counted, 1, "retired instructions"});

  auto proc = [&](const char* name, const char* file, std::uint32_t line, const char* module) {
    return b.frame(SymbolicFrame{ScopeKind::ProcFrame, b.intern(name), b.intern(file), line, b.intern(module)});
  };
  auto scope = [&](ScopeKind s, const char* file, std::uint32_t line) {
    return b.frame(SymbolicFrame{s, 0, b.intern(file), line, 0});
  };
  const auto main = proc("main", "main.c", 1, "solver");
  const auto cs = scope(ScopeKind::CallSite, "main.c", 20);
  const auto f = proc("f(int)", "f.cpp", 5, "libf.so");
  const auto loop = scope(ScopeKind::Loop, "f.cpp", 8);
  const auto alien = b.frame(SymbolicFrame{ScopeKind::Alien, b.intern("inl_helper"), b.intern("f.cpp"), 9, 0});
  const auto s1 = scope(ScopeKind::Stmt, "f.cpp", 10);
  const auto s2 = scope(ScopeKind::Stmt, "helper.h", 3);
  const auto s3 = scope(ScopeKind::Stmt, "main.c", 4);
  std::uint32_t a[] = {main, cs, f, loop, s1};
  std::uint32_t c[] = {main, cs, f, loop, alien, s2};
  std::uint32_t d[] = {main, s3};
  const auto na = b.path(a), nc = b.path(c), nd = b.path(d);
  b.addCount(na, 0, 10);
  b.addCount(na, 2, 123456789012ULL);
  b.addCount(nc, 0, 100);
  b.addCount(nc, 1, 7);
  b.addCount(nd, 1, 1);
  p.stats.unwindFailures = 2;
  p.stats.droppedSamples = 3;
  p.stats.truncatedPaths = 1;

  auto& r = p.regions;
  r.names = {"solve", "iter"};
  r.parent = {kNoIndex, 0, 1, 1};
  r.staticId = {0, 0, 1, 1};
  r.dynamicId = {0, 0, 1, 2};
  r.count = {0, 1, 1, 1};
  r.inclusiveNs = {0, 100, 30, 50};
  r.exclusiveNs = {0, 20, 30, 50};
  r.eventTimeNs = {0, 10, 40, 45, 95, 100};
  r.eventNode = {1, 2, 2, 3, 3, 1};
  r.eventIsEnter = {true, true, false, true, false, false};
  r.eventsLost = 5;
  r.mismatchedEnds = 1;
  r.unclosedAtExit = 0;
  return b.finish();
}

inline ThreadProfile fullAddressProfile() {
  storage::ProfileBuilder b(FrameKind::Address);
  auto& p = b.profile();
  p.identity.idTuple = {{IdKind::Rank, 0}, {IdKind::Thread, 0}};
  p.identity.pid = 99;
  p.identity.executable = "/bin/app";
  b.addMetric({"cpu-time", "ns", MetricKind::Sampled, 5'000'000, ""});
  p.modules = {{"/bin/app", {0xde, 0xad, 0xbe, 0xef}, 0x400000, 0x480000, 0x400000},
               {"/lib/libc.so.6", {}, 0x7f0000000000ULL, 0x7f0000200000ULL, 0x7f0000000000ULL}};
  const auto f0 = b.frame(AddressFrame{0, 0x1234});
  const auto f1 = b.frame(AddressFrame{1, 0x55});
  const auto f2 = b.frame(AddressFrame{0, 0x2000});
  std::uint32_t x[] = {f0, f1};
  std::uint32_t y[] = {f0, f2, f1};
  b.addCount(b.path(x), 0, 4);
  b.addCount(b.path(y), 0, 1);
  return b.finish();
}

// fullAddressProfile with unwind notes (format 1.1): node 1 (app+0x1234) was found by the tables
// after a stack scan (its return address in word 3), node 3 (app+0x2000) is a candidate of that
// scan (word 1), and node 4, a sample's leaf, the frame without tables whose stack was scanned
// (its frame pointer at word 2).
inline ThreadProfile scannedAddressProfile() {
  ThreadProfile p = fullAddressProfile();
  p.cct.unwindNote = {0, UnwindNote{UnwindNoteKind::Resumed, 3, 0}.encode(), 0,
                      UnwindNote{UnwindNoteKind::Candidate, 1, 0}.encode(),
                      UnwindNote{UnwindNoteKind::Stopped, 0, 3}.encode()};
  return p;
}

}  // namespace csp::test
