// The whole int8 linear on the GPU (kernels/cuda/int8_linear.h) — every implementation the
// dispatcher can choose for a shape (each CUTLASS sm90 configuration when built and on an sm_90
// device, cuBLASLt + epilogue) — against a CPU loop written from DESIGN.md §5 and the epilogue
// order of kernels/int8_gemm.h: f32 outputs bit for bit, f16 / bf16 outputs equal to the f32
// reference rounded to nearest even. Also the 4-bit weight dequantisation (exact) and the bf16
// cuBLASLt GEMM (within the bf16 tolerance). Skipped, visibly, without a CUDA device.
#include <gtest/gtest.h>

#include <c10/util/BFloat16.h>
#include <c10/util/Half.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "kernels/cuda/device.h"
#include "kernels/cuda/gemm_cublaslt.h"
#include "kernels/cuda/int8_linear.h"
#include "kernels/cuda/w4_dequantize.h"

namespace cu = qeval::kernels::cuda;

#define QEVAL_REQUIRE_CUDA_DEVICE()                                                  \
  do {                                                                               \
    if (cu::device_count() == 0) GTEST_SKIP() << "no CUDA device: " << cu::no_device_reason(); \
  } while (0)

namespace {

float round_to(cu::FloatType type, float v) {
  switch (type) {
    case cu::FloatType::f16: return static_cast<float>(c10::Half(v));
    case cu::FloatType::bf16: return static_cast<float>(c10::BFloat16(v));
    case cu::FloatType::f32: break;
  }
  return v;
}

float element(const std::vector<std::uint8_t>& raw, std::size_t i, cu::FloatType type) {
  switch (type) {
    case cu::FloatType::f16: {
      c10::Half h;
      std::memcpy(&h, raw.data() + 2 * i, 2);
      return static_cast<float>(h);
    }
    case cu::FloatType::bf16: {
      c10::BFloat16 h;
      std::memcpy(&h, raw.data() + 2 * i, 2);
      return static_cast<float>(h);
    }
    case cu::FloatType::f32: break;
  }
  float f;
  std::memcpy(&f, raw.data() + 4 * i, 4);
  return f;
}

std::vector<std::uint8_t> to_bytes(const std::vector<float>& x, cu::FloatType type) {
  std::vector<std::uint8_t> raw(x.size() * cu::size_of(type));
  for (std::size_t i = 0; i < x.size(); ++i) {
    if (type == cu::FloatType::f16) {
      const c10::Half h(x[i]);
      std::memcpy(raw.data() + 2 * i, &h, 2);
    } else if (type == cu::FloatType::bf16) {
      const c10::BFloat16 h(x[i]);
      std::memcpy(raw.data() + 2 * i, &h, 2);
    } else {
      std::memcpy(raw.data() + 4 * i, &x[i], 4);
    }
  }
  return raw;
}

// DESIGN.md §5 (nearbyint rounds half to even in the default mode). volatile keeps the host
// compiler from contracting the epilogue's steps into FMAs, which the kernels do not do either.
float reference_scale(float amax) { return amax > 0.0f ? amax / 127.0f : 1.0f; }
float reference_round(float x, float s) { return std::clamp(std::nearbyint(x / s), -127.0f, 127.0f); }

struct Case {
  std::int64_t m, n, k;
  std::int64_t rows_per_scale = 1;
  bool w_per_channel = true, bias = true;
  cu::FloatType x_type = cu::FloatType::f16, out_type = cu::FloatType::f32;
  std::int64_t out_rows = 0;
  int extreme = 0;  // 0 random; ±1: every |q| = 127 with that sign of products
};

std::string describe(const Case& c) {
  return "M " + std::to_string(c.m) + ", N " + std::to_string(c.n) + ", K " + std::to_string(c.k) + ", rows/scale " +
         std::to_string(c.rows_per_scale) + ", w per channel " + std::to_string(c.w_per_channel) + ", bias " +
         std::to_string(c.bias) + ", x " + cu::to_string(c.x_type) + ", out " + cu::to_string(c.out_type) +
         ", out rows " + std::to_string(c.out_rows) + ", extreme " + std::to_string(c.extreme);
}

struct Inputs {
  std::vector<float> x, ws, bias, ref;
  std::vector<std::int8_t> w;
};

// Random inputs for the case and the CPU reference output.
Inputs make_case(const Case& c, std::uint32_t seed) {
  const std::int64_t M = c.m, N = c.n, K = c.k;
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_real_distribution<float> log_mag(-2.0f, 2.0f), scale_d(1e-4f, 2e-2f), bias_d(-3.0f, 3.0f);
  std::uniform_int_distribution<int> code(-127, 127);

  std::vector<float> x(static_cast<std::size_t>(M * K));
  for (std::int64_t m = 0; m < M; ++m) {
    const float mag = std::pow(10.0f, log_mag(rng));
    for (std::int64_t k = 0; k < K; ++k)
      x[m * K + k] = round_to(c.x_type, c.extreme ? 0.75f * mag : normal(rng) * mag);
  }
  if (M > 1 && !c.extreme)
    for (std::int64_t k = 0; k < K; ++k) x[K + k] = 0.0f;  // an all-zero row: scale 1
  std::vector<std::int8_t> w(static_cast<std::size_t>(N * K));
  for (auto& v : w) v = static_cast<std::int8_t>(c.extreme ? 127 * c.extreme : code(rng));
  std::vector<float> ws(static_cast<std::size_t>(c.w_per_channel ? N : 1)), bias(static_cast<std::size_t>(N));
  for (auto& v : ws) v = scale_d(rng);
  for (auto& v : bias) v = bias_d(rng);

  // Reference: quantise per group of rows, int64 sums (exact), the epilogue one rounding per step.
  const std::int64_t rows = std::min(c.rows_per_scale, M);
  std::vector<std::int8_t> q(x.size());
  std::vector<float> row_scale(static_cast<std::size_t>(M));
  for (std::int64_t r0 = 0; r0 < M; r0 += rows) {
    const std::int64_t r1 = std::min(M, r0 + rows);
    float amax = 0.0f;
    for (std::int64_t i = r0 * K; i < r1 * K; ++i) amax = std::max(amax, std::abs(x[i]));
    const float s = reference_scale(amax);
    for (std::int64_t i = r0 * K; i < r1 * K; ++i) q[i] = static_cast<std::int8_t>(reference_round(x[i], s));
    for (std::int64_t r = r0; r < r1; ++r) row_scale[r] = s;
  }
  std::vector<float> ref(static_cast<std::size_t>(M * N));
  for (std::int64_t m = 0; m < M; ++m)
    for (std::int64_t n = 0; n < N; ++n) {
      std::int64_t acc = 0;
      for (std::int64_t k = 0; k < K; ++k) acc += std::int64_t{q[m * K + k]} * w[n * K + k];
      volatile float v = static_cast<float>(static_cast<std::int32_t>(acc)) * row_scale[m];
      v = v * ws[c.w_per_channel ? n : 0];
      if (c.bias) v = v + bias[n];
      ref[m * N + n] = round_to(c.out_type, v);
    }
  if (c.out_rows > 0) {
    const std::int64_t orows = std::min(c.out_rows, M);
    for (std::int64_t r0 = 0; r0 < M; r0 += orows) {
      const std::int64_t begin = r0 * N, end = std::min(M, r0 + orows) * N;
      float amax = 0.0f;
      for (std::int64_t i = begin; i < end; ++i) amax = std::max(amax, std::abs(ref[i]));
      const float s = reference_scale(amax);
      for (std::int64_t i = begin; i < end; ++i) {
        volatile float v = reference_round(ref[i], s) * s;
        ref[i] = round_to(c.out_type, v);
      }
    }
  }

  return {x, ws, bias, ref, w};
}

// Runs `plan` on the case and compares with the reference.
void check_linear(const Case& c, const Inputs& in, const cu::Int8LinearPlan& plan) {
  SCOPED_TRACE(describe(c) + ", plan " + plan.description);
  const std::int64_t M = c.m, N = c.n, K = c.k;
  const auto& ref = in.ref;
  cu::DeviceArray<std::uint8_t> dx(to_bytes(in.x, c.x_type));
  cu::DeviceArray<std::int8_t> dw(in.w);
  cu::DeviceArray<float> dws(in.ws), dbias(in.bias);
  cu::DeviceArray<std::uint8_t> dout(static_cast<std::size_t>(M * N) * cu::size_of(c.out_type));
  cu::fill_bytes(dout.get(), 0xFF, dout.size());  // NaN in every type: an unwritten output fails
  cu::Int8LinearArgs a;
  a.x = dx.get();
  a.x_type = c.x_type;
  a.m = M, a.n = N, a.k = K;
  a.rows_per_scale = c.rows_per_scale;
  a.w_q = dw.get();
  a.w_scales = dws.get();
  a.w_per_channel = c.w_per_channel;
  a.bias = c.bias ? dbias.get() : nullptr;
  a.out = dout.get();
  a.out_type = c.out_type;
  a.out_rows_per_scale = c.out_rows;
  cu::DeviceArray<std::uint8_t> workspace(cu::int8_linear_workspace_bytes(a, plan));
  a.workspace = workspace.get();
  // The fused GEMM with and without programmatic dependent launch after the quantiser.
  for (bool pdl : {true, false}) {
    if (!pdl && plan.path != cu::Int8LinearPath::cutlass_sm90) break;
    SCOPED_TRACE(pdl ? "pdl" : "no pdl");
    cu::fill_bytes(workspace.get(), 0x5A, workspace.size());
    cu::fill_bytes(dout.get(), 0xFF, dout.size());
    a.pdl = pdl;
    const cu::Int8LinearPath ran = cu::int8_linear(a, plan);
    cu::synchronize();
    EXPECT_EQ(ran, plan.path) << "the plan's implementation did not run";

    const std::vector<std::uint8_t> raw = dout.to_host();
    std::size_t bad = 0, first = 0;
    for (std::size_t i = 0; i < ref.size(); ++i) {
      const float got = element(raw, i, c.out_type);
      if (!(got == ref[i]) && bad++ == 0) first = i;
    }
    EXPECT_EQ(bad, 0u) << bad << " of " << ref.size() << " outputs differ; first at [" << first / N << ", "
                       << first % N << "]: got " << element(raw, first, c.out_type) << ", expected " << ref[first];
  }
}

// Runs every candidate implementation of the case's shape against one reference.
void check_all_plans(const Case& c, std::uint32_t seed) {
  const std::vector<cu::Int8LinearPlan> plans = cu::int8_linear_candidates(c.m, c.n, c.k);
  ASSERT_FALSE(plans.empty());
  const Inputs in = make_case(c, seed);
  for (const auto& p : plans) check_linear(c, in, p);
}

}  // namespace

TEST(CudaInt8Linear, ShapeLimitsAreCheckedOnTheHost) {
  EXPECT_EQ(cu::int8_linear_unsupported_reason(8, 16, 64), "");
  EXPECT_NE(cu::int8_linear_unsupported_reason(8, 16, 62).find("int8_linear"), std::string::npos);
  EXPECT_NE(cu::int8_linear_unsupported_reason(8, 18, 64).find("N (the output's leading dimension)"),
            std::string::npos);
  EXPECT_EQ(cu::to_string(cu::Int8LinearPath::cutlass_sm90), "cutlass sm90 fused");
  EXPECT_EQ(cu::to_string(cu::Int8LinearPath::cublaslt_epilogue), "cublaslt + epilogue");
}

TEST(CudaInt8Linear, EveryImplementationExactOnRandomInputs) {
  QEVAL_REQUIRE_CUDA_DEVICE();
  std::uint32_t seed = 1;
  // GPT-2-like and odd shapes: M not a multiple of any tile, N and K at and off the TMA multiples
  // (K = 20 and 52 and N = 12 run cuBLASLt only), K deep enough for split-K.
  const std::int64_t shapes[][3] = {{64, 256, 768}, {130, 768, 768}, {33, 96, 4096}, {257, 2304, 768},
                                    {16, 40, 52},   {7, 12, 20},     {200, 520, 1040}};
  const cu::FloatType types[] = {cu::FloatType::f32, cu::FloatType::f16, cu::FloatType::bf16};
  for (const auto& s : shapes) {
    for (int v = 0; v < 3; ++v) {
      Case c{s[0], s[1], s[2]};
      c.x_type = types[v];
      c.out_type = types[(v + 1) % 3];
      c.rows_per_scale = v == 0 ? 1 : (v == 1 ? 4 : s[0]);  // per token, per sequence of 4, per tensor
      c.w_per_channel = v != 2;
      c.bias = v != 1;
      check_all_plans(c, seed++);
    }
  }
}

TEST(CudaInt8Linear, OutputTypesAreTheF32ResultRounded) {
  QEVAL_REQUIRE_CUDA_DEVICE();
  std::uint32_t seed = 50;
  for (cu::FloatType out : {cu::FloatType::f32, cu::FloatType::f16, cu::FloatType::bf16}) {
    Case c{256, 1024, 512};
    c.out_type = out;
    check_all_plans(c, seed++);
  }
}

TEST(CudaInt8Linear, ExactAtTheInt8Extremes) {
  QEVAL_REQUIRE_CUDA_DEVICE();
  // Every q = ±127 and every weight ±127: |Σ| = 127² · 8192 ≈ 1.3e8 > 2²⁴, so float(acc) rounds.
  for (int sign : {1, -1}) {
    Case c{136, 256, 8192};
    c.extreme = sign;
    c.out_type = cu::FloatType::f32;
    check_all_plans(c, 60 + sign);
  }
}

TEST(CudaInt8Linear, CoarseOutputQuantisationExact) {
  QEVAL_REQUIRE_CUDA_DEVICE();
  std::uint32_t seed = 70;
  for (cu::FloatType out : {cu::FloatType::f32, cu::FloatType::f16, cu::FloatType::bf16}) {
    Case c{24, 512, 256};
    c.rows_per_scale = 8;
    c.w_per_channel = false;
    c.out_type = out;
    c.out_rows = 8;  // one output scale per sequence of 8
    check_all_plans(c, seed++);
    c.out_rows = 24;  // one for the tensor
    check_all_plans(c, seed++);
  }
}

TEST(CudaInt8Linear, PlanIsTimedOnceAndCached) {
  QEVAL_REQUIRE_CUDA_DEVICE();
  const cu::Int8LinearPlan& first = cu::int8_linear_plan(128, 768, 768);
  const cu::Int8LinearPlan& again = cu::int8_linear_plan(128, 768, 768);
  EXPECT_EQ(&first, &again) << "a repeated shape built a new plan";
  EXPECT_FALSE(first.description.empty());
  const auto plans = cu::int8_linear_candidates(128, 768, 768);
  EXPECT_EQ(plans.back().path, cu::Int8LinearPath::cublaslt_epilogue);
  std::printf("int8 linear 128 x 768 x 768: %s (of %zu candidates; CUTLASS %s)\n", first.description.c_str(),
              plans.size(), cu::int8_linear_cutlass_built() ? "built" : "not built");
}

namespace {

void check_w4_dequantize(std::int64_t N, std::int64_t K, std::int64_t group, cu::FloatType out, std::uint32_t seed) {
  SCOPED_TRACE("N " + std::to_string(N) + ", K " + std::to_string(K) + ", group " + std::to_string(group) + ", " +
               cu::to_string(out));
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> byte(0, 255), zero(-20, 35);
  std::uniform_real_distribution<float> scale(1e-3f, 0.2f);
  const std::int64_t row_bytes = (K + 1) / 2, g = std::min(group, K), G = (K + g - 1) / g;
  std::vector<std::uint8_t> qw(static_cast<std::size_t>(N * row_bytes));
  for (auto& b : qw) b = static_cast<std::uint8_t>(byte(rng));
  std::vector<float> s(static_cast<std::size_t>(N * G)), z(s.size());
  for (auto& v : s) v = scale(rng);
  for (auto& v : z) v = static_cast<float>(zero(rng));
  cu::DeviceArray<std::uint8_t> dq(qw);
  cu::DeviceArray<float> ds(s), dz(z);
  cu::DeviceArray<std::uint8_t> dout(static_cast<std::size_t>(N * K) * cu::size_of(out));
  cu::w4_dequantize(dq.get(), ds.get(), dz.get(), N, K, group, dout.get(), out);
  cu::synchronize();
  const std::vector<std::uint8_t> raw = dout.to_host();
  for (std::int64_t n = 0; n < N; ++n)
    for (std::int64_t k = 0; k < K; ++k) {
      const unsigned code = (qw[n * row_bytes + k / 2] >> (4 * (k % 2))) & 15u;
      volatile float v = static_cast<float>(code) - z[n * G + k / g];
      v = v * s[n * G + k / g];
      const float want = round_to(out, v);
      ASSERT_EQ(element(raw, static_cast<std::size_t>(n * K + k), out), want) << "at [" << n << ", " << k << "]";
    }
}

}  // namespace

TEST(CudaW4Dequantize, ExactAgainstTheReferenceFormula) {
  QEVAL_REQUIRE_CUDA_DEVICE();
  std::uint32_t seed = 80;
  for (cu::FloatType out : {cu::FloatType::f32, cu::FloatType::f16, cu::FloatType::bf16}) {
    check_w4_dequantize(6, 256, 128, out, seed++);  // words path, groups of 128
    check_w4_dequantize(5, 64, 64, out, seed++);    // per channel
    check_w4_dequantize(3, 37, 16, out, seed++);    // odd K: one value per thread, padding nibble
    check_w4_dequantize(4, 40, 12, out, seed++);    // group not dividing 8: per-value group lookup
  }
}

TEST(CudaHalfGemm, Bf16WithinTolerance) {
  QEVAL_REQUIRE_CUDA_DEVICE();
  const std::int64_t M = 33, N = 64, K = 256;
  std::mt19937 rng(90);
  std::uniform_real_distribution<float> d(-1.0f, 1.0f);
  std::vector<float> x(static_cast<std::size_t>(M * K)), w(static_cast<std::size_t>(N * K));
  for (auto& v : x) v = round_to(cu::FloatType::bf16, d(rng));
  for (auto& v : w) v = round_to(cu::FloatType::bf16, d(rng));
  cu::DeviceArray<std::uint8_t> dx(to_bytes(x, cu::FloatType::bf16)), dw(to_bytes(w, cu::FloatType::bf16));
  cu::DeviceArray<std::uint8_t> dy(static_cast<std::size_t>(M * N) * 2);
  cu::half_gemm(dx.get(), dw.get(), dy.get(), M, N, K, cu::FloatType::bf16);
  cu::synchronize();
  const std::vector<std::uint8_t> raw = dy.to_host();
  for (std::int64_t m = 0; m < M; ++m)
    for (std::int64_t n = 0; n < N; ++n) {
      double ref = 0.0;
      for (std::int64_t k = 0; k < K; ++k) ref += static_cast<double>(x[m * K + k]) * w[n * K + k];
      // fp32 accumulation, one bf16 rounding of the result (2⁻⁸ relative) plus a little.
      ASSERT_NEAR(element(raw, static_cast<std::size_t>(m * N + n), cu::FloatType::bf16), ref,
                  std::abs(ref) * 0.0079 + 1e-3)
          << "at [" << m << ", " << n << "]";
    }
}
