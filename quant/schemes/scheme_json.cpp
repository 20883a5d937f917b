#include "quant/schemes/scheme_json.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <string>
#include <vector>

#include "common/error.h"
#include "common/json_integer.h"
#include "common/printable.h"
#include "common/strict_json.h"
#include "quant/schemes/ggml_rules.h"
#include "quant/schemes/json_reads.h"

namespace qeval {
namespace {

constexpr QuantKind kKinds[] = {QuantKind::none, QuantKind::int8_absmax, QuantKind::int4_zeropoint,
                                QuantKind::fp8,  QuantKind::mx,          QuantKind::nvfp4, QuantKind::ggml};
constexpr ExecutionPreference kExecutions[] = {ExecutionPreference::automatic, ExecutionPreference::reference,
                                               ExecutionPreference::kernel};

enum class Role { weights, input_activations, output_activations };

// The kinds whose JSON is a part of its own, beside the spec's types (quant/schemes/spec.h): the
// parser hands each its "weights" object, the scheme-level keys it owns, and the whole spec to
// validate. The parts depend on spec.h alone, never on this parser, so dependencies run one way:
// scheme_json -> part -> spec. A new family with keys of its own adds a row here.
struct SpecPart {
  QuantKind kind;
  const char* name;
  QuantSpec (*weights_from_json)(const nlohmann::json& j, const std::string& where);
  nlohmann::json (*weights_to_json)(const QuantSpec& q);
  bool (*owns_key)(const std::string& key);
  void (*keys_from_json)(const nlohmann::json& j, SchemeSpec& s, const std::string& source);
  void (*keys_to_json)(const SchemeSpec& s, nlohmann::json& j);
  void (*validate)(const SchemeSpec& s, const std::string& source);
};

const SpecPart kParts[] = {
    {QuantKind::ggml, "llama.cpp's types", ggml_weights_from_json, ggml_weights_to_json, is_ggml_scheme_key,
     ggml_scheme_keys_from_json, ggml_scheme_keys_to_json, validate_ggml_scheme},
};

const SpecPart* part_of(QuantKind kind) {
  for (const SpecPart& p : kParts)
    if (p.kind == kind) return &p;
  return nullptr;
}

bool owned_by_a_part(const std::string& key) {
  for (const SpecPart& p : kParts)
    if (p.owns_key(key)) return true;
  return false;
}


const char* role_name(Role r) {
  switch (r) {
    case Role::weights: return "weights";
    case Role::input_activations: return "input_activations";
    case Role::output_activations: return "output_activations";
  }
  return "?";
}

// Valid granularities per role and kind, as written in JSON.
std::vector<std::string> granularity_choices(Role r, QuantKind kind = QuantKind::int8_absmax) {
  if (kind == QuantKind::mx) return {"block:32"};
  if (kind == QuantKind::nvfp4) return {"block:16"};
  if (kind == QuantKind::fp8) return r == Role::weights ? std::vector<std::string>{"tensor", "channel"}
                                                        : std::vector<std::string>{"tensor", "token"};
  switch (r) {
    case Role::weights: return {"tensor", "channel", "group:<g>"};
    case Role::input_activations: return {"tensor", "token", "feature"};
    case Role::output_activations: return {"tensor", "token"};
  }
  return {};
}

// The block size each block format defines (OCP MX: 32; NVFP4: 16).
std::int64_t defined_block(QuantKind kind) { return kind == QuantKind::nvfp4 ? 16 : 32; }

bool granularity_allowed(Role r, Granularity g, QuantKind kind = QuantKind::int8_absmax) {
  if (kind == QuantKind::mx || kind == QuantKind::nvfp4) return g == Granularity::block && r != Role::output_activations;
  if (g == Granularity::block) return false;
  if (kind == QuantKind::fp8)
    return r == Role::weights ? (g == Granularity::tensor || g == Granularity::channel)
                              : r == Role::input_activations && (g == Granularity::tensor || g == Granularity::token);
  switch (r) {
    case Role::weights: return g == Granularity::tensor || g == Granularity::channel || g == Granularity::group;
    case Role::input_activations:
      return g == Granularity::tensor || g == Granularity::token || g == Granularity::feature;
    case Role::output_activations: return g == Granularity::tensor || g == Granularity::token;
  }
  return false;
}

// "group:128" / "block:32": the size after the colon, positive.
std::int64_t sized_granularity(const std::string& g, std::size_t prefix, const std::string& where,
                               const std::vector<std::string>& choices, const char* example) {
  const std::string digits = g.substr(prefix);
  const bool number =
      !digits.empty() && digits.size() <= 9 && digits.find_first_not_of("0123456789") == std::string::npos;
  QEVAL_CHECK(number && std::stoll(digits) > 0, "{}: granularity '{}' needs a positive size, e.g. {} (valid: {})", where,
              g, example, fmt::join(choices, ", "));
  return std::stoll(digits);
}

ActivationCalibration calibration_from_json(const nlohmann::json& j, const std::string& where) {
  QEVAL_CHECK(j.is_object(),
              "{}: calibration: expected an object like {{\"windows\": 16, \"statistic\": \"max\"}}, got {}", where,
              j.dump());
  for (auto it = j.begin(); it != j.end(); ++it)
    QEVAL_CHECK(it.key() == "windows" || it.key() == "statistic",
                "{}: calibration: unknown key '{}'; valid keys: windows, statistic", where, it.key());
  QEVAL_CHECK(j.contains("windows"), "{}: calibration needs \"windows\" (calibration windows, at least 1)", where);
  ActivationCalibration c;
  c.windows = json_integer(j.at("windows"), where + ": calibration.windows");
  QEVAL_CHECK(c.windows >= 1, "{}: calibration.windows should be at least 1 (full-precision windows that set the static "
              "scale), found {}", where, c.windows);
  const std::string statistic =
      j.contains("statistic") ? spec_string(j.at("statistic"), where + ": calibration.statistic", "max, percentile:P")
                              : "max";
  if (statistic != "max") {
    const std::string prefix = "percentile:";
    QEVAL_CHECK(statistic.rfind(prefix, 0) == 0 && statistic.size() > prefix.size(),
                "{}: calibration.statistic '{}' is not valid; valid: max, percentile:P with P in (0, 100]", where,
                statistic);
    std::size_t used = 0;
    double p = 0;
    bool underflow = false;
    const std::string number = statistic.substr(prefix.size());
    // A decimal number only: strtod would also read "0x10" as 16 and "inf". strtod, not std::stod:
    // stod throws on a subnormal result (ERANGE), so "percentile:4.9e-324", a number in (0, 100],
    // was refused as no number at all.
    if (!number.empty() && number.find_first_not_of("0123456789.eE+-") == std::string::npos) {
      char* end = nullptr;
      errno = 0;
      p = std::strtod(number.c_str(), &end);
      underflow = errno == ERANGE && p == 0;
      used = static_cast<std::size_t>(end - number.c_str());
    }
    QEVAL_CHECK(used == number.size(), "{}: calibration.statistic '{}': '{}' is not a decimal number; the percentile "
                "must be a number in (0, 100] (100 is the maximum)", where, statistic, number);
    QEVAL_CHECK(!underflow,
                "{}: calibration.statistic '{}': {} is below the smallest positive double and reads as 0; the "
                "percentile must be a number in (0, 100]", where, statistic, number);
    QEVAL_CHECK(std::isfinite(p) && p > 0 && p <= 100,
                "{}: calibration.statistic '{}': the percentile must be a number in (0, 100] (100 is the maximum), "
                "found {}", where, statistic, number);
    c.percentile = p;
  }
  return c;
}

// A weights spec's "gptq" settings (quant/schemes/spec.h GptqSpec); absent keys keep the defaults.
GptqSpec gptq_from_json(const nlohmann::json& j, const std::string& source) {
  const std::string where = source + ": gptq";
  QEVAL_CHECK(j.is_object(), "{}: expected an object like {{\"actorder\": \"static\", \"dampening\": 0.01}}, got {}",
              where, j.dump());
  static const std::vector<std::string> keys = {"symmetric", "dampening",  "block_size", "actorder",
                                                "group_params", "arithmetic", "calibration"};
  for (auto it = j.begin(); it != j.end(); ++it)
    QEVAL_CHECK(std::find(keys.begin(), keys.end(), it.key()) != keys.end(), "{}: unknown key '{}'; valid keys: {}",
                where, it.key(), fmt::join(keys, ", "));
  GptqSpec g;
  if (j.contains("symmetric")) {
    QEVAL_CHECK(j.at("symmetric").is_boolean(), "{}.symmetric: expected true or false, got {}", where,
                j.at("symmetric").dump());
    g.symmetric = j.at("symmetric").get<bool>();
  }
  if (j.contains("dampening")) {
    const nlohmann::json& d = j.at("dampening");
    QEVAL_CHECK(d.is_number() && d.get<double>() >= 0 && std::isfinite(d.get<double>()),
                "{}.dampening: expected a non-negative number (the fraction of mean diag H added to the diagonal; "
                "0.01 as the references), got {}", where, d.dump());
    g.dampening = d.get<double>();
  }
  if (j.contains("block_size")) {
    g.block_size = json_integer(j.at("block_size"), where + ".block_size");
    QEVAL_CHECK(g.block_size >= 1, "{}.block_size: expected a positive number of columns (128 as the references), "
                "got {}", where, g.block_size);
  }
  std::string group_params;
  if (j.contains("actorder")) {
    const std::string a = spec_string(j.at("actorder"), where + ".actorder", "none, static, group");
    if (a == "none")
      g.actorder = GptqActOrder::none;
    else if (a == "static")
      g.actorder = GptqActOrder::static_order;
    else if (a == "group")
      g.actorder = GptqActOrder::group;
    else
      fail("{}.actorder: unknown order '{}'; valid: none, static (llm-compressor's static / weight), group "
           "(AutoGPTQ's desc_act, llm-compressor's group)", where, a);
  }
  g.updated_group_params = g.actorder == GptqActOrder::group;
  if (j.contains("group_params")) {
    group_params = spec_string(j.at("group_params"), where + ".group_params", "original, updated");
    QEVAL_CHECK(group_params == "original" || group_params == "updated",
                "{}.group_params: unknown '{}'; valid: original (llm-compressor), updated (AutoGPTQ / GPTQModel)",
                where, group_params);
    const bool updated = group_params == "updated";
    QEVAL_CHECK(g.actorder == GptqActOrder::none || updated == (g.actorder == GptqActOrder::group),
                "{}.group_params '{}' contradicts actorder '{}', which takes its group parameters from the {} "
                "weights; leave group_params out", where, group_params, to_string(g.actorder),
                g.actorder == GptqActOrder::group ? "updated" : "original");
    g.updated_group_params = updated;
  }
  if (j.contains("arithmetic")) {
    const std::string a = spec_string(j.at("arithmetic"), where + ".arithmetic", "llm-compressor, autogptq");
    QEVAL_CHECK(a == "llm-compressor" || a == "autogptq",
                "{}.arithmetic: unknown '{}'; valid: llm-compressor (compressed-tensors' qparams), autogptq", where, a);
    g.autogptq_arithmetic = a == "autogptq";
  }
  if (j.contains("calibration")) {
    const nlohmann::json& c = j.at("calibration");
    QEVAL_CHECK(c.is_object() && c.size() == 1 && c.contains("windows"),
                "{}.calibration: expected {{\"windows\": N}} (N calibration windows), got {}", where, c.dump());
    g.windows = json_integer(c.at("windows"), where + ".calibration.windows");
    QEVAL_CHECK(g.windows >= 1, "{}.calibration.windows: expected at least 1 window, got {}", where, g.windows);
  }
  return g;
}

nlohmann::json gptq_to_json(const GptqSpec& g) {
  return {{"symmetric", g.symmetric},
          {"dampening", g.dampening},
          {"block_size", g.block_size},
          {"actorder", to_string(g.actorder)},
          {"group_params", g.updated_group_params ? "updated" : "original"},
          {"arithmetic", g.autogptq_arithmetic ? "autogptq" : "llm-compressor"},
          {"calibration", {{"windows", g.windows}}}};
}

// A weights spec's "awq" settings (quant/schemes/spec.h AwqSpec); absent keys keep the defaults.
AwqSpec awq_from_json(const nlohmann::json& j, const std::string& source) {
  const std::string where = source + ": awq";
  QEVAL_CHECK(j.is_object(), "{}: expected an object like {{\"duo_scaling\": true, \"n_grid\": 20}}, got {}", where,
              j.dump());
  static const std::vector<std::string> keys = {"duo_scaling", "n_grid", "calibration"};
  for (auto it = j.begin(); it != j.end(); ++it)
    QEVAL_CHECK(std::find(keys.begin(), keys.end(), it.key()) != keys.end(), "{}: unknown key '{}'; valid keys: {}",
                where, it.key(), fmt::join(keys, ", "));
  AwqSpec a;
  if (j.contains("duo_scaling")) {
    const nlohmann::json& d = j.at("duo_scaling");
    QEVAL_CHECK(d.is_boolean() || d == "both",
                "{}.duo_scaling: expected true (llm-compressor's default: scales from activations and weights), "
                "false (activations only) or \"both\" (every ratio tried each way), got {}", where, d.dump());
    a.duo_scaling = d.is_boolean() ? (d.get<bool>() ? AwqDuo::on : AwqDuo::off) : AwqDuo::both;
  }
  if (j.contains("n_grid")) {
    const std::int64_t n = json_integer(j.at("n_grid"), where + ".n_grid");
    QEVAL_CHECK(n >= 2 && n <= 1000, "{}.n_grid: expected 2 … 1000 grid points (20 as llm-compressor), got {}", where,
                n);
    a.n_grid = static_cast<int>(n);
  }
  if (j.contains("calibration")) {
    const nlohmann::json& c = j.at("calibration");
    QEVAL_CHECK(c.is_object() && c.size() == 1 && c.contains("windows"),
                "{}.calibration: expected {{\"windows\": N}} (N calibration windows), got {}", where, c.dump());
    a.windows = json_integer(c.at("windows"), where + ".calibration.windows");
    QEVAL_CHECK(a.windows >= 1, "{}.calibration.windows: expected at least 1 window, got {}", where, a.windows);
  }
  return a;
}

nlohmann::json awq_to_json(const AwqSpec& a) {
  const nlohmann::json duo = a.duo_scaling == AwqDuo::both ? nlohmann::json("both") : nlohmann::json(a.duo_scaling == AwqDuo::on);
  return {{"duo_scaling", duo}, {"n_grid", a.n_grid}, {"calibration", {{"windows", a.windows}}}};
}

QuantKind parse_kind(const std::string& s, const std::string& where) {
  for (auto k : kKinds)
    if (to_string(k) == s) return k;
  fail("{}: unknown kind '{}'; valid: none, int8_absmax, int4_zeropoint, fp8, mx, nvfp4, ggml (weights)", where, s);
}

QuantSpec quant_from_json(const nlohmann::json& j, Role role, const std::string& source) {
  const std::string where = fmt::format("{}: {}", source, role_name(role));
  QEVAL_CHECK(j.is_object(), "{}: expected an object like {{\"kind\": \"int8_absmax\", \"granularity\": \"{}\"}}, got {}",
              where, granularity_choices(role)[0], j.dump());
  QEVAL_CHECK(j.contains("kind"), "{}: missing \"kind\"; valid kinds: none, int8_absmax, int4_zeropoint, fp8, mx, nvfp4",
              where);
  QuantSpec q;
  try {
    q.kind = parse_kind(spec_string(j.at("kind"), where + ": kind"), where);
    if (const SpecPart* part = part_of(q.kind)) {
      QEVAL_CHECK(role == Role::weights, "{}: kind {} ({}) is for weights only", where, to_string(q.kind), part->name);
      return part->weights_from_json(j, where);
    }
    // The keys each kind reads; any other is an error (typos never pass silently).
    std::vector<std::string> valid = {"kind", "granularity", "bits"};
    if (q.is_float_format()) valid.push_back("element");
    if (q.kind == QuantKind::mx) valid.push_back("scale_rounding");
    if (role == Role::weights && q.kind == QuantKind::int4_zeropoint) valid.insert(valid.end(), {"method", "gptq", "awq"});
    if (role == Role::input_activations && (q.kind == QuantKind::int8_absmax || q.kind == QuantKind::fp8))
      valid.push_back("calibration");
    for (auto it = j.begin(); it != j.end(); ++it) {
      if (std::find(valid.begin(), valid.end(), it.key()) != valid.end()) continue;
      if (it.key() == "calibration")
        fail("{}: calibration (a static scale) applies to input_activations of kind int8_absmax or fp8 with "
             "granularity tensor; here the kind is {}", where, to_string(q.kind));
      fail("{}: unknown key '{}' for kind {}; valid keys: {}", where, it.key(), to_string(q.kind), fmt::join(valid, ", "));
    }
    QEVAL_CHECK(!q.is_float_format() || role != Role::output_activations,
                "{}: kind {} is not offered for output activations; valid kinds there: none, int8_absmax, int4_zeropoint",
                where, to_string(q.kind));
    if (q.enabled()) {
      const std::vector<std::string> choices = granularity_choices(role, q.kind);
      QEVAL_CHECK(j.contains("granularity"), "{}: kind {} needs a granularity; valid: {}", where, to_string(q.kind),
                  fmt::join(choices, ", "));
      const std::string g =
          spec_string(j.at("granularity"), where + ": granularity", fmt::format("{}", fmt::join(choices, ", ")));
      bool found = false;
      for (auto cand : {Granularity::tensor, Granularity::channel, Granularity::token, Granularity::feature}) {
        if (g == to_string(cand)) q.granularity = cand, found = true;
      }
      if (!found && g.rfind("group:", 0) == 0) {
        q.granularity = Granularity::group;
        q.group_size = sized_granularity(g, 6, where, choices, "group:128");
        found = true;
      }
      if (!found && g.rfind("block:", 0) == 0) {
        q.granularity = Granularity::block;
        q.group_size = sized_granularity(g, 6, where, choices, "block:32");
        found = true;
        QEVAL_CHECK(!granularity_allowed(role, q.granularity, q.kind) || q.group_size == defined_block(q.kind),
                    "{}: granularity '{}': {} defines blocks of {} elements only; valid: {}", where, g,
                    to_string(q.kind), defined_block(q.kind), fmt::join(choices, ", "));
      }
      QEVAL_CHECK(found && granularity_allowed(role, q.granularity, q.kind),
                  "{}: granularity '{}' is not valid for kind {}; valid: {}", where, g, to_string(q.kind),
                  fmt::join(choices, ", "));
    }
    if (q.is_float_format()) {
      const char* elements = q.kind == QuantKind::fp8 ? "e4m3, e5m2"
                             : q.kind == QuantKind::mx ? "e4m3, e5m2, e2m3, e3m2, e2m1"
                                                       : "e2m1";
      QEVAL_CHECK(q.kind == QuantKind::nvfp4 || j.contains("element"), "{}: kind {} needs an \"element\"; valid: {}",
                  where, to_string(q.kind), elements);
      const std::string name =
          j.contains("element") ? spec_string(j.at("element"), where + ": element", elements) : "e2m1";
      const std::optional<ElementType> element = parse_element_type(name);
      QEVAL_CHECK(element && std::string(elements).find(name) != std::string::npos,
                  "{}: element '{}' is not valid for kind {}; valid: {}", where, name, to_string(q.kind), elements);
      q.element = *element;
    }
    if (j.contains("scale_rounding")) {
      const std::string r = spec_string(j.at("scale_rounding"), where + ": scale_rounding", "floor, up");
      QEVAL_CHECK(r == "floor" || r == "up",
                  "{}: scale_rounding '{}' is not valid; valid: floor (OCP MX v1.0), up (Transformer Engine)", where, r);
      q.scale_round_up = r == "up";
    }
    if (j.contains("calibration")) {
      QEVAL_CHECK(q.granularity == Granularity::tensor,
                  "{}: calibration (a static scale) needs granularity tensor, found '{}'; a per-token, per-feature or "
                  "block scale is computed from each input and cannot be calibrated",
                  where, q.granularity_name());
      q.calibration = calibration_from_json(j.at("calibration"), where);
    }
    if (j.contains("method") || j.contains("gptq") || j.contains("awq")) {
      const std::string method =
          j.contains("method") ? spec_string(j.at("method"), where + ": method", "rtn, gptq, awq") : "rtn";
      QEVAL_CHECK(method == "rtn" || method == "gptq" || method == "awq",
                  "{}: method '{}' is not known; valid: rtn (round to nearest, the default), gptq, awq", where, method);
      for (const char* settings : {"gptq", "awq"})
        QEVAL_CHECK(method == settings || !j.contains(settings),
                    "{}: \"{}\" settings need \"method\": \"{}\" (the method here is {})", where, settings, settings,
                    method);
      if (method != "rtn")
        QEVAL_CHECK(q.granularity == Granularity::channel || q.granularity == Granularity::group,
                    "{}: method {} quantises per channel or in groups along the input (granularity channel or "
                    "group:g), found '{}'", where, method, q.granularity_name());
      if (method == "gptq") q.gptq = gptq_from_json(j.contains("gptq") ? j.at("gptq") : nlohmann::json::object(), where);
      if (method == "gptq" && j.contains("bits")) {
        const std::int64_t bits = json_integer(j.at("bits"), where + ": bits");
        QEVAL_CHECK(bits >= 2 && bits <= 4, "{}: bits {}: GPTQ's codes here are 2, 3 or 4 bits wide (held in the "
                    "4-bit container of int4_zeropoint); 8-bit GPTQ has no integer kind here yet", where, bits);
        q.gptq->bits = static_cast<int>(bits);
      }
      if (method == "awq") q.awq = awq_from_json(j.contains("awq") ? j.at("awq") : nlohmann::json::object(), where);
    }
    if (j.contains("bits"))
      QEVAL_CHECK(json_integer(j.at("bits"), where + ": bits") == q.bits(), "{}: bits {} disagrees with kind {} ({} bits){}",
                  where, j.at("bits").dump(), to_string(q.kind), q.bits(),
                  q.kind == QuantKind::int4_zeropoint ? "; 2 and 3 bits need \"method\": \"gptq\"" : "");
  } catch (const nlohmann::json::exception& e) {
    fail("{}: {}", where, e.what());
  }
  return q;
}

nlohmann::json quant_to_json(const QuantSpec& q) {
  if (!q.enabled()) return {{"kind", "none"}, {"bits", 32}};
  if (const SpecPart* part = part_of(q.kind)) return part->weights_to_json(q);
  nlohmann::json j = {{"kind", to_string(q.kind)}, {"bits", q.bits()}, {"granularity", q.granularity_name()}};
  // Written only for the kinds that have them, so records of the int8 and 4-bit schemes keep
  // their form.
  if (q.is_float_format()) j["element"] = to_string(q.element);
  if (q.kind == QuantKind::mx) j["scale_rounding"] = q.scale_round_up ? "up" : "floor";
  if (q.calibration) j["calibration"] = {{"windows", q.calibration->windows}, {"statistic", q.calibration->statistic_name()}};
  if (q.gptq) {
    j["method"] = "gptq";
    j["gptq"] = gptq_to_json(*q.gptq);
  }
  if (q.awq) {
    j["method"] = "awq";
    j["awq"] = awq_to_json(*q.awq);
  }
  return j;
}

// k of "keep_first_tokens" or of a "keep_tokens" rule: a non-negative JSON integer.
std::int64_t keep_count(const nlohmann::json& v, const std::string& where) {
  const std::int64_t k = json_integer(v, where);
  QEVAL_CHECK(k >= 0, "{} should be a non-negative integer (positions kept per sequence), found {}", where, k);
  return k;
}

KeepTokens keep_tokens_from_json(const nlohmann::json& j, const std::string& source) {
  const std::string where = source + ": keep_tokens";
  QEVAL_CHECK(j.is_object() && j.size() == 1,
              "{}: expected an object with one rule, {{\"first\": k}} or {{\"top_norm\": k}}, got {}", where, j.dump());
  KeepTokens keep;
  const std::string rule = j.begin().key();
  if (rule == "first")
    keep.rule = KeepRule::first;
  else if (rule == "top_norm")
    keep.rule = KeepRule::top_norm;
  else
    fail("{}: unknown rule '{}'; valid: first, top_norm", where, rule);
  keep.count = keep_count(j.begin().value(), where + "." + rule);
  return keep;
}

// "none" or "int8_absmax/channel", for errors.
std::string quant_text(const QuantSpec& q) {
  return q.enabled() ? fmt::format("{}/{}", to_string(q.kind), q.granularity_name()) : "none";
}

// T of "outlier_threshold": a non-negative JSON number, or null (no decomposition).
std::optional<double> outlier_threshold_from_json(const nlohmann::json& v, const std::string& source) {
  if (v.is_null()) return std::nullopt;
  QEVAL_CHECK(v.is_number(),
              "{}: outlier_threshold should be a non-negative number (or null for no decomposition), found {}", source,
              v.dump());
  return v.get<double>();
}

constexpr KvCacheFormat kKvFormats[] = {KvCacheFormat::int8, KvCacheFormat::fp8_e4m3, KvCacheFormat::q8_0,
                                        KvCacheFormat::q4_0, KvCacheFormat::int4};
constexpr const char* kKvFormatList = "int8, fp8-e4m3, q8_0, q4_0, int4";

// "kv_cache": {"format": ..., "group_size": g (int4), "keep_tokens": {"first": k}} (quant/schemes/spec.h).
KvCacheSpec kv_cache_from_json(const nlohmann::json& j, const std::string& source) {
  const std::string where = source + ": kv_cache";
  QEVAL_CHECK(j.is_object(), "{}: expected an object like {{\"format\": \"q8_0\"}}, got {}", where, j.dump());
  for (auto it = j.begin(); it != j.end(); ++it)
    QEVAL_CHECK(it.key() == "format" || it.key() == "group_size" || it.key() == "keep_tokens" || it.key() == "rotation",
                "{}: unknown key '{}'; valid keys: format, group_size (int4), keep_tokens, rotation", where, it.key());
  QEVAL_CHECK(j.contains("format"), "{}: missing \"format\"; valid: {}", where, kKvFormatList);
  KvCacheSpec kv;
  QEVAL_CHECK(j.at("format").is_string(), "{}.format: expected a string (valid: {}), got {}", where, kKvFormatList,
              j.at("format").dump());
  const std::string format = j.at("format").get<std::string>();
  bool found = false;
  for (auto f : kKvFormats)
    if (to_string(f) == format) kv.format = f, found = true;
  QEVAL_CHECK(found, "{}.format: unknown format '{}'; valid: {}", where, format, kKvFormatList);
  if (j.contains("group_size")) {
    QEVAL_CHECK(kv.format == KvCacheFormat::int4,
                "{}.group_size applies to format int4 only (q8_0 and q4_0 have llama.cpp's blocks of 32; int8 and "
                "fp8-e4m3 one scale per position and head); format here is {}", where, format);
    kv.group_size = json_integer(j.at("group_size"), where + ".group_size");
  }
  if (j.contains("keep_tokens")) {
    const nlohmann::json& keep = j.at("keep_tokens");
    QEVAL_CHECK(keep.is_object() && keep.size() == 1 && keep.contains("first"),
                "{}.keep_tokens: expected {{\"first\": k}} (K and V of positions 0..k-1 kept in full precision), got {}",
                where, keep.dump());
    kv.keep_first = json_integer(keep.at("first"), where + ".keep_tokens.first");
  }
  if (j.contains("rotation")) {
    const nlohmann::json& r = j.at("rotation");
    QEVAL_CHECK(r.is_string() && (r.get<std::string>() == "none" || r.get<std::string>() == "hadamard"),
                "{}.rotation: expected \"hadamard\" (llama.cpp's Walsh-Hadamard rotation of K and V) or \"none\", got {}",
                where, r.dump());
    kv.rotation = r.get<std::string>() == "hadamard" ? KvCacheRotation::hadamard : KvCacheRotation::none;
  }
  return kv;
}

nlohmann::json kv_cache_to_json(const KvCacheSpec& kv) {
  nlohmann::json j = {{"format", to_string(kv.format)}};
  if (kv.format == KvCacheFormat::int4) j["group_size"] = kv.group_size;
  j["keep_tokens"] = {{"first", kv.keep_first}};
  // Written only when on, so records of the unrotated presets keep their form.
  if (kv.rotation == KvCacheRotation::hadamard) j["rotation"] = "hadamard";
  return j;
}

void validate_kv_cache(const KvCacheSpec& kv, const std::string& source) {
  if (!kv.enabled()) return;
  QEVAL_CHECK(kv.group_size >= 1, "{}: kv_cache.group_size should be at least 1 (values per 4-bit group along "
              "head_dim), found {}", source, kv.group_size);
  QEVAL_CHECK(kv.keep_first >= 0, "{}: kv_cache.keep_tokens.first should be a non-negative integer (positions whose K "
              "and V stay in full precision), found {}", source, kv.keep_first);
}

std::vector<std::string> string_list(const nlohmann::json& j, const std::string& where) {
  QEVAL_CHECK(j.is_array(), "{}: expected a list of name patterns, got {}", where, j.dump());
  std::vector<std::string> out;
  for (const auto& e : j) {
    QEVAL_CHECK(e.is_string() && !e.get<std::string>().empty(), "{}: expected non-empty strings, got {}", where,
                e.dump());
    out.push_back(e.get<std::string>());
  }
  return out;
}

}  // namespace

bool is_rounding_variant_form(const std::string& name) {
  const std::size_t at = name.rfind("~r");
  if (at == std::string::npos || at == 0 || at + 2 == name.size()) return false;
  return std::all_of(name.begin() + static_cast<std::ptrdiff_t>(at + 2), name.end(),
                     [](char c) { return c >= '0' && c <= '9'; });
}

void validate_scheme(const SchemeSpec& s, const std::string& source) {
  // A scheme's name reaches tables, CSV, Markdown, gnuplot scripts and terminals: a control byte
  // (a newline above all) could forge a line in any of them, so it is refused where it is defined.
  QEVAL_CHECK(!s.name.empty() && !has_control_byte(s.name),
              "{}: \"name\" must be a non-empty name without control characters (newline, tab, escape ...), found {}",
              source, in_quotes(s.name));
  QEVAL_CHECK(!is_rounding_variant_form(s.name),
              "{}: \"name\" is {}, the form \"<scheme>~r<seed>\" that eval gives a scheme's rounding variants "
              "(--rounding-band), which records, compare and check read as part of that scheme's band; give the scheme "
              "another name",
              source, in_quotes(s.name));
  const std::pair<const QuantSpec*, Role> roles[] = {{&s.weights, Role::weights},
                                                     {&s.input_activations, Role::input_activations},
                                                     {&s.output_activations, Role::output_activations}};
  for (const auto& [q, role] : roles) {
    if (!q->enabled()) continue;
    if (part_of(q->kind)) continue;  // the part validates its own kind below
    QEVAL_CHECK(granularity_allowed(role, q->granularity, q->kind), "{}: {} granularity '{}' is not valid for kind {}; valid: {}",
                source, role_name(role), q->granularity_name(), to_string(q->kind),
                fmt::join(granularity_choices(role, q->kind), ", "));
    QEVAL_CHECK(q->granularity != Granularity::group || q->group_size >= 1, "{}: {} group size must be positive, got {}",
                source, role_name(role), q->group_size);
    QEVAL_CHECK(q->granularity != Granularity::block || q->group_size == defined_block(q->kind),
                "{}: {} granularity '{}': {} defines blocks of {} elements only", source, role_name(role),
                q->granularity_name(), to_string(q->kind), defined_block(q->kind));
    QEVAL_CHECK(q->kind != QuantKind::nvfp4 || q->element == ElementType::e2m1,
                "{}: {} element '{}' is not valid for kind nvfp4; valid: e2m1", source, role_name(role),
                to_string(q->element));
    QEVAL_CHECK(q->kind != QuantKind::fp8 || q->element == ElementType::e4m3 || q->element == ElementType::e5m2,
                "{}: {} element '{}' is not valid for kind fp8; valid: e4m3, e5m2", source, role_name(role),
                to_string(q->element));
    if (q->calibration) {
      QEVAL_CHECK(role == Role::input_activations && q->granularity == Granularity::tensor &&
                      (q->kind == QuantKind::int8_absmax || q->kind == QuantKind::fp8),
                  "{}: {} calibration (a static scale) needs input_activations of kind int8_absmax or fp8 with "
                  "granularity tensor; found {}/{}", source, role_name(role), to_string(q->kind), q->granularity_name());
      QEVAL_CHECK(q->calibration->windows >= 1, "{}: calibration.windows should be at least 1, found {}", source,
                  q->calibration->windows);
      const double p = q->calibration->percentile;
      QEVAL_CHECK(std::isfinite(p) && p > 0 && p <= 100,
                  "{}: calibration.statistic percentile must be in (0, 100], found {}", source, p);
    }
  }
  QEVAL_CHECK(!s.input_activations.is_static() || s.keep_tokens.rule == KeepRule::first || !s.keep_tokens.enabled(),
              "{}: a static activation scale (calibration) leaves out the kept positions of its calibration windows, "
              "which needs keep_tokens {{\"first\": k}}; top_norm positions are chosen per linear at run time",
              source);
  for (const auto* list : {&s.include, &s.exclude})
    for (const auto& p : *list) QEVAL_CHECK(!p.empty(), "{}: empty name pattern in include/exclude", source);
  for (const SpecPart& part : kParts) part.validate(s, source);
  QEVAL_CHECK(s.keep_tokens.count >= 0, "{}: keep_tokens.{} should be a non-negative integer, found {}", source,
              to_string(s.keep_tokens.rule), s.keep_tokens.count);
  QEVAL_CHECK(!s.keep_tokens.enabled() || s.input_activations.enabled() || s.output_activations.enabled(),
              "{}: keep_tokens {{\"{}\": {}}} (keep_first_tokens) needs activation quantisation, but input_activations "
              "and output_activations are both none: keeping positions in full precision would change nothing",
              source, to_string(s.keep_tokens.rule), s.keep_tokens.count);
  if (s.outlier_threshold) {
    const double t = *s.outlier_threshold;
    QEVAL_CHECK(!std::isnan(t) && t >= 0,
                "{}: outlier_threshold should be a non-negative number (input features with |x| >= T anywhere in a "
                "sequence run in fp32), found {}",
                source, t);
    // LLM.int8's decomposition is defined on its vector-wise scheme: per-token activation scales
    // from the non-outlier columns, per-row weight scales over the whole row.
    std::vector<std::string> found;
    if (!(s.weights.kind == QuantKind::int8_absmax && s.weights.granularity == Granularity::channel))
      found.push_back("weights " + quant_text(s.weights));
    if (!(s.input_activations.kind == QuantKind::int8_absmax && s.input_activations.granularity == Granularity::token))
      found.push_back("input_activations " + quant_text(s.input_activations));
    if (s.output_activations.enabled()) found.push_back("output_activations " + quant_text(s.output_activations));
    if (s.keep_tokens.enabled())
      found.push_back(fmt::format("keep_tokens {{\"{}\": {}}}", to_string(s.keep_tokens.rule), s.keep_tokens.count));
    QEVAL_CHECK(found.empty(),
                "{}: outlier_threshold {} (LLM.int8() mixed-precision decomposition) needs int8_absmax weights per "
                "channel, int8_absmax input_activations per token, output_activations none and no keep_tokens; "
                "found {}",
                source, t, fmt::join(found, ", "));
  }
  if (s.weights.gptq || s.weights.awq) {
    // GPTQ and AWQ calibrate weights on unquantised activations, and quantise the linears of the blocks.
    const std::string method = s.weights.method();
    QEVAL_CHECK(!(s.weights.gptq && s.weights.awq), "{}: weights have both gptq and awq settings; one method only",
                source);
    QEVAL_CHECK(s.weights.kind == QuantKind::int4_zeropoint &&
                    (s.weights.granularity == Granularity::channel || s.weights.granularity == Granularity::group),
                "{}: method {} needs weights of kind int4_zeropoint per channel or group:g, found {}", source, method,
                quant_text(s.weights));
    QEVAL_CHECK(!s.input_activations.enabled() && !s.output_activations.enabled(),
                "{}: method {} calibrates weight-only schemes here (W4A16, as its references); found "
                "input_activations {} and output_activations {}", source, method, quant_text(s.input_activations),
                quant_text(s.output_activations));
    QEVAL_CHECK(!s.quantize_lm_head, "{}: method {} quantises the blocks' linears (the references leave lm_head "
                "out); the LM head cannot be calibrated here, leave quantize_lm_head false", source, method);
  }
  if (s.weights.awq) {
    const AwqSpec& a = *s.weights.awq;
    const int least = a.duo_scaling == AwqDuo::off ? 2 : a.duo_scaling == AwqDuo::on ? 3 : 4;
    QEVAL_CHECK(a.n_grid >= least, "{}: awq.n_grid must be at least {} with duo_scaling {} (llm-compressor's grid), "
                "found {}", source, least, to_string(a.duo_scaling), a.n_grid);
    QEVAL_CHECK(a.windows >= 1, "{}: awq.calibration.windows must be positive, found {}", source, a.windows);
  }
  if (s.weights.gptq) {
    const GptqSpec& g = *s.weights.gptq;
    QEVAL_CHECK(g.dampening >= 0 && std::isfinite(g.dampening), "{}: gptq.dampening must be a non-negative number, "
                "found {}", source, g.dampening);
    QEVAL_CHECK(g.block_size >= 1 && g.windows >= 1, "{}: gptq.block_size and gptq.calibration.windows must be "
                "positive, found {} and {}", source, g.block_size, g.windows);
  }
  validate_kv_cache(s.kv_cache, source);
}

double outlier_threshold_for_json(double threshold) {
  return std::isinf(threshold) ? std::numeric_limits<double>::max() : threshold;
}

nlohmann::json scheme_to_json(const SchemeSpec& s) {
  nlohmann::json j = {{"name", s.name},
          {"description", s.description},
          {"weights", quant_to_json(s.weights)},
          {"input_activations", quant_to_json(s.input_activations)},
          {"output_activations", quant_to_json(s.output_activations)},
          {"quantize_lm_head", s.quantize_lm_head},
          {"include", s.include},
          {"exclude", s.exclude},
          {"execution", to_string(s.execution)},
          {"keep_tokens", {{to_string(s.keep_tokens.rule), s.keep_tokens.count}}},
          {"outlier_threshold", s.outlier_threshold ? nlohmann::json(outlier_threshold_for_json(*s.outlier_threshold))
                                                    : nlohmann::json(nullptr)}};
  for (const SpecPart& part : kParts) part.keys_to_json(s, j);  // a part's keys, written only when set
  if (s.quantize_ssm_inner) j["quantize_ssm_inner"] = true;  // absent: false (records of earlier models unchanged)
  if (s.kv_cache.enabled()) j["kv_cache"] = kv_cache_to_json(s.kv_cache);  // absent: K and V unquantised
  return j;
}

SchemeSpec scheme_from_json(const nlohmann::json& j, const std::string& source) {
  static const std::vector<std::string> keys = {"name",    "description", "weights",   "input_activations",
                                                "output_activations", "quantize_lm_head", "quantize_ssm_inner", "include", "exclude",
                                                "execution", "keep_first_tokens", "keep_tokens",
                                                "outlier_threshold", "kv_cache"};
  QEVAL_CHECK(j.is_object(), "{}: a scheme spec must be a JSON object, got {}", source, j.type_name());
  for (auto it = j.begin(); it != j.end(); ++it)
    QEVAL_CHECK(std::find(keys.begin(), keys.end(), it.key()) != keys.end() || owned_by_a_part(it.key()),
                "{}: unknown key '{}'; valid keys: {}, tensor_types, quantize_embedding", source, it.key(),
                fmt::join(keys, ", "));
  SchemeSpec s;
  try {
    if (j.contains("name")) s.name = spec_string(j.at("name"), source + ": name");
    if (j.contains("description")) s.description = spec_string(j.at("description"), source + ": description");
    if (j.contains("weights")) s.weights = quant_from_json(j.at("weights"), Role::weights, source);
    if (j.contains("input_activations"))
      s.input_activations = quant_from_json(j.at("input_activations"), Role::input_activations, source);
    if (j.contains("output_activations"))
      s.output_activations = quant_from_json(j.at("output_activations"), Role::output_activations, source);
    if (j.contains("quantize_lm_head"))
      s.quantize_lm_head = spec_bool(j.at("quantize_lm_head"), source + ": quantize_lm_head");
    if (j.contains("quantize_ssm_inner"))
      s.quantize_ssm_inner = spec_bool(j.at("quantize_ssm_inner"), source + ": quantize_ssm_inner");
    if (j.contains("include")) s.include = string_list(j.at("include"), source + ": include");
    if (j.contains("exclude")) s.exclude = string_list(j.at("exclude"), source + ": exclude");
    for (const SpecPart& part : kParts) part.keys_from_json(j, s, source);
    if (j.contains("execution")) {
      const std::string e = spec_string(j.at("execution"), source + ": execution", "auto, reference, kernel");
      bool found = false;
      for (auto cand : kExecutions)
        if (to_string(cand) == e) s.execution = cand, found = true;
      QEVAL_CHECK(found, "{}: unknown execution '{}'; valid: auto, reference, kernel", source, e);
    }
    QEVAL_CHECK(!(j.contains("keep_first_tokens") && j.contains("keep_tokens")),
                "{}: give keep_first_tokens or keep_tokens, not both "
                "(keep_first_tokens: k is keep_tokens: {{\"first\": k}})",
                source);
    if (j.contains("keep_first_tokens"))
      s.keep_tokens = {KeepRule::first, keep_count(j.at("keep_first_tokens"), source + ": keep_first_tokens")};
    if (j.contains("keep_tokens")) s.keep_tokens = keep_tokens_from_json(j.at("keep_tokens"), source);
    if (j.contains("outlier_threshold"))
      s.outlier_threshold = outlier_threshold_from_json(j.at("outlier_threshold"), source);
    if (j.contains("kv_cache")) s.kv_cache = kv_cache_from_json(j.at("kv_cache"), source);
  } catch (const nlohmann::json::exception& e) {
    fail("{}: {}", source, e.what());
  }
  validate_scheme(s, source);
  return s;
}

}  // namespace qeval
