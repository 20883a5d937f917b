// `qeval inspect`: what a checkpoint, tokenizer or data file holds (architecture, shapes,
// dtypes, token counts), as text or JSON.
#include <fmt/core.h>
#include <fmt/ranges.h>

#include "cli/commands.h"
#include "cli/json_config.h"
#include "cli/option_checks.h"
#include "common/error.h"
#include "common/printable.h"
#include "common/files.h"
#include "common/hash.h"
#include "common/model_cache.h"
#include "loaders/checkpoints/model_reader.h"
#include "loaders/protocols/protocol.h"
#include "loaders/text/documents.h"
#include "loaders/text/token_file.h"
#include "loaders/tokenizers/tokenizer.h"
#include "model/config.h"

namespace qeval::cli {
namespace {

struct InspectArgs {
  std::string path, model, tokenizer, data, data_dir;
  std::int64_t seq_len = 0;      // 0: each protocol's own
  // A preset, a JSON protocol file, or `all`. Only `windows` (eval's default) by default: each
  // protocol tokenises the data again, and gptq-c4 may draw many documents.
  std::string protocol = "windows";
  std::string text_split;        // empty: each protocol's, else paragraph
  std::string token_dtype = "auto";
  bool json = false;
};

std::optional<std::string> optional_path(const std::string& s) { return s.empty() ? std::nullopt : std::optional<std::string>(s); }

// The linear layers a config implies, named as the Transformer names them (model/transformer.cpp).
nlohmann::json config_linears(const ModelConfig& c) {
  nlohmann::json out = nlohmann::json::array();
  auto add = [&](const std::string& name, std::int64_t in, std::int64_t out_features) {
    out.push_back({{"name", name}, {"in", in}, {"out", out_features}});
  };
  const std::int64_t D = c.d_model, F = c.d_ff, hd = c.head_dim();
  for (std::int64_t i = 0; i < c.n_layers; ++i) {
    const std::string p = fmt::format("layers.{}.", i);
    if (c.fused_qkv) {
      add(p + "attn.qkv", D, (c.n_heads + 2 * c.n_kv_heads) * hd);
    } else {
      add(p + "attn.q", D, c.n_heads * hd);
      add(p + "attn.k", D, c.n_kv_heads * hd);
      add(p + "attn.v", D, c.n_kv_heads * hd);
    }
    add(p + "attn.o", c.n_heads * hd, D);
    if (c.fused_gate_up) {
      add(p + "mlp.gate_up", D, 2 * F);
    } else {
      if (c.gated_mlp()) add(p + "mlp.gate", D, F);
      add(p + "mlp.up", D, F);
    }
    add(p + "mlp.down", F, D);
  }
  add("lm_head", D, c.vocab_size);
  return out;
}

// Through the reader eval uses (loaders/checkpoints/model_reader.h), so inspect refuses what eval
// refuses: opening checks the layout (every tensor the config implies, with its shape, none left
// over) from the headers, and a 70B checkpoint is described without reading its weights
// (safetensors, GGUF, llama2.c; a torch.save archive is read whole, as eval reads it). The weights
// hash needs every byte, so it is left to eval's record.
nlohmann::json inspect_model(const std::filesystem::path& path) {
  const std::unique_ptr<ModelReader> reader = open_checkpoint(path);
  const ModelConfig& config = reader->config();
  const std::vector<TensorHeader>& headers = reader->tensors();
  const nlohmann::json linears = config_linears(config);
  std::int64_t linear_bytes = 0;
  for (const auto& l : linears) linear_bytes += 4 * l.at("in").get<std::int64_t>() * l.at("out").get<std::int64_t>();
  nlohmann::json tensors = nlohmann::json::array();
  std::map<std::string, std::int64_t> dtypes;
  long double elements = 0;
  for (const auto& t : headers) {
    long double n = 1;
    for (std::int64_t d : t.shape) n *= static_cast<long double>(d);
    elements += n;
    ++dtypes[t.dtype];
    tensors.push_back({{"name", t.name}, {"dtype", t.dtype}, {"shape", t.shape}, {"file", t.file}});
    if (t.bytes >= 0) tensors.back()["bytes"] = t.bytes;
  }
  nlohmann::json j = {{"path", path.string()},
                      {"format", reader->info().format},
                      {"weights_hash", "not computed (inspect reads headers only; eval records it)"},
                      {"config", config_to_json(config)},
                      {"parameters", config.parameter_count()},
                      {"bytes_on_disk", reader->bytes_on_disk()},
                      {"linear_weight_bytes_fp32", linear_bytes},
                      {"linears", linears},
                      {"notes", reader->info().notes}};
  if (!headers.empty()) {
    j["tensor_count"] = headers.size();
    j["tensor_elements"] = static_cast<double>(elements);
    j["tensor_dtypes"] = dtypes;
    j["tensors"] = tensors;
  }
  return j;
}

nlohmann::json inspect_tokenizer(const Tokenizer& tok, const std::filesystem::path& path) {
  auto id = [](std::optional<std::int32_t> v) { return v ? nlohmann::json(*v) : nlohmann::json(nullptr); };
  const std::string sample = "Hello world! It's 2026.";
  return {{"path", path.string()},          {"kind", tok.kind()},
          {"vocab_size", tok.vocab_size()}, {"bos_id", id(tok.bos_id())},
          {"eos_id", id(tok.eos_id())},     {"document_separator", id(tok.document_separator())},
          {"sample", sample},               {"sample_ids", tok.encode(sample)}};
}

// Windows, scored tokens and the stream's token count under one protocol; an error (e.g.
// gptq-c4 on text without long documents) is reported, not thrown.
nlohmann::json count_protocol(const std::filesystem::path& path, const InspectArgs& a, const Tokenizer* tok,
                              ProtocolSpec spec) {
  try {
    nlohmann::json j = spec.to_json();
    if (a.seq_len > 0) j["seq_len"] = a.seq_len;
    if (!a.text_split.empty() && j.contains("text_split")) j["text_split"] = a.text_split;
    spec = ProtocolSpec::from_json(j, "inspect");
    WindowSourceOptions options;
    options.documents.text_split = spec.text_split.value_or(TextSplit::paragraph);
    // Without a tokenizer the ids of a token file are not checked against a vocabulary, and
    // the dtype is resolved without one (a stand-in vocabulary would sway `auto`).
    options.token_dtype = parse_token_dtype(a.token_dtype);
    if (is_token_file(path))
      options.token_dtype = probe_token_file(path, options.token_dtype, tok ? tok->vocab_size() : 0).dtype;
    options.vocab_size = tok ? tok->vocab_size() : std::int64_t{1} << 32;
    auto source = open_window_source(path, tok, spec, options);
    std::int64_t windows = 0, scored = 0;
    std::map<std::size_t, std::int64_t> lengths;
    while (auto w = source->next()) ++windows, scored += w->scored(), ++lengths[w->tokens.size()];
    nlohmann::json out = {{"parameters", spec.to_json()},   {"windows", windows},
                          {"scored_tokens", scored},        {"stream_tokens", source->stream_tokens()},
                          {"documents", source->documents_read()}, {"facts", source->facts()}};
    if (lengths.size() > 1) {
      nlohmann::json l = nlohmann::json::object();
      for (const auto& [len, n] : lengths) l[std::to_string(len)] = n;
      out["window_lengths"] = l;
    }
    return out;
  } catch (const Error& e) {
    return {{"error", e.what()}};
  }
}

nlohmann::json inspect_data(const std::filesystem::path& path, const InspectArgs& a, const Tokenizer* tok) {
  nlohmann::json j = {{"path", path.string()}, {"bytes", qeval::file_size(path)}, {"hash", hash_file(path)}};
  const bool tokens = is_token_file(path);
  if (tokens) {
    TokenFileInfo info = probe_token_file(path, parse_token_dtype(a.token_dtype), tok ? tok->vocab_size() : 0);
    j["format"] = "tokens-" + to_string(info.dtype);
    j["dtype_reason"] = info.dtype_reason;
    j["tokens"] = info.tokens;
  } else {
    DocumentOptions options;
    options.text_split = a.text_split.empty() ? TextSplit::paragraph : parse_text_split(a.text_split);
    auto docs = open_documents(path, options);
    j["format"] = docs->format();
    j["text_split"] = to_string(options.text_split);
    std::int64_t count = 0, chars = 0;
    while (auto d = docs->next()) ++count, chars += static_cast<std::int64_t>(d->size());
    j["documents"] = count;
    j["text_bytes"] = chars;
    if (!tok) return j;
  }
  // Tokens and windows per protocol (each with its own document split unless --text-split).
  nlohmann::json protocols = nlohmann::json::object();
  if (a.protocol == "all") {
    for (const auto& name : protocol_names()) protocols[name] = count_protocol(path, a, tok, ProtocolSpec::defaults_for(name));
  } else {
    ProtocolSpec spec = load_protocol(a.protocol);
    protocols[spec.name] = count_protocol(path, a, tok, spec);
  }
  j["protocols"] = protocols;
  return j;
}

std::string cell(const nlohmann::json& v) { return v.is_string() ? v.get<std::string>() : v.dump(); }

// Nested facts as "a.b: value" lines, one per leaf.
void print_facts(const nlohmann::json& facts, const std::string& prefix) {
  for (const auto& [key, value] : facts.items()) {
    if (value.is_object())
      print_facts(value, prefix + key + ".");
    else
      fmt::print("    {}{}: {}\n", prefix, key, cell(value));
  }
}

// Per-protocol counts as one table, then each protocol's facts.
void print_protocols(const nlohmann::json& protocols) {
  fmt::print("\n| protocol | seq_len | windows | scored tokens | stream tokens | documents |\n|---|---:|---:|---:|---:|---:|\n");
  for (const auto& [name, p] : protocols.items()) {
    if (p.contains("error")) {
      fmt::print("| {} | — | — | — | — | — |  error: {}\n", name, cell(p.at("error")));
      continue;
    }
    fmt::print("| {} | {} | {} | {} | {} | {} |\n", name, cell(p.at("parameters").at("seq_len")), cell(p.at("windows")),
               cell(p.at("scored_tokens")), cell(p.at("stream_tokens")), cell(p.at("documents")));
  }
  for (const auto& [name, p] : protocols.items()) {
    if (p.contains("error")) continue;
    fmt::print("\n  {}:\n", name);
    print_facts(p.at("parameters"), "parameters.");
    if (p.contains("window_lengths")) print_facts(p.at("window_lengths"), "window_lengths.");
    print_facts(p.at("facts"), "");
  }
}

void print_text(const nlohmann::json& report) {
  for (const auto& [section, body] : report.items()) {
    fmt::print("## {}\n", section);
    for (const auto& [key, value] : body.items()) {
      if (key == "linears") {
        fmt::print("  linears ({}):\n", value.size());
        for (const auto& l : value)
          fmt::print("    {:<22} [{} -> {}]\n", l.at("name").get<std::string>(), l.at("in").dump(),
                     l.at("out").dump());
      } else if (key == "tensors" && body.contains("notes") && body.at("notes").contains("quantization")) {
        // A quantised checkpoint: the stored tensors are what it is made of (codes, scales, zeros).
        fmt::print("  tensors ({}):\n", value.size());
        for (const auto& t : value)
          fmt::print("    {:<48} {:<8} {:<14} {}\n", t.at("name").get<std::string>(), t.at("dtype").get<std::string>(),
                     t.at("shape").dump(), t.contains("bytes") ? t.at("bytes").dump() : "—");
      } else if (key == "tensors") {
        fmt::print("  tensors                  {} (--json lists them)\n", value.size());
      } else if (key == "notes" && value.contains("quantization")) {
        // The stored format (method, format, bits, groups, activations) a line each.
        nlohmann::json rest = value;
        rest.erase("quantization");
        fmt::print("  {:<24} {}\n", key, cell(rest));
        print_facts(value.at("quantization"), "quantization.");
      } else if (key != "protocols") {
        fmt::print("  {:<24} {}\n", key, cell(value));
      }
    }
    if (body.contains("protocols")) print_protocols(body.at("protocols"));
  }
}

void run_inspect(InspectArgs a) {
  const auto dir = optional_path(a.data_dir);
  if (!a.path.empty()) {
    // One positional path: guess its role from its name.
    std::filesystem::path p = resolve_model_path(a.path, dir);  // a model handle, or any file as given or in the data folder
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
  if (!a.model.empty()) report["model"] = inspect_model(resolve_model_path(a.model, dir));
  if (!a.tokenizer.empty()) {
    auto p = resolve_input_path(a.tokenizer, dir);
    tok = load_tokenizer(p);
    report["tokenizer"] = inspect_tokenizer(*tok, p);
  }
  if (!a.data.empty()) report["data"] = inspect_data(resolve_input_path(a.data, dir), a, tok.get());
  if (a.json)
    fmt::print("{}\n", utf8_safe(report).dump(2));  // a folder or GGUF string that is not UTF-8, escaped
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
  cmd->add_option("--seq-len", args->seq_len, "window length for the window counts (0: each protocol's)")->capture_default_str()->check(integer_in(0, 1 << 20));
  cmd->add_option("--protocol", args->protocol, "with --data and --tokenizer: count windows under this protocol preset or JSON file, or all presets")
      ->capture_default_str();
  cmd->add_option("--text-split", args->text_split, "plain-text documents: paragraph, line or file (default: each protocol's, else paragraph)")
      ->check(CLI::IsMember({"paragraph", "line", "file"}));
  cmd->add_option("--token-dtype", args->token_dtype, "pre-tokenised .bin data: auto, uint16, uint32")
      ->capture_default_str()->check(CLI::IsMember({"auto", "uint16", "uint32"}));
  cmd->add_flag("--json", args->json, "print JSON instead of text");
  cmd->callback([args] { run_inspect(*args); });
}

}  // namespace qeval::cli
