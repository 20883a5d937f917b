#include "eval/token_scores.h"

#include <cmath>

#include "common/error.h"
#include "common/json_integer.h"

namespace qeval {

nlohmann::json WindowScores::to_json() const {
  return {{"tokens", tokens},         {"nll_sum", nll_sum}, {"nll_sq_sum", nll_sq_sum}, {"diff_sum", diff_sum},
          {"diff_sq_sum", diff_sq_sum}, {"kl_sum", kl_sum},   {"top1_agree", top1_agree}, {"dp_sum", dp_sum}};
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
  return s;
}

std::vector<WindowScores> score_batch(const at::Tensor& log_probs, const at::Tensor& full_log_probs,
                                      const at::Tensor& targets, const std::vector<std::int64_t>& first_scored) {
  const std::int64_t B = log_probs.size(0), L = log_probs.size(1);
  TORCH_CHECK(targets.sizes() == at::IntArrayRef({B, L}), "score_batch: targets must be [", B, ", ", L, "]");
  TORCH_CHECK(static_cast<std::int64_t>(first_scored.size()) == B, "score_batch: first_scored has ",
              first_scored.size(), " entries for a batch of ", B);
  const bool paired = !log_probs.is_same(full_log_probs);
  const bool on_cpu = log_probs.device().is_cpu();
  // Position p predicts token p + 1: predictions [B, L−1, V] against targets [B, L−1].
  at::Tensor pred = log_probs.narrow(1, 0, L - 1);
  at::Tensor next = targets.narrow(1, 1, L - 1).to(at::kLong).to(log_probs.device()).unsqueeze(-1);
  at::Tensor nll_device = (-pred.gather(-1, next).squeeze(-1)).to(at::kDouble);  // [B, L−1]
  at::Tensor nll = nll_device.cpu().contiguous();
  at::Tensor full_nll, kl, kl_per_token, agree, dp;
  if (paired) {
    at::Tensor full_pred = full_log_probs.narrow(1, 0, L - 1);
    at::Tensor full_nll_device = (-full_pred.gather(-1, next).squeeze(-1)).to(at::kDouble);
    full_nll = full_nll_device.cpu().contiguous();
    // KL(P_full ‖ P_scheme) = Σ_v p_full (log p_full − log p_scheme). The terms are formed by
    // ATen. On the CPU the sum over the vocabulary runs below, sequentially in float64, because
    // ATen's reduction may split a row across threads differently for other batch or thread
    // counts. On a GPU it runs there, in float64 (the record says GPU results may differ in the
    // last bits for another batch size); only [B, L−1] values come back.
    at::Tensor terms = full_pred.exp() * (full_pred - pred);  // [B, L−1, V] float32
    if (on_cpu)
      kl = terms.contiguous();
    else
      kl_per_token = terms.sum(at::IntArrayRef{-1}, /*keepdim=*/false, at::kDouble).cpu().contiguous();  // [B, L−1]
    agree = pred.argmax(-1).eq(full_pred.argmax(-1)).to(at::kLong).cpu().contiguous();
    dp = (nll_device.neg().exp() - full_nll_device.neg().exp()).cpu().contiguous();
  }
  std::vector<WindowScores> rows(static_cast<std::size_t>(B));
  for (std::int64_t b = 0; b < B; ++b) {
    WindowScores& r = rows[static_cast<std::size_t>(b)];
    const std::int64_t from = first_scored[static_cast<std::size_t>(b)] - 1;  // prediction index of first scored target
    TORCH_CHECK(from >= 0 && from < L, "score_batch: first scored position ", from + 1, " outside window of ", L);
    const double* n = nll.data_ptr<double>() + b * (L - 1);
    for (std::int64_t p = from; p < L - 1; ++p) {
      r.tokens += 1;
      r.nll_sum += n[p];
      r.nll_sq_sum += n[p] * n[p];
    }
    if (!paired) continue;
    const double* fn = full_nll.data_ptr<double>() + b * (L - 1);
    const std::int64_t V = on_cpu ? kl.size(2) : 0;
    const float* k = on_cpu ? kl.data_ptr<float>() + b * (L - 1) * V : nullptr;
    const double* k_token = on_cpu ? nullptr : kl_per_token.data_ptr<double>() + b * (L - 1);
    const std::int64_t* a = agree.data_ptr<std::int64_t>() + b * (L - 1);
    const double* d = dp.data_ptr<double>() + b * (L - 1);
    for (std::int64_t p = from; p < L - 1; ++p) {
      double diff = n[p] - fn[p];
      r.diff_sum += diff;
      r.diff_sq_sum += diff * diff;
      double token_kl = 0;
      if (on_cpu)
        for (std::int64_t v = 0; v < V; ++v) token_kl += static_cast<double>(k[p * V + v]);
      else
        token_kl = k_token[p];
      r.kl_sum += token_kl;
      r.top1_agree += a[p];
      r.dp_sum += d[p];
    }
  }
  if (!paired)
    for (auto& r : rows) r.top1_agree = r.tokens;  // full precision agrees with itself
  return rows;
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
