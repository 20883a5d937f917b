// ModelConfig: every supported transformer described by explicit switches (DESIGN.md §3),
// never by a family name alone. Loaders map each checkpoint format onto this one struct.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

namespace qeval {

enum class NormKind { layernorm, rmsnorm, rmsnorm_single };
enum class PositionKind { learned, rope, none };
enum class RopePairing { interleaved, half };  // interleaved: (2i, 2i+1) as llama2.c/GGUF; half: (i, i+d/2) as HF
enum class SoftmaxKind { softmax, softmax1 };  // softmax1: exp(x_i) / (1 + sum_j exp(x_j))
enum class MlpKind { gelu, swiglu };           // gelu: GPT-2 tanh approximation; swiglu: down(silu(gate x) * up x)

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
  bool fused_qkv = false;  // the checkpoint stores one [3D, D] attention input projection (GPT-2 c_attn)

  std::optional<std::int64_t> bos_id;
  std::optional<std::int64_t> eos_id;

  // Training recipe when the checkpoint says it (qeval's own checkpoints): "adam", "orthoadam", ...
  std::optional<std::string> optimizer;

  std::int64_t head_dim() const { return d_model / n_heads; }
  // Throws qeval::Error naming `source` when a field is inconsistent (d_model % n_heads, ...).
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
