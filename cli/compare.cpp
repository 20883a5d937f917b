// `qeval compare A.json B.json ...`: several result records side by side in the paper's Table 2
// (outliers, attention) and Table 3 (quantisation penalty) layouts, as Markdown, CSV or JSON; in
// Markdown also the entropy by layer (SAMBA Fig. 5, reports/layer_entropy.h).
#include <fmt/core.h>

#include <algorithm>
#include <sstream>

#include "cli/commands.h"
#include "cli/option_checks.h"
#include "cli/json_config.h"
#include "common/error.h"
#include "common/printable.h"
#include "common/files.h"
#include "reports/compare.h"
#include "records/record.h"
#include "records/record_verify.h"
#include "records/series_record.h"
#include "reports/series_views.h"
#include "reports/timings_table.h"

namespace qeval::cli {
namespace {

struct CompareArgs {
  std::vector<std::string> records;
  std::string format = "md";
  std::string labels;
  bool allow_protocol_mismatch = false;
  bool allow_partial = false;
  bool timings = false;
  std::string scheme = "full";  // whose per-layer entropies the entropy table shows
  std::string out;
};

std::vector<std::string> split_labels(const std::string& labels) {
  std::vector<std::string> out;
  std::stringstream in(labels);
  for (std::string label; std::getline(in, label, ',');) {
    QEVAL_CHECK(!has_control_byte(label), "--labels: a label must not hold control characters (newline, tab, escape ...), "
                "found {}", in_quotes(label));
    out.push_back(label);
  }
  return out;
}

// Series records (qeval eval --model SERIES): their trajectories, one table per run (reports/series_views.h).
void run_series_compare(const CompareArgs& a, CompareFormat format) {
  std::vector<LabeledSeries> runs;
  for (const auto& path : a.records) runs.push_back({path, read_verified_series_record(path), ""});
  if (!a.labels.empty()) {
    const std::vector<std::string> labels = split_labels(a.labels);
    QEVAL_CHECK(labels.size() == runs.size(), "--labels: {} labels for {} series", labels.size(), runs.size());
    for (std::size_t i = 0; i < labels.size(); ++i) runs[i].label = labels[i];
  }
  prepare_series(runs, a.allow_protocol_mismatch);
  const std::string text = format_series(runs, format);
  if (a.out.empty()) return fmt::print("{}", text);
  write_file_atomic(a.out, text);
  fmt::print(stderr, "trajectories of {} series written to {}\n", runs.size(), a.out);
}

void run_compare(const CompareArgs& a) {
  // Checked here rather than by CLI11 so that bad input exits 2 like every other input error.
  QEVAL_CHECK(!a.records.empty(), "compare: give one or more result records (qeval eval --out R.json)");
  const CompareFormat format = parse_compare_format(a.format);
  if (!a.out.empty()) check_output_file(a.out, "--out");
  for (const auto& path : a.records) check_output_is_not_an_input(a.out, "--out", {{"record", path}});
  if (is_series_record_file(a.records.front())) return run_series_compare(a, format);
  std::vector<LabeledRecord> records;
  for (const auto& path : a.records) {
    LabeledRecord r{path, read_record(path), "", {}};
    // Records are verified, not trusted (records/record_verify.h); a shard or a partial merge only with --allow-partial.
    r.partial = require_verified_record(r.record, path, a.allow_partial);
    records.push_back(std::move(r));
  }
  if (!a.labels.empty()) {
    const std::vector<std::string> labels = split_labels(a.labels);
    QEVAL_CHECK(labels.size() == records.size(), "--labels: {} labels for {} records", labels.size(), records.size());
    for (std::size_t i = 0; i < labels.size(); ++i) records[i].label = labels[i];
  }
  label_records(records);
  if (!a.allow_protocol_mismatch) require_same_protocol(records);
  if (a.scheme != "full")  // "full" falls back to each record's first scheme, its reference
    QEVAL_CHECK(std::any_of(records.begin(), records.end(),
                            [&](const LabeledRecord& r) {
                              for (const auto& s : r.record.at("schemes"))
                                if (s.at("name") == a.scheme) return true;
                              return false;
                            }),
                "--scheme: no record has a scheme {}", in_quotes(a.scheme));
  std::string text = format_comparison(records, format, a.allow_protocol_mismatch, a.scheme);
  if (a.timings) text = format == CompareFormat::markdown ? text + format_timings(records, format) : format_timings(records, format);
  if (a.out.empty()) {
    fmt::print("{}", text);
  } else {
    write_file_atomic(a.out, text);
    fmt::print(stderr, "comparison of {} records written to {}\n", records.size(), a.out);
  }
}

}  // namespace

void add_compare_command(CLI::App& app) {
  auto args = std::make_shared<CompareArgs>();
  auto* cmd = app.add_subcommand("compare", "side-by-side tables of result records (the paper's Tables 2 and 3)");
  add_json_config(cmd);
  cmd->add_option("records", args->records, "result records written by qeval eval --out");
  cmd->add_option("--format,-f", args->format, "md, csv or json")->capture_default_str();
  cmd->add_option("--labels", args->labels, "comma-separated model names, one per record (default: the model's file or folder name)");
  cmd->add_flag("--allow-protocol-mismatch", args->allow_protocol_mismatch,
                "compare records evaluated under different protocols, data or precision (marked in the output)");
  cmd->add_flag("--allow-partial", args->allow_partial,
                "compare shard records and partial merges too (their rows are marked \"(partial)\")");
  cmd->add_flag("--timings", args->timings,
                "where each record's time went, by phase (read, convert, quantize, forward, statistics, head, ...): "
                "after the tables in Markdown, instead of them in CSV and JSON");
  cmd->add_option("--scheme", args->scheme,
                  "Markdown: the scheme whose per-layer entropies the \"Entropy by layer\" table shows")
      ->capture_default_str();
  cmd->add_option("--out,-o", args->out, "write the tables here instead of stdout")->check(output_path());
  cmd->callback([args] { run_compare(*args); });
}

}  // namespace qeval::cli
