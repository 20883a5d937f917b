// at::Tensor → raw-pointer CUDA kernels (kernels/cuda/adapter_torch.h). Only checks, layout
// fix-ups (contiguous, zero padding) and the call on the current stream live here.
#include "kernels/cuda/adapter_torch.h"

#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>

#include <algorithm>
#include <cstdint>
#include <tuple>

#include "kernels/cuda/absmax_quantize.h"
#include "kernels/cuda/gemm_cublaslt.h"
#include "kernels/cuda/int8_epilogue.h"
#include "kernels/cuda/w4a16_gemm.h"

namespace qeval::kernels::cuda {
namespace {

Stream current_stream() { return at::cuda::getCurrentCUDAStream().stream(); }

void check_cuda(const at::Tensor& t, const char* op, const char* name) {
  TORCH_CHECK(t.defined() && t.is_cuda(), op, ": ", name, " must be a CUDA tensor");
}

at::Tensor pad_cols(const at::Tensor& t, std::int64_t multiple) {  // zero columns up to a multiple
  const std::int64_t extra = (multiple - t.size(1) % multiple) % multiple;
  return extra ? at::constant_pad_nd(t, {0, extra}) : t;
}

}  // namespace

at::Tensor int8_matmul_s32_cuda(const at::Tensor& a_in, const at::Tensor& b_in) {
  check_cuda(a_in, "int8_matmul_s32_cuda", "a");
  check_cuda(b_in, "int8_matmul_s32_cuda", "b");
  TORCH_CHECK(a_in.scalar_type() == at::kChar && b_in.scalar_type() == at::kChar && a_in.dim() == 2 &&
                  b_in.dim() == 2 && a_in.size(1) == b_in.size(1),
              "int8_matmul_s32_cuda: expected int8 a [M, K] and b [N, K], got ", a_in.sizes(), " and ", b_in.sizes());
  const c10::cuda::CUDAGuard guard(a_in.device());
  const std::int64_t M = a_in.size(0), N = b_in.size(0);
  at::Tensor a = pad_cols(a_in, 4).contiguous();
  at::Tensor b = pad_cols(b_in, 4);
  const std::int64_t n_pad = (4 - N % 4) % 4;
  if (n_pad) b = at::constant_pad_nd(b, {0, 0, 0, n_pad});  // zero weight rows, sliced off below
  b = b.contiguous();
  at::Tensor c = at::empty({M, b.size(0)}, a.options().dtype(at::kInt));
  int8_gemm_s32(a.data_ptr<std::int8_t>(), b.data_ptr<std::int8_t>(), c.data_ptr<std::int32_t>(), M, b.size(0),
                a.size(1), current_stream());
  return n_pad ? c.narrow(1, 0, N).contiguous() : c;
}

at::Tensor int8_gemm_cuda(const at::Tensor& a, const at::Tensor& b, const at::Tensor& a_scale,
                          const at::Tensor& b_scale, const at::Tensor& bias, at::ScalarType out_dtype,
                          std::int64_t out_rows_per_scale) {
  TORCH_CHECK(out_dtype == at::kFloat || out_dtype == at::kHalf, "int8_gemm_cuda: output must be float or half, got ",
              out_dtype);
  at::Tensor acc = int8_matmul_s32_cuda(a, b);
  const std::int64_t M = acc.size(0), N = acc.size(1);
  check_cuda(a_scale, "int8_gemm_cuda", "a_scale");
  check_cuda(b_scale, "int8_gemm_cuda", "b_scale");
  TORCH_CHECK(a_scale.scalar_type() == at::kFloat && (a_scale.numel() == M || a_scale.numel() == 1),
              "int8_gemm_cuda: a_scale must be float [", M, "] or [1], got ", a_scale.sizes());
  TORCH_CHECK(b_scale.scalar_type() == at::kFloat && (b_scale.numel() == N || b_scale.numel() == 1),
              "int8_gemm_cuda: b_scale must be float [", N, "] or [1], got ", b_scale.sizes());
  TORCH_CHECK(!bias.defined() || (bias.is_cuda() && bias.scalar_type() == at::kFloat && bias.numel() == N),
              "int8_gemm_cuda: bias must be a float CUDA tensor [", N, "]");
  const c10::cuda::CUDAGuard guard(a.device());
  at::Tensor sa = a_scale.contiguous(), sb = b_scale.contiguous();
  at::Tensor bb = bias.defined() ? bias.contiguous() : bias;
  at::Tensor out = at::empty({M, N}, acc.options().dtype(out_dtype));
  at::Tensor out_scales;
  Int8EpilogueArgs args;
  args.acc = acc.data_ptr<std::int32_t>();
  args.m = M;
  args.n = N;
  args.a_scales = sa.data_ptr<float>();
  args.a_rows_per_scale = sa.numel() == 1 ? M : 1;
  args.w_scales = sb.data_ptr<float>();
  args.w_per_channel = sb.numel() != 1;
  args.bias = bb.defined() ? bb.data_ptr<float>() : nullptr;
  args.out = out.data_ptr();
  args.out_type = out_dtype == at::kFloat ? FloatType::f32 : FloatType::f16;
  if (out_rows_per_scale > 0) {
    out_scales = at::empty({(M + out_rows_per_scale - 1) / out_rows_per_scale}, sa.options());
    args.out_rows_per_scale = out_rows_per_scale;
    args.out_scales = out_scales.data_ptr<float>();
  }
  int8_dequantize_epilogue(args, current_stream());
  return out;
}

std::tuple<at::Tensor, at::Tensor> absmax_quantize_cuda(const at::Tensor& x_in, std::int64_t rows_per_scale) {
  check_cuda(x_in, "absmax_quantize_cuda", "x");
  TORCH_CHECK(x_in.dim() == 2 && (x_in.scalar_type() == at::kFloat || x_in.scalar_type() == at::kHalf),
              "absmax_quantize_cuda: expected x [M, K] float or half, got ", x_in.scalar_type(), " ", x_in.sizes());
  TORCH_CHECK(rows_per_scale > 0, "absmax_quantize_cuda: rows_per_scale must be positive, got ", rows_per_scale);
  const c10::cuda::CUDAGuard guard(x_in.device());
  at::Tensor x = x_in.contiguous();
  const std::int64_t M = x.size(0), K = x.size(1), rows = std::min(rows_per_scale, M);
  at::Tensor q = at::empty({M, K}, x.options().dtype(at::kChar));
  at::Tensor scales = at::empty({(M + rows - 1) / rows}, x.options().dtype(at::kFloat));
  absmax_quantize_int8(x.data_ptr(), x.scalar_type() == at::kFloat ? FloatType::f32 : FloatType::f16, M, K, rows,
                       q.data_ptr<std::int8_t>(), scales.data_ptr<float>(), current_stream());
  return {q, scales};
}

at::Tensor w4a16_gemm_cuda(const at::Tensor& x_in, const at::Tensor& qweight, const at::Tensor& scales,
                           const at::Tensor& zeros, std::int64_t group_size, const at::Tensor& bias) {
  check_cuda(x_in, "w4a16_gemm_cuda", "x");
  check_cuda(qweight, "w4a16_gemm_cuda", "qweight");
  check_cuda(scales, "w4a16_gemm_cuda", "scales");
  check_cuda(zeros, "w4a16_gemm_cuda", "zeros");
  TORCH_CHECK(x_in.dim() == 2 && x_in.scalar_type() == at::kHalf, "w4a16_gemm_cuda: x must be half [M, K], got ",
              x_in.scalar_type(), " ", x_in.sizes());
  const std::int64_t M = x_in.size(0), K = x_in.size(1), N = qweight.size(0);
  TORCH_CHECK(group_size > 0, "w4a16_gemm_cuda: group size must be positive, got ", group_size);
  const std::int64_t G = (K + std::min(group_size, K) - 1) / std::min(group_size, K);
  TORCH_CHECK(qweight.scalar_type() == at::kByte && qweight.dim() == 2 && qweight.size(1) == (K + 1) / 2,
              "w4a16_gemm_cuda: qweight must be uint8 [N, ", (K + 1) / 2, "], got ", qweight.scalar_type(), " ",
              qweight.sizes());
  TORCH_CHECK(scales.scalar_type() == at::kFloat && zeros.scalar_type() == at::kFloat &&
                  scales.sizes() == at::IntArrayRef({N, G}) && zeros.sizes() == at::IntArrayRef({N, G}),
              "w4a16_gemm_cuda: scales and zeros must be float [", N, ", ", G, "], got ", scales.sizes(), " and ",
              zeros.sizes());
  TORCH_CHECK(!bias.defined() || (bias.is_cuda() && bias.scalar_type() == at::kFloat && bias.numel() == N),
              "w4a16_gemm_cuda: bias must be a float CUDA tensor [", N, "]");
  const c10::cuda::CUDAGuard guard(x_in.device());
  at::Tensor x = x_in.contiguous(), qw = qweight.contiguous(), s = scales.contiguous(), z = zeros.contiguous();
  at::Tensor bb = bias.defined() ? bias.contiguous() : bias;
  at::Tensor y = at::empty({M, N}, x.options());
  W4A16Args args;
  args.x = x.data_ptr();
  args.qweight = qw.data_ptr<std::uint8_t>();
  args.scales = s.data_ptr<float>();
  args.zeros = z.data_ptr<float>();
  args.bias = bb.defined() ? bb.data_ptr<float>() : nullptr;
  args.y = y.data_ptr();
  args.m = M;
  args.n = N;
  args.k = K;
  args.group_size = group_size;
  w4a16_gemm(args, W4A16Kernel::automatic, current_stream());
  return y;
}

// Composed from the kernels above (a first version: the issue-33 kernels replace it).
at::Tensor int8_linear_cuda(const at::Tensor& x, std::int64_t rows_per_scale, const at::Tensor& w_q,
                            const at::Tensor& w_scales, const at::Tensor& bias, at::ScalarType out_dtype,
                            std::int64_t out_rows_per_scale) {
  // bfloat16 widens to float exactly; the quantiser and epilogue take float and half.
  const bool via_float = x.scalar_type() == at::kBFloat16 || out_dtype == at::kBFloat16;
  at::Tensor xin = x.scalar_type() == at::kBFloat16 ? x.to(at::kFloat) : x;
  auto [q, scales] = absmax_quantize_cuda(xin, rows_per_scale);
  const std::int64_t M = x.size(0);
  at::Tensor a_scale = rows_per_scale == 1 ? scales : scales.repeat_interleave(rows_per_scale).narrow(0, 0, M).contiguous();
  if (!via_float) return int8_gemm_cuda(q, w_q, a_scale, w_scales, bias, out_dtype, out_rows_per_scale);
  at::Tensor y = int8_gemm_cuda(q, w_q, a_scale, w_scales, bias, at::kFloat, 0).to(out_dtype);
  if (out_rows_per_scale == 0) return y;
  // Output quantisation on the values as stored (bf16), in float maths.
  auto [qo, so] = absmax_quantize_cuda(y.to(at::kFloat), out_rows_per_scale);
  at::Tensor s_rows = out_rows_per_scale == 1 ? so : so.repeat_interleave(out_rows_per_scale).narrow(0, 0, M);
  return (qo.to(at::kFloat) * s_rows.unsqueeze(1)).to(out_dtype);
}

std::string int8_linear_cuda_path(std::int64_t, std::int64_t, std::int64_t) {
  return "absmax quantiser + cuBLASLt s8s32 GEMM + dequantising epilogue";
}

at::Tensor w4_linear_cuda(const at::Tensor& x, const at::Tensor& qweight, const at::Tensor& scales, const at::Tensor& zeros,
                          std::int64_t group_size, const at::Tensor& bias, std::string* chosen) {
  const std::int64_t M = x.size(0), K = x.size(1), N = qweight.size(0);
  if (x.scalar_type() == at::kHalf && M <= 16) {
    if (chosen) *chosen = "w4a16 kernel";
    return w4a16_gemm_cuda(x, qweight, scales, zeros, group_size, bias);
  }
  // Dequantise (q − z)·s in float32, round to x's dtype, one cuBLAS GEMM.
  const std::int64_t g = std::min(group_size, K), G = (K + g - 1) / g;
  at::Tensor codes = at::stack({qweight & 0x0F, at::bitwise_right_shift(qweight, 4)}, 2).reshape({N, -1}).narrow(1, 0, K);
  at::Tensor group = at::div(at::arange(K, x.options().dtype(at::kLong)), g, "floor");
  at::Tensor w = (codes.to(at::kFloat) - zeros.index_select(1, group)) * scales.index_select(1, group);
  (void)G;
  if (chosen) *chosen = "dequantise + cuBLAS GEMM";
  at::Tensor wd = w.to(x.scalar_type());
  return bias.defined() ? at::linear(x, wd, bias.to(x.scalar_type())) : at::linear(x, wd);
}

}  // namespace qeval::kernels::cuda
