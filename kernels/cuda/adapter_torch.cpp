// at::Tensor → raw-pointer CUDA kernels (kernels/cuda/adapter_torch.h). Only checks, layout
// fix-ups (contiguous, zero padding) and the call on the current stream live here.
#include "kernels/cuda/adapter_torch.h"

#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/util/intrusive_ptr.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <list>
#include <mutex>
#include <string>
#include <tuple>

#include "kernels/cuda/absmax_quantize.h"
#include "kernels/cuda/fused_attention_stats.h"
#include "kernels/cuda/gemm_cublaslt.h"
#include "kernels/cuda/int8_epilogue.h"
#include "kernels/cuda/int8_linear.h"
#include "kernels/cuda/w4_dequantize.h"
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

std::int64_t round_up(std::int64_t v, std::int64_t multiple) { return (v + multiple - 1) / multiple * multiple; }

FloatType float_type(at::ScalarType t, const char* op, const char* name) {
  switch (t) {
    case at::kFloat: return FloatType::f32;
    case at::kHalf: return FloatType::f16;
    case at::kBFloat16: return FloatType::bf16;
    default: TORCH_CHECK(false, op, ": ", name, " must be float, half or bfloat16, got ", t);
  }
  return FloatType::f32;
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
  const FloatType out_type = float_type(out_dtype, "int8_gemm_cuda", "the output");
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
  args.out_type = out_type;
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
  TORCH_CHECK(x_in.dim() == 2, "absmax_quantize_cuda: expected x [M, K], got ", x_in.sizes());
  const FloatType x_type = float_type(x_in.scalar_type(), "absmax_quantize_cuda", "x");
  TORCH_CHECK(rows_per_scale > 0, "absmax_quantize_cuda: rows_per_scale must be positive, got ", rows_per_scale);
  const c10::cuda::CUDAGuard guard(x_in.device());
  at::Tensor x = x_in.contiguous();
  const std::int64_t M = x.size(0), K = x.size(1), rows = std::min(rows_per_scale, M);
  at::Tensor q = at::empty({M, K}, x.options().dtype(at::kChar));
  at::Tensor scales = at::empty({(M + rows - 1) / rows}, x.options().dtype(at::kFloat));
  absmax_quantize_int8(x.data_ptr(), x_type, M, K, rows,
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

// ---- attention and hidden-state statistics (kernels/cuda/fused_attention_stats.h) ----

std::string fused_attention_stats_cuda_unsupported(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v) {
  if (!q.defined() || !k.defined() || !v.defined() || !q.is_cuda() || !k.is_cuda() || !v.is_cuda())
    return "operands not on a CUDA device";
  if (q.device() != k.device() || q.device() != v.device()) return "operands on different devices";
  if (q.scalar_type() != k.scalar_type() || q.scalar_type() != v.scalar_type()) return "operands of different dtypes";
  if (q.scalar_type() != at::kFloat && q.scalar_type() != at::kHalf && q.scalar_type() != at::kBFloat16)
    return "dtype other than float, half or bfloat16";
  if (q.dim() != 4 || k.dim() != 4 || v.dim() != 4) return "operands not [B, H, L, hd]";
  if (k.sizes() != v.sizes() || k.size(0) != q.size(0) || k.size(2) != q.size(2) || k.size(3) != q.size(3))
    return "k and v not [B, Hkv, L, hd] with q's B, L and hd";
  FusedAttentionArgs a;
  a.batch = q.size(0), a.heads = q.size(1), a.kv_heads = k.size(1), a.length = q.size(2), a.head_dim = q.size(3);
  a.q = a.k = a.v = a.out = reinterpret_cast<void*>(1);  // shapes only
  return fused_attention_unsupported_reason(a);
}

// QEVAL_ATTENTION_STATS_CORES=tensor: the statistics-only pass on tensor cores
// (kernels/cuda/attention_stats_tensor_cores.h), opt-in until a GPU run has verified it.
namespace {
bool statistics_on_tensor_cores() {
  static const bool tensor = [] {
    const char* v = std::getenv("QEVAL_ATTENTION_STATS_CORES");
    return v != nullptr && std::string(v) == "tensor";
  }();
  return tensor;
}
}  // namespace

at::Tensor fused_attention_stats_cuda(const at::Tensor& q_in, const at::Tensor& k_in, const at::Tensor& v_in,
                                      std::int64_t window, double scale, double softcap, bool softmax_one,
                                      std::int64_t sink_T, std::int64_t stats_window, at::Tensor* head_sums,
                                      bool with_output) {
  const std::string why = fused_attention_stats_cuda_unsupported(q_in, k_in, v_in);
  TORCH_CHECK(why.empty(), "fused_attention_stats_cuda: ", why, " (q ", q_in.sizes(), ", k ", k_in.sizes(), ", v ",
              v_in.sizes(), ")");
  TORCH_CHECK(window >= 0 && stats_window >= 0, "fused_attention_stats_cuda: windows must be 0 (global) or positive, got ",
              window, " and ", stats_window);
  TORCH_CHECK(!head_sums || sink_T >= 1, "fused_attention_stats_cuda: sink T must be at least 1, got ", sink_T);
  const c10::cuda::CUDAGuard guard(q_in.device());
  // The kernel reads rows of hd contiguous elements at any batch, head and position strides.
  auto rows = [](const at::Tensor& t) { return t.stride(3) == 1 ? t : t.contiguous(); };
  const at::Tensor q = rows(q_in), k = rows(k_in), v = rows(v_in);
  const std::int64_t B = q.size(0), H = q.size(1), L = q.size(2), hd = q.size(3);
  TORCH_CHECK(with_output || head_sums, "fused_attention_stats_cuda: asked for neither the output nor the sums");
  at::Tensor out = with_output ? at::empty({B, L, H * hd}, q.options()) : at::Tensor();
  FusedAttentionArgs a;
  a.q = q.data_ptr(), a.k = k.data_ptr(), a.v = v.data_ptr(), a.out = with_output ? out.data_ptr() : nullptr;
  for (int n = 0; n < 3; ++n) a.q_strides[n] = q.stride(n), a.k_strides[n] = k.stride(n), a.v_strides[n] = v.stride(n);
  a.type = float_type(q.scalar_type(), "fused_attention_stats_cuda", "q");
  a.batch = B, a.heads = H, a.kv_heads = k.size(1), a.length = L, a.head_dim = hd;
  a.scale = static_cast<float>(scale);
  a.softcap = softcap > 0 ? static_cast<float>(softcap) : 0.0f;
  a.window = window;
  a.softmax_one = softmax_one;
  a.tensor_cores = statistics_on_tensor_cores();
  at::Tensor query_stats;
  if (head_sums) {
    query_stats = at::empty({3, B, H, L}, q.options().dtype(at::kFloat));
    *head_sums = at::empty({B, H, 4}, q.options().dtype(at::kDouble));
    a.query_stats = query_stats.data_ptr<float>();
    a.head_sums = head_sums->data_ptr<double>();
    a.sink_T = sink_T;
    a.stats_window = stats_window;
  }
  fused_attention(a, current_stream());
  return out;
}

at::Tensor hidden_stats_cuda(const at::Tensor& hidden_in) {
  const char* op = "hidden_stats_cuda";
  check_cuda(hidden_in, op, "hidden");
  TORCH_CHECK(hidden_in.dim() == 3, op, ": hidden must be [B, L, D], got ", hidden_in.sizes());
  const FloatType type = float_type(hidden_in.scalar_type(), op, "hidden");
  const std::int64_t B = hidden_in.size(0), L = hidden_in.size(1), D = hidden_in.size(2);
  TORCH_CHECK(B > 0 && L > 0 && D > 0 && D <= kHiddenStatsMaxChannels, op, ": needs B, L ≥ 1 and 1 ≤ D ≤ ",
              kHiddenStatsMaxChannels, ", got ", hidden_in.sizes());
  const c10::cuda::CUDAGuard guard(hidden_in.device());
  const at::Tensor x = hidden_in.contiguous();
  const auto dopts = x.options().dtype(at::kDouble);
  at::Tensor rows = at::empty({5, B * L}, dopts), out = at::empty({B, 9}, dopts);
  hidden_stats(x.data_ptr(), type, B, L, D, rows.data_ptr<double>(), out.data_ptr<double>(), current_stream());
  return out;
}

// ---- int8 linear: quantise + GEMM + epilogue in one call (kernels/cuda/int8_linear.h) ----

at::Tensor int8_linear_cuda(const at::Tensor& x_in, std::int64_t rows_per_scale, const at::Tensor& w_q,
                            const at::Tensor& w_scales, const at::Tensor& bias, at::ScalarType out_dtype,
                            std::int64_t out_rows_per_scale) {
  const char* op = "int8_linear_cuda";
  check_cuda(x_in, op, "x");
  check_cuda(w_q, op, "w_q");
  check_cuda(w_scales, op, "w_scales");
  TORCH_CHECK(x_in.dim() == 2, op, ": x must be [M, K], got ", x_in.sizes());
  const FloatType x_type = float_type(x_in.scalar_type(), op, "x");
  const FloatType out_type = float_type(out_dtype, op, "the output");
  const std::int64_t M = x_in.size(0), K = x_in.size(1);
  TORCH_CHECK(w_q.scalar_type() == at::kChar && w_q.dim() == 2 && w_q.size(1) == K, op,
              ": w_q must be int8 [N, K] with K = ", K, " (x's columns), got ", w_q.scalar_type(), " ", w_q.sizes());
  const std::int64_t N = w_q.size(0);
  TORCH_CHECK(w_scales.scalar_type() == at::kFloat && (w_scales.numel() == N || w_scales.numel() == 1), op,
              ": w_scales must be float [", N, "] or [1], got ", w_scales.scalar_type(), " ", w_scales.sizes());
  TORCH_CHECK(!bias.defined() || (bias.is_cuda() && bias.scalar_type() == at::kFloat && bias.numel() == N), op,
              ": bias must be a float CUDA tensor [", N, "] or undefined");
  TORCH_CHECK(rows_per_scale > 0, op, ": rows_per_scale must be positive, got ", rows_per_scale);
  TORCH_CHECK(out_rows_per_scale >= 0, op, ": out_rows_per_scale must be ≥ 0, got ", out_rows_per_scale);
  TORCH_CHECK(w_q.device() == x_in.device() && w_scales.device() == x_in.device() &&
                  (!bias.defined() || bias.device() == x_in.device()),
              op, ": x, w_q, w_scales and bias must be on one device");
  TORCH_CHECK(M > 0 && N > 0 && K > 0, op, ": empty shapes are not supported, got M ", M, ", N ", N, ", K ", K);
  const c10::cuda::CUDAGuard guard(x_in.device());

  // cuBLASLt IMMA wants K and N multiples of 4: zero-pad (padded products are 0 · 0, padded output
  // columns are sliced off; zero columns of x change no row's max).
  const std::int64_t Kp = round_up(K, 4), Np = round_up(N, 4);
  at::Tensor x = x_in.contiguous(), w = w_q.contiguous(), ws = w_scales.contiguous();
  at::Tensor b = bias.defined() ? bias.contiguous() : bias;
  if (Kp != K) {
    x = at::constant_pad_nd(x, {0, Kp - K});
    w = at::constant_pad_nd(w, {0, Kp - K});
  }
  if (Np != N) {
    w = at::constant_pad_nd(w, {0, 0, 0, Np - N});
    if (ws.numel() == N && N != 1) ws = at::constant_pad_nd(ws, {0, Np - N}, 1.0);
    if (b.defined()) b = at::constant_pad_nd(b, {0, Np - N});
  }
  const Int8LinearPlan& plan = int8_linear_plan(M, Np, Kp);
  at::Tensor out = at::empty({M, Np}, x.options().dtype(out_dtype));
  Int8LinearArgs args;
  args.x = x.data_ptr();
  args.x_type = x_type;
  args.m = M;
  args.n = Np;
  args.k = Kp;
  args.rows_per_scale = rows_per_scale;
  args.w_q = w.data_ptr<std::int8_t>();
  args.w_scales = ws.data_ptr<float>();
  args.w_per_channel = ws.numel() != 1;
  args.bias = b.defined() ? b.data_ptr<float>() : nullptr;
  args.out = out.data_ptr();
  args.out_type = out_type;
  args.out_rows_per_scale = out_rows_per_scale;
  const std::size_t bytes = int8_linear_workspace_bytes(args, plan);
  at::Tensor workspace = at::empty({static_cast<std::int64_t>(bytes)}, x.options().dtype(at::kByte));
  args.workspace = workspace.data_ptr();
  int8_linear(args, plan, current_stream());
  return Np != N ? out.narrow(1, 0, N).contiguous() : out;
}

std::string int8_linear_cuda_path(std::int64_t m, std::int64_t n, std::int64_t k) {
  TORCH_CHECK(m > 0 && n > 0 && k > 0, "int8_linear_cuda_path: sizes must be positive, got M ", m, ", N ", n, ", K ",
              k);
  return int8_linear_plan(m, round_up(n, 4), round_up(k, 4)).description;
}

// ---- 4-bit weights: W4A16 kernel at small M, dequantise + cuBLAS GEMM at evaluation sizes ----

namespace {

enum class W4Choice { automatic, kernel, dequantize };

W4Choice w4_choice_from_env() {
  static const W4Choice c = [] {
    const char* v = std::getenv("QEVAL_W4_LINEAR");
    const std::string s = v ? v : "auto";
    if (s == "kernel") return W4Choice::kernel;
    if (s == "dequantize") return W4Choice::dequantize;
    return W4Choice::automatic;
  }();
  return c;
}

using WeakImpl = c10::weak_intrusive_ptr<c10::TensorImpl, c10::UndefinedTensorImpl>;

// One cached Ŵ. The weak references keep each source's TensorImpl address from being reused
// while the entry exists (without keeping its storage alive), so address + version identify
// the data; an entry whose source died is dropped on the next lookup.
struct W4Entry {
  W4Entry(const at::Tensor& q, const at::Tensor& s, const at::Tensor& z)
      : qweight(q.getIntrusivePtr()), scales(s.getIntrusivePtr()), zeros(z.getIntrusivePtr()) {}
  WeakImpl qweight, scales, zeros;
  std::int64_t qv = 0, sv = 0, zv = 0, group = 0;
  at::ScalarType dtype = at::kHalf;
  at::Tensor w;  // [N, K] dtype
};

struct W4Cache {
  std::mutex mutex;
  std::list<W4Entry> entries;
  std::int64_t bytes = 0;
};

W4Cache& w4_cache() {
  static W4Cache* c = new W4Cache();  // never destroyed: tensors must not be freed after CUDA shuts down
  return *c;
}

std::int64_t w4_cache_budget_bytes(const at::Tensor& like) {
  const char* v = std::getenv("QEVAL_W4_DEQUANT_CACHE_MB");
  if (v) return std::max<std::int64_t>(0, std::atoll(v)) << 20;
  const auto* props = at::cuda::getDeviceProperties(like.device().index());
  return static_cast<std::int64_t>(props->totalGlobalMem / 4);
}

bool same(const WeakImpl& weak, const at::Tensor& t) {
  return !weak.expired() && weak._unsafe_get_target() == t.unsafeGetTensorImpl();
}

at::Tensor dequantize_w4(const at::Tensor& qw, const at::Tensor& s, const at::Tensor& z, std::int64_t K,
                         std::int64_t group_size, at::ScalarType dtype) {
  at::Tensor w = at::empty({qw.size(0), K}, s.options().dtype(dtype));
  w4_dequantize(qw.data_ptr<std::uint8_t>(), s.data_ptr<float>(), z.data_ptr<float>(), qw.size(0), K, group_size,
                w.data_ptr(), dtype == at::kHalf ? FloatType::f16 : FloatType::bf16, current_stream());
  return w;
}

// The cached Ŵ for these sources, dequantising (and caching, within the budget) on a miss.
// `cached` says whether the result is in the cache.
at::Tensor cached_dequantized(const at::Tensor& qw, const at::Tensor& s, const at::Tensor& z, std::int64_t K,
                              std::int64_t group_size, at::ScalarType dtype, bool* cached) {
  W4Cache& c = w4_cache();
  std::lock_guard<std::mutex> lock(c.mutex);
  for (auto it = c.entries.begin(); it != c.entries.end();) {
    if (it->qweight.expired() || it->scales.expired() || it->zeros.expired()) {
      c.bytes -= it->w.nbytes();
      it = c.entries.erase(it);
      continue;
    }
    if (same(it->qweight, qw) && same(it->scales, s) && same(it->zeros, z) && it->dtype == dtype &&
        it->group == group_size && it->qv == qw._version() && it->sv == s._version() && it->zv == z._version()) {
      *cached = true;
      return it->w;
    }
    ++it;
  }
  at::Tensor w = dequantize_w4(qw, s, z, K, group_size, dtype);
  *cached = c.bytes + static_cast<std::int64_t>(w.nbytes()) <= w4_cache_budget_bytes(qw);
  if (*cached) {
    W4Entry e(qw, s, z);
    e.qv = qw._version(), e.sv = s._version(), e.zv = z._version();
    e.group = group_size;
    e.dtype = dtype;
    e.w = w;
    c.bytes += static_cast<std::int64_t>(w.nbytes());
    c.entries.push_back(std::move(e));
  }
  return w;
}

}  // namespace

void w4_linear_cuda_clear_cache() {
  W4Cache& c = w4_cache();
  std::lock_guard<std::mutex> lock(c.mutex);
  c.entries.clear();
  c.bytes = 0;
}

at::Tensor w4_linear_cuda(const at::Tensor& x_in, const at::Tensor& qweight, const at::Tensor& scales,
                          const at::Tensor& zeros, std::int64_t group_size, const at::Tensor& bias,
                          std::string* chosen) {
  const char* op = "w4_linear_cuda";
  check_cuda(x_in, op, "x");
  check_cuda(qweight, op, "qweight");
  check_cuda(scales, op, "scales");
  check_cuda(zeros, op, "zeros");
  TORCH_CHECK(x_in.dim() == 2 && (x_in.scalar_type() == at::kHalf || x_in.scalar_type() == at::kBFloat16), op,
              ": x must be half or bfloat16 [M, K], got ", x_in.scalar_type(), " ", x_in.sizes());
  const std::int64_t M = x_in.size(0), K = x_in.size(1), N = qweight.size(0);
  TORCH_CHECK(group_size > 0, op, ": group size must be positive, got ", group_size);
  const std::int64_t G = (K + std::min(group_size, K) - 1) / std::min(group_size, K);
  TORCH_CHECK(qweight.scalar_type() == at::kByte && qweight.dim() == 2 && qweight.size(1) == (K + 1) / 2, op,
              ": qweight must be uint8 [N, ", (K + 1) / 2, "], got ", qweight.scalar_type(), " ", qweight.sizes());
  TORCH_CHECK(scales.scalar_type() == at::kFloat && zeros.scalar_type() == at::kFloat &&
                  scales.sizes() == at::IntArrayRef({N, G}) && zeros.sizes() == at::IntArrayRef({N, G}),
              op, ": scales and zeros must be float [", N, ", ", G, "], got ", scales.sizes(), " and ", zeros.sizes());
  TORCH_CHECK(!bias.defined() || (bias.is_cuda() && bias.scalar_type() == at::kFloat && bias.numel() == N), op,
              ": bias must be a float CUDA tensor [", N, "] or undefined");
  TORCH_CHECK(M > 0 && N > 0 && K > 0, op, ": empty shapes are not supported");
  const c10::cuda::CUDAGuard guard(x_in.device());
  at::Tensor x = x_in.contiguous(), qw = qweight.contiguous(), s = scales.contiguous(), z = zeros.contiguous();

  W4A16Args args;
  args.x = x.data_ptr();
  args.qweight = qw.data_ptr<std::uint8_t>();
  args.scales = s.data_ptr<float>();
  args.zeros = z.data_ptr<float>();
  args.m = M, args.n = N, args.k = K, args.group_size = group_size;
  const bool kernel_fits = x.scalar_type() == at::kHalf && w4a16_tensor_core_unsupported_reason(args).empty();
  const W4Choice want = w4_choice_from_env();
  const bool use_kernel = x.scalar_type() == at::kHalf &&
                          (want == W4Choice::kernel || (want == W4Choice::automatic && kernel_fits && M <= kW4KernelMaxM));
  if (use_kernel) {
    at::Tensor bb = bias.defined() ? bias.contiguous() : bias;
    at::Tensor y = at::empty({M, N}, x.options());
    args.bias = bb.defined() ? bb.data_ptr<float>() : nullptr;
    args.y = y.data_ptr();
    const W4A16Kernel kernel = kernel_fits ? W4A16Kernel::tensor_core : W4A16Kernel::simple;
    w4a16_gemm(args, kernel, current_stream());
    if (chosen) *chosen = "w4a16 " + to_string(kernel) + " kernel";
    return y;
  }
  bool cached = false;
  const at::Tensor w = cached_dequantized(qw, s, z, K, group_size, x.scalar_type(), &cached);
  at::Tensor y = at::empty({M, N}, x.options());
  half_gemm(x.data_ptr(), w.data_ptr(), y.data_ptr(), M, N, K,
            x.scalar_type() == at::kHalf ? FloatType::f16 : FloatType::bf16, current_stream());
  if (bias.defined()) y.add_(bias);  // computed in fp32, rounded once more to x's dtype
  if (chosen)
    *chosen = std::string("dequantise") + (cached ? " (cached)" : "") + " + cublaslt " +
              (x.scalar_type() == at::kHalf ? "fp16" : "bf16") + " GEMM";
  return y;
}

}  // namespace qeval::kernels::cuda
