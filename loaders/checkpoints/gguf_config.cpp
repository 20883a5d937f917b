// GGUF metadata → ModelConfig (the mapping is described at the top of gguf_checkpoint.cpp).
#include "loaders/checkpoints/gguf_config.h"

#include <fmt/format.h>

#include <cmath>

#include "common/error.h"
#include "common/printable.h"
#include "model/config_validation.h"

namespace qeval {

using nlohmann::json;
using F = ConfigField;

namespace {

constexpr const char* kGgufArchitectures =
    "llama (with or without experts), qwen2, qwen3, gemma3, qwen2moe, qwen3moe, mamba, mamba2, jamba";

// Metadata values through the validator: refusals say "metadata <key> is <value>: expected ...".
class GgufConfigReader {
 public:
  explicit GgufConfigReader(const GgufFile& f) : f_(f), src_(f.path().string(), "metadata {}") {}

  ConfigSource& source() { return src_; }
  bool has(const std::string& key) const { return f_.has(key); }

  std::int64_t integer(F field, const std::string& key) {
    src_.name(field, key);
    QEVAL_CHECK(f_.has(key), "{}: missing metadata {}", f_.path().string(), printable(key));
    return src_.integer_value(field, key, f_.metadata()[key]);
  }
  std::int64_t integer(F field, const std::string& key, std::int64_t fallback) {
    src_.name(field, key);
    return f_.has(key) ? integer(field, key) : fallback;
  }
  double real(F field, const std::string& key) {
    src_.name(field, key);
    QEVAL_CHECK(f_.has(key), "{}: missing metadata {}", f_.path().string(), printable(key));
    json v = f_.metadata()[key];
    // A float32 value is read back as the shortest decimal that round-trips (1e-5, not
    // 9.99999974738e-06), so the config records what the exporter wrote.
    if (v.is_number() && f_.value_type(key) == 6 && std::isfinite(v.get<double>()))
      v = std::stod(fmt::format("{}", static_cast<float>(v.get<double>())));
    return src_.real_value(field, key, v);
  }
  double real(F field, const std::string& key, double fallback) {
    src_.name(field, key);
    return f_.has(key) ? real(field, key) : fallback;
  }

 private:
  const GgufFile& f_;
  ConfigSource src_;
};

}  // namespace

ModelConfig gguf_model_config(const GgufFile& f) {
  const std::string file = f.path().string();
  GgufConfigReader r(f);
  QEVAL_CHECK(f.has("general.architecture") && f.metadata()["general.architecture"].is_string(),
              "{}: missing string metadata general.architecture", file);
  const std::string arch = f.metadata()["general.architecture"].get<std::string>();
  // mamba, mamba2 and jamba are read by gguf_checkpoint.cpp's state-space path; the experts of llama,
  // qwen2moe and qwen3moe are added there too (gguf_experts).
  QEVAL_CHECK(arch == "llama" || arch == "qwen2" || arch == "qwen3" || arch == "gemma3" || arch == "qwen2moe" ||
                  arch == "qwen3moe",
              "{}: unsupported GGUF architecture {}; supported: {}", file, in_quotes(arch), kGgufArchitectures);
  const std::string p = arch + ".";
  const bool gemma3 = arch == "gemma3";

  ModelConfig c;
  c.architecture = arch;
  c.d_model = r.integer(F::d_model, p + "embedding_length");
  c.d_ff = r.integer(F::d_ff, p + "feed_forward_length");
  c.n_layers = r.integer(F::n_layers, p + "block_count");
  c.n_heads = r.integer(F::n_heads, p + "attention.head_count");
  c.n_kv_heads = r.integer(F::n_kv_heads, p + "attention.head_count_kv", c.n_heads);
  c.max_seq_len = r.integer(F::max_seq_len, p + "context_length", 0);
  if (f.has(p + "attention.key_length")) {
    const std::int64_t key_length = r.integer(F::head_size, p + "attention.key_length");
    if (f.has(p + "attention.value_length")) {
      ConfigSource value_source(file, "metadata {}");  // the value heads must have the key heads' size
      const std::int64_t value_length = value_source.integer_value(F::head_size, p + "attention.value_length",
                                                                   f.metadata()[p + "attention.value_length"]);
      QEVAL_CHECK(value_length == key_length, "{}: metadata {}attention.value_length {} differs from key_length {}; not supported",
                  file, p, value_length, key_length);
    }
    if (key_length * c.n_heads != c.d_model) c.head_size = key_length;
  }
  c.norm = NormKind::rmsnorm;
  c.norm_eps = r.real(F::norm_eps, p + "attention.layer_norm_rms_epsilon");
  c.position = PositionKind::rope;
  c.rope_pairing = arch == "llama" ? RopePairing::interleaved : RopePairing::half;
  c.rope_theta = r.real(F::rope_theta, p + "rope.freq_base", 10000.0);
  c.mlp = gemma3 ? MlpKind::geglu : MlpKind::swiglu;
  c.qkv_bias = arch == "qwen2" || arch == "qwen2moe";
  c.qk_norm = arch == "qwen3" || arch == "qwen3moe" || gemma3;
  if (f.has(p + "rope.scaling.type")) r.source().rope_scaling(f.metadata()[p + "rope.scaling.type"], p + "rope.scaling.type");
  if (gemma3) {
    c.sandwich_norms = true;
    c.embedding_scale = std::sqrt(static_cast<double>(c.d_model));
    if (f.has(p + "attention.sliding_window")) {
      const std::int64_t window = r.integer(F::attention_window, p + "attention.sliding_window");
      for (std::int64_t i = 0; i < c.n_layers; ++i) c.attention_windows.push_back(i % 6 < 5 ? window : 0);
      c.rope_theta_local = 10000.0;
    }
    const std::int64_t scale_width = c.n_layers == 62 ? c.d_model / c.n_heads : c.head_dim();
    QEVAL_CHECK(scale_width > 0, "{}: metadata {}embedding_length {} over {} heads leaves no query width", file, p,
                c.d_model, c.n_heads);
    c.attention_scale = 1.0 / std::sqrt(static_cast<double>(scale_width));
    c.final_logit_softcap = r.real(F::final_logit_softcap, p + "final_logit_softcapping", 0.0);
  }
  QEVAL_CHECK(!f.has(p + "attn_logit_softcapping"), "{}: metadata {}attn_logit_softcapping is not supported for {}", file,
              p, arch);
  QEVAL_CHECK(f.has_tensor("token_embd.weight"), "{}: missing tensor token_embd.weight", file);
  const auto& embd = f.tensor("token_embd.weight");
  QEVAL_CHECK(embd.ne.size() == 2, "{}: token_embd.weight has {} dimensions, expected 2", file, embd.ne.size());
  if (f.has(p + "vocab_size")) {
    c.vocab_size = r.integer(F::vocab_size, p + "vocab_size");
  } else {
    c.vocab_size = r.source().integer_value(F::vocab_size, "token_embd.weight rows", json(embd.ne[1]));
  }
  c.tied_embeddings = !f.has_tensor("output.weight");
  // Ids at or beyond the vocabulary are dropped (some exports name a special token the embedding lacks).
  for (auto [key, field, id] : {std::tuple{"tokenizer.ggml.bos_token_id", F::bos_id, &c.bos_id},
                                std::tuple{"tokenizer.ggml.eos_token_id", F::eos_id, &c.eos_id}})
    if (f.has(key))
      if (const std::int64_t v = r.integer(field, key); v < c.vocab_size) *id = v;
  c.validate(r.source());
  if (f.has(p + "rope.dimension_count")) {
    const std::int64_t rotary = r.integer(F::rotary_dim, p + "rope.dimension_count");
    QEVAL_CHECK(rotary == c.head_dim(), "{}: metadata {}rope.dimension_count {} differs from the head size {}; partial "
                "rotary is not supported", file, p, rotary, c.head_dim());
  }
  return c;
}

}  // namespace qeval
