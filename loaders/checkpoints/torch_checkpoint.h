// torch.save state dicts in the zip format (`pytorch_model.bin`, `*.pt`, `*.pth`) with a
// Hugging Face `config.json` beside them (GPT2LMHeadModel / LlamaForCausalLM, the same name
// mapping as the safetensors folders).
//
// Reading goes through LibTorch: caffe2::serialize::PyTorchStreamReader for the zip records
// and torch::jit::Unpickler for `data.pkl` (storages read from `data/<key>` on demand). LibTorch
// 1.13's unpickler has gaps that Python's torch.save output falls into: every
// `collections.OrderedDict` becomes None (it expected them only as a tensor's empty backward
// hooks) although state_dict() *is* an OrderedDict (with a `_metadata` attribute set through
// BUILD), and it has no SETITEM / APPEND opcodes (Python writes them for one-item dicts and
// lists). Before unpickling, the pickle's opcodes are walked with a symbolic stack that knows
// where each object's opcodes begin, and rewritten with opcodes LibTorch reads:
//   OrderedDict() REDUCE     → MARK class () DICT: a dict with one junk {int: ()} entry;
//   BUILD on such a dict     → MARK 0 state SETITEMS: the attributes under the int key 0;
//   SETITEM / APPEND         → MARK key value SETITEMS / MARK item APPENDS.
// Int keys are dropped when the state dict is read (state dict names are strings). Every other
// object LibTorch cannot read is an error naming the file.
//
// Accepted content: a dict of name → tensor, or a dict whose "state_dict" / "model" entry is
// one (training checkpoints); non-tensor entries beside the tensors are listed in the notes.
// Only the zip format (torch >= 1.6) is read; legacy torch.save files are refused with a message.
#pragma once

#include <ATen/ATen.h>

#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "loaders/checkpoints/checkpoint.h"

namespace qeval {

// Every tensor of the state dict as stored (dtype kept), on the CPU.
std::map<std::string, at::Tensor> read_torch_state_dict(const std::filesystem::path& file, nlohmann::json* notes = nullptr);

// The state dict + config.json in the same folder → checkpoint (format "torch-hf-gpt2" /
// "torch-hf-llama"); weights_hash is XXH3 of the file.
LoadedCheckpoint load_torch_checkpoint(const std::filesystem::path& file);

// True when the file starts with a zip local header ("PK\3\4").
bool is_zip_file(const std::filesystem::path& file);

// Exposed for tests: the OrderedDict rewrite described above (throws naming `source` on an
// opcode it does not know).
std::string patch_ordered_dicts(const std::string& pickle, const std::string& source);

}  // namespace qeval
