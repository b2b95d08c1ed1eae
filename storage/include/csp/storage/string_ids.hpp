// The string table of a database being written: texts numbered in order of first use, so that
// the same sequence of texts gives the same ids (a deterministic database). Id 0 is "".
#pragma once

#include <map>
#include <string>
#include <vector>

#include "csp/storage/database.hpp"

namespace csp::storage {

class StringIds {
 public:
  StringIds() { table_.push_back(""); }
  StringId id(const std::string& text) {
    auto [it, fresh] = ids_.try_emplace(text, static_cast<StringId>(table_.size()));
    if (fresh) table_.push_back(text);
    return it->second;
  }
  std::vector<std::string> take() { return std::move(table_); }

 private:
  std::vector<std::string> table_;
  std::map<std::string, StringId> ids_;
};

}  // namespace csp::storage
