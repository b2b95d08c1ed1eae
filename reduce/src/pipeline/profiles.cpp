// The profiles of all ranks: skipped inputs shared, dense ids among the valid ones in input
// order, and no thread given twice.
#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <tuple>

#include "stages.hpp"

namespace csp::reduce::stages {

namespace {

constexpr std::size_t kMaxErrorsPerRank = 5;

// Skipped inputs, everywhere, in input order.
std::vector<SkippedInput> shareSkipped(const Comm& comm, const std::vector<SkippedInput>& mine) {
  Packer p;
  p.u64(mine.size());
  for (const auto& k : mine) {
    p.text(k.path);
    p.text(k.reason);
  }
  std::vector<SkippedInput> all;
  for (const auto& part : comm.allgather(p.take())) {
    Unpacker u(part);
    for (auto n = u.u64(); n > 0; --n) {
      SkippedInput k;
      k.path = u.text();
      k.reason = u.text();
      all.push_back(std::move(k));
    }
  }
  return all;
}

// Dense profile ids among valid profiles, in input order, kept in table.local. Returns what the
// check for threads given twice needs of them: per profile its input and id tuple, packed.
std::vector<std::byte> numberProfiles(const Comm& comm, const Discovery& discovery, ReadResult& read,
                                      const SpillFile& spool, std::size_t batchProfiles, ProfileTable& table) {
  std::uint32_t valid = 0;
  for (const auto& r : read.profiles) valid += r.valid();
  Packer p;
  p.u64(valid);
  const auto counts = comm.allgather(p.take());
  std::uint64_t before = 0, all = 0;
  for (int r = 0; r < comm.size(); ++r) {
    Unpacker u(counts[static_cast<std::size_t>(r)]);
    const auto c = u.u64();
    if (r < comm.rank()) before += c;
    all += c;
  }
  if (all > 0xFFFFFFF0ULL) throw PipelineError(fmt::format("{} profiles: more than this format's 2^32 limit", all));
  table.firstId = static_cast<std::uint32_t>(before);
  table.count = static_cast<std::uint32_t>(all);
  if (table.count == 0) throw PipelineError("no readable profiles in the input");
  std::uint32_t next = table.firstId;
  Packer identities, features;
  identities.u64(valid);
  features.u64(valid);
  std::vector<char> bytes;
  for (const auto& kept : read.profiles) {
    if (!kept.valid()) continue;
    spool.read(kept.where(), bytes);
    ReadProfile r = decodeReadProfile(std::string_view(bytes.data(), kept.size));
    r.info.id = next++;
    table.local.add(r.info.input / batchProfiles, r.info, r.spill, discovery.input(r.info.input), r.record);
    putFeatures(features, r.features);
    identities.u64(r.info.input);
    putIdTuple(identities, r.record.identity.idTuple);
  }
  table.features = features.take();
  table.local.finish();
  table.common = std::move(read.common);
  return identities.take();
}

// Every profile is one thread of one run: two with the same id tuple mean mixed runs or copies,
// whose values would be added up as if they were different threads. `identities`: this rank's
// (numberProfiles).
void checkDistinctIdentities(const Comm& comm, const Discovery& discovery, const std::vector<std::byte>& identities) {
  const auto parts = comm.gather(identities);
  // Rank 0: the pairs of inputs that are the same thread (usually none).
  std::vector<std::tuple<std::size_t, std::size_t, IdTuple>> twice;
  if (comm.rank() == 0) {
    std::vector<std::pair<IdTuple, std::size_t>> all;
    for (const auto& part : parts) {
      Unpacker u(part);
      for (auto n = u.u64(); n > 0; --n) {
        const auto input = static_cast<std::size_t>(u.u64());
        all.emplace_back(getIdTuple(u), input);
      }
    }
    std::sort(all.begin(), all.end());
    for (std::size_t i = 1; i < all.size(); ++i)
      if (all[i].first == all[i - 1].first) twice.emplace_back(all[i - 1].second, all[i].second, all[i].first);
  }
  // Their paths, from the ranks whose shares hold them (no rank keeps the whole input list).
  Packer wanted;
  for (const auto& [a, b, tuple] : twice) {
    wanted.u64(a);
    wanted.u64(b);
  }
  auto indices = wanted.take();
  comm.broadcast(indices);
  Packer mine;
  for (Unpacker u(indices); !u.done();) {
    const auto input = static_cast<std::size_t>(u.u64());
    if (input < discovery.begin || input >= discovery.end) continue;
    mine.u64(input);
    mine.text(discovery.input(input).path);
  }
  const auto paths = comm.gather(mine.take());
  if (comm.rank() != 0) return;
  std::map<std::size_t, std::string> pathOf;
  for (const auto& part : paths)
    for (Unpacker u(part); !u.done();) {
      const auto input = static_cast<std::size_t>(u.u64());
      pathOf[input] = u.text();
    }
  std::vector<std::string> errors;
  errors.reserve(twice.size());
  for (const auto& [a, b, tuple] : twice)
    errors.push_back(
        fmt::format("{} and {} are the same thread ({}): profiles of different runs are mixed, or "
                    "copied; post-process one run at a time",
                    pathOf[a], pathOf[b], formatIdTuple(tuple)));
  throwIfAny(errors);
}

}  // namespace

void throwIfAny(const std::vector<std::string>& errors) {
  if (errors.empty()) return;
  std::string message;
  const std::size_t shown = std::min(errors.size(), kMaxErrorsPerRank);
  for (std::size_t i = 0; i < shown; ++i) {
    if (i) message.push_back('\n');
    message += errors[i];
  }
  if (errors.size() > shown) message += fmt::format("\n(and {} more errors on this process)", errors.size() - shown);
  throw PipelineError(message);
}

namespace {

// What the profile spool keeps, piece by piece.
void putRecord(storage::ByteWriter<std::string>& out, const ProfileRecord& r) {
  putIdTuple(out, r.identity.idTuple);
  out.text(r.identity.hostname);
  out.u64(r.identity.pid);
  out.u64(r.identity.common);
  out.u64(r.stats.samples);
  out.u64(r.stats.unwindFailures);
  out.u64(r.stats.droppedSamples);
  out.u64(r.stats.truncatedPaths);
  out.u64(r.truncatedSamples);
  out.u64(r.scannedSamples);
  out.u64(r.recoveredSamples);
}

ProfileRecord getRecord(storage::ByteReader<std::runtime_error>& in) {
  ProfileRecord r;
  r.identity.idTuple = getIdTuple(in);
  r.identity.hostname = in.text();
  r.identity.pid = static_cast<std::uint32_t>(in.u64());
  r.identity.common = static_cast<std::uint32_t>(in.u64());
  r.stats.samples = in.u64();
  r.stats.unwindFailures = in.u64();
  r.stats.droppedSamples = in.u64();
  r.stats.truncatedPaths = in.u64();
  r.truncatedSamples = in.u64();
  r.scannedSamples = in.u64();
  r.recoveredSamples = in.u64();
  return r;
}

void putSpillRef(storage::ByteWriter<std::string>& out, const SpillRef& ref) {
  out.u64(ref.offset);
  out.u64(ref.size);
  out.u64(ref.reread ? 1 : 0);
}

SpillRef getSpillRef(storage::ByteReader<std::runtime_error>& in) {
  SpillRef ref;
  ref.offset = in.u64();
  ref.size = in.u64();
  ref.reread = in.u64() != 0;
  return ref;
}

}  // namespace

std::string encodeReadProfile(const ReadProfile& r) {
  storage::ByteWriter<std::string> out;
  out.u64(r.info.hasRegionEvents ? 1 : 0);
  out.u64(r.info.input);
  out.u64(r.metrics);
  putSpillRef(out, r.spill);
  putRecord(out, r.record);
  putFeatures(out, r.features);
  return out.take();
}

ReadProfile decodeReadProfile(std::string_view bytes) {
  storage::ByteReader<std::runtime_error> in(bytes, "profile spool");
  ReadProfile r;
  r.info.hasRegionEvents = in.u64() != 0;
  r.info.input = in.u64();
  r.metrics = static_cast<std::uint32_t>(in.u64());
  r.spill = getSpillRef(in);
  r.record = getRecord(in);
  r.features = getFeatures(in);
  in.expectDone();
  return r;
}

void LocalProfiles::add(std::size_t batch, const ProfileInfo& info, const SpillRef& spill, const InputProfile& input,
                        const ProfileRecord& record) {
  if (file_ == nullptr) throw std::logic_error("LocalProfiles: no spill file");
  if (!batches_.empty() && batch < batches_.back().index) throw std::logic_error("LocalProfiles: batches out of order");
  if (batches_.empty() || batches_.back().index != batch) {
    flush();
    batches_.push_back({batch, 0, {}});
  }
  storage::ByteWriter<std::string> out(std::move(pending_));
  out.u64(info.id);
  out.u64(info.hasRegionEvents ? 1 : 0);
  out.u64(info.input);
  putSpillRef(out, spill);
  putInput(out, input, *sources_);
  putRecord(out, record);
  pending_ = out.take();
  ++batches_.back().count;
  ++count_;
}

void LocalProfiles::flush() {
  if (batches_.empty() || pending_.empty()) return;
  batches_.back().where = file_->write(pending_.data(), pending_.size());
  pending_.clear();
}

void LocalProfiles::finish() {
  flush();
  std::string().swap(pending_);
  batches_.shrink_to_fit();
}

LocalProfiles::Loaded LocalProfiles::load(const Batch& batch) const {
  std::vector<char> bytes;
  file_->read(batch.where, bytes);
  storage::ByteReader<std::runtime_error> in(std::string_view(bytes.data(), batch.where.size), "profile spool");
  Loaded out;
  out.infos.resize(batch.count);
  out.spill.resize(batch.count);
  out.inputs.resize(batch.count);
  out.records.reserve(batch.count);
  for (std::uint32_t i = 0; i < batch.count; ++i) {
    auto& info = out.infos[i];
    info.id = static_cast<std::uint32_t>(in.u64());
    info.hasRegionEvents = in.u64() != 0;
    info.input = in.u64();
    out.spill[i] = getSpillRef(in);
    out.inputs[i] = getInput(in, *sources_);
    out.records.push_back(getRecord(in));
  }
  in.expectDone();
  return out;
}

ProfileTable tabulateProfiles(const Comm& comm, const Discovery& discovery, ReadResult& read,
                              const PipelineOptions& options, SpillFile& kept) {
  ProfileTable table;
  table.local = LocalProfiles(kept, options.sources);
  table.skipped = shareSkipped(comm, read.skipped);
  auto identities = numberProfiles(comm, discovery, read, kept, discovery.batchProfiles, table);
  checkDistinctIdentities(comm, discovery, identities);
  return table;
}

}  // namespace csp::reduce::stages
