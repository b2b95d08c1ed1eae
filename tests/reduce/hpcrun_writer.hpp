// A small writer of hpcrun measurement files (format 4.0), written for the tests from the
// format's description (big-endian sections: header, load map, CCT, metric table, id-tuple
// dictionary, sparse metric values; a footer of section offsets at the end), so that the tests
// need no HPCToolkit. It writes what hpcrun writes, and whatever damage a test asks for.
#pragma once

#include <bit>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <utility>
#include <vector>

namespace csp::test::hpcrun {

// hpcrun's eight-character codes of load module 0 (placeholders).
constexpr std::uint64_t code(const char (&s)[9]) {
  std::uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v = v << 8 | static_cast<unsigned char>(s[i]);
  return v;
}
inline constexpr std::uint64_t kPrimary = code("^Primary");
inline constexpr std::uint64_t kPartial = code("^Partial");
inline constexpr std::uint64_t kMainFence = code("| Main  ");
inline constexpr std::uint64_t kThreadFence = code("| Thread");
inline constexpr std::uint64_t kNoActivity = code("NoActvty");

// hpcrun's id-tuple kinds.
enum Kind : std::uint16_t { Node = 1, Rank = 2, Thread = 3, GpuDevice = 4, GpuContext = 5, GpuStream = 6, Core = 7 };

struct Metric {
  std::string name;
  bool real = false;  // value format: real (double) or integer
  std::uint64_t period = 1;
  std::string description;
};
struct CctNode {
  std::uint32_t id, parent;
  std::uint16_t module;
  std::uint64_t ip;
  bool operator==(const CctNode&) const = default;
};
struct Id {
  std::uint16_t kind;
  std::uint64_t physical, logical;
};
struct Value {
  std::uint32_t node;  // hpcrun's node id
  std::uint16_t metric;
  std::uint64_t bits;  // an integer, or a double's bits
};
inline std::uint64_t real(double v) { return std::bit_cast<std::uint64_t>(v); }

struct Profile {
  std::string version = "04.00";
  std::vector<std::pair<std::string, std::string>> header;
  std::vector<std::pair<std::uint16_t, std::string>> loadmap;
  std::vector<CctNode> nodes;
  std::vector<Metric> metrics;
  std::vector<Id> idTuple;
  std::vector<Value> values;
  // The order of the node index (each node once, but with AsListed): the CCT's order, as hpcrun
  // writes it (one walk writes both; nodes not in the CCT last, by id), by node id, or one entry
  // per run of one node's values as `values` lists them (a node may then be listed twice).
  enum class Index { CctOrder, ById, AsListed } index = Index::CctOrder;
};

class Bytes {
 public:
  void put(std::uint64_t v, unsigned n) {
    for (int shift = 8 * (static_cast<int>(n) - 1); shift >= 0; shift -= 8)
      data += static_cast<char>((v >> shift) & 0xff);
  }
  void str(const std::string& s) {
    put(s.size(), 4);
    data += s;
  }
  std::uint64_t at() const { return data.size(); }
  std::string data;
};

inline std::string encode(const Profile& p) {
  Bytes b;
  std::uint64_t sections[12];
  // header
  sections[0] = b.at();
  b.data += "HPCRUN-profile____" + p.version + "b";
  b.put(p.header.size(), 4);
  for (const auto& [k, v] : p.header) {
    b.str(k);
    b.str(v);
  }
  sections[1] = b.at();
  // load map
  sections[2] = b.at();
  b.put(p.loadmap.size(), 4);
  for (const auto& [id, name] : p.loadmap) {
    b.put(id, 2);
    b.str(name);
    b.put(1, 8);
  }
  sections[3] = b.at();
  // CCT
  sections[4] = b.at();
  b.put(p.nodes.size(), 8);
  for (const auto& n : p.nodes) {
    b.put(n.id, 4);
    b.put(n.parent, 4);
    b.put(n.module, 2);
    b.put(n.ip, 8);
    b.put(1, 1);  // unwound
  }
  sections[5] = b.at();
  // metric table: flags are raw bytes (type raw, exclusive, value format, ..., show)
  sections[6] = b.at();
  b.put(p.metrics.size(), 4);
  for (const auto& m : p.metrics) {
    b.str(m.name);
    b.str(m.description);
    const char flags[16] = {1, 2, static_cast<char>(m.real ? 2 : 1), 0, 0, 0, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0};
    b.data.append(flags, 16);
    b.put(m.period, 8);
    b.str("");
    b.str("");
    b.put(0, 2);
    b.put(0, 2);
    b.put(0, 8);
    b.put(0, 8);
  }
  sections[7] = b.at();
  // id-tuple dictionary
  sections[8] = b.at();
  const char* kinds[] = {"SUMMARY", "NODE", "RANK", "THREAD", "GPUDEVICE", "GPUCONTEXT", "GPUSTREAM", "CORE"};
  b.put(8, 2);
  for (std::uint16_t k = 0; k < 8; ++k) {
    b.put(k, 2);
    b.str(kinds[k]);
  }
  sections[9] = b.at();
  // sparse values, grouped by node (in the order p.index says)
  sections[10] = b.at();
  b.put(p.idTuple.size(), 2);
  for (const auto& id : p.idTuple) {
    b.put(id.kind, 2);
    b.put(id.physical, 8);
    b.put(id.logical, 8);
  }
  std::vector<std::pair<std::uint32_t, std::vector<std::pair<std::uint64_t, std::uint16_t>>>> byNode;
  if (p.index == Profile::Index::AsListed) {
    for (const auto& v : p.values) {
      if (byNode.empty() || byNode.back().first != v.node) byNode.push_back({v.node, {}});
      byNode.back().second.push_back({v.bits, v.metric});
    }
  } else {
    std::map<std::uint32_t, std::vector<std::pair<std::uint64_t, std::uint16_t>>> sorted;
    for (const auto& v : p.values) sorted[v.node].push_back({v.bits, v.metric});
    if (p.index == Profile::Index::CctOrder)
      for (const auto& n : p.nodes)
        if (const auto it = sorted.find(n.id); it != sorted.end()) {
          byNode.emplace_back(*it);
          sorted.erase(it);
        }
    byNode.insert(byNode.end(), sorted.begin(), sorted.end());
  }
  b.put(p.values.size(), 8);
  b.put(byNode.size(), 4);
  for (const auto& [node, vals] : byNode)
    for (const auto& [bits, metric] : vals) {
      b.put(bits, 8);
      b.put(metric, 2);
    }
  std::uint64_t index = 0;
  for (const auto& [node, vals] : byNode) {
    b.put(node, 4);
    b.put(index, 8);
    index += vals.size();
  }
  b.put(0x656E6421, 4);
  b.put(index, 8);
  sections[11] = b.at();
  // footer
  const std::uint64_t footer = b.at();
  for (auto s : sections) b.put(s, 8);
  b.put(footer, 8);
  b.put(0x48504352554E736DULL, 8);
  return b.data;
}

inline void write(const Profile& p, const std::filesystem::path& file) {
  std::ofstream(file, std::ios::binary) << encode(p);
}
inline void writeBytes(const std::string& bytes, const std::filesystem::path& file) {
  std::ofstream(file, std::ios::binary) << bytes;
}

// The nodes as hpcrun writes them: a preorder walk from the roots (each node before its
// children), siblings in the order given.
inline std::vector<CctNode> inPreorder(const std::vector<CctNode>& nodes) {
  std::map<std::uint32_t, std::vector<std::size_t>> children;
  for (std::size_t i = 0; i < nodes.size(); ++i) children[nodes[i].parent].push_back(i);
  std::vector<CctNode> out;
  std::vector<std::size_t> stack;
  const auto below = [&](std::uint32_t id) {
    if (const auto it = children.find(id); it != children.end())
      stack.insert(stack.end(), it->second.rbegin(), it->second.rend());
  };
  below(0);
  while (!stack.empty()) {
    const std::size_t i = stack.back();
    stack.pop_back();
    out.push_back(nodes[i]);
    below(nodes[i].id);
  }
  return out;
}

}  // namespace csp::test::hpcrun
