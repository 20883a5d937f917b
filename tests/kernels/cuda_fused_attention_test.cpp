// The fused attention with statistics and the one-read hidden-state statistics
// (kernels/cuda/fused_attention_stats.h) against float64 loops on the host written from DESIGN.md
// §6 and stats/attention_stats.h: the output, the per-query key-1 weight, first-attn credit and
// entropy, and the per-head sums, on random inputs over L ∈ {1, 17, 64, 200, 1024}, head sizes
// 8, 64, 80, 128, 256, grouped-query heads, sliding windows, soft caps and softmax-1. Tolerances
// by dtype: the output within 1e-5 (fp32), 1e-3 (fp16) and 8e-3 (bf16) of |ref| + 1; the statistics
// are computed in float32 from the same (rounded) inputs whatever the dtype, so they are held to
// fp32's 1e-5 everywhere. The statistics-only pass of half and bfloat16 inputs (its logits on
// tensor cores) is held to the same bounds. Skipped, visibly, without a CUDA device.
#include <gtest/gtest.h>

#include <c10/util/BFloat16.h>
#include <c10/util/Half.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "kernels/cuda/device.h"
#include "kernels/cuda/fused_attention_stats.h"

namespace cu = qeval::kernels::cuda;

#define QEVAL_REQUIRE_CUDA_DEVICE()                                                              \
  do {                                                                                           \
    if (cu::device_count() == 0) GTEST_SKIP() << "no CUDA device: " << cu::no_device_reason(); \
  } while (0)

namespace {

float round_to(cu::FloatType type, float v) {
  switch (type) {
    case cu::FloatType::f16: return static_cast<float>(c10::Half(v));
    case cu::FloatType::bf16: return static_cast<float>(c10::BFloat16(v));
    case cu::FloatType::f32: break;
  }
  return v;
}

std::vector<std::uint8_t> to_bytes(const std::vector<float>& x, cu::FloatType type) {
  std::vector<std::uint8_t> raw(x.size() * cu::size_of(type));
  for (std::size_t i = 0; i < x.size(); ++i) {
    if (type == cu::FloatType::f16) {
      const c10::Half h(x[i]);
      std::memcpy(raw.data() + 2 * i, &h, 2);
    } else if (type == cu::FloatType::bf16) {
      const c10::BFloat16 h(x[i]);
      std::memcpy(raw.data() + 2 * i, &h, 2);
    } else {
      std::memcpy(raw.data() + 4 * i, &x[i], 4);
    }
  }
  return raw;
}

float element(const std::vector<std::uint8_t>& raw, std::size_t i, cu::FloatType type) {
  if (type == cu::FloatType::f16) {
    c10::Half h;
    std::memcpy(&h, raw.data() + 2 * i, 2);
    return static_cast<float>(h);
  }
  if (type == cu::FloatType::bf16) {
    c10::BFloat16 h;
    std::memcpy(&h, raw.data() + 2 * i, 2);
    return static_cast<float>(h);
  }
  float f;
  std::memcpy(&f, raw.data() + 4 * i, 4);
  return f;
}

struct Case {
  cu::FloatType type = cu::FloatType::f32;
  std::int64_t B = 1, H = 2, Hkv = 2, L = 17, hd = 64;
  std::int64_t window = 0;
  float softcap = 0.0f;
  bool softmax_one = false;
  float amplitude = 1.0f;    // q and k uniform in ±amplitude
  float key1_boost = 0.0f;   // added to every channel of key 1's k: a sink for queries aligned with it
  bool tie_first_two = false;  // k of key 2 = k of key 1: exact ties between them
  float q_shift = 0.0f;       // added to every element of q
  float k_shift = 0.0f;       // added to every element of k
  bool strided_q = false;    // q stored [B, L, H, hd] (the model's transposed view)
  bool stats_only = false;   // no output (v unread): the pass the model runs; tensor cores in 16 bits
  std::int64_t sink_T = 64;
  std::uint32_t seed = 1;

  std::string name() const {
    std::ostringstream s;
    s << cu::to_string(type) << " B" << B << " H" << H << "/" << Hkv << " L" << L << " hd" << hd << " window " << window
      << " softcap " << softcap << (softmax_one ? " softmax-1" : " softmax") << (strided_q ? " strided q" : "")
      << (tie_first_two ? " tie" : "") << (stats_only ? " statistics only" : "");
    return s.str();
  }
};

struct Reference {
  std::vector<double> out;          // [B, L, H, hd]
  std::vector<double> query_stats;  // [3, B, H, L]
  std::vector<double> head_sums;    // [B, H, 4]
};

// Inputs as float values already representable in the case's type: q [B, H, L, hd], k, v [B, Hkv, L, hd].
struct Inputs {
  std::vector<float> q, k, v;
};

Inputs make_inputs(const Case& c) {
  std::mt19937 rng(c.seed);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  Inputs in;
  in.q.resize(static_cast<std::size_t>(c.B * c.H * c.L * c.hd));
  in.k.resize(static_cast<std::size_t>(c.B * c.Hkv * c.L * c.hd));
  in.v.resize(in.k.size());
  for (auto& x : in.q) x = round_to(c.type, c.amplitude * u(rng) + c.q_shift);
  for (auto& x : in.v) x = round_to(c.type, u(rng));
  for (std::int64_t b = 0; b < c.B; ++b)
    for (std::int64_t h = 0; h < c.Hkv; ++h)
      for (std::int64_t j = 0; j < c.L; ++j)
        for (std::int64_t d = 0; d < c.hd; ++d) {
          float x = c.amplitude * u(rng) + c.k_shift;
          if (j == 0) x += c.key1_boost;
          in.k[static_cast<std::size_t>(((b * c.Hkv + h) * c.L + j) * c.hd + d)] = round_to(c.type, x);
        }
  if (c.tie_first_two && c.L >= 2)
    for (std::int64_t b = 0; b < c.B; ++b)
      for (std::int64_t h = 0; h < c.Hkv; ++h)
        for (std::int64_t d = 0; d < c.hd; ++d) {
          const std::size_t base = static_cast<std::size_t>((b * c.Hkv + h) * c.L * c.hd + d);
          in.k[base + static_cast<std::size_t>(c.hd)] = in.k[base];
        }
  return in;
}

// DESIGN.md §6 / stats/attention_stats.h in float64, with the first-attn rule applied to the
// weights rounded to float32, as the collector receives them.
Reference reference(const Case& c, const Inputs& in) {
  const double scale = 1.0 / std::sqrt(static_cast<double>(c.hd));
  Reference r;
  r.out.assign(static_cast<std::size_t>(c.B * c.L * c.H * c.hd), 0.0);
  r.query_stats.assign(static_cast<std::size_t>(3 * c.B * c.H * c.L), 0.0);
  r.head_sums.assign(static_cast<std::size_t>(c.B * c.H * 4), 0.0);
  const std::int64_t BHL = c.B * c.H * c.L, group = c.H / c.Hkv;
  const std::int64_t reach = c.window > 0 ? std::min(c.L, c.window) : c.L, T = std::min(c.sink_T, reach);
  std::vector<double> s(static_cast<std::size_t>(c.L)), p(static_cast<std::size_t>(c.L));
  for (std::int64_t b = 0; b < c.B; ++b)
    for (std::int64_t h = 0; h < c.H; ++h) {
      const std::int64_t hk = h / group;
      for (std::int64_t i = 0; i < c.L; ++i) {
        const float* qi = &in.q[static_cast<std::size_t>(((b * c.H + h) * c.L + i) * c.hd)];
        double m = c.softmax_one ? 0.0 : -std::numeric_limits<double>::infinity();
        for (std::int64_t j = 0; j <= i; ++j) {
          const bool visible = c.window == 0 || i - j < c.window;
          const float* kj = &in.k[static_cast<std::size_t>(((b * c.Hkv + hk) * c.L + j) * c.hd)];
          double dot = 0;
          for (std::int64_t d = 0; d < c.hd; ++d) dot += static_cast<double>(qi[d]) * kj[d];
          double x = dot * scale;
          if (c.softcap > 0) x = c.softcap * std::tanh(x / c.softcap);
          s[static_cast<std::size_t>(j)] = visible ? x : -std::numeric_limits<double>::infinity();
          m = std::max(m, s[static_cast<std::size_t>(j)]);
        }
        double l = c.softmax_one ? std::exp(-m) : 0.0;
        for (std::int64_t j = 0; j <= i; ++j) l += std::exp(s[static_cast<std::size_t>(j)] - m);
        double entropy = 0, top = 0;
        for (std::int64_t j = 0; j <= i; ++j) {
          const double pj = std::exp(s[static_cast<std::size_t>(j)] - m) / l;
          p[static_cast<std::size_t>(j)] = pj;
          if (pj > 0) entropy -= pj * std::log(pj);
          top = std::max(top, static_cast<double>(static_cast<float>(pj)));
          const float* vj = &in.v[static_cast<std::size_t>(((b * c.Hkv + hk) * c.L + j) * c.hd)];
          for (std::int64_t d = 0; d < c.hd; ++d)
            r.out[static_cast<std::size_t>(((b * c.L + i) * c.H + h) * c.hd + d)] += pj * vj[d];
        }
        // First-attn credit on float32 weights: key 1 holds the maximum (ties split among the
        // i + 1 causal keys when the whole row rounds to 0).
        const float p1f = static_cast<float>(p[0]);
        double credit = 0;
        if (p1f >= top) {
          std::int64_t tied = 0;
          for (std::int64_t j = 0; j <= i; ++j) tied += static_cast<float>(p[static_cast<std::size_t>(j)]) == top;
          credit = 1.0 / static_cast<double>(top > 0 ? tied : i + 1);
        }
        const std::size_t at = static_cast<std::size_t>((b * c.H + h) * c.L + i);
        r.query_stats[at] = p[0];
        r.query_stats[static_cast<std::size_t>(BHL) + at] = credit;
        r.query_stats[static_cast<std::size_t>(2 * BHL) + at] = entropy;
        double* sums = &r.head_sums[static_cast<std::size_t>((b * c.H + h) * 4)];
        if (i < T) sums[0] += p[0];
        if (i >= 1 && i < reach) {
          sums[1] += p[0];
          sums[2] += credit;
        }
        sums[3] += entropy;
      }
    }
  return r;
}

double output_tolerance(cu::FloatType t) {
  return t == cu::FloatType::f32 ? 1e-5 : t == cu::FloatType::f16 ? 1e-3 : 8e-3;
}

// Runs one case on the device and compares everything; failures print the index, got, expected
// and the largest error of each quantity.
void check_case(const Case& c) {
  SCOPED_TRACE(c.name());
  const Inputs in = make_inputs(c);
  const Reference ref = reference(c, in);

  // q on the device, in [B, H, L, hd] or (strided) [B, L, H, hd] order.
  std::vector<float> q_layout = in.q;
  std::int64_t q_strides[3] = {c.H * c.L * c.hd, c.L * c.hd, c.hd};
  if (c.strided_q) {
    for (std::int64_t b = 0; b < c.B; ++b)
      for (std::int64_t h = 0; h < c.H; ++h)
        for (std::int64_t i = 0; i < c.L; ++i)
          for (std::int64_t d = 0; d < c.hd; ++d)
            q_layout[static_cast<std::size_t>(((b * c.L + i) * c.H + h) * c.hd + d)] =
                in.q[static_cast<std::size_t>(((b * c.H + h) * c.L + i) * c.hd + d)];
    q_strides[0] = c.L * c.H * c.hd, q_strides[1] = c.hd, q_strides[2] = c.H * c.hd;
  }
  const cu::DeviceArray<std::uint8_t> q(to_bytes(q_layout, c.type)), k(to_bytes(in.k, c.type)), v(to_bytes(in.v, c.type));
  cu::DeviceArray<std::uint8_t> out(ref.out.size() * cu::size_of(c.type));
  cu::DeviceArray<float> query_stats(ref.query_stats.size());
  cu::DeviceArray<double> head_sums(ref.head_sums.size());

  cu::FusedAttentionArgs a;
  a.q = q.get(), a.k = k.get(), a.v = v.get(), a.out = c.stats_only ? nullptr : out.get();
  for (int n = 0; n < 3; ++n) {
    a.q_strides[n] = q_strides[n];
    a.k_strides[n] = n == 0 ? c.Hkv * c.L * c.hd : n == 1 ? c.L * c.hd : c.hd;
    a.v_strides[n] = a.k_strides[n];
  }
  a.type = c.type;
  a.batch = c.B, a.heads = c.H, a.kv_heads = c.Hkv, a.length = c.L, a.head_dim = c.hd;
  a.scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(c.hd)));
  a.softcap = c.softcap, a.window = c.window, a.softmax_one = c.softmax_one;
  a.query_stats = query_stats.get(), a.head_sums = head_sums.get();
  a.sink_T = c.sink_T, a.stats_window = c.window;
  a.tensor_cores = c.stats_only;  // the tensor-core statistics pass (16-bit types, compute capability ≥ 8.0)
  ASSERT_STREQ(cu::fused_attention_unsupported_reason(a), "");
  cu::fused_attention(a);
  cu::synchronize();

  const std::vector<std::uint8_t> out_raw = out.to_host();
  const std::vector<float> stats = query_stats.to_host();
  const std::vector<double> sums = head_sums.to_host();

  struct Worst {
    const char* what;
    double tolerance;
    double error = 0, got = 0, expected = 0;
    std::size_t index = 0;
    std::size_t failures = 0;
    void see(std::size_t i, double g, double e, double bound) {
      const double err = std::abs(g - e);
      if (!(err <= bound)) ++failures;  // NaN fails too
      if (!(err <= error)) error = err, got = g, expected = e, index = i;
    }
    void report() const {
      EXPECT_EQ(failures, 0u) << what << ": " << failures << " outside tolerance " << tolerance
                              << "; largest error " << error << " at index " << index << ": got " << got
                              << ", expected " << expected;
    }
  };
  if (!c.stats_only) {
    Worst o{"output", output_tolerance(c.type)};
    for (std::size_t i = 0; i < ref.out.size(); ++i)
      o.see(i, element(out_raw, i, c.type), ref.out[i], o.tolerance * (std::abs(ref.out[i]) + 1.0));
    o.report();
  }

  const std::size_t BHL = static_cast<std::size_t>(c.B * c.H * c.L);
  Worst p1{"key-1 weight", 1e-5}, credit{"first-attn credit", 1e-6}, entropy{"entropy", 1e-5};
  for (std::size_t i = 0; i < BHL; ++i) {
    p1.see(i, stats[i], ref.query_stats[i], 1e-5 * ref.query_stats[i] + 1e-7);
    credit.see(i, stats[BHL + i], ref.query_stats[BHL + i], 1e-6);
    entropy.see(i, stats[2 * BHL + i], ref.query_stats[2 * BHL + i], 1e-5 * (ref.query_stats[2 * BHL + i] + 1.0));
  }
  p1.report();
  credit.report();
  entropy.report();

  Worst s{"head sums", 1e-5};
  for (std::size_t i = 0; i < ref.head_sums.size(); ++i)
    s.see(i, sums[i], ref.head_sums[i], 1e-5 * (std::abs(ref.head_sums[i]) + 1.0));
  s.report();
}

TEST(CudaFusedAttention, Fp32MatchesFloat64AcrossLengthsAndHeadSizes) {
  QEVAL_REQUIRE_CUDA_DEVICE();
  for (std::int64_t L : {1, 17, 64, 200, 1024})
    for (std::int64_t hd : {64, 80, 128}) {
      Case c;
      c.L = L, c.hd = hd, c.H = L >= 1024 ? 2 : 3, c.Hkv = c.H, c.key1_boost = 0.8f, c.amplitude = 1.5f;
      c.seed = static_cast<std::uint32_t>(L * 1000 + hd);
      check_case(c);
    }
}

TEST(CudaFusedAttention, HalfAndBfloat16) {
  QEVAL_REQUIRE_CUDA_DEVICE();
  for (cu::FloatType t : {cu::FloatType::f16, cu::FloatType::bf16})
    for (std::int64_t L : {1, 17, 200, 1024})
      for (std::int64_t hd : {64, 80, 128}) {
        Case c;
        c.type = t, c.L = L, c.hd = hd, c.B = 2, c.H = 2, c.Hkv = 1, c.key1_boost = 0.8f, c.amplitude = 1.5f;
        c.seed = static_cast<std::uint32_t>(7 * L + hd);
        check_case(c);
      }
}

TEST(CudaFusedAttention, GroupedQueryWindowsSoftCapsAndSoftmax1) {
  QEVAL_REQUIRE_CUDA_DEVICE();
  for (cu::FloatType t : {cu::FloatType::f32, cu::FloatType::f16})
    for (std::int64_t L : {17, 64, 200})
      for (std::int64_t window : {0, 1, 5, 48})
        for (float softcap : {0.0f, 2.0f})
          for (bool softmax_one : {false, true}) {
            Case c;
            c.type = t, c.L = L, c.hd = 80, c.H = 4, c.Hkv = 2, c.window = window, c.softcap = softcap;
            c.softmax_one = softmax_one, c.amplitude = 2.0f, c.key1_boost = 1.0f;
            c.seed = static_cast<std::uint32_t>(L + 100 * window + (softmax_one ? 7 : 0));
            check_case(c);
          }
}

TEST(CudaFusedAttention, SmallAndLargeHeadSizesAndStridedQueries) {
  QEVAL_REQUIRE_CUDA_DEVICE();
  for (std::int64_t hd : {8, 20, 256})
    for (std::int64_t L : {17, 200}) {
      Case c;
      c.hd = hd, c.L = L, c.H = 8, c.Hkv = 4, c.B = 2, c.strided_q = true, c.key1_boost = 0.5f;
      c.seed = static_cast<std::uint32_t>(hd * 3 + L);
      check_case(c);
    }
}

// Exact ties between keys 1 and 2 split the credit; softmax-1 rows whose weights all underflow
// tie all causal keys, as the collector's all-zero rows do.
TEST(CudaFusedAttention, TiesAndUnderflowFollowTheCollectorsRule) {
  QEVAL_REQUIRE_CUDA_DEVICE();
  Case tie;
  tie.L = 64, tie.hd = 64, tie.H = 2, tie.Hkv = 2, tie.key1_boost = 3.0f, tie.tie_first_two = true;
  check_case(tie);
  // q ≈ +4 and k ≈ −4 everywhere: logits about −16·64/8 = −128, every weight below float32's
  // smallest subnormal, while the implicit logit 0 keeps the row's sum near 1.
  Case under;
  under.L = 40, under.hd = 64, under.softmax_one = true, under.amplitude = 0.01f, under.q_shift = 4.0f;
  under.k_shift = -4.0f;
  check_case(under);
}

// Small shapes for compute-sanitizer's racecheck (every code path, few blocks).
TEST(CudaFusedAttention, SmallForSanitizers) {
  QEVAL_REQUIRE_CUDA_DEVICE();
  for (bool stats_only : {false, true})  // the CUDA-core kernel, then the tensor-core statistics pass
    for (bool softmax_one : {false, true}) {
      Case c;
      c.L = stats_only ? 80 : 45, c.hd = 72, c.H = 2, c.Hkv = 1, c.window = 20, c.softcap = 3.0f;
      c.softmax_one = softmax_one, c.stats_only = stats_only, c.type = cu::FloatType::f16;
      check_case(c);
    }
}

// The statistics-only pass in half and bfloat16: logits on tensor cores, 64 × 64 tiles. Lengths
// on both sides of the tile size, head sizes that need padding to 16 (8, 20, 72) and that do not,
// the element-wise loads (hd 20, strided q with hd 20) and the 16-byte ones, grouped-query heads,
// windows shorter and longer than a tile, soft caps, softmax-1, ties and underflow.
TEST(CudaFusedAttention, StatisticsOnlyOnTensorCores) {
  QEVAL_REQUIRE_CUDA_DEVICE();
  for (cu::FloatType t : {cu::FloatType::f16, cu::FloatType::bf16}) {
    for (std::int64_t L : {1, 17, 63, 64, 65, 200, 1024})
      for (std::int64_t hd : {8, 20, 64, 72, 128, 256}) {
        Case c;
        c.type = t, c.stats_only = true, c.L = L, c.hd = hd, c.B = 2, c.H = 4, c.Hkv = 2;
        c.key1_boost = 0.8f, c.amplitude = 1.5f, c.strided_q = hd == 20 || hd == 128;
        c.seed = static_cast<std::uint32_t>(11 * L + hd);
        check_case(c);
      }
    for (std::int64_t window : {1, 5, 48, 100})
      for (float softcap : {0.0f, 2.0f})
        for (bool softmax_one : {false, true}) {
          Case c;
          c.type = t, c.stats_only = true, c.L = 200, c.hd = 80, c.H = 4, c.Hkv = 2, c.window = window;
          c.softcap = softcap, c.softmax_one = softmax_one, c.amplitude = 2.0f, c.key1_boost = 1.0f;
          c.seed = static_cast<std::uint32_t>(window + (softmax_one ? 7 : 0));
          check_case(c);
        }
    Case tie;
    tie.type = t, tie.stats_only = true, tie.L = 130, tie.hd = 64, tie.H = 2, tie.Hkv = 2, tie.key1_boost = 3.0f;
    tie.tie_first_two = true;
    check_case(tie);
    Case under;
    under.type = t, under.stats_only = true, under.L = 70, under.hd = 64, under.softmax_one = true;
    under.amplitude = 0.01f, under.q_shift = 4.0f, under.k_shift = -4.0f;
    check_case(under);
  }
}

// ---- hidden-state statistics ----

struct HiddenRef {
  double v[9];
};

// stats/hidden_stats.cpp's definitions in float64.
std::vector<HiddenRef> hidden_reference(const std::vector<float>& x, std::int64_t B, std::int64_t L, std::int64_t D) {
  std::vector<HiddenRef> out(static_cast<std::size_t>(B));
  const double nan = std::numeric_limits<double>::quiet_NaN();
  for (std::int64_t b = 0; b < B; ++b) {
    std::vector<double> kurt(static_cast<std::size_t>(L)), amax(static_cast<std::size_t>(L)), ratio(static_cast<std::size_t>(L)),
        signed_max(static_cast<std::size_t>(L)), channel(static_cast<std::size_t>(L));
    for (std::int64_t l = 0; l < L; ++l) {
      const float* row = &x[static_cast<std::size_t>((b * L + l) * D)];
      double mean = 0, sq = 0, best = -1;
      std::int64_t ch = 0;
      for (std::int64_t d = 0; d < D; ++d) {
        mean += row[d];
        sq += static_cast<double>(row[d]) * row[d];
        if (std::abs(row[d]) > best) best = std::abs(row[d]), ch = d;
      }
      mean /= static_cast<double>(D);
      double m2 = 0, m4 = 0;
      for (std::int64_t d = 0; d < D; ++d) {
        const double c2 = (row[d] - mean) * (row[d] - mean);
        m2 += c2, m4 += c2 * c2;
      }
      m2 /= static_cast<double>(D), m4 /= static_cast<double>(D);
      kurt[static_cast<std::size_t>(l)] = m4 / (m2 * m2);
      amax[static_cast<std::size_t>(l)] = best;
      ratio[static_cast<std::size_t>(l)] = best / std::sqrt(sq);
      signed_max[static_cast<std::size_t>(l)] = row[ch];
      channel[static_cast<std::size_t>(l)] = static_cast<double>(ch);
    }
    HiddenRef& r = out[static_cast<std::size_t>(b)];
    const std::vector<double>* fields[3] = {&kurt, &amax, &ratio};
    for (int k = 0; k < 3; ++k) {
      r.v[2 * k] = (*fields[k])[0];
      double rest = 0;
      for (std::int64_t l = 1; l < L; ++l) rest += (*fields[k])[static_cast<std::size_t>(l)];
      r.v[2 * k + 1] = L > 1 ? rest / static_cast<double>(L - 1) : nan;
    }
    std::int64_t best = 0;
    for (std::int64_t l = 1; l < L; ++l)
      if (amax[static_cast<std::size_t>(l)] > amax[static_cast<std::size_t>(best)]) best = l;
    r.v[6] = signed_max[static_cast<std::size_t>(best)];
    r.v[7] = channel[static_cast<std::size_t>(best)];
    r.v[8] = static_cast<double>(best);
  }
  return out;
}

void check_hidden(cu::FloatType type, std::int64_t B, std::int64_t L, std::int64_t D, bool constant_first_row) {
  SCOPED_TRACE(std::string(cu::to_string(type)) + " B" + std::to_string(B) + " L" + std::to_string(L) + " D" +
               std::to_string(D));
  std::mt19937 rng(static_cast<std::uint32_t>(B * 131 + L * 7 + D));
  std::normal_distribution<float> n(0.0f, 1.0f);
  std::vector<float> x(static_cast<std::size_t>(B * L * D));
  for (auto& e : x) e = round_to(type, n(rng));
  for (std::int64_t r = 0; r < B * L; ++r) {  // a massive-activation channel, its sign alternating
    x[static_cast<std::size_t>(r * D + D / 3)] = round_to(type, (r % 2 ? -1.0f : 1.0f) * (20.0f + static_cast<float>(r % 5)));
    x[static_cast<std::size_t>(r * D + D / 2)] = x[static_cast<std::size_t>(r * D + D / 3)];  // a tie: lowest channel wins
  }
  if (constant_first_row)
    for (std::int64_t d = 0; d < D; ++d) x[static_cast<std::size_t>(d)] = 0.5f;  // κ = 0/0: NaN
  const auto ref = hidden_reference(x, B, L, D);
  const cu::DeviceArray<std::uint8_t> dx(to_bytes(x, type));
  cu::DeviceArray<double> rows(static_cast<std::size_t>(5 * B * L)), out(static_cast<std::size_t>(9 * B));
  cu::hidden_stats(dx.get(), type, B, L, D, rows.get(), out.get());
  cu::synchronize();
  const std::vector<double> got = out.to_host();
  const char* names[9] = {"kurtosis first", "kurtosis rest", "max first", "max rest", "ratio first", "ratio rest",
                          "largest value",  "largest channel", "largest position"};
  for (std::int64_t b = 0; b < B; ++b)
    for (int f = 0; f < 9; ++f) {
      const double g = got[static_cast<std::size_t>(b * 9 + f)], e = ref[static_cast<std::size_t>(b)].v[f];
      if (std::isnan(e)) {
        EXPECT_TRUE(std::isnan(g)) << "sequence " << b << " " << names[f] << ": got " << g << ", expected NaN";
        continue;
      }
      // Float64 throughout on identical inputs: only the summation order differs.
      EXPECT_LE(std::abs(g - e), 1e-10 * (std::abs(e) + 1.0))
          << "sequence " << b << " " << names[f] << ": got " << g << ", expected " << e;
    }
}

TEST(CudaHiddenStats, MatchesFloat64Reference) {
  QEVAL_REQUIRE_CUDA_DEVICE();
  check_hidden(cu::FloatType::f32, 2, 17, 768, false);
  check_hidden(cu::FloatType::f32, 3, 1, 64, false);  // L = 1: the rest is NaN
  check_hidden(cu::FloatType::f16, 2, 40, 4096, true);
  check_hidden(cu::FloatType::bf16, 1, 300, 2048, false);
  check_hidden(cu::FloatType::f32, 1, 3, 20000, false);  // more than 48 KiB of shared memory
}

TEST(CudaFusedAttention, RefusesWhatItDoesNotServe) {
  cu::FusedAttentionArgs a;
  a.batch = 1, a.heads = 4, a.kv_heads = 3, a.length = 8, a.head_dim = 64;
  a.q = a.k = a.v = a.out = reinterpret_cast<void*>(16);
  EXPECT_STRNE(cu::fused_attention_unsupported_reason(a), "");  // 4 heads over 3 kv heads
  a.kv_heads = 2, a.head_dim = 300;
  EXPECT_STRNE(cu::fused_attention_unsupported_reason(a), "");  // head size above 256
}

}  // namespace
