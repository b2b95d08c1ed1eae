// Exact profiles from a JSON description (docs/csp-gen-json.md): tests state a CCT, its sample
// counts and its regions by hand, with scopes that attribution of binaries may only produce
// later (loops, inlined code).
#pragma once

#include <filesystem>
#include <stdexcept>
#include <string>
#include <vector>

#include "csp/storage/profile.hpp"

namespace csp::synth {

// A defect in a JSON description. what() reads "<file>: <where>: <defect>".
class SpecError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

std::vector<ThreadProfile> profilesFromJsonText(const std::string& text, const std::string& nameForErrors);
std::vector<ThreadProfile> profilesFromJsonFile(const std::filesystem::path& path);

}  // namespace csp::synth
