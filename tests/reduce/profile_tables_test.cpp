// What csp-prof-mpi keeps of every profile through the run, in compact form or on disk: the
// input list (directories once, names packed), the profiles (info, spill reference, input and
// record, in a spill file a batch at a time) and the thread classes' entries and reasons (in
// the spill file). Each must give back exactly what was put in.
#include <gtest/gtest.h>

#include <cstdint>
#include <filesystem>
#include <limits>
#include <string>
#include <vector>

#include "common/temp_dir.hpp"
#include "csp/reduce/profile_source.hpp"
#include "csp/storage/profile_io.hpp"
#include "stages.hpp"
#include "storage/profile_fixtures.hpp"

using namespace csp;
using csp::reduce::InputList;
using csp::reduce::InputProfile;
using csp::reduce::ProfileRecord;
using csp::reduce::stages::batchProfilesFor;
using csp::reduce::stages::kMaxBatchProfiles;

namespace {

// Sources are kept by address only: any distinct addresses do.
const reduce::ProfileSource* sourceAt(std::uintptr_t k) { return reinterpret_cast<const reduce::ProfileSource*>(k); }

}  // namespace

TEST(InputList, GivesBackEveryPathSizeAndSourceAsAdded) {
  // Directories that come back, a file without a directory, the root, names that are prefixes
  // of one another, an empty name after a slash, a bundle record.
  const std::vector<std::string> paths = {"/m/a/n0-t0.cspprof",        "/m/a/n0-t1.cspprof", "/m/b/x.cspprof",
                                          "/m/a/n0-t2.cspprof",        "plain.cspprof",      "/top.cspprof",
                                          "rel/dir/y.hpcrun",          "/m/a/n0-t",          "/m/a/",
                                          "/m/b/bundle.cspbundle@4096"};
  InputList list;
  for (std::size_t i = 0; i < paths.size(); ++i)
    list.add(
        {paths[i], i * 1000 + (i == 3 ? std::numeric_limits<std::uint64_t>::max() - 5 : 0), sourceAt(8 * (i % 3 + 1))});
  list.shrinkToFit();
  ASSERT_EQ(list.size(), paths.size());
  for (std::size_t i = 0; i < paths.size(); ++i) {
    const InputProfile f = list[i];
    EXPECT_EQ(f.path, paths[i]) << i;
    EXPECT_EQ(f.bytes, i * 1000 + (i == 3 ? std::numeric_limits<std::uint64_t>::max() - 5 : 0)) << i;
    EXPECT_EQ(list.bytes(i), f.bytes) << i;
    EXPECT_EQ(f.source, sourceAt(8 * (i % 3 + 1))) << i;
  }
  EXPECT_THROW((void)list[paths.size()], std::out_of_range);
}

// The automatic batch: 256 profiles unless they are large, then as many as hold about 64 MiB of
// input together (by their mean size; another budget if given), never fewer than one; --batch N
// is taken as given.
TEST(InputList, AutomaticBatchesHoldAboutSixtyFourMebibytesOfInput) {
  auto listOf = [](std::vector<std::uint64_t> sizes) {
    InputList list;
    for (std::size_t i = 0; i < sizes.size(); ++i) list.add({"/m/p" + std::to_string(i), sizes[i], sourceAt(8)});
    return list;
  };
  const std::uint64_t MiB = 1 << 20;
  EXPECT_EQ(batchProfilesFor(listOf({}), 0), kMaxBatchProfiles);
  EXPECT_EQ(batchProfilesFor(listOf({0, 0}), 0), kMaxBatchProfiles);
  EXPECT_EQ(batchProfilesFor(listOf({200'000, 190'000, 210'000}), 0), 256u);  // the benchmark's profiles
  EXPECT_EQ(batchProfilesFor(listOf({MiB / 4}), 0), 256u);
  EXPECT_EQ(batchProfilesFor(listOf({MiB / 4 + 8}), 0), 255u);
  EXPECT_EQ(batchProfilesFor(listOf({MiB / 2}), 0), 128u);
  EXPECT_EQ(batchProfilesFor(listOf({2 * MiB, 2 * MiB}), 0), 32u);
  EXPECT_EQ(batchProfilesFor(listOf({MiB, 3 * MiB}), 0), 32u);  // by the mean
  EXPECT_EQ(batchProfilesFor(listOf({64 * MiB}), 0), 1u);
  EXPECT_EQ(batchProfilesFor(listOf({1024 * MiB, 5}), 0), 1u);
  const std::uint64_t huge = std::numeric_limits<std::uint64_t>::max() - 5;
  EXPECT_EQ(batchProfilesFor(listOf({huge, huge, huge}), 0), 1u);  // the sum does not wrap
  EXPECT_EQ(batchProfilesFor(listOf({MiB / 4}), 0, MiB), 4u);      // --batch-budget 1
  EXPECT_EQ(batchProfilesFor(listOf({MiB / 4}), 0, 1024 * MiB), 256u);
  EXPECT_EQ(batchProfilesFor(listOf({2 * MiB}), 7), 7u);
  EXPECT_EQ(batchProfilesFor(listOf({100}), 1000), 1000u);
}

namespace {

std::vector<ProfileRecord> someRecords(std::uint32_t count) {
  std::vector<ProfileRecord> records;
  for (std::uint32_t k = 0; k < count; ++k) {
    ProfileRecord r;
    r.identity.idTuple = {{IdKind::Node, k / 64}, {IdKind::Rank, k / 4}, {IdKind::Thread, k % 4}};
    if (k % 7 == 0) r.identity.idTuple.push_back({IdKind::GpuStream, std::numeric_limits<std::uint64_t>::max()});
    if (k == 5) r.identity.idTuple.clear();
    // Hosts in runs, one coming back after others, one empty.
    r.identity.hostname = k < 100 ? "nid00001" : k < 200 ? "nid00002" : k % 2 ? "nid00001" : "";
    r.identity.pid = 4000000000U - k;
    r.identity.common = k % 3;
    r.stats.samples = std::uint64_t{1} << (k % 64);
    r.stats.unwindFailures = k;
    r.stats.droppedSamples = k * 3;
    r.stats.truncatedPaths = k % 5;
    r.truncatedSamples = k * 7;
    r.scannedSamples = k * 11;
    r.recoveredSamples = std::numeric_limits<std::uint64_t>::max() - k;
    records.push_back(r);
  }
  return records;
}

}  // namespace

TEST(LocalProfiles, GiveBackEveryProfileBatchByBatchExactly) {
  // Two sources (an input's source is kept as its index); batches of uneven sizes, one of a
  // single profile, and gaps in the batch numbers (the other ranks' batches).
  const reduce::ProfileSources sources = {reduce::cspProfileSource(), reduce::hpcrunProfileSource()};
  reduce::stages::SpillFile file("profile spool");
  reduce::stages::LocalProfiles local(file, sources);
  const auto records = someRecords(300);
  std::vector<std::size_t> batchOf;
  std::vector<reduce::ProfileInfo> infos;
  std::vector<reduce::stages::SpillRef> spills;
  std::vector<InputProfile> inputs;
  for (std::uint32_t k = 0; k < records.size(); ++k) {
    const std::size_t input = 1000 + 3 * std::size_t{k} + (k > 150 ? 5000 : 0);
    batchOf.push_back(k == 0 ? 7 : k < 100 ? 8 : k < 101 ? 9 : 11 + k / 64);
    infos.push_back({17 + k, k % 5 == 0, input});
    spills.push_back({std::uint64_t{k} << 33, k * 13U, k % 3 == 0});
    inputs.push_back(
        {"/m/r" + std::to_string(k) + (k % 2 ? ".cspprof" : ".hpcrun"), std::uint64_t{k} * 4096, sources[k % 2].get()});
    local.add(batchOf.back(), infos.back(), spills.back(), inputs.back(), records[k]);
  }
  local.finish();
  ASSERT_EQ(local.size(), records.size());
  std::uint32_t k = 0;
  for (const auto& batch : local.batches()) {
    const auto loaded = local.load(batch);
    ASSERT_EQ(loaded.infos.size(), batch.count);
    for (std::uint32_t i = 0; i < batch.count; ++i, ++k) {
      EXPECT_EQ(batch.index, batchOf[k]) << k;
      EXPECT_EQ(loaded.infos[i].id, infos[k].id) << k;
      EXPECT_EQ(loaded.infos[i].hasRegionEvents, infos[k].hasRegionEvents) << k;
      EXPECT_EQ(loaded.infos[i].input, infos[k].input) << k;
      EXPECT_EQ(loaded.spill[i].offset, spills[k].offset) << k;
      EXPECT_EQ(loaded.spill[i].size, spills[k].size) << k;
      EXPECT_EQ(loaded.spill[i].reread, spills[k].reread) << k;
      EXPECT_EQ(loaded.inputs[i].path, inputs[k].path) << k;
      EXPECT_EQ(loaded.inputs[i].bytes, inputs[k].bytes) << k;
      EXPECT_EQ(loaded.inputs[i].source, inputs[k].source) << k;
      const ProfileRecord& r = loaded.records[i];
      EXPECT_EQ(r.identity.idTuple, records[k].identity.idTuple) << k;
      EXPECT_EQ(r.identity.hostname, records[k].identity.hostname) << k;
      EXPECT_EQ(r.identity.pid, records[k].identity.pid) << k;
      EXPECT_EQ(r.identity.common, records[k].identity.common) << k;
      EXPECT_EQ(r.stats, records[k].stats) << k;
      EXPECT_EQ(r.truncatedSamples, records[k].truncatedSamples) << k;
      EXPECT_EQ(r.scannedSamples, records[k].scannedSamples) << k;
      EXPECT_EQ(r.recoveredSamples, records[k].recoveredSamples) << k;
    }
  }
  EXPECT_EQ(k, records.size());
  EXPECT_EQ(local.batches().size(), 3U + (299 / 64 - 101 / 64 + 1));
  // A batch out of order is a bug of the caller: refused, not silently split.
  EXPECT_THROW(local.add(3, infos[0], spills[0], inputs[0], records[0]), std::logic_error);
  // A batch whose bytes in the file are not what was written is an error, not garbage.
  auto broken = local.batches().front();
  broken.where.size -= 1;
  EXPECT_THROW((void)local.load(broken), std::runtime_error);
}

TEST(ReadProfile, ComesBackFromTheSpoolExactly) {
  // What the structure pass keeps of each profile until they are numbered: encoded, written to
  // the profile spool, decoded when the table is built.
  const auto records = someRecords(40);
  for (std::uint32_t k = 0; k < records.size(); ++k) {
    reduce::stages::ReadProfile r;
    r.info.hasRegionEvents = k % 2 == 1;
    r.info.input = std::size_t{k} << 30;
    r.record = records[k];
    r.metrics = k * 7;
    r.spill = {std::numeric_limits<std::uint64_t>::max() - k, k, k % 3 == 0};
    r.features.process = k % 5 ? "nid00001:" + std::to_string(k) : "";
    r.features.initialThread = k % 4 == 0;
    r.features.work = std::uint64_t{k} << 40;
    r.features.waited = k;
    r.features.entry = k % 3 ? "worker_main" : "";
    r.features.entryModule = "/lib/libgomp.so.1";
    const std::string bytes = reduce::stages::encodeReadProfile(r);
    const auto back = reduce::stages::decodeReadProfile(bytes);
    EXPECT_EQ(back.info.hasRegionEvents, r.info.hasRegionEvents) << k;
    EXPECT_EQ(back.info.input, r.info.input) << k;
    EXPECT_EQ(back.metrics, r.metrics) << k;
    EXPECT_EQ(back.spill.offset, r.spill.offset) << k;
    EXPECT_EQ(back.spill.size, r.spill.size) << k;
    EXPECT_EQ(back.spill.reread, r.spill.reread) << k;
    EXPECT_EQ(back.record.identity.idTuple, r.record.identity.idTuple) << k;
    EXPECT_EQ(back.record.identity.hostname, r.record.identity.hostname) << k;
    EXPECT_EQ(back.record.identity.pid, r.record.identity.pid) << k;
    EXPECT_EQ(back.record.identity.common, r.record.identity.common) << k;
    EXPECT_EQ(back.record.stats, r.record.stats) << k;
    EXPECT_EQ(back.record.recoveredSamples, r.record.recoveredSamples) << k;
    EXPECT_EQ(back.features.process, r.features.process) << k;
    EXPECT_EQ(back.features.initialThread, r.features.initialThread) << k;
    EXPECT_EQ(back.features.work, r.features.work) << k;
    EXPECT_EQ(back.features.waited, r.features.waited) << k;
    EXPECT_EQ(back.features.entry, r.features.entry) << k;
    EXPECT_EQ(back.features.entryModule, r.features.entryModule) << k;
    // Short or long by a byte: an error, never a profile made up of the neighbours' bytes.
    EXPECT_THROW((void)reduce::stages::decodeReadProfile(std::string_view(bytes).substr(0, bytes.size() - 1)),
                 std::runtime_error);
    EXPECT_THROW((void)reduce::stages::decodeReadProfile(bytes + "x"), std::runtime_error);
  }
}

TEST(ThreadClassification, EntriesAndReasonsComeBackPerProfile) {
  // What stages::classifyThreads keeps at rank 0, packed in the spill file; infos() reads it
  // back with the classes.
  reduce::stages::SpillFile file("profile spool");
  reduce::stages::ThreadClassification c;
  storage::ByteWriter<std::string> packed;
  std::vector<storage::ThreadClassInfo> expected;
  for (std::uint8_t k = 0; k < 40; ++k) {
    storage::ThreadClassInfo info;
    info.threadClass = static_cast<storage::ThreadClass>(k % 3);
    info.entry = k % 4 ? "solver_loop" : "";
    info.reason = std::string(k * 5, 'r') + std::to_string(k);
    c.classOf.push_back(static_cast<std::uint8_t>(info.threadClass));
    packed.text(info.entry);
    packed.text(info.reason);
    expected.push_back(info);
  }
  (void)file.write("garbage before", 14);  // the texts need not come first in the file
  const std::string texts = packed.take();
  c.kept = &file;
  c.entriesAndReasons = file.write(texts.data(), texts.size());
  EXPECT_EQ(c.infos(), expected);
  c.classOf.push_back(0);  // one profile more than the texts: refused, not read past the end
  EXPECT_THROW(c.infos(), std::runtime_error);
  reduce::stages::ThreadClassification other;  // a rank other than 0 keeps no texts
  other.classOf = {0, 1};
  EXPECT_TRUE(other.infos().empty());
}

// Discovery's facts of an entry (ProfileSource::facts): CSP's format takes the size and the file
// from one stat; it must give what the two looks of the default give, for a profile file, a
// bundle's records, a link to a profile, a directory named like a profile and a missing file.
TEST(SourceFacts, OneStatGivesWhatSizeAndPlaceGive) {
  csp::test::TempDir dir("source-facts");
  storage::writeProfile(test::fullAddressProfile(), dir.path() / "a.cspprof");
  {
    storage::ProfileBundleWriter bundle(dir.path() / "b.cspbundle");
    bundle.append(test::fullAddressProfile());
    bundle.append(test::fullAddressProfile());
  }
  std::filesystem::create_symlink(dir.path() / "a.cspprof", dir.path() / "link.cspprof");
  std::filesystem::create_directory(dir.path() / "d.cspprof");
  auto entries = storage::listProfiles(dir.path());
  entries.push_back((dir.path() / "missing.cspprof").string());
  ASSERT_EQ(entries.size(), 6u);  // a, two records of b, d, link, missing

  const auto source = reduce::cspProfileSource();
  std::size_t found = 0, sized = 0;
  for (const auto& e : entries) {
    const auto one = source->facts(e);
    const auto two = source->ProfileSource::facts(e);  // place(), a stat, bytes()
    EXPECT_EQ(one.bytes, two.bytes) << e;
    EXPECT_EQ(one.offset, two.offset) << e;
    EXPECT_EQ(one.found, two.found) << e;
    EXPECT_EQ(one.device, two.device) << e;
    EXPECT_EQ(one.inode, two.inode) << e;
    found += one.found ? 1 : 0;
    sized += one.bytes > 0 ? 1 : 0;
  }
  EXPECT_EQ(found, 5u);  // all but the missing one
  EXPECT_EQ(sized, 4u);  // the profile, the link to it and the bundle's two records
  // The link is the profile's file: the same device and inode, which the same-file check compares.
  const auto a = source->facts((dir.path() / "a.cspprof").string());
  const auto link = source->facts((dir.path() / "link.cspprof").string());
  EXPECT_EQ(a.inode, link.inode);
  EXPECT_EQ(a.device, link.device);
}
