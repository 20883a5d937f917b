#include "train/trainer.h"

#include <ATen/core/grad_mode.h>
#include <ATen/Parallel.h>
#include <fmt/core.h>
#include <fmt/ranges.h>

#include <chrono>
#include <cmath>
#include <limits>

#include "common/error.h"
#include "common/files.h"
#include "common/hash.h"
#include "common/json_integer.h"
#include "common/json_diff.h"
#include "loaders/checkpoints/checkpoint.h"
#include "loaders/checkpoints/qeval_checkpoint.h"
#include "loaders/checkpoints/safetensors.h"
#include "loaders/tokenizers/tokenizer.h"
#include "model/config_validation.h"
#include "model/init.h"
#include "model/transformer.h"
#include "train/train_data.h"

namespace qeval::train {
namespace {

// One GEMM over the whole batch: faster than FloatLinear's per-sequence GEMMs, and training
// has no batch-size-independence requirement (eval still runs FloatLinear).
class BatchLinear final : public Linear {
 public:
  BatchLinear(at::Tensor w, at::Tensor b) : w_(std::move(w)), b_(std::move(b)) {}
  at::Tensor forward(const at::Tensor& x) const override { return b_.defined() ? at::linear(x, w_, b_) : at::linear(x, w_); }
  std::int64_t in_features() const override { return w_.size(1); }
  std::int64_t out_features() const override { return w_.size(0); }
  std::int64_t weight_bytes() const override { return w_.numel() * 4; }
  std::string describe() const override { return "fp32 (training)"; }

 private:
  at::Tensor w_, b_;
};

Transformer training_model(const ModelConfig& config, const ModelWeights& weights) {
  Transformer model(config, weights, "training model");
  for (const auto& named : model.linears()) {
    auto* f = dynamic_cast<const FloatLinear*>(named.linear.get());
    QEVAL_CHECK(f != nullptr, "training model: linear {} is not a FloatLinear", named.name);
    model.replace_linear(named.name, std::make_shared<BatchLinear>(f->weight(), f->bias()));
  }
  return model;
}

// Mean next-token cross-entropy of windows [B, L]: predict tokens 1..L-1 from their prefixes.
at::Tensor window_loss(const Transformer& model, const at::Tensor& windows) {
  const std::int64_t L = windows.size(1);
  at::Tensor logits = model.forward(windows);  // [B, L, V]
  at::Tensor pred = logits.narrow(1, 0, L - 1).reshape({-1, logits.size(2)});
  at::Tensor target = windows.narrow(1, 1, L - 1).reshape({-1});
  return at::nll_loss(at::log_softmax(pred, -1), target);
}

double validation_loss(const Transformer& model, const at::Tensor& val, std::int64_t max_windows) {
  at::NoGradGuard no_grad;
  const std::int64_t n = max_windows > 0 ? std::min(max_windows, val.size(0)) : val.size(0);
  if (n == 0) return std::numeric_limits<double>::quiet_NaN();
  double total = 0;
  for (std::int64_t i = 0; i < n; i += 16) {
    const std::int64_t b = std::min<std::int64_t>(16, n - i);
    total += window_loss(model, val.narrow(0, i, b)).item<double>() * static_cast<double>(b);
  }
  return total / static_cast<double>(n);
}

// Global L2 norm of all gradients (accumulated in double, in parameter order), clipped to `clip`.
double clip_gradients(const std::vector<NamedParameter>& params, double clip) {
  at::NoGradGuard no_grad;
  double sq = 0;
  for (const auto& p : params)
    if (p.tensor.grad().defined()) sq += p.tensor.grad().to(at::kDouble).pow(2).sum().item<double>();
  const double norm = std::sqrt(sq);
  if (clip > 0 && norm > clip) {
    const double scale = clip / (norm + 1e-6);
    for (const auto& p : params)
      if (p.tensor.grad().defined()) p.tensor.mutable_grad().mul_(scale);
  }
  return norm;
}

struct RunState {
  std::int64_t step = 0;
  nlohmann::json history = nlohmann::json::array();
};

void save_training_checkpoint(const TrainOptions& o, const ModelConfig& config, const ModelWeights& weights,
                              const Optimizer& optimizer, const RunState& state, const nlohmann::json& facts) {
  at::NoGradGuard no_grad;
  std::filesystem::create_directories(o.out);
  nlohmann::json metadata = facts;
  metadata["training"] = o.to_json();
  metadata["step"] = state.step;
  metadata["tokens_seen"] = state.step * o.batch_size * o.seq_len;
  save_qeval_checkpoint(o.out, config, weights, metadata);
  write_safetensors(o.out / "optimizer.safetensors", optimizer.state_tensors());
  nlohmann::json train_state = {{"step", state.step},
                                {"windows_consumed", state.step * o.batch_size},
                                {"optimizer", optimizer.state_header()},
                                {"training", o.to_json()},
                                {"model", config_to_json(config)},
                                {"history", state.history}};
  write_file_atomic(o.out / "train_state.json", train_state.dump(2) + "\n");
  copy_tokenizer_files(o.tokenizer, o.out);
}

// Every trainable tensor finite, or an error naming the first that is not: a checkpoint of NaN
// weights is never written, and a run that diverged does not end as a success.
void require_finite_weights(const std::vector<NamedParameter>& params, std::int64_t step, double lr) {
  at::NoGradGuard no_grad;
  for (const auto& p : params)
    QEVAL_CHECK(at::isfinite(p.tensor).all().item<bool>(),
                "train: weight {} is not finite after step {} (lr {}): the run diverged; no checkpoint is written "
                "(lower --lr, or keep --clip on)",
                p.name, step, lr);
}

// The domains of the options, checked before anything is loaded (the CLI checks them too; this
// guards every other caller). Messages name the command-line option.
void validate_options(const TrainOptions& o) {
  auto finite_in = [](double v, double lo, double hi, bool lo_open, bool hi_open) {
    return std::isfinite(v) && (lo_open ? v > lo : v >= lo) && (hi_open ? v < hi : v <= hi);
  };
  const double inf = std::numeric_limits<double>::infinity();
  QEVAL_CHECK(o.seq_len >= 2, "train: --seq-len {} must be at least 2", o.seq_len);
  QEVAL_CHECK(o.batch_size >= 1, "train: --batch-size {} must be at least 1", o.batch_size);
  QEVAL_CHECK(o.steps >= 1, "train: --steps {} must be at least 1", o.steps);
  QEVAL_CHECK(o.warmup >= 0 && o.warmup <= o.steps, "train: --warmup {} must be in 0..--steps ({})", o.warmup, o.steps);
  QEVAL_CHECK(finite_in(o.lr, 0, inf, true, true), "train: --lr {} must be a finite number > 0", o.lr);
  QEVAL_CHECK(finite_in(o.min_lr_ratio, 0, 1, false, false), "train: --min-lr-ratio {} must be in [0, 1]", o.min_lr_ratio);
  QEVAL_CHECK(finite_in(o.clip, 0, inf, false, true), "train: --clip {} must be a finite number >= 0 (0: off)", o.clip);
  QEVAL_CHECK(finite_in(o.init_std, 0, inf, true, true), "train: --init-std {} must be a finite number > 0", o.init_std);
  QEVAL_CHECK(finite_in(o.val_fraction, 0, 1, false, true), "train: --val-fraction {} must be in [0, 1)", o.val_fraction);
  QEVAL_CHECK(o.val_every >= 0 && o.val_windows >= 0, "train: --val-every {} and --val-windows {} must be >= 0",
              o.val_every, o.val_windows);
  QEVAL_CHECK(o.checkpoint_every >= 0 && o.stop_after >= 0, "train: --checkpoint-every {} and --stop-after {} must be >= 0",
              o.checkpoint_every, o.stop_after);
  QEVAL_CHECK(finite_in(o.time_limit_minutes, 0, inf, false, true), "train: --time-limit {} must be a finite number >= 0",
              o.time_limit_minutes);
  QEVAL_CHECK(o.log_every >= 1, "train: --log-every {} must be at least 1", o.log_every);
  const OptimizerOptions& op = o.optimizer;
  QEVAL_CHECK(finite_in(op.beta1, 0, 1, false, true), "train: --beta1 {} must be in [0, 1)", op.beta1);
  QEVAL_CHECK(finite_in(op.beta2, 0, 1, false, true), "train: --beta2 {} must be in [0, 1)", op.beta2);
  QEVAL_CHECK(finite_in(op.eps, 0, inf, true, true), "train: --eps {} must be a finite number > 0", op.eps);
  QEVAL_CHECK(finite_in(op.weight_decay, 0, inf, false, true), "train: --weight-decay {} must be a finite number >= 0",
              op.weight_decay);
  QEVAL_CHECK(finite_in(op.momentum, 0, 1, false, true), "train: --momentum {} must be in [0, 1)", op.momentum);
  QEVAL_CHECK(op.dense_max >= 1, "train: --dense-max {} must be at least 1", op.dense_max);
}

// The model's sizes as the command line names them, for the one config validator's refusals.
ConfigSource training_config_source() {
  ConfigSource src("train", "{}");
  for (auto [field, option] : {std::pair{ConfigField::d_model, "--d-model"}, std::pair{ConfigField::d_ff, "--d-ff"},
                               std::pair{ConfigField::n_layers, "--n-layers"}, std::pair{ConfigField::n_heads, "--n-heads"},
                               std::pair{ConfigField::n_kv_heads, "--n-kv-heads"}, std::pair{ConfigField::norm_eps, "--norm-eps"},
                               std::pair{ConfigField::max_seq_len, "--seq-len"},
                               std::pair{ConfigField::vocab_size, "the tokenizer's vocabulary"}})
    src.name(field, option);
  return src;
}

// A state-space layer's A stays at its S4D-real initialisation (model/init.h): it is stored as A
// itself (negative), and a plain gradient step on it could make a decay positive (a state that
// grows without bound); Mamba trains log(−A) instead, which this weight layout does not hold.
bool is_frozen(const std::string& name) {
  static const std::string suffix = ".mamba.A";
  return name.size() > suffix.size() && name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0;
}

std::string format_duration(double seconds) {
  const auto s = static_cast<std::int64_t>(std::max(0.0, seconds));
  return fmt::format("{}:{:02d}", s / 60, s % 60);
}

}  // namespace

nlohmann::json TrainOptions::to_json() const {
  nlohmann::json j = {{"data", data.string()},
          {"tokenizer", tokenizer.string()},
          {"text_split", to_string(documents.text_split)},
          {"json_field", documents.json_field},
          {"val_fraction", val_fraction},
          {"val_every", val_every},
          {"val_windows", val_windows},
          {"seq_len", seq_len},
          {"bos_per_window", bos_per_window},
          {"batch_size", batch_size},
          {"steps", steps},
          {"lr", lr},
          {"min_lr_ratio", min_lr_ratio},
          {"warmup", warmup},
          {"schedule", "linear warm-up, cosine decay"},
          {"clip", clip},
          {"init_std", init_std},
          {"init", "GPT-2 style (model/init.h)"},
          {"optimizer", optimizer.to_json()},
          {"seed", seed},
          {"threads", at::get_num_threads()}};
  if (keep.enabled()) j["keep_checkpoints"] = keep.to_string();
  // Written only for a layer pattern with state-space layers: every other record stays as it was.
  if (model.has_mixer(MixerKind::mamba) || model.has_mixer(MixerKind::mamba2)) {
    j["init"] = "GPT-2 style (model/init.h); state-space layers: S4D-real A, D 1, time step log-uniform in [0.001, 0.1]";
    j["frozen"] = "every state-space layer's A (kept at its S4D-real initialisation)";
  }
  return j;
}

double learning_rate(const TrainOptions& o, std::int64_t step) {
  if (step < o.warmup) return o.lr * static_cast<double>(step + 1) / static_cast<double>(o.warmup);
  const std::int64_t span = std::max<std::int64_t>(1, o.steps - o.warmup);
  const double t = std::min(1.0, static_cast<double>(step - o.warmup) / static_cast<double>(span));
  const double min_lr = o.lr * o.min_lr_ratio;
  return min_lr + 0.5 * (o.lr - min_lr) * (1 + std::cos(M_PI * t));
}

TrainResult run_training(TrainOptions o) {
  using clock = std::chrono::steady_clock;
  const auto started = clock::now();
  validate_options(o);
  QEVAL_CHECK(!o.keep.enabled() || !o.out.empty(), "train: --keep-checkpoints {} needs --out (the folder the step-N/ "
              "checkpoints go into)", o.keep.to_string());
  auto tokenizer = load_tokenizer(o.tokenizer);
  if (o.model.vocab_size == 0) o.model.vocab_size = tokenizer->vocab_size();
  QEVAL_CHECK(o.model.vocab_size >= tokenizer->vocab_size(), "train: vocab_size {} is smaller than tokenizer {}'s {}",
              o.model.vocab_size, o.tokenizer.string(), tokenizer->vocab_size());
  if (o.model.max_seq_len < o.seq_len) o.model.max_seq_len = o.seq_len;
  if (!o.model.bos_id && tokenizer->bos_id()) o.model.bos_id = *tokenizer->bos_id();
  if (!o.model.eos_id && tokenizer->eos_id()) o.model.eos_id = *tokenizer->eos_id();
  o.model.optimizer = o.optimizer.kind;
  o.model.validate(training_config_source());

  TrainWindows data = load_train_windows(o.data, *tokenizer, o.seq_len, o.val_fraction, o.documents, o.bos_per_window);
  const std::int64_t n_train = data.train.size(0);
  if (o.progress)
    fmt::print(stderr, "train: {} documents, {} tokens -> {} training and {} validation windows of {}\n",
               data.documents, data.stream_tokens, n_train, data.val.size(0), o.seq_len);

  RunState state;
  ModelWeights weights;
  nlohmann::json resume_state;
  if (!o.resume.empty()) {
    const std::string source = o.resume.string();
    LoadedCheckpoint ck = load_qeval_checkpoint(o.resume);
    QEVAL_CHECK(config_to_json(ck.config) == config_to_json(o.model),
                "--resume {}: its model config differs from this run's (the checkpoint's vs this run's: {})", source,
                fmt::join(json_differences(config_to_json(ck.config), config_to_json(o.model), 4), "; "));
    try {
      resume_state = nlohmann::json::parse(read_file(o.resume / "train_state.json"));
      nlohmann::json saved = resume_state.at("training");
      if (!saved.contains("bos_per_window")) saved["bos_per_window"] = false;  // written before the option existed
      const nlohmann::json now = o.to_json();
      for (const char* key :
           {"seq_len", "bos_per_window", "batch_size", "steps", "lr", "min_lr_ratio", "warmup", "clip", "seed"})
        QEVAL_CHECK(saved.at(key) == now.at(key), "--resume {}: '{}' was {} in the run, this run has {}", source, key,
                    saved.at(key).dump(), now.at(key).dump());
      state.step = json_integer(resume_state.at("step"), "--resume " + source + ": train_state.json step");
      state.history = resume_state.at("history");
    } catch (const nlohmann::json::exception& e) {
      fail("--resume {}: train_state.json: {}", source, e.what());
    }
    // The data position only means something on the same token stream.
    const std::string data_hash = hash_file(o.data);
    const nlohmann::json saved_hash = ck.notes.value("metadata", nlohmann::json::object()).value("data_hash", nlohmann::json());
    QEVAL_CHECK(saved_hash == data_hash, "--resume {}: it was trained on data with hash {}, {} has hash {}", source,
                saved_hash.dump(), o.data.string(), data_hash);
    // A finished run has nothing left to do: "success" with nothing written would read as a run
    // that trained (issue 51).
    QEVAL_CHECK(state.step < o.steps, "--resume {}: that run already finished: it is at step {} of --steps {}; "
                "nothing to train (raise --steps to train on)", source, state.step, o.steps);
    weights = std::move(ck.weights);
  } else {
    weights = init_weights(o.model, o.seed, o.init_std);
  }

  std::vector<NamedParameter> params;
  for (auto& [name, tensor] : qeval_named_tensors(o.model, weights)) {
    if (is_frozen(name)) continue;
    tensor.requires_grad_(true);
    params.push_back({name, tensor});
  }
  auto optimizer = make_optimizer(params, o.optimizer);
  if (!o.resume.empty())
    optimizer->load_state(resume_state.at("optimizer"), read_safetensors(o.resume / "optimizer.safetensors"),
                          (o.resume / "optimizer.safetensors").string());
  Transformer model = training_model(o.model, weights);
  BatchOrder order(n_train, o.seed);

  const nlohmann::json facts = {{"data_hash", hash_file(o.data)},
                                {"train_windows", n_train},
                                {"val_windows", data.val.size(0)},
                                {"documents", data.documents},
                                {"stream_tokens", data.stream_tokens}};
  TrainResult result;
  result.val_loss = std::numeric_limits<double>::quiet_NaN();
  const std::int64_t last = o.stop_after > 0 ? std::min(o.stop_after, o.steps) : o.steps;
  const std::int64_t first = state.step;
  double loss_sum = 0;
  std::int64_t loss_count = 0;
  double grad_norm = 0;
  while (state.step < last) {
    const std::int64_t step = state.step;
    const double lr = learning_rate(o, step);
    std::vector<std::int64_t> idx = order.take(step * o.batch_size, o.batch_size);
    at::Tensor batch = data.train.index_select(0, at::tensor(idx, at::kLong));  // [B, L]
    at::Tensor loss = window_loss(model, batch);
    loss.backward();
    grad_norm = clip_gradients(params, o.clip);
    optimizer->step(lr);
    optimizer->zero_grad();
    const double loss_value = loss.item<double>();
    QEVAL_CHECK(std::isfinite(loss_value),
                "train: loss is {} at step {} (lr {}): the run diverged; no checkpoint is written for this step (lower "
                "--lr, or keep --clip on)",
                loss_value, step + 1, lr);
    loss_sum += loss_value;
    ++loss_count;
    state.step = step + 1;

    const double elapsed = std::chrono::duration<double>(clock::now() - started).count();
    const bool time_up = o.time_limit_minutes > 0 && elapsed > o.time_limit_minutes * 60;
    const bool end = state.step == last || time_up;
    const bool keep = o.keep.enabled() && (end || o.keep.keeps(state.step));
    const bool validate = end || keep || (o.val_every > 0 && state.step % o.val_every == 0);
    if (end || state.step % o.log_every == 0 || validate) {
      nlohmann::json entry = {{"step", state.step},
                              {"train_loss", loss_sum / static_cast<double>(loss_count)},
                              {"lr", lr},
                              {"grad_norm", grad_norm},
                              {"elapsed_s", elapsed}};
      result.last_train_loss = loss_sum / static_cast<double>(loss_count);
      loss_sum = 0;
      loss_count = 0;
      if (validate) {
        result.val_loss = validation_loss(model, data.val, o.val_windows);
        entry["val_loss"] = result.val_loss;
        // No held-out windows gives NaN on purpose; with some, NaN or inf means the run diverged.
        QEVAL_CHECK(data.val.size(0) == 0 || std::isfinite(result.val_loss),
                    "train: validation loss is {} at step {} (lr {}): the run diverged; no checkpoint is written "
                    "(lower --lr, or keep --clip on)",
                    result.val_loss, state.step, lr);
      }
      state.history.push_back(entry);
      if (o.progress) {
        const double rate = static_cast<double>(state.step - first) / std::max(elapsed, 1e-9);
        fmt::print(stderr, "step {}/{}  loss {:.4f}{}  lr {:.2e}  |g| {:.3f}  {:.0f} tok/s  elapsed {}  ETA {}\n",
                   state.step, o.steps, result.last_train_loss,
                   validate ? fmt::format("  val {:.4f}", result.val_loss) : std::string(), lr, grad_norm,
                   rate * static_cast<double>(o.batch_size * o.seq_len), format_duration(elapsed),
                   format_duration(static_cast<double>(last - state.step) / std::max(rate, 1e-9)));
      }
    }
    const bool checkpoint = !o.out.empty() && (end || (o.checkpoint_every > 0 && state.step % o.checkpoint_every == 0));
    if (checkpoint) {
      require_finite_weights(params, state.step, lr);
      nlohmann::json f = facts;
      f["train_loss"] = result.last_train_loss;
      f["val_loss"] = std::isfinite(result.val_loss) ? nlohmann::json(result.val_loss) : nlohmann::json(nullptr);
      f["stopped_early"] = state.step < o.steps;
      save_training_checkpoint(o, o.model, weights, *optimizer, state, f);
    }
    if (keep) {
      at::NoGradGuard no_grad;
      nlohmann::json m = facts;
      m["training"] = o.to_json();
      m["step"] = state.step;
      m["tokens_seen"] = state.step * o.batch_size * o.seq_len;
      m["lr"] = lr;
      m["train_loss"] = result.last_train_loss;
      m["val_loss"] = std::isfinite(result.val_loss) ? nlohmann::json(result.val_loss) : nlohmann::json(nullptr);
      save_kept_checkpoint(o.out, o.keep, state.step, o.steps, o.model, weights, m, o.tokenizer);
    }
    if (time_up) break;
  }

  if (state.step > first) require_finite_weights(params, state.step, learning_rate(o, state.step - 1));
  result.config = o.model;
  result.step = state.step;
  result.stopped_early = state.step < o.steps;
  result.history = state.history;
  for (auto& p : params) p.tensor.requires_grad_(false);
  result.weights = weights;
  return result;
}

}  // namespace qeval::train
