// FigureDataObserver: the maps behind the paper's Figure 1, averaged over windows during
// `qeval eval --plots DIR` (full precision only). The record's statistics already hold the
// per-layer curves; the maps are too large for a record (layers × channels, T × T per layer),
// so they go to DIR/figure_data.json beside the pictures.
//
//   attention map  per layer: mean over windows and heads of A[i, j] for the first T queries
//                  and keys (T = min(64, L) fixed by the first window; shorter windows are left
//                  out of the map). softmax-1 rows are used as produced (they sum to < 1).
//   mean |X|       per layer and channel: mean over windows of |X[m, l, d]|, for the first
//                  token (l = 1) and, apart, the mean over the other positions (l > 1).
//
// Every window weighs the same (a sum over windows divided by their count), so batch size does
// not matter beyond float rounding. Windows skipped by --resume or owned by another --shard are
// not seen: the maps then cover only the windows this process evaluated (to_json says how many).
//
// to_json():
// {"windows": n, "layers": M, "d_model": D,
//  "attention_map": {"T": T, "windows": n_T, "per_layer": [M][T][T] (query i, key j)},
//  "hidden_abs": {"first": [M][D], "rest": [M][D]}}
#pragma once

#include <ATen/ATen.h>

#include <memory>
#include <nlohmann/json.hpp>
#include <vector>

#include "model/observer.h"

namespace qeval {

class FigureDataObserver : public ForwardObserver {
 public:
  explicit FigureDataObserver(std::int64_t map_T = 64);

  void on_block_output(std::int64_t layer, const at::Tensor& hidden) override;  // [B, L, D]
  bool wants_attention(std::int64_t) const override { return true; }
  void on_attention(std::int64_t layer, const at::Tensor& probs) override;  // [B, H, L, L]

  std::int64_t windows() const { return windows_; }
  // Throws when no window was observed.
  nlohmann::json to_json() const;

 private:
  std::int64_t map_T_;
  std::int64_t T_ = 0;  // fixed by the first attention seen
  std::int64_t windows_ = 0;
  std::vector<std::int64_t> map_windows_;      // [M] windows that reached the map
  std::vector<at::Tensor> map_sum_;            // [M] × [T, T] float64
  std::vector<at::Tensor> first_sum_, rest_sum_;  // [M] × [D] float64
  std::vector<std::int64_t> rest_windows_;     // [M] windows with L ≥ 2
};

// Forwards every call to each observer; attention is asked for when any of them wants it.
class FanOutObserver : public ForwardObserver {
 public:
  explicit FanOutObserver(std::vector<std::shared_ptr<ForwardObserver>> observers);
  void on_block_output(std::int64_t layer, const at::Tensor& hidden) override;
  bool wants_attention(std::int64_t layer) const override;
  void on_attention(std::int64_t layer, const at::Tensor& probs) override;
  bool wants_router(std::int64_t layer) const override;
  void on_router(std::int64_t layer, const at::Tensor& probs, const at::Tensor& selected) override;
  bool wants_ssm_selection(std::int64_t layer) const override;
  void on_ssm_selection(std::int64_t layer, const SsmSelection& selection) override;

 private:
  std::vector<std::shared_ptr<ForwardObserver>> observers_;
};


}  // namespace qeval
