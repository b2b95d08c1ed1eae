// A temporary directory for a test: no dependency on the build tree, so that benchmarks can use it.
#pragma once

#include <stdlib.h>

#include <filesystem>
#include <stdexcept>
#include <string>
#include <system_error>

namespace csp::test {

// A fresh directory of its own (mkdtemp: csp-TAG-XXXXXX under the temporary directory), removed
// with everything in it when the test ends.
class TempDir {
 public:
  explicit TempDir(const std::string& tag = "test") {
    std::string pattern = (std::filesystem::temp_directory_path() / ("csp-" + tag + "-XXXXXX")).string();
    if (::mkdtemp(pattern.data()) == nullptr) throw std::runtime_error("mkdtemp " + pattern + " failed");
    path_ = pattern;
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::filesystem::path& path() const { return path_; }
  std::filesystem::path operator/(const std::string& name) const { return path_ / name; }

 private:
  std::filesystem::path path_;
};

}  // namespace csp::test
