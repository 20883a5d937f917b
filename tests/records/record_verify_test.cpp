// Records and states verified, not trusted (records/record_verify.h, records/run_state.h,
// records/window_rows.h): a record built by build_record from a real evaluation passes, and every
// way of making it disagree with itself is refused by name; a resume state round-trips with its
// checksum and is held against the data it claims.
#include "records/record_verify.h"

#include <gtest/gtest.h>

#include <cmath>

#include <functional>
#include <memory>

#include "common/error.h"
#include "eval/evaluator.h"
#include "records/merge.h"
#include "records/record.h"
#include "records/run_state.h"
#include "reports/table.h"
#include "records/window_rows.h"
#include "stats/statistics.h"
#include "tests/support/hand_records.h"
#include "tests/support/test_data.h"
#include "tests/support/test_models.h"

namespace qeval {
namespace {

using nlohmann::json;

const std::vector<std::string> kDocs = {"the quick brown fox jumps over the lazy dog", "pack my box with five dozen liquor jugs",
                                        "sphinx of black quartz, judge my vow", "how vexingly quick daft zebras jump"};

ProtocolSpec spec16() {
  ProtocolSpec spec;
  spec.seq_len = 16;
  return spec;
}

// A real evaluation (two schemes of one random model) and the record qeval writes for it.
struct Evaluated {
  EvalResult result;
  json record;
};

Evaluated evaluate_tiny(const std::function<bool(std::int64_t)>& select = {}) {
  Transformer model = test::random_transformer(7);
  test::ByteTokenizer tok(model.config().vocab_size);
  // Two schemes of one model: full precision and a copy of it (no block rewritten).
  std::vector<EvalScheme> schemes(2);
  schemes[0].name = "full";
  schemes[0].description = {{"scheme", {{"name", "full"}}}};
  schemes[1].name = "copy";
  schemes[1].description = {{"scheme", {{"name", "copy"}}}};
  WindowStream stream(std::make_unique<test::ListDocuments>(kDocs), tok, spec16());
  EvalOptions opt;
  opt.progress = false;
  opt.select_window = select;
  Evaluated e;
  e.result = evaluate(model, schemes, stream, opt);
  RecordContext context;
  context.model = {{"path", "m"}, {"weights_hash", "w"}, {"config", {{"attention_softmax", "softmax"}}}};
  context.tokenizer = {{"kind", "bytes"}};
  context.data = {{"hash", "d"}};
  context.protocol = spec16().to_json();
  context.precision = {{"dtype", "fp32"}, {"device", "cpu"}};
  context.options = json::object();
  e.record = build_record(context, scheme_infos(schemes, {0, 0}), e.result, {});
  return e;
}

// The same evaluation with the statistics collector on full precision, its summary in the record.
json evaluate_tiny_with_statistics() {
  Transformer model = test::random_transformer(7);
  test::ByteTokenizer tok(model.config().vocab_size);
  std::vector<EvalScheme> schemes(1);
  schemes[0].name = "full";
  schemes[0].description = {{"scheme", {{"name", "full"}}}};
  auto stats = std::make_shared<StatisticsCollector>();
  schemes[0].observer = stats;
  schemes[0].begin_batch = [collector = stats.get()](const std::vector<std::int64_t>& w) { collector->begin_batch(w); };
  WindowStream stream(std::make_unique<test::ListDocuments>(kDocs), tok, spec16());
  EvalOptions opt;
  opt.progress = false;
  const EvalResult result = evaluate(model, schemes, stream, opt);
  RecordContext context;
  context.model = {{"path", "m"}, {"weights_hash", "w"}, {"config", {{"n_layers", model.config().n_layers}}}};
  context.tokenizer = {{"kind", "bytes"}};
  context.data = {{"hash", "d"}};
  context.protocol = spec16().to_json();
  context.precision = {{"dtype", "fp32"}, {"device", "cpu"}};
  context.options = json::object();
  return build_record(context, scheme_infos(schemes, {0}), result, {stats->summary()});
}

// A selection section over layers 0 and 1 of a model whose config says every layer attends.
json with_selection_on(json record) {
  record["schemes"][0]["statistics"]["selection"] =
      json::parse(R"({"layers": [0, 1], "entropy": 1.5, "entropy_per_layer": [1.0, 2.0]})");
  record["schemes"][0]["statistics"]["selection"]["entropy_max"] = std::log(16.0);
  return record;
}

// Issue 51: a statistics summary is held to its per-layer values and their domains, so a forged
// baseline statistic cannot let a regression pass a gate.
TEST(RecordVerify, StatisticsSummariesAgreeWithTheirPerLayerValuesAndDomains) {
  const json record = evaluate_tiny_with_statistics();
  ASSERT_TRUE(record["schemes"][0]["statistics"].is_object());
  EXPECT_NO_THROW(verify_record(record, "r.json"));
  struct Edit {
    const char* name;
    std::function<void(json&)> edit;
    const char* message;
  };
  const std::vector<Edit> edits = {
      {"headline", [](json& st) { st["hidden"]["kurtosis"]["rest"] = st["hidden"]["kurtosis"]["rest"].get<double>() / 2; },
       "hidden.kurtosis.rest is"},
      {"kurtosis below 1", [](json& st) { st["hidden"]["kurtosis"]["per_layer"]["first"][0] = 0.5; },
       "a kurtosis is at least 1"},
      {"ratio above 1", [](json& st) { st["hidden"]["inf_over_l2"]["per_layer"]["rest"][1] = 1.5; }, "lies in [0, 1]"},
      {"negative max", [](json& st) { st["hidden"]["max_abs"]["per_layer"]["first"][1] = -1.0; }, "it is at least 0"},
      {"share above 1", [](json& st) { st["attention"]["per_layer"]["first_token_share"][0] = 1.25; },
       "a share lies in [0, 1]"},
      {"percentage", [](json& st) { st["attention"]["per_layer"]["sink_rate_pct"][0] = 250.0; },
       "a percentage lies in [0, 100]"},
      {"forged sink rate", [](json& st) { st["attention"]["sink_rate_pct"] = st["attention"]["sink_rate_pct"].get<double>() + 10; },
       "attention.sink_rate_pct is"},
      {"entropy", [](json& st) { st["attention"]["entropy"] = -1.0; }, "attention.entropy is -1"},
      {"short list", [](json& st) { st["hidden"]["max_abs"]["per_layer"]["rest"].erase(0); }, "lists 1 layers, the model has 2"},
      {"depth", [](json& st) { st["layers"] = 3; }, "statistics.layers is 3, but the model has 2 layers"},
      {"not a number", [](json& st) { st["attention"]["per_layer"]["first_attn_pct"][1] = "12"; }, "expected a number or null"},
  };
  for (const Edit& e : edits) {
    SCOPED_TRACE(e.name);
    json r = record;
    e.edit(r["schemes"][0]["statistics"]);
    EXPECT_TRUE(test::throws_with([&] { verify_record(r, "r.json"); }, {"r.json: scheme full: statistics", e.message}));
  }

  // Issues 54 and 63: a state-space layer's selection entropy lies in [0, log L], entropy_max is
  // log L (L = 16 here), the headline is the mean, and the section covers the model's SSM layers.
  json ssm = record;
  ssm["model"]["config"]["layer_mixers"] = {"mamba", "mamba"};
  ssm["schemes"][0]["statistics"].erase("attention");
  ssm["schemes"][0]["statistics"]["selection"] =
      json::parse(R"({"layers": [0, 1], "entropy": 1.5, "entropy_per_layer": [1.0, 2.0]})");
  ssm["schemes"][0]["statistics"]["selection"]["entropy_max"] = std::log(16.0);
  EXPECT_NO_THROW(verify_record(ssm, "r.json"));
  EXPECT_TRUE(test::throws_with([&] { verify_record(with_selection_on(record), "r.json"); },
                                {"r.json: scheme full: statistics.selection.layers names layers [0, 1], but the model's "
                                 "Mamba / Mamba-2 layers are none"}));
  const std::vector<Edit> selection_edits = {
      {"selection above log L", [](json& sel) { sel["entropy_per_layer"] = {3.0, 1.0}; }, "an entropy lies in [0, log L]"},
      {"selection headline", [](json& sel) { sel["entropy"] = 2.0; }, "selection.entropy is 2"},
      {"entropy_max", [](json& sel) { sel["entropy_max"] = std::log(32.0); }, "selection.entropy_max is 3.4657"},
      {"layer twice", [](json& sel) { sel["layers"] = {0, 0}; }, "selection.layers lists layer 0 twice"},
  };
  for (const Edit& e : selection_edits) {
    SCOPED_TRACE(e.name);
    json r = ssm;
    e.edit(r["schemes"][0]["statistics"]["selection"]);
    EXPECT_TRUE(test::throws_with([&] { verify_record(r, "r.json"); }, {"r.json: scheme full: statistics", e.message}));
  }
}

TEST(RecordVerify, ARecordQevalWroteIsCompleteAndItsSummariesMatch) {
  const Evaluated e = evaluate_tiny();
  const RecordVerification v = verify_record(e.record, "r.json");
  EXPECT_EQ(v.windows, e.result.windows);
  EXPECT_TRUE(v.partial.empty());
  EXPECT_TRUE(require_verified_record(e.record, "r.json", false).empty());
}

// The evaluator's window hashes are the ones run_state_from_json and verify_resumed_windows recompute.
TEST(RecordVerify, WindowContentHashIsTheEvaluatorsHash) {
  const Evaluated e = evaluate_tiny();
  test::ByteTokenizer tok(64);
  WindowStream stream(std::make_unique<test::ListDocuments>(kDocs), tok, spec16());
  std::int64_t seen = 0;
  while (auto w = stream.next()) {
    ASSERT_TRUE(e.result.window_hashes.count(w->index)) << w->index;
    EXPECT_EQ(window_content_hash(*w), e.result.window_hashes.at(w->index)) << "window " << w->index;
    ++seen;
  }
  EXPECT_EQ(seen, e.result.windows);
}

struct RecordEdit {
  const char* name;
  std::function<void(json&)> edit;
  const char* message;
};

class RecordVerifyRefuses : public ::testing::TestWithParam<RecordEdit> {};

TEST_P(RecordVerifyRefuses, AnEditThatMakesTheRecordDisagreeWithItself) {
  json r = evaluate_tiny().record;
  GetParam().edit(r);
  EXPECT_TRUE(test::throws_with([&] { verify_record(r, "r.json"); }, {"r.json", GetParam().message}));
}

INSTANTIATE_TEST_SUITE_P(
    Edits, RecordVerifyRefuses,
    ::testing::Values(
        RecordEdit{"ppl", [](json& r) { r["schemes"][0]["perplexity"]["ppl"] = 5.6; }, "perplexity.ppl is 5.6, but the per-window rows give"},
        RecordEdit{"ppl_null", [](json& r) { r["schemes"][1]["perplexity"]["ppl"] = nullptr; }, "perplexity.ppl is null"},
        RecordEdit{"se", [](json& r) { r["schemes"][0]["perplexity"]["nll_se"] = 0.0; }, "perplexity.nll_se is 0"},
        RecordEdit{"dppl", [](json& r) { r["schemes"][1]["vs_full"]["dppl"] = 1.0; }, "vs_full.dppl is 1"},
        RecordEdit{"agreement", [](json& r) { r["schemes"][1]["vs_full"]["top1_agreement"] = 0.5; }, "vs_full.top1_agreement is 0.5"},
        RecordEdit{"tokens_zero", [](json& r) { r["schemes"][0]["per_window"]["0"]["tokens"] = 0; }, "\"tokens\" is 0"},
        RecordEdit{"tokens_huge", [](json& r) { r["schemes"][1]["per_window"]["1"]["tokens"] = std::int64_t{1} << 62; },
                   "\"tokens\" is 4611686018427387904"},
        RecordEdit{"nll_negative", [](json& r) { r["schemes"][0]["per_window"]["0"]["nll_sum"] = -2.0; }, "\"nll_sum\" is -2"},
        RecordEdit{"squares", [](json& r) { r["schemes"][0]["per_window"]["0"]["nll_sq_sum"] = 0.0; }, "below nll_sum² / tokens"},
        RecordEdit{"full_differs", [](json& r) { r["schemes"][0]["per_window"]["0"]["kl_sum"] = 0.5; },
                   "full precision compared with itself"},
        RecordEdit{"agree_above", [](json& r) { r["schemes"][1]["per_window"]["0"]["top1_agree"] = 99; }, "\"top1_agree\" is 99"},
        RecordEdit{"row_gone", [](json& r) { r["schemes"][1]["per_window"].erase("0"); }, "scheme copy has"},
        RecordEdit{"windows", [](json& r) { r["protocol"]["windows"] = 99; }, "protocol.windows is 99"},
        RecordEdit{"scored", [](json& r) { r["protocol"]["scored_tokens"] = 1; }, "protocol.scored_tokens is 1"},
        RecordEdit{"stream_hash", [](json& r) { r["protocol"]["token_stream_hash"] = "0000000000000000"; },
                   "token_stream_hash is \"0000000000000000\""},
        RecordEdit{"key", [](json& r) { r["schemes"][0]["per_window"]["+1"] = r["schemes"][0]["per_window"]["0"]; },
                   "window key \"+1\" is not a window index"},
        RecordEdit{"gap", [](json& r) {
                     for (auto& s : r["schemes"]) s["per_window"].erase("1");
                     r.erase("window_hashes");
                     r["protocol"]["windows"] = r["protocol"]["windows"].get<int>() - 1;
                     r["protocol"]["scored_tokens"] = r["protocol"]["scored_tokens"].get<int>() - 15;
                   }, "the windows are not 0.."},
        RecordEdit{"shard_count_one", [](json& r) { r["shard"] = {{"index", 0}, {"count", 1}}; }, "expected i/n with n >= 2"}),
    [](const ::testing::TestParamInfo<RecordEdit>& info) { return info.param.name; });

// A shard's windows are its own and, when it says how many the protocol gave, all of them; a shard
// is partial; merge refuses a missing shard unless told, and marks the record it then writes.
TEST(RecordVerify, ShardsArePartialAndMergeNeedsThemAll) {
  Evaluated s[2];
  for (std::int64_t i = 0; i < 2; ++i) {
    s[i] = evaluate_tiny([i](std::int64_t w) { return w % 2 == i; });
    std::vector<std::shared_ptr<StatisticsCollector>> none(2);
    s[i].record["shard"] = {{"index", i}, {"count", 2}, {"protocol_windows", evaluate_tiny().result.windows},
                            {"state", run_state_to_json(s[i].result, none)}};
  }
  const RecordVerification v = verify_record(s[0].record, "s0.json");
  ASSERT_EQ(v.partial.size(), 1u);
  EXPECT_NE(v.partial[0].find("shard 0/2"), std::string::npos) << v.partial[0];
  EXPECT_TRUE(test::throws_with([&] { require_verified_record(s[0].record, "s0.json", false); }, {"s0.json is partial"}));
  EXPECT_FALSE(require_verified_record(s[0].record, "s0.json", true).empty());

  const json merged = merge_shard_records({s[0].record, s[1].record}, {"s0.json", "s1.json"});
  EXPECT_TRUE(verify_record(merged, "merged").partial.empty());
  EXPECT_EQ(merged["protocol"]["token_stream_hash"], evaluate_tiny().record["protocol"]["token_stream_hash"]);

  EXPECT_TRUE(test::throws_with([&] { merge_shard_records({s[0].record}, {"s0.json"}); }, {"shard 1/2 is missing"}));
  const json partial = merge_shard_records({s[0].record}, {"s0.json"}, /*allow_partial=*/true);
  EXPECT_FALSE(verify_record(partial, "p.json").partial.empty());

  json lacking = s[1].record;
  for (auto& scheme : lacking["schemes"]) scheme["per_window"].erase("1");
  EXPECT_TRUE(test::throws_with([&] { verify_record(lacking, "s1.json"); }, {"s1.json"}));
  json foreign = s[0].record;  // counts made consistent, so that only the membership is wrong
  for (auto& scheme : foreign["schemes"]) scheme["per_window"]["1"] = scheme["per_window"]["0"];
  foreign.erase("window_hashes");
  foreign["protocol"]["windows"] = foreign["protocol"]["windows"].get<int>() + 1;
  foreign["protocol"]["scored_tokens"] = foreign["protocol"]["scored_tokens"].get<int>() + 15;
  EXPECT_TRUE(test::throws_with([&] { verify_record(foreign, "s0.json"); }, {"window 1 is not one of shard 0/2's windows"}));
}

TEST(RecordVerify, SchemeDefinitionsAreComparedWithoutTheirDescriptionText) {
  json a = evaluate_tiny().record, b = a;
  b["schemes"][1]["description"]["scheme"]["description"] = "other words";
  EXPECT_TRUE(scheme_definition_differences(a, b).empty());
  b["schemes"][1]["description"]["scheme"]["weights"] = {{"granularity", "channel"}};
  const auto d = scheme_definition_differences(a, b);
  ASSERT_FALSE(d.empty());
  EXPECT_NE(d[0].find("\"copy\" is defined differently"), std::string::npos) << d[0];
}

// Issue 63: a rounding variant is part of its scheme's identity: two records whose variants of one
// name vary another scheme, or jitter with another seed or ε, define them differently (check and
// compare refuse them without --allow-protocol-mismatch).
TEST(RecordVerify, RoundingVariantsAreComparedByTheirSchemeSeedAndEps) {
  json a = evaluate_tiny().record;
  a["schemes"][1]["description"]["rounding_band_of"] = "full";
  a["schemes"][1]["description"]["rounding_seed"] = 1;
  a["schemes"][1]["description"]["rounding_eps"] = 1.0 / (1 << 22);
  json b = a;
  EXPECT_TRUE(scheme_definition_differences(a, b).empty());
  b["schemes"][1]["description"]["rounding_eps"] = 1.0 / (1 << 20);
  auto d = scheme_definition_differences(a, b);
  ASSERT_FALSE(d.empty());
  EXPECT_NE(d[0].find("\"copy\" is defined differently: rounding_variant.rounding_eps"), std::string::npos) << d[0];
  b = a;
  b["schemes"][1]["description"]["rounding_band_of"] = "other";
  d = scheme_definition_differences(a, b);
  ASSERT_FALSE(d.empty());
  EXPECT_NE(d[0].find("rounding_variant.rounding_band_of"), std::string::npos) << d[0];
}

TEST(WindowRows, KeysAreDecimalWindowIndices) {
  EXPECT_EQ(window_index_key("0", "f"), 0);
  EXPECT_EQ(window_index_key("1234", "f"), 1234);
  for (const char* bad : {"", "-1", "+1", "01", "1e3", " 1", "abc", "99999999999999999999"})
    EXPECT_TRUE(test::throws_with([&] { window_index_key(bad, "f"); }, {"f: window key", "is not a window index"})) << bad;
}

TEST(RunState, RoundTripsWithItsChecksumAndRefusesAnyEdit) {
  const Evaluated e = evaluate_tiny();
  std::vector<std::shared_ptr<StatisticsCollector>> none(2);
  const json state = run_state_to_json(e.result, none);
  const EvalResult back = run_state_from_json(json::parse(state.dump()), none, "s.json", 16);
  EXPECT_EQ(back.window_hashes, e.result.window_hashes);
  EXPECT_EQ(back.scored_tokens, e.result.scored_tokens);

  json edited = state;
  edited["schemes"][0]["rows"]["0"]["nll_sum"] = 1.0;
  EXPECT_TRUE(test::throws_with([&] { run_state_from_json(edited, none, "s.json"); }, {"s.json", "checksum", "does not match"}));
  json unsealed = state;
  unsealed.erase("checksum");
  EXPECT_TRUE(test::throws_with([&] { run_state_from_json(unsealed, none, "s.json"); }, {"s.json", "no checksum"}));
}

// verify_resumed_windows holds a state's windows against the windows the data gives.
TEST(RunState, ResumedWindowsAreCheckedAgainstTheData) {
  const Evaluated e = evaluate_tiny();
  test::ByteTokenizer tok(64);
  auto fresh = [&] { return WindowStream(std::make_unique<test::ListDocuments>(kDocs), tok, spec16()); };
  {
    WindowStream stream = fresh();
    EXPECT_NO_THROW(verify_resumed_windows(e.result, stream, {}, "s.json"));
  }
  EvalResult moved = e.result;
  moved.window_hashes[1] ^= 1;
  {
    WindowStream stream = fresh();
    EXPECT_TRUE(test::throws_with([&] { verify_resumed_windows(moved, stream, {}, "s.json"); },
                                  {"s.json: window 1 has hash", "but the data gives"}));
  }
  EvalResult beyond = e.result;
  beyond.window_hashes[999] = 1;
  for (auto& s : beyond.schemes) s.rows[999] = s.rows.begin()->second;
  {
    WindowStream stream = fresh();
    EXPECT_TRUE(test::throws_with([&] { verify_resumed_windows(beyond, stream, {}, "s.json"); },
                                  {"window 999 is in the state, but the data and protocol give no such window"}));
  }
  {
    WindowStream stream = fresh();
    EXPECT_TRUE(test::throws_with([&] { verify_resumed_windows(e.result, stream, [](std::int64_t w) { return w % 2 == 0; }, "s.json"); },
                                  {"window 1 is not one of this shard's windows"}));
  }
}

TEST(Tables, NoComparisonBesideANonFinitePerplexity) {
  json r = test::hand_record("m", "softmax", std::nullopt, {{"full", 10.0, 0.0}, {"int8-coarse", 12.0, 2.0}});
  r["schemes"][0]["timing"] = {{"tokens_per_second", 100.0}};
  r["schemes"][1]["timing"] = {{"tokens_per_second", 100.0}};
  r["schemes"][0]["perplexity"]["ppl"] = nullptr;  // NaN written by a record
  const std::string table = scheme_table_markdown(r);
  EXPECT_NE(table.find("**not finite**"), std::string::npos) << table;
  const std::size_t rows = table.find("\n|---");
  EXPECT_EQ(table.find('%', rows), std::string::npos) << "an agreement printed beside NaN: " << table;
  EXPECT_EQ(table.find("+2.0000", rows), std::string::npos) << "a ΔPPL printed beside NaN: " << table;
  EXPECT_NE(penalty_row_markdown(r).find("not finite"), std::string::npos) << penalty_row_markdown(r);
}

}  // namespace
}  // namespace qeval
