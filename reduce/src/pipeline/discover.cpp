// The inputs: listed by rank 0 through the sources, the same list on every rank, and each rank's
// contiguous share of it.
#include <fmt/format.h>
#include <sys/stat.h>

#include <algorithm>
#include <map>
#include <tuple>

#include "stages.hpp"

namespace csp::reduce::stages {

namespace fs = std::filesystem;

namespace {

__extension__ using Uint128 = unsigned __int128;

struct Listing {
  std::vector<InputProfile> inputs;
  std::vector<std::string> leftoverTemporaries;
};

// The profiles of one measurement directory, from every source, and what they left unfinished.
void listDirectory(const fs::path& dir, const ProfileSources& sources, Listing& out, std::vector<std::string>& errors) {
  try {
    const std::size_t before = out.inputs.size();
    for (const auto& source : sources)
      for (const auto& f : source->list(dir)) out.inputs.push_back({f, source->bytes(f), source.get()});
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
void checkListedOnce(const std::vector<InputProfile>& inputs, std::vector<std::string>& errors) {
  std::map<std::tuple<dev_t, ino_t, std::uint64_t>, std::string> seen;
  for (const auto& f : inputs) {
    const auto [file, offset] = f.source->place(f.path);  // a bundle holds several profiles
    struct stat st {};
    if (::stat(file.c_str(), &st) != 0) continue;  // reported when it is read
    auto [it, fresh] = seen.try_emplace({st.st_dev, st.st_ino, offset}, f.path);
    if (!fresh)
      errors.push_back(fmt::format("{} and {} are the same profile: an input is given twice", it->second, f.path));
  }
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
      out.inputs.push_back({input, source->bytes(input), source});
    } else if (!fs::exists(input, ec)) {
      errors.push_back(fmt::format("{}: no such file or directory", input.string()));
    } else {
      errors.push_back(fmt::format("{}: neither a measurement directory nor a profile ({})", input.string(),
                                   profilePatterns(sources)));
    }
  }
  if (options.inputs.empty()) errors.push_back("no measurement directory given");
  throwIfAny(errors);
  checkListedOnce(out.inputs, errors);
  throwIfAny(errors);
  return out;
}

// Rank 0's list to everyone: paths, sizes and each file's source (its index in the options).
std::vector<InputProfile> shareInputs(const Comm& comm, const ProfileSources& sources, const Listing& listing) {
  Packer packed;
  if (comm.rank() == 0) {
    packed.u64(listing.inputs.size());
    for (const auto& f : listing.inputs) {
      packed.text(f.path);
      packed.u64(f.bytes);
      const auto at = std::find_if(sources.begin(), sources.end(), [&](const auto& s) { return s.get() == f.source; });
      packed.u64(static_cast<std::uint64_t>(at - sources.begin()));
    }
  }
  auto bytes = packed.take();
  comm.broadcast(bytes);
  Unpacker u(bytes);
  std::vector<InputProfile> inputs(u.u64());
  for (auto& f : inputs) {
    f.path = u.text();
    f.bytes = u.u64();
    f.source = sources.at(u.u64()).get();
  }
  return inputs;
}

// Contiguous ranges of whole batches, balanced by bytes: rank r starts at the first batch whose
// preceding bytes reach r/P of the total. Batches are fixed in input order whatever P is, and the
// database's per-node blocks follow them, so the same inputs give the same keys for any process
// count. Contiguity keeps ids and key ranges per rank sorted.
std::size_t shareStart(const std::vector<InputProfile>& inputs, std::size_t batch, int rank, int ranks) {
  if (rank >= ranks) return inputs.size();
  std::uint64_t total = 0;
  for (const auto& f : inputs) total += f.bytes;
  const Uint128 target = static_cast<Uint128>(total) * static_cast<unsigned>(rank) / static_cast<unsigned>(ranks);
  std::uint64_t before = 0;
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    if (i % batch == 0 && before >= target) return i;
    before += inputs[i].bytes;
  }
  return inputs.size();
}

}  // namespace

Discovery discover(const Comm& comm, const PipelineOptions& options) {
  Listing listing;
  if (comm.rank() == 0) listing = listInputs(options);
  Discovery d;
  d.inputs = shareInputs(comm, options.sources, listing);
  d.leftoverTemporaries = std::move(listing.leftoverTemporaries);
  const std::size_t batch = std::max<std::size_t>(options.batchProfiles, 1);
  d.begin = shareStart(d.inputs, batch, comm.rank(), comm.size());
  d.end = shareStart(d.inputs, batch, comm.rank() + 1, comm.size());
  return d;
}

}  // namespace csp::reduce::stages
