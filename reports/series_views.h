// Trajectories (issue 44): series records (records/series_record.h) as tables for `qeval compare`
// and as a figure for `qeval plot`, one run or several (Adam beside OrthoAdam, two learning rates).
//
// Table, per run, one row per checkpoint:
//   step, tokens seen, the trainer's lr and validation loss (when known), PPL (full precision) ± its
//   95 % half-width, each quantised scheme's penalty ΔPPL and paired ΔNLL ± se, and the full
//   model's statistics: kurtosis first / rest, max |X| first / rest, %first-attn, Sink₁^ε (%),
//   attention entropy.
// Figure (trajectory.{dat,gp,png}): the same quantities against tokens seen on a log axis (steps
// when a run does not know its tokens), one colour per run; or against steps, or against the
// fraction of each run's schedule done (runs whose schedules have one shape scaled in length and
// peak lr, e.g. lr at half with twice the steps, are at equal lr × steps at equal fractions).
#pragma once

#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "reports/compare.h"

namespace qeval {

struct LabeledSeries {
  std::string source;  // the file it came from
  nlohmann::json series;
  std::string label;   // empty: series_label, made unique
};

// Throws when the runs were evaluated under different protocols or data (comparison_identity of
// their evaluations) unless allowed; fills empty labels.
void prepare_series(std::vector<LabeledSeries>& runs, bool allow_protocol_mismatch = false);

// Markdown: per run a heading and two tables (PPL and penalties; statistics). CSV: one line per
// (run, checkpoint), every column. JSON: {"runs": [{"label", "source", "rows": [...]}]}.
std::string format_series(const std::vector<LabeledSeries>& runs, CompareFormat format);

enum class SeriesAxis { tokens, step, progress };
SeriesAxis parse_series_axis(const std::string& s);  // tokens | step | progress; throws otherwise

// trajectory.png (with its .dat and .gp) in `dir`; returns the PNGs written. Throws when a run
// lacks what the axis needs (progress: each checkpoint's total_steps).
std::vector<std::filesystem::path> plot_series(const std::vector<LabeledSeries>& runs, const std::filesystem::path& dir,
                                               SeriesAxis axis = SeriesAxis::tokens);

}  // namespace qeval
