// A GPU plan prepares each layer on the device (issue 50): the stored weights are copied there and
// converted, and every scheme's weights are quantised there. These tests hold that work to the
// CPU's bits on random inputs with ties and constant groups: int8 absmax codes and scales at every
// granularity, 4-bit zero-point codes, scales and zero points per tensor, channel and group, and
// safetensors tensors (F16, BF16, F32) read onto the device against the same tensors read on the
// host (a large one read by several threads). Skips, visibly, without a CUDA device.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "loaders/checkpoints/safetensors.h"
#include "quant/packed_weights.h"
#include "tests/support/gpu.h"
#include "tests/support/test_data.h"

namespace qeval {
namespace {

const at::Device kCuda(at::kCUDA, 0);

QuantSpec spec_of(QuantKind kind, Granularity granularity, std::int64_t group_size = 0) {
  QuantSpec spec;
  spec.kind = kind;
  spec.granularity = granularity;
  spec.group_size = group_size;
  return spec;
}

// Random weights of mixed magnitudes, with rows that hit the rounding ties and constant rows.
at::Tensor awkward_weight(std::int64_t N, std::int64_t K, std::uint64_t seed) {
  at::manual_seed(seed);
  at::Tensor w = at::randn({N, K}) * at::exp(at::randn({N, 1}) * 2);
  // Row 0: max |w| = 127, so the per-row int8 scale is exactly 1 and x.5 values are ties.
  w[0] = (at::randint(-254, 255, {K}).to(at::kFloat) / 2);
  w[0][0] = 127;
  // Row 1: 4-bit ties: min 0, max 15 → scale 1, zero 0, and x.5 values between.
  w[1] = at::randint(0, 31, {K}).to(at::kFloat) / 2;
  w[1][0] = 0;
  w[1][1] = 15;
  w[2].fill_(0);       // constant zero
  w[3].fill_(-0.75f);  // constant negative
  w[4].fill_(3.0f);    // constant positive
  w[5].narrow(0, 0, std::min<std::int64_t>(K, 32)).fill_(1.25f);  // a constant first group
  return w;
}

struct Case {
  std::string name;
  QuantSpec spec;
};

std::vector<Case> cases() {
  return {{"int8 tensor", spec_of(QuantKind::int8_absmax, Granularity::tensor)},
          {"int8 channel", spec_of(QuantKind::int8_absmax, Granularity::channel)},
          {"int8 group 32", spec_of(QuantKind::int8_absmax, Granularity::group, 32)},
          {"int8 group 128", spec_of(QuantKind::int8_absmax, Granularity::group, 128)},
          {"w4 tensor", spec_of(QuantKind::int4_zeropoint, Granularity::tensor)},
          {"w4 channel", spec_of(QuantKind::int4_zeropoint, Granularity::channel)},
          {"w4 group 32", spec_of(QuantKind::int4_zeropoint, Granularity::group, 32)},
          {"w4 group 128", spec_of(QuantKind::int4_zeropoint, Granularity::group, 128)}};
}

void expect_same_bits(const at::Tensor& device, const at::Tensor& host, const std::string& what) {
  ASSERT_TRUE(device.defined() && host.defined()) << what;
  EXPECT_TRUE(device.is_cuda()) << what << " was not made on the device";
  const at::Tensor back = device.cpu();
  ASSERT_EQ(back.sizes(), host.sizes()) << what;
  ASSERT_EQ(back.scalar_type(), host.scalar_type()) << what;
  if (at::isFloatingType(host.scalar_type())) {
    // Bits, not values: -0 against +0 and NaN payloads count.
    EXPECT_TRUE(back.view(at::kInt).equal(host.view(at::kInt))) << what << ": max |Δ| "
                                                              << (back - host).abs().max().item<double>();
  } else {
    EXPECT_TRUE(back.equal(host)) << what << ": " << back.ne(host).sum().item<std::int64_t>() << " codes differ";
  }
}

TEST(GpuPrepare, WeightsQuantisedOnTheDeviceEqualTheCpuBitForBit) {
  QEVAL_SKIP_WITHOUT_GPU();
  // K not a multiple of the group size (a padded last group), of 2 (an odd 4-bit row), and a
  // Llama-sized row.
  for (const auto& [N, K] : std::vector<std::pair<std::int64_t, std::int64_t>>{{67, 300}, {48, 129}, {256, 4096}}) {
    for (std::uint64_t seed : {1u, 2u, 3u}) {
      const at::Tensor w = awkward_weight(N, K, seed * 100 + static_cast<std::uint64_t>(K));
      const at::Tensor w_device = w.to(kCuda);
      for (const Case& c : cases()) {
        SCOPED_TRACE(c.name + " [" + std::to_string(N) + ", " + std::to_string(K) + "] seed " + std::to_string(seed));
        if (c.spec.kind == QuantKind::int8_absmax) {
          const Int8Weight host = quantize_int8_weight(w, c.spec, "w");
          const Int8Weight device = quantize_int8_weight(w_device, c.spec, "w");
          expect_same_bits(device.q, host.q, "codes");
          expect_same_bits(device.scales, host.scales, "scales");
          EXPECT_EQ(device.group_size, host.group_size);
          expect_same_bits(device.dequantize(), host.dequantize(), "dequantised weight");
        } else {
          const W4Weight host = quantize_w4_weight(w, c.spec, "w");
          const W4Weight device = quantize_w4_weight(w_device, c.spec, "w");
          expect_same_bits(device.qweight, host.qweight, "packed codes");
          expect_same_bits(device.scales, host.scales, "scales");
          expect_same_bits(device.zeros, host.zeros, "zero points");
          EXPECT_EQ(device.group_size, host.group_size);
          expect_same_bits(device.dequantize(), host.dequantize(), "dequantised weight");
        }
      }
    }
  }
}

TEST(GpuPrepare, SafetensorsReadOntoTheDeviceEqualTheHostRead) {
  QEVAL_SKIP_WITHOUT_GPU();
  test::TempDir dir;
  at::manual_seed(7);
  const at::Tensor base = at::randn({96, 130}) * 40;
  // "large" is read by several threads at once (a slice each; safetensors.cpp read_span), its
  // size not a multiple of their count.
  const std::map<std::string, at::Tensor> tensors = {{"f16", base.to(at::kHalf)},
                                                     {"bf16", base.to(at::kBFloat16)},
                                                     {"f32", base},
                                                     {"f16_vector", base[0].to(at::kHalf)},
                                                     {"large", at::randn({6007, 5003})}};
  const auto path = dir / "weights.safetensors";
  write_safetensors(path, tensors);
  SafetensorsFile file(path);
  for (const auto& [name, stored] : tensors) {
    SCOPED_TRACE(name);
    const at::Tensor host = file.read_float32(name);
    at::Tensor device;
    {
      ReadFloatsOnto onto(kCuda);
      device = file.read_float32(name);
    }
    EXPECT_EQ(device.scalar_type(), at::kFloat);
    expect_same_bits(device, host, name);
    EXPECT_TRUE(file.read_float32(name).is_cpu()) << "the scope ended: reads are on the CPU again";
  }
}

}  // namespace
}  // namespace qeval
