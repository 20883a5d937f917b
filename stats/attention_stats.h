// Attention statistics of one layer, one result per sequence (DESIGN.md §6).
//
// A[h, i, j] is the attention weight of head h, query i on key j (1-based here; j ≤ i, zero
// above the diagonal). The weights are used exactly as the model produced them: for softmax-1
// a row sums to less than 1 (to ≈ 0 when every logit is very negative), and nothing is
// renormalised. For one sequence of length L with H heads:
//   first_attn     over (h, i) with i = 2..L, the fraction whose largest weight is on key 1.
//                  Ties: a query whose maximum is shared by k causal keys (j ≤ i), key 1 among
//                  them, counts 1/k — the expectation under a random tie-break. So uniform
//                  causal attention gives mean_{i=2..L} 1/i (as its share does), and a row of
//                  all-zero weights (softmax-1 underflow) ties all i keys.
//   first_share    mean of A[h, i, 1] over the same (h, i).
//   sink_fraction  Sink₁^ε of Gu et al.: with T' = min(T, L) (T = 64 by default), per head
//                  α₁[h] = (1/T') Σ_{i=1..T'} A[h, i, 1]; the fraction of heads with α₁ > ε
//                  (ε = 0.3 by default). Strictly greater: α₁ = ε does not count.
//   entropy        mean over (h, i), i = 1..L, of −Σ_j A[h, i, j] log A[h, i, j], with 0·log 0 = 0
//                  (natural log, nats).
// Sliding-window layers (window w > 0: query i sees keys j with i − j < w, so key 1 only from the
// queries i ≤ w): first_attn and first_share count only the queries whose window contains key 1,
// i = 2..min(L, w), and Sink₁^ε uses T' = min(T, L, w). A query that cannot see key 1 is left out,
// not counted as a miss (the statistic asks where attention goes when the first token is
// available). Entropy is over all queries. w = 0 (global) gives the definitions above.
// first_attn and first_share are NaN when no query i ≥ 2 sees key 1 (L = 1, or w = 1). Fractions here are in [0, 1];
// the collector's summary turns them into percent.
//
// Cost: elementwise work and reductions over keys, on blocks of queries that skip the zeros
// above the diagonal and bound the temporaries; the per-query values ([B, H, L] doubles) are
// reduced on the CPU in a fixed order, so a sequence's result does not depend on its batch.
#pragma once

#include <ATen/ATen.h>

#include <cstdint>
#include <vector>

namespace qeval {

struct AttentionLayerStats {
  double first_attn = 0;
  double first_share = 0;
  double sink_fraction = 0;
  double entropy = 0;
};

// probs: [B, H, L, L] floating point, causal (exactly zero above the diagonal), any device.
// sink_T ≥ 1 and sink_eps as defined above → one entry per batch row (sequence).
// chunk_elements bounds each temporary (query rows per chunk); results do not depend on it. 0: by
// device (2^18 on the CPU; 2^26 on a GPU, where each chunk costs kernel launches and a sync).
std::vector<AttentionLayerStats> attention_layer_stats(const at::Tensor& probs, std::int64_t sink_T, double sink_eps,
                                                       std::int64_t chunk_elements = 0, std::int64_t window = 0);

// The same values from the fused GPU attention's per-head sums (model/observer.h, AttentionSums):
// sums [B, H, 4] float64 on any device, computed with this sink_T, for sequences of `length` in a
// layer of `window` (0: global). Heads are added in ascending order; the per-query values were
// summed on the device in a fixed order, so results are batch-independent here too, and equal
// attention_layer_stats' to the rounding of the sums (the float32 weights themselves agree to
// theirs: kernels/cuda/fused_attention_stats.h).
std::vector<AttentionLayerStats> attention_layer_stats_from_sums(const at::Tensor& sums, std::int64_t length,
                                                                 std::int64_t window, std::int64_t sink_T,
                                                                 double sink_eps);

}  // namespace qeval
