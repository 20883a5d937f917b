// Statistics (DESIGN.md §6): kurtosis against known distributions and a derived closed form,
// hidden-state statistics on the fixtures' reference tensors against a plain loop, attention
// statistics on constructed attention with known values, and determinism (batching, merging,
// state round trip).
#include "stats/statistics.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>
#include <random>

#include "common/error.h"
#include "loaders/checkpoints/safetensors.h"
#include "model/transformer.h"
#include "tests/support/test_data.h"

namespace qeval {
namespace {

using nlohmann::json;

// Feeds `layers` ([B, L, D] each) as one forward pass over windows `indices`.
void feed(StatisticsCollector& c, const std::vector<std::int64_t>& indices, const std::vector<at::Tensor>& hidden,
          const std::vector<at::Tensor>& attention = {}) {
  c.begin_batch(indices);
  for (std::size_t m = 0; m < hidden.size(); ++m) {
    if (m < attention.size() && c.wants_attention(static_cast<std::int64_t>(m)))
      c.on_attention(static_cast<std::int64_t>(m), attention[m]);
    c.on_block_output(static_cast<std::int64_t>(m), hidden[m]);
  }
}

json hidden_summary(const at::Tensor& hidden /*[B, L, D]*/) {
  StatisticsCollector c(StatisticsOptions{/*attention=*/false});
  std::vector<std::int64_t> idx(static_cast<std::size_t>(hidden.size(0)));
  std::iota(idx.begin(), idx.end(), 0);
  feed(c, idx, {hidden});
  return c.summary()["hidden"];
}

// ---------------------------------------------------------------- kurtosis

TEST(Kurtosis, GaussianSampleIsThree) {
  at::manual_seed(1);
  json k = hidden_summary(at::randn({2, 8, 1 << 16}))["kurtosis"];
  EXPECT_NEAR(k["first"].get<double>(), 3.0, 0.05);
  EXPECT_NEAR(k["rest"].get<double>(), 3.0, 0.05);
}

TEST(Kurtosis, UniformSampleIsNineFifths) {
  at::manual_seed(2);
  json k = hidden_summary(at::rand({2, 8, 1 << 16}) * 6 - 1)["kurtosis"];  // U(−1, 5): shift and scale do not matter
  EXPECT_NEAR(k["first"].get<double>(), 1.8, 0.02);
  EXPECT_NEAR(k["rest"].get<double>(), 1.8, 0.02);
}

// Closed form for x = α·e_i + z, z ~ N(0, I_D). Let s = α + z_i be the spike channel's value.
// The other D − 1 channels are Gaussian, so as D grows the empirical distribution over the D
// channels is that of X = s with probability p = 1/D, and X = Z ~ N(0, 1) with probability
// q = 1 − p (their sample moments converge; the spike keeps its exact value, as it is one
// channel and does not average out). Then E X = p s, and with Y = X − p s:
//   E Y² = p (q s)² + q E(Z − p s)² = p q s² + q
//   E Y⁴ = p (q s)⁴ + q E(Z − p s)⁴ = p q⁴ s⁴ + q (3 + 6 p² s² + p⁴ s⁴)
// (E(Z − a)⁴ = 3 + 6a² + a⁴), and κ(s, D) = E Y⁴ / (E Y²)². Checks: κ(0, D) = 3/q (one channel
// exactly 0); as s → ∞, κ → (p q⁴ + q p⁴)/(p q)² = (q³ + p³)/(p q) = (D² − 3D + 3)/(D − 1) ≈ D − 2,
// exactly the kurtosis of the one-hot vector e_i: the kurtosis grows like D. The remaining
// error is the Gaussian channels' sampling error, of relative order sqrt(1/D) per row.
double spike_kurtosis(double s, double D) {
  const double p = 1.0 / D, q = 1 - p, s2 = s * s;
  const double m2 = p * q * s2 + q;
  const double m4 = p * q * q * q * q * s2 * s2 + q * (3 + 6 * p * p * s2 + p * p * p * p * s2 * s2);
  return m4 / (m2 * m2);
}

TEST(Kurtosis, OneHotVectorMatchesClosedFormExactly) {
  for (std::int64_t D : {4, 64, 768, 4096}) {
    at::Tensor x = at::zeros({1, 2, D}, at::kDouble);
    x[0][0][D / 3] = 7.5;
    x[0][1][0] = -1e6;  // sign and scale do not matter
    json k = hidden_summary(x)["kurtosis"];
    const double expected = (static_cast<double>(D) * D - 3.0 * D + 3) / (D - 1.0);
    EXPECT_NEAR(k["first"].get<double>(), expected, 1e-12 * expected) << "D " << D;
    EXPECT_NEAR(k["rest"].get<double>(), expected, 1e-12 * expected) << "D " << D;
    EXPECT_NEAR(spike_kurtosis(1e9, static_cast<double>(D)), expected, 1e-9 * expected) << "D " << D;
  }
}

TEST(Kurtosis, SpikePlusGaussianMatchesClosedForm) {
  at::manual_seed(3);
  for (std::int64_t D : {256, 1024, 4096}) {
    for (double alpha : {0.0, 5.0, 20.0, 100.0, 1e4}) {
      const std::int64_t L = 65;
      at::Tensor x = at::randn({1, L, D}, at::kDouble);
      double expected = 0;  // mean over the rest (l = 2..L) of κ(s_l, D)
      for (std::int64_t l = 0; l < L; ++l) {
        const std::int64_t spike = (l * 37) % D;  // the spike channel moves per row
        const double s = x[0][l][spike].item<double>() + alpha;
        x[0][l][spike] = s;
        if (l > 0) expected += spike_kurtosis(s, static_cast<double>(D)) / static_cast<double>(L - 1);
      }
      json hidden = hidden_summary(x);
      EXPECT_NEAR(hidden["kurtosis"]["rest"].get<double>(), expected, 0.025 * expected)
          << "D " << D << " alpha " << alpha;
      if (alpha >= 100) {  // the largest element is one of the spikes
        const json& largest = hidden["largest_per_layer"][0];
        EXPECT_EQ(largest["channel"].get<std::int64_t>(), (largest["position"].get<std::int64_t>() * 37) % D);
        EXPECT_GT(largest["value"].get<double>(), alpha - 10);
      }
    }
    // Growth like D: for a huge spike κ/D → 1.
    EXPECT_NEAR(spike_kurtosis(1e6, static_cast<double>(D)) / static_cast<double>(D), 1.0,
                3.0 / static_cast<double>(D));
  }
}

// ---------------------------------------------------------------- fixtures

struct Expected {
  std::vector<double> first, rest;  // per layer, mean over sequences
};

// Hidden-state statistics of hidden [S, M, L, D] computed element by element, in double.
void check_fixture(const std::string& fixture, const std::string& tensor_name) {
  SafetensorsFile file(test::data_path("fixtures/" + fixture + "/reference.safetensors"));
  at::Tensor hidden = file.read_float32(tensor_name);  // [S, M, L, D]
  ASSERT_EQ(hidden.dim(), 4);
  const std::int64_t S = hidden.size(0), M = hidden.size(1), L = hidden.size(2), D = hidden.size(3);
  auto h = hidden.accessor<float, 4>();

  Expected kurt{std::vector<double>(M), std::vector<double>(M)}, max_abs = kurt, ratio = kurt;
  std::vector<double> largest(M, -1.0), largest_value(M);
  std::vector<std::int64_t> largest_seq(M), largest_pos(M), largest_ch(M);
  for (std::int64_t m = 0; m < M; ++m) {
    for (std::int64_t s = 0; s < S; ++s) {
      double k_rest = 0, a_rest = 0, r_rest = 0;
      for (std::int64_t l = 0; l < L; ++l) {
        double mean = 0, sq = 0, amax = 0;
        for (std::int64_t d = 0; d < D; ++d) {
          const double x = h[s][m][l][d];
          mean += x;
          sq += x * x;
          if (std::abs(x) > amax) amax = std::abs(x);
          if (std::abs(x) > largest[m]) {
            largest[m] = std::abs(x), largest_value[m] = x;
            largest_seq[m] = s, largest_pos[m] = l, largest_ch[m] = d;
          }
        }
        mean /= static_cast<double>(D);
        double c2 = 0, c4 = 0;
        for (std::int64_t d = 0; d < D; ++d) {
          const double c = h[s][m][l][d] - mean;
          c2 += c * c;
          c4 += c * c * c * c;
        }
        c2 /= static_cast<double>(D), c4 /= static_cast<double>(D);
        const double k = c4 / (c2 * c2), r = amax / std::sqrt(sq);
        if (l == 0) {
          kurt.first[m] += k / static_cast<double>(S);
          max_abs.first[m] += amax / static_cast<double>(S);
          ratio.first[m] += r / static_cast<double>(S);
        } else {
          k_rest += k, a_rest += amax, r_rest += r;
        }
      }
      kurt.rest[m] += k_rest / static_cast<double>((L - 1) * S);
      max_abs.rest[m] += a_rest / static_cast<double>((L - 1) * S);
      ratio.rest[m] += r_rest / static_cast<double>((L - 1) * S);
    }
  }

  StatisticsCollector c(StatisticsOptions{/*attention=*/false});
  c.begin_batch({0, 1});
  ASSERT_EQ(S, 2);
  for (std::int64_t m = 0; m < M; ++m) c.on_block_output(m, hidden.select(1, m));  // [S, L, D]
  json got = c.summary()["hidden"];

  auto check = [&](const std::string& key, const Expected& e) {
    double first = 0, rest = 0;
    for (std::int64_t m = 0; m < M; ++m) {
      const double gf = got[key]["per_layer"]["first"][m], gr = got[key]["per_layer"]["rest"][m];
      EXPECT_NEAR(gf, e.first[m], 1e-11 * std::abs(e.first[m])) << fixture << " " << key << " first, layer " << m;
      EXPECT_NEAR(gr, e.rest[m], 1e-11 * std::abs(e.rest[m])) << fixture << " " << key << " rest, layer " << m;
      first += e.first[m] / static_cast<double>(M), rest += e.rest[m] / static_cast<double>(M);
    }
    EXPECT_NEAR(got[key]["first"].get<double>(), first, 1e-11 * std::abs(first)) << fixture << " " << key;
    EXPECT_NEAR(got[key]["rest"].get<double>(), rest, 1e-11 * std::abs(rest)) << fixture << " " << key;
  };
  check("kurtosis", kurt);
  check("max_abs", max_abs);
  check("inf_over_l2", ratio);
  for (std::int64_t m = 0; m < M; ++m) {
    const json& g = got["largest_per_layer"][m];
    EXPECT_EQ(g["value"].get<double>(), largest_value[m]) << fixture << " layer " << m;
    EXPECT_EQ(g["abs"].get<double>(), largest[m]) << fixture << " layer " << m;
    EXPECT_EQ(g["channel"].get<std::int64_t>(), largest_ch[m]) << fixture << " layer " << m;
    EXPECT_EQ(g["window"].get<std::int64_t>(), largest_seq[m]) << fixture << " layer " << m;
    EXPECT_EQ(g["position"].get<std::int64_t>(), largest_pos[m]) << fixture << " layer " << m;
  }
}

TEST(HiddenStatistics, FixturesMatchPlainLoop) {
  for (const char* fixture : {"tiny-gpt2-hf", "tiny-llama-hf"})
    for (const char* name : {"hidden_softmax", "hidden_softmax1"}) check_fixture(fixture, name);
}

// ---------------------------------------------------------------- attention

json attention_summary(const at::Tensor& probs /*[B, H, L, L]*/, std::int64_t layers = 2) {
  StatisticsCollector c;
  const std::int64_t B = probs.size(0), L = probs.size(2);
  std::vector<std::int64_t> idx(static_cast<std::size_t>(B));
  std::iota(idx.begin(), idx.end(), 0);
  std::vector<at::Tensor> hidden, attention;
  for (std::int64_t m = 0; m < layers; ++m) {
    hidden.push_back(at::randn({B, L, 8}));
    attention.push_back(probs);
  }
  feed(c, idx, hidden, attention);
  return c.summary()["attention"];
}

at::Tensor causal_mask(std::int64_t L) { return at::ones({L, L}, at::kBool).triu(1); }

TEST(AttentionStatistics, AllWeightOnFirstKey) {
  const std::int64_t L = 10;
  at::Tensor probs = at::zeros({2, 3, L, L});
  probs.select(-1, 0).fill_(1.0);
  json a = attention_summary(probs);
  EXPECT_EQ(a["first_attn_pct"].get<double>(), 100.0);
  EXPECT_EQ(a["first_token_share"].get<double>(), 1.0);
  EXPECT_EQ(a["sink_rate_pct"].get<double>(), 100.0);
  EXPECT_EQ(a["sink_T"].get<std::int64_t>(), L);  // shorter than T = 64
  EXPECT_EQ(a["entropy"].get<double>(), 0.0);
}

TEST(AttentionStatistics, UniformCausalAttention) {
  for (std::int64_t L : {8, 100}) {
    // A[i, j] = 1/i for j ≤ i (1-based). Every key of a row ties, so key 1 gets credit 1/i, as its weight.
    at::Tensor probs = (1.0 / at::arange(1, L + 1, at::kFloat)).unsqueeze(1).expand({L, L}).clone();
    probs.masked_fill_(causal_mask(L), 0.0);
    probs = probs.expand({2, 4, L, L}).contiguous();
    double share = 0, alpha = 0, entropy = 0;
    for (std::int64_t i = 2; i <= L; ++i) share += 1.0 / static_cast<double>(i) / static_cast<double>(L - 1);
    const std::int64_t T = std::min<std::int64_t>(64, L);
    for (std::int64_t i = 1; i <= T; ++i) alpha += 1.0 / static_cast<double>(i) / static_cast<double>(T);
    for (std::int64_t i = 1; i <= L; ++i) entropy += std::log(static_cast<double>(i)) / static_cast<double>(L);
    // α₁ = H_T / T: H_8/8 = 0.340 > 0.3 (all heads sinks), H_64/64 = 0.074 (none).
    const double sink = alpha > 0.3 ? 100.0 : 0.0;
    EXPECT_EQ(sink, L == 8 ? 100.0 : 0.0);
    json a = attention_summary(probs);
    EXPECT_NEAR(a["first_token_share"].get<double>(), share, 1e-6) << "L " << L;
    EXPECT_NEAR(a["first_attn_pct"].get<double>(), 100 * share, 1e-4) << "L " << L;
    EXPECT_EQ(a["sink_rate_pct"].get<double>(), sink) << "L " << L;
    EXPECT_EQ(a["sink_T"].get<std::int64_t>(), T) << "L " << L;
    EXPECT_NEAR(a["entropy"].get<double>(), entropy, 1e-5) << "L " << L;
    for (const auto& e : a["entropy_per_layer"]) EXPECT_NEAR(e.get<double>(), entropy, 1e-5) << "L " << L;
  }
}

TEST(AttentionStatistics, Softmax1WithVeryNegativeLogitsHasNoSink) {
  at::manual_seed(4);
  const std::int64_t L = 80;
  for (double shift : {-50.0, -1000.0}) {
    at::Tensor scores = at::randn({2, 4, L, L}) + shift;
    scores.masked_fill_(causal_mask(L), -std::numeric_limits<double>::infinity());
    at::Tensor probs = softmax1(scores);
    json a = attention_summary(probs);
    EXPECT_LT(a["first_token_share"].get<double>(), 1e-20) << "shift " << shift;
    EXPECT_GE(a["first_token_share"].get<double>(), 0.0) << "shift " << shift;
    EXPECT_EQ(a["sink_rate_pct"].get<double>(), 0.0) << "shift " << shift;
    EXPECT_LT(a["entropy"].get<double>(), 1e-15) << "shift " << shift;
    if (shift == -1000.0) {  // every weight underflows to 0: all i causal keys of query i tie
      double tie_share = 0;
      for (std::int64_t i = 2; i <= L; ++i) tie_share += 1.0 / static_cast<double>(i * (L - 1));
      EXPECT_EQ(a["first_token_share"].get<double>(), 0.0);
      EXPECT_NEAR(a["first_attn_pct"].get<double>(), 100 * tie_share, 1e-10);
    }
  }
}

// Integer weights make exact ties common; the plain loop applies the documented rule.
TEST(AttentionStatistics, RandomAttentionWithTiesMatchesPlainLoop) {
  std::mt19937 rng(5);
  const std::int64_t B = 3, H = 5, L = 70, T = 64;
  const double eps = 0.3;
  at::Tensor probs = at::zeros({B, H, L, L}, at::kFloat);
  auto p = probs.accessor<float, 4>();
  for (std::int64_t b = 0; b < B; ++b)
    for (std::int64_t h = 0; h < H; ++h)
      for (std::int64_t i = 0; i < L; ++i) {
        std::vector<int> w(static_cast<std::size_t>(i + 1));
        int sum = 0;
        for (auto& x : w) sum += (x = static_cast<int>(rng() % 4));
        if (h == 0 && i < T) w[0] += 3 * (i + 1), sum += 3 * (i + 1);         // head 0: a sink
        if (h == 1 && i % 5 == 0) std::fill(w.begin(), w.end(), 0), sum = 0;  // all-zero rows tie every causal key
        for (std::int64_t j = 0; j <= i; ++j)  // an all-zero row stays zero (softmax-1-like)
          p[b][h][i][j] = sum > 0 ? static_cast<float>(w[static_cast<std::size_t>(j)]) / static_cast<float>(sum) : 0.0f;
      }
  double credit = 0, share = 0, sinks = 0, entropy = 0;
  for (std::int64_t b = 0; b < B; ++b)
    for (std::int64_t h = 0; h < H; ++h) {
      double alpha = 0;
      for (std::int64_t i = 0; i < L; ++i) {
        float best = p[b][h][i][0];
        for (std::int64_t j = 0; j <= i; ++j) best = std::max(best, p[b][h][i][j]);
        int tied = 0;
        for (std::int64_t j = 0; j <= i; ++j) tied += p[b][h][i][j] == best;
        if (i >= 1) {
          if (p[b][h][i][0] == best) credit += 1.0 / tied;
          share += p[b][h][i][0];
        }
        if (i < T) alpha += p[b][h][i][0] / static_cast<double>(T);
        for (std::int64_t j = 0; j <= i; ++j)
          if (p[b][h][i][j] > 0) entropy -= p[b][h][i][j] * std::log(static_cast<double>(p[b][h][i][j]));
      }
      sinks += alpha > eps;
    }
  json a = attention_summary(probs);
  const double n_after_first = static_cast<double>(B * H * (L - 1));
  EXPECT_NEAR(a["first_attn_pct"].get<double>(), 100 * credit / n_after_first, 1e-10);
  EXPECT_NEAR(a["first_token_share"].get<double>(), share / n_after_first, 1e-10);
  EXPECT_NEAR(a["sink_rate_pct"].get<double>(), 100 * sinks / static_cast<double>(B * H), 1e-10);
  EXPECT_GT(a["sink_rate_pct"].get<double>(), 0.0);  // head 0 is a sink: the case is not vacuous
  EXPECT_NEAR(a["entropy"].get<double>(), entropy / static_cast<double>(B * H * L), 1e-6);
}

TEST(AttentionStatistics, SwitchedOff) {
  StatisticsCollector c(StatisticsOptions{/*attention=*/false});
  EXPECT_FALSE(c.wants_attention(0));
  c.begin_batch({0});
  EXPECT_THROW(c.on_attention(0, at::ones({1, 1, 1, 1})), Error);
  c.on_block_output(0, at::randn({1, 4, 8}));
  EXPECT_FALSE(c.summary().contains("attention"));
}

// ---------------------------------------------------------------- determinism

struct RandomBatch {
  std::vector<at::Tensor> hidden;     // [8, L, D] per layer
  std::vector<at::Tensor> attention;  // [8, H, L, L] per layer
  at::Tensor rows(std::int64_t begin, std::int64_t n, std::int64_t m, bool attn) const {
    return (attn ? attention : hidden)[static_cast<std::size_t>(m)].narrow(0, begin, n);
  }
};

RandomBatch random_batch() {
  at::manual_seed(6);
  const std::int64_t B = 8, L = 64, D = 768, H = 4;  // large enough for ATen's parallel paths
  RandomBatch r;
  for (int m = 0; m < 3; ++m) {
    r.hidden.push_back(at::randn({B, L, D}) * (m + 1));
    at::Tensor scores = at::randn({B, H, L, L}) * 3;
    scores.masked_fill_(causal_mask(L), -std::numeric_limits<double>::infinity());
    r.attention.push_back(at::softmax(scores, -1));
  }
  return r;
}

void feed_rows(StatisticsCollector& c, const RandomBatch& r, std::int64_t begin, std::int64_t n) {
  std::vector<std::int64_t> idx(static_cast<std::size_t>(n));
  std::iota(idx.begin(), idx.end(), begin);
  std::vector<at::Tensor> hidden, attention;
  for (std::int64_t m = 0; m < 3; ++m) {
    hidden.push_back(r.rows(begin, n, m, false));
    attention.push_back(r.rows(begin, n, m, true));
  }
  feed(c, idx, hidden, attention);
}

TEST(StatisticsDeterminism, BatchOneEqualsBatchEight) {
  RandomBatch r = random_batch();
  StatisticsCollector eight, one;
  feed_rows(eight, r, 0, 8);
  for (std::int64_t w : {5, 2, 7, 0, 1, 6, 3, 4}) feed_rows(one, r, w, 1);  // any order
  EXPECT_EQ(eight.summary().dump(), one.summary().dump());
  EXPECT_EQ(eight.state_to_json().dump(), one.state_to_json().dump());
  EXPECT_EQ(eight.summary()["windows"].get<std::int64_t>(), 8);
}

TEST(StatisticsDeterminism, MergedHalvesEqualOneCollector) {
  RandomBatch r = random_batch();
  StatisticsCollector all, low, high;
  feed_rows(all, r, 0, 8);
  feed_rows(low, r, 0, 4);
  feed_rows(high, r, 4, 4);
  StatisticsCollector low_then_high = low, high_then_low = high;
  low_then_high.merge(high);
  high_then_low.merge(low);
  EXPECT_EQ(low_then_high.summary().dump(), all.summary().dump());
  EXPECT_EQ(high_then_low.summary().dump(), all.summary().dump());
  EXPECT_THROW(low_then_high.merge(low), Error);  // overlapping windows
  StatisticsCollector other_eps(StatisticsOptions{true, 64, 0.5});
  EXPECT_THROW(other_eps.merge(low), Error);
}

TEST(StatisticsDeterminism, StateRoundTripIsExact) {
  RandomBatch r = random_batch();
  StatisticsCollector c;
  feed_rows(c, r, 0, 8);
  c.begin_batch({42});  // a constant hidden state: NaN kurtosis and ratio must survive too
  for (std::int64_t m = 0; m < 3; ++m) {
    c.on_attention(m, r.rows(0, 1, m, true));
    c.on_block_output(m, at::zeros({1, 64, 768}));
  }
  const std::string text = c.state_to_json().dump();
  StatisticsCollector back = StatisticsCollector::state_from_json(json::parse(text), "state.json");
  EXPECT_EQ(back.state_to_json().dump(), text);
  EXPECT_EQ(back.summary().dump(), c.summary().dump());
  EXPECT_EQ(json::parse(text)["windows"].back()["hidden"][0][0], "nan");  // kurtosis of a constant vector
  // Every double must read back to the same bits, not just print the same.
  for (double x : {1.0 / 3, 0.1 + 0.2, 5e-324, 1.7976931348623157e308, std::nextafter(1.0, 2.0), -2.5e-17}) {
    double y = json::parse(json(x).dump()).get<double>();
    EXPECT_EQ(std::memcmp(&x, &y, sizeof x), 0) << json(x).dump();
  }
  json broken = json::parse(text);
  broken["windows"][0]["hidden"][0].erase(0);
  try {
    StatisticsCollector::state_from_json(broken, "state.json");
    ADD_FAILURE() << "a short hidden entry was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("state.json"), std::string::npos) << e.what();
  }
}

// Chunking bounds memory only: tiny chunks (3 or 7 rows, splitting sequences and heads)
// give the same bits as one chunk. The attention has all-zero rows, whose tie count depends
// on the query position within the chunk.
TEST(StatisticsDeterminism, ChunkingDoesNotChangeResults) {
  RandomBatch r = random_batch();
  const at::Tensor& hidden = r.hidden[0];  // [8, 64, 768]
  at::Tensor attention = r.attention[1].clone();
  attention.narrow(2, 5, 9).zero_();                     // queries 6..14 of every head: all-zero rows
  attention.select(2, 20).narrow(-1, 0, 3).fill_(0.25);  // query 21: a three-way tie on keys 1..3
  attention.select(2, 20).narrow(-1, 3, 18).zero_();
  auto same = [](double a, double b) { return std::memcmp(&a, &b, sizeof a) == 0; };
  auto h_one = hidden_layer_stats(hidden, std::int64_t{1} << 30), h_small = hidden_layer_stats(hidden, 3 * 768);
  auto a_one = attention_layer_stats(attention, 64, 0.3, std::int64_t{1} << 30),
       a_small = attention_layer_stats(attention, 64, 0.3, 7 * 64);
  for (std::size_t b = 0; b < 8; ++b) {
    EXPECT_TRUE(same(h_one[b].kurtosis_rest, h_small[b].kurtosis_rest)) << b;
    EXPECT_TRUE(same(h_one[b].inf_over_l2_rest, h_small[b].inf_over_l2_rest)) << b;
    EXPECT_TRUE(same(h_one[b].largest_value, h_small[b].largest_value)) << b;
    EXPECT_EQ(h_one[b].largest_channel, h_small[b].largest_channel) << b;
    EXPECT_TRUE(same(a_one[b].first_attn, a_small[b].first_attn)) << b;
    EXPECT_TRUE(same(a_one[b].first_share, a_small[b].first_share)) << b;
    EXPECT_TRUE(same(a_one[b].entropy, a_small[b].entropy)) << b;
    EXPECT_TRUE(same(a_one[b].sink_fraction, a_small[b].sink_fraction)) << b;
  }
}

TEST(StatisticsCollector, RejectsMisuse) {
  StatisticsCollector c;
  EXPECT_THROW(c.summary(), Error);            // nothing observed
  EXPECT_THROW(c.begin_batch({1, 1}), Error);  // duplicate in one batch
  EXPECT_THROW(c.begin_batch({-1}), Error);
  c.begin_batch({0, 1});
  EXPECT_THROW(c.on_block_output(0, at::randn({3, 4, 8})), Error);  // B differs from begin_batch
  EXPECT_THROW(c.on_block_output(1, at::randn({2, 4, 8})), Error);  // layer 0 comes first
  c.on_attention(0, at::softmax(at::randn({2, 2, 4, 4}), -1));
  c.on_block_output(0, at::randn({2, 4, 8}));
  // A window seen before continues (layer-major evaluation names a batch again for each layer),
  // but it cannot receive a layer twice.
  c.begin_batch({1});
  EXPECT_THROW(c.on_block_output(0, at::randn({1, 4, 8})), Error);  // window 1 already has layer 0
  c.on_attention(1, at::softmax(at::randn({1, 2, 4, 4}), -1));
  c.on_block_output(1, at::randn({1, 4, 8}));  // its next layer is fine
}

// The collector driven by a real forward pass: it sees every layer, and changes nothing.
TEST(StatisticsCollector, ObservesTransformerForward) {
  at::manual_seed(7);
  ModelConfig cfg;
  cfg.vocab_size = 50, cfg.d_model = 32, cfg.d_ff = 64, cfg.n_layers = 3, cfg.n_heads = 4, cfg.n_kv_heads = 4;
  cfg.max_seq_len = 16, cfg.position = PositionKind::rope, cfg.norm = NormKind::rmsnorm, cfg.mlp = MlpKind::swiglu;
  cfg.attention_softmax = SoftmaxKind::softmax1;
  auto lin = [](std::int64_t out, std::int64_t in) { return LinearWeights{at::randn({out, in}) * 0.2, at::Tensor()}; };
  auto rms = [&] { return NormWeights{at::ones({cfg.d_model}), at::Tensor()}; };
  ModelWeights w;
  w.token_embedding = at::randn({cfg.vocab_size, cfg.d_model});
  for (int i = 0; i < cfg.n_layers; ++i) {
    BlockWeights b;
    b.attn_norm = rms(), b.mlp_norm = rms();
    b.q = lin(32, 32), b.k = lin(32, 32), b.v = lin(32, 32), b.o = lin(32, 32);
    b.up = lin(64, 32), b.gate = lin(64, 32), b.down = lin(32, 64);
    w.blocks.push_back(b);
  }
  w.final_norm = rms();
  w.lm_head = at::randn({cfg.vocab_size, cfg.d_model});
  Transformer model(cfg, w);
  at::Tensor tokens = at::randint(0, cfg.vocab_size, {2, 16}, at::kLong);
  StatisticsCollector c;
  c.begin_batch({10, 11});
  at::Tensor logits = model.forward(tokens, &c);
  EXPECT_TRUE(test::tensors_equal(logits, model.forward(tokens)));
  json s = c.summary();
  EXPECT_EQ(s["layers"].get<std::int64_t>(), 3);
  EXPECT_EQ(s["windows"].get<std::int64_t>(), 2);
  for (const auto& e : s["attention"]["entropy_per_layer"]) EXPECT_GT(e.get<double>(), 0.0);
  EXPECT_LE(s["attention"]["first_token_share"].get<double>(), 1.0);
  const json& largest = s["hidden"]["largest_per_layer"][0];
  EXPECT_TRUE(largest["window"] == 10 || largest["window"] == 11) << largest.dump();
}

}  // namespace
}  // namespace qeval
