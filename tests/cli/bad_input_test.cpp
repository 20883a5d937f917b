// A corpus of bad inputs (issue 46), one row each: how the input is made, the qeval command, the
// exit status it must give and the fragments its message must hold. Every input is built here, in
// a temporary folder, from committed tiny files (tests/model/fixtures, ../shared/data/fixtures,
// stories260K and its tok512.bin); nothing third-party is committed.
//
// What every row asserts: the exact exit status (2 for bad input, 1 for a gate violation), each
// message fragment (the file, the key as the file spells it, the value), and that no output file
// was left behind when the command was refused. A crash (signal: status -1), a hang (the ctest
// timeout) or a silent success (status 0) fails the row.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <atomic>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "common/files.h"
#include "common/hash.h"
#include "tests/cli/run_qeval.h"
#include "tests/cli/stories_eval.h"
#include "tests/support/gguf_builder.h"
#include "tests/support/test_data.h"

namespace qeval {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

// ---- building inputs ----

// The folder one case builds its inputs in.
class Inputs {
 public:
  const fs::path& dir() const { return dir_.path(); }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }

  std::string file(const std::string& name, const std::string& bytes) const {
    test::write_bytes(dir_ / name, bytes);
    return path(name);
  }
  std::string json_file(const std::string& name, const json& j) const { return file(name, j.dump(2)); }

  // A copy of a family fixture folder (tests/model/fixtures/<name>, or ../shared/data/fixtures/<name>
  // for tiny-gpt2-hf and tiny-llama-hf) with its config.json edited.
  std::string family(const std::string& fixture, const std::function<void(json&)>& edit = {}) const {
    fs::path from = test::repo_path("tests/model/fixtures/" + fixture);
    if (!fs::exists(from)) from = test::data_path("fixtures/" + fixture);
    const fs::path to = dir_ / fixture;
    fs::create_directories(to);
    for (const auto& e : fs::directory_iterator(from))
      if (e.path().filename() != "reference.safetensors") fs::copy_file(e.path(), to / e.path().filename());
    fs::permissions(to / "config.json", fs::perms::owner_read | fs::perms::owner_write, fs::perm_options::add);
    if (edit) {
      json j = json::parse(read_file(to / "config.json"));
      edit(j);
      test::write_bytes(to / "config.json", j.dump(2));
    }
    return to.string();
  }

  // qeval's own config.json (a folder with no weights: the config is refused before they are read).
  std::string qeval_config(const std::function<void(json&)>& edit) const {
    json j = {{"format", "qeval"},   {"architecture", "llama"}, {"vocab_size", 32},  {"d_model", 16},
              {"d_ff", 32},          {"n_layers", 2},           {"n_heads", 4},      {"n_kv_heads", 2},
              {"max_seq_len", 64},   {"norm", "rmsnorm"},       {"norm_eps", 1e-5},  {"position", "rope"},
              {"rope_theta", 1e4},   {"attention_softmax", "softmax"}, {"mlp", "swiglu"}};
    edit(j);
    fs::create_directories(dir_ / "qeval-model");
    test::write_bytes(dir_ / "qeval-model" / "config.json", j.dump(2));
    return path("qeval-model");
  }

  // A tiny GGUF llama (one block, F32 zeros) with metadata `edit`ed: u32 / f32 / string values.
  struct GgufEdits {
    std::vector<std::pair<std::string, std::uint32_t>> u32;
    std::vector<std::pair<std::string, float>> f32;
    std::vector<std::pair<std::string, std::string>> strings;
    std::vector<std::string> drop;
  };
  std::string gguf(const GgufEdits& e, const std::string& arch = "llama") const {
    std::map<std::string, std::uint32_t> u32 = {{".embedding_length", 8}, {".feed_forward_length", 12},
                                                {".block_count", 1},      {".attention.head_count", 2},
                                                {".attention.head_count_kv", 1}, {".context_length", 16}};
    std::map<std::string, float> f32 = {{".attention.layer_norm_rms_epsilon", 1e-5f}, {".rope.freq_base", 10000.0f}};
    std::map<std::string, std::string> strings = {{"general.architecture", arch}};
    for (const auto& [k, v] : e.u32) u32[k] = v;
    for (const auto& [k, v] : e.f32) f32[k] = v;
    for (const auto& [k, v] : e.strings) strings[k] = v;
    test::GgufBuilder b;
    auto key = [&](const std::string& k) { return k[0] == '.' ? arch + k : k; };
    for (const auto& [k, v] : strings)
      if (std::find(e.drop.begin(), e.drop.end(), k) == e.drop.end()) b.string(key(k), v);
    for (const auto& [k, v] : u32)
      if (std::find(e.drop.begin(), e.drop.end(), k) == e.drop.end()) b.u32(key(k), v);
    for (const auto& [k, v] : f32)
      if (std::find(e.drop.begin(), e.drop.end(), k) == e.drop.end()) b.f32(key(k), v);
    const std::int64_t D = 8, F = 12, V = 6;
    auto t = [&](const std::string& name, std::vector<std::int64_t> shape) { b.tensor(name, at::zeros(shape), 0); };
    t("token_embd.weight", {V, D});
    t("blk.0.attn_norm.weight", {D});
    t("blk.0.attn_q.weight", {D, D});
    t("blk.0.attn_k.weight", {4, D});
    t("blk.0.attn_v.weight", {4, D});
    t("blk.0.attn_output.weight", {D, D});
    t("blk.0.ffn_norm.weight", {D});
    t("blk.0.ffn_gate.weight", {F, D});
    t("blk.0.ffn_up.weight", {F, D});
    t("blk.0.ffn_down.weight", {D, F});
    t("output_norm.weight", {D});
    return file("tiny.gguf", b.build());
  }

  // stories260K.bin with header word `index` (dim, hidden_dim, n_layers, n_heads, n_kv_heads,
  // vocab_size, seq_len) replaced; or cut to `size` bytes.
  std::string llama2c(int index, std::int32_t value, std::int64_t size = -1) const {
    std::string bytes = read_file(test::data_path("models/stories260K/stories260K.bin"));
    if (index >= 0) std::memcpy(bytes.data() + 4 * index, &value, 4);
    if (size >= 0) bytes.resize(static_cast<std::size_t>(size));
    return file("model.bin", bytes);
  }

  // Pre-tokenised uint16 data with the ids given (the tiny HF fixtures have vocabularies of 80+).
  std::string tokens(const std::vector<std::uint16_t>& ids, const std::string& name = "tokens.bin") const {
    return file(name, std::string(reinterpret_cast<const char*>(ids.data()), ids.size() * 2));
  }

 private:
  test::TempDir dir_;
};

std::vector<std::uint16_t> counting(std::size_t n, std::uint16_t modulo = 50) {
  std::vector<std::uint16_t> ids(n);
  for (std::size_t i = 0; i < n; ++i) ids[i] = static_cast<std::uint16_t>(i % modulo);
  return ids;
}

// ---- outputs made once and shared: a record, two shard records, a resume state ----

const std::string kTinyOptions = " --seq-len 32 --schemes full,int8-coarse --no-attention-stats";
const std::string kTiny = test::kEval + kTinyOptions + " --max-windows 4";

struct Made {
  test::TempDir dir;
  json record, shard0, shard1, state;
  json three_windows;  // the same evaluation cut at 3 windows while its text holds more
};

const Made& made() {
  static const std::unique_ptr<Made> made = [] {
    auto owned = std::make_unique<Made>();
    Made& m = *owned;
    const auto run = [&](const std::string& args) {
      test::CommandResult r = test::run_qeval(args);
      EXPECT_TRUE(r.status == 0 || r.status == 3) << args << "\n" << r.output;
    };
    run(kTiny + " --out " + (m.dir / "r.json").string());
    run(kTiny + " --shard 0/2 --out " + (m.dir / "s0.json").string());
    run(kTiny + " --shard 1/2 --out " + (m.dir / "s1.json").string());
    run(kTiny + " --resume --stop-after 2 --out " + (m.dir / "resumed.json").string());
    run(test::kEval + kTinyOptions + " --max-windows 3 --out " + (m.dir / "three.json").string());
    m.record = json::parse(read_file(m.dir / "r.json"));
    m.shard0 = json::parse(read_file(m.dir / "s0.json"));
    m.shard1 = json::parse(read_file(m.dir / "s1.json"));
    m.state = json::parse(read_file(m.dir / "resumed.json.state.json"));
    m.three_windows = json::parse(read_file(m.dir / "three.json"));
    return owned;
  }();
  return *made;
}

// The state's checksum recomputed after an edit (as run_state.cpp writes it), so that the edit
// itself, not the checksum, is what the resume must catch.
json resealed_state(json file) {
  json& state = file["state"];
  state.erase("checksum");
  Hasher h;
  h.update(state.dump());
  state["checksum"] = h.hex();
  return file;
}

// A copy of the shared record with `edit` applied, written to `name`.
std::string record_with(const Inputs& in, const std::string& name, const json& base, const std::function<void(json&)>& edit) {
  json r = base;
  edit(r);
  return in.json_file(name, r);
}

std::string tolerances(const Inputs& in, const std::string& text) { return in.file("tol.json", text); }
const std::string kTol = R"({"schemes": {"*": {"dppl_abs": 0.5}, "full": {"ppl_abs": 0.5}}})";

std::string check_args(const Inputs& in, const std::string& record, const std::string& tol = kTol) {
  const std::string base = in.json_file("base.json", made().record);
  return "check --baseline " + base + " --tolerances " + tolerances(in, tol) + " " + record;
}

std::string resume_args(const Inputs& in, const json& state) {
  in.json_file("r.json.state.json", state);
  return kTiny + " --resume --out " + in.path("r.json");
}

const std::string kTrain = "train -q --tokenizer models/stories260K/tok512.bin --d-model 16 --n-layers 1 --n-heads 2 "
                           "--seq-len 16 --batch-size 2 --steps 2 --warmup 1 --val-windows 2";

// ---- the corpus ----

struct BadInput {
  std::string name;
  std::function<std::string(Inputs&)> args;  // everything after `qeval`
  int status;
  std::vector<std::string> fragments;
  std::string no_output = "out.json";  // must not exist afterwards (relative to the case folder)
};

using Edit = std::function<void(json&)>;

// One config key of a family fixture set to a value, read with `inspect` (headers only).
BadInput config_case(const std::string& name, const std::string& fixture, const Edit& edit,
                     std::vector<std::string> fragments) {
  fragments.insert(fragments.begin(), "config.json");
  return {name, [fixture, edit](Inputs& in) { return "inspect --json " + in.family(fixture, edit); }, 2, fragments};
}

Edit set(const std::string& key, json value) {
  return [key, value](json& j) { j[key] = value; };
}
Edit erase(const std::string& key) {
  return [key](json& j) { j.erase(key); };
}

std::vector<BadInput> corpus() {
  std::vector<BadInput> c;
  auto add = [&](BadInput b) { c.push_back(std::move(b)); };

  // ---- Hugging Face configs, every family: sizes, bases, eps, windows, rotary, scaling ----
  const std::vector<std::pair<std::string, std::string>> rotary = {
      {"llama", "tiny-llama-hf"}, {"qwen2", "tiny-qwen2-hf"}, {"qwen3", "tiny-qwen3-hf"}, {"mistral", "tiny-mistral-hf"},
      {"gemma3", "tiny-gemma3-hf"}, {"phi3", "tiny-phi3-hf"}};
  for (const auto& [family, fixture] : rotary) {
    add(config_case(family + "_layers_zero", fixture, set("num_hidden_layers", 0), {"\"num_hidden_layers\" is 0", "1..2147483647"}));
    add(config_case(family + "_heads_negative", fixture, set("num_attention_heads", -2), {"\"num_attention_heads\" is -2"}));
    add(config_case(family + "_vocab_string", fixture, set("vocab_size", "many"), {"\"vocab_size\" is \"many\""}));
    add(config_case(family + "_hidden_float", fixture, set("hidden_size", 16.5), {"\"hidden_size\" is 16.5"}));
    add(config_case(family + "_rope_theta_zero", fixture, set("rope_theta", 0), {"\"rope_theta\" is 0", "finite number > 0"}));
    add(config_case(family + "_rope_theta_negative", fixture, set("rope_theta", -10000.0), {"\"rope_theta\" is -10000"}));
    add(config_case(family + "_eps_zero", fixture, set("rms_norm_eps", 0.0), {"\"rms_norm_eps\" is 0"}));
    add(config_case(family + "_eps_negative", fixture, set("rms_norm_eps", -1e-6), {"\"rms_norm_eps\" is -1e-06"}));
    add(config_case(family + "_head_dim_negative", fixture, set("head_dim", -4), {"\"head_dim\" is -4"}));
    add(config_case(family + "_scaling_without_type", fixture, set("rope_scaling", {{"factor", 8.0}}),
                    {"\"rope_scaling\"", "without a \"rope_type\""}));
    add(config_case(family + "_scaling_yarn", fixture, set("rope_scaling", {{"rope_type", "yarn"}, {"factor", 4.0}}),
                    {"\"rope_scaling\" type \"yarn\" is not supported"}));
    add(config_case(family + "_scaling_unknown", fixture, set("rope_scaling", {{"type", "warp\x01"}}),
                    {"\"rope_scaling\" type", "is unknown"}));
    add(config_case(family + "_kv_not_dividing", fixture,
                    [](json& j) { j["num_attention_heads"] = 4; j["num_key_value_heads"] = 3; },
                    {"\"num_attention_heads\" 4 is not a multiple of \"num_key_value_heads\" 3"}));
    add(config_case(family + "_kv_above_heads", fixture,
                    [](json& j) { j["num_attention_heads"] = 2; j["num_key_value_heads"] = 4; },
                    {"\"num_key_value_heads\" is 4, more than the \"num_attention_heads\" 2"}));
    add(config_case(family + "_bos_outside_vocab", fixture, set("bos_token_id", 1 << 20), {"\"bos_token_id\" is 1048576", "outside the vocabulary"}));
    add(config_case(family + "_eos_negative", fixture, set("eos_token_id", -1), {"\"eos_token_id\" is -1"}));
  }
  for (const auto& [family, fixture] :
       std::vector<std::pair<std::string, std::string>>{{"mistral", "tiny-mistral-hf"}, {"phi3", "tiny-phi3-hf"},
                                                        {"gemma3", "tiny-gemma3-hf"}}) {
    add(config_case(family + "_sliding_window_zero", fixture, set("sliding_window", 0), {"\"sliding_window\" is 0"}));
    add(config_case(family + "_sliding_window_negative", fixture, set("sliding_window", -8), {"\"sliding_window\" is -8"}));
  }
  for (const auto& [family, fixture] :
       std::vector<std::pair<std::string, std::string>>{{"qwen2", "tiny-qwen2-hf"}, {"qwen3", "tiny-qwen3-hf"}}) {
    add(config_case(family + "_sliding_window_zero", fixture,
                    [](json& j) { j["use_sliding_window"] = true; j["sliding_window"] = 0; }, {"\"sliding_window\" is 0"}));
    add(config_case(family + "_max_window_layers_negative", fixture,
                    [](json& j) { j["use_sliding_window"] = true; j["sliding_window"] = 4; j["max_window_layers"] = -1; j.erase("layer_types"); },
                    {"\"max_window_layers\" is -1"}));
  }
  add(config_case("gemma3_query_scalar_negative", "tiny-gemma3-hf", set("query_pre_attn_scalar", -256), {"\"query_pre_attn_scalar\" is -256"}));
  add(config_case("gemma3_final_softcap_zero", "tiny-gemma3-hf", set("final_logit_softcapping", 0.0), {"\"final_logit_softcapping\" is 0"}));
  add(config_case("gemma3_attn_softcap_negative", "tiny-gemma3-hf", set("attn_logit_softcapping", -50.0), {"\"attn_logit_softcapping\" is -50"}));
  add(config_case("gemma3_local_base_zero", "tiny-gemma3-hf", set("rope_local_base_freq", 0.0), {"\"rope_local_base_freq\" is 0"}));
  add(config_case("gemma3_pattern_zero", "tiny-gemma3-hf",
                  [](json& j) { j.erase("layer_types"); j["sliding_window_pattern"] = 0; }, {"\"sliding_window_pattern\" is 0"}));
  add(config_case("gemma3_layer_types_short", "tiny-gemma3-hf", set("layer_types", json::array({"full_attention"})),
                  {"\"layer_types\" should list 7 layer types"}));
  add(config_case("phi3_rotary_fraction_zero", "tiny-phi3-hf", set("partial_rotary_factor", 0.0), {"\"partial_rotary_factor\" is 0", "(0, 1]"}));
  add(config_case("phi3_rotary_fraction_above_one", "tiny-phi3-hf", set("partial_rotary_factor", 1.5), {"\"partial_rotary_factor\" is 1.5"}));
  add(config_case("neox_rotary_pct_zero", "tiny-gpt-neox-hf", set("rotary_pct", 0.0), {"\"rotary_pct\" is 0"}));
  add(config_case("neox_rotary_pct_two", "tiny-gpt-neox-hf", set("rotary_pct", 2.0), {"\"rotary_pct\" is 2"}));
  add(config_case("neox_rotary_pct_tiny", "tiny-gpt-neox-hf", set("rotary_pct", 0.01), {"\"rotary_pct\"", "rotary channels"}));
  add(config_case("neox_base_zero", "tiny-gpt-neox-hf", set("rotary_emb_base", 0), {"\"rotary_emb_base\" is 0"}));
  add(config_case("neox_eps_negative", "tiny-gpt-neox-hf", set("layer_norm_eps", -1.0), {"\"layer_norm_eps\" is -1"}));
  add(config_case("neox_layers_zero", "tiny-gpt-neox-hf", set("num_hidden_layers", 0), {"\"num_hidden_layers\" is 0"}));
  add(config_case("neox_act_unknown", "tiny-gpt-neox-hf", set("hidden_act", "swish\n"), {"hidden_act \"swish\\n\" is not supported"}));
  add(config_case("opt_positions_zero", "tiny-opt-hf", set("max_position_embeddings", 0), {"\"max_position_embeddings\" is 0", "learned positions"}));
  add(config_case("opt_ffn_negative", "tiny-opt-hf", set("ffn_dim", -1), {"\"ffn_dim\" is -1"}));
  add(config_case("opt_layers_zero", "tiny-opt-hf", set("num_hidden_layers", 0), {"\"num_hidden_layers\" is 0"}));
  add(config_case("opt_heads_not_dividing", "tiny-opt-hf", set("num_attention_heads", 3), {"\"hidden_size\" 16 is not a multiple of \"num_attention_heads\" 3"}));
  add(config_case("gpt2_layers_zero", "tiny-gpt2-hf", set("n_layer", 0), {"\"n_layer\" is 0"}));
  add(config_case("gpt2_positions_zero", "tiny-gpt2-hf", [](json& j) { j["n_positions"] = 0; j["n_ctx"] = 0; }, {"\"n_positions\" is 0"}));
  add(config_case("gpt2_eps_zero", "tiny-gpt2-hf", set("layer_norm_epsilon", 0), {"\"layer_norm_epsilon\" is 0"}));
  add(config_case("gpt2_width_huge", "tiny-gpt2-hf", set("n_embd", json(std::int64_t{1} << 40)), {"\"n_embd\" is 1099511627776"}));
  add(config_case("gpt2_inner_negative", "tiny-gpt2-hf", set("n_inner", -3), {"\"n_inner\" is -3"}));
  add(config_case("gpt2_heads_not_dividing", "tiny-gpt2-hf", set("n_head", 5), {"is not a multiple of \"n_head\" 5"}));
  add(config_case("unknown_architecture", "tiny-llama-hf", set("architectures", json::array({"BertModel"})), {"unsupported architectures [\"BertModel\"]"}));
  add(config_case("no_architecture", "tiny-llama-hf", [](json& j) { j.erase("architectures"); j.erase("model_type"); },
                  {"neither \"format\": \"qeval\" nor Hugging Face"}));
  add(config_case("llama_act_unknown", "tiny-llama-hf", set("hidden_act", "relu"), {"hidden_act \"relu\" is not supported"}));
  // Mixture-of-experts and state-space configs through the one validator (issue 51): refusals name
  // the file's key and value, null is not "the default", offsets beyond their period are refused.
  add(config_case("mixtral_top_k_zero", "tiny-mixtral-hf", set("num_experts_per_tok", 0),
                  {"\"num_experts_per_tok\" is 0", "1..2147483647"}));
  add(config_case("mixtral_top_k_null", "tiny-mixtral-hf", set("num_experts_per_tok", nullptr),
                  {"\"num_experts_per_tok\" is null", "leave the key out for the default, 2"}));
  add(config_case("mixtral_top_k_above_experts", "tiny-mixtral-hf", set("num_experts_per_tok", 9),
                  {"\"num_experts_per_tok\" is 9", "expected 1..4", "\"num_local_experts\""}));
  add(config_case("mixtral_experts_word", "tiny-mixtral-hf", set("num_local_experts", "four"),
                  {"\"num_local_experts\" is \"four\""}));
  add(config_case("qwen2_moe_sparse_step_zero", "tiny-qwen2-moe-hf", set("decoder_sparse_step", 0),
                  {"\"decoder_sparse_step\" is 0"}));
  add(config_case("jamba_attn_offset_at_period", "tiny-jamba-hf", set("attn_layer_offset", 2),
                  {"\"attn_layer_offset\" 2 is not below \"attn_layer_period\" 2", "no layer would be attention"}));
  add(config_case("jamba_expert_offset_beyond_period", "tiny-jamba-hf", set("expert_layer_offset", 7),
                  {"\"expert_layer_offset\" 7 is not below \"expert_layer_period\" 3"}));
  add(config_case("jamba_d_state_negative", "tiny-jamba-hf", set("mamba_d_state", -1), {"\"mamba_d_state\" is -1"}));
  add(config_case("mamba_state_zero", "tiny-mamba-hf", set("state_size", 0), {"\"state_size\" is 0"}));
  add(config_case("mamba_expand_fraction", "tiny-mamba-hf", set("expand", 1.5), {"\"expand\" is 1.5", "an integer"}));
  add(config_case("mamba2_groups_not_dividing", "tiny-mamba2-hf", set("n_groups", 3),
                  {"\"num_heads\" (4) is not a multiple of \"n_groups\" (3)"}));
  add(config_case("mamba2_time_step_limit_word", "tiny-mamba2-hf", set("time_step_limit", json::array({"a", 1})),
                  {"\"time_step_limit\" minimum is \"a\"", "finite number >= 0"}));
  add(config_case("mamba2_time_step_limit_nan", "tiny-mamba2-hf", set("time_step_limit", json::array({0.0, "NaN"})),
                  {"\"time_step_limit\" maximum is \"NaN\"", "or Infinity (no limit)"}));
  add(config_case("mamba2_time_step_limit_reversed", "tiny-mamba2-hf", set("time_step_limit", json::array({0.5, 0.1})),
                  {"\"time_step_limit\" maximum is 0.1", ">= the minimum 0.5"}));
  // The issue-51 probe's finds on the newer families (results/hardening/probe.md).
  add(config_case("qwen2_moe_norm_topk_null", "tiny-qwen2-moe-hf", set("norm_topk_prob", nullptr),
                  {"\"norm_topk_prob\" is null", "true or false"}));
  add(config_case("qwen3_moe_dense_layer_beyond", "tiny-qwen3-moe-hf", set("mlp_only_layers", json::array({99})),
                  {"\"mlp_only_layers\" names layer 99", "layers 0..1"}));
  add(config_case("mamba_time_step_rank_null", "tiny-mamba-hf", set("time_step_rank", nullptr),
                  {"\"time_step_rank\" is null", "\"auto\" or an integer"}));
  add(config_case("mamba_time_step_rank_zero", "tiny-mamba-hf", set("time_step_rank", 0), {"\"time_step_rank\" is 0"}));
  add(config_case("jamba_dt_rank_null", "tiny-jamba-hf", set("mamba_dt_rank", nullptr), {"\"mamba_dt_rank\" is null"}));
  add(config_case("mamba_eps_null", "tiny-mamba-hf", set("layer_norm_epsilon", nullptr), {"\"layer_norm_epsilon\" is null"}));
  add(config_case("mamba_inner_width_disagrees", "tiny-mamba-hf", set("intermediate_size", 31),
                  {"\"intermediate_size\" is 31", "expand\" × \"hidden_size\" is 2 × 16 = 32"}));
  add(config_case("mamba2_norm_before_gate", "tiny-mamba2-hf", set("norm_before_gate", true),
                  {"\"norm_before_gate\" true is not supported"}));
  add({"config_not_json", [](Inputs& in) {
         const std::string dir = in.family("tiny-llama-hf");
         test::write_bytes(fs::path(dir) / "config.json", "{\"vocab_size\": 12,");
         return "inspect " + dir;
       }, 2, {"config.json", "malformed JSON"}});
  add({"config_is_a_list", [](Inputs& in) {
         const std::string dir = in.family("tiny-llama-hf");
         test::write_bytes(fs::path(dir) / "config.json", "[1, 2]");
         return "inspect " + dir;
       }, 2, {"config.json", "expected a JSON object"}});
  // The same validator on the eval path (full load): the key named, no record written.
  add({"eval_mistral_window_zero", [](Inputs& in) {
         return "eval -q --model " + in.family("tiny-mistral-hf", set("sliding_window", 0)) + " --data " +
                in.tokens(counting(64)) + " --seq-len 8 --max-windows 1 --schemes full --out " + in.path("out.json");
       }, 2, {"config.json", "\"sliding_window\" is 0"}});
  add({"eval_llama_theta_zero", [](Inputs& in) {
         return "eval -q --model " + in.family("tiny-llama-hf", set("rope_theta", 0)) + " --data " + in.tokens(counting(64)) +
                " --seq-len 8 --max-windows 1 --schemes full --out " + in.path("out.json");
       }, 2, {"config.json", "\"rope_theta\" is 0"}});

  // ---- qeval's own config.json ----
  auto qeval_case = [&](const std::string& name, const Edit& edit, std::vector<std::string> fragments) {
    fragments.insert(fragments.begin(), "config.json");
    add({"qeval_" + name, [edit](Inputs& in) { return "inspect --json " + in.qeval_config(edit); }, 2, fragments});
  };
  qeval_case("layers_zero", set("n_layers", 0), {"\"n_layers\" is 0"});
  qeval_case("norm_unknown", set("norm", "batchnorm"), {"\"norm\"", "unknown norm 'batchnorm'"});
  qeval_case("theta_negative", set("rope_theta", -1.0), {"\"rope_theta\" is -1"});
  qeval_case("eps_zero", set("norm_eps", 0.0), {"\"norm_eps\" is 0"});
  qeval_case("window_negative", set("attention_windows", json::array({4, -1})), {"\"attention_windows\" is -1"});
  qeval_case("windows_count", set("attention_windows", json::array({4})), {"\"attention_windows\" has 1 entries", "\"n_layers\" 2"});
  qeval_case("head_size_zero", set("head_size", 0), {"\"head_size\" is 0"});
  qeval_case("rotary_odd", set("rotary_dim", 3), {"\"rotary_dim\" gives 3 rotary channels"});
  qeval_case("bos_outside", set("bos_id", 99), {"\"bos_id\" is 99", "outside the vocabulary of 32"});
  qeval_case("mlp_missing", erase("mlp"), {"missing required \"mlp\""});
  qeval_case("softcap_zero", set("final_logit_softcap", 0.0), {"\"final_logit_softcap\" is 0"});
  qeval_case("kv_heads_three", set("n_kv_heads", 3), {"\"n_heads\" 4 is not a multiple of \"n_kv_heads\" 3"});

  // ---- GGUF metadata (the same validator; keys as GGUF spells them) ----
  using G = Inputs::GgufEdits;
  auto gguf_case = [&](const std::string& name, G edits, std::vector<std::string> fragments, const std::string& arch = "llama") {
    fragments.insert(fragments.begin(), "tiny.gguf");
    add({"gguf_" + name, [edits, arch](Inputs& in) { return "inspect --json " + in.gguf(edits, arch); }, 2, fragments});
  };
  gguf_case("blocks_zero", G{{{".block_count", 0}}, {}, {}, {}}, {"metadata llama.block_count is 0"});
  gguf_case("heads_zero", G{{{".attention.head_count", 0}}, {}, {}, {}}, {"metadata llama.attention.head_count is 0"});
  gguf_case("base_negative", G{{}, {{".rope.freq_base", -1.0f}}, {}, {}}, {"metadata llama.rope.freq_base is -1"});
  gguf_case("base_nan", G{{}, {{".rope.freq_base", NAN}}, {}, {}}, {"metadata llama.rope.freq_base is nan"});
  gguf_case("eps_zero", G{{}, {{".attention.layer_norm_rms_epsilon", 0.0f}}, {}, {}}, {"layer_norm_rms_epsilon is 0"});
  gguf_case("eps_missing", G{{}, {}, {}, {".attention.layer_norm_rms_epsilon"}}, {"missing metadata llama.attention.layer_norm_rms_epsilon"});
  gguf_case("kv_not_dividing", G{{{".attention.head_count", 4}, {".attention.head_count_kv", 3}}, {}, {}, {}},
            {"llama.attention.head_count 4 is not a multiple of metadata llama.attention.head_count_kv 3"});
  gguf_case("scaling_yarn", G{{}, {}, {{".rope.scaling.type", "yarn"}}, {}}, {"metadata llama.rope.scaling.type type \"yarn\" is not supported"});
  gguf_case("key_length_zero", G{{{".attention.key_length", 0}}, {}, {}, {}}, {"metadata llama.attention.key_length is 0"});
  gguf_case("window_zero", G{{{".attention.sliding_window", 0}}, {}, {}, {}}, {"metadata gemma3.attention.sliding_window is 0"}, "gemma3");
  add({"gguf_architecture_with_nul", [](Inputs& in) { return "inspect " + in.gguf({}, std::string("bert\0evil", 9)); }, 2,
       {"unsupported GGUF architecture \"bert\\0evil\""}});
  add({"gguf_truncated", [](Inputs& in) {
         const std::string p = in.gguf({});
         const std::string bytes = read_file(p);
         test::write_bytes(p, bytes.substr(0, bytes.size() / 2));
         return "inspect " + p;
       }, 2, {"tiny.gguf"}});
  add({"gguf_not_gguf", [](Inputs& in) { return "inspect --model " + in.file("x.gguf", "GGUF\x03"); }, 2, {"x.gguf"}});

  // ---- llama2.c headers ----
  auto header_case = [&](const std::string& name, int index, std::int32_t value, std::vector<std::string> fragments) {
    fragments.insert(fragments.begin(), "model.bin");
    add({"llama2c_" + name, [index, value](Inputs& in) { return "inspect --model " + in.llama2c(index, value); }, 2, fragments});
  };
  header_case("dim_zero", 0, 0, {"header field dim is 0"});
  header_case("layers_negative", 2, -1, {"header field n_layers is -1"});
  header_case("heads_not_dividing", 3, 6, {"header field n_heads 6 is not a multiple of header field n_kv_heads 4"});
  header_case("kv_above_heads", 3, 3, {"header field n_kv_heads is 4, more than the header field n_heads 3"});
  header_case("kv_zero", 4, 0, {"header field n_kv_heads is 0"});
  header_case("seq_len_zero", 6, 0, {"seq_len 0) has a value outside 1..1048576"});
  header_case("hidden_huge", 1, 1 << 30, {"hidden_dim 1073741824", "has a value outside 1..1048576"});
  add({"llama2c_truncated", [](Inputs& in) { return "inspect --model " + in.llama2c(-1, 0, 1000); }, 2, {"model.bin", "truncated"}});
  add({"llama2c_header_only", [](Inputs& in) { return "inspect --model " + in.llama2c(-1, 0, 20); }, 2, {"model.bin", "28-byte header"}});
  add({"eval_llama2c_extra_bytes", [](Inputs& in) {
         std::string p = in.llama2c(-1, 0);
         std::ofstream(p, std::ios::app) << "xxxx";
         return "eval -q --model " + p + " --tokenizer " + test::kStoriesTokenizer + " --out " + in.path("out.json");
       }, 2, {"model.bin", "extra 4 bytes"}});

  // ---- checkpoints: weights that do not fit their config ----
  add({"safetensors_truncated", [](Inputs& in) {
         const std::string dir = in.family("tiny-mistral-hf");
         const std::string bytes = read_file(fs::path(dir) / "model.safetensors");
         test::write_bytes(fs::path(dir) / "model.safetensors", bytes.substr(0, bytes.size() - 100));
         return "inspect " + dir;
       }, 2, {"model.safetensors"}});
  add({"safetensors_header_huge", [](Inputs& in) {
         const std::string dir = in.family("tiny-mistral-hf");
         test::write_bytes(fs::path(dir) / "model.safetensors", std::string("\xff\xff\xff\xff\xff\xff\xff\x7f{}", 10));
         return "inspect " + dir;
       }, 2, {"model.safetensors"}});
  add({"eval_shape_mismatch", [](Inputs& in) {
         return "eval -q --model " + in.family("tiny-mistral-hf", set("intermediate_size", 48)) + " --data " +
                in.tokens(counting(64)) + " --seq-len 8 --max-windows 1 --schemes full --out " + in.path("out.json");
       }, 2, {"expected [48, 16]"}});
  add({"eval_missing_weights", [](Inputs& in) {
         const std::string dir = in.family("tiny-qwen2-hf");
         fs::remove(fs::path(dir) / "model.safetensors");
         return "eval -q --model " + dir + " --data " + in.tokens(counting(64)) + " --seq-len 8 --out " + in.path("out.json");
       }, 2, {"tiny-qwen2-hf"}});
  add({"eval_no_checkpoint", [](Inputs& in) { return "eval -q --model " + in.path("nothing") + " --out " + in.path("out.json"); },
       2, {"does not exist"}});
  add({"eval_safetensors_alone", [](Inputs& in) {
         return "eval -q --model " + in.file("m.safetensors", "x") + " --out " + in.path("out.json");
       }, 2, {"a safetensors file alone has no model config"}});

  // ---- text data ----
  auto data_case = [&](const std::string& name, std::function<std::string(Inputs&)> data, std::vector<std::string> fragments) {
    add({"data_" + name, [data](Inputs& in) { return kTiny + " --data " + data(in) + " --out " + in.path("out.json"); }, 2, fragments});
  };
  data_case("empty", [](Inputs& in) { return in.file("empty.txt", ""); }, {"no complete window"});
  data_case("nul_bytes", [](Inputs& in) { return in.file("nul.txt", std::string(4096, '\0')); }, {"nul.txt", "NUL byte", "not text"});
  data_case("nul_inside", [](Inputs& in) { return in.file("late.txt", std::string("Once upon a time.\nA cat\0sat.\n", 28)); },
            {"late.txt", "line 2", "NUL"});
  data_case("bad_gzip", [](Inputs& in) { return in.file("c4.json.gz", "\x1f\x8b\x08\x00garbage"); }, {"c4.json.gz"});
  data_case("jsonl_not_object", [](Inputs& in) { return in.file("d.jsonl", "{\"text\": \"a\"}\n[1]\n"); }, {"d.jsonl", "line 2"});
  data_case("jsonl_no_field", [](Inputs& in) { return in.file("d.jsonl", "{\"body\": \"a\"}\n"); }, {"d.jsonl", "line 1", "\"text\""});
  data_case("missing", [](Inputs& in) { return in.path("absent.txt"); }, {"absent.txt"});
  data_case("a_folder", [](Inputs& in) { fs::create_directories(in.dir() / "folder.txt"); return in.path("folder.txt"); }, {"folder.txt"});
  data_case("too_short", [](Inputs& in) { return in.file("short.txt", "Once."); }, {"no complete window"});

  // ---- token files ----
  // The llama2.c tokenizer export is named: the SentencePiece model found beside stories260K.bin
  // cannot be loaded in the ASan build (RTLD_DEEPBIND), and these rows are about the token file.
  auto token_case = [&](const std::string& name, std::function<std::string(Inputs&)> data, std::vector<std::string> fragments) {
    add({"tokens_" + name, [data](Inputs& in) {
           return "eval -q --model models/stories260K/stories260K.bin --tokenizer " + test::kStoriesTokenizer + " --data " + data(in) +
                  " --seq-len 16 --max-windows 2 --schemes full --out " + in.path("out.json");
         }, 2, fragments});
  };
  token_case("odd_bytes", [](Inputs& in) { return in.file("odd.bin", std::string(33, '\x01')); }, {"odd.bin"});
  token_case("id_beyond_vocab", [](Inputs& in) { return in.tokens({1, 2, 3, 4000, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17}, "big.bin"); },
             {"big.bin", "4000"});
  token_case("empty", [](Inputs& in) { return in.file("none.bin", ""); }, {"none.bin"});
  token_case("short", [](Inputs& in) { return in.tokens({1, 2, 3}, "three.bin"); }, {"no complete window"});
  token_case("dtype_wrong", [](Inputs& in) {
    return in.tokens(counting(64), "t.bin") + " --token-dtype uint32";
  }, {"t.bin"});

  // ---- options: readable ranges, exit 2, the option named ----
  auto option_case = [&](const std::string& name, const std::string& options, std::vector<std::string> fragments) {
    add({"option_" + name, [options](Inputs& in) { return kTiny + " " + options + " --out " + in.path("out.json"); }, 2, fragments});
  };
  option_case("seq_len_one", "--seq-len 1", {"seq_len must be at least 2"});
  option_case("seq_len_negative", "--seq-len -5", {"--seq-len", "-5 is outside the range: expected an integer in 0..1048576"});
  option_case("seq_len_word", "--seq-len many", {"--seq-len", "\"many\" is not an integer in 0..1048576"});
  option_case("seq_len_huge", "--seq-len 99999999999", {"--seq-len", "0..1048576"});
  option_case("max_windows_negative", "--max-windows -2", {"--max-windows", "expected an integer in -1..1073741824"});
  option_case("batch_zero", "--batch-size 0", {"--batch-size", "0 is outside the range"});
  option_case("threads_negative", "--threads -1", {"--threads", "-1 is outside the range"});
  option_case("sink_eps_nan", "--sink-eps nan", {"--sink-eps", "\"nan\" is outside the range: expected a finite number in (0, 1)"});
  option_case("sink_eps_inf", "--sink-eps inf", {"--sink-eps", "\"inf\" is outside the range"});
  option_case("sink_eps_above_one", "--sink-eps 1.5", {"--sink-eps", "\"1.5\" is outside the range"});
  option_case("sink_t_zero", "--sink-T 0", {"--sink-T", "0 is outside the range: expected an integer in 1..1048576"});
  option_case("mamba_channels_negative", "--mamba-channels -1",
              {"--mamba-channels", "-1 is outside the range: expected an integer in 0..1048576"});
  option_case("stride_negative", "--stride -1", {"--stride", "-1 is outside the range"});
  option_case("checkpoint_seconds_nan", "--checkpoint-seconds nan", {"--checkpoint-seconds", "\"nan\" is outside the range"});
  option_case("seed_negative", "--seed -7", {"--seed", "-7 is outside the range: expected an integer >= -1"});
  option_case("protocol_unknown", "--protocol sideways", {"unknown protocol 'sideways'"});
  option_case("scheme_unknown", "--schemes full,int3", {"int3"});
  option_case("stats_for_unknown", "--stats-for some", {"--stats-for", "some"});
  option_case("dtype_unknown", "--dtype fp8", {"--dtype", "fp8"});
  option_case("device_unknown", "--device tpu", {"tpu"});
  option_case("shard_out_of_range", "--shard 2/2", {"--shard '2/2'"});
  option_case("shard_zero_count", "--shard 0/0", {"--shard '0/0'"});
  option_case("shard_words", "--shard a/b", {"--shard 'a/b'"});
  option_case("transform_unknown", "--transform spin", {"spin"});
  option_case("unknown_option", "--sequence-length 5", {"--sequence-length"});
  option_case("bos_both", "--bos-per-window --no-bos-per-window", {"contradict"});
  // Issue 51: outputs that name nothing or an input, data that never ends, unscored tokens, NaN
  // switching a safeguard off.
  option_case("out_empty", "--out ''", {"--out", "an empty path writes nothing"});
  option_case("stride_above_seq_len", "--protocol stride --seq-len 32 --stride 40",
              {"stride 40 is above seq_len 32", "8 tokens between two windows would be scored by none"});
  option_case("watch_timeout_nan", "--watch --watch-timeout nan", {"--watch-timeout", "\"nan\" is outside the range"});
  option_case("watch_timeout_inf", "--watch --watch-timeout inf", {"--watch-timeout", "\"inf\" is outside the range"});
  option_case("watch_poll_zero", "--watch --watch-poll 0", {"--watch-poll", "\"0\" is outside the range"});
  option_case("rounding_band_too_many", "--rounding-band 65", {"--rounding-band", "65 is outside the range"});
  add({"out_inside_model_folder", [](Inputs& in) {
         const std::string dir = in.family("tiny-llama-hf");
         return "eval -q --model " + dir + " --data-dir " + test::data_dir().string() + " --tokenizer " +
                test::kStoriesTokenizer + " --data text/tinystories/validation-head.txt --seq-len 16 --max-windows 1 --out " +
                dir + "/config.json";
       }, 2, {"--out", "is inside the model folder"}});
  option_case("max_memory_below_a_byte", "--max-memory 0.5B", {"--max-memory '0.5B'", "at least one byte"});
  option_case("chunk_windows_negative", "--chunk-windows -1", {"--chunk-windows", "-1 is outside the range"});
  option_case("rounding_eps_nan", "--rounding-band 2 --rounding-band-eps nan", {"--rounding-band-eps", "\"nan\" is outside"});
  add({"data_is_a_device", [](Inputs& in) { return kTiny + " --data /dev/zero --out " + in.path("out.json"); }, 2,
       {"/dev/zero", "not a regular file (a device)"}});
  add({"out_is_the_data", [](Inputs& in) {
         const std::string data = in.file("data.txt", "Once upon a time there was a cat. The cat sat. " + std::string(4000, 'a'));
         return kTiny + " --data " + data + " --out " + data;
       }, 2, {"--out", "data.txt: is the data file"}, ""});
  add({"rounding_seed_is_a_band_seed", [](Inputs& in) {
         return kTiny + " --rounding-band 3 --rounding-seed 2 --out " + in.path("out.json");
       }, 2, {"--rounding-seed 2 is also one of --rounding-band's seeds"}});
  add({"check_report_is_the_baseline", [](Inputs& in) {
         const std::string base = in.json_file("base.json", made().record);
         return "check --baseline " + base + " --tolerances " + tolerances(in, kTol) + " " +
                in.json_file("r.json", made().record) + " --report " + base;
       }, 2, {"--report", "base.json: is the baseline"}, ""});
  add({"check_band_without_baseline_band", [](Inputs& in) {
         return check_args(in, in.json_file("r.json", made().record),
                           R"({"schemes": {"int8-coarse": {"dppl_abs": 0.1, "band": 3}}})");
       }, 2, {"tol.json", "schemes.int8-coarse", "no rounding band", "--rounding-band K"}, ""});
  add({"check_band_zero", [](Inputs& in) {
         return check_args(in, in.json_file("r.json", made().record), R"({"schemes": {"int8-coarse": {"band": 0}}})");
       }, 2, {"tol.json", "\"band\" should be a number of bands > 0"}, ""});
  add({"series_step_named_twice", [](Inputs& in) {
         fs::create_directories(in.dir() / "run" / "step-2");
         fs::create_directories(in.dir() / "run" / "step-002");
         return kTiny + " --model " + in.path("run") + " --out " + in.path("out.json");
       }, 2, {"both name step 2", "keep one of them"}});
  add({"merge_out_is_a_shard", [](Inputs& in) {
         const std::string s0 = in.json_file("s0.json", made().shard0);
         return "merge " + s0 + " " + in.json_file("s1.json", made().shard1) + " --out " + s0;
       }, 2, {"--out", "s0.json: is the shard record"}, ""});
  add({"compare_out_is_a_record", [](Inputs& in) {
         const std::string r = in.json_file("r.json", made().record);
         return "compare " + r + " --out " + r;
       }, 2, {"--out", "r.json: is the record"}, ""});
  add({"out_is_a_folder", [](Inputs& in) {
         fs::create_directories(in.dir() / "out.json");
         return kTiny + " --out " + in.path("out.json");
       }, 2, {"--out", "out.json: is a folder"}, ""});
  add({"out_parent_missing", [](Inputs& in) { return kTiny + " --out " + in.path("no/such/out.json"); }, 2,
       {"--out", "folder", "does not exist"}});
  add({"state_file_parent_missing", [](Inputs& in) {
         return kTiny + " --resume --state-file " + in.path("gone/s.json") + " --out " + in.path("out.json");
       }, 2, {"--state-file", "does not exist"}});
  add({"plots_is_a_file", [](Inputs& in) { return kTiny + " --plots " + in.file("p", "x") + " --out " + in.path("out.json"); }, 2,
       {"--plots", "exists and is not a folder"}});
  add({"sensitivity_out_is_a_folder", [](Inputs& in) {
         fs::create_directories(in.dir() / "sens");
         return "sensitivity -q --tokenizer " + test::kStoriesTokenizer + " --seq-len 32 --max-windows 1 --out " + in.path("sens");
       }, 2, {"--out", "is a folder"}, ""});
  add({"sensitivity_top_negative", [](Inputs& in) {
         return "sensitivity -q --tokenizer " + test::kStoriesTokenizer + " --top -1 --out " + in.path("out.json");
       }, 2, {"--top", "-1 is outside the range"}});
  add({"config_unknown_key", [](Inputs& in) {
         return "eval --config " + in.file("c.json", R"({"seq-len": 32, "sequence": 5})") + " --out " + in.path("out.json");
       }, 2, {"--config", "c.json", "unknown option \"sequence\" for qeval eval"}});
  add({"config_repeated_key", [](Inputs& in) {
         return "eval --config " + in.file("c.json", R"({"seq-len": 32, "seq-len": 64})") + " --out " + in.path("out.json");
       }, 2, {"c.json", "key \"seq-len\" appears twice"}});
  add({"config_not_an_object", [](Inputs& in) { return "eval --config " + in.file("c.json", "[1]"); }, 2,
       {"c.json", "expected a JSON object"}});
  add({"config_object_value", [](Inputs& in) {
         return "eval --config " + in.file("c.json", R"({"seq-len": {"a": 1}})") + " --out " + in.path("out.json");
       }, 2, {"c.json", "option \"seq-len\" is {\"a\":1}"}});
  add({"config_missing_file", [](Inputs& in) { return "eval --config " + in.path("none.json"); }, 2, {"none.json"}});
  add({"config_names_config", [](Inputs& in) {
         return "eval --config " + in.file("c.json", R"({"config": "other.json"})");
       }, 2, {"c.json", "cannot name another"}});

  // ---- resume states: checked, not trusted ----
  auto state_case = [&](const std::string& name, std::function<json()> state, std::vector<std::string> fragments) {
    fragments.insert(fragments.begin(), "r.json.state.json");
    add({"state_" + name, [state](Inputs& in) { return resume_args(in, state()); }, 2, fragments, "r.json"});
  };
  state_case("checksum_changed", [] {
    json s = made().state;
    s["state"]["checksum"] = "0000000000000000";
    return s;
  }, {"checksum", "does not match"});
  state_case("row_edited_checksum_kept", [] {
    json s = made().state;
    s["state"]["schemes"][0]["rows"]["0"]["nll_sum"] = 1.0;
    return s;
  }, {"checksum", "does not match"});
  state_case("no_checksum", [] {
    json s = made().state;
    s["state"].erase("checksum");
    return s;
  }, {"no checksum"});
  state_case("tokens_negative", [] {
    json s = made().state;
    s["state"]["schemes"][0]["rows"]["0"]["tokens"] = -31;
    return resealed_state(s);
  }, {"window 0", "\"tokens\" is -31"});
  state_case("nll_negative", [] {
    json s = made().state;
    s["state"]["schemes"][1]["rows"]["1"]["nll_sum"] = -3.0;
    return resealed_state(s);
  }, {"window 1", "\"nll_sum\" is -3"});
  state_case("window_hash_changed", [] {
    json s = made().state;
    s["state"]["window_hashes"]["1"] = "0123456789abcdef";
    return resealed_state(s);
  }, {"window 1 has hash 0123456789abcdef in the state, but the data gives"});
  state_case("window_index_moved", [] {
    json s = made().state;
    for (const char* part : {"window_hashes"}) {
      json& m = s["state"][part];
      m["7"] = m["1"];
      m.erase("1");
    }
    for (auto& scheme : s["state"]["schemes"]) {
      scheme["rows"]["7"] = scheme["rows"]["1"];
      scheme["rows"].erase("1");
    }
    return resealed_state(s);
  }, {"scheme 0's statistics hold windows [0, 1], its rows [0, 7]"});
  state_case("key_not_a_number", [] {
    json s = made().state;
    s["state"]["window_hashes"]["one"] = s["state"]["window_hashes"]["1"];
    s["state"]["window_hashes"].erase("1");
    return resealed_state(s);
  }, {"window key \"one\" is not a window index"});
  state_case("scored_tokens_changed", [] {
    json s = made().state;
    s["state"]["scored_tokens"] = 1;
    return resealed_state(s);
  }, {"scored_tokens is 1, but the rows score 62"});
  state_case("nll_nan", [] {
    json s = made().state;
    s["state"]["schemes"][0]["rows"]["0"]["nll_sum"] = nullptr;
    return resealed_state(s);
  }, {"\"nll_sum\" is null: expected a finite number"});
  state_case("sums_inconsistent", [] {
    json s = made().state;
    s["state"]["schemes"][0]["rows"]["0"]["nll_sq_sum"] = 0.0;
    return resealed_state(s);
  }, {"\"nll_sq_sum\" 0 is below nll_sum² / tokens"});
  add({"state_other_evaluation", [](Inputs& in) {
         in.json_file("r.json.state.json", made().state);
         return kTiny + " --seq-len 16 --resume --out " + in.path("r.json");
       }, 2, {"r.json.state.json", "written by a different evaluation"}, "r.json"});
  add({"state_not_json", [](Inputs& in) {
         in.file("r.json.state.json", "{\"identity\":");
         return kTiny + " --resume --out " + in.path("r.json");
       }, 2, {"r.json.state.json", "not a qeval evaluation state file"}, "r.json"});

  // ---- records: verified, not trusted (check, merge, compare, plot) ----
  auto record_case = [&](const std::string& name, const Edit& edit, std::vector<std::string> fragments) {
    add({"check_" + name, [edit](Inputs& in) { return check_args(in, record_with(in, "new.json", made().record, edit)); }, 2,
         fragments});
  };
  record_case("summary_edited", [](json& r) { r["schemes"][0]["perplexity"]["ppl"] = 5.6; },
              {"new.json", "perplexity.ppl is 5.6, but the per-window rows give", "changed after qeval wrote it"});
  record_case("dppl_edited", [](json& r) { r["schemes"][1]["vs_full"]["dppl"] = 0.0; }, {"new.json", "vs_full.dppl is 0"});
  record_case("ppl_null", [](json& r) { r["schemes"][1]["perplexity"]["ppl"] = nullptr; }, {"new.json", "perplexity.ppl is null"});
  record_case("ppl_zero", [](json& r) { r["schemes"][0]["perplexity"]["ppl"] = 0; }, {"new.json", "perplexity.ppl is 0"});
  record_case("row_tokens_zero", [](json& r) { r["schemes"][0]["per_window"]["0"]["tokens"] = 0; }, {"new.json", "\"tokens\" is 0"});
  record_case("row_tokens_huge", [](json& r) { r["schemes"][1]["per_window"]["2"]["tokens"] = std::int64_t{1} << 62; },
              {"new.json", "window 2", "\"tokens\" is 4611686018427387904"});
  record_case("row_nll_negative", [](json& r) { r["schemes"][0]["per_window"]["3"]["nll_sum"] = -1.0; }, {"\"nll_sum\" is -1"});
  record_case("row_missing", [](json& r) {
    for (auto& s : r["schemes"]) s["per_window"].erase("3");
  }, {"protocol.windows is 4, but the record holds rows for 3 windows"});
  record_case("row_missing_counts_fixed", [](json& r) {
    for (auto& s : r["schemes"]) s["per_window"].erase("3");
    r["protocol"]["windows"] = 3;
    r["protocol"]["scored_tokens"] = 93;
  }, {"window_hashes should name the 3 windows"});
  record_case("row_key_word", [](json& r) {
    r["schemes"][0]["per_window"]["x"] = r["schemes"][0]["per_window"]["0"];
  }, {"window key \"x\" is not a window index"});
  record_case("window_moved", [](json& r) {
    for (auto& s : r["schemes"]) {
      s["per_window"]["9"] = s["per_window"]["3"];
      s["per_window"].erase("3");
    }
  }, {"window_hashes names window 3, which has no row"});
  record_case("stream_hash_edited", [](json& r) { r["protocol"]["token_stream_hash"] = "0000000000000000"; },
              {"token_stream_hash is \"0000000000000000\", but the window hashes give"});
  record_case("scored_tokens_edited", [](json& r) { r["protocol"]["scored_tokens"] = 10; }, {"scored_tokens is 10, but the rows score 124"});
  // Refused by the verifier itself since issue 79: a spec under a preset's name is that preset's.
  record_case("scheme_redefined", [](json& r) {
    r["schemes"][1]["description"]["scheme"]["weights"]["granularity"] = "channel";
  }, {"scheme \"int8-coarse\": the spec under the preset name \"int8-coarse\" is not that preset's"});
  record_case("schemes_missing", [](json& r) { r.erase("schemes"); }, {"new.json", "has no \"schemes\""});
  record_case("scheme_twice", [](json& r) { r["schemes"][1]["name"] = "full"; }, {"scheme \"full\" appears twice"});
  record_case("statistics_windows", [](json& r) { r["schemes"][0]["statistics"]["windows"] = 2; },
              {"statistics cover 2 windows, the perplexity 4"});
  // A 3-window record edited to claim max_windows 4 while its text held a fourth window: its rows
  // are untouched and verify, so only the windows its text held can show that some were cut. It
  // must not pass a gate against the 4-window baseline (issue 63, item 6).
  add({"check_fewer_windows_than_max", [](Inputs& in) {
         const std::string base = in.json_file("base.json", made().record);
         const std::string cut = record_with(in, "cut.json", made().three_windows,
                                             [](json& r) { r["protocol"]["max_windows"] = 4; });
         return "check --baseline " + base + " --tolerances " + tolerances(in, kTol) + " " + cut;
       }, 2, {"cut.json is partial", "3 of the 4 windows its text holds", "--allow-partial"}});
  add({"compare_fewer_windows_than_max", [](Inputs& in) {
         return "compare " + in.json_file("r.json", made().record) + " " +
                record_with(in, "cut.json", made().three_windows, [](json& r) { r["protocol"]["max_windows"] = 4; });
       }, 2, {"cut.json is partial"}});
  add({"check_shard_refused", [](Inputs& in) { return check_args(in, in.json_file("s0.json", made().shard0)); }, 2,
       {"s0.json is partial", "shard 0/2", "--allow-partial"}});
  add({"check_baseline_edited", [](Inputs& in) {
         const std::string base = record_with(in, "b.json", made().record, [](json& r) { r["schemes"][1]["vs_full"]["dppl"] = 9.0; });
         return "check --baseline " + base + " --tolerances " + tolerances(in, kTol) + " " + in.json_file("new.json", made().record);
       }, 2, {"b.json", "vs_full.dppl is 9"}});
  // A real gate violation still exits 1: the record whose full-precision PPL is higher is checked
  // against the other under a zero tolerance.
  add({"check_violation_exits_one", [](Inputs& in) {
         const auto ppl = [](const json& r) { return r["schemes"][0]["perplexity"]["ppl"].get<double>(); };
         const bool record_worse = ppl(made().record) > ppl(made().shard0);
         const std::string base = in.json_file("b.json", record_worse ? made().shard0 : made().record);
         const std::string now = in.json_file("new.json", record_worse ? made().record : made().shard0);
         return "check --baseline " + base + " --tolerances " + tolerances(in, R"({"schemes": {"full": {"ppl_abs": 0.0}}})") +
                " " + now + " --allow-partial";
       }, 1, {"FAIL: 1 of 1 quantities outside tolerance", "partial record (--allow-partial)"}, ""});
  // ---- tolerance files ----
  auto tol_case = [&](const std::string& name, const std::string& text, std::vector<std::string> fragments) {
    add({"tolerance_" + name, [text](Inputs& in) { return check_args(in, in.json_file("new.json", made().record), text); }, 2,
         fragments});
  };
  tol_case("empty", "{}", {"tol.json", "limits nothing"});
  tol_case("only_required", R"({"schemes": {"int8-coarse": {"required": true}}})", {"limits nothing"});
  tol_case("repeated_key", R"({"schemes": {"*": {"dppl_abs": 0.5, "dppl_abs": 5}}})", {"tol.json", "key \"dppl_abs\" appears twice"});
  tol_case("repeated_scheme", R"({"schemes": {"full": {"ppl_abs": 1}, "full": {"ppl_abs": 9}}})", {"key \"full\" appears twice"});
  tol_case("unknown_key", R"({"schemes": {"*": {"dppl": 0.5}}})", {"unknown key \"dppl\""});
  tol_case("negative", R"({"schemes": {"*": {"dppl_abs": -1}}})", {"\"dppl_abs\" should be a finite number >= 0"});
  tol_case("not_json", "{", {"tol.json", "invalid JSON"});
  tol_case("unknown_statistic", R"({"statistics": {"kurtosis": {"abs": 1}}})", {"unknown key \"kurtosis\""});
  tol_case("scheme_absent", R"({"schemes": {"w4-zeropoint": {"dppl_abs": 1}}})", {"tolerances name scheme 'w4-zeropoint'"});
  tol_case("statistics_uncollected", R"({"statistics": {"first_attn_pct": {"abs": 1}}})",
           {"limits first_attn_pct but baseline", "did not collect attention statistics"});
  // ---- merge ----
  add({"merge_one_shard", [](Inputs& in) {
         return "merge " + in.json_file("s0.json", made().shard0) + " --out " + in.path("out.json");
       }, 2, {"shard 1/2 is missing", "--allow-partial"}});
  add({"merge_shard_twice", [](Inputs& in) {
         const std::string s0 = in.json_file("s0.json", made().shard0);
         return "merge " + s0 + " " + in.json_file("again.json", made().shard0) + " --out " + in.path("out.json");
       }, 2, {"shard 0/2 is given twice"}});
  add({"merge_not_a_shard", [](Inputs& in) {
         return "merge " + in.json_file("r.json", made().record) + " " + in.json_file("s1.json", made().shard1) + " --out " +
                in.path("out.json");
       }, 2, {"r.json is not a shard record"}});
  add({"merge_window_outside_shard", [](Inputs& in) {
         const std::string s0 = record_with(in, "s0.json", made().shard0, [](json& r) {
           for (auto& s : r["schemes"]) s["per_window"]["1"] = s["per_window"]["0"];
         });
         return "merge " + s0 + " " + in.json_file("s1.json", made().shard1) + " --out " + in.path("out.json");
       }, 2, {"s0.json"}});
  add({"merge_shard_lacks_window", [](Inputs& in) {
         const std::string s1 = record_with(in, "s1.json", made().shard1, [](json& r) {
           for (auto& s : r["schemes"]) s["per_window"].erase("3");
           for (auto& s : r["shard"]["state"]["schemes"]) s["rows"].erase("3");
           r["window_hashes"].erase("3");
           r["protocol"]["windows"] = 1;
           r["protocol"]["scored_tokens"] = 31;
         });
         return "merge " + in.json_file("s0.json", made().shard0) + " " + s1 + " --out " + in.path("out.json");
       }, 2, {"s1.json"}});
  add({"merge_state_tokens_negative", [](Inputs& in) {
         const std::string s1 = record_with(in, "s1.json", made().shard1, [](json& r) {
           r["shard"]["state"]["schemes"][0]["rows"]["1"]["tokens"] = -5;
         });
         return "merge " + in.json_file("s0.json", made().shard0) + " " + s1 + " --out " + in.path("out.json");
       }, 2, {"s1.json", "checksum"}});
  add({"merge_count_edited_to_one", [](Inputs& in) {
         const std::string s0 = record_with(in, "s0.json", made().shard0, [](json& r) { r["shard"]["count"] = 1; });
         return "merge " + s0 + " --out " + in.path("out.json");
       }, 2, {"s0.json", "shard 0/1: expected i/n with n >= 2"}});
  add({"merge_out_is_a_folder", [](Inputs& in) {
         fs::create_directories(in.dir() / "merged");
         return "merge " + in.json_file("s0.json", made().shard0) + " " + in.json_file("s1.json", made().shard1) + " --out " +
                in.path("merged");
       }, 2, {"--out", "is a folder"}, ""});
  // ---- compare and plot ----
  add({"compare_shard_refused", [](Inputs& in) {
         return "compare " + in.json_file("r.json", made().record) + " " + in.json_file("s0.json", made().shard0);
       }, 2, {"s0.json is partial"}});
  add({"compare_edited_summary", [](Inputs& in) {
         return "compare " + in.json_file("r.json", made().record) + " " +
                record_with(in, "e.json", made().record, [](json& r) { r["schemes"][1]["vs_full"]["dppl"] = -1; });
       }, 2, {"e.json", "vs_full.dppl is -1"}});
  // Deleting a record's window hashes must not switch the token-stream check off (issue 63, item 6).
  add({"compare_window_hashes_deleted", [](Inputs& in) {
         return "compare " + in.json_file("r.json", made().record) + " " +
                record_with(in, "e.json", made().record, [](json& r) { r.erase("window_hashes"); });
       }, 2, {"e.json", "no window_hashes"}});
  add({"compare_other_protocol", [](Inputs& in) {
         return "compare " + in.json_file("r.json", made().record) + " " +
                record_with(in, "p.json", made().record, [](json& r) { r["protocol"]["seq_len"] = 33; });
       }, 2, {"p.json"}});
  add({"compare_out_missing_folder", [](Inputs& in) {
         return "compare " + in.json_file("r.json", made().record) + " --out " + in.path("x/y.md");
       }, 2, {"--out", "does not exist"}, ""});
  add({"plot_shard_refused", [](Inputs& in) {
         return "plot " + in.json_file("s0.json", made().shard0) + " --out " + in.path("pics");
       }, 2, {"s0.json is partial"}, "pics"});
  add({"plot_edited_record", [](Inputs& in) {
         return "plot " + record_with(in, "e.json", made().record, [](json& r) { r["protocol"]["windows"] = 9; }) + " --out " +
                in.path("pics");
       }, 2, {"e.json", "protocol.windows is 9"}, "pics"});

  // ---- train: every option's domain, before any step ----
  auto train_case = [&](const std::string& name, const std::string& options, std::vector<std::string> fragments) {
    add({"train_" + name, [options](Inputs& in) { return kTrain + " " + options + " --out " + in.path("out.ck"); }, 2, fragments,
         "out.ck"});
  };
  train_case("lr_inf", "--lr inf", {"--lr", "\"inf\" is outside the range: expected a finite number > 0"});
  train_case("lr_nan", "--lr nan", {"--lr", "\"nan\" is outside the range"});
  train_case("lr_zero", "--lr 0", {"--lr", "\"0\" is outside the range"});
  train_case("lr_negative", "--lr -1e-3", {"--lr", "is outside the range"});
  train_case("momentum_nan", "--momentum nan", {"--momentum", "outside the range"});
  train_case("momentum_one", "--momentum 1", {"--momentum", "[0, 1)"});
  train_case("kv_heads_negative", "--n-kv-heads -1", {"--n-kv-heads", "-1 is outside the range"});
  train_case("kv_heads_not_dividing", "--n-heads 4 --n-kv-heads 3", {"--n-heads 4 is not a multiple of --n-kv-heads 3"});
  train_case("d_ff_negative", "--d-ff -1", {"--d-ff", "-1 is outside the range"});
  train_case("clip_negative", "--clip -1", {"--clip", "outside the range"});
  train_case("clip_inf", "--clip inf", {"--clip", "outside the range"});
  train_case("warmup_beyond_steps", "--warmup 50", {"--warmup 50 is beyond --steps 2"});
  train_case("beta2_one", "--beta2 1", {"--beta2", "[0, 1)"});
  train_case("eps_zero", "--eps 0", {"--eps", "outside the range"});
  train_case("seq_len_one", "--seq-len 1", {"--seq-len", "2..65536"});
  train_case("val_fraction_one", "--val-fraction 1", {"--val-fraction", "[0, 1)"});
  train_case("norm_eps_nan", "--norm-eps nan", {"--norm-eps", "outside the range"});
  train_case("d_model_not_dividing", "--d-model 18 --n-heads 4", {"--d-model 18 is not a multiple of --n-heads 4"});
  train_case("init_std_zero", "--init-std 0", {"--init-std", "outside the range"});
  train_case("weight_decay_negative", "--weight-decay -0.1", {"--weight-decay", "outside the range"});
  // Issue 54: layer patterns, each entry named.
  train_case("layer_pattern_empty_entry", "--arch llama --layer-pattern mamba:dense,,attention:dense",
             {"--layer-pattern", "entry 2 '' has no ':'"});
  train_case("layer_pattern_trailing_space", "--arch llama --layer-pattern 'mamba:dense '",
             {"--layer-pattern", "unknown feed-forward 'dense '"});
  train_case("layer_pattern_capitals", "--arch llama --layer-pattern MAMBA:dense", {"unknown mixer 'MAMBA'"});
  add({"train_out_is_a_file", [](Inputs& in) { return kTrain + " --out " + in.file("ck", "x"); }, 2,
       {"--out", "ck: exists and is not a folder"}, ""});
  add({"train_binary_data", [](Inputs& in) {
         return kTrain + " --data " + in.file("weights.txt", std::string("\x01\x02\0\0\x7f", 5) + std::string(4000, '\0')) +
                " --out " + in.path("out.ck");
       }, 2, {"weights.txt", "NUL byte", "not text"}, "out.ck"});
  add({"train_diverges", [](Inputs& in) { return kTrain + " --lr 1e30 --clip 0 --out " + in.path("out.ck"); }, 2,
       {"train:", "diverged", "no checkpoint is written"}, "out.ck/model.safetensors"});
  add({"train_resume_missing", [](Inputs& in) { return kTrain + " --resume " + in.path("nowhere") + " --out " + in.path("out.ck"); },
       2, {"--resume", "nowhere"}, "out.ck"});
  add({"train_out_holds_another_run", [](Inputs& in) {
         fs::create_directories(in.dir() / "run" / "step-2");
         return kTrain + " --out " + in.path("run");
       }, 2, {"--out", "holds another run's checkpoints (step-2/)", "--resume"}, "run/model.safetensors"});
  add({"train_resume_finished_run", [](Inputs& in) {
         const test::CommandResult first = test::run_qeval(kTrain + " --out " + in.path("done"));
         EXPECT_EQ(first.status, 0) << first.output;
         return kTrain + " --resume " + in.path("done") + " --out " + in.path("done");
       }, 2, {"--resume", "already finished", "step 2 of --steps 2"}, ""});

  // ---- inspect and the other commands' arguments ----
  add({"inspect_nothing", [](Inputs&) { return std::string("inspect"); }, 2, {"give a path"}, ""});
  add({"inspect_missing_path", [](Inputs& in) { return "inspect --model " + in.path("nope.gguf"); }, 2, {"nope.gguf"}, ""});
  add({"inspect_folder_without_config", [](Inputs& in) {
         fs::create_directories(in.dir() / "empty-model");
         return "inspect --model " + in.path("empty-model");
       }, 2, {"empty-model", "config.json"}, ""});
  add({"check_without_baseline", [](Inputs& in) { return "check " + in.json_file("r.json", made().record); }, 2,
       {"--baseline B.json is required"}, ""});
  add({"check_two_records", [](Inputs& in) {
         const std::string r = in.json_file("r.json", made().record);
         return "check --baseline " + r + " --tolerances " + tolerances(in, kTol) + " " + r + " " + r;
       }, 2, {"exactly one record"}, ""});
  add({"check_record_not_json", [](Inputs& in) { return check_args(in, in.file("new.json", "{")); }, 2,
       {"new.json", "not a qeval result record"}, ""});
  add({"check_schema_version", [](Inputs& in) {
         return check_args(in, record_with(in, "new.json", made().record, [](json& r) { r["schema_version"] = 7; }));
       }, 2, {"new.json", "schema_version 7"}, ""});
  add({"compare_nothing", [](Inputs&) { return std::string("compare"); }, 2, {"give one or more result records"}, ""});
  // Issue 63: outputs over the command's own inputs, names that cannot be files, unknown commands.
  add({"out_is_the_config", [](Inputs& in) {
         const std::string config = in.file("eval.json", R"({"max-windows": 2})");
         return kTiny + " --config " + config + " --out " + config;
       }, 2, {"--out", "eval.json: is the --config file"}, ""});
  add({"out_is_the_protocol", [](Inputs& in) {
         const std::string protocol = in.file("p.json", read_file(test::repo_path("configs/protocols/windows.json")));
         return kTiny + " --protocol " + protocol + " --out " + protocol;
       }, 2, {"--out", "p.json: is the --protocol file"}, ""});
  add({"plots_replace_the_record", [](Inputs& in) {
         return kTiny + " --plots " + in.path("") + " --out " + in.path("layer_curves.png");
       }, 2, {"--plots", "layer_curves.png", "is also written as --out"}, "layer_curves.png"});
  add({"plot_dat_is_the_record", [](Inputs& in) {
         const std::string record = in.json_file("penalties.dat", made().record);
         return "plot " + record + " --out " + in.path("");
       }, 2, {"--out", "penalties.dat: is the record"}, ""});
  add({"report_is_the_config", [](Inputs& in) {
         const std::string config = in.file("check.json", R"({"format": "md"})");
         return check_args(in, in.json_file("new.json", made().record)) + " --config " + config + " --report " + config;
       }, 2, {"--report", "check.json: is the --config file"}, ""});
  add({"out_name_too_long", [](Inputs& in) { return kTiny + " --out " + in.path(std::string(300, 'o') + ".json"); }, 2,
       {"--out", "is 305 bytes, longer than the 255 a file name may have"}, ""});
  add({"unknown_command", [](Inputs&) { return std::string("evaluate --out x.json"); }, 2,
       {"unknown command \"evaluate\"", "expected one of eval"}, ""});

  // ---- probe wave 7 (issue 79 item 7, tests/hardening/probe.py group calib): the calibration options ----
  // /dev/zero was hashed for ever; "--help" and a short file were named without the option or the file;
  // an empty path meant "no --calibration-data"; a 1-token window was the protocol's error; sensitivity
  // ran a GPTQ scheme without its calibration pass and stopped at an internal check.
  const std::string cal = test::kEval + " --seq-len 32 --max-windows 2 --no-attention-stats --schemes full,gptq-w4-g128 "
                          "--calibration-windows 2";
  add({"calibration_data_device", [cal](Inputs& in) { return cal + " --calibration-data /dev/zero --out " + in.path("out.json"); },
       2, {"--calibration-data /dev/zero", "not a regular file (a device"}});
  add({"calibration_data_folder", [cal](Inputs& in) {
         return cal + " --calibration-data " + in.path("") + " --out " + in.path("out.json");
       }, 2, {"--calibration-data", "not a regular file (a folder)"}});
  add({"calibration_data_option_like", [cal](Inputs& in) { return cal + " --calibration-data --help --out " + in.path("out.json"); },
       2, {"--calibration-data --help: no such file"}});
  add({"calibration_data_empty_path", [cal](Inputs& in) { return cal + " --calibration-data '' --out " + in.path("out.json"); },
       2, {"--calibration-data", "empty path"}});
  add({"calibration_data_too_short", [cal](Inputs& in) {
         return cal + " --calibration-data " + in.file("c.txt", "Once upon a time there was a cat.\n") + " --out " +
                in.path("out.json");
       }, 2, {"--calibration-data", "c.txt", "2 calibration windows of 32 tokens asked"}});
  add({"calibration_seq_len_1", [cal](Inputs& in) { return cal + " --calibration-seq-len 1 --out " + in.path("out.json"); },
       2, {"--calibration-seq-len 1", "at least 2 tokens"}});
  add({"sensitivity_gptq", [](Inputs&) {
         return std::string("sensitivity -q --tokenizer models/stories260K/tok512.bin --seq-len 32 --max-windows 2 --scheme gptq-w4-g128");
       }, 2, {"--scheme gptq-w4-g128", "GPTQ", "sensitivity does not do"}, ""});
  return c;
}

// What one row gave, checked on the test's thread.
struct Outcome {
  std::string args;
  test::CommandResult result;
  bool output_left = false;
};

Outcome run_row(const BadInput& b) {
  Inputs in;
  Outcome o;
  o.args = b.args(in);
  o.result = test::run_qeval(o.args);
  o.output_left = !b.no_output.empty() && fs::exists(in.dir() / b.no_output);
  return o;
}

TEST(BadInputCorpus, HasAtLeast150Rows) {
  EXPECT_GE(corpus().size(), 150u);
  std::printf("bad-input corpus: %zu rows\n", corpus().size());
}

// Every row, run two at a time (each is a qeval process; most of their time is LibTorch's start-up),
// so the corpus stays within about a minute of a 2-core CI machine.
TEST(BadInputCorpus, EveryInputIsRefusedWithItsStatusAndMessage) {
  const std::vector<BadInput> rows = corpus();
  made();  // the shared record, shards and state, once, before the workers start
  std::vector<Outcome> outcomes(rows.size());
  std::atomic<std::size_t> next{0};
  auto worker = [&] {
    for (std::size_t i = next++; i < rows.size(); i = next++) outcomes[i] = run_row(rows[i]);
  };
  std::vector<std::thread> workers;
  for (unsigned t = 0; t < std::max(2u, std::min(4u, std::thread::hardware_concurrency())); ++t) workers.emplace_back(worker);
  for (auto& w : workers) w.join();

  for (std::size_t i = 0; i < rows.size(); ++i) {
    const BadInput& b = rows[i];
    const Outcome& o = outcomes[i];
    const std::string& out = o.result.output;
    SCOPED_TRACE("row " + b.name + ": qeval " + o.args + "\n" + out);
    EXPECT_EQ(o.result.status, b.status);
    for (const auto& fragment : b.fragments) EXPECT_NE(out.find(fragment), std::string::npos) << "lacks \"" << fragment << "\"";
    if (b.status == 2) {
      // One line that says what went wrong, from main (never a crash report or a 309-digit bound).
      EXPECT_NE(out.find("qeval: error: "), std::string::npos);
      EXPECT_EQ(out.find("179769313486231570"), std::string::npos);
    }
    EXPECT_FALSE(o.output_left) << b.no_output << " was written";
  }
}

}  // namespace
}  // namespace qeval
