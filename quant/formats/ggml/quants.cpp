// The ggml type table, fp16 rounding, and the by-type dispatch of quant/formats/ggml/quants.h: rows
// quantised in parallel (at::parallel_for), and the ATen wrappers.
#include "quant/formats/ggml/quants.h"

#include <ATen/Parallel.h>
#include <c10/util/Exception.h>
#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstring>
#include <vector>

#include "common/error.h"
#include "kernels/cpu/cpu_isa.h"
#include "kernels/large_tensor.h"
#include "quant/formats/ggml/quants_internal.h"  // no contraction in fp32_to_fp16

namespace qeval {

namespace {

template <typename Block>
constexpr GgmlQuantType entry(GgmlType t, const char* name, int elements) {
  return {t, name, elements, static_cast<int>(sizeof(Block))};
}

using RowQuantizer = void (*)(const float*, void*, std::int64_t, const float*);
using RowDequantizer = void (*)(const void*, float*, std::int64_t);

using RowRoundTrip = void (*)(const float*, float*, std::int64_t);

// A type's row functions, and where this CPU has one, a fused round trip with their bits
// (quant/formats/ggml/legacy_round_trip_avx512.cpp: Q8_0 and Q4_0 on AVX-512).
struct RowFunctions {
  RowQuantizer quantize;
  RowDequantizer dequantize;
  RowRoundTrip round_trip = nullptr;
};

RowFunctions row_functions(GgmlType t) {
  const bool avx512 = kernels::cpu::cpu_runs(kernels::cpu::CpuIsa::avx512);
  switch (t) {
    case GgmlType::Q4_0: return {quantize_row_q4_0, dequantize_row_q4_0, avx512 ? q4_0_round_trip_avx512 : nullptr};
    case GgmlType::Q4_1: return {quantize_row_q4_1, dequantize_row_q4_1};
    case GgmlType::Q5_0: return {quantize_row_q5_0, dequantize_row_q5_0};
    case GgmlType::Q5_1: return {quantize_row_q5_1, dequantize_row_q5_1};
    case GgmlType::Q8_0: return {quantize_row_q8_0, dequantize_row_q8_0, avx512 ? q8_0_round_trip_avx512 : nullptr};
    case GgmlType::Q2_K: return {quantize_row_q2_K, dequantize_row_q2_K};
    case GgmlType::Q3_K: return {quantize_row_q3_K, dequantize_row_q3_K};
    case GgmlType::Q4_K: return {quantize_row_q4_K, dequantize_row_q4_K};
    case GgmlType::Q5_K: return {quantize_row_q5_K, dequantize_row_q5_K};
    case GgmlType::Q6_K: return {quantize_row_q6_K, dequantize_row_q6_K};
    case GgmlType::IQ4_NL: return {quantize_row_iq4_nl, dequantize_row_iq4_nl};
    case GgmlType::MXFP4: return {quantize_row_mxfp4, dequantize_row_mxfp4};
    default: break;
  }
  ggml_quant_type(t);  // throws with the list
  return {nullptr, nullptr};
}

// Rows per parallel task: the K-quants cost about 20 µs per 256 values, so a few rows of a
// real weight (K >= 576) already outweigh the task overhead.
constexpr std::int64_t kRowsPerTask = 4;

}  // namespace

const std::vector<GgmlQuantType>& ggml_quant_types() {
  static const std::vector<GgmlQuantType> types = {
      entry<block_q4_0>(GgmlType::Q4_0, "Q4_0", QK4_0),     entry<block_q4_1>(GgmlType::Q4_1, "Q4_1", QK4_1),
      entry<block_q5_0>(GgmlType::Q5_0, "Q5_0", QK5_0),     entry<block_q5_1>(GgmlType::Q5_1, "Q5_1", QK5_1),
      entry<block_q8_0>(GgmlType::Q8_0, "Q8_0", QK8_0),     entry<block_q2_K>(GgmlType::Q2_K, "Q2_K", QK_K),
      entry<block_q3_K>(GgmlType::Q3_K, "Q3_K", QK_K),      entry<block_q4_K>(GgmlType::Q4_K, "Q4_K", QK_K),
      entry<block_q5_K>(GgmlType::Q5_K, "Q5_K", QK_K),      entry<block_q6_K>(GgmlType::Q6_K, "Q6_K", QK_K),
      entry<block_iq4_nl>(GgmlType::IQ4_NL, "IQ4_NL", QK4_NL), entry<block_mxfp4>(GgmlType::MXFP4, "MXFP4", QK_MXFP4),
  };
  return types;
}

std::string ggml_quant_type_names() {
  std::string out;
  for (const auto& t : ggml_quant_types()) out += (out.empty() ? "" : ", ") + std::string(t.name);
  return out;
}

const GgmlQuantType& ggml_quant_type(GgmlType type) {
  for (const auto& t : ggml_quant_types())
    if (t.type == type) return t;
  fail("ggml type {} is not one qeval quantises to; the types are {}", static_cast<std::uint32_t>(type),
       ggml_quant_type_names());
}

GgmlType ggml_quant_type_from_name(const std::string& name) {
  std::string upper = name;
  std::transform(upper.begin(), upper.end(), upper.begin(), [](unsigned char c) { return std::toupper(c); });
  for (const auto& t : ggml_quant_types())
    if (upper == t.name) return t.type;
  fail("unknown ggml quantisation type '{}'; the types are {}", name, ggml_quant_type_names());
}

// The FP16 library's conversion (as ggml_compute_fp32_to_fp16): scaling |f| by 2^112 and then
// 2^-110 rounds its mantissa to 11 bits (to nearest even) and sends too-large values to
// infinity in float32 itself; adding a power of two with the right exponent then aligns the
// result's bits with binary16's, subnormals included.
ggml_half fp32_to_fp16(float f) {
  auto bits_of = [](float v) {
    std::uint32_t u;
    std::memcpy(&u, &v, 4);
    return u;
  };
  auto from_bits = [](std::uint32_t u) {
    float v;
    std::memcpy(&v, &u, 4);
    return v;
  };
  const float scale_to_inf = 0x1.0p+112f;
  const float scale_to_zero = 0x1.0p-110f;
  float base = (std::fabs(f) * scale_to_inf) * scale_to_zero;
  const std::uint32_t w = bits_of(f);
  const std::uint32_t shl1_w = w + w;
  const std::uint32_t sign = w & 0x80000000u;
  std::uint32_t bias = shl1_w & 0xFF000000u;
  if (bias < 0x71000000u) bias = 0x71000000u;
  base = from_bits((bias >> 1) + 0x07800000u) + base;
  const std::uint32_t bits = bits_of(base);
  const std::uint32_t exp_bits = (bits >> 13) & 0x00007C00u;
  const std::uint32_t mantissa_bits = bits & 0x00000FFFu;
  const std::uint32_t nonsign = exp_bits + mantissa_bits;
  return static_cast<ggml_half>((sign >> 16) | (shl1_w > 0xFF000000u ? 0x7E00u : nonsign));
}

bool ggml_type_uses_importance(GgmlType type) {
  ggml_quant_type(type);  // throws for a type qeval does not quantise to
  return type != GgmlType::Q8_0 && type != GgmlType::MXFP4;
}

void quantize_rows_ggml(GgmlType type, const float* x, void* blocks, std::int64_t rows, std::int64_t row_length,
                        const float* importance) {
  const GgmlQuantType& t = ggml_quant_type(type);
  QEVAL_CHECK(rows >= 0 && row_length >= 0 && row_length % t.block_elements == 0,
              "quantize {}: rows of {} values are not whole {}-value blocks", t.name, row_length, t.block_elements);
  const RowFunctions f = row_functions(type);
  const std::int64_t row_bytes = row_length / t.block_elements * t.block_bytes;
  auto* out = static_cast<std::uint8_t*>(blocks);
  at::parallel_for(0, rows, kRowsPerTask, [&](std::int64_t begin, std::int64_t end) {
    for (std::int64_t r = begin; r < end; ++r)
      f.quantize(x + r * row_length, out + r * row_bytes, row_length, importance);
  });
}

void dequantize_rows_ggml(GgmlType type, const void* blocks, float* y, std::int64_t rows, std::int64_t row_length) {
  const GgmlQuantType& t = ggml_quant_type(type);
  QEVAL_CHECK(rows >= 0 && row_length >= 0 && row_length % t.block_elements == 0,
              "dequantize {}: rows of {} values are not whole {}-value blocks", t.name, row_length, t.block_elements);
  const RowFunctions f = row_functions(type);
  const std::int64_t row_bytes = row_length / t.block_elements * t.block_bytes;
  const auto* in = static_cast<const std::uint8_t*>(blocks);
  at::parallel_for(0, rows, kRowsPerTask, [&](std::int64_t begin, std::int64_t end) {
    for (std::int64_t r = begin; r < end; ++r) f.dequantize(in + r * row_bytes, y + r * row_length, row_length);
  });
}

namespace {

at::Tensor checked_weight(const at::Tensor& w, const GgmlQuantType& t, const char* op) {
  QEVAL_CHECK(w.dim() == 2, "{}: expected a [N, K] weight, got {} dimensions", op, w.dim());
  QEVAL_CHECK(w.scalar_type() == at::kFloat, "{}: expected a float32 weight, got {}", op,
              std::string(c10::toString(w.scalar_type())));
  QEVAL_CHECK(w.device().is_cpu(), "{}: expected a CPU weight, got one on {}", op, w.device().str());
  QEVAL_CHECK(w.size(1) % t.block_elements == 0,
              "{}: {} needs rows (K = in_features) that are a multiple of {}, got K = {}", op, t.name,
              t.block_elements, w.size(1));
  return w.contiguous();
}

// importance: [K] (every row) or [E, K] (the N rows in E equal groups, group e weighted by row e:
// llama.cpp's per-expert slices of a 3-D expert tensor), float32, CPU, finite (llama-quantize
// refuses an imatrix with a non-finite value). Returns it contiguous as [E, K] (E = 1 for [K]).
at::Tensor checked_importance(const at::Tensor& importance, std::int64_t n, std::int64_t k, const char* op) {
  QEVAL_CHECK(importance.dim() == 1 || importance.dim() == 2,
              "{}: expected importance of shape [K] or [E, K], got {} dimensions", op, importance.dim());
  QEVAL_CHECK(importance.scalar_type() == at::kFloat, "{}: expected float32 importance, got {}", op,
              std::string(c10::toString(importance.scalar_type())));
  QEVAL_CHECK(importance.device().is_cpu(), "{}: expected CPU importance, got it on {}", op, importance.device().str());
  const at::Tensor q = importance.dim() == 1 ? importance.reshape({1, -1}).contiguous() : importance.contiguous();
  QEVAL_CHECK(q.size(1) == k, "{}: importance has {} columns, the weight has K = {}", op, q.size(1), k);
  QEVAL_CHECK(q.size(0) >= 1 && n % q.size(0) == 0,
              "{}: importance has {} rows (experts), which do not divide the weight's N = {} rows", op, q.size(0), n);
  const float* p = q.data_ptr<float>();
  for (std::int64_t i = 0; i < q.numel(); ++i)
    QEVAL_CHECK(std::isfinite(p[i]), "{}: importance value {} at [{}, {}] is not finite", op, p[i], i / k, i % k);
  return q;
}

// The importance row for weight row r (of n) from a checked [E, K] importance; null without one.
const float* importance_row(const at::Tensor* q, std::int64_t r, std::int64_t n) {
  if (q == nullptr) return nullptr;
  return q->data_ptr<float>() + (r / (n / q->size(0))) * q->size(1);
}

at::Tensor quantize_with(const at::Tensor& w, GgmlType type, const at::Tensor* importance) {
  const GgmlQuantType& t = ggml_quant_type(type);
  const at::Tensor x = checked_weight(w, t, "quantize_ggml");
  const std::int64_t n = x.size(0), k = x.size(1);
  at::Tensor out = at::empty({n, k / t.block_elements * t.block_bytes}, at::kByte);
  if (importance == nullptr) {
    quantize_rows_ggml(type, x.data_ptr<float>(), out.data_ptr<std::uint8_t>(), n, k);
    return out;
  }
  const at::Tensor q = checked_importance(*importance, n, k, "quantize_ggml");
  const std::int64_t group = n / q.size(0);
  for (std::int64_t e = 0; e < q.size(0); ++e)
    quantize_rows_ggml(type, x.data_ptr<float>() + e * group * k, out.data_ptr<std::uint8_t>() + e * group * out.size(1),
                       group, k, q.data_ptr<float>() + e * k);
  return out;
}

at::Tensor quantize_dequantize_with(const at::Tensor& w, GgmlType type, const at::Tensor* importance) {
  const GgmlQuantType& t = ggml_quant_type(type);
  const at::Tensor x = checked_weight(w, t, "quantize_dequantize_ggml");
  const std::int64_t n = x.size(0), k = x.size(1);
  at::Tensor q;
  if (importance != nullptr) q = checked_importance(*importance, n, k, "quantize_dequantize_ggml");
  const at::Tensor* qp = importance != nullptr ? &q : nullptr;
  // Row by row, each row's blocks in a buffer that stays in cache: one pass over the weight and no
  // blocks tensor, where quantising every row and then dequantising every row read and wrote the
  // blocks through memory. The same functions, so the same bits (tests/quant/ggml_quants_test.cpp).
  at::Tensor out = kernels::empty_written_once({n, k}, at::kFloat);
  const RowFunctions f = row_functions(type);
  // The fused round trips are the types' plain rules: with importance only where the type ignores it.
  const bool fused = f.round_trip != nullptr && (qp == nullptr || !ggml_type_uses_importance(type));
  const std::int64_t row_bytes = k / t.block_elements * t.block_bytes;
  const float* px = x.data_ptr<float>();
  float* py = out.data_ptr<float>();
  at::parallel_for(0, n, kRowsPerTask, [&](std::int64_t begin, std::int64_t end) {
    if (fused) {
      for (std::int64_t r = begin; r < end; ++r) f.round_trip(px + r * k, py + r * k, k);
      return;
    }
    std::vector<std::uint8_t> row(static_cast<std::size_t>(row_bytes));
    for (std::int64_t r = begin; r < end; ++r) {
      f.quantize(px + r * k, row.data(), k, importance_row(qp, r, n));
      f.dequantize(row.data(), py + r * k, k);
    }
  });
  return out;
}

}  // namespace

at::Tensor quantize_ggml(const at::Tensor& w, GgmlType type) { return quantize_with(w, type, nullptr); }
at::Tensor quantize_ggml(const at::Tensor& w, GgmlType type, const at::Tensor& importance) {
  return quantize_with(w, type, &importance);
}
at::Tensor quantize_dequantize_ggml(const at::Tensor& w, GgmlType type) {
  return quantize_dequantize_with(w, type, nullptr);
}
at::Tensor quantize_dequantize_ggml(const at::Tensor& w, GgmlType type, const at::Tensor& importance) {
  return quantize_dequantize_with(w, type, &importance);
}

std::string ggml_type_label(GgmlType t) {
  if (t == GgmlType::F32) return "F32";
  if (t == GgmlType::F16) return "F16";
  return ggml_quant_type(t).name;
}

std::int64_t ggml_block_elements(GgmlType t) {
  if (t == GgmlType::F32 || t == GgmlType::F16) return 1;
  return ggml_quant_type(t).block_elements;
}

std::int64_t ggml_tensor_bytes(GgmlType t, std::int64_t rows, std::int64_t cols) {
  if (t == GgmlType::F32) return rows * cols * 4;
  if (t == GgmlType::F16) return rows * cols * 2;
  const GgmlQuantType& q = ggml_quant_type(t);
  return rows * (cols / q.block_elements) * q.block_bytes;
}

at::Tensor ggml_round_trip(const at::Tensor& w, GgmlType t) {
  if (t == GgmlType::F32) return w;
  if (t == GgmlType::F16) return w.to(at::kHalf).to(at::kFloat);  // c10::Half: nearest even, as ggml's conversion
  return quantize_dequantize_ggml(w, t);
}

}  // namespace qeval
