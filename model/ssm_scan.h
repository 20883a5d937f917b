// The state-space operations of Mamba (S6) and Mamba-2 (SSD) layers, each with a readable
// sequential reference beside the fast form evaluation runs (tests/model/ssm_scan_test.cpp holds
// them together on random inputs). Shapes: B sequences, L positions, E channels (Mamba's d_inner),
// N state size, H heads of P channels (Mamba-2), G groups of B/C (head h reads group h / (H / G)).
// Every op works per sequence (nothing mixes batch rows), in the inputs' float dtype.
#pragma once

#include <ATen/ATen.h>

#include <cstdint>

namespace qeval {

// The causal depthwise convolution of Mamba's mixers (nn.Conv1d with groups = channels, padding
// K − 1, the first L outputs kept): y[b, t, c] = bias[c] + Σ_{k<K} w[c, k] · x[b, t − (K − 1) + k, c],
// x taken as 0 before position 0. x [B, L, C], w [C, K], bias [C] or undefined → [B, L, C].
at::Tensor causal_depthwise_conv1d(const at::Tensor& x, const at::Tensor& w, const at::Tensor& bias);

// Mamba's selective scan with its zero-order-hold discretisation (Gu & Dao, and HF's slow_forward):
//   h_t = exp(Δ_t A) ∘ h_{t−1} + (Δ_t u_t) B_t,   y_t = h_t C_t + D ∘ u_t,   h_0 = 0
// u, delta [B, L, E] (delta after softplus), A [E, N] (negative), Bm, Cm [B, L, N], D [E] → y [B, L, E].
at::Tensor selective_scan(const at::Tensor& u, const at::Tensor& delta, const at::Tensor& A, const at::Tensor& Bm,
                          const at::Tensor& Cm, const at::Tensor& D);
// The sequential reference: one step per position in LibTorch ops (what HF's slow path computes).
at::Tensor selective_scan_reference(const at::Tensor& u, const at::Tensor& delta, const at::Tensor& A,
                                    const at::Tensor& Bm, const at::Tensor& Cm, const at::Tensor& D);
// Chunks of `chunk` positions: exp(Δ A) and Δ u B for a chunk at once, then the chunk's recurrence
// as a log-depth (Hillis–Steele) scan of (a, b) pairs, (a₁, b₁)∘(a₂, b₂) = (a₁a₂, a₂b₁ + b₂), in
// LibTorch ops; the state carries from chunk to chunk. Runs on any device.
at::Tensor selective_scan_chunked(const at::Tensor& u, const at::Tensor& delta, const at::Tensor& A,
                                  const at::Tensor& Bm, const at::Tensor& Cm, const at::Tensor& D,
                                  std::int64_t chunk = 0);
// CPU, float32 or float64: the discretisation in chunks by LibTorch ops (vectorised exp), the
// recurrence a loop per (sequence, channel) over positions, channels in parallel.
at::Tensor selective_scan_cpu(const at::Tensor& u, const at::Tensor& delta, const at::Tensor& A, const at::Tensor& Bm,
                              const at::Tensor& Cm, const at::Tensor& D, std::int64_t chunk = 0);

// Mamba-2's scalar-decay SSM per head (SSD):
//   h_t = exp(Δ_t a_h) h_{t−1} + Δ_t x_t B_tᵀ,   y_t = h_t C_t + D_h x_t,   h_0 = 0
// x [B, L, H, P], dt [B, L, H] (after softplus and clamping), A [H] (negative), Bm, Cm [B, L, G, N],
// D [H] → y [B, L, H, P].
at::Tensor ssd_reference(const at::Tensor& x, const at::Tensor& dt, const at::Tensor& A, const at::Tensor& Bm,
                         const at::Tensor& Cm, const at::Tensor& D);
// The chunked SSD algorithm (Dao & Gu 2024, §6; HF's torch_forward): chunks of `chunk` positions,
// the diagonal blocks as masked attention, the off-diagonal ones through chunk states, in LibTorch
// ops (einsum, cumsum, exp of segment sums). L need not be a multiple of the chunk.
at::Tensor ssd_chunked(const at::Tensor& x, const at::Tensor& dt, const at::Tensor& A, const at::Tensor& Bm,
                       const at::Tensor& Cm, const at::Tensor& D, std::int64_t chunk);

// Mamba-2's implicit attention (the state-space duality): y_i = Σ_{j≤i} M[i, j] x_j + D x_i with
//   M[h, i, j] = (C_i · B_j) · exp(Σ_{k=j+1..i} Δ_k a_h) · Δ_j
// per head (its group's B and C). M is signed and its rows do not sum to 1, so it is measured as
//   W[h, i, j] = |M[h, i, j]| / Σ_{j'≤i} |M[h, i, j']|
// (the share of query i's mixing magnitude on key j; the D skip term, a residual, is left out), and
// a row whose every |M| is 0 gets 0 everywhere. → W [B, H, L, L] float32, zero above the diagonal.
at::Tensor ssd_implicit_attention(const at::Tensor& dt, const at::Tensor& A, const at::Tensor& Bm, const at::Tensor& Cm,
                                  std::int64_t heads);

}  // namespace qeval
