// llama.cpp's quantisation types as a scheme kind (issue 64): weights {"kind": "ggml", ...}.
//
// JSON (weights only; docs/gguf-types.md):
//   {"kind": "ggml", "type": "q4_k"}            one llama.cpp type for every selected tensor
//                                               (q4_0 q4_1 q5_0 q5_1 q8_0 q2_k q3_k q4_k q5_k q6_k
//                                               iq4_nl mxfp4, or f16)
//   {"kind": "ggml", "file_type": "q4_k_m"}     each tensor's type as llama-quantize chooses it for
//                                               that file type (q8_0 q6_k q5_k_m q4_k_m q4_k_s q4_0
//                                               iq4_nl mxfp4_moe)
//   "imatrix": "path"                           llama.cpp's importance matrix (GGUF or legacy .dat;
//                                               quant/ggml_importance.h): every tensor quantised with
//                                               its entry, as llama-quantize --imatrix; a relative
//                                               path is relative to the scheme file. It also changes
//                                               two file types' choices, as in llama.cpp: q4_0's
//                                               first n_layer/8 ffn_down become Q4_1, iq4_nl's stay
//                                               IQ4_NL (Q5_K without)
//   "activations": "none" (default)             the product runs on full-precision activations;
//                  "gguf-q8"                    each layer's input rounded to the activation blocks
//                                               llama.cpp's CPU product converts it to for that
//                                               tensor's type (Q8_0 / Q8_1 / Q8_K / F16;
//                                               quant/formats/ggml/activations.h); CPU only
// Scheme-level keys that go with it:
//   "quantize_embedding": true    the token embedding too (each row it looks up is the row of the
//                                 table's round trip through its type; a tied table is the head's)
//   "tensor_types": {"layers.*.mlp.down": "q8_0", ...}   per-tensor overrides by glob over qeval's
//                                 names ("lm_head", "token_embedding" included), as llama-quantize's
//                                 --tensor-type: an overridden tensor skips the file type's rules
//                                 (and, as in llama.cpp, is not counted by use_more_bits' counters).
//                                 A pattern that matches no tensor, a tensor matched by two patterns
//                                 and a type whose block does not divide the tensor's rows are errors
//                                 naming the tensor (llama-quantize would fall back silently).
//
// The weights are quantised with quant/formats/ggml/quants.h and dequantised once per layer (the float32 a
// GGUF of that type holds); the product is a float32 GEMM, as for fp8/mx/nvfp4.
#pragma once

#include <ATen/ATen.h>

#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "model/config.h"
#include "quant/formats/ggml/types.h"
#include "quant/schemes/spec.h"

namespace qeval {

// llama-quantize's file types offered as presets, by qeval's JSON name.
const std::vector<std::string>& ggml_file_type_names();  // q8_0, q6_k, q5_k_m, q4_k_m, q4_k_s, q4_0, iq4_nl, mxfp4_moe

// A type given in JSON ("q4_k", "Q4_K", "f16"): the 12 quantisation types and F16 (and F32 when
// allow_f32: a tensor kept in full precision). Throws naming `where` and listing the names.
GgmlType ggml_type_from_json_name(const std::string& name, const std::string& where, bool allow_f32);
// The "weights" object of kind ggml (its "kind" already read as ggml).
QuantSpec ggml_weights_from_json(const nlohmann::json& j, const std::string& where);
nlohmann::json ggml_weights_to_json(const QuantSpec& q);
// The scheme-level keys of kind ggml, read from a scheme's JSON object into s.
void ggml_scheme_keys_from_json(const nlohmann::json& j, SchemeSpec& s, const std::string& source);
void ggml_scheme_keys_to_json(const SchemeSpec& s, nlohmann::json& j);
bool is_ggml_scheme_key(const std::string& key);  // "tensor_types", "quantize_embedding"
// Throws naming `source` when the ggml parts of s are inconsistent (tensor_types or
// quantize_embedding without ggml weights, ggml input/output activation specs).
void validate_ggml_scheme(const SchemeSpec& s, const std::string& source);

// Whether the scheme quantises the token embedding (quantize_embedding, and include/exclude
// admit the name "token_embedding").
bool selects_embedding(const SchemeSpec& s);

// The GGUF tensor a qeval tensor is stored as (llama.cpp's names: "blk.3.attn_q.weight",
// "token_embd.weight", "output.weight"; a tied head is "token_embd.weight"), and for one expert of
// a routed-expert tensor ("blk.3.ffn_down_exps.weight") its index, else -1. Throws for a name
// with no llama.cpp tensor.
struct GgufTensorRef {
  std::string name;
  std::int64_t expert = -1;
};
GgufTensorRef gguf_tensor_of(const std::string& qeval_name, bool tied_embeddings);

// What one tensor got and why (for records).
struct GgmlTensorChoice {
  GgmlType type = GgmlType::F32;
  std::string rule;  // "file type q4_k_m: use_more_bits (layer 3 of 30)", "tensor_types 'x'", ...
};

// The type of every tensor of a model under a ggml scheme, chosen as llama-quantize (llama.cpp
// 0c1e57098, src/llama-quant.cpp: llama_tensor_get_type) chooses it: built from the model's
// linear names in execution order and its config; tensors are asked for by qeval name with
// their row length (in_features, ggml's ne[0]).
class GgmlTypePlan {
 public:
  // Throws when a tensor_types pattern matches no tensor of the model (listing them).
  GgmlTypePlan(const SchemeSpec& spec, const std::vector<std::string>& linear_names, const ModelConfig& config);
  // Throws naming the tensor when a forced type (weights "type" or a tensor_types entry) has a
  // block that does not divide in_features.
  GgmlTensorChoice choose(const std::string& name, std::int64_t in_features) const;

 private:
  std::string scheme_;  // the scheme's name, in every message
  QuantSpec weights_;
  std::vector<std::pair<std::string, GgmlType>> overrides_;
  std::int64_t n_layers_ = 0, n_gqa_ = 1, n_experts_ = 0;
  bool tied_ = false;
  bool has_imatrix_ = false;  // weights.ggml_imatrix given (llama.cpp's qs.has_imatrix)
  std::map<std::string, int> attn_v_index_, ffn_down_index_;  // llama.cpp's counters per tensor
  int n_attn_v_ = 0;
  std::optional<std::string> override_of(const std::string& name) const;
};

}  // namespace qeval
