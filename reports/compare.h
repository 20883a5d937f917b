// `qeval compare`: several result records side by side, in the paper's layouts (Kaul et al.,
// ICLR 2025): Table 2 (model, softmax-1?, OrthoAdam?, PPL, kurtosis first/rest, max activation
// first/rest, %first-attn) and Table 3 (PPL full, coarse Δ, moderate Δ, fine Δ, 4-bit Δ, plus
// int8-vectorwise Δ and 4-bit g128 Δ when any record has them), as Markdown, CSV or JSON.
//
// What a record must hold (nothing else is read):
//   model.path, model.config.attention_softmax, model.config.optimizer (optional),
//   protocol, data.hash (+ data.text_split, data.json_field when present),
//   schemes[i].name, schemes[i].perplexity.ppl, schemes[i].vs_full.dppl,
//   schemes[i].statistics (null, or the StatisticsCollector summary: hidden.kurtosis.first, ...;
//   the entropy tables read layers and attention / implicit_attention / selection's layers and
//   entropy_per_layer, reports/layer_entropy.h)
// Table 2's statistics come from the scheme named "full" (else the first scheme).
// "4-bit Δ" is w4-zeropoint (per-channel 4-bit weights), as in `qeval eval`'s penalty table.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "common/json_diff.h"

namespace qeval {

struct LabeledRecord {
  std::string source;  // the file it came from (errors, and the label when models share a name)
  nlohmann::json record;
  std::string label;  // the model's name in the tables; filled by label_records when empty
  // Why the record does not cover its protocol's windows (a shard, a partial merge), when it was
  // allowed in (--allow-partial): its row is marked and the notes say why.
  std::vector<std::string> partial;
};

// What must agree for two records' numbers to be comparable across models: the protocol's
// parameters (without the counts and hashes that depend on the tokenizer: windows,
// scored_tokens, token_stream_hash, separator_id) and the data (file hash, text split, JSON
// field). Model, tokenizer, precision, schemes and options may differ: that is the point.
nlohmann::json comparison_identity(const nlohmann::json& record);


// Throws qeval::Error naming both files and the differing fields when any record's
// comparison_identity differs from the first one's, or when two records define a scheme of the
// same name differently (records/record_verify.h).
void require_same_protocol(const std::vector<LabeledRecord>& records);

// Default labels: the model's file stem (or folder name); when two records would share a label,
// each gets " (<record file stem>)" appended. Labels already set are kept.
void label_records(std::vector<LabeledRecord>& records);

// One row per record with both tables' fields; numbers are null when not collected:
// {"model", "record", "softmax1": bool, "orthoadam": true|false|null (unknown),
//  "optimizer": string|null, "ppl_full", "kurtosis_first", "kurtosis_rest", "max_abs_first",
//  "max_abs_rest", "first_attn_pct", "sink_rate_pct",
//  "dppl": {"int8-coarse": x|null, "int8-moderate", "int8-fine", "w4-zeropoint",
//           "int8-vectorwise", "w4-zeropoint-g128"}}
nlohmann::json comparison_rows(const std::vector<LabeledRecord>& records);

// The Table 3 schemes in column order, with their column titles.
struct PenaltyColumn {
  const char* scheme;
  const char* title;
  bool optional;  // shown only when some record has the scheme
};
const std::vector<PenaltyColumn>& penalty_columns();

enum class CompareFormat { markdown, csv, json };
CompareFormat parse_compare_format(const std::string& s);  // md | csv | json; throws otherwise

// Markdown: a Table 2 and a Table 3 under headings, the rounding band (records with one), the
// entropy tables (reports/layer_entropy.h: entropy by layer of `entropy_scheme`, and for a single
// record how each scheme moves it), then notes (unknown recipe, protocol, partial records: their
// rows are marked "(partial)").
// CSV: one header line and one line per record, both tables' columns (RFC 4180 quoting).
// JSON: {"protocol": first record's comparison_identity, "protocol_mismatch": bool, "rows": [...]}.
std::string format_comparison(const std::vector<LabeledRecord>& records, CompareFormat format,
                              bool protocol_mismatch_allowed = false, const std::string& entropy_scheme = "full");

}  // namespace qeval
