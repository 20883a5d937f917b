// GGUF "llama", "qwen2", "qwen3" and "gemma3" models mapped onto ModelConfig + ModelWeights. F32/F16/BF16 tensors and the
// block types Q4_0 ... Q6_K (quant/formats/ggml/blocks.h) are read as float32; for a quantised file the notes
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
#include "common/files.h"
#include "common/json_integer.h"
#include "model/config_validation.h"
#include "loaders/checkpoints/checkpoint.h"
#include "loaders/checkpoints/checkpoint_internal.h"
#include "loaders/checkpoints/gguf.h"
#include "quant/formats/ggml/blocks.h"
#include "loaders/checkpoints/model_reader_internal.h"
#include "loaders/checkpoints/gguf_config.h"
#include "loaders/checkpoints/weights_hash.h"

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
    check(name, shape);
    if (header_only_) {
      QEVAL_CHECK(ggml_type_dequantizable(f_.tensor(name).type),
                  "{}: tensor {} has type {} (ggml type {}), which qeval cannot read; supported GGUF tensor types: {}", file_,
                  name, ggml_type_name(f_.tensor(name).type), f_.tensor(name).type, ggml_dequantizable_types());
      return at::empty(shape, at::TensorOptions().dtype(at::kFloat).device(at::kMeta));
    }
    return f_.read_float32(name);
  }
  // Rows [begin, begin + count) of a tensor whose whole shape must be `shape`.
  at::Tensor take_rows(const std::string& name, const std::vector<std::int64_t>& shape, std::int64_t begin,
                       std::int64_t count) {
    if (header_only_) {
      take(name, shape);
      std::vector<std::int64_t> rows = shape;
      rows[0] = count;
      return at::empty(rows, at::TensorOptions().dtype(at::kFloat).device(at::kMeta));
    }
    check(name, shape);
    return f_.read_float32_rows(name, begin, count);
  }
  void set_header_only(bool on) { header_only_ = on; }
  std::vector<std::string> unused() const {
    std::vector<std::string> out;
    for (const auto& t : f_.tensors())
      if (!used_.count(t.name)) out.push_back(t.name);
    return out;
  }

 private:
  void check(const std::string& name, const std::vector<std::int64_t>& shape) {
    const GgufTensorInfo& t = f_.tensor(name);
    QEVAL_CHECK(t.shape() == shape, "{}: tensor {} has shape {} (ne {}), expected {}", file_, name,
                shape_string(t.shape()), shape_string(std::vector<std::int64_t>(t.ne.begin(), t.ne.end())),
                shape_string(shape));
    used_.insert(name);
  }

  const GgufFile& f_;
  std::string file_;
  std::set<std::string> used_;
  bool header_only_ = false;
};

// block_count comes from the header and is not bounded by the validator before the per-layer walks
// below (a fuzzed header asked for 4e8 layers: 1.6 GB of per-layer kinds before any check). Every
// layer has tensors of its own in the table, so a count beyond the table's size is not a model.
void check_layer_count(const GgufFile& f, const std::string& arch, std::int64_t n_layers) {
  QEVAL_CHECK(n_layers >= 1 && n_layers <= static_cast<std::int64_t>(f.tensors().size()),
              "{}: {}.block_count is {}, but the file holds {} tensors: expected between 1 and that many layers (each "
              "layer has tensors of its own)",
              f.path().string(), arch, n_layers, f.tensors().size());
}

// Layers with routed experts are those with a router tensor (llama.cpp: ffn_gate_inp): Mixtral
// ("llama" with llama.expert_count), Qwen2-MoE (+ a shared expert with its sigmoid gate), Qwen3-MoE,
// Jamba. The router's top-k weights are renormalised as llama.cpp's build_moe_ffn is told per
// architecture (norm_w): llama and qwen3moe yes, qwen2moe and jamba no.
// `names`: the metadata keys of the fields read here, for the validator's refusals.
void gguf_experts(const GgufFile& f, GgufModelReader& r, const std::string& arch, ModelConfig& c, json& notes,
                  ConfigSource& names) {
  const std::string p = arch + ".";
  names.name(ConfigField::moe_experts, p + "expert_count");
  names.name(ConfigField::moe_top_k, p + "expert_used_count");
  names.name(ConfigField::moe_d_ff, p + "expert_feed_forward_length");
  names.name(ConfigField::moe_shared_d_ff, p + "expert_shared_feed_forward_length");
  check_layer_count(f, arch, c.n_layers);
  std::vector<FfnKind> ffns;
  for (std::int64_t i = 0; i < c.n_layers; ++i)
    ffns.push_back(f.has_tensor(fmt::format("blk.{}.ffn_gate_inp.weight", i)) ? FfnKind::moe : FfnKind::dense);
  if (std::none_of(ffns.begin(), ffns.end(), [](FfnKind k) { return k == FfnKind::moe; })) {
    QEVAL_CHECK(!f.has_tensor("blk.0.ffn_gate.0.weight"),
                "{}: experts stored one tensor per expert (blk.N.ffn_gate.E.weight, an old GGUF layout) are not "
                "supported; expected merged ffn_gate_exps / ffn_up_exps / ffn_down_exps",
                f.path().string());
    return;
  }
  c.layer_ffns = ffns;
  c.moe_experts = r.integer(p + "expert_count");
  c.moe_top_k = r.integer(p + "expert_used_count");
  c.moe_d_ff = r.integer(p + "expert_feed_forward_length", c.d_ff);
  c.moe_router_norm = arch == "qwen2moe" || arch == "jamba" ? RouterNorm::topk : RouterNorm::topk_renormalized;
  c.moe_shared_d_ff = r.integer(p + "expert_shared_feed_forward_length", 0);
  c.moe_shared_gate = c.moe_shared_d_ff > 0 && f.has_tensor("blk.0.ffn_gate_inp_shexp.weight");
  notes["router"] = c.moe_router_norm == RouterNorm::topk
                        ? "softmax over the experts, top expert_used_count, not renormalised (llama.cpp norm_w false)"
                        : "softmax over the experts, top expert_used_count, renormalised (llama.cpp norm_w true)";
}

// Mamba, Mamba-2 and Jamba: the ssm.* metadata; Jamba's attention layers are those with attn_q.
LoadedCheckpoint gguf_ssm_model_info(const GgufFile& f, GgufModelReader& r, const std::string& arch) {
  const std::string file = f.path().string(), p = arch + ".";
  LoadedCheckpoint out;
  ModelConfig& c = out.config;
  ConfigSource names(file, "metadata {}");  // refusals name the metadata keys
  for (auto [field, key] : {std::pair{ConfigField::ssm_d_inner, "ssm.inner_size"}, std::pair{ConfigField::ssm_d_state, "ssm.state_size"},
                            std::pair{ConfigField::ssm_d_conv, "ssm.conv_kernel"}, std::pair{ConfigField::ssm_heads, "ssm.time_step_rank"},
                            std::pair{ConfigField::ssm_groups, "ssm.group_count"}})
    names.name(field, p + key);
  c.architecture = arch;
  c.d_model = r.integer(p + "embedding_length");
  c.n_layers = r.integer(p + "block_count");
  c.norm = NormKind::rmsnorm;
  c.norm_eps = r.real(p + "attention.layer_norm_rms_epsilon");
  c.position = PositionKind::none;
  c.mlp = MlpKind::swiglu;
  c.ssm_d_inner = r.integer(p + "ssm.inner_size");
  c.ssm_d_state = r.integer(p + "ssm.state_size");
  c.ssm_d_conv = r.integer(p + "ssm.conv_kernel");
  QEVAL_CHECK(!(f.has(p + "ssm.dt_b_c_rms") && f.metadata()[p + "ssm.dt_b_c_rms"] == true),
              "{}: {}ssm.dt_b_c_rms true (Falcon-Mamba's unweighted RMSNorm of dt, B and C) is not supported", file, p);
  c.ssm_conv_bias = f.has_tensor("blk.0.ssm_conv1d.bias");
  c.ssm_proj_bias = f.has_tensor("blk.0.ssm_in.bias");
  const MixerKind ssm = arch == "mamba2" ? MixerKind::mamba2 : MixerKind::mamba;
  if (ssm == MixerKind::mamba2) {
    c.ssm_heads = r.integer(p + "ssm.time_step_rank");  // llama.cpp stores the head count there
    c.ssm_groups = r.integer(p + "ssm.group_count", 1);
    c.ssm_norm_groups = c.ssm_groups;  // llama.cpp normalises per group, as mamba_ssm does
    out.notes["gated_norm"] = "per group of d_inner / ssm.group_count channels (llama.cpp, mamba_ssm)";
  } else {
    c.ssm_dt_rank = r.integer(p + "ssm.time_step_rank");
    c.ssm_bcdt_norm = arch == "jamba";
  }
  check_layer_count(f, arch, c.n_layers);
  for (std::int64_t i = 0; i < c.n_layers; ++i)
    c.layer_mixers.push_back(arch == "jamba" && f.has_tensor(fmt::format("blk.{}.attn_q.weight", i)) ? MixerKind::attention
                                                                                                   : ssm);
  if (arch == "jamba") {
    const auto it = std::find(c.layer_mixers.begin(), c.layer_mixers.end(), MixerKind::attention);
    QEVAL_CHECK(it != c.layer_mixers.end(), "{}: a jamba file without attention layers (no blk.N.attn_q.weight)", file);
    const auto first = static_cast<std::int64_t>(it - c.layer_mixers.begin());
    c.n_heads = r.integer(p + "attention.head_count");
    const std::string kv_name = fmt::format("blk.{}.attn_k.weight", first);
    c.n_kv_heads = f.tensor(kv_name).shape().at(0) / (c.d_model / std::max<std::int64_t>(c.n_heads, 1));
    c.d_ff = r.integer(p + "feed_forward_length", 0);
    if (c.d_ff == 0 && f.has_tensor(fmt::format("blk.{}.ffn_gate.weight", first)))
      c.d_ff = f.tensor(fmt::format("blk.{}.ffn_gate.weight", first)).shape().at(0);
    gguf_experts(f, r, arch, c, out.notes, names);
    if (c.layer_ffns.empty()) c.layer_ffns.assign(static_cast<std::size_t>(c.n_layers), FfnKind::dense);
  } else {
    c.layer_ffns.assign(static_cast<std::size_t>(c.n_layers), FfnKind::none);
  }
  QEVAL_CHECK(f.has_tensor("token_embd.weight"), "{}: missing tensor token_embd.weight", file);
  c.vocab_size = r.integer(p + "vocab_size", f.tensor("token_embd.weight").shape().at(0));
  c.tied_embeddings = !f.has_tensor("output.weight");
  for (auto [key, id] : {std::pair{"tokenizer.ggml.bos_token_id", &c.bos_id}, std::pair{"tokenizer.ggml.eos_token_id", &c.eos_id}})
    if (f.has(key) && r.integer(key) < c.vocab_size) *id = r.integer(key);
  c.validate(names);
  out.format = "gguf";
  out.path = f.path();
  out.notes["gguf_version"] = f.version();
  out.notes["alignment"] = f.alignment();
  if (f.has("general.name") && f.metadata()["general.name"].is_string()) out.notes["general.name"] = f.metadata()["general.name"];
  out.notes["ssm_A"] = "ssm_a holds A = -exp(A_log) as llama.cpp's converter writes it";
  return out;
}

// config and notes from the metadata (weights left empty).
LoadedCheckpoint gguf_model_info(const GgufFile& f, GgufModelReader& r) {
  const fs::path& path = f.path();
  const std::string file = path.string();
  QEVAL_CHECK(f.has("general.architecture") && f.metadata()["general.architecture"].is_string(),
              "{}: missing string metadata general.architecture", file);
  const std::string arch = f.metadata()["general.architecture"].get<std::string>();
  const std::string p = arch + ".";
  const bool gemma3 = arch == "gemma3";
  if (arch == "mamba" || arch == "mamba2" || arch == "jamba") return gguf_ssm_model_info(f, r, arch);

  LoadedCheckpoint out;
  out.config = gguf_model_config(f);  // gguf_config.cpp: metadata through the one validator
  ModelConfig& c = out.config;
  ConfigSource names(file, "metadata {}");
  gguf_experts(f, r, arch, c, out.notes, names);
  if (!c.layer_ffns.empty()) c.validate(names);  // the layer pattern the experts gave

  if (gemma3) {
    out.notes["norm_gains"] = "stored with Gemma's +1 already added by llama.cpp's converter: applied as they are";
    out.notes["attention_windows"] = c.attention_windows;
  }

  out.format = "gguf";
  out.path = path;
  out.notes["gguf_version"] = f.version();
  out.notes["alignment"] = f.alignment();
  if (f.has("general.name") && f.metadata()["general.name"].is_string()) out.notes["general.name"] = f.metadata()["general.name"];
  out.notes["context_length"] = c.max_seq_len;
  out.notes["positions"] = fmt::format(
      "rope: {}context_length {} is recorded as max_seq_len, not a limit on evaluation windows", p, c.max_seq_len);
  out.notes["rope_pairing"] = arch == "llama" ? "interleaved (GGUF llama layout, as llama.cpp applies it)"
                                              : "half (llama.cpp's NEOX rope for this architecture; q/k stored unpermuted)";
  return out;
}

// The tensor types, and for a quantised file which types were dequantised. After the layout
// check: by then every tensor has been matched to a part, so every type is one qeval reads.
void add_tensor_type_notes(const GgufFile& f, json& notes) {
  json types = json::object();
  for (const auto& t : f.tensors()) types[ggml_type_name(t.type)] = types.value(ggml_type_name(t.type), 0) + 1;
  notes["tensor_types"] = types;
  const bool quantised = std::any_of(f.tensors().begin(), f.tensors().end(), [](const GgufTensorInfo& t) {
    return ggml_block_size(t.type).elements > 1;  // every tensor was read above, so every type is known
  });
  if (quantised) {
    notes["dequantized_from"] = types;
    notes["full_precision"] =
        "weights dequantised to float32 from the GGUF block types in dequantized_from (bit-identical to llama.cpp's "
        "gguf.quants.dequantize): full precision for this model means its dequantised weights, not the original "
        "unquantised model";
  }
}

// A GGUF file read by parts (blocks dequantise per layer, the embedding and head by rows).
class GgufReader final : public ModelReader {
 public:
  explicit GgufReader(const fs::path& path) : ModelReader(LoadedCheckpoint{}), f_(path), r_(f_) {
    info_ = gguf_model_info(f_, r_);
    weight_files_ = {path};
    hashes_ = std::make_shared<TensorHashes>();
    f_.hash_reads_into(hashes_);  // the weights hash comes from the reads
    const std::string file = path.string();
    r_.set_header_only(true);
    measure_parts(*this, sizes_, file);
    r_.set_header_only(false);
    for (const auto& name : r_.unused())
      fail("{}: unexpected tensor {} ({}) for a {} model; it would be ignored, so the model would be wrong", file, name,
           ggml_type_name(f_.tensor(name).type), info_.config.architecture);
    add_tensor_type_notes(f_, info_.notes);
    for (const auto& t : f_.tensors()) sizes_.stored += static_cast<std::int64_t>(t.bytes);
    const std::string file_name = path.filename().string();
    for (const auto& t : f_.tensors()) tensors_.push_back({t.name, ggml_type_name(t.type), t.shape(), file_name, static_cast<std::int64_t>(t.bytes)});
    bytes_on_disk_ = qeval::file_size(path);
  }

  at::Tensor position_embedding() override { return at::Tensor(); }
  BlockWeights block(std::int64_t i) override {
    const ModelConfig& c = config();
    const std::int64_t D = c.d_model, F = c.d_ff, hd = c.head_dim();
    const std::string b = fmt::format("blk.{}.", i);
    BlockWeights blk;
    blk.attn_norm.weight = r_.take(b + "attn_norm.weight", {D});
    if (c.mixer(i) == MixerKind::attention) {
      blk.q.weight = r_.take(b + "attn_q.weight", {c.n_heads * hd, D});
      blk.k.weight = r_.take(b + "attn_k.weight", {c.n_kv_heads * hd, D});
      blk.v.weight = r_.take(b + "attn_v.weight", {c.n_kv_heads * hd, D});
      if (c.qkv_bias) {
        blk.q.bias = r_.take(b + "attn_q.bias", {c.n_heads * hd});
        blk.k.bias = r_.take(b + "attn_k.bias", {c.n_kv_heads * hd});
        blk.v.bias = r_.take(b + "attn_v.bias", {c.n_kv_heads * hd});
      }
      blk.o.weight = r_.take(b + "attn_output.weight", {D, c.n_heads * hd});
      if (c.qk_norm) {
        blk.q_norm.weight = r_.take(b + "attn_q_norm.weight", {hd});
        blk.k_norm.weight = r_.take(b + "attn_k_norm.weight", {hd});
      }
    } else {
      blk.ssm = ssm_block(b, c.mixer(i));
    }
    if (c.sandwich_norms) {
      blk.post_attn_norm.weight = r_.take(b + "post_attention_norm.weight", {D});
      blk.post_mlp_norm.weight = r_.take(b + "post_ffw_norm.weight", {D});
    }
    if (c.ffn(i) == FfnKind::none) return blk;
    blk.mlp_norm.weight = r_.take(b + "ffn_norm.weight", {D});
    if (c.ffn(i) == FfnKind::moe) {
      blk.moe = experts(b);
      return blk;
    }
    blk.gate.weight = r_.take(b + "ffn_gate.weight", {F, D});
    blk.up.weight = r_.take(b + "ffn_up.weight", {F, D});
    blk.down.weight = r_.take(b + "ffn_down.weight", {D, F});
    return blk;
  }
  NormWeights final_norm() override { return {r_.take("output_norm.weight", {config().d_model}), at::Tensor()}; }
  at::Tensor lm_head_rows(std::int64_t begin, std::int64_t count) override {
    const ModelConfig& c = config();
    return r_.take_rows(c.tied_embeddings ? "token_embd.weight" : "output.weight", {c.vocab_size, c.d_model}, begin, count);
  }

 private:
  at::Tensor token_embedding_block(std::int64_t begin, std::int64_t count) override {
    return r_.take_rows("token_embd.weight", {config().vocab_size, config().d_model}, begin, count);
  }

  // The merged expert tensors [E, F, D] / [E, D, F], split by expert (views of one read).
  MoeWeights experts(const std::string& b) {
    const ModelConfig& c = config();
    const std::int64_t D = c.d_model, F = c.expert_d_ff(), E = c.moe_experts, S = c.moe_shared_d_ff;
    MoeWeights w;
    w.router = r_.take(b + "ffn_gate_inp.weight", {E, D});
    const at::Tensor gate = r_.take(b + "ffn_gate_exps.weight", {E, F, D});
    const at::Tensor up = r_.take(b + "ffn_up_exps.weight", {E, F, D});
    const at::Tensor down = r_.take(b + "ffn_down_exps.weight", {E, D, F});
    for (std::int64_t e = 0; e < E; ++e) {
      MoeWeights::Expert ex;
      ex.gate.weight = gate[e];
      ex.up.weight = up[e];
      ex.down.weight = down[e];
      w.experts.push_back(std::move(ex));
    }
    if (S > 0) {
      w.shared.gate.weight = r_.take(b + "ffn_gate_shexp.weight", {S, D});
      w.shared.up.weight = r_.take(b + "ffn_up_shexp.weight", {S, D});
      w.shared.down.weight = r_.take(b + "ffn_down_shexp.weight", {D, S});
    }
    if (c.moe_shared_gate) w.shared_gate = r_.take(b + "ffn_gate_inp_shexp.weight", {D}).reshape({1, D});
    return w;
  }

  // llama.cpp's state-space tensors: ssm_conv1d [C, K], ssm_a = A (already −exp(A_log)); Mamba-2's
  // A and D as [H, 1] and its gated norm's gains as [G, d_inner / G].
  SsmWeights ssm_block(const std::string& b, MixerKind kind) {
    const ModelConfig& c = config();
    const std::int64_t D = c.d_model, E = c.ssm_d_inner, N = c.ssm_d_state, conv = c.ssm_conv_dim(kind);
    SsmWeights w;
    w.conv_weight = r_.take(b + "ssm_conv1d.weight", {conv, c.ssm_d_conv});
    if (c.ssm_conv_bias) w.conv_bias = r_.take(b + "ssm_conv1d.bias", {conv});
    w.out_proj.weight = r_.take(b + "ssm_out.weight", {D, E});
    if (c.ssm_proj_bias) w.out_proj.bias = r_.take(b + "ssm_out.bias", {D});
    if (kind == MixerKind::mamba2) {
      const std::int64_t H = c.ssm_heads, G = c.ssm_groups;
      w.in_proj.weight = r_.take(b + "ssm_in.weight", {E + conv + H, D});
      if (c.ssm_proj_bias) w.in_proj.bias = r_.take(b + "ssm_in.bias", {E + conv + H});
      w.dt_bias = r_.take(b + "ssm_dt.bias", {H});
      w.A = r_.take(b + "ssm_a", {H, 1}).reshape({H});
      w.D = r_.take(b + "ssm_d", {H, 1}).reshape({H});
      w.norm.weight = r_.take(b + "ssm_norm.weight", {G, E / G}).reshape({E});
      return w;
    }
    const std::int64_t R = c.ssm_dt_rank;
    w.in_proj.weight = r_.take(b + "ssm_in.weight", {2 * E, D});
    if (c.ssm_proj_bias) w.in_proj.bias = r_.take(b + "ssm_in.bias", {2 * E});
    w.x_proj.weight = r_.take(b + "ssm_x.weight", {R + 2 * N, E});
    w.dt_proj.weight = r_.take(b + "ssm_dt.weight", {E, R});
    w.dt_proj.bias = r_.take(b + "ssm_dt.bias", {E});
    w.A = r_.take(b + "ssm_a", {E, N});
    w.D = r_.take(b + "ssm_d", {E});
    if (c.ssm_bcdt_norm) {
      w.dt_norm.weight = r_.take(b + "ssm_dt_norm.weight", {R});
      w.b_norm.weight = r_.take(b + "ssm_b_norm.weight", {N});
      w.c_norm.weight = r_.take(b + "ssm_c_norm.weight", {N});
    }
    return w;
  }

  GgufFile f_;
  GgufModelReader r_;
};

}  // namespace

std::unique_ptr<ModelReader> open_gguf_checkpoint(const fs::path& path) { return std::make_unique<GgufReader>(path); }

LoadedCheckpoint load_gguf_checkpoint(const fs::path& path) { return open_gguf_checkpoint(path)->read_all(); }

}  // namespace qeval
