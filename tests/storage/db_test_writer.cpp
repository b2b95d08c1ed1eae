// csp_db_test_writer: builds a synthetic database the way csp-prof-mpi will, in a process of its
// own, so that the crash tests can kill -9 a real builder (and its writer processes) anywhere.
//
//   csp_db_test_writer TARGET TITLE SEED PROFILES NODES WRITERS FORCE STOP_AT
//
// Prints each step on stdout as it is reached ("created", "shard-written", "metadata",
// "ingested", "closed", "manifest", "exchanged", "published"); at STOP_AT ("-": nowhere) it
// stops and waits to be killed. Writers are forked first, as MPI ranks exist before the root
// creates the database, and receive the staging directory from it.
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "storage/db_fixtures.hpp"

namespace {

std::string stopAt;

void reached(std::string_view step) {
  std::printf("%.*s\n", static_cast<int>(step.size()), step.data());
  std::fflush(stdout);
  if (step == stopAt)
    for (;;) ::pause();
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 9) {
    std::fprintf(stderr, "usage: %s TARGET TITLE SEED PROFILES NODES WRITERS FORCE STOP_AT\n", argv[0]);
    return 2;
  }
  using namespace csp::test;
  const std::filesystem::path target = argv[1];
  const std::string title = argv[2];
  Synthetic s;
  s.seed = std::stoull(argv[3]);
  s.profiles = static_cast<std::uint32_t>(std::stoul(argv[4]));
  s.nodes = static_cast<std::uint32_t>(std::stoul(argv[5]));
  const auto writers = static_cast<std::uint32_t>(std::stoul(argv[6]));
  const bool force = std::string(argv[7]) == "1";
  stopAt = argv[8];
  try {
    ForkedWriters writerProcesses(writers, [&](const std::filesystem::path& staging, std::uint32_t k) {
      ShardWriter w(staging, k);
      s.writeShard(w, k, writers);
      reached("shard-written");
      w.finish();
    });
    DatabaseBuilder builder(target, BuildOptions{.force = force, .onStep = reached});
    writerProcesses.start(builder.stagingDir());
    builder.writeMetadata(s.metadata(title));
    if (!writerProcesses.join()) throw std::runtime_error("a writer process failed");
    builder.ingestShards(writers);
    builder.publish();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "csp_db_test_writer: %s\n", e.what());
    return 1;
  }
  return 0;
}
