// Picks the document format from the file name (rules in documents.h).
#include "loaders/text/documents.h"

#include <algorithm>
#include <cctype>

#include "common/error.h"
#include "loaders/text/compressed_stream.h"

namespace qeval {
namespace {

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

bool is_json_lines_name(const std::filesystem::path& path) {
  std::string name = path.filename().string();
  std::transform(name.begin(), name.end(), name.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  if (compression_from_name(path) != Compression::none) name = name.substr(0, name.rfind('.'));
  return ends_with(name, ".jsonl") || ends_with(name, ".json");
}

}  // namespace

std::unique_ptr<DocumentReader> open_documents(const std::filesystem::path& path, const DocumentOptions& options) {
  // A device or a FIFO (/dev/zero, a pipe) never ends or cannot be read twice (the protocols read
  // the data again for calibration and hashing): only regular files are text (issue 51).
  std::error_code ec;
  const std::filesystem::file_status st = std::filesystem::status(path, ec);
  QEVAL_CHECK(!std::filesystem::exists(st) || std::filesystem::is_regular_file(st),
              "{}: not a regular file ({}); the data must be a text, JSON lines or compressed file",
              path.string(), std::filesystem::is_directory(st) ? "a folder" : std::filesystem::is_fifo(st) ? "a FIFO" :
              std::filesystem::is_character_file(st) || std::filesystem::is_block_file(st) ? "a device" : "not a file");
  if (is_json_lines_name(path)) return open_jsonl_documents(path, options);
  return open_text_documents(path, options);
}

std::string to_string(TextSplit split) {
  switch (split) {
    case TextSplit::paragraph:
      return "paragraph";
    case TextSplit::line:
      return "line";
    case TextSplit::file:
      return "file";
  }
  return "?";
}

TextSplit parse_text_split(const std::string& name) {
  for (TextSplit s : {TextSplit::paragraph, TextSplit::line, TextSplit::file}) {
    if (name == to_string(s)) return s;
  }
  fail("unknown text split '{}': expected one of paragraph, line, file", name);
}

}  // namespace qeval
