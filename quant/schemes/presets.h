// The built-in scheme presets: configs/schemes/<name>.json, compiled into the library by
// quant/schemes/presets.cmake (presets_embedded.h), so any working directory finds them; a path to
// a JSON file gives any other scheme.
#pragma once

#include <string>
#include <vector>

#include "quant/schemes/spec.h"

namespace qeval {

// Preset names in a fixed order: full, int8-fine, int8-moderate, int8-coarse, int8-vectorwise,
// w4-zeropoint, w4-zeropoint-g128, int8-moderate-keep1, int8-coarse-keep1, int8-mixed.
std::vector<std::string> preset_names();
// Whether `name` is a built-in preset's.
bool is_preset_name(const std::string& name);
// The built-in preset (throws listing the presets for an unknown name).
SchemeSpec preset_scheme(const std::string& name);
// The preset's JSON text exactly as compiled in from configs/schemes/<name>.json.
const std::string& preset_json_text(const std::string& name);

// A preset name, or a path to a JSON spec file. An unknown name that is not a readable file
// fails listing the presets; an invalid file fails naming the file and the bad field.
SchemeSpec resolve_scheme(const std::string& name_or_path);

// Where `spec` differs from `preset` ("weights.granularity: \"channel\" vs \"tensor\"", spec's value
// first), their free-text descriptions aside; at most `limit` entries, none when it is that preset.
// The one rule for "a scheme under a preset's name is that preset" (eval's scheme files, records).
std::vector<std::string> differences_from_preset(const SchemeSpec& spec, const SchemeSpec& preset, std::size_t limit);

}  // namespace qeval
