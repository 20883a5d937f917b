// The central directory of a zip archive: each record's name and the uncompressed size it
// declares. torch.save archives are read by LibTorch's PyTorchStreamReader, whose getRecord()
// allocates whatever size the directory declares before reading a byte; qeval reads the directory
// first so that a damaged archive claiming a 4 GiB data.pkl is an error, never an allocation.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

namespace qeval {

struct ZipRecord {
  std::string name;
  std::uint64_t uncompressed_bytes = 0;
};

// The records in directory order, as miniz finds them (the end-of-central-directory record found
// scanning back from the end; zip64 fields where the 32-bit ones are saturated). Throws
// qeval::Error naming the file when the directory is missing, truncated or outside the file.
std::vector<ZipRecord> zip_directory(const std::filesystem::path& file);

}  // namespace qeval
