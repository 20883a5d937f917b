// Documents: validation text streamed one document at a time, so memory does not grow with
// the file. Plain text and JSON lines with a "text" field (.jsonl, .json, .jsonl.gz, .json.gz,
// .jsonl.zst, .txt.gz, .txt.bz2, ...), decompressed on the fly.
//
// Format by name (case-insensitive): a last extension `.gz` (gzip), `.zst` (zstd) or `.bz2` (bzip2) is
// stripped and decompressed; then `.jsonl` or `.json` means JSON lines (the C4 shards are
// `.json.gz` holding JSON lines) and anything else is plain text (`.txt`, `.txt.gz`, ...).
//
// JSON lines: every line that is not blank (empty or only spaces, tabs, '\r') must be a JSON
// object whose `json_field` is a string; that string is the document, even when it is empty
// (WikiText's empty rows come back as ""; a protocol may skip them). Anything else throws
// naming the file, the 1-based line number and what was found.
//
// Plain text, with "blank line" meaning a line that is empty or only spaces, tabs and '\r':
//   paragraph  a document is a maximal run of non-blank lines, i.e. the lines between blank
//              lines (or the start / end of the file), joined with '\n'. Runs of several blank
//              lines separate just once; the document has no trailing or leading blank line.
//   line       every non-blank line is a document.
//   file       the whole file, byte for byte, is one document (none when the file is empty).
// Line ends are '\n'; a '\r' before it is kept as data (only blank-line detection ignores it),
// and a last line without '\n' is a line. No other whitespace is trimmed.
//
// Memory: one line (paragraph mode: one document; file mode: the whole file) may hold at most
// max_document_bytes, else the reader throws naming the file and line; compressed input is read
// in fixed chunks.
#pragma once

#include <cstddef>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>

namespace qeval {

enum class TextSplit {
  paragraph,  // plain text: a document is a run of lines ended by a blank line (default)
  line,       // plain text: every non-blank line is a document
  file,       // plain text: the whole file is one document (not streamed; WikiText's join convention)
};

struct DocumentOptions {
  TextSplit text_split = TextSplit::paragraph;
  std::string json_field = "text";
  std::size_t max_document_bytes = std::size_t{256} << 20;  // 256 MiB
};

class DocumentReader {
 public:
  virtual ~DocumentReader() = default;
  // The next document, or nullopt at the end. Throws qeval::Error naming the file and the
  // line (or byte offset) when the input is malformed or corrupt.
  virtual std::optional<std::string> next() = 0;
  // What was read: "text", "jsonl", with ".gz" or ".zst" added when decompressed
  virtual std::string format() const = 0;
};

std::unique_ptr<DocumentReader> open_documents(const std::filesystem::path& path, const DocumentOptions& options = {});
// The same with the format forced instead of taken from the name (compression still is).
std::unique_ptr<DocumentReader> open_text_documents(const std::filesystem::path& path, const DocumentOptions& options = {});
std::unique_ptr<DocumentReader> open_jsonl_documents(const std::filesystem::path& path, const DocumentOptions& options = {});

std::string to_string(TextSplit split);
TextSplit parse_text_split(const std::string& name);  // throws with the valid names

}  // namespace qeval
