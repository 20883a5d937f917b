#include "model/causal_attention_cpu.h"

#include <ATen/Parallel.h>
#include <ATen/core/grad_mode.h>

#include <algorithm>
#include <cstdlib>

#include "kernels/compute_threads.h"
#include "kernels/cpu/fused_attention_cpu.h"

namespace qeval {
namespace {

// Queries per block: 8 blocks at L = 512 compute 36 of 64 key blocks (56 %) where the plain path
// computes all; a multiple of 64 keeps each row's softmax in the same vector lanes.
constexpr std::int64_t kQueryBlock = 64;

// QEVAL_CPU_ATTENTION (read once): unset or `fused` (the fused kernel's widest variant where it
// serves, else the op-by-op blocks), `fused-avx2` (its AVX2 variant even where AVX-512 runs),
// `blocked` (the op-by-op blocks everywhere) or `whole` (the whole-matrix path of
// Block::attention): all but the first are there to compare the paths on one binary.
enum class CpuAttention { fused, fused_avx2, blocked, whole };

CpuAttention cpu_attention_asked() {
  static const CpuAttention asked = [] {
    const char* env = std::getenv("QEVAL_CPU_ATTENTION");
    const std::string forced = env != nullptr ? env : "";
    if (forced.empty() || forced == "fused") return CpuAttention::fused;
    if (forced == "fused-avx2") return CpuAttention::fused_avx2;
    if (forced == "blocked") return CpuAttention::blocked;
    TORCH_CHECK(forced == "whole", "QEVAL_CPU_ATTENTION=", forced,
                ": expected fused, fused-avx2, blocked or whole (or unset)");
    return CpuAttention::whole;
  }();
  return asked;
}

// The widest variant of the fused kernel the switch allows on this CPU (for the record).
kernels::cpu::FusedAttentionIsa fused_isa_allowed() {
  using kernels::cpu::FusedAttentionIsa;
  const FusedAttentionIsa widest = kernels::cpu::widest_cpu_isa();
  switch (cpu_attention_asked()) {
    case CpuAttention::fused: return widest;
    case CpuAttention::fused_avx2: return widest == FusedAttentionIsa::none ? widest : FusedAttentionIsa::avx2;
    case CpuAttention::blocked:
    case CpuAttention::whole: break;
  }
  return FusedAttentionIsa::none;
}

}  // namespace

kernels::cpu::FusedAttentionIsa fused_attention_variant(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                                        double softcap) {
  using kernels::cpu::FusedAttentionIsa;
  if (softcap > 0) return FusedAttentionIsa::none;
  switch (cpu_attention_asked()) {
    case CpuAttention::fused: return kernels::cpu::fused_attention_isa_for(q, k, v);
    case CpuAttention::fused_avx2:
      return kernels::cpu::fused_causal_attention_fits(q, k, v, FusedAttentionIsa::avx2) ? FusedAttentionIsa::avx2
                                                                                           : FusedAttentionIsa::none;
    case CpuAttention::blocked:
    case CpuAttention::whole: break;
  }
  return FusedAttentionIsa::none;
}

std::string cpu_attention_description() {
  using kernels::cpu::FusedAttentionIsa;
  if (cpu_attention_asked() == CpuAttention::whole) return "whole matrix (batched matmul)";
  switch (fused_isa_allowed()) {
    case FusedAttentionIsa::avx512: return "fused (avx512; avx2 where the head dim is not a multiple of 16)";
    case FusedAttentionIsa::avx2: return "fused (avx2)";
    case FusedAttentionIsa::none: break;
  }
  return "blocked";
}

bool blocked_causal_attention_applies(const at::Tensor& q) {
  return q.device().is_cpu() && q.scalar_type() == at::kFloat && !(at::GradMode::is_enabled() && q.requires_grad()) &&
         kernels::inference_threading() && cpu_attention_asked() != CpuAttention::whole;
}

at::Tensor blocked_causal_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                    const at::Tensor& mask, std::int64_t window, double scale,
                                    const AttentionProbabilities& probabilities, at::Tensor* probs) {
  const std::int64_t B = q.size(0), H = q.size(1), L = q.size(2), hd = q.size(3), Hkv = k.size(1);
  TORCH_CHECK(Hkv > 0 && H % Hkv == 0 && k.size(2) == L && v.sizes() == k.sizes() && k.size(3) == hd &&
                  mask.size(0) == L && mask.size(1) == L,
              "blocked_causal_attention: q ", q.sizes(), ", k ", k.sizes(), ", v ", v.sizes(), " and mask ",
              mask.sizes(), " do not fit");
  const std::int64_t group = H / Hkv, blocks = (L + kQueryBlock - 1) / kQueryBlock;
  at::Tensor out = at::empty({B, L, H * hd}, q.options());  // [B, L, H·hd]
  if (probs != nullptr) *probs = at::zeros({B, H, L, L}, q.options());
  at::parallel_for(0, B * H * blocks, 1, [&](std::int64_t begin, std::int64_t end) {
    kernels::OneBlasThreadHere one_blas_thread;
    for (std::int64_t item = begin; item < end; ++item) {
      // Within a head, blocks in the order 0, last, 1, last - 1, …: block i costs about i + 1
      // units, so any run of consecutive items, as at::parallel_for hands them to a thread, holds
      // cheap and dear blocks alike (in order 0, 1, …, a thread that got the first half of a head
      // got its cheap half, and 2 threads over 9 heads differed by a tenth).
      const std::int64_t j = item % blocks, block = j % 2 == 0 ? j / 2 : blocks - 1 - j / 2;
      const std::int64_t b = item / (H * blocks), h = item / blocks % H, r0 = block * kQueryBlock;
      const std::int64_t rows = std::min(kQueryBlock, L - r0);
      // Keys [c0, r0 + rows): the last query of the block sees up to itself; with a window the
      // first query sees nothing before r0 - window + 1.
      const std::int64_t c0 = window > 0 ? std::max<std::int64_t>(0, r0 - window + 1) / kQueryBlock * kQueryBlock : 0;
      const std::int64_t cols = r0 + rows - c0;
      const at::Tensor kv_k = k.select(0, b).select(0, h / group).narrow(0, c0, cols);  // [cols, hd]
      const at::Tensor kv_v = v.select(0, b).select(0, h / group).narrow(0, c0, cols);
      at::Tensor scores = at::mm(q.select(0, b).select(0, h).narrow(0, r0, rows), kv_k.t());  // [rows, cols]
      if (scale != 1.0) scores.mul_(scale);  // as kernels::fp32_bmm scales
      at::Tensor p = probabilities(scores, mask.narrow(0, r0, rows).narrow(1, c0, cols));
      if (probs != nullptr) probs->select(0, b).select(0, h).narrow(0, r0, rows).narrow(1, c0, cols).copy_(p);
      at::Tensor o = out.select(0, b).narrow(0, r0, rows).narrow(1, h * hd, hd);  // row stride H·hd: written in place
      at::mm_out(o, p, kv_v);
    }
  });
  return out;
}

}  // namespace qeval
