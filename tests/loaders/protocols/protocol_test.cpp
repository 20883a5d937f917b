// Protocols stride, llamacpp and gptq-c4 (and the presets) on real text and tokenizers, against
// definitions restated independently here and draws computed by Python (see GptqC4 below).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "common/error.h"
#include "common/files.h"
#include "loaders/checkpoints/gguf.h"
#include "loaders/protocols/protocol.h"
#include "loaders/tokenizers/gguf_tokenizer.h"
#include "loaders/tokenizers/tokenizer.h"
#include "tests/support/test_data.h"
#include "tests/support/test_models.h"

namespace qeval {
namespace {

const std::filesystem::path kRepo = test::repo_path("");

std::vector<Window> drain(WindowSource& source) {
  std::vector<Window> out;
  while (auto w = source.next()) out.push_back(std::move(*w));
  return out;
}

// The token stream the protocols cut, built here from the definition: separator + ids per document.
std::vector<std::int32_t> joined_stream(const std::filesystem::path& data, const Tokenizer& tok, TextSplit split,
                                        std::optional<std::int32_t> separator) {
  DocumentOptions options;
  options.text_split = split;
  auto docs = open_documents(data, options);
  std::vector<std::int32_t> stream;
  while (auto d = docs->next()) {
    if (separator) stream.push_back(*separator);
    auto ids = tok.encode(*d);
    stream.insert(stream.end(), ids.begin(), ids.end());
  }
  return stream;
}

TEST(ProtocolPresets, ConfigFilesEqualCompiledPresets) {
  std::set<std::string> files;
  for (const auto& entry : std::filesystem::directory_iterator(kRepo / "configs" / "protocols")) {
    const std::string name = entry.path().stem().string();
    files.insert(name);
    SCOPED_TRACE(entry.path().string());
    ProtocolSpec from_file = load_protocol(entry.path().string());
    EXPECT_EQ(from_file.to_json(), ProtocolSpec::defaults_for(name).to_json());
    EXPECT_EQ(load_protocol(name).to_json(), from_file.to_json());
  }
  auto names = protocol_names();
  EXPECT_EQ(files, std::set<std::string>(names.begin(), names.end()));
}

TEST(ProtocolPresets, RejectsUnknownAndMisplacedParameters) {
  auto message = [](const nlohmann::json& j) {
    try {
      ProtocolSpec::from_json(j, "test.json");
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(message({{"name", "stride"}, {"bos_per_window", true}}).find("has no parameter \"bos_per_window\""),
            std::string::npos);
  EXPECT_NE(message({{"name", "gptq"}}).find("unknown protocol 'gptq'"), std::string::npos);
  EXPECT_NE(message({{"name", "windows"}, {"seq_len", "x"}}).find("test.json"), std::string::npos);
  EXPECT_EQ(ProtocolSpec::from_json({{"name", "stride"}, {"seq_len", 100}, {"stride", 0}}, "t").stride, 50);
}

// stride with stride == seq_len is `windows` (plus the final partial window HF also scores).
TEST(StrideProtocol, StrideEqualToWindowIsWindowsOnRealText) {
  auto tok = load_tokenizer(test::data_path("models/stories260K/tok512.bin"));
  const auto data = test::data_path("text/tinystories/validation-head.txt");
  ProtocolSpec windows = ProtocolSpec::defaults_for("windows");
  windows.seq_len = 256;
  windows.text_split = TextSplit::paragraph;
  ProtocolSpec stride = ProtocolSpec::defaults_for("stride");
  stride.seq_len = 256;
  stride.stride = 256;
  stride.text_split = TextSplit::paragraph;
  auto a = open_window_source(data, tok.get(), windows);
  auto b = open_window_source(data, tok.get(), stride);
  auto wa = drain(*a), wb = drain(*b);
  const std::int64_t N = b->stream_tokens();
  ASSERT_GT(wa.size(), 100u);
  ASSERT_EQ(a->stream_tokens(), N);
  const std::size_t tail = static_cast<std::size_t>(N % 256 >= 2 ? 1 : 0);
  ASSERT_EQ(wb.size(), wa.size() + tail) << "N = " << N;
  for (std::size_t i = 0; i < wa.size(); ++i) {
    ASSERT_EQ(wb[i].tokens, wa[i].tokens) << "window " << i;
    ASSERT_EQ(wb[i].first_scored, wa[i].first_scored) << "window " << i;
    ASSERT_EQ(wb[i].index, wa[i].index) << "window " << i;
  }
  if (tail) {
    EXPECT_EQ(static_cast<std::int64_t>(wb.back().tokens.size()), N % 256);
    EXPECT_EQ(wb.back().first_scored, 1);
  }
}

// HF's loop restated with its label mask: every token but the very first is scored exactly once.
TEST(StrideProtocol, OverlappingWindowsFollowHuggingFaceLoop) {
  auto tok = load_tokenizer(test::data_path("models/stories260K/tok512.bin"));
  const auto data = test::data_path("text/tinystories/validation-head.txt");
  const std::vector<std::int32_t> stream = joined_stream(data, *tok, TextSplit::paragraph, tok->document_separator());
  const auto N = static_cast<std::int64_t>(stream.size());
  for (std::int64_t S : {std::int64_t{200}, std::int64_t{77}, std::int64_t{300}}) {
    ProtocolSpec spec = ProtocolSpec::defaults_for("stride");
    spec.seq_len = 256;
    spec.stride = S;
    spec.text_split = TextSplit::paragraph;
    auto source = open_window_source(data, tok.get(), spec);
    auto got = drain(*source);
    std::size_t k = 0;
    std::int64_t prev_end = 0, scored = 0;
    for (std::int64_t begin = 0; begin < N; begin += S, ++k) {
      const std::int64_t end = std::min(begin + 256, N);
      const std::int64_t trg_len = end - prev_end;
      // labels[:, :-trg_len] = -100, then the loss shifts by one: positions max(1, len − trg_len) .. len − 1.
      const std::int64_t len = end - begin;
      const std::int64_t first = std::max<std::int64_t>(1, len - trg_len);
      ASSERT_LT(k, got.size()) << "stride " << S;
      EXPECT_EQ(got[k].first_scored, first) << "stride " << S << " window " << k;
      EXPECT_TRUE(std::equal(got[k].tokens.begin(), got[k].tokens.end(), stream.begin() + begin) &&
                  static_cast<std::int64_t>(got[k].tokens.size()) == len)
          << "stride " << S << " window " << k;
      scored += got[k].scored();
      prev_end = end;
      if (end == N) break;
    }
    EXPECT_EQ(got.size(), k + 1) << "stride " << S;
    if (S <= 256) EXPECT_EQ(scored, N - 1) << "stride " << S;
  }
}

TEST(LlamaCppProtocol, ScoresExactlyHalfMinusOnePerChunk) {
  auto tok = load_tokenizer(test::data_path("models/stories260K/tok512.bin"));
  const auto data = test::data_path("text/tinystories/validation-head.txt");
  const std::vector<std::int32_t> stream = joined_stream(data, *tok, TextSplit::paragraph, tok->bos_id());
  for (std::int64_t n_ctx : {std::int64_t{512}, std::int64_t{128}, std::int64_t{101}}) {
    ProtocolSpec spec = ProtocolSpec::defaults_for("llamacpp");
    spec.seq_len = n_ctx;
    spec.text_split = TextSplit::paragraph;
    auto source = open_window_source(data, tok.get(), spec);
    auto chunks = drain(*source);
    ASSERT_EQ(static_cast<std::int64_t>(chunks.size()), static_cast<std::int64_t>(stream.size()) / n_ctx);
    for (std::size_t c = 0; c < chunks.size(); ++c) {
      const auto& w = chunks[c];
      ASSERT_EQ(static_cast<std::int64_t>(w.tokens.size()), n_ctx);
      ASSERT_EQ(w.scored(), n_ctx / 2 - (n_ctx % 2 == 0 ? 1 : 0)) << "chunk " << c;  // n_ctx − 1 − n_ctx/2
      ASSERT_EQ(w.first_scored, n_ctx / 2 + 1);
      ASSERT_EQ(w.tokens[0], *tok->bos_id()) << "chunk " << c;
      ASSERT_TRUE(std::equal(w.tokens.begin() + 1, w.tokens.end(), stream.begin() + static_cast<std::ptrdiff_t>(c) * n_ctx + 1))
          << "chunk " << c;
    }
    if (n_ctx == 512) EXPECT_EQ(chunks[0].scored(), 255);  // llama-perplexity -c 512: 255 per chunk
  }
}

TEST(LlamaCppProtocol, RefusesFewerThanTwoChunksAsLlamaCppDoes) {
  test::ByteTokenizer tok;
  ProtocolSpec spec = ProtocolSpec::defaults_for("llamacpp");
  spec.seq_len = 8;
  auto source = make_window_source(std::make_unique<test::ListDocuments>(std::vector<std::string>{"abcdefghijk"}), tok, spec);
  try {
    drain(*source);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("at least 2 * n_ctx"), std::string::npos) << e.what();
  }
}

// Expected draws printed by tests/loaders/protocols/gptq_c4_reference.py (recorded here): Python 3.11 `random` and the
// HF `tokenizers` 0.23.3 GPT-2 byte-level BPE built from encoder.json + vocab.bpe, and pip
// sentencepiece 0.2.3 with BOS (id 1) first as HF's LlamaTokenizer does, running GPTQ's loop:
//   random.seed(0)
//   for _ in range(n):
//       while True:
//           i = random.randint(0, len(docs) - 1); tmp = tok(docs[i])
//           if len(tmp) >= seqlen: break
//       d = i; i = random.randint(0, len(tmp) - seqlen - 1); out.append((d, i, tmp[i:i+3]))
// with docs = the "text" of every line of c4-en-validation-excerpt-1025.jsonl.
struct Draw {
  std::size_t document;
  std::int64_t offset;
  std::vector<std::int32_t> first3;
};

void check_gptq(const std::string& tokenizer, std::int64_t seq_len, const std::vector<Draw>& expected) {
  auto tok = load_tokenizer(test::data_path(tokenizer));
  const auto data = test::data_path("text/c4/c4-en-validation-excerpt-1025.jsonl");
  std::vector<std::string> docs;
  for (auto reader = open_documents(data); auto d = reader->next();) docs.push_back(*d);
  ProtocolSpec spec = ProtocolSpec::defaults_for("gptq-c4");
  spec.seq_len = seq_len;
  spec.max_windows = static_cast<std::int64_t>(expected.size());
  auto source = open_window_source(data, tok.get(), spec);
  auto windows = drain(*source);
  ASSERT_EQ(windows.size(), expected.size());
  for (std::size_t s = 0; s < expected.size(); ++s) {
    std::vector<std::int32_t> ids;
    if (tok->kind() != "gpt2-bpe") ids.push_back(*tok->bos_id());
    auto body = tok->encode(docs[expected[s].document]);
    ids.insert(ids.end(), body.begin(), body.end());
    std::vector<std::int32_t> want(ids.begin() + expected[s].offset, ids.begin() + expected[s].offset + seq_len);
    EXPECT_EQ(std::vector<std::int32_t>(windows[s].tokens.begin(), windows[s].tokens.begin() + 3), expected[s].first3)
        << "sample " << s;
    EXPECT_EQ(windows[s].tokens, want) << "sample " << s << " (document " << expected[s].document << ", offset "
                                       << expected[s].offset << ")";
    EXPECT_EQ(windows[s].first_scored, 1);
    EXPECT_EQ(windows[s].index, static_cast<std::int64_t>(s));
  }
  nlohmann::json facts = source->facts();
  EXPECT_EQ(facts.at("documents"), 1025);
  EXPECT_EQ(facts.at("exact"), false);  // not GPTQ's shard: recorded as an approximation
  EXPECT_TRUE(facts.contains("approximation"));
}

TEST(GptqC4Protocol, Gpt2DrawsMatchPython) {
  check_gptq("tokenizers/gpt2/encoder.json", 512,
             {{621, 61, {2055, 286, 5916}},
              {635, 12, {24053, 5496, 26}},
              {906, 2, {7572, 1909, 13}},
              {2, 156, {13, 383, 2802}},
              {499, 166, {29258, 4602, 663}},
              {917, 186, {72, 4983, 287}},
              {1002, 446, {2148, 340, 9835}},
              {617, 141, {7612, 286, 8737}}});
}

TEST(GptqC4Protocol, LlamaDrawsWithBosMatchPython) {
  check_gptq("tokenizers/llama2/tokenizer.model", 1024,
             {{202, 11957, {29884, 800, 526}},
              {917, 186, {408, 278, 28841}},
              {1002, 223, {5328, 508, 306}},
              {911, 46, {393, 1122, 1371}},
              {376, 193, {366, 1831, 29892}},
              {440, 86, {937, 931, 29889}}});
}

TEST(GptqC4Protocol, NoLongDocumentIsAnErrorNotALoop) {
  test::ByteTokenizer tok;
  ProtocolSpec spec = ProtocolSpec::defaults_for("gptq-c4");
  spec.seq_len = 64;
  auto source = make_window_source(std::make_unique<test::ListDocuments>(std::vector<std::string>{"short", "tiny"}), tok,
                                   spec, "two.jsonl");
  try {
    source->next();
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("two.jsonl"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace qeval

namespace qeval {
namespace {

// bos_per_window "auto" (the windows preset): BOS opens every window exactly when the tokenizer
// is a GGUF one whose tokenizer.ggml.add_bos_token is true (as llama.cpp's perplexity tool and
// lm-eval do); absent or false keeps windows cut from the joined stream. Given values win.
TEST(WindowsProtocol, BosPerWindowAutoFollowsTheGgufAddBosToken) {
  const auto gguf = test::data_path("models/stories260K/stories260K-tok512-f32.gguf");
  const nlohmann::json metadata = GgufFile(gguf).metadata();
  ASSERT_FALSE(metadata.contains("tokenizer.ggml.add_bos_token"));
  nlohmann::json with_true = metadata, with_false = metadata;
  with_true["tokenizer.ggml.add_bos_token"] = true;
  with_false["tokenizer.ggml.add_bos_token"] = false;
  const auto absent = gguf_tokenizer_from_metadata(metadata, "absent");
  const auto yes = gguf_tokenizer_from_metadata(with_true, "true");
  const auto no = gguf_tokenizer_from_metadata(with_false, "false");
  EXPECT_FALSE(absent->bos_per_window_by_default());
  EXPECT_TRUE(absent->adds_bos());  // llama.cpp's default for a "llama" vocabulary: not a reason to open windows with BOS
  EXPECT_TRUE(yes->bos_per_window_by_default());
  EXPECT_FALSE(no->bos_per_window_by_default());
  EXPECT_FALSE(load_tokenizer(test::data_path("models/stories260K/tok512.bin"))->bos_per_window_by_default());

  const auto data = test::data_path("text/tinystories/validation-head.txt");
  ProtocolSpec spec = ProtocolSpec::defaults_for("windows");
  EXPECT_EQ(spec.to_json().at("bos_per_window"), "auto");
  EXPECT_EQ(load_protocol("windows").to_json().at("bos_per_window"), "auto");
  spec.seq_len = 64;
  spec.max_windows = 3;
  auto first_tokens = [&](const Tokenizer& tok, const ProtocolSpec& s) {
    auto source = open_window_source(data, &tok, s);
    std::vector<std::int32_t> firsts;
    for (const Window& w : drain(*source)) firsts.push_back(w.tokens.front());
    return firsts;
  };
  const std::int32_t bos = *yes->bos_id();
  EXPECT_EQ(first_tokens(*yes, spec), std::vector<std::int32_t>(3, bos));
  const auto plain = first_tokens(*absent, spec);
  ASSERT_EQ(plain.size(), 3u);
  EXPECT_EQ(plain[0], bos);                                   // the stream opens with the separator (BOS) ...
  EXPECT_NE(plain, std::vector<std::int32_t>(3, bos));        // ... later windows start where the stream is
  EXPECT_EQ(first_tokens(*no, spec), plain);

  ProtocolSpec resolved = spec;
  resolved.resolve_bos_per_window(yes.get());
  EXPECT_TRUE(resolved.bos_per_window);
  EXPECT_EQ(resolved.to_json().at("bos_per_window"), true);  // records hold the decided value
  ProtocolSpec given = ProtocolSpec::from_json({{"name", "windows"}, {"bos_per_window", false}}, "t");
  EXPECT_EQ(given.resolve_bos_per_window(yes.get()).bos_per_window, false);
  EXPECT_THROW(ProtocolSpec::from_json({{"name", "windows"}, {"bos_per_window", "sometimes"}}, "t"), Error);
}

}  // namespace
}  // namespace qeval
