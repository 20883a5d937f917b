// The scheme spec's own behaviour (quant/schemes/spec.h): names of its values, which linears it
// selects. Parsing and writing JSON: scheme_json.cpp; presets: presets.cpp.
#include "quant/schemes/spec.h"

#include <fmt/format.h>

namespace qeval {

int QuantSpec::bits() const {
  switch (kind) {
    case QuantKind::none: return 32;
    case QuantKind::int8_absmax: return 8;
    case QuantKind::int4_zeropoint: return gptq ? gptq->bits : 4;
    case QuantKind::fp8:
    case QuantKind::mx:
    case QuantKind::nvfp4: return element_format(element).bits();
    case QuantKind::ggml: return 4;  // nominal: the types differ per tensor (records name each)
  }
  return 32;
}

std::string ActivationCalibration::statistic_name() const {
  return percentile == 100 ? std::string("max") : fmt::format("percentile:{}", percentile);
}

std::string QuantSpec::granularity_name() const {
  if (granularity == Granularity::group) return fmt::format("group:{}", group_size);
  if (granularity == Granularity::block) return fmt::format("block:{}", group_size);
  return to_string(granularity);
}

bool SchemeSpec::quantizes_anything() const {
  return quantizes_linears() || kv_cache.enabled();
}

bool SchemeSpec::quantizes_linears() const {
  return weights.enabled() || input_activations.enabled() || output_activations.enabled();
}

bool SchemeSpec::selects(const std::string& name) const {
  if (!quantizes_linears()) return false;
  const bool in_blocks = name.rfind("layers.", 0) == 0;
  if (!(in_blocks || (name == "lm_head" && quantize_lm_head))) return false;
  auto ends_with = [&](const char* suffix) {
    const std::size_t n = std::char_traits<char>::length(suffix);
    return name.size() >= n && name.compare(name.size() - n, n, suffix) == 0;
  };
  if (!quantize_ssm_inner && (ends_with(".mamba.x_proj") || ends_with(".mamba.dt_proj"))) return false;
  if (!include.empty()) {
    bool any = false;
    for (const auto& p : include) any = any || glob_match(p, name);
    if (!any) return false;
  }
  for (const auto& p : exclude)
    if (glob_match(p, name)) return false;
  return true;
}

std::string to_string(QuantKind v) {
  switch (v) {
    case QuantKind::none: return "none";
    case QuantKind::int8_absmax: return "int8_absmax";
    case QuantKind::int4_zeropoint: return "int4_zeropoint";
    case QuantKind::fp8: return "fp8";
    case QuantKind::mx: return "mx";
    case QuantKind::nvfp4: return "nvfp4";
    case QuantKind::ggml: return "ggml";
  }
  return "?";
}

std::string to_string(Granularity v) {
  switch (v) {
    case Granularity::tensor: return "tensor";
    case Granularity::channel: return "channel";
    case Granularity::group: return "group";
    case Granularity::token: return "token";
    case Granularity::feature: return "feature";
    case Granularity::block: return "block";
  }
  return "?";
}

std::string to_string(KvCacheFormat v) {
  switch (v) {
    case KvCacheFormat::none: return "none";
    case KvCacheFormat::int8: return "int8";
    case KvCacheFormat::fp8_e4m3: return "fp8-e4m3";
    case KvCacheFormat::q8_0: return "q8_0";
    case KvCacheFormat::q4_0: return "q4_0";
    case KvCacheFormat::int4: return "int4";
  }
  return "?";
}

void apply_calibration_windows(SchemeSpec& spec, std::int64_t n) {
  if (spec.weights.gptq) spec.weights.gptq->windows = n;
  if (spec.weights.awq) spec.weights.awq->windows = n;
  if (spec.input_activations.calibration) spec.input_activations.calibration->windows = n;
}

std::string to_string(GptqActOrder v) {
  switch (v) {
    case GptqActOrder::none: return "none";
    case GptqActOrder::static_order: return "static";
    case GptqActOrder::group: return "group";
  }
  return "?";
}

std::string to_string(AwqDuo v) {
  switch (v) {
    case AwqDuo::off: return "off";
    case AwqDuo::on: return "on";
    case AwqDuo::both: return "both";
  }
  return "?";
}

std::string to_string(KeepRule v) {
  switch (v) {
    case KeepRule::first: return "first";
    case KeepRule::top_norm: return "top_norm";
  }
  return "?";
}

std::string to_string(ExecutionPreference v) {
  switch (v) {
    case ExecutionPreference::automatic: return "auto";
    case ExecutionPreference::reference: return "reference";
    case ExecutionPreference::kernel: return "kernel";
  }
  return "?";
}

bool glob_match(const std::string& pattern, const std::string& text) {
  // Iterative wildcard match with backtracking to the last '*'.
  std::size_t p = 0, t = 0, star = std::string::npos, mark = 0;
  while (t < text.size()) {
    if (p < pattern.size() && (pattern[p] == '?' || pattern[p] == text[t])) {
      ++p, ++t;
    } else if (p < pattern.size() && pattern[p] == '*') {
      star = p++, mark = t;
    } else if (star != std::string::npos) {
      p = star + 1, t = ++mark;
    } else {
      return false;
    }
  }
  while (p < pattern.size() && pattern[p] == '*') ++p;
  return p == pattern.size();
}

}  // namespace qeval
