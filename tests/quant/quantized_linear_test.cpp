// QuantizedLinear: the kernel path against the reference path on one layer, outputs that never
// depend on the batch size, and the packed sizes.
//
// Tolerance (kernel vs reference): both paths quantise activations and weights to the same
// codes and scales (tested bit for bit in tests/kernels and tests/quant); they differ only in
// how the float GEMM is rounded (int32 sums scaled after, or a reordered float sum). Each
// output is held to |kernel − reference| ≤ 1e-5 · Σ_k |x̂[k]| · |ŵ[k]|, the size of the terms
// summed. Output quantisation (coarse) can turn such a difference into one output step where
// a value sits on a rounding boundary; that case is held to one step, at rare elements.
#include <gtest/gtest.h>

#include "common/error.h"
#include "quant/quantize.h"
#include "quant/quantized_linear.h"
#include "quant/schemes/presets.h"
#include "quant/schemes/scheme_json.h"
#include "tests/support/test_data.h"

namespace qeval {
namespace {

SchemeSpec custom(QuantSpec w, QuantSpec in, QuantSpec out = {}) {
  SchemeSpec s;
  s.name = "custom";
  s.weights = w, s.input_activations = in, s.output_activations = out;
  return s;
}

std::vector<SchemeSpec> kernel_schemes() {
  std::vector<SchemeSpec> out;
  for (const char* name : {"int8-moderate", "int8-coarse", "int8-vectorwise", "w4-zeropoint", "w4-zeropoint-g128"})
    out.push_back(preset_scheme(name));
  out.push_back(custom({QuantKind::int4_zeropoint, Granularity::group, 128}, {QuantKind::int8_absmax, Granularity::token}));
  out.back().name = "w4-g128+a8-token";
  out.push_back(custom({QuantKind::int8_absmax, Granularity::channel}, {QuantKind::int8_absmax, Granularity::tensor},
                       {QuantKind::int8_absmax, Granularity::token}));
  out.back().name = "w8-channel+a8-tensor+out-token";
  return out;
}

// Largest |a − b| − 1e-5 · Σ|x̂||ŵ|, with a report of where it is worst.
::testing::AssertionResult paths_agree(const at::Tensor& kernel, const at::Tensor& reference, const at::Tensor& xq,
                                       const at::Tensor& w) {
  at::Tensor bound = 1e-5 * at::matmul(xq.abs().to(at::kDouble), w.abs().to(at::kDouble).t());  // [B, L, N]
  at::Tensor err = (kernel.to(at::kDouble) - reference.to(at::kDouble)).abs();
  at::Tensor excess = (err - bound).reshape({-1});
  const std::int64_t worst = excess.argmax().item<std::int64_t>();
  if (excess[worst].item<double>() <= 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "flat index " << worst << ": kernel " << kernel.reshape({-1})[worst].item<float>()
                                       << ", reference " << reference.reshape({-1})[worst].item<float>() << ", |diff| "
                                       << err.reshape({-1})[worst].item<double>() << " > bound "
                                       << bound.reshape({-1})[worst].item<double>();
}

struct Shape {
  std::int64_t B, L, K, N;
  bool bias;
};

class KernelVsReference : public ::testing::TestWithParam<Shape> {};

TEST_P(KernelVsReference, AgreeToFloatRoundingForEverySchemeWithAKernelPath) {
  const Shape sh = GetParam();
  at::manual_seed(sh.K * 131 + sh.N);
  at::Tensor w = at::randn({sh.N, sh.K}) / std::sqrt(static_cast<double>(sh.K));
  at::Tensor bias = sh.bias ? at::randn({sh.N}) * 0.1 : at::Tensor();
  at::Tensor x = at::randn({sh.B, sh.L, sh.K});
  x.select(2, 3).mul_(20);  // an outlier feature, as real activations have
  for (const SchemeSpec& spec : kernel_schemes()) {
    SCOPED_TRACE(spec.name);
    QuantizedLinear kernel("layer", w, bias, spec, ExecutionPath::kernel);
    QuantizedLinear reference("layer", w, bias, spec, ExecutionPath::reference);
    at::Tensor yk = kernel.forward(x), yr = reference.forward(x);
    ASSERT_EQ(yk.sizes(), (std::vector<std::int64_t>{sh.B, sh.L, sh.N}));
    at::Tensor xq = fake_quantize_activations(x, spec.input_activations);
    if (!spec.output_activations.enabled()) {
      EXPECT_TRUE(paths_agree(yk, yr, xq, reference.dequantized_weight()));
      continue;
    }
    // Output-quantised: the same GEMM comparison before output quantisation ...
    SchemeSpec no_out = spec;
    no_out.output_activations = {};
    at::Tensor pre_k = QuantizedLinear("layer", w, bias, no_out, ExecutionPath::kernel).forward(x);
    at::Tensor pre_r = QuantizedLinear("layer", w, bias, no_out, ExecutionPath::reference).forward(x);
    EXPECT_TRUE(paths_agree(pre_k, pre_r, xq, reference.dequantized_weight()));
    // ... and after it, at most one output step apart, and only at rare elements.
    at::Tensor step = spec.output_activations.granularity == Granularity::tensor
                          ? pre_r.abs().amax({1, 2}, true) / 127
                          : pre_r.abs().amax({2}, true) / 127;
    at::Tensor steps_apart = ((yk - yr).abs() / step);
    EXPECT_LE(steps_apart.max().item<double>(), 1.001);
    EXPECT_LE((steps_apart > 1e-3).sum().item<std::int64_t>(), std::max<std::int64_t>(1, yk.numel() / 1000));
  }
}

INSTANTIATE_TEST_SUITE_P(Shapes, KernelVsReference,
                         ::testing::Values(Shape{3, 5, 67, 37, true}, Shape{2, 1, 200, 64, false},
                                           Shape{1, 17, 256, 33, true}, Shape{4, 9, 129, 8, true},
                                           Shape{2, 24, 768, 96, true}),
                         [](const auto& info) {
                           const Shape& s = info.param;
                           return "B" + std::to_string(s.B) + "_L" + std::to_string(s.L) + "_K" + std::to_string(s.K) +
                                  "_N" + std::to_string(s.N) + (s.bias ? "_bias" : "");
                         });

TEST(QuantizedLinear, OutputsDoNotDependOnTheBatchSize) {
  at::manual_seed(5);
  const std::int64_t K = 96, N = 40;
  at::Tensor w = at::randn({N, K}) * 0.1, bias = at::randn({N});
  at::Tensor x = at::randn({8, 12, K});
  x[2] *= 50;  // one loud sequence must not change the others
  std::vector<SchemeSpec> schemes = kernel_schemes();
  schemes.push_back(preset_scheme("int8-fine"));
  for (const SchemeSpec& spec : schemes) {
    for (ExecutionPath path : {ExecutionPath::reference, ExecutionPath::kernel}) {
      if (path == ExecutionPath::kernel && !kernel_path_unavailable_reason(spec).empty()) continue;
      QuantizedLinear layer("layer", w, bias, spec, path);
      at::Tensor batch = layer.forward(x);
      for (std::int64_t b = 0; b < 8; ++b)
        EXPECT_TRUE(test::tensors_equal(batch[b], layer.forward(x.narrow(0, b, 1))[0]))
            << spec.name << " " << to_string(path) << " sequence " << b;
    }
  }
}

TEST(QuantizedLinear, Int8KernelPathComputesTheDocumentedProduct) {
  // y = Σ_k q_x q_w · s_x · s_w + b with s_x per sequence (moderate), evaluated in double here.
  at::manual_seed(6);
  at::Tensor w = at::randn({10, 33}), bias = at::randn({10}), x = at::randn({2, 4, 33});
  QuantizedLinear layer("layer", w, bias, preset_scheme("int8-moderate"), ExecutionPath::kernel);
  at::Tensor y = layer.forward(x);
  const Int8Weight& qw = *layer.int8_weight();
  for (std::int64_t b = 0; b < 2; ++b) {
    at::Tensor sx = int8_absmax_scale(x[b], {0, 1});
    at::Tensor qx = int8_quantize(x[b], sx);
    at::Tensor expected = at::matmul(qx.to(at::kDouble), qw.q.to(at::kDouble).t()) * sx.to(at::kDouble) *
                              qw.scales.to(at::kDouble) + bias.to(at::kDouble);
    EXPECT_TRUE(test::tensors_close(y[b], expected, 1e-6, 1e-6)) << "sequence " << b;
  }
}

TEST(QuantizedLinear, PackedSizesAndPathRules) {
  at::Tensor w = at::randn({64, 255}), bias = at::randn({64});
  QuantizedLinear i8("layers.0.mlp.up", w, bias, preset_scheme("int8-vectorwise"), ExecutionPath::kernel);
  EXPECT_EQ(i8.weight_bytes(), 64 * 255 + 64 * 4 + 64 * 4);  // codes, channel scales, bias
  QuantizedLinear w4("layers.0.mlp.up", w, bias, preset_scheme("w4-zeropoint"), ExecutionPath::kernel);
  EXPECT_EQ(w4.weight_bytes(), 64 * 128 + 64 * 8 + 64 * 4);  // codes two per byte, scale + zero, bias
  QuantizedLinear g("layers.0.mlp.up", w, at::Tensor(), preset_scheme("w4-zeropoint-g128"), ExecutionPath::kernel);
  EXPECT_EQ(g.weight_bytes(), 64 * 128 + 64 * 2 * 8);
  try {
    QuantizedLinear("layers.0.attn.o", w, bias, preset_scheme("int8-fine"), ExecutionPath::kernel);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("per-feature activation scales cannot be factored out"), std::string::npos)
        << e.what();
  }
  QuantizedLinear fine("layers.0.attn.o", w, bias, preset_scheme("int8-fine"), ExecutionPath::reference);
  EXPECT_NE(fine.describe().find("reference path"), std::string::npos) << fine.describe();
  EXPECT_THROW(fine.forward(at::randn({2, 255})), c10::Error);  // axis 0 must be the sequence
}

}  // namespace
}  // namespace qeval

namespace qeval {
namespace {

// Any JSON spec combination runs: the reference path always, the kernel path where the maths
// allows it (and then agrees with the reference), output shapes right, values finite.
TEST(QuantizedLinear, EveryCombinationOfKindsAndGranularitiesRuns) {
  at::manual_seed(8);
  const std::int64_t K = 40, N = 24;
  at::Tensor w = at::randn({N, K}) * 0.2, bias = at::randn({N}), x = at::randn({2, 7, K});
  const std::vector<QuantSpec> weights = {
      {},
      {QuantKind::int8_absmax, Granularity::tensor, 0},
      {QuantKind::int8_absmax, Granularity::channel, 0},
      {QuantKind::int8_absmax, Granularity::group, 16},
      {QuantKind::int4_zeropoint, Granularity::tensor, 0},
      {QuantKind::int4_zeropoint, Granularity::channel, 0},
      {QuantKind::int4_zeropoint, Granularity::group, 16}};
  const std::vector<QuantSpec> inputs = {{},
                                         {QuantKind::int8_absmax, Granularity::tensor, 0},
                                         {QuantKind::int8_absmax, Granularity::token, 0},
                                         {QuantKind::int8_absmax, Granularity::feature, 0},
                                         {QuantKind::int4_zeropoint, Granularity::token, 0}};
  const std::vector<QuantSpec> outputs = {{}, {QuantKind::int8_absmax, Granularity::tensor, 0},
                                          {QuantKind::int8_absmax, Granularity::token, 0}};
  int kernel_cases = 0;
  for (const auto& wq : weights)
    for (const auto& in : inputs)
      for (const auto& out : outputs) {
        SchemeSpec spec = custom(wq, in, out);
        SCOPED_TRACE(scheme_to_json(spec).dump());
        QuantizedLinear ref("layer", w, bias, spec, ExecutionPath::reference);
        at::Tensor yr = ref.forward(x);
        ASSERT_EQ(yr.sizes(), (std::vector<std::int64_t>{2, 7, N}));
        EXPECT_TRUE(at::isfinite(yr).all().item<bool>());
        if (!kernel_path_unavailable_reason(spec).empty()) continue;
        ++kernel_cases;
        spec.output_activations = {};
        at::Tensor yk = QuantizedLinear("layer", w, bias, spec, ExecutionPath::kernel).forward(x);
        at::Tensor yr_pre = QuantizedLinear("layer", w, bias, spec, ExecutionPath::reference).forward(x);
        EXPECT_TRUE(paths_agree(yk, yr_pre, fake_quantize_activations(x, in), ref.dequantized_weight()));
      }
  // int8 tensor/channel weights × int8 tensor/token inputs, and every 4-bit weight × every input.
  EXPECT_EQ(kernel_cases, (2 * 2 + 3 * 5) * 3);
}

}  // namespace
}  // namespace qeval

namespace qeval {
namespace {

// `--dtype fp64`: a float64 input runs the scheme's maths in float64 on either path. Checked
// against the maths written out here: activation codes round(x / s) with s = max|x| / 127 over
// the scheme's axes, the weight codes times their float32 scales (exact in float64), one float64
// product, output codes the same way.
at::Tensor absmax_round_trip(const at::Tensor& x, const QuantSpec& spec) {
  if (!spec.enabled()) return x;
  std::vector<std::int64_t> axes = spec.granularity == Granularity::tensor ? std::vector<std::int64_t>{1, 2}
                                   : spec.granularity == Granularity::token ? std::vector<std::int64_t>{2}
                                                                            : std::vector<std::int64_t>{1};
  at::Tensor amax = x.abs().amax(axes, true);
  at::Tensor s = at::where(amax == 0, at::ones_like(amax), amax / 127.0);
  return at::round(x / s).clamp(-127, 127) * s;
}

TEST(QuantizedLinear, Float64InputsRunTheSchemesMathsInFloat64) {
  at::manual_seed(9);
  const std::int64_t K = 72, N = 20;
  at::Tensor w = at::randn({N, K}) * 0.2, bias = at::randn({N});
  at::Tensor x = at::randn({3, 6, K}, at::kDouble);
  x.select(2, 5).mul_(30);
  std::vector<SchemeSpec> schemes = kernel_schemes();
  schemes.push_back(preset_scheme("int8-fine"));
  int checked = 0;
  for (const SchemeSpec& spec : schemes) {
    for (ExecutionPath path : {ExecutionPath::reference, ExecutionPath::kernel}) {
      if (path == ExecutionPath::kernel && !kernel_path_unavailable_reason(spec).empty()) continue;
      SCOPED_TRACE(spec.name + " " + to_string(path));
      QuantizedLinear layer("layer", w, bias, spec, path);
      const at::Tensor y = layer.forward(x);
      ASSERT_EQ(y.scalar_type(), at::kDouble);
      ASSERT_TRUE(!spec.input_activations.enabled() || spec.input_activations.kind == QuantKind::int8_absmax);
      const auto& i8 = layer.int8_weight();
      ASSERT_TRUE(!i8 || i8->group_size == 0);  // no preset groups int8 weights
      const at::Tensor weight =
          i8 ? i8->q.to(at::kDouble) * (i8->scales.numel() == 1 ? i8->scales : i8->scales.unsqueeze(1)).to(at::kDouble)
             : layer.dequantized_weight().to(at::kDouble);
      const at::Tensor expected = absmax_round_trip(
          at::linear(absmax_round_trip(x, spec.input_activations), weight, bias.to(at::kDouble)), spec.output_activations);
      EXPECT_TRUE(test::tensors_close(y, expected, 1e-12, 1e-12));
      ++checked;
      EXPECT_EQ(layer.engines_used(), std::set<std::string>{"float64 reference on cpu"});
    }
  }
  EXPECT_EQ(checked, 15);  // 7 schemes with a kernel path on both paths, int8-fine on the reference
}

}  // namespace
}  // namespace qeval
