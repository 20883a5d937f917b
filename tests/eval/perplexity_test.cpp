// Protocol `windows`, per-token scoring and the evaluator, on stand-in tokenizers and random
// models whose expected values the tests compute independently.
#include <gtest/gtest.h>

#include <cmath>
#include <numeric>

#include "common/error.h"
#include "eval/evaluator.h"
#include "records/record.h"
#include "eval/token_scores.h"
#include "loaders/protocols/protocol.h"
#include "tests/support/test_data.h"
#include "tests/support/test_models.h"

namespace qeval {
namespace {

std::vector<Window> all_windows(WindowStream& stream) {
  std::vector<Window> out;
  while (auto w = stream.next()) out.push_back(*w);
  return out;
}

TEST(WindowsProtocol, JoinsDocumentsWithSeparatorAndCutsFullWindows) {
  test::ByteTokenizer tok;
  ProtocolSpec spec;
  spec.seq_len = 4;
  // Stream: [2 a b c] [2 d e] [2 f g h i] = 12 tokens → 3 windows of 4, no remainder.
  WindowStream stream(std::make_unique<test::ListDocuments>(std::vector<std::string>{"abc", "de", "fghi"}), tok, spec);
  auto windows = all_windows(stream);
  std::vector<std::int32_t> expected_stream;
  for (std::string doc : {"abc", "de", "fghi"}) {
    expected_stream.push_back(2);
    for (auto id : tok.encode(doc)) expected_stream.push_back(id);
  }
  ASSERT_EQ(windows.size(), 3u);
  for (std::size_t i = 0; i < windows.size(); ++i) {
    EXPECT_EQ(windows[i].index, static_cast<std::int64_t>(i));
    EXPECT_EQ(windows[i].first_scored, 1);
    std::vector<std::int32_t> slice(expected_stream.begin() + 4 * i, expected_stream.begin() + 4 * (i + 1));
    EXPECT_EQ(windows[i].tokens, slice) << "window " << i;
  }
  EXPECT_EQ(stream.documents_read(), 3);
}

TEST(WindowsProtocol, DropsPartialWindowAndHonoursBosAndLimit) {
  test::ByteTokenizer tok;
  ProtocolSpec spec;
  spec.seq_len = 5;
  spec.bos_per_window = true;
  spec.separator = Separator::none;
  WindowStream stream(std::make_unique<test::ListDocuments>(std::vector<std::string>{"abcdefghij"}), tok, spec);
  auto windows = all_windows(stream);  // 10 tokens, 4 per window after BOS → 2 windows, 2 dropped
  ASSERT_EQ(windows.size(), 2u);
  EXPECT_EQ(windows[1].tokens, (std::vector<std::int32_t>{1, tok.encode("e")[0], tok.encode("f")[0], tok.encode("g")[0],
                                                          tok.encode("h")[0]}));
  spec.max_windows = 1;
  WindowStream limited(std::make_unique<test::ListDocuments>(std::vector<std::string>{"abcdefghij"}), tok, spec);
  EXPECT_EQ(all_windows(limited).size(), 1u);
}

TEST(WindowsProtocol, SamplingIsSeededSortedAndWithoutReplacement) {
  test::ByteTokenizer tok;
  ProtocolSpec spec;
  spec.seq_len = 4;
  spec.max_windows = 5;
  spec.sample_seed = 7;
  std::vector<std::string> docs(50, "abcdefg");  // 50 × 8 tokens = 100 windows
  auto run = [&] {
    WindowStream s(std::make_unique<test::ListDocuments>(docs), tok, spec);
    std::vector<std::int64_t> idx;
    for (const auto& w : all_windows(s)) idx.push_back(w.index);
    return idx;
  };
  auto a = run();
  ASSERT_EQ(a.size(), 5u);
  EXPECT_TRUE(std::is_sorted(a.begin(), a.end()));
  EXPECT_EQ(std::adjacent_find(a.begin(), a.end()), a.end());
  EXPECT_EQ(a, run());
  EXPECT_NE(a, (std::vector<std::int64_t>{0, 1, 2, 3, 4}));  // a draw, not the first five
}

TEST(TokenScores, SummaryGivesPplAndStandardError) {
  std::map<std::int64_t, WindowScores> rows;
  std::vector<double> nll = {1.0, 2.0, 4.0, 1.5, 0.5};
  WindowScores a, b;
  for (int i = 0; i < 3; ++i) a.tokens++, a.nll_sum += nll[i], a.nll_sq_sum += nll[i] * nll[i];
  for (int i = 3; i < 5; ++i) b.tokens++, b.nll_sum += nll[i], b.nll_sq_sum += nll[i] * nll[i];
  rows[5] = b;
  rows[2] = a;
  SchemeSummary s = summarize(rows);
  double mean = std::accumulate(nll.begin(), nll.end(), 0.0) / 5;
  double var = 0;
  for (double x : nll) var += (x - mean) * (x - mean);
  var /= 4;
  EXPECT_EQ(s.tokens, 5);
  EXPECT_NEAR(s.nll_mean, mean, 1e-12);
  EXPECT_NEAR(s.ppl, std::exp(mean), 1e-12);
  EXPECT_NEAR(s.nll_se, std::sqrt(var / 5), 1e-12);
  EXPECT_NEAR(s.ppl_low, std::exp(mean - 1.96 * std::sqrt(var / 5)), 1e-12);
}

// Independent check of the evaluator: PPL from a direct forward pass and log_softmax.
TEST(Evaluator, PerplexityEqualsDirectComputationAndIgnoresBatchSize) {
  Transformer model = test::random_transformer(3);
  test::ByteTokenizer tok(model.config().vocab_size);
  std::vector<std::string> docs = {"the quick brown fox jumps over the lazy dog", "pack my box with five dozen liquor jugs",
                                   "sphinx of black quartz, judge my vow"};
  ProtocolSpec spec;
  spec.seq_len = 16;
  auto run = [&](std::int64_t batch) {
    std::vector<EvalScheme> schemes{EvalScheme{"full"}};
    WindowStream stream(std::make_unique<test::ListDocuments>(docs), tok, spec);
    EvalOptions opt;
    opt.batch_size = batch;
    opt.progress = false;
    return evaluate(model, schemes, stream, opt);
  };
  EvalResult r1 = run(1), r8 = run(8);
  ASSERT_EQ(r1.windows, r8.windows);
  ASSERT_GE(r1.windows, 5);
  for (const auto& [index, row] : r1.schemes[0].rows) {
    EXPECT_EQ(row.nll_sum, r8.schemes[0].rows.at(index).nll_sum) << "window " << index;
  }
  EXPECT_EQ(r1.token_stream_hash(), r8.token_stream_hash());

  // Direct: rebuild the stream, forward each window alone, sum −log p(next token).
  WindowStream stream(std::make_unique<test::ListDocuments>(docs), tok, spec);
  double nll = 0;
  std::int64_t n = 0;
  while (auto w = stream.next()) {
    at::Tensor t = at::tensor(std::vector<std::int64_t>(w->tokens.begin(), w->tokens.end())).reshape({1, -1});
    at::Tensor lp = at::log_softmax(model.forward(t).to(at::kDouble), -1)[0];
    for (std::int64_t p = 0; p + 1 < t.size(1); ++p, ++n) nll -= lp[p][t[0][p + 1].item<std::int64_t>()].item<double>();
  }
  SchemeSummary s = r1.schemes[0].summary();
  EXPECT_EQ(s.tokens, n);
  EXPECT_NEAR(s.ppl, std::exp(nll / static_cast<double>(n)), 1e-5 * s.ppl);
}

TEST(Evaluator, SchemeAgainstItselfHasZeroPenalty) {
  Transformer model = test::random_transformer(4, /*gpt2=*/true);
  test::ByteTokenizer tok(model.config().vocab_size);
  ProtocolSpec spec;
  spec.seq_len = 8;
  std::vector<EvalScheme> schemes{EvalScheme{"full"}, EvalScheme{"copy"}};
  WindowStream stream(std::make_unique<test::ListDocuments>(std::vector<std::string>{"abcdefghijklmnopqrstuvwxyz"}), tok, spec);
  EvalOptions opt;
  opt.progress = false;
  EvalResult r = evaluate(model, schemes, stream, opt);
  SchemeSummary copy = r.schemes[1].summary();
  EXPECT_EQ(copy.diff_mean, 0.0);
  EXPECT_NEAR(copy.kl_mean, 0.0, 1e-7);
  EXPECT_EQ(copy.top1_agreement, 1.0);
  EXPECT_EQ(copy.ppl, r.schemes[0].summary().ppl);
}

TEST(Evaluator, EmptyDataIsAClearError) {
  Transformer model = test::random_transformer(5);
  test::ByteTokenizer tok(model.config().vocab_size);
  ProtocolSpec spec;
  spec.seq_len = 64;
  std::vector<EvalScheme> schemes{EvalScheme{"full"}};
  WindowStream stream(std::make_unique<test::ListDocuments>(std::vector<std::string>{"short"}), tok, spec);
  EvalOptions opt;
  opt.progress = false;
  try {
    evaluate(model, schemes, stream, opt);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("no complete window"), std::string::npos) << e.what();
  }
}

TEST(Record, WrittenAtomicallyAndReadBackWithSchemaCheck) {
  test::TempDir dir;
  nlohmann::json record = {{"schema_version", kRecordSchemaVersion}, {"schemes", nlohmann::json::array()}};
  write_record(dir / "r.json", record);
  EXPECT_EQ(read_record(dir / "r.json"), record);
  // No temporary file is left beside it.
  int files = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir.path())) files += e.is_regular_file();
  EXPECT_EQ(files, 1);
  test::write_bytes(dir / "bad.json", "{\"schema_version\": 99}");
  EXPECT_THROW(read_record(dir / "bad.json"), Error);
  test::write_bytes(dir / "broken.json", "{\"schema_version\": ");
  try {
    read_record(dir / "broken.json");
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("broken.json"), std::string::npos);
  }
  // Writing into a missing folder fails and creates nothing.
  EXPECT_THROW(write_record(dir / "missing" / "r.json", record), Error);
}

}  // namespace
}  // namespace qeval
