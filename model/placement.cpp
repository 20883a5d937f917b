#include "model/placement.h"

#include <ATen/Context.h>

#include "common/error.h"
#include "kernels/device.h"

namespace qeval {

at::Device parse_device(const std::string& text) {
  if (text == "cpu") return at::Device(at::kCPU);
  int index = -1;
  if (text == "cuda") {
    index = 0;
  } else if (text.rfind("cuda:", 0) == 0 && text.size() > 5 &&
             text.find_first_not_of("0123456789", 5) == std::string::npos && text.size() < 9) {
    index = std::stoi(text.substr(5));
  } else {
    fail("--device '{}': expected cpu, cuda or cuda:N", text);
  }
  QEVAL_CHECK(at::hasCUDA(),
              "--device {}: this qeval was built with a LibTorch without CUDA; build against a CUDA LibTorch "
              "(docs/gpu.md) to evaluate on a GPU",
              text);
  const int devices = kernels::gpu_count();
  QEVAL_CHECK(devices > 0, "--device {}: no usable CUDA device ({})", text, kernels::no_gpu_reason());
  QEVAL_CHECK(index < devices, "--device {}: this machine has {} CUDA device(s), numbered from 0", text, devices);
  return at::Device(at::kCUDA, static_cast<c10::DeviceIndex>(index));
}

at::ScalarType parse_dtype(const std::string& text, const at::Device& device) {
  at::ScalarType dtype;
  if (text == "auto")
    dtype = device.is_cpu() ? at::kFloat : at::kHalf;
  else if (text == "fp32")
    dtype = at::kFloat;
  else if (text == "fp16")
    dtype = at::kHalf;
  else if (text == "bf16")
    dtype = at::kBFloat16;
  else if (text == "fp64")
    dtype = at::kDouble;
  else
    fail("--dtype '{}': expected fp32, fp16, bf16, fp64 or auto", text);
  QEVAL_CHECK(!device.is_cpu() || dtype == at::kFloat || dtype == at::kDouble,
              "--dtype {} on the CPU: full precision on the CPU is fp32 (LibTorch has no fast half-precision CPU "
              "matmul); use --device cuda for fp16 or bf16",
              text);
  QEVAL_CHECK(device.is_cpu() || dtype != at::kDouble,
              "--dtype fp64 on {}: float64 is the CPU's reference arithmetic (rounding bands, "
              "docs/rounding-band.md); use --device cpu",
              device.str());
  return dtype;
}

std::string dtype_name(at::ScalarType dtype) {
  switch (dtype) {
    case at::kFloat: return "fp32";
    case at::kHalf: return "fp16";
    case at::kBFloat16: return "bf16";
    case at::kDouble: return "fp64";
    default: return std::string(c10::toString(dtype));
  }
}

std::string full_precision_execution(const Placement& placement) {
  if (placement.on_cpu()) return dtype_name(placement.dtype);
  return dtype_name(placement.dtype) + " on " + placement.device.str();
}

std::string describe_device(const at::Device& device) {
  if (device.is_cpu()) return "cpu";
  return kernels::gpu_description(device.index() < 0 ? 0 : device.index()) + ", " +
         kernels::gpu_versions();
}

at::Tensor PlacementCache::move(const at::Tensor& t, c10::optional<at::ScalarType> dtype) {
  if (!t.defined()) return t;
  const at::ScalarType target =
      at::isFloatingType(t.scalar_type()) ? dtype.value_or(placement_.dtype) : t.scalar_type();
  const auto key = std::make_pair(static_cast<const void*>(t.unsafeGetTensorImpl()), static_cast<int>(target));
  auto found = copies_.find(key);
  if (found != copies_.end()) return found->second.second;
  at::Tensor copy = t.to(placement_.device, target).contiguous();
  copies_.emplace(key, std::make_pair(t, copy));
  return copy;
}

}  // namespace qeval
