// Mamba's selective scan for training on the CPU (model/selective_scan.cpp): the same forward as
// selective_scan_cpu (model/ssm_scan.h), bit for bit, inside an autograd function whose backward is
// a reverse loop per (sequence, channel), recomputing each chunk's states from the state it was
// entered with. selective_scan() dispatches here when a gradient is wanted (GradMode on and an
// operand requires grad); LibTorch's autograd through the loop would otherwise see raw pointer
// writes it cannot differentiate, and the chunked log-depth scan is ~10× slower under autograd on
// a CPU. tests/model/ssm_scan_test.cpp holds its gradients to autograd through the reference.
#pragma once

#include <ATen/ATen.h>

#include <cstdint>

namespace qeval {

// u, delta [B, L, E], A [E, N], Bm, Cm [B, L, N], D [E], float32 or float64 on the CPU → y [B, L, E];
// chunk ≤ 0: selective_scan_cpu's default. Differentiable with respect to every operand.
at::Tensor selective_scan_cpu_trainable(const at::Tensor& u, const at::Tensor& delta, const at::Tensor& A,
                                        const at::Tensor& Bm, const at::Tensor& Cm, const at::Tensor& D,
                                        std::int64_t chunk = 0);

}  // namespace qeval
