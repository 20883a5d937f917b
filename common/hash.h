// Streaming 64-bit content hashes (XXH3) for token streams, weights and data files.
// Hashes are printed as 16 lowercase hex digits in result records.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <string_view>

namespace qeval {

class Hasher {
 public:
  Hasher();
  ~Hasher();
  Hasher(const Hasher&) = delete;
  Hasher& operator=(const Hasher&) = delete;

  void update(const void* data, std::size_t bytes);
  void update(std::string_view text) { update(text.data(), text.size()); }
  template <typename T>
  void update_value(const T& value) { update(&value, sizeof(T)); }

  std::uint64_t digest() const;
  std::string hex() const;

 private:
  struct State;
  std::unique_ptr<State> state_;
};

std::string hash_hex(std::uint64_t value);
// Hash of a whole file's bytes, streamed.
std::string hash_file(const std::filesystem::path& path);

}  // namespace qeval
