// Fuzz harnesses: one function per reader, shared by the libFuzzer targets (fuzz/fuzz_*.cpp)
// and tests/loaders/regression_test.cpp, so a kept regression input is replayed through exactly
// the code that found it.
//
// Contract: each harness feeds its bytes to a reader (through a file, since the readers take
// paths) and lets every exception through. The fuzz targets swallow qeval::Error only — the
// readers' documented way to refuse input — so any other exception (a json::exception, a
// c10::Error, std::out_of_range, ...) escapes LLVMFuzzerTestOneInput, terminates and is reported
// like a crash, as is anything ASan/UBSan or libFuzzer's malloc limit catches.
//
// Inputs holding several files are split at kSplit (a fixed marker, not a byte a real file
// would hold at that place): "a<kSplit>b" -> {"a", "b"}. fuzz/make_seeds builds seeds that way.
#pragma once

#include <unistd.h>

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdio>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "common/error.h"
#include "loaders/checkpoints/checkpoint.h"
#include "loaders/text/documents.h"
#include "loaders/checkpoints/gguf.h"
#include "loaders/checkpoints/imatrix_file.h"
#include "loaders/checkpoints/quantization_config.h"
#include "quant/formats/ggml/blocks.h"
#include "loaders/tokenizers/gguf_tokenizer.h"
#include "loaders/tokenizers/gpt2_bpe.h"
#include "loaders/tokenizers/llama2c_tokenizer.h"
#include "loaders/checkpoints/safetensors.h"
#include "loaders/protocols/protocol.h"
#include "loaders/checkpoints/safetensors_set.h"
#include "loaders/text/token_file.h"
#include "loaders/checkpoints/torch_checkpoint.h"
#include "reports/check.h"
#include "records/merge.h"
#include "records/record.h"
#include "records/record_verify.h"

#include <caffe2/serialize/inline_container.h>

namespace qeval::fuzz {

inline constexpr std::string_view kSplit = "\n--QEVAL-FUZZ-SPLIT--\n";

inline std::vector<std::string_view> split_input(std::string_view data, std::size_t max_parts) {
  std::vector<std::string_view> parts;
  while (parts.size() + 1 < max_parts) {
    const auto at = data.find(kSplit);
    if (at == std::string_view::npos) break;
    parts.push_back(data.substr(0, at));
    data.remove_prefix(at + kSplit.size());
  }
  parts.push_back(data);
  return parts;
}

// A per-process scratch folder in RAM (/dev/shm when present): one write per execution;
// removed when the process exits normally.
inline const std::filesystem::path& scratch_dir() {
  struct Scratch {
    std::filesystem::path dir;
    Scratch() {
      std::filesystem::path base = std::filesystem::exists("/dev/shm") ? std::filesystem::path("/dev/shm")
                                                                       : std::filesystem::temp_directory_path();
      dir = base / ("qeval-fuzz-" + std::to_string(::getpid()));
      std::filesystem::create_directories(dir);
    }
    ~Scratch() {
      std::error_code ec;
      std::filesystem::remove_all(dir, ec);
    }
  };
  static const Scratch scratch;
  return scratch.dir;
}

// A fresh empty folder inside the scratch folder (for readers that take a folder).
inline std::filesystem::path fresh_dir(const std::string& name) {
  auto d = scratch_dir() / name;
  std::filesystem::remove_all(d);
  std::filesystem::create_directories(d);
  return d;
}

inline void write_file(const std::filesystem::path& path, std::string_view bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

inline std::filesystem::path scratch_file(const std::string& name, std::string_view bytes) {
  auto p = scratch_dir() / name;
  write_file(p, bytes);
  return p;
}

// Text every tokenizer harness encodes and decodes: ASCII, spaces, digits, UTF-8 of 2-4 bytes,
// an invalid byte and a NUL.
inline constexpr char kProbeBytes[] =
    "Once upon a time,  there were 42 cats.\n\xc3\xa9t\xc3\xa9 \xe6\x9d\xb1\xe4\xba\xac \xf0\x9f\x98\x80 \xff\x00!";
inline constexpr std::string_view kProbeText{kProbeBytes, sizeof kProbeBytes - 1};  // keeps the NUL inside

inline void exercise(const Tokenizer& tok) {
  const auto ids = tok.encode(kProbeText);
  (void)tok.decode(ids);
  // Every id once, plus ids outside the vocabulary (decode must refuse them cleanly).
  std::vector<std::int32_t> all;
  const std::int64_t n = std::min<std::int64_t>(tok.vocab_size(), 4096);
  for (std::int64_t i = 0; i < n; ++i) all.push_back(static_cast<std::int32_t>(i));
  (void)tok.decode(all);
  try {
    (void)tok.decode({static_cast<std::int32_t>(tok.vocab_size())});
  } catch (const Error&) {
  }
  try {
    (void)tok.decode({-1});
  } catch (const Error&) {
  }
}

// ---- checkpoints and tensor files ----

inline void safetensors_file(std::string_view data) {
  SafetensorsFile f(scratch_file("model.safetensors", data));
  for (const auto& name : f.names()) {
    (void)f.read(name);
    if (at::isFloatingType(f.info(name).scalar_type)) (void)f.read_float32(name);
  }
}

// config.json <split> model.safetensors, or config.json <split> index.json <split> shard 1
// <split> shard 2 ...: a Hugging Face or qeval checkpoint folder, loaded through
// load_checkpoint (format detection, config, index, shards, weights).
inline void checkpoint_folder(std::string_view data) {
  const auto parts = split_input(data, 6);
  const auto dir = fresh_dir("folder");
  write_file(dir / "config.json", parts[0]);
  if (parts.size() == 2) write_file(dir / "model.safetensors", parts[1]);
  if (parts.size() >= 3) {
    write_file(dir / "model.safetensors.index.json", parts[1]);
    const std::size_t shards = parts.size() - 2;
    for (std::size_t i = 0; i < shards; ++i) {
      char name[64];
      std::snprintf(name, sizeof name, "model-%05zu-of-%05zu.safetensors", i + 1, shards);
      write_file(dir / name, parts[2 + i]);
    }
  }
  (void)load_checkpoint(dir);
}

// A quantised Hugging Face folder (config.json <split> model.safetensors), one target per packing
// (quantized_gptq, quantized_awq, quantized_compressed_tensors, quantized_bitsandbytes,
// quantized_fp8_block): the same reading as checkpoint_folder, each with its own seeds (fuzz/make_seeds:
// a one-layer Llama stored by that method), so each corpus explores its codec's unpacking.
inline void quantized_folder(std::string_view data) { checkpoint_folder(data); }

// config.json alone (Hugging Face GPT-2 / Llama or qeval): parsed and validated, then the
// loader stops at the missing weights unless the config was refused first.
inline void config_json(std::string_view data) {
  const auto dir = fresh_dir("config");
  write_file(dir / "config.json", data);
  (void)load_checkpoint(dir);
}

// A quantization_config object (config.json's, or quantize_config.json): parsed and validated,
// then every query the reader makes of it (targets, ignore, the record's summary).
inline void quantization_config(std::string_view data) {
  const nlohmann::json j = nlohmann::json::parse(data.begin(), data.end(), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return;
  const QuantizationConfig c = parse_quantization_config(j, "config.json", "quantization_config");
  for (const char* module : {"model.layers.0.self_attn.q_proj", "model.layers.3.mlp.down_proj", "lm_head"}) {
    (void)c.group_for(module);
    (void)c.quantises(module);
  }
  (void)c.describe().dump();
}

inline void gguf(std::string_view data) {
  const auto path = scratch_file("model.gguf", data);
  {
    GgufFile f(path);  // the container alone, every tensor qeval can read (quantised ones dequantised)
    for (const auto& t : f.tensors())
      if (ggml_type_dequantizable(t.type)) (void)f.read_float32(t.name);
  }
  (void)load_gguf_checkpoint(path);
}

// llama.cpp's importance matrix files, GGUF or legacy (by the first 4 bytes), read and turned
// into llama-quantize's per-column weights (loaders/checkpoints/imatrix_file.h).
inline void imatrix(std::string_view data) {
  const Imatrix m = read_imatrix(scratch_file("model.imatrix", data));
  const GgmlImportance g = ggml_importance(m, "model.imatrix");
  for (const auto& [name, e] : g.entries)
    if (e.columns > 0 && e.values.size() % static_cast<std::size_t>(e.columns) == 0)
      (void)g.tensor_for(name, static_cast<std::int64_t>(e.values.size()) / e.columns, e.columns);
}

// GGUF block decoders alone (quant/formats/ggml/blocks.h), without the container: byte 0 picks a ggml type id
// (mod 42, so ids qeval refuses come up too: dequantize_ggml must throw qeval::Error for them),
// the rest is blocks of that type (a partial block at the end is dropped), decoded from an
// odd address. A block decodes alone as it does within the run.
inline void gguf_blocks(std::string_view data) {
  if (data.empty()) return;
  const std::uint32_t type = static_cast<unsigned char>(data[0]) % 42;
  data.remove_prefix(1);
  if (!ggml_type_dequantizable(type)) {
    dequantize_ggml(type, data.data(), data.size(), nullptr, 0, "gguf_blocks");  // throws
    throw std::logic_error("dequantize_ggml accepted type " + ggml_type_name(type));
  }
  const GgmlBlockSize size = ggml_block_size(type);
  const std::uint64_t blocks = data.size() / size.bytes;
  std::vector<float> all(blocks * size.elements), last(size.elements);
  dequantize_ggml(type, data.data(), blocks * size.bytes, all.data(), all.size(), "gguf_blocks");
  if (blocks == 0) return;
  dequantize_ggml(type, data.data() + (blocks - 1) * size.bytes, size.bytes, last.data(), last.size(), "gguf_blocks");
  if (std::memcmp(last.data(), all.data() + (blocks - 1) * size.elements, size.elements * sizeof(float)) != 0)
    throw std::logic_error("the last " + ggml_type_name(type) + " block decodes differently alone");
}

// A GGUF file whose tokenizer.ggml.* metadata builds a tokenizer (a "llama" SentencePiece-style
// or a "gpt2" byte-level BPE vocabulary), which then encodes and decodes the probe text.
inline void gguf_tokenizer(std::string_view data) {
  exercise(*load_gguf_tokenizer(scratch_file("tokenizer.gguf", data)));
}

inline void llama2c_checkpoint(std::string_view data) {
  (void)load_llama2c_checkpoint(scratch_file("model.bin", data));
}

// A torch.save zip archive (pytorch_model.bin), every tensor of the state dict touched.
inline void read_state_dict(const std::filesystem::path& path) {
  for (const auto& [name, tensor] : read_torch_state_dict(path)) (void)tensor.sum();
}

inline void torch_zip(std::string_view data) { read_state_dict(scratch_file("pytorch_model.bin", data)); }

// The bytes as data.pkl inside a well-formed archive (valid zip structure and CRCs, records
// data/0 of 24 bytes and data/1 of 8, as torch.save writes them), so mutations reach the pickle
// rewrite and LibTorch's unpickler instead of stopping at the zip layer.
inline void torch_pickle(std::string_view data) {
  const auto path = scratch_dir() / "pickle.pt";
  {
    caffe2::serialize::PyTorchStreamWriter writer(path.string());
    writer.writeRecord("data.pkl", data.data(), data.size());
    // float32 {0, 0.5, 1, 1.5, 2, 2.5} and float16 {1, -2, 3.5, 0.25}, little endian
    static constexpr std::string_view storage0{"\0\0\0\0\0\0\0\x3f\0\0\x80\x3f\0\0\xc0\x3f\0\0\0\x40\0\0\x20\x40", 24};
    static constexpr std::string_view storage1{"\0\x3c\0\xc0\0\x43\0\x34", 8};
    writer.writeRecord("data/0", storage0.data(), storage0.size());
    writer.writeRecord("data/1", storage1.data(), storage1.size());
    writer.writeRecord("byteorder", "little", 6);
    writer.writeEndOfFile();
  }
  read_state_dict(path);
}

// ---- pre-tokenised token files and protocols ----

// Byte 0: dtype (auto / uint16 / uint32) and protocol (windows / stride / llamacpp); bytes 1-2:
// vocabulary size; byte 3: seq_len; the rest is the .bin file. Every window is read.
inline void token_file(std::string_view data) {
  if (data.size() < 4) return;
  const auto byte = [&](std::size_t i) { return static_cast<unsigned char>(data[i]); };
  ProtocolSpec spec = ProtocolSpec::defaults_for(std::array{"windows", "stride", "llamacpp"}[byte(0) / 3 % 3]);
  spec.seq_len = 2 + byte(3) % 64;
  if (spec.name == "stride") spec.stride = 1 + byte(3) / 64;
  WindowSourceOptions options;
  options.token_dtype = std::array{TokenDtype::auto_, TokenDtype::uint16, TokenDtype::uint32}[byte(0) % 3];
  options.vocab_size = 1 + byte(1) + 256 * byte(2);
  const auto path = scratch_file("tokens.bin", data.substr(4));
  (void)probe_token_file(path, options.token_dtype, options.vocab_size);
  auto source = open_window_source(path, nullptr, spec, options);
  while (source->next()) {
  }
  (void)source->facts();
}

// A protocol JSON file: parsed, written back and parsed again (the two must agree), then used
// on a fixed token file of 4,000 ids so that its numbers (seq_len, stride, max_windows, ...)
// size real windows.
inline void protocol_json(std::string_view data) {
  const ProtocolSpec spec = load_protocol(scratch_file("protocol.json", data).string());
  const nlohmann::json written = spec.to_json();
  if (ProtocolSpec::from_json(written, "round trip").to_json() != written) {
    throw std::logic_error("protocol JSON does not survive a round trip: " + written.dump());
  }
  if (spec.name == "gptq-c4") return;  // needs text documents and a tokenizer
  static const std::filesystem::path tokens = [] {
    std::string ids(8000, '\0');
    for (std::size_t i = 0; i < ids.size(); i += 2) ids[i] = static_cast<char>(i / 2 % 251);
    return scratch_file("protocol-tokens.bin", ids);
  }();
  WindowSourceOptions options;
  options.token_dtype = TokenDtype::uint16;
  options.vocab_size = 256;
  auto source = open_window_source(tokens, nullptr, spec, options);
  while (source->next()) {
  }
}

// ---- tokenizers ----

inline void llama2c_tokenizer(std::string_view data) {
  exercise(*Llama2cTokenizer::load(scratch_file("tokenizer.bin", data)));
}

// encoder.json <split> vocab.bpe
inline void gpt2_bpe(std::string_view data) {
  const auto parts = split_input(data, 2);
  const auto dir = fresh_dir("gpt2");
  write_file(dir / "encoder.json", parts[0]);
  write_file(dir / "vocab.bpe", parts.size() > 1 ? parts[1] : std::string_view());
  exercise(*Gpt2BpeTokenizer::from_vocab_and_merges(dir / "encoder.json", dir / "vocab.bpe"));
}

inline void tokenizer_json(std::string_view data) {
  exercise(*Gpt2BpeTokenizer::from_tokenizer_json(scratch_file("tokenizer.json", data)));
}

// ---- documents ----

// The first byte picks the plain-text split (paragraph / line / file); the rest is the file.
inline void read_documents(const std::string& name, std::string_view data, bool jsonl) {
  DocumentOptions options;
  options.max_document_bytes = 1 << 16;  // small, so the limit itself is exercised
  if (!jsonl && !data.empty()) {
    options.text_split = static_cast<TextSplit>(static_cast<unsigned char>(data[0]) % 3);
    data.remove_prefix(1);
  }
  const auto path = scratch_file(name, data);
  auto reader = jsonl ? open_jsonl_documents(path, options) : open_text_documents(path, options);
  while (reader->next()) {
  }
}

inline void text_plain(std::string_view data) { read_documents("docs.txt", data, false); }
inline void jsonl_plain(std::string_view data) { read_documents("docs.jsonl", data, true); }
inline void jsonl_gz(std::string_view data) { read_documents("docs.json.gz", data, true); }
inline void jsonl_zst(std::string_view data) { read_documents("docs.jsonl.zst", data, true); }
inline void text_bz2(std::string_view data) { read_documents("docs.txt.bz2", data, false); }

// A result record (qeval eval --out): read, verified against its own per-window rows
// (records/record_verify.h), checked against itself under a tolerance that limits every scheme, and,
// when it is a shard, merged alone (which must refuse: one shard is never the whole).
inline void result_record(std::string_view data) {
  const auto path = scratch_file("record.json", data);
  const nlohmann::json record = read_record(path);
  const RecordVerification v = verify_record(record, path.string());
  const Tolerances tolerances = Tolerances::from_json(
      {{"schemes", {{"*", {{"dppl_abs", 0.0}}}, {"full", {{"ppl_abs", 0.0}}}}}}, "fuzz tolerances");
  CheckOptions options;
  options.allow_partial = true;
  (void)check_report_to_json(check_record(record, record, tolerances, options));
  if (!v.partial.empty() && record.contains("shard")) (void)merge_shard_records({record}, {path.string()});
}

// Name -> harness; the names are the fuzz target names (fuzz_<name>) and the folders of
// tests/regression/<name>/.
inline const std::map<std::string, std::function<void(std::string_view)>>& harnesses() {
  static const std::map<std::string, std::function<void(std::string_view)>> all{
      {"safetensors", safetensors_file},
      {"checkpoint_folder", checkpoint_folder},
      {"config_json", config_json},
      {"quantization_config", quantization_config},
      {"quantized_gptq", quantized_folder},
      {"quantized_awq", quantized_folder},
      {"quantized_compressed_tensors", quantized_folder},
      {"quantized_bitsandbytes", quantized_folder},
      {"quantized_fp8_block", quantized_folder},
      {"gguf", gguf},
      {"gguf_blocks", gguf_blocks},
      {"gguf_tokenizer", gguf_tokenizer},
      {"imatrix", imatrix},
      {"llama2c_checkpoint", llama2c_checkpoint},
      {"llama2c_tokenizer", llama2c_tokenizer},
      {"gpt2_bpe", gpt2_bpe},
      {"tokenizer_json", tokenizer_json},
      {"text_plain", text_plain},
      {"jsonl_plain", jsonl_plain},
      {"jsonl_gz", jsonl_gz},
      {"jsonl_zst", jsonl_zst},
      {"text_bz2", text_bz2},
      {"torch_zip", torch_zip},
      {"torch_pickle", torch_pickle},
      {"token_file", token_file},
      {"protocol_json", protocol_json},
      {"result_record", result_record},
  };
  return all;
}

}  // namespace qeval::fuzz
