// The training side of a PPO step on a synthetic batch, packed against padded, side by side in one process:
// old_log_prob, ref, values, update_critic, update_actor, each timed with actor/critic.use_remove_padding off and
// on in turn (median of --repeats rounds after a warm-up), and how close each comes to the machine's GEMM rate.
//
//   bench_update [--config FILE.yaml] [--threads N] [--rows B] [--lengths skewed|uniform] [--repeats K] [--seed S]
//                [--write-batch FILE.json] [key=value ...]
//
// The model, batch shapes, micro-batch sizes and losses come from --config (default configs/bench_memory.yaml) and the
// overrides. The batch: --rows rows (default: data.train_batch_size x rollout.n), prompts of uniform length in
// [P/2, P] left-padded to P = data.max_prompt_length, responses right-padded to R = data.max_response_length of
//   skewed:  geometric length with mean R/4 (a constant chance 4/R of EOS at every token), truncated at R, ending in
//            EOS when it stops before R (what EOS-driven sampling gives);
//   uniform: every response R tokens (every row runs to the limit).
// Random tokens; old and reference log-probs, advantages, returns and values are random numbers on the response
// tokens. --write-batch writes the batch as JSON for bench/peers/eager_port.py `phases`, the eager PyTorch peer of
// the same phases on padded tensors.
//
// FLOPs are the model's work on real tokens: 2 x (projection weights) per token and layer, attention 2 x H x Dh x
// L (L + 1) per sequence and layer (causal), the LM head 2 x D x V per response token (log-prob phases), three times
// the forward for an update (forward and backward). The GEMM rate is at::mm's at the step's shapes: for each
// projection, [M, K] x [K, N] with M the real tokens of an average micro-batch, and the LM head at the response
// tokens; the rate is their summed FLOPs over their summed time (best of 5). Prints one JSON line.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/config.h"
#include "common/error.h"
#include "rollout/rollout.h"
#include "text/tokenizers.h"
#include "train/config_check.h"
#include "workers/actor.h"
#include "workers/critic.h"

namespace {

struct Args {
  std::string config = "configs/bench_memory.yaml";
  int64_t threads = 2;
  int64_t rows = 0;  // 0 = data.train_batch_size x rollout.n
  std::string lengths = "skewed";
  int64_t repeats = 5;
  int64_t seed = 1;
  std::string write_batch;
  std::vector<std::string> overrides;
};

Args parse_args(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    const std::string key = argv[i];
    if (key.rfind("--", 0) != 0) {
      a.overrides.push_back(key);
      continue;
    }
    ppo::usage_check(i + 1 < argc, key + " wants a value (see the header of bench/bench_update.cpp)");
    const std::string value = argv[++i];
    if (key == "--config")
      a.config = value;
    else if (key == "--threads")
      a.threads = std::stoll(value);
    else if (key == "--rows")
      a.rows = std::stoll(value);
    else if (key == "--lengths")
      a.lengths = value;
    else if (key == "--repeats")
      a.repeats = std::stoll(value);
    else if (key == "--seed")
      a.seed = std::stoll(value);
    else if (key == "--write-batch")
      a.write_batch = value;
    else
      throw ppo::UsageError("unknown option " + key + " (see the header of bench/bench_update.cpp)");
  }
  ppo::usage_check(a.lengths == "skewed" || a.lengths == "uniform", "--lengths: skewed | uniform");
  ppo::usage_check(a.repeats >= 1 && a.threads >= 1, "--repeats and --threads must be >= 1");
  return a;
}

// The synthetic batch (see the header), with the prompt and response lengths of each row.
ppo::Batch synthetic_batch(const Args& a, const ppo::Config& c, int64_t vocab, int64_t eos,
                           std::vector<int64_t>* prompt_lengths, std::vector<int64_t>* response_lengths) {
  const int64_t B = a.rows > 0 ? a.rows : c.data.train_batch_size * c.rollout.n;
  const int64_t P = c.data.max_prompt_length, R = c.data.max_response_length;
  std::mt19937_64 rng(static_cast<uint64_t>(a.seed));
  std::uniform_int_distribution<int64_t> prompt_length(std::max<int64_t>(1, P / 2), P), token(4, vocab - 1);
  std::geometric_distribution<int64_t> stops(std::min(1.0, 4.0 / static_cast<double>(R)));
  torch::Tensor ids = torch::zeros({B, P + R}, torch::kLong), mask = torch::zeros({B, P + R}, torch::kLong);
  auto id = ids.accessor<int64_t, 2>(), real = mask.accessor<int64_t, 2>();
  for (int64_t b = 0; b < B; ++b) {
    const int64_t p = prompt_length(rng), r = a.lengths == "uniform" ? R : std::min(R, 1 + stops(rng));
    prompt_lengths->push_back(p);
    response_lengths->push_back(r);
    for (int64_t t = P - p; t < P + r; ++t) id[b][t] = token(rng), real[b][t] = 1;
    if (a.lengths == "skewed" && r < R) id[b][P + r - 1] = eos;
  }
  torch::manual_seed(a.seed);
  const torch::Tensor response_mask = mask.narrow(1, P, R).to(torch::kFloat);
  ppo::Batch batch;
  batch.set(ppo::field::prompts, ids.narrow(1, 0, P).clone());
  batch.set(ppo::field::responses, ids.narrow(1, P, R).clone());
  batch.set(ppo::field::input_ids, ids);
  batch.set(ppo::field::attention_mask, mask);
  batch.set(ppo::field::position_ids, ppo::position_ids_from_mask(mask));
  batch.set(ppo::field::response_mask, response_mask);
  batch.set(ppo::field::sample_mask, torch::ones({B}));
  batch.set(ppo::field::group_id, torch::arange(B, torch::kLong) / c.rollout.n);
  batch.set(ppo::field::old_log_probs, (torch::randn({B, R}) * 0.5 - 2) * response_mask);
  batch.set(ppo::field::ref_log_probs, (torch::randn({B, R}) * 0.5 - 2) * response_mask);
  batch.set(ppo::field::advantages, torch::randn({B, R}) * response_mask);
  batch.set(ppo::field::returns, torch::randn({B, R}) * response_mask);
  batch.set(ppo::field::values, torch::randn({B, R}) * response_mask);
  return batch;
}

void write_batch(const std::string& path, const ppo::Batch& batch, const ppo::Config& c) {
  const auto rows = [](const torch::Tensor& t) {
    nlohmann::json out = nlohmann::json::array();
    const torch::Tensor x = t.to(torch::kDouble).contiguous();
    for (int64_t b = 0; b < x.size(0); ++b)
      out.push_back(std::vector<double>(x[b].data_ptr<double>(), x[b].data_ptr<double>() + x.size(1)));
    return out;
  };
  nlohmann::json j;
  j["rows"] = batch.size();
  j["prompt_width"] = batch.at(ppo::field::prompts).size(1);
  j["response_width"] = batch.at(ppo::field::responses).size(1);
  for (const char* name : {ppo::field::input_ids, ppo::field::attention_mask}) {
    nlohmann::json ints = nlohmann::json::array();
    const torch::Tensor x = batch.at(name).contiguous();
    for (int64_t b = 0; b < x.size(0); ++b)
      ints.push_back(std::vector<int64_t>(x[b].data_ptr<int64_t>(), x[b].data_ptr<int64_t>() + x.size(1)));
    j[name] = ints;
  }
  for (const char* name : {ppo::field::old_log_probs, ppo::field::ref_log_probs, ppo::field::advantages,
                           ppo::field::returns, ppo::field::values})
    j[name] = rows(batch.at(name));
  j["log_prob_micro"] = c.rollout.log_prob_micro_batch_size_per_gpu;
  j["critic_micro"] = c.critic.ppo_micro_batch_size_per_gpu;
  j["update_micro"] = c.actor.ppo_micro_batch_size_per_gpu;
  j["lr"] = c.actor.optim.lr;
  j["kl_loss_coef"] = c.actor.kl_loss_coef;
  std::ofstream(path) << j.dump() << "\n";
}

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.size() % 2 ? v[v.size() / 2] : 0.5 * (v[v.size() / 2 - 1] + v[v.size() / 2]);
}

// The model's FLOPs of one forward over the real tokens (see the header): projections and attention per layer, the
// LM head on `head_tokens` positions.
double forward_flops(const ppo::ModelConfig& m, int64_t vocab, const std::vector<int64_t>& lengths,
                     int64_t head_tokens) {
  const double D = static_cast<double>(m.hidden_size), I = static_cast<double>(m.intermediate_size);
  const double Dh = D / static_cast<double>(m.num_heads), kv = static_cast<double>(m.num_kv_heads) * Dh;
  const double projections = 2 * (D * D + 2 * D * kv + D * D + 3 * D * I);  // q, k, v, o, gate, up, down
  double tokens = 0, attention = 0;
  for (const int64_t l : lengths) {
    tokens += static_cast<double>(l);
    attention += 2 * D * static_cast<double>(l) * static_cast<double>(l + 1);
  }
  return static_cast<double>(m.num_layers) * (projections * tokens + attention) +
         2 * D * static_cast<double>(vocab) * static_cast<double>(head_tokens);
}

// at::mm's FLOP rate at the step's projection shapes with M rows, and the LM head's with `head_rows` (see the header).
double gemm_rate(const ppo::ModelConfig& m, int64_t vocab, int64_t M, int64_t head_rows) {
  const int64_t D = m.hidden_size, I = m.intermediate_size, kv = m.num_kv_heads * (D / m.num_heads);
  struct Shape {
    int64_t rows, k, n;
  };
  const std::vector<Shape> shapes = {{M, D, D}, {M, D, kv}, {M, D, kv}, {M, D, D},
                                     {M, D, I}, {M, D, I},  {M, I, D},  {head_rows, D, vocab}};
  double flops = 0, seconds = 0;
  torch::NoGradGuard no_grad;
  for (const Shape& s : shapes) {
    const torch::Tensor x = torch::randn({s.rows, s.k}), w = torch::randn({s.n, s.k});
    double best = 1e30;
    for (int i = 0; i < 6; ++i) {  // the first is the warm-up
      const auto start = std::chrono::steady_clock::now();
      const torch::Tensor y = at::mm(x, w.t());
      if (i > 0) best = std::min(best, seconds_since(start));
    }
    flops += 2.0 * static_cast<double>(s.rows * s.k * s.n);
    seconds += best;
  }
  return flops / seconds;
}

// Seconds of each phase of one step, per mode (padded, packed), of a.repeats rounds after a warm-up round.
using PhaseTimes = std::map<std::string, std::map<std::string, std::vector<double>>>;  // mode -> phase -> seconds
PhaseTimes time_phases(const Args& a, ppo::Config& c, int64_t vocab, const ppo::Batch& batch,
                       const std::vector<std::string>& phases) {
  const auto actor = ppo::Actor::policy(c, vocab, /*total_optimizer_steps=*/1000);
  const auto ref = ppo::Actor::reference(c, vocab);
  ppo::Critic critic(c, vocab, /*total_optimizer_steps=*/1000);
  ppo::Context& context = ppo::Context::get();
  const auto run_phase = [&](const std::string& phase) {
    ppo::Metrics metrics;
    // As the trainer: log-prob micro-batches by count, or by rollout.log_prob_max_token_len_per_gpu.
    const int64_t budget = c.rollout.log_prob_use_dynamic_bsz ? c.rollout.log_prob_max_token_len_per_gpu : 0;
    if (phase == "old_log_prob")
      actor->compute_log_probs(batch, {c.rollout.log_prob_micro_batch_size_per_gpu, budget});
    else if (phase == "ref")
      ref->compute_log_probs(batch, {c.ref.log_prob_micro_batch_size_per_gpu, budget});
    else if (phase == "values")
      critic.compute_values(batch);
    else if (phase == "update_critic")
      critic.update(batch, /*mini_batches=*/1, context, metrics);
    else
      actor->update_policy(batch, /*mini_batches=*/1, context, metrics);
  };
  PhaseTimes times;
  for (int64_t round = 0; round <= a.repeats; ++round) {
    for (const bool packed : {false, true}) {  // alternating, so that drift hits both alike
      c.actor.use_remove_padding = c.critic.use_remove_padding = packed;
      for (const std::string& phase : phases) {
        const auto start = std::chrono::steady_clock::now();
        run_phase(phase);
        if (round > 0) times[packed ? "packed" : "padded"][phase].push_back(seconds_since(start));
      }
    }
  }
  return times;
}

}  // namespace

int main(int argc, char** argv) try {
  const Args a = parse_args(argc, argv);
  torch::set_num_threads(static_cast<int>(a.threads));
  ppo::Config c = ppo::load_config({a.config}, a.overrides);
  ppo::check_config(c, 1);
  const auto tokenizer = ppo::make_tokenizer(c.model.tokenizer);
  const int64_t vocab = c.model.vocab_size > 0 ? c.model.vocab_size : tokenizer->vocab_size();
  std::vector<int64_t> prompt_lengths, response_lengths;
  const ppo::Batch batch = synthetic_batch(a, c, vocab, tokenizer->eos_id(), &prompt_lengths, &response_lengths);
  if (!a.write_batch.empty()) write_batch(a.write_batch, batch, c);

  const std::vector<std::string> phases = {"old_log_prob", "ref", "values", "update_critic", "update_actor"};
  PhaseTimes times = time_phases(a, c, vocab, batch, phases);

  std::vector<int64_t> lengths;
  int64_t tokens = 0, responses = 0;
  for (size_t i = 0; i < prompt_lengths.size(); ++i) {
    lengths.push_back(prompt_lengths[i] + response_lengths[i]);
    tokens += lengths.back();
    responses += response_lengths[i];
  }
  const int64_t B = batch.size(), width = batch.at(ppo::field::input_ids).size(1);
  const double log_prob_flops = forward_flops(c.model, vocab, lengths, responses);
  const double value_flops = forward_flops(c.model, vocab, lengths, 0);
  const std::map<std::string, double> flops = {{"old_log_prob", log_prob_flops},
                                               {"ref", log_prob_flops},
                                               {"values", value_flops},
                                               {"update_critic", 3 * value_flops},
                                               {"update_actor", 3 * log_prob_flops}};
  const int64_t micro = c.actor.ppo_micro_batch_size_per_gpu;
  const int64_t micro_count = (B + micro - 1) / micro;
  const double gemm = gemm_rate(c.model, vocab, tokens / micro_count, responses / micro_count);
  nlohmann::json out;
  out["impl"] = "ppo.cpp";
  out["torch"] = TORCH_VERSION;
  out["threads"] = a.threads;
  out["lengths"] = a.lengths;
  out["rows"] = B;
  out["tokens"] = tokens;
  out["response_tokens"] = responses;
  out["padded_tokens"] = B * width;
  out["gemm_gflops"] = gemm / 1e9;
  for (const std::string mode : {"padded", "packed"}) {
    double total = 0;
    for (const std::string& phase : phases) {
      const double s = median(times[mode][phase]);
      total += s;
      out[mode][phase] = s;
      out[mode + "_gemm_fraction"][phase] = flops.at(phase) / s / gemm;
    }
    out[mode]["training_s"] = total;
  }
  for (const std::string& phase : phases)
    out["speedup"][phase] = out["padded"][phase].get<double>() / out["packed"][phase].get<double>();
  out["speedup"]["training_s"] = out["padded"]["training_s"].get<double>() / out["packed"]["training_s"].get<double>();
  std::printf("%s\n", out.dump().c_str());
  return 0;
} catch (const ppo::UsageError& e) {
  std::fprintf(stderr, "error: %s\n", e.what());
  return 2;
}
