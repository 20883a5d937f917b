// Kept tokens (issue 19, scheme keep_tokens / keep_first_tokens): k positions per sequence stay
// in full precision and the activation scales come from the other positions.
//   - JSON forms, resolved form and validation (errors name the file and the field);
//   - k = 0 is the plain scheme bit for bit; k ≥ L is full precision bit for bit (output
//     quantisation included), on both paths;
//   - kept rows equal the full-precision layer's rows exactly (one layer, and the first layer of
//     a model); the other rows equal the plain scheme run on those rows alone (scales from them);
//   - kernel and reference paths agree with the tolerances of quantized_linear_test.cpp and
//     model_quant_test.cpp (per layer 1e-5 · Σ|x̂||ŵ|; mean NLL within 5e-3 nats);
//   - top_norm keeps a planted massive-norm position (not 0), ties go to the lower position,
//     and the model reports which positions were kept.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cmath>
#include <iostream>

#include <cmath>

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

SchemeSpec keeping(SchemeSpec s, KeepRule rule, std::int64_t k) {
  s.keep_tokens = {rule, k};
  s.name += fmt::format("+keep-{}{}", to_string(rule), k);
  return s;
}

SchemeSpec with_execution(SchemeSpec s, ExecutionPreference e) {
  s.execution = e;
  return s;
}

SchemeSpec custom(const std::string& name, QuantSpec w, QuantSpec in, QuantSpec out = {}) {
  SchemeSpec s;
  s.name = name;
  s.weights = w, s.input_activations = in, s.output_activations = out;
  return s;
}

// Schemes with activation quantisation: every int8 preset, and w4 weights with int8 inputs.
std::vector<SchemeSpec> activation_schemes() {
  std::vector<SchemeSpec> out;
  for (const char* name : {"int8-fine", "int8-moderate", "int8-coarse", "int8-vectorwise"})
    out.push_back(preset_scheme(name));
  out.push_back(custom("w4-g128+a8-token", {QuantKind::int4_zeropoint, Granularity::group, 128},
                       {QuantKind::int8_absmax, Granularity::token}));
  out.push_back(custom("w8-channel+out-token", {QuantKind::int8_absmax, Granularity::channel}, {},
                       {QuantKind::int8_absmax, Granularity::token}));
  return out;
}

std::vector<ExecutionPreference> paths_for(const SchemeSpec& s) {
  if (!kernel_path_unavailable_reason(s).empty()) return {ExecutionPreference::reference};
  return {ExecutionPreference::reference, ExecutionPreference::kernel};
}

using test::NamedModel;
using test::per_token_nll;

std::vector<NamedModel> models() { return test::quant_test_models(7, 4, 48); }

// Rows of y [B, L, N] at positions [B, m] → [B, m, N].
at::Tensor rows(const at::Tensor& y, const at::Tensor& positions) {
  return y.gather(1, positions.unsqueeze(2).expand({y.size(0), positions.size(1), y.size(2)}));
}

// The positions not in `kept` [B, k], ascending: [B, L − k].
at::Tensor rest_of(const at::Tensor& kept, std::int64_t L) {
  at::Tensor mask = at::ones({kept.size(0), L}, at::kBool);
  mask.scatter_(1, kept, false);
  return at::arange(L).unsqueeze(0).expand({kept.size(0), L}).masked_select(mask).reshape({kept.size(0), -1});
}

// Activations with an outlier feature and a massive first position, as real models have.
at::Tensor activations(std::int64_t B, std::int64_t L, std::int64_t K, std::uint64_t seed) {
  at::manual_seed(seed);
  at::Tensor x = at::randn({B, L, K});
  x.select(2, 3).mul_(20);
  x.select(1, 0).mul_(50);
  return x;
}

// --- JSON -------------------------------------------------------------------------------------

TEST(KeepTokensSpec, JsonFormsResolveAndRoundTrip) {
  auto parse = [](const std::string& extra) {
    return scheme_from_json(nlohmann::json::parse(R"({"weights": {"kind": "int8_absmax", "granularity": "tensor"},
      "input_activations": {"kind": "int8_absmax", "granularity": "tensor"})" + extra + "}"), "spec.json");
  };
  EXPECT_TRUE(parse("").keep_tokens == (KeepTokens{KeepRule::first, 0}));
  EXPECT_TRUE(parse(R"(, "keep_first_tokens": 2)").keep_tokens == (KeepTokens{KeepRule::first, 2}));
  EXPECT_TRUE(parse(R"(, "keep_tokens": {"first": 3})").keep_tokens == (KeepTokens{KeepRule::first, 3}));
  const SchemeSpec top = parse(R"(, "keep_tokens": {"top_norm": 4})");
  EXPECT_TRUE(top.keep_tokens == (KeepTokens{KeepRule::top_norm, 4}));
  const nlohmann::json j = scheme_to_json(top);
  EXPECT_EQ(j.at("keep_tokens"), nlohmann::json::parse(R"({"top_norm": 4})"));
  EXPECT_EQ(scheme_to_json(scheme_from_json(j, "round trip")), j);
  EXPECT_EQ(scheme_to_json(preset_scheme("int8-moderate")).at("keep_tokens"), nlohmann::json::parse(R"({"first": 0})"));
  EXPECT_EQ(scheme_to_json(preset_scheme("int8-coarse-keep1")).at("keep_tokens"),
            nlohmann::json::parse(R"({"first": 1})"));
  // Output activations alone are enough.
  EXPECT_NO_THROW(scheme_from_json(nlohmann::json::parse(R"({"output_activations": {"kind": "int8_absmax",
      "granularity": "tensor"}, "keep_first_tokens": 1})"), "spec.json"));
}

TEST(KeepTokensSpec, InvalidFormsFailNamingTheFileAndField) {
  auto parse = [](const std::string& body) {
    return [body] { scheme_from_json(nlohmann::json::parse(body), "scheme file mine.json"); };
  };
  const std::string a8 = R"("input_activations": {"kind": "int8_absmax", "granularity": "tensor"})";
  EXPECT_TRUE(test::throws_with(parse("{" + a8 + R"(, "keep_first_tokens": -1})"),
                                {"mine.json", "keep_first_tokens", "non-negative integer", "-1"}));
  EXPECT_TRUE(test::throws_with(parse("{" + a8 + R"(, "keep_first_tokens": 1.5})"),
                                {"mine.json", "keep_first_tokens", "should be an integer", "1.5"}));
  EXPECT_TRUE(test::throws_with(parse("{" + a8 + R"(, "keep_first_tokens": "1"})"),
                                {"mine.json", "keep_first_tokens", "should be an integer"}));
  EXPECT_TRUE(test::throws_with(parse("{" + a8 + R"(, "keep_tokens": {"top_norm": -2}})"),
                                {"mine.json", "keep_tokens.top_norm", "non-negative"}));
  EXPECT_TRUE(test::throws_with(parse("{" + a8 + R"(, "keep_tokens": {"largest": 1}})"),
                                {"mine.json", "unknown rule 'largest'", "first, top_norm"}));
  EXPECT_TRUE(test::throws_with(parse("{" + a8 + R"(, "keep_tokens": {"first": 1, "top_norm": 1}})"),
                                {"mine.json", "keep_tokens", "one rule"}));
  EXPECT_TRUE(test::throws_with(parse("{" + a8 + R"(, "keep_tokens": 1})"), {"mine.json", "keep_tokens", "one rule"}));
  EXPECT_TRUE(test::throws_with(parse("{" + a8 + R"(, "keep_first_tokens": 1, "keep_tokens": {"first": 1}})"),
                                {"mine.json", "not both"}));
  // Keeping tokens with no activation quantisation would mean nothing.
  EXPECT_TRUE(test::throws_with(
      parse(R"({"weights": {"kind": "int4_zeropoint", "granularity": "channel"}, "keep_first_tokens": 1})"),
      {"mine.json", "keep_first_tokens", "needs activation quantisation"}));
  EXPECT_NO_THROW(parse(R"({"weights": {"kind": "int4_zeropoint", "granularity": "channel"}, "keep_first_tokens": 0})")());
  SchemeSpec bad = preset_scheme("w4-zeropoint");
  bad.keep_tokens = {KeepRule::top_norm, 2};
  EXPECT_TRUE(test::throws_with([&] { validate_scheme(bad, "scheme w4"); }, {"scheme w4", "needs activation"}));
}

// --- One layer --------------------------------------------------------------------------------

TEST(KeepTokensLinear, KeptRowsEqualTheFullPrecisionLayerAndTheRestUseTheirOwnScales) {
  const std::int64_t B = 3, L = 17, K = 48, N = 40;
  at::manual_seed(11);
  const at::Tensor w = at::randn({N, K}) / std::sqrt(48.0), bias = at::randn({N}) * 0.1;
  const at::Tensor x = activations(B, L, K, 12);
  const at::Tensor full = FloatLinear(w, bias).forward(x);
  for (const SchemeSpec& plain : activation_schemes()) {
    for (const KeepTokens keep : {KeepTokens{KeepRule::first, 1}, KeepTokens{KeepRule::first, 5},
                                  KeepTokens{KeepRule::top_norm, 1}, KeepTokens{KeepRule::top_norm, 4}}) {
      const SchemeSpec spec = keeping(plain, keep.rule, keep.count);
      for (ExecutionPreference e : paths_for(spec)) {
        SCOPED_TRACE(spec.name + " / " + to_string(e));
        const ExecutionPath path = e == ExecutionPreference::kernel ? ExecutionPath::kernel : ExecutionPath::reference;
        QuantizedLinear q("layer", w, bias, spec, path);
        const at::Tensor kept = q.select_kept_positions(x), rest = rest_of(kept, L);
        ASSERT_EQ(kept.sizes(), (std::vector<std::int64_t>{B, keep.count}));
        const at::Tensor y = q.forward(x);
        EXPECT_TRUE(test::tensors_equal(rows(y, kept), rows(full, kept)));
        // The other rows: the plain scheme on those rows alone, bit for bit (their own scales).
        QuantizedLinear p("layer", w, bias, plain, path);
        const at::Tensor x_rest = rows(x, rest);
        EXPECT_TRUE(test::tensors_equal(rows(y, rest), p.forward(x_rest)));
        // ... which is not the plain scheme on all rows (the massive first row set its scales),
        // unless every scale is per token.
        auto per_row = [](const QuantSpec& a) { return !a.enabled() || a.granularity == Granularity::token; };
        if (!per_row(plain.input_activations) || !per_row(plain.output_activations))
          EXPECT_GT((rows(y, rest) - rows(p.forward(x), rest)).abs().max().item<double>(), 1e-4);
      }
    }
  }
}

TEST(KeepTokensLinear, KernelAndReferencePathsAgree) {
  // As quantized_linear_test.cpp: |kernel − reference| ≤ 1e-5 · Σ_k |x̂_k||ŵ_k| before output
  // quantisation, x̂ the quantised rows not kept; kept rows are equal exactly.
  const std::int64_t B = 2, L = 33, K = 96, N = 72;
  at::manual_seed(21);
  const at::Tensor w = at::randn({N, K}) / std::sqrt(96.0), bias = at::randn({N}) * 0.1;
  const at::Tensor x = activations(B, L, K, 22);
  for (const SchemeSpec& plain : activation_schemes()) {
    if (kernel_path_unavailable_reason(plain) != "") continue;
    for (const KeepTokens keep : {KeepTokens{KeepRule::first, 1}, KeepTokens{KeepRule::top_norm, 3}}) {
      SchemeSpec spec = keeping(plain, keep.rule, keep.count);
      spec.output_activations = {};
      SCOPED_TRACE(spec.name);
      QuantizedLinear kernel("layer", w, bias, spec, ExecutionPath::kernel);
      QuantizedLinear reference("layer", w, bias, spec, ExecutionPath::reference);
      const at::Tensor yk = kernel.forward(x), yr = reference.forward(x);
      const at::Tensor kept = kernel.select_kept_positions(x), rest = rest_of(kept, L);
      EXPECT_TRUE(test::tensors_equal(rows(yk, kept), rows(yr, kept)));
      const at::Tensor xq = fake_quantize_activations(rows(x, rest), spec.input_activations);
      const at::Tensor bound = 1e-5 * at::matmul(xq.abs().to(at::kDouble), reference.dequantized_weight().abs().to(at::kDouble).t());
      const at::Tensor err = (rows(yk, rest) - rows(yr, rest)).abs().to(at::kDouble);
      const at::Tensor excess = (err - bound).reshape({-1});
      const std::int64_t worst = excess.argmax().item<std::int64_t>();
      EXPECT_LE(excess[worst].item<double>(), 0.0)
          << "flat index " << worst << ": kernel " << rows(yk, rest).reshape({-1})[worst].item<float>() << ", reference "
          << rows(yr, rest).reshape({-1})[worst].item<float>() << ", bound " << bound.reshape({-1})[worst].item<double>();
    }
  }
}

TEST(KeepTokensLinear, TopNormPicksTheLargestRowsAndBreaksTiesToTheLowerPosition) {
  at::Tensor x = at::zeros({2, 6, 4});
  // Sequence 0: norms 1, 3, 3, 2, 3, 0 → top 2 = positions 1, 2 (ties to the lower).
  const float n0[] = {1, 3, 3, 2, 3, 0};
  for (int l = 0; l < 6; ++l) x[0][l][l % 4] = n0[l];
  // Sequence 1: the largest at position 5, then position 0 (−4 counts by its norm).
  x[1][5][1] = 9, x[1][0][2] = -4, x[1][3][0] = 1;
  QuantizedLinear q("layer", at::randn({3, 4}), at::Tensor(), keeping(preset_scheme("int8-moderate"), KeepRule::top_norm, 2),
                    ExecutionPath::reference);
  const at::Tensor kept = q.select_kept_positions(x);
  EXPECT_TRUE(test::tensors_equal(kept, at::tensor({1, 2, 0, 5}, at::kLong).reshape({2, 2})));
  // k ≥ L keeps every position; k = L − 1 of a constant sequence keeps the first L − 1.
  QuantizedLinear all("layer", at::randn({3, 4}), at::Tensor(),
                      keeping(preset_scheme("int8-moderate"), KeepRule::top_norm, 9), ExecutionPath::reference);
  EXPECT_TRUE(test::tensors_equal(all.select_kept_positions(x)[0], at::arange(6)));
  QuantizedLinear five("layer", at::randn({3, 4}), at::Tensor(),
                       keeping(preset_scheme("int8-moderate"), KeepRule::top_norm, 5), ExecutionPath::reference);
  EXPECT_TRUE(test::tensors_equal(five.select_kept_positions(at::ones({1, 6, 4}))[0], at::arange(5)));
}

// --- Whole models -----------------------------------------------------------------------------

TEST(KeepTokensModel, ZeroKeptIsThePlainSchemeBitForBit) {
  for (const auto& m : models()) {
    for (const SchemeSpec& plain : activation_schemes()) {
      for (ExecutionPreference e : paths_for(plain)) {
        SCOPED_TRACE(m.name + " / " + plain.name + " / " + to_string(e));
        const at::Tensor expected = quantize_model(m.model, with_execution(plain, e)).model.forward(m.tokens);
        for (KeepRule rule : {KeepRule::first, KeepRule::top_norm}) {
          QuantizedModel q = quantize_model(m.model, with_execution(keeping(plain, rule, 0), e));
          EXPECT_TRUE(test::tensors_equal(q.model.forward(m.tokens), expected)) << to_string(rule);
          EXPECT_TRUE(kept_positions_report(q.model).is_null());
        }
      }
    }
  }
}

TEST(KeepTokensModel, AllPositionsKeptIsFullPrecisionBitForBit) {
  for (const auto& m : models()) {
    const at::Tensor full = m.model.forward(m.tokens);
    const std::int64_t L = m.tokens.size(1);
    for (const SchemeSpec& plain : activation_schemes()) {
      for (ExecutionPreference e : paths_for(plain)) {
        for (const KeepTokens keep : {KeepTokens{KeepRule::first, L}, KeepTokens{KeepRule::first, L + 5},
                                      KeepTokens{KeepRule::top_norm, L}}) {
          SchemeSpec spec = with_execution(keeping(plain, keep.rule, keep.count), e);
          SCOPED_TRACE(m.name + " / " + spec.name + " / " + to_string(e));
          QuantizedModel q = quantize_model(m.model, spec);
          EXPECT_TRUE(test::tensors_equal(q.model.forward(m.tokens), full));
          // The scheme with one position fewer kept does change the model.
          spec.keep_tokens.count = L - 1;
          EXPECT_FALSE(at::equal(quantize_model(m.model, spec).model.forward(m.tokens), full));
        }
      }
    }
  }
}

// Wraps a linear and keeps its outputs.
class OutputRecorder final : public LinearDecorator {
 public:
  OutputRecorder(std::shared_ptr<const Linear> inner, std::vector<at::Tensor>* inputs, std::vector<at::Tensor>* outputs)
      : LinearDecorator(std::move(inner)), inputs_(inputs), outputs_(outputs) {}
  at::Tensor forward(const at::Tensor& x) const override {
    at::Tensor y = inner_->forward(x);
    inputs_->push_back(x.clone());
    outputs_->push_back(y.clone());
    return y;
  }

 private:
  std::vector<at::Tensor>* inputs_;
  std::vector<at::Tensor>* outputs_;
};

struct Recorded {
  std::vector<at::Tensor> inputs, outputs;
};

// Runs `model` on tokens recording the linear called `name`.
Recorded record(const Transformer& model, const std::string& name, const at::Tensor& tokens) {
  Recorded r;
  Transformer recording = model;
  for (const auto& l : model.linears())
    if (l.name == name) recording.replace_linear(name, std::make_shared<OutputRecorder>(l.linear, &r.inputs, &r.outputs));
  recording.forward(tokens);
  return r;
}

TEST(KeepTokensModel, KeptRowsOfTheFirstQuantisedLayerEqualFullPrecision) {
  for (const auto& m : models()) {
    const std::string first = m.model.linears().front().name;  // layers.0.attn.q or .qkv
    const Recorded full = record(m.model, first, m.tokens);
    for (const SchemeSpec& plain : activation_schemes()) {
      for (ExecutionPreference e : paths_for(plain)) {
        for (const KeepTokens keep : {KeepTokens{KeepRule::first, 1}, KeepTokens{KeepRule::top_norm, 2}}) {
          const SchemeSpec spec = with_execution(keeping(plain, keep.rule, keep.count), e);
          SCOPED_TRACE(m.name + " / " + first + " / " + spec.name + " / " + to_string(e));
          QuantizedModel q = quantize_model(m.model, spec);
          const Recorded got = record(q.model, first, m.tokens);
          ASSERT_EQ(got.outputs.size(), 1u);
          EXPECT_TRUE(test::tensors_equal(got.inputs[0], full.inputs[0]));  // the first layer sees the same input
          const auto* layer = dynamic_cast<const QuantizedLinear*>(q.model.linears().front().linear.get());
          ASSERT_NE(layer, nullptr);
          const at::Tensor kept = layer->select_kept_positions(got.inputs[0]);
          EXPECT_TRUE(test::tensors_equal(rows(got.outputs[0], kept), rows(full.outputs[0], kept)));
          const at::Tensor rest = rest_of(kept, m.tokens.size(1));
          EXPECT_FALSE(at::equal(rows(got.outputs[0], rest), rows(full.outputs[0], rest)));
        }
      }
    }
  }
}

TEST(KeepTokensModel, InSituLayersAgree) {
  // As ModelQuant.InSituLayersAgree: every quantised linear of the reference-path model, fed the
  // input it receives in a real forward pass, against its kernel-path twin. Kept rows: equal;
  // the rest: |Δ| ≤ 1e-5 · Σ_k |x̂_k||ŵ_k|, x̂ the rest rows quantised with their own scales.
  for (const auto& m : models()) {
    for (const char* preset : {"int8-moderate-keep1", "int8-coarse-keep1"}) {
      for (KeepRule rule : {KeepRule::first, KeepRule::top_norm}) {
        SchemeSpec spec = keeping(preset_scheme(preset), rule, rule == KeepRule::first ? 1 : 2);
        spec.output_activations = {};  // compare GEMMs; output quantisation is shared code
        SCOPED_TRACE(m.name + " / " + spec.name);
        QuantizedModel reference = quantize_model(m.model, with_execution(spec, ExecutionPreference::reference));
        std::vector<Recorded> seen(reference.model.linears().size());
        Transformer recording = reference.model;
        for (std::size_t i = 0; i < seen.size(); ++i) {
          const auto& l = reference.model.linears()[i];
          recording.replace_linear(l.name, std::make_shared<OutputRecorder>(l.linear, &seen[i].inputs, &seen[i].outputs));
        }
        recording.forward(m.tokens);
        for (std::size_t i = 0; i < seen.size(); ++i) {
          const auto* ref = dynamic_cast<const QuantizedLinear*>(reference.model.linears()[i].linear.get());
          if (ref == nullptr) continue;  // lm_head
          const std::string& name = reference.model.linears()[i].name;
          const auto* fl = dynamic_cast<const FloatLinear*>(m.model.linears()[i].linear.get());
          QuantizedLinear kernel(name, fl->weight(), fl->bias(), spec, ExecutionPath::kernel);
          const at::Tensor& x = seen[i].inputs.at(0);
          const at::Tensor yk = kernel.forward(x), yr = seen[i].outputs.at(0);
          const at::Tensor kept = ref->select_kept_positions(x), rest = rest_of(kept, x.size(1));
          EXPECT_TRUE(test::tensors_equal(rows(yk, kept), rows(yr, kept))) << name;
          const at::Tensor xq = fake_quantize_activations(rows(x, rest), spec.input_activations);
          const at::Tensor bound =
              1e-5 * at::matmul(xq.abs().to(at::kDouble), ref->dequantized_weight().abs().to(at::kDouble).t());
          const at::Tensor err = (rows(yk, rest) - rows(yr, rest)).abs().to(at::kDouble);
          EXPECT_LE((err - bound).max().item<double>(), 0.0) << name << ": largest |Δ| " << err.max().item<double>();
        }
      }
    }
  }
}

TEST(KeepTokensModel, KernelPathMatchesTheReferenceInPerplexityAndIgnoresTheBatchSize) {
  // Tolerance as ModelQuant.Int8KernelPathMatchesTheReferenceInPerplexity: 5e-3 nats, or 4
  // standard errors where output quantisation makes the paths differ at random tokens (below).
  for (const auto& m : models()) {
    for (const SchemeSpec& plain : activation_schemes()) {
      if (!kernel_path_unavailable_reason(plain).empty()) continue;
      for (const KeepTokens keep : {KeepTokens{KeepRule::first, 1}, KeepTokens{KeepRule::top_norm, 2}}) {
        const SchemeSpec spec = keeping(plain, keep.rule, keep.count);
        SCOPED_TRACE(m.name + " / " + spec.name);
        QuantizedModel kernel = quantize_model(m.model, spec);
        ASSERT_EQ(kernel.report.at("execution_path"), "kernel");
        const at::Tensor nk = per_token_nll(kernel.model, m.tokens);
        const at::Tensor nr =
            per_token_nll(quantize_model(m.model, with_execution(spec, ExecutionPreference::reference)).model, m.tokens);
        // Output quantisation (coarse) turns a 1-ulp GEMM difference into a whole quantisation step
        // wherever a value sits at a rounding boundary, so the two paths differ at random tokens:
        // the mean may exceed 5e-3 nats by chance, but not 4 standard errors of the paired
        // per-token difference (a real disagreement is systematic and far larger).
        const at::Tensor d = (nk - nr).to(at::kDouble).flatten();
        const double se = d.std().item<double>() / std::sqrt(static_cast<double>(d.numel()));
        std::cout << spec.name << ": mean NLL kernel - reference " << d.mean().item<double>() << " (se " << se << ")\n";
        EXPECT_LE(std::abs(d.mean().item<double>()), std::max(5e-3, 4 * se));
        const at::Tensor batch = kernel.model.forward(m.tokens);
        for (std::int64_t b = 0; b < m.tokens.size(0); ++b)
          EXPECT_TRUE(test::tensors_equal(batch[b], kernel.model.forward(m.tokens.narrow(0, b, 1))[0])) << "sequence " << b;
      }
    }
  }
}

TEST(KeepTokensModel, TopNormKeepsAPlantedMassiveTokenAndTheReportSaysSo) {
  // A Llama-style model whose token 7 embeds as 40·e_j, whose norm gains are 20 at feature j, and
  // whose v/up/gate projections ignore feature j (so the massive feature stays in its residual
  // row, as a massive activation does, and is not copied into the others by attention): every
  // block's normed input at that token has norm ≈ 160, the others ≈ 20. Token 7 sits at
  // position 5 of every window (never at 0), so q/k/v/up/gate must keep position 5.
  const Transformer base = test::random_transformer(5, false, 96, 64, 2);
  ModelWeights w = base.weights();
  const std::int64_t j = 9, planted = 5;
  w.token_embedding = w.token_embedding.clone();
  w.token_embedding[7].zero_();
  w.token_embedding[7][j] = 40;
  for (auto& b : w.blocks) {
    for (NormWeights* n : {&b.attn_norm, &b.mlp_norm}) {
      n->weight = n->weight.clone();
      n->weight[j] = 20;
    }
    for (LinearWeights* l : {&b.v, &b.up, &b.gate}) {
      l->weight = l->weight.clone();
      l->weight.select(1, j).zero_();
    }
  }
  const Transformer model(base.config(), w, "planted");
  at::manual_seed(31);
  at::Tensor tokens = at::randint(8, 96, {6, 32}, at::kLong);
  tokens.select(1, planted).fill_(7);

  QuantizedModel q = quantize_model(model, keeping(preset_scheme("int8-moderate"), KeepRule::top_norm, 1));
  q.model.forward(tokens);
  const nlohmann::json report = kept_positions_report(q.model);
  ASSERT_FALSE(report.is_null());
  EXPECT_EQ(report.at("rule"), "top_norm");
  EXPECT_EQ(report.at("count"), 1);
  EXPECT_EQ(report.at("sequences"), 6);
  std::int64_t readers = 0;
  for (const auto& layer : report.at("layers")) {
    const std::string name = layer.at("name");
    EXPECT_EQ(layer.at("sequences"), 6) << name;
    const bool reads_normed = name.find(".attn.o") == std::string::npos && name.find(".mlp.down") == std::string::npos;
    if (!reads_normed) continue;
    ++readers;
    EXPECT_EQ(layer.at("positions"), nlohmann::json::parse("[[5, 6]]")) << name << ": " << layer.at("positions").dump();
  }
  EXPECT_EQ(readers, 2 * 5);  // per block: q, k, v, up, gate
  // The scheme-wide histogram counts (linear, window) pairs; position 5 leads it.
  std::int64_t at_planted = 0, total = 0;
  for (const auto& entry : report.at("positions")) {
    total += entry[1].get<std::int64_t>();
    if (entry[0] == planted) at_planted = entry[1].get<std::int64_t>();
  }
  EXPECT_EQ(total, 6 * static_cast<std::int64_t>(report.at("layers").size()));
  EXPECT_GE(at_planted, 6 * readers);

  // The first rule keeps position 0 instead; reset clears the log.
  QuantizedModel first = quantize_model(model, preset_scheme("int8-moderate-keep1"));
  first.model.forward(tokens);
  first.model.forward(tokens.narrow(0, 0, 2));
  const nlohmann::json f = kept_positions_report(first.model);
  EXPECT_EQ(f.at("rule"), "first");
  EXPECT_EQ(f.at("sequences"), 8);
  EXPECT_EQ(f.at("positions"), nlohmann::json::parse("[[0, " + std::to_string(8 * f.at("layers").size()) + "]]"));
  reset_kept_positions(first.model);
  EXPECT_EQ(kept_positions_report(first.model).at("sequences"), 0);
  EXPECT_TRUE(kept_positions_report(first.model).at("positions").empty());
}

TEST(KeepTokensModel, ReportAndDescribeNameTheKeptTokens) {
  const Transformer model = test::random_transformer(6, true, 64, 32, 2);
  QuantizedModel q = quantize_model(model, preset_scheme("int8-coarse-keep1"));
  EXPECT_EQ(q.report.at("execution_path"), "kernel");
  EXPECT_EQ(q.report.at("scheme").at("keep_tokens"), nlohmann::json::parse(R"({"first": 1})"));
  for (const auto& l : q.report.at("layers")) {
    if (!l.at("quantized").get<bool>()) continue;
    EXPECT_NE(l.at("describe").get<std::string>().find("keep first:1 in fp32"), std::string::npos) << l.dump();
    // The fp32 weight is held for the kept rows and counted.
    EXPECT_GT(l.at("weight_bytes").get<std::int64_t>(), l.at("fp32_weight_bytes").get<std::int64_t>()) << l.dump();
  }
}

}  // namespace
}  // namespace qeval
