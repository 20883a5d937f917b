// safetensors (the Hugging Face tensor file): 8-byte little-endian header length N, N bytes of
// JSON {name: {"dtype", "shape", "data_offsets": [begin, end]}, "__metadata__": {str: str}},
// then the data area; offsets are relative to the start of the data area.
//
// The reader validates the whole header before any tensor is used: N inside the file and at
// most 100 MB (the reference implementation's limit), a JSON object, every dtype known, shape ×
// dtype size == byte span, every span inside the data area, no two spans overlapping. Tensors
// are then read on demand from the file (no whole-file buffer) into owned CPU tensors.
// Assumes a little-endian host, as the format's data is little-endian.
#pragma once

#include <ATen/ATen.h>

#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace qeval {

class TensorHashes;

struct SafetensorsTensorInfo {
  std::string dtype;                // "F32", "F16", "BF16", "F64", "I64", "I32", "I16", "I8", "U8", "BOOL",
                                    // "F8_E4M3", "F8_E5M2"
  at::ScalarType scalar_type;       // the matching LibTorch dtype (uint8 for the F8 bytes: LibTorch 1.13 has
                                    // no float8)
  std::vector<std::int64_t> shape;  // row-major, outermost first
  std::uint64_t begin = 0;          // byte span [begin, end) inside the data area
  std::uint64_t end = 0;
};

// Where read_float32 makes whole tensors on this thread: the CPU, unless a ReadFloatsOnto scope
// names a GPU (issue 50). There the stored bytes (F16, BF16, F32, F64) are read into a pinned host
// buffer, copied to the device asynchronously and converted to float32 there, so a GPU plan holds
// no float32 copy of a layer on the host and the copy moves the stored bytes (half of float32's
// for F16 and BF16). The values are the same bits: widening F16 / BF16 to float32 is exact.
// Rows (read_float32_rows: embedding and LM head rows) stay on the CPU.
class ReadFloatsOnto {
 public:
  explicit ReadFloatsOnto(const at::Device& device);
  ~ReadFloatsOnto();
  ReadFloatsOnto(const ReadFloatsOnto&) = delete;
  // This thread's device for whole float32 tensors (the CPU outside any scope): where a reader
  // that makes float32 weights itself (a dequantising one) puts them.
  static at::Device current();
  ReadFloatsOnto& operator=(const ReadFloatsOnto&) = delete;

 private:
  at::Device previous_;
};

class SafetensorsFile {
 public:
  // Reads and validates the header; throws qeval::Error naming the file, the tensor, what was
  // expected and what was found.
  explicit SafetensorsFile(std::filesystem::path path);

  const std::filesystem::path& path() const { return path_; }
  // The "__metadata__" entry (empty when the file has none).
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  // Tensor names in the order of their data (ascending offsets).
  const std::vector<std::string>& names() const { return names_; }
  bool contains(const std::string& name) const { return infos_.count(name) != 0; }
  // Throws naming the file when `name` is absent.
  const SafetensorsTensorInfo& info(const std::string& name) const;
  // File offset of the data area (a tensor's bytes are [data_start() + begin, data_start() + end)).
  std::uint64_t data_start() const { return data_start_; }

  // The tensor in its stored dtype: owned, contiguous, on the CPU (in pinned memory when `pinned`,
  // which needs a CUDA LibTorch).
  at::Tensor read(const std::string& name, bool pinned = false) const;
  // The tensor as float32 (F16, BF16 and F64 are converted); integer and bool dtypes are refused.
  // On the device of this thread's ReadFloatsOnto scope, if any.
  at::Tensor read_float32(const std::string& name) const;
  // As read_float32, and checks the stored shape first (the error names both shapes).
  at::Tensor read_float32(const std::string& name, const std::vector<std::int64_t>& expected_shape) const;
  // Rows [begin, begin + count) along the first axis, as float32, read by offset (nothing else
  // of the tensor is read): [count, ...].
  at::Tensor read_float32_rows(const std::string& name, std::int64_t begin, std::int64_t count) const;

  // Registers every tensor of the file with `hashes` and hands it the bytes of every later read
  // (loaders/checkpoints/weights_hash.h): the weights hash comes from the reads themselves.
  void hash_reads_into(std::shared_ptr<TensorHashes> hashes);

 private:
  std::filesystem::path path_;
  std::shared_ptr<TensorHashes> hashes_;  // null: reads are not hashed
  std::uint64_t data_start_ = 0;  // file offset of the data area
  std::map<std::string, SafetensorsTensorInfo> infos_;
  std::vector<std::string> names_;
  std::map<std::string, std::string> metadata_;
};

// Every tensor of the file in its stored dtype, or as float32 when `to_float32` (then only
// floating-point tensors are accepted).
std::map<std::string, at::Tensor> read_safetensors(const std::filesystem::path& path, bool to_float32 = false);

// Writes the tensors (any of the dtypes above; CPU or not, contiguous or not) atomically
// (temp file + rename): data in name order, header padded with spaces to a multiple of 8
// bytes, as the reference implementation does. Throws naming the tensor on an unsupported dtype.
// `stored_dtypes` names the stored dtype of tensors whose LibTorch dtype stands for several
// (uint8 bytes written as "F8_E4M3" or "F8_E5M2"); the others are stored as their dtype.
void write_safetensors(const std::filesystem::path& path, const std::map<std::string, at::Tensor>& tensors,
                       const std::map<std::string, std::string>& metadata = {},
                       const std::map<std::string, std::string>& stored_dtypes = {});

}  // namespace qeval
