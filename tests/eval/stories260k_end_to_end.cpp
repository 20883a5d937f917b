#include "tests/eval/stories260k_end_to_end.h"

#include <stdexcept>

#include "loaders/checkpoints/checkpoint.h"
#include "model/linear.h"
#include "tests/support/test_data.h"

namespace qeval::test {

std::vector<Window> windows_of(const nlohmann::json& ids, std::int64_t first_index) {
  std::vector<Window> out;
  for (const nlohmann::json& w : ids) {
    Window window;
    window.index = first_index + static_cast<std::int64_t>(out.size());
    window.tokens = w.get<std::vector<std::int32_t>>();
    out.push_back(std::move(window));
  }
  return out;
}

Transformer stories260k() {
  const auto path = data_path("models/stories260K/stories260K.bin");
  LoadedCheckpoint ckpt = load_checkpoint(path);
  return Transformer(ckpt.config, ckpt.weights, path.string());
}

at::Tensor token_nll(const Transformer& model, const std::vector<Window>& windows) {
  std::vector<at::Tensor> parts;
  for (const Window& w : windows) {
    std::vector<std::int64_t> ids(w.tokens.begin(), w.tokens.end());
    const at::Tensor tokens = at::tensor(ids, at::kLong).unsqueeze(0);                      // [1, L]
    const at::Tensor logp = at::log_softmax(model.forward(tokens)[0].to(at::kDouble), -1);  // [L, V]
    const std::int64_t L = tokens.size(1);
    parts.push_back(-logp.slice(0, 0, L - 1).gather(1, tokens[0].slice(0, 1).unsqueeze(1)).squeeze(1));
  }
  return at::cat(parts);
}

const at::Tensor& float_weight_of(const Transformer& model, const std::string& name) {
  for (const NamedLinear& l : model.linears())
    if (l.name == name) {
      const auto* f = dynamic_cast<const FloatLinear*>(l.linear.get());
      if (f == nullptr) throw std::runtime_error("float_weight_of: " + name + " is " + l.linear->describe());
      return f->weight();
    }
  throw std::runtime_error("float_weight_of: no linear " + name);
}

int hex_digit(const std::string& hex, std::size_t i) {
  const char c = hex.at(i);
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  throw std::runtime_error(std::string("hex_digit: '") + c + "' at " + std::to_string(i));
}

}  // namespace qeval::test
