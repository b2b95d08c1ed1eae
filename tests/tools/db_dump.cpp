// csp-db-dump DB: every key and value of a database, family by family, in key order, one line
// each (hex). Two databases hold the same data when their dumps are equal; used to check that
// refactorings and process counts leave databases unchanged.
// csp-db-dump --logical DB: the same but for the format version and the per-thread value blocks,
// whose values are printed decoded instead (profile by profile, then node by node): equal for two
// databases of the same data in different format versions (1.x and 2.x encode values apart).
#include <cstdio>
#include <exception>
#include <filesystem>
#include <string>

#include "common/db_dump.hpp"

namespace {

void printLogicalValues(const std::filesystem::path& dir) {
  const auto db = csp::storage::Database::open(dir);
  const auto& meta = db->metadata();
  for (csp::storage::ProfileId p = 0; p < meta.profiles.size(); ++p)
    for (const auto& v : db->profileValues(p))
      std::printf("value-by-profile %u %u %u %u %llu\n", p, v.node, unsigned{v.metric}, static_cast<unsigned>(v.scope),
                  static_cast<unsigned long long>(v.value));
  for (csp::storage::NodeId n = 0; n < meta.nodeCount; ++n)
    for (const auto& v : db->nodeValues(n))
      std::printf("value-by-node %u %u %u %u %llu\n", n, unsigned{v.metric}, static_cast<unsigned>(v.scope), v.profile,
                  static_cast<unsigned long long>(v.value));
}

}  // namespace

int main(int argc, char** argv) {
  const bool logical = argc == 3 && std::string(argv[1]) == "--logical";
  if (argc != 2 && !logical) {
    std::fprintf(stderr, "usage: csp-db-dump [--logical] DATABASE\n");
    return 2;
  }
  const char* dir = argv[argc - 1];
  try {
    auto hex = [](const std::string& s) {
      static const char* digits = "0123456789abcdef";
      std::string out;
      out.reserve(s.size() * 2);
      for (unsigned char c : s) {
        out.push_back(digits[c >> 4]);
        out.push_back(digits[c & 15]);
      }
      return out;
    };
    for (const auto& [key, value] : csp::test::dumpDatabase(dir)) {
      const auto colon = key.find(':');
      const std::string family = key.substr(0, colon);
      if (logical && (family == "values_by_profile" || family == "values_by_node" || key == "metadata:version"))
        continue;
      std::printf("%s %s %s\n", family.c_str(), hex(key.substr(colon + 1)).c_str(), hex(value).c_str());
    }
    if (logical) printLogicalValues(dir);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "csp-db-dump: error: %s\n", e.what());
    return 1;
  }
  return 0;
}
