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
// What mixes positions in a layer (DESIGN.md §3): causal attention, a Mamba selective scan (S6,
// model/mamba_mixer.cpp) or a Mamba-2 state-space-dual layer (SSD, model/mamba2_mixer.cpp).
enum class MixerKind { attention, mamba, mamba2 };
// What follows the mixer: the dense MLP (`mlp` above), routed experts (model/moe_mlp.cpp), or
// nothing (Mamba and Mamba-2 blocks are a mixer only).
enum class FfnKind { dense, moe, none };
// How the router's softmax becomes the chosen experts' weights: softmax over all experts, top-k,
// then the k weights renormalised to sum to 1 (Mixtral; Qwen-MoE with norm_topk_prob) or used as
// they are (Jamba; Qwen2-MoE's default).
enum class RouterNorm { topk_renormalized, topk };

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

  // Layer pattern (DESIGN.md §3): per layer, which mixer and which feed-forward. Empty: attention
  // and the dense MLP in every layer (every family before mixture-of-experts and state spaces).
  std::vector<MixerKind> layer_mixers;
  std::vector<FfnKind> layer_ffns;

  // Mixture-of-experts layers (FfnKind::moe): each expert is a gated MLP of `mlp`'s activation.
  std::int64_t moe_experts = 0;          // E
  std::int64_t moe_top_k = 0;            // experts per token
  std::int64_t moe_d_ff = 0;             // each expert's hidden width (0: d_ff)
  RouterNorm moe_router_norm = RouterNorm::topk_renormalized;
  std::int64_t moe_shared_d_ff = 0;      // a shared expert every token goes through (Qwen2-MoE); 0: none
  bool moe_shared_gate = false;          // the shared expert's output × sigmoid(x·g), g [1, D] (Qwen2-MoE)

  // State-space layers (MixerKind::mamba, mamba2).
  std::int64_t ssm_d_inner = 0;          // expand × d_model
  std::int64_t ssm_d_state = 0;          // N
  std::int64_t ssm_d_conv = 0;           // causal depthwise convolution width
  std::int64_t ssm_dt_rank = 0;          // Mamba: x_proj's time-step rank
  bool ssm_conv_bias = true;
  bool ssm_proj_bias = false;            // in_proj / out_proj biases
  bool ssm_bcdt_norm = false;            // Jamba: RMSNorm of the time step, B and C after x_proj
  std::int64_t ssm_heads = 0;            // Mamba-2: heads (d_inner = heads × head_dim)
  std::int64_t ssm_groups = 1;           // Mamba-2: B/C groups (head h reads group h / (heads / groups))
  std::int64_t ssm_chunk = 256;          // Mamba-2: SSD chunk length (changes rounding only)
  // Mamba-2's gated RMSNorm: over the whole d_inner (1, as Hugging Face computes it) or over each of
  // this many equal groups of channels (mamba_ssm and llama.cpp: ngroups).
  std::int64_t ssm_norm_groups = 1;
  double ssm_dt_min = 0.0, ssm_dt_max = 0.0;  // Mamba-2: the time step clamped to [min, max]; max 0: no limit

  std::optional<std::int64_t> bos_id;
  std::optional<std::int64_t> eos_id;

  // Training recipe when the checkpoint says it (qeval's own checkpoints): "adam", "orthoadam", ...
  std::optional<std::string> optimizer;

  std::int64_t head_dim() const { return head_size > 0 ? head_size : (n_heads > 0 ? d_model / n_heads : 0); }
  std::int64_t rotary_dims() const { return rotary_dim > 0 ? rotary_dim : head_dim(); }
  // The attention window of `layer` (0 = global) and its RoPE base.
  std::int64_t attention_window(std::int64_t layer) const {
    return attention_windows.empty() ? 0 : attention_windows[static_cast<std::size_t>(layer)];
  }
  double rope_base(std::int64_t layer) const {
    return attention_window(layer) > 0 && rope_theta_local > 0 ? rope_theta_local : rope_theta;
  }
  double attention_scale_or_default() const;
  MixerKind mixer(std::int64_t layer) const {
    return layer_mixers.empty() ? MixerKind::attention : layer_mixers[static_cast<std::size_t>(layer)];
  }
  FfnKind ffn(std::int64_t layer) const {
    return layer_ffns.empty() ? FfnKind::dense : layer_ffns[static_cast<std::size_t>(layer)];
  }
  bool has_mixer(MixerKind kind) const;
  bool has_ffn(FfnKind kind) const;
  std::int64_t expert_d_ff() const { return moe_d_ff > 0 ? moe_d_ff : d_ff; }
  std::int64_t ssm_head_dim() const { return ssm_heads > 0 ? ssm_d_inner / ssm_heads : 0; }
  // Mamba-2's convolved channels: x, B and C.
  std::int64_t ssm_conv_dim(MixerKind kind) const {
    return kind == MixerKind::mamba2 ? ssm_d_inner + 2 * ssm_groups * ssm_d_state : ssm_d_inner;
  }
  bool gated_mlp() const { return mlp == MlpKind::swiglu || mlp == MlpKind::geglu; }
  bool has_qkv_bias() const { return attention_bias || qkv_bias; }
  // Throws qeval::Error when a field is outside its domain or fields disagree (d_model % n_heads,
  // kv heads > heads, ...), naming the file and the key as the file spells it (config_validation.h).
  void validate(const ConfigSource& source) const;
  // The same for a config no file describes (training, tests): keys are the fields' own names.
  void validate(const std::string& source) const;
  // The MoE and state-space fields (validate() calls it), naming the keys the loader gave.
  void validate_layer_kinds(const ConfigSource& source) const;
  // Rough parameter count of the blocks + embeddings + head (for reports and FLOP estimates).
  std::int64_t parameter_count() const;
};

// Enum <-> string, throwing with the list of valid values on an unknown name.
std::string to_string(NormKind v);
std::string to_string(PositionKind v);
std::string to_string(RopePairing v);
std::string to_string(SoftmaxKind v);
std::string to_string(MlpKind v);
std::string to_string(MixerKind v);
std::string to_string(FfnKind v);
std::string to_string(RouterNorm v);
NormKind parse_norm(const std::string& s);
PositionKind parse_position(const std::string& s);
RopePairing parse_rope_pairing(const std::string& s);
SoftmaxKind parse_softmax(const std::string& s);
MlpKind parse_mlp(const std::string& s);
MixerKind parse_mixer(const std::string& s);
FfnKind parse_ffn(const std::string& s);
RouterNorm parse_router_norm(const std::string& s);

// qeval's own config.json form (every switch explicit). `source` names the file in errors.
nlohmann::json config_to_json(const ModelConfig& config);
ModelConfig config_from_json(const nlohmann::json& j, const std::string& source);

}  // namespace qeval
