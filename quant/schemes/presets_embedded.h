// The scheme presets' JSON text, compiled in from configs/schemes/ by quant/schemes/presets.cmake
// (the generated definition lives in the build folder: generated/scheme_presets.cpp).
#pragma once

#include <string>
#include <vector>

namespace qeval::detail {

struct EmbeddedPreset {
  std::string name;  // file name without .json
  std::string json;  // the file's text, byte for byte
};

// In the order of QEVAL_SCHEME_PRESETS.
const std::vector<EmbeddedPreset>& embedded_presets();

}  // namespace qeval::detail
