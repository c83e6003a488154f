#include "rollout/rollout.h"

#include <string>

#include "common/error.h"
#include "common/random.h"

namespace ppo {

namespace {

void validate_generation_params(const GenerationParams& p, size_t num_prompts, size_t num_seeds) {
  usage_check(num_prompts == num_seeds, "rollout: " + std::to_string(num_prompts) + " prompts but " +
                                            std::to_string(num_seeds) + " seeds (one seed per row)");
  usage_check(p.max_new_tokens >= 1,
              "data.max_response_length (max_new_tokens) must be >= 1, got " + std::to_string(p.max_new_tokens));
  usage_check(p.temperature >= 0, "rollout.temperature must be >= 0, got " + std::to_string(p.temperature));
  usage_check(p.top_p > 0 && p.top_p <= 1, "rollout.top_p must be in (0, 1], got " + std::to_string(p.top_p));
  usage_check(p.micro_batch_size >= 1,
              "rollout.micro_batch_size must be >= 1, got " + std::to_string(p.micro_batch_size));
}

struct LeftPadded {
  torch::Tensor ids;   // [B, P]
  torch::Tensor mask;  // [B, P] int64
};

LeftPadded left_pad(const std::vector<std::vector<int64_t>>& prompts, int64_t width, int64_t pad_id) {
  const int64_t B = static_cast<int64_t>(prompts.size());
  auto ids = torch::full({B, width}, pad_id, torch::kLong);
  auto mask = torch::zeros({B, width}, torch::kLong);
  auto ids_a = ids.accessor<int64_t, 2>();
  auto mask_a = mask.accessor<int64_t, 2>();
  for (int64_t b = 0; b < B; ++b) {
    const auto& prompt = prompts[b];
    const int64_t offset = width - static_cast<int64_t>(prompt.size());
    for (size_t j = 0; j < prompt.size(); ++j) {
      ids_a[b][offset + j] = prompt[j];
      mask_a[b][offset + j] = 1;
    }
  }
  return {ids, mask};
}

torch::Tensor row_uniforms(const std::vector<uint64_t>& seeds, int64_t t, torch::Device device) {
  std::vector<double> u(seeds.size());
  for (size_t i = 0; i < seeds.size(); ++i) u[i] = token_uniform(seeds[i], t);
  return torch::tensor(u, torch::kDouble).to(device);
}

// log softmax(logits / temperature)[tokens]: [b, V], [b] -> [b]. Same operations as compute_log_probs.
torch::Tensor sampled_log_probs(const torch::Tensor& logits, const torch::Tensor& tokens, double temperature) {
  auto scaled = logits.to(torch::kFloat) / (temperature > 0 ? temperature : 1.0);
  return log_probs_from_logits(scaled.unsqueeze(1), tokens.unsqueeze(1)).squeeze(1);
}

struct MicroBatchResult {
  torch::Tensor responses;  // [b, R]
  torch::Tensor log_probs;  // [b, R]
};

// Decodes one micro-batch. Rows that sampled EOS leave the batch (their cache rows are dropped with
// KVCache::select); `active` maps the remaining rows to their row in the micro-batch.
MicroBatchResult generate_micro_batch(CausalLM& model, const LeftPadded& prompt, std::vector<uint64_t> seeds,
                                      const GenerationParams& p) {
  const int64_t b = prompt.ids.size(0), R = p.max_new_tokens;
  const auto device = prompt.ids.device();
  auto long_opts = torch::TensorOptions().dtype(torch::kLong).device(device);
  MicroBatchResult out{torch::full({b, R}, p.pad_id, long_opts), torch::zeros({b, R}, long_opts.dtype(torch::kFloat))};
  torch::Tensor ids = prompt.ids, mask = prompt.mask;  // [b_active, P + t]
  torch::Tensor active = torch::arange(b, long_opts);  // [b_active]
  KVCache cache;
  cache.capacity_hint = prompt.ids.size(1) + R;
  for (int64_t t = 0; t < R; ++t) {
    auto positions = position_ids_from_mask(mask);  // [b_active, P + t]
    torch::Tensor hidden;
    if (p.use_cache) {
      const int64_t fed = t == 0 ? ids.size(1) : 1;  // prefill, then one token per step
      hidden = model->model->forward(ids.narrow(1, ids.size(1) - fed, fed),
                                     positions.narrow(1, positions.size(1) - fed, fed), mask, &cache);
    } else {
      hidden = model->model->forward(ids, positions, mask, nullptr);
    }
    auto logits = model->logits_from_hidden(hidden.select(1, hidden.size(1) - 1)).to(torch::kFloat);  // [b_a, V]
    auto tokens = sample_tokens(logits, row_uniforms(seeds, t, device), p.temperature, p.top_k, p.top_p);
    out.responses.index_put_({active, t}, tokens);
    out.log_probs.index_put_({active, t}, sampled_log_probs(logits, tokens, p.temperature));
    if (t + 1 == R) break;
    auto running = tokens.ne(p.eos_id);  // [b_active] bool
    ids = torch::cat({ids, tokens.unsqueeze(1)}, 1);
    mask = torch::cat({mask, torch::ones({mask.size(0), 1}, long_opts)}, 1);
    const int64_t still = running.sum().item<int64_t>();
    if (still == 0) break;
    if (still < active.size(0)) {                // drop finished rows
      auto keep = running.nonzero().squeeze(1);  // [b_still]
      auto keep_cpu = keep.cpu();
      std::vector<uint64_t> kept_seeds;
      for (int64_t i = 0; i < keep_cpu.size(0); ++i) kept_seeds.push_back(seeds[keep_cpu[i].item<int64_t>()]);
      seeds = kept_seeds;
      ids = ids.index_select(0, keep);
      mask = mask.index_select(0, keep);
      active = active.index_select(0, keep);
      if (p.use_cache) cache.select(keep);
    }
  }
  return out;
}

// 1 up to and including the first EOS of each row, 0 after: [B, R] -> [B, R] float.
torch::Tensor mask_through_eos(const torch::Tensor& responses, int64_t eos_id) {
  auto is_eos = responses.eq(eos_id).to(torch::kLong);
  auto eos_before = is_eos.cumsum(1) - is_eos;  // EOS strictly before each position
  return eos_before.eq(0).to(torch::kFloat);
}

}  // namespace

uint64_t sample_seed(uint64_t seed, int64_t step, int64_t prompt_index, int64_t sample_index) {
  uint64_t h = splitmix64(seed);
  h = splitmix64(h ^ static_cast<uint64_t>(step));
  h = splitmix64(h ^ static_cast<uint64_t>(prompt_index));
  return splitmix64(h ^ static_cast<uint64_t>(sample_index));
}

double token_uniform(uint64_t seed, int64_t t) {
  const uint64_t h = splitmix64(splitmix64(seed) ^ static_cast<uint64_t>(t));
  return static_cast<double>(h >> 11) * 0x1.0p-53;
}

torch::Tensor position_ids_from_mask(const torch::Tensor& attention_mask) {
  return (attention_mask.to(torch::kLong).cumsum(1) - 1).clamp_min(0);
}

SortedDistribution sampling_distribution(const torch::Tensor& logits, double temperature, int64_t top_k, double top_p) {
  const int64_t V = logits.size(-1);
  auto probs = torch::softmax(logits.to(torch::kDouble) / temperature, -1);  // [B, V]
  torch::Tensor sorted, indices;
  std::tie(sorted, indices) = torch::sort(probs, /*stable=*/true, /*dim=*/-1, /*descending=*/true);
  if (top_k > 0 && top_k < V) sorted.narrow(-1, top_k, V - top_k).zero_();
  if (top_p < 1.0) {
    auto renormed = sorted / sorted.sum(-1, /*keepdim=*/true);
    auto mass_before = renormed.cumsum(-1) - renormed;  // exclusive prefix sum
    auto drop = mass_before.ge(top_p);
    drop.narrow(-1, 0, 1).fill_(false);  // the most likely token always stays
    sorted = sorted.masked_fill(drop, 0.0);
  }
  return {sorted / sorted.sum(-1, /*keepdim=*/true), indices};
}

torch::Tensor sample_tokens(const torch::Tensor& logits, const torch::Tensor& uniforms, double temperature,
                            int64_t top_k, double top_p) {
  if (temperature <= 0) return logits.argmax(-1);
  auto dist = sampling_distribution(logits, temperature, top_k, top_p);
  auto cdf = dist.probs.cumsum(-1);                                                             // [B, V]
  auto target = uniforms.to(cdf.options()).unsqueeze(1) * cdf.narrow(-1, cdf.size(-1) - 1, 1);  // [B, 1]
  auto kept = dist.probs.gt(0).sum(-1, /*keepdim=*/true);                                       // [B, 1], >= 1
  auto pick = cdf.le(target).sum(-1, /*keepdim=*/true);  // first index with cdf > target
  pick = torch::min(pick, kept - 1);                     // rounding at the top end stays inside the kept set
  return dist.indices.gather(-1, pick).squeeze(-1);
}

torch::Tensor log_probs_from_logits(const torch::Tensor& logits, const torch::Tensor& labels) {
  auto x = logits.to(torch::kFloat);                             // [B, T, V]
  auto picked = x.gather(-1, labels.unsqueeze(-1)).squeeze(-1);  // [B, T]
  return picked - torch::logsumexp(x, -1);                       // [B, T]
}

torch::Tensor entropy_from_logits(const torch::Tensor& logits) {
  auto x = logits.to(torch::kFloat);  // [B, T, V]
  return torch::logsumexp(x, -1) - (torch::softmax(x, -1) * x).sum(-1);
}

RolloutOutput generate_responses(CausalLM& model, const std::vector<std::vector<int64_t>>& prompts,
                                 const std::vector<uint64_t>& seeds, const GenerationParams& p) {
  validate_generation_params(p, prompts.size(), seeds.size());
  int64_t longest = 0;
  for (size_t i = 0; i < prompts.size(); ++i) {
    usage_check(!prompts[i].empty(), "rollout: prompt " + std::to_string(i) + " is empty");
    longest = std::max(longest, static_cast<int64_t>(prompts[i].size()));
  }
  const int64_t P = p.prompt_width > 0 ? p.prompt_width : longest;
  usage_check(longest <= P, "data.max_prompt_length: a prompt has " + std::to_string(longest) +
                                " tokens, more than the prompt width " + std::to_string(P));
  const int64_t max_positions = model->model->config.max_position_embeddings;
  usage_check(P + p.max_new_tokens <= max_positions,
              "model.max_position_embeddings (" + std::to_string(max_positions) + ") < prompt width (" +
                  std::to_string(P) + ") + max_new_tokens (" + std::to_string(p.max_new_tokens) + ")");
  torch::NoGradGuard no_grad;
  const auto device = model->model->embed_tokens->weight.device();
  LeftPadded all = left_pad(prompts, P, p.pad_id);
  all.ids = all.ids.to(device);
  all.mask = all.mask.to(device);
  const int64_t B = all.ids.size(0);
  std::vector<torch::Tensor> responses, log_probs;
  for (int64_t start = 0; start < B; start += p.micro_batch_size) {
    const int64_t n = std::min(p.micro_batch_size, B - start);
    LeftPadded chunk{all.ids.narrow(0, start, n), all.mask.narrow(0, start, n)};
    std::vector<uint64_t> chunk_seeds(seeds.begin() + start, seeds.begin() + start + n);
    auto result = generate_micro_batch(model, chunk, chunk_seeds, p);
    responses.push_back(result.responses);
    log_probs.push_back(result.log_probs);
  }
  RolloutOutput out;
  out.prompts = all.ids;
  out.responses = torch::cat(responses, 0);
  out.response_mask = mask_through_eos(out.responses, p.eos_id);
  out.log_probs = torch::cat(log_probs, 0) * out.response_mask;
  out.input_ids = torch::cat({out.prompts, out.responses}, 1);
  out.attention_mask = torch::cat({all.mask, out.response_mask.to(torch::kLong)}, 1);
  out.position_ids = position_ids_from_mask(out.attention_mask);
  return out;
}

TokenLogProbs compute_log_probs(CausalLM& model, const torch::Tensor& input_ids, const torch::Tensor& attention_mask,
                                const torch::Tensor& position_ids, int64_t response_length, double temperature,
                                int64_t micro_batch_size) {
  const int64_t B = input_ids.size(0), T = input_ids.size(1), R = response_length;
  TORCH_CHECK(R >= 1 && R < T, "compute_log_probs: response_length ", R, " must be in [1, ", T - 1, "]");
  const int64_t step = micro_batch_size > 0 ? micro_batch_size : std::max<int64_t>(B, 1);
  const double scale = temperature > 0 ? temperature : 1.0;
  std::vector<torch::Tensor> log_probs, entropies;
  for (int64_t start = 0; start < B; start += step) {
    const int64_t n = std::min(step, B - start);
    auto ids = input_ids.narrow(0, start, n);
    auto hidden = model->model->forward(ids, position_ids.narrow(0, start, n), attention_mask.narrow(0, start, n));
    // Position T - R - 1 + j predicts response token j.
    auto logits = model->logits_from_hidden(hidden.narrow(1, T - R - 1, R)).to(torch::kFloat) / scale;  // [n, R, V]
    log_probs.push_back(log_probs_from_logits(logits, ids.narrow(1, T - R, R)));
    entropies.push_back(entropy_from_logits(logits));
  }
  return {torch::cat(log_probs, 0), torch::cat(entropies, 0)};
}

}  // namespace ppo
