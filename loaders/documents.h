// Documents: validation text streamed one document at a time, so memory does not grow with
// the file. Plain text, JSON lines with a "text" field (.jsonl, .json, .jsonl.gz, .json.gz,
// .jsonl.zst, .zst), decompressed on the fly.
#pragma once

#include <filesystem>
#include <memory>
#include <optional>
#include <string>

namespace qeval {

enum class TextSplit {
  paragraph,  // plain text: a document is a run of lines ended by a blank line (default)
  line,       // plain text: every non-empty line is a document
  file,       // plain text: the whole file is one document (not streamed; WikiText's join convention)
};

struct DocumentOptions {
  TextSplit text_split = TextSplit::paragraph;
  std::string json_field = "text";
};

class DocumentReader {
 public:
  virtual ~DocumentReader() = default;
  // The next document, or nullopt at the end. Throws qeval::Error naming the file and the
  // line (or byte offset) when the input is malformed or corrupt.
  virtual std::optional<std::string> next() = 0;
  // What was read: "text", "jsonl", "jsonl.gz", "jsonl.zst"
  virtual std::string format() const = 0;
};

std::unique_ptr<DocumentReader> open_documents(const std::filesystem::path& path, const DocumentOptions& options = {});

std::string to_string(TextSplit split);
TextSplit parse_text_split(const std::string& name);  // throws with the valid names

}  // namespace qeval
