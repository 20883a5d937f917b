// Scoring against full precision over the vocabulary in blocks (DESIGN.md §4, §6, §11): the
// LM head's rows come in blocks of kVocabBlock, and every per-token quantity is an online
// reduction over them, so logits for the whole vocabulary never exist at once beyond a block.
//
// Per scored position p (its distribution predicts token t = the window's token p + 1), for every
// scheme s and full precision f, with l the logits over the vocabulary:
//   m_s        running max of l_s                    (rescales the sums below as it grows)
//   S_s        Σ_v exp(l_s(v) − m_s)                 log-sum-exp Z_s = m_s + log S_s
//   A_s        Σ_v exp(l_f(v) − m_f) (l_f(v) − l_s(v))   so Σ_v p_f (l_f − l_s) = A_s / S_f
//   B_s        Σ_v exp(l_s(v) − m_s) (l_s(v) − l_f(v))   so Σ_v p_s (l_s − l_f) = B_s / S_s
//   argmax_s   first index of the largest logit (a later block wins only when strictly larger)
// and at the end
//   NLL_s = Z_s − l_s(t)
//   KL(P_f ‖ P_s) = Σ_v p_f (log p_f − log p_s) = A_s / S_f − Z_f + Z_s
//   KL(P_s ‖ P_f) = B_s / S_s − Z_s + Z_f   (the reverse KL)
//   Δp_s = exp(l_s(t) − Z_s) − exp(l_f(t) − Z_f),   top-1 agreement: argmax_s = argmax_f,
//   top-1 right: argmax_s = t.
// (The overlap Σ_v min(p_f, p_s) has no such online form: which of the two is smaller depends on
// Z_f − Z_s, known only after the last block, so it would take the head twice; qeval leaves it out.)
// On the CPU each row of a block is reduced in one pass by kernels/cpu/vocab_rows_cpu.h: the
// exponentials in float32 (the Cephes polynomial the fused attention uses, the same bits in its
// scalar, AVX2 and AVX-512 variants), every sum in float64 in a fixed order (eight lanes over the
// block, then the lanes, then block after block), so the values do not depend on the CPU's
// instruction set, the thread count, the batch size or the plan. On a GPU (and where the caller
// asks for it) they are LibTorch ops: exp in float32 and reductions in float64 (the record says GPU
// results may differ in the last bits for another batch size).
#pragma once

#include <ATen/ATen.h>

#include <cstdint>
#include <vector>

#include "eval/token_scores.h"
#include "kernels/cpu/vocab_rows_cpu.h"

namespace qeval {

// Rows of the LM head per block, and prediction positions per GEMM of the head. Constants, not
// plan parameters: the blocks decide the order of the sums and the positions the GEMMs' shapes,
// so every plan (and every machine's memory) must use the same ones. The logits in flight are
// at most kScoreRows × kVocabBlock floats per sequence (4 MiB), whatever the window length.
inline constexpr std::int64_t kVocabBlock = 8192;
inline constexpr std::int64_t kScoreRows = 128;

// Per-token values of one scheme on one batch, [B, L − 1] (position p predicts token p + 1), on
// the CPU: nll, kl, rkl (the reverse KL) and dp float64, agree and right int64 (1 when top-1 agrees
// with full precision's; 1 when top-1 is the target). kl, rkl, dp and agree are zeros, zeros,
// zeros and ones for full precision itself.
struct TokenValues {
  at::Tensor nll, kl, rkl, dp, agree, right;
};

class VocabScorer {
 public:
  // Where CPU logits are reduced: by the row kernels (automatic), or by the LibTorch ops the GPU
  // runs (aten; the tests compare the two on the CPU).
  enum class Path { automatic, aten };

  // targets [B, L] token ids of the batch; `schemes` scored, scheme 0 being full precision.
  VocabScorer(const at::Tensor& targets, std::size_t schemes, Path path = Path::automatic);

  // Logits of scheme s for vocabulary rows [begin, begin + n) at prediction positions
  // [p0, p0 + np): [B, np, n], any float dtype and device. Blocks come in ascending order of
  // `begin`; within a block and a span of positions, scheme 0 first, then the others.
  void add(std::size_t s, std::int64_t begin, std::int64_t p0, const at::Tensor& logits);
  // Every scheme has had the current span: full precision's logits of it are no longer needed.
  void end_block();

  // After every block of every scheme: the per-token values of each scheme.
  std::vector<TokenValues> finish() const;

 private:
  struct Running {
    at::Tensor m;       // [R] float32 running max (starts at −inf)
    at::Tensor S;       // [R] float64
    at::Tensor A;       // [R] float64 (schemes other than full precision)
    at::Tensor Bs;      // [R] float64 (schemes other than full precision): B_s above
    at::Tensor target;  // [R] float32 logit of the target token
    at::Tensor best;    // [R] float32 largest logit
    at::Tensor best_index;  // [R] int64
  };
  // Scheme s's logits l [B·np, n] (float32, contiguous) of the span at p0, vocabulary rows from begin.
  void add_rows(std::size_t s, std::int64_t begin, std::int64_t p0, std::int64_t np, const at::Tensor& l);
  void add_aten(std::size_t s, std::int64_t begin, std::int64_t p0, std::int64_t np, const at::Tensor& l);

  at::Tensor targets_;     // [R] int64, R = B·(L − 1), on the logits' device once known
  std::int64_t B_ = 0, P_ = 0;
  Path path_;
  kernels::cpu::VocabRowKernels rows_;
  std::vector<Running> running_;
  // Full precision's current block: its logits and exp(l_f − m_f) with the new max, for the
  // schemes' A (the blocks of scheme 0 come first).
  at::Tensor full_logits_, full_exp_, full_rescale_;  // [B·np, n] float, [B·np, n] float, [B·np] float64
  // The row kernels' exponentials and rescales of full precision's block: buffers kept from block
  // to block (a fresh one would be fresh pages the kernel zeroes every block).
  std::vector<float> row_exp_;
  std::vector<double> row_rescale_;
  std::int64_t block_begin_ = -1, span_begin_ = -1;
};

// The window rows of one scheme's batch: sums over each window's scored positions in position
// order (first_scored[b]: the first scored token's position). `full` is full precision's values;
// passing the same object as `scheme` scores full precision itself (no paired sums).
std::vector<WindowScores> window_rows(const TokenValues& scheme, const TokenValues& full,
                                      const std::vector<std::int64_t>& first_scored);

}  // namespace qeval
