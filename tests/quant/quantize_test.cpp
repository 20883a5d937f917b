// The reference quantisers on cases computed by hand from DESIGN.md §5's formulas (values chosen
// so every x / s is exact in float32, making the expected codes unambiguous).
#include <gtest/gtest.h>

#include <limits>

#include "common/error.h"
#include "kernels/cpu/cpu_isa.h"
#include "kernels/w4_quantize.h"
#include "quant/packed_weights.h"
#include "quant/quantize.h"
#include "tests/support/test_data.h"

namespace qeval {
namespace {

at::Tensor f32(std::vector<float> v) { return at::tensor(v, at::TensorOptions().dtype(at::kFloat)); }
at::Tensor i8(std::vector<int> v) { return at::tensor(v, at::TensorOptions().dtype(at::kInt)).to(at::kChar); }
at::Tensor u8(std::vector<int> v) { return at::tensor(v, at::TensorOptions().dtype(at::kInt)).to(at::kByte); }

TEST(Int8Absmax, RoundsHalfToEven) {
  // max |x| = 63.5 → s = 0.5; x / s = 127, 0.5, 1.5, -0.5, 2.5, -3.5, -127.
  at::Tensor x = f32({63.5f, 0.25f, 0.75f, -0.25f, 1.25f, -1.75f, -63.5f});
  at::Tensor s = int8_absmax_scale(x, {0});
  EXPECT_EQ(s.item<float>(), 0.5f);
  at::Tensor q = int8_quantize(x, s);
  EXPECT_TRUE(test::tensors_equal(q, i8({127, 0, 2, 0, 2, -4, -127})));
  EXPECT_TRUE(test::tensors_equal(int8_dequantize(q, s), f32({63.5f, 0.0f, 1.0f, 0.0f, 1.0f, -2.0f, -63.5f})));
}

TEST(Int8Absmax, ClampsAtPlusMinus127AndTheMaximumMapsTo127) {
  // With a given scale of 1, values beyond ±127 clamp (never -128).
  EXPECT_TRUE(test::tensors_equal(int8_quantize(f32({300.0f, -300.0f, -127.6f, 10.0f}), f32({1.0f})),
                                  i8({127, -127, -127, 10})));
  // With the absmax scale the largest magnitude lands on ±127 even when x / s is inexact.
  at::Tensor x = f32({0.3f, 0.1f, -0.7f});
  at::Tensor q = int8_quantize(x, int8_absmax_scale(x, {0}));
  EXPECT_EQ(q[2].item<std::int8_t>(), -127);
  EXPECT_EQ(q[1].item<std::int8_t>(), 18);  // 0.1 / (0.7/127) = 18.14
}

TEST(Int8Absmax, AllZeroGroupsGetScaleOne) {
  at::Tensor x = at::zeros({2, 3});
  x[1][2] = 2.54f;
  at::Tensor s = int8_absmax_scale(x, {1});  // per row
  EXPECT_EQ(s[0][0].item<float>(), 1.0f);
  EXPECT_FLOAT_EQ(s[1][0].item<float>(), 2.54f / 127);
  at::Tensor xhat = int8_dequantize(int8_quantize(x, s), s);
  EXPECT_FALSE(xhat.isnan().any().item<bool>());
  EXPECT_TRUE(test::tensors_equal(xhat[0], at::zeros({3})));
}

TEST(ZeroPoint4, MixedSignGroup) {
  // min −16, max 14 → s = 2, z = round(8) = 8; x / s = −8, −1.25, 0, 3.5, 7 → round −8, −1, 0, 4, 7.
  at::Tensor x = f32({-16.0f, -2.5f, 0.0f, 7.0f, 14.0f});
  ZeroPointParams p = zeropoint4_params(x, {0});
  EXPECT_EQ(p.scale.item<float>(), 2.0f);
  EXPECT_EQ(p.zero.item<float>(), 8.0f);
  at::Tensor q = zeropoint4_quantize(x, p);
  EXPECT_TRUE(test::tensors_equal(q, u8({0, 7, 8, 12, 15})));
  EXPECT_TRUE(test::tensors_equal(zeropoint4_dequantize(q, p), f32({-16.0f, -2.0f, 0.0f, 8.0f, 14.0f})));
}

TEST(ZeroPoint4, NegativeOnlyGroupHasItsZeroAboveFifteen) {
  // min −16, max −1 → s = 1, z = 16 (outside [0, 15]); −8.5 rounds half to even to −8.
  at::Tensor x = f32({-16.0f, -8.5f, -1.0f});
  ZeroPointParams p = zeropoint4_params(x, {0});
  EXPECT_EQ(p.scale.item<float>(), 1.0f);
  EXPECT_EQ(p.zero.item<float>(), 16.0f);
  at::Tensor q = zeropoint4_quantize(x, p);
  EXPECT_TRUE(test::tensors_equal(q, u8({0, 8, 15})));
  EXPECT_TRUE(test::tensors_equal(zeropoint4_dequantize(q, p), f32({-16.0f, -8.0f, -1.0f})));
}

TEST(ZeroPoint4, PositiveOnlyGroupHasANegativeZero) {
  // min 2, max 17 → s = 1, z = −2; 3.5 rounds to 4.
  at::Tensor x = f32({2.0f, 3.5f, 17.0f});
  ZeroPointParams p = zeropoint4_params(x, {0});
  EXPECT_EQ(p.zero.item<float>(), -2.0f);
  at::Tensor q = zeropoint4_quantize(x, p);
  EXPECT_TRUE(test::tensors_equal(q, u8({0, 2, 15})));
  EXPECT_TRUE(test::tensors_equal(zeropoint4_dequantize(q, p), f32({2.0f, 4.0f, 17.0f})));
}

TEST(ZeroPoint4, ConstantGroupsComeBackExactly) {
  // Rows: positive, negative, zero, and a value that is not a power of two.
  at::Tensor x = f32({0.3f, 0.3f, 0.3f, -2.7f, -2.7f, -2.7f, 0.0f, 0.0f, 0.0f, 1e-30f, 1e-30f, 1e-30f}).reshape({4, 3});
  ZeroPointParams p = zeropoint4_params(x, {1});
  EXPECT_TRUE(test::tensors_equal(p.scale, f32({0.3f, 2.7f, 1.0f, 1e-30f}).reshape({4, 1})));
  EXPECT_TRUE(test::tensors_equal(p.zero, f32({0.0f, 1.0f, 0.0f, 0.0f}).reshape({4, 1})));
  at::Tensor q = zeropoint4_quantize(x, p);
  EXPECT_TRUE(test::tensors_equal(q, u8({1, 1, 1, 0, 0, 0, 0, 0, 0, 1, 1, 1}).reshape({4, 3})));
  EXPECT_TRUE(test::tensors_equal(zeropoint4_dequantize(q, p), x));
}

TEST(PackedWeights, Int8GranularitiesStoreTheDocumentedScales) {
  at::Tensor w = f32({1.0f, -2.0f, 4.0f, 0.5f, 0.0f, 0.0f, 0.0f, -63.5f}).reshape({2, 4});
  QuantSpec spec{QuantKind::int8_absmax, Granularity::tensor, 0};
  Int8Weight t = quantize_int8_weight(w, spec, "t");
  EXPECT_TRUE(test::tensors_equal(t.scales, f32({0.5f})));
  EXPECT_TRUE(test::tensors_equal(t.q, i8({2, -4, 8, 1, 0, 0, 0, -127}).reshape({2, 4})));
  spec.granularity = Granularity::channel;
  Int8Weight c = quantize_int8_weight(w, spec, "c");
  EXPECT_TRUE(test::tensors_equal(c.scales, f32({4.0f / 127, 0.5f})));
  EXPECT_EQ(c.q[0][2].item<std::int8_t>(), 127);
  spec.granularity = Granularity::group;
  spec.group_size = 3;  // K = 4 → groups [0, 3) and [3, 4)
  Int8Weight g = quantize_int8_weight(w, spec, "g");
  EXPECT_TRUE(test::tensors_equal(g.scales, f32({4.0f / 127, 0.5f / 127, 1.0f, 0.5f}).reshape({2, 2})));
  EXPECT_TRUE(test::tensors_equal(g.q, i8({32, -64, 127, 127, 0, 0, 0, -127}).reshape({2, 4})));
  EXPECT_EQ(g.bytes(), 8 + 4 * 4);
}

// A NaN or an infinity anywhere in a weight is refused at every granularity: tensor and channel
// read it from their scales (the row kernel's absmax keeps NaN), group from a pass of its own.
TEST(PackedWeights, Int8RefusesNonFiniteWeightsAtEveryGranularity) {
  for (const float bad : {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity(),
                          -std::numeric_limits<float>::infinity()}) {
    for (const std::int64_t K : {5, 16, 37, 300}) {  // the vector loops and their tails
      for (const Granularity g : {Granularity::tensor, Granularity::channel, Granularity::group}) {
        at::Tensor w = at::randn({3, K});
        w[1][K - 1] = bad;
        QuantSpec spec{QuantKind::int8_absmax, g, g == Granularity::group ? 4 : 0};
        try {
          (void)quantize_int8_weight(w, spec, "layers.0.w");
          ADD_FAILURE() << "accepted " << bad << " at K " << K << " granularity " << spec.granularity_name();
        } catch (const Error& e) {
          EXPECT_NE(std::string(e.what()).find("quantise layers.0.w: the weight holds NaN or infinite values"),
                    std::string::npos)
              << e.what();
        }
      }
    }
  }
}

// Tensor and channel weights go through the fused row kernel: the same bits as the reference
// maths (int8_absmax_scale + int8_quantize) on random weights, with exact ties (x / s = k + 0.5)
// and zero rows.
TEST(PackedWeights, Int8TensorAndChannelEqualTheReferenceOnRandomWeightsWithTies) {
  at::manual_seed(17);
  for (const auto& [N, K] : {std::pair<std::int64_t, std::int64_t>{67, 129}, {8, 4096}, {1, 5}}) {
    at::Tensor w = at::randn({N, K}) * 0.05f;
    if (N > 2) {
      w[1].zero_();                                    // a zero row: scale 1 per channel
      // Quarters in [-63.5, 63.5]: max |x| = 63.5 gives s = 0.5 exactly (row and tensor), so every
      // other x / s is a tie k + 0.5 (round half to even decides it).
      w[2].copy_((at::remainder(at::arange(K), 509) - 254).to(at::kFloat) * 0.25f);
      w[2][0] = 63.5f;
    }
    for (Granularity g : {Granularity::tensor, Granularity::channel}) {
      SCOPED_TRACE(testing::Message() << N << "x" << K << (g == Granularity::tensor ? " tensor" : " channel"));
      const Int8Weight got = quantize_int8_weight(w, QuantSpec{QuantKind::int8_absmax, g, 0}, "w");
      const at::Tensor s = int8_absmax_scale(w, g == Granularity::tensor ? std::vector<std::int64_t>{0, 1}
                                                                          : std::vector<std::int64_t>{1});
      EXPECT_TRUE(test::tensors_equal(got.q, int8_quantize(w, s)));
      EXPECT_TRUE(test::tensors_equal(got.scales, s.reshape({-1})));
      // With max |w| known (the read's finiteness check found it): one pass, the same bits.
      const Int8Weight known = quantize_int8_weight(w, QuantSpec{QuantKind::int8_absmax, g, 0}, "w",
                                                    at::abs(w).max().item<float>());
      EXPECT_TRUE(test::tensors_equal(known.q, got.q));
      EXPECT_TRUE(test::tensors_equal(known.scales, got.scales));
    }
  }
  // An all-zero weight with its known maximum 0: scale 1, codes 0, as without it.
  const at::Tensor zeros = at::zeros({4, 40});
  const QuantSpec tensor{QuantKind::int8_absmax, Granularity::tensor, 0};
  const Int8Weight known = quantize_int8_weight(zeros, tensor, "z", 0.0f);
  EXPECT_TRUE(test::tensors_equal(known.scales, f32({1.0f})));
  EXPECT_TRUE(test::tensors_equal(known.q, quantize_int8_weight(zeros, tensor, "z").q));
}

// The kernel's min/max pass is the weight's finiteness check (quantize_w4_weight makes no other on
// the CPU): every variant, every granularity, reports a NaN or an infinity wherever it sits (the
// first value, inside the vector loop, in a row's tail, in a short last group) and a finite weight
// as finite; quantize_w4_weight refuses the non-finite ones.
TEST(PackedWeights, W4KernelFindsEveryNonFiniteValue) {
  using Quantizer = kernels::W4Rows (*)(const at::Tensor&, std::int64_t, bool);
  std::vector<std::pair<const char*, Quantizer>> variants = {{"portable", kernels::cpu::quantize_w4_rows_portable}};
  if (kernels::cpu::w4_quantize_avx2_available()) variants.push_back({"avx2", kernels::cpu::quantize_w4_rows_avx2});
  if (kernels::cpu::cpu_runs(kernels::cpu::CpuIsa::avx512))
    variants.push_back({"avx512", kernels::cpu::quantize_w4_rows_avx512});
  at::manual_seed(14);
  const at::Tensor w = at::randn({3, 301});
  const std::vector<std::pair<std::int64_t, bool>> layouts = {{301, true}, {301, false}, {128, false}, {3, false}};
  for (const auto& [name, quantize] : variants) {
    for (const auto& [g, whole] : layouts) {
      SCOPED_TRACE(testing::Message() << name << ", group " << g << (whole ? " (tensor)" : ""));
      EXPECT_TRUE(quantize(w, g, whole).finite);
      for (const float bad : {NAN, INFINITY, -INFINITY}) {
        for (const std::int64_t at : {std::int64_t{0}, std::int64_t{40}, std::int64_t{300}}) {
          at::Tensor v = w.clone();
          v[1][at] = bad;
          EXPECT_FALSE(quantize(v, g, whole).finite) << bad << " at column " << at;
        }
      }
    }
  }
  at::Tensor v = w.clone();
  v[2][77] = NAN;
  for (const QuantSpec& spec : {QuantSpec{QuantKind::int4_zeropoint, Granularity::tensor, 0},
                                QuantSpec{QuantKind::int4_zeropoint, Granularity::channel, 0},
                                QuantSpec{QuantKind::int4_zeropoint, Granularity::group, 128}})
    EXPECT_THROW(quantize_w4_weight(v, spec, "w"), Error) << spec.granularity_name();
}

TEST(PackedWeights, W4OddKGroupsPackAndDequantizeLikeTheReference) {
  // K = 5 with groups of 2: the last group holds one value (a constant group, exact).
  at::manual_seed(11);
  at::Tensor w = at::randn({3, 5});
  QuantSpec spec{QuantKind::int4_zeropoint, Granularity::group, 2};
  W4Weight q = quantize_w4_weight(w, spec, "w");
  ASSERT_EQ(q.qweight.sizes(), (std::vector<std::int64_t>{3, 3}));
  ASSERT_EQ(q.scales.sizes(), (std::vector<std::int64_t>{3, 3}));
  EXPECT_TRUE(test::tensors_equal(at::bitwise_right_shift(q.qweight.select(1, 2), 4), at::zeros({3}, at::kByte)));
  at::Tensor expected = at::empty_like(w);
  for (std::int64_t g = 0; g < 3; ++g) {
    at::Tensor part = w.narrow(1, 2 * g, std::min<std::int64_t>(2, 5 - 2 * g));
    ZeroPointParams p = zeropoint4_params(part, {1});
    expected.narrow(1, 2 * g, part.size(1)).copy_(zeropoint4_dequantize(zeropoint4_quantize(part, p), p));
  }
  EXPECT_TRUE(test::tensors_equal(q.dequantize(), expected));
  EXPECT_TRUE(test::tensors_equal(q.dequantize().select(1, 4), w.select(1, 4)));  // constant group
  EXPECT_EQ(q.bytes(), 3 * 3 + 2 * 3 * 3 * 4);
}

TEST(PackedWeights, W4PerChannelAndPerTensor) {
  at::manual_seed(12);
  at::Tensor w = at::randn({4, 7});
  W4Weight c = quantize_w4_weight(w, {QuantKind::int4_zeropoint, Granularity::channel, 0}, "c");
  EXPECT_EQ(c.group_size, 7);
  ZeroPointParams p = zeropoint4_params(w, {1});
  EXPECT_TRUE(test::tensors_equal(c.dequantize(), zeropoint4_dequantize(zeropoint4_quantize(w, p), p)));
  W4Weight t = quantize_w4_weight(w, {QuantKind::int4_zeropoint, Granularity::tensor, 0}, "t");
  ZeroPointParams one = zeropoint4_params(w, {0, 1});
  EXPECT_TRUE(test::tensors_equal(t.dequantize(), zeropoint4_dequantize(zeropoint4_quantize(w, one), one)));
  at::Tensor bad = w.clone();
  bad[0][0] = NAN;
  EXPECT_THROW(quantize_w4_weight(bad, {QuantKind::int4_zeropoint, Granularity::channel, 0}, "n"), Error);
}

TEST(FakeQuantizeActivations, ScalesArePerSequenceAndNeverShared) {
  at::manual_seed(13);
  at::Tensor x = at::randn({3, 5, 8});
  x[1] *= 100;  // a loud sequence must not change the others' scales
  for (auto g : {Granularity::tensor, Granularity::token, Granularity::feature}) {
    QuantSpec spec{QuantKind::int8_absmax, g, 0};
    at::Tensor batch = fake_quantize_activations(x, spec);
    for (std::int64_t b = 0; b < 3; ++b)
      EXPECT_TRUE(test::tensors_equal(batch[b], fake_quantize_activations(x.narrow(0, b, 1), spec)[0]))
          << "granularity " << to_string(g) << ", sequence " << b;
  }
  // Per tensor: sequence 0's largest value is its own, on ±127 steps of max/127.
  QuantSpec tensor{QuantKind::int8_absmax, Granularity::tensor, 0};
  at::Tensor s0 = x[0].abs().max() / 127;
  at::Tensor codes = fake_quantize_activations(x, tensor)[0] / s0;
  EXPECT_TRUE(test::tensors_close(codes, at::round(codes), 1e-4));
  EXPECT_TRUE(test::tensors_equal(fake_quantize_activations(x, QuantSpec{}), x));
}

// 4-bit weights on the CPU go through the fused kernel (kernels/w4_quantize.h): each variant this
// CPU runs (the dispatched one, the portable loops, AVX2, AVX-512) gives the reference
// composition's packed codes, scales and zero points bit for bit, on random weights of mixed
// magnitudes with exact ties (x / s = k + 0.5), constant rows and groups (zero, negative,
// positive), odd K and a short last group, per tensor, per channel and per group (an odd group
// size: groups that start inside a byte).
TEST(PackedWeights, W4KernelEqualsTheReferenceCompositionOnRandomWeightsWithTies) {
  for (const auto& [rows, cols] : {std::pair<std::int64_t, std::int64_t>{37, 301}, {8, 4096}, {1, 5}, {5, 1}}) {
    const std::int64_t N = rows, K = cols;  // plain variables: clang 14 refuses bindings captured by lambdas
    at::manual_seed(N * 1000 + K);
    at::Tensor w = at::randn({N, K}) * at::exp(at::randn({N, 1}) * 2);
    if (N > 4 && K > 40) {
      // Row 0: min 0, max 15, halves between: s = 1, z = 0, so every odd half is a tie.
      w[0].copy_(at::remainder(at::arange(K), 31).to(at::kFloat) * 0.5f);
      w[0][0] = 0.0f;
      w[0][1] = 15.0f;
      w[1].zero_();
      w[2].fill_(-0.75f);
      w[3].fill_(3.0f);
      w[4].narrow(0, 0, 32).fill_(1.25f);  // a constant first group of 32
    }
    std::vector<QuantSpec> specs = {{QuantKind::int4_zeropoint, Granularity::tensor, 0},
                                    {QuantKind::int4_zeropoint, Granularity::channel, 0}};
    for (std::int64_t g : {2, 3, 32, 128}) specs.push_back({QuantKind::int4_zeropoint, Granularity::group, g});
    for (const QuantSpec& spec : specs) {
      SCOPED_TRACE(testing::Message() << N << "x" << K << " " << spec.granularity_name() << " " << spec.group_size);
      const W4Weight ref = quantize_w4_weight_reference(w, spec, "w");
      auto expect_equal = [&](const W4Weight& got, const char* variant) {
        SCOPED_TRACE(variant);
        EXPECT_EQ(got.group_size, ref.group_size);
        EXPECT_TRUE(test::tensors_equal(got.qweight, ref.qweight));
        EXPECT_TRUE(test::tensors_equal(got.scales, ref.scales));
        EXPECT_TRUE(test::tensors_equal(got.zeros, ref.zeros));
        EXPECT_TRUE(test::tensors_equal(got.dequantize(), ref.dequantize()));
      };
      expect_equal(quantize_w4_weight(w, spec, "w"), "dispatched");
      const std::int64_t g = spec.granularity == Granularity::tensor ? K : ref.group_size;
      const bool whole = spec.granularity == Granularity::tensor;
      auto as_weight = [&](const kernels::W4Rows& rows) {
        W4Weight out;
        out.K = K;
        out.group_size = ref.group_size;
        out.qweight = rows.packed;
        out.scales = rows.scales;
        out.zeros = rows.zeros;
        return out;
      };
      expect_equal(as_weight(kernels::cpu::quantize_w4_rows_portable(w, g, whole)), "portable");
      if (kernels::cpu::w4_quantize_avx2_available())
        expect_equal(as_weight(kernels::cpu::quantize_w4_rows_avx2(w, g, whole)), "avx2");
      if (kernels::cpu::cpu_runs(kernels::cpu::CpuIsa::avx512))
        expect_equal(as_weight(kernels::cpu::quantize_w4_rows_avx512(w, g, whole)), "avx512");
    }
  }
}

}  // namespace
}  // namespace qeval
