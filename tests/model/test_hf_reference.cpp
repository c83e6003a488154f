// Hugging Face transformers as the correctness oracle ([ref]): small random Qwen2ForCausalLM and LlamaForCausalLM
// models made and saved by transformers (tests/reference/hf_models.py), loaded by ppo.cpp through model/hf.h, and
// compared side by side in one run: logits of a left-padded batch, greedy generations, log-probs of given responses,
// the value model's backbone output, and a folder written by `export_hf` loaded back by transformers.
#include <catch2/catch.hpp>

#include <nlohmann/json.hpp>

#include <fstream>
#include <random>
#include <sstream>

#include "model/hf.h"
#include "model/safetensors.h"
#include "model/tokenizer.h"
#include "model/transformer.h"
#include "rollout/rollout.h"
#include "tests/reference/reference.h"
#include "tests/temp_dir.h"

namespace {

using json = nlohmann::json;
using Rows = std::vector<std::vector<int64_t>>;

constexpr int64_t kVocab = 256;  // hf_models.py's vocabulary
constexpr int64_t kNewTokens = 32;

struct Inputs {
  Rows prompts, responses;
};

// 32 prompts of 3..12 tokens and responses of 1..16 tokens (ids 1..255; 0 is the pad).
Inputs make_inputs() {
  std::mt19937 rng(20261123);
  const auto row = [&](int lo, int hi) {
    std::vector<int64_t> r(lo + rng() % (hi - lo + 1));
    for (auto& id : r) id = 1 + rng() % (kVocab - 1);
    return r;
  };
  Inputs in;
  for (int i = 0; i < 32; ++i) in.prompts.push_back(row(3, 12));
  for (int i = 0; i < 32; ++i) in.responses.push_back(row(1, 16));
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
  torch::Tensor m = mask.to(torch::kFloat);
  while (m.dim() < ref.dim()) m = m.unsqueeze(-1);
  const torch::Tensor diff = (ours.to(torch::kFloat) - ref.to(torch::kFloat)).abs() * m;
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

// Runs hf_models.py `run` on `model_dir` for the inputs in `inputs_json`; returns its tensors.
std::map<std::string, torch::Tensor> transformers_outputs(const std::string& model_dir, const std::string& inputs_json,
                                                          const std::string& out) {
  ppo_test::run_reference("hf_models.py", "run \"" + model_dir + "\" \"" + inputs_json + "\" \"" + out + "\"");
  return ppo::load_safetensors(out);
}

void check_against_transformers(const std::string& kind) {
  ppo_test::TempDir tmp("ppo_hf_ref");
  const std::string hf_dir = tmp.sub("hf"), inputs_json = tmp.sub("inputs.json");
  ppo_test::run_reference("hf_models.py", "make " + kind + " \"" + hf_dir + "\"");
  const Inputs in = make_inputs();
  std::ofstream(inputs_json) << json{
      {"prompts", in.prompts}, {"responses", in.responses}, {"max_new_tokens", kNewTokens}};
  auto ref = transformers_outputs(hf_dir, inputs_json, tmp.sub("ref.safetensors"));

  ppo::ModelConfig base;
  base.attn_implementation = "eager";  // as the reference; sdpa == eager is tests/model/test_transformer.cpp's
  const ppo::HfModelInfo info = ppo::read_hf_config(hf_dir, base);
  const int64_t V = info.config.vocab_size;
  REQUIRE(V == kVocab);
  ppo::CausalLM model(info.config, V);
  ppo::load_hf_weights(*model, hf_dir, /*allow_missing_value_head=*/false);
  model->eval();
  torch::NoGradGuard no_grad;

  // Logits of the left-padded prompts, on the real tokens.
  const Padded prompts = pad(in.prompts);
  const torch::Tensor logits = model->forward(prompts.ids, prompts.positions, prompts.mask);
  const Difference d_logits = compare(logits, ref.at("logits"), prompts.mask);
  std::printf("%s: logits max |diff| %.3g at %s, relative %.3g (max |logit| %.3g)\n", kind.c_str(), d_logits.max_abs,
              index_str(d_logits.where).c_str(), d_logits.relative(), d_logits.max_ref);
  INFO(kind << " logits: largest difference " << d_logits.max_abs << " at [row, position, token] "
            << index_str(d_logits.where));
  CHECK(d_logits.relative() <= 1e-5);
  CHECK(d_logits.max_ref > 1.0);  // far from uniform: a wrongly loaded tensor would show

  // Greedy generation: the same 32 tokens for every prompt.
  ppo::GenerationParams params;
  params.max_new_tokens = kNewTokens;
  params.temperature = 0;  // greedy
  params.eos_id = -1;      // the reference config has no EOS: every row generates all tokens
  params.pad_id = 0;
  const ppo::RolloutOutput out =
      ppo::generate_responses(model, in.prompts, std::vector<uint64_t>(in.prompts.size(), 1), params);
  const torch::Tensor greedy = ref.at("greedy");
  REQUIRE(out.responses.sizes() == greedy.sizes());
  const torch::Tensor differs = out.responses.ne(greedy);
  if (differs.any().item<bool>()) {
    const auto first = differs.nonzero()[0];
    const int64_t row = first[0].item<int64_t>(), t = first[1].item<int64_t>();
    FAIL(kind << " greedy: row " << row << " first differs at token " << t << ": ppo.cpp "
              << out.responses[row][t].item<int64_t>() << ", transformers " << greedy[row][t].item<int64_t>()
              << " (transformers' top-2 logit margin there " << ref.at("greedy_margin")[row][t].item<double>() << ")");
  }
  std::printf("%s: greedy %ld x %ld tokens identical (smallest top-2 margin %.3g)\n", kind.c_str(), greedy.size(0),
              greedy.size(1), ref.at("greedy_margin").min().item<double>());

  // Log-probs of given responses under the full-batch forward (the actor's compute_log_probs).
  const Padded batch = pad(in.prompts, in.responses);
  const int64_t R = ref.at("log_probs").size(1);
  const torch::Tensor log_probs =
      ppo::compute_log_probs(model, batch.ids, batch.mask, batch.positions, R, /*temperature=*/1.0).log_probs;
  const torch::Tensor response_mask = batch.mask.narrow(1, batch.mask.size(1) - R, R);
  const Difference d_lp = compare(log_probs, ref.at("log_probs"), response_mask);
  std::printf("%s: log-probs max |diff| %.3g at %s\n", kind.c_str(), d_lp.max_abs, index_str(d_lp.where).c_str());
  INFO(kind << " log-probs: largest difference " << d_lp.max_abs << " at [row, response token] "
            << index_str(d_lp.where));
  CHECK(d_lp.max_abs <= 1e-5 * std::max(1.0, d_lp.max_ref));

  // The value model's backbone: transformers' last hidden state (after the final norm).
  ppo::ValueModel critic(info.config, V);
  ppo::load_hf_weights(*critic, hf_dir, /*allow_missing_value_head=*/true);
  const torch::Tensor hidden = critic->model->forward(prompts.ids, prompts.positions, prompts.mask);
  const Difference d_hidden = compare(hidden, ref.at("hidden"), prompts.mask);
  std::printf("%s: value backbone max |diff| %.3g, relative %.3g\n", kind.c_str(), d_hidden.max_abs,
              d_hidden.relative());
  INFO(kind << " hidden state: largest difference " << d_hidden.max_abs << " at " << index_str(d_hidden.where));
  CHECK(d_hidden.relative() <= 1e-5);

  // ppo.cpp's export, loaded by transformers: the same logits as ppo.cpp's.
  const std::string exported = tmp.sub("exported");
  ppo::export_hf(model, info.config, exported, ppo::CharTokenizer(), "char");
  auto back = transformers_outputs(exported, inputs_json, tmp.sub("back.safetensors"));
  const Difference d_export = compare(logits, back.at("logits"), prompts.mask);
  std::printf("%s: export loaded by transformers, logits max |diff| %.3g, relative %.3g\n", kind.c_str(),
              d_export.max_abs, d_export.relative());
  INFO(kind << " exported folder: largest difference " << d_export.max_abs << " at " << index_str(d_export.where));
  CHECK(d_export.relative() <= 1e-5);
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
