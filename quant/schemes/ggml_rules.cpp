// Kind ggml: parsing, and llama-quantize's choice of each tensor's type (quant/schemes/ggml_rules.h).
//
// The rules are those of llama.cpp 0c1e57098 (the llama.cpp llama-cpp-python 0.3.36 vendors),
// src/llama-quant.cpp: llama_tensor_get_type -> llama_tensor_get_type_impl -> tensor_type_fallback,
// for the file types offered, with or without an importance matrix, no --pure, no --output-tensor-type or
// --token-embedding-type. Not modelled: the Falcon architecture's rules and the 70B rule
// (LLM_TYPE_70B: attn_v Q3_K/Q4_K -> Q5_K), which no architecture qeval reads takes.
#include "quant/schemes/ggml_rules.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cctype>

#include "common/error.h"
#include "quant/formats/ggml/quants.h"
#include "quant/schemes/json_reads.h"

namespace qeval {
namespace {

enum class FileType { q8_0, q6_k, q5_k_m, q4_k_m, q4_k_s, q4_0, iq4_nl, mxfp4_moe };
constexpr FileType kFileTypes[] = {FileType::q8_0,   FileType::q6_k,   FileType::q5_k_m, FileType::q4_k_m,
                                   FileType::q4_k_s, FileType::q4_0,   FileType::iq4_nl, FileType::mxfp4_moe};

const char* file_type_name(FileType f) {
  switch (f) {
    case FileType::q8_0: return "q8_0";
    case FileType::q6_k: return "q6_k";
    case FileType::q5_k_m: return "q5_k_m";
    case FileType::q4_k_m: return "q4_k_m";
    case FileType::q4_k_s: return "q4_k_s";
    case FileType::q4_0: return "q4_0";
    case FileType::iq4_nl: return "iq4_nl";
    case FileType::mxfp4_moe: return "mxfp4_moe";
  }
  return "?";
}

FileType file_type_from_name(const std::string& name) {
  for (FileType f : kFileTypes)
    if (name == file_type_name(f)) return f;
  fail("unknown file type '{}'", name);
}

// llama_ftype_get_default_type.
GgmlType default_type(FileType f) {
  switch (f) {
    case FileType::q8_0: return GgmlType::Q8_0;
    case FileType::q6_k: return GgmlType::Q6_K;
    case FileType::q5_k_m: return GgmlType::Q5_K;
    case FileType::q4_k_m:
    case FileType::q4_k_s: return GgmlType::Q4_K;
    case FileType::q4_0: return GgmlType::Q4_0;
    case FileType::iq4_nl: return GgmlType::IQ4_NL;
    case FileType::mxfp4_moe: return GgmlType::MXFP4;
  }
  return GgmlType::Q8_0;
}

// llama.cpp's tensor categories (tensor_get_category), from qeval's names.
enum class Category { output, token_embd, attn_qkv, attn_v, attn_k, attn_q, attn_output, ffn_up, ffn_gate, ffn_down, other };

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

Category category_of(const std::string& name) {
  if (name == "lm_head") return Category::output;
  if (name == "token_embedding") return Category::token_embd;
  if (ends_with(name, ".attn.qkv")) return Category::attn_qkv;
  if (ends_with(name, ".attn.v")) return Category::attn_v;
  if (ends_with(name, ".attn.k")) return Category::attn_k;
  if (ends_with(name, ".attn.q")) return Category::attn_q;
  if (ends_with(name, ".attn.o")) return Category::attn_output;
  if (ends_with(name, ".up") || ends_with(name, ".gate_up")) return Category::ffn_up;  // ffn_up, ffn_up_exps, ..._shexp
  if (ends_with(name, ".gate")) return Category::ffn_gate;
  if (ends_with(name, ".down")) return Category::ffn_down;
  return Category::other;
}

bool attn_v_like(Category c) { return c == Category::attn_v || c == Category::attn_qkv; }

// Routed experts are one 3-D tensor per layer in a GGUF (ne[2] = experts); the shared expert is 2-D.
bool is_routed_expert(const std::string& name) { return name.find(".moe.experts.") != std::string::npos; }

std::int64_t layer_of(const std::string& name) {
  if (name.rfind("layers.", 0) != 0) return -1;
  return std::stoll(name.substr(7, name.find('.', 7) - 7));
}

bool use_more_bits(int i_layer, int n_layers) {
  return i_layer < n_layers / 8 || i_layer >= 7 * n_layers / 8 || (i_layer - n_layers / 8) % 3 == 2;
}

// tensor_type_fallback: a type whose block does not divide the row length.
GgmlType fallback(GgmlType t, std::int64_t ncols, std::string& rule) {
  const std::int64_t block = ggml_block_elements(t);
  if (ncols % block == 0) return t;
  GgmlType r = t;
  switch (t) {
    case GgmlType::Q2_K:
    case GgmlType::Q3_K: r = GgmlType::Q4_0; break;
    case GgmlType::Q4_K: r = GgmlType::Q5_0; break;
    case GgmlType::Q5_K: r = GgmlType::Q5_1; break;
    case GgmlType::Q6_K: r = GgmlType::Q8_0; break;
    default: break;  // a 32-block type: no smaller block to demote to; F16 below
  }
  if (ncols % ggml_block_elements(r) != 0) r = GgmlType::F16;
  rule += fmt::format("; row length {} not a multiple of {} ({}): fallback {}", ncols, block, ggml_type_label(t),
                      ggml_type_label(r));
  return r;
}

std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return s;
}

}  // namespace

const std::vector<std::string>& ggml_file_type_names() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> out;
    for (FileType f : kFileTypes) out.emplace_back(file_type_name(f));
    return out;
  }();
  return names;
}

GgmlType ggml_type_from_json_name(const std::string& name, const std::string& where, bool allow_f32) {
  const std::string l = lower(name);
  if (l == "f16") return GgmlType::F16;
  if (l == "f32" && allow_f32) return GgmlType::F32;
  for (const auto& t : ggml_quant_types())
    if (l == lower(t.name)) return t.type;
  fail("{}: unknown llama.cpp type '{}'; valid: {}{}", where, name, lower(ggml_quant_type_names()),
       allow_f32 ? ", f16, f32" : ", f16");
}

QuantSpec ggml_weights_from_json(const nlohmann::json& j, const std::string& where) {
  QuantSpec q;
  q.kind = QuantKind::ggml;
  for (auto it = j.begin(); it != j.end(); ++it)
    // No "bits": a file type mixes several widths, and a key that is read and ignored would pass a typo.
    QEVAL_CHECK(it.key() == "kind" || it.key() == "type" || it.key() == "file_type" || it.key() == "activations" ||
                    it.key() == "imatrix",
                "{}: unknown key '{}' for kind ggml; valid keys: kind, type, file_type, activations, imatrix", where,
                it.key());
  QEVAL_CHECK(j.contains("type") != j.contains("file_type"),
              "{}: kind ggml needs exactly one of \"type\" (one llama.cpp type for every tensor, e.g. \"q4_k\") or "
              "\"file_type\" (llama-quantize's choice per tensor: {})",
              where, fmt::join(ggml_file_type_names(), ", "));
  if (j.contains("type")) {
    const std::string type = spec_string(j.at("type"), where + ": type", "a llama.cpp type such as q4_k");
    q.ggml_type = ggml_type_label(ggml_type_from_json_name(type, where + ": type", false));
  } else {
    const std::string f = lower(spec_string(j.at("file_type"), where + ": file_type",
                                            fmt::format("{}", fmt::join(ggml_file_type_names(), ", "))));
    const auto& names = ggml_file_type_names();
    QEVAL_CHECK(std::find(names.begin(), names.end(), f) != names.end(), "{}: unknown file_type '{}'; valid: {}", where,
                j.at("file_type").get<std::string>(), fmt::join(names, ", "));
    q.ggml_file_type = f;
  }
  if (j.contains("activations")) {
    const std::string a = spec_string(j.at("activations"), where + ": activations", "none, gguf-q8");
    QEVAL_CHECK(a == "none" || a == "gguf-q8", "{}: activations '{}' is not valid for kind ggml; valid: none, gguf-q8",
                where, a);
    q.ggml_q8_activations = a == "gguf-q8";
  }
  if (j.contains("imatrix")) {
    q.ggml_imatrix = spec_string(j.at("imatrix"), where + ": imatrix", "the path of a llama.cpp importance matrix file");
    QEVAL_CHECK(!q.ggml_imatrix.empty(), "{}: imatrix is empty; give the path of a llama.cpp importance matrix file "
                "(GGUF or .dat) or leave the key out", where);
  }
  return q;
}

nlohmann::json ggml_weights_to_json(const QuantSpec& q) {
  nlohmann::json j = {{"kind", "ggml"}};
  if (!q.ggml_type.empty()) j["type"] = lower(q.ggml_type);
  if (!q.ggml_file_type.empty()) j["file_type"] = q.ggml_file_type;
  j["activations"] = q.ggml_q8_activations ? "gguf-q8" : "none";
  if (!q.ggml_imatrix.empty()) j["imatrix"] = q.ggml_imatrix;
  return j;
}

bool is_ggml_scheme_key(const std::string& key) { return key == "tensor_types" || key == "quantize_embedding"; }

void ggml_scheme_keys_from_json(const nlohmann::json& j, SchemeSpec& s, const std::string& source) {
  if (j.contains("quantize_embedding"))
    s.quantize_embedding = spec_bool(j.at("quantize_embedding"), source + ": quantize_embedding");
  if (j.contains("tensor_types")) {
    const nlohmann::json& t = j.at("tensor_types");
    QEVAL_CHECK(t.is_object(), "{}: tensor_types: expected an object of name pattern -> type, e.g. "
                "{{\"layers.*.mlp.down\": \"q8_0\"}}, got {}", source, t.dump());
    for (auto it = t.begin(); it != t.end(); ++it) {
      QEVAL_CHECK(!it.key().empty(), "{}: tensor_types: empty name pattern", source);
      QEVAL_CHECK(it.value().is_string(), "{}: tensor_types['{}']: expected a type name, got {}", source, it.key(),
                  it.value().dump());
      const std::string where = fmt::format("{}: tensor_types['{}']", source, it.key());
      s.tensor_types.emplace_back(it.key(), ggml_type_label(ggml_type_from_json_name(it.value(), where, true)));
    }
  }
}

void ggml_scheme_keys_to_json(const SchemeSpec& s, nlohmann::json& j) {
  if (s.quantize_embedding) j["quantize_embedding"] = true;  // absent: false (other records unchanged)
  if (!s.tensor_types.empty()) {
    nlohmann::json t = nlohmann::json::object();
    for (const auto& [pattern, type] : s.tensor_types) t[pattern] = lower(type);
    j["tensor_types"] = t;
  }
}

void validate_ggml_scheme(const SchemeSpec& s, const std::string& source) {
  const bool ggml = s.weights.kind == QuantKind::ggml;
  QEVAL_CHECK(s.input_activations.kind != QuantKind::ggml && s.output_activations.kind != QuantKind::ggml,
              "{}: kind ggml is for weights only (llama.cpp's activation blocks are the weights' \"activations\": "
              "\"gguf-q8\")", source);
  QEVAL_CHECK(ggml || s.tensor_types.empty(), "{}: tensor_types needs weights of kind ggml, found weights kind {}",
              source, to_string(s.weights.kind));
  QEVAL_CHECK(ggml || !s.quantize_embedding, "{}: quantize_embedding needs weights of kind ggml, found weights kind {}",
              source, to_string(s.weights.kind));
  if (!ggml) return;
  QEVAL_CHECK(s.weights.ggml_type.empty() != s.weights.ggml_file_type.empty(),
              "{}: weights of kind ggml need exactly one of type and file_type", source);
  if (!s.weights.ggml_type.empty()) ggml_type_from_json_name(s.weights.ggml_type, source + ": weights.type", false);
  if (!s.weights.ggml_file_type.empty()) {
    const auto& names = ggml_file_type_names();
    QEVAL_CHECK(std::find(names.begin(), names.end(), s.weights.ggml_file_type) != names.end(),
                "{}: unknown weights.file_type '{}'; valid: {}", source, s.weights.ggml_file_type,
                fmt::join(names, ", "));
  }
  QEVAL_CHECK(!s.input_activations.enabled() && !s.output_activations.enabled(),
              "{}: weights of kind ggml run with full-precision activations; found input_activations {} and "
              "output_activations {}", source, to_string(s.input_activations.kind), to_string(s.output_activations.kind));
  QEVAL_CHECK(!s.keep_tokens.enabled() && !s.outlier_threshold,
              "{}: keep_tokens and outlier_threshold need activation quantisation, which kind ggml does not do", source);
}

bool selects_embedding(const SchemeSpec& s) {
  if (!s.quantize_embedding || s.weights.kind != QuantKind::ggml) return false;
  const std::string name = "token_embedding";
  if (!s.include.empty() &&
      std::none_of(s.include.begin(), s.include.end(), [&](const std::string& p) { return glob_match(p, name); }))
    return false;
  return std::none_of(s.exclude.begin(), s.exclude.end(), [&](const std::string& p) { return glob_match(p, name); });
}

GgufTensorRef gguf_tensor_of(const std::string& name, bool tied_embeddings) {
  if (name == "lm_head") return {tied_embeddings ? "token_embd.weight" : "output.weight", -1};
  if (name == "token_embedding") return {"token_embd.weight", -1};
  const std::int64_t layer = layer_of(name);
  QEVAL_CHECK(layer >= 0, "gguf_tensor_of: {} is not a tensor of a block, the head or the embedding", name);
  const std::string kind = name.substr(name.find('.', 7) + 1);  // after "layers.<i>."
  static const std::map<std::string, std::string> dense = {
      {"attn.q", "attn_q"},         {"attn.k", "attn_k"},           {"attn.v", "attn_v"},
      {"attn.o", "attn_output"},    {"attn.qkv", "attn_qkv"},       {"mlp.gate", "ffn_gate"},
      {"mlp.up", "ffn_up"},         {"mlp.gate_up", "ffn_up"},      {"mlp.down", "ffn_down"},
      {"moe.shared.gate", "ffn_gate_shexp"}, {"moe.shared.up", "ffn_up_shexp"}, {"moe.shared.down", "ffn_down_shexp"},
      {"mamba.in_proj", "ssm_in"},  {"mamba.x_proj", "ssm_x"},      {"mamba.dt_proj", "ssm_dt"},
      {"mamba.out_proj", "ssm_out"}};
  const std::string blk = fmt::format("blk.{}.", layer);
  if (const auto it = dense.find(kind); it != dense.end()) return {blk + it->second + ".weight", -1};
  if (kind.rfind("moe.experts.", 0) == 0) {  // moe.experts.<e>.<part>
    const std::size_t dot = kind.find('.', 12);
    const std::int64_t e = std::stoll(kind.substr(12, dot - 12));
    return {blk + "ffn_" + kind.substr(dot + 1) + "_exps.weight", e};
  }
  fail("gguf_tensor_of: no llama.cpp tensor name known for {}", name);
}

GgmlTypePlan::GgmlTypePlan(const SchemeSpec& spec, const std::vector<std::string>& linear_names,
                           const ModelConfig& config)
    : scheme_(spec.name),
      weights_(spec.weights),
      n_layers_(config.n_layers),
      n_gqa_(config.n_kv_heads > 0 ? config.n_heads / config.n_kv_heads : 1),
      n_experts_(config.moe_experts),
      tied_(config.tied_embeddings),
      has_imatrix_(!spec.weights.ggml_imatrix.empty()) {
  std::vector<std::string> tensors = {"token_embedding"};
  tensors.insert(tensors.end(), linear_names.begin(), linear_names.end());
  for (const auto& [pattern, type_name] : spec.tensor_types) {
    const GgmlType t = ggml_type_from_json_name(type_name, "tensor_types['" + pattern + "']", true);
    std::vector<std::string> matched;
    bool selected = false;  // an override of tensors the scheme keeps in full precision would change nothing
    for (const std::string& n : tensors) {
      if (!glob_match(pattern, n)) continue;
      matched.push_back(n);
      selected = selected || (n == "token_embedding" ? selects_embedding(spec) : spec.selects(n));
    }
    QEVAL_CHECK(!matched.empty(), "scheme {}: tensor_types pattern '{}' matches no tensor of this model; its tensors are: {}",
                spec.name, pattern, fmt::join(tensors, ", "));
    QEVAL_CHECK(selected,
                "scheme {}: tensor_types pattern '{}' matches only tensors the scheme does not quantise ({}): its "
                "include/exclude, quantize_lm_head or quantize_embedding keep them in full precision, so the "
                "override would change nothing",
                spec.name, pattern, fmt::join(matched, ", "));
    overrides_.emplace_back(pattern, t);
  }
  // llama.cpp counts attn_v-like tensors (n_attention_wv: all of them, in file order, layers
  // ascending) and numbers those its rules see (i_attention_wv; an overridden tensor is not seen);
  // ffn_down likewise (i_ffn_down, with n_ffn_down = the number of layers).
  int i_v = 0, i_down = 0;
  for (const std::string& name : linear_names) {
    const Category c = category_of(name);
    if (attn_v_like(c)) {
      ++n_attn_v_;
      if (!override_of(name)) attn_v_index_[name] = i_v++;
    }
    if (c == Category::ffn_down && !override_of(name)) ffn_down_index_[name] = i_down++;
  }
}

std::optional<std::string> GgmlTypePlan::override_of(const std::string& name) const {
  std::optional<std::string> found;
  for (const auto& [pattern, type] : overrides_) {
    if (!glob_match(pattern, name)) continue;
    QEVAL_CHECK(!found, "scheme {}: tensor_types: tensor {} matches two patterns, '{}' and '{}'; make them disjoint",
                scheme_, name, *found, pattern);
    found = pattern;
  }
  return found;
}

GgmlTensorChoice GgmlTypePlan::choose(const std::string& name, std::int64_t nx) const {
  GgmlTensorChoice c;
  auto forced = [&](GgmlType t, const std::string& what) {
    const std::int64_t block = ggml_block_elements(t);
    QEVAL_CHECK(nx % block == 0,
                "scheme {}: {}: {} forces {} on tensor {}, whose rows are {} values long (its input width), not a "
                "multiple of {}'s block of {}", scheme_, what, ggml_type_label(t), ggml_type_label(t), name, nx,
                ggml_type_label(t), block);
    c.type = t;
    c.rule = what;
    return c;
  };
  if (const auto pattern = override_of(name)) {
    for (const auto& [p, t] : overrides_)
      if (p == *pattern) return forced(t, fmt::format("tensor_types '{}'", p));
  }
  if (!weights_.ggml_type.empty())
    return forced(ggml_type_from_json_name(weights_.ggml_type, "weights.type", false), "weights type");

  const FileType ft = file_type_from_name(weights_.ggml_file_type);
  const Category cat = category_of(name);
  GgmlType t = default_type(ft);
  std::string rule = fmt::format("file type {}: default {}", weights_.ggml_file_type, ggml_type_label(t));
  const bool k_quant_m = ft == FileType::q4_k_m || ft == FileType::q5_k_m;
  if (cat == Category::output || (tied_ && cat == Category::token_embd)) {
    const std::string what = cat == Category::output ? "output" : "tied token embedding (output rule)";
    if (ft == FileType::mxfp4_moe) {
      t = GgmlType::Q8_0, rule += "; " + what + " of MXFP4_MOE: Q8_0";
    } else if (nx % ggml_block_elements(t) != 0) {
      t = GgmlType::Q8_0, rule += "; " + what + ", row length not a multiple of the default's block: Q8_0";
    } else if (t != GgmlType::Q8_0) {
      t = GgmlType::Q6_K, rule += "; " + what + ": Q6_K";
    }
  } else if (ft == FileType::mxfp4_moe) {
    t = is_routed_expert(name) ? GgmlType::MXFP4 : GgmlType::Q8_0;
    rule += is_routed_expert(name) ? "; routed expert: MXFP4" : "; not an expert tensor: Q8_0";
  } else if (cat == Category::token_embd) {
    rule += "; untied token embedding: the default";
  } else if (attn_v_like(cat)) {
    const int i = attn_v_index_.at(name);
    if (ft == FileType::iq4_nl && n_gqa_ >= 4) {
      t = GgmlType::Q5_K, rule += fmt::format("; attn_v with GQA ratio {} >= 4: Q5_K", n_gqa_);
    } else if (k_quant_m && use_more_bits(i, n_attn_v_)) {
      t = GgmlType::Q6_K, rule += fmt::format("; attn_v use_more_bits ({} of {}): Q6_K", i, n_attn_v_);
    } else if (ft == FileType::q4_k_s && i < 4) {
      t = GgmlType::Q5_K, rule += fmt::format("; attn_v among the first four ({}): Q5_K", i);
    }
    if (n_experts_ == 8) t = GgmlType::Q8_0, rule += "; attn_v of an 8-expert model: Q8_0";
  } else if (cat == Category::attn_k) {
    if (n_experts_ == 8) t = GgmlType::Q8_0, rule += "; attn_k of an 8-expert model: Q8_0";
  } else if (cat == Category::ffn_down) {
    // llama.cpp's layer_info: with experts the layer from the name, else its counter.
    const int i = n_experts_ > 1 ? static_cast<int>(layer_of(name)) : ffn_down_index_.at(name);
    const int n = static_cast<int>(n_layers_);
    if (ft == FileType::q4_k_m) {
      if (use_more_bits(i, n)) t = GgmlType::Q6_K, rule += fmt::format("; ffn_down use_more_bits ({} of {}): Q6_K", i, n);
    } else if (i < n / 8 && ft == FileType::iq4_nl && !has_imatrix_) {
      t = GgmlType::Q5_K, rule += fmt::format("; ffn_down in the first eighth ({} of {}), no imatrix: Q5_K", i, n);
    } else if (ft == FileType::q5_k_m && use_more_bits(i, n)) {
      t = GgmlType::Q6_K, rule += fmt::format("; ffn_down use_more_bits ({} of {}): Q6_K", i, n);
    } else if (ft == FileType::q4_k_s && i < n / 8) {
      t = GgmlType::Q5_K, rule += fmt::format("; ffn_down in the first eighth ({} of {}): Q5_K", i, n);
    } else if (ft == FileType::q4_0 && has_imatrix_ && i < n / 8) {
      // llama.cpp: "Guard against craziness in the first few ffn_down layers ... with imatrix".
      t = GgmlType::Q4_1, rule += fmt::format("; ffn_down in the first eighth ({} of {}) with an imatrix: Q4_1", i, n);
    }
  } else if (cat == Category::attn_output) {
    if (n_experts_ == 8 && (ft == FileType::iq4_nl || ft == FileType::q4_k_s || ft == FileType::q4_k_m))
      t = GgmlType::Q5_K, rule += "; attn_output of an 8-expert model: Q5_K";
  }
  c.type = fallback(t, nx, rule);
  c.rule = rule;
  return c;
}

}  // namespace qeval
