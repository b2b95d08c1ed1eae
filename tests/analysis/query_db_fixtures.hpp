// Databases with hand-written region event logs for the command-line tests: a csp-gen JSON
// description (docs/csp-gen-json.md) -> csp-gen -> csp-prof-mpi.
#pragma once

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <fstream>
#include <optional>
#include <string>

#include "common/test_support.hpp"

namespace csp::test {

// A command whose stderr is dropped (run() adds 2>&1 after the whole command).
inline std::string withoutStderr(const std::string& command) {
  std::string out = "(";
  out += command;
  out += " 2>/dev/null)";
  return out;
}

struct LogSpec {
  nlohmann::json threads = nlohmann::json::array();

  // A thread with one sample; `rank` absent: an id tuple of the thread number alone.
  nlohmann::json& thread(std::optional<int> rank, int thread, int pid, const std::string& host = "n1") {
    nlohmann::json id = {{"thread", thread}};
    if (rank) id["rank"] = *rank;
    threads.push_back({{"id", id},
                       {"hostname", host},
                       {"pid", pid},
                       {"samples",
                        {{{"path", {{{"proc", "main"}, {"file", "m.c"}, {"line", 1}}, {{"stmt", "m.c:2"}}}},
                          {"counts", {{"cycles", 1}}}}}},
                       {"events", nlohmann::json::array()}});
    return threads.back();
  }
  static void enter(nlohmann::json& thread, std::uint64_t t, const std::string& path) {
    thread["events"].push_back({{"t", t}, {"enter", path}});
  }
  static void exit(nlohmann::json& thread, std::uint64_t t, const std::string& path) {
    thread["events"].push_back({{"t", t}, {"exit", path}});
  }
  static void span(nlohmann::json& thread, std::uint64_t a, std::uint64_t b, const std::string& path) {
    enter(thread, a, path);
    exit(thread, b, path);
  }

  // csp-gen and csp-prof-mpi into dir/db; the database path.
  std::filesystem::path database(const std::filesystem::path& dir) const {
    {
      std::ofstream out(dir / "spec.json");
      out << nlohmann::json{{"metrics", {{{"name", "cycles"}, {"unit", "cycles"}, {"kind", "sampled"}, {"period", 1}}}},
                            {"threads", threads}}
                 .dump();
    }
    const auto gen = run("timeout 120 " + tool("csp-gen") + " -q --from-json " + (dir / "spec.json").string() + " -o " +
                         (dir / "m").string());
    EXPECT_EQ(gen.status, 0) << gen.output;
    const auto prof =
        run("timeout 120 " + tool("csp-prof-mpi") + " -q " + (dir / "m").string() + " -o " + (dir / "db").string());
    EXPECT_EQ(prof.status, 0) << prof.output;
    return dir / "db";
  }
};

}  // namespace csp::test
