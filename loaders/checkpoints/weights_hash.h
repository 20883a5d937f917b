// The weights hash of a checkpoint (LoadedCheckpoint::weights_hash), computed from the bytes the
// evaluation reads anyway rather than by a second pass over the files (docs/weights-hash.md).
//
// Definition ("tensor-bytes-xxh3", kWeightsHashKind):
//   per tensor: XXH3-64 of its bytes as stored (the file's dtype, row-major, GGUF blocks as they
//   are), written as 16 lowercase hex digits;
//   the hash:   XXH3-64 over, for every tensor of the weight files in ascending byte order of its
//   name, the line  name \0 dtype \0 d0,d1,... \0 tensor-hash \n  (dtype and shape as the file
//   lists them, as `qeval inspect` shows them).
// So it is a function of the checkpoint's tensors alone: the same tensors split into other shards,
// stored in another order or read by another plan (streamed or resident, by rows or whole, on any
// number of threads) give the same hash; a changed byte, name, dtype or shape gives another.
// Headers, metadata and config.json are not in it (the record's config is compared on its own).
//
// How: the format readers hand every span of tensor bytes they read to saw(); a tensor's hash
// advances while its spans arrive in order from its start (a span read again, or a later span
// that skips ahead, is left alone). finish() reads from the files only the bytes no read has
// hashed yet (embedding rows a run never used, tensors no plan reads) and combines. A run that
// reads every weight therefore reads every byte once.
//
// The definition before it ("file-bytes-xxh3", kLegacyWeightsHashKind, records without
// weights_hash_kind): XXH3-64 of the one weight file's bytes, or for shards XXH3 over
// "filename\0file-hash\n" in filename order. legacy_file_bytes_hash() still computes it (a full
// read) so that older records can be checked against a checkpoint.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace qeval {

inline constexpr const char* kWeightsHashKind = "tensor-bytes-xxh3";
inline constexpr const char* kLegacyWeightsHashKind = "file-bytes-xxh3";

// The per-tensor hashes of one checkpoint; thread-safe (readers may run on several threads).
class TensorHashes {
 public:
  TensorHashes();
  ~TensorHashes();
  TensorHashes(const TensorHashes&) = delete;
  TensorHashes& operator=(const TensorHashes&) = delete;

  // Registers a tensor before any read: its bytes are [offset, offset + bytes) of `file` (empty
  // file: every byte will be handed to saw(), as for a format read whole into memory). A name
  // registered twice is an error.
  void add(const std::string& name, const std::string& dtype, const std::vector<std::int64_t>& shape,
           const std::filesystem::path& file, std::uint64_t offset, std::uint64_t bytes);
  bool has(const std::string& name) const;

  // Bytes [begin, begin + n) of tensor `name`'s stored bytes, as just read. Cheap when the span
  // was hashed before; unknown names are ignored (a reader's file not registered).
  void saw(const std::string& name, std::uint64_t begin, const void* data, std::uint64_t n);

  // Reads what no saw() covered, then combines (the definition above); the second call returns
  // the first's value. `bytes_read`, when given, receives how many bytes finish() read itself.
  std::string finish(std::uint64_t* bytes_read = nullptr);

  // The tensors' hashes (16 hex digits each) by name, once finish() has run.
  std::map<std::string, std::string> tensor_hashes() const;

 private:
  struct Entry;
  mutable std::mutex mutex_;  // guards the map; each entry has its own lock for hashing
  std::map<std::string, std::unique_ptr<Entry>> entries_;
  std::string result_;
};

// The combination step alone: tensor lines in name order (for tests and references).
struct TensorHashLine {
  std::string name, dtype;
  std::vector<std::int64_t> shape;
  std::string hash;  // 16 hex digits
};
std::string combine_tensor_hashes(std::vector<TensorHashLine> lines);

// The definition before tensor-bytes-xxh3 (see above), a full read of the files.
std::string legacy_file_bytes_hash(std::vector<std::filesystem::path> files);

// The definition a record's "model" section used for its weights_hash: its weights_hash_kind, or
// kLegacyWeightsHashKind when it has none (records written before the field existed). A value
// that is not a string is returned as its JSON text, which no definition matches.
std::string recorded_weights_hash_kind(const nlohmann::json& model);

}  // namespace qeval
