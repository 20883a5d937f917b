// AWQ's scale search and fold (quant/calibration/awq_search.h) held to llm-compressor 0.14.0's own
// run (tests/oracle/make_awq_fixtures.py wrote tests/quant/fixtures/awq_reference.json): one Llama-style
// block whose inputs and weights both sides make from the same integer formula, the four Llama
// mappings searched (per-grid-point losses, the chosen point, the scales), folded, and quantised to
// W4A16_ASYM (scales, zeros, codes). The fold is also held to the block's full-precision output.
#include <gtest/gtest.h>

#include <ATen/ATen.h>
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <limits>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "common/error.h"
#include "common/files.h"
#include "quant/calibration/awq_search.h"
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

std::vector<std::uint8_t> base64_decode(const std::string& s) {
  auto value = [](char c) -> int {
    if (c >= 'A' && c <= 'Z') return c - 'A';
    if (c >= 'a' && c <= 'z') return c - 'a' + 26;
    if (c >= '0' && c <= '9') return c - '0' + 52;
    if (c == '+') return 62;
    if (c == '/') return 63;
    return -1;
  };
  std::vector<std::uint8_t> out;
  std::uint32_t acc = 0;
  int bits = 0;
  for (char c : s) {
    const int v = value(c);
    if (v < 0) continue;  // '=' padding
    acc = (acc << 6) | static_cast<std::uint32_t>(v);
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out.push_back(static_cast<std::uint8_t>((acc >> bits) & 0xFF));
    }
  }
  return out;
}

at::Tensor floats_of(const std::string& b64) {
  const auto bytes = base64_decode(b64);
  at::Tensor t = at::empty({static_cast<std::int64_t>(bytes.size() / 4)}, at::kFloat);
  std::memcpy(t.data_ptr<float>(), bytes.data(), bytes.size());
  return t;
}

at::Tensor bytes_of(const std::string& b64) {
  const auto bytes = base64_decode(b64);
  at::Tensor t = at::empty({static_cast<std::int64_t>(bytes.size())}, at::kByte);
  std::memcpy(t.data_ptr<std::uint8_t>(), bytes.data(), bytes.size());
  return t;
}

// make_awq_fixtures.py's gen(): (u1 + u2 + u3 + u4 − 2) · √3 · scale in float64, then float32, with
// u = splitmix64(seed·2^32 + 4i + j) >> 11 · 2^-53.
at::Tensor gen(std::uint64_t seed, std::vector<std::int64_t> shape, double scale = 1.0) {
  std::int64_t n = 1;
  for (std::int64_t d : shape) n *= d;
  at::Tensor t = at::empty(shape, at::kFloat);
  float* p = t.data_ptr<float>();
  const double c = std::sqrt(3.0) * scale;
  for (std::int64_t i = 0; i < n; ++i) {
    double u[4];
    for (int j = 0; j < 4; ++j) {
      std::uint64_t z = (seed << 32) + static_cast<std::uint64_t>(4 * i + j);
      z += 0x9E3779B97F4A7C15ull;
      z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
      z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
      z ^= z >> 31;
      u[j] = static_cast<double>(z >> 11) * std::ldexp(1.0, -53);
    }
    const double s = ((u[0] + u[1]) + u[2]) + u[3];
    p[i] = static_cast<float>((s - 2.0) * c);
  }
  return t;
}

at::Tensor gain(std::int64_t n, const std::vector<std::int64_t>& channels, double g) {
  at::Tensor t = at::ones({n}, at::kFloat);
  for (std::int64_t c : channels) t[c] = g;
  return t;
}

constexpr std::int64_t K = 256, HEADS = 4, DFF = 512, BATCHES = 3, B = 2, T = 32;
constexpr double EPS = 1e-5;

// The fixture's block: weights by name, as make_block() makes them.
std::map<std::string, at::Tensor> make_block() {
  std::map<std::string, at::Tensor> w;
  w["input_layernorm"] = 1.0 + 0.1 * gen(11, {K});
  w["post_attention_layernorm"] = 1.0 + 0.1 * gen(12, {K});
  w["q_proj"] = gen(21, {K, K}, 1.0 / 16);
  w["k_proj"] = gen(22, {K, K}, 1.0 / 16);
  w["v_proj"] = gen(23, {K, K}, 1.0 / 16);
  w["o_proj"] = gen(24, {K, K}, 1.0 / 16);
  w["gate_proj"] = gen(25, {DFF, K}, 1.0 / 16);
  w["up_proj"] = gen(26, {DFF, K}, 1.0 / 16) * gain(DFF, {5, 66, 130, 301, 444}, 6.0).view({-1, 1});
  w["down_proj"] = gen(27, {K, DFF}, 1.0 / 22);
  return w;
}

std::vector<at::Tensor> make_inputs() {
  const at::Tensor g = gain(K, {3, 40, 77, 128, 200, 251}, 12.0);
  std::vector<at::Tensor> xs;
  for (std::int64_t b = 0; b < BATCHES; ++b) xs.push_back(gen(100 + static_cast<std::uint64_t>(b), {B, T, K}) * g);
  return xs;
}

at::Tensor rms_norm(const at::Tensor& x, const at::Tensor& w) {
  return x * at::rsqrt(x.pow(2).mean(-1, /*keepdim=*/true) + EPS) * w;
}

// Causal softmax attention before o_proj: [b, t, K].
at::Tensor attention_mix(const at::Tensor& h, const at::Tensor& wq, const at::Tensor& wk, const at::Tensor& wv) {
  const std::int64_t b = h.size(0), t = h.size(1), d = K / HEADS;
  auto heads = [&](const at::Tensor& w) { return at::linear(h, w).view({b, t, HEADS, d}).transpose(1, 2); };
  const at::Tensor q = heads(wq), k = heads(wk), v = heads(wv);
  at::Tensor s = at::matmul(q, k.transpose(-1, -2)) / std::sqrt(static_cast<double>(d));
  s = s.masked_fill(at::ones({t, t}, at::kBool).triu(1), -std::numeric_limits<double>::infinity());
  return at::matmul(at::softmax(s, -1), v).transpose(1, 2).reshape({b, t, K});
}

at::Tensor mlp_hidden(const at::Tensor& h2, const at::Tensor& wg, const at::Tensor& wu) {
  return at::silu(at::linear(h2, wg)) * at::linear(h2, wu);
}

// The block's output and, per batch, the four mappings' inputs.
struct Forward {
  std::vector<at::Tensor> out, h, attn, h2, hidden;
};
Forward block_forward(const std::map<std::string, at::Tensor>& w, const std::vector<at::Tensor>& xs) {
  Forward f;
  for (const at::Tensor& x0 : xs) {
    const at::Tensor h = rms_norm(x0, w.at("input_layernorm"));
    const at::Tensor a = attention_mix(h, w.at("q_proj"), w.at("k_proj"), w.at("v_proj"));
    const at::Tensor x1 = x0 + at::linear(a, w.at("o_proj"));
    const at::Tensor h2 = rms_norm(x1, w.at("post_attention_layernorm"));
    const at::Tensor m = mlp_hidden(h2, w.at("gate_proj"), w.at("up_proj"));
    f.out.push_back(x1 + at::linear(m, w.at("down_proj")));
    f.h.push_back(h);
    f.attn.push_back(a);
    f.h2.push_back(h2);
    f.hidden.push_back(m);
  }
  return f;
}

at::Tensor x_mean_of(const std::vector<at::Tensor>& batches) {
  AwqActivationMean m(batches[0].size(-1));
  for (const at::Tensor& x : batches) m.add(x);
  return m.mean();
}

double max_rel(const at::Tensor& got, const at::Tensor& want) {
  return ((got.to(at::kDouble) - want.to(at::kDouble)).abs() / want.to(at::kDouble).abs().clamp_min(1e-30))
      .max()
      .item<double>();
}

const nlohmann::json& fixture() {
  static const nlohmann::json j =
      nlohmann::json::parse(read_file(test::repo_path("tests/quant/fixtures/awq_reference.json")));
  return j;
}

TEST(AwqSearch, GeneratorMatchesTheOracle) {
  const auto& g = fixture().at("generator_check");
  const auto w = make_block();
  const auto xs = make_inputs();
  const at::Tensor x0 = xs[0].reshape({-1});
  for (int i = 0; i < 4; ++i) EXPECT_EQ(x0[i].item<float>(), g.at("x0_first")[i].get<double>()) << i;
  EXPECT_NEAR(xs[0].to(at::kDouble).sum().item<double>(), g.at("x0_sum").get<double>(), 1e-9);
  EXPECT_NEAR(w.at("q_proj").to(at::kDouble).sum().item<double>(), g.at("q_sum").get<double>(), 1e-9);
  EXPECT_NEAR(w.at("down_proj").to(at::kDouble).sum().item<double>(), g.at("down_sum").get<double>(), 1e-9);
}

// llm-compressor's Llama mappings, in its order: the previous op and the balance layers.
const std::vector<std::pair<std::string, std::vector<std::string>>> kMappings = {
    {"input_layernorm", {"q_proj", "k_proj", "v_proj"}},
    {"v_proj", {"o_proj"}},
    {"post_attention_layernorm", {"gate_proj", "up_proj"}},
    {"up_proj", {"down_proj"}},
};

// The four searches, each on the original weights and inputs (llm-compressor and AutoAWQ both search a
// layer's mappings before folding any). Parents: self_attn (q, k, v → o_proj(attention)) and mlp
// through the callback; o_proj and down_proj through the linear convenience.
struct BlockSearch {
  std::vector<at::Tensor> x_means;
  std::vector<AwqSearchResult> results;
};
BlockSearch search_block(const std::map<std::string, at::Tensor>& w, const Forward& f, const AwqOptions& o) {
  const AwqParentForward self_attn = [&](const std::vector<at::Tensor>& qkv) {
    std::vector<at::Tensor> out;
    for (const at::Tensor& h : f.h) out.push_back(at::linear(attention_mix(h, qkv[0], qkv[1], qkv[2]), w.at("o_proj")));
    return out;
  };
  const AwqParentForward mlp = [&](const std::vector<at::Tensor>& gu) {
    std::vector<at::Tensor> out;
    for (const at::Tensor& h2 : f.h2) out.push_back(at::linear(mlp_hidden(h2, gu[0], gu[1]), w.at("down_proj")));
    return out;
  };
  const std::vector<const std::vector<at::Tensor>*> inputs = {&f.h, &f.attn, &f.h2, &f.hidden};
  const std::vector<const AwqParentForward*> parents = {&self_attn, nullptr, &mlp, nullptr};
  BlockSearch r;
  for (std::size_t m = 0; m < kMappings.size(); ++m) {
    AwqMappingInputs in;
    for (const auto& n : kMappings[m].second) in.balance_weights.push_back(w.at(n));
    in.x_mean = x_mean_of(*inputs[m]);
    in.name = kMappings[m].first;
    r.x_means.push_back(in.x_mean);
    r.results.push_back(parents[m] ? awq_search_scales(in, *parents[m], o)
                                   : awq_search_scales_linear(in, *inputs[m], o));
  }
  return r;
}

// The four mappings searched, folded in llm-compressor's order and quantised to W4A16_ASYM.
TEST(AwqSearch, FourLlamaMappingsMatchLlmCompressor) {
  const auto& j = fixture();
  auto w = make_block();
  const Forward f = block_forward(w, make_inputs());
  const AwqOptions o;  // llm-compressor, duo on, n_grid 20, W4A16_ASYM
  const BlockSearch search = search_block(w, f, o);
  ASSERT_EQ(j.at("cases").size(), kMappings.size());

  std::vector<at::Tensor> best_scales;
  for (std::size_t m = 0; m < kMappings.size(); ++m) {
    const auto& c = j.at("cases")[m];
    const std::string& smooth = kMappings[m].first;
    SCOPED_TRACE(smooth);
    ASSERT_EQ(c.at("smooth").get<std::string>(), smooth);
    ASSERT_EQ(c.at("balance").get<std::vector<std::string>>(), kMappings[m].second);
    const double x_err = max_rel(search.x_means[m], floats_of(c.at("x_mean")));
    EXPECT_LT(x_err, 1e-5);
    const AwqSearchResult& r = search.results[m];
    const auto& grid = c.at("grid");
    const auto& losses = c.at("losses");
    ASSERT_EQ(r.grid.size(), grid.size());
    double loss_err = 0;
    for (std::size_t g = 0; g < grid.size(); ++g) {
      EXPECT_EQ(r.grid[g].ratio, grid[g][0].get<double>()) << g;
      EXPECT_EQ(r.grid[g].duo, grid[g][1].get<bool>()) << g;
      const double want = losses[g].get<double>();
      const double rel = std::abs(r.grid[g].loss - want) / want;
      loss_err = std::max(loss_err, rel);
      EXPECT_LT(rel, 1e-4) << "grid point " << g << ": got " << r.grid[g].loss << ", expected " << want;
    }
    const std::size_t want_best = c.at("best_index");
    EXPECT_EQ(r.best_index, want_best) << "losses at the two points: " << r.grid[r.best_index].loss << " and "
                                       << r.grid[want_best].loss;
    const double scale_err = max_rel(r.scales, floats_of(c.at("scales")));
    EXPECT_LT(scale_err, 1e-5);
    std::printf("[ awq      ] %-24s best %2zu (llm-compressor %2zu) ratio %.4f duo %d; loss rel err %.2e, x_mean %.2e, "
                "scales %.2e\n",
                smooth.c_str(), r.best_index, want_best, r.grid[r.best_index].ratio, r.grid[r.best_index].duo ? 1 : 0,
                loss_err, x_err, scale_err);
    best_scales.push_back(r.scales);
  }

  // Fold in llm-compressor's order: balance layers first, then the previous op, mapping by mapping.
  const at::Tensor undefined;
  for (std::size_t m = 0; m < kMappings.size(); ++m) {
    std::vector<at::Tensor> balance;
    for (const auto& n : kMappings[m].second) balance.push_back(w.at(n));
    awq_fold_scales(best_scales[m], w.at(kMappings[m].first), undefined, balance, kMappings[m].first);
  }
  for (const char* n : {"input_layernorm", "post_attention_layernorm"}) {
    const double err = max_rel(w.at(n), floats_of(j.at("folded_norms").at(n)));
    EXPECT_LT(err, 1e-5) << n;
    std::printf("[ awq      ] folded %s rel err %.2e\n", n, err);
  }

  const std::int64_t stride = j.at("model").at("row_stride");
  for (const auto& [name, want] : j.at("final").items()) {
    SCOPED_TRACE(name);
    const AwqQuantized q = awq_quantize(w.at(name), o, name);
    const std::int64_t N = q.codes.size(0);
    const at::Tensor scales = floats_of(want.at("scales")).view({N, -1});
    const at::Tensor zeros = bytes_of(want.at("zeros")).view({N, -1});
    const double scale_err = max_rel(q.scales, scales);
    EXPECT_LT(scale_err, 1e-5);
    const double zeros_equal = (q.zeros.to(at::kByte) == zeros).to(at::kDouble).mean().item<double>();
    EXPECT_GE(zeros_equal, 0.99);
    const at::Tensor packed = bytes_of(want.at("codes_every_4th_row")).view({-1, q.codes.size(1) / 2});
    const at::Tensor rows = q.codes.slice(0, 0, N, stride);
    const at::Tensor want_codes = at::stack({packed.bitwise_and(15), packed.bitwise_right_shift(4)}, -1).view(rows.sizes());
    const double codes_equal = (rows == want_codes).to(at::kDouble).mean().item<double>();
    EXPECT_GE(codes_equal, 0.99);
    std::printf("[ awq      ] %-10s codes equal %.6f (%lld of %lld), zeros equal %.6f, scales rel err %.2e\n",
                name.c_str(), codes_equal, static_cast<long long>((rows == want_codes).sum().item<std::int64_t>()),
                static_cast<long long>(rows.numel()), zeros_equal, scale_err);
  }
}

// AutoAWQ 0.2.9's own search on the same block (its grid i / 20, its quantiser, all samples as one
// batch): the same losses and choices under reference = autoawq, then its clipping thresholds.
TEST(AwqSearch, FourLlamaMappingsAndClippingMatchAutoAwq) {
  const auto& cases = fixture().at("autoawq_0_2_9").at("cases");
  const auto w = make_block();  // the searches' weights; the clipping folds a copy
  const Forward batches = block_forward(w, make_inputs());
  Forward one;  // every calibration sample in one batch, as AutoAWQ runs them
  one.h = {at::cat(batches.h, 0)};
  one.attn = {at::cat(batches.attn, 0)};
  one.h2 = {at::cat(batches.h2, 0)};
  one.hidden = {at::cat(batches.hidden, 0)};
  AwqOptions o;
  o.reference = AwqReference::autoawq;
  const BlockSearch search = search_block(w, one, o);
  ASSERT_EQ(cases.size(), kMappings.size());
  for (std::size_t m = 0; m < kMappings.size(); ++m) {
    SCOPED_TRACE(kMappings[m].first);
    const auto& c = cases[m];
    const AwqSearchResult& r = search.results[m];
    ASSERT_EQ(r.grid.size(), c.at("losses").size());
    double loss_err = 0;
    for (std::size_t g = 0; g < r.grid.size(); ++g) {
      EXPECT_EQ(r.grid[g].ratio, c.at("ratios")[g].get<double>()) << g;
      const double want = c.at("losses")[g].get<double>();
      loss_err = std::max(loss_err, std::abs(r.grid[g].loss - want) / want);
      EXPECT_LT(std::abs(r.grid[g].loss - want) / want, 1e-4) << "grid point " << g << ": got " << r.grid[g].loss
                                                                << ", expected " << want;
    }
    const std::size_t want_best = c.at("best_index");
    EXPECT_EQ(r.best_index, want_best);
    const double scale_err = max_rel(r.scales, floats_of(c.at("scales")));
    EXPECT_LT(scale_err, 1e-5);
    std::printf("[ awq      ] AutoAWQ %-24s best %2zu (AutoAWQ %2zu) ratio %.2f; loss rel err %.2e, scales %.2e\n",
                kMappings[m].first.c_str(), r.best_index, want_best, r.grid[r.best_index].ratio, loss_err, scale_err);
  }

  // Then AutoAWQ's clipping: every mapping's scales folded, the balance layers' inputs divided by
  // them, thresholds searched for every linear but q/k.
  auto folded = make_block();
  std::map<std::string, at::Tensor> feats;
  const std::vector<const at::Tensor*> mapping_inputs = {&one.h[0], &one.attn[0], &one.h2[0], &one.hidden[0]};
  for (std::size_t m = 0; m < kMappings.size(); ++m) {
    const at::Tensor& s = search.results[m].scales;
    std::vector<at::Tensor> balance;
    for (const auto& n : kMappings[m].second) {
      balance.push_back(folded.at(n));
      feats[n] = *mapping_inputs[m] / s.view({1, -1});
    }
    awq_fold_scales(s, folded.at(kMappings[m].first), at::Tensor(), balance, kMappings[m].first);
  }
  const auto& clips = fixture().at("autoawq_0_2_9").at("clip_max_val");
  std::size_t clipped = 0;
  for (const auto& [name, w_folded] : folded) {
    if (w_folded.dim() != 2) continue;
    if (name == "generated") continue;
    if (awq_clip_skips(name)) {
      EXPECT_FALSE(clips.contains(name)) << name;
      continue;
    }
    SCOPED_TRACE(name);
    ASSERT_TRUE(clips.contains(name));
    const at::Tensor got = awq_search_clip(w_folded, feats.at(name), o, {}, name);
    const at::Tensor want = floats_of(clips.at(name)).view(got.sizes());
    // The folded weights differ from AutoAWQ's by float32 rounding (the scales do), so a threshold is
    // the same choice when it is within 1e-5 relative; a step is 5 % of max |w|.
    const at::Tensor rel = (got.to(at::kDouble) - want.to(at::kDouble)).abs() / want.to(at::kDouble);
    const double same = (rel < 1e-5).to(at::kDouble).mean().item<double>();
    EXPECT_GE(same, 0.97);  // AutoAWQ's own choices move by as much under 1e-7 noise (docs/calibrated.md)
    std::printf("[ awq      ] AutoAWQ clip %-10s same threshold %.6f of %lld groups, max rel err %.2e\n", name.c_str(),
                same, static_cast<long long>(got.numel()), rel.max().item<double>());
    ++clipped;
  }
  EXPECT_EQ(clipped, 5u);  // v, o, gate, up, down

  // The clip search alone on generated, bit-identical inputs: every threshold equal.
  const at::Tensor cw = gen(41, {256, 2 * K}, 1.0 / 16);
  const at::Tensor cx = gen(42, {BATCHES * B * T, 2 * K}) * gain(2 * K, {5, 66, 130, 301, 444}, 6.0);
  const at::Tensor got = awq_search_clip(cw, cx, o, {}, "generated");
  const at::Tensor want = floats_of(clips.at("generated")).view(got.sizes());
  const std::int64_t equal = (got == want).sum().item<std::int64_t>();
  EXPECT_EQ(equal, got.numel());
  std::printf("[ awq      ] AutoAWQ clip on generated inputs: %lld of %lld thresholds equal\n",
              static_cast<long long>(equal), static_cast<long long>(got.numel()));
}

// Folding keeps the full-precision block: every mapping's scales folded (norm gains, v_proj's and
// up_proj's rows, the balance columns), the block's output moves by float32 rounding only; folding
// the balance side alone (the previous op left as it was) moves it far. (A fold with both sides
// swapped, previous op × s and columns ÷ s, is an equivalent model too, so this test cannot see it:
// the fixture's folded norms and codes and FoldOntoALinearsLastRowsAndBias hold the direction.)
TEST(AwqSearch, FoldKeepsTheFullPrecisionBlock) {
  const auto original = make_block();
  const auto xs = make_inputs();
  const Forward before = block_forward(original, xs);
  auto folded = make_block();
  auto balance_only = make_block();
  const auto& mappings = kMappings;
  for (std::size_t m = 0; m < mappings.size(); ++m) {
    // scales between 1/e and e, in float64 as llm-compressor's duo points give them
    std::vector<at::Tensor> balance, balance2;
    for (const auto& n : mappings[m].second) balance.push_back(folded.at(n)), balance2.push_back(balance_only.at(n));
    const std::int64_t width = balance[0].size(1);
    const at::Tensor s = at::exp(gen(300 + m, {width}, 0.5).to(at::kDouble));
    awq_fold_scales(s, folded.at(mappings[m].first), at::Tensor(), balance, mappings[m].first);
    awq_fold_scales(s, at::empty({width}, at::kFloat), at::Tensor(), balance2, mappings[m].first);
  }
  const Forward after = block_forward(folded, xs);
  const Forward wrong = block_forward(balance_only, xs);
  double scale = 0, diff = 0, wrong_diff = 0;
  for (std::size_t b = 0; b < xs.size(); ++b) {
    scale = std::max(scale, before.out[b].abs().max().item<double>());
    diff = std::max(diff, (after.out[b] - before.out[b]).abs().max().item<double>());
    wrong_diff = std::max(wrong_diff, (wrong.out[b] - before.out[b]).abs().max().item<double>());
  }
  std::printf("[ awq      ] fold: output max |y| %.3f, max abs diff folded %.3e, balance side only %.3e\n", scale, diff,
              wrong_diff);
  EXPECT_LT(diff, 1e-5 * scale);
  EXPECT_GT(wrong_diff, 1e-2 * scale);
  EXPECT_FALSE(at::equal(folded.at("input_layernorm"), original.at("input_layernorm")));
}

// A linear before the balance layers with more rows than K (a fused qkv before o_proj): its last K
// rows and bias entries take ÷ s, the others stay.
TEST(AwqSearch, FoldOntoALinearsLastRowsAndBias) {
  const at::Tensor s = at::tensor({2.0, 4.0}, at::kDouble);
  at::Tensor prev = at::ones({3, 2}, at::kFloat), bias = at::ones({3}, at::kFloat);
  at::Tensor bal = at::ones({2, 2}, at::kFloat);
  awq_fold_scales(s, prev, bias, {bal});
  EXPECT_TRUE(at::equal(prev, at::tensor({1.0f, 1.0f, 0.5f, 0.5f, 0.25f, 0.25f}).view({3, 2})));
  EXPECT_TRUE(at::equal(bias, at::tensor({1.0f, 0.5f, 0.25f})));
  EXPECT_TRUE(at::equal(bal, at::tensor({2.0f, 4.0f, 2.0f, 4.0f}).view({2, 2})));
  at::Tensor norm = at::ones({3}, at::kFloat);
  expect_error([&] { awq_fold_scales(s, norm, at::Tensor(), {bal}, "ln"); }, {"AWQ fold ln", "[2]", "[3]"});
  expect_error([&] { awq_fold_scales(s, prev, at::Tensor(), {at::ones({2, 3})}, "ln"); },
               {"balance weight 0", "[N, 2]", "[2, 3]"});
}

TEST(AwqSearch, GridsOfBothReferences) {
  AwqOptions o;
  auto g = awq_grid(o);  // llm-compressor, duo on: (0, off), then i / 18 with duo
  ASSERT_EQ(g.size(), 20u);
  EXPECT_EQ(g[0].ratio, 0.0);
  EXPECT_FALSE(g[0].duo);
  EXPECT_EQ(g[1].ratio, 0.0);
  EXPECT_TRUE(g[1].duo);
  EXPECT_EQ(g[2].ratio, 1.0 / 18);
  EXPECT_EQ(g[19].ratio, 1.0);
  o.duo_scaling = AwqDuoScaling::off;
  g = awq_grid(o);
  ASSERT_EQ(g.size(), 20u);
  EXPECT_EQ(g[1].ratio, 1.0 / 19);
  EXPECT_EQ(g[19].ratio, 1.0);
  o.duo_scaling = AwqDuoScaling::both;
  g = awq_grid(o);
  ASSERT_EQ(g.size(), 20u);
  EXPECT_FALSE(g[2].duo);
  EXPECT_TRUE(g[3].duo);
  EXPECT_EQ(g[3].ratio, 1.0 / 9);
  o.reference = AwqReference::autoawq;
  expect_error([&] { awq_grid(o); }, {"duo_scaling both", "AutoAWQ"});
  o.duo_scaling = AwqDuoScaling::on;
  g = awq_grid(o);  // AutoAWQ: i / 20, all duo, no ratio 1
  ASSERT_EQ(g.size(), 20u);
  EXPECT_TRUE(g[0].duo);
  EXPECT_EQ(g[19].ratio, 0.95);
}

// One group by hand: compressed-tensors keeps 0 in range and rounds the zero point; AutoAWQ does not.
TEST(AwqSearch, QuantisersOfBothReferences) {
  const at::Tensor w = at::tensor({0.5f, 1.0f, 2.0f, 3.5f}).view({1, 4});
  AwqOptions o;
  o.group_size = 4;
  AwqQuantized ct = awq_quantize(w, o);
  // lo = 0, hi = 3.5: s = 3.5 / 15, z = round(−8 − 0) = −8 → unsigned 0
  EXPECT_FLOAT_EQ(ct.scales.item<float>(), 3.5f / 15);
  EXPECT_EQ(ct.zeros.item<float>(), 0.0f);
  EXPECT_TRUE(at::equal(ct.codes, at::tensor({2, 4, 9, 15}, at::kByte).view({1, 4})))
      << ct.codes;  // 0.5 / s = 2.14, 1 / s = 4.29, 2 / s = 8.57, 15
  o.reference = AwqReference::autoawq;
  AwqQuantized aa = awq_quantize(w, o);
  // lo = 0.5, hi = 3.5: s = 0.2, z = −round(2.5) = −2 → clamped to 0
  EXPECT_FLOAT_EQ(aa.scales.item<float>(), 3.0f / 15);
  EXPECT_EQ(aa.zeros.item<float>(), 0.0f);
  EXPECT_TRUE(at::equal(aa.codes, at::tensor({2, 5, 10, 15}, at::kByte).view({1, 4}))) << aa.codes;
  // AutoAWQ's range is the group's own: it needs whole groups.
  AwqOptions autoawq;
  autoawq.reference = AwqReference::autoawq;
  expect_error([&] { awq_quantize(at::ones({2, 6}), autoawq, "o_proj"); },
               {"AWQ quantise o_proj", "6", "group_size 128", "whole groups"});
  // llm-compressor's range holds 0, so a short last group (or a width below the group) is the group
  // padded with zeros: K = 172 in groups of 128 quantises as the first 172 columns of K = 256.
  at::manual_seed(3);
  const at::Tensor ragged = at::randn({5, 172});
  AwqOptions g128;
  const AwqQuantized r = awq_quantize(ragged, g128, "down");
  const AwqQuantized padded = awq_quantize(at::constant_pad_nd(ragged, {0, 84}), g128, "down");
  EXPECT_EQ(r.scales.sizes(), (std::vector<std::int64_t>{5, 2}));
  EXPECT_TRUE(at::equal(r.codes, padded.codes.narrow(1, 0, 172)));
  EXPECT_TRUE(at::equal(r.scales, padded.scales));
  EXPECT_TRUE(at::equal(r.dequantized, padded.dequantized.narrow(1, 0, 172)));
  AwqOptions channel;
  channel.group_size = 0;
  const at::Tensor narrow = at::randn({3, 6});
  EXPECT_TRUE(at::equal(awq_quantize(narrow, g128).codes, awq_quantize(narrow, channel).codes));
  EXPECT_TRUE(at::equal(awq_weight_mean({ragged}, g128),
                        awq_weight_mean({at::constant_pad_nd(ragged, {0, 84})}, g128).narrow(0, 0, 172)));
}

TEST(AwqSearch, ClipSkipsQueryAndKeyAndClamps) {
  EXPECT_TRUE(awq_clip_skips("self_attn.q_proj"));
  EXPECT_TRUE(awq_clip_skips("attn.Wqkv"));
  EXPECT_TRUE(awq_clip_skips("attention.query_key_value"));
  EXPECT_FALSE(awq_clip_skips("self_attn.v_proj"));
  EXPECT_FALSE(awq_clip_skips("mlp.down_proj"));
  at::Tensor w = at::tensor({-3.0f, 1.0f, 2.0f, 5.0f}).view({1, 4});
  awq_apply_clip(w, at::tensor({2.0f, 4.0f}).view({1, 2}));
  EXPECT_TRUE(at::equal(w, at::tensor({-2.0f, 1.0f, 2.0f, 4.0f}).view({1, 4})));
  expect_error([&] { awq_apply_clip(w, at::ones({1, 3}), "o_proj"); }, {"AWQ clip o_proj", "[1, 3]", "[1, 4]"});
  expect_error([&] { awq_search_clip(at::ones({2, 128}), at::ones({3, 64}), AwqOptions{}, {}, "o_proj"); },
               {"AWQ clip o_proj", "[..., 128]", "[3, 64]"});
}

TEST(AwqSearch, RefusesMismatchedInputs) {
  AwqMappingInputs in;
  in.name = "layers.0.qkv";
  in.balance_weights = {at::ones({4, 128}), at::ones({4, 64})};
  in.x_mean = at::ones({128});
  const std::vector<at::Tensor> batches = {at::ones({2, 128})};
  expect_error([&] { awq_search_scales_linear(in, batches); }, {"AWQ layers.0.qkv", "balance weight 1", "[N, 128]", "[4, 64]"});
  in.balance_weights = {at::ones({4, 128})};
  in.x_mean = at::ones({64});
  expect_error([&] { awq_search_scales_linear(in, batches); }, {"x_mean must be [128]", "[64]"});
  in.x_mean = at::ones({128});
  expect_error([&] { awq_search_scales_linear(in, {at::ones({2, 64})}); }, {"batch 0", "[..., 128]", "[2, 64]"});
  AwqOptions o;
  o.n_grid = 2;
  expect_error([&] { awq_search_scales_linear(in, batches, o); }, {"n_grid must be at least 3", "found 2"});
  const AwqParentForward nan_parent = [](const std::vector<at::Tensor>&) {
    return std::vector<at::Tensor>{at::full({1}, std::nan(""))};
  };
  expect_error([&] { awq_search_scales(in, nan_parent); }, {"no grid point gave a finite loss"});
  expect_error([] { AwqActivationMean(8).mean(); }, {"no calibration token"});
}

}  // namespace
}  // namespace qeval
