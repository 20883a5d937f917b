// Model transforms named on the command line (`--transform NAME[:key=value,...]`, repeatable,
// applied in order to the full-precision model before any scheme; DESIGN.md §5 Transforms):
//   rotate[:kind=hadamard|orthogonal,seed=N,online_down=0|1]          transforms/rotate.h
//   smooth[:alpha=A,groups=qkv+up+down+o,calib=FILE,calib_windows=N]  transforms/smooth.h
// Each returns the same function (full-precision logits equal to rounding) in another basis or
// scaling; the record lists every transform with its parameters and what it did.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "loaders/protocols/protocol.h"
#include "model/transformer.h"

namespace qeval {

struct TransformSpec {
  std::string name;                           // rotate | smooth
  std::map<std::string, std::string> options;  // as given
  std::string text;                           // as written on the command line
};

// Parses "rotate", "smooth:alpha=0.8,calib=c4.jsonl"; throws listing the transforms and, for a
// bad key or value, the valid keys.
TransformSpec parse_transform(const std::string& text);

// Where smoothing's calibration windows come from (SmoothQuant measures max|X_j| on text that is
// not evaluated). `windows(path, n)` returns n windows with the record's description of them:
// path (empty = the evaluation data), which windows, and that they are disjoint from the
// evaluated ones (see calibration_windows below).
struct CalibrationWindows {
  std::vector<Window> windows;
  nlohmann::json description;
};
using CalibrationSource = std::function<CalibrationWindows(const std::string& path, std::int64_t n)>;

// Calibration windows (held by the caller, who keeps them alive) as a window source for evaluate().
std::unique_ptr<WindowSource> calibration_window_source(const std::vector<Window>& windows);

// Applies the transforms in order. `calibration` is called only by smooth. Returns the
// transformed model; `report` gets one entry per transform.
Transformer apply_transforms(const Transformer& model, const std::vector<TransformSpec>& transforms,
                             const CalibrationSource& calibration, nlohmann::json& report);

// The calibration rule. Windows of the `windows` protocol over the calibration data (the
// evaluation's separator and BOS; seq_len tokens, 0: the evaluation's), the first n in stream
// order that share no stream token with an evaluated window. When the calibration data is the
// evaluation data, the evaluated windows are read from `open_evaluation()` (a fresh source of the
// evaluation windows), which must be the `windows` protocol; any other protocol needs a separate
// calibration file. Fails when fewer than n windows are left.
CalibrationWindows calibration_windows(const std::function<std::unique_ptr<WindowSource>()>& open_evaluation,
                                       const std::function<std::unique_ptr<WindowSource>(const ProtocolSpec&)>& open_calibration,
                                       const ProtocolSpec& evaluation_protocol, bool same_data, std::int64_t n,
                                       std::int64_t seq_len = 0);

}  // namespace qeval
