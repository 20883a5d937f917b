// torch.save zip state dicts: the tiny HF fixtures re-saved with LibTorch's torch::jit::pickle_save
// (a dict of tensors, zip format) load to the same logits as their safetensors twins; a state
// dict in the exact layout Python's torch.save writes (an OrderedDict with _metadata, made by
// tests/loaders/checkpoints/fixtures/make_torch_save_fixture.py with Python's pickle) reads back its
// tensors; bad archives fail naming the file.
#include <gtest/gtest.h>
#include <caffe2/serialize/inline_container.h>
#include <torch/csrc/jit/serialization/pickle.h>

#include <filesystem>

#include "common/error.h"
#include "common/files.h"
#include "loaders/checkpoints/checkpoint.h"
#include "loaders/checkpoints/safetensors.h"
#include "loaders/checkpoints/torch_checkpoint.h"
#include "model/transformer.h"
#include "tests/support/test_data.h"

namespace qeval {
namespace {

namespace fs = std::filesystem;
const fs::path kHere = fs::path(__FILE__).parent_path();

// A string literal with its embedded NULs.
template <std::size_t N>
std::string raw(const char (&s)[N]) {
  return std::string(s, N - 1);
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "no error";
}

// Every weight tensor of an HF fixture folder, saved with torch::pickle_save as `file`.
void save_zip_twin(const fs::path& fixture, const fs::path& file) {
  c10::Dict<std::string, at::Tensor> dict;
  for (const auto& entry : fs::directory_iterator(fixture)) {
    const std::string name = entry.path().filename().string();
    if (entry.path().extension() != ".safetensors" || name == "reference.safetensors") continue;
    for (auto& [key, tensor] : read_safetensors(entry.path())) dict.insert(key, tensor);
  }
  std::vector<char> bytes = torch::jit::pickle_save(c10::IValue(dict));
  write_file_atomic(file, std::string(bytes.begin(), bytes.end()));
  fs::copy_file(fixture / "config.json", file.parent_path() / "config.json", fs::copy_options::overwrite_existing);
}

void expect_same_logits(const std::string& fixture_name, const std::string& file_name) {
  const fs::path fixture = test::data_path("fixtures/" + fixture_name);
  test::TempDir tmp;
  save_zip_twin(fixture, tmp / file_name);
  LoadedCheckpoint twin = load_checkpoint(tmp / file_name);
  LoadedCheckpoint original = load_checkpoint(fixture);
  EXPECT_EQ(twin.format, "torch-" + original.format);
  EXPECT_EQ(config_to_json(twin.config), config_to_json(original.config));
  auto reference = read_safetensors(fixture / "reference.safetensors");
  const at::Tensor ids = reference.at("input_ids");
  at::Tensor got = Transformer(twin.config, twin.weights, "zip").forward(ids);
  at::Tensor want = Transformer(original.config, original.weights, "safetensors").forward(ids);
  EXPECT_TRUE(test::tensors_equal(got, want));  // same fp32 weights, same arithmetic
  EXPECT_TRUE(test::tensors_close(got, reference.at("logits_softmax"), 1e-4));
}

TEST(TorchCheckpoint, Gpt2ZipTwinGivesSafetensorsLogits) { expect_same_logits("tiny-gpt2-hf", "pytorch_model.bin"); }
TEST(TorchCheckpoint, LlamaZipTwinGivesSafetensorsLogits) { expect_same_logits("tiny-llama-hf", "model.pt"); }

TEST(TorchCheckpoint, HfFolderWithOnlyPytorchModelBinLoads) {
  test::TempDir tmp;
  save_zip_twin(test::data_path("fixtures/tiny-gpt2-hf"), tmp / "pytorch_model.bin");
  LoadedCheckpoint ck = load_checkpoint(tmp.path());
  EXPECT_EQ(ck.format, "torch-hf-gpt2");
}

TEST(TorchCheckpoint, ReadsPythonTorchSaveOrderedDict) {
  nlohmann::json notes;
  auto tensors = read_torch_state_dict(kHere / "fixtures" / "torch_save_ordered_dict.pt", &notes);
  ASSERT_EQ(tensors.size(), 3u);
  EXPECT_TRUE(test::tensors_equal(tensors.at("a.weight"), at::arange(6, at::kFloat).mul(0.5).reshape({2, 3})));
  EXPECT_EQ(tensors.at("b.bias").scalar_type(), at::kHalf);
  EXPECT_TRUE(test::tensors_equal(tensors.at("b.bias").to(at::kFloat), at::tensor({1.0f, -2.0f, 3.5f, 0.25f})));
  EXPECT_TRUE(test::tensors_equal(tensors.at("a.view"), at::tensor({2.0f, 2.5f})));  // storage offset 4
}

TEST(TorchCheckpoint, TruncatedZipNamesTheFile) {
  test::TempDir tmp;
  save_zip_twin(test::data_path("fixtures/tiny-gpt2-hf"), tmp / "full.bin");
  const std::string bytes = read_file(tmp / "full.bin");
  test::write_bytes(tmp / "cut.bin", bytes.substr(0, bytes.size() / 2));
  const std::string e = error_of([&] { load_checkpoint(tmp / "cut.bin"); });
  EXPECT_NE(e.find("cut.bin"), std::string::npos) << e;
  EXPECT_NE(e.find("truncated or corrupt"), std::string::npos) << e;
}

// getRecord() allocates what the central directory declares; a damaged entry claiming 4 GiB for
// data.pkl (found by the torch_zip fuzzer) is refused before LibTorch sees the archive.
TEST(TorchCheckpoint, RecordLargerThanTheFileIsRefusedBeforeAllocating) {
  test::TempDir tmp;
  std::string bytes = read_file(kHere / "fixtures" / "torch_save_ordered_dict.pt");
  const std::size_t entry = bytes.find("PK\x01\x02");  // the first central directory entry...
  ASSERT_NE(entry, std::string::npos);
  const std::size_t name_len = static_cast<unsigned char>(bytes[entry + 28]) | static_cast<unsigned char>(bytes[entry + 29]) << 8;
  const std::string name = bytes.substr(entry + 46, name_len);
  for (std::size_t i = 0; i < 4; ++i) bytes[entry + 24 + i] = static_cast<char>(i == 3 ? 0xf0 : 0xff);  // ...now 0xf0ffffff bytes
  test::write_bytes(tmp / "huge.pt", bytes);
  const std::string e = error_of([&] { read_torch_state_dict(tmp / "huge.pt"); });
  EXPECT_NE(e.find("huge.pt: zip record " + name + " declares 4043309055 bytes"), std::string::npos) << e;
}

// A zip written by LibTorch's own archive writer with the given data.pkl.
void write_archive(const fs::path& file, const std::string& pickle) {
  std::string bytes;
  caffe2::serialize::PyTorchStreamWriter writer([&](const void* data, std::size_t n) {
    bytes.append(static_cast<const char*>(data), n);
    return n;
  });
  writer.writeRecord("data.pkl", pickle.data(), pickle.size());
  writer.writeEndOfFile();
  test::write_bytes(file, bytes);
}

TEST(TorchCheckpoint, UnsupportedPickleObjectsNameTheFile) {
  test::TempDir tmp;
  // protocol 2: mymodule.MyClass() — an arbitrary Python object, not a state dict
  write_archive(tmp / "object.pt", raw("\x80\x02" "cmymodule\nMyClass\nq\x00)R."));
  std::string e = error_of([&] { read_torch_state_dict(tmp / "object.pt"); });
  EXPECT_NE(e.find("object.pt"), std::string::npos) << e;
  EXPECT_NE(e.find("cannot read"), std::string::npos) << e;
  // a list of ints: readable, but not a dict of tensors
  write_archive(tmp / "list.pt", raw("\x80\x02]q\x00(K\x01K\x02" "e."));
  e = error_of([&] { read_torch_state_dict(tmp / "list.pt"); });
  EXPECT_NE(e.find("list.pt"), std::string::npos) << e;
  EXPECT_NE(e.find("expected a dict of tensors"), std::string::npos) << e;
  // protocol 4 framing (not what torch.save writes)
  write_archive(tmp / "frame.pt", raw("\x80\x04\x95\x01\x00\x00\x00\x00\x00\x00\x00N."));
  e = error_of([&] { read_torch_state_dict(tmp / "frame.pt"); });
  EXPECT_NE(e.find("frame.pt"), std::string::npos) << e;
  EXPECT_NE(e.find("opcode 0x95"), std::string::npos) << e;
  // legacy (non-zip) torch.save
  test::write_bytes(tmp / "legacy.pt", raw("\x80\x02\x8a\x0al\xfc\x9c" "F\xf9 j\xa8P\x19."));
  e = error_of([&] { load_checkpoint(tmp / "legacy.pt"); });
  EXPECT_NE(e.find("legacy.pt"), std::string::npos) << e;
}

// Pickles that LibTorch 1.13's unpickler mishandles instead of refusing (found by
// fuzz_torch_pickle; the inputs are under tests/regression/torch_pickle/): each is refused by
// the opcode walk before LibTorch sees it, naming the source and the byte.
TEST(TorchCheckpoint, MalformedPickleStacksAreRefusedBeforeLibTorch) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {raw("\x80\x02}((\x87."), "pops a MARK as a value at byte 5"},          // TUPLE3 reaching past a MARK
      {raw("\x80\x02}(K\x01u."), "odd number of dict items"},                 // SETITEMS with a key alone
      {raw("\x80\x02(K\x01K\x02u."), "adds items to nothing"},               // SETITEMS with no dict below
      {raw("\x80\x02}r\x72\x72\x72\x72."), "memo entry 1920103026"},        // LONG_BINPUT sizing a 30 GB memo
      {raw("\x80\x02}}."), "stops with 2 entries"},                           // two results
      {raw("\x80\x02(."), "stops with 1 entries"},                            // a MARK as the result
  };
  for (const auto& [pickle, expected] : cases) {
    const std::string& bytes = pickle;  // clang 14 cannot capture a structured binding
    const std::string e = error_of([&] { patch_ordered_dicts(bytes, "bad.pkl"); });
    EXPECT_NE(e.find("bad.pkl"), std::string::npos) << e;
    EXPECT_NE(e.find(expected), std::string::npos) << "expected \"" << expected << "\" in: " << e;
  }
  // The well-formed versions pass through unchanged.
  EXPECT_EQ(patch_ordered_dicts(raw("\x80\x02}(K\x01K\x02u."), "ok.pkl"), raw("\x80\x02}(K\x01K\x02u."));
  EXPECT_EQ(patch_ordered_dicts(raw("\x80\x02(K\x01K\x02K\x03\x87t."), "ok.pkl"), raw("\x80\x02(K\x01K\x02K\x03\x87t."));
}

}  // namespace
}  // namespace qeval
