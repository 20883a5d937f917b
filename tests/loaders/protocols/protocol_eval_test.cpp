// Protocol windows through the evaluator: stride's shorter last window and llamacpp's
// second-half scoring, checked against a direct forward pass and log_softmax per window.
#include <gtest/gtest.h>

#include <cmath>

#include "eval/evaluator.h"
#include "loaders/protocols/protocol.h"
#include "tests/support/test_data.h"
#include "tests/support/test_models.h"

namespace qeval {
namespace {

// NLL of targets tokens[first..] of one window, computed directly.
double direct_nll(const Transformer& model, const Window& w) {
  at::Tensor ids = at::empty({1, static_cast<std::int64_t>(w.tokens.size())}, at::kLong);
  for (std::size_t i = 0; i < w.tokens.size(); ++i) ids[0][static_cast<std::int64_t>(i)] = w.tokens[i];
  at::Tensor lp = at::log_softmax(model.forward(ids).to(at::kDouble), -1);  // [1, L, V]
  double nll = 0;
  for (std::size_t t = static_cast<std::size_t>(w.first_scored); t < w.tokens.size(); ++t)
    nll -= lp[0][static_cast<std::int64_t>(t) - 1][w.tokens[t]].item<double>();
  return nll;
}

void check(const ProtocolSpec& spec, const std::vector<std::string>& docs) {
  Transformer model = test::random_transformer(5);
  test::ByteTokenizer tok(model.config().vocab_size);
  std::vector<Window> windows;
  for (auto s = make_window_source(std::make_unique<test::ListDocuments>(docs), tok, spec); auto w = s->next();)
    windows.push_back(*w);
  ASSERT_GE(windows.size(), 3u);
  for (std::int64_t batch : {std::int64_t{1}, std::int64_t{4}}) {
    std::vector<EvalScheme> schemes{EvalScheme{"full"}};
    auto source = make_window_source(std::make_unique<test::ListDocuments>(docs), tok, spec);
    EvalOptions options;
    options.batch_size = batch;
    options.progress = false;
    EvalResult r = evaluate(model, schemes, *source, options);
    ASSERT_EQ(r.windows, static_cast<std::int64_t>(windows.size()));
    for (const auto& w : windows) {
      const WindowScores& row = r.schemes[0].rows.at(w.index);
      EXPECT_EQ(row.tokens, w.scored()) << spec.name << " window " << w.index;
      EXPECT_NEAR(row.nll_sum, direct_nll(model, w), 1e-3 * std::max(1.0, std::abs(row.nll_sum)))
          << spec.name << " window " << w.index << " batch " << batch;
    }
  }
}

const std::vector<std::string> kDocs = {"the quick brown fox jumps over the lazy dog", "pack my box with five dozen liquor jugs",
                                        "sphinx of black quartz, judge my vow", "how vexingly quick daft zebras jump"};

TEST(ProtocolEval, StrideWithShorterLastWindowAnyBatchSize) {
  ProtocolSpec spec = ProtocolSpec::defaults_for("stride");
  spec.seq_len = 24;
  spec.stride = 10;
  check(spec, kDocs);
}

TEST(ProtocolEval, LlamaCppScoresSecondHalfOnly) {
  ProtocolSpec spec = ProtocolSpec::defaults_for("llamacpp");
  spec.seq_len = 16;
  check(spec, kDocs);
}

}  // namespace
}  // namespace qeval
