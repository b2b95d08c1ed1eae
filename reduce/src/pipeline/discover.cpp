// The inputs: listed by rank 0 through the sources, each rank's contiguous share of them sent to
// that rank alone.
#include <fmt/format.h>

#include <algorithm>
#include <tuple>

#include "stages.hpp"

namespace csp::reduce::stages {

namespace fs = std::filesystem;

namespace {

__extension__ using Uint128 = unsigned __int128;

struct Listing {
  InputList inputs;
  std::vector<ProfileSource::EntryFacts> facts;  // of each input, for checkListedOnce
  std::vector<std::string> leftoverTemporaries;
  void add(std::string path, const ProfileSource* source) {
    facts.push_back(source->facts(path));
    inputs.add({std::move(path), facts.back().bytes, source});
  }
};

// The profiles of one measurement directory, from every source, and what they left unfinished.
void listDirectory(const fs::path& dir, const ProfileSources& sources, Listing& out, std::vector<std::string>& errors) {
  try {
    const std::size_t before = out.inputs.size();
    for (const auto& source : sources)
      for (auto& f : source->list(dir)) out.add(std::move(f), source.get());
    if (out.inputs.size() == before)
      errors.push_back(fmt::format("{}: no profiles ({}) in this directory", dir.string(), profilePatterns(sources)));
    for (const auto& source : sources)
      for (auto& t : source->unfinished(dir)) out.leftoverTemporaries.push_back(std::move(t));
  } catch (const std::exception& e) {
    errors.push_back(e.what());
  }
}

// A file listed twice (a directory given twice, a profile given beside its directory, links)
// would count every value twice.
void checkListedOnce(const Listing& listing, std::vector<std::string>& errors) {
  const InputList& inputs = listing.inputs;
  std::vector<std::tuple<std::uint64_t, std::uint64_t, std::uint64_t, std::size_t>> places;  // the last: the input
  places.reserve(inputs.size());
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    const auto& f = listing.facts[i];  // a bundle holds several profiles: its records' offsets differ
    if (!f.found) continue;            // reported when it is read
    places.emplace_back(f.device, f.inode, f.offset, i);
  }
  std::sort(places.begin(), places.end());
  std::vector<std::pair<std::size_t, std::size_t>> twice;  // (input, the first input at its place)
  for (std::size_t k = 1, first = 0; k < places.size(); ++k) {
    const auto& [dev, ino, offset, input] = places[k];
    const auto& [firstDev, firstIno, firstOffset, firstInput] = places[first];
    if (dev == firstDev && ino == firstIno && offset == firstOffset)
      twice.emplace_back(input, firstInput);
    else
      first = k;
  }
  std::sort(twice.begin(), twice.end());  // in input order
  for (const auto& [input, first] : twice)
    errors.push_back(
        fmt::format("{} and {} are the same profile: an input is given twice", inputs[first].path, inputs[input].path));
}

// Rank 0: the measurement directories' profiles and the profile files given, in order.
Listing listInputs(const PipelineOptions& options) {
  std::vector<std::string> errors;
  Listing out;
  const auto& sources = options.sources;
  if (sources.empty()) throw PipelineError("no input formats (profile sources) given");
  for (const auto& input : options.inputs) {
    std::error_code ec;
    if (fs::is_directory(input, ec)) {
      listDirectory(input, sources, out, errors);
    } else if (const auto* source = sourceFor(sources, input);
               source && fs::exists(fs::symlink_status(input, ec)) && !fs::is_directory(input, ec)) {
      out.add(input.string(), source);
    } else if (!fs::exists(input, ec)) {
      errors.push_back(fmt::format("{}: no such file or directory", input.string()));
    } else {
      errors.push_back(fmt::format("{}: neither a measurement directory nor a profile ({})", input.string(),
                                   profilePatterns(sources)));
    }
  }
  if (options.inputs.empty()) errors.push_back("no measurement directory given");
  throwIfAny(errors);
  checkListedOnce(out, errors);
  std::vector<ProfileSource::EntryFacts>().swap(out.facts);
  throwIfAny(errors);
  return out;
}

}  // namespace

std::size_t batchProfilesFor(const InputList& inputs, std::size_t requested, std::uint64_t budget) {
  if (requested != 0) return requested;
  Uint128 total = 0;
  for (std::size_t i = 0; i < inputs.size(); ++i) total += inputs.bytes(i);
  const auto mean = static_cast<std::uint64_t>(inputs.size() == 0 ? 0 : total / inputs.size());
  if (mean == 0) return kMaxBatchProfiles;
  return static_cast<std::size_t>(std::clamp<std::uint64_t>(budget / mean, 1, kMaxBatchProfiles));
}

namespace {

// Contiguous ranges of whole batches, balanced by bytes: rank r starts at the first batch whose
// preceding bytes reach r/P of the total. Batches are fixed in input order whatever P is, and the
// database's per-node blocks follow them, so the same inputs give the same keys for any process
// count. Contiguity keeps ids and key ranges per rank sorted.
// starts[r] for r in [0, ranks]: rank r's inputs are [starts[r], starts[r + 1]). One pass: the
// targets grow with r, so each rank's search goes on from the previous rank's start.
std::vector<std::size_t> shareStarts(const InputList& inputs, std::size_t batch, int ranks) {
  std::uint64_t total = 0;
  for (std::size_t i = 0; i < inputs.size(); ++i) total += inputs.bytes(i);
  std::vector<std::size_t> starts(static_cast<std::size_t>(ranks) + 1, inputs.size());
  std::size_t i = 0;
  std::uint64_t before = 0;
  for (int r = 0; r < ranks; ++r) {
    const Uint128 target = static_cast<Uint128>(total) * static_cast<unsigned>(r) / static_cast<unsigned>(ranks);
    for (; i < inputs.size() && !(i % batch == 0 && before >= target); ++i) before += inputs.bytes(i);
    starts[static_cast<std::size_t>(r)] = i;
  }
  return starts;
}

}  // namespace

}  // namespace csp::reduce::stages

namespace csp::reduce {

void InputList::add(const InputProfile& input) {
  const std::string_view path = input.path;
  const auto slash = path.rfind('/');
  const std::string_view directory = slash == std::string_view::npos ? std::string_view() : path.substr(0, slash + 1);
  Entry e;
  if (!entries_.empty() && directories_[entries_.back().directory] == directory) {
    e.directory = entries_.back().directory;  // the common case: the next file of the same directory
  } else {
    auto [it, fresh] = directoryIndex_.try_emplace(std::string(directory), directories_.size());
    if (fresh) directories_.emplace_back(directory);
    e.directory = it->second;
  }
  names_.append(path.substr(directory.size()));
  e.bytes = input.bytes;
  e.nameEnd = names_.size();
  e.source = input.source;
  entries_.push_back(e);
}

InputProfile InputList::operator[](std::size_t i) const {
  const Entry& e = entries_.at(i);
  const std::size_t begin = i == 0 ? 0 : entries_[i - 1].nameEnd;
  InputProfile out;
  out.path.reserve(directories_[e.directory].size() + (e.nameEnd - begin));
  out.path.append(directories_[e.directory]).append(names_, begin, e.nameEnd - begin);
  out.bytes = e.bytes;
  out.source = e.source;
  return out;
}

void InputList::shrinkToFit() {
  directoryIndex_.clear();
  names_.shrink_to_fit();
  entries_.shrink_to_fit();
}

}  // namespace csp::reduce

namespace csp::reduce::stages {

std::size_t sourceIndex(const ProfileSources& sources, const ProfileSource* source) {
  const auto at = std::find_if(sources.begin(), sources.end(), [&](const auto& s) { return s.get() == source; });
  if (at == sources.end()) throw std::logic_error("an input of no source");
  return static_cast<std::size_t>(at - sources.begin());
}

Discovery discover(const Comm& comm, const PipelineOptions& options) {
  Listing listing;
  if (comm.rank() == 0) listing = listInputs(options);
  // Rank 0 to each rank: the count of all inputs, the batch size, its static share and the
  // intervals it may share with its neighbours (in batches: BatchClaims), and the paths, sizes
  // and sources (each source as its index in the options) of every input it may read.
  std::vector<std::vector<std::byte>> outgoing(static_cast<std::size_t>(comm.size()));
  if (comm.rank() == 0) {
    const auto& sources = options.sources;
    const std::size_t batch = batchProfilesFor(listing.inputs, options.batchProfiles, options.batchBudget);
    const auto starts = shareStarts(listing.inputs, batch, comm.size());
    const auto ranks = static_cast<std::size_t>(comm.size());
    std::vector<std::size_t> low(ranks + 1), middle(ranks);  // in batches
    for (std::size_t r = 0; r <= ranks; ++r) low[r] = (starts[r] + batch - 1) / batch;
    for (std::size_t r = 0; r < ranks; ++r) middle[r] = low[r] + (low[r + 1] - low[r]) / 2;
    for (std::size_t r = 0; r < ranks; ++r) {
      const std::size_t lowerMiddle = options.balanceRead && r > 0 ? middle[r - 1] : low[r];
      const std::size_t upperMiddle = options.balanceRead && r + 1 < ranks ? middle[r + 1] : low[r + 1];
      const std::size_t begin = std::min(lowerMiddle * batch, listing.inputs.size());
      const std::size_t end = std::min(upperMiddle * batch, listing.inputs.size());
      Packer p;
      p.u64(listing.inputs.size());
      p.u64(batch);
      for (const std::size_t b : {low[r], low[r + 1], lowerMiddle, middle[r], upperMiddle}) p.u64(b);
      for (std::size_t i = begin; i < end; ++i) putInput(p, listing.inputs[i], sources);
      outgoing[r] = p.take();
    }
    listing.inputs = {};
  }
  const auto incoming = comm.alltoall(outgoing);
  std::vector<std::vector<std::byte>>().swap(outgoing);
  Discovery d;
  Unpacker u(incoming.at(0));
  d.total = u.u64();
  d.batchProfiles = u.u64();
  if (d.batchProfiles == 0) throw std::logic_error("a batch of no profiles");
  d.shareLow = u.u64();
  d.shareHigh = u.u64();
  d.lowerMiddle = u.u64();
  d.middle = u.u64();
  d.upperMiddle = u.u64();
  if (!(d.lowerMiddle <= d.shareLow && d.shareLow <= d.middle && d.middle <= d.shareHigh &&
        d.shareHigh <= d.upperMiddle))
    throw std::logic_error("discovery: a share outside the intervals around it");
  d.begin = d.firstInputOf(d.lowerMiddle);
  d.end = d.firstInputOf(d.upperMiddle);
  for (std::size_t i = d.begin; i < d.end; ++i) d.inputs.add(getInput(u, options.sources));
  u.expectDone();
  d.inputs.shrinkToFit();
  d.leftoverTemporaries = std::move(listing.leftoverTemporaries);
  return d;
}

}  // namespace csp::reduce::stages
