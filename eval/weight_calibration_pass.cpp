#include "eval/weight_calibration_pass.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "common/error.h"
#include "common/phases.h"
#include "eval/awq_layer.h"
#include "eval/evaluator.h"
#include "model/block.h"
#include "model/forward_context.h"
#include "model/transformer.h"
#include "quant/calibration/awq_weights.h"
#include "quant/calibration/hessian.h"
#include "quant/rewrite.h"
#include "quant/schemes/scheme_json.h"

namespace qeval {

namespace {

// The Hessians of one layer's linears. Linears that read the very same input tensor (q, k and v
// read the attention norm's output; gate and up the MLP norm's) share one sum, so x xᵀ, the
// calibration's largest cost, is computed once per input rather than once per linear; the sum is
// the same, to the bit. Which linear shares whose sum is found on the first batch and must hold
// on every later one.
class LayerHessians {
 public:
  void add(const std::string& linear, const at::Tensor& x) {
    const bool same_input = last_.defined() && x.is_same(last_) && x._version() == last_version_ && linear != last_owner_;
    const auto shared = reads_like_.find(linear);
    if (same_input) {
      QEVAL_CHECK(shared != reads_like_.end() ? shared->second == last_owner_ : !sums_.count(linear),
                  "Hessians: {} read {}'s input in one batch and not in another", linear, last_owner_);
      reads_like_.emplace(linear, last_owner_);
      return;
    }
    QEVAL_CHECK(shared == reads_like_.end(), "Hessians: {} read {}'s input in one batch and not in another", linear,
                shared == reads_like_.end() ? "" : shared->second);
    sums_.try_emplace(linear, x.size(-1)).first->second.add(x);
    last_ = x;  // held, so that no other tensor can take its place at the same address
    last_version_ = x._version();
    last_owner_ = linear;
  }
  // The linear whose input (and sum) `linear` shares, or itself.
  std::string owner(const std::string& linear) const {
    const auto shared = reads_like_.find(linear);
    return shared == reads_like_.end() ? linear : shared->second;
  }
  // A linear that read nothing has an empty sum (GPTQ then rounds it to nearest: every column dead).
  const HessianAccumulator& of(const std::string& linear, std::int64_t in_features) {
    const auto shared = reads_like_.find(linear);
    if (shared != reads_like_.end()) return sums_.at(shared->second);
    return sums_.try_emplace(linear, in_features).first->second;
  }

 private:
  std::map<std::string, HessianAccumulator> sums_;  // by the first linear that read each input
  std::map<std::string, std::string> reads_like_;   // a linear → the one whose input (and sum) it shares
  at::Tensor last_;                                 // the last input summed
  std::uint32_t last_version_ = 0;
  std::string last_owner_;
};

// A linear that adds every input to its layer's Hessians before computing its output as `inner` does.
class HessianLinear final : public Linear {
 public:
  HessianLinear(std::shared_ptr<const Linear> inner, LayerHessians* hessians, std::string name)
      : inner_(std::move(inner)), hessians_(hessians), name_(std::move(name)) {}
  at::Tensor forward(const at::Tensor& x) const override {
    hessians_->add(name_, x);
    return inner_->forward(x);
  }
  std::int64_t in_features() const override { return inner_->in_features(); }
  std::int64_t out_features() const override { return inner_->out_features(); }
  std::int64_t weight_bytes() const override { return inner_->weight_bytes(); }
  std::string describe() const override { return "Hessian of " + inner_->describe(); }
  std::shared_ptr<const Linear> placed(PlacementCache&) const override {
    fail("HessianLinear: the weight calibration pass runs on the CPU and never places its layers");
  }

 private:
  std::shared_ptr<const Linear> inner_;
  LayerHessians* hessians_;
  std::string name_;
};

// Consecutive windows of equal length, up to `batch_size` in a batch: [B, L] int64 tokens.
std::vector<at::Tensor> token_batches(const std::vector<Window>& windows, std::int64_t batch_size) {
  std::vector<at::Tensor> batches;
  std::size_t i = 0;
  while (i < windows.size()) {
    std::size_t j = i + 1;
    while (j < windows.size() && static_cast<std::int64_t>(j - i) < batch_size &&
           windows[j].tokens.size() == windows[i].tokens.size())
      ++j;
    const auto B = static_cast<std::int64_t>(j - i), L = static_cast<std::int64_t>(windows[i].tokens.size());
    at::Tensor tokens = at::empty({B, L}, at::kLong);
    auto* out = tokens.data_ptr<std::int64_t>();
    for (std::int64_t b = 0; b < B; ++b)
      for (std::int64_t l = 0; l < L; ++l) out[b * L + l] = windows[i + static_cast<std::size_t>(b)].tokens[static_cast<std::size_t>(l)];
    batches.push_back(tokens);
    i = j;
  }
  return batches;
}

// What decides a calibration's result besides the windows: the weights' spec and the selection.
std::string calibration_key(const SchemeSpec& spec) {
  const nlohmann::json j = scheme_to_json(spec);
  return nlohmann::json{{"weights", j.at("weights")}, {"include", j.at("include")}, {"exclude", j.at("exclude")}}.dump();
}

}  // namespace

WeightCalibrator::WeightCalibrator(ModelReader& full, std::function<CalibrationWindows(std::int64_t)> windows,
                                   std::int64_t batch_size)
    : full_(full), windows_(std::move(windows)), batch_size_(std::max<std::int64_t>(batch_size, 1)) {}

std::shared_ptr<const CalibratedWeights> WeightCalibrator::weights_for(const SchemeSpec& spec) {
  QEVAL_CHECK(spec.needs_weight_calibration(), "WeightCalibrator: scheme {} has no calibrated weights", spec.name);
  const std::string key = calibration_key(spec);
  if (auto found = done_.find(key); found != done_.end()) return found->second;

  const bool awq = spec.weights.awq.has_value();
  const std::string method = spec.weights.method();
  CalibrationWindows calib = [&] {
    PhaseScope data(Phase::data, kNoScheme);
    return windows_(spec.weights.calibration_windows());
  }();
  QEVAL_CHECK(!calib.windows.empty(), "scheme {}: no calibration window to calibrate {} with", spec.name, method);
  const auto config = std::make_shared<const ModelConfig>(full_.config());
  const std::string source = full_.info().path.empty() ? std::string("model") : full_.info().path.string();
  const std::string model_name = config->architecture.empty() ? source : fmt::format("'{}' ({})", config->architecture, source);
  const std::vector<std::string> linear_names = model_linear_names(*config);

  auto made = std::make_shared<CalibratedWeights>();
  SchemeSpec solved = spec;  // its calibrated weights fill in layer by layer
  solved.calibrated_weights = made;
  solved.kv_cache = {};  // the references calibrate weights on an unquantised cache

  // The stream after the embedding, one tensor per batch, with each batch's forward context.
  std::vector<at::Tensor> stream;
  std::vector<ForwardContext> contexts;
  std::int64_t tokens = 0;
  {
    PhaseScope calibrate(Phase::calibrate, kNoScheme);
    const at::Tensor position = [&] {
      PhaseScope read(Phase::read);
      return full_.position_embedding();
    }();
    for (const at::Tensor& batch : token_batches(calib.windows, batch_size_)) {
      check_tokens(batch, *config);
      const at::Tensor rows = [&] {
        PhaseScope read(Phase::read);
        return full_.token_embedding_rows(batch.reshape({-1}));
      }();
      at::Tensor x = embedding_stream(rows.to(at::kFloat).clone(), batch.size(0), batch.size(1), *config, position);
      contexts.push_back(make_forward_context(*config, batch.size(1), x));
      stream.push_back(std::move(x));
      tokens += batch.numel();
    }
  }

  nlohmann::json layers = nlohmann::json::array();
  nlohmann::json mappings = nlohmann::json::array();  // AWQ's
  for (std::int64_t layer = 0; layer < config->n_layers; ++layer) {
    std::map<std::string, at::Tensor> folded;  // AWQ's folded tensors of this layer
    const Block full = [&] {
      PhaseScope read(Phase::read);
      return Block(config, layer, full_.block(layer), source);
    }();
    std::vector<std::string> names;
    for (const NamedLinear& l : full.linears())
      if (spec.selects(l.name)) names.push_back(l.name);
    if (!names.empty() && awq) {
      // AWQ: each mapping's scales searched and folded, then the folded weights rounded to nearest.
      const AwqLayerResult r = [&] {
        PhaseScope solve(Phase::solve, kNoScheme);
        return awq_layer(full, stream, contexts, spec, model_name);
      }();
      PhaseScope quantize(Phase::quantize, kNoScheme);
      for (const auto& [name, tensor] : r.folded) {
        // A selected linear's folded weight becomes its codes; norms, biases and the weights of
        // linears left in full precision go to the scheme as they are.
        const bool codes = std::find(names.begin(), names.end(), name.substr(0, name.rfind('.'))) != names.end() &&
                           name.compare(name.rfind('.'), std::string::npos, ".weight") == 0;
        const std::string linear = name.substr(0, name.rfind('.'));
        if (codes) made->by_name[linear] = awq_calibrated_weight(tensor, spec.weights, linear);
        if (!codes || keep_folded_linears) made->replaced_tensors[name] = tensor;
      }
      for (const NamedLinear& l : full.linears()) {
        if (!spec.selects(l.name)) continue;
        if (!made->by_name.count(l.name)) {  // in no mapping that ran: its own weights rounded to nearest
          const auto* f = dynamic_cast<const FloatLinear*>(l.linear.get());
          QEVAL_CHECK(f != nullptr, "scheme {}: AWQ needs the float weight of {}, found {}", spec.name, l.name,
                      l.linear->describe());
          made->by_name[l.name] = awq_calibrated_weight(f->weight().to(at::kFloat), spec.weights, l.name);
        }
        const auto by = r.balanced_by.find(l.name);
        layers.push_back({{"name", l.name},
                          {"balanced_by", by == r.balanced_by.end() ? nlohmann::json(nullptr) : nlohmann::json(by->second)}});
      }
      for (const nlohmann::json& m : r.mappings) mappings.push_back(m);
      folded = r.folded;
    } else if (!names.empty()) {
      const GptqOptions options = gptq_options(spec.weights);
      // 1. the Hessians from full precision's layer on the scheme's stream
      LayerHessians hessians;
      Block recording = full;
      for (const NamedLinear& l : full.linears())
        if (spec.selects(l.name)) recording.replace_linear(l.name, std::make_shared<HessianLinear>(l.linear, &hessians, l.name));
      {
        PhaseScope calibrate(Phase::calibrate, kNoScheme);
        for (std::size_t b = 0; b < stream.size(); ++b) {
          at::Tensor x = stream[b].clone();
          recording.forward(x, contexts[b], nullptr);
        }
      }
      // 2. the solves
      {
        PhaseScope solve(Phase::solve, kNoScheme);
        for (const NamedLinear& l : full.linears()) {
          if (!spec.selects(l.name)) continue;
          const auto* linear = dynamic_cast<const FloatLinear*>(l.linear.get());
          QEVAL_CHECK(linear != nullptr, "scheme {}: GPTQ needs the float weight of {}, found {}", spec.name, l.name,
                      l.linear->describe());
          const HessianAccumulator& h = hessians.of(l.name, l.linear->in_features());
          const GptqResult r = gptq_solve(linear->weight().to(at::kFloat).contiguous(), h.hessian(), options, l.name);
          made->by_name[l.name] = calibrated_weight(r, spec.weights, l.name);
          layers.push_back({{"name", l.name},
                            {"loss", r.loss},
                            {"dead_columns", r.dead_columns},
                            {"fell_back_to_rtn", r.fell_back_to_rtn},
                            {"hessian_of", hessians.owner(l.name)},
                            {"samples", h.samples()},
                            {"rows", h.rows()}});
        }
      }
    }
    // 3. layer l + 1's input. GPTQ: layer l as the scheme has it now (llm-compressor writes GPTQ's
    // quantised weights in place before its propagating pass). AWQ: layer l folded, in full
    // precision: llm-compressor 0.14's SequentialPipeline propagates inside DisableQuantization and
    // its QuantizationModifier only observes the weights, so every layer's AWQ search sees the folded
    // full-precision model's activations (tests/eval/awq_end_to_end_test.cpp measures it); AutoAWQ
    // takes a layer's outputs before it scales it, the same function.
    if (layer + 1 < config->n_layers) {
      const Block next = [&] {
        PhaseScope quantize(Phase::quantize, kNoScheme);
        if (awq) return full.with_tensors(folded);
        SchemeRewrite rewrite(solved, linear_names);
        return rewrite.rewrite(full);
      }();
      PhaseScope calibrate(Phase::calibrate, kNoScheme);
      for (std::size_t b = 0; b < stream.size(); ++b) next.forward(stream[b], contexts[b], nullptr);
    }
  }

  nlohmann::json hashes = nlohmann::json::array();
  for (const Window& w : calib.windows) hashes.push_back(fmt::format("{:016x}", window_hash(w)));
  made->description = {{"method", method},
                       {"windows", static_cast<std::int64_t>(calib.windows.size())},
                       {"tokens", tokens},
                       {"calibration", calib.description},
                       {"window_hashes", hashes},
                       {"propagation", awq ? "sequential: each layer calibrated on the outputs of the layers before it, "
                                             "folded, in full precision (llm-compressor's and AutoAWQ's AWQ)"
                                           : "sequential: each layer calibrated on the outputs of the scheme's quantised "
                                             "layers before it"},
                       {"layers", layers}};
  if (awq) made->description["mappings"] = mappings;
  done_[key] = made;
  return made;
}

}  // namespace qeval
