#include "loaders/checkpoints/tensor_map.h"

#include "common/error.h"
#include "loaders/checkpoints/checkpoint_internal.h"

namespace qeval {

at::Tensor TensorMap::take(const std::string& name, const std::vector<std::int64_t>& shape) {
  auto it = tensors_.find(name);
  QEVAL_CHECK(it != tensors_.end(), "{}: missing tensor {} (expected shape {})", source_, name, shape_string(shape));
  const at::Tensor& t = it->second;
  QEVAL_CHECK(t.sizes().vec() == shape, "{}: tensor {} has shape {}, expected {}", source_, name,
              shape_string(t.sizes().vec()), shape_string(shape));
  QEVAL_CHECK(at::isFloatingType(t.scalar_type()), "{}: tensor {} has dtype {}, expected a floating-point type", source_,
              name, std::string(c10::toString(t.scalar_type())));
  used_.insert(name);
  return t.to(at::kFloat).contiguous().clone();
}

std::vector<std::string> TensorMap::unused() const {
  std::vector<std::string> out;
  for (const auto& [name, t] : tensors_)
    if (!used_.count(name)) out.push_back(name);
  return out;
}

}  // namespace qeval
