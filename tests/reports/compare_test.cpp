// qeval compare on hand-made records: what goes in which column, recipe flags, missing values,
// the three formats, labels, and every refusal (protocol/data mismatch, malformed records).
#include "reports/compare.h"

#include <gtest/gtest.h>

#include "common/error.h"
#include "reports/table.h"
#include "tests/support/hand_records.h"

namespace qeval {
namespace {

using test::hand_protocol;
using test::hand_record;
using test::hand_statistics;

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

std::vector<LabeledRecord> two_models() {
  // Adam + softmax: large first-token outliers; OrthoAdam + softmax-1: none. Numbers are made up.
  nlohmann::json adam = hand_record("runs/adam-softmax", "softmax", "adam",
                                    {{"full", 12.5, 0.0, hand_statistics(120.0, 7.25, 900.0, 30.5, 98.0, 100.0)},
                                     {"int8-coarse", 20.0, 7.5},
                                     {"int8-moderate", 14.0, 1.5},
                                     {"int8-fine", 12.75, 0.25},
                                     {"w4-zeropoint", 13.5, 1.0}});
  nlohmann::json ortho = hand_record("runs/ortho-softmax1/model.safetensors", "softmax1", "orthoadam",
                                     {{"full", 12.0, 0.0, hand_statistics(3.5, 3.25, 12.0, 4.5, 2.0, 0.0)},
                                      {"int8-coarse", 12.5, 0.5},
                                      {"int8-fine", 12.0625, 0.0625},
                                      {"int8-vectorwise", 12.125, 0.125}});
  return {{"a.json", adam, ""}, {"b.json", ortho, ""}};
}

TEST(Compare, RowsTakeEachFieldFromTheRecord) {
  auto records = two_models();
  label_records(records);
  nlohmann::json rows = comparison_rows(records);
  ASSERT_EQ(rows.size(), 2u);
  const auto& a = rows[0];
  EXPECT_EQ(a["model"], "adam-softmax");
  EXPECT_EQ(a["softmax1"], false);
  EXPECT_EQ(a["orthoadam"], false);
  EXPECT_EQ(a["optimizer"], "adam");
  EXPECT_EQ(a["ppl_full"], 12.5);
  EXPECT_EQ(a["kurtosis_first"], 120.0);
  EXPECT_EQ(a["kurtosis_rest"], 7.25);
  EXPECT_EQ(a["max_abs_first"], 900.0);
  EXPECT_EQ(a["max_abs_rest"], 30.5);
  EXPECT_EQ(a["first_attn_pct"], 98.0);
  EXPECT_EQ(a["sink_rate_pct"], 100.0);
  EXPECT_EQ(a["dppl"]["int8-coarse"], 7.5);
  EXPECT_EQ(a["dppl"]["int8-moderate"], 1.5);
  EXPECT_EQ(a["dppl"]["int8-fine"], 0.25);
  EXPECT_EQ(a["dppl"]["w4-zeropoint"], 1.0);
  EXPECT_TRUE(a["dppl"]["int8-vectorwise"].is_null());
  const auto& b = rows[1];
  EXPECT_EQ(b["model"], "ortho-softmax1");  // HF-style file name: the folder names the model
  EXPECT_EQ(b["softmax1"], true);
  EXPECT_EQ(b["orthoadam"], true);
  EXPECT_TRUE(b["dppl"]["int8-moderate"].is_null());
  EXPECT_TRUE(b["dppl"]["w4-zeropoint"].is_null());
  EXPECT_EQ(b["dppl"]["int8-vectorwise"], 0.125);
}

TEST(Compare, UnknownRecipeAndMissingStatisticsAreShownAsUnknown) {
  // A llama2.c checkpoint says nothing about its optimizer; statistics were not collected.
  nlohmann::json r = hand_record("models/stories260K/stories260K.bin", "softmax", std::nullopt, {{"full", 5.0, 0.0}});
  std::vector<LabeledRecord> records{{"s.json", r, ""}};
  label_records(records);
  nlohmann::json row = comparison_rows(records)[0];
  EXPECT_EQ(row["model"], "stories260K");
  EXPECT_TRUE(row["orthoadam"].is_null());
  EXPECT_TRUE(row["kurtosis_first"].is_null());
  EXPECT_TRUE(row["first_attn_pct"].is_null());
  std::string md = format_comparison(records, CompareFormat::markdown);
  EXPECT_TRUE(contains(md, "| stories260K | no | ? | 5.000 | — | — | — | — | — |")) << md;
  EXPECT_TRUE(contains(md, "does not say how it was trained")) << md;
}

TEST(Compare, MarkdownHasBothTablesAndOptionalColumnsOnlyWhenPresent) {
  auto records = two_models();
  label_records(records);
  std::string md = format_comparison(records, CompareFormat::markdown);
  EXPECT_TRUE(contains(md, "| adam-softmax | no | no | 12.500 | 120.0 | 7.25 | 900.0 | 30.50 | 98.0 |")) << md;
  EXPECT_TRUE(contains(md, "| ortho-softmax1 | yes | yes | 12.000 | 3.5 | 3.25 | 12.0 | 4.50 | 2.0 |")) << md;
  EXPECT_TRUE(contains(md, "| model | PPL full | coarse Δ | moderate Δ | fine Δ | 4-bit Δ | vectorwise Δ |")) << md;
  EXPECT_FALSE(contains(md, "g128")) << md;  // no record has w4-zeropoint-g128
  EXPECT_TRUE(contains(md, "| adam-softmax | 12.500 | +7.5000 | +1.5000 | +0.2500 | +1.0000 | — |")) << md;
  EXPECT_TRUE(contains(md, "| ortho-softmax1 | 12.000 | +0.5000 | — | +0.0625 | — | +0.1250 |")) << md;
}

TEST(Compare, CsvHasOneLinePerRecordAndQuotesLabels) {
  auto records = two_models();
  records[0].label = "adam, softmax \"v1\"";
  label_records(records);
  std::string csv = format_comparison(records, CompareFormat::csv);
  std::vector<std::string> lines;
  for (std::size_t start = 0, end; (end = csv.find('\n', start)) != std::string::npos; start = end + 1)
    lines.push_back(csv.substr(start, end - start));
  ASSERT_EQ(lines.size(), 3u) << csv;
  EXPECT_EQ(lines[0],
            "model,record,softmax1,orthoadam,optimizer,ppl_full,kurtosis_first,kurtosis_rest,max_abs_first,max_abs_rest,"
            "first_attn_pct,sink_rate_pct,dppl_int8-coarse,dppl_int8-moderate,dppl_int8-fine,dppl_w4-zeropoint,"
            "dppl_int8-vectorwise");
  EXPECT_EQ(lines[1], "\"adam, softmax \"\"v1\"\"\",a.json,false,false,adam,12.5,120.0,7.25,900.0,30.5,98.0,100.0,7.5,1.5,"
                      "0.25,1.0,");
  EXPECT_EQ(lines[2], "ortho-softmax1,b.json,true,true,orthoadam,12.0,3.5,3.25,12.0,4.5,2.0,0.0,0.5,,0.0625,,0.125");
}

// Issue 51: a name from a record, a folder or an option cannot add a Markdown column or row, nor
// become a spreadsheet formula in CSV. Every row of every table keeps its column count.
TEST(Compare, NamesCannotAddColumnsRowsOrFormulas) {
  auto records = two_models();
  records[0].label = "a | b | c";                   // a pipe: two more Markdown columns
  records[1].label = "=HYPERLINK(\"http://x\",\"y\")";  // a formula in a spreadsheet
  label_records(records);
  auto count_columns = [](const std::string& line) {  // unescaped pipes
    std::size_t n = 0;
    for (std::size_t i = 0; i < line.size(); ++i) n += line[i] == '|' && (i == 0 || line[i - 1] != '\\');
    return n;
  };
  const std::string md = format_comparison(records, CompareFormat::markdown);
  std::size_t header = 0;
  for (std::size_t start = 0, end; (end = md.find('\n', start)) != std::string::npos; start = end + 1) {
    const std::string line = md.substr(start, end - start);
    if (line.empty() || line[0] != '|') {
      header = 0;  // a new table follows
      continue;
    }
    if (header == 0) header = count_columns(line);
    EXPECT_EQ(count_columns(line), header) << line;
  }
  EXPECT_TRUE(contains(md, "a \\| b \\| c")) << md;
  const std::string csv = format_comparison(records, CompareFormat::csv);
  EXPECT_TRUE(contains(csv, "\n\"'=HYPERLINK(\"\"http://x\"\",\"\"y\"\")\",")) << csv;
  EXPECT_FALSE(contains(csv, "\n=")) << csv;
  // Scheme names from scheme files are escaped the same way in a record's own tables.
  nlohmann::json piped = test::hand_record("runs/x", "softmax", "adam",
                                           {{"full", 12.0, 0.0, hand_statistics(3.5, 3.25, 12.0, 4.5, 2.0, 0.0)},
                                            {"int8|fake column", 12.5, 0.5}});
  for (auto& scheme : piped["schemes"]) scheme["timing"] = {{"tokens_per_second", 100.0}};
  EXPECT_TRUE(contains(scheme_table_markdown(piped), "| int8\\|fake column |")) << scheme_table_markdown(piped);
}

TEST(Compare, JsonCarriesRowsAndProtocol) {
  auto records = two_models();
  label_records(records);
  nlohmann::json j = nlohmann::json::parse(format_comparison(records, CompareFormat::json));
  EXPECT_EQ(j["protocol_mismatch"], false);
  EXPECT_EQ(j["protocol"]["protocol"]["seq_len"], 256);
  EXPECT_FALSE(j["protocol"]["protocol"].contains("token_stream_hash"));
  EXPECT_EQ(j["rows"].size(), 2u);
  EXPECT_EQ(j["rows"][1]["dppl"]["int8-fine"], 0.0625);
}

TEST(Compare, DifferentModelsAndTokenizersUnderOneProtocolAreComparable) {
  auto records = two_models();
  // Another tokenizer cuts the same text into other windows: counts, hashes and separator differ.
  records[1].record["protocol"]["windows"] = 17;
  records[1].record["protocol"]["scored_tokens"] = 17 * 255;
  records[1].record["protocol"]["token_stream_hash"] = "ffff";
  records[1].record["protocol"]["separator_id"] = 50256;
  EXPECT_NO_THROW(require_same_protocol(records));
  // Another precision is another measurement: refused like check refuses it (issue 63).
  records[1].record["precision"] = {{"dtype", "fp16"}, {"device", "cuda"}};
  EXPECT_THROW(require_same_protocol(records), Error);
}

TEST(Compare, ProtocolMismatchIsRefusedNamingFilesAndField) {
  auto records = two_models();
  records[1].record["protocol"] = hand_protocol(512);
  try {
    require_same_protocol(records);
    FAIL() << "expected a protocol mismatch";
  } catch (const Error& e) {
    std::string m = e.what();
    EXPECT_TRUE(contains(m, "a.json")) << m;
    EXPECT_TRUE(contains(m, "b.json")) << m;
    EXPECT_TRUE(contains(m, "protocol.seq_len: 256 vs 512")) << m;
    EXPECT_TRUE(contains(m, "--allow-protocol-mismatch")) << m;
  }
  EXPECT_THROW(format_comparison(records, CompareFormat::markdown, false), Error);
  std::string md = format_comparison(records, CompareFormat::markdown, true);
  EXPECT_TRUE(contains(md, "WARNING")) << md;
  EXPECT_EQ(nlohmann::json::parse(format_comparison(records, CompareFormat::json, true))["protocol_mismatch"], true);
}

TEST(Compare, DataMismatchIsRefused) {
  auto records = two_models();
  records[1].record["data"]["hash"] = "other";
  try {
    require_same_protocol(records);
    FAIL() << "expected a data mismatch";
  } catch (const Error& e) {
    EXPECT_TRUE(contains(e.what(), "data.hash")) << e.what();
  }
  records = two_models();
  records[1].record["data"]["text_split"] = "line";
  EXPECT_THROW(require_same_protocol(records), Error);
}

TEST(Compare, MalformedRecordsNameTheirFile) {
  auto records = two_models();
  records[1].record["model"]["config"].erase("attention_softmax");
  try {
    comparison_rows(records);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_TRUE(contains(e.what(), "b.json")) << e.what();
    EXPECT_TRUE(contains(e.what(), "attention_softmax")) << e.what();
  }
  records = two_models();
  records[0].record["schemes"] = nlohmann::json::array();
  EXPECT_THROW(comparison_rows(records), Error);
  records = two_models();
  records[0].record["schemes"][1].erase("vs_full");
  EXPECT_THROW(comparison_rows(records), Error);
  records = two_models();
  records[0].record.erase("protocol");
  EXPECT_THROW(require_same_protocol(records), Error);
  EXPECT_THROW(format_comparison({}, CompareFormat::markdown), Error);
}

TEST(Compare, DuplicateLabelsGetTheRecordName) {
  auto records = two_models();
  records[1].record["model"]["path"] = "runs/adam-softmax";
  records[1].source = "results/second.json";
  label_records(records);
  EXPECT_EQ(records[0].label, "adam-softmax (a)");
  EXPECT_EQ(records[1].label, "adam-softmax (second)");
}

TEST(Compare, FormatNames) {
  EXPECT_EQ(parse_compare_format("md"), CompareFormat::markdown);
  EXPECT_EQ(parse_compare_format("csv"), CompareFormat::csv);
  EXPECT_EQ(parse_compare_format("json"), CompareFormat::json);
  EXPECT_THROW(parse_compare_format("xml"), Error);
}

}  // namespace
}  // namespace qeval
