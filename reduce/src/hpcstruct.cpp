// hpcstruct files, read with libxml2 (hpcstruct.hpp). The elements: <LM n=path> holds <F n=file>
// holds <P n=name l=line v=ranges>, which holds <A n=name f=file l=line> (inlined code), <L l=line
// f=file> (loops), <S l=line v=ranges> and <C l=line v=ranges> (statements, calls), nested as the
// code is. Ranges are "{[0xBEGIN-0xEND) ...}" of the module's ELF virtual addresses.
#include "hpcstruct.hpp"

#include <libxml/parser.h>
#include <libxml/tree.h>

#include <algorithm>
#include <cstring>
#include <stdexcept>
#include <system_error>

#include <fmt/format.h>

#include "csp/reduce/attribution.hpp"

namespace csp::reduce {

namespace hpcstruct {

namespace {

std::string attribute(xmlNode* n, const char* name) {
  xmlChar* v = xmlGetProp(n, reinterpret_cast<const xmlChar*>(name));
  if (!v) return {};
  std::string s(reinterpret_cast<const char*>(v));
  xmlFree(v);
  return s;
}

std::uint32_t lineOf(xmlNode* n) {
  const std::string l = attribute(n, "l");
  return l.empty() ? 0 : static_cast<std::uint32_t>(std::strtoul(l.c_str(), nullptr, 10));
}

// "{[0x10-0x20) [0x30-0x38)}" -> (0x10, 0x20), (0x30, 0x38).
std::vector<std::pair<std::uint64_t, std::uint64_t>> ranges(const std::string& v) {
  std::vector<std::pair<std::uint64_t, std::uint64_t>> out;
  for (std::size_t at = v.find('['); at != std::string::npos; at = v.find('[', at + 1)) {
    char* end = nullptr;
    const std::uint64_t b = std::strtoull(v.c_str() + at + 1, &end, 16);
    if (!end || *end != '-') continue;
    const std::uint64_t e = std::strtoull(end + 1, &end, 16);
    if (e > b) out.push_back({b, e});
  }
  return out;
}

class Builder {
 public:
  explicit Builder(ModuleStructure& m) : m_(m) {}

  void walk(xmlNode* parent, std::uint32_t parentNode, const std::string& file) {
    for (xmlNode* n = parent->children; n; n = n->next) {
      if (n->type != XML_ELEMENT_NODE || !n->name || n->name[1] != '\0') continue;
      const char tag = static_cast<char>(n->name[0]);
      if (!std::strchr("FPALSC", tag)) continue;
      ModuleStructure::Node node{parentNode, tag == 'C' ? 'S' : tag, attribute(n, "n"), file, lineOf(n)};
      if (tag == 'F') node.file = node.name;
      if ((tag == 'A' || tag == 'L') && !attribute(n, "f").empty()) node.file = attribute(n, "f");
      if (tag == 'L') ++m_.loops;
      const auto index = static_cast<std::uint32_t>(m_.nodes.size());
      m_.nodes.push_back(node);
      for (const auto& [b, e] : ranges(attribute(n, "v")))
        (node.tag == 'S' ? m_.statements : m_.scopes).push_back({b, e, index});
      walk(n, index, node.file);
    }
  }

 private:
  ModuleStructure& m_;
};

const ModuleStructure::Range* innermost(const std::vector<ModuleStructure::Range>& rs, std::uint64_t address) {
  // The last range that begins at or before the address and contains it (nested ranges begin
  // later than the ranges around them).
  auto it = std::upper_bound(rs.begin(), rs.end(), address,
                             [](std::uint64_t a, const ModuleStructure::Range& r) { return a < r.begin; });
  const ModuleStructure::Range* found = nullptr;
  for (int steps = 0; it != rs.begin() && steps < 64; ++steps) {
    --it;
    if (address < it->end && (!found || it->end - it->begin < found->end - found->begin)) found = &*it;
  }
  return found;
}

}  // namespace

std::optional<Place> ModuleStructure::find(std::uint64_t address) const {
  const Range* r = innermost(statements, address);
  const bool statement = r != nullptr;
  if (!r) r = innermost(scopes, address);
  if (!r) return std::nullopt;
  Place place;
  std::uint32_t n = r->node;
  if (statement) {
    place.file = nodes[n].file;
    place.line = nodes[n].line;
    n = nodes[n].parent;
  }
  for (; n != kNoIndex && nodes[n].tag != 'F'; n = nodes[n].parent) {
    const Node& s = nodes[n];
    if (s.tag == 'S') continue;
    const ScopeKind kind = s.tag == 'P' ? ScopeKind::ProcFrame : s.tag == 'A' ? ScopeKind::Alien : ScopeKind::Loop;
    place.scopes.push_back({kind, s.name, s.file, s.line});
  }
  std::reverse(place.scopes.begin(), place.scopes.end());
  // Code outside every procedure has no procedure frame: attribution names it by offset.
  if (place.scopes.empty() || place.scopes.front().kind != ScopeKind::ProcFrame) return std::nullopt;
  return place;
}

std::vector<std::unique_ptr<ModuleStructure>> parse(const std::filesystem::path& file) {
  xmlDoc* doc = xmlReadFile(file.c_str(), nullptr, XML_PARSE_NONET | XML_PARSE_NOERROR | XML_PARSE_NOWARNING);
  if (!doc) {
    const xmlError* e = xmlGetLastError();
    throw std::runtime_error(fmt::format("{}: not a readable XML file{}", file.string(),
                                         e && e->message ? std::string(": ") + e->message : ""));
  }
  std::vector<std::unique_ptr<ModuleStructure>> out;
  xmlNode* root = xmlDocGetRootElement(doc);
  for (xmlNode* n = root ? root->children : nullptr; n; n = n->next) {
    if (n->type != XML_ELEMENT_NODE || std::strcmp(reinterpret_cast<const char*>(n->name), "LM") != 0) continue;
    auto m = std::make_unique<ModuleStructure>();
    m->path = attribute(n, "n");
    m->file = file;
    Builder(*m).walk(n, kNoIndex, "");
    auto byBegin = [](const ModuleStructure::Range& a, const ModuleStructure::Range& b) {
      return std::tie(a.begin, a.end, a.node) < std::tie(b.begin, b.end, b.node);
    };
    std::sort(m->statements.begin(), m->statements.end(), byBegin);
    std::sort(m->scopes.begin(), m->scopes.end(), byBegin);
    out.push_back(std::move(m));
  }
  xmlFreeDoc(doc);
  if (out.empty()) throw std::runtime_error(fmt::format("{}: no load module (<LM>) in it", file.string()));
  return out;
}

}  // namespace hpcstruct

std::vector<std::filesystem::path> hpcstructFiles(const std::filesystem::path& measurementDirectory) {
  std::vector<std::filesystem::path> out;
  std::error_code ec;
  for (std::filesystem::directory_iterator it(measurementDirectory / "structs", ec), end; !ec && it != end;
       it.increment(ec))
    if (it->path().extension() == ".hpcstruct") out.push_back(it->path());
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace csp::reduce
