#include <capnp/any.h>
#include <capnp/message.h>
#include <capnp/serialize.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <set>
#include <thread>

#include "common/temp_dir.hpp"
#include "csp/storage/atomic_file.hpp"
#include "csp/storage/profile_io.hpp"
#include "storage/profile_fixtures.hpp"

namespace fs = std::filesystem;
using namespace csp;

namespace {

using csp::test::TempDir;

TEST(ProfileRoundTrip, EverySymbolicFieldSurvives) {
  TempDir dir;
  const ThreadProfile original = test::fullSymbolicProfile();
  const auto path = dir.path() / storage::profileFileName(original.identity);
  storage::writeProfile(original, path);
  const ThreadProfile back = storage::readProfile(path);
  EXPECT_EQ(back.identity, original.identity);
  EXPECT_EQ(back.metrics, original.metrics);
  EXPECT_EQ(back.strings, original.strings);
  EXPECT_EQ(back.symbolicFrames, original.symbolicFrames);
  EXPECT_EQ(back.cct, original.cct);
  EXPECT_EQ(back.values, original.values);
  EXPECT_EQ(back.regions, original.regions);
  EXPECT_EQ(back.stats, original.stats);
  EXPECT_EQ(back, original);
  // Samples = sampled counts (10 + 100 + 7 + 1) + 3 dropped; the counted metric is not a sample.
  EXPECT_EQ(back.stats.samples, 121u);
}

// A profile's image with its message changed by rewrite(root) (the root struct, as a builder),
// written again behind the same header with the new payload size (its checksum is stale: read it
// with verifyChecksum off).
template <typename Rewrite>
std::vector<std::byte> rewrittenImage(const std::vector<std::byte>& image, Rewrite rewrite) {
  const std::size_t header = storage::kProfileHeaderBytes;
  auto words = kj::heapArray<capnp::word>((image.size() - header) / sizeof(capnp::word));
  std::memcpy(words.begin(), image.data() + header, image.size() - header);
  capnp::FlatArrayMessageReader reader(words);
  capnp::MallocMessageBuilder builder;
  builder.setRoot(reader.getRoot<capnp::AnyStruct>());
  rewrite(builder.getRoot<capnp::AnyStruct>());
  const auto flat = capnp::messageToFlatArray(builder);
  std::vector<std::byte> changed(image.begin(), image.begin() + static_cast<std::ptrdiff_t>(header));
  const auto payload = flat.asBytes();
  changed.insert(changed.end(), reinterpret_cast<const std::byte*>(payload.begin()),
                 reinterpret_cast<const std::byte*>(payload.end()));
  const std::uint64_t payloadBytes = payload.size();
  std::memcpy(changed.data() + 16, &payloadBytes, sizeof payloadBytes);  // the header's payload size
  return changed;
}

// The reader copies a list of packed values of its own type whole; a list written otherwise --
// here the sample counts as a struct list whose structs hold the count in their first data word
// and another field in the second, as a later schema that upgraded List(UInt64) to List(Struct)
// would write them -- must still be read as Cap'n Proto reads it, element by element.
TEST(ProfileRoundTrip, CountsWrittenAsAStructListReadBackAsCapnProtoReadsThem) {
  const ThreadProfile p = test::fullSymbolicProfile();
  ASSERT_GT(p.values.size(), 1u);
  bool rewritten = false;
  const auto changed = rewrittenImage(storage::serializeProfile(p), [&](capnp::AnyStruct::Builder root) {
    // The Values struct: three lists (node, metric, count) as long as the profile's values.
    for (auto pointer : root.getPointerSection()) {
      if (pointer.isNull() || pointer.getPointerType() != capnp::PointerType::STRUCT) continue;
      auto columns = pointer.getAs<capnp::AnyStruct>().getPointerSection();
      if (columns.size() != 3 || columns[2].getPointerType() != capnp::PointerType::LIST) continue;
      auto counts = columns[2].getAs<capnp::List<std::uint64_t>>();
      if (counts.size() != p.values.size()) continue;
      std::vector<std::uint64_t> values;
      for (unsigned i = 0; i < counts.size(); ++i) values.push_back(counts[i]);
      ASSERT_EQ(values, p.values.count);
      auto structs =
          columns[2].initAsListOfAnyStruct(2, 0, static_cast<unsigned>(values.size()));  // a second word: a later field
      for (unsigned i = 0; i < values.size(); ++i) {
        auto data = structs[i].getDataSection();
        for (unsigned b = 0; b < 8; ++b) data[b] = static_cast<capnp::byte>(values[i] >> (8 * b));
      }
      rewritten = true;
    }
  });
  ASSERT_TRUE(rewritten);
  const ThreadProfile back = storage::parseProfile(changed, "struct-list.cspprof", {.verifyChecksum = false});
  EXPECT_EQ(back.values.count, p.values.count);
  EXPECT_EQ(back.values.node, p.values.node);
}

// The same for the symbolic frame table, which the reader takes in place when its columns are
// packed: its 32-bit columns (name, file, line, module) written as struct lists are read element
// by element, into the same frames.
TEST(ProfileRoundTrip, SymbolicFrameColumnsWrittenAsStructListsReadBackAsCapnProtoReadsThem) {
  const ThreadProfile p = test::fullSymbolicProfile();
  const std::size_t frames = p.symbolicFrames.size();
  ASSERT_GT(frames, 1u);
  ASSERT_NE(frames, p.values.size());  // the frame table is the struct with a 16-bit list this long
  std::size_t rewritten = 0;
  const auto changed = rewrittenImage(storage::serializeProfile(p), [&](capnp::AnyStruct::Builder root) {
    for (auto pointer : root.getPointerSection()) {
      if (pointer.isNull() || pointer.getPointerType() != capnp::PointerType::STRUCT) continue;
      auto columns = pointer.getAs<capnp::AnyStruct>().getPointerSection();
      auto isList = [](auto column, capnp::ElementSize size, std::size_t length) {
        return !column.isNull() && column.getPointerType() == capnp::PointerType::LIST &&
               column.template getAs<capnp::AnyList>().getElementSize() == size &&
               column.template getAs<capnp::AnyList>().size() == length;
      };
      bool frameTable = false;
      for (auto column : columns) frameTable = frameTable || isList(column, capnp::ElementSize::TWO_BYTES, frames);
      if (!frameTable) continue;
      for (auto column : columns) {
        if (!isList(column, capnp::ElementSize::FOUR_BYTES, frames)) continue;
        auto packed = column.getAs<capnp::List<std::uint32_t>>();
        std::vector<std::uint32_t> values;
        for (unsigned i = 0; i < packed.size(); ++i) values.push_back(packed[i]);
        auto structs = column.initAsListOfAnyStruct(1, 0, static_cast<unsigned>(frames));  // a word each
        for (unsigned i = 0; i < frames; ++i) {
          auto data = structs[i].getDataSection();
          for (unsigned b = 0; b < 4; ++b) data[b] = static_cast<capnp::byte>(values[i] >> (8 * b));
          data[4] = capnp::byte{0x5A};  // a later field's bits beside the value
        }
        ++rewritten;
      }
    }
  });
  ASSERT_EQ(rewritten, 4u);  // name, file, line, module
  const ThreadProfile back = storage::parseProfile(changed, "struct-frames.cspprof", {.verifyChecksum = false});
  EXPECT_EQ(back.symbolicFrames, p.symbolicFrames);
}

TEST(ProfileRoundTrip, EveryAddressFieldSurvives) {
  TempDir dir;
  const ThreadProfile original = test::fullAddressProfile();
  const auto path = dir.path() / "a.cspprof";
  storage::writeProfile(original, path);
  const ThreadProfile back = storage::readProfile(path);
  EXPECT_EQ(back.frameKind, FrameKind::Address);
  EXPECT_EQ(back.modules, original.modules);
  EXPECT_EQ(back.addressFrames, original.addressFrames);
  EXPECT_EQ(back, original);
}

// Format 1.1: the unwind notes of frames found by a stack scan survive; profiles without them
// store none.
TEST(ProfileRoundTrip, UnwindNotesSurvive) {
  TempDir dir;
  const ThreadProfile original = test::scannedAddressProfile();
  ASSERT_EQ(original.cct.note(4), (UnwindNote{UnwindNoteKind::Stopped, 0, 3}));
  const auto path = dir.path() / "a.cspprof";
  storage::writeProfile(original, path);
  const ThreadProfile back = storage::readProfile(path);
  EXPECT_EQ(back.cct.unwindNote, original.cct.unwindNote);
  EXPECT_EQ(back, original);
  EXPECT_TRUE(storage::readProfile(dir.path() / "a.cspprof").cct.unwindNote.size() == original.cct.size());
  storage::writeProfile(test::fullAddressProfile(), dir.path() / "b.cspprof");
  EXPECT_TRUE(storage::readProfile(dir.path() / "b.cspprof").cct.unwindNote.empty());
}

TEST(ProfileWriter, NeverFollowsAPlantedSymlink) {
  // A symlink planted where the writer used to put its temporary file (NAME.tmp.PID) must not
  // make it overwrite the link's target; nothing temporary stays behind.
  TempDir dir;
  const auto victim = dir.path() / "victim.txt";
  { std::ofstream(victim) << "precious"; }
  const ThreadProfile original = test::fullAddressProfile();
  const auto path = dir.path() / "a.cspprof";
  fs::create_symlink(victim, path.string() + ".tmp." + std::to_string(::getpid()));
  storage::writeProfile(original, path);
  std::ifstream in(victim);
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_EQ(text, "precious");
  EXPECT_EQ(storage::readProfile(path), original);
  std::size_t entries = 0;
  for (const auto& e : fs::directory_iterator(dir.path())) {
    ++entries;
    EXPECT_EQ(e.path().filename().string().find(".tmp.") == std::string::npos || fs::is_symlink(e.symlink_status()),
              true)
        << e.path();
  }
  EXPECT_EQ(entries, 3u);  // the victim, the planted link, the profile
}

TEST(ProfileRoundTrip, SerializationIsDeterministic) {
  EXPECT_EQ(storage::serializeProfile(test::fullSymbolicProfile()),
            storage::serializeProfile(test::fullSymbolicProfile()));
}

TEST(ProfileRoundTrip, WriteLeavesNoTemporaryFiles) {
  TempDir dir;
  storage::writeProfile(test::fullAddressProfile(), dir.path() / "x.cspprof");
  std::size_t files = 0;
  for ([[maybe_unused]] const auto& e : fs::directory_iterator(dir.path())) ++files;
  EXPECT_EQ(files, 1u);
  EXPECT_EQ(storage::listProfiles(dir.path()).size(), 1u);
}

TEST(ProfileNames, SortByIdTuple) {
  Identity a, b;
  a.idTuple = {{IdKind::Rank, 2}, {IdKind::Thread, 10}};
  b.idTuple = {{IdKind::Rank, 10}, {IdKind::Thread, 2}};
  a.pid = b.pid = 7;
  EXPECT_EQ(storage::profileFileName(a), "r000002-t0010.7.cspprof");
  EXPECT_LT(storage::profileFileName(a), storage::profileFileName(b));
  EXPECT_EQ(formatIdTuple(a.idTuple), "rank 2 thread 10");
}

// readdir's listing against std::filesystem's: the same names, what each entry is where the
// directory says so, and extensions as path::extension() sees them.
TEST(ListProfiles, DirectoryEntriesAreWhatTheFileSystemIteratorFinds) {
  TempDir dir;
  for (const char* name : {"a.cspprof", ".cspprof", ".hidden.cspprof", "b.cspbundles", "c.cspprof.tmp.1", "d", "..x"})
    std::ofstream(dir.path() / name) << "x";
  fs::create_directory(dir.path() / "sub.cspprof");
  fs::create_symlink(dir.path() / "a.cspprof", dir.path() / "link.cspprof");
  fs::create_symlink(dir.path() / "missing", dir.path() / "dangling.cspprof");

  std::error_code ec;
  const auto entries = storage::directoryEntries(dir.path(), ec);
  ASSERT_FALSE(ec) << ec.message();
  std::set<std::string> names, expected;
  for (const auto& e : entries) {
    names.insert(e.name);
    const fs::path path = dir.path() / e.name;
    using Kind = storage::DirectoryEntry::Kind;
    const auto status = fs::symlink_status(path);
    if (e.kind == Kind::Regular) {
      EXPECT_TRUE(fs::is_regular_file(status)) << e.name;
    }
    if (e.kind == Kind::Other) {
      EXPECT_FALSE(fs::is_regular_file(status) || fs::is_symlink(status)) << e.name;
    }
    if (fs::is_symlink(status)) {
      EXPECT_EQ(e.kind, Kind::Unknown) << e.name;
    }
    for (const char* ext : {".cspprof", ".cspbundle", ".tmp", ".x"})
      EXPECT_EQ(storage::hasExtension(e.name, ext), fs::path(e.name).extension() == ext) << e.name << " " << ext;
  }
  for (const auto& e : fs::directory_iterator(dir.path())) expected.insert(e.path().filename().string());
  EXPECT_EQ(names, expected);
  EXPECT_EQ(names.size(), 10u);
  // listProfiles keeps what it listed before: every entry named like a profile, whatever it is,
  // as the path the iterator makes, sorted (bundles, whose records it lists, are tested below).
  std::vector<std::string> listed = storage::listProfiles(dir.path());
  std::vector<std::string> want;
  for (const char* name : {".hidden.cspprof", "a.cspprof", "dangling.cspprof", "link.cspprof", "sub.cspprof"})
    want.push_back((dir.path() / name).string());
  EXPECT_EQ(listed.size(), want.size());
  for (const auto& w : want) EXPECT_NE(std::find(listed.begin(), listed.end(), w), listed.end()) << w;
  EXPECT_TRUE(std::is_sorted(listed.begin(), listed.end()));

  storage::directoryEntries(dir.path() / "none", ec);
  EXPECT_EQ(ec, std::errc::no_such_file_or_directory);
}

TEST(ListProfiles, MissingDirectoryIsAClearError) {
  try {
    storage::listProfiles("/nonexistent/csp-measurements");
    FAIL() << "no error";
  } catch (const storage::ProfileError& e) {
    EXPECT_STREQ(e.what(), "/nonexistent/csp-measurements: no such directory");
  }
}

}  // namespace

// ---- bundles: the profiles of a process's ended threads appended to one file ----------------

namespace {

ThreadProfile threadOf(std::uint64_t thread) {
  ThreadProfile p = test::fullAddressProfile();
  for (auto& e : p.identity.idTuple)
    if (e.kind == IdKind::Thread) e.value = thread;
  return p;
}

std::vector<std::string> bundleOfThree(const fs::path& dir, fs::path* bundlePath = nullptr) {
  storage::ProfileBundleWriter w(dir / storage::bundleFileName(threadOf(1).identity));
  for (std::uint64_t t = 1; t <= 3; ++t) w.append(threadOf(t));
  EXPECT_EQ(w.records(), 3u);
  if (bundlePath != nullptr) *bundlePath = w.path();
  return storage::listProfiles(dir);
}

std::string readError(const fs::path& entry) {
  try {
    storage::readProfile(entry);
  } catch (const storage::ProfileError& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST(ProfileBundles, EveryRecordIsListedAndReadBack) {
  TempDir dir;
  storage::writeProfile(threadOf(0), dir.path() / storage::profileFileName(threadOf(0).identity));
  fs::path bundle;
  const auto entries = bundleOfThree(dir.path(), &bundle);
  EXPECT_EQ(bundle.extension(), ".cspbundle");
  EXPECT_EQ(bundle.filename().string().find("-t"), std::string::npos) << "named after the process, not a thread";
  ASSERT_EQ(entries.size(), 4u);
  for (std::uint64_t t = 0; t <= 3; ++t) {
    EXPECT_EQ(storage::readProfile(entries[t]), threadOf(t)) << entries[t];
    EXPECT_EQ(storage::profileBytes(entries[t]), storage::serializeProfile(threadOf(t)).size());
  }
  const auto where = storage::locateProfile(entries[2]);
  EXPECT_TRUE(where.inBundle);
  EXPECT_EQ(where.file, bundle);
  EXPECT_EQ(where.offset, storage::serializeProfile(threadOf(1)).size());
  EXPECT_FALSE(storage::locateProfile(entries[0]).inBundle);
  // Given directly, a bundle of several profiles is refused with what to do instead.
  EXPECT_NE(readError(bundle).find("give its measurement directory"), std::string::npos) << readError(bundle);
}

TEST(ProfileBundles, TruncatedLastRecordIsReportedAndTheOthersRead) {
  TempDir dir;
  fs::path bundle;
  bundleOfThree(dir.path(), &bundle);
  fs::resize_file(bundle, fs::file_size(bundle) - 100);  // killed in the middle of the last append
  const auto entries = storage::listProfiles(dir.path());
  ASSERT_EQ(entries.size(), 3u);
  EXPECT_EQ(storage::readProfile(entries[0]), threadOf(1));
  EXPECT_EQ(storage::readProfile(entries[1]), threadOf(2));
  const std::string e = readError(entries[2]);
  EXPECT_NE(e.find(entries[2]), std::string::npos) << e;
  EXPECT_NE(e.find("truncated"), std::string::npos) << e;
}

TEST(ProfileBundles, DamagedRecordEndsTheListingAndIsReported) {
  TempDir dir;
  fs::path bundle;
  bundleOfThree(dir.path(), &bundle);
  const auto second = storage::serializeProfile(threadOf(1)).size();
  {
    std::fstream f(bundle, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(static_cast<std::streamoff>(second));
    f.write("JUNKJUNK", 8);  // the second record's magic
  }
  const auto entries = storage::listProfiles(dir.path());
  ASSERT_EQ(entries.size(), 2u) << "the records after a damaged header cannot be delimited";
  EXPECT_EQ(storage::readProfile(entries[0]), threadOf(1));
  EXPECT_NE(readError(entries[1]).find("bad magic"), std::string::npos) << readError(entries[1]);
  // A damaged payload (checksum) leaves the framing intact: every record is listed.
  TempDir other;
  fs::path b2;
  bundleOfThree(other.path(), &b2);
  {
    std::fstream f(b2, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(static_cast<std::streamoff>(second + storage::kProfileHeaderBytes + 16));
    f.write("\xff\xff\xff\xff", 4);
  }
  const auto all = storage::listProfiles(other.path());
  ASSERT_EQ(all.size(), 3u);
  EXPECT_NE(readError(all[1]).find("checksum mismatch"), std::string::npos) << readError(all[1]);
  EXPECT_EQ(storage::readProfile(all[2]), threadOf(3));
}

TEST(ProfileBundles, CreatedExclusivelyNeverThroughALink) {
  TempDir dir;
  const fs::path victim = dir.path() / "victim";
  std::ofstream(victim) << "precious";
  const fs::path name = dir.path() / storage::bundleFileName(threadOf(1).identity);
  fs::create_symlink(victim, name);
  storage::ProfileBundleWriter w(name);
  w.append(threadOf(1));
  EXPECT_NE(w.path(), name);
  EXPECT_EQ(w.path().extension(), ".cspbundle");
  std::ifstream in(victim);
  EXPECT_EQ(std::string(std::istreambuf_iterator<char>(in), {}), "precious");
  // The planted link is listed (and reported when read), the bundle's record too.
  const auto entries = storage::listProfiles(dir.path());
  ASSERT_EQ(entries.size(), 2u);
  EXPECT_EQ(storage::readProfile(entries[1].find(w.path().string()) == 0 ? entries[1] : entries[0]), threadOf(1));
}

// A full disk (here: the file-size limit) in the middle of an append: the partial record is cut
// off again, so the bundle holds whole records only.
TEST(ProfileBundles, FailedAppendLeavesOnlyWholeRecords) {
  TempDir dir;
  const fs::path name = dir.path() / storage::bundleFileName(threadOf(1).identity);
  storage::ProfileBundleWriter w(name);
  w.append(threadOf(1));
  const auto whole = fs::file_size(w.path());
  struct rlimit saved {};
  ASSERT_EQ(getrlimit(RLIMIT_FSIZE, &saved), 0);
  struct sigaction ignore {
  }, old{};
  ignore.sa_handler = SIG_IGN;
  sigaction(SIGXFSZ, &ignore, &old);
  struct rlimit small = saved;
  small.rlim_cur = whole + 100;
  ASSERT_EQ(setrlimit(RLIMIT_FSIZE, &small), 0);
  std::string error;
  try {
    w.append(threadOf(2));
  } catch (const storage::ProfileError& e) {
    error = e.what();
  }
  setrlimit(RLIMIT_FSIZE, &saved);
  sigaction(SIGXFSZ, &old, nullptr);
  EXPECT_NE(error.find("append failed"), std::string::npos) << error;
  EXPECT_EQ(fs::file_size(w.path()), whole);
  w.append(threadOf(3));  // and the bundle goes on
  const auto entries = storage::listProfiles(dir.path());
  ASSERT_EQ(entries.size(), 2u);
  EXPECT_EQ(storage::readProfile(entries[0]), threadOf(1));
  EXPECT_EQ(storage::readProfile(entries[1]), threadOf(3));
}

// Staged records (the measurement's writer thread gathers the threads that ended in the last
// milliseconds) go out in one write at flush(): nothing before, all of them after, in order;
// a flush that fails on a full disk leaves the bundle as it was before the flush.
TEST(ProfileBundles, StagedRecordsAreWrittenTogetherOrNotAtAll) {
  TempDir dir;
  storage::ProfileBundleWriter w(dir.path() / storage::bundleFileName(threadOf(1).identity));
  w.stage(threadOf(1));
  w.stage(threadOf(2));
  EXPECT_EQ(w.records(), 0u);
  EXPECT_FALSE(fs::exists(w.path())) << "created at the first write, not at the first stage";
  w.flush();
  EXPECT_EQ(w.records(), 2u);
  const auto whole = fs::file_size(w.path());
  w.stage(threadOf(3));
  w.stage(threadOf(4));
  struct rlimit saved {};
  ASSERT_EQ(getrlimit(RLIMIT_FSIZE, &saved), 0);
  struct sigaction ignore {
  }, old{};
  ignore.sa_handler = SIG_IGN;
  sigaction(SIGXFSZ, &ignore, &old);
  struct rlimit small = saved;
  small.rlim_cur = whole + storage::serializeProfile(threadOf(3)).size() + 10;  // room for one and a bit
  ASSERT_EQ(setrlimit(RLIMIT_FSIZE, &small), 0);
  std::string error;
  try {
    w.flush();
  } catch (const storage::ProfileError& e) {
    error = e.what();
  }
  setrlimit(RLIMIT_FSIZE, &saved);
  sigaction(SIGXFSZ, &old, nullptr);
  EXPECT_NE(error.find("append failed"), std::string::npos) << error;
  EXPECT_EQ(fs::file_size(w.path()), whole);
  EXPECT_EQ(w.records(), 2u);
  w.stage(threadOf(5));
  w.flush();
  w.flush();  // nothing staged: no-op
  const auto entries = storage::listProfiles(dir.path());
  ASSERT_EQ(entries.size(), 3u);
  EXPECT_EQ(storage::readProfile(entries[0]), threadOf(1));
  EXPECT_EQ(storage::readProfile(entries[1]), threadOf(2));
  EXPECT_EQ(storage::readProfile(entries[2]), threadOf(5));
}

// The one atomic file writer (profiles, the database's small files, the measurement's perf-map
// copies): a link planted at the target is replaced, never followed; a failed write leaves
// neither a temporary file nor a changed target.
TEST(AtomicFile, NeverFollowsALinkAndLeavesNothingOnFailure) {
  TempDir dir;
  const fs::path victim = dir.path() / "victim";
  std::ofstream(victim) << "precious";
  const fs::path target = dir.path() / "perf-42.host.map";
  fs::create_symlink(victim, target);
  storage::writeFileAtomically(target, std::string("1000 10 jitted\n"), {.fsync = true, .temporaryTag = "42"});
  EXPECT_FALSE(fs::is_symlink(target));
  std::ifstream in(victim);
  EXPECT_EQ(std::string(std::istreambuf_iterator<char>(in), {}), "precious");
  std::ifstream copy(target);
  EXPECT_EQ(std::string(std::istreambuf_iterator<char>(copy), {}), "1000 10 jitted\n");
  // A directory where the file should go: the rename fails, the temporary is removed.
  fs::create_directory(dir.path() / "blocked");
  std::ofstream(dir.path() / "blocked" / "inside") << "x";
  EXPECT_THROW(storage::writeFileAtomically(dir.path() / "blocked", std::string("data")), storage::AtomicFileError);
  for (const auto& e : fs::directory_iterator(dir.path()))
    EXPECT_EQ(e.path().filename().string().find(".tmp."), std::string::npos) << e.path();
}

// A writer killed at any moment leaves complete files or nothing: the file is written without a
// name and linked when complete (a temporary under NAME.tmp.* was left behind by every kill
// that landed in a write: 0-byte or partial, next to the profiles).
TEST(AtomicFile, KilledWriterLeavesNoTemporary) {
  TempDir dir;
  const std::string data(4u << 20, 'x');
  for (int attempt = 0; attempt < 3; ++attempt) {
    const pid_t child = ::fork();
    ASSERT_GE(child, 0);
    if (child == 0) {
      // Fresh names, as profiles have; the older files go, so that the directory stays small.
      auto name = [&](int i) { return dir.path() / (std::to_string(attempt) + "-" + std::to_string(i) + ".cspprof"); };
      for (int i = 0;; ++i) {
        storage::writeFileAtomically(name(i), data, {.fsync = false, .temporaryTag = "7"});
        if (i >= 2) ::unlink(name(i - 2).c_str());
      }
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(150 + 70 * attempt));
    ::kill(child, SIGKILL);
    ::waitpid(child, nullptr, 0);
  }
  int complete = 0;
  for (const auto& e : fs::directory_iterator(dir.path())) {
    EXPECT_EQ(e.path().filename().string().find(".tmp."), std::string::npos) << "left behind: " << e.path();
    EXPECT_EQ(fs::file_size(e.path()), data.size()) << e.path();
    ++complete;
  }
  EXPECT_GT(complete, 0) << "the writer never finished a file: the test proves nothing";
}

namespace {

// A bundle of `records` profiles (threads 1, 2, ...) in writes of the given sizes.
fs::path bundleInWrites(const fs::path& dir, std::initializer_list<int> writes) {
  storage::ProfileBundleWriter w(dir / storage::bundleFileName(threadOf(1).identity));
  std::uint64_t thread = 1;
  for (const int n : writes) {
    for (int k = 0; k < n; ++k) w.stage(threadOf(thread++));
    w.flush();
  }
  return w.path();
}

}  // namespace

// A bundle cut exactly between two records of one write holds whole records only; it used to be
// read silently with fewer threads. Each write marks its last record: a cut inside a write is
// listed as one more entry at the bundle's end, whose reading says what is missing. A cut
// between two writes is the state the bundle had after the earlier write: consistent.
TEST(ProfileBundles, CutBetweenRecordsIsReported) {
  const auto recordBytes = storage::serializeProfile(threadOf(1)).size();
  for (const std::uint64_t keep : {1u, 2u, 3u}) {
    TempDir dir;
    const fs::path bundle = bundleInWrites(dir.path(), {1, 3});  // records 1 | 2 3 4
    fs::resize_file(bundle, keep * recordBytes);
    const auto entries = storage::listProfiles(dir.path());
    for (std::uint64_t r = 0; r < keep; ++r) EXPECT_EQ(storage::readProfile(entries.at(r)), threadOf(r + 1));
    if (keep == 1) {
      EXPECT_EQ(entries.size(), 1u) << "cut at the end of the first write: consistent";
      continue;
    }
    ASSERT_EQ(entries.size(), keep + 1) << "keep " << keep;
    EXPECT_EQ(entries.back(), bundle.string() + "@" + std::to_string(keep * recordBytes));
    const std::string e = readError(entries.back());
    EXPECT_NE(e.find(entries.back() + ": cut after its record " + std::to_string(keep)), std::string::npos) << e;
    EXPECT_EQ(storage::profileBytes(entries.back()), 0u);
    // Given by itself, a cut bundle is refused with the same reason.
    EXPECT_NE(readError(bundle).find("cut after its record"), std::string::npos) << readError(bundle);
  }
  // A whole bundle lists its records only.
  TempDir whole;
  bundleInWrites(whole.path(), {2, 1, 3});
  EXPECT_EQ(storage::listProfiles(whole.path()).size(), 6u);
}

// Bundles written before the marks (records with no header flags) stay readable as they were;
// an empty bundle (a process killed in its first write, before bundles were created whole) is
// reported, not silently empty.
TEST(ProfileBundles, UnmarkedAndEmptyBundles) {
  TempDir dir;
  {
    std::ofstream out(dir.path() / "r000001.77.cspbundle", std::ios::binary);
    for (std::uint64_t t = 1; t <= 2; ++t) {
      const auto image = storage::serializeProfile(threadOf(t));
      out.write(reinterpret_cast<const char*>(image.data()), static_cast<std::streamsize>(image.size()));
    }
  }
  std::ofstream(dir.path() / "r000002.78.cspbundle");
  const auto entries = storage::listProfiles(dir.path());
  ASSERT_EQ(entries.size(), 3u);
  EXPECT_EQ(storage::readProfile(entries[0]), threadOf(1));
  EXPECT_EQ(storage::readProfile(entries[1]), threadOf(2));
  EXPECT_NE(readError(entries[2]).find("an empty bundle"), std::string::npos) << readError(entries[2]);
}

// The first write creates the bundle already holding it: a first write that fails (a full disk)
// leaves no bundle at all (it used to leave an empty one).
TEST(ProfileBundles, FailedFirstWriteLeavesNoBundle) {
  TempDir dir;
  storage::ProfileBundleWriter w(dir.path() / storage::bundleFileName(threadOf(1).identity));
  struct rlimit saved {};
  ASSERT_EQ(getrlimit(RLIMIT_FSIZE, &saved), 0);
  struct sigaction ignore {
  }, old{};
  ignore.sa_handler = SIG_IGN;
  sigaction(SIGXFSZ, &ignore, &old);
  struct rlimit small = saved;
  small.rlim_cur = 100;
  ASSERT_EQ(setrlimit(RLIMIT_FSIZE, &small), 0);
  EXPECT_THROW(w.append(threadOf(1)), storage::ProfileError);
  setrlimit(RLIMIT_FSIZE, &saved);
  sigaction(SIGXFSZ, &old, nullptr);
  EXPECT_TRUE(fs::is_empty(dir.path()));
  w.append(threadOf(2));  // and the bundle goes on
  const auto entries = storage::listProfiles(dir.path());
  ASSERT_EQ(entries.size(), 1u);
  EXPECT_EQ(storage::readProfile(entries[0]), threadOf(2));
}
