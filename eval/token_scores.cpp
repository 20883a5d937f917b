#include "eval/token_scores.h"

#include <cmath>

#include "common/error.h"
#include "common/json_integer.h"

namespace qeval {

nlohmann::json WindowScores::to_json() const {
  nlohmann::json j = {{"tokens", tokens},         {"nll_sum", nll_sum}, {"nll_sq_sum", nll_sq_sum}, {"diff_sum", diff_sum},
                      {"diff_sq_sum", diff_sq_sum}, {"kl_sum", kl_sum},   {"top1_agree", top1_agree}, {"dp_sum", dp_sum}};
  if (!tails) return j;
  j["kl_sq_sum"] = kl_sq_sum;
  j["rkl_sum"] = rkl_sum;
  j["rkl_sq_sum"] = rkl_sq_sum;
  j["dp_sq_sum"] = dp_sq_sum;
  j["dp_4_sum"] = dp_4_sum;
  j["top1_lost"] = top1_lost;
  j["top1_gained"] = top1_gained;
  nlohmann::json b = nlohmann::json::array();  // [tokens, Σd, Σd², ΣKL] per bucket
  for (const BucketScores& x : buckets) b.push_back({x.tokens, x.diff_sum, x.diff_sq_sum, x.kl_sum});
  j["buckets"] = b;
  return j;
}

WindowScores WindowScores::from_json(const nlohmann::json& j) {
  WindowScores s;
  s.tokens = json_integer(j.at("tokens"), "window scores: tokens");
  s.nll_sum = j.at("nll_sum").get<double>();
  s.nll_sq_sum = j.at("nll_sq_sum").get<double>();
  s.diff_sum = j.at("diff_sum").get<double>();
  s.diff_sq_sum = j.at("diff_sq_sum").get<double>();
  s.kl_sum = j.at("kl_sum").get<double>();
  s.top1_agree = json_integer(j.at("top1_agree"), "window scores: top1_agree");
  s.dp_sum = j.at("dp_sum").get<double>();
  s.tails = j.contains("kl_sq_sum");
  if (!s.tails) return s;
  s.kl_sq_sum = j.at("kl_sq_sum").get<double>();
  s.rkl_sum = j.at("rkl_sum").get<double>();
  s.rkl_sq_sum = j.at("rkl_sq_sum").get<double>();
  s.dp_sq_sum = j.at("dp_sq_sum").get<double>();
  s.dp_4_sum = j.at("dp_4_sum").get<double>();
  s.top1_lost = json_integer(j.at("top1_lost"), "window scores: top1_lost");
  s.top1_gained = json_integer(j.at("top1_gained"), "window scores: top1_gained");
  for (const auto& b : j.at("buckets")) {
    QEVAL_CHECK(b.is_array() && b.size() == 4, "window scores: a bucket should be [tokens, diff_sum, diff_sq_sum, kl_sum], found {}",
                b.dump());
    s.buckets.push_back({json_integer(b[0], "window scores: bucket tokens"), b[1].get<double>(), b[2].get<double>(),
                         b[3].get<double>()});
  }
  return s;
}

namespace {
// Standard error of a mean from sums: sample variance (n − 1) over n. Per-token NLLs within a
// window are correlated, so this understates the true uncertainty, as llama.cpp's does.
double standard_error(double sum, double sq_sum, std::int64_t n) {
  if (n < 2) return 0.0;
  double mean = sum / static_cast<double>(n);
  double var = (sq_sum - static_cast<double>(n) * mean * mean) / static_cast<double>(n - 1);
  return std::sqrt(std::max(var, 0.0) / static_cast<double>(n));
}
}  // namespace

SchemeSummary summarize(const std::map<std::int64_t, WindowScores>& rows) {
  WindowScores total;
  for (const auto& [index, r] : rows) {  // std::map iterates in ascending window index
    total.tokens += r.tokens;
    total.nll_sum += r.nll_sum;
    total.nll_sq_sum += r.nll_sq_sum;
    total.diff_sum += r.diff_sum;
    total.diff_sq_sum += r.diff_sq_sum;
    total.kl_sum += r.kl_sum;
    total.top1_agree += r.top1_agree;
    total.dp_sum += r.dp_sum;
  }
  SchemeSummary s;
  s.windows = static_cast<std::int64_t>(rows.size());
  s.tokens = total.tokens;
  if (total.tokens == 0) return s;
  const double n = static_cast<double>(total.tokens);
  s.nll_mean = total.nll_sum / n;
  s.nll_se = standard_error(total.nll_sum, total.nll_sq_sum, total.tokens);
  s.ppl = std::exp(s.nll_mean);
  s.ppl_low = std::exp(s.nll_mean - 1.96 * s.nll_se);
  s.ppl_high = std::exp(s.nll_mean + 1.96 * s.nll_se);
  s.diff_mean = total.diff_sum / n;
  s.diff_se = standard_error(total.diff_sum, total.diff_sq_sum, total.tokens);
  s.kl_mean = total.kl_sum / n;
  s.top1_agreement = static_cast<double>(total.top1_agree) / n;
  s.dp_mean = total.dp_sum / n;
  return s;
}

nlohmann::json SchemeSummary::to_json() const {
  return {{"windows", windows},
          {"tokens", tokens},
          {"nll_mean", nll_mean},
          {"nll_se", nll_se},
          {"ppl", ppl},
          {"ppl_ci95", {ppl_low, ppl_high}},
          {"ppl_pm", ppl * nll_se},
          {"paired_dnll_mean", diff_mean},
          {"paired_dnll_se", diff_se},
          {"kl_mean", kl_mean},
          {"top1_agreement", top1_agreement},
          {"dp_correct_mean", dp_mean}};
}

}  // namespace qeval
