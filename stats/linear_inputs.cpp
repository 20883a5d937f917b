#include "stats/linear_inputs.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <cmath>
#include <limits>
#include <set>

#include "common/error.h"
#include "stats/hidden_stats.h"

namespace qeval {
namespace {

nlohmann::json number(double x) { return std::isfinite(x) ? nlohmann::json(x) : nlohmann::json(nullptr); }

nlohmann::json first_rest(double first, double rest) { return {{"first", number(first)}, {"rest", number(rest)}}; }

}  // namespace

nlohmann::json LinearInputSummary::to_json(bool with_features) const {
  nlohmann::json j = {{"name", name},
                      {"in_features", in_features},
                      {"sequences", sequences},
                      {"rest_sequences", rest_sequences},
                      {"kurtosis", first_rest(kurtosis_first, kurtosis_rest)},
                      {"max_abs", first_rest(max_abs_first, max_abs_rest)},
                      {"inf_over_l2", first_rest(inf_over_l2_first, inf_over_l2_rest)},
                      {"largest",
                       {{"value", number(largest_value)},
                        {"abs", number(std::abs(largest_value))},
                        {"feature", largest_feature},
                        {"position", largest_position},
                        {"sequence", largest_sequence}}}};
  if (with_features && feature_max_abs.defined()) {
    at::Tensor f = feature_max_abs.contiguous();
    const double* p = f.data_ptr<double>();
    nlohmann::json list = nlohmann::json::array();
    for (std::int64_t j2 = 0; j2 < f.numel(); ++j2) list.push_back(number(p[j2]));
    j["feature_max_abs"] = list;
  }
  return j;
}

LinearInputRecorder::LinearInputRecorder(std::vector<std::string> names) : names_(std::move(names)) {
  for (std::size_t i = 0; i < names_.size(); ++i) {
    QEVAL_CHECK(slots_.emplace(names_[i], i).second, "LinearInputRecorder: linear '{}' is named twice", names_[i]);
  }
  acc_.resize(names_.size());
}

bool LinearInputRecorder::records(const std::string& linear_name) const { return slots_.count(linear_name) > 0; }

void LinearInputRecorder::record(std::size_t slot, const at::Tensor& x) {
  QEVAL_CHECK(slot < acc_.size(), "LinearInputRecorder: slot {} out of range ({} linears)", slot, acc_.size());
  QEVAL_CHECK(x.dim() == 3, "LinearInputRecorder: input of {} must be [B, L, in], got {} dims", names_[slot], x.dim());
  Accumulator& a = acc_[slot];
  const std::int64_t B = x.size(0), L = x.size(1), in = x.size(2);
  if (B == 0 || L == 0) return;
  if (!a.feature_max_abs.defined()) {
    a.in_features = in;
    a.feature_max_abs = at::zeros({in}, at::TensorOptions().dtype(at::kDouble));
  }
  QEVAL_CHECK(in == a.in_features, "LinearInputRecorder: input of {} has {} features, earlier inputs had {}", names_[slot],
              in, a.in_features);
  // max |x| is exact in any dtype, so reducing in the input's dtype and widening loses nothing.
  at::Tensor x_detached = x.detach();
  at::Tensor fmax = x_detached.abs().amax(at::IntArrayRef{0, 1}).to(at::kDouble).cpu();
  a.feature_max_abs = at::maximum(a.feature_max_abs, fmax);

  const std::vector<HiddenLayerStats> rows = hidden_layer_stats(x_detached);  // one per sequence
  for (const HiddenLayerStats& s : rows) {
    a.kurtosis_first += s.kurtosis_first;
    a.max_abs_first += s.max_abs_first;
    a.inf_over_l2_first += s.inf_over_l2_first;
    if (L >= 2) {
      a.kurtosis_rest += s.kurtosis_rest;
      a.max_abs_rest += s.max_abs_rest;
      a.inf_over_l2_rest += s.inf_over_l2_rest;
      a.rest_sequences += 1;
    }
    if (a.sequences == 0 || std::abs(s.largest_value) > std::abs(a.largest_value)) {
      a.largest_value = s.largest_value;
      a.largest_feature = s.largest_channel;
      a.largest_position = s.largest_position;
      a.largest_sequence = a.sequences;
    }
    a.sequences += 1;
  }
}

const LinearInputRecorder::Accumulator& LinearInputRecorder::seen(const std::string& linear_name) const {
  auto it = slots_.find(linear_name);
  QEVAL_CHECK(it != slots_.end(), "LinearInputRecorder: linear '{}' is not recorded; recorded linears: {}", linear_name,
              fmt::join(names_, ", "));
  const Accumulator& a = acc_[it->second];
  QEVAL_CHECK(a.sequences > 0, "LinearInputRecorder: linear '{}' has seen no input (no forward pass ran through it)",
              linear_name);
  return a;
}

at::Tensor LinearInputRecorder::feature_max_abs(const std::string& linear_name) const {
  return seen(linear_name).feature_max_abs.clone();
}

LinearInputSummary LinearInputRecorder::summarize(std::size_t slot) const {
  const Accumulator& a = acc_[slot];
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const double n = static_cast<double>(a.sequences), nr = static_cast<double>(a.rest_sequences);
  LinearInputSummary s;
  s.name = names_[slot];
  s.in_features = a.in_features;
  s.sequences = a.sequences;
  s.rest_sequences = a.rest_sequences;
  s.kurtosis_first = a.kurtosis_first / n;
  s.max_abs_first = a.max_abs_first / n;
  s.inf_over_l2_first = a.inf_over_l2_first / n;
  s.kurtosis_rest = a.rest_sequences > 0 ? a.kurtosis_rest / nr : nan;
  s.max_abs_rest = a.rest_sequences > 0 ? a.max_abs_rest / nr : nan;
  s.inf_over_l2_rest = a.rest_sequences > 0 ? a.inf_over_l2_rest / nr : nan;
  s.largest_value = a.largest_value;
  s.largest_feature = a.largest_feature;
  s.largest_position = a.largest_position;
  s.largest_sequence = a.largest_sequence;
  s.feature_max_abs = a.feature_max_abs.clone();
  return s;
}

LinearInputSummary LinearInputRecorder::summary(const std::string& linear_name) const {
  seen(linear_name);
  return summarize(slots_.at(linear_name));
}

std::vector<LinearInputSummary> LinearInputRecorder::summary() const {
  std::vector<LinearInputSummary> out;
  for (std::size_t i = 0; i < names_.size(); ++i)
    if (acc_[i].sequences > 0) out.push_back(summarize(i));
  return out;
}

nlohmann::json LinearInputRecorder::to_json(bool with_features) const {
  nlohmann::json list = nlohmann::json::array();
  for (const auto& s : summary()) list.push_back(s.to_json(with_features));
  return {{"definitions",
           "X[b, l, j]: input of the linear, sequence b, position l (0-based), feature j. Per row: kurtosis "
           "E_j[(X-mu)^4]/(E_j[(X-mu)^2])^2 (population moments, float64), max_abs max_j |X|, inf_over_l2 "
           "max_j |X| / ||X||_2; first = position 0, rest = mean over positions 1..L-1 within a sequence; both averaged "
           "over sequences (rest over sequences with L >= 2). feature_max_abs: max |X| per feature over everything "
           "seen. largest: the element of largest |X| (sequence in arrival order, ties to the earliest)."},
          {"linears", list}};
}

void LinearInputRecorder::reset() {
  for (auto& a : acc_) a = Accumulator{};
}

RecordingLinear::RecordingLinear(std::shared_ptr<const Linear> inner, std::shared_ptr<LinearInputRecorder> recorder,
                                 std::size_t slot)
    : LinearDecorator(std::move(inner)), recorder_(std::move(recorder)), slot_(slot) {
  QEVAL_CHECK(recorder_ != nullptr, "RecordingLinear: null recorder");
}

at::Tensor RecordingLinear::forward(const at::Tensor& x) const {
  recorder_->record(slot_, x);
  return inner_->forward(x);
}

std::size_t LinearInputRecorder::slot(const std::string& linear_name) const {
  auto it = slots_.find(linear_name);
  QEVAL_CHECK(it != slots_.end(), "LinearInputRecorder: linear {} is not recorded", linear_name);
  return it->second;
}

Block record_block_inputs(const Block& block, const std::shared_ptr<LinearInputRecorder>& recorder) {
  Block out = block;
  for (const auto& named : block.linears())
    if (recorder->records(named.name))
      out.replace_linear(named.name, std::make_shared<RecordingLinear>(named.linear, recorder, recorder->slot(named.name)));
  return out;
}

std::shared_ptr<LinearInputRecorder> record_linear_inputs(Transformer& model, const std::vector<std::string>& names) {
  std::vector<std::string> all;
  for (const auto& named : model.linears()) all.push_back(named.name);
  std::vector<std::string> chosen;  // in execution order
  if (names.empty()) {
    chosen = all;
  } else {
    std::set<std::string> wanted;
    for (const auto& n : names) {
      QEVAL_CHECK(wanted.insert(n).second, "record_linear_inputs: linear '{}' is named twice", n);
      bool known = false;
      for (const auto& a : all) known = known || a == n;
      QEVAL_CHECK(known, "record_linear_inputs: no linear named '{}'; the model has {}", n, fmt::join(all, ", "));
    }
    for (const auto& a : all)
      if (wanted.count(a)) chosen.push_back(a);
  }
  auto recorder = std::make_shared<LinearInputRecorder>(chosen);
  std::vector<std::shared_ptr<const Linear>> inners;
  for (const auto& named : model.linears()) inners.push_back(named.linear);
  for (std::size_t slot = 0, i = 0; i < all.size(); ++i) {
    if (slot < chosen.size() && all[i] == chosen[slot]) {
      model.replace_linear(all[i], std::make_shared<RecordingLinear>(inners[i], recorder, slot));
      ++slot;
    }
  }
  return recorder;
}

}  // namespace qeval
