// csp-db-dump DB: every key and value of a database, family by family, in key order, one line
// each (hex). Two databases hold the same data when their dumps are equal; used to check that
// refactorings and process counts leave databases unchanged.
#include <cstdio>
#include <exception>
#include <string>

#include "common/db_dump.hpp"

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: csp-db-dump DATABASE\n");
    return 2;
  }
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
    for (const auto& [key, value] : csp::test::dumpDatabase(argv[1])) {
      const auto colon = key.find(':');
      std::printf("%s %s %s\n", key.substr(0, colon).c_str(), hex(key.substr(colon + 1)).c_str(), hex(value).c_str());
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "csp-db-dump: error: %s\n", e.what());
    return 1;
  }
  return 0;
}
