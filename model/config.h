// ModelConfig: every supported transformer described by explicit switches (DESIGN.md §3),
// never by a family name alone. Loaders map each checkpoint format onto this one struct.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

namespace qeval {

class ConfigSource;  // model/config_validation.h

enum class NormKind { layernorm, rmsnorm, rmsnorm_single };
enum class PositionKind { learned, rope, none };
enum class RopePairing { interleaved, half };  // interleaved: (2i, 2i+1) as llama2.c/GGUF; half: (i, i+d/2) as HF
enum class SoftmaxKind { softmax, softmax1 };  // softmax1: exp(x_i) / (1 + sum_j exp(x_j))
// gelu: down(gelu_tanh(up x)) (GPT-2's tanh approximation); gelu_erf: the exact (erf) GELU (GPT-NeoX "gelu");
// relu: down(relu(up x)) (OPT); swiglu: down(silu(gate x) * up x) (Llama); geglu: down(gelu_tanh(gate x) * up x) (Gemma).
enum class MlpKind { gelu, swiglu, geglu, gelu_erf, relu };

struct ModelConfig {
  std::string architecture = "custom";  // informational ("gpt2", "llama", ...): never switches behaviour

  std::int64_t vocab_size = 0;
  std::int64_t d_model = 0;
  std::int64_t d_ff = 0;
  std::int64_t n_layers = 0;
  std::int64_t n_heads = 0;
  std::int64_t n_kv_heads = 0;   // < n_heads: grouped-query attention
  std::int64_t max_seq_len = 0;  // a limit on windows only for learned positions

  NormKind norm = NormKind::layernorm;
  double norm_eps = 1e-5;
  PositionKind position = PositionKind::learned;
  RopePairing rope_pairing = RopePairing::interleaved;
  double rope_theta = 10000.0;
  SoftmaxKind attention_softmax = SoftmaxKind::softmax;
  MlpKind mlp = MlpKind::gelu;
  bool attention_bias = false;  // q/k/v/o linear biases
  bool mlp_bias = false;        // up/gate/down linear biases
  bool tied_embeddings = false;
  bool fused_qkv = false;  // the checkpoint stores one [(H + 2 Hkv) hd, D] attention input projection, rows [q; k; v]

  // Switches for the families beyond GPT-2 and Llama (DESIGN.md §3). Every default is "off", so a
  // config that does not name them describes the same model as before they existed.
  std::int64_t head_size = 0;     // per-head width; 0: d_model / n_heads (Gemma-3 270M: 640 wide, heads of 256)
  std::int64_t rotary_dim = 0;    // channels of each head that rotate (the first ones); 0: all (NeoX rotary_pct < 1)
  double rope_theta_local = 0.0;  // RoPE base of the windowed layers; 0: rope_theta (Gemma-3: 10000 local, 1e6 global)
  // Per layer (empty, or n_layers entries): 0 = global causal attention; w > 0 = query i sees keys j with
  // 0 <= i - j < w (HF's and llama.cpp's sliding window). Gemma-3: every sixth layer global; Mistral: one w for all.
  std::vector<std::int64_t> attention_windows;
  double attention_scale = 0.0;      // scores = q·k * scale; 0: 1/sqrt(head_dim) (Gemma-3: query_pre_attn_scalar^-1/2)
  double attn_logit_softcap = 0.0;   // c > 0: scores → c·tanh(scores / c) before the mask (Gemma-2); 0: off
  double final_logit_softcap = 0.0;  // c > 0: logits → c·tanh(logits / c) (Gemma-2); 0: off
  // Token embeddings are multiplied by this, rounded to the compute dtype first as HF Gemma does
  // (sqrt(640) in bf16 is 25.25); 1: no scaling.
  double embedding_scale = 1.0;
  bool qkv_bias = false;           // q/k/v carry biases, o does not (Qwen2); attention_bias implies all four
  bool qk_norm = false;            // per-head RMSNorm of q and k (gains [head_dim]) before rotary (Qwen3, Gemma-3)
  bool sandwich_norms = false;     // a norm on the attention and on the MLP output before each residual add (Gemma-3)
  bool parallel_residual = false;  // x + attn(attn_norm(x)) + mlp(mlp_norm(x)) in one step (GPT-NeoX / Pythia)
  bool fused_gate_up = false;      // the checkpoint stores one [2F, D] projection, rows [gate; up] (Phi-3)

  std::optional<std::int64_t> bos_id;
  std::optional<std::int64_t> eos_id;

  // Training recipe when the checkpoint says it (qeval's own checkpoints): "adam", "orthoadam", ...
  std::optional<std::string> optimizer;

  std::int64_t head_dim() const { return head_size > 0 ? head_size : d_model / n_heads; }
  std::int64_t rotary_dims() const { return rotary_dim > 0 ? rotary_dim : head_dim(); }
  // The attention window of `layer` (0 = global) and its RoPE base.
  std::int64_t attention_window(std::int64_t layer) const {
    return attention_windows.empty() ? 0 : attention_windows[static_cast<std::size_t>(layer)];
  }
  double rope_base(std::int64_t layer) const {
    return attention_window(layer) > 0 && rope_theta_local > 0 ? rope_theta_local : rope_theta;
  }
  double attention_scale_or_default() const;
  bool gated_mlp() const { return mlp == MlpKind::swiglu || mlp == MlpKind::geglu; }
  bool has_qkv_bias() const { return attention_bias || qkv_bias; }
  // Throws qeval::Error when a field is outside its domain or fields disagree (d_model % n_heads,
  // kv heads > heads, ...), naming the file and the key as the file spells it (config_validation.h).
  void validate(const ConfigSource& source) const;
  // The same for a config no file describes (training, tests): keys are the fields' own names.
  void validate(const std::string& source) const;
  // Rough parameter count of the blocks + embeddings + head (for reports and FLOP estimates).
  std::int64_t parameter_count() const;
};

// Enum <-> string, throwing with the list of valid values on an unknown name.
std::string to_string(NormKind v);
std::string to_string(PositionKind v);
std::string to_string(RopePairing v);
std::string to_string(SoftmaxKind v);
std::string to_string(MlpKind v);
NormKind parse_norm(const std::string& s);
PositionKind parse_position(const std::string& s);
RopePairing parse_rope_pairing(const std::string& s);
SoftmaxKind parse_softmax(const std::string& s);
MlpKind parse_mlp(const std::string& s);

// qeval's own config.json form (every switch explicit). `source` names the file in errors.
nlohmann::json config_to_json(const ModelConfig& config);
ModelConfig config_from_json(const nlohmann::json& j, const std::string& source);

}  // namespace qeval
