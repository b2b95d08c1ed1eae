// Every key and value of a database, column family by column family, in key order: two
// databases are identical when their dumps are.
#pragma once

#include <rocksdb/db.h>

#include <filesystem>
#include <fstream>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "csp/storage/bytes.hpp"
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

// Makes a database read as one of an older format `major.minor`, as the tests of older formats
// need: its manifest and the version its metadata stores (a major version on which they disagree
// is damage). What an older writer would not have written is the caller's to remove.
inline void pretendFormat(const std::filesystem::path& dir, std::uint32_t major, std::uint32_t minor) {
  std::vector<std::string> families;
  if (!rocksdb::DB::ListColumnFamilies(rocksdb::DBOptions(), dir.string(), &families).ok())
    throw std::runtime_error("pretendFormat: cannot list the column families of " + dir.string());
  std::vector<rocksdb::ColumnFamilyDescriptor> descriptors;
  for (const auto& f : families) descriptors.emplace_back(f, rocksdb::ColumnFamilyOptions());
  std::vector<rocksdb::ColumnFamilyHandle*> handles;
  rocksdb::DB* raw = nullptr;
  if (!rocksdb::DB::Open(rocksdb::DBOptions(), dir.string(), descriptors, &handles, &raw).ok())
    throw std::runtime_error("pretendFormat: cannot open " + dir.string());
  std::string version;
  storage::putVarint(version, major);
  storage::putVarint(version, minor);
  bool written = false;
  for (std::size_t i = 0; i < families.size(); ++i)
    if (families[i] == "metadata") written = raw->Put(rocksdb::WriteOptions(), handles[i], "version", version).ok();
  for (auto* h : handles) {
    raw->Flush(rocksdb::FlushOptions(), h);
    raw->DestroyColumnFamilyHandle(h);
  }
  delete raw;
  if (!written) throw std::runtime_error("pretendFormat: cannot write the metadata version of " + dir.string());
  std::ofstream(dir / storage::kDatabaseManifestName, std::ios::trunc)
      << "CSP experiment database\nformat " << major << "." << minor << "\n";
}

}  // namespace csp::test
