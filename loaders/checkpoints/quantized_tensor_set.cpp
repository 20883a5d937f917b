#include "loaders/checkpoints/quantized_tensor_set.h"

#include <fmt/format.h>

#include "common/error.h"
#include "common/json_integer.h"
#include "quant/formats/awq.h"
#include "quant/formats/bitsandbytes.h"
#include "quant/formats/compressed_tensors.h"
#include "quant/formats/fp8_block.h"
#include "quant/formats/gptq.h"

namespace qeval {

using nlohmann::json;

namespace {

bool has_suffix(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// The dtype of the stored tensor allows no float read: codes, packed words or FP8 bytes.
bool stored_as_codes(const SafetensorsTensorInfo& info) { return !at::isFloatingType(info.scalar_type); }

}  // namespace

std::string QuantizedTensorSet::stored_form(const std::string& module) const {
  const QuantizationConfig& c = *config_;
  const std::string weight = module + ".weight";
  switch (c.method) {
    case QuantMethod::gptq:
    case QuantMethod::awq:
      // A module with GPTQ's / AWQ's other fields but neither qweight nor a plain weight is a quantised one
      // whose qweight is missing: read as such, so that the error names the config and qweight.
      return set_.has(module + ".qweight") ||
                     (!set_.has(weight) && (set_.has(module + ".qzeros") || set_.has(module + ".scales")))
                 ? c.format
                 : "";
    case QuantMethod::compressed_tensors: {
      const CtGroup* g = c.group_for(module);
      return g ? g->format : "";
    }
    case QuantMethod::bitsandbytes:
      // transformers keeps lm_head and llm_int8_skip_modules in their float dtype: the stored dtype says.
      if (!set_.has(weight) || !stored_as_codes(set_.header(weight))) return "";
      if (set_.header(weight).scalar_type == at::kChar) {
        // int8 codes are the 8-bit layout (SCB); a 4-bit config with them disagrees with the file.
        QEVAL_CHECK(c.bits == 8, "{}: quantization_config.load_in_4bit is true ({}), but {} is stored as int8 codes "
                    "(bitsandbytes' 8-bit layout, load_in_8bit); expected uint8 4-bit codes", c.file, c.format, weight);
        return "int8";
      }
      return c.format;
    case QuantMethod::fp8:
      if (!c.quantises(module) || !set_.has(weight) || !stored_as_codes(set_.header(weight))) return "";
      return c.format;
  }
  return "";
}

bool QuantizedTensorSet::has(const std::string& name) const {
  if (set_.has(name)) return true;
  if (!config_ || !has_suffix(name, ".weight")) return false;
  return !stored_form(name.substr(0, name.size() - 7)).empty();
}

bool QuantizedTensorSet::is_declared_activation_tensor(const std::string& name) const {
  if (!config_ || config_->method != QuantMethod::compressed_tensors) return false;
  const std::size_t dot = name.rfind('.');
  if (dot == std::string::npos) return false;
  const std::string field = name.substr(dot + 1);
  if (field != "input_scale" && field != "input_zero_point" && field != "input_global_scale") return false;
  const CtGroup* g = config_->group_for(name.substr(0, dot));
  return g != nullptr && !g->input_activations.is_null();
}

std::map<std::string, std::int64_t> QuantizedTensorSet::dequantised() const {
  std::map<std::string, std::int64_t> counts;
  for (const auto& [module, label] : forms_) ++counts[label];
  return counts;
}

at::Tensor QuantizedTensorSet::stored(const std::string& module, const std::string& field) {
  const std::string name = module + "." + field;
  if (!set_.has(name)) {
    file_.clear();  // this error names the config, not a weights file
    fail("{}: module {} is stored as {} {} (quantization_config), but tensor {} is absent", config_->file, module,
         quant_method_name(config_->method), config_->format, name);
  }
  file_ = set_.file_of(name).path().string();
  return set_.take_stored(name);
}

at::Tensor QuantizedTensorSet::optional_stored(const std::string& module, const std::string& field) {
  const std::string name = module + "." + field;
  return set_.has(name) ? set_.take_stored(name) : at::Tensor();
}

at::Tensor QuantizedTensorSet::take(const std::string& name, const std::vector<std::int64_t>& shape) {
  if (!config_ || shape.size() != 2 || !has_suffix(name, ".weight")) return set_.take(name, shape);
  const std::string module = name.substr(0, name.size() - 7);
  const std::string form = stored_form(module);
  if (form.empty()) return set_.take(name, shape);
  at::Tensor w;
  file_.clear();
  try {
    w = dequantise(module, form, shape[0], shape[1]);
  } catch (const Error& e) {
    // The codecs name the module and the field; the file is the reader's to add.
    const std::string message = e.what();
    if (!file_.empty() && message.find(file_) == std::string::npos) fail("{}: {}", file_, message);
    throw;
  }
  if (!set_.header_only()) {
    const at::Device onto = ReadFloatsOnto::current();
    if (!onto.is_cpu()) w = w.to(onto);
  }
  return w;
}

at::Tensor QuantizedTensorSet::dequantise(const std::string& module, const std::string& form, std::int64_t N,
                                          std::int64_t K) {
  const QuantizationConfig& c = *config_;
  const bool header_only = set_.header_only();
  const at::Tensor meta = at::empty({N, K}, at::TensorOptions().dtype(at::kFloat).device(at::kMeta));
  std::string label;
  at::Tensor out;
  switch (c.method) {
    case QuantMethod::gptq: {
      GptqWeight w{stored(module, "qweight"), stored(module, "qzeros"), stored(module, "scales"), optional_stored(module, "g_idx")};
      label = fmt::format("gptq {} {}-bit g{}", c.format, c.bits, c.group_size);
      if (header_only) break;
      GptqArgs a;
      a.bits = c.bits;
      a.group_size = c.group_size;
      a.desc_act = c.desc_act;
      a.format = c.gptq_format;
      out = gptq_dequantize(w, a, N, K, module);
      break;
    }
    case QuantMethod::awq: {
      const at::Tensor qweight = stored(module, "qweight"), qzeros = stored(module, "qzeros"), scales = stored(module, "scales");
      label = fmt::format("awq gemm {}-bit g{}", c.bits, c.group_size);
      if (header_only) break;
      out = awq_gemm_dequantize(qweight, qzeros, scales, c.bits, c.group_size, N, K, module);
      break;
    }
    case QuantMethod::compressed_tensors: {
      const CtWeightArgs& a = c.group_for(module)->weights;
      const ScaleLayout layout = a.layout();
      label = fmt::format("compressed-tensors {} {}{} {}", form, a.type, a.num_bits, layout.describe());
      if (form == "pack-quantized") {
        // Asymmetric codes need their zero point (compressed-tensors saves it; without it the codes would read as symmetric).
        CtPackedWeight w{stored(module, "weight_packed"), stored(module, "weight_scale"),
                         a.symmetric ? optional_stored(module, "weight_zero_point") : stored(module, "weight_zero_point")};
        const at::Tensor shape = stored(module, "weight_shape");
        const at::Tensor g_idx = optional_stored(module, "weight_g_idx");
        if (header_only) break;
        QEVAL_CHECK(!at::isFloatingType(shape.scalar_type()), "{}: {}.weight_shape is stored as {}, expected integers (int64 or int32)",
                    set_.file_of(module + ".weight_shape").path().string(), module, c10::toString(shape.scalar_type()));
        const at::Tensor s = shape.to(at::kLong);
        QEVAL_CHECK(s.numel() == 2 && s[0].item<std::int64_t>() == N && s[1].item<std::int64_t>() == K,
                    "{}: {}.weight_shape holds {}, expected [{}, {}]", set_.file_of(module + ".weight_shape").path().string(),
                    module, s.numel() == 2 ? fmt::format("[{}, {}]", s[0].item<std::int64_t>(), s[1].item<std::int64_t>()) : "another shape",
                    N, K);
        if (g_idx.defined() && layout.kind == ScaleLayout::Kind::group) {
          // Activation order "group" stores each column's group; qeval's codec reads groups in order.
          const at::Tensor in_order = at::arange(K, at::kLong).div(layout.group, "floor");
          QEVAL_CHECK(at::equal(g_idx.to(at::kLong), in_order),
                      "{}: {}.weight_g_idx is not in order (activation-ordered groups); qeval reads compressed-tensors "
                      "groups in column order only", set_.file_of(module + ".weight_g_idx").path().string(), module);
        }
        out = ct_dequantize_pack_quantized(w, a.num_bits, layout, N, K, module);
      } else if (form == "int-quantized" || form == "naive-quantized") {
        const at::Tensor weight = stored(module, "weight"), scale = stored(module, "weight_scale"),
                         zero = a.symmetric ? optional_stored(module, "weight_zero_point") : stored(module, "weight_zero_point");
        if (header_only) break;
        out = ct_dequantize_int_quantized(weight, scale, zero, a.num_bits, layout, N, K, module);
      } else if (form == "float-quantized") {
        const at::Tensor weight = stored(module, "weight"), scale = stored(module, "weight_scale");
        optional_stored(module, "weight_zero_point");  // saved as zeros by some versions; FP8 has none
        if (header_only) break;
        out = ct_dequantize_float_quantized(weight, scale, layout, N, K, module);
      } else if (form == "nvfp4-pack-quantized") {
        const at::Tensor packed = stored(module, "weight_packed"), scale = stored(module, "weight_scale"),
                         global = stored(module, "weight_global_scale");
        if (header_only) break;
        out = ct_dequantize_nvfp4(packed, scale, global, N, K, module);
      } else {
        fail("{}: module {}: format {} is not one qeval dequantises", c.file, module, form);
      }
      break;
    }
    case QuantMethod::bitsandbytes: {
      if (form == "int8") {
        const at::Tensor weight = stored(module, "weight"), scb = stored(module, "SCB");
        optional_stored(module, "weight_format");  // transformers' layout tag ("row"), nothing to read
        label = "bitsandbytes int8";
        if (header_only) break;
        out = bnb_dequantize_int8(weight, scb, N, K, module);
        break;
      }
      const std::string state_field = "weight.quant_state.bitsandbytes__" + form;
      Bnb4bitWeight w;
      w.weight = stored(module, "weight");
      w.absmax = stored(module, "weight.absmax");
      optional_stored(module, "weight.quant_map");  // bitsandbytes reads its own table, as qeval does
      w.nested_absmax = optional_stored(module, "weight.nested_absmax");
      w.nested_quant_map = optional_stored(module, "weight.nested_quant_map");
      const at::Tensor state = stored(module, state_field);
      w.quant_type = form == "nf4" ? BnbQuantType::nf4 : BnbQuantType::fp4;
      label = fmt::format("bitsandbytes {}{}", form, w.nested() ? " nested" : "");
      if (header_only) break;
      const std::string state_file = set_.file_of(module + "." + state_field).path().string();
      QEVAL_CHECK(state.scalar_type() == at::kByte || state.scalar_type() == at::kChar,
                  "{}: {}.{} is stored as {}, expected uint8 bytes of bitsandbytes' QuantState JSON", state_file, module,
                  state_field, c10::toString(state.scalar_type()));
      const at::Tensor bytes = state.contiguous();
      const json s = json::parse(std::string(static_cast<const char*>(bytes.data_ptr()), static_cast<std::size_t>(bytes.numel())),
                                 nullptr, false);
      QEVAL_CHECK(s.is_object(), "{}: {}.{} should hold bitsandbytes' QuantState JSON, found {} bytes that are not a JSON object",
                  state_file, module, state_field, bytes.numel());
      const std::string where = fmt::format("{}: {}.{}", state_file, module, state_field);
      QEVAL_CHECK(s.contains("blocksize"), "{}: \"blocksize\" is missing", where);
      w.blocksize = json_integer(s["blocksize"], where + " blocksize");
      QEVAL_CHECK(w.blocksize > 0, "{}: blocksize is {}, expected positive", where, w.blocksize);
      if (s.contains("quant_type"))
        QEVAL_CHECK(s["quant_type"] == form, "{}: quant_type is {}, but the tensor's name says {}", where, s["quant_type"].dump(), form);
      if (s.contains("shape")) {
        const json& sh = s["shape"];
        QEVAL_CHECK(sh.is_array() && sh.size() == 2 && json_int64(sh[0]) == N && json_int64(sh[1]) == K,
                    "{}: shape is {}, expected [{}, {}]", where, sh.dump(), N, K);
      }
      if (w.nested()) {
        QEVAL_CHECK(s.contains("nested_blocksize") && s.contains("nested_offset"),
                    "{}: nested_blocksize and nested_offset are needed for the nested absmax", where);
        w.nested_blocksize = json_integer(s["nested_blocksize"], where + " nested_blocksize");
        QEVAL_CHECK(w.nested_blocksize > 0, "{}: nested_blocksize is {}, expected positive", where, w.nested_blocksize);
        QEVAL_CHECK(s["nested_offset"].is_number(), "{}: nested_offset should be a number, found {}", where, s["nested_offset"].dump());
        w.nested_offset = s["nested_offset"].get<float>();
      }
      out = bnb_dequantize_4bit(w, N, K, module);
      break;
    }
    case QuantMethod::fp8: {
      const at::Tensor weight = stored(module, "weight"), scale_inv = stored(module, "weight_scale_inv");
      label = fmt::format("fp8 e4m3 block {}x{}", c.block_rows, c.block_cols);
      if (header_only) break;
      out = fp8_block_dequantize(weight, scale_inv, c.block_rows, c.block_cols, N, K, module);
      break;
    }
  }
  forms_[module] = label;
  return header_only ? meta : out;
}

}  // namespace qeval
