// GGUF (llama.cpp's model file), versions 2 and 3, little-endian:
//   "GGUF" u32 version, u64 n_tensors, u64 n_kv,
//   n_kv × (string key, u32 value type, value)        strings are u64 length + bytes,
//   n_tensors × (string name, u32 n_dims, u64 ne[n_dims], u32 ggml type, u64 offset),
//   padding to `general.alignment` (default 32), then the data area; offsets are relative to it.
// Dimensions are listed fastest-first: ne[0] is the number of columns, so an [out, in] matrix
// is stored with ne = {in, out}; shape() returns the row-major (PyTorch) order, ne reversed.
//
// Everything is validated on open: counts, string and array lengths bounded by the bytes left
// in the file (before allocating), value types, duplicate keys and names, dimensions, tensor
// spans inside the data area, aligned and not overlapping; rows (ne[0]) a whole number of
// blocks for block types. Tensor data is read on demand.
#pragma once

#include <ATen/ATen.h>

#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "quant/formats/ggml/blocks.h"  // ggml_type_name, ggml_type_traits: the codecs' table of ggml types

namespace qeval {

struct GgufTensorInfo {
  std::string name;
  std::vector<std::uint64_t> ne;  // fastest-first, as stored
  std::uint32_t type = 0;         // ggml type id (0 F32, 1 F16, 30 BF16, ...)
  std::uint64_t offset = 0;       // inside the data area
  std::uint64_t bytes = 0;        // n_elements / block * bytes per block; 0 for unknown type ids
  std::vector<std::int64_t> shape() const;  // row-major: ne reversed
};

class TensorHashes;

class GgufFile {
 public:
  // Parses and validates the header; throws qeval::Error naming the file, what was expected
  // and what was found (including where the file ends too early).
  explicit GgufFile(std::filesystem::path path);

  const std::filesystem::path& path() const { return path_; }
  std::uint32_t version() const { return version_; }
  std::uint64_t alignment() const { return alignment_; }
  std::uint64_t data_offset() const { return data_offset_; }

  // Metadata values as JSON (integers, floats, bools, strings as their raw bytes, arrays as
  // arrays; dump with nlohmann::json::error_handler_t::replace, token strings may not be UTF-8).
  const nlohmann::json& metadata() const { return metadata_; }
  bool has(const std::string& key) const { return metadata_.contains(key); }
  // GGUF value type of a key (0 u8, 1 i8, 2 u16, 3 i16, 4 u32, 5 i32, 6 f32, 7 bool, 8 string,
  // 9 array, 10 u64, 11 i64, 12 f64).
  std::uint32_t value_type(const std::string& key) const;

  const std::vector<GgufTensorInfo>& tensors() const { return tensors_; }
  bool has_tensor(const std::string& name) const { return index_.count(name) != 0; }
  const GgufTensorInfo& tensor(const std::string& name) const;  // throws naming the file when missing

  // The tensor as an owned float32 tensor of shape(): F32 as stored, F16/BF16 widened, and
  // the block types Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ4_NL, MXFP4
  // dequantised (quant/formats/ggml/blocks.h; bit-identical to llama.cpp's gguf.quants.dequantize; every type
  // quant/formats/ggml/quants.h writes). Any other type (IQ4_XS and the other IQ*, TQ*, Q8_1, Q8_K,
  // integers, F64, ...) is refused with an error naming the file, the tensor and its type.
  at::Tensor read_float32(const std::string& name) const;
  // Rows [begin, begin + count) of shape()'s first axis, read by offset and dequantised the same
  // way (a row is a whole number of blocks, so the values are those of read_float32).
  at::Tensor read_float32_rows(const std::string& name, std::int64_t begin, std::int64_t count) const;

  // Registers every tensor with `hashes` (stored bytes: blocks as they are) and hands it the bytes
  // of every later read (loaders/checkpoints/weights_hash.h).
  void hash_reads_into(std::shared_ptr<TensorHashes> hashes);

 private:
  std::filesystem::path path_;
  std::shared_ptr<TensorHashes> hashes_;  // null: reads are not hashed
  std::uint32_t version_ = 0;
  std::uint64_t alignment_ = 32;
  std::uint64_t data_offset_ = 0;
  nlohmann::json metadata_ = nlohmann::json::object();
  std::map<std::string, std::uint32_t> value_types_;
  std::vector<GgufTensorInfo> tensors_;
  std::map<std::string, std::size_t> index_;
};

}  // namespace qeval
