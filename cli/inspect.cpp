// `qeval inspect`: what a checkpoint, tokenizer or data file holds (architecture, shapes,
// dtypes, token counts), as text or JSON.
#include <fmt/core.h>
#include <fmt/ranges.h>

#include "cli/commands.h"
#include "cli/json_config.h"
#include "common/error.h"
#include "common/files.h"
#include "common/hash.h"
#include "loaders/checkpoint.h"
#include "loaders/documents.h"
#include "loaders/protocol.h"
#include "loaders/tokenizer.h"
#include "model/transformer.h"

namespace qeval::cli {
namespace {

struct InspectArgs {
  std::string path, model, tokenizer, data, data_dir;
  std::int64_t seq_len = 512;
  std::string text_split = "paragraph";
  bool json = false;
};

std::optional<std::string> opt(const std::string& s) { return s.empty() ? std::nullopt : std::optional<std::string>(s); }

nlohmann::json inspect_model(const std::filesystem::path& path) {
  LoadedCheckpoint ck = load_checkpoint(path);
  Transformer model(ck.config, ck.weights, path.string());
  nlohmann::json linears = nlohmann::json::array();
  for (const auto& l : model.linears())
    linears.push_back({{"name", l.name}, {"in", l.linear->in_features()}, {"out", l.linear->out_features()}});
  return {{"path", path.string()},   {"format", ck.format},
          {"weights_hash", ck.weights_hash}, {"config", config_to_json(ck.config)},
          {"parameters", ck.config.parameter_count()}, {"linear_weight_bytes_fp32", model.linear_weight_bytes()},
          {"linears", linears},     {"notes", ck.notes}};
}

nlohmann::json inspect_tokenizer(const Tokenizer& tok, const std::filesystem::path& path) {
  auto id = [](std::optional<std::int32_t> v) { return v ? nlohmann::json(*v) : nlohmann::json(nullptr); };
  const std::string sample = "Hello world! It's 2026.";
  return {{"path", path.string()},          {"kind", tok.kind()},
          {"vocab_size", tok.vocab_size()}, {"bos_id", id(tok.bos_id())},
          {"eos_id", id(tok.eos_id())},     {"document_separator", id(tok.document_separator())},
          {"sample", sample},               {"sample_ids", tok.encode(sample)}};
}

nlohmann::json inspect_data(const std::filesystem::path& path, const InspectArgs& a, const Tokenizer* tok) {
  DocumentOptions options;
  options.text_split = parse_text_split(a.text_split);
  auto docs = open_documents(path, options);
  nlohmann::json j = {{"path", path.string()}, {"format", docs->format()}, {"bytes", qeval::file_size(path)},
                      {"hash", hash_file(path)}, {"text_split", a.text_split}};
  if (!tok) {
    std::int64_t count = 0, chars = 0;
    while (auto d = docs->next()) ++count, chars += static_cast<std::int64_t>(d->size());
    j["documents"] = count;
    j["text_bytes"] = chars;
    return j;
  }
  ProtocolSpec spec;
  spec.seq_len = a.seq_len;
  WindowStream windows(std::move(docs), *tok, spec);
  std::int64_t n = 0;
  while (windows.next()) ++n;
  j["documents"] = windows.documents_read();
  j["tokens_with_separators"] = windows.stream_tokens();
  j["protocols"] = {{"windows", {{"seq_len", a.seq_len}, {"windows", n}, {"scored_tokens", n * (a.seq_len - 1)}}}};
  return j;
}

void print_text(const nlohmann::json& report) {
  for (const auto& [section, body] : report.items()) {
    fmt::print("## {}\n", section);
    for (const auto& [key, value] : body.items()) {
      if (key == "linears") {
        fmt::print("  linears ({}):\n", value.size());
        for (const auto& l : value)
          fmt::print("    {:<22} [{} -> {}]\n", l.at("name").get<std::string>(), l.at("in").get<std::int64_t>(),
                     l.at("out").get<std::int64_t>());
      } else {
        fmt::print("  {:<24} {}\n", key, value.is_string() ? value.get<std::string>() : value.dump());
      }
    }
  }
}

void run_inspect(InspectArgs a) {
  const auto dir = opt(a.data_dir);
  if (!a.path.empty()) {
    // One positional path: guess its role from its name.
    std::filesystem::path p = resolve_input_path(a.path, dir);
    std::string name = p.filename().string();
    auto ends = [&](const std::string& suffix) {
      return name.size() >= suffix.size() && name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0;
    };
    if (std::filesystem::is_directory(p) || ends(".gguf") || (ends(".bin") && name.rfind("tok", 0) != 0))
      a.model = p.string();
    else if (ends(".model") || ends(".bin") || name == "encoder.json" || name == "vocab.json" || name == "tokenizer.json")
      a.tokenizer = p.string();
    else
      a.data = p.string();
  }
  QEVAL_CHECK(!a.model.empty() || !a.tokenizer.empty() || !a.data.empty(),
              "inspect: give a path, or --model / --tokenizer / --data");
  nlohmann::json report = nlohmann::json::object();
  std::unique_ptr<Tokenizer> tok;
  if (!a.model.empty()) report["model"] = inspect_model(resolve_input_path(a.model, dir));
  if (!a.tokenizer.empty()) {
    auto p = resolve_input_path(a.tokenizer, dir);
    tok = load_tokenizer(p);
    report["tokenizer"] = inspect_tokenizer(*tok, p);
  }
  if (!a.data.empty()) report["data"] = inspect_data(resolve_input_path(a.data, dir), a, tok.get());
  if (a.json)
    fmt::print("{}\n", report.dump(2));
  else
    print_text(report);
}

}  // namespace

void add_inspect_command(CLI::App& app) {
  auto args = std::make_shared<InspectArgs>();
  auto* cmd = app.add_subcommand("inspect", "what a checkpoint, tokenizer or data file holds");
  add_json_config(cmd);
  cmd->add_option("path", args->path, "a checkpoint, tokenizer or data file (role guessed from the name)");
  cmd->add_option("--model,-m", args->model, "checkpoint to describe");
  cmd->add_option("--tokenizer,-t", args->tokenizer, "tokenizer to describe (with --data: count tokens and windows)");
  cmd->add_option("--data,-d", args->data, "data file to describe");
  cmd->add_option("--data-dir", args->data_dir, "shared data folder (default: $QEVAL_DATA_DIR, else ../shared/data)");
  cmd->add_option("--seq-len", args->seq_len, "window length for the window count")->capture_default_str();
  cmd->add_option("--text-split", args->text_split, "plain-text documents: paragraph, line or file")
      ->capture_default_str()->check(CLI::IsMember({"paragraph", "line", "file"}));
  cmd->add_flag("--json", args->json, "print JSON instead of text");
  cmd->callback([args] { run_inspect(*args); });
}

}  // namespace qeval::cli
