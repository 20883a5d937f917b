// Whole models under every scheme: the kernel path against the reference path, results
// independent of the batch size, and what quantize_model reports. Models: stories260K
// (llama2.c), the two Hugging Face fixtures (GPT-2 with fused c_attn and biases; Llama with
// grouped-query attention), and random GPT-2- and Llama-style models. Per-token NLL is computed
// here from the logits with at::log_softmax, independent of eval/.
//
// Kernel path vs reference path, and why the comparison is layered:
// - Weight-only schemes (w4): per-token NLL within 1e-5 relative.
// - int8 schemes quantise activations, a discontinuous step: where two float computations of
//   a layer output differ by one rounding, an activation sitting on a rounding boundary gets
//   a different code, and later layers amplify it. The reference path computed with float64
//   GEMMs differs from itself in float32 by as much (up to 0.5 nats on single tokens of
//   stories260K), so no float implementation can hold per-token NLL to 1e-5 there. Instead:
//   (1) on the activations each layer really sees in these models, kernel and reference
//       layers agree to float rounding (InSituLayersAgree);
//   (2) end to end, the kernel path equals, bit for bit, an independent evaluation of the
//       integer maths it claims (int64 sums of the reference quantisers' codes, scales after);
//   (3) mean NLL agrees within 5e-3 nats (measured differences: up to 2.2e-3).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "common/error.h"
#include "common/files.h"
#include "loaders/checkpoints/checkpoint.h"
#include "loaders/tokenizers/tokenizer.h"
#include "quant/packed_weights.h"
#include "quant/quantize.h"
#include "quant/quantized_linear.h"
#include "quant/rewrite.h"
#include "quant/schemes/presets.h"
#include "tests/support/test_data.h"
#include "tests/quant/quant_models.h"
#include "tests/support/test_models.h"

namespace qeval {
namespace {

using test::NamedModel;
using test::per_token_nll;

std::vector<NamedModel> models() { return test::quant_test_models(99, 8, 64); }

SchemeSpec with_execution(SchemeSpec s, ExecutionPreference e) {
  s.execution = e;
  return s;
}

std::vector<SchemeSpec> kernel_presets(bool int8) {
  std::vector<SchemeSpec> out;
  for (const auto& name : preset_names()) {
    SchemeSpec spec = preset_scheme(name);
    if (!spec.quantizes_anything() || !kernel_path_unavailable_reason(spec).empty()) continue;
    // Static scales need calibration windows, which quantize_model does not take: their kernel
    // path is held to the reference below (StaticInt8KernelPathMatchesTheReference); GPTQ's
    // codes need them too (tests/eval/weight_calibration_pass_test.cpp runs them on both paths).
    if (spec.needs_calibration() || spec.needs_weight_calibration()) continue;
    // A quantised KV cache changes the attention these linear-layer checks emulate around
    // (tests/quant/kv_cache_test.cpp holds it to its definition, w8a8-kv8 included).
    if (spec.kv_cache.enabled()) continue;
    if ((spec.weights.kind == QuantKind::int8_absmax) == int8) out.push_back(spec);
  }
  return out;
}

TEST(ModelQuant, WeightOnlySchemesKernelPathEqualsReferenceInPerTokenNll) {
  for (const auto& m : models()) {
    at::Tensor full_nll = per_token_nll(m.model, m.tokens);
    for (const SchemeSpec& spec : kernel_presets(false)) {
      SCOPED_TRACE(m.name + " / " + spec.name);
      QuantizedModel kernel = quantize_model(m.model, with_execution(spec, ExecutionPreference::kernel));
      QuantizedModel reference = quantize_model(m.model, with_execution(spec, ExecutionPreference::reference));
      ASSERT_EQ(kernel.report.at("execution_path"), "kernel");
      ASSERT_EQ(reference.report.at("execution_path"), "reference");
      at::Tensor nk = per_token_nll(kernel.model, m.tokens), nr = per_token_nll(reference.model, m.tokens);
      EXPECT_TRUE(test::tensors_close(nk, nr, 0.0, 1e-5));
      // The scheme really changed the model, so agreement is not agreement with full precision.
      EXPECT_GT((nr - full_nll).abs().max().item<double>(), 1e-4);
    }
  }
}

// Records the input of the linear it wraps (to replay real activations through single layers).
class RecordingLinear final : public LinearDecorator {
 public:
  RecordingLinear(std::shared_ptr<const Linear> inner, std::vector<at::Tensor>* sink) : LinearDecorator(std::move(inner)), sink_(sink) {}
  at::Tensor forward(const at::Tensor& x) const override {
    sink_->push_back(x.clone());
    return inner_->forward(x);
  }

 private:
  std::vector<at::Tensor>* sink_;
};

TEST(ModelQuant, InSituLayersAgree) {
  // Every quantised linear of the reference-path model, fed the input it receives in a real
  // forward pass, against its kernel-path twin: |Δ| ≤ 1e-5 · Σ_k |x̂_k| |ŵ_k| (pre output
  // quantisation, as in quantized_linear_test.cpp).
  for (const auto& m : models()) {
    for (SchemeSpec spec : kernel_presets(true)) {
      // Kept-token presets: the bound needs the rest rows' own quantisation (keep_tokens_test.cpp).
      if (spec.keep_tokens.enabled()) continue;
      SCOPED_TRACE(m.name + " / " + spec.name);
      spec.output_activations = {};  // compare GEMMs; output quantisation is shared code
      QuantizedModel reference = quantize_model(m.model, with_execution(spec, ExecutionPreference::reference));
      std::vector<std::vector<at::Tensor>> inputs(reference.model.linears().size());
      std::vector<std::shared_ptr<const Linear>> originals;
      Transformer recording = reference.model;
      for (std::size_t i = 0; i < reference.model.linears().size(); ++i) {
        const auto& l = reference.model.linears()[i];
        originals.push_back(l.linear);
        recording.replace_linear(l.name, std::make_shared<RecordingLinear>(l.linear, &inputs[i]));
      }
      recording.forward(m.tokens);
      for (std::size_t i = 0; i < originals.size(); ++i) {
        const auto* ref = dynamic_cast<const QuantizedLinear*>(originals[i].get());
        if (ref == nullptr) continue;  // lm_head
        const auto& name = reference.model.linears()[i].name;
        const FloatLinear* fl = dynamic_cast<const FloatLinear*>(m.model.linears()[i].linear.get());
        QuantizedLinear kernel(name, fl->weight(), fl->bias(), spec, ExecutionPath::kernel);
        for (const at::Tensor& x : inputs[i]) {
          at::Tensor xq = fake_quantize_activations(x, spec.input_activations);
          at::Tensor bound = 1e-5 * at::matmul(xq.abs().to(at::kDouble), ref->dequantized_weight().abs().to(at::kDouble).t());
          at::Tensor err = (kernel.forward(x) - ref->forward(x)).abs().to(at::kDouble);
          EXPECT_LE((err - bound).max().item<double>(), 0.0) << name << ": largest |Δ| " << err.max().item<double>();
        }
      }
    }
  }
}

// The integer maths of the int8 kernel path, evaluated independently: codes from the reference
// quantisers, exact int64 sums, rounded once to float32, then (acc · s_x) · s_w + bias. With
// keep_tokens {"first": k}: the first k rows are the float layer's, the rest a sequence of their own.
// With outlier_threshold T (LLM.int8()): per sequence, the integer maths on x with the columns
// whose max |x| >= T zeroed, plus x[:, O] w[:, O]ᵀ in float; a sequence whose every feature is an
// outlier takes the float layer's output.
class EmulatedInt8Linear final : public Linear {
 public:
  EmulatedInt8Linear(const FloatLinear& fl, const SchemeSpec& spec)
      : w_(quantize_int8_weight(fl.weight(), spec.weights, "emulated")), bias_(fl.bias()), spec_(spec), float_(fl) {
    EXPECT_EQ(spec.keep_tokens.rule, KeepRule::first) << "the emulation keeps the first positions only";
  }
  at::Tensor forward(const at::Tensor& x) const override {
    if (spec_.outlier_threshold) return decomposed(x);
    const std::int64_t L = x.size(1), k = std::min(spec_.keep_tokens.count, L);
    if (k == 0) return integer_maths(x);
    at::Tensor y = float_.forward(x);
    if (k < L) y.narrow(1, k, L - k).copy_(integer_maths(x.narrow(1, k, L - k).contiguous()));
    return y;
  }
  at::Tensor decomposed(const at::Tensor& x) const {
    const at::Tensor outlier = x.abs().amax(1).to(at::kDouble) >= *spec_.outlier_threshold;  // [B, K]
    if (!outlier.any().item<bool>()) return integer_maths(x);
    if (outlier.all().item<bool>()) return float_.forward(x);
    at::Tensor y = integer_maths(x.masked_fill(outlier.unsqueeze(1), 0.0f));  // [B, L, N]
    for (std::int64_t b = 0; b < x.size(0); ++b) {
      const at::Tensor cols = outlier[b].nonzero().reshape({-1});
      if (cols.numel() == 0) continue;
      if (cols.numel() == x.size(2))
        y[b].copy_(float_.forward(x.narrow(0, b, 1))[0]);
      else
        y[b].add_(at::matmul(x[b].index_select(1, cols), float_.weight().index_select(1, cols).t()));
    }
    return y;
  }
  at::Tensor integer_maths(const at::Tensor& x) const {
    const bool token = spec_.input_activations.granularity == Granularity::token;
    at::Tensor s = int8_absmax_scale(x, token ? std::vector<std::int64_t>{2} : std::vector<std::int64_t>{1, 2});
    at::Tensor q = int8_quantize(x, s);                                                    // [B, L, K]
    at::Tensor acc = at::matmul(q.to(at::kLong), w_.q.to(at::kLong).t()).to(at::kFloat);  // [B, L, N]
    at::Tensor y = acc * s * w_.scales;
    if (bias_.defined()) y = y + bias_;
    return fake_quantize_activations(y, spec_.output_activations);
  }
  std::int64_t in_features() const override { return w_.in_features(); }
  std::int64_t out_features() const override { return w_.out_features(); }
  std::int64_t weight_bytes() const override { return w_.bytes(); }
  std::string describe() const override { return "emulated int8"; }

 private:
  Int8Weight w_;
  at::Tensor bias_;
  SchemeSpec spec_;
  FloatLinear float_;
};

TEST(ModelQuant, Int8KernelPathComputesItsIntegerMathsEndToEnd) {
  for (const auto& m : models()) {
    for (const SchemeSpec& spec : kernel_presets(true)) {
      SCOPED_TRACE(m.name + " / " + spec.name);
      QuantizedModel kernel = quantize_model(m.model, spec);
      ASSERT_EQ(kernel.report.at("execution_path"), "kernel");
      Transformer emulated = m.model;
      for (const auto& l : m.model.linears())
        if (spec.selects(l.name))
          emulated.replace_linear(l.name, std::make_shared<EmulatedInt8Linear>(
                                              *dynamic_cast<const FloatLinear*>(l.linear.get()), spec));
      EXPECT_TRUE(test::tensors_equal(per_token_nll(kernel.model, m.tokens), per_token_nll(emulated, m.tokens)));
    }
  }
}

TEST(ModelQuant, Int8KernelPathMatchesTheReferenceInPerplexity) {
  // Tolerance on |mean NLL_kernel − mean NLL_reference|: 5e-3 nats (PPL within 0.5%). Measured
  // on these models and tokens: at most 2.2e-3 (stories260K, int8-coarse), often below 1e-6;
  // the float64 reference differs from the float32 one by the same order (see the header).
  for (const auto& m : models()) {
    const at::Tensor full = per_token_nll(m.model, m.tokens);
    for (const SchemeSpec& spec : kernel_presets(true)) {
      SCOPED_TRACE(m.name + " / " + spec.name);
      const at::Tensor nk = per_token_nll(quantize_model(m.model, spec).model, m.tokens);
      const at::Tensor nr =
          per_token_nll(quantize_model(m.model, with_execution(spec, ExecutionPreference::reference)).model, m.tokens);
      EXPECT_NEAR(nk.mean().item<double>(), nr.mean().item<double>(), 5e-3);
      EXPECT_GT((nr - full).abs().max().item<double>(), 1e-4) << "the scheme must change the model";
    }
  }
}

TEST(ModelQuant, StaticInt8KernelPathMatchesTheReference) {
  for (const auto& m : models()) {
    SCOPED_TRACE(m.name);
    SchemeSpec spec = preset_scheme("int8-moderate-static");
    // A calibrated amax per linear (any value is a valid static scale; 2 clips the largest inputs).
    auto scales = std::make_shared<CalibratedScales>();
    for (const auto& named : m.model.linears()) scales->amax[named.name] = 2.0;
    spec.calibrated = scales;
    QuantizedModel kernel = quantize_model(m.model, with_execution(spec, ExecutionPreference::kernel));
    QuantizedModel reference = quantize_model(m.model, with_execution(spec, ExecutionPreference::reference));
    ASSERT_EQ(kernel.report.at("execution_path"), "kernel");
    const at::Tensor nk = per_token_nll(kernel.model, m.tokens), nr = per_token_nll(reference.model, m.tokens);
    EXPECT_NEAR(nk.mean().item<double>(), nr.mean().item<double>(), 5e-3);
    EXPECT_GT((nr - per_token_nll(m.model, m.tokens)).abs().max().item<double>(), 1e-4) << "the scheme must change the model";
  }
}

TEST(ModelQuant, LogitsDoNotDependOnTheBatchSize) {
  for (const auto& m : models()) {
    for (const auto& name : preset_names()) {
      SCOPED_TRACE(m.name + " / " + name);
      // q8_0 / q4_0 caches need a head_dim that 32 divides (stories260K's is 8); static scales
      // need calibration windows, which quantize_model does not take (tests/quant/float_formats_test.cpp),
      // and so do GPTQ's weights (eval/weight_calibration_pass.h).
      const SchemeSpec spec = preset_scheme(name);
      if (spec.needs_calibration() || spec.needs_weight_calibration()) continue;
    // A quantised KV cache changes the attention these linear-layer checks emulate around
    // (tests/quant/kv_cache_test.cpp holds it to its definition, w8a8-kv8 included).
    if (spec.kv_cache.enabled()) continue;
      const std::int64_t hd = m.model.config().head_dim();
      if ((spec.kv_cache.format == KvCacheFormat::q8_0 || spec.kv_cache.format == KvCacheFormat::q4_0) && hd % 32 != 0)
        continue;
      QuantizedModel q = quantize_model(m.model, spec);
      at::Tensor batch = q.model.forward(m.tokens);  // [8, L, V]
      for (std::int64_t b = 0; b < m.tokens.size(0); ++b)
        EXPECT_TRUE(test::tensors_equal(batch[b], q.model.forward(m.tokens.narrow(0, b, 1))[0])) << "sequence " << b;
    }
  }
}

TEST(ModelQuant, ReportNamesThePathLayersAndBytes) {
  Transformer gpt2 = test::load_data_model("fixtures/tiny-gpt2-hf");
  QuantizedModel fine = quantize_model(gpt2, preset_scheme("int8-fine"));
  EXPECT_EQ(fine.report.at("execution_path"),
            "reference (per-feature activation scales cannot be factored out of an integer GEMM)");
  EXPECT_EQ(fine.report.at("scheme").at("input_activations").at("granularity"), "feature");
  const auto& layers = fine.report.at("layers");
  ASSERT_EQ(layers.size(), gpt2.linears().size());
  std::int64_t quantized = 0;
  for (const auto& l : layers) {
    const bool is_head = l.at("name") == "lm_head";
    EXPECT_EQ(l.at("quantized").get<bool>(), !is_head) << l.at("name");
    quantized += l.at("quantized").get<bool>();
  }
  EXPECT_EQ(fine.report.at("quantized_layers"), quantized);
  EXPECT_EQ(fine.report.at("quantized_layers"), 2 * 4);  // per block: qkv, o, up, down

  QuantizedModel w4 = quantize_model(gpt2, preset_scheme("w4-zeropoint"));
  EXPECT_EQ(w4.report.at("execution_path"), "kernel");
  const double ratio = w4.report.at("weight_bytes_ratio").get<double>();
  EXPECT_GT(ratio, 0.125);
  EXPECT_LT(ratio, 0.2);  // d = 64: scales, zeros and fp32 biases weigh more than on real widths

  // The fused GPT-2 attention projection is one unit: one per-tensor scale over all of c_attn.
  QuantizedModel moderate = quantize_model(gpt2, preset_scheme("int8-moderate"));
  for (const auto& l : moderate.model.linears()) {
    if (l.name != "layers.0.attn.qkv") continue;
    const auto* q = dynamic_cast<const QuantizedLinear*>(l.linear.get());
    ASSERT_NE(q, nullptr);
    ASSERT_EQ(q->int8_weight()->scales.numel(), 1);
    const at::Tensor& c_attn = gpt2.weights().blocks[0].qkv.weight;
    EXPECT_EQ(c_attn.size(0), 3 * 64);
    EXPECT_EQ(q->int8_weight()->scales.item<float>(), c_attn.abs().max().item<float>() / 127);
  }
  // The original model is untouched.
  for (const auto& l : gpt2.linears()) EXPECT_NE(dynamic_cast<const FloatLinear*>(l.linear.get()), nullptr);

  QuantizedModel full = quantize_model(gpt2, preset_scheme("full"));
  EXPECT_EQ(full.report.at("execution_path"), "none (full precision)");
  EXPECT_EQ(full.report.at("quantized_layers"), 0);
}

TEST(ModelQuant, LayerSelectionHeadFlagAndPatterns) {
  Transformer llama = test::load_data_model("fixtures/tiny-llama-hf");
  SchemeSpec s = preset_scheme("int8-vectorwise");
  s.quantize_lm_head = true;
  s.exclude = {"layers.1.*"};
  QuantizedModel q = quantize_model(llama, s);
  for (const auto& l : q.report.at("layers")) {
    const std::string name = l.at("name");
    const bool expected = name == "lm_head" || name.rfind("layers.0.", 0) == 0;
    EXPECT_EQ(l.at("quantized").get<bool>(), expected) << name;
  }
  s.exclude = {"layers.7.*"};
  try {
    quantize_model(llama, s);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("'layers.7.*' matches no linear"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("layers.0.attn.q, layers.0.attn.k"), std::string::npos) << e.what();
  }
  SchemeSpec fine = preset_scheme("int8-fine");
  fine.execution = ExecutionPreference::kernel;
  EXPECT_THROW(quantize_model(llama, fine), Error);
}

}  // namespace
}  // namespace qeval
