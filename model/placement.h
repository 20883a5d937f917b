// Placement: where a model runs and in which floating-point dtype (DESIGN.md §3, §10). Full
// precision is fp32 on the CPU (LibTorch has no fast fp16 CPU matmul), and fp16 by default on a
// GPU (the paper's baseline), bf16 or fp32 on request.
//
// Models are built and quantised on the CPU in fp32 (loaders, transforms, weight quantisation:
// the quantised codes are the CPU's bit for bit), then placed: every tensor the forward reads is
// copied once to the device, in the compute dtype for float weights, as stored for packed weights
// and their float32 scales. A PlacementCache remembers each copy, so the models of several schemes
// placed with one cache share their embeddings, norms and unquantised linears on the device.
#pragma once

#include <ATen/ATen.h>

#include <map>
#include <string>
#include <utility>

namespace qeval {

struct Placement {
  at::Device device = at::Device(at::kCPU);
  at::ScalarType dtype = at::kFloat;  // compute dtype of activations and float weights

  bool on_cpu() const { return device.is_cpu(); }
  bool is_default() const { return device.is_cpu() && dtype == at::kFloat; }
};

// "cpu", "cuda", "cuda:1" → the device; throws listing the valid forms. A CUDA device is checked
// to exist (with the reason when it does not: no CUDA LibTorch in this build, no driver, no GPU).
at::Device parse_device(const std::string& text);
// "fp32" | "fp16" | "bf16" (also "auto": fp32 on the CPU, fp16 on a GPU) → the dtype for `device`;
// fp16 and bf16 on the CPU are refused (LibTorch's CPU matmul has no fast half kernels).
at::ScalarType parse_dtype(const std::string& text, const at::Device& device);
std::string dtype_name(at::ScalarType dtype);  // "fp32", "fp16", "bf16"
// What records say ran the full-precision model: "fp32" on the CPU, "fp16 on cuda:0", ...
std::string full_precision_execution(const Placement& placement);

// What a record says about where the numbers were computed: device, dtype and, on a GPU, its
// name, compute capability, driver and CUDA runtime versions and LibTorch's CUDA version.
std::string describe_device(const at::Device& device);

class PlacementCache {
 public:
  explicit PlacementCache(Placement placement) : placement_(placement) {}
  const Placement& placement() const { return placement_; }

  // `t` on the placement's device; float tensors in `dtype` (undefined: the compute dtype), other
  // dtypes as they are. Undefined in, undefined out. The same source tensor is copied once.
  at::Tensor move(const at::Tensor& t, c10::optional<at::ScalarType> dtype = c10::nullopt);

 private:
  Placement placement_;
  // (source TensorImpl, target dtype) → copy; the source is kept so its address stays unique.
  std::map<std::pair<const void*, int>, std::pair<at::Tensor, at::Tensor>> copies_;
};

}  // namespace qeval
