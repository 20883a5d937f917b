// Dispatch for the device-side statistics (kernels/attention_statistics.h).
#include "kernels/attention_statistics.h"

#include <c10/util/Exception.h>

#include "kernels/cuda/device.h"
#ifdef QEVAL_TORCH_HAS_CUDA
#include "kernels/cuda/adapter_torch.h"
#include "kernels/cuda/fused_attention_stats.h"
#endif

namespace qeval::kernels {

std::string fused_attention_stats_unsupported(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v) {
  if (!q.is_cuda()) return "not a CUDA tensor";
#ifdef QEVAL_TORCH_HAS_CUDA
  if (!cuda::kernels_built()) return "qeval was built without CUDA kernels";
  return cuda::fused_attention_stats_cuda_unsupported(q, k, v);
#else
  return "this build's LibTorch has no CUDA";
#endif
}

at::Tensor fused_attention_stats(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, std::int64_t window,
                                 double scale, double softcap, bool softmax_one, std::int64_t sink_T,
                                 std::int64_t stats_window, at::Tensor* head_sums, bool with_output) {
  const std::string why = fused_attention_stats_unsupported(q, k, v);
  TORCH_CHECK(why.empty(), "fused_attention_stats: ", why);
#ifdef QEVAL_TORCH_HAS_CUDA
  return cuda::fused_attention_stats_cuda(q, k, v, window, scale, softcap, softmax_one, sink_T, stats_window, head_sums,
                                         with_output);
#else
  return {};
#endif
}

std::string hidden_stats_unsupported(const at::Tensor& hidden) {
  if (!hidden.is_cuda()) return "not a CUDA tensor";
#ifdef QEVAL_TORCH_HAS_CUDA
  if (!cuda::kernels_built()) return "qeval was built without CUDA kernels";
  if (hidden.dim() != 3) return "not [B, L, D]";
  const auto t = hidden.scalar_type();
  if (t != at::kFloat && t != at::kHalf && t != at::kBFloat16) return "dtype other than float, half or bfloat16";
  if (hidden.numel() == 0) return "empty";
  if (hidden.size(2) > cuda::kHiddenStatsMaxChannels) return "more channels than the kernel stages";
  return "";
#else
  return "this build's LibTorch has no CUDA";
#endif
}

at::Tensor hidden_stats(const at::Tensor& hidden) {
  const std::string why = hidden_stats_unsupported(hidden);
  TORCH_CHECK(why.empty(), "hidden_stats: ", why);
#ifdef QEVAL_TORCH_HAS_CUDA
  return cuda::hidden_stats_cuda(hidden);
#else
  return {};
#endif
}

}  // namespace qeval::kernels
