// Checks and dispatch for quantize_int8_rows (kernels/int8_quantize.h).
#include "kernels/int8_quantize.h"

#include <c10/util/Exception.h>

#include <cmath>

#include "kernels/cpu/int8_quantize_cpu.h"

namespace qeval::kernels {

Int8Rows quantize_int8_rows(const at::Tensor& x, std::int64_t rows_per_scale) {
  TORCH_CHECK(x.defined() && x.scalar_type() == at::kFloat && x.dim() == 2,
              "quantize_int8_rows: expected float32 [M, K], got ",
              x.defined() ? std::string(c10::toString(x.scalar_type())) : std::string("undefined"), " with ",
              x.defined() ? x.dim() : 0, " dims");
  TORCH_CHECK(rows_per_scale >= 1, "quantize_int8_rows: rows_per_scale must be at least 1, got ", rows_per_scale);
  // CUDA backends (kernels/cuda/) hook in here; until then a CUDA tensor is refused, never copied.
  TORCH_CHECK(x.is_cpu(), "quantize_int8_rows: no backend for device ", x.device(), " in this build");
  return cpu::quantize_int8_rows_cpu(x.contiguous(), rows_per_scale);
}

Int8Rows quantize_int8_matrix_with_max_abs(const at::Tensor& x, float max_abs) {
  TORCH_CHECK(x.defined() && x.scalar_type() == at::kFloat && x.dim() == 2 && x.is_contiguous(),
              "quantize_int8_matrix_with_max_abs: expected contiguous float32 [M, K]");
  TORCH_CHECK(std::isfinite(max_abs) && max_abs >= 0.0f, "quantize_int8_matrix_with_max_abs: max |x| must be finite "
              "and non-negative, got ", max_abs);
  TORCH_CHECK(x.is_cpu(), "quantize_int8_matrix_with_max_abs: no backend for device ", x.device(), " in this build");
  return cpu::quantize_int8_matrix_with_max_abs_cpu(x, max_abs);
}

void fake_quantize_int8_rows_(at::Tensor& x, std::int64_t rows_per_scale) {
  TORCH_CHECK(x.defined() && x.scalar_type() == at::kFloat && x.dim() == 2 && x.is_contiguous(),
              "fake_quantize_int8_rows_: expected contiguous float32 [M, K]");
  TORCH_CHECK(rows_per_scale >= 1, "fake_quantize_int8_rows_: rows_per_scale must be at least 1, got ", rows_per_scale);
  TORCH_CHECK(x.is_cpu(), "fake_quantize_int8_rows_: no backend for device ", x.device(), " in this build");
  cpu::fake_quantize_int8_rows_cpu_(x, rows_per_scale);
}

at::Tensor scales_per_row(const Int8Rows& rows, std::int64_t rows_per_scale) {
  const std::int64_t M = rows.q.size(0);
  if (rows_per_scale == 1) return rows.scales;
  return rows.scales.repeat_interleave(rows_per_scale).narrow(0, 0, M);
}

}  // namespace qeval::kernels
