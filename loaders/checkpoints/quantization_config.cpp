#include "loaders/checkpoints/quantization_config.h"

#include <fmt/format.h>

#include <algorithm>
#include <regex>

#include "common/error.h"
#include "common/json_integer.h"
#include "common/printable.h"
#include "loaders/checkpoints/checkpoint_internal.h"

namespace qeval {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

// Reads keys of one JSON object, each error naming the file and the key path.
struct Keys {
  const json& j;
  const std::string& file;
  std::string path;

  std::string at(const std::string& key) const { return path + "." + key; }
  bool has(const std::string& key) const { return j.contains(key) && !j[key].is_null(); }
  const json& required(const std::string& key) const {
    QEVAL_CHECK(has(key), "{}: {} is missing", file, at(key));
    return j[key];
  }
  std::string string(const std::string& key, const std::string& fallback, bool required_key = false) const {
    if (!has(key)) {
      QEVAL_CHECK(!required_key, "{}: {} is missing; expected a string", file, at(key));
      return fallback;
    }
    QEVAL_CHECK(j[key].is_string(), "{}: {} should be a string, found {}", file, at(key), json_text(j[key]));
    return j[key].get<std::string>();
  }
  std::int64_t integer(const std::string& key, std::int64_t fallback) const {
    if (!has(key)) return fallback;
    return json_integer(j[key], fmt::format("{}: {}", file, at(key)));
  }
  bool boolean(const std::string& key, bool fallback) const {
    if (!has(key)) return fallback;
    QEVAL_CHECK(j[key].is_boolean(), "{}: {} should be true or false, found {}", file, at(key), json_text(j[key]));
    return j[key].get<bool>();
  }
  std::vector<std::string> strings(const std::string& key) const {
    std::vector<std::string> out;
    if (!has(key)) return out;
    if (j[key].is_string()) return {j[key].get<std::string>()};  // compressed-tensors accepts a lone target
    QEVAL_CHECK(j[key].is_array(), "{}: {} should be a list of strings, found {}", file, at(key), json_text(j[key]));
    for (std::size_t i = 0; i < j[key].size(); ++i) {
      QEVAL_CHECK(j[key][i].is_string(), "{}: {}[{}] should be a string, found {}", file, at(key), i, json_text(j[key][i]));
      out.push_back(j[key][i].get<std::string>());
    }
    return out;
  }
  std::string one_of(const std::string& key, const std::string& fallback, std::initializer_list<const char*> allowed) const {
    const std::string v = string(key, fallback);
    for (const char* a : allowed)
      if (v == a) return v;
    fail("{}: {} is \"{}\"; expected one of {}", file, at(key), v, fmt::join(allowed, ", "));
  }
};

void check_bits(int bits, std::initializer_list<int> allowed, const std::string& file, const std::string& key,
                const std::string& what) {
  QEVAL_CHECK(std::find(allowed.begin(), allowed.end(), bits) != allowed.end(), "{}: {} is {}; {} has {} bits", file, key,
              bits, what, fmt::join(allowed, ", "));
}

// A "re:" target is a regex; a bad one is the file's error, not std::regex's. `where` names the
// entry by its key path (quantization_config.config_groups.group_0.targets[0]) when parsing.
bool regex_matches(const std::string& pattern, const std::string& name, const std::string& file,
                   const std::string& where = "target or ignore entry") {
  // std::regex compiles and matches recursively: a bound keeps a hostile pattern from the stack's end.
  QEVAL_CHECK(pattern.size() <= 1000, "{}: {} \"re:{}...\" is {} characters; expected at most 1000", file, where,
              pattern.substr(0, 40), pattern.size());
  try {
    return std::regex_search(name, std::regex(pattern), std::regex_constants::match_continuous);
  } catch (const std::regex_error& e) {
    fail("{}: {} \"re:{}\" is not a valid regular expression ({})", file, where, pattern, e.what());
  }
}

// compressed-tensors' is_match: "re:" regexes from the start of the name, class names, or the
// module's exact name. qeval maps only linear modules through here, so "Linear" matches each.
bool target_matches(const std::string& target, const std::string& module, const std::string& file) {
  if (target.rfind("re:", 0) == 0) return regex_matches(target.substr(3), module, file);
  return target == "Linear" || target == module;
}

constexpr std::initializer_list<const char*> kCtFormats = {"pack-quantized",  "int-quantized",        "naive-quantized",
                                                            "float-quantized", "nvfp4-pack-quantized", "dense"};

CtWeightArgs parse_ct_weights(const Keys& k) {
  CtWeightArgs w;
  w.num_bits = static_cast<int>(k.integer("num_bits", 8));
  w.type = k.one_of("type", "int", {"int", "float"});
  w.symmetric = k.boolean("symmetric", true);
  w.strategy = k.one_of("strategy", "tensor", {"tensor", "channel", "group", "block", "tensor_group"});
  w.group_size = k.integer("group_size", 0);
  if (k.has("block_structure")) {
    const json& b = k.j["block_structure"];
    QEVAL_CHECK(b.is_array() && b.size() == 2, "{}: {} should be [rows, cols], found {}", k.file, k.at("block_structure"),
                json_text(b));
    for (const auto& v : b) w.block_structure.push_back(json_integer(v, fmt::format("{}: {}", k.file, k.at("block_structure"))));
  }
  if (k.has("actorder")) {
    if (k.j["actorder"].is_boolean())
      w.actorder = k.j["actorder"].get<bool>() ? "group" : "";
    else
      w.actorder = k.one_of("actorder", "", {"group", "weight", "static", "dynamic"});
  }
  QEVAL_CHECK(w.num_bits >= 1 && w.num_bits <= 8, "{}: {} is {}; compressed-tensors stores 1 to 8 bits", k.file,
              k.at("num_bits"), w.num_bits);
  if (w.type == "float") check_bits(w.num_bits, {4, 8}, k.file, k.at("num_bits"), "a float type");
  if (w.strategy == "group" || w.strategy == "tensor_group")
    QEVAL_CHECK(w.group_size > 0, "{}: {} is {}; strategy {} needs a positive group_size", k.file, k.at("group_size"),
                w.group_size, w.strategy);
  if (w.strategy == "block")
    QEVAL_CHECK(w.block_structure.size() == 2 && w.block_structure[0] > 0 && w.block_structure[1] > 0,
                "{}: {} is missing or not positive; strategy block needs [rows, cols]", k.file, k.at("block_structure"));
  return w;
}

// The pack format must be one this group's weights can be stored in.
void check_ct_format(const std::string& format, const CtWeightArgs& w, const std::string& file, const std::string& key) {
  auto refuse = [&](const char* why) {
    fail("{}: {} is \"{}\", which cannot hold {}{} weights ({})", file, key, format, w.type, w.num_bits, why);
  };
  if (format == "pack-quantized" && w.type != "int") refuse("pack-quantized packs integer codes");
  if ((format == "int-quantized" || format == "naive-quantized") && (w.type != "int" || w.num_bits > 8))
    refuse("int8 codes only");
  if (format == "float-quantized" && !(w.type == "float" && w.num_bits == 8)) refuse("FP8 E4M3 only");
  if (format == "nvfp4-pack-quantized" && !(w.type == "float" && w.num_bits == 4)) refuse("FP4 E2M1 only");
  if (format == "dense") fail("{}: {} is \"dense\": the weights are not compressed, so no quantised format applies", file, key);
}

void parse_compressed_tensors(QuantizationConfig& c, const Keys& k) {
  c.format = k.one_of("format", "dense", kCtFormats);
  c.ignore = k.strings("ignore");
  const json& groups = k.required("config_groups");
  QEVAL_CHECK(groups.is_object() && !groups.empty(), "{}: {} should be a non-empty object of groups, found {}", k.file,
              k.at("config_groups"), json_text(groups));
  for (const auto& [name, g] : groups.items()) {
    const std::string path = k.at("config_groups") + "." + name;
    QEVAL_CHECK(g.is_object(), "{}: {} should be an object, found {}", k.file, path, json_text(g));
    const Keys gk{g, k.file, path};
    CtGroup group;
    group.name = name;
    group.targets = gk.strings("targets");
    QEVAL_CHECK(!group.targets.empty(), "{}: {} is missing or empty; expected module classes or \"re:\" patterns", k.file,
                gk.at("targets"));
    group.format = gk.has("format") ? gk.one_of("format", "", kCtFormats) : c.format;
    const json& weights = gk.required("weights");
    QEVAL_CHECK(weights.is_object(), "{}: {} should be an object, found {}", k.file, gk.at("weights"), json_text(weights));
    group.weights = parse_ct_weights(Keys{weights, k.file, gk.at("weights")});
    check_ct_format(group.format, group.weights, k.file, gk.has("format") ? gk.at("format") : k.at("format"));
    if (gk.has("input_activations")) group.input_activations = g["input_activations"];
    for (std::size_t i = 0; i < group.targets.size(); ++i)  // a bad pattern fails here, on open
      if (group.targets[i].rfind("re:", 0) == 0)
        regex_matches(group.targets[i].substr(3), "", k.file, fmt::format("{}[{}]", gk.at("targets"), i));
    c.groups.push_back(std::move(group));
  }
  for (std::size_t i = 0; i < c.ignore.size(); ++i)
    if (c.ignore[i].rfind("re:", 0) == 0) regex_matches(c.ignore[i].substr(3), "", k.file, fmt::format("{}[{}]", k.at("ignore"), i));
  c.bits = c.groups.front().weights.num_bits;
  const CtWeightArgs& w = c.groups.front().weights;
  c.group_size = w.strategy == "group" || w.strategy == "tensor_group" ? w.group_size : 0;
}

void parse_gptq(QuantizationConfig& c, const Keys& k) {
  c.bits = static_cast<int>(json_integer(k.required("bits"), fmt::format("{}: {}", k.file, k.at("bits"))));
  check_bits(c.bits, {2, 3, 4, 8}, k.file, k.at("bits"), "GPTQ");
  c.group_size = k.integer("group_size", 128);
  QEVAL_CHECK(c.group_size == -1 || c.group_size > 0, "{}: {} is {}; expected a positive size or -1", k.file,
              k.at("group_size"), c.group_size);
  c.desc_act = k.boolean("desc_act", false);
  c.sym = k.boolean("sym", true);
  // GPTQModel writes "checkpoint_format", older GPTQModel "format"; AutoGPTQ neither (v1).
  const std::string key = k.has("checkpoint_format") ? "checkpoint_format" : "format";
  c.format = k.one_of(key, "gptq", {"gptq", "gptq_v2", "marlin", "bitblas", "ipex"});
  QEVAL_CHECK(c.format == "gptq" || c.format == "gptq_v2",
              "{}: {} is \"{}\": a kernel-specific repacking qeval does not read; expected gptq or gptq_v2", k.file,
              k.at(key), c.format);
  c.gptq_format = c.format == "gptq_v2" ? GptqFormat::v2 : GptqFormat::v1;
}

void parse_awq(QuantizationConfig& c, const Keys& k) {
  const std::string bits_key = k.has("bits") ? "bits" : "w_bit";  // AutoAWQ's quant_config.json says w_bit
  QEVAL_CHECK(k.has(bits_key), "{}: {} is missing (AutoAWQ's quant_config.json: {}); expected 4", k.file, k.at("bits"),
              k.at("w_bit"));
  c.bits = static_cast<int>(json_integer(k.required(bits_key), fmt::format("{}: {}", k.file, k.at(bits_key))));
  check_bits(c.bits, {4}, k.file, k.at(bits_key), "AWQ's GEMM packing");
  const std::string group_key = k.has("group_size") ? "group_size" : "q_group_size";
  c.group_size = k.integer(group_key, 128);
  QEVAL_CHECK(c.group_size > 0, "{}: {} is {}; expected a positive group size", k.file, k.at(group_key), c.group_size);
  c.zero_point = k.boolean("zero_point", true);
  const std::string version = k.string("version", "gemm");
  std::string lower = version;
  std::transform(lower.begin(), lower.end(), lower.begin(), [](unsigned char ch) { return std::tolower(ch); });
  QEVAL_CHECK(lower == "gemm", "{}: {} is \"{}\": qeval reads AWQ's GEMM packing only (gemv, gemv_fast and the exllama / "
              "marlin repackings are other layouts)", k.file, k.at("version"), version);
  c.format = "gemm";
}

void parse_bitsandbytes(QuantizationConfig& c, const Keys& k) {
  const bool four = k.boolean("load_in_4bit", false), eight = k.boolean("load_in_8bit", false);
  QEVAL_CHECK(four != eight, "{}: {} and {} are {} and {}; expected exactly one true", k.file, k.at("load_in_4bit"),
              k.at("load_in_8bit"), four, eight);
  if (four) {
    c.format = k.one_of("bnb_4bit_quant_type", "fp4", {"nf4", "fp4"});
    c.bnb_quant_type = c.format == "nf4" ? BnbQuantType::nf4 : BnbQuantType::fp4;
    c.bnb_double_quant = k.boolean("bnb_4bit_use_double_quant", false);
    c.bits = 4;
  } else {
    c.format = "int8";
    c.bits = 8;
  }
  c.not_converted = k.strings("llm_int8_skip_modules");
}

void parse_fp8(QuantizationConfig& c, const Keys& k) {
  c.format = "float-quantized";
  c.bits = 8;
  const json& b = k.required("weight_block_size");
  QEVAL_CHECK(b.is_array() && b.size() == 2, "{}: {} should be [rows, cols], found {}", k.file, k.at("weight_block_size"),
              json_text(b));
  c.block_rows = json_integer(b[0], fmt::format("{}: {}[0]", k.file, k.at("weight_block_size")));
  c.block_cols = json_integer(b[1], fmt::format("{}: {}[1]", k.file, k.at("weight_block_size")));
  QEVAL_CHECK(c.block_rows > 0 && c.block_cols > 0, "{}: {} is [{}, {}]; expected positive sizes", k.file,
              k.at("weight_block_size"), c.block_rows, c.block_cols);
  c.activation_scheme = k.one_of("activation_scheme", "dynamic", {"dynamic", "static"});
  c.not_converted = k.strings("modules_to_not_convert");
}

bool listed(const std::vector<std::string>& modules, const std::string& module) {
  // bitsandbytes' and fp8's skip lists hold names or name parts ("lm_head" skips "lm_head").
  for (const auto& m : modules)
    if (module == m || module.find(m) != std::string::npos) return true;
  return false;
}

}  // namespace

const char* quant_method_name(QuantMethod m) {
  switch (m) {
    case QuantMethod::compressed_tensors: return "compressed-tensors";
    case QuantMethod::gptq: return "gptq";
    case QuantMethod::awq: return "awq";
    case QuantMethod::bitsandbytes: return "bitsandbytes";
    case QuantMethod::fp8: return "fp8";
  }
  return "";
}

ScaleLayout CtWeightArgs::layout() const {
  ScaleLayout l;
  if (strategy == "channel") l.kind = ScaleLayout::Kind::channel;
  if (strategy == "group" || strategy == "tensor_group") l.kind = ScaleLayout::Kind::group, l.group = group_size;
  if (strategy == "block") l.kind = ScaleLayout::Kind::block, l.block_rows = block_structure[0], l.block_cols = block_structure[1];
  return l;
}

const CtGroup* QuantizationConfig::group_for(const std::string& module) const {
  for (const auto& i : ignore)
    if (target_matches(i, module, file)) return nullptr;
  for (const auto& g : groups)
    for (const auto& t : g.targets)
      if (target_matches(t, module, file)) return &g;
  return nullptr;
}

bool QuantizationConfig::quantises(const std::string& module) const {
  switch (method) {
    case QuantMethod::compressed_tensors: return group_for(module) != nullptr;
    case QuantMethod::bitsandbytes:
    case QuantMethod::fp8: return !listed(not_converted, module);
    default: return true;
  }
}

json QuantizationConfig::describe() const {
  json d = {{"method", quant_method_name(method)}, {"format", format}, {"bits", bits}, {"config_file", fs::path(file).filename().string()}};
  switch (method) {
    case QuantMethod::compressed_tensors: {
      json groups_json = json::object();
      for (const auto& g : groups) {
        json w = {{"num_bits", g.weights.num_bits}, {"type", g.weights.type}, {"symmetric", g.weights.symmetric},
                  {"strategy", g.weights.strategy}, {"scales", g.weights.layout().describe()}, {"format", g.format}};
        if (!g.weights.actorder.empty()) w["actorder"] = g.weights.actorder;
        groups_json[g.name] = {{"targets", g.targets}, {"weights", w}, {"input_activations", g.input_activations}};
      }
      d["group_size"] = group_size;
      d["config_groups"] = groups_json;
      d["ignore"] = ignore;
      break;
    }
    case QuantMethod::gptq:
      d["group_size"] = group_size;
      d["desc_act"] = desc_act;
      d["sym"] = sym;
      break;
    case QuantMethod::awq:
      d["group_size"] = group_size;
      d["zero_point"] = zero_point;
      break;
    case QuantMethod::bitsandbytes:
      if (bits == 4) d["double_quant"] = bnb_double_quant;
      break;
    case QuantMethod::fp8:
      d["block"] = {block_rows, block_cols};
      d["activation_scheme"] = activation_scheme;
      break;
  }
  return d;
}

QuantizationConfig parse_quantization_config(const json& qc, const std::string& file, const std::string& key) {
  QEVAL_CHECK(qc.is_object(), "{}: {} should be an object, found {}", file, key, json_text(qc));
  const Keys k{qc, file, key};
  QuantizationConfig c;
  c.file = file;
  // AutoGPTQ's quantize_config.json and AutoAWQ's quant_config.json name no method: their keys say which.
  const std::string method = k.has("quant_method") ? k.string("quant_method", "")
                             : qc.contains("w_bit")  ? "awq"
                             : qc.contains("bits")   ? "gptq"
                                                     : "";
  if (method == "compressed-tensors")
    c.method = QuantMethod::compressed_tensors, parse_compressed_tensors(c, k);
  else if (method == "gptq")
    c.method = QuantMethod::gptq, parse_gptq(c, k);
  else if (method == "awq")
    c.method = QuantMethod::awq, parse_awq(c, k);
  else if (method == "bitsandbytes")
    c.method = QuantMethod::bitsandbytes, parse_bitsandbytes(c, k);
  else if (method == "fp8")
    c.method = QuantMethod::fp8, parse_fp8(c, k);
  else
    fail("{}: {} is \"{}\"; expected one of compressed-tensors, gptq, awq, bitsandbytes, fp8", file, k.at("quant_method"),
         method);
  return c;
}

std::optional<QuantizationConfig> read_quantization_config(const json& config, const fs::path& dir) {
  const std::string config_file = (dir / "config.json").string();
  if (config.is_object() && config.contains("quantization_config") && !config["quantization_config"].is_null())
    return parse_quantization_config(config["quantization_config"], config_file, "quantization_config");
  for (const char* name : {"quantize_config.json", "quant_config.json"}) {
    const fs::path p = dir / name;
    std::error_code error;
    if (fs::is_regular_file(p, error)) return parse_quantization_config(read_json_file(p), p.string(), name);
  }
  return std::nullopt;
}

}  // namespace qeval
