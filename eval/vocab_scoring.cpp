#include "eval/vocab_scoring.h"

#include <ATen/Parallel.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "common/error.h"
#include "eval/position_buckets.h"

namespace qeval {

VocabScorer::VocabScorer(const at::Tensor& targets, std::size_t schemes, Path path)
    : path_(path), rows_(kernels::cpu::vocab_row_kernels(kernels::cpu::widest_cpu_isa())), running_(schemes) {
  TORCH_CHECK(targets.dim() == 2 && targets.size(1) >= 1, "VocabScorer: targets must be [B, L] with L >= 1, got ",
              targets.sizes());
  TORCH_CHECK(schemes >= 1, "VocabScorer: no scheme to score");
  B_ = targets.size(0);
  P_ = targets.size(1) - 1;
  targets_ = targets.narrow(1, 1, P_).to(at::kLong).reshape({-1}).contiguous();  // position p predicts token p + 1
}

void VocabScorer::add(std::size_t s, std::int64_t begin, std::int64_t p0, const at::Tensor& logits) {
  TORCH_CHECK(s < running_.size(), "VocabScorer: scheme ", s, " of ", running_.size());
  TORCH_CHECK(logits.dim() == 3 && logits.size(0) == B_ && p0 >= 0 && p0 + logits.size(1) <= P_,
              "VocabScorer: logits must be [", B_, ", np, n] for positions from ", p0, " within ", P_, ", got ",
              logits.sizes());
  const std::int64_t np = logits.size(1), n = logits.size(2), R = B_ * P_;
  const at::Tensor l = logits.reshape({B_ * np, n}).to(at::kFloat).contiguous();
  if (targets_.device() != l.device()) targets_ = targets_.to(l.device());
  Running& r = running_[s];
  if (!r.m.defined()) {
    const auto f32 = l.options().dtype(at::kFloat);
    const auto f64 = l.options().dtype(at::kDouble);
    r.m = at::full({R}, -std::numeric_limits<float>::infinity(), f32);
    r.S = at::zeros({R}, f64);
    r.A = at::zeros({R}, f64);
    r.Bs = at::zeros({R}, f64);
    r.target = at::full({R}, std::numeric_limits<float>::quiet_NaN(), f32);
    r.best = at::full({R}, -std::numeric_limits<float>::infinity(), f32);
    r.best_index = at::zeros({R}, l.options().dtype(at::kLong));
  }
  if (s == 0) {
    block_begin_ = begin;
    span_begin_ = p0;
  } else {
    TORCH_CHECK(begin == block_begin_ && p0 == span_begin_, "VocabScorer: scheme ", s, " sent rows from ", begin,
                " at position ", p0, " before full precision's (", block_begin_, ", ", span_begin_, ")");
  }
  if (l.is_cpu() && path_ == Path::automatic)
    add_rows(s, begin, p0, np, l);
  else
    add_aten(s, begin, p0, np, l);
}

void VocabScorer::add_rows(std::size_t s, std::int64_t begin, std::int64_t p0, std::int64_t np, const at::Tensor& l) {
  const std::int64_t rows = l.size(0), n = l.size(1);
  const bool keep_full = s == 0 && running_.size() > 1;  // the schemes after it need its exponentials
  if (keep_full) {
    if (row_exp_.size() < static_cast<std::size_t>(rows * n)) row_exp_.resize(static_cast<std::size_t>(rows * n));
    row_rescale_.resize(static_cast<std::size_t>(rows));
    full_logits_ = l;
  }
  Running& r = running_[s];
  float* m = r.m.data_ptr<float>();
  double* S = r.S.data_ptr<double>();
  double* A = r.A.data_ptr<double>();
  double* Bs = r.Bs.data_ptr<double>();
  float* target = r.target.data_ptr<float>();
  float* best = r.best.data_ptr<float>();
  std::int64_t* best_index = r.best_index.data_ptr<std::int64_t>();
  const std::int64_t* targets = targets_.data_ptr<std::int64_t>();
  const float* logits = l.data_ptr<float>();
  float* full_exp = row_exp_.data();
  const float* full_logits = s == 0 ? nullptr : full_logits_.data_ptr<float>();
  double* full_rescale = row_rescale_.data();
  const kernels::cpu::VocabRowKernels k = rows_;
  // One thread per row: every value below is computed in one fixed order whatever the threads.
  at::parallel_for(0, rows, 4, [&](std::int64_t i0, std::int64_t i1) {
    // A scheme's own exponentials of one row, for the reverse KL: reused row after row in cache.
    std::vector<float> own_exp(s > 0 ? static_cast<std::size_t>(n) : 0);
    for (std::int64_t i = i0; i < i1; ++i) {
      const float* row = logits + i * n;
      const std::int64_t slot = (i / np) * P_ + p0 + i % np;  // position p of sequence b is row b·P + p
      std::int64_t first = 0;
      const float block_max = k.max_first(row, n, &first);
      // Top-1: a later block wins only when strictly larger, so ties go to the lowest index.
      if (block_max > best[slot]) {
        best[slot] = block_max;
        best_index[slot] = begin + first;
      }
      if (targets[slot] >= begin && targets[slot] < begin + n) target[slot] = row[targets[slot] - begin];
      const float m_old = m[slot];
      const float m_new = std::isnan(block_max) ? block_max : std::max(m_old, block_max);
      const double rescale = std::exp(static_cast<double>(m_old) - static_cast<double>(m_new));  // 0 on the first block
      float* e = keep_full ? full_exp + i * n : (s > 0 ? own_exp.data() : nullptr);
      S[slot] = S[slot] * rescale + k.exp_sum(row, n, m_new, e);
      m[slot] = m_new;
      if (keep_full) {
        full_rescale[i] = rescale;
      } else if (s > 0) {
        A[slot] = A[slot] * full_rescale[i] + k.weighted_difference_sum(full_logits + i * n, full_exp + i * n, row, n);
        Bs[slot] = Bs[slot] * rescale + k.weighted_difference_sum(row, e, full_logits + i * n, n);
      }
    }
  });
}

void VocabScorer::add_aten(std::size_t s, std::int64_t begin, std::int64_t p0, std::int64_t np, const at::Tensor& l) {
  const std::int64_t n = l.size(1);
  Running& r = running_[s];
  auto row_sums = [](const at::Tensor& x) { return x.sum(at::IntArrayRef{-1}, /*keepdim=*/false, at::kDouble); };
  // The rows of this span in the running state: position p of sequence b is row b·P + p.
  const at::Tensor rows = (at::arange(B_, targets_.options()).unsqueeze(1) * P_ +
                           at::arange(p0, p0 + np, targets_.options()).unsqueeze(0)).reshape({-1});
  const at::Tensor targets = targets_.index_select(0, rows);
  at::Tensor block_max, block_arg;
  std::tie(block_max, block_arg) = l.max(-1);
  // Top-1: a later block wins only when strictly larger, so ties go to the lowest index.
  const at::Tensor best = r.best.index_select(0, rows);
  const at::Tensor better = block_max > best;
  r.best.index_copy_(0, rows, at::where(better, block_max, best));
  r.best_index.index_copy_(0, rows, at::where(better, block_arg + begin, r.best_index.index_select(0, rows)));
  const at::Tensor in_block = (targets >= begin).logical_and(targets < begin + n);
  const at::Tensor local = (targets - begin).clamp(0, n - 1).unsqueeze(1);
  r.target.index_copy_(0, rows, at::where(in_block, l.gather(1, local).squeeze(1), r.target.index_select(0, rows)));

  const at::Tensor m_old = r.m.index_select(0, rows);
  const at::Tensor m_new = at::maximum(m_old, block_max);
  const at::Tensor rescale = (m_old.to(at::kDouble) - m_new.to(at::kDouble)).exp();  // exp(−inf) = 0 on the first block
  // In place where a temporary is ours: each pass over a [rows, n] block is a pass through memory
  // (the block is larger than the caches), and the values are the same as out of place.
  at::Tensor e = (l - m_new.unsqueeze(1)).exp_();
  r.S.index_copy_(0, rows, r.S.index_select(0, rows) * rescale + row_sums(e));
  r.m.index_copy_(0, rows, m_new);
  if (s == 0) {
    if (running_.size() > 1) {
      full_logits_ = l;
      full_exp_ = std::move(e);
      full_rescale_ = rescale;
    }
  } else {
    r.Bs.index_copy_(0, rows, r.Bs.index_select(0, rows) * rescale + row_sums((l - full_logits_).mul_(e)));
    e = at::Tensor();  // before the forward KL's terms: one temporary of the span at a time
    r.A.index_copy_(0, rows, r.A.index_select(0, rows) * full_rescale_ + row_sums((full_logits_ - l).mul_(full_exp_)));
  }
}

void VocabScorer::end_block() {
  full_logits_ = at::Tensor();
  full_exp_ = at::Tensor();
}

std::vector<TokenValues> VocabScorer::finish() const {
  std::vector<TokenValues> out(running_.size());
  if (P_ == 0) {  // a one-token window predicts nothing
    for (TokenValues& v : out) {
      v.nll = v.kl = v.rkl = v.dp = at::zeros({B_, 0}, at::kDouble);
      v.agree = v.right = at::zeros({B_, 0}, at::kLong);
    }
    return out;
  }
  const Running& f = running_.front();
  TORCH_CHECK(f.m.defined(), "VocabScorer: no logits were added");
  const at::Tensor Z_f = f.m.to(at::kDouble) + f.S.log();
  const at::Tensor t_f = f.target.to(at::kDouble);
  for (std::size_t s = 0; s < running_.size(); ++s) {
    const Running& r = running_[s];
    TORCH_CHECK(r.m.defined(), "VocabScorer: scheme ", s, " was never scored");
    const at::Tensor Z = r.m.to(at::kDouble) + r.S.log();
    const at::Tensor t = r.target.to(at::kDouble);
    TokenValues& v = out[s];
    v.nll = (Z - t);
    v.right = r.best_index.eq(targets_).to(at::kLong);
    if (s == 0) {
      v.kl = at::zeros_like(v.nll);
      v.rkl = at::zeros_like(v.nll);
      v.dp = at::zeros_like(v.nll);
      v.agree = at::ones_like(v.nll, v.nll.options().dtype(at::kLong));
    } else {
      v.kl = r.A / f.S - Z_f + Z;
      v.rkl = r.Bs / r.S - Z + Z_f;
      v.dp = (t - Z).exp() - (t_f - Z_f).exp();
      v.agree = r.best_index.eq(f.best_index).to(at::kLong);
    }
    for (at::Tensor* x : {&v.nll, &v.kl, &v.rkl, &v.dp, &v.agree, &v.right}) *x = x->reshape({B_, P_}).cpu().contiguous();
  }
  return out;
}

std::vector<WindowScores> window_rows(const TokenValues& scheme, const TokenValues& full,
                                      const std::vector<std::int64_t>& first_scored) {
  const bool paired = &scheme != &full;
  const std::int64_t B = scheme.nll.size(0), P = scheme.nll.size(1);
  TORCH_CHECK(static_cast<std::int64_t>(first_scored.size()) == B, "window_rows: first_scored has ", first_scored.size(),
              " entries for a batch of ", B);
  std::vector<WindowScores> rows(static_cast<std::size_t>(B));
  for (std::int64_t b = 0; b < B; ++b) {
    WindowScores& r = rows[static_cast<std::size_t>(b)];
    const std::int64_t from = first_scored[static_cast<std::size_t>(b)] - 1;  // prediction index of the first scored target
    TORCH_CHECK(from >= 0 && from <= P, "window_rows: first scored position ", from + 1, " outside a window of ", P + 1);
    const double* n = scheme.nll.data_ptr<double>() + b * P;
    const double* fn = full.nll.data_ptr<double>() + b * P;
    const double* k = scheme.kl.data_ptr<double>() + b * P;
    const double* rk = scheme.rkl.data_ptr<double>() + b * P;
    const double* d = scheme.dp.data_ptr<double>() + b * P;
    const std::int64_t* a = scheme.agree.data_ptr<std::int64_t>() + b * P;
    const std::int64_t* right = scheme.right.data_ptr<std::int64_t>() + b * P;
    const std::int64_t* full_right = full.right.data_ptr<std::int64_t>() + b * P;
    if (paired && from < P) r.buckets.resize(static_cast<std::size_t>(position_bucket(P - 1)) + 1);
    for (std::int64_t p = from; p < P; ++p) {
      r.tokens += 1;
      r.nll_sum += n[p];
      r.nll_sq_sum += n[p] * n[p];
      if (!paired) continue;
      const double diff = n[p] - fn[p];
      r.diff_sum += diff;
      r.diff_sq_sum += diff * diff;
      r.kl_sum += k[p];
      r.top1_agree += a[p];
      r.dp_sum += d[p];
      r.kl_sq_sum += k[p] * k[p];
      r.rkl_sum += rk[p];
      r.rkl_sq_sum += rk[p] * rk[p];
      const double dp2 = d[p] * d[p];
      r.dp_sq_sum += dp2;
      r.dp_4_sum += dp2 * dp2;
      r.top1_lost += full_right[p] & (1 - right[p]);
      r.top1_gained += right[p] & (1 - full_right[p]);
      BucketScores& bucket = r.buckets[static_cast<std::size_t>(position_bucket(p))];
      bucket.tokens += 1;
      bucket.diff_sum += diff;
      bucket.diff_sq_sum += diff * diff;
      bucket.kl_sum += k[p];
    }
    if (!paired) r.top1_agree = r.tokens;  // full precision agrees with itself
  }
  return rows;
}

}  // namespace qeval
