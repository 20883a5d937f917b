// Quantised key/value caches (issue 62, quant/kv_cache.h): each element format's rows against its
// definition (int8 and int4 against quant/quantize.h's reference maths, fp8-e4m3 against the
// float64 reference rounding of quant/formats/minifloat.h), Q8_0 / Q4_0 rows against llama.cpp's own
// Python package `gguf` (tests/oracle/kv_cache_oracle.py; skipped, visibly, without it), the
// kept first position, the error report, whole models (GQA + RoPE, GPT-2's fused qkv) and the
// refusals: kv_cache on an attention-free model, q8_0 / q4_0 on a head_dim that 32 does not
// divide, and bad kv_cache keys.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "common/error.h"
#include "common/files.h"
#include "eval/schemes.h"
#include "loaders/checkpoints/checkpoint.h"
#include "quant/kv_cache.h"
#include "quant/kv_cache_tensor.h"
#include "quant/formats/minifloat.h"
#include "quant/quantize.h"
#include "quant/rewrite.h"
#include "quant/schemes/presets.h"
#include "quant/schemes/scheme_json.h"
#include "tests/loaders/tokenizers/tokenizer_test_util.h"
#include "tests/quant/quant_models.h"
#include "tests/support/test_data.h"
#include "tests/support/test_models.h"

namespace qeval {
namespace {

// Expects `fn` to throw qeval::Error whose message contains every one of `parts`.
template <typename Fn>
void expect_error(Fn fn, std::initializer_list<std::string> parts) {
  EXPECT_TRUE(test::throws_with(fn, parts));
}

KvCacheSpec kv(KvCacheFormat f, std::int64_t keep = 0, std::int64_t group = 32) {
  KvCacheSpec s;
  s.format = f, s.keep_first = keep, s.group_size = group;
  return s;
}

// Cache-like rows: Gaussian values with a few large channels (as K has), some rows scaled far
// up or down, all-zero rows and constant rows.
at::Tensor cache_rows(std::int64_t rows, std::int64_t hd, std::uint64_t seed) {
  at::manual_seed(seed);
  at::Tensor x = at::randn({rows, hd});
  x.narrow(1, 3, 1).mul_(12.0);
  x.narrow(0, 0, rows / 8).mul_(1e-3);
  x.narrow(0, rows / 8, rows / 8).mul_(300.0);
  x[5].zero_();
  x[6].fill_(-2.5);
  x[7].fill_(0.75);
  return x;
}

void expect_bits_equal(const at::Tensor& got, const at::Tensor& want, const char* what) {
  ASSERT_EQ(got.sizes(), want.sizes()) << what;
  const at::Tensor gc = got.contiguous(), wc = want.contiguous();
  const float* g = gc.data_ptr<float>();
  const float* w = wc.data_ptr<float>();
  std::int64_t bad = 0, first = -1;
  for (std::int64_t i = 0; i < got.numel(); ++i)
    if (std::memcmp(g + i, w + i, 4) != 0 && ++bad == 1) first = i;
  EXPECT_EQ(bad, 0) << what << ": " << bad << " of " << got.numel() << " differ; first at " << first << ": got "
                    << (first >= 0 ? g[first] : 0) << ", expected " << (first >= 0 ? w[first] : 0);
}

TEST(KvCache, Int8RowsEqualTheAbsmaxDefinition) {
  const at::Tensor x = cache_rows(4096, 64, 1);
  const at::Tensor s = int8_absmax_scale(x, {1});
  expect_bits_equal(kv_round_trip_rows(x, kv(KvCacheFormat::int8)), int8_dequantize(int8_quantize(x, s), s), "int8");
  // Ties: x / s exactly k + 0.5 rounds to the even k.
  at::Tensor ties = at::tensor({127.0f, 0.5f, 1.5f, 2.5f, -0.5f, -3.5f}, at::kFloat).view({1, 6});
  const at::Tensor y = kv_round_trip_rows(ties, kv(KvCacheFormat::int8));
  EXPECT_EQ(y[0][1].item<float>(), 0.0f);
  EXPECT_EQ(y[0][2].item<float>(), 2.0f);
  EXPECT_EQ(y[0][3].item<float>(), 2.0f);
  EXPECT_EQ(y[0][5].item<float>(), -4.0f);
}

TEST(KvCache, Int4GroupsEqualTheZeroPointDefinitionWithAShorterLastGroup) {
  for (const std::int64_t hd : {80, 20, 64}) {  // groups 32+32+16; one group of 20; two of 32
    SCOPED_TRACE(hd);
    const at::Tensor x = cache_rows(2048, hd, 2);
    std::vector<at::Tensor> parts;
    for (std::int64_t g0 = 0; g0 < hd; g0 += 32) {
      at::Tensor g = x.narrow(1, g0, std::min<std::int64_t>(32, hd - g0));
      const ZeroPointParams p = zeropoint4_params(g, {1});
      parts.push_back(zeropoint4_dequantize(zeropoint4_quantize(g, p), p));
    }
    expect_bits_equal(kv_round_trip_rows(x, kv(KvCacheFormat::int4)), at::cat(parts, 1), "int4");
  }
  // Constant rows are exact.
  const at::Tensor c = at::full({1, 40}, -2.5f);
  expect_bits_equal(kv_round_trip_rows(c, kv(KvCacheFormat::int4)), c, "int4 constant");
}

TEST(KvCache, Fp8RowsEqualTheReferenceRounding) {
  const at::Tensor x = cache_rows(4096, 64, 3);
  at::Tensor want = at::empty_like(x);
  const float* xs = x.data_ptr<float>();
  float* ws = want.data_ptr<float>();
  for (std::int64_t r = 0; r < x.size(0); ++r) {
    float amax = 0;
    for (std::int64_t i = 0; i < 64; ++i) amax = std::max(amax, std::fabs(xs[r * 64 + i]));
    const float s = amax == 0 ? 1.0f : amax / 448.0f;
    for (std::int64_t i = 0; i < 64; ++i) {
      const float scaled = xs[r * 64 + i] / s;
      ws[r * 64 + i] = static_cast<float>(round_to_element_reference(scaled, ElementType::e4m3)) * s;
    }
  }
  expect_bits_equal(kv_round_trip_rows(x, kv(KvCacheFormat::fp8_e4m3)), want, "fp8-e4m3");
}

// Q8_0 / Q4_0 rows with ties: blocks whose scale d is a power of two (so x·(1/d) is exact) and
// whose values sit exactly halfway between codes; Q4_0 blocks whose largest magnitude appears
// with both signs (the first one sets d's sign); zero blocks; and cache-like rows.
at::Tensor ggml_oracle_rows(std::int64_t hd, std::int64_t* ties) {
  std::mt19937 rng(62);
  const std::int64_t tie_rows = 1024;
  at::Tensor x = at::cat({at::empty({tie_rows, hd}), cache_rows(2048, hd, 4)}, 0);
  float* p = x.data_ptr<float>();
  *ties = 0;
  for (std::int64_t r = 0; r < tie_rows; ++r) {
    float* row = p + r * hd;
    const float d = std::ldexp(1.0f, static_cast<int>(rng() % 9) - 4);  // 2^-4 .. 2^4
    for (std::int64_t b = 0; b < hd; b += 32) {
      for (int j = 0; j < 32; ++j) {
        const int k = static_cast<int>(rng() % 15) - 7;  // -7..7
        row[b + j] = (static_cast<float>(k) + 0.5f) * d;  // halfway between codes, for both types
        ++*ties;
      }
      if (r % 2 == 0) {  // Q8_0: amax 127·d, so 1/d is exact
        row[b] = 127.0f * d;
      } else {  // Q4_0: m = -8·d (or +8·d first, then -8·d: the first wins)
        row[b] = (r % 4 == 1 ? -8.0f : 8.0f) * d;
        row[b + 1] = (r % 4 == 1 ? 8.0f : -8.0f) * d;
      }
      *ties -= 2;
    }
  }
  x.narrow(0, tie_rows + 9, 1).zero_();
  return x;
}

// Values of x that lie exactly halfway between two codes of the type, as ggml computes x·(1/d):
// Q8_0 rounds them away from zero, Q4_0 up (trunc(x·(1/d) + 8.5)).
std::int64_t tie_values(const at::Tensor& x, KvCacheFormat f) {
  const float* p = x.data_ptr<float>();
  std::int64_t ties = 0;
  for (std::int64_t b = 0; b < x.numel(); b += 32) {
    float amax = 0, m = 0;
    for (int j = 0; j < 32; ++j)
      if (std::fabs(p[b + j]) > amax) amax = std::fabs(p[b + j]), m = p[b + j];
    const float d = f == KvCacheFormat::q8_0 ? amax / 127.0f : m / -8.0f;
    if (d == 0) continue;
    const float id = 1.0f / d;
    for (int j = 0; j < 32; ++j) {
      const float t = p[b + j] * id;
      ties += std::fabs(t - std::trunc(t)) == 0.5f;
    }
  }
  return ties;
}

TEST(KvCacheOracle, Q8_0AndQ4_0RowsEqualTheGgufPackage) {
  if (!(test::python_has("gguf") && test::python_has("numpy")))
    GTEST_SKIP() << "python3 with gguf and numpy is not available (pip install gguf): Q8_0 / Q4_0 cache oracle not run";
  test::TempDir dir;
  for (const std::int64_t hd : {64, 128}) {
    std::int64_t constructed = 0;
    const at::Tensor x = ggml_oracle_rows(hd, &constructed);
    for (const auto& [name, format] : {std::pair{"q8_0", KvCacheFormat::q8_0}, std::pair{"q4_0", KvCacheFormat::q4_0}}) {
      SCOPED_TRACE(std::string(name) + " hd " + std::to_string(hd));
      test::write_bytes(dir / (std::string(name) + ".f32"),
                        std::string(reinterpret_cast<const char*>(x.data_ptr<float>()), x.numel() * 4));
      const std::string command = "python3 '" + test::oracle_script("kv_cache_oracle.py").string() + "' '" +
                                  dir.path().string() + "' " + name + " " + std::to_string(hd) + " 2>&1";
      ASSERT_EQ(std::system(command.c_str()), 0) << "oracle failed: " << command;
      const std::string bytes = read_file(dir / (std::string(name) + ".gguf-f32"));
      ASSERT_EQ(static_cast<std::int64_t>(bytes.size()), x.numel() * 4);
      at::Tensor want = at::empty_like(x);
      std::memcpy(want.data_ptr<float>(), bytes.data(), bytes.size());
      EXPECT_GE(x.numel(), 100000);
      expect_bits_equal(kv_round_trip_rows(x, kv(format)), want, name);
      const std::int64_t type_ties = tie_values(x, format);
      EXPECT_GE(type_ties, 10000);
      std::printf("[kv oracle] %s hd %lld: %lld values, %lld blocks of 32, %lld of them exact ties\n", name,
                  static_cast<long long>(hd), static_cast<long long>(x.numel()), static_cast<long long>(x.numel() / 32),
                  static_cast<long long>(type_ties));
    }
  }
}

TEST(KvCache, KeepsTheFirstPositionsAndReportsTheErrorApart) {
  at::manual_seed(5);
  const std::int64_t B = 2, H = 3, L = 10, hd = 64;
  at::Tensor k = at::randn({B, H, L, hd}), v = at::randn({B, H, L, hd});
  k.select(2, 0).mul_(20.0);  // a sink-like first key
  const at::Tensor k0 = k.clone(), v0 = v.clone();
  QuantizedKvCache keep1(kv(KvCacheFormat::q4_0, 1)), plain(kv(KvCacheFormat::q4_0));
  at::Tensor k1 = k, v1 = v, k2 = k, v2 = v;
  keep1.apply(3, k1, v1);
  plain.apply(3, k2, v2);
  EXPECT_TRUE(at::equal(k, k0)) << "the input tensors are not written";
  expect_bits_equal(k1.select(2, 0), k0.select(2, 0), "kept K");
  expect_bits_equal(v1.select(2, 0), v0.select(2, 0), "kept V");
  expect_bits_equal(k1.narrow(2, 1, L - 1), k2.narrow(2, 1, L - 1), "K after the kept position");
  expect_bits_equal(k2, kv_round_trip_rows(k0, kv(KvCacheFormat::q4_0)), "K rows");
  const nlohmann::json a = keep1.error_report(), b = plain.error_report();
  ASSERT_EQ(a.at("layers").size(), 1u);
  EXPECT_EQ(a.at("layers")[0].at("layer"), 3);
  EXPECT_EQ(a.at("layers")[0].at("windows"), B);
  EXPECT_EQ(a.at("layers")[0].at("k_first").get<double>(), 0.0);
  EXPECT_GT(b.at("layers")[0].at("k_first").get<double>(), 0.0);
  EXPECT_EQ(a.at("layers")[0].at("k_rest"), b.at("layers")[0].at("k_rest"));
  // The definition: ‖K − K̂‖ / ‖K‖ over position 0 of every head and window.
  const double want = ((k2.select(2, 0) - k0.select(2, 0)).to(at::kDouble).norm() / k0.select(2, 0).to(at::kDouble).norm())
                          .item<double>();
  EXPECT_NEAR(b.at("layers")[0].at("k_first").get<double>(), want, 1e-12);
  plain.reset_errors();
  EXPECT_TRUE(plain.error_report().at("layers").empty());
}

TEST(KvCache, WholeModelsChangeAndKeptFirstPositionEqualsFullThere) {
  // GQA + RoPE (head_dim 32, so every format runs) and GPT-2's fused qkv (head_dim 16).
  const Transformer llama = test::random_transformer(7, false, 96, 128, 2);
  const Transformer gpt2 = test::random_transformer(8, true, 96, 64, 2);
  at::manual_seed(9);
  const at::Tensor tokens = at::randint(0, 96, {2, 24}, at::kLong);
  for (const auto* m : {&llama, &gpt2}) {
    const at::Tensor full = m->forward(tokens);
    for (auto f : {KvCacheFormat::int8, KvCacheFormat::fp8_e4m3, KvCacheFormat::q8_0, KvCacheFormat::q4_0,
                   KvCacheFormat::int4}) {
      if (m == &gpt2 && (f == KvCacheFormat::q8_0 || f == KvCacheFormat::q4_0)) continue;
      SCOPED_TRACE(to_string(f));
      SchemeSpec spec;
      spec.name = "kv";
      spec.kv_cache = kv(f);
      QuantizedModel q = quantize_model(*m, spec);
      EXPECT_EQ(q.report.at("quantized_layers"), 0);
      EXPECT_EQ(q.report.at("execution_path"), "kv cache only (every linear in full precision)");
      const at::Tensor got = q.model.forward(tokens);
      EXPECT_FALSE(at::equal(got, full));
      EXPECT_TRUE(at::isfinite(got).all().item<bool>());
      EXPECT_EQ(q.report.at("scheme").at("kv_cache").at("format"), to_string(f));
      // Position 0 reads only its own K and V: kept, its logits are full precision's bit for bit.
      spec.kv_cache.keep_first = 1;
      const at::Tensor kept = quantize_model(*m, spec).model.forward(tokens);
      expect_bits_equal(kept.select(1, 0), full.select(1, 0), "position 0 with keep first 1");
      EXPECT_FALSE(at::equal(kept.select(1, 5), full.select(1, 5)));
      // Every position kept: full precision bit for bit.
      spec.kv_cache.keep_first = 1000;
      expect_bits_equal(quantize_model(*m, spec).model.forward(tokens), full, "keep every position");
    }
  }
}

TEST(KvCache, CombinesWithALinearSpec) {
  const Transformer m = test::random_transformer(10, false, 96, 128, 2);
  at::manual_seed(11);
  const at::Tensor tokens = at::randint(0, 96, {2, 16}, at::kLong);
  SchemeSpec w8a8 = resolve_scheme("int8-vectorwise"), both = resolve_scheme("w8a8-kv8");
  const at::Tensor a = quantize_model(m, w8a8).model.forward(tokens);
  QuantizedModel q = quantize_model(m, both);
  EXPECT_GT(q.report.at("quantized_layers").get<int>(), 0);
  EXPECT_TRUE(q.report.contains("kv_cache_error"));
  EXPECT_FALSE(at::equal(q.model.forward(tokens), a));
  EXPECT_TRUE(q.report.at("kv_cache_error").at("layers").empty()) << "quantize_model's report is written before any window";
}

TEST(KvCache, EvaluatorTreatsAKvOnlySchemeAsChangingEveryAttentionLayer) {
  const Transformer m = test::random_transformer(12, false, 96, 128, 3);
  SchemeOptions options;
  options.stats_for = StatsFor::none;
  PreparedSchemes p = make_schemes(m.config(), {"full", "kv-q4_0"}, options);
  ASSERT_EQ(p.schemes.size(), 2u);
  for (std::int64_t l = 0; l < 3; ++l) EXPECT_TRUE(p.schemes[1].rewrites_layer(l)) << l;
  EXPECT_FALSE(p.schemes[1].rewrite_head);
  const Block b = p.schemes[1].rewrite_block(m.blocks()[1]);
  EXPECT_NE(b.kv_cache(), nullptr);
  EXPECT_EQ(p.schemes[1].description.at("execution"), "kv cache only (every linear in full precision)");
}

TEST(KvCache, RefusesAttentionFreeModelsAndHeadDimsThatQ4_0CannotBlock) {
  LoadedCheckpoint mamba = load_checkpoint(test::repo_path("tests/model/fixtures/tiny-mamba-hf"));
  const Transformer mm(mamba.config, mamba.weights, "tiny-mamba-hf");
  expect_error([&] { quantize_model(mm, resolve_scheme("kv-int8")); },
               {"scheme kv-int8", "kv_cache", "model 'mamba", "has none"});
  expect_error([&] { make_schemes(mamba.config, {"full", "kv-q8_0"}, SchemeOptions{}); }, {"kv-q8_0", "kv_cache", "mamba"});
  // stories260K: head_dim 8.
  const Transformer stories = test::load_data_model("models/stories260K/stories260K.bin");
  expect_error([&] { quantize_model(stories, resolve_scheme("kv-q4_0")); },
               {"kv_cache.format q4_0", "layer 0", "head_dim 8", "multiple of 32"});
  expect_error([&] { make_schemes(stories.config(), {"full", "kv-q8_0"}, SchemeOptions{}); }, {"layer 0", "head_dim 8"});
  // Every placement runs a cache (another dtype or a GPU through the tensor path).
  SchemeOptions fp64;
  fp64.placement.dtype = at::kDouble;
  EXPECT_NO_THROW(make_schemes(stories.config(), {"full", "kv-int8"}, fp64));
  // int8 / fp8 / int4 run on any head_dim.
  EXPECT_NO_THROW(quantize_model(stories, resolve_scheme("kv-int4")));
  // The rotation needs head_dim % 64 == 0, as llama.cpp's does.
  SchemeSpec rotated = resolve_scheme("kv-int4");
  rotated.kv_cache.rotation = KvCacheRotation::hadamard;
  expect_error([&] { quantize_model(stories, rotated); }, {"kv_cache.rotation hadamard", "head_dim 8", "multiple of 64"});
}

// The Walsh-Hadamard blocks: the fast transform equals the matrix ggml_gen_hadamard builds
// (Sylvester's order, entries ±1/√n), applied twice gives the values back, and llama.cpp's block
// sizes (K: the largest power of two from 64 dividing head_dim; V: 64).
TEST(KvCacheRotation, FastTransformEqualsGgmlsMatrixAndIsItsOwnInverse) {
  for (const std::int64_t n : {64, 128, 256}) {
    // ggml_gen_hadamard, transcribed: H[0][0] = 1/sqrtf(n), then the Sylvester doubling.
    std::vector<float> h(static_cast<std::size_t>(n * n));
    h[0] = 1.0f / std::sqrt(static_cast<float>(n));
    for (std::int64_t s = 1; s < n; s *= 2)
      for (std::int64_t i = 0; i < s; ++i)
        for (std::int64_t j = 0; j < s; ++j) {
          const float val = h[static_cast<std::size_t>(i * n + j)];
          h[static_cast<std::size_t>((i + s) * n + j)] = val;
          h[static_cast<std::size_t>(i * n + j + s)] = val;
          h[static_cast<std::size_t>((i + s) * n + j + s)] = -val;
        }
    const at::Tensor H = at::from_blob(h.data(), {n, n}, at::kFloat).to(at::kDouble);
    at::manual_seed(n);
    at::Tensor x = at::randn({3, 2 * n});  // two blocks a row
    at::Tensor fast = x.clone();
    for (std::int64_t r = 0; r < 3; ++r) hadamard_blocks(fast[r].data_ptr<float>(), 2 * n, n);
    const at::Tensor want = at::matmul(x.to(at::kDouble).reshape({6, n}), H.t()).reshape({3, 2 * n});
    EXPECT_TRUE(at::allclose(fast.to(at::kDouble), want, 1e-6, 1e-6)) << "n " << n;
    at::Tensor back = fast.clone();
    for (std::int64_t r = 0; r < 3; ++r) hadamard_blocks(back[r].data_ptr<float>(), 2 * n, n);
    EXPECT_TRUE(at::allclose(back, x, 1e-5, 1e-5)) << "n " << n;
  }
  EXPECT_EQ(kv_rotation_block(64, true), 64);
  EXPECT_EQ(kv_rotation_block(128, true), 128);
  EXPECT_EQ(kv_rotation_block(192, true), 64);
  EXPECT_EQ(kv_rotation_block(256, true), 256);
  EXPECT_EQ(kv_rotation_block(256, false), 64);
  expect_error([] { kv_rotation_block(96, true); }, {"head_dim 96", "multiple of 64"});
}

// A rotated q4_0 row is H · Q(H · x): the scores q · k̂ are llama.cpp's (H q) · Q(H k), and on rows
// with an outlier channel (as K has) the rotation spreads it over the block, so the error is far
// smaller than the unrotated cache's.
TEST(KvCacheRotation, RotatedRowsAreTheRotatedQuantisationAndSpreadOutliers) {
  const std::int64_t hd = 128;
  const at::Tensor x = cache_rows(256, hd, 7).narrow(0, 32, 192).contiguous();  // the unscaled rows
  KvCacheSpec plain = kv(KvCacheFormat::q4_0), rotated = plain;
  rotated.rotation = KvCacheRotation::hadamard;
  const at::Tensor y = kv_round_trip_rows(x, rotated, /*is_key=*/true);
  // The definition, spelled out: rotate, quantise unrotated rows, rotate back.
  at::Tensor hx = x.clone();
  for (std::int64_t r = 0; r < hx.size(0); ++r) hadamard_blocks(hx[r].data_ptr<float>(), hd, 128);
  at::Tensor want = kv_round_trip_rows(hx, plain);
  for (std::int64_t r = 0; r < want.size(0); ++r) hadamard_blocks(want[r].data_ptr<float>(), hd, 128);
  expect_bits_equal(y, want, "rotated q4_0 rows");
  const double err_rot = (y - x).norm().item<double>() / x.norm().item<double>();
  const double err_plain = (kv_round_trip_rows(x, plain) - x).norm().item<double>() / x.norm().item<double>();
  EXPECT_LT(err_rot, 0.7 * err_plain) << "rotated " << err_rot << ", plain " << err_plain;
  // V's blocks are 64: a different result from K's 128 on the same rows.
  EXPECT_FALSE(at::equal(kv_round_trip_rows(x, rotated, /*is_key=*/false), y));
}

// Rows that probe every rounding rule of the tensor path: cache-like rows, the ggml tie rows,
// rows whose scale is 1 with values on midpoints (int8 and int4 ties: x / s = k + 0.5; E4M3 ties
// between grid points at 448 = amax), float32 subnormal rows, rows of −0 and of mixed ±0.
at::Tensor tensor_path_rows(std::int64_t hd) {
  std::int64_t unused = 0;
  at::Tensor x = ggml_oracle_rows(hd, &unused);
  std::mt19937 rng(66);
  const std::int64_t extra = 512;
  at::Tensor more = at::empty({extra, hd});
  float* p = more.data_ptr<float>();
  const float e4m3_max = element_format(ElementType::e4m3).max_finite;
  for (std::int64_t r = 0; r < extra; ++r) {
    float* row = p + r * hd;
    for (std::int64_t i = 0; i < hd; ++i) {
      switch (r % 4) {
        case 0:  // int8: amax 127, so s = 1 and every k + 0.5 is a tie
          row[i] = static_cast<float>(static_cast<int>(rng() % 253) - 126) + 0.5f;
          break;
        case 1: {  // E4M3: amax 448 (s = 1); midpoints of two neighbouring grid values (codes 0..126)
          const auto code = static_cast<std::uint8_t>(rng() % 126);
          const float a = element_value(code, ElementType::e4m3),
                      b = element_value(static_cast<std::uint8_t>(code + 1), ElementType::e4m3);
          row[i] = (rng() % 2 ? -1.0f : 1.0f) * (a + b) / 2;
          break;
        }
        case 2:  // int4 groups from 0 to 15 (s = 1, z = 0): k + 0.5 ties
          row[i] = static_cast<float>(rng() % 15) + 0.5f;
          break;
        default:  // float32 subnormals
          row[i] = std::ldexp(static_cast<float>(static_cast<int>(rng() % 2001) - 1000), -140);
      }
    }
    if (r % 4 == 0) row[0] = 127.0f;
    if (r % 4 == 1) row[0] = e4m3_max;
    if (r % 4 == 2)
      for (std::int64_t g = 0; g < hd; g += 32) row[g] = 0.0f, row[std::min(g + 1, hd - 1)] = 15.0f;
  }
  more[3].fill_(-0.0f);
  for (std::int64_t i = 0; i < hd; i += 2) more[7][i] = -0.0f, more[7][i + 1] = 0.0f;
  return at::cat({x, more}, 0);
}

// The tensor path (a GPU's, or another dtype's) equals the row kernels bit for bit on the CPU.
TEST(KvCacheTensorPath, EqualsTheRowKernelsBitForBit) {
  for (const std::int64_t hd : {64, 128, 80}) {
    const at::Tensor x = tensor_path_rows(hd);
    ASSERT_GE(x.numel(), 100000);
    for (auto f : {KvCacheFormat::int8, KvCacheFormat::fp8_e4m3, KvCacheFormat::q8_0, KvCacheFormat::q4_0,
                   KvCacheFormat::int4}) {
      if (hd % 32 != 0 && (f == KvCacheFormat::q8_0 || f == KvCacheFormat::q4_0)) continue;
      for (const bool rotated : {false, true}) {
        if (rotated && hd % 64 != 0) continue;
        for (const bool is_key : {true, false}) {
          KvCacheSpec spec = kv(f);
          if (rotated) spec.rotation = KvCacheRotation::hadamard;
          const std::string what = to_string(f) + " hd " + std::to_string(hd) + (rotated ? " rotated" : "") +
                                   (is_key ? " K" : " V");
          expect_bits_equal(kv_round_trip_tensor(x, spec, is_key), kv_round_trip_rows(x, spec, is_key), what.c_str());
        }
      }
    }
  }
  // int4 with groups of 16 and of 48 (a shorter last group).
  const at::Tensor x = tensor_path_rows(80);
  for (const std::int64_t g : {16, 48})
    expect_bits_equal(kv_round_trip_tensor(x, kv(KvCacheFormat::int4, 0, g), true),
                      kv_round_trip_rows(x, kv(KvCacheFormat::int4, 0, g), true), "int4 other groups");
}

// A cache in float64 (or on a GPU) goes through the tensor path: its values are the float32 rows'
// (K and V here are float32 values held in float64), its kept positions unchanged, its errors the
// float32 path's.
TEST(KvCacheTensorPath, QuantizedCacheOnAnotherDtypeMatchesTheFloat32Cache) {
  at::manual_seed(11);
  const std::int64_t B = 2, H = 2, L = 12, hd = 64;
  at::Tensor k = at::randn({B, H, L, hd}), v = at::randn({B, H, L, hd});
  k.select(2, 0).mul_(20.0);
  for (auto f : {KvCacheFormat::q4_0, KvCacheFormat::int8, KvCacheFormat::fp8_e4m3}) {
    SCOPED_TRACE(to_string(f));
    QuantizedKvCache float_cache(kv(f, 1)), double_cache(kv(f, 1));
    at::Tensor kf = k, vf = v, kd = k.to(at::kDouble), vd = v.to(at::kDouble);
    float_cache.apply(2, kf, vf);
    double_cache.apply(2, kd, vd);
    ASSERT_EQ(kd.scalar_type(), at::kDouble);
    expect_bits_equal(kd.to(at::kFloat), kf, "K");
    expect_bits_equal(vd.to(at::kFloat), vf, "V");
    const nlohmann::json a = float_cache.error_report().at("layers")[0], b = double_cache.error_report().at("layers")[0];
    EXPECT_EQ(b.at("k_first").get<double>(), 0.0);
    for (const char* key : {"k_rest", "v_rest"}) {
      EXPECT_GT(a.at(key).get<double>(), 0.0) << key;
      EXPECT_NEAR(b.at(key).get<double>(), a.at(key).get<double>(), 1e-12) << key;
    }
  }
  // bfloat16: the float32 rounding of the bfloat16 values, cast back.
  at::Tensor kb = k.to(at::kBFloat16), vb = v.to(at::kBFloat16);
  const at::Tensor k32 = kb.to(at::kFloat);
  QuantizedKvCache(kv(KvCacheFormat::q8_0)).apply(0, kb, vb);
  EXPECT_EQ(kb.scalar_type(), at::kBFloat16);
  expect_bits_equal(kb.to(at::kFloat), kv_round_trip_rows(k32, kv(KvCacheFormat::q8_0)).to(at::kBFloat16).to(at::kFloat),
                    "bfloat16 K");
}

TEST(KvCache, BadKvCacheKeysAreRefusedNamingTheKey) {
  auto parse = [](const char* text) { return [text] { scheme_from_json(nlohmann::json::parse(text), "spec.json"); }; };
  expect_error(parse(R"({"kv_cache": {"format": "q3_k"}})"),
               {"spec.json", "kv_cache.format", "q3_k", "int8, fp8-e4m3, q8_0, q4_0, int4"});
  expect_error(parse(R"({"kv_cache": {"format": "int4", "group_size": 0}})"), {"spec.json", "kv_cache.group_size", "0"});
  expect_error(parse(R"({"kv_cache": {"format": "int4", "group_size": -3}})"), {"kv_cache.group_size", "-3"});
  expect_error(parse(R"({"kv_cache": {"format": "q4_0", "group_size": 64}})"), {"kv_cache.group_size", "int4 only"});
  expect_error(parse(R"({"kv_cache": {"format": "q8_0", "keep_tokens": {"first": -1}}})"),
               {"kv_cache.keep_tokens.first", "-1"});
  expect_error(parse(R"({"kv_cache": {"format": "q8_0", "keep_tokens": {"top_norm": 1}}})"), {"kv_cache.keep_tokens"});
  expect_error(parse(R"({"kv_cache": {"format": "q8_0", "keep": 1}})"), {"kv_cache", "unknown key 'keep'"});
  expect_error(parse(R"({"kv_cache": {}})"), {"kv_cache", "missing \"format\""});
  expect_error(parse(R"({"kv_cache": {"format": "q4_0", "rotation": "walsh"}})"), {"kv_cache.rotation", "\"walsh\"", "hadamard"});
  expect_error(parse(R"({"kv_cache": {"format": "q4_0", "rotation": true}})"), {"kv_cache.rotation", "true"});
  expect_error(parse(R"({"kv_cache": "q8_0"})"), {"kv_cache", "expected an object"});
  SchemeSpec s;
  s.kv_cache = kv(KvCacheFormat::int8, -2);
  expect_error([&] { validate_scheme(s, "C++ spec"); }, {"C++ spec", "kv_cache.keep_tokens.first", "-2"});
}

TEST(KvCache, ResolvedSpecWritesKvCacheOnlyWhenPresent) {
  EXPECT_FALSE(scheme_to_json(resolve_scheme("int8-fine")).contains("kv_cache"));
  const nlohmann::json j = scheme_to_json(resolve_scheme("kv-int4-keep1"));
  EXPECT_EQ(j.at("kv_cache"), (nlohmann::json{{"format", "int4"}, {"group_size", 32}, {"keep_tokens", {{"first", 1}}}}));
  EXPECT_EQ(scheme_to_json(resolve_scheme("kv-q8_0")).at("kv_cache"),
            (nlohmann::json{{"format", "q8_0"}, {"keep_tokens", {{"first", 0}}}}));
  EXPECT_EQ(scheme_to_json(resolve_scheme("kv-q4_0-hadamard")).at("kv_cache"),
            (nlohmann::json{{"format", "q4_0"}, {"keep_tokens", {{"first", 0}}}, {"rotation", "hadamard"}}));
  for (const char* name : {"kv-int8", "kv-fp8", "kv-q8_0", "kv-q4_0", "kv-int4", "kv-q4_0-keep1", "kv-int4-keep1", "w8a8-kv8",
                           "kv-q8_0-hadamard", "kv-q4_0-hadamard"}) {
    const SchemeSpec p = resolve_scheme(name);
    EXPECT_TRUE(scheme_from_json(scheme_to_json(p), name).kv_cache == p.kv_cache) << name;
    EXPECT_TRUE(p.quantizes_anything()) << name;
  }
  EXPECT_FALSE(resolve_scheme("kv-int8").selects("layers.0.attn.q"));
  EXPECT_TRUE(resolve_scheme("w8a8-kv8").selects("layers.0.attn.q"));
}

}  // namespace
}  // namespace qeval
