// Hugging Face interop (model/hf.h): config.json mapping, loading by name, export -> reload bit-identity, sharding,
// the errors that name the file and the field or tensor, and model.path in the Actor and Critic constructors.
#include <catch2/catch.hpp>

#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>
#include <iostream>
#include <random>

#include "common/error.h"
#include "common/files.h"
#include "common/manifest.h"
#include "model/hf.h"
#include "model/model_shape.h"
#include "model/safetensors.h"
#include "model/transformer.h"
#include "model/weights.h"
#include "tests/model/small_model.h"
#include "tests/model/tiny_tokenizer.h"
#include "tests/temp_dir.h"
#include "text/tokenizer.h"
#include "workers/actor.h"
#include "workers/critic.h"

namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;
using Catch::Matchers::Contains;
using TempDir = ppo_test::TempDir;

// config.json of a tiny Qwen2 as transformers 4.43 writes it (save_pretrained: indent 2, sorted keys); the field set
// and formatting are those of Qwen/Qwen2.5-0.5B-Instruct's config.json, with the tiny model's sizes.
const char* kQwen2ConfigJson = R"({
  "architectures": [
    "Qwen2ForCausalLM"
  ],
  "attention_dropout": 0.0,
  "bos_token_id": 1,
  "eos_token_id": 2,
  "hidden_act": "silu",
  "hidden_size": 32,
  "initializer_range": 0.02,
  "intermediate_size": 48,
  "max_position_embeddings": 128,
  "max_window_layers": 4,
  "model_type": "qwen2",
  "num_attention_heads": 4,
  "num_hidden_layers": 4,
  "num_key_value_heads": 2,
  "rms_norm_eps": 1e-06,
  "rope_theta": 1000000.0,
  "sliding_window": 128,
  "tie_word_embeddings": false,
  "torch_dtype": "float32",
  "transformers_version": "4.43.1",
  "use_cache": true,
  "use_sliding_window": false,
  "vocab_size": 99
}
)";

// config.json of a tiny Llama as transformers 4.45 writes it (fields of meta-llama/Llama-3.2-1B's, rope_scaling null).
const char* kLlamaConfigJson = R"({
  "architectures": [
    "LlamaForCausalLM"
  ],
  "attention_bias": false,
  "attention_dropout": 0.0,
  "bos_token_id": 1,
  "eos_token_id": [
    2,
    3
  ],
  "head_dim": 8,
  "hidden_act": "silu",
  "hidden_size": 32,
  "initializer_range": 0.02,
  "intermediate_size": 48,
  "max_position_embeddings": 128,
  "mlp_bias": false,
  "model_type": "llama",
  "num_attention_heads": 4,
  "num_hidden_layers": 4,
  "num_key_value_heads": 2,
  "pretraining_tp": 1,
  "rms_norm_eps": 1e-05,
  "rope_scaling": null,
  "rope_theta": 500000.0,
  "tie_word_embeddings": true,
  "torch_dtype": "bfloat16",
  "transformers_version": "4.45.0",
  "use_cache": true,
  "vocab_size": 99
}
)";

// The shape both config.json files above describe; attention_bias / tying / rope / eps set per family.
ppo::ModelConfig tiny_config(bool qwen2) {
  ppo::ModelConfig c = ppo_test::small_model_config(/*num_layers=*/4, /*intermediate_size=*/48, /*seed=*/11);
  c.vocab_size = 99;
  c.max_position_embeddings = 128;
  c.attention_bias = qwen2;
  c.tie_word_embeddings = !qwen2;
  c.rope_theta = qwen2 ? 1e6 : 5e5;
  c.rms_norm_eps = qwen2 ? 1e-6 : 1e-5;
  c.init_std = 0.2;  // far from uniform attention, so that a wrongly loaded tensor shows in the logits
  return c;
}

void write_text(const fs::path& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary);
  out << text;
}

std::string read_text(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

using ppo_test::require_equal_states;
using ppo_test::state_of;

// Max |logits(a) - logits(b)| on a fixed batch of two sequences of 12 tokens.
double max_logit_diff(ppo::CausalLM& a, ppo::CausalLM& b) {
  torch::NoGradGuard no_grad;
  auto gen = at::detail::createCPUGenerator(5);
  auto ids = torch::randint(0, 99, {2, 12}, gen, torch::kLong);      // [B, T]
  auto positions = torch::arange(12, torch::kLong).expand({2, 12});  // [B, T]
  return (a->forward(ids, positions) - b->forward(ids, positions)).abs().max().item<double>();
}

// A folder as transformers would save the model: config.json + model.safetensors (+ the rotary inv_freq buffer that
// older transformers versions stored, which loading must ignore).
void write_hf_folder(const fs::path& dir, const std::map<std::string, torch::Tensor>& state, const char* config) {
  fs::create_directories(dir);
  write_text(dir / "config.json", config);
  auto tensors = state;
  tensors["model.layers.0.self_attn.rotary_emb.inv_freq"] = torch::ones({4});
  ppo::save_safetensors((dir / "model.safetensors").string(), tensors, json{{"format", "pt"}});
}

void edit_config(const fs::path& dir, const std::function<void(json&)>& edit) {
  json j = json::parse(read_text(dir / "config.json"));
  edit(j);
  write_text(dir / "config.json", j.dump(2));
}

// The message of the UsageError that `f` throws ("" when it throws none).
std::string usage_error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const ppo::UsageError& e) {
    return e.what();
  }
  return "";
}

// A model of `config`'s shape with a different seed than the saved one (so loading has to change every tensor).
ppo::CausalLM fresh_model(const ppo::ModelConfig& config) {
  ppo::ModelConfig c = config;
  c.seed = 999;
  return ppo::CausalLM(c, c.vocab_size);
}

}  // namespace

TEST_CASE("hf Qwen2 config.json maps onto ModelConfig and keeps the base's own fields", "[cpu][hfmodel]") {
  TempDir tmp;
  write_text(tmp.path / "config.json", kQwen2ConfigJson);
  ppo::ModelConfig base;
  base.dtype = "bfloat16";
  base.seed = 77;
  base.enable_gradient_checkpointing = true;
  base.path = tmp.path.string();
  base.tokenizer = "char";
  const ppo::HfModelInfo info = ppo::read_hf_config(tmp.path.string(), base);
  const ppo::ModelConfig& c = info.config;
  CHECK(info.architecture == "Qwen2ForCausalLM");
  CHECK(info.torch_dtype == "float32");
  CHECK(info.bos_token_id == 1);
  CHECK(info.eos_token_ids == std::vector<int64_t>{2});
  CHECK(c.hidden_size == 32);
  CHECK(c.intermediate_size == 48);
  CHECK(c.num_layers == 4);
  CHECK(c.num_heads == 4);
  CHECK(c.num_kv_heads == 2);
  CHECK(c.vocab_size == 99);
  CHECK(c.max_position_embeddings == 128);
  CHECK(c.rms_norm_eps == 1e-6);
  CHECK(c.rope_theta == 1e6);
  CHECK(c.tie_word_embeddings == false);
  CHECK(c.attention_bias == true);  // Qwen2 always has q/k/v bias
  CHECK(c.dtype == "bfloat16");     // from base
  CHECK(c.seed == 77);
  CHECK(c.enable_gradient_checkpointing);
  CHECK(c.path == base.path);
  CHECK(c.tokenizer == "char");

  // Without "architectures", model_type decides; num_key_value_heads defaults to num_attention_heads.
  edit_config(tmp.path, [](json& j) {
    j.erase("architectures");
    j.erase("num_key_value_heads");
  });
  const ppo::ModelConfig c2 = ppo::model_config_from_hf(tmp.path.string(), base);
  CHECK(c2.attention_bias);
  CHECK(c2.num_kv_heads == 4);
}

TEST_CASE("hf Qwen2-shaped folder loads to identical logits and exports bit-identically", "[cpu][hfmodel]") {
  TempDir tmp;
  const ppo::ModelConfig shape = tiny_config(/*qwen2=*/true);
  ppo::CausalLM original(shape, shape.vocab_size);
  write_hf_folder(tmp.path / "in", state_of(*original), kQwen2ConfigJson);

  const ppo::ModelConfig config = ppo::model_config_from_hf(tmp.sub("in"), ppo::ModelConfig{});
  ppo::CausalLM loaded = fresh_model(config);
  REQUIRE(max_logit_diff(original, loaded) > 1e-2);  // the fresh init really differs
  const ppo::HfLoadResult result = ppo::load_hf_weights(*loaded, tmp.sub("in"), /*allow_missing_value_head=*/false);
  CHECK(result.kept_init.empty());
  CHECK(result.unused == std::vector<std::string>{"model.layers.0.self_attn.rotary_emb.inv_freq"});
  const double diff = max_logit_diff(original, loaded);
  std::cout << "hf qwen2 load: max |logit diff| = " << diff << "\n";
  CHECK(diff <= 1e-6);

  // load -> export -> load: every tensor equal, config.json as transformers expects it.
  ppo::CharTokenizer tokenizer;
  ppo::export_hf(loaded, config, tmp.sub("out"), tokenizer, "char");
  const json written = json::parse(read_text(tmp.path / "out" / "config.json"));
  CHECK(written["architectures"] == json::array({"Qwen2ForCausalLM"}));
  CHECK(written["model_type"] == "qwen2");
  CHECK(written["torch_dtype"] == "float32");
  CHECK(written["tie_word_embeddings"] == false);
  CHECK(written["num_key_value_heads"] == 2);
  CHECK(written["vocab_size"] == 99);
  CHECK(written["rope_scaling"].is_null());
  CHECK(written["use_sliding_window"] == false);
  const json generation = json::parse(read_text(tmp.path / "out" / "generation_config.json"));
  CHECK(generation == json({{"bos_token_id", 1}, {"eos_token_id", 2}, {"pad_token_id", 0}}));
  CHECK(fs::exists(tmp.path / "out" / "char_tokenizer.txt"));
  CHECK_FALSE(fs::exists(tmp.path / "out" / "model.safetensors.index.json"));
  const std::string file = read_text(tmp.path / "out" / "model.safetensors");
  const auto header = ppo::parse_safetensors_header(reinterpret_cast<const uint8_t*>(file.data()), file.size(), "x");
  CHECK(header.metadata == json({{"format", "pt"}}));  // transformers' load_state_dict refuses files without it

  const ppo::ModelConfig reread = ppo::model_config_from_hf(tmp.sub("out"), ppo::ModelConfig{});
  CHECK(reread.num_layers == config.num_layers);
  CHECK(reread.rope_theta == config.rope_theta);
  CHECK(reread.rms_norm_eps == config.rms_norm_eps);
  CHECK(reread.attention_bias == config.attention_bias);
  CHECK(reread.tie_word_embeddings == config.tie_word_embeddings);
  ppo::CausalLM reloaded = fresh_model(reread);
  ppo::load_hf_weights(*reloaded, tmp.sub("out"), false);
  require_equal_states(state_of(*loaded), state_of(*reloaded));
  require_equal_states(state_of(*loaded), ppo::load_safetensors_dir(tmp.sub("out")));
}

TEST_CASE("hf Llama-shaped folder (no bias, tied, bfloat16 file) loads and exports", "[cpu][hfmodel]") {
  TempDir tmp;
  const ppo::ModelConfig shape = tiny_config(/*qwen2=*/false);
  ppo::CausalLM original(shape, shape.vocab_size);
  // The file holds bfloat16 (torch_dtype); round the original to those values so that float32 loading is exact.
  std::map<std::string, torch::Tensor> bf16_state;
  {
    torch::NoGradGuard no_grad;
    for (auto& item : original->named_parameters()) {
      item.value().copy_(item.value().to(torch::kBFloat16).to(torch::kFloat));
      bf16_state[item.key()] = item.value().to(torch::kBFloat16);
    }
  }
  REQUIRE(bf16_state.count("lm_head.weight") == 0);  // tied: saved without it, as transformers does
  write_hf_folder(tmp.path / "in", bf16_state, kLlamaConfigJson);

  const ppo::HfModelInfo info = ppo::read_hf_config(tmp.sub("in"), ppo::ModelConfig{});
  CHECK(info.architecture == "LlamaForCausalLM");
  CHECK(info.torch_dtype == "bfloat16");
  CHECK(info.eos_token_ids == std::vector<int64_t>({2, 3}));
  CHECK_FALSE(info.config.attention_bias);
  CHECK(info.config.tie_word_embeddings);
  CHECK(info.config.rope_theta == 5e5);
  CHECK(info.config.rms_norm_eps == 1e-5);
  ppo::CausalLM loaded = fresh_model(info.config);
  ppo::load_hf_weights(*loaded, tmp.sub("in"), false);
  const double diff = max_logit_diff(original, loaded);
  std::cout << "hf llama load (bf16 file -> float32 model): max |logit diff| = " << diff << "\n";
  CHECK(diff <= 1e-6);

  ppo::CharTokenizer tokenizer;
  ppo::export_hf(loaded, info.config, tmp.sub("out"), tokenizer, "char");
  const json written = json::parse(read_text(tmp.path / "out" / "config.json"));
  CHECK(written["architectures"] == json::array({"LlamaForCausalLM"}));
  CHECK(written["attention_bias"] == false);
  CHECK(written["tie_word_embeddings"] == true);
  CHECK(written["head_dim"] == 8);
  CHECK(ppo::load_safetensors_dir(tmp.sub("out")).count("lm_head.weight") == 0);
  ppo::CausalLM reloaded = fresh_model(ppo::model_config_from_hf(tmp.sub("out"), ppo::ModelConfig{}));
  ppo::load_hf_weights(*reloaded, tmp.sub("out"), false);
  require_equal_states(state_of(*loaded), state_of(*reloaded));

  // A bfloat16 model exports torch_dtype "bfloat16" and BF16 tensors, and reloads bit-identically.
  ppo::ModelConfig bf16 = info.config;
  bf16.dtype = "bfloat16";
  ppo::CausalLM half = fresh_model(bf16);
  ppo::load_hf_weights(*half, tmp.sub("in"), false);
  require_equal_states(bf16_state, state_of(*half));
  ppo::export_hf(half, bf16, tmp.sub("out_bf16"), tokenizer, "char");
  CHECK(json::parse(read_text(tmp.path / "out_bf16" / "config.json"))["torch_dtype"] == "bfloat16");
  require_equal_states(bf16_state, ppo::load_safetensors_dir(tmp.sub("out_bf16")));
}

TEST_CASE("hf sharded export reloads, and re-exporting removes stale weight files", "[cpu][hfmodel]") {
  TempDir tmp;
  const ppo::ModelConfig config = tiny_config(/*qwen2=*/true);
  ppo::CausalLM model(config, config.vocab_size);
  ppo::CharTokenizer tokenizer;
  // ~34k float32 parameters = ~136 kB; 40 kB shards give 4 or more files.
  ppo::export_hf(model, config, tmp.sub("out"), tokenizer, "char", /*max_shard_bytes=*/40000);
  CHECK(fs::exists(tmp.path / "out" / "model.safetensors.index.json"));
  CHECK_FALSE(fs::exists(tmp.path / "out" / "model.safetensors"));
  int shards = 0;
  for (const auto& entry : fs::directory_iterator(tmp.path / "out"))
    if (entry.path().filename().string().rfind("model-000", 0) == 0) ++shards;
  std::cout << "hf sharded export: " << shards << " shards\n";
  CHECK(shards >= 4);
  const json index = json::parse(read_text(tmp.path / "out" / "model.safetensors.index.json"));
  CHECK(index["weight_map"]["model.embed_tokens.weight"].get<std::string>().find("-of-0000") != std::string::npos);
  ppo::CausalLM reloaded = fresh_model(ppo::model_config_from_hf(tmp.sub("out"), ppo::ModelConfig{}));
  ppo::load_hf_weights(*reloaded, tmp.sub("out"), false);
  require_equal_states(state_of(*model), state_of(*reloaded));

  ppo::export_hf(model, config, tmp.sub("out"), tokenizer, "char");  // now one file
  CHECK(fs::exists(tmp.path / "out" / "model.safetensors"));
  CHECK_FALSE(fs::exists(tmp.path / "out" / "model.safetensors.index.json"));
  for (const auto& entry : fs::directory_iterator(tmp.path / "out"))
    CHECK(entry.path().filename().string().rfind("model-000", 0) != 0);
}

TEST_CASE("hf export copies the tokenizer files of a folder", "[cpu][hfmodel]") {
  TempDir tmp;
  const fs::path tok = tmp.path / "tok";
  fs::create_directories(tok);
  write_text(tok / "tokenizer.json", "{\"model\": {\"type\": \"BPE\"}}\n");
  write_text(tok / "tokenizer_config.json", "{\"eos_token\": \"<|im_end|>\"}\n");
  write_text(tok / "special_tokens_map.json", "{}\n");
  write_text(tok / "notes.md", "not a tokenizer file\n");
  const ppo::ModelConfig config = tiny_config(/*qwen2=*/true);
  ppo::CausalLM model(config, config.vocab_size);
  ppo::CharTokenizer ids;  // only its ids matter here
  ppo::export_hf(model, config, tmp.sub("out"), ids, tok.string());
  for (const char* name : {"tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"}) {
    INFO(name);
    CHECK(read_text(tmp.path / "out" / name) == read_text(tok / name));
  }
  CHECK_FALSE(fs::exists(tmp.path / "out" / "notes.md"));
  CHECK_FALSE(fs::exists(tmp.path / "out" / "char_tokenizer.txt"));
  CHECK_THAT(usage_error_of([&] { ppo::export_hf(model, config, tmp.sub("out2"), ids, tmp.sub("nowhere")); }),
             Contains("model.tokenizer") && Contains("nowhere"));
}

TEST_CASE("hf value model takes the backbone and keeps its seeded value head", "[cpu][hfmodel]") {
  TempDir tmp;
  const ppo::ModelConfig config = tiny_config(/*qwen2=*/true);
  ppo::CausalLM policy(config, config.vocab_size);
  write_hf_folder(tmp.path / "in", state_of(*policy), kQwen2ConfigJson);
  ppo::ModelConfig critic_config = config;
  critic_config.seed = 999;
  ppo::ValueModel critic(critic_config, config.vocab_size);
  const auto init = state_of(*critic);
  const ppo::HfLoadResult result = ppo::load_hf_weights(*critic, tmp.sub("in"), /*allow_missing_value_head=*/true);
  CHECK(result.kept_init == std::vector<std::string>({"value_head.weight", "value_head.bias"}));
  CHECK(std::find(result.unused.begin(), result.unused.end(), "lm_head.weight") != result.unused.end());
  const auto loaded = state_of(*critic);
  const auto source = state_of(*policy);
  for (const auto& [name, t] : loaded) {
    INFO(name);
    CHECK(torch::equal(t, name.rfind("value_head.", 0) == 0 ? init.at(name) : source.at(name)));
  }
  CHECK_THAT(usage_error_of([&] { ppo::load_hf_weights(*critic, tmp.sub("in"), false); }),
             Contains("missing") && Contains("value_head.weight"));
}

TEST_CASE("hf unsupported configs are UsageErrors naming the file and the field", "[cpu][hfmodel]") {
  TempDir tmp;
  struct Case {
    const char* field;
    const char* config;
    std::function<void(json&)> edit;
  };
  const std::vector<Case> cases = {
      {"architectures", kQwen2ConfigJson, [](json& j) { j["architectures"] = {"GPT2LMHeadModel"}; }},
      {"model_type", kQwen2ConfigJson, [](json& j) { j["architectures"] = {"MistralForCausalLM"}; }},  // contradicts
      {"Gemma 3", kQwen2ConfigJson, [](json& j) { j.erase("architectures"), j["model_type"] = "gemma3_text"; }},
      {"shared expert", kQwen2ConfigJson, [](json& j) { j.erase("architectures"), j["model_type"] = "qwen2_moe"; }},
      {"num_experts", kQwen2ConfigJson, [](json& j) { j["num_experts"] = 8; }},
      {"attn_logit_softcapping", kLlamaConfigJson, [](json& j) { j["attn_logit_softcapping"] = 50.0; }},
      {"layer_types", kLlamaConfigJson,
       [](json& j) {
         j["layer_types"] = {"full_attention", "sliding_attention"};
       }},
      {"partial_rotary_factor", kLlamaConfigJson,
       [](json& j) {
         j["rope_parameters"] = {{"rope_type", "default"}, {"rope_theta", 1e4}, {"partial_rotary_factor", 0.5}};
       }},
      {"use_sliding_window", kQwen2ConfigJson,
       [](json& j) {
         j["architectures"] = {"Qwen3ForCausalLM"};
         j["model_type"] = "qwen3";
         j["use_sliding_window"] = true;
       }},
      {"model_type", kQwen2ConfigJson,
       [](json& j) {
         j.erase("architectures");
         j["model_type"] = "gemma";
       }},
      {"rope_scaling", kQwen2ConfigJson,
       [](json& j) {
         j["rope_scaling"] = {{"type", "dynamic"}, {"factor", 2.0}};
       }},
      {"rope_scaling", kLlamaConfigJson,
       [](json& j) {
         j["rope_scaling"] = {{"rope_type", "llama3"}, {"factor", 32.0}};
       }},
      {"use_sliding_window", kQwen2ConfigJson, [](json& j) { j["use_sliding_window"] = true; }},
      {"hidden_act", kQwen2ConfigJson, [](json& j) { j["hidden_act"] = "gelu"; }},
      {"mlp_bias", kLlamaConfigJson, [](json& j) { j["mlp_bias"] = true; }},
      {"head_dim", kQwen2ConfigJson, [](json& j) { j["head_dim"] = 16; }},
      {"num_hidden_layers", kQwen2ConfigJson, [](json& j) { j.erase("num_hidden_layers"); }},
      {"hidden_size", kQwen2ConfigJson, [](json& j) { j["hidden_size"] = "32"; }},
      {"num_kv_heads", kQwen2ConfigJson, [](json& j) { j["num_key_value_heads"] = 3; }},  // validate_model_config
  };
  for (const Case& c : cases) {
    INFO("field " << c.field);
    write_text(tmp.path / "config.json", c.config);
    edit_config(tmp.path, c.edit);
    const std::string message = usage_error_of([&] { ppo::model_config_from_hf(tmp.path.string(), {}); });
    CHECK_THAT(message, Contains("config.json") && Contains(c.field));
  }
  CHECK_THAT(usage_error_of([&] { ppo::model_config_from_hf(tmp.sub("absent"), {}); }), Contains("config.json"));
}

TEST_CASE("hf missing tensors and wrong shapes are UsageErrors and leave the model untouched", "[cpu][hfmodel]") {
  TempDir tmp;
  const ppo::ModelConfig config = tiny_config(/*qwen2=*/true);
  ppo::CausalLM source(config, config.vocab_size);
  ppo::CausalLM target = fresh_model(config);
  const auto before = state_of(*target);

  auto missing = state_of(*source);
  missing.erase("model.layers.2.mlp.up_proj.weight");
  write_hf_folder(tmp.path / "missing", missing, kQwen2ConfigJson);
  CHECK_THAT(usage_error_of([&] { ppo::load_hf_weights(*target, tmp.sub("missing"), true); }),
             Contains("missing") && Contains("model.layers.2.mlp.up_proj.weight"));

  auto untied = state_of(*source);
  untied.erase("lm_head.weight");
  write_hf_folder(tmp.path / "untied", untied, kQwen2ConfigJson);
  CHECK_THAT(usage_error_of([&] { ppo::load_hf_weights(*target, tmp.sub("untied"), false); }),
             Contains("lm_head.weight") && Contains("tie_word_embeddings"));

  auto reshaped = state_of(*source);
  reshaped["model.layers.1.mlp.up_proj.weight"] = torch::zeros({32, 48});  // stored transposed: [D, I] not [I, D]
  write_hf_folder(tmp.path / "shape", reshaped, kQwen2ConfigJson);
  CHECK_THAT(usage_error_of([&] { ppo::load_hf_weights(*target, tmp.sub("shape"), false); }),
             Contains("model.layers.1.mlp.up_proj.weight") && Contains("[32, 48]") &&
                 Contains("the model of this config [48, 32]"));

  // q/k norms where config.json has none (a Qwen3 checkpoint, Llama's config): named by both readers, not dropped.
  auto normed = state_of(*source);
  normed["model.layers.0.self_attn.q_norm.weight"] = torch::ones({8});
  write_hf_folder(tmp.path / "normed", normed, kQwen2ConfigJson);
  CHECK_THAT(usage_error_of([&] { ppo::load_hf_weights(*target, tmp.sub("normed"), false); }),
             Contains("model.layers.0.self_attn.q_norm.weight") && Contains("no q/k norms"));
  CHECK_THAT(usage_error_of([&] { ppo::HfWeightParts(tmp.sub("normed"), false, config.qk_norm); }),
             Contains("model.layers.0.self_attn.q_norm.weight") && Contains("no q/k norms"));

  require_equal_states(before, state_of(*target));  // no failed load changed anything
}

TEST_CASE("hf Qwen3 and Mistral configs: head_dim, q/k norms, sliding window and rotary scaling", "[cpu][hfmodel]") {
  TempDir tmp;
  write_text(tmp.path / "config.json", kQwen2ConfigJson);
  edit_config(tmp.path, [](json& j) {
    j["architectures"] = {"Qwen3ForCausalLM"};
    j["model_type"] = "qwen3";
    j.erase("head_dim");  // Qwen3Config's default: 128
    j["rope_scaling"] = {{"rope_type", "yarn"}, {"factor", 4.0}, {"original_max_position_embeddings", 64}};
  });
  const ppo::ModelConfig qwen3 = ppo::model_config_from_hf(tmp.path.string(), {});
  CHECK(qwen3.model_type == "qwen3");
  CHECK(qwen3.qk_norm);
  CHECK(qwen3.head_dim == 128);
  CHECK_FALSE(qwen3.attention_bias);
  CHECK(qwen3.sliding_window == 0);
  CHECK(qwen3.rope_scaling.rope_type == "yarn");
  CHECK(qwen3.rope_scaling.original_max_position_embeddings == 64);
  CHECK(qwen3.rope_scaling.attention_factor == Approx(0.1 * std::log(4.0) + 1));

  write_text(tmp.path / "config.json", kLlamaConfigJson);
  edit_config(tmp.path, [](json& j) {
    j["architectures"] = {"MistralForCausalLM"};
    j["model_type"] = "mistral";
    j.erase("sliding_window");  // MistralConfig's default: 4096
    j["head_dim"] = 16;
  });
  const ppo::ModelConfig mistral = ppo::model_config_from_hf(tmp.path.string(), {});
  CHECK(mistral.sliding_window == 4096);
  CHECK(ppo::head_dim_of(mistral) == 16);
  edit_config(tmp.path, [](json& j) { j["sliding_window"] = nullptr; });
  CHECK(ppo::model_config_from_hf(tmp.path.string(), {}).sliding_window == 0);

  // A weight file that contradicts config.json's head_dim is one error naming the tensor and both shapes.
  ppo::ModelConfig narrow = mistral;
  narrow.head_dim = 0;
  ppo::CausalLM source(narrow, mistral.vocab_size);
  write_hf_folder(tmp.path / "narrow", state_of(*source), kLlamaConfigJson);
  edit_config(tmp.path / "narrow", [](json& j) { j["head_dim"] = 16; });
  ppo::CausalLM wide(mistral, mistral.vocab_size);
  CHECK_THAT(usage_error_of([&] { ppo::load_hf_weights(*wide, tmp.sub("narrow"), false); }),
             Contains("self_attn.") && Contains("[64, 32]"));
}

TEST_CASE("hf model.path takes the shape and tokenizer of the folder: actor, reference and critic load it",
          "[cpu][hfmodel]") {
  TempDir tmp;
  const ppo::ModelConfig shape = tiny_config(/*qwen2=*/true);
  ppo::CausalLM original(shape, shape.vocab_size);
  write_hf_folder(tmp.path / "hf", state_of(*original), kQwen2ConfigJson);

  ppo::Config config;  // the default shape (width 64, 2 layers) differs from the folder's (width 32, 4 layers)
  REQUIRE(config.model.hidden_size != 32);
  ppo::resolve_model_path(config.model);  // no path: nothing changes
  CHECK(config.model.hidden_size == ppo::ModelConfig{}.hidden_size);
  config.model.path = tmp.sub("hf");
  config.model.seed = 999;
  ppo::resolve_model_path(config.model);
  CHECK(config.model.hidden_size == 32);
  CHECK(config.model.num_layers == 4);
  CHECK(config.model.vocab_size == 99);
  CHECK(config.model.attention_bias);
  CHECK_FALSE(config.model.tie_word_embeddings);
  CHECK(config.model.seed == 999);          // not a shape field
  CHECK(config.model.tokenizer == "char");  // the folder has no tokenizer.json

  // The policy and the reference (both Actor) take every tensor; an init_checkpoint wins over model.path.
  const auto reference = ppo::Actor::reference(config, config.model.vocab_size);
  require_equal_states(state_of(*original), state_of(*reference->model()));
  const auto policy = ppo::Actor::policy(config, config.model.vocab_size, /*total_optimizer_steps=*/10);
  require_equal_states(state_of(*original), state_of(*policy->model()));
  ppo::CausalLM other = fresh_model(shape);
  fs::create_directories(tmp.path / "ckpt");
  ppo::save_module(*other, tmp.sub("ckpt/actor.pt"));
  ppo::write_manifest(tmp.sub("ckpt"));  // as a checkpoint carries one
  ppo::Config from_checkpoint = config;
  from_checkpoint.actor.init_checkpoint = tmp.sub("ckpt");
  const auto resumed = ppo::Actor::reference(from_checkpoint, config.model.vocab_size);
  require_equal_states(state_of(*other), state_of(*resumed->model()));

  // The critic: the folder's backbone, its own seeded value head (the one a ValueModel of this seed gets).
  ppo::Critic critic(config, config.model.vocab_size, /*total_optimizer_steps=*/10);
  ppo::ValueModel seeded(config.model, config.model.vocab_size);
  const auto source = state_of(*original), init = state_of(*seeded);
  const auto loaded = state_of(*critic.model());
  for (const auto& [name, t] : loaded) {
    INFO(name);
    CHECK(torch::equal(t, name.rfind("value_head.", 0) == 0 ? init.at(name) : source.at(name)));
  }

  // A tokenizer.json in the folder replaces the default "char", not an explicit choice.
  write_text(tmp.path / "hf" / "tokenizer.json", ppo_test::tiny_tokenizer_json().dump());
  ppo::ModelConfig with_tokenizer;
  with_tokenizer.path = tmp.sub("hf");
  ppo::resolve_model_path(with_tokenizer);
  CHECK(with_tokenizer.tokenizer == tmp.sub("hf"));
  ppo::ModelConfig explicit_tokenizer;
  explicit_tokenizer.path = tmp.sub("hf");
  explicit_tokenizer.tokenizer = tmp.sub("elsewhere/tokenizer.json");
  ppo::resolve_model_path(explicit_tokenizer);
  CHECK(explicit_tokenizer.tokenizer == tmp.sub("elsewhere/tokenizer.json"));
}

TEST_CASE("hf model.path errors name the file", "[cpu][hfmodel]") {
  TempDir tmp;
  ppo::ModelConfig absent;
  absent.path = tmp.sub("absent");
  CHECK_THAT(usage_error_of([&] { ppo::resolve_model_path(absent); }), Contains(tmp.sub("absent/config.json")));

  // config.json but no weights: the shape resolves, the Actor constructor names the missing weight file.
  fs::create_directories(tmp.path / "no_weights");
  write_text(tmp.path / "no_weights" / "config.json", kQwen2ConfigJson);
  ppo::Config config;
  config.model.path = tmp.sub("no_weights");
  ppo::resolve_model_path(config.model);
  CHECK_THAT(usage_error_of([&] { ppo::Actor::reference(config, config.model.vocab_size); }),
             Contains(tmp.sub("no_weights")) && Contains("model.safetensors"));
  CHECK_THAT(usage_error_of([&] { ppo::Critic critic(config, config.model.vocab_size, /*total_optimizer_steps=*/1); }),
             Contains(tmp.sub("no_weights")) && Contains("model.safetensors"));
}
