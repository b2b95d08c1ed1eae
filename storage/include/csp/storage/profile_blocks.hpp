// One profile's values by profile (database format 4.0, docs/database-format.md,
// "values_by_profile"), encoded node by node while they are made: csp-prof-mpi's values pass
// hands each node's values over as it collects them, instead of the by-profile writer reading
// them back from their columns (ShardWriter::putProfileColumns). The bytes are the same.
#pragma once

#include <algorithm>
#include <array>
#include <bit>
#include <cstdint>
#include <span>
#include <vector>

#include "csp/storage/bytes.hpp"
#include "csp/storage/database.hpp"

namespace csp::storage {

namespace format {
// A profile block's group starts with varint node delta << kPatternBits | pattern; pattern
// kNewPattern spells the group's columns out, and the others (also the number of patterns a
// block can name) refer to the block's earlier spelled-out ones.
inline constexpr unsigned kPatternBits = 3;
inline constexpr std::size_t kNewPattern = (std::size_t{1} << kPatternBits) - 1;
// Blocks are cut after the group that brings them to this many values, so that a block stays a
// few KiB.
inline constexpr std::size_t kProfileBlockValues = 512;
}  // namespace format

// A profile's blocks, their bytes one after the other.
struct ProfileBlocks {
  struct Block {
    NodeId firstNode = 0;   // the block's key is (profile, firstNode)
    std::uint32_t end = 0;  // its bytes are [the previous block's end, end)
  };
  std::vector<char> bytes;
  std::vector<Block> blocks;
  std::uint64_t values = 0;  // non-zero values written
  bool made = false;         // false: none were encoded (the values are written from their columns)
};

// Encodes one profile after the other: begin() gives a Profile, which takes every node's values
// in ascending node order, and finish() its blocks. Metrics are dense ids below kMaxMetrics, so
// that a group's columns (2 per metric: exclusive, inclusive) fit a 64-bit mask; their scales
// (ShardOptions::valueScales) fix the units.
class ProfileBlockEncoder {
 public:
  static constexpr std::size_t kMaxMetrics = 32;
  // Throws std::invalid_argument when there are more than kMaxMetrics.
  explicit ProfileBlockEncoder(std::span<const ValueScale> scales);
  ProfileBlockEncoder(const ProfileBlockEncoder&) = delete;
  ProfileBlockEncoder& operator=(const ProfileBlockEncoder&) = delete;
  std::size_t metrics() const { return metrics_; }

  // One profile's encoding under way. Kept in a local variable of the loop that feeds it, its
  // state stays in registers: as members of the encoder it was reloaded after every byte
  // written (a char store may alias them), which cost as much as the by-profile writer's second
  // walk over the values that encoding them while collected saves.
  class Profile {
   public:
    // A node's values of every metric: exclusive[m] and inclusive[m] for m < metrics(), zeros
    // for none. A node whose values are all zero writes nothing. `Metrics`: metrics() when the
    // caller knows it (the loops unroll), 0 otherwise.
    template <std::size_t Metrics = 0>
    [[gnu::always_inline]] void addNode(NodeId node, const std::uint64_t* exclusive, const std::uint64_t* inclusive) {
      const std::size_t metrics = Metrics != 0 ? Metrics : metrics_;
      std::size_t n = 0;
      bool mirrored = true;  // every metric's inclusive value is its exclusive one (a CCT leaf)
      std::uint64_t exclusiveMask = 0, inclusiveMask = 0;
      for (std::size_t m = 0; m < metrics; ++m) {
        const std::uint64_t e = exclusive[m], i = inclusive[m];
        n += std::size_t{e != 0} + std::size_t{i != 0};
        mirrored = mirrored && e == i;
        exclusiveMask |= std::uint64_t{e != 0} << (2 * m);
        inclusiveMask |= std::uint64_t{i != 0} << (2 * m + 1);
      }
      if (n == 0) return;
      const std::uint64_t mask = mirrored ? exclusiveMask : exclusiveMask | inclusiveMask;
      const std::size_t columns = mirrored ? n / 2 : n;
      // Room for any group: the header, then at most 10 bytes a varint and 20 a scaled value.
      if (static_cast<std::size_t>(end_ - out_) < room_) {
        const auto grown = encoder_->grow(static_cast<std::size_t>(out_ - base_), room_);
        base_ = grown.base;
        out_ = grown.out;
        end_ = grown.end;
      }
      char* out = out_;
      if (inBlock_ == 0) {
        first_ = previous_ = node;
        out = std::copy(header_, header_ + headerSize_, out);
        patternCount_ = 0;
      }
      std::size_t known = patternCount_;
      if (lastPattern_ < patternCount_ && patterns_[lastPattern_].mask == mask &&
          patterns_[lastPattern_].mirrored == mirrored)
        known = lastPattern_;
      for (std::size_t p = 0; p < patternCount_ && known == patternCount_; ++p)
        if (patterns_[p].mask == mask && patterns_[p].mirrored == mirrored) known = p;
      const std::uint64_t delta = std::uint64_t{node - previous_} << format::kPatternBits;
      if (known < patternCount_) {
        out = varintAt(out, delta | known);
        lastPattern_ = known;
      } else {
        out = varintAt(out, delta | format::kNewPattern);
        out = varintAt(out, std::uint64_t{columns} << 1 | (mirrored ? 1 : 0));
        std::uint64_t rest = mask;
        std::uint32_t last = 0;
        for (std::size_t j = 0; j < columns; ++j) {
          const auto c = static_cast<std::uint32_t>(std::countr_zero(rest));
          rest &= rest - 1;
          out = varintAt(out, j == 0 ? c : c - last - 1);
          last = c;
        }
        if (patternCount_ < format::kNewPattern) {
          patterns_[patternCount_] = {mask, mirrored};
          lastPattern_ = patternCount_++;
        }
      }
      previous_ = node;
      if (mirrored) {
        for (std::size_t m = 0; m < metrics; ++m)
          if (exclusive[m]) out = put(out, m, exclusive[m]);
      } else {
        for (std::size_t m = 0; m < metrics; ++m) {
          if (exclusive[m]) out = put(out, m, exclusive[m]);
          if (inclusive[m]) out = put(out, m, inclusive[m]);
        }
      }
      out_ = out;
      inBlock_ += n;
      values_ += n;
      if (inBlock_ >= format::kProfileBlockValues) closeBlock();
    }

   private:
    friend class ProfileBlockEncoder;
    explicit Profile(ProfileBlockEncoder& encoder)
        : encoder_(&encoder),
          metrics_(encoder.metrics_),
          scale_(encoder.scale_.data()),
          scaled_(encoder.scaled_),
          header_(encoder.header_.data()),
          headerSize_(encoder.header_.size()),
          room_(headerSize_ + 40 * (2 * metrics_ + 1)),
          base_(encoder.bytes_.data()),
          out_(base_),
          end_(base_ + encoder.bytes_.size()) {}
    char* put(char* out, std::size_t metric, std::uint64_t v) const {
      return (scaled_ >> metric & 1) != 0 ? scale_[metric].putScaled(out, v) : varintAt(out, v);
    }
    void closeBlock() {
      encoder_->blocks_.push_back({first_, static_cast<std::uint32_t>(out_ - base_)});
      inBlock_ = 0;
    }
    struct Pattern {
      std::uint64_t mask = 0;
      bool mirrored = false;
    };
    ProfileBlockEncoder* encoder_;
    std::size_t metrics_;
    const ValueScale* scale_;
    std::uint32_t scaled_;  // bit m: metric m has a scale other than 1
    const char* header_;    // every block's: its scaled metrics
    std::size_t headerSize_;
    std::size_t room_;  // the most bytes a group takes, the block's header included
    char* base_;        // the encoder's buffer: the profile's blocks so far are [base_, out_)
    char* out_;
    char* end_;
    std::size_t inBlock_ = 0;
    NodeId first_ = 0, previous_ = 0;
    std::array<Pattern, format::kNewPattern> patterns_{};  // the block's patterns [0, patternCount_)
    std::size_t patternCount_ = 0, lastPattern_ = 0;
    std::uint64_t values_ = 0;
  };

  Profile begin() {
    blocks_.clear();
    return Profile(*this);
  }
  // The profile's blocks (the last one closed), copied out: the encoder keeps its buffer.
  ProfileBlocks finish(Profile profile);

 private:
  struct Grown {
    char* base;
    char* out;
    char* end;
  };
  // The buffer, at least `room` bytes free past `used`.
  Grown grow(std::size_t used, std::size_t room);

  std::size_t metrics_ = 0;
  std::array<ValueScale, kMaxMetrics> scale_;
  std::uint32_t scaled_ = 0;  // bit m: metric m has a scale other than 1
  std::vector<char> header_;  // every block's: its scaled metrics
  std::vector<char> bytes_;   // the profile's blocks
  std::vector<ProfileBlocks::Block> blocks_;
};

}  // namespace csp::storage
