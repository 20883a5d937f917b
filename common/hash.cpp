#include "common/hash.h"

#include <fstream>
#include <vector>
#include <xxhash.h>

#include "common/error.h"

namespace qeval {

struct Hasher::State {
  XXH3_state_t* xxh = nullptr;
};

Hasher::Hasher() : state_(std::make_unique<State>()) {
  state_->xxh = XXH3_createState();
  QEVAL_CHECK(state_->xxh != nullptr, "hash: cannot allocate XXH3 state");
  XXH3_64bits_reset(state_->xxh);
}

Hasher::~Hasher() { XXH3_freeState(state_->xxh); }

void Hasher::update(const void* data, std::size_t bytes) { XXH3_64bits_update(state_->xxh, data, bytes); }

std::uint64_t Hasher::digest() const { return XXH3_64bits_digest(state_->xxh); }

std::string Hasher::hex() const { return hash_hex(digest()); }

std::string hash_hex(std::uint64_t value) { return fmt::format("{:016x}", value); }

std::string hash_file(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) fail("cannot open {} to hash it", path.string());
  Hasher hasher;
  std::vector<char> buffer(1 << 20);
  while (in) {
    in.read(buffer.data(), static_cast<std::streamsize>(buffer.size()));
    hasher.update(buffer.data(), static_cast<std::size_t>(in.gcount()));
  }
  return hasher.hex();
}

}  // namespace qeval
