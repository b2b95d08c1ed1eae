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

// Dense profile ids among valid profiles, in input order.
void numberProfiles(const Comm& comm, ReadResult& read, ProfileTable& table) {
  std::uint32_t valid = 0;
  for (const auto& r : read.profiles) valid += r.has_value();
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
  table.spillOf.reserve(valid);  // kept for every profile: no spare capacity
  table.local.reserve(valid);
  table.features.reserve(valid);
  for (auto& r : read.profiles) {
    if (!r) continue;
    r->info.id = next++;
    table.spillOf.push_back(r->spill);
    table.local.push_back(r->info);
    table.records.add(r->record);
    table.features.push_back(std::move(r->features));
    r->record = {};  // packed (the rest of the ReadProfile goes on to the metric plan)
  }
  table.records.shrinkToFit();
  table.common = std::move(read.common);
}

// Every profile is one thread of one run: two with the same id tuple mean mixed runs or copies,
// whose values would be added up as if they were different threads.
void checkDistinctIdentities(const Comm& comm, const Discovery& discovery, const ProfileTable& table) {
  Packer p;
  p.u64(table.local.size());
  auto records = table.records.read();
  for (std::size_t k = 0; k < table.local.size(); ++k) {
    const ProfileRecord record = records.next();
    p.u64(table.local[k].input);
    p.u64(record.identity.idTuple.size());
    for (const auto& e : record.identity.idTuple) {
      p.u64(static_cast<std::uint64_t>(e.kind));
      p.u64(e.value);
    }
  }
  const auto parts = comm.gather(p.take());
  // Rank 0: the pairs of inputs that are the same thread (usually none).
  std::vector<std::tuple<std::size_t, std::size_t, IdTuple>> twice;
  if (comm.rank() == 0) {
    std::vector<std::pair<IdTuple, std::size_t>> all;
    for (const auto& part : parts) {
      Unpacker u(part);
      for (auto n = u.u64(); n > 0; --n) {
        const auto input = static_cast<std::size_t>(u.u64());
        IdTuple tuple(u.u64());
        for (auto& e : tuple) {
          e.kind = static_cast<IdKind>(u.u64());
          e.value = u.u64();
        }
        all.emplace_back(std::move(tuple), input);
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

}  // namespace csp::reduce::stages

namespace csp::reduce {

void ProfileRecords::add(const ProfileRecord& r) {
  // The host: most often the previous profile's (profiles come in input order, often by host).
  std::size_t host = lastHost_;
  if (host >= hosts_.size() || hosts_[host] != r.identity.hostname) {
    const auto [it, fresh] = hostIndex_.try_emplace(r.identity.hostname, hosts_.size());
    if (fresh) hosts_.push_back(r.identity.hostname);
    host = lastHost_ = it->second;
  }
  storage::ByteWriter<std::string> out(std::move(bytes_));
  out.u64(r.identity.idTuple.size());
  for (const auto& e : r.identity.idTuple) {
    out.u64(static_cast<std::uint64_t>(e.kind));
    out.u64(e.value);
  }
  out.u64(host);
  out.u64(r.identity.pid);
  out.u64(r.identity.common);
  out.u64(r.stats.samples);
  out.u64(r.stats.unwindFailures);
  out.u64(r.stats.droppedSamples);
  out.u64(r.stats.truncatedPaths);
  out.u64(r.truncatedSamples);
  out.u64(r.scannedSamples);
  out.u64(r.recoveredSamples);
  bytes_ = out.take();
  ++count_;
}

ProfileRecord ProfileRecords::Reader::next() {
  ProfileRecord r;
  r.identity.idTuple.resize(in_.u64());
  for (auto& e : r.identity.idTuple) {
    e.kind = static_cast<IdKind>(in_.u64());
    e.value = in_.u64();
  }
  r.identity.hostname = records_.hosts_.at(in_.u64());
  r.identity.pid = static_cast<std::uint32_t>(in_.u64());
  r.identity.common = static_cast<std::uint32_t>(in_.u64());
  r.stats.samples = in_.u64();
  r.stats.unwindFailures = in_.u64();
  r.stats.droppedSamples = in_.u64();
  r.stats.truncatedPaths = in_.u64();
  r.truncatedSamples = in_.u64();
  r.scannedSamples = in_.u64();
  r.recoveredSamples = in_.u64();
  return r;
}

}  // namespace csp::reduce

namespace csp::reduce::stages {

ProfileTable tabulateProfiles(const Comm& comm, const Discovery& discovery, ReadResult& read) {
  ProfileTable table;
  table.skipped = shareSkipped(comm, read.skipped);
  numberProfiles(comm, read, table);
  checkDistinctIdentities(comm, discovery, table);
  return table;
}

}  // namespace csp::reduce::stages
