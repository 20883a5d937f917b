// Hand-made result records for compare/check/plot tests: the fields those commands read
// (reports/compare.h, reports/check.h), schema_version so that read_record accepts them, and per-window
// rows consistent with every summary, so that they pass verify_record as records qeval writes do.
#pragma once

#include <nlohmann/json.hpp>

#include <cmath>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "eval/fidelity_summary.h"
#include "eval/percentiles.h"
#include "eval/position_buckets.h"
#include "eval/token_scores.h"
#include "quant/schemes/presets.h"
#include "quant/schemes/scheme_json.h"

namespace qeval::test {

struct HandScheme {
  std::string name;
  double ppl;
  double dppl;
  nlohmann::json statistics = nullptr;
};

// A statistics summary with the headline values and per-layer lists of `layers` equal values (so
// each headline is its per-layer mean, as records/statistics_verify.h requires); attention optional.
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
        {"inf_over_l2", {{"first", 0.5}, {"rest", 0.25},
                         {"per_layer", {{"first", per_layer(0.5)}, {"rest", per_layer(0.25)}}}}},
        {"largest_per_layer", std::vector<nlohmann::json>(static_cast<std::size_t>(layers),
                                                          {{"value", max_first}, {"abs", max_first}, {"channel", 0},
                                                           {"window", 0}, {"position", 0}})}}}};
  if (first_attn_pct)
    s["attention"] = {{"first_attn_pct", *first_attn_pct},
                      {"first_token_share", *first_attn_pct / 200.0},
                      {"sink_rate_pct", sink_rate_pct},
                      {"sink_eps", 0.3},
                      {"entropy", 1.25},
                      {"entropy_per_layer", per_layer(1.25)},
                      {"per_layer", {{"first_attn_pct", per_layer(*first_attn_pct)},
                                     {"first_token_share", per_layer(*first_attn_pct / 200.0)},
                                     {"sink_rate_pct", per_layer(sink_rate_pct)}}}};
  return s;
}

inline nlohmann::json hand_protocol(std::int64_t seq_len = 256) {
  return {{"name", "windows"}, {"seq_len", seq_len}, {"max_windows", 20}, {"bos_per_window", false},
          {"separator", "auto"}, {"sample_seed", nullptr}, {"windows", 20}, {"scored_tokens", 20 * (seq_len - 1)},
          {"token_stream_hash", "00112233aabbccdd"}, {"separator_id", 1}};
}

// A hand statistics summary's per-layer lists set to their headline values (null stays null), so
// that a headline a test changed is again the mean of its layers (records/statistics_verify.h).
inline void seal_statistics(nlohmann::json& st) {
  const std::size_t layers = st.at("layers").get<std::size_t>();
  auto fill = [layers](const nlohmann::json& headline) { return std::vector<nlohmann::json>(layers, headline); };
  for (const char* q : {"kurtosis", "max_abs", "inf_over_l2"}) {
    nlohmann::json& section = st["hidden"][q];
    for (const char* part : {"first", "rest"}) section["per_layer"][part] = fill(section[part]);
  }
  if (st.contains("attention") && st["attention"].is_object()) {
    nlohmann::json& a = st["attention"];
    for (const char* key : {"first_attn_pct", "first_token_share", "sink_rate_pct"}) a["per_layer"][key] = fill(a[key]);
    a["entropy_per_layer"] = fill(a["entropy"]);
  }
}

// Per-window rows that give a scheme's PPL (and its ΔPPL against full precision), and the
// summaries recomputed from them, so that the record passes verify_record (records/record_verify.h)
// exactly like one qeval wrote: every window scores seq_len − 1 tokens at a constant NLL of
// log(PPL). `sealed` rebuilds the rows and summaries of a record whose "ppl" (full precision) or
// "dppl" (other schemes) a test has changed, and the per-layer lists of the statistics headlines
// it changed, keeping everything else.
inline nlohmann::json sealed(nlohmann::json record) {
  const nlohmann::json& protocol = record.at("protocol");
  const std::int64_t windows = protocol.at("windows").get<std::int64_t>();
  const std::int64_t tokens = protocol.at("seq_len").get<std::int64_t>() - 1;
  auto& list = record.at("schemes");
  const double full_ppl = list.front().at("perplexity").at("ppl").get<double>();
  std::vector<std::map<std::int64_t, WindowScores>> rows;
  for (std::size_t i = 0; i < list.size(); ++i) {
    const double ppl = i == 0 ? full_ppl : full_ppl + list[i].at("vs_full").at("dppl").get<double>();
    const double nll = std::log(ppl), diff = nll - std::log(full_ppl);
    std::map<std::int64_t, WindowScores> r;
    for (std::int64_t w = 0; w < windows; ++w) {
      WindowScores s;
      s.tails = false;  // as a record written before the tails; add_tails gives a scheme them
      s.tokens = tokens;
      s.nll_sum = static_cast<double>(tokens) * nll;
      s.nll_sq_sum = static_cast<double>(tokens) * nll * nll;
      if (i > 0) {
        s.diff_sum = static_cast<double>(tokens) * diff;
        s.diff_sq_sum = static_cast<double>(tokens) * diff * diff;
        s.kl_sum = static_cast<double>(tokens) * std::fabs(diff);
        s.top1_agree = tokens - (diff > 0 ? 1 : 0);
        s.dp_sum = 0;
      } else {
        s.top1_agree = tokens;
      }
      r[w] = s;
    }
    rows.push_back(std::move(r));
  }
  const SchemeSummary full = summarize(rows.front());
  std::int64_t scored = 0;
  for (const auto& [w, r] : rows.front()) scored += r.tokens;
  for (std::size_t i = 0; i < list.size(); ++i) {
    const SchemeSummary s = summarize(rows[i]);
    // The numbers the test gave, exactly: they agree with what the rows give to ~1e-15, well
    // inside verify_record's 1e-9.
    const double dppl = i == 0 ? 0.0 : list[i].at("vs_full").at("dppl").get<double>();
    list[i]["perplexity"] = s.to_json();
    list[i]["perplexity"]["ppl"] = full_ppl + dppl;
    list[i]["vs_full"] = {{"dppl", dppl},
                          {"dppl_rel", dppl / full_ppl},
                          {"paired_dnll_mean", s.diff_mean},
                          {"paired_dnll_se", s.diff_se},
                          {"kl_mean", s.kl_mean},
                          {"top1_agreement", s.top1_agreement},
                          {"dp_correct_mean", s.dp_mean}};
    nlohmann::json per_window = nlohmann::json::object();
    for (const auto& [w, r] : rows[i]) per_window[std::to_string(w)] = r.to_json();
    list[i]["per_window"] = per_window;
    if (list[i].contains("statistics") && list[i]["statistics"].is_object()) {
      list[i]["statistics"]["windows"] = windows;
      seal_statistics(list[i]["statistics"]);
    }
  }
  record["protocol"]["scored_tokens"] = scored;
  return record;
}

// The resolved spec a record stores for a scheme: a preset's own (records are verified against it,
// records/scheme_sections_verify.h), or only the name for a scheme the tests make up.
inline nlohmann::json hand_scheme_spec(const std::string& name) {
  if (is_preset_name(name)) return scheme_to_json(preset_scheme(name));
  return {{"name", name}};
}

// Scheme `index` of a sealed hand record given the sections beyond the mean, as qeval writes them:
// rows with tails (KL |Δ| per token as sealed has it, Δp 0, no flips, the tokens in their position
// buckets), per_token from them with the KL percentiles of `kl_values` (one per scored token) and
// position_buckets. Every number passes verify_record.
inline void add_tails(nlohmann::json& record, std::size_t index, const std::vector<double>& kl_values) {
  nlohmann::json& scheme = record.at("schemes").at(index);
  std::map<std::int64_t, WindowScores> rows;
  for (const auto& [key, row] : scheme.at("per_window").items()) {
    WindowScores r = WindowScores::from_json(row);
    r.tails = true;
    const std::int64_t P = record.at("protocol").at("seq_len").get<std::int64_t>() - 1;
    const double k = r.kl_sum / static_cast<double>(r.tokens), d = r.diff_sum / static_cast<double>(r.tokens);
    r.kl_sq_sum = static_cast<double>(r.tokens) * k * k;
    r.rkl_sum = 0.5 * r.kl_sum;
    r.rkl_sq_sum = static_cast<double>(r.tokens) * 0.25 * k * k;
    r.buckets.clear();
    for (std::int64_t p = P - r.tokens; p < P; ++p) {
      const auto b = static_cast<std::size_t>(position_bucket(p));
      if (r.buckets.size() <= b) r.buckets.resize(b + 1);
      r.buckets[b].tokens += 1;
      r.buckets[b].diff_sum += d;
      r.buckets[b].diff_sq_sum += d * d;
      r.buckets[b].kl_sum += k;
    }
    scheme["per_window"][key] = r.to_json();
    rows[std::stoll(key)] = r;
  }
  const Distribution kl = distribution_of(kl_values), dp = distribution_of(std::vector<double>(kl_values.size(), 0.0));
  scheme["per_token"] = summarize_fidelity(rows)->to_json(kl, dp);
  scheme["position_buckets"] = nlohmann::json::array();
  for (const BucketSummary& b : summarize_buckets(rows)) scheme["position_buckets"].push_back(b.to_json());
}

inline nlohmann::json hand_record(const std::string& model_path, const std::string& softmax,
                                  std::optional<std::string> optimizer, const std::vector<HandScheme>& schemes,
                                  nlohmann::json protocol = hand_protocol(), const std::string& data_hash = "d0d0") {
  nlohmann::json config = {{"attention_softmax", softmax}};
  if (optimizer) config["optimizer"] = *optimizer;
  nlohmann::json list = nlohmann::json::array();
  for (const auto& s : schemes)
    list.push_back({{"name", s.name},
                    {"description", {{"execution", "fp32"}, {"scheme", hand_scheme_spec(s.name)}}},
                    {"perplexity", {{"ppl", s.ppl}}},
                    {"vs_full", {{"dppl", s.dppl}}},
                    {"statistics", s.statistics}});
  return sealed({{"schema_version", 1},
                 {"model", {{"path", model_path}, {"config", config}}},
                 {"data", {{"hash", data_hash}, {"text_split", "paragraph"}, {"json_field", "text"}}},
                 {"protocol", protocol},
                 {"precision", {{"dtype", "fp32"}, {"device", "cpu"}}},
                 {"schemes", list}});
}

}  // namespace qeval::test
