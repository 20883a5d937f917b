// Fused causal attention for the CPU (kernels/cpu/fused_attention_x86.cpp): each block of queries
// against the keys it can see, scores, softmax and the product with v in one pass through
// registers and a per-thread buffer; the [L, L] probabilities are written out only when asked
// for. What model/causal_attention_cpu.h runs on CPUs with AVX2 and FMA, in an AVX2 variant (8
// lanes) and an AVX-512 variant (16 lanes) chosen by CPUID.
#pragma once

#include <ATen/ATen.h>

#include <cstdint>

#include "kernels/cpu/cpu_isa.h"

namespace qeval::kernels::cpu {

// The kernel's variants, by instruction set (kernels/cpu/cpu_isa.h).
using FusedAttentionIsa = CpuIsa;

// Whether variant `isa` runs on this CPU and serves these operands: float32 CPU tensors
// q [B, H, L, hd] and k, v [B, Hkv, L, hd] with H a multiple of Hkv and hd a multiple of the
// variant's lanes (8 for avx2, 16 for avx512).
bool fused_causal_attention_fits(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, FusedAttentionIsa isa);

// The widest variant that fits (none when none does).
FusedAttentionIsa fused_attention_isa_for(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v);

// out [B, L, H·hd]: for each head h (kv head h / (H / Hkv)) and query i, the softmax over the keys
// j ≤ i (and i - j < window when window > 0) of scale · q_i·k_j, times v. softmax_one: e^s / (1 +
// Σ e^s) (Kaul et al.'s softmax-1). The probabilities are never normalised entry by entry: the
// product with v is divided by the row's sum once, so results differ from the unfused path in the
// last bits only (and the two variants from each other, in the order a row's sum adds its lanes).
// When `probs` is not null it receives the [B, H, L, L] probabilities (0 where a key is hidden);
// the output's bits are the same either way. Threads (at::parallel_for) take whole blocks of
// queries, so the bits do not depend on their number either. Refused (c10::Error) where `isa`
// does not fit.
at::Tensor fused_causal_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, std::int64_t window,
                                  double scale, bool softmax_one, at::Tensor* probs, FusedAttentionIsa isa);

}  // namespace qeval::kernels::cpu
