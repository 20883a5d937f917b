#include "eval/model_transforms.h"

#include <fmt/core.h>

#include <algorithm>

#include "common/error.h"
#include "eval/evaluator.h"
#include "stats/linear_inputs.h"
#include "transforms/rotate.h"
#include "transforms/smooth.h"

namespace qeval {
namespace {

const std::map<std::string, std::vector<std::string>>& valid_keys() {
  static const std::map<std::string, std::vector<std::string>> keys = {
      {"rotate", {"kind", "seed", "online_down"}},
      {"smooth", {"alpha", "groups", "calib", "calib_windows"}}};
  return keys;
}

std::string option(const TransformSpec& t, const std::string& key, const std::string& fallback) {
  auto it = t.options.find(key);
  return it == t.options.end() ? fallback : it->second;
}

std::int64_t integer_option(const TransformSpec& t, const std::string& key, std::int64_t fallback) {
  const std::string v = option(t, key, "");
  if (v.empty()) return fallback;
  std::size_t used = 0;
  long long x = 0;
  try {
    x = std::stoll(v, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  QEVAL_CHECK(used == v.size() && x >= 0, "--transform {}: {}={} is not a non-negative integer", t.text, key, v);
  return x;
}

double number_option(const TransformSpec& t, const std::string& key, double fallback) {
  const std::string v = option(t, key, "");
  if (v.empty()) return fallback;
  std::size_t used = 0;
  double x = 0;
  try {
    x = std::stod(v, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  QEVAL_CHECK(used == v.size(), "--transform {}: {}={} is not a number", t.text, key, v);
  return x;
}

bool flag_option(const TransformSpec& t, const std::string& key) {
  const std::string v = option(t, key, "0");
  QEVAL_CHECK(v == "0" || v == "1" || v == "true" || v == "false", "--transform {}: {}={}: expected 0, 1, true or false",
              t.text, key, v);
  return v == "1" || v == "true";
}

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> out;
  std::size_t start = 0;
  while (true) {
    std::size_t at = s.find(sep, start);
    out.push_back(s.substr(start, at == std::string::npos ? std::string::npos : at - start));
    if (at == std::string::npos) return out;
    start = at + 1;
  }
}

// max |x_j| of every linear's input over the calibration windows, measured layer-major as an
// evaluation runs (eval/evaluator.h): every calibration window through a layer before the next
// layer, full precision's blocks recording their linears' inputs. A maximum does not depend on
// the order the windows arrive in, so it is what a window-by-window forward measures.
std::shared_ptr<LinearInputRecorder> calibrate(const Transformer& model, const std::vector<Window>& windows) {
  auto recorder = std::make_shared<LinearInputRecorder>(model_linear_names(model.config()));
  std::vector<EvalScheme> schemes(1);
  schemes[0].name = "full";
  schemes[0].wrap_block = [recorder](const Block& block) { return record_block_inputs(block, recorder); };
  schemes[0].on_head_input = [recorder](const at::Tensor& x) { recorder->record(recorder->slot("lm_head"), x); };
  auto source = calibration_window_source(windows);
  EvalOptions options;
  options.progress = false;
  options.plan.name = "resident-weights";
  options.plan.keep_scheme_blocks = false;
  options.plan.chunk_windows = static_cast<std::int64_t>(windows.size());
  evaluate(model, schemes, *source, options);
  return recorder;
}

}  // namespace

std::unique_ptr<WindowSource> calibration_window_source(const std::vector<Window>& windows) {
  return std::make_unique<WindowList>(windows, "calibration windows");
}

TransformSpec parse_transform(const std::string& text) {
  TransformSpec t;
  t.text = text;
  const std::size_t colon = text.find(':');
  t.name = text.substr(0, colon);
  auto keys = valid_keys().find(t.name);
  QEVAL_CHECK(keys != valid_keys().end(), "--transform {}: unknown transform '{}': expected rotate or smooth", text, t.name);
  if (colon == std::string::npos) return t;
  for (const std::string& pair : split(text.substr(colon + 1), ',')) {
    const std::size_t eq = pair.find('=');
    QEVAL_CHECK(eq != std::string::npos && eq > 0, "--transform {}: '{}' is not key=value", text, pair);
    const std::string key = pair.substr(0, eq);
    std::string valid;
    for (const auto& k : keys->second) valid += (valid.empty() ? "" : ", ") + k;
    QEVAL_CHECK(std::find(keys->second.begin(), keys->second.end(), key) != keys->second.end(),
                "--transform {}: unknown key '{}' for {}: expected {}", text, key, t.name, valid);
    QEVAL_CHECK(t.options.emplace(key, pair.substr(eq + 1)).second, "--transform {}: key '{}' given twice", text, key);
  }
  return t;
}

Transformer apply_transforms(const Transformer& model, const std::vector<TransformSpec>& transforms,
                             const CalibrationSource& calibration, nlohmann::json& report) {
  report = nlohmann::json::array();
  Transformer current = model;
  for (const TransformSpec& t : transforms) {
    ModelConfig config = current.config();
    ModelWeights weights = current.weights();
    nlohmann::json entry;
    if (t.name == "rotate") {
      RotateOptions o;
      o.kind = option(t, "kind", o.kind);
      o.seed = static_cast<std::uint64_t>(integer_option(t, "seed", 0));
      o.online_down = flag_option(t, "online_down");
      entry = rotate_model(config, weights, o);
    } else {
      SmoothOptions o;
      o.alpha = number_option(t, "alpha", o.alpha);
      if (t.options.count("groups")) o.groups = split(option(t, "groups", ""), '+');
      const std::int64_t n = integer_option(t, "calib_windows", 16);
      QEVAL_CHECK(n > 0, "--transform {}: calib_windows must be at least 1", t.text);
      QEVAL_CHECK(calibration != nullptr, "--transform {}: no calibration data available here", t.text);
      CalibrationWindows calib = calibration(option(t, "calib", ""), n);
      auto recorder = calibrate(current, calib.windows);
      entry = smooth_model(config, weights, o, [&](const std::string& name) { return recorder->feature_max_abs(name); });
      entry["calibration"] = calib.description;
    }
    entry["spec"] = t.text;
    report.push_back(entry);
    current = Transformer(config, weights, fmt::format("{} after --transform {}", "model", t.text));
  }
  return current;
}

CalibrationWindows calibration_windows(const std::function<std::unique_ptr<WindowSource>()>& open_evaluation,
                                       const std::function<std::unique_ptr<WindowSource>(const ProtocolSpec&)>& open_calibration,
                                       const ProtocolSpec& evaluation, bool same_data, std::int64_t n,
                                       std::int64_t seq_len) {
  ProtocolSpec spec = ProtocolSpec::defaults_for("windows");
  spec.seq_len = seq_len > 0 ? seq_len : evaluation.seq_len;
  spec.separator = evaluation.separator;
  spec.text_split = evaluation.text_split;
  spec.bos_per_window = evaluation.name == "windows" && evaluation.bos_per_window;
  spec.bos_per_window_auto = false;  // the evaluation's, already decided
  // The stream tokens the evaluation reads, as ranges in stream order (windows come in index order).
  std::vector<StreamRange> evaluated;
  if (same_data) {
    QEVAL_CHECK(evaluation.name == "windows",
                "calibration (--transform smooth, or a calibrated scheme: static input scales, GPTQ, AWQ): calibrating "
                "on the evaluation data needs the windows protocol (to know which windows are evaluated); the protocol "
                "is {}: give a separate file (--calibration-data FILE; for smooth, calib=FILE)",
                evaluation.name);
    auto source = open_evaluation();
    while (auto w = source->next()) evaluated.push_back(windows_stream_range(evaluation, w->index));
  }
  CalibrationWindows out;
  std::vector<std::int64_t> indices;
  auto source = open_calibration(spec);
  while (static_cast<std::int64_t>(out.windows.size()) < n) {
    auto w = source->next();
    if (!w) break;
    if (same_data && first_overlap(evaluated, windows_stream_range(spec, w->index)) != evaluated.end()) continue;
    indices.push_back(w->index);
    out.windows.push_back(std::move(*w));
  }
  QEVAL_CHECK(static_cast<std::int64_t>(out.windows.size()) == n,
              "calibration (--transform smooth, or a calibrated scheme): {} calibration windows of {} tokens asked, {} "
              "left after the {} evaluated ones; evaluate fewer windows (--max-windows), ask fewer "
              "(--calibration-windows N, smooth's calib_windows=N, a scheme's calibration windows) or give another "
              "file (--calibration-data FILE; for smooth, calib=FILE)",
              n, spec.seq_len, out.windows.size(), evaluated.size());
  out.description = {{"protocol", spec.to_json()},
                     {"windows", indices},
                     {"same_data_as_evaluation", same_data},
                     {"evaluated_windows_excluded", evaluated.size()},
                     {"disjoint_from_evaluation", true}};
  return out;
}

}  // namespace qeval
