// The end of one query's attention statistics, shared by both statistics kernels
// (fused_attention_stats.cu on the CUDA cores, attention_stats_tensor_cores.cu on tensor cores):
// from the online state of the row — the running max m, ℓ (with softmax-1's implicit key), E and S
// over the real keys, key 1's logit and the largest real logit with how many keys share it — the
// key-1 weight, the first-attn credit (the tie rule of kernels/cuda/fused_attention_stats.h) and
// the entropy, written to query_stats [3, B, H, L] at `at`.
#pragma once

#include <cmath>
#include <cstdint>

namespace qeval::kernels::cuda::detail {

struct QueryStatsState {
  float m, l, e_sum, s_sum, first, top;
  int tied;
};

__device__ __forceinline__ void write_query_stats(const QueryStatsState& r, std::int64_t i, std::int64_t BHL,
                                                  std::int64_t at, float* query_stats) {
  const float p1 = expf(r.first - r.m) / r.l;  // 0 when key 1 is hidden
  const float p_top = expf(r.top - r.m) / r.l;
  float credit = 0.0f;
  if (p_top == 0.0f)
    credit = 1.0f / static_cast<float>(i + 1);  // all weights underflow: the i + 1 causal keys tie
  else if (r.first == r.top)
    credit = 1.0f / static_cast<float>(r.tied);
  else if (p1 >= p_top)
    credit = 1.0f / static_cast<float>(r.tied + 1);
  const float entropy = logf(r.l) * (r.e_sum / r.l) - r.s_sum / r.l;
  query_stats[at] = p1;
  query_stats[BHL + at] = credit;
  query_stats[2 * BHL + at] = entropy;
}

}  // namespace qeval::kernels::cuda::detail
