#include "csp/reduce/mpi_comm.hpp"

#include <fmt/format.h>

#include <cstring>
#include <limits>
#include <stdexcept>

namespace csp::reduce {

namespace {

void check(int rc, const char* what) {
  if (rc != MPI_SUCCESS) {
    char text[MPI_MAX_ERROR_STRING];
    int len = 0;
    MPI_Error_string(rc, text, &len);
    throw std::runtime_error(fmt::format("MPI {} failed: {}", what, std::string(text, static_cast<std::size_t>(len))));
  }
}

// MPI counts are ints; large buffers travel as MPI_BYTE-sized chunks of a contiguous type.
constexpr std::size_t kChunk = std::size_t{1} << 30;

}  // namespace

Comm::Comm(MPI_Comm comm) : comm_(comm) {
  check(MPI_Comm_rank(comm, &rank_), "Comm_rank");
  check(MPI_Comm_size(comm, &size_), "Comm_size");
}

void Comm::send(int to, const std::vector<std::byte>& bytes, int tag) const {
  std::uint64_t n = bytes.size();
  check(MPI_Send(&n, 1, MPI_UINT64_T, to, tag, comm_), "Send");
  for (std::size_t at = 0; at < bytes.size(); at += kChunk) {
    const int len = static_cast<int>(std::min(kChunk, bytes.size() - at));
    check(MPI_Send(bytes.data() + at, len, MPI_BYTE, to, tag, comm_), "Send");
  }
}

std::vector<std::byte> Comm::recv(int from, int tag) const {
  std::uint64_t n = 0;
  check(MPI_Recv(&n, 1, MPI_UINT64_T, from, tag, comm_, MPI_STATUS_IGNORE), "Recv");
  std::vector<std::byte> bytes(n);
  for (std::size_t at = 0; at < n; at += kChunk) {
    const int len = static_cast<int>(std::min<std::size_t>(kChunk, n - at));
    check(MPI_Recv(bytes.data() + at, len, MPI_BYTE, from, tag, comm_, MPI_STATUS_IGNORE), "Recv");
  }
  return bytes;
}

void Comm::broadcast(std::vector<std::byte>& bytes, int root) const {
  std::uint64_t n = bytes.size();
  check(MPI_Bcast(&n, 1, MPI_UINT64_T, root, comm_), "Bcast");
  bytes.resize(n);
  for (std::size_t at = 0; at < n; at += kChunk) {
    const int len = static_cast<int>(std::min<std::size_t>(kChunk, n - at));
    check(MPI_Bcast(bytes.data() + at, len, MPI_BYTE, root, comm_), "Bcast");
  }
}

std::vector<std::vector<std::byte>> Comm::gather(const std::vector<std::byte>& bytes, int root) const {
  // Point-to-point keeps per-message sizes unbounded by int displacements.
  std::vector<std::vector<std::byte>> out;
  constexpr int kTag = 7101;
  if (rank_ == root) {
    out.resize(static_cast<std::size_t>(size_));
    for (int r = 0; r < size_; ++r) out[static_cast<std::size_t>(r)] = r == root ? bytes : recv(r, kTag);
  } else {
    send(root, bytes, kTag);
  }
  return out;
}

std::vector<std::vector<std::byte>> Comm::allgather(const std::vector<std::byte>& bytes) const {
  auto parts = gather(bytes, 0);
  Packer p;
  if (rank_ == 0)
    for (const auto& part : parts) p.bytes(part);
  auto all = p.take();
  broadcast(all, 0);
  Unpacker u(all);
  std::vector<std::vector<std::byte>> out;
  for (int r = 0; r < size_; ++r) out.push_back(u.bytes());
  return out;
}

std::vector<std::vector<std::byte>> Comm::alltoall(const std::vector<std::vector<std::byte>>& outgoing) const {
  std::vector<std::vector<std::byte>> incoming(static_cast<std::size_t>(size_));
  // Pairwise exchange in P rounds: in round k, send to rank+k and receive from rank-k. Sizes go
  // first so that receivers can allocate; Sendrecv avoids deadlock.
  for (int k = 0; k < size_; ++k) {
    const int to = (rank_ + k) % size_;
    const int from = (rank_ - k + size_) % size_;
    const auto& out = outgoing[static_cast<std::size_t>(to)];
    if (k == 0) {
      incoming[static_cast<std::size_t>(rank_)] = out;
      continue;
    }
    std::uint64_t sendN = out.size(), recvN = 0;
    check(MPI_Sendrecv(&sendN, 1, MPI_UINT64_T, to, 7201, &recvN, 1, MPI_UINT64_T, from, 7201, comm_,
                       MPI_STATUS_IGNORE), "Sendrecv");
    auto& in = incoming[static_cast<std::size_t>(from)];
    in.resize(recvN);
    const std::size_t rounds = std::max((sendN + kChunk - 1) / kChunk, (recvN + kChunk - 1) / kChunk);
    for (std::size_t c = 0; c < rounds; ++c) {
      const std::size_t at = c * kChunk;
      const int sl = at < sendN ? static_cast<int>(std::min<std::size_t>(kChunk, sendN - at)) : 0;
      const int rl = at < recvN ? static_cast<int>(std::min<std::size_t>(kChunk, recvN - at)) : 0;
      check(MPI_Sendrecv(sl ? out.data() + at : nullptr, sl, MPI_BYTE, to, 7202, rl ? in.data() + at : nullptr, rl,
                         MPI_BYTE, from, 7202, comm_, MPI_STATUS_IGNORE), "Sendrecv");
    }
  }
  return incoming;
}

std::uint64_t Comm::sum(std::uint64_t value) const {
  std::uint64_t out = 0;
  check(MPI_Allreduce(&value, &out, 1, MPI_UINT64_T, MPI_SUM, comm_), "Allreduce");
  return out;
}


void Packer::u64(std::uint64_t v) {
  for (int i = 0; i < 8; ++i) out_.push_back(static_cast<std::byte>(v >> (8 * i)));
}

void Packer::text(const std::string& s) {
  u64(s.size());
  const auto* p = reinterpret_cast<const std::byte*>(s.data());
  out_.insert(out_.end(), p, p + s.size());
}

void Packer::bytes(const std::vector<std::byte>& b) {
  u64(b.size());
  out_.insert(out_.end(), b.begin(), b.end());
}

void Unpacker::need(std::size_t n) const {
  if (in_.size() - at_ < n) throw std::runtime_error("internal message truncated");
}

std::uint64_t Unpacker::u64() {
  need(8);
  std::uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v |= static_cast<std::uint64_t>(in_[at_++]) << (8 * i);
  return v;
}

std::string Unpacker::text() {
  const auto n = u64();
  need(n);
  std::string s(reinterpret_cast<const char*>(in_.data() + at_), n);
  at_ += n;
  return s;
}

std::vector<std::byte> Unpacker::bytes() {
  const auto n = u64();
  need(n);
  std::vector<std::byte> b(in_.begin() + static_cast<std::ptrdiff_t>(at_), in_.begin() + static_cast<std::ptrdiff_t>(at_ + n));
  at_ += n;
  return b;
}

}  // namespace csp::reduce
