// The few MPI operations the pipeline needs, on byte buffers, with errors turned into
// exceptions. Works with a single process and no launcher (MPI singleton).
#pragma once

#ifndef OMPI_SKIP_MPICXX
#define OMPI_SKIP_MPICXX 1
#endif
#include <mpi.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace csp::reduce {

class Comm {
 public:
  explicit Comm(MPI_Comm comm);
  int rank() const { return rank_; }
  int size() const { return size_; }
  MPI_Comm raw() const { return comm_; }

  void send(int to, const std::vector<std::byte>& bytes, int tag) const;
  std::vector<std::byte> recv(int from, int tag) const;
  // Root's bytes to everyone.
  void broadcast(std::vector<std::byte>& bytes, int root = 0) const;
  // Every rank's bytes at the root, in rank order (empty elsewhere).
  std::vector<std::vector<std::byte>> gather(const std::vector<std::byte>& bytes, int root = 0) const;
  // Every rank's bytes everywhere, in rank order.
  std::vector<std::vector<std::byte>> allgather(const std::vector<std::byte>& bytes) const;
  // outgoing[r] goes to rank r; returns what each rank sent here, in rank order.
  std::vector<std::vector<std::byte>> alltoall(const std::vector<std::vector<std::byte>>& outgoing) const;
  std::uint64_t sum(std::uint64_t value) const;

 private:
  MPI_Comm comm_;
  int rank_ = 0;
  int size_ = 1;
};

// Little helpers to build and parse the byte messages.
class Packer {
 public:
  void u64(std::uint64_t v);
  void text(const std::string& s);
  void bytes(const std::vector<std::byte>& b);
  std::vector<std::byte> take() { return std::move(out_); }

 private:
  std::vector<std::byte> out_;
};

class Unpacker {
 public:
  explicit Unpacker(const std::vector<std::byte>& in) : in_(in) {}
  std::uint64_t u64();
  std::string text();
  std::vector<std::byte> bytes();
  bool done() const { return at_ == in_.size(); }

 private:
  void need(std::size_t n) const;
  const std::vector<std::byte>& in_;
  std::size_t at_ = 0;
};

}  // namespace csp::reduce
