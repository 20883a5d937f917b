// Statistics of state-space layers (issue 54): the implicit attention of Mamba (S6) and Mamba-2
// (SSD) layers, computed in blocks without the [heads, L, L] matrix, and SAMBA's selection entropy.
// Definitions, with their sources, in docs/families.md ("What state-space layers attend to").
//
// Implicit attention. A layer's scan is y_i = Σ_{j≤i} α[i, j] u_j + D u_i per head, with
//   Mamba (Ali, Zimerman & Wolf 2024, "The Hidden Attention of Mamba Models"; HF's zero-order hold
//   Ā = exp(ΔA), B̄ = Δ B), per channel c of d_inner (a "head" here):
//     α_c[i, j] = Σ_n C_i[n] · exp(Σ_{k=j+1..i} Δ_k[c] A[c, n]) · Δ_j[c] B_j[n]
//   Mamba-2 (Dao & Gu 2024, the state-space duality's M = L ∘ (C Bᵀ)), per head h of group g:
//     α_h[i, j] = (C_i[g] · B_j[g]) · exp(Σ_{k=j+1..i} Δ_k[h] A[h]) · Δ_j[h]
// α is signed and its rows do not sum to 1, so it is measured as W[i, j] = |α[i, j]| / Σ_{j'≤i} |α[i, j']|
// (a row whose every |α| is 0 is all zeros), the D skip term left out. On W the attention statistics
// of stats/attention_stats.h (global layer) are defined as for attention: %first-attn, first-token
// share, Sink₁^ε and entropy.
//
// How it is computed: queries in blocks of Q; for the keys before a block, the decay splits at the
// block's first query i₀, exp(cum_i − cum_j) = exp(cum_i − cum_{i₀}) · exp(cum_{i₀} − cum_j), both
// factors ≤ 1 (no overflow; an underflow is a term below the smallest float), so a block's α is one
// matrix product (Mamba: Ĉ [c, Q, N] × B̂ [c, N, keys] per channel; Mamba-2: C Bᵀ once per group,
// scaled per head). The keys of the block's own diagonal are computed directly (Mamba-2) or with the
// same split where the decay across the block stays within the dtype's range (Mamba; directly for
// the channels where it does not). Each row keeps Σ|α|, Σ|α| log|α|, its maximum, the number of keys
// at the maximum and |α[i, 1]|, so W's entropy is log S − (Σ|α| log|α|) / S without storing the row.
// Temporaries are bounded by `block_elements` whatever L: memory is flat in L, time O(L²) as
// attention's (Mamba: O(d_inner · L² · N) multiply-adds, a matrix product per channel).
//
// Selection entropy (SAMBA, Ren et al. 2024, arXiv 2406.07522, §4 and Appendix C): the time steps Δ
// of a layer (after softplus; Mamba-2: after its clamp) normalised along the sequence per channel,
// S[i, c] = Δ[i, c] / Σ_{i'} Δ[i', c], H_c = −Σ_i S log S (nats; log L when Δ is constant in time),
// averaged over the channels (Mamba: d_inner channels; Mamba-2: heads).
#pragma once

#include <ATen/ATen.h>

#include <cstdint>
#include <vector>

#include "model/observer.h"
#include "stats/attention_stats.h"

namespace qeval {

// Per sequence and head: [B, heads, 4] float64 on the CPU, laid out as AttentionSums::sums
// (Σ_{i≤T'} W[i, 1], Σ_{2≤i≤L} W[i, 1], Σ_{2≤i≤L} first-attn credit, Σ_{i≤L} entropy; T' = min(sink_T, L)),
// so attention_layer_stats_from_sums reduces them. block_elements bounds each temporary (0: 2^22);
// results do not depend on it beyond rounding.
at::Tensor implicit_attention_sums(const SsmSelection& selection, std::int64_t sink_T, std::int64_t block_elements = 0);

// One entry per sequence: the statistics of W as defined above.
std::vector<AttentionLayerStats> implicit_attention_stats(const SsmSelection& selection, std::int64_t sink_T,
                                                          double sink_eps, std::int64_t block_elements = 0);

// delta [B, L, C] (positive) → one selection entropy per sequence, in float64.
std::vector<double> selection_entropy(const at::Tensor& delta);

// The readable reference for tests: Mamba's W, materialised. delta [B, L, E], A [E, N], Bm, Cm
// [B, L, N] → [B, E, L, L] float64 (Mamba-2's is ssd_implicit_attention in model/ssm_scan.h).
at::Tensor selective_scan_implicit_attention(const at::Tensor& delta, const at::Tensor& A, const at::Tensor& Bm,
                                             const at::Tensor& Cm);

}  // namespace qeval
