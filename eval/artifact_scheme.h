// A quantised checkpoint users download — a GPTQ, AWQ, compressed-tensors, bitsandbytes or FP8
// folder, a quantised GGUF — evaluated beside the model it was made from, as one more scheme of
// the parent's evaluation (`qeval eval --model PARENT --compare-checkpoint ARTIFACT`, issue 78).
//
// The artifact is read as its own checkpoint (every part: embedding, blocks, final norm, head,
// dequantised to float32 by its codecs) and runs through the same layer-major plan as the
// parent's schemes, so its row has the paired ΔNLL, KL, top-1 and statistics of any scheme. Its
// config must be the parent's: the shapes first (the first tensor whose shape differs is named),
// then every other field (rope, norms, activations: an artifact made from the parent changes
// none of them).
//
// When the plan reaches a layer, the artifact's tensors are compared with the parent's, each
// tensor by name: relative Frobenius error ‖A − P‖ / ‖P‖ and max |A − P|, in float64. Where the
// artifact's norm gains differ from the parent's (AWQ and SmoothQuant fold per-channel scales
// into the norm before a linear, and into the linear before another), a tensor's own error
// mixes that rescaling with the rounding; the error is then also given on what reaches the
// output, which the folding leaves unchanged: W · diag(g) for a linear that reads a norm of gains
// g, the per-head products W_o,h · W_v,kv(h) for v → o, the per-channel products down[:, i] ·
// up[i, :] for up → down.
#pragma once

#include <filesystem>
#include <map>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "common/phases.h"
#include "eval/evaluator.h"
#include "loaders/checkpoints/model_reader.h"
#include "quant/rewrite.h"
#include "quant/schemes/spec.h"

namespace qeval {

// One tensor's (or one product's) error against the parent.
struct WeightError {
  std::string name;        // canonical ("layers.3.attn.q.weight") or a product ("layers.3.attn.v·o")
  std::string basis;       // "stored" | "norm-folded" | "product"
  double relative_frobenius = 0;  // ‖A − P‖_F / ‖P‖_F (0 when P is 0 and A equals it)
  double max_abs_diff = -1;       // max |A − P|; -1 for products (their matrices are not formed)
};

// The weight errors of one artifact, filled as the plan reaches each layer (once per layer, however
// often a streamed plan rebuilds it), and the record's description of them.
class ArtifactWeightErrors {
 public:
  void add_layer(std::int64_t layer, std::vector<WeightError> errors);
  bool has_layer(std::int64_t layer) const;
  void set_head(std::vector<WeightError> errors);
  // {tensors: [...], summary: {linears, median and max relative error by basis, largest tensor}}.
  nlohmann::json to_json() const;

 private:
  mutable std::mutex mutex_;
  std::map<std::int64_t, std::vector<WeightError>> layers_;
  std::vector<WeightError> head_;
};

struct ArtifactScheme {
  EvalScheme scheme;
  std::shared_ptr<ArtifactWeightErrors> errors;
  std::shared_ptr<ModelReader> reader;
  // The declared input activations as qeval quantises them (null: weights only).
  std::shared_ptr<SchemeRewrite> activations;
};

// The input activations an artifact's quantization config (its reader's notes["quantization"])
// declares, as the qeval quantiser that computes them: compressed-tensors' dynamic symmetric int8
// or FP8 E4M3 per token or per tensor, NVFP4's E2M1 blocks of 16. Nullopt when it declares
// none (GPTQ, AWQ, bitsandbytes 4-bit, compressed-tensors weights-only groups). Throws naming the
// artifact and the declaration, with the way out (--artifact-weights-only), where qeval has no
// quantiser that computes it: static scales stored in the artifact, asymmetric activations,
// FP8 per group of 128 (fine-grained FP8), LLM.int8's decomposition (bitsandbytes 8-bit), groups
// that declare different activations or target other than every linear. `account` gets what was
// applied and how it differs from the library's arithmetic.
std::optional<QuantSpec> declared_input_activations(const nlohmann::json& quantization, const std::string& artifact,
                                                    std::string* account);

// The row's name: the artifact's folder (or file stem) and its method, "SmolLM2-GPTQ:gptq",
// "model-q4_k_m:gguf", "parent-copy:float".
std::string artifact_scheme_name(const ModelReader& artifact);

// Throws naming both checkpoints and the first difference: a tensor whose shape differs (or that
// one of them lacks), else a config field ("rope_theta: 10000 vs 100000").
void check_artifact_matches_parent(const ModelReader& artifact, const ModelReader& parent);

// Opens `path` (any checkpoint format qeval reads) as a scheme of `parent`'s evaluation; checks it
// with check_artifact_matches_parent. The description names the checkpoint (path, format, stored
// quantisation, bytes on disk and per weight); finish_artifact_description adds, after the run, the
// weight errors (the embedding's and the head's read then, in blocks of rows) and the weights hash.
// `weights_only`: the declared input activations are not applied (--artifact-weights-only).
ArtifactScheme artifact_scheme(const std::filesystem::path& path, const ModelReader& parent, bool weights_only = false);
// `scheme`: the artifact's index among the run's schemes (its quantize phase is charged).
void finish_artifact_description(ArtifactScheme& artifact, ModelReader& parent, nlohmann::json& description,
                                 int scheme = kOuterScheme);

// The errors of one artifact block against the parent's (exposed for the tests): every tensor by
// name, and the folded bases where the norms differ.
std::vector<WeightError> block_weight_errors(const BlockWeights& artifact, const BlockWeights& parent,
                                             const ModelConfig& config, std::int64_t layer);

}  // namespace qeval
