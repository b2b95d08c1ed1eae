// Every key and value of a database, column family by column family, in key order: two
// databases are identical when their dumps are.
#pragma once

#include <filesystem>
#include <string>
#include <utility>
#include <vector>

#include "csp/storage/database.hpp"

namespace csp::test {

inline std::vector<std::pair<std::string, std::string>> dumpDatabase(const std::filesystem::path& dir) {
  auto db = storage::Database::open(dir);
  std::vector<std::pair<std::string, std::string>> out;
  for (const auto& family : storage::databaseColumnFamilies()) {
    db->forEachEntry(family, [&](std::string_view k, std::string_view v) {
      out.emplace_back(family + ":" + std::string(k), std::string(v));
    });
  }
  return out;
}

}  // namespace csp::test
