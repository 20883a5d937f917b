// Quantisation schemes (DESIGN.md §5): what is quantised (weights, input activations, output
// activations), how (int8 absmax or 4-bit zero-point, at which granularity), which linear layers,
// and on which execution path. Presets live as JSON in configs/schemes/ and are compiled into the
// library (quant/schemes/presets.cmake), so any working directory finds them; a path to a JSON file gives
// any other combination.
//
// JSON form (every key optional except where noted; unknown keys are errors):
//   {
//     "name": "int8-fine",                        informational; the preset or file name
//     "description": "...",
//     "weights":            {"kind": "int8_absmax", "granularity": "channel"},
//     "input_activations":  {"kind": "int8_absmax", "granularity": "feature"},
//     "output_activations": {"kind": "none"},
//     "quantize_lm_head": false,
//     "include": ["layers.*"], "exclude": ["layers.0.*"],
//     "execution": "auto",                         auto | reference | kernel
//     "keep_first_tokens": 1,                      or "keep_tokens": {"first": 1} | {"top_norm": 1}
//     "outlier_threshold": 6.0                     null (default): no outlier decomposition
//   }
// kind: none | int8_absmax | int4_zeropoint | fp8 | mx | nvfp4 | ggml ("bits" may be given too and must
// agree; ggml: llama.cpp's types, weights only, quant/schemes/ggml_rules.h). granularity: weights
// tensor | channel | group:<g>; input activations tensor | token |
// feature; output activations tensor | token. Activation scales are dynamic and per sequence:
// "tensor" means one scale per sequence, "token" one per position, "feature" one per channel of a
// sequence.
//
// The floating-point formats (issue 61; exact definitions in quant/formats/minifloat.h, quant/formats/mx.h,
// quant/formats/nvfp4.h and docs/formats.md), for weights and input activations:
//   {"kind": "fp8", "element": "e4m3" | "e5m2", "granularity": ...}
//        scale = amax / largest finite (1 where amax = 0) per tensor or channel (weights), per
//        tensor (sequence) or token (activations)
//   {"kind": "mx", "element": "e4m3" | "e5m2" | "e2m3" | "e3m2" | "e2m1", "granularity": "block:32",
//    "scale_rounding": "floor" | "up"}                 OCP MX v1.0 (default floor)
//   {"kind": "nvfp4", "granularity": "block:16"}       E2M1 with E4M3 block scales and a tensor scale
//                                                      (a sequence's, for activations)
// Static activation scales: an input_activations spec of kind int8_absmax or fp8 and granularity
// "tensor" may say "calibration": {"windows": N, "statistic": "max" | "percentile:P"}: each
// linear's input scale is fixed from a full-precision pass over N calibration windows (never
// evaluated; the rule of --transform smooth), then held for the whole evaluation. Positions the
// scheme keeps (keep_tokens first) are left out of the statistic too.
//
// Kept tokens (issue 19, the post-hoc counterpart of softmax-1): activation quantisation leaves
// k positions of each sequence in full precision, in every quantised linear. Those rows run the
// full-precision layer exactly (float input, float weights, bias; output not quantised), and the
// activation scales, input and output, are computed from the remaining positions only.
//   "keep_first_tokens": k             the first k positions (the simple form; default 0)
//   "keep_tokens": {"first": k}        the same
//   "keep_tokens": {"top_norm": k}     per sequence and per linear, the k positions whose input
//                                      row has the largest ||x||_2 (ties: the lower position)
// k is a non-negative integer (k >= L keeps every position); at most one of the two keys; k > 0
// needs input or output activation quantisation (with neither it would mean nothing). The
// resolved spec always writes "keep_tokens": {"<rule>": k}.
//
// Mixed-precision decomposition (LLM.int8(), issue 15): "outlier_threshold": T, a non-negative
// JSON number (null or absent: off). Per sequence (axis 0, so results never depend on B), the
// input features j with max_l |x[l, j]| >= T (as bitsandbytes: >=, so T = 0 makes every feature
// an outlier; NaN never is) form O, and
//   y = int8_vectorwise(X with the columns in O set to zero) + X[:, O] W[:, O]^T in fp32 (+ bias once)
// so the per-token activation scales come from the other columns only; the weights are
// quantised per output row over the whole row, once, as int8-vectorwise does. A sequence whose
// every feature is an outlier takes the full-precision layer's own output. Valid only with
// int8_absmax weights per channel and int8_absmax input activations per token (LLM.int8's
// vector-wise scheme), no output activation quantisation and no keep_tokens. T = +infinity may be
// set in C++ (std::numeric_limits<double>::infinity()); JSON has no infinity, so it is written as
// 1.7976931348623157e308 (the largest double), which selects exactly the same features (only an
// infinite |x| reaches either). Any very large number (1e30) is the plain vector-wise scheme.
// The resolved spec always writes "outlier_threshold" (null when off).
//
// Which linears: every linear inside the blocks (layers.<i>.attn.{qkv|q|k|v|o},
// layers.<i>.mlp.{up|gate|down}, every expert's layers.<i>.moe.experts.<e>.{gate|up|down} and the shared
// expert's layers.<i>.moe.shared.*, Mamba's layers.<i>.mamba.{in_proj|out_proj}), plus
// layers.<i>.mamba.{x_proj|dt_proj} only when quantize_ssm_inner is true (they produce the scan's
// time step and B, C: full precision by default, as the scan's parameters are), plus lm_head when
// quantize_lm_head is true; then, when include
// is non-empty, only names matching one of its patterns; then minus names matching exclude.
// Patterns are globs over the canonical names ('*' any run of characters, '?' one character).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "quant/formats/minifloat.h"

namespace qeval {

enum class QuantKind { none, int8_absmax, int4_zeropoint, fp8, mx, nvfp4, ggml };
enum class Granularity { tensor, channel, group, token, feature, block };

// A static activation scale's calibration (see above): N windows, and the statistic of |x| over
// every element of a linear's input in them: the maximum (percentile 100) or the P-th
// percentile with linear interpolation.
struct ActivationCalibration {
  std::int64_t windows = 0;
  double percentile = 100;
  std::string statistic_name() const;  // "max" or "percentile:P"
  bool operator==(const ActivationCalibration& o) const { return windows == o.windows && percentile == o.percentile; }
};
enum class ExecutionPreference { automatic, reference, kernel };

// Weights calibrated by GPTQ (issue 77; quant/calibration/gptq_solve.h, docs/calibrated.md): a
// weights spec of kind int4_zeropoint (granularity channel or group:g) with "method": "gptq" and,
// optionally, its settings (defaults: llm-compressor 0.14's GPTQModifier with scheme W4A16):
//   "gptq": {"symmetric": true, "dampening": 0.01, "block_size": 128,
//            "actorder": "none" | "static" | "group",
//            "group_params": "original" | "updated",
//            "arithmetic": "llm-compressor" | "autogptq",
//            "calibration": {"windows": 128}}
// and, at the weights' level, "bits": 2, 3 or 4 (default 4): GPTQ's codes of that width, held and
// executed in the 4-bit container of int4_zeropoint (a code c of b bits dequantises as
// (c − zero) · scale on the same kernels); the record counts them at b bits, as GPTQ checkpoints
// pack them. Round to nearest and AWQ stay at 4 bits.
// actorder static: columns in order of descending H_jj, each keeping its original group's
// parameters (llm-compressor's "static" / "weight"); group: the same order with groups formed in
// it and their parameters from the updated weights, a g_idx per column (AutoGPTQ's desc_act,
// llm-compressor's "group"). group_params says where a group's scale and zero come from without
// activation order: the original weights (llm-compressor) or the updated ones at its first column
// (AutoGPTQ / GPTQModel); static implies original and group implies updated. The calibration
// windows are evaluation data the evaluation does not use, the rule of static activation scales.
enum class GptqActOrder { none, static_order, group };
struct GptqSpec {
  bool symmetric = true;
  double dampening = 0.01;
  std::int64_t block_size = 128;
  GptqActOrder actorder = GptqActOrder::none;
  bool updated_group_params = false;  // "group_params": "updated"
  bool autogptq_arithmetic = false;   // "arithmetic": "autogptq"
  std::int64_t windows = 128;         // "calibration": {"windows": N}
  int bits = 4;                       // the weights' "bits": 2, 3 or 4
  bool operator==(const GptqSpec& o) const {
    return bits == o.bits && symmetric == o.symmetric && dampening == o.dampening && block_size == o.block_size &&
           actorder == o.actorder && updated_group_params == o.updated_group_params &&
           autogptq_arithmetic == o.autogptq_arithmetic && windows == o.windows;
  }
};
std::string to_string(GptqActOrder v);  // "none" | "static" | "group"

// Weights calibrated by AWQ (issue 77; quant/calibration/awq_search.h, eval/awq_layer.h,
// docs/calibrated.md): a weights spec of kind int4_zeropoint (granularity channel or group:g) with
// "method": "awq" and, optionally, its settings (defaults: llm-compressor 0.14's AWQModifier with
// scheme W4A16_ASYM: asymmetric codes, duo scaling, a grid of 20):
//   "awq": {"duo_scaling": true | false | "both", "n_grid": 20, "calibration": {"windows": 128}}
// Per layer, each mapping's scales s are searched on the scheme's own stream, folded into the
// layer (the previous norm or linear ÷ s, the balance columns × s), and the folded weights are
// quantised round-to-nearest (compressed-tensors' asymmetric min/max rule).
enum class AwqDuo { off, on, both };
struct AwqSpec {
  AwqDuo duo_scaling = AwqDuo::on;
  int n_grid = 20;
  std::int64_t windows = 128;  // "calibration": {"windows": N}
  bool operator==(const AwqSpec& o) const {
    return duo_scaling == o.duo_scaling && n_grid == o.n_grid && windows == o.windows;
  }
};

struct QuantSpec {
  QuantKind kind = QuantKind::none;
  Granularity granularity = Granularity::tensor;
  std::int64_t group_size = 0;  // > 0 only for Granularity::group and block (the block size)
  ElementType element = ElementType::e4m3;  // fp8, mx (nvfp4: e2m1)
  bool scale_round_up = false;              // mx: "scale_rounding": "up"
  std::optional<ActivationCalibration> calibration;  // input activations per tensor: a static scale
  // kind ggml (weights; quant/schemes/ggml_rules.h): llama.cpp's type ("Q4_K") when one is forced (or
  // resolved for one tensor), else the llama-quantize file type ("q4_k_m") choosing per tensor.
  std::string ggml_type, ggml_file_type;
  bool ggml_q8_activations = false;  // "activations": "gguf-q8": llama.cpp's activation blocks (quant/formats/ggml/activations.h)
  std::string ggml_imatrix;          // "imatrix": llama.cpp's importance matrix file (quant/ggml_importance.h)
  std::optional<GptqSpec> gptq;      // weights of kind int4_zeropoint with "method": "gptq" (see above)
  std::optional<AwqSpec> awq;        // weights of kind int4_zeropoint with "method": "awq" (see above)

  bool enabled() const { return kind != QuantKind::none; }
  // fp8, mx or nvfp4: elements of a floating-point type (quant/formats/minifloat.h).
  bool is_float_format() const { return kind == QuantKind::fp8 || kind == QuantKind::mx || kind == QuantKind::nvfp4; }
  bool is_static() const { return calibration.has_value(); }
  int bits() const;  // 8, 6, 4 (GPTQ: 2, 3 or 4), or 32 for none
  std::string granularity_name() const;  // "tensor", "channel", "group:128", "block:32", ...
  // How the weights' codes are chosen: "rtn" (round to nearest, in the rewrite), "gptq" or "awq"
  // (calibrated before the evaluation), and the calibrated methods' windows (0 for rtn).
  std::string method() const { return gptq ? "gptq" : awq ? "awq" : "rtn"; }
  std::int64_t calibration_windows() const { return gptq ? gptq->windows : awq ? awq->windows : 0; }
  bool operator==(const QuantSpec& o) const {
    return kind == o.kind && granularity == o.granularity && group_size == o.group_size &&
           (!is_float_format() || (element == o.element && scale_round_up == o.scale_round_up)) &&
           calibration == o.calibration && ggml_type == o.ggml_type && ggml_file_type == o.ggml_file_type &&
           ggml_q8_activations == o.ggml_q8_activations && ggml_imatrix == o.ggml_imatrix && gptq == o.gptq &&
           awq == o.awq;
  }
};

// Static activation scales measured for one scheme (eval/calibration_pass.h fills them in before the
// evaluation): each selected linear's calibrated amax of its input, and the record's account of
// how (windows, their hashes, the statistic, each layer's scale).
// Weights a calibrated quantiser made for one scheme (GPTQ, AWQ; quant/calibrated_weights.h defines it,
// eval/weight_calibration_pass.h fills it in before the evaluation).
struct CalibratedWeights;
// Importance weights read from weights.ggml_imatrix for one model (quant/ggml_importance.h).
struct GgmlImportanceWeights;

struct CalibratedScales {
  std::map<std::string, double> amax;  // by canonical linear name
  nlohmann::json description;
};

// Which positions activation quantisation leaves in full precision (see above).
enum class KeepRule { first, top_norm };

struct KeepTokens {
  KeepRule rule = KeepRule::first;
  std::int64_t count = 0;  // k; 0 keeps nothing

  bool enabled() const { return count > 0; }
  bool operator==(const KeepTokens& o) const { return rule == o.rule && count == o.count; }
};

// A quantised key/value cache (issue 62; docs/kv-cache.md): K (after k-norm and rotary) and V of
// every attention layer, per position and kv head along head_dim, quantised and dequantised
// before the attention reads them. Independent of the linear layers' spec.
//   "kv_cache": {"format": "int8" | "fp8-e4m3" | "q8_0" | "q4_0" | "int4",
//                "group_size": 32,              int4 only (default 32; last group shorter)
//                "keep_tokens": {"first": k},   K and V of positions 0..k-1 stay full precision
//                "rotation": "hadamard"}        llama.cpp's attention rotation (see below)
//   int8      absmax per position and head, s = amax / 127, round half to even (quant/quantize.h)
//   fp8-e4m3  per position and head, s = amax / 448 (1 where amax = 0), clamp, nearest even
//   q8_0/q4_0 llama.cpp's blocks of 32 along head_dim (quant/formats/ggml/quants.h); head_dim must be a
//             multiple of 32
//   int4      4-bit zero-point (qeval's w4 maths) per position and head in groups along head_dim
// rotation "hadamard" (llama.cpp's default for a quantised cache since 2026, its attn_rot_k/v;
// LLAMA_ATTN_ROT_DISABLE=1 turns it off there): K is quantised in the basis of the orthonormal
// Walsh-Hadamard matrix H_n applied to consecutive blocks of n along head_dim, n the largest power
// of two from 64 that divides head_dim; V the same with n = 64. llama.cpp rotates Q and K (and V,
// un-rotating the attention's output); since H is orthonormal and symmetric, the same scores and
// outputs come from x̂ = H · Q(H · x), which is what qeval stores: the attention is unchanged.
// head_dim must be a multiple of 64 (llama.cpp's condition).
// Written in the resolved spec only when present, so records of other schemes keep their form.
enum class KvCacheFormat { none, int8, fp8_e4m3, q8_0, q4_0, int4 };
enum class KvCacheRotation { none, hadamard };

struct KvCacheSpec {
  KvCacheFormat format = KvCacheFormat::none;
  std::int64_t group_size = 32;  // int4's group along head_dim
  std::int64_t keep_first = 0;   // positions 0..keep_first-1 of each window kept in full precision
  KvCacheRotation rotation = KvCacheRotation::none;

  bool enabled() const { return format != KvCacheFormat::none; }
  bool operator==(const KvCacheSpec& o) const {
    return format == o.format && group_size == o.group_size && keep_first == o.keep_first && rotation == o.rotation;
  }
};

std::string to_string(KvCacheFormat v);  // "int8", "fp8-e4m3", "q8_0", "q4_0", "int4", "none"

struct SchemeSpec {
  std::string name = "custom";
  std::string description;
  QuantSpec weights;
  QuantSpec input_activations;
  QuantSpec output_activations;
  bool quantize_lm_head = false;
  bool quantize_ssm_inner = false;  // Mamba's x_proj and dt_proj too (JSON "quantize_ssm_inner", written when true)
  // Weights of kind ggml only (quant/schemes/ggml_rules.h): the token embedding too, and per-tensor
  // types by name pattern (llama-quantize's --tensor-type), pattern -> llama.cpp type name.
  bool quantize_embedding = false;
  std::vector<std::pair<std::string, std::string>> tensor_types;
  std::vector<std::string> include;
  std::vector<std::string> exclude;
  ExecutionPreference execution = ExecutionPreference::automatic;
  KeepTokens keep_tokens;
  // LLM.int8() outlier threshold T (see above); nullopt: no decomposition. +infinity is allowed.
  std::optional<double> outlier_threshold;
  // Filled in by the calibration when input_activations is static; shared by every copy of the
  // spec (rounding-band variants, sensitivity's one-layer schemes), never written to JSON.
  std::shared_ptr<const CalibratedScales> calibrated;
  // Filled in by the weight calibration when the weights' method is gptq or awq; shared like `calibrated`.
  std::shared_ptr<const CalibratedWeights> calibrated_weights;
  // Filled in from weights.ggml_imatrix before the evaluation (eval/ggml_imatrix.h); shared likewise.
  std::shared_ptr<const GgmlImportanceWeights> ggml_importance;
  KvCacheSpec kv_cache;  // "kv_cache" (see above); format none: K and V unquantised

  bool needs_calibration() const { return input_activations.is_static(); }
  bool needs_weight_calibration() const { return weights.gptq.has_value() || weights.awq.has_value(); }
  bool decomposes_outliers() const { return outlier_threshold.has_value(); }
  // False for the full-precision scheme: nothing to rewrite.
  bool quantizes_anything() const;
  // Whether any linear is quantised (a scheme may quantise only its kv cache).
  bool quantizes_linears() const;
  // Whether the linear called `name` (canonical) is quantised under this scheme.
  bool selects(const std::string& name) const;
};

// --calibration-windows: n windows for whatever the spec calibrates (GPTQ's or AWQ's weights, static
// activation scales); nothing for a spec that calibrates nothing.
void apply_calibration_windows(SchemeSpec& spec, std::int64_t n);

std::string to_string(QuantKind v);
std::string to_string(Granularity v);
std::string to_string(ExecutionPreference v);
std::string to_string(KeepRule v);  // "first" | "top_norm"
std::string to_string(AwqDuo v);    // "off" | "on" | "both"

// Glob match over canonical linear names: '*' any run of characters (dots included), '?' one.
bool glob_match(const std::string& pattern, const std::string& text);

}  // namespace qeval
