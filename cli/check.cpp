// `qeval check --baseline B.json --tolerances T.json R.json`: the training-CI gate. Exit 0 when
// every limited quantity is within tolerance, 1 with a report naming every violation, 2 for
// unusable input (thrown as qeval::Error and turned into 2 by main).
#include <fmt/core.h>

#include "cli/commands.h"
#include "cli/option_checks.h"
#include "cli/json_config.h"
#include "common/error.h"
#include "common/printable.h"
#include "common/files.h"
#include "reports/check.h"
#include "records/record.h"
#include "reports/series_check.h"
#include "records/series_record.h"

namespace qeval::cli {
namespace {

struct CheckArgs {
  std::string baseline;
  std::string tolerances;
  std::vector<std::string> records;
  bool allow_protocol_mismatch = false;
  bool allow_partial = false;
  std::string format = "md";
  std::string report;
};

void report_and_exit(const CheckArgs& a, const CheckReport& report) {
  const std::string text = a.format == "json" ? utf8_safe(check_report_to_json(report)).dump(2) + "\n" : format_check_markdown(report);
  fmt::print("{}", text);
  if (!a.report.empty()) write_file_atomic(a.report, text);
  exit_status = report.passed() ? 0 : 1;
}

void run_check(const CheckArgs& a) {
  // The report replaces no input, whether the records are series or single runs.
  if (!a.report.empty()) check_output_file(a.report, "--report");
  std::vector<std::pair<std::string, std::string>> read = {{"baseline", a.baseline}, {"tolerance file", a.tolerances}};
  for (const auto& r : a.records) read.push_back({"record", r});
  check_output_is_not_an_input(a.report, "--report", read);
  if (a.records.size() == 1 && is_series_record_file(a.records.front())) {  // a trajectory (reports/series_check.h)
    QEVAL_CHECK(!a.tolerances.empty(), "check: --tolerances T.json is required (rules, or a tolerance file with --baseline)");
    QEVAL_CHECK(a.format == "md" || a.format == "json", "check: --format should be md or json, found '{}'", a.format);
    CheckOptions options;
    options.allow_protocol_mismatch = a.allow_protocol_mismatch;
    options.baseline_source = a.baseline;
    options.current_source = a.records.front();
    return report_and_exit(a, check_series_files(a.records.front(), a.baseline, a.tolerances, options));
  }
  QEVAL_CHECK(!a.baseline.empty(), "check: --baseline B.json is required{}",
              a.records.size() == 1 ? fmt::format(" ({} is not a series record, so it is checked against a baseline)",
                                                  a.records.front())
                                    : std::string());
  QEVAL_CHECK(!a.tolerances.empty(), "check: --tolerances T.json is required (see configs/ci/tolerances.json)");
  QEVAL_CHECK(a.records.size() == 1, "check: give exactly one record to check, found {}", a.records.size());
  QEVAL_CHECK(a.format == "md" || a.format == "json", "check: --format should be md or json, found '{}'", a.format);
  const Tolerances tolerances = load_tolerances(a.tolerances);
  const nlohmann::json baseline = read_record(a.baseline);
  const nlohmann::json record = read_record(a.records.front());
  CheckOptions options;
  options.allow_protocol_mismatch = a.allow_protocol_mismatch;
  options.allow_partial = a.allow_partial;
  options.baseline_source = a.baseline;
  options.current_source = a.records.front();
  report_and_exit(a, check_record(baseline, record, tolerances, options));
}

}  // namespace

void add_check_command(CLI::App& app) {
  auto args = std::make_shared<CheckArgs>();
  auto* cmd = app.add_subcommand(
      "check", "regression gate: exit 0 within tolerance, 1 on violations (each named), 2 on unusable input");
  add_json_config(cmd);
  cmd->add_option("record", args->records, "result record to check (qeval eval --out)");
  cmd->add_option("--baseline,-b", args->baseline, "baseline result record");
  cmd->add_option("--tolerances,-t", args->tolerances, "tolerance file (JSON; see configs/ci/tolerances.json, docs/ci-gate.md)");
  cmd->add_flag("--allow-protocol-mismatch", args->allow_protocol_mismatch,
                "check even when protocol, data, precision or a scheme's definition differ from the baseline's");
  cmd->add_flag("--allow-partial", args->allow_partial,
                "check shard records and partial merges too (noted in the report)");
  cmd->add_option("--format,-f", args->format, "report format: md or json")->capture_default_str();
  cmd->add_option("--report", args->report, "also write the report to this file")->check(output_path());
  cmd->callback([args] { run_check(*args); });
}

}  // namespace qeval::cli
