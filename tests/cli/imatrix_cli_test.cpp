// llama.cpp's importance matrix from the command line (issue 77 item 4):
//   - `qeval imatrix` collects what llama-imatrix (llama.cpp 0c1e57098) collects: on the committed
//     tiny Llama GGUF and text, the same entries, chunk count and size, every count equal and every
//     sum within float32 rounding (1e-5 relative) of tests/eval/fixtures/imatrix_tiny_llama.imatrix.gguf,
//     which llama-imatrix wrote (tests/oracle/make_imatrix_collection_fixture.py);
//   - qeval's gguf-q4_k_m / gguf-iq4_nl with --imatrix hold llama-quantize --imatrix's weights (the
//     same perplexity as its committed GGUFs, bit for bit);
//   - `qeval eval --imatrix` quantises gguf-q4_k_m and gguf-iq4_nl with it: other NLLs than
//     without, a record verify_record accepts, naming the file, its hash, datasets and chunks;
//   - bad files are refused naming the file (missing, wrong columns naming tensor and sizes, a
//     truncated .dat), and --imatrix without a ggml scheme.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "common/files.h"
#include "common/hash.h"
#include "loaders/checkpoints/imatrix_file.h"
#include "records/record_verify.h"
#include "tests/cli/stories_eval.h"
#include "tests/support/test_data.h"

namespace qeval {
namespace {

using nlohmann::json;

const std::string kStories = "--model models/stories260K/stories260K.bin --tokenizer " + test::kStoriesTokenizer;

std::string fixture(const std::string& name) { return test::repo_path("tests/eval/fixtures/" + name).string(); }

TEST(ImatrixCli, CollectsWhatLlamaImatrixCollects) {
  test::TempDir dir;
  const std::string out = (dir / "q.imatrix.gguf").string();
  const test::CommandResult r =
      test::run_qeval("imatrix -q --model " + fixture("imatrix_tiny_llama.gguf") + " --data " +
                      fixture("imatrix_tiny_llama.txt") + " --seq-len 32 --out " + out);
  ASSERT_EQ(r.status, 0) << r.output;
  const Imatrix got = read_imatrix(out);
  const Imatrix want = read_imatrix(fixture("imatrix_tiny_llama.imatrix.gguf"));
  EXPECT_EQ(got.chunk_count, want.chunk_count);
  EXPECT_EQ(got.chunk_size, want.chunk_size);
  ASSERT_EQ(got.entries.size(), want.entries.size());
  double worst = 0;
  std::string worst_at;
  for (const auto& [name, w] : want.entries) {
    ASSERT_TRUE(got.entries.count(name)) << "qeval has no entry " << name;
    const ImatrixEntry& g = got.entries.at(name);
    EXPECT_EQ(g.counts, w.counts) << name;
    ASSERT_EQ(g.sums.size(), w.sums.size()) << name;
    for (std::size_t i = 0; i < w.sums.size(); ++i) {
      const double d = std::fabs(double(g.sums[i]) - double(w.sums[i])) / std::max(std::fabs(double(w.sums[i])), 1e-30);
      if (d > worst) worst = d, worst_at = name + "[" + std::to_string(i) + "]";
    }
  }
  // Float32 rounding (measured: 6.6e-7): the products sum in another order, the sums add 800
  // squares each. The fixture ran llama.cpp with a float32 KV cache and no flash attention; with
  // its F16 defaults the sums after the first attention differ by 4.2e-4.
  EXPECT_LT(worst, 1e-5) << "largest relative difference " << worst << " at " << worst_at;
  RecordProperty("largest_relative_difference", std::to_string(worst));
  std::cerr << "qeval imatrix vs llama-imatrix: largest relative difference " << worst << " at " << worst_at << "\n";
}

double ppl_of(const std::string& args) {
  test::TempDir dir;
  const std::string out = (dir / "r.json").string();
  const test::CommandResult r = test::run_qeval("eval -q --stats-for none --data " + fixture("imatrix_tiny_llama.txt") +
                                                " --seq-len 32 --max-windows 8 " + args + " --out " + out);
  EXPECT_EQ(r.status, 0) << r.output;
  const json record = json::parse(read_file(out));
  return record.at("schemes").back().at("perplexity").at("ppl").get<double>();
}

// llama-quantize --imatrix's GGUF of the tiny model, evaluated as is, and qeval's preset with the
// same --imatrix on the F32 model: the same weights, so the same perplexity to the last bit.
TEST(ImatrixCli, QuantisesAsLlamaQuantizeWithTheSameImatrix) {
  const std::string imatrix = fixture("imatrix_tiny_llama.imatrix.gguf");
  for (const char* type : {"q4_k_m", "iq4_nl"}) {
    const double llama = ppl_of("--model " + fixture(std::string("imatrix_tiny_llama.") + type +
                                                     ".imatrix-llamacpp.gguf") + " --schemes full");
    const std::string scheme = "--model " + fixture("imatrix_tiny_llama.gguf") + " --schemes full,gguf-" + type;
    EXPECT_EQ(ppl_of(scheme + " --imatrix " + imatrix), llama) << type;
    EXPECT_NE(ppl_of(scheme), llama) << type << ": without the imatrix the weights should differ";
  }
}

double nll(const json& record, const std::string& scheme) {
  for (const json& s : record.at("schemes"))
    if (s.at("name") == scheme) return std::log(s.at("perplexity").at("ppl").get<double>());
  throw std::runtime_error("no scheme " + scheme);
}

TEST(ImatrixCli, EvalQuantisesWithItAndRecordsIt) {
  test::TempDir dir;
  const std::string imatrix = (dir / "stories.imatrix.gguf").string();
  const test::CommandResult c = test::run_qeval("imatrix -q " + kStories + " --data-dir " + test::data_dir().string() +
                                                " --data text/tinystories/validation-head.txt --seq-len 64 --chunks 8"
                                                " --out " + imatrix);
  ASSERT_EQ(c.status, 0) << c.output;
  const Imatrix m = read_imatrix(imatrix);
  EXPECT_EQ(m.chunk_count, 8);
  EXPECT_EQ(m.entries.size(), 5u * 7u);  // q k v o gate up down in 5 layers
  EXPECT_EQ(m.entries.at("blk.4.ffn_down.weight").counts, std::vector<std::int64_t>{8 * 64});

  const std::string args = "--seq-len 64 --max-windows 4 --schemes full,gguf-q4_k_m,gguf-iq4_nl";
  const json plain = test::stories_eval_record(dir, "plain", args);
  const json with = test::stories_eval_record(dir, "with", args + " --imatrix " + imatrix);
  ASSERT_FALSE(plain.is_null());
  ASSERT_FALSE(with.is_null());
  EXPECT_NO_THROW(verify_record(with, "with.json"));
  for (const char* scheme : {"gguf-q4_k_m", "gguf-iq4_nl"}) {
    EXPECT_NE(nll(plain, scheme), nll(with, scheme)) << scheme;
    const json* d = nullptr;
    for (const json& s : with.at("schemes"))
      if (s.at("name") == scheme) d = &s.at("description");
    ASSERT_NE(d, nullptr);
    EXPECT_EQ(d->at("scheme").at("weights").at("imatrix"), imatrix);
    const json& section = d->at("imatrix");
    EXPECT_EQ(section.at("file"), imatrix);
    EXPECT_EQ(section.at("hash"), hash_file(imatrix));
    EXPECT_EQ(section.at("chunk_count"), 8);
    EXPECT_EQ(section.at("datasets"), json::array({"text/tinystories/validation-head.txt"}));
    EXPECT_EQ(section.at("tensors_with"), 35);
    std::int64_t with_entry = 0;
    for (const json& layer : d->at("layers")) with_entry += layer.value("ggml_imatrix", false) ? 1 : 0;
    EXPECT_GT(with_entry, 0) << scheme;
  }
  EXPECT_EQ(nll(plain, "full"), nll(with, "full"));
  // The record names the file: its section removed, or the spec's file changed, is refused.
  json edited = with;
  for (json& s : edited.at("schemes"))
    if (s.at("name") == "gguf-iq4_nl") s.at("description").erase("imatrix");
  EXPECT_TRUE(test::throws_with([&] { verify_record(edited, "e.json"); }, {"gguf-iq4_nl", "no \"imatrix\" object"}));
}

TEST(ImatrixCli, BadFilesAreRefusedNamingTheFile) {
  test::TempDir dir;
  const std::string base = "--seq-len 64 --max-windows 2 --schemes full,gguf-q4_k_m --data-dir " +
                           test::data_dir().string() + " --out " + (dir / "r.json").string();
  auto refused = [&](const std::string& imatrix, std::initializer_list<std::string> parts) {
    const test::CommandResult r = test::run_qeval(test::kEval + " " + base + " --imatrix " + imatrix);
    EXPECT_NE(r.status, 0) << r.output;
    for (const std::string& p : parts) EXPECT_TRUE(test::contains(r.output, p)) << "missing '" << p << "' in " << r.output;
  };
  refused((dir / "none.gguf").string(), {"none.gguf", "no such file", "gguf-q4_k_m"});
  // A matrix of the tiny fixture model has 32 columns; stories260K's attn_q has 64.
  const std::string tiny = (dir / "tiny.imatrix.gguf").string();
  const test::CommandResult t = test::run_qeval("imatrix -q --model " + fixture("imatrix_tiny_llama.gguf") + " --data " +
                                                fixture("imatrix_tiny_llama.txt") + " --seq-len 32 --out " + tiny);
  ASSERT_EQ(t.status, 0) << t.output;
  refused(tiny, {"tiny.imatrix.gguf", "blk.0.attn_q.weight", "32 values", "64 columns"});
  // A legacy .dat cut short.
  const std::string dat = (dir / "m.dat").string();
  const test::CommandResult c = test::run_qeval(
      "imatrix -q " + kStories + " --data-dir " + test::data_dir().string() +
      " --data text/tinystories/validation-head.txt --seq-len 64 --chunks 2 --output-format dat --out " + dat);
  ASSERT_EQ(c.status, 0) << c.output;
  const std::string bytes = read_file(dat);
  test::write_bytes(dir / "cut.dat", bytes.substr(0, bytes.size() / 2));
  refused((dir / "cut.dat").string(), {"cut.dat", "imatrix entry", "bytes left"});
  // The record never overwrites the matrix it read.
  const test::CommandResult o = test::run_qeval(test::kEval + " --seq-len 64 --max-windows 2 --schemes full,gguf-q4_k_m"
                                                " --data-dir " + test::data_dir().string() + " --imatrix " + tiny +
                                                " --out " + tiny);
  EXPECT_NE(o.status, 0);
  EXPECT_TRUE(test::contains(o.output, "is the --imatrix")) << o.output;
  // --imatrix acts on ggml schemes only.
  const test::CommandResult n = test::run_qeval(test::kEval + " --seq-len 64 --max-windows 2 --schemes full,int8-fine"
                                                " --data-dir " + test::data_dir().string() + " --imatrix " + dat);
  EXPECT_NE(n.status, 0);
  EXPECT_TRUE(test::contains(n.output, "no scheme given is one")) << n.output;
}

// Probe wave 7 (issue 79 item 7): an imatrix whose entries name no tensor of the model (collected from
// another model, or Hugging Face names) was applied to nothing and evaluated as if without one; a
// folder or a device was "no such file"; a negative Σx² was used as a weight.
TEST(ImatrixCli, ForeignNegativeAndNonFileImatricesAreRefused) {
  test::TempDir dir;
  const std::string base = "--seq-len 32 --max-windows 2 --schemes full,gguf-q4_0 --data-dir " + test::data_dir().string() +
                           " --out " + (dir / "r.json").string();
  auto refused = [&](const std::string& imatrix, std::initializer_list<std::string> parts) {
    const test::CommandResult r = test::run_qeval(test::kEval + " " + base + " --imatrix " + imatrix);
    EXPECT_EQ(r.status, 2) << r.output;
    for (const std::string& p : parts) EXPECT_TRUE(test::contains(r.output, p)) << "missing '" << p << "' in " << r.output;
    EXPECT_FALSE(std::filesystem::exists(dir / "r.json"));
  };
  auto entries = [](const std::string& prefix, float value) {
    Imatrix m;
    m.datasets = {"d.txt"};
    m.chunk_count = 1;
    m.chunk_size = 32;
    m.has_metadata = true;
    for (int i = 0; i < 5; ++i) {
      ImatrixEntry& e = m.entries[prefix + std::to_string(i) + (prefix == "blk." ? ".attn_q.weight" : ".self_attn.q_proj.weight")];
      e.sums.assign(64, value);
      e.counts = {32};
    }
    return m;
  };
  write_imatrix_gguf(entries("model.layers.", 1.0f), dir / "hf.imatrix.gguf");
  refused((dir / "hf.imatrix.gguf").string(), {"hf.imatrix.gguf", "none of its 5 entries", "model.layers.0.self_attn.q_proj.weight",
                                               "blk.0.attn_q.weight"});
  write_imatrix_gguf(entries("blk.", -1.0f), dir / "neg.imatrix.gguf");
  refused((dir / "neg.imatrix.gguf").string(), {"neg.imatrix.gguf", "blk.0.attn_q.weight", "is negative"});
  std::filesystem::create_directories(dir / "folder.gguf");
  refused((dir / "folder.gguf").string(), {"folder.gguf", "not a regular file (a folder)"});
  refused("/dev/zero", {"/dev/zero", "not a regular file"});
  // qeval imatrix on a text too short for one chunk named the protocol, not the text.
  test::write_bytes(dir / "short.txt", "Once upon a time there was a cat.\n");
  const test::CommandResult s = test::run_qeval("imatrix -q " + kStories + " --data-dir " + test::data_dir().string() +
                                                " --seq-len 32 --data " + (dir / "short.txt").string() + " --out " +
                                                (dir / "m.gguf").string());
  EXPECT_EQ(s.status, 2) << s.output;
  EXPECT_TRUE(test::contains(s.output, "--data " + (dir / "short.txt").string() + ": protocol llamacpp")) << s.output;
  // The same entries with positive sums are read.
  write_imatrix_gguf(entries("blk.", 1.0f), dir / "ok.imatrix.gguf");
  const test::CommandResult ok = test::run_qeval(test::kEval + " " + base + " --imatrix " + (dir / "ok.imatrix.gguf").string());
  EXPECT_EQ(ok.status, 0) << ok.output;
}

}  // namespace
}  // namespace qeval
