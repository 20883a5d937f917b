// `qeval train`: small-scale training of GPT-2- and Llama-style models with the paper's
// switches (softmax / softmax-1, layernorm / rmsnorm / rmsnorm_single, biases, positions) and
// Adam, AdamW, OrthoAdam or SGD, producing checkpoints `qeval eval` loads (train/trainer.h).
// A layer pattern (--layer-pattern, --attention-window, --ssm-*) trains hybrids of attention,
// Mamba (S6) and Mamba-2 mixers with dense MLPs or none (docs/usage.md "Training a layer pattern").
#include <fmt/core.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <set>
#include <utility>
#include <vector>

#include "cli/commands.h"
#include "cli/json_config.h"
#include "cli/option_checks.h"
#include "common/error.h"
#include "common/files.h"
#include "common/host_memory.h"
#include "common/sizes.h"
#include "loaders/tokenizers/tokenizer.h"
#include "kernels/compute_threads.h"
#include "train/trainer.h"

namespace qeval::cli {
namespace {

// An --out that already holds a run (its checkpoint, or kept step-N/ folders) would mix two runs:
// the series would read the old steps as this run's and mark it finished (issue 51). Only a run
// resumed from that folder (or from one of its steps) may write there.
void refuse_another_runs_folder(const std::string& out, const std::string& resume) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (!fs::is_directory(out, ec)) return;
  std::string found;
  if (fs::exists(fs::path(out) / "train_state.json", ec)) found = "train_state.json";
  for (const auto& e : fs::directory_iterator(out, ec)) {
    const std::string name = e.path().filename().string();
    if (found.empty() && e.is_directory() && name.rfind("step-", 0) == 0) found = name + "/";
  }
  if (found.empty()) return;
  if (!resume.empty()) {
    const fs::path r = fs::weakly_canonical(resume, ec), o = fs::weakly_canonical(out, ec);
    if (r == o || r.parent_path() == o) return;  // continuing this very run
  }
  fail("--out {}: holds another run's checkpoints ({}); continue that run with --resume {}, or give an empty folder",
       out, found, out);
}

struct TrainArgs {
  std::string data = "text/tinystories/validation-head.txt";
  std::string tokenizer = "models/stories260K/tok512.model";
  std::string data_dir;
  std::string text_split = "paragraph";
  std::string json_field = "text";
  double val_fraction = 0.05;
  std::int64_t val_every = 100;
  std::int64_t val_windows = 64;

  std::string arch = "gpt2";
  std::string softmax = "softmax";
  std::string norm, bias, position, mlp, tied;  // empty: the arch's choice
  std::int64_t d_model = 128, n_layers = 4, n_heads = 4, n_kv_heads = 0, d_ff = 0;
  double norm_eps = 1e-5;
  // The layer pattern (docs/usage.md "Training a layer pattern"): empty = attention + dense MLP everywhere.
  std::string layer_pattern;
  std::int64_t attention_window = 0;  // 0: global causal attention
  std::int64_t ssm_state = 16, ssm_expand = 2, ssm_conv = 4, ssm_dt_rank = 0, ssm_head_dim = 64;
  std::set<std::string> given;  // which of the pattern's options the command line (or --config) set

  std::int64_t seq_len = 128, batch_size = 16, steps = 1000, warmup = 100;
  bool bos_per_window = false;
  double lr = 1e-3, min_lr_ratio = 0.1, clip = 1.0, init_std = 0.02;
  std::string optimizer = "adamw";
  double beta1 = 0.9, beta2 = 0.95, eps = 1e-8, weight_decay = 0.0, momentum = 0.9;
  std::string weight_decay_mode = "auto";
  std::uint64_t seed = 0;
  std::uint64_t transform_seed = 0;
  std::string transform = "random";
  std::int64_t dense_max = 4096;

  std::string out, resume;
  std::int64_t checkpoint_every = 0, stop_after = 0, log_every = 10;
  std::string keep_checkpoints;  // train/kept_checkpoints.h
  double time_limit = 0;
  int threads = 0;
  bool quiet = false;
};

// --layer-pattern "MIXER:FFN,...": one entry per layer, repeated cyclically over --n-layers;
// MIXER and FFN as ModelConfig's names (model/config.h). A pattern of attention:dense only is no
// pattern: the config stays the one it always was.
void apply_layer_pattern(const std::string& spec, ModelConfig& c) {
  if (spec.empty()) return;
  std::vector<std::pair<MixerKind, FfnKind>> entries;
  std::size_t start = 0;
  for (int index = 1;; ++index) {
    const std::size_t comma = spec.find(',', start);
    const std::string entry = spec.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    auto bad = [&](const std::string& why) {
      fail("--layer-pattern '{}': entry {} '{}' {}; expected MIXER:FFN entries separated by commas, MIXER attention, "
           "mamba or mamba2, FFN dense or none (e.g. mamba:dense,attention:dense)",
           spec, index, entry, why);
    };
    const std::size_t colon = entry.find(':');
    if (colon == std::string::npos) bad("has no ':' between the mixer and the feed-forward");
    const std::string mixer = entry.substr(0, colon), ffn = entry.substr(colon + 1);
    if (mixer != "attention" && mixer != "mamba" && mixer != "mamba2") bad(fmt::format("has an unknown mixer '{}'", mixer));
    if (ffn == "moe") bad("asks for mixture-of-experts, which qeval train does not make (it has no router or expert options)");
    if (ffn != "dense" && ffn != "none") bad(fmt::format("has an unknown feed-forward '{}'", ffn));
    entries.emplace_back(parse_mixer(mixer), parse_ffn(ffn));
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  QEVAL_CHECK(static_cast<std::int64_t>(entries.size()) <= c.n_layers,
              "--layer-pattern '{}': {} entries for --n-layers {}: the last ones would never be used", spec,
              entries.size(), c.n_layers);
  const bool plain = std::all_of(entries.begin(), entries.end(), [](const auto& e) {
    return e.first == MixerKind::attention && e.second == FfnKind::dense;
  });
  if (plain) return;
  for (std::int64_t i = 0; i < c.n_layers; ++i) {
    const auto& [mixer, ffn] = entries[static_cast<std::size_t>(i) % entries.size()];
    c.layer_mixers.push_back(mixer);
    c.layer_ffns.push_back(ffn);
  }
}

bool on_off(const std::string& v, const std::string& flag) {
  QEVAL_CHECK(v == "on" || v == "off", "{} must be on or off, got '{}'", flag, v);
  return v == "on";
}

// GPT-2 style: LayerNorm, learned positions, GELU MLP of 4·D, biases, tied embeddings.
// Llama style: RMSNorm, rotary (interleaved pairs), SwiGLU of ~8/3·D (multiple of 16), no biases, untied.
ModelConfig model_config(const TrainArgs& a) {
  QEVAL_CHECK(a.arch == "gpt2" || a.arch == "llama", "--arch must be gpt2 or llama, got '{}'", a.arch);
  const bool gpt2 = a.arch == "gpt2";
  ModelConfig c;
  c.architecture = a.arch;
  c.d_model = a.d_model;
  c.n_layers = a.n_layers;
  c.n_heads = a.n_heads;
  c.n_kv_heads = a.n_kv_heads > 0 ? a.n_kv_heads : a.n_heads;
  apply_layer_pattern(a.layer_pattern, c);
  const bool attention = c.has_mixer(MixerKind::attention);
  c.norm = parse_norm(a.norm.empty() ? (gpt2 ? "layernorm" : "rmsnorm") : a.norm);
  c.norm_eps = a.norm_eps;
  // Rotary positions belong to attention: a pattern without attention layers has no positions
  // unless --position learned asks for a table.
  c.position = parse_position(a.position.empty() ? (!attention ? "none" : gpt2 ? "learned" : "rope") : a.position);
  QEVAL_CHECK(attention || c.position != PositionKind::rope,
              "--position rope: --layer-pattern '{}' has no attention layer to rotate (use none or learned)",
              a.layer_pattern);
  c.rope_pairing = RopePairing::interleaved;
  // Attention-only options on a pattern without attention would be recorded in the config as if
  // they had shaped the model (a "softmax-1 model" with no softmax in it): refused.
  for (const char* option : {"--softmax", "--n-heads", "--n-kv-heads"})
    QEVAL_CHECK(attention || !a.given.count(option), "{}: --layer-pattern '{}' has no attention layer for it to shape",
                option, a.layer_pattern);
  c.attention_softmax = parse_softmax(a.softmax);
  const bool dense = std::any_of(c.layer_ffns.begin(), c.layer_ffns.end(), [](FfnKind f) { return f == FfnKind::dense; }) ||
                     c.layer_ffns.empty();
  for (const char* option : {"--mlp", "--d-ff"})
    QEVAL_CHECK(dense || !a.given.count(option), "{}: --layer-pattern '{}' has no dense MLP for it to shape", option,
                a.layer_pattern);
  c.mlp = parse_mlp(a.mlp.empty() ? (gpt2 ? "gelu" : "swiglu") : a.mlp);
  const bool bias = a.bias.empty() ? gpt2 : on_off(a.bias, "--bias");
  c.attention_bias = bias;
  c.mlp_bias = bias;
  c.tied_embeddings = a.tied.empty() ? gpt2 : on_off(a.tied, "--tied");
  if (a.d_ff > 0) {
    c.d_ff = a.d_ff;
  } else if (c.mlp == MlpKind::gelu) {
    c.d_ff = 4 * a.d_model;
  } else {
    c.d_ff = 16 * static_cast<std::int64_t>(std::ceil(8.0 * static_cast<double>(a.d_model) / 3.0 / 16.0));
  }
  c.max_seq_len = a.seq_len;

  // Sliding-window attention (Mistral's): every attention layer sees the last W positions.
  if (a.given.count("--attention-window")) {
    QEVAL_CHECK(attention, "--attention-window {}: --layer-pattern '{}' has no attention layer", a.attention_window,
                a.layer_pattern);
    if (a.attention_window > 0)
      for (std::int64_t i = 0; i < c.n_layers; ++i)
        c.attention_windows.push_back(c.mixer(i) == MixerKind::attention ? a.attention_window : 0);
  }
  // State-space layers: Mamba's sizes (mamba_ssm's and HF's defaults), no in/out projection biases,
  // a convolution bias; Mamba-2 with one B/C group, heads of --ssm-head-dim channels.
  const bool mamba = c.has_mixer(MixerKind::mamba), mamba2 = c.has_mixer(MixerKind::mamba2);
  const std::string pattern = a.layer_pattern.empty() ? std::string("the model (no --layer-pattern: attention everywhere)")
                                                      : "--layer-pattern '" + a.layer_pattern + "'";
  for (const char* option : {"--ssm-state", "--ssm-expand", "--ssm-conv"})
    QEVAL_CHECK(mamba || mamba2 || !a.given.count(option), "{}: {} has no mamba or mamba2 layer", option, pattern);
  QEVAL_CHECK(mamba || !a.given.count("--ssm-dt-rank"), "--ssm-dt-rank: {} has no mamba layer", pattern);
  QEVAL_CHECK(mamba2 || !a.given.count("--ssm-head-dim"), "--ssm-head-dim: {} has no mamba2 layer", pattern);
  if (mamba || mamba2) {
    QEVAL_CHECK(c.norm == NormKind::rmsnorm,
                "--layer-pattern '{}' has state-space layers, which need --norm rmsnorm (--arch llama has it), got {}",
                a.layer_pattern, to_string(c.norm));
    c.ssm_d_inner = a.ssm_expand * a.d_model;
    c.ssm_d_state = a.ssm_state;
    c.ssm_d_conv = a.ssm_conv;
    c.ssm_conv_bias = true;
    c.ssm_proj_bias = false;
  }
  if (mamba) c.ssm_dt_rank = a.ssm_dt_rank > 0 ? a.ssm_dt_rank : (a.d_model + 15) / 16;
  if (mamba2) {
    QEVAL_CHECK(c.ssm_d_inner % a.ssm_head_dim == 0,
                "--ssm-head-dim {}: the inner width --ssm-expand × --d-model = {} is not a multiple of it", a.ssm_head_dim,
                c.ssm_d_inner);
    c.ssm_heads = c.ssm_d_inner / a.ssm_head_dim;
    c.ssm_groups = 1;
    c.ssm_norm_groups = 1;
  }
  return c;
}

// An optimizer's own options given to another optimizer change nothing: refused.
void check_optimizer_options(const TrainArgs& a) {
  const bool adam = a.optimizer == "adam" || a.optimizer == "adamw" || a.optimizer == "orthoadam";
  QEVAL_CHECK(a.optimizer == "sgd" || !a.given.count("--momentum"), "--momentum: SGD's, and --optimizer is {}",
              a.optimizer);
  for (const char* option : {"--beta1", "--beta2", "--eps"})
    QEVAL_CHECK(adam || !a.given.count(option), "{}: Adam's, and --optimizer is {}", option, a.optimizer);
  for (const char* option : {"--transform", "--transform-seed", "--dense-max"})
    QEVAL_CHECK(a.optimizer == "orthoadam" || !a.given.count(option), "{}: OrthoAdam's, and --optimizer is {}", option,
                a.optimizer);
}

// What one training step holds at its peak, estimated before the first (issue 63: sizes inside
// each option's range whose product cannot fit ended, minutes in, in LibTorch's allocator
// message). Float32 throughout: weights, gradients and the optimizer's state per parameter; the
// activations autograd keeps for the backward pass per token and layer (norms, projections, the
// mixer's and MLP's intermediates), attention's scores and probabilities per head and pair of
// positions where the fused kernel cannot run; the logits with their log-softmax and gradient. A
// lower bound (allocator slack and OrthoAdam's transforms are left out), so a run it refuses
// cannot fit.
void check_train_memory(const TrainArgs& a, const train::TrainOptions& o) {
  ModelConfig c = o.model;
  if (c.vocab_size == 0) c.vocab_size = load_tokenizer(o.tokenizer)->vocab_size();
  const Size P = c.parameter_count();
  const Size state_per_parameter = a.optimizer == "sgd" ? (a.momentum > 0 ? 1 : 0) : 2;
  const Size parameters = P * (Size(2) + state_per_parameter) * 4;
  const Size B = a.batch_size, L = a.seq_len, D = c.d_model;
  Size per_token = 0, pairs = 0;
  for (std::int64_t layer = 0; layer < c.n_layers; ++layer) {
    per_token += Size(8) * D;
    switch (c.mixer(layer)) {
      case MixerKind::attention:
        // Scores and probabilities [B, H, L, L] where the fused kernel cannot run (softmax-1, a
        // window); the fused one keeps none.
        if (c.attention_softmax == SoftmaxKind::softmax1 || !c.attention_windows.empty()) pairs += Size(2) * c.n_heads;
        break;
      case MixerKind::mamba:  // the trainable scan recomputes its states in the backward pass
      case MixerKind::mamba2: per_token += Size(6) * c.ssm_d_inner; break;
    }
    if (c.ffn(layer) == FfnKind::dense) per_token += Size(3) * c.d_ff;
  }
  const Size activations = (B * L * per_token + B * L * L * pairs + Size(3) * B * L * c.vocab_size) * 4;
  const Size needed = parameters + activations;
  const HostMemory host = read_host_memory();
  const std::int64_t usable = host.usable();
  if (usable <= 0 || needed <= usable) return;
  fail("train needs at least ~{} and the machine leaves {} ({}): the weights, gradients and {} optimizer state of {} "
       "parameters take {} (--d-model {}, --n-layers {}, --d-ff {}, a vocabulary of {}{}), one step's activations {} "
       "(--batch-size {} x --seq-len {}, per layer and token and, for attention, per pair of positions); lower them",
       format_size(needed), format_bytes(usable), host.usable_source(), a.optimizer, P.value(), format_size(parameters),
       a.d_model, a.n_layers, c.d_ff, c.vocab_size, c.ssm_d_inner > 0 ? fmt::format(", --ssm-expand {}", a.ssm_expand) : "",
       format_size(activations), a.batch_size, a.seq_len);
}

void run_train(const TrainArgs& a) {
  // Everything that can be refused is refused before a step is taken.
  ModelConfig model = model_config(a);
  QEVAL_CHECK(a.warmup <= a.steps, "--warmup {} is beyond --steps {}: the learning rate would never reach its peak",
              a.warmup, a.steps);
  QEVAL_CHECK(a.resume.empty() || std::filesystem::is_directory(a.resume), "--resume {}: not a checkpoint folder",
              a.resume);
  if (!a.out.empty()) {
    check_output_folder(a.out, "--out");
    refuse_another_runs_folder(a.out, a.resume);
  } else {
    fmt::print(stderr, "note: no --out given: the trained model is discarded when training ends (pass --out DIR to "
               "keep it)\n");
  }
  check_optimizer_options(a);
  if (a.threads > 0) kernels::set_compute_threads(cap_threads(a.threads));
  const std::optional<std::string> data_dir = a.data_dir.empty() ? std::nullopt : std::optional<std::string>(a.data_dir);
  train::TrainOptions o;
  o.model = std::move(model);
  o.data = resolve_input_path(a.data, data_dir);
  o.tokenizer = resolve_input_path(a.tokenizer, data_dir);
  // The checkpoint folder replaces no input and holds none (its files would be written over them).
  check_output_folder_apart(a.out, "--out", {{"--data file", o.data}, {"--tokenizer", o.tokenizer}});
  o.documents.text_split = parse_text_split(a.text_split);
  o.documents.json_field = a.json_field;
  o.val_fraction = a.val_fraction;
  o.val_every = a.val_every;
  o.val_windows = a.val_windows;
  o.seq_len = a.seq_len;
  o.bos_per_window = a.bos_per_window;
  o.batch_size = a.batch_size;
  o.steps = a.steps;
  o.lr = a.lr;
  o.min_lr_ratio = a.min_lr_ratio;
  o.warmup = a.warmup;
  o.clip = a.clip;
  o.init_std = a.init_std;
  o.optimizer.kind = a.optimizer;
  o.optimizer.beta1 = a.beta1;
  o.optimizer.beta2 = a.beta2;
  o.optimizer.eps = a.eps;
  o.optimizer.weight_decay = a.weight_decay;
  o.optimizer.weight_decay_mode = a.weight_decay_mode;
  o.optimizer.momentum = a.momentum;
  o.optimizer.transform_seed = a.transform_seed;
  o.optimizer.transform = a.transform;
  o.optimizer.dense_max = a.dense_max;
  o.seed = a.seed;
  o.out = a.out;
  o.resume = a.resume;
  o.checkpoint_every = a.checkpoint_every;
  o.keep = train::KeepSchedule::parse(a.keep_checkpoints);
  o.stop_after = a.stop_after;
  o.time_limit_minutes = a.time_limit;
  o.log_every = a.log_every;
  o.progress = !a.quiet;
  QEVAL_CHECK(!o.out.empty() || a.stop_after == 0, "--stop-after needs --out (the checkpoint to resume from)");
  check_train_memory(a, o);
  train::TrainResult r = train::run_training(o);
  fmt::print("trained {} steps{}: train loss {:.4f}, validation loss {:.4f}{}\n", r.step,
             r.stopped_early ? " (stopped early)" : "", r.last_train_loss, r.val_loss,
             o.out.empty() ? "" : ", checkpoint " + o.out.string());
}

}  // namespace

void add_train_command(CLI::App& app) {
  auto a = std::make_shared<TrainArgs>();
  auto* cmd = app.add_subcommand("train", "train a small GPT-2/Llama-style model (Adam, AdamW, OrthoAdam, SGD)");
  add_json_config(cmd);
  cmd->add_option("--data,-d", a->data, "training text: .txt, .jsonl, .json.gz, .jsonl.zst (relative paths also tried under the data folder)")
      ->capture_default_str();
  cmd->add_option("--tokenizer,-t", a->tokenizer, "tokenizer file or folder; copied into the checkpoint")->capture_default_str();
  cmd->add_option("--data-dir", a->data_dir, "shared data folder (default: $QEVAL_DATA_DIR, else ../shared/data)");
  cmd->add_option("--text-split", a->text_split, "plain-text documents: paragraph, line or file")
      ->capture_default_str()->check(CLI::IsMember({"paragraph", "line", "file"}));
  cmd->add_option("--json-field", a->json_field, "JSON-lines field holding the text")->capture_default_str();
  cmd->add_option("--val-fraction", a->val_fraction, "held-out fraction of windows (the last ones of the stream), in [0, 1)")->capture_default_str()->check(number_in(0, 1, false, true));
  cmd->add_option("--val-every", a->val_every, "steps between validation losses (0: only at the end)")->capture_default_str()->check(integer_in(0));
  cmd->add_option("--val-windows", a->val_windows, "held-out windows per validation (0: all)")->capture_default_str()->check(integer_in(0));

  cmd->add_option("--arch", a->arch, "defaults for the switches below: gpt2 (layernorm, learned, gelu, biases, tied) or llama (rmsnorm, rope, swiglu, no biases, untied)")
      ->capture_default_str()->check(CLI::IsMember({"gpt2", "llama"}));
  cmd->add_option("--softmax", a->softmax, "attention: softmax or softmax1")->capture_default_str()->check(CLI::IsMember({"softmax", "softmax1"}));
  cmd->add_option("--norm", a->norm, "layernorm, rmsnorm or rmsnorm_single (default: the arch's)")
      ->check(CLI::IsMember({"layernorm", "rmsnorm", "rmsnorm_single"}));
  cmd->add_option("--bias", a->bias, "linear biases on or off (default: the arch's)")->check(CLI::IsMember({"on", "off"}));
  cmd->add_option("--position", a->position, "learned, rope or none (default: the arch's)")->check(CLI::IsMember({"learned", "rope", "none"}));
  cmd->add_option("--mlp", a->mlp, "gelu or swiglu (default: the arch's)")->check(CLI::IsMember({"gelu", "swiglu"}));
  cmd->add_option("--tied", a->tied, "tie LM head to the token embedding: on or off (default: the arch's)")->check(CLI::IsMember({"on", "off"}));
  cmd->add_option("--d-model", a->d_model, "model width")->capture_default_str()->check(integer_in(1, 1 << 16));
  cmd->add_option("--n-layers", a->n_layers, "blocks")->capture_default_str()->check(integer_in(1, 1024));
  cmd->add_option("--n-heads", a->n_heads, "attention heads")->capture_default_str()->check(integer_in(1, 4096));
  cmd->add_option("--n-kv-heads", a->n_kv_heads, "key/value heads (0: = heads)")->capture_default_str()->check(integer_in(0, 4096));
  cmd->add_option("--d-ff", a->d_ff, "MLP width (0: 4·D for gelu, ~8/3·D rounded up to 16 for swiglu)")->capture_default_str()->check(integer_in(0, 1 << 20));
  cmd->add_option("--norm-eps", a->norm_eps, "norm epsilon")->capture_default_str()->check(number_in(0, 1, true));
  cmd->add_option("--layer-pattern", a->layer_pattern,
                  "per layer MIXER:FFN, comma-separated, repeated over --n-layers; MIXER attention, mamba or mamba2, "
                  "FFN dense or none (e.g. mamba:dense,attention:dense; default: attention:dense everywhere); "
                  "state-space layers need --norm rmsnorm");
  cmd->add_option("--attention-window", a->attention_window,
                  "sliding window of the attention layers: query i sees keys i-W+1..i (0: global causal)")
      ->capture_default_str()->check(integer_in(0, std::int64_t{1} << 30));
  cmd->add_option("--ssm-state", a->ssm_state, "state-space layers: state size N")->capture_default_str()->check(integer_in(1, 4096));
  cmd->add_option("--ssm-expand", a->ssm_expand, "state-space layers: inner width = this × --d-model")
      ->capture_default_str()->check(integer_in(1, 64));
  cmd->add_option("--ssm-conv", a->ssm_conv, "state-space layers: causal convolution width")->capture_default_str()->check(integer_in(1, 256));
  cmd->add_option("--ssm-dt-rank", a->ssm_dt_rank, "mamba layers: time-step rank (0: ceil(d_model / 16))")
      ->capture_default_str()->check(integer_in(0, 1 << 20));
  cmd->add_option("--ssm-head-dim", a->ssm_head_dim, "mamba2 layers: channels per head")->capture_default_str()->check(integer_in(1, 1 << 20));

  cmd->add_option("--seq-len", a->seq_len, "window length in tokens")->capture_default_str()->check(integer_in(2, 1 << 16));
  cmd->add_flag("--bos-per-window", a->bos_per_window,
                "open every window with BOS, then seq_len - 1 stream tokens (as eval's --bos-per-window)");
  cmd->add_option("--batch-size,-b", a->batch_size, "windows per step")->capture_default_str()->check(integer_in(1, 1 << 16));
  cmd->add_option("--steps", a->steps, "optimizer steps (the schedule's length)")->capture_default_str()->check(integer_in(1, std::int64_t{1} << 40));
  cmd->add_option("--lr", a->lr, "peak learning rate")->capture_default_str()->check(positive_number());
  cmd->add_option("--min-lr-ratio", a->min_lr_ratio, "cosine decays to lr times this")->capture_default_str()->check(number_in(0, 1));
  cmd->add_option("--warmup", a->warmup, "linear warm-up steps (at most --steps)")->capture_default_str()->check(integer_in(0, std::int64_t{1} << 40));
  cmd->add_option("--clip", a->clip, "global gradient-norm clip (0: off)")->capture_default_str()->check(number_in(0, INFINITY));
  cmd->add_option("--init-std", a->init_std, "initialisation std (GPT-2 style)")->capture_default_str()->check(positive_number());
  cmd->add_option("--optimizer", a->optimizer, "sgd, adam, adamw or orthoadam")
      ->capture_default_str()->check(CLI::IsMember({"sgd", "adam", "adamw", "orthoadam"}));
  cmd->add_option("--beta1", a->beta1, "Adam beta1")->capture_default_str()->check(number_in(0, 1, false, true));
  cmd->add_option("--beta2", a->beta2, "Adam beta2")->capture_default_str()->check(number_in(0, 1, false, true));
  cmd->add_option("--eps", a->eps, "Adam epsilon")->capture_default_str()->check(positive_number());
  cmd->add_option("--weight-decay", a->weight_decay, "weight decay")->capture_default_str()->check(number_in(0, INFINITY));
  cmd->add_option("--weight-decay-mode", a->weight_decay_mode, "auto (adamw: decoupled, others: L2), l2 or decoupled")
      ->capture_default_str()->check(CLI::IsMember({"auto", "l2", "decoupled"}));
  cmd->add_option("--momentum", a->momentum, "SGD momentum")->capture_default_str()->check(number_in(0, 1, false, true));
  cmd->add_option("--seed", a->seed, "initialisation and batch order")->capture_default_str();
  cmd->add_option("--transform-seed", a->transform_seed, "OrthoAdam: seed of the orthogonal transforms")->capture_default_str();
  cmd->add_option("--transform", a->transform, "OrthoAdam: random (dense up to --dense-max, Hadamard beyond), hadamard, identity")
      ->capture_default_str()->check(CLI::IsMember({"random", "hadamard", "identity"}));
  cmd->add_option("--dense-max", a->dense_max, "OrthoAdam: largest axis with a dense orthogonal matrix")->capture_default_str()->check(integer_in(1, 1 << 16));

  cmd->add_option("--out,-o", a->out, "checkpoint folder (written at --checkpoint-every and at the end)")->check(output_path());
  cmd->add_option("--resume", a->resume, "continue from this checkpoint folder (same recipe)");
  cmd->add_option("--checkpoint-every", a->checkpoint_every, "steps between checkpoints (0: only at the end)")->capture_default_str()->check(integer_in(0));
  cmd->add_option("--keep-checkpoints", a->keep_checkpoints,
                  "also keep a series of checkpoints, OUT/step-N/: N (every N steps) or log:N (1, 2, 4, ... below N, "
                  "then every N); the last step is always kept; `qeval eval --model OUT` evaluates the series");
  cmd->add_option("--stop-after", a->stop_after, "stop and checkpoint after this step (0: run the whole schedule)")->capture_default_str()->check(integer_in(0));
  cmd->add_option("--time-limit", a->time_limit, "minutes: stop and checkpoint when exceeded (0: none)")->capture_default_str()->check(number_in(0, 1e7));
  cmd->add_option("--log-every", a->log_every, "steps between progress lines")->capture_default_str()->check(integer_in(1));
  cmd->add_option("--threads", a->threads, "CPU threads (0: LibTorch's default; more than the hardware threads are capped, with a note); results "
                  "are reproducible per thread count")
      ->capture_default_str()->check(integer_in(0, 1 << 20));
  cmd->add_flag("--quiet,-q", a->quiet, "no progress on stderr");
  cmd->callback([a, cmd] {
    for (const char* option : {"--attention-window", "--ssm-state", "--ssm-expand", "--ssm-conv", "--ssm-dt-rank",
                               "--ssm-head-dim", "--softmax", "--n-heads", "--n-kv-heads", "--mlp", "--d-ff", "--momentum",
                               "--beta1", "--beta2", "--eps", "--transform", "--transform-seed", "--dense-max"})
      if (cmd->count(option) > 0) a->given.insert(option);
    run_train(*a);
  });
}

}  // namespace qeval::cli
