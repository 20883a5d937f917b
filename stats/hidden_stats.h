// Hidden-state outlier statistics of one block output, one result per sequence (DESIGN.md §6).
//
// X[m, l, d] is the output of block m (after its second residual add, before the final norm) at
// position l (l = 1 is the window's first token) and channel d. For one sequence and one layer:
//   kurtosis   κ[l] = E_d[(X − μ)^4] / (E_d[(X − μ)^2])^2, μ = E_d[X], population moments over the
//              D channels, computed in float64 (a Gaussian gives 3, a uniform 1.8, a one-hot
//              vector (D² − 3D + 3)/(D − 1) ≈ D). A constant vector has 0/0: NaN, reported as such.
//   max_abs    a[l] = max_d |X[l, d]|.
//   inf_over_l2 r[l] = max_d |X[l, d]| / sqrt(Σ_d X[l, d]^2) (in (1/√D, 1]; NaN for a zero vector).
// Each is reported for the first token (l = 1) and as the mean over the rest (l = 2..L) within
// the sequence; the rest is NaN when L = 1. Averaging over sequences and layers is the
// collector's job (stats/statistics.h).
//
// Cost: ATen reductions along D only, on chunks of rows that bound the float64 temporaries;
// the per-position values ([B, L] doubles) come to the CPU and are reduced over positions in a
// fixed loop, so every sequence's result is the same whatever batch it was computed in.
#pragma once

#include <ATen/ATen.h>

#include <cstdint>
#include <vector>

namespace qeval {

struct HiddenLayerStats {
  double kurtosis_first = 0, kurtosis_rest = 0;
  double max_abs_first = 0, max_abs_rest = 0;
  double inf_over_l2_first = 0, inf_over_l2_rest = 0;
  // The element of largest |X| over all positions and channels of this sequence: its signed
  // value, channel d and position l, both 0-based. Ties go to the earliest position, then to
  // the lowest channel (ATen's max(dim) returns the first maximal index).
  double largest_value = 0;
  std::int64_t largest_channel = 0, largest_position = 0;
};

// hidden: [B, L, D] floating point, any device → one entry per batch row (sequence).
// chunk_elements bounds each float64 temporary (rows of D per chunk); results do not depend on it.
// 0: by device (2^18 on the CPU; 2^26 on a GPU, where each chunk costs kernel launches).
// The default chunk of the statistics reductions on `device` (chunk_elements = 0): 2^18 elements on
// the CPU (bounded temporaries), 2^26 on a GPU, where every chunk costs kernel launches and a sync.
std::int64_t default_statistics_chunk(const at::Device& device);

std::vector<HiddenLayerStats> hidden_layer_stats(const at::Tensor& hidden,
                                                 std::int64_t chunk_elements = 0);

// The same from the device-side reduction (kernels/attention_statistics.h, hidden_stats): stats
// [B, 9] float64, any device, the fields above in order. The GPU sums in another fixed order
// (a tree over positions and channels), so values agree with hidden_layer_stats' to rounding;
// the largest element's channel is the lowest maximal one.
std::vector<HiddenLayerStats> hidden_layer_stats_from_device(const at::Tensor& stats);

}  // namespace qeval
