// torch.save zip state dicts through LibTorch's zip reader and unpickler (see the header for
// the one OrderedDict bridge).
#include "loaders/checkpoints/torch_checkpoint.h"

#include <caffe2/serialize/inline_container.h>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <torch/csrc/jit/serialization/unpickler.h>

#include <cstring>
#include <fstream>

#include "common/error.h"
#include "common/files.h"
#include "common/hash.h"
#include "loaders/checkpoints/weights_hash.h"
#include "loaders/checkpoints/checkpoint_internal.h"
#include "loaders/checkpoints/model_reader_internal.h"
#include "loaders/checkpoints/tensor_map.h"
#include "loaders/checkpoints/zip_directory.h"

namespace qeval {

namespace fs = std::filesystem;

namespace {

// First line of a c10::Error (the rest is a C++ backtrace).
std::string first_line(const char* what) {
  std::string s(what);
  const auto nl = s.find('\n');
  return nl == std::string::npos ? s : s.substr(0, nl);
}

// What the opcode walk knows about a stack entry. storage_class is a GLOBAL torch.<T>Storage and
// persistent_id a 5-tuple with one in position 1: LibTorch's BINPERSID takes element 1 as a scalar
// type without checking, so an integer there (253, found by fuzz_torch_pickle) read out of bounds.
enum class Tag { other, mark, od_class, od_dict, storage_class, persistent_id };

}  // namespace

bool is_zip_file(const fs::path& file) {
  std::ifstream in(file, std::ios::binary);
  char magic[4] = {};
  in.read(magic, 4);
  return in.gcount() == 4 && std::memcmp(magic, "PK\x03\x04", 4) == 0;
}

std::string patch_ordered_dicts(const std::string& p, const std::string& source) {
  // Symbolic stack: each entry remembers where in `out` the opcodes that built it begin, so a
  // MARK can be inserted before it afterwards (the unpickler has no POP, SETITEM or APPEND).
  struct Entry {
    Tag tag;
    std::size_t start;
  };
  std::string out;
  out.reserve(p.size() + 256);
  std::vector<Entry> stack;
  std::map<std::uint32_t, Tag> memo;
  std::size_t pos = 0;
  auto need = [&](std::size_t n, std::size_t at) {
    QEVAL_CHECK(at + n <= p.size(), "{}: data.pkl ends inside an opcode at byte {}", source, at);
  };
  auto le = [&](std::size_t at, int n) {
    need(static_cast<std::size_t>(n), at);
    std::uint32_t v = 0;
    for (int i = n - 1; i >= 0; --i) v = (v << 8) | static_cast<unsigned char>(p[at + static_cast<std::size_t>(i)]);
    return v;
  };
  // Python's and LibTorch's unpicklers keep marks apart from the values: an opcode that pops n
  // values may not reach past the topmost mark. LibTorch 1.13 does not check that and corrupts
  // its heap (a TUPLE3 right after a MARK, found by fuzz_torch_pickle), so it is checked here.
  auto depth = [&](std::size_t n, std::size_t at) {
    QEVAL_CHECK(stack.size() >= n, "{}: data.pkl pops an empty stack at byte {}", source, at);
    for (std::size_t i = stack.size() - n; i < stack.size(); ++i)
      QEVAL_CHECK(stack[i].tag != Tag::mark, "{}: data.pkl pops a MARK as a value at byte {}", source, at);
  };
  // Values above the topmost mark (which must exist).
  auto above_mark = [&](std::size_t at) {
    std::size_t n = 0;
    while (n < stack.size() && stack[stack.size() - 1 - n].tag != Tag::mark) ++n;
    QEVAL_CHECK(n < stack.size(), "{}: data.pkl has no MARK for the opcode at byte {}", source, at);
    return n;
  };
  // SETITEMS / APPENDS / DICT take key-value pairs (LibTorch reads one past the end on an odd
  // count), and SETITEMS / APPENDS a container below the mark.
  auto check_mark_items = [&](std::size_t at, bool pairs, bool container_below) {
    const std::size_t n = above_mark(at);
    QEVAL_CHECK(!pairs || n % 2 == 0, "{}: data.pkl has an odd number of dict items for the opcode at byte {}", source,
                at);
    QEVAL_CHECK(!container_below || (stack.size() >= n + 2 && stack[stack.size() - n - 2].tag != Tag::mark),
                "{}: data.pkl adds items to nothing at byte {}", source, at);
  };
  // Pops n entries; returns the start of the lowest one.
  auto pop = [&](std::size_t n, std::size_t at) {
    depth(n, at);
    const std::size_t start = n ? stack[stack.size() - n].start : out.size();
    stack.resize(stack.size() - n);
    return start;
  };
  auto pop_mark = [&](std::size_t at) {
    while (!stack.empty() && stack.back().tag != Tag::mark) stack.pop_back();
    QEVAL_CHECK(!stack.empty(), "{}: data.pkl has no MARK for the opcode at byte {}", source, at);
    const std::size_t start = stack.back().start;
    stack.pop_back();
    return start;
  };
  // Inserts `bytes` into `out` before the stack entry `index` (from the top: 1 = top).
  auto insert_before = [&](std::size_t from_top, const std::string& bytes) {
    const std::size_t at = stack[stack.size() - from_top].start;
    out.insert(at, bytes);
    for (auto& e : stack)
      if (e.start >= at && &e != &stack[stack.size() - from_top]) e.start += bytes.size();
    stack[stack.size() - from_top].start = at;
  };
  while (true) {
    QEVAL_CHECK(pos < p.size(), "{}: data.pkl ends without STOP", source);
    const std::size_t at = pos, here = out.size();
    const auto op = static_cast<unsigned char>(p[pos++]);
    std::size_t arg = 0;  // bytes of argument after the opcode
    auto push = [&](Tag t = Tag::other) { stack.push_back({t, here}); };
    switch (op) {
      case 0x80: arg = 1; break;  // PROTO
      case 'c': {                 // GLOBAL module\nname\n
        const auto a = p.find('\n', pos);
        const auto b = a == std::string::npos ? a : p.find('\n', a + 1);
        QEVAL_CHECK(b != std::string::npos, "{}: data.pkl: unterminated GLOBAL at byte {}", source, at);
        arg = b + 1 - pos;
        const std::string_view name(p.data() + a + 1, b - a - 1);
        const bool storage = p.compare(pos, a - pos, "torch") == 0 && name.size() > 7 &&
                             name.substr(name.size() - 7) == "Storage";
        push(p.compare(pos, b - pos, "collections\nOrderedDict") == 0 ? Tag::od_class
             : storage                                                ? Tag::storage_class
                                                                      : Tag::other);
        break;
      }
      case 'q': arg = 1; depth(1, at); memo[le(pos, 1)] = stack.back().tag; break;  // BINPUT
      case 'r':                                                                       // LONG_BINPUT
        arg = 4;
        depth(1, at);
        // LibTorch sizes its memo table by the largest index: 0x72727272 made it allocate 30 GB
        // (found by fuzz_torch_pickle). Pickle writers number memo entries from 0, one per PUT,
        // so an index can never reach the pickle's size.
        {
          const std::uint32_t index = le(pos, 4);
          QEVAL_CHECK(index < p.size(), "{}: data.pkl stores memo entry {} at byte {}, beyond any pickle of {} bytes",
                      source, index, at, p.size());
          memo[index] = stack.back().tag;
        }
        break;
      case 'h': arg = 1; push(memo.count(le(pos, 1)) ? memo[le(pos, 1)] : Tag::other); break;  // BINGET
      case 'j': arg = 4; push(memo.count(le(pos, 4)) ? memo[le(pos, 4)] : Tag::other); break;  // LONG_BINGET
      case ')': case ']': case '}': case 'N': case 0x88: case 0x89: push(); break;
      case '(': push(Tag::mark); break;
      case 't': {  // TUPLE
        const std::size_t n = above_mark(at);
        const bool id = n == 5 && stack[stack.size() - 4].tag == Tag::storage_class;  // ('storage', class, key, location, numel)
        stack.push_back({id ? Tag::persistent_id : Tag::other, pop_mark(at)});
        break;
      }
      case 0x85: stack.push_back({Tag::other, pop(1, at)}); break;                   // TUPLE1
      case 0x86: stack.push_back({Tag::other, pop(2, at)}); break;                   // TUPLE2
      case 0x87: stack.push_back({Tag::other, pop(3, at)}); break;                   // TUPLE3
      case 'J': arg = 4; push(); break;                                              // BININT
      case 'K': arg = 1; push(); break;                                              // BININT1
      case 'M': arg = 2; push(); break;                                              // BININT2
      case 'G': arg = 8; push(); break;                                              // BINFLOAT
      case 0x8a: arg = 1 + le(pos, 1); push(); break;                                // LONG1
      case 'X': arg = 4 + le(pos, 4); push(); break;                                 // BINUNICODE
      case 'Q':  // BINPERSID
        depth(1, at);
        QEVAL_CHECK(stack.back().tag == Tag::persistent_id,
                    "{}: data.pkl: BINPERSID at byte {} needs ('storage', torch.<T>Storage, key, location, numel)", source, at);
        stack.push_back({Tag::other, pop(1, at)});
        break;
      case 0x81: stack.push_back({Tag::other, pop(2, at)}); break;                   // NEWOBJ
      case 'R': {                                                                    // REDUCE
        depth(2, at);
        if (stack[stack.size() - 2].tag == Tag::od_class) {
          // OrderedDict(): MARK class args DICT → a dict holding one {class index: ()} entry
          // that read_torch_state_dict drops (LibTorch would make the OrderedDict None).
          insert_before(2, "(");
          out += 'd';
          stack.push_back({Tag::od_dict, pop(2, at)});
          continue;
        }
        stack.push_back({Tag::other, pop(2, at)});
        break;
      }
      case 'b': {  // BUILD
        depth(2, at);
        if (stack[stack.size() - 2].tag == Tag::od_dict) {
          // The OrderedDict's attributes (state_dict's _metadata), stored under the int key 0
          // (LibTorch's dicts cannot hash None).
          insert_before(1, std::string("(K\x00", 3));
          out += 'u';
          pop(1, at);
          continue;
        }
        pop(1, at);
        break;
      }
      case 's':  // SETITEM → MARK key value SETITEMS
        depth(3, at);
        insert_before(2, "(");
        out += 'u';
        pop(2, at);
        continue;
      case 'a':  // APPEND → MARK item APPENDS
        depth(2, at);
        insert_before(1, "(");
        out += 'e';
        pop(1, at);
        continue;
      case 'u': check_mark_items(at, true, true); pop_mark(at); break;   // SETITEMS
      case 'e': check_mark_items(at, false, true); pop_mark(at); break;  // APPENDS
      case 'l': stack.push_back({Tag::other, pop_mark(at)}); break;  // LIST
      case 'd': check_mark_items(at, true, false); stack.push_back({Tag::other, pop_mark(at)}); break;  // DICT
      case '.':                                                                                         // STOP
        QEVAL_CHECK(stack.size() == 1 && stack.back().tag != Tag::mark,
                    "{}: data.pkl stops with {} entries on its stack at byte {}, expected the one result", source,
                    stack.size(), at);
        out.append(p, at, 1);
        return out;
      default:
        fail("{}: data.pkl uses pickle opcode 0x{:02x} at byte {}, which LibTorch's unpickler does not read "
             "(torch.save writes protocol 2 with tensors, dicts, lists, tuples, numbers and strings)",
             source, static_cast<unsigned>(op), at);
    }
    need(arg, pos);
    out.append(p, at, 1 + arg);
    pos += arg;
  }
}

namespace {

// A tensor rebuilt from a pickle carries the pickle's offset, sizes and strides over a storage
// of the record's size, and LibTorch 1.13 does not check that they fit: a tensor of 2 x 4 floats
// over an empty storage segfaulted the first read (found by fuzz_torch_pickle). Checked here in
// 128-bit arithmetic; a tensor with more elements than its storage holds (an expanded view, which
// state dicts do not contain) is refused too, since reading it would multiply memory.
void check_tensor_fits_storage(const at::Tensor& t, const std::string& name, const std::string& source) {
  // Quantized, sparse or complex tensors (a pickle can ask for them) have no place in the
  // checkpoints qeval reads, and most operations on them throw LibTorch errors later.
  QEVAL_CHECK(t.layout() == at::kStrided && !t.is_quantized() && t.device().is_cpu() && !at::isComplexType(t.scalar_type()),
              "{}: tensor {} is a {} tensor ({}); only dense real-valued tensors are read", source, name,
              t.is_quantized() ? "quantized" : (t.layout() != at::kStrided ? "sparse" : "complex or non-CPU"),
              t.toString());
  const auto sizes = t.sizes();
  const auto strides = t.strides();
  const auto item = static_cast<__int128>(t.element_size());
  const auto storage_bytes = static_cast<__int128>(t.storage().nbytes());
  // Both sums are capped at 2^64 (beyond any storage) after each step: a cap times an int64
  // stays below 2^127, so nothing overflows however many dimensions there are.
  constexpr __int128 kCap = __int128(1) << 64;
  __int128 numel = 1, last = t.storage_offset();
  bool empty = false;
  for (std::size_t d = 0; d < sizes.size(); ++d) {
    QEVAL_CHECK(sizes[d] >= 0 && strides[d] >= 0, "{}: tensor {} has a negative size or stride ({} / {} in dim {})",
                source, name, sizes[d], strides[d], d);
    if (sizes[d] == 0) empty = true;
    numel = std::min(numel * sizes[d], kCap);
    last = std::min(last + static_cast<__int128>(sizes[d] == 0 ? 0 : sizes[d] - 1) * strides[d], kCap);
  }
  QEVAL_CHECK(t.storage_offset() >= 0, "{}: tensor {} has a negative storage offset", source, name);
  if (empty) return;
  QEVAL_CHECK((last + 1) * item <= storage_bytes,
              "{}: tensor {} (sizes {}, strides {}, offset {}) reaches beyond its storage of {} bytes", source, name,
              fmt::join(sizes, "x"), fmt::join(strides, ","), t.storage_offset(), t.storage().nbytes());
  QEVAL_CHECK(numel * item <= storage_bytes,
              "{}: tensor {} has more elements than its storage holds (an expanded view); save it after .clone()",
              source, name);
}

// Runs a LibTorch step. LibTorch throws c10::Error and, for some bad input, std::runtime_error;
// either becomes a qeval::Error naming the file and what was being read (qeval's own errors,
// thrown from callbacks inside the step, pass through as they are).
template <typename Step>
auto libtorch_step(const std::string& source, const char* what, Step&& step) -> decltype(step()) {
  try {
    return step();
  } catch (const Error&) {
    throw;
  } catch (const std::exception& e) {
    fail("{}: {}: {}", source, what, first_line(e.what()));
  }
}

}  // namespace

std::map<std::string, at::Tensor> read_torch_state_dict(const fs::path& file, nlohmann::json* notes) {
  const std::string source = file.string();
  QEVAL_CHECK(is_zip_file(file),
              "{}: not a zip archive; only torch.save's zip format (PyTorch >= 1.6) is supported (legacy torch.save "
              "files: re-save with a recent PyTorch, or convert to safetensors)",
              source);
  // PyTorchStreamReader::getRecord() allocates the size a record declares before reading it. torch.save
  // stores records uncompressed, so none can declare more bytes than the file holds.
  const std::uint64_t file_bytes = fs::file_size(file);
  for (const ZipRecord& r : zip_directory(file))
    QEVAL_CHECK(r.uncompressed_bytes <= file_bytes,
                "{}: zip record {} declares {} bytes, more than the {}-byte file holds (torch.save stores records "
                "uncompressed; damaged archive?)",
                source, r.name, r.uncompressed_bytes, file_bytes);
  auto reader = libtorch_step(source, "not a readable torch.save zip archive (truncated or corrupt?)", [&] {
    return std::make_unique<caffe2::serialize::PyTorchStreamReader>(source);
  });
  const std::string pickle = libtorch_step(source, "cannot read data.pkl from the zip archive (truncated or corrupt?)", [&] {
    QEVAL_CHECK(reader->hasRecord("data.pkl"), "{}: the zip archive has no data.pkl; not a torch.save file", source);
    auto [data, size] = reader->getRecord("data.pkl");
    return std::string(static_cast<const char*>(data.get()), size);
  });
  const std::string patched = patch_ordered_dicts(pickle, source);
  // The unpickler sizes each storage from the pickle but fills it from the record, which may be
  // shorter: each record's buffer and size are kept so every storage can be checked against them.
  std::map<const void*, std::size_t> record_bytes;
  const c10::IValue value = libtorch_step(
      source, "data.pkl holds something LibTorch's unpickler cannot read (a state dict of tensors is expected)", [&] {
        std::size_t offset = 0;
        auto read = [&](char* buffer, std::size_t n) {
          const std::size_t k = std::min(n, patched.size() - offset);
          std::memcpy(buffer, patched.data() + offset, k);
          offset += k;
          return k;
        };
        auto read_record = [&](const std::string& key) {
          const std::string name = "data/" + key;
          QEVAL_CHECK(reader->hasRecord(name), "{}: data.pkl refers to storage {} which the archive lacks", source, name);
          auto [data, size] = reader->getRecord(name);
          record_bytes[data.get()] = size;
          return std::move(data);
        };
        torch::jit::Unpickler unpickler(read, nullptr, nullptr, read_record, c10::Device(c10::kCPU));
        return unpickler.parse_ivalue();
      });
  QEVAL_CHECK(value.isGenericDict(), "{}: data.pkl holds a {}, expected a dict of tensors (a state dict)", source,
              value.tagKind());
  c10::impl::GenericDict dict = value.toGenericDict();
  for (const char* key : {"state_dict", "model"}) {
    auto it = dict.find(c10::IValue(std::string(key)));
    if (it != dict.end() && it->value().isGenericDict()) {
      if (notes) (*notes)["state_dict_key"] = key;
      dict = it->value().toGenericDict();
      break;
    }
  }
  std::map<std::string, at::Tensor> tensors;
  nlohmann::json skipped = nlohmann::json::array();
  for (const auto& entry : dict) {
    // Int keys are the OrderedDict bridge's (see patch_ordered_dicts).
    if (entry.key().isInt()) continue;
    QEVAL_CHECK(entry.key().isString(), "{}: state dict key of type {}, expected strings", source, entry.key().tagKind());
    const std::string name = entry.key().toStringRef();
    if (!entry.value().isTensor()) {
      skipped.push_back(name);
      continue;
    }
    at::Tensor tensor = entry.value().toTensor();
    const auto record = record_bytes.find(tensor.storage().data_ptr().get());
    QEVAL_CHECK(record != record_bytes.end() && tensor.storage().nbytes() <= record->second,
                "{}: tensor {} has a storage of {} bytes, but its record in the archive holds {}", source, name,
                tensor.storage().nbytes(), record == record_bytes.end() ? std::string("none") : std::to_string(record->second));
    check_tensor_fits_storage(tensor, name, source);
    tensors[name] = std::move(tensor);
  }
  QEVAL_CHECK(!tensors.empty(), "{}: the state dict holds no tensors", source);
  if (notes && !skipped.empty()) (*notes)["non_tensor_entries"] = skipped;
  return tensors;
}

namespace {

// A stored dtype as safetensors and GGUF name theirs, so that inspect's table reads alike for every format.
std::string stored_dtype_name(at::ScalarType type) {
  switch (type) {
    case at::kFloat: return "F32";
    case at::kHalf: return "F16";
    case at::kBFloat16: return "BF16";
    case at::kDouble: return "F64";
    case at::kLong: return "I64";
    case at::kInt: return "I32";
    case at::kShort: return "I16";
    case at::kChar: return "I8";
    case at::kByte: return "U8";
    case at::kBool: return "BOOL";
    default: return c10::toString(type);
  }
}

// load_torch_checkpoint, and the state dict's tensors as stored for a reader's table (when `table`).
LoadedCheckpoint read_torch_checkpoint(const fs::path& file, std::vector<TensorHeader>* table) {
  const fs::path dir = file.has_parent_path() ? file.parent_path() : fs::path(".");
  QEVAL_CHECK(fs::is_regular_file(dir / "config.json"),
              "{}: a torch.save zip state dict needs config.json (Hugging Face GPT-2 or Llama) in the same folder", file.string());
  nlohmann::json notes = nlohmann::json::object();
  TensorMap tensors(file.string(), read_torch_state_dict(file, &notes));
  // The weights hash from the tensors read (loaders/checkpoints/weights_hash.h): each one's
  // elements in its stored dtype, row-major (a view's elements, not its whole storage).
  TensorHashes hashes;
  for (const auto& [name, t] : tensors.tensors()) {
    const at::Tensor stored = t.contiguous();
    const auto bytes = static_cast<std::uint64_t>(stored.numel()) * stored.element_size();
    hashes.add(name, stored_dtype_name(t.scalar_type()), t.sizes().vec(), {}, 0, bytes);
    hashes.saw(name, 0, stored.data_ptr(), bytes);
  }
  if (table) {
    const std::string file_name = file.filename().string();
    for (const auto& [name, t] : tensors.tensors())
      table->push_back({name, stored_dtype_name(t.scalar_type()), t.sizes().vec(), file_name});
  }
  LoadedCheckpoint out = load_hf_tensors(dir, tensors);
  out.format = "torch-" + out.format;
  out.path = file;
  for (const auto& [k, v] : notes.items()) out.notes[k] = v;
  out.notes["weight_files"] = {file.filename().string()};
  out.weights_hash = hashes.finish();
  return out;
}

}  // namespace

LoadedCheckpoint load_torch_checkpoint(const fs::path& file) { return read_torch_checkpoint(file, nullptr); }

std::unique_ptr<ModelReader> open_torch_checkpoint(const fs::path& file) {
  std::vector<TensorHeader> table;
  LoadedCheckpoint checkpoint = read_torch_checkpoint(file, &table);
  return resident_reader(std::move(checkpoint), std::move(table), qeval::file_size(file));
}

}  // namespace qeval
