// GPU tests skip, visibly, where qeval cannot run on a GPU: a LibTorch without CUDA, no driver or
// no device (STYLE.md: a GPU test never passes silently on a machine without one).
#pragma once

#include <ATen/Context.h>
#include <gtest/gtest.h>

#include <string>

#include "kernels/cuda/device.h"

namespace qeval::test {

// Empty when a CUDA device can run qeval's models here, else why not.
inline std::string gpu_unavailable() {
  if (!at::hasCUDA()) return "this build's LibTorch has no CUDA";
  if (kernels::cuda::device_count() == 0) return kernels::cuda::no_device_reason();
  return "";
}

}  // namespace qeval::test

#define QEVAL_SKIP_WITHOUT_GPU()                                                                 \
  do {                                                                                           \
    const std::string qeval_gpu_why = ::qeval::test::gpu_unavailable();                          \
    if (!qeval_gpu_why.empty()) GTEST_SKIP() << "no CUDA device for qeval: " << qeval_gpu_why; \
  } while (0)
