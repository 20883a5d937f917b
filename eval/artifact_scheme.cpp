#include "eval/artifact_scheme.h"

#include <ATen/Parallel.h>
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstring>
#include <optional>

#include "common/error.h"
#include "common/json_diff.h"
#include "common/phases.h"
#include "model/block.h"
#include "quant/schemes/scheme_json.h"

namespace qeval {
namespace {

// Rows of the embedding and the head read at a time after the run (a 8B model's are never held whole).
constexpr std::int64_t kRowsPerStep = 1024;

const at::Tensor* find_tensor(const std::vector<std::pair<std::string, at::Tensor>>& tensors, const std::string& name) {
  for (const auto& [n, t] : tensors)
    if (n == name) return &t;
  return nullptr;
}

// A [rows, cols] float32 CPU copy (or the tensor itself when it is one).
at::Tensor float_rows(const at::Tensor& t) {
  const at::Tensor x = t.reshape({t.dim() == 0 ? 1 : t.size(0), -1});
  return x.to(at::kCPU, at::kFloat).contiguous();
}

// Per-column factors of a [rows, cols] tensor as a float32 CPU vector (null pointer: none).
struct ColumnScale {
  at::Tensor values;
  const float* get() const { return values.defined() ? values.data_ptr<float>() : nullptr; }
};
ColumnScale column_scale(const at::Tensor& gains) {
  return {gains.defined() ? gains.to(at::kCPU, at::kFloat).contiguous() : at::Tensor()};
}

// Rows at a time for the float64 sums: partial sums per chunk of rows, added in chunk order, so
// that the value does not depend on the thread count.
constexpr std::int64_t kRowsPerChunk = 64;

struct ErrorSums {
  double diff2 = 0, ref2 = 0, max_abs = 0;
};

// Σ (a·ca − p·cp)², Σ (p·cp)² and max |a·ca − p·cp| in float64 over two [rows, cols] float32
// tensors, ca and cp per-column factors (null: 1). One pass, rows in parallel.
ErrorSums error_sums(const at::Tensor& a, const at::Tensor& p, const float* ca, const float* cp) {
  const std::int64_t rows = a.size(0), cols = a.size(1);
  const float *pa = a.data_ptr<float>(), *pp = p.data_ptr<float>();
  const std::int64_t chunks = (rows + kRowsPerChunk - 1) / kRowsPerChunk;
  std::vector<ErrorSums> partial(static_cast<std::size_t>(chunks));
  at::parallel_for(0, chunks, 1, [&](std::int64_t c0, std::int64_t c1) {
    for (std::int64_t c = c0; c < c1; ++c) {
      ErrorSums e;
      for (std::int64_t r = c * kRowsPerChunk; r < std::min(rows, (c + 1) * kRowsPerChunk); ++r) {
        const float *ra = pa + r * cols, *rp = pp + r * cols;
        for (std::int64_t k = 0; k < cols; ++k) {
          const double x = ca ? static_cast<double>(ra[k]) * ca[k] : ra[k];
          const double y = cp ? static_cast<double>(rp[k]) * cp[k] : rp[k];
          const double d = x - y;
          e.diff2 += d * d;
          e.ref2 += y * y;
          e.max_abs = std::max(e.max_abs, std::abs(d));
        }
      }
      partial[static_cast<std::size_t>(c)] = e;
    }
  });
  ErrorSums total;
  for (const ErrorSums& e : partial) {
    total.diff2 += e.diff2;
    total.ref2 += e.ref2;
    total.max_abs = std::max(total.max_abs, e.max_abs);
  }
  return total;
}

double relative(double diff2, double ref2) { return ref2 > 0 ? std::sqrt(diff2 / ref2) : (diff2 > 0 ? INFINITY : 0.0); }

// ‖a·diag(ga) − p·diag(gp)‖_F / ‖p·diag(gp)‖_F and max |…| in float64 (ga, gp undefined: 1).
WeightError tensor_error(const std::string& name, const std::string& basis, const at::Tensor& a, const at::Tensor& p,
                         const at::Tensor& ga = {}, const at::Tensor& gp = {}) {
  const ColumnScale sa = column_scale(ga), sp = column_scale(gp);
  const ErrorSums e = error_sums(float_rows(a), float_rows(p), sa.get(), sp.get());
  return WeightError{name, basis, relative(e.diff2, e.ref2), e.max_abs};
}

// Per row r: Σ_k (x[r, k]·cx[k]) (y[r, k]·cy[k]) in float64, rows in parallel.
std::vector<double> row_dots(const at::Tensor& x, const at::Tensor& y, const float* cx, const float* cy) {
  const std::int64_t rows = x.size(0), cols = x.size(1);
  const float *px = x.data_ptr<float>(), *py = y.data_ptr<float>();
  std::vector<double> out(static_cast<std::size_t>(rows));
  at::parallel_for(0, rows, kRowsPerChunk, [&](std::int64_t r0, std::int64_t r1) {
    for (std::int64_t r = r0; r < r1; ++r) {
      double sum = 0;
      for (std::int64_t k = 0; k < cols; ++k)
        sum += (cx ? static_cast<double>(px[r * cols + k]) * cx[k] : px[r * cols + k]) *
               (cy ? static_cast<double>(py[r * cols + k]) * cy[k] : py[r * cols + k]);
      out[static_cast<std::size_t>(r)] = sum;
    }
  });
  return out;
}

// The set {d_i u_iᵀ} (d_i: column i of down [D, F]; u_i: row i of up [F, D] times the norm's gains
// g): Σ_i ‖d_a,i u_a,iᵀ − d_p,i u_p,iᵀ‖² over Σ_i ‖d_p,i u_p,iᵀ‖², from row norms and dot products.
WeightError channel_product_error(const std::string& name, const at::Tensor& up_a, const at::Tensor& up_p,
                                  const at::Tensor& ga, const at::Tensor& gp, const at::Tensor& down_a,
                                  const at::Tensor& down_p) {
  const at::Tensor ua = float_rows(up_a), up = float_rows(up_p);
  const at::Tensor da = float_rows(down_a.t()), dp = float_rows(down_p.t());  // [F, D]
  const ColumnScale sa = column_scale(ga), sp = column_scale(gp);
  const std::vector<double> uaa = row_dots(ua, ua, sa.get(), sa.get()), upp = row_dots(up, up, sp.get(), sp.get()),
                            uap = row_dots(ua, up, sa.get(), sp.get());
  const std::vector<double> daa = row_dots(da, da, nullptr, nullptr), dpp = row_dots(dp, dp, nullptr, nullptr),
                            dap = row_dots(da, dp, nullptr, nullptr);
  double diff2 = 0, ref2 = 0;
  for (std::size_t i = 0; i < uaa.size(); ++i) {
    diff2 += daa[i] * uaa[i] + dpp[i] * upp[i] - 2 * dap[i] * uap[i];
    ref2 += dpp[i] * upp[i];
  }
  return WeightError{name, "product", ref2 > 0 ? std::sqrt(std::max(diff2, 0.0) / ref2) : 0.0, -1};
}

// Σ_h ‖O_a,h V_a,kv(h) − O_p,h V_p,kv(h)‖² over Σ_h ‖O_p,h V_p,kv(h)‖², with O_h the head's hd
// columns of o [D, H hd] and V_g the kv head's hd rows of v [Hkv hd, D], from hd × hd Gram
// matrices: ‖A B‖² = tr(AᵀA · B Bᵀ), ⟨A B, C E⟩ = tr(AᵀC · E Bᵀ).
WeightError head_product_error(const std::string& name, const at::Tensor& v_a, const at::Tensor& v_p,
                               const at::Tensor& o_a, const at::Tensor& o_p, std::int64_t heads, std::int64_t kv_heads) {
  const std::int64_t hd = o_a.size(1) / heads, group = heads / kv_heads;
  const at::Tensor va = v_a.to(at::kDouble), vp = v_p.to(va.device(), at::kDouble);
  const at::Tensor oa = o_a.to(at::kDouble), op = o_p.to(oa.device(), at::kDouble);
  double diff2 = 0, ref2 = 0;
  for (std::int64_t h = 0; h < heads; ++h) {
    const std::int64_t g = h / group;
    const at::Tensor Aa = oa.narrow(1, h * hd, hd), Ap = op.narrow(1, h * hd, hd);  // [D, hd]
    const at::Tensor Ba = va.narrow(0, g * hd, hd), Bp = vp.narrow(0, g * hd, hd);  // [hd, D]
    auto trace_of = [](const at::Tensor& x, const at::Tensor& y) { return (x * y.t()).sum().item<double>(); };
    const double aa = trace_of(Aa.t().mm(Aa), Ba.mm(Ba.t()));
    const double pp = trace_of(Ap.t().mm(Ap), Bp.mm(Bp.t()));
    const double ap = trace_of(Aa.t().mm(Ap), Bp.mm(Ba.t()));
    diff2 += aa + pp - 2 * ap;
    ref2 += pp;
  }
  WeightError e{name, "product", 0, -1};
  e.relative_frobenius = ref2 > 0 ? std::sqrt(std::max(diff2, 0.0) / ref2) : 0.0;
  return e;
}

bool same_tensor(const at::Tensor& a, const at::Tensor& b) {
  if (a.defined() != b.defined()) return false;
  return !a.defined() || (a.sizes() == b.sizes() && at::equal(a, b.to(a.device())));
}

// W · diag(g): the linear as it acts on the norm's unscaled output.
at::Tensor norm_folded(const at::Tensor& weight, const at::Tensor& gains) {
  return weight * gains.to(weight.device()).reshape({1, -1});
}

std::string stem(const std::filesystem::path& path) {
  std::filesystem::path p = path;
  if (p.filename().empty()) p = p.parent_path();  // "dir/"
  return std::filesystem::is_directory(p) ? p.filename().string() : p.stem().string();
}

std::string artifact_method(const ModelReader& reader) {
  const nlohmann::json& notes = reader.info().notes;
  if (notes.contains("quantization") && notes["quantization"].contains("method"))
    return notes["quantization"]["method"].get<std::string>();
  if (reader.info().format == "gguf") return "gguf";
  return "float";
}

// Stored tensor bytes over parameters (the model's float32 bytes / 4): what the download holds per
// weight, embeddings and norms included; nullopt where the format does not say a tensor's bytes.
std::optional<double> bytes_per_weight(const ModelReader& reader) {
  std::int64_t stored = 0;
  for (const TensorHeader& t : reader.tensors()) {
    if (t.bytes < 0) return std::nullopt;
    stored += t.bytes;
  }
  const std::int64_t parameters = reader.part_sizes().total() / 4;
  if (stored == 0 || parameters == 0) return std::nullopt;
  return static_cast<double>(stored) / static_cast<double>(parameters);
}

// Bytes of the stored tensors of the linears (the blocks' and the head's, or the embedding's when
// the head is tied to it), as a quantised scheme's model_linear_bytes counts its linears: tensors
// named with a layer index that are not norms, and the head. Nullopt where the format does not
// say a tensor's bytes.
std::optional<std::int64_t> stored_linear_bytes(const ModelReader& reader) {
  auto has = [](const std::string& name, const char* part) { return name.find(part) != std::string::npos; };
  auto in_layer = [&](const std::string& name) {
    for (const char* marker : {"layers.", "blk.", ".h.", "blocks."}) {
      const std::size_t at = name.find(marker);
      if (at != std::string::npos && at + std::strlen(marker) < name.size() &&
          std::isdigit(static_cast<unsigned char>(name[at + std::strlen(marker)])))
        return true;
    }
    return false;
  };
  auto is_head = [&](const std::string& name) { return name.rfind("lm_head", 0) == 0 || name == "output.weight"; };
  auto is_embedding = [&](const std::string& name) {
    return has(name, "embed_tokens") || name.rfind("token_embd", 0) == 0 || has(name, "wte.") || has(name, "tok_embeddings");
  };
  std::int64_t blocks = 0, head = 0, embedding = 0;
  for (const TensorHeader& t : reader.tensors()) {
    if (t.bytes < 0) return std::nullopt;
    if (is_head(t.name)) head += t.bytes;
    else if (is_embedding(t.name)) embedding += t.bytes;
    else if (in_layer(t.name) && !has(t.name, "norm") && !has(t.name, "ln_")) blocks += t.bytes;
  }
  if (reader.tensors().empty()) return std::nullopt;
  return blocks + (head > 0 ? head : embedding);
}

nlohmann::json error_json(const WeightError& e) {
  nlohmann::json j = {{"tensor", e.name}, {"basis", e.basis}, {"relative_frobenius", e.relative_frobenius}};
  if (e.max_abs_diff >= 0) j["max_abs_diff"] = e.max_abs_diff;
  return j;
}

bool is_linear_weight(const std::string& name, const ModelConfig& config, std::int64_t layer) {
  for (const std::string& linear : block_linear_names(config, layer))
    if (name == linear + ".weight") return true;
  return false;
}

// The parent's block weights with every linear weight defined: a block placed on a GPU keeps its
// linears' weights only in the linears (eval/evaluator.cpp places full precision's without sources).
BlockWeights weights_with_linears(const Block& block) {
  BlockWeights w = block.weights();
  std::vector<std::pair<std::string, at::Tensor*>> slots = block_tensor_slots(w, block.layer());
  for (const NamedLinear& linear : block.linears()) {
    const auto* floating = dynamic_cast<const FloatLinear*>(linear.linear.get());
    if (!floating) continue;
    for (auto& [name, slot] : slots)
      if (name == linear.name + ".weight" && !slot->defined()) *slot = floating->weight();
  }
  return w;
}

}  // namespace

void ArtifactWeightErrors::add_layer(std::int64_t layer, std::vector<WeightError> errors) {
  std::lock_guard<std::mutex> lock(mutex_);
  layers_.emplace(layer, std::move(errors));
}

bool ArtifactWeightErrors::has_layer(std::int64_t layer) const {
  std::lock_guard<std::mutex> lock(mutex_);
  return layers_.count(layer) > 0;
}

void ArtifactWeightErrors::set_head(std::vector<WeightError> errors) {
  std::lock_guard<std::mutex> lock(mutex_);
  head_ = std::move(errors);
}

nlohmann::json ArtifactWeightErrors::to_json() const {
  std::lock_guard<std::mutex> lock(mutex_);
  nlohmann::json tensors = nlohmann::json::array();
  std::map<std::string, std::vector<double>> by_basis;
  const WeightError* largest = nullptr;
  for (const auto& [layer, errors] : layers_) {
    for (const WeightError& e : errors) {
      tensors.push_back(error_json(e));
      by_basis[e.basis].push_back(e.relative_frobenius);
      if (!largest || e.relative_frobenius > largest->relative_frobenius) largest = &e;
    }
  }
  for (const WeightError& e : head_) tensors.push_back(error_json(e));
  nlohmann::json summary = nlohmann::json::object();
  for (auto& [basis, values] : by_basis) {
    std::sort(values.begin(), values.end());
    const std::size_t n = values.size();
    const double median = n % 2 ? values[n / 2] : (values[n / 2 - 1] + values[n / 2]) / 2;
    summary[basis] = {{"tensors", n}, {"median_relative_frobenius", median}, {"max_relative_frobenius", values.back()}};
  }
  if (largest) summary["largest"] = error_json(*largest);
  return {{"tensors", tensors}, {"summary", summary}};
}

std::vector<WeightError> block_weight_errors(const BlockWeights& artifact, const BlockWeights& parent,
                                             const ModelConfig& config, std::int64_t layer) {
  std::vector<WeightError> out;
  const auto a = named_tensors(artifact, layer), p = named_tensors(parent, layer);
  for (const auto& [name, tensor] : a) {
    const at::Tensor* ref = find_tensor(p, name);
    if (!ref) continue;  // shapes and names were checked at open: both have the same tensors
    out.push_back(tensor_error(name, "stored", tensor, *ref));
  }
  // Folded scales (the norms differ): the bases that reach the output unchanged.
  const bool attention_folded = !same_tensor(artifact.attn_norm.weight, parent.attn_norm.weight);
  const bool mlp_folded = !same_tensor(artifact.mlp_norm.weight, parent.mlp_norm.weight);
  if (!attention_folded && !mlp_folded) return out;
  const std::string prefix = fmt::format("layers.{}.", layer);
  const bool attention = config.mixer(layer) == MixerKind::attention, dense = config.ffn(layer) == FfnKind::dense;
  if (attention && attention_folded && artifact.attn_norm.weight.defined()) {
    const at::Tensor& ga = artifact.attn_norm.weight;
    const at::Tensor& gp = parent.attn_norm.weight;
    for (const auto& [which, a_w, p_w] : {std::tuple{"attn.qkv", &artifact.qkv, &parent.qkv},
                                          std::tuple{"attn.q", &artifact.q, &parent.q},
                                          std::tuple{"attn.k", &artifact.k, &parent.k}})
      if (a_w->weight.defined())
        out.push_back(tensor_error(prefix + which + ".weight", "norm-folded", a_w->weight, p_w->weight, ga, gp));
    if (artifact.v.weight.defined())
      out.push_back(head_product_error(prefix + "attn.v·o", norm_folded(artifact.v.weight, ga),
                                       norm_folded(parent.v.weight, gp), artifact.o.weight, parent.o.weight,
                                       config.n_heads, config.n_kv_heads));
  }
  if (dense && mlp_folded && artifact.mlp_norm.weight.defined()) {
    const at::Tensor& ga = artifact.mlp_norm.weight;
    const at::Tensor& gp = parent.mlp_norm.weight;
    if (artifact.gate_up.weight.defined()) {
      out.push_back(tensor_error(prefix + "mlp.gate_up.weight", "norm-folded", artifact.gate_up.weight,
                                 parent.gate_up.weight, ga, gp));
    } else {
      if (artifact.gate.weight.defined())
        out.push_back(tensor_error(prefix + "mlp.gate.weight", "norm-folded", artifact.gate.weight, parent.gate.weight,
                                   ga, gp));
      out.push_back(channel_product_error(prefix + "mlp.up·down", artifact.up.weight, parent.up.weight, ga, gp,
                                          artifact.down.weight, parent.down.weight));
    }
  }
  return out;
}

std::optional<QuantSpec> declared_input_activations(const nlohmann::json& quantization, const std::string& artifact,
                                                    std::string* account) {
  if (!quantization.is_object() || !quantization.contains("method")) return std::nullopt;
  const std::string method = quantization["method"].get<std::string>();
  auto refuse = [&](const std::string& what) -> std::optional<QuantSpec> {
    fail("--compare-checkpoint {}: {}; qeval has no quantiser that computes that. Add --artifact-weights-only to "
         "evaluate its weights alone (the record then says so)", artifact, what);
  };
  if (method == "fp8" && quantization.value("activation_scheme", std::string()) != "")
    return refuse(fmt::format("its fine-grained FP8 config declares activation_scheme \"{}\", E4M3 activations scaled "
                              "per group of 128 channels of each token",
                              quantization["activation_scheme"].get<std::string>()));
  if (method == "bitsandbytes" && quantization.value("bits", 0) == 8)
    return refuse("bitsandbytes 8-bit runs LLM.int8's activations (int8 per token with the outlier columns, |x| >= "
                  "llm_int8_threshold, in 16 bits) on weights kept in int8");
  if (method != "compressed-tensors") return std::nullopt;
  // compressed-tensors: every group's input_activations (QuantizationArgs), which must agree.
  nlohmann::json declared;
  std::string declaring_group;
  const nlohmann::json groups = quantization.value("config_groups", nlohmann::json::object());
  for (const auto& [name, group] : groups.items()) {
    const nlohmann::json& a = group.value("input_activations", nlohmann::json());
    if (a.is_null()) continue;
    if (!declared.is_null() && a != declared)
      return refuse(fmt::format("its config_groups {} and {} declare different input_activations ({} and {})",
                                declaring_group, name, declared.dump(), a.dump()));
    if (group.value("targets", nlohmann::json::array()) != nlohmann::json::array({"Linear"}))
      return refuse(fmt::format("its config group {} declares input_activations for the targets {}, not every Linear "
                                "(qeval applies one activation spec to every linear the artifact quantises)",
                                name, group.value("targets", nlohmann::json()).dump()));
    declared = a;
    declaring_group = name;
  }
  if (declared.is_null()) return std::nullopt;
  // QuantizationArgs' fields, a null one taking the library's default (compressed-tensors writes null).
  auto field = [&declared](const char* key, nlohmann::json fallback) {
    return declared.contains(key) && !declared[key].is_null() ? declared[key] : fallback;
  };
  const nlohmann::json type = field("type", "int"), bits = field("num_bits", 8), strategy = field("strategy", "tensor");
  const nlohmann::json dynamic = field("dynamic", false), symmetric = field("symmetric", true);
  const std::string text = fmt::format("config group {}'s input_activations {}", declaring_group, declared.dump());
  QuantSpec spec;
  if (type == "float" && bits == 4 && strategy == "tensor_group" && field("group_size", nullptr) == 16) {
    spec.kind = QuantKind::nvfp4;
    spec.element = ElementType::e2m1;
    spec.granularity = Granularity::block;
    spec.group_size = 16;
    *account = "NVFP4 activations: E2M1 in blocks of 16 with E4M3 block scales (qeval's nvfp4 quantiser); the "
               "tensor scale is each sequence's own (amax / (448 · 6)), where the artifact stores a calibrated "
               "input_global_scale per linear";
    return spec;
  }
  if (dynamic != nlohmann::json(true))
    return refuse(text + ": static scales (\"dynamic\": " + dynamic.dump() + ") stored in the artifact, which this "
                  "build does not read");
  if (symmetric != true) return refuse(text + ": asymmetric activations (a zero point per token)");
  if (strategy != "token" && strategy != "tensor")
    return refuse(text + ": strategy " + strategy.dump() + " (qeval quantises activations per token or per sequence)");
  spec.granularity = strategy == "token" ? Granularity::token : Granularity::tensor;
  if (type == "int" && bits == 8) {
    spec.kind = QuantKind::int8_absmax;
    *account = fmt::format(
        "int8 activations per {}, dynamic, symmetric (qeval's int8_absmax: scale amax / 127, round half to even, "
        "clamp to ±127); compressed-tensors scales by amax / 127.5 and clamps to [−128, 127]",
        strategy == "token" ? "token" : "sequence");
  } else if (type == "float" && bits == 8) {
    spec.kind = QuantKind::fp8;
    spec.element = ElementType::e4m3;
    *account = fmt::format("FP8 E4M3 activations per {}, dynamic (qeval's fp8: scale amax / 448, as compressed-tensors)",
                           strategy == "token" ? "token" : "sequence");
  } else {
    return refuse(text + fmt::format(": {} activations of {} bits", type.dump(), bits.dump()));
  }
  if (strategy == "tensor")
    *account += "; the artifact's per-tensor scale is taken over each sequence (qeval's per-tensor granularity), where "
                "a serving engine takes it over the batch it runs";
  return spec;
}

std::string artifact_scheme_name(const ModelReader& artifact) {
  return stem(artifact.info().path) + ":" + artifact_method(artifact);
}

void check_artifact_matches_parent(const ModelReader& artifact, const ModelReader& parent) {
  const ModelConfig& a = artifact.config();
  const ModelConfig& p = parent.config();
  const std::string a_path = artifact.info().path.string(), p_path = parent.info().path.string();
  auto shape = [](const std::vector<std::int64_t>& s) { return fmt::format("[{}]", fmt::join(s, ", ")); };
  auto differ = [&](const std::string& tensor, const std::string& parent_has, const std::string& artifact_has) {
    fail("--compare-checkpoint {}: tensor {} is {} in the artifact and {} in the parent {}; an artifact is compared with "
         "the model it was made from, whose tensors it has with the same shapes",
         a_path, tensor, artifact_has, parent_has, p_path);
  };
  if (a.vocab_size != p.vocab_size || a.d_model != p.d_model)
    differ("token_embedding", shape({p.vocab_size, p.d_model}), shape({a.vocab_size, a.d_model}));
  const std::int64_t layers = std::min(a.n_layers, p.n_layers);
  for (std::int64_t layer = 0; layer < layers; ++layer) {
    const std::vector<std::string> an = block_linear_names(a, layer), pn = block_linear_names(p, layer);
    for (const std::string& name : pn) {
      if (std::find(an.begin(), an.end(), name) == an.end()) differ(name + ".weight", "present", "absent");
      const LinearShape as = linear_shape(a, name), ps = linear_shape(p, name);
      if (as.out != ps.out || as.in != ps.in)
        differ(name + ".weight", shape({ps.out, ps.in}), shape({as.out, as.in}));
      if (as.bias != ps.bias) differ(name + ".bias", ps.bias ? "present" : "absent", as.bias ? "present" : "absent");
    }
    for (const std::string& name : an)
      if (std::find(pn.begin(), pn.end(), name) == pn.end()) differ(name + ".weight", "absent", "present");
  }
  if (a.n_layers != p.n_layers)
    differ(fmt::format("layers.{}", layers), a.n_layers > p.n_layers ? "absent" : "present",
           a.n_layers > p.n_layers ? "present" : "absent");
  // Same shapes: now what else the config decides (an artifact changes none of it).
  nlohmann::json aj = config_to_json(a), pj = config_to_json(p);
  for (const char* descriptive : {"architecture"}) {
    aj.erase(descriptive);
    pj.erase(descriptive);
  }
  const std::vector<std::string> fields = json_differences(aj, pj, 4);
  QEVAL_CHECK(fields.empty(),
              "--compare-checkpoint {}: its config differs from the parent {}'s (artifact's value first): {}; the "
              "artifact's layers would compute another function than the parent's under the same weights (a GGUF "
              "stores a llama model's q and k permuted for interleaved rope: compare it with a GGUF of the parent)",
              a_path, p_path, fmt::join(fields, "; "));
}

ArtifactScheme artifact_scheme(const std::filesystem::path& path, const ModelReader& parent, bool weights_only) {
  ArtifactScheme out;
  out.reader = open_checkpoint(path);
  check_artifact_matches_parent(*out.reader, parent);
  out.errors = std::make_shared<ArtifactWeightErrors>();
  EvalScheme& scheme = out.scheme;
  scheme.name = artifact_scheme_name(*out.reader);
  scheme.own_checkpoint = out.reader;
  const ModelReader& reader = *out.reader;
  nlohmann::json artifact = {{"path", std::filesystem::absolute(path).lexically_normal().string()},
                             {"format", reader.info().format},
                             {"method", artifact_method(reader)},
                             {"bytes_on_disk", reader.bytes_on_disk()}};
  if (const auto bpw = bytes_per_weight(reader)) artifact["bytes_per_weight"] = *bpw;
  if (const auto bpw = bytes_per_weight(parent)) artifact["parent_bytes_per_weight"] = *bpw;
  for (const char* note : {"quantization", "dequantized_from", "full_precision"})
    if (reader.info().notes.contains(note)) artifact[note] = reader.info().notes[note];
  std::string account;
  const std::optional<QuantSpec> declared =
      weights_only ? std::nullopt
                   : declared_input_activations(reader.info().notes.value("quantization", nlohmann::json()),
                                                path.string(), &account);
  if (declared) {
    SchemeSpec spec;
    spec.name = artifact_scheme_name(reader);
    spec.input_activations = *declared;
    out.activations = std::make_shared<SchemeRewrite>(spec, model_linear_names(parent.config()));
    artifact["activations"] = {{"applied", "declared"},
                               {"spec", scheme_to_json(spec).at("input_activations")},
                               {"how", account},
                               {"execution", out.activations->report().value("execution_path", nlohmann::json())}};
  } else {
    artifact["activations"] = {
        {"applied", "none"},
        {"how", weights_only ? "weights only (--artifact-weights-only): the declared input activations, if any, are "
                               "not applied; every linear computes in full precision on the dequantised weights"
                             : "the artifact declares no input activation quantisation: every linear computes in full "
                               "precision on its dequantised weights"}};
  }
  // The table's execution column: what ran, activations included.
  const std::string execution =
      declared ? fmt::format("artifact: its own checkpoint's weights, dequantised to float32; its declared input "
                             "activations as qeval's {} per {}",
                             artifact["activations"]["spec"].value("kind", std::string()),
                             artifact["activations"]["spec"].value("granularity", std::string()))
               : fmt::format("artifact: its own checkpoint's weights, dequantised to float32{}",
                             weights_only ? "; weights only (--artifact-weights-only)" : "");
  scheme.description = {{"execution", execution}, {"artifact", artifact}};
  if (const auto bytes = stored_linear_bytes(reader)) scheme.description["model_linear_bytes"] = *bytes;
  std::shared_ptr<ModelReader> own = out.reader;
  std::shared_ptr<ArtifactWeightErrors> errors = out.errors;
  std::shared_ptr<const ModelConfig> config = std::make_shared<const ModelConfig>(parent.config());
  const std::string source = path.string();
  // The artifact's block replaces the parent's; the first time each layer is reached, its tensors
  // are compared with the parent's.
  std::shared_ptr<SchemeRewrite> activations = out.activations;
  scheme.rewrite_block = [own, errors, config, source, activations](const Block& full) {
    const std::int64_t layer = full.layer();
    BlockWeights weights;
    std::map<std::string, float> max_abs;
    {
      PhaseScope read(Phase::read);
      weights = own->block(layer);
      max_abs = checked_block_max_abs(weights, layer, source);
    }
    if (!errors->has_layer(layer)) errors->add_layer(layer, block_weight_errors(weights, weights_with_linears(full), *config, layer));
    Block block(config, layer, std::move(weights), source, max_abs);
    return activations ? activations->rewrite(block) : block;
  };
  return out;
}

void finish_artifact_description(ArtifactScheme& artifact, ModelReader& parent, nlohmann::json& description,
                                 int scheme) {
  // The embedding and the head, in blocks of rows (a 8B model's are never held whole), both
  // checkpoints' reads charged to the artifact's quantize phase (its comparison with the parent).
  PhaseScope comparison(Phase::quantize, scheme);
  ModelReader& own = *artifact.reader;
  const ModelConfig& c = parent.config();
  std::vector<WeightError> ends;
  for (const char* part : {"token_embedding", "lm_head"}) {
    const bool head = std::string(part) == "lm_head";
    double diff2 = 0, ref2 = 0, max_abs = 0;
    for (std::int64_t r = 0; r < c.vocab_size; r += kRowsPerStep) {
      const std::int64_t n = std::min(kRowsPerStep, c.vocab_size - r);
      at::Tensor a, p;
      {
        const at::Tensor ids = at::arange(r, r + n, at::kLong);
        a = head ? own.lm_head_rows(r, n) : own.token_embedding_rows(ids);
        p = head ? parent.lm_head_rows(r, n) : parent.token_embedding_rows(ids);
      }
      const ErrorSums e = error_sums(float_rows(a), float_rows(p), nullptr, nullptr);
      diff2 += e.diff2;
      ref2 += e.ref2;
      max_abs = std::max(max_abs, e.max_abs);
    }
    WeightError e{std::string(part) + ".weight", "stored", relative(diff2, ref2), max_abs};
    ends.push_back(e);
  }
  artifact.errors->set_head(std::move(ends));
  nlohmann::json errors = artifact.errors->to_json();
  description["artifact"]["weight_error"] = errors["summary"];
  description["artifact"]["weight_errors"] = errors["tensors"];
  description["artifact"]["weights_hash"] = artifact.reader->weights_hash();
  if (artifact.activations)  // the path the rewritten layers took (kernel or reference), now that they exist
    description["artifact"]["activations"]["execution"] = artifact.activations->report().at("execution_path");
  description["artifact"]["weights_hash_kind"] = ModelReader::weights_hash_kind();
}

}  // namespace qeval
