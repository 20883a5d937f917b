#include "train/optimizer.h"

#include <ATen/core/grad_mode.h>
#include <cmath>
#include <set>

#include "common/error.h"
#include "common/json_integer.h"

namespace qeval::train {
namespace {

std::string shape_string(at::IntArrayRef sizes) {
  std::string s = "[";
  for (std::size_t i = 0; i < sizes.size(); ++i) s += (i ? ", " : "") + std::to_string(sizes[i]);
  return s + "]";
}

}  // namespace

bool OptimizerOptions::decoupled() const {
  if (weight_decay_mode == "auto") return kind == "adamw";
  return weight_decay_mode == "decoupled";
}

nlohmann::json OptimizerOptions::to_json() const {
  return {{"kind", kind},
          {"beta1", beta1},
          {"beta2", beta2},
          {"eps", eps},
          {"weight_decay", weight_decay},
          {"weight_decay_mode", decoupled() ? "decoupled" : "l2"},
          {"momentum", momentum},
          {"transform_seed", transform_seed},
          {"transform", transform},
          {"dense_max", dense_max}};
}

OptimizerOptions OptimizerOptions::from_json(const nlohmann::json& j, const std::string& source) {
  OptimizerOptions o;
  try {
    o.kind = j.at("kind").get<std::string>();
    o.beta1 = j.at("beta1").get<double>();
    o.beta2 = j.at("beta2").get<double>();
    o.eps = j.at("eps").get<double>();
    o.weight_decay = j.at("weight_decay").get<double>();
    o.weight_decay_mode = j.at("weight_decay_mode").get<std::string>();
    o.momentum = j.at("momentum").get<double>();
    o.transform_seed = json_unsigned(j.at("transform_seed"), source + ": optimizer option transform_seed");
    o.transform = j.at("transform").get<std::string>();
    o.dense_max = json_integer(j.at("dense_max"), source + ": optimizer option dense_max");
  } catch (const nlohmann::json::exception& e) {
    fail("{}: optimizer options: {}", source, e.what());
  }
  return o;
}

Optimizer::Optimizer(std::vector<NamedParameter> params, OptimizerOptions options)
    : params_(std::move(params)), options_(std::move(options)), state_(params_.size()) {}

void Optimizer::zero_grad() {
  for (auto& p : params_) p.tensor.mutable_grad() = at::Tensor();
}

std::map<std::string, at::Tensor> Optimizer::state_tensors() const {
  std::map<std::string, at::Tensor> out;
  for (std::size_t i = 0; i < params_.size(); ++i)
    for (const auto& [slot, t] : state_[i]) out[params_[i].name + "." + slot] = t;
  return out;
}

nlohmann::json Optimizer::state_header() const { return {{"options", options_.to_json()}, {"step", step_}}; }

void Optimizer::load_state(const nlohmann::json& header, const std::map<std::string, at::Tensor>& tensors,
                           const std::string& source) {
  OptimizerOptions saved;
  std::int64_t step = 0;
  try {
    saved = OptimizerOptions::from_json(header.at("options"), source);
    step = json_integer(header.at("step"), source + ": optimizer step");
  } catch (const nlohmann::json::exception& e) {
    fail("{}: optimizer header: {}", source, e.what());
  }
  QEVAL_CHECK(saved.kind == options_.kind, "{}: optimizer state is for '{}', this run uses '{}'", source, saved.kind,
              options_.kind);
  QEVAL_CHECK(saved.kind != "orthoadam" || (saved.transform_seed == options_.transform_seed &&
                                            saved.transform == options_.transform && saved.dense_max == options_.dense_max),
              "{}: OrthoAdam state was made with transform '{}' seed {} (dense up to {}), this run has '{}' seed {} ({}): "
              "the moments live in that basis",
              source, saved.transform, saved.transform_seed, saved.dense_max, options_.transform, options_.transform_seed,
              options_.dense_max);
  QEVAL_CHECK(step >= 0, "{}: optimizer step {} is negative", source, step);
  std::size_t used = 0;
  for (std::size_t i = 0; i < params_.size(); ++i) {
    state_[i].clear();
    if (step == 0) continue;
    for (const std::string& slot : slots()) {
      const std::string name = params_[i].name + "." + slot;
      auto it = tensors.find(name);
      QEVAL_CHECK(it != tensors.end(), "{}: optimizer state has no tensor '{}'", source, name);
      QEVAL_CHECK(it->second.sizes() == params_[i].tensor.sizes() && it->second.scalar_type() == at::kFloat,
                  "{}: optimizer tensor '{}' is {} {}, expected float32 {}", source, name,
                  c10::toString(it->second.scalar_type()), shape_string(it->second.sizes()),
                  shape_string(params_[i].tensor.sizes()));
      state_[i][slot] = it->second.clone();
      ++used;
    }
  }
  QEVAL_CHECK(used == tensors.size(), "{}: optimizer state holds {} tensors, this model's parameters use {}", source,
              tensors.size(), used);
  step_ = step;
}

namespace {

class Sgd final : public Optimizer {
 public:
  Sgd(std::vector<NamedParameter> p, OptimizerOptions o) : Optimizer(std::move(p), std::move(o)) {}
  void step(double lr) override {
    at::NoGradGuard no_grad;
    ++step_;
    for (std::size_t i = 0; i < params_.size(); ++i) {
      at::Tensor p = params_[i].tensor;
      at::Tensor g = p.grad();
      if (!g.defined()) continue;
      if (options_.weight_decay != 0) g = g.add(p, options_.weight_decay);
      if (options_.momentum != 0) {
        auto it = state_[i].find("momentum");
        if (it == state_[i].end()) {
          it = state_[i].emplace("momentum", g.clone()).first;
        } else {
          it->second.mul_(options_.momentum).add_(g);
        }
        g = it->second;
      }
      p.add_(g, -lr);
    }
  }

 protected:
  std::vector<std::string> slots() const override {
    return options_.momentum != 0 ? std::vector<std::string>{"momentum"} : std::vector<std::string>{};
  }
};

// Adam, AdamW and OrthoAdam: one code path, OrthoAdam adds the rotation around the moments.
class AdamFamily final : public Optimizer {
 public:
  AdamFamily(std::vector<NamedParameter> p, OptimizerOptions o) : Optimizer(std::move(p), std::move(o)) {
    if (options_.kind != "orthoadam") return;
    const TransformKind kind = options_.transform == "identity" ? TransformKind::identity
                               : options_.transform == "hadamard" ? TransformKind::hadamard
                                                                  : TransformKind::dense;
    for (const auto& param : params_) {
      std::vector<std::int64_t> shape(param.tensor.sizes().begin(), param.tensor.sizes().end());
      transforms_.emplace_back(shape, kind, transform_seed(options_.transform_seed, param.name, -1),
                               options_.dense_max);
    }
  }

  void step(double lr) override {
    at::NoGradGuard no_grad;
    ++step_;
    const double b1 = options_.beta1, b2 = options_.beta2, wd = options_.weight_decay;
    const double bc1 = 1 - std::pow(b1, static_cast<double>(step_));
    const double bc2 = 1 - std::pow(b2, static_cast<double>(step_));
    const bool decoupled = options_.decoupled();
    for (std::size_t i = 0; i < params_.size(); ++i) {
      at::Tensor p = params_[i].tensor;
      at::Tensor g = p.grad();
      if (!g.defined()) continue;
      if (wd != 0 && !decoupled) g = g.add(p, wd);
      if (wd != 0 && decoupled) p.mul_(1 - lr * wd);
      if (!transforms_.empty()) g = transforms_[i].rotate(g);  // g' = Q g
      auto& s = state_[i];
      if (s.empty()) {
        s["exp_avg"] = at::zeros_like(p, at::MemoryFormat::Contiguous);
        s["exp_avg_sq"] = at::zeros_like(p, at::MemoryFormat::Contiguous);
      }
      at::Tensor& m = s["exp_avg"];
      at::Tensor& v = s["exp_avg_sq"];
      m.mul_(b1).add_(g, 1 - b1);
      v.mul_(b2).addcmul_(g, g, 1 - b2);
      at::Tensor u = m / (v.sqrt() / std::sqrt(bc2)).add_(options_.eps);
      if (!transforms_.empty()) u = transforms_[i].unrotate(u);  // back with Qᵀ
      p.add_(u, -lr / bc1);
    }
  }

 protected:
  std::vector<std::string> slots() const override { return {"exp_avg", "exp_avg_sq"}; }

 private:
  std::vector<TensorTransform> transforms_;  // OrthoAdam only, one per parameter
};

}  // namespace

std::unique_ptr<Optimizer> make_optimizer(std::vector<NamedParameter> params, const OptimizerOptions& o) {
  static const std::set<std::string> kinds{"sgd", "adam", "adamw", "orthoadam"};
  QEVAL_CHECK(kinds.count(o.kind), "optimizer: unknown kind '{}' (valid: sgd, adam, adamw, orthoadam)", o.kind);
  QEVAL_CHECK(o.beta1 >= 0 && o.beta1 < 1 && o.beta2 >= 0 && o.beta2 < 1,
              "optimizer: betas must be in [0, 1), got {} and {}", o.beta1, o.beta2);
  QEVAL_CHECK(o.eps > 0, "optimizer: eps must be > 0, got {}", o.eps);
  QEVAL_CHECK(o.weight_decay >= 0, "optimizer: weight decay must be >= 0, got {}", o.weight_decay);
  QEVAL_CHECK(o.weight_decay_mode == "auto" || o.weight_decay_mode == "l2" || o.weight_decay_mode == "decoupled",
              "optimizer: weight_decay_mode must be auto, l2 or decoupled, got '{}'", o.weight_decay_mode);
  QEVAL_CHECK(o.transform == "random" || o.transform == "hadamard" || o.transform == "identity",
              "optimizer: transform must be random, hadamard or identity, got '{}'", o.transform);
  QEVAL_CHECK(o.dense_max >= 1, "optimizer: dense_max must be >= 1, got {}", o.dense_max);
  std::set<std::string> names;
  for (const auto& p : params) {
    QEVAL_CHECK(names.insert(p.name).second, "optimizer: parameter '{}' given twice", p.name);
    QEVAL_CHECK(p.tensor.defined() && p.tensor.scalar_type() == at::kFloat,
                "optimizer: parameter '{}' must be a float32 tensor", p.name);
  }
  if (o.kind == "sgd") return std::unique_ptr<Optimizer>(new Sgd(std::move(params), o));
  return std::unique_ptr<Optimizer>(new AdamFamily(std::move(params), o));
}

}  // namespace qeval::train
