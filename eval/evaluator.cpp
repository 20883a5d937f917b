#include "eval/evaluator.h"

#include <cmath>

#include "common/error.h"
#include "common/hash.h"
#include "eval/progress.h"
#include "kernels/cuda/device.h"

namespace qeval {
namespace {

using Clock = std::chrono::steady_clock;

std::uint64_t window_hash(const Window& w) {
  Hasher h;
  h.update_value(w.first_scored);
  h.update(w.tokens.data(), w.tokens.size() * sizeof(std::int32_t));
  return h.digest();
}

at::Tensor batch_tokens(const std::vector<Window>& batch) {
  const auto B = static_cast<std::int64_t>(batch.size());
  const auto L = static_cast<std::int64_t>(batch.front().tokens.size());
  at::Tensor tokens = at::empty({B, L}, at::kLong);
  auto* out = tokens.data_ptr<std::int64_t>();
  for (std::int64_t b = 0; b < B; ++b) {
    const auto& w = batch[static_cast<std::size_t>(b)].tokens;
    QEVAL_CHECK(static_cast<std::int64_t>(w.size()) == L, "evaluate: windows in a batch differ in length ({} vs {})",
                w.size(), L);
    for (std::int64_t l = 0; l < L; ++l) out[b * L + l] = w[static_cast<std::size_t>(l)];
  }
  return tokens;
}

}  // namespace

std::string EvalResult::token_stream_hash() const {
  Hasher h;
  for (const auto& [index, hash] : window_hashes) {
    h.update_value(index);
    h.update_value(hash);
  }
  return h.hex();
}

EvalResult evaluate(std::vector<EvalScheme>& schemes, WindowSource& windows, const EvalOptions& options,
                    EvalResult resumed) {
  QEVAL_CHECK(!schemes.empty(), "evaluate: no schemes to evaluate");
  QEVAL_CHECK(options.batch_size >= 1, "evaluate: batch size must be >= 1, found {}", options.batch_size);
  EvalResult result = std::move(resumed);
  if (result.schemes.empty()) result.schemes.resize(schemes.size());
  QEVAL_CHECK(result.schemes.size() == schemes.size(), "evaluate: resumed state has {} schemes, this run has {}",
              result.schemes.size(), schemes.size());
  const auto start = Clock::now();
  Progress progress(options.progress, options.expected_windows);
  double running_nll = 0;
  for (const auto& [index, row] : result.schemes.front().rows) running_nll += row.nll_sum;

  std::vector<Window> batch;
  auto run_batch = [&] {
    if (batch.empty()) return;
    at::Tensor tokens = batch_tokens(batch);
    std::vector<std::int64_t> indices, first_scored;
    for (const auto& w : batch) {
      indices.push_back(w.index);
      first_scored.push_back(w.first_scored);
      result.window_hashes[w.index] = window_hash(w);
      result.processed_tokens += static_cast<std::int64_t>(w.tokens.size());
    }
    at::Tensor full_log_probs;
    for (std::size_t s = 0; s < schemes.size(); ++s) {
      EvalScheme& scheme = schemes[s];
      if (scheme.begin_batch) scheme.begin_batch(indices);
      auto t0 = Clock::now();
      at::Tensor logits = scheme.model.forward(tokens, scheme.observer.get());
      at::Tensor log_probs = at::log_softmax(logits.to(at::kFloat), -1);
      if (log_probs.is_cuda()) kernels::cuda::synchronize();  // GPU work is asynchronous: time it whole
      result.schemes[s].forward_seconds += std::chrono::duration<double>(Clock::now() - t0).count();
      if (s == 0) full_log_probs = log_probs;
      std::vector<WindowScores> rows = score_batch(log_probs, full_log_probs, tokens, first_scored);
      for (std::size_t b = 0; b < rows.size(); ++b) {
        if (s == 0) {
          result.scored_tokens += rows[b].tokens;
          running_nll += rows[b].nll_sum;
        }
        result.schemes[s].rows[indices[b]] = rows[b];
      }
    }
    result.windows += static_cast<std::int64_t>(batch.size());
    batch.clear();
    progress.update(result.windows, std::exp(running_nll / std::max<std::int64_t>(result.scored_tokens, 1)),
                    result.scored_tokens);
    if (options.after_batch) options.after_batch(result);
  };

  while (auto w = windows.next()) {
    if (options.select_window && !options.select_window(w->index)) continue;
    if (result.contains(w->index)) continue;  // done before the run was interrupted
    // Protocol stride's last window may be shorter: batches hold equal lengths only.
    if (!batch.empty() && batch.front().tokens.size() != w->tokens.size()) run_batch();
    batch.push_back(std::move(*w));
    if (static_cast<std::int64_t>(batch.size()) == options.batch_size) run_batch();
  }
  run_batch();
  progress.finish();
  QEVAL_CHECK(result.windows > 0, "evaluate: the data gave no complete window ({} tokens from {} documents)",
              windows.stream_tokens(), windows.documents_read());
  result.seconds += std::chrono::duration<double>(Clock::now() - start).count();
  return result;
}

}  // namespace qeval
