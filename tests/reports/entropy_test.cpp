// Entropy by layer (SAMBA Fig. 5; reports/layer_entropy.h, entropy_by_layer.png in reports/plot.h)
// on hand records of a hybrid (SSM layers 0 and 2, attention 1 and 3) and a dense model: which
// number lands in which row and column, gaps, forged layer lists refused, and pictures whose data
// rows are the records' numbers. The pictures skip, saying so, where gnuplot is absent.
#include "reports/layer_entropy.h"

#include <gtest/gtest.h>

#include <fstream>

#include "common/error.h"
#include "common/files.h"
#include "reports/plot.h"
#include "tests/support/entropy_records.h"
#include "tests/support/test_data.h"

namespace qeval {
namespace {

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

nlohmann::json hybrid_record() {
  nlohmann::json r = test::hand_record("runs/hybrid", "softmax", "adam",
                                       {{"full", 10.0, 0.0, test::entropy_base_statistics(4)},
                                        {"int8-coarse", 10.5, 0.5, test::entropy_base_statistics(4)},
                                        {"int8-fine", 10.1, 0.1}});
  test::set_hybrid_entropies(r, 0);
  test::set_hybrid_entropies(r, 1, 0.125);
  return r;
}

nlohmann::json dense_record() {
  nlohmann::json r =
      test::hand_record("runs/dense", "softmax", "adam", {{"full", 9.0, 0.0, test::entropy_base_statistics(3)}});
  test::set_dense_entropies(r, 0);
  return r;
}

bool have_gnuplot(std::string& why) {
  try {
    find_gnuplot();
    return true;
  } catch (const Error& e) {
    why = e.what();
    return false;
  }
}

// A PNG of this size holding more than a blank picture would (a few kB for panels with curves).
::testing::AssertionResult is_png(const std::filesystem::path& path, std::uint32_t width, std::uint32_t height) {
  std::ifstream in(path, std::ios::binary);
  unsigned char head[24] = {};
  in.read(reinterpret_cast<char*>(head), sizeof head);
  auto be32 = [&](int at) {
    return std::uint32_t(head[at]) << 24 | std::uint32_t(head[at + 1]) << 16 | std::uint32_t(head[at + 2]) << 8 | head[at + 3];
  };
  const bool png = in.gcount() == 24 && head[0] == 0x89 && head[1] == 'P' && std::string(head + 12, head + 16) == "IHDR";
  const auto bytes = std::filesystem::file_size(path);
  if (png && be32(16) == width && be32(20) == height && bytes > 5000) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << path << ": png " << png << ", " << be32(16) << " x " << be32(20) << ", " << bytes
                                       << " bytes; expected " << width << " x " << height << ", over 5000 bytes";
}

TEST(LayerEntropy, ReadsEachKindAtItsLayers) {
  const LayerEntropies e = read_layer_entropies(hybrid_record()["schemes"][0]["statistics"], "test");
  ASSERT_EQ(e.layers, 4u);
  const std::vector<LayerKind> kinds = {LayerKind::ssm, LayerKind::attention, LayerKind::ssm, LayerKind::attention};
  EXPECT_EQ(e.kind, kinds);
  EXPECT_TRUE(std::isnan(e.attention[0]));
  EXPECT_EQ(e.attention[1], 1.5);
  EXPECT_EQ(e.attention[3], 2.5);
  EXPECT_EQ(e.implicit[0], 3.25);
  EXPECT_EQ(e.implicit[2], 3.75);
  EXPECT_TRUE(std::isnan(e.implicit[1]));
  EXPECT_EQ(e.entropy(0), 3.25);  // an SSM layer's entropy is its implicit attention's
  EXPECT_EQ(e.entropy(1), 1.5);
  EXPECT_EQ(e.selection[0], 4.0);
  EXPECT_TRUE(std::isnan(e.selection[2]));  // null in the record
  EXPECT_TRUE(std::isnan(e.selection[1]));  // an attention layer has none
  EXPECT_DOUBLE_EQ(e.selection_max, std::log(256.0));

  // Dense: "attention" without "layers" covers every layer.
  const LayerEntropies d = read_layer_entropies(dense_record()["schemes"][0]["statistics"], "test");
  EXPECT_EQ(d.kind, std::vector<LayerKind>(3, LayerKind::attention));
  EXPECT_EQ(d.attention[2], 3.0);
  EXPECT_TRUE(std::isnan(d.attention[1]));
  EXPECT_TRUE(d.any());
}

TEST(LayerEntropy, ForgedLayerListsAreRefusedByName) {
  const nlohmann::json st = hybrid_record()["schemes"][0]["statistics"];
  auto refused = [&](const char* what, auto edit, const std::string& says) {
    nlohmann::json forged = st;
    edit(forged);
    try {
      read_layer_entropies(forged, "r.json");
      ADD_FAILURE() << what << ": accepted";
    } catch (const Error& e) {
      EXPECT_TRUE(contains(e.what(), says)) << what << ": " << e.what();
      EXPECT_TRUE(contains(e.what(), "r.json")) << what << ": " << e.what();
    }
  };
  refused("index past the model", [](nlohmann::json& f) { f["selection"]["layers"][1] = 4; }, "selection.layers[1] is 4");
  refused("negative index", [](nlohmann::json& f) { f["implicit_attention"]["layers"][0] = -1; }, "is -1");
  refused("not an integer", [](nlohmann::json& f) { f["selection"]["layers"][0] = 0.5; }, "selection.layers[0]");
  refused("twice", [](nlohmann::json& f) { f["selection"]["layers"] = {2, 2}; }, "lists layer 2 twice");
  refused("too few values", [](nlohmann::json& f) { f["selection"]["entropy_per_layer"] = {4.0}; }, "1 values for 2 layers");
  refused("both kinds", [](nlohmann::json& f) { f["selection"]["layers"] = {0, 1}; }, "both as an attention layer");
  refused("no layers", [](nlohmann::json& f) { f["selection"].erase("layers"); }, "statistics.selection does not say");
  refused("huge model", [](nlohmann::json& f) { f["layers"] = std::int64_t{1} << 40; }, "statistics.layers");
}

TEST(CompareEntropy, EachRecordsEntropiesInTheirLayersRows) {
  std::vector<LabeledRecord> records = {{"h.json", hybrid_record(), "", {}}, {"d.json", dense_record(), "", {}}};
  label_records(records);
  const std::string md = format_comparison(records, CompareFormat::markdown);
  EXPECT_TRUE(contains(md, "\nEntropy by layer (scheme full, nats;")) << md;
  EXPECT_TRUE(contains(md, "| layer | kind | hybrid entropy | hybrid selection | dense entropy | dense selection |\n"
                           "|---:|---|---:|---:|---:|---:|\n"
                           "| 1 | SSM / attention | 3.250 | 4.000 | 1.000 | — |\n"
                           "| 2 | attention | 1.500 | — | — | — |\n"
                           "| 3 | SSM / attention | 3.750 | — | 3.000 | — |\n"
                           "| 4 | attention / — | 2.500 | — | — | — |\n"))
      << md;
  EXPECT_TRUE(contains(md, "at most log(window) = 5.545 nats")) << md;
  EXPECT_FALSE(contains(md, "How each scheme moves")) << md;  // two records: one scheme each

  // --scheme: the quantised scheme's entropies; a record without statistics for it is said so.
  const std::string coarse = format_comparison(records, CompareFormat::markdown, false, "int8-coarse");
  EXPECT_TRUE(contains(coarse, "Entropy by layer (scheme int8-coarse,")) << coarse;
  EXPECT_TRUE(contains(coarse, "| 1 | SSM / — | 3.375 | 4.125 | — | — |\n")) << coarse;
  EXPECT_TRUE(contains(coarse, "No statistics for scheme int8-coarse in: dense.")) << coarse;

  // Records without per-layer entropies print no entropy table.
  std::vector<LabeledRecord> plain = {
      {"p.json", test::hand_record("runs/plain", "softmax", "adam", {{"full", 9.0, 0.0}}), "", {}}};
  label_records(plain);
  EXPECT_FALSE(contains(format_comparison(plain, CompareFormat::markdown), "Entropy by layer"));
  // CSV keeps one line per record.
  EXPECT_FALSE(contains(format_comparison(records, CompareFormat::csv), "Entropy"));
}

TEST(CompareEntropy, OneRecordShowsHowEachSchemeMovesEachLayer) {
  std::vector<LabeledRecord> records = {{"h.json", hybrid_record(), "", {}}};
  label_records(records);
  const std::string md = format_comparison(records, CompareFormat::markdown);
  EXPECT_TRUE(contains(md, "\nHow each scheme moves each layer's entropy (hybrid;")) << md;
  // int8-fine has no statistics: no column.
  EXPECT_TRUE(contains(md, "| layer | kind | full entropy | full selection | int8-coarse Δentropy | int8-coarse Δselection |\n"
                           "|---:|---|---:|---:|---:|---:|\n"
                           "| 1 | SSM | 3.250 | 4.000 | +0.1250 | +0.1250 |\n"
                           "| 2 | attention | 1.500 | — | +0.1250 | — |\n"
                           "| 3 | SSM | 3.750 | — | +0.1250 | — |\n"
                           "| 4 | attention | 2.500 | — | +0.1250 | — |\n"))
      << md;
  // A scheme name reaches its header cell escaped: no extra column, no new row.
  nlohmann::json odd = hybrid_record();
  odd["schemes"][1]["name"] = "a|b\nc";
  records = {{"h.json", odd, "", {}}};
  label_records(records);
  const std::string escaped = format_comparison(records, CompareFormat::markdown);
  EXPECT_TRUE(contains(escaped, "| a\\|b\\nc Δentropy | a\\|b\\nc Δselection |\n")) << escaped;
}

TEST(PlotEntropy, DataRowsHoldEachRecordsLayersAndGaps) {
  std::string why;
  if (!have_gnuplot(why)) GTEST_SKIP() << "gnuplot not available: " << why;
  test::TempDir dir;
  auto pngs = plot_layer_entropies({hybrid_record(), dense_record()}, dir / "two");
  ASSERT_EQ(pngs.size(), 1u);  // two records: no picture by scheme
  EXPECT_EQ(pngs[0], dir / "two" / "entropy_by_layer.png");
  EXPECT_TRUE(is_png(pngs[0], 1500, 500)) << pngs[0];  // two panels, four key lines
  const std::string dat = read_file(dir / "two" / "entropy_by_layer.dat");
  // '-': a layer of the other kind (passed over); NaN: its kind, no value (a gap).
  EXPECT_TRUE(contains(dat, "# layer attention implicit selection\n# index 0: hybrid\n"
                            "1 - 3.25 4\n2 1.5 - -\n3 - 3.75 NaN\n4 2.5 - -\n\n\n"
                            "# index 1: dense\n1 1 - -\n2 NaN - -\n3 3 - -\n"))
      << dat;
  const std::string gp = read_file(dir / "two" / "entropy_by_layer.gp");
  EXPECT_TRUE(contains(gp, "set datafile missing '-'")) << gp;
  EXPECT_TRUE(contains(gp, "'entropy_by_layer.dat' index 0 using 1:2 with linespoints ls 2 title 'hybrid: attention layers'"))
      << gp;
  EXPECT_TRUE(contains(gp, "index 0 using 1:3 with linespoints ls 1 title 'hybrid: SSM layers (implicit attention)'")) << gp;
  EXPECT_TRUE(contains(gp, "index 1 using 1:2 with linespoints ls 4 title 'dense: attention layers'")) << gp;
  EXPECT_FALSE(contains(gp, "index 1 using 1:3")) << gp;  // the dense model has no SSM layer
  EXPECT_TRUE(contains(gp, "index 0 using 1:4 with linespoints ls 2 title 'hybrid: selection'")) << gp;
  EXPECT_TRUE(contains(gp, "5.54517744 with lines")) << gp;  // the uniform bound, log 256

  // One record with two schemes with statistics: also one line per scheme.
  pngs = plot_layer_entropies({hybrid_record()}, dir / "one");
  ASSERT_EQ(pngs.size(), 2u);
  EXPECT_TRUE(is_png(pngs[1], 1500, 500)) << pngs[1];
  EXPECT_TRUE(contains(read_file(dir / "one" / "entropy_by_scheme.dat"),
                       "# index 1: int8-coarse\n1 - 3.375 4.125\n2 1.625 - -\n3 - 3.875 NaN\n4 2.625 - -\n"));
  EXPECT_TRUE(contains(read_file(dir / "one" / "entropy_by_scheme.gp"), "title 'int8-coarse: attention layers'"));

  // A dense model alone: panel (a) only.
  pngs = plot_layer_entropies({dense_record()}, dir / "dense");
  ASSERT_EQ(pngs.size(), 1u);
  EXPECT_TRUE(is_png(pngs[0], 800, 460)) << pngs[0];  // the key takes two lines a curve

  // Nothing to draw is an error; has_layer_entropies says so beforehand.
  const nlohmann::json plain = test::hand_record("runs/plain", "softmax", "adam", {{"full", 9.0, 0.0}});
  EXPECT_FALSE(has_layer_entropies({plain}));
  EXPECT_TRUE(has_layer_entropies({plain, dense_record()}));
  EXPECT_THROW(plot_layer_entropies({plain}, dir / "none"), Error);
}

// The per-layer curves of a hybrid: its attention statistics at its attention layers (2 and 4),
// gaps at the SSM layers, not packed into the first two.
TEST(PlotEntropy, LayerCurvesPutAHybridsAttentionAtItsLayers) {
  std::string why;
  if (!have_gnuplot(why)) GTEST_SKIP() << "gnuplot not available: " << why;
  test::TempDir dir;
  plot_layer_curves(hybrid_record(), dir / "curves");
  const std::string dat = read_file(dir / "curves" / "layer_curves.dat");
  EXPECT_TRUE(contains(dat, "\n1 4 3 20 5 NaN NaN\n2 4 3 20 5 10 20\n3 4 3 20 5 NaN NaN\n4 4 3 20 5 10 20\n")) << dat;
  nlohmann::json forged = hybrid_record();
  forged["schemes"][0]["statistics"]["attention"]["layers"] = {1, 9};
  EXPECT_THROW(plot_layer_curves(forged, dir / "forged"), Error);
}

// A model name or a scheme name holding a quote, a newline and a gnuplot command stays inside its
// literal: the picture is drawn and nothing runs (issue 51).
TEST(PlotEntropy, NoNameRunsACommand) {
  std::string why;
  if (!have_gnuplot(why)) GTEST_SKIP() << "gnuplot not available: " << why;
  test::TempDir dir;
  const std::string payload = "'\nsystem('touch RAN')\n# \r`touch RAN`";
  nlohmann::json r = hybrid_record();
  r["model"]["path"] = "runs/hy" + payload;
  r["schemes"][1]["name"] = "int8" + payload;
  auto pngs = plot_layer_entropies({r}, dir / "out");
  ASSERT_EQ(pngs.size(), 2u);
  EXPECT_FALSE(std::filesystem::exists(dir / "out" / "RAN")) << "a name ran a command through gnuplot";
  for (const char* file : {"entropy_by_layer.gp", "entropy_by_scheme.gp", "entropy_by_scheme.dat", "entropy_by_layer.dat"}) {
    const std::string text = read_file(dir / "out" / file);
    EXPECT_FALSE(contains(text, "\nsystem(")) << file << ":\n" << text;
    EXPECT_TRUE(contains(text, "\\nsystem(")) << file << ":\n" << text;  // shown, escaped
  }
  EXPECT_TRUE(contains(read_file(dir / "out" / "entropy_by_scheme.gp"), "title 'int8''\\nsystem(''touch RAN'')"));
}

}  // namespace
}  // namespace qeval
