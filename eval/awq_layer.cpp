#include "eval/awq_layer.h"

#include <algorithm>
#include <memory>
#include <utility>

#include "common/error.h"
#include "model/linear.h"
#include "model/weights.h"
#include "quant/calibration/awq_mappings.h"
#include "quant/calibration/awq_search.h"
#include "quant/calibration/awq_weights.h"

namespace qeval {

namespace {

// How many of a mapping's largest scales the record lists.
constexpr std::int64_t kAwqLargestScales = 16;

// A linear that keeps a copy of every input before computing its output as `inner` does.
class InputRecorder final : public Linear {
 public:
  InputRecorder(std::shared_ptr<const Linear> inner, std::vector<at::Tensor>* inputs)
      : inner_(std::move(inner)), inputs_(inputs) {}
  at::Tensor forward(const at::Tensor& x) const override {
    inputs_->push_back(x.detach().clone());
    return inner_->forward(x);
  }
  std::int64_t in_features() const override { return inner_->in_features(); }
  std::int64_t out_features() const override { return inner_->out_features(); }
  std::int64_t weight_bytes() const override { return inner_->weight_bytes(); }
  std::string describe() const override { return "inputs kept for AWQ of " + inner_->describe(); }
  std::shared_ptr<const Linear> placed(PlacementCache&) const override {
    fail("InputRecorder: AWQ's layer pass runs on the CPU and never places its layers");
  }

 private:
  std::shared_ptr<const Linear> inner_;
  std::vector<at::Tensor>* inputs_;
};

const std::shared_ptr<const Linear>& linear_named(const Block& block, const std::string& name) {
  for (const NamedLinear& l : block.linears())
    if (l.name == name) return l.linear;
  fail("AWQ: layer {} has no linear {}", block.layer(), name);
}

}  // namespace

AwqLayerResult awq_layer(const Block& full, const std::vector<at::Tensor>& stream,
                         const std::vector<ForwardContext>& contexts, const SchemeSpec& spec, const std::string& model) {
  QEVAL_CHECK(stream.size() == contexts.size() && !stream.empty(),
              "AWQ layer {}: expected one context per calibration batch, found {} batches and {} contexts",
              full.layer(), stream.size(), contexts.size());
  const std::vector<AwqMapping> mappings = awq_mappings(full.config(), full.layer(), model);
  QEVAL_CHECK(!full.weights().down_input_rotation.defined(),
              "AWQ: model {} layer {} rotates the MLP's hidden activation before down (transforms/rotate); up → "
              "down cannot fold through it: apply AWQ without the rotation", model, full.layer());
  const AwqOptions options = awq_options(spec.weights);
  AwqLayerResult result;

  // Which mappings run: not skipped for the model's shapes, and some linear of it quantised. The
  // record lists them in the mappings' order.
  std::vector<nlohmann::json> entries(mappings.size());
  std::vector<const AwqMapping*> active;
  for (const AwqMapping& m : mappings) {
    std::string skipped = m.skipped;
    bool any_selected = !m.smooth_is_norm && spec.selects(m.smooth);
    for (const std::string& b : m.balance) any_selected = any_selected || spec.selects(b);
    if (skipped.empty() && !any_selected) skipped = "the scheme quantises none of its linears";
    if (skipped.empty()) {
      active.push_back(&m);
      continue;
    }
    entries[static_cast<std::size_t>(&m - mappings.data())] = {
        {"name", m.name}, {"smooth", m.smooth}, {"balance", m.balance}, {"skipped", skipped}};
  }

  // 1. The inputs of each active mapping's first balance linear, from the layer as read.
  std::map<std::string, std::vector<at::Tensor>> inputs;
  {
    Block recording = full;
    for (const AwqMapping* m : active) {
      const std::string& first = m->balance.front();
      recording.replace_linear(first, std::make_shared<InputRecorder>(linear_named(full, first), &inputs[first]));
    }
    for (std::size_t b = 0; b < stream.size(); ++b) {
      at::Tensor x = stream[b].clone();
      recording.forward(x, contexts[b], nullptr);
    }
  }

  // 2. Search and fold, mapping by mapping, on copies of the tensors a fold changes.
  std::map<std::string, at::Tensor> original;
  for (auto& [name, t] : named_tensors(full.weights(), full.layer())) original.emplace(name, t);
  std::map<std::string, at::Tensor>& work = result.folded;
  auto take = [&](const std::string& name) -> at::Tensor {  // the working copy (undefined when absent)
    if (const auto it = work.find(name); it != work.end()) return it->second;
    const auto it = original.find(name);
    if (it == original.end()) return at::Tensor();
    return work.emplace(name, it->second.to(at::kFloat).clone().contiguous()).first->second;
  };
  for (const AwqMapping* m : active) {
    const std::vector<at::Tensor>& x = inputs.at(m->balance.front());
    std::vector<at::Tensor> balance;
    for (const std::string& b : m->balance) balance.push_back(take(b + ".weight"));
    AwqActivationMean mean(balance.front().size(1));
    for (const at::Tensor& batch : x) mean.add(batch);
    const AwqMappingInputs in{balance, mean.mean(), m->name};
    AwqSearchResult r;
    if (m->parent == AwqParent::linear) {
      r = awq_search_scales_linear(in, x, options);
    } else {
      const Block current = full.with_tensors(work);  // the earlier mappings' folds in place
      const AwqParent parent = m->parent;
      r = awq_search_scales(
          in,
          [&](const std::vector<at::Tensor>& weights) {
            Block b = current;
            for (std::size_t i = 0; i < weights.size(); ++i) {
              const auto* f = dynamic_cast<const FloatLinear*>(linear_named(current, m->balance[i]).get());
              QEVAL_CHECK(f != nullptr, "AWQ {}: {} is not a float linear", m->name, m->balance[i]);
              b.replace_linear(m->balance[i], std::make_shared<FloatLinear>(weights[i], f->bias()));
            }
            std::vector<at::Tensor> out;
            for (std::size_t i = 0; i < x.size(); ++i)
              out.push_back(parent == AwqParent::mixer ? b.mixer_forward(x[i], contexts[i]) : b.ffn_forward(x[i]));
            return out;
          },
          options);
    }
    awq_fold_scales(r.scales, take(m->smooth + ".weight"), take(m->smooth + ".bias"), balance, m->name);
    const AwqGridPoint& best = r.grid[r.best_index];
    // The input channels AWQ protects most (its largest scales), to set beside the outlier
    // channels the statistics measure (docs/calibrated.md, the study in results/calibrated/).
    nlohmann::json largest = nlohmann::json::array();
    {
      const at::Tensor s = r.scales.to(at::kDouble).contiguous();
      const std::int64_t k = std::min<std::int64_t>(kAwqLargestScales, s.numel());
      const auto top = s.topk(k);
      const at::Tensor values = std::get<0>(top), indices = std::get<1>(top);
      for (std::int64_t i = 0; i < k; ++i)
        largest.push_back({{"channel", indices[i].item<std::int64_t>()}, {"scale", values[i].item<double>()}});
    }
    entries[static_cast<std::size_t>(m - mappings.data())] = {{"name", m->name},
                               {"smooth", m->smooth},
                               {"balance", m->balance},
                               {"parent", m->parent_name},
                               {"grid_index", r.best_index},
                               {"ratio", best.ratio},
                               {"duo", best.duo},
                               {"loss", r.best_loss},
                               {"initial_loss", r.initial_loss},
                               {"tokens", mean.tokens()},
                               {"largest_scales", largest}};
    for (const std::string& b : m->balance) result.balanced_by[b] = m->name;
  }
  for (nlohmann::json& e : entries) result.mappings.push_back(std::move(e));
  return result;
}

}  // namespace qeval
