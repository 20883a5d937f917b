// Model rewrite: every linear a scheme selects becomes a QuantizedLinear (weights quantised once,
// stored packed); everything else is shared with the full-precision model (DESIGN.md §5).
#pragma once

#include <nlohmann/json.hpp>

#include "model/transformer.h"
#include "quant/kv_cache.h"
#include "quant/schemes/ggml_rules.h"
#include "quant/quantized_linear.h"
#include "quant/schemes/scheme_json.h"
#include "quant/schemes/spec.h"

#include <map>
#include <memory>
#include <string>
#include <vector>

namespace qeval {

struct QuantizedModel {
  Transformer model;  // a copy of `full` sharing all tensors, selected linears replaced
  // What a result record stores about the rewrite:
  //   scheme                the fully resolved spec (scheme_to_json)
  //   execution_path        "kernel", "reference", "reference (<why the kernel path cannot run>)",
  //                         or "none (full precision)" when the scheme quantises nothing
  //   kernel_path_available bool, and kernel_path_unavailable_reason (string, empty if available)
  //   kernels               the backends the kernel path dispatches to on this machine
  //   layers                [{name, in_features, out_features, quantized, describe, weight_bytes,
  //                           fp32_weight_bytes}] in execution order, unquantised ones included
  //                         (kind ggml adds ggml_type and ggml_rule to each entry, and a first
  //                         entry "token_embedding" when the embedding is quantised, outside the
  //                         byte totals below, which are over linears;
  //                         weight_bytes counts the fp32 weight too when the scheme keeps tokens
  //                         or decomposes outliers)
  //   quantized_layers      count
  //   quantized_weight_bytes / fp32_weight_bytes / weight_bytes_ratio   over the quantised layers
  //                         (packed codes + scales + zeros + bias, against fp32 weight + bias)
  //   model_linear_bytes / model_linear_bytes_fp32                       over all linears
  //   kv_cache_error        only for schemes with kv_cache: QuantizedKvCache::error_report(), the
  //                         K and V quantisation error per layer over the windows run so far
  nlohmann::json report;
};

// Throws qeval::Error when the scheme asks for the kernel path and it cannot run, when an
// include/exclude pattern matches no linear of this model (listing the model's linears), or when
// a linear of `full` is not a float linear.
QuantizedModel quantize_model(const Transformer& full, const SchemeSpec& spec);

// One scheme's rewrite applied part by part: a block at a time and the head, as the layer-major
// evaluator reaches them (eval/evaluator.h), possibly once per chunk of windows. The same full
// block always gives the same quantised block (quantisation is deterministic), and layers rebuilt
// for one linear share their log, so reports count every window whichever plan ran.
class SchemeRewrite {
 public:
  // `linear_names`: every linear of the model in execution order (lm_head last). Validates the
  // scheme, checks its include/exclude patterns against the names and decides the execution path,
  // throwing as quantize_model does; no weight is needed.
  SchemeRewrite(SchemeSpec spec, std::vector<std::string> linear_names);

  const SchemeSpec& spec() const { return spec_; }
  bool selects(const std::string& linear_name) const { return spec_.selects(linear_name); }
  // Whether the scheme selects any linear of that layer or quantises its kv cache (rewrite() then
  // changes the block).
  bool selects_in_layer(const ModelConfig& config, std::int64_t layer) const;
  // Throws when the scheme's kv_cache cannot run on this model (quant/kv_cache.h's
  // check_kv_cache_fits); `model` names it.
  void check_model(const ModelConfig& config, const std::string& model) const;
  // The scheme's kv cache quantiser (null without kv_cache), shared by every block it rewrites.
  const std::shared_ptr<QuantizedKvCache>& kv_cache() const { return kv_cache_; }
  // The block with the linears the scheme selects replaced by quantised ones (the others shared),
  // after the tensors its calibration replaced in that layer (CalibratedWeights::replaced_tensors:
  // AWQ's folded norms) are put in.
  Block rewrite(const Block& full);
  // The head (a float [V, D] linear) quantised when the scheme selects lm_head; else `full_head`.
  std::shared_ptr<const Linear> rewrite_head(const std::shared_ptr<const Linear>& full_head);

  // Weights of kind ggml (quant/schemes/ggml_rules.h): each tensor's type depends on the model (layer
  // count, GQA ratio, experts, tied embedding), so the rewrite needs its config before the first
  // tensor: use_model() (idempotent; rewrite() calls it with the block's config when not called,
  // and use_rewrite in eval/schemes.h calls it up front, which also checks tensor_types patterns).
  void use_model(const ModelConfig& config);
  // Whether the token embedding is quantised (quantize_embedding); then rows [n, D] of the
  // full-precision table -> those rows of the table's round trip through its type (rows are
  // quantised independently, so the rows looked up equal the dequantised table's). Needs use_model.
  bool quantizes_embedding() const { return selects_embedding(spec_); }
  // The linears of `config` the scheme quantises: selected by include / exclude (and lm_head,
  // ssm-inner), and for kind ggml not left in f32 by its type plan. Needs use_model for kind ggml.
  std::vector<std::string> quantized_linears(const ModelConfig& config) const;
  at::Tensor rewrite_embedding_rows(const at::Tensor& rows);

  // quantize_model's report over the linears rewritten so far (each counted once, in execution
  // order); complete once every block and the head went through rewrite.
  nlohmann::json report() const;
  // What the quantised layers logged, for the reports below.
  nlohmann::json kept_positions_report() const;
  nlohmann::json outlier_features_report() const;
  nlohmann::json engines_used_report() const;

 private:
  std::shared_ptr<const Linear> rewrite_linear(const std::string& name, const std::shared_ptr<const Linear>& full);

  std::optional<GgmlTypePlan> ggml_plan_;     // kind ggml: each tensor's type (use_model)
  std::optional<GgmlTensorChoice> embedding_;  // the token embedding's type, when quantised
  std::int64_t vocab_size_ = 0, d_model_ = 0;

  SchemeSpec spec_;
  std::vector<std::string> names_;
  ExecutionPath path_ = ExecutionPath::reference;
  std::string path_text_, why_not_kernel_;
  std::map<std::string, nlohmann::json> layers_;  // report entry by linear name
  struct Logged {
    std::shared_ptr<QuantizedLinearLog> log;
    std::int64_t in_features = 0;
  };
  std::map<std::string, Logged> logs_;  // quantised linears' shared logs, by name
  std::shared_ptr<QuantizedKvCache> kv_cache_;
};

// Which positions the quantised linears of `model` kept in full precision (scheme keep_tokens),
// over every forward pass since quantize_model or the last reset_kept_positions. Null when no
// linear keeps tokens; otherwise
//   {"rule": "first" | "top_norm", "count": k,
//    "sequences": sequences seen by the first such linear (each linear sees every window),
//    "positions": [[position, n], ...]   ascending; n = (linear, sequence) pairs that kept it,
//    "layers": [{"name", "sequences", "positions": [[position, n], ...]}, ...]  in execution order}
// Bounded by the sequence length: at most L entries per list, whatever the number of windows.
nlohmann::json kept_positions_report(const Transformer& model);
// Two such reports of disjoint windows of one scheme added up (sequences and every position's
// count, exact); null + r is r. Throws naming `source` when their rules or layers differ.
nlohmann::json add_kept_positions(const nlohmann::json& a, const nlohmann::json& b, const std::string& source);
void reset_kept_positions(const Transformer& model);

// Which input features the quantised linears of `model` ran in fp32 (scheme outlier_threshold,
// LLM.int8()), over every forward pass since quantize_model or the last reset_outlier_features.
// Null when no linear decomposes outliers; otherwise
//   {"threshold": T (+infinity written as the largest double, as scheme_to_json does),
//    "sequences": sequences seen by the first such linear (each linear sees every window),
//    "layers": [{"name", "in_features", "sequences",
//                "mean_outlier_features": mean over sequences of |O| (0 before any sequence),
//                "max_outlier_features": largest |O|,
//                "features": [[feature, n], ...]   ascending; n = sequences in which it was an outlier,
//                                                  only features seen (at most in_features entries)},
//               ...]  in execution order,
//    "mean_outlier_features": mean over the layers of their mean_outlier_features}
nlohmann::json outlier_features_report(const Transformer& model);

// The kernels the quantised linears of `model` ran (QuantizedLinear::engines_used), each once, in
// words; null when none logged any (the CPU path names its kernels in the rewrite report).
nlohmann::json engines_used_report(const Transformer& model);
void reset_outlier_features(const Transformer& model);

}  // namespace qeval
