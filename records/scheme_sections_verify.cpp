#include "records/scheme_sections_verify.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <iterator>
#include <limits>
#include <map>
#include <optional>
#include <set>
#include <vector>

#include "common/error.h"
#include "common/json_integer.h"
#include "common/printable.h"
#include "loaders/protocols/protocol.h"
#include "model/block.h"
#include "model/config.h"
#include "quant/float_quantize.h"
#include "quant/formats/ggml/quants.h"
#include "quant/schemes/ggml_rules.h"
#include "quant/schemes/presets.h"
#include "quant/schemes/scheme_json.h"
#include "records/rounding_band.h"

namespace qeval {
namespace {

using nlohmann::json;

// The model's resolved config, where the record carries one that parses (hand-made records in
// tests carry a few keys only): the checks that need the model's shape run with it.
std::optional<ModelConfig> record_config(const json& record) {
  if (!record.contains("model") || !record["model"].is_object() || !record["model"].contains("config")) return std::nullopt;
  try {
    return config_from_json(record["model"]["config"], "model.config");
  } catch (const Error&) {
    return std::nullopt;
  }
}

double finite_number(const json& v, const std::string& what) {
  QEVAL_CHECK(v.is_number() && std::isfinite(v.get<double>()), "{} is {}: expected a finite number", what,
              json_text(v, 60));
  return v.get<double>();
}

// A spec under a preset's name is the preset, with only the run's options applied.
void check_preset_spec(const json& entry, const std::string& name, const SchemeSpec& spec, const json& record,
                       const std::string& where) {
  if (!is_preset_name(name) || is_rounding_variant(entry)) return;  // a variant is verified with its scheme
  QEVAL_CHECK(!entry["description"].contains("scheme_file"),
              "{}: a scheme file ({}) is shown under the preset name {}; a scheme file cannot take a preset's name",
              where, json_text(entry["description"]["scheme_file"], 80), in_quotes(name));
  SchemeSpec preset = preset_scheme(name);
  const json options = record.value("options", json::object());
  if (options.is_object() && options.value("quantize_lm_head", false) == true) preset.quantize_lm_head = true;
  if (options.is_object() && options.value("quantize_ssm_inner", false) == true) preset.quantize_ssm_inner = true;
  if (options.is_object() && options.contains("calibration_windows") && options["calibration_windows"].is_number_integer())
    apply_calibration_windows(preset, options["calibration_windows"].get<std::int64_t>());
  if (options.is_object() && options.contains("imatrix") && options["imatrix"].is_string() &&
      preset.weights.kind == QuantKind::ggml)  // eval --imatrix: every ggml scheme's importance matrix
    preset.weights.ggml_imatrix = options["imatrix"].get<std::string>();
  const std::vector<std::string> differ = differences_from_preset(spec, preset, 1);
  QEVAL_CHECK(differ.empty(), "{}: the spec under the preset name {} is not that preset's (description.scheme.{}; the "
              "record's value first); a record's scheme named like a preset must be the preset",
              where, in_quotes(name), differ.empty() ? "" : differ.front());
}

// What the record evaluated, for the calibration windows' check: the window indices, the
// protocol (windows: their stream ranges) and the data's hash.
struct Evaluated {
  const std::set<std::int64_t>& windows;
  std::optional<ProtocolSpec> protocol;  // when the record's protocol is `windows`
  json data_hash;
};

// A record's protocol as far as the windows' stream ranges go (its name, seq_len and resolved
// bos_per_window; a record's protocol also holds what was read): none unless it is `windows`.
std::optional<ProtocolSpec> windows_protocol_of(const json& j) {
  if (!j.is_object() || j.value("name", json(nullptr)) != "windows") return std::nullopt;
  const json seq_len = j.value("seq_len", json(nullptr)), bos = j.value("bos_per_window", json(false));
  if (!seq_len.is_number_integer() || seq_len.get<std::int64_t>() < 2 || !bos.is_boolean()) return std::nullopt;
  ProtocolSpec p = ProtocolSpec::defaults_for("windows");
  p.seq_len = seq_len.get<std::int64_t>();
  p.bos_per_window = bos.get<bool>();
  p.bos_per_window_auto = false;
  return p;
}

Evaluated evaluated_of(const json& record, const std::set<std::int64_t>& windows) {
  Evaluated e{windows, windows_protocol_of(record.value("protocol", json(nullptr))), json(nullptr)};
  if (record.contains("data") && record["data"].is_object()) e.data_hash = record["data"].value("hash", json(nullptr));
  return e;
}

// The calibration windows' protocol: the one the calibration names (windows, of a length and a
// decided bos_per_window), else the evaluation's.
ProtocolSpec calibration_protocol(const json& cal, const ProtocolSpec& evaluation, const std::string& at) {
  if (!cal.contains("protocol")) return evaluation;
  const std::optional<ProtocolSpec> p = windows_protocol_of(cal["protocol"]);
  QEVAL_CHECK(p.has_value(), "{}.calibration.protocol is {}: calibration windows are of the windows protocol, with a "
              "seq_len of at least 2 and bos_per_window true or false", at, json_text(cal["protocol"], 80));
  return *p;
}

// `s`.calibration: the `count` windows a calibration ran on, each listed once, and, on the
// evaluation's own data (by name or by hash), none sharing a stream token with an evaluated
// window (its windows may be of another length: --calibration-seq-len).
void check_calibration_windows(const json& s, std::int64_t count, const Evaluated& evaluated, const std::string& at) {
  QEVAL_CHECK(s.contains("calibration") && s["calibration"].is_object(), "{}: has no \"calibration\" object", at);
  const json& cal = s["calibration"];
  QEVAL_CHECK(cal.contains("windows") && cal["windows"].is_array() &&
                  static_cast<std::int64_t>(cal["windows"].size()) == count,
              "{}.calibration.windows should list the {} calibration windows, found {}", at, count,
              json_text(cal.value("windows", json(nullptr)), 80));
  std::set<std::int64_t> windows;
  for (const json& w : cal["windows"]) {
    const std::int64_t i = json_integer(w, at + ".calibration.windows[]");
    QEVAL_CHECK(i >= 0 && windows.insert(i).second, "{}.calibration.windows: window {} is negative or listed twice", at, i);
  }
  const bool same_data = cal.value("same_data_as_evaluation", true) != false ||
                         (!evaluated.data_hash.is_null() && cal.value("hash", json(nullptr)) == evaluated.data_hash);
  QEVAL_CHECK(!cal.contains("disjoint_from_evaluation") || cal["disjoint_from_evaluation"] == true,
              "{}.calibration.disjoint_from_evaluation is {}: qeval never calibrates on evaluated windows", at,
              json_text(cal["disjoint_from_evaluation"]));
  if (!same_data) return;
  if (!evaluated.protocol) {
    // Without the windows protocol qeval calibrates only on other data; by index, what can be checked.
    for (std::int64_t w : windows)
      QEVAL_CHECK(!evaluated.windows.count(w), "{}.calibration.windows holds window {}, which the record also "
                  "evaluates: calibration and evaluation windows must be disjoint", at, w);
    return;
  }
  const ProtocolSpec& ep = *evaluated.protocol;
  const ProtocolSpec cp = calibration_protocol(cal, ep, at);
  std::vector<StreamRange> ranges;  // evaluated, in stream order
  for (std::int64_t e : evaluated.windows) ranges.push_back(windows_stream_range(ep, e));
  for (std::int64_t w : windows) {
    const StreamRange r = windows_stream_range(cp, w);
    const auto it = first_overlap(ranges, r);
    if (it == ranges.end()) continue;
    const std::int64_t e = *std::next(evaluated.windows.begin(), it - ranges.begin());
    fail("{}.calibration.windows holds window {} (stream tokens {}..{} of the evaluation data, windows of {}), which "
         "the record also evaluates: it overlaps evaluated window {} (tokens {}..{}, windows of {}); calibration and "
         "evaluation windows must be disjoint", at, w, r.first, r.end - 1, cp.seq_len, e, it->first, it->end - 1,
         ep.seq_len);
  }
}

// "calibrated_weights" (eval/weight_calibration_pass.h): present exactly when the spec's weights are
// calibrated (GPTQ, AWQ); its method the spec's; its windows disjoint from the evaluated ones; each
// selected linear once (GPTQ: with a finite non-negative loss); AWQ's mappings each with finite
// non-negative losses, or a reason it was skipped.
void check_calibrated_weights(const json& d, const SchemeSpec& spec, const Evaluated& evaluated,
                              const std::string& where) {
  if (!spec.needs_weight_calibration()) {
    QEVAL_CHECK(!d.contains("calibrated_weights"), "{}: has \"calibrated_weights\", but its spec's weights are not "
                "calibrated (method gptq or awq): a round-to-nearest scheme has none", where);
    return;
  }
  const std::string method = spec.weights.method();
  const std::int64_t count = spec.weights.calibration_windows();
  QEVAL_CHECK(d.contains("calibrated_weights") && d["calibrated_weights"].is_object(),
              "{}: its spec's weights are calibrated by {} on {} calibration windows, but the record has no "
              "\"calibrated_weights\" object saying which windows and which solves", where, method, count);
  const json& s = d["calibrated_weights"];
  const std::string at = where + ": calibrated_weights";
  QEVAL_CHECK(s.value("method", json(nullptr)) == method, "{}.method is {}, the spec's is {}", at,
              json_text(s.value("method", json(nullptr))), method);
  QEVAL_CHECK(s.contains("windows") && json_integer(s["windows"], at + ".windows") == count,
              "{}.windows is {}, the spec calibrates on {}", at, json_text(s.value("windows", json(nullptr))), count);
  check_calibration_windows(s, count, evaluated, at);
  QEVAL_CHECK(s.contains("layers") && s["layers"].is_array(), "{}.layers should list each calibrated linear", at);
  std::set<std::string> seen;
  for (const json& layer : s["layers"]) {
    QEVAL_CHECK(layer.is_object() && layer.contains("name") && layer["name"].is_string(),
                "{}.layers: an entry without a \"name\": {}", at, json_text(layer, 80));
    const std::string name = layer["name"].get<std::string>();
    const std::string lat = fmt::format("{}.layers[{}]", at, in_quotes(name));
    QEVAL_CHECK(spec.selects(name), "{}: the spec does not quantise this linear", lat);
    QEVAL_CHECK(seen.insert(name).second, "{}: listed twice", lat);
    if (method == "gptq") {
      const double loss = finite_number(layer.value("loss", json(nullptr)), lat + ".loss");
      QEVAL_CHECK(loss >= 0, "{}.loss is {}: a sum of squared errors is >= 0", lat, loss);
    }
  }
  if (method != "awq") return;
  QEVAL_CHECK(s.contains("mappings") && s["mappings"].is_array(), "{}.mappings should list each of AWQ's mappings", at);
  for (const json& m : s["mappings"]) {
    QEVAL_CHECK(m.is_object() && m.contains("name") && m["name"].is_string(),
                "{}.mappings: an entry without a \"name\": {}", at, json_text(m, 80));
    const std::string mat = fmt::format("{}.mappings[{}]", at, in_quotes(m["name"].get<std::string>()));
    if (m.contains("skipped")) {
      QEVAL_CHECK(m["skipped"].is_string() && !m["skipped"].get<std::string>().empty(),
                  "{}.skipped should say why the mapping was skipped", mat);
      continue;
    }
    for (const char* key : {"loss", "initial_loss"}) {
      const double loss = finite_number(m.value(key, json(nullptr)), mat + "." + key);
      QEVAL_CHECK(loss >= 0, "{}.{} is {}: a mean squared error is >= 0", mat, key, loss);
    }
    QEVAL_CHECK(m.value("loss", 0.0) <= m.value("initial_loss", 0.0), "{}: the chosen loss {} exceeds the first grid "
                "point's {}, which the search would have kept", mat, m.value("loss", 0.0), m.value("initial_loss", 0.0));
  }
}

void check_static_scales(const json& d, const SchemeSpec& spec, const Evaluated& evaluated,
                         const std::string& where) {
  if (!spec.needs_calibration()) {
    QEVAL_CHECK(!d.contains("static_scales"), "{}: has \"static_scales\", but its spec's input activations are not "
                "static (no calibration): a dynamic scheme has no calibrated scales", where);
    return;
  }
  QEVAL_CHECK(d.contains("static_scales") && d["static_scales"].is_object(),
              "{}: its spec's input activations are static (calibration {} windows), but the record has no "
              "\"static_scales\" object saying which windows and which scales", where,
              spec.input_activations.calibration->windows);
  const json& s = d["static_scales"];
  const std::string at = where + ": static_scales";
  const ActivationCalibration& c = *spec.input_activations.calibration;
  QEVAL_CHECK(s.value("statistic", json(nullptr)) == c.statistic_name(), "{}.statistic is {}, the spec's is {}", at,
              json_text(s.value("statistic", json(nullptr))), c.statistic_name());
  QEVAL_CHECK(s.contains("windows") && json_integer(s["windows"], at + ".windows") == c.windows,
              "{}.windows is {}, the spec calibrates on {}", at, json_text(s.value("windows", json(nullptr))), c.windows);
  const std::int64_t keep = spec.keep_tokens.rule == KeepRule::first ? spec.keep_tokens.count : 0;
  QEVAL_CHECK(s.contains("keep_first") && json_integer(s["keep_first"], at + ".keep_first") == keep,
              "{}.keep_first is {}, the spec keeps {}", at, json_text(s.value("keep_first", json(nullptr))), keep);
  check_calibration_windows(s, c.windows, evaluated, at);
  QEVAL_CHECK(s.contains("layers") && s["layers"].is_array(), "{}.layers should list each calibrated linear", at);
  std::set<std::string> seen;
  for (const json& layer : s["layers"]) {
    QEVAL_CHECK(layer.is_object() && layer.contains("name") && layer["name"].is_string(),
                "{}.layers: an entry without a \"name\": {}", at, json_text(layer, 80));
    const std::string name = layer["name"].get<std::string>();
    const std::string lat = fmt::format("{}.layers[{}]", at, in_quotes(name));
    QEVAL_CHECK(spec.selects(name), "{}: the spec does not quantise this linear", lat);
    QEVAL_CHECK(seen.insert(name).second, "{}: listed twice", lat);
    const double amax = finite_number(layer.value("amax", json(nullptr)), lat + ".amax");
    QEVAL_CHECK(amax >= 0, "{}.amax is {}: a largest magnitude is >= 0", lat, amax);
    const double scale = finite_number(layer.value("scale", json(nullptr)), lat + ".scale");
    const float expected = static_activation_scale(spec.input_activations, amax);
    QEVAL_CHECK(static_cast<double>(expected) == scale, "{}.scale is {}, but amax {} gives {} under {} (amax / {})", lat,
                scale, amax, expected, to_string(spec.input_activations.kind),
                spec.input_activations.kind == QuantKind::fp8 ? "the element's largest finite" : "127");
  }
}

void check_kv_cache_error(const json& d, const SchemeSpec& spec, const std::optional<ModelConfig>& config,
                          std::int64_t windows, const std::string& where) {
  if (!spec.kv_cache.enabled()) {
    QEVAL_CHECK(!d.contains("kv_cache_error"), "{}: has \"kv_cache_error\", but its spec leaves the KV cache "
                "unquantised (kv_cache.format none)", where);
    return;
  }
  if (!d.contains("kv_cache_error")) return;  // written after the run; a record cut before it has none
  const json& e = d["kv_cache_error"];
  const std::string at = where + ": kv_cache_error";
  QEVAL_CHECK(e.is_object(), "{} is {}: expected an object", at, json_text(e, 60));
  QEVAL_CHECK(e.value("format", json(nullptr)) == to_string(spec.kv_cache.format), "{}.format is {}, the spec's is {}",
              at, json_text(e.value("format", json(nullptr))), to_string(spec.kv_cache.format));
  QEVAL_CHECK(e.contains("keep_first") && json_integer(e["keep_first"], at + ".keep_first") == spec.kv_cache.keep_first,
              "{}.keep_first is {}, the spec keeps {}", at, json_text(e.value("keep_first", json(nullptr))),
              spec.kv_cache.keep_first);
  const bool hadamard = spec.kv_cache.rotation == KvCacheRotation::hadamard;
  QEVAL_CHECK(e.contains("rotation") == hadamard && (!hadamard || e["rotation"] == "hadamard"),
              "{}.rotation is {}, the spec's is {}", at, json_text(e.value("rotation", json(nullptr))),
              hadamard ? "hadamard" : "none (absent)");
  QEVAL_CHECK(e.contains("layers") && e["layers"].is_array(), "{}.layers should be a list", at);
  static const char* kNames[] = {"k_first", "k_rest", "v_first", "v_rest"};
  const double bound = config ? 2.0 * std::sqrt(static_cast<double>(std::max<std::int64_t>(config->head_dim(), 1)))
                              : std::numeric_limits<double>::infinity();
  std::set<std::int64_t> layers;
  double total[4] = {0, 0, 0, 0};
  for (const json& row : e["layers"]) {
    QEVAL_CHECK(row.is_object() && row.contains("layer"), "{}.layers: a row without \"layer\": {}", at, json_text(row, 80));
    const std::int64_t layer = json_integer(row["layer"], at + ".layers[].layer");
    const std::string lat = fmt::format("{}.layers[layer {}]", at, layer);
    QEVAL_CHECK(layers.insert(layer).second, "{}: listed twice", lat);
    if (config) {
      QEVAL_CHECK(layer >= 0 && layer < config->n_layers, "{}: the model has layers 0..{}", lat, config->n_layers - 1);
      QEVAL_CHECK(config->mixer(layer) == MixerKind::attention, "{}: layer {} has no attention, so no KV cache",
                  lat, layer);
    }
    QEVAL_CHECK(row.contains("windows") && json_integer(row["windows"], lat + ".windows") == windows,
                "{}.windows is {}, but the record evaluates {} windows", lat,
                json_text(row.value("windows", json(nullptr))), windows);
    for (int i = 0; i < 4; ++i) {
      const double v = finite_number(row.value(kNames[i], json(nullptr)), lat + "." + kNames[i]);
      QEVAL_CHECK(v >= 0 && v <= bound, "{}.{} is {}: a relative RMS error lies in [0, 2·sqrt(head_dim)] = [0, {:.4g}]",
                  lat, kNames[i], v, bound);
      QEVAL_CHECK(!(spec.kv_cache.keep_first > 0 && (i == 0 || i == 2)) || v == 0,
                  "{}.{} is {}, but the spec keeps position 0 in full precision: its error is 0", lat, kNames[i], v);
      total[i] += v;
    }
  }
  if (config) {
    std::int64_t attention = 0;
    for (std::int64_t l = 0; l < config->n_layers; ++l) attention += config->mixer(l) == MixerKind::attention;
    QEVAL_CHECK(static_cast<std::int64_t>(layers.size()) == attention,
                "{}.layers has {} rows, the model has {} attention layers", at, layers.size(), attention);
  }
  if (e.contains("mean") && !layers.empty())
    for (int i = 0; i < 4; ++i) {
      const double mean = total[i] / static_cast<double>(layers.size());
      const double written = finite_number(e["mean"].value(kNames[i], json(nullptr)), at + ".mean." + kNames[i]);
      QEVAL_CHECK(std::fabs(written - mean) <= 1e-9 * std::max(1.0, std::fabs(mean)),
                  "{}.mean.{} is {}, the layers' rows give {}", at, kNames[i], written, mean);
    }
}

// "imatrix" (eval/ggml_imatrix.h): present exactly when the spec's ggml weights name an importance
// matrix; it names that file, its hash, and what the file says of its calibration.
void check_imatrix(const json& d, const SchemeSpec& spec, const std::string& where) {
  if (spec.weights.ggml_imatrix.empty()) {
    QEVAL_CHECK(!d.contains("imatrix"), "{}: has an \"imatrix\" section, but its spec's weights name no importance "
                "matrix", where);
    return;
  }
  const std::string at = where + ": imatrix";
  QEVAL_CHECK(d.contains("imatrix") && d["imatrix"].is_object(), "{}: its spec's weights are quantised with the "
              "importance matrix {}, but the record has no \"imatrix\" object naming the file and its hash", where,
              in_quotes(spec.weights.ggml_imatrix));
  const json& m = d["imatrix"];
  QEVAL_CHECK(m.value("file", json(nullptr)) == spec.weights.ggml_imatrix, "{}.file is {}, the spec's imatrix is {}", at,
              json_text(m.value("file", json(nullptr))), in_quotes(spec.weights.ggml_imatrix));
  QEVAL_CHECK(m.contains("hash") && m["hash"].is_string() && !m["hash"].get<std::string>().empty(),
              "{}.hash is {}: expected the file's hash", at, json_text(m.value("hash", json(nullptr))));
  QEVAL_CHECK(m.value("format", json(nullptr)) == "gguf" || m.value("format", json(nullptr)) == "legacy",
              "{}.format is {}: expected \"gguf\" or \"legacy\"", at, json_text(m.value("format", json(nullptr))));
  QEVAL_CHECK(m.contains("datasets") && m["datasets"].is_array(), "{}.datasets should list the file's datasets", at);
  for (const char* key : {"chunk_count", "chunk_size", "entries", "tensors_with"})
    QEVAL_CHECK(m.contains(key) && json_integer(m[key], at + "." + key) >= 0, "{}.{} is {}: expected a count", at, key,
                json_text(m.value(key, json(nullptr))));
  QEVAL_CHECK(m.contains("tensors_without") && m["tensors_without"].is_array(),
              "{}.tensors_without should list the tensors quantised without an entry", at);
}

void check_layers(const json& d, const SchemeSpec& spec, const std::optional<ModelConfig>& config,
                  const std::string& where) {
  if (!d.contains("layers") || !d["layers"].is_array()) return;
  std::optional<GgmlTypePlan> plan;
  if (spec.weights.kind == QuantKind::ggml && config) plan.emplace(spec, model_linear_names(*config), *config);
  for (const json& layer : d["layers"]) {
    if (!layer.is_object() || !layer.contains("name") || !layer["name"].is_string()) continue;
    const std::string lat = fmt::format("{}: layers[{}]", where, in_quotes(layer["name"].get<std::string>()));
    for (const char* key : {"weight_bytes", "fp32_weight_bytes"})
      if (layer.contains(key))
        QEVAL_CHECK(json_integer(layer[key], lat + "." + key) > 0, "{}.{} is {}: a tensor takes a positive number of "
                    "bytes", lat, key, json_text(layer[key]));
    if (!layer.contains("ggml_type")) continue;
    QEVAL_CHECK(spec.weights.kind == QuantKind::ggml, "{}: has a ggml_type, but the scheme's weights are {}", lat,
                to_string(spec.weights.kind));
    QEVAL_CHECK(layer["ggml_type"].is_string(), "{}.ggml_type is {}: expected a type name", lat, json_text(layer["ggml_type"]));
    const GgmlType type = ggml_type_from_json_name(layer["ggml_type"].get<std::string>(), lat + ".ggml_type", true);
    const std::int64_t in = json_integer(layer.value("in_features", json(nullptr)), lat + ".in_features");
    const std::int64_t out = json_integer(layer.value("out_features", json(nullptr)), lat + ".out_features");
    QEVAL_CHECK(in > 0 && out > 0 && in % ggml_block_elements(type) == 0,
                "{}: type {} stores rows in blocks of {}, but the tensor's rows hold {} values", lat,
                ggml_type_label(type), ggml_block_elements(type), in);
    if (plan) {
      const GgmlTensorChoice choice = plan->choose(layer["name"].get<std::string>(), in);
      QEVAL_CHECK(choice.type == type, "{}.ggml_type is {}, but the scheme's rules give {} ({})", lat,
                  ggml_type_label(type), ggml_type_label(choice.type), choice.rule);
    }
    if (type != GgmlType::F32 && layer.contains("weight_bytes")) {
      const std::int64_t bytes = json_integer(layer["weight_bytes"], lat + ".weight_bytes");
      const std::int64_t blocks = ggml_tensor_bytes(type, out, in);
      QEVAL_CHECK(bytes >= blocks && bytes <= blocks + out * 4, "{}.weight_bytes is {}: a [{}, {}] tensor of type {} "
                  "takes {} bytes (and its bias at most {})", lat, bytes, out, in, ggml_type_label(type), blocks, out * 4);
    }
  }
}

}  // namespace

void verify_scheme_sections(const nlohmann::json& record, const std::set<std::int64_t>& evaluated,
                            const std::string& source) {
  const std::optional<ModelConfig> config = record_config(record);
  const Evaluated evaluated_windows = evaluated_of(record, evaluated);
  for (const json& entry : record.at("schemes")) {
    const std::string name = entry.at("name").get<std::string>();
    const std::string where = fmt::format("{}: scheme {}", source, in_quotes(name));
    if (!entry.contains("description") || !entry["description"].is_object()) continue;
    const json& d = entry["description"];
    if (!d.contains("scheme")) continue;
    SchemeSpec spec;
    try {
      spec = scheme_from_json(d["scheme"], where + ": description.scheme");
    } catch (const Error& e) {
      fail("{} (the record's resolved spec does not parse)", e.what());
    }
    check_preset_spec(entry, name, spec, record, where);
    check_static_scales(d, spec, evaluated_windows, where);
    check_calibrated_weights(d, spec, evaluated_windows, where);
    check_imatrix(d, spec, where);
    check_kv_cache_error(d, spec, config, static_cast<std::int64_t>(evaluated.size()), where);
    check_layers(d, spec, config, where);
  }
}

}  // namespace qeval
