#include "csp/analysis/frames.hpp"

#include <stdexcept>

namespace csp::analysis {

std::uint32_t RegionTree::add(std::uint32_t parentId, std::string n, std::uint64_t dyn) {
  if (parentId >= parent.size()) throw std::invalid_argument("RegionTree::add: unknown parent");
  parent.push_back(parentId);
  name.push_back(std::move(n));
  dynamicId.push_back(dyn);
  return static_cast<std::uint32_t>(parent.size() - 1);
}

FrameBuilder::FrameBuilder(const RegionTree& tree, std::vector<std::unique_ptr<EventStream>> threads)
    : tree_(tree),
      streams_(std::move(threads)),
      head_(streams_.size()),
      heap_(Later{&head_}),
      states_(streams_.size()),
      scratch_(streams_.size()),
      isTouched_(streams_.size(), 0) {
  depth_.assign(tree.size(), 0);
  for (std::size_t i = 1; i < tree.size(); ++i) depth_[i] = depth_[tree.parent[i]] + 1;
  bool any = false;
  for (std::size_t t = 0; t < streams_.size(); ++t) {
    if (streams_[t] && streams_[t]->next(head_[t])) {
      if (!any || head_[t].timeNs < origin_) origin_ = head_[t].timeNs;
      any = true;
      heap_.push(t);
    }
  }
  frameStart_ = origin_;
}

void FrameBuilder::advance(std::size_t thread) {
  if (streams_[thread]->next(head_[thread])) heap_.push(thread);
}

void FrameBuilder::apply(std::size_t thread, const Event& e, ThreadState& s) {
  ++stats_.events;
  if (e.region == 0 || e.region >= tree_.size()) {
    ++stats_.unexpectedEnters;
    return;
  }
  if (e.enter) {
    if (tree_.parent[e.region] != s.region) ++stats_.unexpectedEnters;
    s.region = e.region;
    s.attrs.resize(depth_[e.region]);
    s.attrs.back() = e.hasAttr ? std::optional<std::int64_t>(e.attr) : std::nullopt;
  } else {
    if (s.region != e.region) {
      ++stats_.mismatchedExits;
      return;
    }
    s.region = tree_.parent[e.region];
    s.attrs.resize(depth_[s.region]);
  }
  (void)thread;
}

bool FrameBuilder::next(Frame& out) {
  if (pending_) {  // the changes at frameStart_ take effect now
    for (auto t : touched_) {
      if (states_[t].region != 0) --active_;
      std::swap(states_[t], scratch_[t]);
      if (states_[t].region != 0) ++active_;
    }
    pending_ = false;
  }
  while (!heap_.empty()) {
    const std::uint64_t t = head_[heap_.top()].timeNs;
    for (auto th : touched_) isTouched_[th] = 0;
    touched_.clear();
    // All events at time t, of all threads, applied to copies of the touched threads' states.
    while (!heap_.empty() && head_[heap_.top()].timeNs == t) {
      const std::size_t th = heap_.top();
      heap_.pop();
      if (!isTouched_[th]) {
        isTouched_[th] = 1;
        touched_.push_back(th);
        scratch_[th] = states_[th];
      }
      apply(th, head_[th], scratch_[th]);
      advance(th);
    }
    bool changed = false;
    for (auto th : touched_) changed = changed || !(scratch_[th] == states_[th]);
    if (!changed) continue;  // the frame goes on
    if (active_ > 0 && t > frameStart_) {
      out.beginNs = frameStart_;
      out.endNs = t;
      out.states = &states_;
      out.active = active_;
      frameStart_ = t;
      pending_ = true;
      ++stats_.frames;
      return true;
    }
    for (auto th : touched_) {
      if (states_[th].region != 0) --active_;
      std::swap(states_[th], scratch_[th]);
      if (states_[th].region != 0) ++active_;
    }
    frameStart_ = t;
  }
  if (!finished_)
    for (const auto& s : states_) stats_.openAtEnd += s.region != 0;
  finished_ = true;
  return false;
}

}  // namespace csp::analysis
