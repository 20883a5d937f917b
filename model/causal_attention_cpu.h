// Causal attention on the CPU by blocks of queries: the keys a block of queries cannot see are
// never multiplied, exponentiated or stored.
//
// The plain way (Block::attention's general path) multiplies every query by every key,
// [L, L] scores per head, adds a mask of -inf above the diagonal and runs the softmax and the
// product with v over whole rows: at L = 512 about half of that work is on entries the mask then
// zeroes, and the softmax's exponentials with it. Here the queries of a head go in blocks of 64;
// block [r0, r1) takes only keys [c0, r1), where c0 is 0 for causal layers and, for sliding-window
// layers, the first key the block's first query sees (rounded down to a block boundary). Every
// entry it skips is one the mask hides, whose probability is exactly 0, so each probability
// is the same expression as before; the sums of the softmax and of p·v run over fewer zeros, so
// the last bit can differ from the plain path (tests/model compares the two).
//
// Work items are (sequence, head, query block), run over LibTorch's pool with one single-threaded
// BLAS call per product (kernels/compute_threads.h), so the bits do not depend on the thread
// count. It applies to float32 CPU inference under set_inference_threads, whichever fp32 GEMM the
// linears run on (kernels/fp32_gemm.h): on a Zen 4 with oneDNN's AVX-512 brgemm as the fp32 GEMM,
// the blocks took 1.4-1.6x less time than oneDNN's batched matmul over whole heads, and the fused
// kernel below 2.4-2.5x less (bench/results/cpu-zen4-2026-11-27.md).
//
// On CPUs with AVX2 and FMA the same blocks run through one fused kernel instead
// (kernels/cpu/fused_attention_cpu.h: scores, softmax and the product with v per block without
// LibTorch ops in between), for every layer without a soft cap whose head dim is a multiple of 8,
// in its AVX-512 variant where the CPU has AVX-512 and the head dim is a multiple of 16; its sums
// run in another order, so it differs from the op-by-op blocks in the last bits.
// QEVAL_CPU_ATTENTION=fused-avx2 keeps the AVX2 variant, =blocked the op-by-op blocks and =whole the
// whole-matrix path (to compare them on one binary); the record's options.cpu_attention says which
// ran.
#pragma once

#include <ATen/ATen.h>

#include <cstdint>
#include <functional>
#include <string>

#include "kernels/cpu/fused_attention_cpu.h"

namespace qeval {

// What a layer does between the scaled scores and the probabilities: scores [rows, cols] (already
// times the attention scale; the callee may modify them in place) and the matching block of the
// layer's mask (0 where a query sees a key, -inf elsewhere) → probabilities [rows, cols].
using AttentionProbabilities = std::function<at::Tensor(at::Tensor scores, const at::Tensor& mask)>;

// Whether blocked_causal_attention (or the fused kernel) serves q: float32, CPU, no gradients
// wanted, inference threading, and QEVAL_CPU_ATTENTION is not `whole`.
bool blocked_causal_attention_applies(const at::Tensor& q);

// q [B, H, L, hd]; k, v [B, Hkv, L, hd] with H a multiple of Hkv (query head h reads kv head
// h / (H / Hkv)); mask [L, L]; window: the layer's sliding window (0: plain causal). When `probs`
// is not null it receives [B, H, L, L] probabilities, 0 where the mask hides a key.
// Returns the attention output [B, L, H · hd].
at::Tensor blocked_causal_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                    const at::Tensor& mask, std::int64_t window, double scale,
                                    const AttentionProbabilities& probabilities, at::Tensor* probs = nullptr);

// Which variant of the fused kernel serves a layer where blocked_causal_attention_applies
// (kernels::cpu::FusedAttentionIsa::none: the op-by-op blocks do): the widest this CPU runs whose
// lanes divide the head dim (kernels::cpu::fused_causal_attention_fits), for a layer without a soft
// cap (`softcap` ≤ 0), unless QEVAL_CPU_ATTENTION asks for `fused-avx2`, `blocked` or `whole`.
kernels::cpu::FusedAttentionIsa fused_attention_variant(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                                        double softcap);

// What CPU inference passes run for a layer without a soft cap whose head dim is a multiple of 8:
// "fused (avx512; avx2 where the head dim is not a multiple of 16)", "fused (avx2)", "blocked" or,
// under QEVAL_CPU_ATTENTION=whole, "whole matrix (batched matmul)" (for the record's
// options.cpu_attention).
std::string cpu_attention_description();

}  // namespace qeval
