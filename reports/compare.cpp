#include "reports/compare.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <filesystem>
#include <map>

#include "common/printable.h"
#include "common/error.h"
#include "common/json_diff.h"
#include "records/record.h"
#include "records/record_verify.h"
#include "records/rounding_band.h"
#include "reports/layer_entropy.h"
#include "reports/token_tails.h"
#include "reports/table.h"

namespace qeval {
namespace {

const nlohmann::json* find_scheme(const nlohmann::json& record, const std::string& name) {
  for (const auto& s : record.at("schemes"))
    if (s.at("name") == name) return &s;
  return nullptr;
}

// The full-precision scheme: the one named "full", else the first (it is the reference of vs_full).
const nlohmann::json& full_scheme(const nlohmann::json& record) {
  const nlohmann::json& schemes = record.at("schemes");
  QEVAL_CHECK(schemes.is_array() && !schemes.empty(), "record has no schemes");
  const nlohmann::json* full = find_scheme(record, "full");
  return full ? *full : schemes.front();
}

// Follows a path of object keys; null when any step is missing (statistics not collected).
nlohmann::json lookup(const nlohmann::json& j, std::initializer_list<const char*> path) {
  const nlohmann::json* at = &j;
  for (const char* key : path) {
    if (!at->is_object() || !at->contains(key)) return nullptr;
    at = &(*at)[key];
  }
  return *at;
}

nlohmann::json number_or_null(const nlohmann::json& v) { return v.is_number() ? v : nlohmann::json(nullptr); }


std::string yes_no(const nlohmann::json& v) {
  if (v.is_boolean()) return v.get<bool>() ? "yes" : "no";
  return "?";
}

std::string delta_text(const nlohmann::json& v) {
  return v.is_number() ? fmt::format("{:+.4f}", v.get<double>()) : "—";
}

bool any_has(const nlohmann::json& rows, const char* scheme) {
  for (const auto& r : rows)
    if (!r.at("dppl").at(scheme).is_null()) return true;
  return false;
}

bool protocols_differ(const std::vector<LabeledRecord>& records) {
  for (const auto& r : records)
    if (comparison_identity(r.record) != comparison_identity(records.front().record) ||
        !scheme_definition_differences(records.front().record, r.record).empty())
      return true;
  return false;
}

}  // namespace

nlohmann::json comparison_identity(const nlohmann::json& record) {
  try {
    nlohmann::json protocol = record.at("protocol");
    for (const char* key : {"windows", "scored_tokens", "token_stream_hash", "separator_id"}) protocol.erase(key);
    const nlohmann::json& data = record.at("data");
    return {{"protocol", protocol},
            // Compared as JSON, never cast: a number where a string belongs is a difference, not a type error.
            {"data", {{"hash", data.at("hash")},
                      {"text_split", data.contains("text_split") ? data["text_split"] : nlohmann::json("")},
                      {"json_field", data.contains("json_field") ? data["json_field"] : nlohmann::json("")}}},
            // fp32 and fp64 (or CPU and GPU) numbers are not side by side without a word, as in check
            {"precision", precision_identity(record.value("precision", nlohmann::json(nullptr)))}};
  } catch (const nlohmann::json::exception& e) {
    fail("record lacks its protocol or data description: {}", e.what());
  }
}


void require_same_protocol(const std::vector<LabeledRecord>& records) {
  if (records.empty()) return;
  const nlohmann::json first = comparison_identity(records.front().record);
  for (std::size_t i = 1; i < records.size(); ++i) {
    const nlohmann::json other = comparison_identity(records[i].record);
    if (const auto differ = scheme_definition_differences(records.front().record, records[i].record); !differ.empty())
      fail("{} and {} define schemes of the same name differently ({}); pass --allow-protocol-mismatch to compare them "
           "anyway",
           records.front().source, records[i].source, fmt::join(differ, "; "));
    if (other == first) continue;
    fail("{} and {} were evaluated under different protocols, data or precision ({}); pass --allow-protocol-mismatch to "
         "compare them anyway",
         records.front().source, records[i].source, fmt::join(json_differences(first, other), "; "));
  }
}

void label_records(std::vector<LabeledRecord>& records) {
  std::map<std::string, int> seen;
  std::vector<bool> generated(records.size(), false);
  for (std::size_t i = 0; i < records.size(); ++i) {
    auto& r = records[i];
    if (!r.label.empty()) continue;
    std::filesystem::path model(lookup(r.record, {"model", "path"}).is_string()
                                    ? r.record["model"]["path"].get<std::string>()
                                    : std::string());
    if (model.filename().empty()) model = model.parent_path();  // "runs/adam/"
    std::string stem = model.has_extension() ? model.stem().string() : model.filename().string();
    // HF and qeval folders hold generic file names: the folder says which model it is.
    if (stem == "model" || stem == "pytorch_model" || stem == "config") stem = model.parent_path().filename().string();
    r.label = stem.empty() ? std::filesystem::path(r.source).stem().string() : stem;
    // A transformed model is another row of the same model: "stories260K + rotate".
    const nlohmann::json transforms = lookup(r.record, {"model", "transforms"});
    if (transforms.is_array())
      for (const auto& t : transforms)
        if (t.is_object() && t.contains("spec") && t["spec"].is_string()) r.label += " + " + t["spec"].get<std::string>();
    generated[i] = true;
  }
  for (const auto& r : records) seen[r.label]++;
  for (std::size_t i = 0; i < records.size(); ++i)
    if (generated[i] && seen[records[i].label] > 1)
      records[i].label += " (" + std::filesystem::path(records[i].source).stem().string() + ")";
}

const std::vector<PenaltyColumn>& penalty_columns() {
  static const std::vector<PenaltyColumn> columns = {
      {"int8-coarse", "coarse Δ", false},           {"int8-moderate", "moderate Δ", false},
      {"int8-fine", "fine Δ", false},               {"w4-zeropoint", "4-bit Δ", false},
      {"int8-vectorwise", "vectorwise Δ", true},    {"w4-zeropoint-g128", "4-bit g128 Δ", true},
      {"int8-mixed", "mixed Δ", true},              {"int8-coarse-keep1", "coarse keep1 Δ", true},
      {"int8-moderate-keep1", "moderate keep1 Δ", true}};
  return columns;
}

nlohmann::json comparison_rows(const std::vector<LabeledRecord>& records) {
  nlohmann::json rows = nlohmann::json::array();
  for (const auto& r : records) {
    try {
      const nlohmann::json& rec = r.record;
      const nlohmann::json& full = full_scheme(rec);
      const nlohmann::json config = lookup(rec, {"model", "config"});
      QEVAL_CHECK(config.is_object() && config.contains("attention_softmax"),
                  "no model.config.attention_softmax (not a qeval eval record?)");
      QEVAL_CHECK(config.at("attention_softmax").is_string(), "model.config.attention_softmax is {}: expected a string",
                  json_text(config.at("attention_softmax"), 60));
      const std::string softmax = config.at("attention_softmax").get<std::string>();
      nlohmann::json optimizer = config.contains("optimizer") && config["optimizer"].is_string()
                                     ? config["optimizer"]
                                     : nlohmann::json(nullptr);
      const nlohmann::json& st = full.at("statistics");
      nlohmann::json row = {
          {"model", r.partial.empty() ? r.label : r.label + " (partial)"},
          {"partial", !r.partial.empty()},
          {"record", r.source},
          {"softmax1", softmax == "softmax1"},
          {"orthoadam", optimizer.is_null() ? nlohmann::json(nullptr) : nlohmann::json(optimizer == "orthoadam")},
          {"optimizer", optimizer},
          {"ppl_full", full.at("perplexity").at("ppl")},
          {"kurtosis_first", number_or_null(lookup(st, {"hidden", "kurtosis", "first"}))},
          {"kurtosis_rest", number_or_null(lookup(st, {"hidden", "kurtosis", "rest"}))},
          {"max_abs_first", number_or_null(lookup(st, {"hidden", "max_abs", "first"}))},
          {"max_abs_rest", number_or_null(lookup(st, {"hidden", "max_abs", "rest"}))},
          {"first_attn_pct", number_or_null(lookup(st, {"attention", "first_attn_pct"}))},
          {"sink_rate_pct", number_or_null(lookup(st, {"attention", "sink_rate_pct"}))}};
      nlohmann::json dppl = nlohmann::json::object();
      for (const auto& c : penalty_columns()) {
        const nlohmann::json* s = find_scheme(rec, c.scheme);
        dppl[c.scheme] = s ? number_or_null(s->at("vs_full").at("dppl")) : nlohmann::json(nullptr);
      }
      row["dppl"] = dppl;
      rows.push_back(row);
    } catch (const nlohmann::json::exception& e) {
      fail("{}: cannot read the record for comparison: {}", r.source, e.what());
    } catch (const Error& e) {
      fail("{}: {}", r.source, e.what());
    }
  }
  return rows;
}

CompareFormat parse_compare_format(const std::string& s) {
  if (s == "md" || s == "markdown") return CompareFormat::markdown;
  if (s == "csv") return CompareFormat::csv;
  if (s == "json") return CompareFormat::json;
  fail("unknown format '{}': expected md, csv or json", s);
}

// Records evaluated with --rounding-band: each quantised scheme's paired ΔNLL with both of its
// noises, "± se (sampling) ± band (rounding)", flagged where the band exceeds the se (a difference
// smaller than the band is not a difference of the scheme). Empty when no record has a band.
std::string rounding_band_table(const std::vector<LabeledRecord>& records) {
  std::string rows;
  bool flagged = false;
  for (const auto& r : records) {
    for (const auto& s : r.record.at("schemes")) {
      if (is_rounding_variant(s)) continue;
      const std::optional<RoundingBand> band = rounding_band(r.record, s.at("name").get<std::string>());
      if (!band) continue;
      const auto& v = s.at("vs_full");
      const double se = v.at("paired_dnll_se").is_number() ? v.at("paired_dnll_se").get<double>() : std::nan("");
      const bool exceeds = band->delta_nll_sd > se;
      flagged = flagged || exceeds;
      const std::string dnll =
          v.at("paired_dnll_mean").is_number() ? fmt::format("{:+.5f}", v.at("paired_dnll_mean").get<double>()) : "—";
      rows += fmt::format("| {} | {} | {} ± {:.5f} ± {:.5f} | {:.5f} | {} | {:.3g} |{}\n", markdown_cell(r.label),
                          markdown_cell(s.at("name").get<std::string>()), dnll, se,
                          band->delta_nll_sd, band->delta_nll_range, band->variants, band->eps,
                          exceeds ? " ⚠ band > se |" : " |");
    }
  }
  if (rows.empty()) return "";
  return "\nRounding band (paired ΔNLL ± se (sampling) ± band (rounding); the band is the standard deviation over the "
         "scheme and its rounding variants, docs/rounding-band.md)\n\n"
         "| model | scheme | ΔNLL ± se ± band | band range | variants | ε | |\n|---|---|---:|---:|---:|---:|---|\n" +
         rows +
         (flagged ? "\n⚠: the rounding band exceeds the sampling se: a change of the penalty within the band is "
                    "rounding, not the scheme.\n"
                  : std::string());
}

// The format family of a scheme's linear layers, from its resolved spec (docs/formats.md): what a
// reader groups penalties by when int8, 4-bit, FP8, MX, NVFP4 and static-scale schemes sit in one
// record. Empty when every linear stays in full precision.
std::string linear_family(const nlohmann::json& spec) {
  auto kind = [&](const char* role) {
    const nlohmann::json k = lookup(spec, {role, "kind"});
    return k.is_string() ? k.get<std::string>() : std::string("none");
  };
  const std::string w = kind("weights"), in = kind("input_activations");
  if (lookup(spec, {"input_activations", "calibration"}).is_object()) return "static scales";
  for (const std::string& k : {w, in}) {
    if (k == "fp8") return "FP8";
    if (k == "mx") return "OCP MX";
    if (k == "nvfp4") return "NVFP4";
  }
  if (w == "int4_zeropoint") return "4-bit zero-point";
  if (w == "ggml") return "llama.cpp types";  // docs/gguf-types.md
  if (w == "int8_absmax" || in == "int8_absmax") return "int8";
  return w == "none" && in == "none" && kind("output_activations") == "none" ? "" : "other";
}

// The family a scheme is shown under: its linears' family, "KV cache" for a scheme that quantises
// the key/value cache alone (docs/kv-cache.md), "<family> + KV cache" for one that does both.
// Empty for full precision.
std::string format_family(const nlohmann::json& scheme) {
  const nlohmann::json spec = lookup(scheme, {"description", "scheme"});
  if (!spec.is_object()) return "";
  const std::string linears = linear_family(spec);
  if (!lookup(spec, {"kv_cache"}).is_object()) return linears;
  return linears.empty() ? "KV cache" : linears + " + KV cache";
}

// Every scheme of every record grouped by format family, ΔPPL and paired ΔNLL ± se: printed when
// a record holds a family beyond the paper's int8 and 4-bit ones. Families in kOrder's order,
// combined ones ("int8 + KV cache") after them.
std::string format_family_table(const std::vector<LabeledRecord>& records) {
  static const std::vector<std::string> kOrder = {"int8", "4-bit zero-point", "FP8", "OCP MX", "NVFP4",
                                                  "static scales", "llama.cpp types", "KV cache", "other"};
  bool any_new = false;
  std::map<std::string, std::string> rows;  // family → its rows
  for (const auto& r : records) {
    for (const auto& s : r.record.at("schemes")) {
      if (is_rounding_variant(s)) continue;
      const std::string family = format_family(s);
      if (family.empty()) continue;
      any_new = any_new || (family != "int8" && family != "4-bit zero-point" && family != "other");
      const nlohmann::json& v = s.at("vs_full");
      const std::string dnll = v.at("paired_dnll_mean").is_number() && v.at("paired_dnll_se").is_number()
                                   ? fmt::format("{:+.5f} ± {:.5f}", v.at("paired_dnll_mean").get<double>(),
                                                 v.at("paired_dnll_se").get<double>())
                                   : "—";
      rows[family] += fmt::format("| {} | {} | {} | {} | {} |\n", family, markdown_cell(r.label),
                                  markdown_cell(s.at("name").get<std::string>()), delta_text(v.at("dppl")), dnll);
    }
  }
  if (!any_new) return "";
  std::string out = "\nPenalties by format family (docs/formats.md)\n\n| family | model | scheme | ΔPPL | paired ΔNLL ± se |\n"
                    "|---|---|---|---:|---:|\n";
  for (const std::string& family : kOrder) {
    auto it = rows.find(family);
    if (it != rows.end()) out += it->second, rows.erase(it);
  }
  for (const auto& [family, text] : rows) out += text;
  return out;
}

// Every artifact row (eval --compare-checkpoint, docs/quantized-checkpoints.md) with what it is, what
// it loses and how far its weights are from its parent's: printed when a record holds one.
std::string artifact_table(const std::vector<LabeledRecord>& records) {
  std::string rows;
  for (const auto& r : records) {
    for (const auto& s : r.record.at("schemes")) {
      const nlohmann::json a = lookup(s, {"description", "artifact"});
      if (!a.is_object()) continue;
      const nlohmann::json& v = s.at("vs_full");
      auto number = [](const nlohmann::json& x, const char* format) {
        return x.is_number() ? fmt::format(fmt::runtime(format), x.get<double>()) : std::string("—");
      };
      const std::string dnll = v.at("paired_dnll_mean").is_number() && v.at("paired_dnll_se").is_number()
                                   ? fmt::format("{:+.5f} ± {:.5f}", v.at("paired_dnll_mean").get<double>(),
                                                 v.at("paired_dnll_se").get<double>())
                                   : "—";
      // The error that reaches the output: through the folds where the norms were folded (AWQ).
      const nlohmann::json errors = lookup(a, {"weight_error"});
      const char* basis = lookup(errors, {"norm-folded"}).is_object() ? "norm-folded" : "stored";
      const std::string error = fmt::format("{} / {} ({})", number(lookup(errors, {basis, "median_relative_frobenius"}), "{:.4f}"),
                                            number(lookup(errors, {basis, "max_relative_frobenius"}), "{:.4f}"), basis);
      std::string activations = lookup(a, {"activations", "applied"}).is_string()
                                    ? lookup(a, {"activations", "applied"}).get<std::string>()
                                    : std::string("—");
      if (activations == "declared")
        activations = fmt::format("{} per {}", lookup(a, {"activations", "spec", "kind"}).get<std::string>(),
                                  lookup(a, {"activations", "spec", "granularity"}).get<std::string>());
      rows += fmt::format("| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |\n", markdown_cell(r.label),
                          markdown_cell(s.at("name").get<std::string>()),
                          markdown_cell(lookup(a, {"method"}).is_string() ? a.at("method").get<std::string>() : "—"),
                          markdown_cell(activations), delta_text(v.at("dppl")), dnll, number(v.at("kl_mean"), "{:.5f}"),
                          number(v.at("top1_agreement").is_number() ? nlohmann::json(100 * v.at("top1_agreement").get<double>())
                                                                     : nlohmann::json(nullptr), "{:.2f} %"),
                          error, number(lookup(a, {"bytes_per_weight"}), "{:.3f}"));
    }
  }
  if (rows.empty()) return "";
  return "\nArtifacts beside their parent (eval --compare-checkpoint; docs/quantized-checkpoints.md)\n\n"
         "| model | artifact | method | activations | ΔPPL | paired ΔNLL ± se | KL | top-1 | weight error median / max | "
         "bytes / parameter |\n|---|---|---|---|---:|---:|---:|---:|---:|---:|\n" + rows;
}

std::string format_comparison(const std::vector<LabeledRecord>& records, CompareFormat format,
                              bool protocol_mismatch_allowed, const std::string& entropy_scheme) {
  QEVAL_CHECK(!records.empty(), "compare: no records given");
  const nlohmann::json rows = comparison_rows(records);
  const bool mismatch = protocols_differ(records);
  QEVAL_CHECK(!mismatch || protocol_mismatch_allowed, "compare: records differ in protocol or data");
  std::vector<PenaltyColumn> columns;
  for (const auto& c : penalty_columns())
    if (!c.optional || any_has(rows, c.scheme)) columns.push_back(c);

  if (format == CompareFormat::json)
    return utf8_safe(nlohmann::json{{"protocol", comparison_identity(records.front().record)},
                          {"protocol_mismatch", mismatch},
                          {"partial_records", std::any_of(records.begin(), records.end(),
                                                          [](const LabeledRecord& r) { return !r.partial.empty(); })},
                          {"rows", rows},
                          {"per_token", tails_json(records)}}
               ).dump(2) +
           "\n";

  if (format == CompareFormat::csv) {
    std::string out = "model,record,softmax1,orthoadam,optimizer,ppl_full,kurtosis_first,kurtosis_rest,max_abs_first,"
                      "max_abs_rest,first_attn_pct,sink_rate_pct";
    for (const auto& c : columns) out += fmt::format(",dppl_{}", c.scheme);  // preset names
    out += "\n";
    for (const auto& r : rows) {
      out += csv_field(r["model"].get<std::string>());
      for (const char* key : {"record", "softmax1", "orthoadam", "optimizer", "ppl_full", "kurtosis_first",
                              "kurtosis_rest", "max_abs_first", "max_abs_rest", "first_attn_pct", "sink_rate_pct"})
        out += "," + csv_value(r[key]);
      for (const auto& c : columns) out += "," + csv_value(r["dppl"][c.scheme]);
      out += "\n";
    }
    return out;
  }

  std::string out =
      "Outliers and attention (full precision; Kaul et al. Table 2 layout)\n\n"
      "| model | softmax-1 | OrthoAdam | PPL | kurtosis first | kurtosis rest | max act. first | max act. rest | "
      "%first-attn |\n|---|:-:|:-:|---:|---:|---:|---:|---:|---:|\n";
  for (const auto& r : rows)
    out += fmt::format("| {} | {} | {} | {} | {} | {} | {} | {} | {} |\n", markdown_cell(r["model"].get<std::string>()),
                       yes_no(r["softmax1"]), yes_no(r["orthoadam"]), table_number(r["ppl_full"], 3),
                       table_number(r["kurtosis_first"], 1), table_number(r["kurtosis_rest"], 2),
                       table_number(r["max_abs_first"], 1), table_number(r["max_abs_rest"], 2),
                       table_number(r["first_attn_pct"], 1));
  out += "\nQuantisation penalty (ΔPPL vs full precision; Kaul et al. Table 3 layout)\n\n| model | PPL full |";
  std::string rule = "|---|---:|";
  for (const auto& c : columns) {
    out += fmt::format(" {} |", c.title);
    rule += "---:|";
  }
  out += "\n" + rule + "\n";
  for (const auto& r : rows) {
    out += fmt::format("| {} | {} |", markdown_cell(r["model"].get<std::string>()), table_number(r["ppl_full"], 3));
    for (const auto& c : columns) out += " " + delta_text(r["dppl"][c.scheme]) + " |";
    out += "\n";
  }
  out += format_family_table(records);
  out += artifact_table(records);
  out += rounding_band_table(records);
  out += kl_divergence_blocks_markdown(records);
  out += position_buckets_markdown(records);
  out += entropy_tables_markdown(records, entropy_scheme);
  std::vector<std::string> notes;
  bool unknown_recipe = false, mismatch_precision = false;
  for (const auto& r : rows) unknown_recipe |= r["orthoadam"].is_null();
  if (unknown_recipe) notes.push_back("OrthoAdam \"?\": the checkpoint does not say how it was trained.");
  notes.push_back("4-bit Δ is w4-zeropoint (per-channel 4-bit weights); \"—\": not evaluated or not collected.");
  if (mismatch)
    notes.push_back("WARNING: the records were evaluated under different protocols, data or scheme definitions "
                    "(--allow-protocol-mismatch); their numbers are not comparable.");
  std::string precisions;  // named per record when they differ (--allow-protocol-mismatch)
  for (const auto& r : records) {
    const nlohmann::json p = precision_identity(r.record.value("precision", nlohmann::json(nullptr)));
    precisions += fmt::format("{}{}: {}", precisions.empty() ? "" : ", ", r.label, json_text(p));
    if (p != precision_identity(records.front().record.value("precision", nlohmann::json(nullptr)))) mismatch_precision = true;
  }
  if (mismatch_precision) notes.push_back("WARNING: the records' precisions differ: " + precisions + ".");
  for (const auto& r : records)
    for (const auto& p : r.partial)
      notes.push_back("WARNING: " + p + ": the row does not cover the protocol's windows (--allow-partial).");
  out += "\n";
  for (const auto& n : notes) out += "- " + n + "\n";
  return out;
}

}  // namespace qeval
