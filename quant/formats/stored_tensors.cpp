#include "quant/formats/stored_tensors.h"

#include <ATen/Parallel.h>
#include <fmt/format.h>

#include <cmath>

#include "common/error.h"
#include "quant/formats/minifloat.h"

namespace qeval {

std::string shape_text(at::IntArrayRef shape) { return fmt::format("[{}]", fmt::join(shape, ", ")); }

at::Tensor stored_tensor(const at::Tensor& t, std::string_view name, std::string_view field,
                         const std::vector<std::int64_t>& shape, std::initializer_list<at::ScalarType> dtypes) {
  QEVAL_CHECK(t.defined(), "{}: {} is missing", name, field);
  QEVAL_CHECK(t.sizes().vec() == shape, "{}: {} has shape {}, expected {}", name, field, shape_text(t.sizes()),
              shape_text(shape));
  bool ok = false;
  std::vector<std::string> names;
  for (at::ScalarType d : dtypes) {
    ok = ok || t.scalar_type() == d;
    names.emplace_back(c10::toString(d));
  }
  QEVAL_CHECK(ok, "{}: {} has dtype {}, expected {}", name, field, c10::toString(t.scalar_type()), fmt::join(names, " or "));
  return t.contiguous();
}

void check_finite(const at::Tensor& values, std::string_view name, std::string_view field) {
  const at::Tensor v = values.contiguous();
  const float* p = v.data_ptr<float>();
  for (std::int64_t i = 0; i < v.numel(); ++i)
    QEVAL_CHECK(std::isfinite(p[i]), "{}: {} holds a non-finite value {} at flat index {}", name, field, p[i], i);
}

at::Tensor float32_scales(const at::Tensor& scales, std::string_view name, std::string_view field) {
  QEVAL_CHECK(scales.defined(), "{}: {} is missing", name, field);
  const at::ScalarType d = scales.scalar_type();
  QEVAL_CHECK(d == at::kFloat || d == at::kHalf || d == at::kBFloat16, "{}: {} has dtype {}, expected float32, float16 or bfloat16",
              name, field, c10::toString(d));
  at::Tensor s = scales.to(at::kFloat).contiguous();
  check_finite(s, name, field);
  return s;
}

at::Tensor e4m3_to_float32(const at::Tensor& bytes, std::string_view name, std::string_view field, bool finite_only) {
  QEVAL_CHECK(bytes.defined(), "{}: {} is missing", name, field);
  QEVAL_CHECK(bytes.scalar_type() == at::kByte, "{}: {} has dtype {}, expected E4M3 bytes (uint8)", name, field,
              c10::toString(bytes.scalar_type()));
  const at::Tensor b = bytes.contiguous();
  at::Tensor out = at::empty(b.sizes(), at::kFloat);
  const std::uint8_t* p = b.data_ptr<std::uint8_t>();
  float* o = out.data_ptr<float>();
  float table[256];
  for (int c = 0; c < 256; ++c)  // element_value decodes finite codes only: S.1111.111 is E4M3's NaN
    table[c] = (c & 0x7f) == 0x7f ? std::nanf("") : element_value(static_cast<std::uint8_t>(c), ElementType::e4m3);
  if (finite_only) {  // scales: few, and the first NaN code is named by its flat index
    for (std::int64_t i = 0; i < b.numel(); ++i) {
      o[i] = table[p[i]];
      QEVAL_CHECK(std::isfinite(o[i]), "{}: {} holds the E4M3 NaN code 0x{:02x} at flat index {}", name, field, p[i], i);
    }
    return out;
  }
  at::parallel_for(0, b.numel(), 1 << 16, [&](std::int64_t i0, std::int64_t i1) {
    for (std::int64_t i = i0; i < i1; ++i) o[i] = table[p[i]];
  });
  return out;
}

}  // namespace qeval
