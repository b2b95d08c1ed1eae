// Hand-made region logs for the analysis tests: threads as lists of events, in memory.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "csp/analysis/evaluate.hpp"
#include "csp/analysis/frames.hpp"

namespace csp::analysis::test {

class VectorStream final : public EventStream {
 public:
  explicit VectorStream(std::vector<Event> events, std::size_t* consumed = nullptr)
      : events_(std::move(events)), consumed_(consumed) {}
  bool next(Event& out) override {
    if (pos_ == events_.size()) return false;
    out = events_[pos_++];
    if (consumed_) ++*consumed_;
    return true;
  }

 private:
  std::vector<Event> events_;
  std::size_t pos_ = 0;
  std::size_t* consumed_;
};

// Builds a process log: regions by path ("R1/R2"), events per thread.
struct LogBuilder {
  RegionTree tree;
  std::map<std::string, std::uint32_t> ids;
  std::vector<std::vector<Event>> threads;
  std::vector<std::uint64_t> numbers;

  std::uint32_t region(const std::string& path) {
    auto it = ids.find(path);
    if (it != ids.end()) return it->second;
    const auto slash = path.rfind('/');
    const std::uint32_t parent = slash == std::string::npos ? 0 : region(path.substr(0, slash));
    std::string name = slash == std::string::npos ? path : path.substr(slash + 1);
    std::uint64_t dyn = 0;
    if (const auto hash = name.find('#'); hash != std::string::npos) {
      dyn = std::stoull(name.substr(hash + 1));
      name = name.substr(0, hash);
    }
    const auto id = tree.add(parent, name, dyn);
    ids[path] = id;
    return id;
  }
  std::size_t thread(std::uint64_t number) {
    threads.emplace_back();
    numbers.push_back(number);
    return threads.size() - 1;
  }
  void enter(std::size_t th, std::uint64_t t, const std::string& path) {
    threads[th].push_back({t, region(path), true, false, 0});
  }
  void enterAttr(std::size_t th, std::uint64_t t, const std::string& path, std::int64_t attr) {
    threads[th].push_back({t, region(path), true, true, attr});
  }
  void exit(std::size_t th, std::uint64_t t, const std::string& path) {
    threads[th].push_back({t, region(path), false, false, 0});
  }
  // enter at a, exit at b
  void span(std::size_t th, std::uint64_t a, std::uint64_t b, const std::string& path) {
    enter(th, a, path);
    exit(th, b, path);
  }

  std::vector<std::unique_ptr<EventStream>> streams(std::size_t* consumed = nullptr) const {
    std::vector<std::unique_ptr<EventStream>> s;
    for (const auto& t : threads) s.push_back(std::make_unique<VectorStream>(t, consumed));
    return s;
  }
  ProcessInput process() const {
    ProcessInput p;
    p.label = "test";
    p.threadNumbers = numbers;
    for (const auto& t : threads) p.events += t.size();
    auto copy = threads;
    p.open = [copy] {
      std::vector<std::unique_ptr<EventStream>> s;
      for (const auto& t : copy) s.push_back(std::make_unique<VectorStream>(t));
      return s;
    };
    return p;
  }
};

// The single value of a query without free variables.
inline double value(const LogBuilder& b, const std::string& q) {
  const auto r = evaluate(parseQuery(q), b.tree, b.process());
  return r.bindings.at(0).value;
}

}  // namespace csp::analysis::test
