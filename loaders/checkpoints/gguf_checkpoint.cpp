// GGUF "llama", "qwen2", "qwen3" and "gemma3" models mapped onto ModelConfig + ModelWeights. F32/F16/BF16 tensors and the
// block types Q4_0 ... Q6_K (gguf_blocks.h) are read as float32; for a quantised file the notes
// say which types were dequantised ("dequantized_from", tensor counts per type) and that the
// model's "full precision" means these dequantised weights.
//
// Rotary pairing: llama.cpp's converters store attn_q/attn_k in the interleaved layout
// (HF's rotate-half weights are permuted on conversion; llama2.c exports were interleaved to
// begin with: stories260K's GGUF tensors are bit-identical to its .bin), and llama.cpp applies
// interleaved ("normal") rope to the llama architecture, so qeval does too.
// qwen2, qwen3 and gemma3 are NEOX-rope architectures in llama.cpp and their converters store
// q/k unpermuted (HF's rotate-half layout), so qeval applies RopePairing::half to them.
// gemma3 follows llama.cpp's reading of the architecture: norms stored with Gemma's +1 already
// added by convert_hf_to_gguf.py (applied as plain gains), embeddings scaled by sqrt(n_embd),
// a sliding window of attention.sliding_window on every layer but each sixth (il % 6 == 5), the
// windowed layers with RoPE base 10000, q scaled by 1/sqrt(key_length) (n_embd / n_head for the
// 62-layer 27B, as llama.cpp does), an optional final_logit_softcapping.
// llama.context_length is recorded as max_seq_len and in notes, but rope positions have no
// limit, so it never limits evaluation windows (stories260K's GGUF says 128, its .bin 512).
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <set>

#include "common/error.h"
#include "common/hash.h"
#include "common/json_integer.h"
#include "loaders/checkpoints/checkpoint.h"
#include "loaders/checkpoints/checkpoint_internal.h"
#include "loaders/checkpoints/gguf.h"
#include "loaders/checkpoints/gguf_blocks.h"
#include "loaders/checkpoints/gguf_config.h"

namespace qeval {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

class GgufModelReader {
 public:
  explicit GgufModelReader(const GgufFile& f) : f_(f), file_(f.path().string()) {}

  std::int64_t integer(const std::string& key) const {
    QEVAL_CHECK(f_.has(key), "{}: missing metadata {}", file_, key);
    const json& v = f_.metadata()[key];
    const auto n = json_int64(v);
    QEVAL_CHECK(n && *n >= 0, "{}: metadata {} should be a non-negative integer, found {}", file_, key, v.dump());
    return *n;
  }
  std::int64_t integer(const std::string& key, std::int64_t fallback) const {
    return f_.has(key) ? integer(key) : fallback;
  }
  double real(const std::string& key) const {
    QEVAL_CHECK(f_.has(key), "{}: missing metadata {}", file_, key);
    const json& v = f_.metadata()[key];
    QEVAL_CHECK(v.is_number(), "{}: metadata {} should be a number, found {}", file_, key, v.dump());
    // A float32 value is read back as the shortest decimal that round-trips (1e-5, not
    // 9.99999974738e-06), so the config records what the exporter wrote.
    if (f_.value_type(key) == 6) return std::stod(fmt::format("{}", static_cast<float>(v.get<double>())));
    return v.get<double>();
  }
  double real(const std::string& key, double fallback) const { return f_.has(key) ? real(key) : fallback; }

  at::Tensor take(const std::string& name, const std::vector<std::int64_t>& shape) {
    const GgufTensorInfo& t = f_.tensor(name);
    QEVAL_CHECK(t.shape() == shape, "{}: tensor {} has shape {} (ne {}), expected {}", file_, name,
                shape_string(t.shape()), shape_string(std::vector<std::int64_t>(t.ne.begin(), t.ne.end())),
                shape_string(shape));
    used_.insert(name);
    return f_.read_float32(name);
  }
  std::vector<std::string> unused() const {
    std::vector<std::string> out;
    for (const auto& t : f_.tensors())
      if (!used_.count(t.name)) out.push_back(t.name);
    return out;
  }

 private:
  const GgufFile& f_;
  std::string file_;
  std::set<std::string> used_;
};

}  // namespace

LoadedCheckpoint load_gguf_checkpoint(const fs::path& path) {
  const std::string file = path.string();
  GgufFile f(path);
  GgufModelReader r(f);
  LoadedCheckpoint out;
  out.config = gguf_model_config(f);  // gguf_config.cpp: metadata through the one validator
  ModelConfig& c = out.config;
  const std::string arch = c.architecture;
  const std::string p = arch + ".";
  const bool gemma3 = arch == "gemma3";

  const std::int64_t D = c.d_model, F = c.d_ff, hd = c.head_dim();
  ModelWeights& w = out.weights;
  w.token_embedding = r.take("token_embd.weight", {c.vocab_size, D});
  for (std::int64_t i = 0; i < c.n_layers; ++i) {
    const std::string b = fmt::format("blk.{}.", i);
    BlockWeights blk;
    blk.attn_norm.weight = r.take(b + "attn_norm.weight", {D});
    blk.q.weight = r.take(b + "attn_q.weight", {c.n_heads * hd, D});
    blk.k.weight = r.take(b + "attn_k.weight", {c.n_kv_heads * hd, D});
    blk.v.weight = r.take(b + "attn_v.weight", {c.n_kv_heads * hd, D});
    if (c.qkv_bias) {
      blk.q.bias = r.take(b + "attn_q.bias", {c.n_heads * hd});
      blk.k.bias = r.take(b + "attn_k.bias", {c.n_kv_heads * hd});
      blk.v.bias = r.take(b + "attn_v.bias", {c.n_kv_heads * hd});
    }
    blk.o.weight = r.take(b + "attn_output.weight", {D, c.n_heads * hd});
    if (c.qk_norm) {
      blk.q_norm.weight = r.take(b + "attn_q_norm.weight", {hd});
      blk.k_norm.weight = r.take(b + "attn_k_norm.weight", {hd});
    }
    if (c.sandwich_norms) {
      blk.post_attn_norm.weight = r.take(b + "post_attention_norm.weight", {D});
      blk.post_mlp_norm.weight = r.take(b + "post_ffw_norm.weight", {D});
    }
    blk.mlp_norm.weight = r.take(b + "ffn_norm.weight", {D});
    blk.gate.weight = r.take(b + "ffn_gate.weight", {F, D});
    blk.up.weight = r.take(b + "ffn_up.weight", {F, D});
    blk.down.weight = r.take(b + "ffn_down.weight", {D, F});
    w.blocks.push_back(std::move(blk));
  }
  w.final_norm.weight = r.take("output_norm.weight", {D});
  w.lm_head = c.tied_embeddings ? w.token_embedding : r.take("output.weight", {c.vocab_size, D});
  for (const auto& name : r.unused())
    fail("{}: unexpected tensor {} ({}) for a {} model; it would be ignored, so the model would be wrong", file, name,
         ggml_type_name(f.tensor(name).type), arch);
  validate_weights(w, c, file);
  if (gemma3) {
    out.notes["norm_gains"] = "stored with Gemma's +1 already added by llama.cpp's converter: applied as they are";
    out.notes["attention_windows"] = c.attention_windows;
  }

  out.format = "gguf";
  out.path = path;
  out.weights_hash = hash_file(path);
  out.notes["gguf_version"] = f.version();
  out.notes["alignment"] = f.alignment();
  if (f.has("general.name") && f.metadata()["general.name"].is_string()) out.notes["general.name"] = f.metadata()["general.name"];
  out.notes["context_length"] = c.max_seq_len;
  out.notes["positions"] = fmt::format(
      "rope: {}context_length {} is recorded as max_seq_len, not a limit on evaluation windows", p, c.max_seq_len);
  out.notes["rope_pairing"] = arch == "llama" ? "interleaved (GGUF llama layout, as llama.cpp applies it)"
                                              : "half (llama.cpp's NEOX rope for this architecture; q/k stored unpermuted)";
  json types = json::object();
  for (const auto& t : f.tensors()) types[ggml_type_name(t.type)] = types.value(ggml_type_name(t.type), 0) + 1;
  out.notes["tensor_types"] = types;
  const bool quantised = std::any_of(f.tensors().begin(), f.tensors().end(), [](const GgufTensorInfo& t) {
    return ggml_block_size(t.type).elements > 1;  // every tensor was read above, so every type is known
  });
  if (quantised) {
    out.notes["dequantized_from"] = types;
    out.notes["full_precision"] =
        "weights dequantised to float32 from the GGUF block types in dequantized_from (bit-identical to llama.cpp's "
        "gguf.quants.dequantize): full precision for this model means its dequantised weights, not the original "
        "unquantised model";
  }
  return out;
}

}  // namespace qeval
