#include "loaders/checkpoints/qeval_checkpoint.h"

#include <fmt/format.h>

#include "common/error.h"
#include "common/files.h"
#include "loaders/checkpoints/checkpoint.h"
#include "loaders/checkpoints/checkpoint_internal.h"
#include "loaders/checkpoints/safetensors.h"
#include "loaders/checkpoints/safetensors_set.h"
#include "loaders/checkpoints/weights_hash.h"
#include "loaders/checkpoints/model_reader_internal.h"

namespace qeval {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

// One walk over the canonical layout serves saving and loading: `visit(name, tensor&, shape)`
// is called for every tensor the config implies, in a fixed order; a block's tensors can be
// walked alone (reading by parts).
template <typename Visit>
void visit_norm(const ModelConfig& c, const std::string& name, NormWeights& n, Visit&& visit) {
  const std::int64_t norm_width = c.norm == NormKind::rmsnorm_single ? 1 : c.d_model;
  visit(name + ".weight", n.weight, std::vector<std::int64_t>{norm_width});
  if (c.norm == NormKind::layernorm) visit(name + ".bias", n.bias, std::vector<std::int64_t>{c.d_model});
}

template <typename Visit>
void visit_block(const ModelConfig& c, std::int64_t i, BlockWeights& b, Visit&& visit) {
  const std::int64_t D = c.d_model, F = c.d_ff, hd = c.head_dim();
  auto norm = [&](const std::string& name, NormWeights& n) { visit_norm(c, name, n, visit); };
  auto linear = [&](const std::string& name, LinearWeights& l, std::int64_t out, std::int64_t in, bool bias) {
    visit(name + ".weight", l.weight, std::vector<std::int64_t>{out, in});
    if (bias) visit(name + ".bias", l.bias, std::vector<std::int64_t>{out});
  };
  const std::string p = fmt::format("layers.{}.", i);
  const MixerKind mixer = c.mixer(i);
  const FfnKind ffn = c.ffn(i);
  // Experts are not written yet: refuse rather than write a checkpoint without them.
  QEVAL_CHECK(ffn != FfnKind::moe, "qeval checkpoint: layer {} has a mixture-of-experts feed-forward, which qeval's "
              "own checkpoint format does not hold", i);
  norm(p + "attn_norm", b.attn_norm);
  if (mixer == MixerKind::attention) {
    if (c.fused_qkv) {
      linear(p + "attn.qkv", b.qkv, (c.n_heads + 2 * c.n_kv_heads) * hd, D, c.has_qkv_bias());
    } else {
      linear(p + "attn.q", b.q, c.n_heads * hd, D, c.has_qkv_bias());
      linear(p + "attn.k", b.k, c.n_kv_heads * hd, D, c.has_qkv_bias());
      linear(p + "attn.v", b.v, c.n_kv_heads * hd, D, c.has_qkv_bias());
    }
    linear(p + "attn.o", b.o, D, c.n_heads * hd, c.attention_bias);
    if (c.qk_norm) {
      visit(p + "attn.q_norm.weight", b.q_norm.weight, std::vector<std::int64_t>{hd});
      visit(p + "attn.k_norm.weight", b.k_norm.weight, std::vector<std::int64_t>{hd});
    }
  } else {
    // A state-space mixer under the canonical names of model/weights.h (block_tensor_slots).
    SsmWeights& s = b.ssm;
    const std::int64_t E = c.ssm_d_inner, N = c.ssm_d_state, conv = c.ssm_conv_dim(mixer);
    const std::string m = p + "mamba.";
    auto gains = [&](const std::string& name, NormWeights& n, std::int64_t width) {
      visit(m + name + ".weight", n.weight, std::vector<std::int64_t>{width});
    };
    if (mixer == MixerKind::mamba) {
      const std::int64_t R = c.ssm_dt_rank;
      linear(m + "in_proj", s.in_proj, 2 * E, D, c.ssm_proj_bias);
      visit(m + "conv.weight", s.conv_weight, std::vector<std::int64_t>{conv, c.ssm_d_conv});
      if (c.ssm_conv_bias) visit(m + "conv.bias", s.conv_bias, std::vector<std::int64_t>{conv});
      linear(m + "x_proj", s.x_proj, R + 2 * N, E, false);
      if (c.ssm_bcdt_norm) {
        gains("dt_norm", s.dt_norm, R);
        gains("b_norm", s.b_norm, N);
        gains("c_norm", s.c_norm, N);
      }
      linear(m + "dt_proj", s.dt_proj, E, R, true);
      visit(m + "A", s.A, std::vector<std::int64_t>{E, N});
      visit(m + "D", s.D, std::vector<std::int64_t>{E});
    } else {
      const std::int64_t H = c.ssm_heads;
      linear(m + "in_proj", s.in_proj, E + conv + H, D, c.ssm_proj_bias);
      visit(m + "conv.weight", s.conv_weight, std::vector<std::int64_t>{conv, c.ssm_d_conv});
      if (c.ssm_conv_bias) visit(m + "conv.bias", s.conv_bias, std::vector<std::int64_t>{conv});
      visit(m + "dt_bias", s.dt_bias, std::vector<std::int64_t>{H});
      visit(m + "A", s.A, std::vector<std::int64_t>{H});
      visit(m + "D", s.D, std::vector<std::int64_t>{H});
      gains("norm", s.norm, E);
    }
    linear(m + "out_proj", s.out_proj, D, E, c.ssm_proj_bias);
  }
  if (c.sandwich_norms) norm(p + "post_attn_norm", b.post_attn_norm);
  if (ffn == FfnKind::dense) {
    norm(p + "mlp_norm", b.mlp_norm);
    if (c.fused_gate_up) {
      linear(p + "mlp.gate_up", b.gate_up, 2 * F, D, c.mlp_bias);
    } else {
      linear(p + "mlp.up", b.up, F, D, c.mlp_bias);
      if (c.gated_mlp()) linear(p + "mlp.gate", b.gate, F, D, c.mlp_bias);
    }
    linear(p + "mlp.down", b.down, D, F, c.mlp_bias);
  }
  if (c.sandwich_norms) norm(p + "post_mlp_norm", b.post_mlp_norm);
}

template <typename Visit>
void for_each_tensor(const ModelConfig& c, ModelWeights& w, Visit&& visit) {
  const std::int64_t D = c.d_model;
  visit("token_embedding", w.token_embedding, std::vector<std::int64_t>{c.vocab_size, D});
  if (c.position == PositionKind::learned)
    visit("position_embedding", w.position_embedding, std::vector<std::int64_t>{c.max_seq_len, D});
  w.blocks.resize(static_cast<std::size_t>(c.n_layers));
  for (std::int64_t i = 0; i < c.n_layers; ++i) visit_block(c, i, w.blocks[static_cast<std::size_t>(i)], visit);
  visit_norm(c, "final_norm", w.final_norm, visit);
  if (!c.tied_embeddings) visit("lm_head.weight", w.lm_head, std::vector<std::int64_t>{c.vocab_size, D});
}

// qeval's own folder read by parts.
class QevalReader final : public ModelReader {
 public:
  explicit QevalReader(const fs::path& dir) : ModelReader(LoadedCheckpoint{}), set_(dir.string()) {
    const fs::path config_path = dir / "config.json";
    const json j = read_json_file(config_path);
    info_.config = config_from_json(j, config_path.string());
    set_ = open_safetensors_folder(dir);
    hashes_ = std::make_shared<TensorHashes>();
    set_.hash_reads_into(hashes_);  // the weights hash comes from the reads
    set_.set_header_only(true);
    measure_parts(*this, sizes_, dir.string());
    set_.set_header_only(false);
    const auto extra = set_.unused();
    QEVAL_CHECK(extra.empty(), "{}: unexpected tensor {} in {} ({} left over); the config does not match the weights",
                dir.string(), extra.empty() ? "" : extra.front(),
                extra.empty() ? "" : set_.file_of(extra.front()).path().filename().string(), extra.size());
    info_.format = "qeval";
    info_.path = dir;
    weight_files_ = set_.paths();
    if (j.contains("metadata")) info_.notes["metadata"] = j["metadata"];
    if (info_.config.optimizer) info_.notes["optimizer"] = *info_.config.optimizer;
    sizes_.stored = set_.stored_bytes();
    list_safetensors(set_, tensors_, bytes_on_disk_);
  }

  at::Tensor position_embedding() override {
    const ModelConfig& c = config();
    return c.position == PositionKind::learned ? set_.take("position_embedding", {c.max_seq_len, c.d_model}) : at::Tensor();
  }
  BlockWeights block(std::int64_t layer) override {
    BlockWeights b;
    visit_block(config(), layer, b, [&](const std::string& name, at::Tensor& t, const std::vector<std::int64_t>& shape) {
      t = set_.take(name, shape);
    });
    return b;
  }
  NormWeights final_norm() override {
    NormWeights n;
    visit_norm(config(), "final_norm", n, [&](const std::string& name, at::Tensor& t, const std::vector<std::int64_t>& shape) {
      t = set_.take(name, shape);
    });
    return n;
  }
  at::Tensor lm_head_rows(std::int64_t begin, std::int64_t count) override {
    const ModelConfig& c = config();
    return set_.take_rows(c.tied_embeddings ? "token_embedding" : "lm_head.weight", {c.vocab_size, c.d_model}, begin, count);
  }

 private:
  at::Tensor token_embedding_block(std::int64_t begin, std::int64_t count) override {
    return set_.take_rows("token_embedding", {config().vocab_size, config().d_model}, begin, count);
  }
  SafetensorsSet set_;
};

}  // namespace

std::map<std::string, at::Tensor> qeval_named_tensors(const ModelConfig& config, const ModelWeights& weights) {
  config.validate("qeval_named_tensors");
  validate_weights(weights, config, "qeval_named_tensors");
  ModelWeights w = weights;  // shallow: tensors are shared
  std::map<std::string, at::Tensor> out;
  for_each_tensor(config, w, [&](const std::string& name, at::Tensor& t, const std::vector<std::int64_t>&) {
    out[name] = t;
  });
  return out;
}

void save_qeval_checkpoint(const fs::path& dir, const ModelConfig& config, const ModelWeights& weights,
                           const json& extra_metadata) {
  QEVAL_CHECK(extra_metadata.is_object(), "save_qeval_checkpoint {}: extra metadata should be a JSON object, found {}",
              dir.string(), extra_metadata.type_name());
  config.validate(dir.string());
  validate_weights(weights, config, dir.string());
  std::error_code ec;
  fs::create_directories(dir, ec);
  QEVAL_CHECK(fs::is_directory(dir), "save_qeval_checkpoint: cannot create folder {}: {}", dir.string(), ec.message());
  write_safetensors(dir / "model.safetensors", qeval_named_tensors(config, weights), {{"format", "pt"}});
  json j = config_to_json(config);
  j["metadata"] = extra_metadata;
  write_file_atomic(dir / "config.json", j.dump(2) + "\n");
}

std::unique_ptr<ModelReader> open_qeval_checkpoint(const fs::path& dir) { return std::make_unique<QevalReader>(dir); }

LoadedCheckpoint load_qeval_checkpoint(const fs::path& dir) { return open_qeval_checkpoint(dir)->read_all(); }

}  // namespace qeval
