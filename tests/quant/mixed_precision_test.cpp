// Mixed-precision decomposition (LLM.int8(), issue 15; scheme outlier_threshold T): per sequence,
// the input features with max_l |x[l, j]| >= T run in fp32, the rest int8 vector-wise.
//   - JSON forms, the resolved form, the preset, and the errors for every combination it is not
//     defined on (each names the file and the key, what is required and what was found);
//   - T = +infinity (C++) and T = 1e30 (JSON) are int8-vectorwise bit for bit, on each path;
//   - T = 0 is the full-precision layer bit for bit, one layer and whole models;
//   - with outliers: both paths are close to a float64 re-implementation written out here, agree
//     with each other as the other presets do (1e-5 · Σ|x̂||ŵ|), and ignore the batch size;
//   - the per-layer log and outlier_features_report say which features were outliers.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>

#include "common/error.h"
#include "common/files.h"
#include "loaders/checkpoints/checkpoint.h"
#include "loaders/tokenizers/tokenizer.h"
#include "quant/quantize.h"
#include "quant/quantized_linear.h"
#include "quant/rewrite.h"
#include "quant/schemes/presets.h"
#include "quant/schemes/scheme_json.h"
#include "tests/quant/quant_models.h"
#include "tests/support/test_data.h"
#include "tests/support/test_models.h"

namespace qeval {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

SchemeSpec mixed(double threshold, ExecutionPreference e = ExecutionPreference::automatic) {
  SchemeSpec s = preset_scheme("int8-vectorwise");
  s.name = "int8-vectorwise+outliers>=" + std::to_string(threshold);
  s.outlier_threshold = threshold;
  s.execution = e;
  return s;
}

SchemeSpec with_execution(SchemeSpec s, ExecutionPreference e) {
  s.execution = e;
  return s;
}

ExecutionPreference preference(ExecutionPath p) {
  return p == ExecutionPath::kernel ? ExecutionPreference::kernel : ExecutionPreference::reference;
}

constexpr ExecutionPath kPaths[] = {ExecutionPath::reference, ExecutionPath::kernel};

// Activations of moderate size (|x| < 6 in practice: 0.7·N(0,1) over a few thousand values)
// with planted outlier features: sequence b gets features (3 + b) and 7 multiplied by 20 at
// one position, so each sequence has its own outlier set.
at::Tensor planted_activations(std::int64_t B, std::int64_t L, std::int64_t K, std::uint64_t seed) {
  at::manual_seed(seed);
  at::Tensor x = 0.7 * at::randn({B, L, K});
  for (std::int64_t b = 0; b < B; ++b) {
    x[b][b % L][3 + b] = 20.0f + static_cast<float>(b);
    x[b][(2 * b + 1) % L][7] = -15.0f;
  }
  return x;
}

// --- The spec ---------------------------------------------------------------------------------

nlohmann::json vectorwise_json(const std::string& extra) {
  return nlohmann::json::parse(R"({"weights": {"kind": "int8_absmax", "granularity": "channel"},
      "input_activations": {"kind": "int8_absmax", "granularity": "token"})" + extra + "}");
}

TEST(MixedPrecisionSpec, JsonFormsResolveAndRoundTrip) {
  EXPECT_FALSE(scheme_from_json(vectorwise_json(""), "spec.json").outlier_threshold.has_value());
  EXPECT_FALSE(scheme_from_json(vectorwise_json(R"(, "outlier_threshold": null)"), "spec.json").outlier_threshold);
  EXPECT_EQ(scheme_from_json(vectorwise_json(R"(, "outlier_threshold": 6.0)"), "spec.json").outlier_threshold, 6.0);
  EXPECT_EQ(scheme_from_json(vectorwise_json(R"(, "outlier_threshold": 6)"), "spec.json").outlier_threshold, 6.0);
  EXPECT_EQ(scheme_from_json(vectorwise_json(R"(, "outlier_threshold": 0)"), "spec.json").outlier_threshold, 0.0);
  EXPECT_EQ(scheme_from_json(vectorwise_json(R"(, "outlier_threshold": 1e30)"), "spec.json").outlier_threshold, 1e30);

  // Always written: null when off.
  EXPECT_TRUE(scheme_to_json(preset_scheme("int8-vectorwise")).at("outlier_threshold").is_null());
  EXPECT_TRUE(scheme_to_json(preset_scheme("full")).at("outlier_threshold").is_null());
  const nlohmann::json j = scheme_to_json(mixed(2.5, ExecutionPreference::reference));
  EXPECT_EQ(j.at("outlier_threshold"), 2.5);
  EXPECT_EQ(scheme_to_json(scheme_from_json(j, "round trip")), j);
  EXPECT_EQ(scheme_from_json(j, "round trip").outlier_threshold, 2.5);

  // +infinity (C++ only) is written as the largest double and reads back as it.
  const nlohmann::json inf = scheme_to_json(mixed(kInf));
  EXPECT_EQ(inf.at("outlier_threshold").get<double>(), std::numeric_limits<double>::max());
  EXPECT_NE(inf.dump().find("1.7976931348623157e+308"), std::string::npos) << inf.dump();
  EXPECT_EQ(scheme_from_json(nlohmann::json::parse(inf.dump()), "round trip").outlier_threshold,
            std::numeric_limits<double>::max());
  EXPECT_NO_THROW(validate_scheme(mixed(kInf), "scheme inf"));
}

TEST(MixedPrecisionSpec, ThePresetIsLlmInt8WithThreshold6) {
  const SchemeSpec s = resolve_scheme("int8-mixed");
  EXPECT_EQ(s.name, "int8-mixed");
  EXPECT_TRUE(s.weights == (QuantSpec{QuantKind::int8_absmax, Granularity::channel, 0}));
  EXPECT_TRUE(s.input_activations == (QuantSpec{QuantKind::int8_absmax, Granularity::token, 0}));
  EXPECT_FALSE(s.output_activations.enabled());
  EXPECT_FALSE(s.keep_tokens.enabled());
  EXPECT_EQ(s.outlier_threshold, 6.0);
  EXPECT_FALSE(s.quantize_lm_head);
  EXPECT_EQ(s.execution, ExecutionPreference::automatic);
  EXPECT_NE(s.description.find("LLM.int8()"), std::string::npos) << s.description;
  EXPECT_NE(s.description.find("6.0"), std::string::npos) << s.description;
  EXPECT_EQ(kernel_path_unavailable_reason(s), "");
  const std::vector<std::string> names = preset_names();
  const auto at = std::find(names.begin(), names.end(), "int8-mixed");
  ASSERT_NE(at, names.end());
  EXPECT_EQ(*(at - 1), "int8-coarse-keep1");
  EXPECT_EQ(scheme_to_json(s).at("outlier_threshold"), 6.0);
}

TEST(MixedPrecisionSpec, InvalidThresholdsAndCombinationsFailNamingTheKey) {
  auto parse = [](const std::string& body) {
    return [body] { scheme_from_json(nlohmann::json::parse(body), "scheme file mine.json"); };
  };
  const std::string w8 = R"("weights": {"kind": "int8_absmax", "granularity": "channel"})";
  const std::string a8 = R"("input_activations": {"kind": "int8_absmax", "granularity": "token"})";
  const std::string t = R"("outlier_threshold": 6)";
  const std::string required = "needs int8_absmax weights per channel, int8_absmax input_activations per token";
  // The value.
  for (const char* bad : {"-1", "-0.5"})
    EXPECT_TRUE(test::throws_with(parse("{" + w8 + "," + a8 + R"(, "outlier_threshold": )" + bad + "}"),
                                  {"mine.json", "outlier_threshold", "non-negative number", bad}));
  for (const char* bad : {R"("6")", "true", "[6]", R"({"t": 6})"})
    EXPECT_TRUE(test::throws_with(parse("{" + w8 + "," + a8 + R"(, "outlier_threshold": )" + bad + "}"),
                                  {"mine.json", "outlier_threshold", "non-negative number", "found"}))
        << bad;
  // The combinations: each error names the key, what is required and what was found.
  struct Case {
    std::string body, found;
  };
  const std::vector<Case> cases = {
      {R"("weights": {"kind": "int8_absmax", "granularity": "tensor"}, )" + a8, "weights int8_absmax/tensor"},
      {R"("weights": {"kind": "int8_absmax", "granularity": "group:16"}, )" + a8, "weights int8_absmax/group:16"},
      {R"("weights": {"kind": "int4_zeropoint", "granularity": "channel"}, )" + a8, "weights int4_zeropoint/channel"},
      {a8, "weights none"},
      {w8 + R"(, "input_activations": {"kind": "int8_absmax", "granularity": "tensor"})",
       "input_activations int8_absmax/tensor"},
      {w8 + R"(, "input_activations": {"kind": "int8_absmax", "granularity": "feature"})",
       "input_activations int8_absmax/feature"},
      {w8, "input_activations none"},
      {w8 + "," + a8 + R"(, "output_activations": {"kind": "int8_absmax", "granularity": "token"})",
       "output_activations int8_absmax/token"},
      {w8 + "," + a8 + R"(, "keep_first_tokens": 1)", R"(keep_tokens {"first": 1})"},
      {w8 + "," + a8 + R"(, "keep_tokens": {"top_norm": 2})", R"(keep_tokens {"top_norm": 2})"},
  };
  for (const Case& c : cases)
    EXPECT_TRUE(test::throws_with(parse("{" + c.body + ", " + t + "}"),
                                  {"scheme file mine.json", "outlier_threshold 6", required, "found " + c.found}))
        << c.body;
  // Two problems at once are both named.
  EXPECT_TRUE(test::throws_with(parse(R"({"weights": {"kind": "int8_absmax", "granularity": "tensor"},
      "input_activations": {"kind": "int8_absmax", "granularity": "tensor"}, "outlier_threshold": 6})"),
                                {"weights int8_absmax/tensor, input_activations int8_absmax/tensor"}));
  // Off (null) is valid with anything.
  EXPECT_NO_THROW(parse(R"({"weights": {"kind": "int8_absmax", "granularity": "tensor"}, "outlier_threshold": null})")());

  // The C++ spec: NaN and negative thresholds, and direct construction of a layer.
  EXPECT_TRUE(test::throws_with([] { validate_scheme(mixed(std::nan("")), "scheme nan"); },
                                {"scheme nan", "outlier_threshold", "non-negative number", "nan"}));
  EXPECT_TRUE(test::throws_with([] { validate_scheme(mixed(-2), "scheme neg"); }, {"scheme neg", "outlier_threshold"}));
  SchemeSpec moderate = preset_scheme("int8-moderate");
  moderate.outlier_threshold = 6.0;
  EXPECT_TRUE(test::throws_with([&] { validate_scheme(moderate, "scheme m"); }, {"scheme m", "outlier_threshold", "found"}));
  EXPECT_TRUE(test::throws_with(
      [&] { QuantizedLinear("layers.0.mlp.up", at::randn({4, 8}), at::Tensor(), moderate, ExecutionPath::reference); },
      {"QuantizedLinear layers.0.mlp.up", "outlier_threshold", "weights int8_absmax/tensor"}));
  EXPECT_TRUE(test::throws_with([&] { quantize_model(test::random_transformer(1), moderate); },
                                {"outlier_threshold", "weights int8_absmax/tensor"}));
}

// --- One layer --------------------------------------------------------------------------------

TEST(MixedPrecisionLinear, InfiniteThresholdIsVectorwiseBitForBit) {
  const std::int64_t B = 3, L = 19, K = 48, N = 40;
  at::manual_seed(41);
  const at::Tensor w = at::randn({N, K}) / std::sqrt(48.0), bias = at::randn({N}) * 0.1;
  const at::Tensor x = planted_activations(B, L, K, 42);
  const SchemeSpec from_json =
      scheme_from_json(vectorwise_json(R"(, "outlier_threshold": 1e30)"), "outlier_threshold 1e30");
  for (ExecutionPath path : kPaths) {
    SCOPED_TRACE(to_string(path));
    const at::Tensor expected = QuantizedLinear("layer", w, bias, preset_scheme("int8-vectorwise"), path).forward(x);
    for (const SchemeSpec& spec : {mixed(kInf), from_json}) {
      QuantizedLinear q("layer", w, bias, spec, path);
      EXPECT_TRUE(test::tensors_equal(q.forward(x), expected)) << *spec.outlier_threshold;
      EXPECT_FALSE(q.select_outlier_features(x).any().item<bool>());
      EXPECT_EQ(q.outlier_features().sequences, B);
      EXPECT_EQ(q.outlier_features().max, 0);
    }
    // Without bias too.
    EXPECT_TRUE(test::tensors_equal(
        QuantizedLinear("layer", w, at::Tensor(), mixed(kInf), path).forward(x),
        QuantizedLinear("layer", w, at::Tensor(), preset_scheme("int8-vectorwise"), path).forward(x)));
  }
}

TEST(MixedPrecisionLinear, ZeroThresholdIsTheFullPrecisionLayerBitForBit) {
  const std::int64_t B = 3, L = 19, K = 48, N = 40;
  at::manual_seed(43);
  const at::Tensor w = at::randn({N, K}) / std::sqrt(48.0), bias = at::randn({N}) * 0.1;
  const at::Tensor x = planted_activations(B, L, K, 44);
  for (const at::Tensor& b : {bias, at::Tensor()}) {
    const FloatLinear full(w, b);
    for (ExecutionPath path : kPaths) {
      SCOPED_TRACE(to_string(path) + (b.defined() ? " bias" : " no bias"));
      QuantizedLinear q("layer", w, b, mixed(0.0), path);
      EXPECT_TRUE(test::tensors_equal(q.forward(x), full.forward(x)));
      EXPECT_TRUE(test::tensors_equal(q.forward(x.narrow(0, 1, 1)), full.forward(x.narrow(0, 1, 1))));
      EXPECT_TRUE(q.select_outlier_features(x).all().item<bool>());  // |x| >= 0 always
      EXPECT_EQ(q.outlier_features().max, K);
    }
  }
}

// y = x̂z ŵᵀ + x_O w_Oᵀ + b in float64, written out from DESIGN §5: per sequence the outlier
// columns O (max_l |x| >= T), per-token absmax codes of the zeroed x, per-row codes of w.
struct Expected {
  at::Tensor y;      // [B, L, N] float64
  at::Tensor bound;  // [B, L, N] float64: 1e-5 · (|x̂z||ŵ|ᵀ + |x_O||w_O|ᵀ + |b|)
};

Expected reimplementation(const at::Tensor& x, const at::Tensor& w, const at::Tensor& bias, double threshold) {
  const std::int64_t B = x.size(0);
  auto codes = [](const at::Tensor& v, const at::Tensor& s) {  // float32 IEEE division, half to even
    return at::clamp(at::round(v / s), -127, 127);
  };
  auto absmax_scale = [](const at::Tensor& v) {  // per row, 1 for a row of zeros
    at::Tensor s = v.abs().amax(-1, true) / 127.0f;
    return at::where(s == 0, at::ones_like(s), s);
  };
  const at::Tensor sw = absmax_scale(w);
  const at::Tensor w_hat = codes(w, sw).to(at::kDouble) * sw.to(at::kDouble);  // [N, K]
  std::vector<at::Tensor> ys, bounds;
  for (std::int64_t b = 0; b < B; ++b) {
    const at::Tensor xb = x[b];                                                  // [L, K]
    const at::Tensor outlier = xb.abs().amax(0).to(at::kDouble) >= threshold;  // [K]
    const at::Tensor xz = xb.masked_fill(outlier, 0.0f);
    const at::Tensor sx = absmax_scale(xz);
    const at::Tensor x_hat = codes(xz, sx).to(at::kDouble) * sx.to(at::kDouble);
    const at::Tensor xo = (xb.to(at::kDouble) * outlier.to(at::kDouble));       // only the columns in O
    at::Tensor y = at::matmul(x_hat, w_hat.t()) + at::matmul(xo, w.to(at::kDouble).t());
    at::Tensor bound = at::matmul(x_hat.abs(), w_hat.abs().t()) + at::matmul(xo.abs(), w.to(at::kDouble).abs().t());
    if (bias.defined()) y = y + bias.to(at::kDouble), bound = bound + bias.to(at::kDouble).abs();
    ys.push_back(y);
    bounds.push_back(1e-5 * bound + 1e-30);
  }
  return {at::stack(ys), at::stack(bounds)};
}

::testing::AssertionResult within(const at::Tensor& got, const at::Tensor& expected, const at::Tensor& bound) {
  const at::Tensor err = (got.to(at::kDouble) - expected.to(at::kDouble)).abs();
  const at::Tensor excess = (err - bound).reshape({-1});
  const std::int64_t worst = excess.argmax().item<std::int64_t>();
  if (excess[worst].item<double>() <= 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "flat index " << worst << ": got " << got.reshape({-1})[worst].item<double>()
                                       << ", expected " << expected.reshape({-1})[worst].item<double>() << ", bound "
                                       << bound.reshape({-1})[worst].item<double>() << ", largest |Δ| "
                                       << err.max().item<double>();
}

TEST(MixedPrecisionLinear, MatchesAFloat64ReimplementationAndThePathsAgree) {
  const std::int64_t B = 3, L = 33, K = 96, N = 72;
  at::manual_seed(45);
  const at::Tensor w = at::randn({N, K}) / std::sqrt(96.0), bias = at::randn({N}) * 0.1;
  const at::Tensor x = planted_activations(B, L, K, 46);
  const at::Tensor full = FloatLinear(w, bias).forward(x);
  for (const double threshold : {6.0, 2.0}) {
    SCOPED_TRACE(threshold);
    const Expected e = reimplementation(x, w, bias, threshold);
    QuantizedLinear kernel("layer", w, bias, mixed(threshold), ExecutionPath::kernel);
    QuantizedLinear reference("layer", w, bias, mixed(threshold), ExecutionPath::reference);
    const at::Tensor outlier = kernel.select_outlier_features(x);
    // Some features, not all, in every sequence.
    for (std::int64_t b = 0; b < B; ++b) {
      const std::int64_t n = outlier[b].sum().item<std::int64_t>();
      EXPECT_GT(n, 0) << b;
      EXPECT_LT(n, K) << b;
      if (threshold == 6.0) {  // exactly the planted ones
        at::Tensor planted = at::zeros({K}, at::kBool);
        planted[3 + b] = true, planted[7] = true;
        EXPECT_TRUE(test::tensors_equal(outlier[b], planted)) << b;
      }
    }
    const at::Tensor yk = kernel.forward(x), yr = reference.forward(x);
    EXPECT_TRUE(within(yk, e.y, e.bound)) << "kernel";
    EXPECT_TRUE(within(yr, e.y, e.bound)) << "reference";
    EXPECT_TRUE(within(yk, yr, e.bound)) << "kernel vs reference";
    // The decomposition matters: the largest error (on a row holding a planted outlier, which
    // sets that row's scale in the plain scheme) is well below vector-wise alone.
    const at::Tensor plain = QuantizedLinear("layer", w, bias, preset_scheme("int8-vectorwise"), ExecutionPath::kernel)
                                 .forward(x);
    const double err_mixed = (yk - full).abs().max().item<double>();
    const double err_plain = (plain - full).abs().max().item<double>();
    EXPECT_LT(err_mixed, 0.5 * err_plain) << "mixed " << err_mixed << ", vector-wise " << err_plain;
  }
}

TEST(MixedPrecisionLinear, ResultsDoNotDependOnTheBatchSize) {
  const std::int64_t L = 21, K = 64, N = 48;
  at::manual_seed(47);
  const at::Tensor w = at::randn({N, K}) / 8.0, bias = at::randn({N}) * 0.1;
  at::Tensor x = planted_activations(3, L, K, 48);
  x[2][5].fill_(7.0f);  // sequence 2: every feature is an outlier (its full-precision row)
  for (ExecutionPath path : kPaths) {
    SCOPED_TRACE(to_string(path));
    QuantizedLinear q("layer", w, bias, mixed(6.0), path);
    const at::Tensor batch = q.forward(x);
    for (std::int64_t b = 0; b < 3; ++b)
      EXPECT_TRUE(test::tensors_equal(batch[b], q.forward(x.narrow(0, b, 1))[0])) << "sequence " << b;
    EXPECT_TRUE(test::tensors_equal(batch[2], FloatLinear(w, bias).forward(x.narrow(0, 2, 1))[0]));
    // Reordered batches too.
    const at::Tensor swapped = q.forward(at::stack({x[2], x[0]}));
    EXPECT_TRUE(test::tensors_equal(swapped[0], batch[2]));
    EXPECT_TRUE(test::tensors_equal(swapped[1], batch[0]));
  }
}

TEST(MixedPrecisionLinear, LogsWhichFeaturesWereOutliersPerSequence) {
  const std::int64_t L = 12, K = 16;
  at::manual_seed(49);
  at::Tensor x = 0.5 * at::randn({3, L, K});
  x[1][4][3] = 9.0f;
  x[1][10][7] = -6.0f;  // exactly T: an outlier (>=)
  x[0][2][5] = 5.999f;  // just below: not
  QuantizedLinear q("layers.0.attn.q", at::randn({8, K}), at::Tensor(), mixed(6.0), ExecutionPath::kernel);
  EXPECT_TRUE(q.outlier_features().counts.empty());
  q.forward(x);
  QuantizedLinear::OutlierFeatures log = q.outlier_features();
  EXPECT_EQ(log.sequences, 3);
  EXPECT_EQ(log.total, 2);
  EXPECT_EQ(log.max, 2);
  EXPECT_EQ(log.counts, (std::map<std::int64_t, std::int64_t>{{3, 1}, {7, 1}}));
  q.forward(x.narrow(0, 1, 2));  // sequence 1 again, and 2
  log = q.outlier_features();
  EXPECT_EQ(log.sequences, 5);
  EXPECT_EQ(log.counts, (std::map<std::int64_t, std::int64_t>{{3, 2}, {7, 2}}));
  q.reset_outlier_features();
  EXPECT_EQ(q.outlier_features().sequences, 0);
  EXPECT_TRUE(q.outlier_features().counts.empty());
  // Bounded by in_features whatever the number of sequences: T = 0 marks every feature.
  QuantizedLinear all("layer", at::randn({8, K}), at::Tensor(), mixed(0.0), ExecutionPath::reference);
  for (int i = 0; i < 4; ++i) all.forward(x);
  EXPECT_EQ(all.outlier_features().counts.size(), static_cast<std::size_t>(K));
  EXPECT_EQ(all.outlier_features().counts.at(K - 1), 12);
}

TEST(MixedPrecisionLinear, DescribeAndBytesNameTheFp32Weight) {
  const at::Tensor w = at::randn({8, 16}), bias = at::randn({8});
  QuantizedLinear q("layer", w, bias, mixed(6.0), ExecutionPath::kernel);
  QuantizedLinear plain("layer", w, bias, preset_scheme("int8-vectorwise"), ExecutionPath::kernel);
  EXPECT_NE(q.describe().find("outliers |x|>=6 in fp32 (fp32 weight held too)"), std::string::npos) << q.describe();
  EXPECT_EQ(plain.describe().find("outliers"), std::string::npos) << plain.describe();
  EXPECT_EQ(q.weight_bytes(), plain.weight_bytes() + w.numel() * 4);
}

// --- Whole models -----------------------------------------------------------------------------

using test::NamedModel;
using test::per_token_nll;

std::vector<NamedModel> models() { return test::quant_test_models(51, 3, 48); }

TEST(MixedPrecisionModel, ZeroThresholdIsFullPrecisionAndInfiniteIsVectorwiseBitForBit) {
  for (const auto& m : models()) {
    const at::Tensor full = m.model.forward(m.tokens);
    for (ExecutionPath path : kPaths) {
      SCOPED_TRACE(m.name + " / " + to_string(path));
      const ExecutionPreference e = preference(path);
      QuantizedModel zero = quantize_model(m.model, mixed(0.0, e));
      ASSERT_EQ(zero.report.at("execution_path"), to_string(path));
      EXPECT_TRUE(test::tensors_equal(zero.model.forward(m.tokens), full));
      const at::Tensor vectorwise =
          quantize_model(m.model, with_execution(preset_scheme("int8-vectorwise"), e)).model.forward(m.tokens);
      EXPECT_TRUE(test::tensors_equal(quantize_model(m.model, mixed(kInf, e)).model.forward(m.tokens), vectorwise));
      EXPECT_TRUE(test::tensors_equal(quantize_model(m.model, mixed(1e30, e)).model.forward(m.tokens), vectorwise));
      EXPECT_FALSE(at::equal(vectorwise, full));
    }
  }
}

TEST(MixedPrecisionModel, KernelPathMatchesTheReferenceAndIgnoresTheBatchSize) {
  // Tolerance as ModelQuant.Int8KernelPathMatchesTheReferenceInPerplexity: 5e-3 nats. Threshold
  // 2.5 so that the random models (unit-scale activations) have outliers too.
  for (const auto& m : models()) {
    for (const double threshold : {6.0, 2.5}) {
      SCOPED_TRACE(m.name + " / " + std::to_string(threshold));
      QuantizedModel kernel = quantize_model(m.model, mixed(threshold));
      ASSERT_EQ(kernel.report.at("execution_path"), "kernel");
      const at::Tensor nk = per_token_nll(kernel.model, m.tokens);
      const at::Tensor nr =
          per_token_nll(quantize_model(m.model, mixed(threshold, ExecutionPreference::reference)).model, m.tokens);
      EXPECT_NEAR(nk.mean().item<double>(), nr.mean().item<double>(), 5e-3);
      const at::Tensor batch = kernel.model.forward(m.tokens);
      for (std::int64_t b = 0; b < m.tokens.size(0); ++b)
        EXPECT_TRUE(test::tensors_equal(batch[b], kernel.model.forward(m.tokens.narrow(0, b, 1))[0])) << "sequence " << b;
      if (threshold == 2.5) {
        const nlohmann::json report = outlier_features_report(kernel.model);
        EXPECT_GT(report.at("mean_outlier_features").get<double>(), 0.0) << report.dump();
      }
    }
  }
}

TEST(MixedPrecisionModel, ReportSaysWhichFeaturesWereOutliersInWhichLayer) {
  // A Llama-style model whose token 5 embeds as 3·(e_3 + e_7) and whose first attention norm
  // has gain 2 at features 3 and 7: that token's normed row is ≈ 11.3 at features 3 and 7 and 0
  // elsewhere, every other row of unit scale (|x| < 6). Token 5 appears in sequence 1 only, so
  // layers.0.attn.{q,k,v} see features 3 and 7 as outliers in exactly one sequence.
  const Transformer base = test::random_transformer(5, false, 96, 64, 2);
  ModelWeights w = base.weights();
  w.token_embedding = w.token_embedding.clone();
  w.token_embedding[5].zero_();
  w.token_embedding[5][3] = 3.0f;
  w.token_embedding[5][7] = 3.0f;
  w.blocks[0].attn_norm.weight = w.blocks[0].attn_norm.weight.clone();
  w.blocks[0].attn_norm.weight[3] = 2.0f;
  w.blocks[0].attn_norm.weight[7] = 2.0f;
  const Transformer model(base.config(), w, "planted");
  at::manual_seed(53);
  at::Tensor tokens = at::randint(8, 96, {3, 32}, at::kLong);
  tokens[1][9] = 5;

  QuantizedModel q = quantize_model(model, preset_scheme("int8-mixed"));
  EXPECT_TRUE(outlier_features_report(quantize_model(model, preset_scheme("int8-vectorwise")).model).is_null());
  const nlohmann::json empty = outlier_features_report(q.model);
  EXPECT_EQ(empty.at("sequences"), 0);
  EXPECT_EQ(empty.at("mean_outlier_features"), 0.0);
  q.model.forward(tokens);
  const nlohmann::json report = outlier_features_report(q.model);
  ASSERT_FALSE(report.is_null());
  EXPECT_EQ(report.at("threshold"), 6.0);
  EXPECT_EQ(report.at("sequences"), 3);
  std::vector<std::string> names;
  for (const auto& l : model.linears())
    if (l.name != "lm_head") names.push_back(l.name);
  ASSERT_EQ(report.at("layers").size(), names.size());
  double sum_of_means = 0;
  for (std::size_t i = 0; i < names.size(); ++i) {
    const nlohmann::json& layer = report.at("layers")[i];
    EXPECT_EQ(layer.at("name"), names[i]);  // execution order
    EXPECT_EQ(layer.at("sequences"), 3) << names[i];
    sum_of_means += layer.at("mean_outlier_features").get<double>();
    if (names[i].rfind("layers.0.attn.", 0) == 0 && names[i] != "layers.0.attn.o") {
      EXPECT_EQ(layer.at("in_features"), 64);
      EXPECT_EQ(layer.at("features"), nlohmann::json::parse("[[3, 1], [7, 1]]")) << names[i] << ": " << layer.dump();
      EXPECT_EQ(layer.at("max_outlier_features"), 2);
      EXPECT_DOUBLE_EQ(layer.at("mean_outlier_features").get<double>(), 2.0 / 3.0);
    }
  }
  EXPECT_DOUBLE_EQ(report.at("mean_outlier_features").get<double>(), sum_of_means / static_cast<double>(names.size()));
  // Without token 5 layer 0's attention inputs have none; reset clears the log.
  reset_outlier_features(q.model);
  q.model.forward(tokens.narrow(0, 2, 1));
  const nlohmann::json again = outlier_features_report(q.model);
  EXPECT_EQ(again.at("sequences"), 1);
  EXPECT_EQ(again.at("layers")[0].at("features"), nlohmann::json::array());
  EXPECT_EQ(again.at("layers")[0].at("max_outlier_features"), 0);
}

TEST(MixedPrecisionModel, RecordNamesTheThresholdAndTheFp32Weight) {
  const Transformer model = test::random_transformer(6, true, 64, 32, 2);
  QuantizedModel q = quantize_model(model, preset_scheme("int8-mixed"));
  EXPECT_EQ(q.report.at("execution_path"), "kernel");
  EXPECT_EQ(q.report.at("scheme").at("outlier_threshold"), 6.0);
  for (const auto& l : q.report.at("layers")) {
    if (!l.at("quantized").get<bool>()) continue;
    EXPECT_NE(l.at("describe").get<std::string>().find("outliers |x|>=6 in fp32 (fp32 weight held too)"),
              std::string::npos)
        << l.dump();
    EXPECT_GT(l.at("weight_bytes").get<std::int64_t>(), l.at("fp32_weight_bytes").get<std::int64_t>()) << l.dump();
  }
  // execution: reference is honoured.
  EXPECT_EQ(quantize_model(model, mixed(6.0, ExecutionPreference::reference)).report.at("execution_path"), "reference");
}

}  // namespace
}  // namespace qeval
