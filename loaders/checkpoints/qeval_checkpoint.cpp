#include "loaders/checkpoints/qeval_checkpoint.h"

#include <fmt/format.h>

#include "common/error.h"
#include "common/files.h"
#include "loaders/checkpoints/checkpoint.h"
#include "loaders/checkpoints/checkpoint_internal.h"
#include "loaders/checkpoints/safetensors.h"
#include "loaders/checkpoints/safetensors_set.h"

namespace qeval {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

// One walk over the canonical layout serves saving and loading: `visit(name, tensor&, shape)`
// is called for every tensor the config implies, in a fixed order.
template <typename Visit>
void for_each_tensor(const ModelConfig& c, ModelWeights& w, Visit&& visit) {
  const std::int64_t D = c.d_model, F = c.d_ff, hd = c.head_dim();
  const std::int64_t norm_width = c.norm == NormKind::rmsnorm_single ? 1 : D;
  auto norm = [&](const std::string& name, NormWeights& n) {
    visit(name + ".weight", n.weight, std::vector<std::int64_t>{norm_width});
    if (c.norm == NormKind::layernorm) visit(name + ".bias", n.bias, std::vector<std::int64_t>{D});
  };
  auto linear = [&](const std::string& name, LinearWeights& l, std::int64_t out, std::int64_t in, bool bias) {
    visit(name + ".weight", l.weight, std::vector<std::int64_t>{out, in});
    if (bias) visit(name + ".bias", l.bias, std::vector<std::int64_t>{out});
  };
  visit("token_embedding", w.token_embedding, std::vector<std::int64_t>{c.vocab_size, D});
  if (c.position == PositionKind::learned)
    visit("position_embedding", w.position_embedding, std::vector<std::int64_t>{c.max_seq_len, D});
  w.blocks.resize(static_cast<std::size_t>(c.n_layers));
  for (std::int64_t i = 0; i < c.n_layers; ++i) {
    BlockWeights& b = w.blocks[static_cast<std::size_t>(i)];
    const std::string p = fmt::format("layers.{}.", i);
    norm(p + "attn_norm", b.attn_norm);
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
    if (c.sandwich_norms) norm(p + "post_attn_norm", b.post_attn_norm);
    norm(p + "mlp_norm", b.mlp_norm);
    if (c.fused_gate_up) {
      linear(p + "mlp.gate_up", b.gate_up, 2 * F, D, c.mlp_bias);
    } else {
      linear(p + "mlp.up", b.up, F, D, c.mlp_bias);
      if (c.gated_mlp()) linear(p + "mlp.gate", b.gate, F, D, c.mlp_bias);
    }
    linear(p + "mlp.down", b.down, D, F, c.mlp_bias);
    if (c.sandwich_norms) norm(p + "post_mlp_norm", b.post_mlp_norm);
  }
  norm("final_norm", w.final_norm);
  if (!c.tied_embeddings) visit("lm_head.weight", w.lm_head, std::vector<std::int64_t>{c.vocab_size, D});
}

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

LoadedCheckpoint load_qeval_checkpoint(const fs::path& dir) {
  const fs::path config_path = dir / "config.json";
  const json j = read_json_file(config_path);
  LoadedCheckpoint out;
  out.config = config_from_json(j, config_path.string());
  SafetensorsSet set = open_safetensors_folder(dir);
  for_each_tensor(out.config, out.weights,
                  [&](const std::string& name, at::Tensor& t, const std::vector<std::int64_t>& shape) {
                    t = set.take(name, shape);
                  });
  if (out.config.tied_embeddings) out.weights.lm_head = out.weights.token_embedding;
  const auto extra = set.unused();
  QEVAL_CHECK(extra.empty(), "{}: unexpected tensor {} in {} ({} left over); the config does not match the weights",
              dir.string(), extra.empty() ? "" : extra.front(),
              extra.empty() ? "" : set.file_of(extra.front()).path().filename().string(), extra.size());
  validate_weights(out.weights, out.config, dir.string());
  out.format = "qeval";
  out.path = dir;
  out.weights_hash = hash_weight_files(set.paths());
  if (j.contains("metadata")) out.notes["metadata"] = j["metadata"];
  if (out.config.optimizer) out.notes["optimizer"] = *out.config.optimizer;
  return out;
}

}  // namespace qeval
