// The quantised key/value cache on a GPU (issue 62 item 5): the tensor path of
// quant/kv_cache_tensor.h on the device against the CPU's row kernels bit for bit (every format,
// rotated or not, on rows with the ties of each rounding rule, zeros and subnormals), and
// `qeval eval --device cuda` with the kv presets against the CPU run on stories260K. Skips,
// visibly, without a CUDA device.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <string>

#include "quant/kv_cache.h"
#include "quant/kv_cache_tensor.h"
#include "tests/cli/run_qeval.h"
#include "tests/cli/stories_eval.h"
#include "tests/support/gpu.h"
#include "tests/support/test_data.h"

namespace qeval {
namespace {

const at::Device kCuda(at::kCUDA, 0);

// Gaussian rows with a large channel and scaled rows, then rows of exact ties: int8's (amax 127,
// x = k + 0.5), Q8_0's and Q4_0's (amax 127 / m = −8 per block), int4's (groups from 0 to 15),
// float32 subnormals and zeros.
at::Tensor awkward_rows(std::int64_t rows, std::int64_t hd) {
  at::manual_seed(62);
  at::Tensor x = at::randn({rows, hd}) * at::exp(at::randn({rows, 1}) * 2);
  x.narrow(1, 3, 1).mul_(12.0);
  const std::int64_t q = rows / 8;
  x.narrow(0, 0, q).copy_(at::randint(-253, 254, {q, hd}).to(at::kFloat) / 2);
  x.narrow(0, 0, q).narrow(1, 0, 1).fill_(127.0);
  x.narrow(0, q, q).copy_(at::randint(-15, 16, {q, hd}).to(at::kFloat) / 2);
  for (std::int64_t b = 0; b < hd; b += 32) x.narrow(0, q, q).narrow(1, b, 1).fill_(-8.0);
  x.narrow(0, 2 * q, q).copy_(at::randint(0, 30, {q, hd}).to(at::kFloat) / 2);
  for (std::int64_t b = 0; b < hd; b += 32) {
    x.narrow(0, 2 * q, q).narrow(1, b, 1).fill_(0.0);
    x.narrow(0, 2 * q, q).narrow(1, b + 1, 1).fill_(15.0);
  }
  x.narrow(0, 3 * q, q).mul_(std::ldexp(1.0f, -135));  // float32 subnormals
  x[4 * q].zero_();
  x[4 * q + 1].fill_(-0.0f);
  x[4 * q + 2].fill_(-2.5f);
  return x;
}

TEST(GpuKvCache, TensorPathOnTheDeviceEqualsTheCpuRowsBitForBit) {
  QEVAL_SKIP_WITHOUT_GPU();
  for (const std::int64_t hd : {64, 128, 256}) {
    const at::Tensor x = awkward_rows(4096, hd);
    const at::Tensor on_device = x.to(kCuda);
    for (auto f : {KvCacheFormat::int8, KvCacheFormat::fp8_e4m3, KvCacheFormat::q8_0, KvCacheFormat::q4_0,
                   KvCacheFormat::int4})
      for (const bool rotated : {false, true})
        for (const bool is_key : {true, false}) {
          KvCacheSpec spec;
          spec.format = f;
          if (rotated) spec.rotation = KvCacheRotation::hadamard;
          const at::Tensor got = kv_round_trip_tensor(on_device, spec, is_key).cpu().contiguous();
          const at::Tensor want = kv_round_trip_rows(x, spec, is_key).contiguous();
          ASSERT_EQ(got.sizes(), want.sizes());
          const std::int64_t differ =
              (got.view(at::kInt) != want.view(at::kInt)).sum().item<std::int64_t>();
          EXPECT_EQ(differ, 0) << to_string(f) << " hd " << hd << (rotated ? " rotated" : "") << (is_key ? " K" : " V")
                               << ": " << differ << " of " << x.numel() << " values differ from the CPU's bits";
        }
  }
}

// stories260K (head_dim 8: the formats that take any head_dim) on the GPU in fp32 and fp16 against
// the CPU: NLL within 5e-3 as every quantised scheme's, the cache errors within 1 % of the CPU's.
TEST(GpuKvCache, EvaluationOnTheDeviceAgreesWithTheCpu) {
  QEVAL_SKIP_WITHOUT_GPU();
  test::TempDir dir;
  const std::string common =
      "--max-windows 16 --batch-size 4 --stats-for all --schemes full,kv-int8,kv-fp8,kv-int4,kv-int4-keep1";
  const nlohmann::json cpu = test::stories_eval_record(dir, "cpu", common);
  const nlohmann::json gpu = test::stories_eval_record(dir, "gpu", common + " --device cuda --dtype fp32");
  const nlohmann::json half = test::stories_eval_record(dir, "fp16", common + " --device cuda");
  ASSERT_FALSE(cpu.is_null() || gpu.is_null() || half.is_null());
  std::cout << "\n| scheme | CPU NLL | GPU fp32 − CPU | GPU fp16 − CPU | K err rest CPU / GPU fp32 |\n|---|---:|---:|---:|---:|\n";
  for (std::size_t i = 0; i < cpu["schemes"].size(); ++i) {
    const nlohmann::json& c = cpu["schemes"][i];
    const nlohmann::json& g = gpu["schemes"][i];
    const double nc = c["perplexity"]["nll_mean"], ng = g["perplexity"]["nll_mean"],
                 nh = half["schemes"][i]["perplexity"]["nll_mean"];
    EXPECT_LE(std::abs(ng - nc), 5e-3) << c["name"];
    EXPECT_LE(std::abs(nh - nc), 0.03) << c["name"] << " fp16";
    std::string errors = "-";
    if (i > 0) {
      const double kc = c["description"]["kv_cache_error"]["mean"]["k_rest"],
                   kg = g["description"]["kv_cache_error"]["mean"]["k_rest"];
      EXPECT_NEAR(kg, kc, 0.01 * kc) << c["name"];
      errors = std::to_string(kc) + " / " + std::to_string(kg);
    }
    std::cout << "| " << c["name"].get<std::string>() << " | " << nc << " | " << ng - nc << " | " << nh - nc << " | "
              << errors << " |\n";
  }
}

}  // namespace
}  // namespace qeval
