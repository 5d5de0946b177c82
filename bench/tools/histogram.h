// LogLinearHistogram: latency histogram for the bench tools (weir-sink, weir-loadgen).
//
// Values are non-negative integers (the tools record microseconds). Values below 128 get a
// bucket each; above that every power of two is split into 64 linear sub-buckets, so a value
// is known within 1/64 of itself and the midpoint we report is within ~0.8% (the HdrHistogram
// layout with 2 significant digits, without the dependency). The range is capped at 2^36
// (~19 hours in µs); larger values are clamped and still counted. Fixed size: ~2 k buckets
// (16 KiB), record() is O(1) and allocation-free.
//
// Count is the per-bucket counter type: uint64_t by default; the sink's per-second timeline
// uses uint32_t to halve its memory. Not thread-safe: callers own one per thread or lock
// around it; merge() combines them.
#pragma once

#include <algorithm>
#include <array>
#include <bit>
#include <cstdint>
#include <vector>

namespace weir::bench {

template <typename Count = uint64_t>
class BasicLogLinearHistogram {
 public:
  static constexpr int kSubBits = 6;                              // 64 sub-buckets per power of two
  static constexpr uint64_t kLinearLimit = 1u << (kSubBits + 1);  // 128: exact below this
  static constexpr int kMaxBits = 36;
  static constexpr uint64_t kMaxValue = (uint64_t{1} << kMaxBits) - 1;
  static constexpr size_t kBuckets = kLinearLimit + (kMaxBits - kSubBits - 1) * (uint64_t{1} << kSubBits);

  BasicLogLinearHistogram() : counts_(kBuckets, 0) {}

  void record(int64_t value) {
    uint64_t v = value < 0 ? 0 : static_cast<uint64_t>(value);
    if (v > kMaxValue) v = kMaxValue;
    ++counts_[index_of(v)];
    ++total_;
    max_ = std::max(max_, v);
    min_ = std::min(min_, v);
    sum_ += v;
  }

  void merge(const BasicLogLinearHistogram& other) {
    for (size_t i = 0; i < kBuckets; ++i) counts_[i] += other.counts_[i];
    total_ += other.total_;
    max_ = std::max(max_, other.max_);
    min_ = std::min(min_, other.min_);
    sum_ += other.sum_;
  }

  void reset() {
    std::fill(counts_.begin(), counts_.end(), 0);
    total_ = 0;
    max_ = 0;
    min_ = UINT64_MAX;
    sum_ = 0;
  }

  uint64_t count() const { return total_; }
  uint64_t max() const { return total_ ? max_ : 0; }
  uint64_t min() const { return total_ ? min_ : 0; }
  double mean() const { return total_ ? static_cast<double>(sum_) / total_ : 0.0; }

  // The value at quantile q in [0, 1]: the midpoint of the bucket holding the rank, clamped
  // to the observed min/max so p100 is exact. 0 when empty.
  uint64_t quantile(double q) const {
    if (total_ == 0) return 0;
    q = std::clamp(q, 0.0, 1.0);
    uint64_t rank = static_cast<uint64_t>(q * static_cast<double>(total_) + 0.5);
    rank = std::clamp<uint64_t>(rank, 1, total_);
    uint64_t seen = 0;
    for (size_t i = 0; i < kBuckets; ++i) {
      seen += counts_[i];
      if (seen >= rank) {
        uint64_t lo = lower_bound_of(i);
        uint64_t width = width_of(i);
        uint64_t mid = lo + width / 2;
        return std::clamp(mid, min(), max());
      }
    }
    return max();
  }

 private:
  static size_t index_of(uint64_t v) {
    if (v < kLinearLimit) return static_cast<size_t>(v);
    int msb = 63 - std::countl_zero(v);                       // >= kSubBits + 1
    int shift = msb - kSubBits;                               // >= 1
    uint64_t sub = (v >> shift) - (uint64_t{1} << kSubBits);  // 0..63
    return kLinearLimit + static_cast<size_t>(shift - 1) * (uint64_t{1} << kSubBits) + sub;
  }
  static uint64_t lower_bound_of(size_t i) {
    if (i < kLinearLimit) return i;
    size_t k = i - kLinearLimit;
    int shift = static_cast<int>(k >> kSubBits) + 1;
    uint64_t sub = (k & ((uint64_t{1} << kSubBits) - 1)) + (uint64_t{1} << kSubBits);
    return sub << shift;
  }
  static uint64_t width_of(size_t i) {
    if (i < kLinearLimit) return 1;
    return uint64_t{1} << ((static_cast<int>((i - kLinearLimit) >> kSubBits)) + 1);
  }

  std::vector<Count> counts_;
  uint64_t total_ = 0;
  uint64_t max_ = 0;
  uint64_t min_ = UINT64_MAX;
  uint64_t sum_ = 0;
};

using LogLinearHistogram = BasicLogLinearHistogram<uint64_t>;

}  // namespace weir::bench
