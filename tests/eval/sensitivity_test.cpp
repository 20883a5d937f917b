// Per-layer sensitivity on random models: a unit's ΔNLL equals, bit for bit, a normal evaluation
// of the base scheme restricted to that unit's layers; kinds select exactly their layers; units
// come sorted by harm; which tokens carry the penalty matches a direct per-window computation;
// bad input fails before any window is read.
#include "eval/sensitivity.h"
#include "quant/schemes/presets.h"
#include "reports/sensitivity_report.h"

#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <map>

#include "common/error.h"
#include "common/files.h"
#include "reports/plot.h"
#include "eval/schemes.h"
#include "loaders/protocols/protocol.h"
#include "quant/rewrite.h"
#include "tests/support/test_data.h"
#include "tests/support/test_models.h"

namespace qeval {
namespace {

const std::vector<std::string> kDocs = {
    "the quick brown fox jumps over the lazy dog and runs far away into the woods",
    "pack my box with five dozen liquor jugs, then carry it up the hill to the old mill",
    "sphinx of black quartz, judge my vow; how vexingly quick daft zebras jump",
    "a wizard's job is to vex chumps quickly in fog while the jukebox plays"};

// A window source over kDocs for `model`'s vocabulary; owns its tokenizer.
struct Windows {
  explicit Windows(const Transformer& model, std::int64_t seq_len = 16)
      : tok(model.config().vocab_size), spec(make_spec(seq_len)),
        stream(std::make_unique<test::ListDocuments>(kDocs), tok, spec) {}
  static ProtocolSpec make_spec(std::int64_t seq_len) {
    ProtocolSpec s;
    s.seq_len = seq_len;
    return s;
  }
  test::ByteTokenizer tok;
  ProtocolSpec spec;
  WindowStream stream;
};

SensitivityOptions quiet(SensitivityGrouping by, std::int64_t batch = 1) {
  SensitivityOptions o;
  o.by = by;
  o.batch_size = batch;
  o.progress = false;
  return o;
}

const UnitSensitivity& unit_named(const SensitivityRun& run, const std::string& name) {
  for (const auto& u : run.units)
    if (u.unit.name == name) return u;
  throw std::runtime_error("no unit " + name);
}

TEST(Sensitivity, OneLayerEqualsANormalEvalWhoseSchemeSelectsOnlyThatLayer) {
  for (bool gpt2 : {false, true}) {
    SCOPED_TRACE(gpt2 ? "gpt2" : "llama");
    Transformer model = test::random_transformer(31, gpt2, 64, 32, 3);
    const std::string layer = "layers.1.mlp.down";
    Windows w1(model);
    SensitivityRun run = run_sensitivity(*transformer_reader(model), preset_scheme("int8-moderate"), w1.stream, quiet(SensitivityGrouping::layer, 2));
    const UnitSensitivity& u = unit_named(run, layer);
    EXPECT_EQ(u.scheme, "int8-moderate@layers.1.mlp.down");

    // The normal way: a scheme file that is int8-moderate with "include": [that layer], through
    // make_schemes and evaluate, at another batch size.
    test::TempDir dir;
    nlohmann::json spec = nlohmann::json::parse(preset_json_text("int8-moderate"));
    spec["name"] = "only-down";
    spec["include"] = {layer};
    write_file_atomic(dir / "only.json", spec.dump());
    SchemeOptions no_stats;
    no_stats.stats_for = StatsFor::none;
    PreparedSchemes prepared = make_schemes(model.config(), {"full", (dir / "only.json").string()}, no_stats);
    Windows w2(model);
    EvalOptions eo;
    eo.progress = false;
    eo.batch_size = 3;
    EvalResult normal = evaluate(model, prepared.schemes, w2.stream, eo);
    prepared.finish_descriptions();

    const SchemeSummary expected = normal.schemes[1].summary();
    EXPECT_EQ(u.summary.diff_mean, expected.diff_mean);  // exact doubles, not near
    EXPECT_EQ(u.summary.diff_se, expected.diff_se);
    EXPECT_EQ(u.summary.kl_mean, expected.kl_mean);
    EXPECT_EQ(u.summary.ppl, expected.ppl);
    EXPECT_EQ(u.summary.tokens, expected.tokens);
    EXPECT_NE(expected.diff_mean, 0.0);
    ASSERT_EQ(run.result.schemes[u.scheme_index].rows.size(), normal.schemes[1].rows.size());
    for (const auto& [index, row] : normal.schemes[1].rows)
      EXPECT_EQ(run.result.schemes[u.scheme_index].rows.at(index).diff_sum, row.diff_sum) << "window " << index;
    // The recorder on full precision changed nothing: the reference NLL is the normal one.
    EXPECT_EQ(run.result.schemes[0].summary().nll_mean, normal.schemes[0].summary().nll_mean);
    // The same layers are quantised in both.
    auto quantized = [](const nlohmann::json& description) {
      std::vector<std::string> out;
      for (const auto& l : description.at("layers"))
        if (l.at("quantized").get<bool>()) out.push_back(l.at("name").get<std::string>());
      return out;
    };
    EXPECT_EQ(quantized(run.schemes[u.scheme_index].description), std::vector<std::string>{layer});
    EXPECT_EQ(quantized(prepared.schemes[1].description), std::vector<std::string>{layer});
  }
}

TEST(Sensitivity, LayerGroupingHasEveryLinearTheSchemeSelects) {
  Transformer model = test::random_transformer(2, false, 64, 32, 2);
  auto units = sensitivity_units(model.config(), preset_scheme("int8-fine"), SensitivityGrouping::layer);
  std::vector<std::string> names;
  for (const auto& u : units) {
    ASSERT_EQ(u.layers, std::vector<std::string>{u.name});
    names.push_back(u.name);
  }
  std::vector<std::string> expected;
  for (const auto& l : model.linears())
    if (l.name != "lm_head") expected.push_back(l.name);
  EXPECT_EQ(names, expected);
  SchemeSpec with_head = preset_scheme("int8-fine");
  with_head.quantize_lm_head = true;
  EXPECT_EQ(sensitivity_units(model.config(), with_head, SensitivityGrouping::layer).back().name, "lm_head");
  SchemeSpec some = preset_scheme("int8-fine");
  some.exclude = {"*.attn.*"};
  for (const auto& u : sensitivity_units(model.config(), some, SensitivityGrouping::layer))
    EXPECT_EQ(u.name.find(".attn."), std::string::npos) << u.name;
}

TEST(Sensitivity, KindGroupingSelectsExactlyTheLayersOfThatKind) {
  Transformer llama = test::random_transformer(3, false, 64, 32, 3);
  auto units = sensitivity_units(llama.config(), preset_scheme("int8-moderate"), SensitivityGrouping::kind);
  std::vector<std::string> kinds;
  for (const auto& u : units) {
    kinds.push_back(u.name);
    EXPECT_EQ(u.layers, (std::vector<std::string>{"layers.0." + u.name, "layers.1." + u.name, "layers.2." + u.name}));
  }
  EXPECT_EQ(kinds, (std::vector<std::string>{"attn.q", "attn.k", "attn.v", "attn.o", "mlp.gate", "mlp.up", "mlp.down"}));
  EXPECT_EQ(linear_kind("layers.12.mlp.down"), "mlp.down");
  EXPECT_EQ(linear_kind("lm_head"), "lm_head");

  // Intersected with what the base selects.
  SchemeSpec base = preset_scheme("int8-moderate");
  base.exclude = {"layers.0.*"};
  for (const auto& u : sensitivity_units(llama.config(), base, SensitivityGrouping::kind))
    EXPECT_EQ(u.layers, (std::vector<std::string>{"layers.1." + u.name, "layers.2." + u.name}));
  SchemeSpec variant = unit_scheme(base, {"mlp.up", {"layers.1.mlp.up", "layers.2.mlp.up"}});
  EXPECT_EQ(variant.name, "int8-moderate@mlp.up");
  EXPECT_TRUE(variant.exclude.empty());
  for (const auto& l : llama.linears())
    EXPECT_EQ(variant.selects(l.name), l.name == "layers.1.mlp.up" || l.name == "layers.2.mlp.up") << l.name;

  // GPT-2's fused projection is one kind; a run quantises exactly the unit's layers.
  Transformer gpt2 = test::random_transformer(3, true, 64, 32, 2);
  Windows w(gpt2);
  SensitivityRun run = run_sensitivity(*transformer_reader(gpt2), preset_scheme("int8-moderate"), w.stream, quiet(SensitivityGrouping::kind, 4));
  ASSERT_EQ(run.units.size(), 4u);
  for (const auto& u : run.units) {
    std::vector<std::string> quantized;
    for (const auto& l : run.schemes[u.scheme_index].description.at("layers"))
      if (l.at("quantized").get<bool>()) quantized.push_back(l.at("name").get<std::string>());
    EXPECT_EQ(quantized, u.unit.layers) << u.unit.name;
    EXPECT_EQ(u.scheme, "int8-moderate@" + u.unit.name);
  }
  EXPECT_NO_THROW(unit_named(run, "attn.qkv"));
}

TEST(Sensitivity, UnitsAreSortedByHarmAndTheirInputsAreTheRecordersStatistics) {
  Transformer model = test::random_transformer(7, false, 64, 32, 2);
  Windows w(model);
  SensitivityRun run = run_sensitivity(*transformer_reader(model), preset_scheme("int8-coarse"), w.stream, quiet(SensitivityGrouping::layer, 3));
  ASSERT_EQ(run.units.size(), 14u);
  for (std::size_t i = 1; i < run.units.size(); ++i)
    EXPECT_GE(run.units[i - 1].summary.diff_mean, run.units[i].summary.diff_mean) << "rank " << i + 1;
  EXPECT_GT(run.units.front().summary.diff_mean, run.units.back().summary.diff_mean);
  nlohmann::json j = run.to_json();
  ASSERT_EQ(j.at("units").size(), run.units.size());
  for (std::size_t i = 0; i < run.units.size(); ++i) {
    EXPECT_EQ(j["units"][i].at("rank"), i + 1);
    EXPECT_EQ(j["units"][i].at("unit"), run.units[i].unit.name);
    EXPECT_EQ(j["units"][i].at("dnll_mean").get<double>(), run.units[i].summary.diff_mean);
    // A layer's inputs are its own statistics.
    const LinearInputSummary s = run.inputs->summary(run.units[i].unit.name);
    EXPECT_EQ(run.units[i].inputs.kurtosis_rest, s.kurtosis_rest);
    EXPECT_EQ(run.units[i].inputs.max_abs_first, s.max_abs_first);
    EXPECT_EQ(run.units[i].inputs.largest_value, s.largest_value);
    EXPECT_EQ(s.sequences, run.result.windows);
  }
  // A kind's inputs: the mean over its layers, and the largest of any.
  Windows w2(model);
  SensitivityRun kinds = run_sensitivity(*transformer_reader(model), preset_scheme("int8-coarse"), w2.stream, quiet(SensitivityGrouping::kind));
  const UnitSensitivity& down = unit_named(kinds, "mlp.down");
  const LinearInputSummary a = kinds.inputs->summary("layers.0.mlp.down"), b = kinds.inputs->summary("layers.1.mlp.down");
  EXPECT_DOUBLE_EQ(down.inputs.kurtosis_first, (a.kurtosis_first + b.kurtosis_first) / 2);
  EXPECT_DOUBLE_EQ(down.inputs.max_abs_rest, (a.max_abs_rest + b.max_abs_rest) / 2);
  EXPECT_EQ(std::abs(down.inputs.largest_value), std::max(std::abs(a.largest_value), std::abs(b.largest_value)));
  EXPECT_EQ(down.inputs.largest_layer,
            std::abs(a.largest_value) >= std::abs(b.largest_value) ? "layers.0.mlp.down" : "layers.1.mlp.down");

  // The table lists the units in the same order, --top limits it.
  nlohmann::json record = {{"model", {{"path", "random.bin"}}}, {"data", {{"path", "docs.txt"}}},
                           {"protocol", {{"windows", run.result.windows}, {"seq_len", 16}, {"scored_tokens", 1}}},
                           {"sensitivity", j}};
  const std::string table = sensitivity_table_markdown(record, 3);
  EXPECT_NE(table.find("random on docs.txt"), std::string::npos) << table;
  EXPECT_NE(table.find("int8-coarse applied to one layer at a time"), std::string::npos) << table;
  EXPECT_NE(table.find("| 1 | " + run.units[0].unit.name + " |"), std::string::npos) << table;
  EXPECT_NE(table.find("| 3 | " + run.units[2].unit.name + " |"), std::string::npos) << table;
  EXPECT_EQ(table.find("| 4 | "), std::string::npos) << table;
  EXPECT_NE(table.find("3 of 14 units shown"), std::string::npos) << table;
}

TEST(Sensitivity, FirstTokenShareAndWorstPositionsMatchADirectComputation) {
  Transformer model = test::random_transformer(13, false, 64, 32, 2);
  Windows w(model);
  SensitivityOptions o = quiet(SensitivityGrouping::kind, 2);
  o.top_positions = 4;
  SensitivityRun run = run_sensitivity(*transformer_reader(model), preset_scheme("int8-coarse"), w.stream, o);
  const UnitSensitivity& u = unit_named(run, "mlp.down");

  // Directly: every window alone through full precision and the unit's scheme.
  Transformer q = quantize_model(model, unit_scheme(preset_scheme("int8-coarse"), u.unit)).model;
  Windows again(model);
  double first = 0, rest = 0;
  std::int64_t windows = 0;
  std::map<std::int64_t, std::pair<double, std::int64_t>> by_position;
  while (auto win = again.stream.next()) {
    ++windows;
    at::Tensor t = at::tensor(std::vector<std::int64_t>(win->tokens.begin(), win->tokens.end())).reshape({1, -1});
    // float64 log-probabilities: the evaluator's vocabulary-blocked scoring agrees with them to ~1e-7 a token.
    at::Tensor lf = at::log_softmax(model.forward(t).to(at::kDouble), -1)[0];
    at::Tensor lq = at::log_softmax(q.forward(t).to(at::kDouble), -1)[0];
    for (std::int64_t pos = win->first_scored; pos < t.size(1); ++pos) {
      const std::int64_t target = t[0][pos].item<std::int64_t>();
      const double d = -lq[pos - 1][target].item<double>() + lf[pos - 1][target].item<double>();
      (pos == win->first_scored ? first : rest) += d;
      by_position[pos].first += d;
      by_position[pos].second += 1;
    }
  }
  EXPECT_EQ(u.first_tokens, windows);
  EXPECT_NEAR(u.first_dnll_sum, first, 1e-5);
  EXPECT_NEAR(u.rest_dnll_sum, rest, 1e-5);
  EXPECT_NEAR(u.first_dnll_sum + u.rest_dnll_sum, u.summary.diff_mean * static_cast<double>(u.summary.tokens), 1e-9);
  if (first + rest > 1e-3) EXPECT_NEAR(u.first_share, first / (first + rest), 1e-3);
  ASSERT_EQ(u.top_positions.size(), 4u);
  for (std::size_t i = 0; i < u.top_positions.size(); ++i) {
    const auto& p = u.top_positions[i];
    EXPECT_EQ(p.tokens, by_position.at(p.position).second);
    EXPECT_NEAR(p.dnll_mean, by_position.at(p.position).first / static_cast<double>(p.tokens), 1e-6);
    if (i > 0) EXPECT_GE(u.top_positions[i - 1].dnll_mean, p.dnll_mean);
  }
  for (const auto& [pos, sum_n] : by_position)  // nothing outside the top beats the last of it
    EXPECT_LE(sum_n.first / static_cast<double>(sum_n.second), u.top_positions.front().dnll_mean + 1e-6) << pos;
}

TEST(Sensitivity, BadInputFailsBeforeReadingAnyWindow) {
  Transformer model = test::random_transformer(5);
  Windows w(model);
  auto run = [&](const SchemeSpec& s) { run_sensitivity(*transformer_reader(model), s, w.stream, quiet(SensitivityGrouping::layer)); };
  EXPECT_TRUE(test::throws_with([&] { run(preset_scheme("full")); }, {"scheme full", "quantises nothing"}));
  SchemeSpec nothing = preset_scheme("int8-moderate");
  nothing.include = {"layers.0.*"};
  nothing.exclude = {"layers.*"};
  EXPECT_TRUE(test::throws_with([&] { run(nothing); }, {"int8-moderate", "selects no linear", "layers.0.attn.q"}));
  SchemeSpec unknown = preset_scheme("int8-moderate");
  unknown.include = {"layers.7.*"};
  EXPECT_TRUE(test::throws_with([&] { run(unknown); }, {"include pattern 'layers.7.*' matches no linear"}));
  EXPECT_EQ(w.stream.documents_read(), 0);  // nothing was read
  EXPECT_TRUE(test::throws_with([] { parse_sensitivity_grouping("block"); }, {"'block'", "layer", "kind"}));
  EXPECT_EQ(parse_sensitivity_grouping("kind"), SensitivityGrouping::kind);
}

TEST(Sensitivity, PlotWritesAPngWithItsDataAndScript) {
  try {
    find_gnuplot();
  } catch (const Error& e) {
    GTEST_SKIP() << "gnuplot absent: " << e.what();
  }
  Transformer model = test::random_transformer(8);
  Windows w(model);
  SensitivityRun run = run_sensitivity(*transformer_reader(model), preset_scheme("int8-coarse"), w.stream, quiet(SensitivityGrouping::kind));
  nlohmann::json record = {{"model", {{"path", "random.bin"}}}, {"sensitivity", run.to_json()}};
  test::TempDir dir;
  auto png = plot_sensitivity(record, dir / "sens.png");
  EXPECT_EQ(png, dir / "sens.png");
  std::ifstream in(png, std::ios::binary);
  char head[4] = {};
  in.read(head, 4);
  EXPECT_EQ(std::string(head + 1, 3), "PNG");
  EXPECT_TRUE(std::filesystem::exists(dir / "sens.dat"));
  EXPECT_TRUE(std::filesystem::exists(dir / "sens.gp"));
  EXPECT_NE(read_file(dir / "sens.dat").find("mlp.down"), std::string::npos);
  EXPECT_TRUE(test::throws_with([&] { plot_sensitivity(record, dir / "sens.svg"); }, {".png"}));
}

}  // namespace
}  // namespace qeval
