#include "eval/schemes.h"

#include "common/error.h"

namespace qeval {

std::vector<std::string> parse_scheme_list(const std::string& list) {
  std::vector<std::string> names;
  std::size_t start = 0;
  while (start <= list.size()) {
    std::size_t comma = list.find(',', start);
    std::string name = list.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    if (!name.empty()) {
      for (const auto& seen : names) QEVAL_CHECK(seen != name, "--schemes: '{}' is listed twice", name);
      names.push_back(name);
    }
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  auto full = std::find(names.begin(), names.end(), "full");
  if (full == names.end())
    names.insert(names.begin(), "full");
  else
    std::rotate(names.begin(), full, full + 1);
  return names;
}

std::vector<EvalScheme> make_schemes(const Transformer& full, const std::vector<std::string>& names) {
  std::vector<EvalScheme> schemes;
  for (const auto& name : names) {
    QEVAL_CHECK(name == "full", "unknown scheme '{}': quantisation schemes are not built into this qeval yet", name);
    EvalScheme s{name, full, {{"execution", "fp32"}}, nullptr, {}};
    schemes.push_back(std::move(s));
  }
  return schemes;
}

}  // namespace qeval
