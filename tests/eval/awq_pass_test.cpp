// AWQ's calibration pass (eval/awq_layer.h inside eval/weight_calibration_pass.h): the fold keeps
// the model's full-precision function; each mapping's chosen grid point is the search's on inputs
// this test records itself through Transformer::forward, layer by layer on the layers before it
// folded but in full precision, as llm-compressor 0.14's SequentialPipeline propagates AWQ (inside
// DisableQuantization; tests/eval/awq_end_to_end_test.cpp) and AutoAWQ does (the scheme's quantised
// layers before it would choose otherwise); the scheme carries the folded norms and runs alike on
// the 4-bit kernels and the reference path.
#include <gtest/gtest.h>

#include <algorithm>
#include <limits>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "common/error.h"
#include "eval/evaluator.h"
#include "eval/weight_calibration_pass.h"
#include "model/transformer.h"
#include "quant/calibrated_weights.h"
#include "quant/calibration/awq_mappings.h"
#include "quant/calibration/awq_search.h"
#include "quant/calibration/awq_weights.h"
#include "quant/quantized_linear.h"
#include "quant/rewrite.h"
#include "quant/schemes/presets.h"
#include "tests/support/test_data.h"
#include "tests/support/test_models.h"

namespace qeval {
namespace {

// Keeps a copy of every input (or output) of a linear.
class Recorder final : public Linear {
 public:
  Recorder(std::shared_ptr<const Linear> inner, std::vector<at::Tensor>* inputs, std::vector<at::Tensor>* outputs)
      : inner_(std::move(inner)), inputs_(inputs), outputs_(outputs) {}
  at::Tensor forward(const at::Tensor& x) const override {
    if (inputs_) inputs_->push_back(x.clone());
    at::Tensor y = inner_->forward(x);
    if (outputs_) outputs_->push_back(y.clone());
    return y;
  }
  std::int64_t in_features() const override { return inner_->in_features(); }
  std::int64_t out_features() const override { return inner_->out_features(); }
  std::int64_t weight_bytes() const override { return inner_->weight_bytes(); }
  std::string describe() const override { return "recording"; }
  std::shared_ptr<const Linear> placed(PlacementCache&) const override { return nullptr; }

 private:
  std::shared_ptr<const Linear> inner_;
  std::vector<at::Tensor>* inputs_;
  std::vector<at::Tensor>* outputs_;
};

// A Llama-style model whose residual stream has a few large channels (what AWQ protects).
Transformer llama_model(std::uint64_t seed, std::int64_t kv_heads, std::int64_t layers = 3) {
  const Transformer base = test::random_transformer(seed, false, 64, 32, layers, kv_heads);
  ModelWeights w = base.weights();
  w.token_embedding = w.token_embedding.clone();
  for (std::int64_t c : {3, 17, 29}) w.token_embedding.select(1, c).mul_(8);
  return Transformer(base.config(), w, "random llama");
}

std::vector<Window> random_windows(std::int64_t n, std::int64_t L, std::int64_t vocab) {
  at::manual_seed(13);
  std::vector<Window> windows;
  for (std::int64_t i = 0; i < n; ++i) {
    Window w;
    w.index = 100 + i;
    const at::Tensor t = at::randint(3, vocab, {L}, at::kLong);
    for (std::int64_t l = 0; l < L; ++l) w.tokens.push_back(static_cast<std::int32_t>(t[l].item<std::int64_t>()));
    windows.push_back(w);
  }
  return windows;
}

at::Tensor tokens_of(const Window& w) {
  at::Tensor t = at::empty({1, static_cast<std::int64_t>(w.tokens.size())}, at::kLong);
  for (std::size_t i = 0; i < w.tokens.size(); ++i) t[0][static_cast<std::int64_t>(i)] = w.tokens[i];
  return t;
}

SchemeSpec awq_spec(std::int64_t windows, std::int64_t group = 16) {
  SchemeSpec spec = resolve_scheme("awq-w4-g128");
  spec.weights.awq->windows = windows;
  spec.weights.group_size = group;
  return spec;
}

// The model with some block tensors replaced (named_tensors' names).
Transformer with_block_tensors(const Transformer& model, const std::map<std::string, at::Tensor>& replaced) {
  ModelWeights w = model.weights();
  std::size_t used = 0;
  for (std::int64_t l = 0; l < model.config().n_layers; ++l)
    for (auto& [name, slot] : block_tensor_slots(w.blocks[static_cast<std::size_t>(l)], l))
      if (const auto it = replaced.find(name); it != replaced.end()) {
        *slot = it->second;
        ++used;
      }
  EXPECT_EQ(used, replaced.size());
  return Transformer(model.config(), w, "folded");
}

struct Calibrated {
  std::shared_ptr<const CalibratedWeights> weights;
  SchemeSpec spec;
};

Calibrated calibrate(const Transformer& model, const std::vector<Window>& windows, SchemeSpec spec,
                     bool keep_folded_linears = false) {
  auto reader = transformer_reader(model);
  WeightCalibrator calibrator(*reader, [&](std::int64_t n) {
    EXPECT_EQ(n, static_cast<std::int64_t>(windows.size()));
    return CalibrationWindows{windows, {{"data", "random test windows"}}};
  });
  calibrator.keep_folded_linears = keep_folded_linears;
  spec.calibrated_weights = calibrator.weights_for(spec);
  return {spec.calibrated_weights, spec};
}

const nlohmann::json& mapping_named(const nlohmann::json& mappings, const std::string& name) {
  for (const nlohmann::json& m : mappings)
    if (m.at("name") == name) return m;
  throw Error("no mapping " + name);
}

TEST(AwqPass, TheFoldedModelComputesTheOriginalFunction) {
  const Transformer model = llama_model(21, 4);
  const std::vector<Window> windows = random_windows(4, 24, 64);
  const Calibrated c = calibrate(model, windows, awq_spec(4), /*keep_folded_linears=*/true);
  // Every norm gain and every linear of every layer was folded (4 heads of 4: v → o runs too).
  EXPECT_EQ(c.weights->replaced_tensors.size(), 3u * (2 + 7));
  const Transformer folded = with_block_tensors(model, c.weights->replaced_tensors);
  EXPECT_FALSE(folded.weights().blocks[1].attn_norm.weight.equal(model.weights().blocks[1].attn_norm.weight));
  EXPECT_FALSE(folded.weights().blocks[2].v.weight.equal(model.weights().blocks[2].v.weight));
  for (const Window& w : windows) {
    const at::Tensor expected = model.forward(tokens_of(w)), got = folded.forward(tokens_of(w));
    EXPECT_TRUE(test::tensors_close(got, expected, 2e-5, 2e-5));
  }
  // Without the balance side (only the previous ops divided) the function changes: the check can tell.
  std::map<std::string, at::Tensor> half;
  for (const auto& [name, t] : c.weights->replaced_tensors)
    if (name.find("norm") != std::string::npos) half[name] = t;
  const Transformer broken = with_block_tensors(model, half);
  EXPECT_FALSE(test::tensors_close(broken.forward(tokens_of(windows[0])), model.forward(tokens_of(windows[0])), 1e-3,
                                   1e-3));
}

// The layers before the one searched, in the independent route below.
enum class Earlier {
  folded,     // folded (norms and linears) in full precision: what the pass propagates
  quantised,  // as the scheme has them: folded norms, the pass's codes
};

// The independent route: for each layer, the whole model's forward (Transformer::forward) with the
// layers before it folded in full precision or as the scheme has them, recorders on this layer's linears, and the search and fold done here in the mappings'
// order, with the parents' outputs measured as o's output (the attention mixer's) and down's (the
// MLP's), not through Block::mixer_forward / ffn_forward.
struct RouteResult {
  std::map<std::string, std::size_t> grid_index;  // by mapping name
  std::map<std::string, at::Tensor> codes;        // by linear name
  std::map<std::string, at::Tensor> norms;        // folded norm gains
  std::map<std::string, at::Tensor> scales;       // the chosen scales, by mapping name
};

RouteResult search_through_forward(const Transformer& full, const Calibrated& c, const std::vector<Window>& windows,
                                   Earlier earlier_as) {
  const bool propagate_quantised = earlier_as == Earlier::quantised;
  const AwqOptions options = awq_options(c.spec.weights);
  RouteResult out;
  for (std::int64_t layer = 0; layer < full.config().n_layers; ++layer) {
    const std::string p = "layers." + std::to_string(layer) + ".";
    // The layers before this one folded (the pass kept every folded tensor: keep_folded_linears),
    // their quantised linears replaced below when the route is the scheme's.
    std::map<std::string, at::Tensor> earlier;
    for (const auto& [name, t] : c.weights->replaced_tensors)
      if (std::stoll(name.substr(7)) < layer) earlier[name] = t;
    const Transformer base = with_block_tensors(full, earlier);
    // Runs the model with this layer's weights replaced by `replaced` (linear name → weight),
    // recording the inputs or outputs of the linears in `watch`.
    struct Watch {
      std::vector<at::Tensor>* inputs = nullptr;
      std::vector<at::Tensor>* outputs = nullptr;
    };
    auto run = [&](const std::map<std::string, at::Tensor>& replaced, const std::map<std::string, Watch>& watch) {
      Transformer m = base;
      for (const NamedLinear& nl : base.linears()) {
        if (nl.name.rfind("layers.", 0) != 0) continue;
        const std::int64_t l = std::stoll(nl.name.substr(7));
        const auto* f = dynamic_cast<const FloatLinear*>(nl.linear.get());
        std::shared_ptr<const Linear> linear = nl.linear;
        if (l < layer && propagate_quantised)
          linear = std::make_shared<QuantizedLinear>(nl.name, f->weight(), f->bias(), c.spec, ExecutionPath::reference);
        if (const auto it = replaced.find(nl.name); l == layer && it != replaced.end())
          linear = std::make_shared<FloatLinear>(it->second, f->bias());
        if (const auto it = watch.find(nl.name); it != watch.end())
          linear = std::make_shared<Recorder>(linear, it->second.inputs, it->second.outputs);
        m.replace_linear(nl.name, linear);
      }
      for (const Window& win : windows) m.forward(tokens_of(win));
    };
    // The inputs of each mapping's first balance linear, from the layer as read (llm-compressor's
    // hooks and cached parent arguments are taken before any fold of the layer).
    const std::vector<AwqMapping> mappings = awq_mappings(full.config(), layer, "test");
    std::map<std::string, std::vector<at::Tensor>> inputs;
    std::map<std::string, Watch> watch;
    for (const AwqMapping& m : mappings) watch[m.balance.front()].inputs = &inputs[m.balance.front()];
    run({}, watch);
    // This layer's working weights, folded mapping by mapping.
    std::map<std::string, at::Tensor> work;
    for (auto& [name, t] : named_tensors(full.weights().blocks[static_cast<std::size_t>(layer)], layer))
      work[name] = t.clone();
    for (const AwqMapping& mapping : mappings) {
      if (!mapping.skipped.empty()) continue;
      const std::vector<at::Tensor>& x = inputs.at(mapping.balance.front());
      AwqActivationMean mean(x.front().size(-1));
      for (const at::Tensor& t : x) mean.add(t);
      std::vector<at::Tensor> balance;
      for (const std::string& b : mapping.balance) balance.push_back(work.at(b + ".weight"));
      const AwqMappingInputs in{balance, mean.mean(), mapping.name};
      AwqSearchResult r;
      if (mapping.parent == AwqParent::linear) {
        r = awq_search_scales_linear(in, x, options);
      } else {
        // The mixer's output is o's, the MLP's down's: the rest of the layer as read, so the parent
        // sees the inputs it saw before the fold, as llm-compressor's cached arguments.
        const std::string parent_output = mapping.parent == AwqParent::mixer ? p + "attn.o" : p + "mlp.down";
        r = awq_search_scales(
            in,
            [&](const std::vector<at::Tensor>& ws) {
              std::map<std::string, at::Tensor> replaced;
              for (std::size_t i = 0; i < ws.size(); ++i) replaced[mapping.balance[i]] = ws[i];
              std::vector<at::Tensor> y;
              run(replaced, {{parent_output, Watch{nullptr, &y}}});
              return y;
            },
            options);
      }
      out.grid_index[mapping.name] = r.best_index;
      out.scales[mapping.name] = r.scales.to(at::kDouble);
      const auto bias = work.find(mapping.smooth + ".bias");
      awq_fold_scales(r.scales, work.at(mapping.smooth + ".weight"), bias == work.end() ? at::Tensor() : bias->second,
                      balance, mapping.name);
    }
    for (const NamedLinear& nl : full.blocks()[static_cast<std::size_t>(layer)].linears())
      out.codes[nl.name] = awq_calibrated_weight(work.at(nl.name + ".weight"), c.spec.weights, nl.name).w4->qweight;
    for (const char* norm : {"attn_norm", "mlp_norm"}) out.norms[p + norm + ".weight"] = work.at(p + norm + ".weight");
  }
  return out;
}

TEST(AwqPass, EachMappingIsSearchedOnTheFoldedFullPrecisionOutputsOfTheLayersBeforeIt) {
  const Transformer model = llama_model(22, 4);
  const std::vector<Window> windows = random_windows(4, 24, 64);
  const Calibrated c = calibrate(model, windows, awq_spec(4), /*keep_folded_linears=*/true);
  const nlohmann::json& mappings = c.weights->description.at("mappings");
  ASSERT_EQ(mappings.size(), 3u * 4);
  const RouteResult sequential = search_through_forward(model, c, windows, Earlier::folded);
  const RouteResult from_quantised = search_through_forward(model, c, windows, Earlier::quantised);
  ASSERT_EQ(sequential.grid_index.size(), 3u * 4);
  std::int64_t nonzero = 0, later_differ = 0;
  for (const auto& [name, index] : sequential.grid_index) {
    const nlohmann::json& m = mapping_named(mappings, name);
    EXPECT_EQ(m.at("grid_index").get<std::size_t>(), index) << name << ": pass " << m.dump();
    nonzero += index != 0;
    EXPECT_LE(m.at("loss").get<double>(), m.at("initial_loss").get<double>()) << name;
    EXPECT_EQ(m.at("tokens"), 4 * 24) << name;
    // The record's largest scales: the route's 16 largest, channel and value, in descending order.
    const at::Tensor& s = sequential.scales.at(name);
    const nlohmann::json& largest = m.at("largest_scales");
    ASSERT_EQ(largest.size(), static_cast<std::size_t>(std::min<std::int64_t>(16, s.numel()))) << name;
    double previous = std::numeric_limits<double>::infinity();
    for (const nlohmann::json& e : largest) {
      const std::int64_t channel = e.at("channel").get<std::int64_t>();
      const double scale = e.at("scale").get<double>();
      EXPECT_EQ(scale, s[channel].item<double>()) << name << " channel " << channel;
      EXPECT_LE(scale, previous) << name;
      previous = scale;
    }
    // No channel left out has a larger scale than the smallest listed.
    const std::int64_t listed_above = std::count_if(largest.begin(), largest.end(), [&](const nlohmann::json& e) {
      return e.at("scale").get<double>() > previous;
    });
    EXPECT_EQ((s > previous).sum().item<std::int64_t>(), listed_above) << name;
  }
  EXPECT_GT(nonzero, 0) << "every mapping chose s = 1: the test would not see a wrong fold";
  for (const auto& [name, codes] : sequential.codes) {
    ASSERT_TRUE(c.weights->by_name.count(name)) << name;
    EXPECT_TRUE(test::tensors_equal(c.weights->by_name.at(name).w4->qweight, codes)) << name;
    const bool layer0 = name.rfind("layers.0.", 0) == 0;
    const bool same_as_quantised = codes.equal(from_quantised.codes.at(name));
    if (layer0) EXPECT_TRUE(same_as_quantised) << name << ": layer 0 sees the embedding's outputs either way";
    if (!layer0 && !same_as_quantised) ++later_differ;
  }
  // The route through the scheme's quantised layers gives other codes: the test can tell.
  EXPECT_GT(later_differ, 0);
  for (const auto& [name, gain] : sequential.norms)
    EXPECT_TRUE(test::tensors_close(c.weights->replaced_tensors.at(name), gain, 1e-6, 1e-6)) << name;
  // The record's account.
  const nlohmann::json& d = c.weights->description;
  EXPECT_EQ(d.at("method"), "awq");
  EXPECT_EQ(d.at("windows"), 4);
  EXPECT_EQ(d.at("layers").size(), 3u * 7);
  EXPECT_EQ(d.at("layers")[0].at("balanced_by"), "layers.0.attn_norm → attn.q, attn.k, attn.v");
}

TEST(AwqPass, GroupedQueryAttentionSkipsVToOAndTheSchemeRunsOnBothPaths) {
  const Transformer model = llama_model(23, 2, 2);
  const std::vector<Window> windows = random_windows(3, 16, 64);
  const Calibrated c = calibrate(model, windows, awq_spec(3));
  const nlohmann::json& vo = mapping_named(c.weights->description.at("mappings"), "layers.1.attn.v → attn.o");
  EXPECT_NE(vo.at("skipped").get<std::string>().find("grouped-query"), std::string::npos) << vo.dump();
  // Only the norms are replaced: every folded linear is quantised, its codes in by_name.
  EXPECT_EQ(c.weights->replaced_tensors.size(), 2u * 2);
  SchemeSpec kernel = c.spec, reference = c.spec;
  kernel.execution = ExecutionPreference::kernel;
  reference.execution = ExecutionPreference::reference;
  const QuantizedModel qk = quantize_model(model, kernel), qr = quantize_model(model, reference);
  EXPECT_EQ(qk.report.at("execution_path"), "kernel");
  EXPECT_EQ(qr.report.at("execution_path"), "reference");
  // The scheme's blocks carry the folded norms.
  EXPECT_TRUE(qk.model.blocks()[1].weights().mlp_norm.weight.equal(
      c.weights->replaced_tensors.at("layers.1.mlp_norm.weight")));
  const at::Tensor tokens = tokens_of(windows[0]);
  const at::Tensor yk = qk.model.forward(tokens), yr = qr.model.forward(tokens), y = model.forward(tokens);
  EXPECT_TRUE(test::tensors_close(yk, yr, 1e-4, 1e-4));
  EXPECT_FALSE(test::tensors_close(yr, y, 1e-3, 1e-3));  // quantised
  // The reference path multiplies exactly the codes' (q − z) · s.
  const NamedLinear& l = qr.model.blocks()[0].linears()[2];
  const auto* q = dynamic_cast<const QuantizedLinear*>(l.linear.get());
  ASSERT_NE(q, nullptr);
  EXPECT_TRUE(test::tensors_equal(q->dequantized_weight(), c.weights->by_name.at(l.name).dequantize()));
}

TEST(AwqPass, LayoutsOtherThanLlamasAreRefusedNamingTheModel) {
  const Transformer gpt2 = test::random_transformer(24, true, 64, 32, 1);
  const std::vector<Window> windows = random_windows(2, 8, 64);
  EXPECT_TRUE(test::throws_with([&] { calibrate(gpt2, windows, awq_spec(2)); },
                                {"AWQ", "fused q/k/v", "Llama-style", "layer 0"}));
}

TEST(AwqPass, ExcludedLinearsKeepTheirFoldInFullPrecisionAndAMappingWithNoneQuantisedIsSkipped) {
  const Transformer model = llama_model(25, 4, 2);
  const std::vector<Window> windows = random_windows(3, 16, 64);
  SchemeSpec spec = awq_spec(3);
  spec.exclude = {"*.attn.o", "*.mlp.up", "*.mlp.down"};
  const Calibrated c = calibrate(model, windows, spec);
  const nlohmann::json& mappings = c.weights->description.at("mappings");
  // v → o runs (v is quantised); o stays in full precision with its folded columns.
  EXPECT_FALSE(mapping_named(mappings, "layers.0.attn.v → attn.o").contains("skipped"));
  EXPECT_TRUE(c.weights->replaced_tensors.count("layers.0.attn.o.weight"));
  EXPECT_FALSE(c.weights->by_name.count("layers.0.attn.o"));
  // gate, up runs (gate is quantised); up's folded columns travel in full precision.
  EXPECT_TRUE(c.weights->replaced_tensors.count("layers.1.mlp.up.weight"));
  // up → down: neither is quantised, so it is skipped, as llm-compressor skips an untargeted mapping.
  const nlohmann::json& ud = mapping_named(mappings, "layers.1.mlp.up → mlp.down");
  EXPECT_NE(ud.value("skipped", "").find("quantises none"), std::string::npos) << ud.dump();
  EXPECT_FALSE(c.weights->replaced_tensors.count("layers.1.mlp.down.weight"));
  // The scheme runs those folded weights as float linears.
  const QuantizedModel q = quantize_model(model, c.spec);
  const auto* o = dynamic_cast<const FloatLinear*>(q.model.blocks()[0].linears()[3].linear.get());
  ASSERT_NE(o, nullptr) << "o is left in full precision";
  EXPECT_TRUE(o->weight().equal(c.weights->replaced_tensors.at("layers.0.attn.o.weight")));
  EXPECT_FALSE(o->weight().equal(model.weights().blocks[0].o.weight));
}

}  // namespace
}  // namespace qeval
