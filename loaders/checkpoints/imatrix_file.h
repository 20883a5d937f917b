// llama.cpp's importance matrix files: what llama-imatrix writes and llama-quantize --imatrix
// reads, at llama.cpp 0c1e57098 (the copy llama-cpp-python 0.3.36 vendors: tools/imatrix/
// imatrix.cpp's save_imatrix / save_imatrix_legacy, common/imatrix-loader.cpp's
// common_imatrix_load, tools/quantize/quantize.cpp's load_imatrix). Two formats:
//
//   GGUF (llama.cpp's default, ".gguf"): KV general.type = "imatrix", imatrix.datasets
//   (array of strings), imatrix.chunk_count and imatrix.chunk_size (u32); per weight tensor W two
//   F32 tensors, "W.in_sum2" ne = {columns, matrices} (Σ over tokens of the input activation²,
//   per column and per expert matrix) and "W.counts" ne = {1, matrices} (tokens per matrix, as
//   floats), names sorted, in_sum2 before counts; dimensions as ggml_n_dims (a trailing 1 dropped).
//
//   legacy (".dat"): i32 n_entries; per entry i32 name length, the name, i32 ncall, i32 nval,
//   nval f32 values (sum / count · ncall); then optionally i32 chunk count, i32 length and the
//   dataset's name. Little-endian, no padding.
//
// Imatrix holds a file's contents as common_imatrix does (raw sums and counts; a legacy file's
// normalised values with counts {ncall}); GgmlImportance holds the per-column weights that
// llama-quantize computes from them and hands to ggml_quantize_chunk (quant/formats/ggml/quants.h,
// `importance`): sum / count per expert matrix (1 where a matrix saw no token), or for a legacy
// file value / ncall.
//
// Reading checks what llama.cpp's loader checks and what it would crash on (lengths past the end,
// counts not dividing sums, a chunk count of the wrong type, non-finite weights, which
// llama-quantize refuses); errors name the file, what was expected and what was found. Where
// llama.cpp falls back to the legacy reader on any GGUF it cannot parse, qeval reads a file that
// starts with "GGUF" as GGUF and reports its errors as such.
#pragma once

#include <ATen/ATen.h>

#include <cstdint>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

namespace qeval {

// One weight tensor's statistics (common_imatrix_entry).
struct ImatrixEntry {
  // [matrices × columns], matrix-major: GGUF's in_sum2 (Σ activation² per column and matrix);
  // a legacy file's stored values (sum / count · ncall).
  std::vector<float> sums;
  // [matrices]: tokens summed per matrix (GGUF, rounded as llama.cpp's lround); legacy: {ncall}.
  std::vector<std::int64_t> counts;
  std::int64_t matrices() const { return static_cast<std::int64_t>(counts.size()); }
  std::int64_t columns() const;  // sums.size() / counts.size()
};

struct Imatrix {
  std::map<std::string, ImatrixEntry> entries;  // by weight tensor name, e.g. "blk.0.attn_q.weight"
  std::vector<std::string> datasets;            // the calibration text files, as llama-imatrix names them
  std::int32_t chunk_count = 0;                 // chunks of calibration text seen
  std::int32_t chunk_size = 0;                  // tokens per chunk (n_ctx / n_parallel); 0 in legacy files
  bool legacy = false;                          // read from the legacy format
  bool has_metadata = false;                    // GGUF: all three imatrix.* keys present
};

// Reads either format: GGUF when the file starts with "GGUF", the legacy format otherwise.
Imatrix read_imatrix(const std::filesystem::path& path);

// Writes `m` as llama-imatrix's save_imatrix does (GGUF, the same bytes for the same contents):
// entries sorted by name, general.type, imatrix.datasets, imatrix.chunk_count, imatrix.chunk_size.
// Every entry needs counts (one per matrix) dividing its sums; the error names the entry.
void write_imatrix_gguf(const Imatrix& m, const std::filesystem::path& path);

// Writes `m` (raw sums and counts, as collected) as save_imatrix_legacy does: entries whose
// counts are all zero skipped; ncall = ceil(max count / chunk_size); values (sum / count) · ncall,
// 1 · ncall where a matrix's count is 0; chunk_count and the last dataset at the end. Needs
// m.chunk_size > 0.
void write_imatrix_legacy(const Imatrix& m, const std::filesystem::path& path);

// The per-column importance of one weight tensor, as llama-quantize computes it.
struct GgmlImportanceEntry {
  std::vector<float> values;          // [matrices × columns], matrix e's weights at [e·columns, (e+1)·columns)
  std::vector<std::int64_t> counts;   // as in the file (tokens per matrix; legacy: {ncall})
  std::int64_t columns = 0;           // GGUF: values / matrices; legacy: all values (no expert split stored)
};

struct GgmlImportance {
  std::map<std::string, GgmlImportanceEntry> entries;
  std::vector<std::string> datasets;
  std::int32_t chunk_count = 0;
  std::filesystem::path source;  // for errors

  const GgmlImportanceEntry* find(const std::string& name) const;
  // The importance for weight `name` quantised as rows of `columns` values in `experts` groups
  // (1 for a 2-D weight; E for a 3-D expert tensor [E, rows, columns]): a [experts, columns]
  // float32 tensor for quantize_ggml / quantize_dequantize_ggml (quant/formats/ggml/quants.h).
  // Undefined (not .defined()) when the file has no entry for `name`, as llama-quantize then
  // quantises without; throws when it has one of another size (llama-quantize: "imatrix size %d is
  // different from tensor size %d"), naming the file, the tensor and both sizes.
  at::Tensor tensor_for(const std::string& name, std::int64_t experts, std::int64_t columns) const;
};

// llama-quantize's load_imatrix on `m`: refuses a GGUF without the imatrix.* metadata and
// non-finite weights; `source` names the file in errors.
GgmlImportance ggml_importance(const Imatrix& m, const std::filesystem::path& source);

// read_imatrix + ggml_importance.
GgmlImportance read_ggml_importance(const std::filesystem::path& path);

}  // namespace qeval
