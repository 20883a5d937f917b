// A checkpoint's tensors spread over one or more safetensors files (Hugging Face shards),
// looked up by name. Used by the folder loaders (Hugging Face and qeval's own); not a public
// interface beyond loaders/.
#pragma once

#include <ATen/ATen.h>

#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "common/page_cache.h"
#include "loaders/checkpoints/safetensors.h"

namespace qeval {

class SafetensorsSet {
 public:
  // `source` names the checkpoint (its folder) in errors.
  explicit SafetensorsSet(std::string source) : source_(std::move(source)) {}

  // Adds every tensor of `file`; a name already held by another file is an error naming both.
  void add(const std::filesystem::path& file);
  const std::vector<std::unique_ptr<SafetensorsFile>>& files() const { return files_; }
  std::vector<std::filesystem::path> paths() const;

  bool has(const std::string& name) const { return where_.count(name) != 0; }
  const SafetensorsFile& file_of(const std::string& name) const;  // throws like take() when missing

  // float32, contiguous, with the expected shape (errors name the file, the tensor, both
  // shapes); remembers the name as used.
  at::Tensor take(const std::string& name, const std::vector<std::int64_t>& shape);
  // Rows [begin, begin + count) of a tensor whose whole shape must be `shape`, read by offset
  // (loaders/checkpoints/model_reader.h); remembers the name as used.
  at::Tensor take_rows(const std::string& name, const std::vector<std::int64_t>& shape, std::int64_t begin,
                       std::int64_t count);
  // The tensor in its stored dtype (quantised codes, packed words, scales; F8 as uint8 bytes),
  // remembered as used; in header-only mode an empty tensor of its stored dtype and shape on the
  // meta device, no data read. Throws like take() when missing.
  at::Tensor take_stored(const std::string& name);
  const SafetensorsTensorInfo& header(const std::string& name) const { return file_of(name).info(name); }
  bool header_only() const { return header_only_; }
  // Names present in the files and never taken, in file order.
  std::vector<std::string> unused() const;
  // While on, take() checks the name, shape and dtype against the headers and returns an empty
  // float32 tensor of that shape on the meta device: no data is read (a reader checks a
  // checkpoint's layout and measures its parts this way on open).
  void set_header_only(bool on) { header_only_ = on; }
  // The file ranges of the tensors `reads` takes, found through the headers alone (header-only
  // mode for its duration: no tensor data is read): what a caller warms in the page cache before
  // the real reads (common/page_cache.h).
  std::vector<FileSpan> spans_taken_by(const std::function<void()>& reads);
  // The tensor bytes of every file, as stored.
  std::int64_t stored_bytes() const;
  // Every file's tensors registered with `hashes`, which is handed every read's bytes
  // (SafetensorsFile::hash_reads_into).
  void hash_reads_into(const std::shared_ptr<TensorHashes>& hashes);

 private:
  std::string source_;
  std::vector<std::unique_ptr<SafetensorsFile>> files_;
  std::map<std::string, std::size_t> where_;  // tensor name → index into files_
  std::set<std::string> used_;
  bool header_only_ = false;
  std::vector<std::string>* taken_ = nullptr;  // spans_taken_by's record of take()'s names
};

// Opens the weights of a Hugging Face-style folder: `model.safetensors.index.json` with its
// shards (every shard must exist, every indexed tensor must be in its shard and every shard
// tensor in the index, each tensor in exactly one shard), else `model.safetensors`. Throws
// naming the folder and what it holds when neither is there.
SafetensorsSet open_safetensors_folder(const std::filesystem::path& dir);

}  // namespace qeval
