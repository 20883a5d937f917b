#include "eval/fidelity_summary.h"

#include <cmath>

namespace qeval {

ValueAndUncertainty llama_mean_and_uncertainty(double sum, double sum2, std::int64_t count) {
  if (count < 1) return {};
  const double n = static_cast<double>(count);
  const double f = sum / n;
  double df = sum2 / n - f * f;
  df = df > 0 && count > 10 ? std::sqrt(df / (n - 1)) : 0.0;
  return {f, df};
}

ValueAndUncertainty rate_and_uncertainty(std::int64_t k, std::int64_t n) {
  if (n < 1) return {};
  const double r = static_cast<double>(k) / static_cast<double>(n);
  return {r, n > 1 ? std::sqrt(r * (1.0 - r) / static_cast<double>(n - 1)) : 0.0};
}

std::optional<FidelitySummary> summarize_fidelity(const std::map<std::int64_t, WindowScores>& rows) {
  WindowScores t;
  for (const auto& [index, r] : rows) {  // ascending window index
    if (!r.tails) return std::nullopt;
    t.tokens += r.tokens;
    t.kl_sum += r.kl_sum;
    t.kl_sq_sum += r.kl_sq_sum;
    t.rkl_sum += r.rkl_sum;
    t.rkl_sq_sum += r.rkl_sq_sum;
    t.dp_sum += r.dp_sum;
    t.dp_sq_sum += r.dp_sq_sum;
    t.dp_4_sum += r.dp_4_sum;
    t.top1_agree += r.top1_agree;
    t.top1_lost += r.top1_lost;
    t.top1_gained += r.top1_gained;
  }
  if (t.tokens == 0) return std::nullopt;
  FidelitySummary s;
  s.tokens = t.tokens;
  s.kl = llama_mean_and_uncertainty(t.kl_sum, t.kl_sq_sum, t.tokens);
  s.reverse_kl = llama_mean_and_uncertainty(t.rkl_sum, t.rkl_sq_sum, t.tokens);
  s.dp = llama_mean_and_uncertainty(t.dp_sum, t.dp_sq_sum, t.tokens);
  const ValueAndUncertainty mse = llama_mean_and_uncertainty(t.dp_sq_sum, t.dp_4_sum, t.tokens);
  s.dp_rms.value = std::sqrt(mse.value);
  s.dp_rms.uncertainty = s.dp_rms.value > 0 ? 0.5 / s.dp_rms.value * mse.uncertainty : 0.0;
  s.same_top = rate_and_uncertainty(t.top1_agree, t.tokens);
  s.lost = t.top1_lost;
  s.gained = t.top1_gained;
  s.top1_lost = rate_and_uncertainty(t.top1_lost, t.tokens);
  s.top1_gained = rate_and_uncertainty(t.top1_gained, t.tokens);
  return s;
}

nlohmann::json FidelitySummary::to_json(const std::optional<Distribution>& kl_values,
                                        const std::optional<Distribution>& dp_values) const {
  auto mean = [](const ValueAndUncertainty& v) { return nlohmann::json{{"mean", v.value}, {"uncertainty", v.uncertainty}}; };
  nlohmann::json kl_json = mean(kl), dp_json = mean(dp);
  if (kl_values) kl_json["percentiles"] = kl_values->to_json();
  if (dp_values) dp_json["percentiles"] = dp_values->to_json();
  return {{"tokens", tokens},
          {"kl", kl_json},
          {"reverse_kl", mean(reverse_kl)},
          {"dp", dp_json},
          {"dp_rms", {{"value", dp_rms.value}, {"uncertainty", dp_rms.uncertainty}}},
          {"same_top", {{"rate", same_top.value}, {"uncertainty", same_top.uncertainty}}},
          {"top1_flips",
           {{"lost", {{"count", lost}, {"rate", top1_lost.value}, {"uncertainty", top1_lost.uncertainty}}},
            {"gained", {{"count", gained}, {"rate", top1_gained.value}, {"uncertainty", top1_gained.uncertainty}}}}},
          {"values", kl_values ? nlohmann::json{{"dtype", "float64"},
                                                {"rule", "llama.cpp: sorted, linear interpolation at fraction·(n − 1)"}}
                               : nlohmann::json(nullptr)}};
}

}  // namespace qeval
