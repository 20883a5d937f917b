#include "quant/schemes/presets.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <filesystem>

#include "common/error.h"
#include "common/files.h"
#include "common/json_diff.h"
#include "common/printable.h"
#include "common/strict_json.h"
#include "quant/schemes/presets_embedded.h"
#include "quant/schemes/scheme_json.h"

namespace qeval {

std::vector<std::string> preset_names() {
  std::vector<std::string> names;
  for (const auto& p : detail::embedded_presets()) names.push_back(p.name);
  return names;
}

const std::string& preset_json_text(const std::string& name) {
  for (const auto& p : detail::embedded_presets())
    if (p.name == name) return p.json;
  fail("unknown scheme preset '{}'; presets: {}", name, fmt::join(preset_names(), ", "));
}

bool is_preset_name(const std::string& name) {
  for (const auto& p : detail::embedded_presets())
    if (p.name == name) return true;
  return false;
}

std::vector<std::string> differences_from_preset(const SchemeSpec& spec, const SchemeSpec& preset, std::size_t limit) {
  nlohmann::json a = scheme_to_json(spec), b = scheme_to_json(preset);
  a.erase("description"), b.erase("description");  // free text, not the definition
  return json_differences(a, b, limit);
}

SchemeSpec preset_scheme(const std::string& name) {
  const std::string source = fmt::format("scheme preset {} (configs/schemes/{}.json)", name, name);
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(preset_json_text(name));
  } catch (const nlohmann::json::parse_error& e) {
    fail("{}: invalid JSON: {}", source, e.what());
  }
  return scheme_from_json(j, source);
}

SchemeSpec resolve_scheme(const std::string& name_or_path) {
  if (is_preset_name(name_or_path)) return preset_scheme(name_or_path);
  const std::filesystem::path path(name_or_path);
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec))
    fail("unknown scheme '{}': neither a preset name (presets: {}) nor a path to a JSON scheme file", name_or_path,
         fmt::join(preset_names(), ", "));
  // Strict: a key given twice ("kv_cache" or "format" twice) is refused, never the last one taken.
  const nlohmann::json j = parse_json_strict(read_file(path), "scheme file " + path.string());
  SchemeSpec s = scheme_from_json(j, "scheme file " + path.string());
  // A ggml scheme's importance matrix is named relative to the scheme file.
  if (!s.weights.ggml_imatrix.empty() && std::filesystem::path(s.weights.ggml_imatrix).is_relative())
    s.weights.ggml_imatrix = (path.parent_path() / s.weights.ggml_imatrix).lexically_normal().string();
  if (!j.contains("name")) {
    s.name = path.stem().string();
    QEVAL_CHECK(!has_control_byte(s.name),
                "scheme file {}: a scheme is named after its file when it has no \"name\", and this file's name holds "
                "control characters; add a \"name\" key", in_quotes(path.string()));
    QEVAL_CHECK(!is_rounding_variant_form(s.name),
                "scheme file {}: a scheme is named after its file when it has no \"name\", and {} has the form "
                "\"<scheme>~r<seed>\" of a rounding variant (--rounding-band); add a \"name\" key of another form",
                in_quotes(path.string()), in_quotes(s.name));
  }
  return s;
}

}  // namespace qeval
