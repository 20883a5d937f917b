#include "stats/figure_data.h"

#include <algorithm>

#include "common/error.h"

namespace qeval {
namespace {

// [R, C] float64 tensor → nested JSON list (rows).
nlohmann::json matrix_json(const at::Tensor& m) {
  at::Tensor c = m.contiguous().to(at::kDouble);
  const double* p = c.data_ptr<double>();
  nlohmann::json rows = nlohmann::json::array();
  for (std::int64_t r = 0; r < c.size(0); ++r) rows.push_back(std::vector<double>(p + r * c.size(1), p + (r + 1) * c.size(1)));
  return rows;
}

template <class T>
void grow(std::vector<T>& v, std::int64_t layer, T fill) {
  if (static_cast<std::int64_t>(v.size()) <= layer) v.resize(layer + 1, fill);
}

}  // namespace

FigureDataObserver::FigureDataObserver(std::int64_t map_T) : map_T_(map_T) {
  QEVAL_CHECK(map_T >= 1, "FigureDataObserver: map size T must be >= 1, found {}", map_T);
}

void FigureDataObserver::on_block_output(std::int64_t layer, const at::Tensor& hidden) {
  TORCH_CHECK(hidden.dim() == 3, "FigureDataObserver: hidden state should be [B, L, D], found ", hidden.sizes());
  const std::int64_t B = hidden.size(0), L = hidden.size(1);
  if (layer == 0) windows_ += B;
  at::Tensor a = hidden.detach().abs().to(at::kDouble);  // [B, L, D]
  grow(first_sum_, layer, at::Tensor());
  grow(rest_sum_, layer, at::Tensor());
  grow(rest_windows_, layer, std::int64_t{0});
  at::Tensor first = a.select(1, 0).sum(0);  // [D]
  first_sum_[layer] = first_sum_[layer].defined() ? first_sum_[layer] + first : first;
  if (L >= 2) {
    at::Tensor rest = a.slice(1, 1).mean(1).sum(0);  // [D]: per-window mean over l > 1, summed over windows
    rest_sum_[layer] = rest_sum_[layer].defined() ? rest_sum_[layer] + rest : rest;
    rest_windows_[layer] += B;
  }
}

void FigureDataObserver::on_attention(std::int64_t layer, const at::Tensor& probs) {
  TORCH_CHECK(probs.dim() == 4, "FigureDataObserver: attention should be [B, H, L, L], found ", probs.sizes());
  const std::int64_t L = probs.size(2);
  if (T_ == 0) T_ = std::min(map_T_, L);
  grow(map_sum_, layer, at::Tensor());
  grow(map_windows_, layer, std::int64_t{0});
  if (L < T_) return;
  at::Tensor m = probs.detach().slice(2, 0, T_).slice(3, 0, T_).to(at::kDouble).mean(1).sum(0);  // [T, T]
  map_sum_[layer] = map_sum_[layer].defined() ? map_sum_[layer] + m : m;
  map_windows_[layer] += probs.size(0);
}

nlohmann::json FigureDataObserver::to_json() const {
  QEVAL_CHECK(windows_ > 0 && !first_sum_.empty(), "figure data: no window was observed");
  const std::int64_t M = static_cast<std::int64_t>(first_sum_.size());
  nlohmann::json first = nlohmann::json::array(), rest = nlohmann::json::array();
  for (std::int64_t m = 0; m < M; ++m) {
    first.push_back(matrix_json((first_sum_[m] / static_cast<double>(windows_)).unsqueeze(0))[0]);
    rest.push_back(rest_windows_[m] > 0 ? matrix_json((rest_sum_[m] / static_cast<double>(rest_windows_[m])).unsqueeze(0))[0]
                                        : nlohmann::json(nullptr));
  }
  nlohmann::json j = {{"windows", windows_},
                      {"layers", M},
                      {"d_model", first_sum_.front().size(0)},
                      {"hidden_abs", {{"first", first}, {"rest", rest}}}};
  // Layers without attention (Mamba mixers in a hybrid) have no map: null in their place.
  const auto seen = std::find_if(map_windows_.begin(), map_windows_.end(), [](std::int64_t n) { return n > 0; });
  if (seen != map_windows_.end()) {
    nlohmann::json layers = nlohmann::json::array();
    for (std::size_t m = 0; m < map_sum_.size(); ++m)
      layers.push_back(map_windows_[m] > 0 ? matrix_json(map_sum_[m] / static_cast<double>(map_windows_[m]))
                                           : nlohmann::json(nullptr));
    j["attention_map"] = {{"T", T_}, {"windows", *seen}, {"per_layer", layers}};
  }
  return j;
}

FanOutObserver::FanOutObserver(std::vector<std::shared_ptr<ForwardObserver>> observers)
    : observers_(std::move(observers)) {}

void FanOutObserver::on_block_output(std::int64_t layer, const at::Tensor& hidden) {
  for (auto& o : observers_) o->on_block_output(layer, hidden);
}

bool FanOutObserver::wants_attention(std::int64_t layer) const {
  for (const auto& o : observers_)
    if (o->wants_attention(layer)) return true;
  return false;
}

void FanOutObserver::on_attention(std::int64_t layer, const at::Tensor& probs) {
  for (auto& o : observers_)
    if (o->wants_attention(layer)) o->on_attention(layer, probs);
}

bool FanOutObserver::wants_router(std::int64_t layer) const {
  for (const auto& o : observers_)
    if (o->wants_router(layer)) return true;
  return false;
}

void FanOutObserver::on_router(std::int64_t layer, const at::Tensor& probs, const at::Tensor& selected) {
  for (auto& o : observers_)
    if (o->wants_router(layer)) o->on_router(layer, probs, selected);
}

bool FanOutObserver::wants_ssm_selection(std::int64_t layer) const {
  for (const auto& o : observers_)
    if (o->wants_ssm_selection(layer)) return true;
  return false;
}

void FanOutObserver::on_ssm_selection(std::int64_t layer, const SsmSelection& selection) {
  for (auto& o : observers_)
    if (o->wants_ssm_selection(layer)) o->on_ssm_selection(layer, selection);
}


}  // namespace qeval
