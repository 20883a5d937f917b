// Figure data (averages checked against hand computation) and the gnuplot pictures (PNG written,
// PNG signature, the size the script asks for). Skips, saying so, where gnuplot is absent.
#include "reports/plot.h"

#include <gtest/gtest.h>

#include <fstream>

#include "common/error.h"
#include "common/files.h"
#include "stats/figure_data.h"
#include "tests/support/hand_records.h"
#include "tests/support/test_data.h"

namespace qeval {
namespace {

struct PngInfo {
  bool signature = false;
  std::uint32_t width = 0, height = 0;
  std::uintmax_t bytes = 0;
};

PngInfo png_info(const std::filesystem::path& path) {
  PngInfo info;
  std::ifstream in(path, std::ios::binary);
  unsigned char head[24] = {};
  in.read(reinterpret_cast<char*>(head), sizeof head);
  const unsigned char magic[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
  info.signature = in.gcount() == 24 && std::equal(magic, magic + 8, head) && std::string(head + 12, head + 16) == "IHDR";
  auto be32 = [&](int at) {
    return std::uint32_t(head[at]) << 24 | std::uint32_t(head[at + 1]) << 16 | std::uint32_t(head[at + 2]) << 8 | head[at + 3];
  };
  info.width = be32(16);
  info.height = be32(20);
  info.bytes = std::filesystem::file_size(path);
  return info;
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

TEST(FigureData, AveragesOverWindowsHeadsAndPositions) {
  FigureDataObserver fd(/*map_T=*/3);
  // Two batches of one window each: [B=1, L=4, D=2] hidden, [1, H=2, 4, 4] attention.
  at::Tensor h1 = at::tensor({1.0, -2.0, 3.0, 4.0, -5.0, 6.0, 7.0, -8.0}, at::kFloat).reshape({1, 4, 2});
  at::Tensor h2 = at::tensor({3.0, 0.0, 1.0, 0.0, 1.0, 0.0, 1.0, 0.0}, at::kFloat).reshape({1, 4, 2});
  at::Tensor uniform = at::tril(at::ones({4, 4}, at::kFloat));
  uniform = uniform / uniform.sum(-1, true);
  at::Tensor first = at::zeros({4, 4}, at::kFloat);
  first.select(1, 0).fill_(1.0);
  at::Tensor a1 = at::stack({uniform, first}).unsqueeze(0);   // heads: uniform, all on key 1
  at::Tensor a2 = at::stack({first, first}).unsqueeze(0);
  for (const auto& [h, a] : {std::pair{h1, a1}, std::pair{h2, a2}}) {
    fd.on_attention(0, a);
    fd.on_block_output(0, h);
  }
  nlohmann::json j = fd.to_json();
  EXPECT_EQ(j["windows"], 2);
  EXPECT_EQ(j["layers"], 1);
  EXPECT_EQ(j["d_model"], 2);
  // First token |X|: channel 0 (1 + 3) / 2, channel 1 (2 + 0) / 2.
  EXPECT_DOUBLE_EQ(j["hidden_abs"]["first"][0][0].get<double>(), 2.0);
  EXPECT_DOUBLE_EQ(j["hidden_abs"]["first"][0][1].get<double>(), 1.0);
  // Rest: window 1 channel 0 mean(3, 5, 7) = 5, window 2 mean(1, 1, 1) = 1 → 3; channel 1 (6 + 0) / 2.
  EXPECT_DOUBLE_EQ(j["hidden_abs"]["rest"][0][0].get<double>(), 3.0);
  EXPECT_DOUBLE_EQ(j["hidden_abs"]["rest"][0][1].get<double>(), 3.0);
  const auto& map = j["attention_map"];
  EXPECT_EQ(map["T"], 3);
  EXPECT_EQ(map["windows"], 2);
  // Query 2 (0-based), key 0: window 1 heads (1/3 + 1) / 2, window 2 (1 + 1) / 2 → mean 5/6.
  EXPECT_NEAR(map["per_layer"][0][2][0].get<double>(), 5.0 / 6.0, 1e-7);  // 1/3 enters as float
  EXPECT_NEAR(map["per_layer"][0][2][1].get<double>(), 1.0 / 12.0, 1e-7);  // (1/3 / 2) / 2
  EXPECT_EQ(map["per_layer"][0][0][2].get<double>(), 0.0);                   // above the diagonal
}

TEST(FigureData, FanOutReachesEveryObserverAndAttachKeepsTheStatistics) {
  auto a = std::make_shared<FigureDataObserver>(2);
  auto b = std::make_shared<FigureDataObserver>(2);
  FanOutObserver fan({a, b});
  EXPECT_TRUE(fan.wants_attention(0));
  fan.on_block_output(0, at::ones({2, 3, 4}));
  EXPECT_EQ(a->windows(), 2);
  EXPECT_EQ(b->windows(), 2);
  EXPECT_THROW(FigureDataObserver().to_json(), Error);
}

TEST(Plot, LayerCurvesAndMapsArePngs) {
  std::string why;
  if (!have_gnuplot(why)) GTEST_SKIP() << "gnuplot not available: " << why;
  test::TempDir dir;
  nlohmann::json stats = test::hand_statistics(40.0, 3.1, 300.0, 6.0, 90.0, 80.0, /*layers=*/4);
  stats["hidden"]["kurtosis"]["per_layer"]["first"] = {3.0, 20.0, 60.0, 77.0};
  nlohmann::json record = test::hand_record("runs/tiny", "softmax", "adam", {{"full", 10.0, 0.0, stats}});
  auto curves = plot_layer_curves(record, dir / "out");
  ASSERT_EQ(curves.size(), 1u);
  PngInfo png = png_info(curves[0]);
  EXPECT_TRUE(png.signature) << curves[0];
  EXPECT_EQ(png.width, 1500u);
  EXPECT_EQ(png.height, 460u);
  EXPECT_GT(png.bytes, 5000u);  // a blank 1500×460 PNG compresses to far less than three plotted panels
  EXPECT_TRUE(std::filesystem::exists(dir / "out" / "layer_curves.dat"));
  EXPECT_TRUE(std::filesystem::exists(dir / "out" / "layer_curves.gp"));

  // Two models on shared axes: one data block each, titled by model, a log axis for kurtosis
  // because together they span 2.5..77; a record with fewer layers is drawn as far as it goes.
  nlohmann::json ortho = test::hand_record("runs/ortho", "softmax1", "orthoadam",
                                           {{"full", 10.4, 0.0, test::hand_statistics(3.0, 2.5, 40.0, 30.0, 2.0, 1.0, 3)}});
  auto both = plot_layer_curves(std::vector<nlohmann::json>{record, ortho}, dir / "pair");
  ASSERT_EQ(both.size(), 1u);
  EXPECT_TRUE(png_info(both[0]).signature);
  EXPECT_GT(png_info(both[0]).bytes, 5000u);
  EXPECT_EQ(png_info(both[0]).height, 500u);  // 40 px more for the key's two extra lines
  const std::string dat = read_file(dir / "pair" / "layer_curves.dat");
  EXPECT_NE(dat.find("# index 0: tiny"), std::string::npos) << dat;
  EXPECT_NE(dat.find("\n\n\n# index 1: ortho\n1 3 2.5"), std::string::npos) << dat;
  const std::string gp = read_file(dir / "pair" / "layer_curves.gp");
  EXPECT_NE(gp.find("index 1 using 1:3 with linespoints ls 4 title 'ortho: other tokens'"), std::string::npos) << gp;
  EXPECT_NE(gp.find("set logscale y\nset title 'kurtosis"), std::string::npos) << gp;
  // Two records of one model name stay apart.
  plot_layer_curves(std::vector<nlohmann::json>{record, record}, dir / "twice");
  EXPECT_NE(read_file(dir / "twice" / "layer_curves.gp").find("'tiny [2]: first token'"), std::string::npos);

  FigureDataObserver fd(8);
  at::Tensor probs = at::tril(at::ones({8, 8}));
  probs = (probs / probs.sum(-1, true)).expand({1, 2, 8, 8});
  for (int layer = 0; layer < 2; ++layer) {
    fd.on_attention(layer, probs);
    fd.on_block_output(layer, at::randn({1, 8, 16}, at::TensorOptions().dtype(at::kFloat)));
  }
  auto maps = plot_figure_maps(fd.to_json(), dir / "out", "tiny");
  ASSERT_EQ(maps.size(), 2u);
  for (const auto& p : maps) {
    PngInfo info = png_info(p);
    EXPECT_TRUE(info.signature) << p;
    EXPECT_GT(info.bytes, 3000u) << p;
  }
  EXPECT_EQ(png_info(dir / "out" / "attention_map.png").width, 760u);
  EXPECT_EQ(png_info(dir / "out" / "hidden_abs.png").height, 760u);
  EXPECT_EQ(read_file(dir / "out" / "attention_map.gp").find("logscale cb"), std::string::npos);

  // The log colour scale: the same pictures, with gnuplot told to colour by log10.
  auto log_maps = plot_figure_maps(fd.to_json(), dir / "log", "tiny", ColourScale::log);
  ASSERT_EQ(log_maps.size(), 2u);
  for (const auto& p : log_maps) EXPECT_TRUE(png_info(p).signature) << p;
  for (const char* gp : {"attention_map.gp", "hidden_abs.gp"})
    EXPECT_NE(read_file(dir / "log" / gp).find("set logscale cb"), std::string::npos) << gp;
  EXPECT_THROW(parse_colour_scale("cubic"), Error);
}

// A name from someone else's record or folder holds a newline and a gnuplot command after it: the
// pictures are drawn, the name shows escaped, and nothing runs (issue 51).
TEST(Plot, NoNameFromARecordOrFolderRunsACommand) {
  std::string why;
  if (!have_gnuplot(why)) GTEST_SKIP() << "gnuplot not available: " << why;
  test::TempDir dir;
  // gnuplot runs in each picture's folder: a command that ran would leave RAN there. No slash in
  // the payload, so the model's name (its path's last part) keeps all of it.
  const std::string payload = "\nsystem('touch RAN')\n# \r`touch RAN`\x1b[2J";
  auto ran = [&] {
    for (const char* sub : {"one", "two", "maps", "."})
      if (std::filesystem::exists(dir / sub / "RAN")) return true;
    return false;
  };
  nlohmann::json record = test::hand_record("runs/tiny" + payload, "softmax", "adam",
                                            {{"full", 10.0, 0.0, test::hand_statistics(4.0, 3.1, 30.0, 6.0, 9.0, 8.0, 3)}});
  plot_layer_curves(record, dir / "one");
  plot_layer_curves(std::vector<nlohmann::json>{record, record}, dir / "two");
  FigureDataObserver fd(4);
  at::Tensor probs = at::tril(at::ones({4, 4}));
  fd.on_attention(0, (probs / probs.sum(-1, true)).expand({1, 1, 4, 4}));
  fd.on_block_output(0, at::ones({1, 4, 8}));
  plot_figure_maps(fd.to_json(), dir / "maps", "title" + payload);
  EXPECT_FALSE(ran()) << "a name ran a command through gnuplot";
  for (const auto& file : {dir / "one" / "layer_curves.gp", dir / "two" / "layer_curves.dat", dir / "maps" / "hidden_abs.gp"}) {
    const std::string text = read_file(file);
    EXPECT_EQ(text.find("\nsystem("), std::string::npos) << file << ":\n" << text;
    EXPECT_NE(text.find("\\nsystem("), std::string::npos) << file << ":\n" << text;  // shown, escaped
  }
  // Every control byte, straight through the quoting every picture uses: one line, nothing run.
  std::string all;
  for (int c = 1; c < 0x20; ++c) all += static_cast<char>(c);
  const std::string quoted = gnuplot_quote(all + "\x7f'\nsystem('touch RAN')");
  EXPECT_EQ(quoted.find('\n'), std::string::npos);
  EXPECT_EQ(quoted.find('\r'), std::string::npos);
  write_file_atomic(dir / "quoted.gp", "set terminal pngcairo size 300,200\nset output 'quoted.png'\nset title " + quoted +
                                          "\nplot x title " + quoted + "\n");
  EXPECT_TRUE(png_info(render_gnuplot(dir.path(), "quoted")).signature);
  EXPECT_FALSE(ran());
}

TEST(Plot, RecordWithoutStatisticsIsRefused) {
  std::string why;
  if (!have_gnuplot(why)) GTEST_SKIP() << "gnuplot not available: " << why;
  test::TempDir dir;
  nlohmann::json record = test::hand_record("runs/tiny", "softmax", "adam", {{"full", 10.0, 0.0}});
  EXPECT_THROW(plot_layer_curves(record, dir / "out"), Error);
  EXPECT_THROW(plot_layer_curves(record, dir / "out", "int8-fine"), Error);
}

}  // namespace
}  // namespace qeval
