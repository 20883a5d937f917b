// File helpers shared by every reader and writer: whole-file reads with clear errors,
// atomic writes (temp file + rename, so a result is complete or absent), and the data folder.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

namespace qeval {

// Reads the whole file; throws naming the path when it cannot be opened or read.
std::string read_file(const std::filesystem::path& path);

// Size of a regular file in bytes; throws naming the path when it is missing.
std::uint64_t file_size(const std::filesystem::path& path);

// Writes `content` to `path` atomically: a temporary file in the same folder is written,
// flushed and renamed over `path`. On any failure the temporary file is removed and `path`
// is left as it was.
void write_file_atomic(const std::filesystem::path& path, const std::string& content);

// Checks, before any work, that `path` can be written as a file: it is not an existing folder, its
// folder exists and is writable, an existing file there is writable. Throws naming `option`
// ("--out") and the path, so a long run never fails at its very end ("cannot move ... into place").
void check_output_file(const std::filesystem::path& path, const std::string& option);

// The same for an output folder (created when missing, with its parents): `path` is not an
// existing file, and its nearest existing ancestor is a writable folder.
void check_output_folder(const std::filesystem::path& path, const std::string& option);

// The folder with the shared models, tokenizers and text (../shared/data).
// Order: `explicit_dir` (a --data-dir option) if given, else $QEVAL_DATA_DIR, else
// <repository root>/../shared/data. Throws with what was tried when the folder is missing.
std::filesystem::path resolve_data_dir(const std::optional<std::string>& explicit_dir = std::nullopt);

// Resolves `path` against the data folder when it does not exist as given and is relative:
// lets users write `models/stories260K/stories260K.bin` from anywhere.
std::filesystem::path resolve_input_path(const std::string& path,
                                         const std::optional<std::string>& data_dir = std::nullopt);

}  // namespace qeval
