// Hand-made result records for compare/check/plot tests: exactly the fields those commands read
// (eval/compare.h, eval/check.h), plus schema_version so that read_record accepts them.
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

namespace qeval::test {

struct HandScheme {
  std::string name;
  double ppl;
  double dppl;
  nlohmann::json statistics = nullptr;
};

// A statistics summary with the headline values (and per-layer lists of `layers` equal values
// unless given); attention optional.
inline nlohmann::json hand_statistics(double kurtosis_first, double kurtosis_rest, double max_first, double max_rest,
                                      std::optional<double> first_attn_pct = 50.0, double sink_rate_pct = 40.0,
                                      int layers = 3) {
  auto per_layer = [layers](double v) { return std::vector<double>(layers, v); };
  nlohmann::json s = {
      {"windows", 4},
      {"layers", layers},
      {"hidden",
       {{"kurtosis", {{"first", kurtosis_first}, {"rest", kurtosis_rest},
                      {"per_layer", {{"first", per_layer(kurtosis_first)}, {"rest", per_layer(kurtosis_rest)}}}}},
        {"max_abs", {{"first", max_first}, {"rest", max_rest},
                     {"per_layer", {{"first", per_layer(max_first)}, {"rest", per_layer(max_rest)}}}}},
        {"inf_over_l2", {{"first", 0.5}, {"rest", 0.25}}}}}};
  if (first_attn_pct)
    s["attention"] = {{"first_attn_pct", *first_attn_pct},
                      {"first_token_share", *first_attn_pct / 200.0},
                      {"sink_rate_pct", sink_rate_pct},
                      {"sink_eps", 0.3},
                      {"entropy", 1.25},
                      {"per_layer", {{"first_attn_pct", per_layer(*first_attn_pct)},
                                     {"sink_rate_pct", per_layer(sink_rate_pct)}}}};
  return s;
}

inline nlohmann::json hand_protocol(std::int64_t seq_len = 256) {
  return {{"name", "windows"}, {"seq_len", seq_len}, {"max_windows", 20}, {"bos_per_window", false},
          {"separator", "auto"}, {"sample_seed", nullptr}, {"windows", 20}, {"scored_tokens", 20 * (seq_len - 1)},
          {"token_stream_hash", "00112233aabbccdd"}, {"separator_id", 1}};
}

inline nlohmann::json hand_record(const std::string& model_path, const std::string& softmax,
                                  std::optional<std::string> optimizer, const std::vector<HandScheme>& schemes,
                                  nlohmann::json protocol = hand_protocol(), const std::string& data_hash = "d0d0") {
  nlohmann::json config = {{"attention_softmax", softmax}};
  if (optimizer) config["optimizer"] = *optimizer;
  nlohmann::json list = nlohmann::json::array();
  for (const auto& s : schemes)
    list.push_back({{"name", s.name},
                    {"perplexity", {{"ppl", s.ppl}}},
                    {"vs_full", {{"dppl", s.dppl}}},
                    {"statistics", s.statistics}});
  return {{"schema_version", 1},
          {"model", {{"path", model_path}, {"config", config}}},
          {"data", {{"hash", data_hash}, {"text_split", "paragraph"}, {"json_field", "text"}}},
          {"protocol", protocol},
          {"precision", {{"dtype", "fp32"}, {"device", "cpu"}}},
          {"schemes", list}};
}

}  // namespace qeval::test
