// GPTQ's solve (quant/calibration/gptq_solve.h) held to
//   - the reference implementations' own codes on the same weights and Hessian
//     (tests/oracle/make_gptq_fixtures.py: llm-compressor 0.14.0 and AutoGPTQ 0.7.1), and
//   - a float64 reference written here from the paper's column-by-column update (no blocks, no
//     shortcuts), which the blocked solve must reproduce code for code in float64.
#include <gtest/gtest.h>

#include <ATen/ATen.h>
#include <fmt/format.h>

#include <cmath>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "common/error.h"
#include "common/files.h"
#include "quant/calibration/gptq_solve.h"
#include "tests/support/test_data.h"

namespace qeval {
namespace {

template <typename Fn>
void expect_error(Fn fn, std::initializer_list<std::string> parts) {
  try {
    fn();
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    for (const auto& p : parts) EXPECT_NE(std::string(e.what()).find(p), std::string::npos) << e.what();
  }
}

std::vector<std::uint64_t> splitmix64(std::uint64_t seed, std::int64_t n) {
  std::vector<std::uint64_t> out(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i) {
    std::uint64_t z = seed + static_cast<std::uint64_t>(i + 1) * 0x9E3779B97F4A7C15ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    out[static_cast<std::size_t>(i)] = z ^ (z >> 31);
  }
  return out;
}

// The fixture's problem: W and H exactly as make_gptq_fixtures.py builds them.
struct Problem {
  at::Tensor w, h;
};
Problem fixture_problem(std::uint64_t seed, const std::vector<std::int64_t>& dead, std::int64_t N, std::int64_t K,
                        std::int64_t seqs, std::int64_t tokens) {
  const auto uw = splitmix64(seed, N * K);
  at::Tensor w = at::empty({N, K}, at::kDouble);
  for (std::int64_t i = 0; i < N * K; ++i)
    w.data_ptr<double>()[i] = static_cast<double>(static_cast<std::int64_t>(uw[i] % 1024) - 512) / 1024;
  const auto ux = splitmix64(seed + 1, seqs * tokens * K);
  at::Tensor x = at::empty({seqs * tokens, K}, at::kDouble);
  for (std::int64_t i = 0; i < seqs * tokens * K; ++i)
    x.data_ptr<double>()[i] = static_cast<double>(static_cast<std::int64_t>(ux[i] % 17) - 8) / 4;
  for (std::int64_t d : dead) x.select(1, d).zero_();
  at::Tensor h = at::matmul(x.t(), x) * (2.0 / static_cast<double>(seqs));
  at::Tensor ridge = at::arange(K, at::kDouble) * std::ldexp(1.0, -12);
  for (std::int64_t d : dead) ridge[d] = 0;
  h.diagonal().add_(ridge);
  return {w.to(at::kFloat), h.to(at::kFloat)};
}

std::vector<int> codes_of_hex(const std::string& hex, int bits) {
  const std::size_t width = bits <= 4 ? 1 : 2;
  std::vector<int> out;
  for (std::size_t i = 0; i < hex.size(); i += width) out.push_back(std::stoi(hex.substr(i, width), nullptr, 16));
  return out;
}

TEST(GptqSolve, CodesOfLlmCompressorAndAutoGptqOnTheSameHessian) {
  const nlohmann::json j = nlohmann::json::parse(read_file(test::repo_path("tests/quant/fixtures/gptq_reference_codes.json")));
  const std::int64_t N = j.at("N"), K = j.at("K");
  for (const auto& c : j.at("cases")) {
    const std::string name = c.at("name");
    SCOPED_TRACE(name);
    const Problem p = fixture_problem(c.at("seed"), c.at("dead_columns").get<std::vector<std::int64_t>>(), N, K,
                                      j.at("sequences"), j.at("tokens"));
    GptqOptions o;
    o.bits = c.at("bits");
    o.group_size = c.at("group_size");
    o.symmetric = c.at("symmetric");
    o.order = c.at("order") == "none" ? GptqOrder::none : GptqOrder::descending_hessian;
    const bool autogptq = c.at("reference") == "autogptq";
    o.reference = autogptq ? GptqReference::autogptq : GptqReference::llm_compressor;
    o.group_params = autogptq ? GptqGroupParams::updated : GptqGroupParams::original;
    const GptqResult r = gptq_solve(p.w, p.h, o, name);
    const std::vector<int> expected = codes_of_hex(c.at("codes"), o.bits);
    ASSERT_EQ(static_cast<std::int64_t>(expected.size()), N * K);
    const std::uint8_t* got = r.codes.data_ptr<std::uint8_t>();
    std::int64_t same = 0, first_row_difference = -1;
    for (std::int64_t i = 0; i < N * K; ++i) {
      if (got[i] == expected[static_cast<std::size_t>(i)]) ++same;
      else if (first_row_difference < 0) first_row_difference = i / K;
    }
    // The two sides start from the same bits and differ only in their matrix products'
    // summation order (MKL's or OpenBLAS's), which moves a value across a rounding boundary
    // only where it lies within a few ulps of one; every later code of that row may follow.
    const double agreement = static_cast<double>(same) / static_cast<double>(N * K);
    RecordProperty(name, fmt::format("{:.4f}", agreement));
    EXPECT_GE(agreement, 0.99) << same << " of " << N * K << " codes equal; first row differing " << first_row_difference;
    EXPECT_EQ(r.dead_columns, static_cast<std::int64_t>(c.at("dead_columns").size()));
    EXPECT_FALSE(r.fell_back_to_rtn);
    if (c.contains("g_idx")) {
      const auto g_idx = c.at("g_idx").get<std::vector<std::int32_t>>();
      for (std::int64_t k = 0; k < K; ++k)
        ASSERT_EQ(r.group_of_column.data_ptr<std::int32_t>()[k], g_idx[static_cast<std::size_t>(k)]) << "column " << k;
    }
    if (c.contains("loss")) EXPECT_NEAR(r.loss, c.at("loss").get<double>(), 1e-3 * c.at("loss").get<double>());
    // ŵ = (q − z) · s with each column's group
    const at::Tensor g = r.group_of_column.to(at::kLong);
    const at::Tensor rebuilt = (r.codes.to(at::kFloat) - r.zeros.index_select(1, g)) * r.scales.index_select(1, g);
    EXPECT_TRUE(at::equal(rebuilt, r.dequantized));
  }
}

// The paper's algorithm column by column in float64: after quantising column j (in the order of
// quantisation), every later column takes −e_j · U_{j,·} at once.
struct Reference {
  at::Tensor codes;  // [N, K] int64, original column order
};
Reference reference_gptq(const at::Tensor& w0, const at::Tensor& h0, const GptqOptions& o) {
  const std::int64_t N = w0.size(0), K = w0.size(1);
  const std::int64_t gs = o.group_size > 0 ? o.group_size : K;
  at::Tensor w = w0.clone(), h = h0.clone();
  const at::Tensor dead = h.diagonal() == 0;
  h.diagonal().masked_fill_(dead, 1.0);
  w.masked_fill_(dead.unsqueeze(0), 0.0);
  std::vector<std::int64_t> perm(static_cast<std::size_t>(K));
  for (std::int64_t k = 0; k < K; ++k) perm[k] = k;
  if (o.order == GptqOrder::descending_hessian) {
    const at::Tensor d = h0.diagonal().clone();
    std::stable_sort(perm.begin(), perm.end(), [&](std::int64_t a, std::int64_t b) {
      return d[a].item<double>() > d[b].item<double>();
    });
  }
  const at::Tensor idx = at::tensor(perm, at::kLong);
  w = w.index_select(1, idx);
  h = h.index_select(0, idx).index_select(1, idx);
  h.diagonal().add_(h.diagonal().mean() * o.dampening);
  const at::Tensor u = at::linalg_cholesky(at::inverse(h), /*upper=*/true);
  const double qmax = std::pow(2.0, o.bits) - 1, offset = std::pow(2.0, o.bits - 1);
  auto params = [&](const at::Tensor& x) {  // llm-compressor's rule, unsigned zero
    const double lo = std::min(x.min().item<double>(), 0.0), hi = std::max(x.max().item<double>(), 0.0);
    if (o.symmetric) return std::make_pair(std::max(-lo, hi) / (qmax / 2), offset);
    const double s = (hi - lo) / qmax;
    return std::make_pair(s == 0 ? 1e-300 : s, std::nearbyint(std::clamp(-offset - lo / s, -offset, offset - 1)) + offset);
  };
  at::Tensor codes = at::empty({N, K}, at::kLong);
  for (std::int64_t j = 0; j < K; ++j) {
    const std::int64_t g = perm[j] / gs;
    for (std::int64_t r = 0; r < N; ++r) {
      const auto [s, z] = params(w0[r].slice(0, g * gs, std::min(K, (g + 1) * gs)));
      const double x = w[r][j].item<double>();
      const double q = std::nearbyint(std::clamp(x / s + (o.symmetric ? 0 : z - offset), -offset, offset - 1));
      codes[r][perm[j]] = static_cast<std::int64_t>(q + offset);
      const double e = (x - (q - (o.symmetric ? 0 : z - offset)) * s) / u[j][j].item<double>();
      w[r].slice(0, j + 1).sub_(u[j].slice(0, j + 1) * e);
    }
  }
  return {codes};
}

TEST(GptqSolve, BlockedSolveEqualsTheColumnByColumnReferenceInFloat64) {
  at::manual_seed(7);
  const std::int64_t N = 12, K = 96;
  // Inputs with two outlier channels and a dead one: the Hessian GPTQ sees in a transformer.
  at::Tensor x = at::randn({200, K}, at::kDouble);
  x.select(1, 3).mul_(20);
  x.select(1, 50).mul_(8);
  x.select(1, 70).zero_();
  const at::Tensor h = at::matmul(x.t(), x) * (2.0 / 200);
  const at::Tensor w = at::randn({N, K}, at::kDouble) * 0.05;
  struct Case {
    int bits;
    std::int64_t group, block;
    bool symmetric;
    GptqOrder order;
  };
  for (const Case c : {Case{4, 32, 128, true, GptqOrder::none}, Case{4, 32, 16, true, GptqOrder::descending_hessian},
                       Case{3, 0, 40, false, GptqOrder::none}, Case{4, 48, 7, false, GptqOrder::descending_hessian},
                       Case{8, 0, 32, true, GptqOrder::descending_hessian}, Case{2, 32, 32, false, GptqOrder::none}}) {
    SCOPED_TRACE(fmt::format("bits {} group {} block {} symmetric {} order {}", c.bits, c.group, c.block, c.symmetric,
                             to_string(c.order)));
    GptqOptions o;
    o.bits = c.bits, o.group_size = c.group, o.block_size = c.block, o.symmetric = c.symmetric, o.order = c.order;
    const GptqResult r = gptq_solve(w, h, o);
    const Reference ref = reference_gptq(w, h, o);
    EXPECT_TRUE(at::equal(r.codes.to(at::kLong), ref.codes))
        << (r.codes.to(at::kLong) != ref.codes).sum().item<std::int64_t>() << " codes differ";
    EXPECT_EQ(r.dead_columns, 1);
  }
}

TEST(GptqSolve, LowersTheLayerErrorBelowRoundToNearest) {
  at::manual_seed(3);
  const std::int64_t N = 32, K = 128;
  at::Tensor x = at::randn({256, K});
  x.select(1, 10).mul_(30);  // an outlier channel dominates H
  const at::Tensor h = at::matmul(x.t(), x) * (2.0f / 256);
  const at::Tensor w = at::randn({N, K}) * 0.02;
  GptqOptions o;
  o.group_size = 32;
  const GptqResult r = gptq_solve(w, h, o);
  const GptqResult rtn = gptq_solve(w, at::eye(K), o);  // U diagonal: no error is pushed, codes round to nearest
  auto output_error = [&](const at::Tensor& q) {
    const at::Tensor d = (q - w).to(at::kDouble);
    return at::trace(at::matmul(at::matmul(d, h.to(at::kDouble)), d.t())).item<double>();
  };
  EXPECT_LT(output_error(r.dequantized), 0.7 * output_error(rtn.dequantized));
  // Round to nearest with the same parameters: the codes w / s rounded.
  const at::Tensor g = rtn.group_of_column.to(at::kLong);
  const at::Tensor nearest = at::round(at::clamp(w / rtn.scales.index_select(1, g), -8, 7)) + 8;
  EXPECT_TRUE(at::equal(rtn.codes.to(at::kFloat), nearest));
}

TEST(GptqSolve, ActivationOrderIsUndoneAndRecordedPerColumn) {
  at::manual_seed(5);
  const std::int64_t N = 8, K = 64;
  at::Tensor x = at::randn({100, K});
  x = x / x.norm(2, 0, /*keepdim=*/true) * at::linspace(0.1, 3, K);  // diag H ascending: the order reverses
  const at::Tensor h = at::matmul(x.t(), x) * (2.0f / 100);
  const at::Tensor w = at::randn({N, K}) * 0.1;
  GptqOptions o;
  o.group_size = 16;
  o.order = GptqOrder::descending_hessian;
  o.group_params = GptqGroupParams::updated;
  o.reference = GptqReference::autogptq;
  const GptqResult r = gptq_solve(w, h, o);
  // Quantised in reverse column order, in groups of 16 positions: column k is in group (63 − k) / 16.
  for (std::int64_t k = 0; k < K; ++k) EXPECT_EQ(r.group_of_column[k].item<int>(), (63 - k) / 16) << k;
  // ŵ is in the original order: close to w column by column.
  EXPECT_LT((r.dequantized - w).abs().max().item<float>(), 0.1f);
  EXPECT_GT(at::cosine_similarity(r.dequantized.flatten(), w.flatten(), 0).item<float>(), 0.95f);
}

TEST(GptqSolve, RefusesWhatItCannotSolve) {
  const at::Tensor w = at::zeros({4, 8});
  expect_error([&] { gptq_solve(w, at::zeros({4, 4}), GptqOptions{}, "layers.0.mlp.up"); },
               {"layers.0.mlp.up", "[8, 8]", "[4, 4]"});
  GptqOptions o;
  o.bits = 5;
  expect_error([&] { gptq_solve(w, at::eye(8), o); }, {"bits", "5"});
  at::Tensor nan_h = at::eye(8);
  nan_h[0][0] = NAN;
  expect_error([&] { gptq_solve(w, nan_h, GptqOptions{}); }, {"NaN"});
  // A Hessian that no damping makes positive definite: round to nearest, said so.
  at::Tensor indefinite = at::eye(8);
  indefinite[0][0] = -5;
  EXPECT_TRUE(gptq_solve(w, indefinite, GptqOptions{}).fell_back_to_rtn);
}

}  // namespace
}  // namespace qeval
