// Frames of a context-sensitive parallel profile (Benavides, "Declarative Profiling for Parallel
// Systems", ch. 2.2; docs/query.md "Frames"): the maximal time intervals in which no thread of
// a process changes its region state, built by a k-way merge of the threads' enter/exit logs.
//
// Memory is one event and one region stack per thread: the logs are streamed, never held.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <queue>
#include <string>
#include <vector>

namespace csp::analysis {

// One region enter or exit of one thread. `region` is a node of the region tree (never 0).
struct Event {
  std::uint64_t timeNs = 0;
  std::uint32_t region = 0;
  bool enter = false;
  bool hasAttr = false;  // enters only: the numeric attribute of this visit (ch. 2.3)
  std::int64_t attr = 0;
};

// One thread's events in time order.
class EventStream {
 public:
  virtual ~EventStream() = default;
  virtual bool next(Event& out) = 0;  // false at the end
};

// The region tree shared by the threads: node 0 is the root (no region, the state phi);
// parent[i] < i. Names are the static region names; dynamicId tells instances apart.
struct RegionTree {
  std::vector<std::uint32_t> parent{0xFFFFFFFFu};
  std::vector<std::string> name{""};
  std::vector<std::uint64_t> dynamicId{0};
  std::size_t size() const { return parent.size(); }
  std::uint32_t add(std::uint32_t parentId, std::string n, std::uint64_t dyn = 0);
};

// A thread's region state: the stack of regions it is in, outermost first. Empty = phi.
struct ThreadState {
  std::uint32_t region = 0;                        // innermost region, 0 = phi
  std::vector<std::optional<std::int64_t>> attrs;  // per stack level, outermost first
  bool operator==(const ThreadState&) const = default;
};

// A frame [begin, end): the states of all threads of the process during it.
struct Frame {
  std::uint64_t beginNs = 0;
  std::uint64_t endNs = 0;
  const std::vector<ThreadState>* states = nullptr;  // indexed like the streams; valid until next()
  std::size_t active = 0;  // threads not in phi (at least 1: frames where all are in phi are skipped)
};

struct FrameStats {
  std::uint64_t events = 0;
  std::uint64_t frames = 0;
  std::uint64_t mismatchedExits = 0;   // an exit that is not of the innermost open region: ignored
  std::uint64_t unexpectedEnters = 0;  // an enter whose region is not a child of the open one: taken as is
  std::uint64_t openAtEnd = 0;         // threads still in a region after their last event
};

class FrameBuilder {
 public:
  FrameBuilder(const RegionTree& tree, std::vector<std::unique_ptr<EventStream>> threads);
  // The next frame with at least one active thread; false after the last one. The state after
  // the last event of all threads has no end and is not a frame.
  bool next(Frame& out);
  const FrameStats& stats() const { return stats_; }
  std::size_t threadCount() const { return states_.size(); }
  // Time of the first event of any thread (0 without events): the process's time origin.
  std::uint64_t originNs() const { return origin_; }

 private:
  void apply(std::size_t thread, const Event& e, ThreadState& s);
  void advance(std::size_t thread);

  const RegionTree& tree_;
  std::vector<std::uint32_t> depth_;
  std::vector<std::unique_ptr<EventStream>> streams_;
  std::vector<Event> head_;
  struct Later {
    const std::vector<Event>* head;
    bool operator()(std::size_t a, std::size_t b) const {
      const auto ta = (*head)[a].timeNs, tb = (*head)[b].timeNs;
      return ta != tb ? ta > tb : a > b;
    }
  };
  std::priority_queue<std::size_t, std::vector<std::size_t>, Later> heap_;
  std::vector<ThreadState> states_, scratch_;
  std::vector<std::size_t> touched_;
  std::vector<char> isTouched_;
  std::size_t active_ = 0;
  std::uint64_t frameStart_ = 0;
  std::uint64_t origin_ = 0;
  bool pending_ = false;
  bool finished_ = false;  // scratch_ of touched_ threads holds the states from frameStart_ on
  FrameStats stats_;
};

}  // namespace csp::analysis
