// Generation: the checks of its parameters, left-padded prompts, the recompute decoder without a KV cache and
// generate_responses around both decoders (the continuous-batching one is in continuous_decoder.cpp), then the
// log-probs of given responses.
#include "rollout/rollout.h"

#include <algorithm>
#include <string>
#include <tuple>

#include "common/error.h"
#include "decode/continuous_decoder.h"

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
  usage_check(p.check_interval >= 1, "rollout.check_interval must be >= 1, got " + std::to_string(p.check_interval));
  usage_check(p.turns == nullptr || p.use_cache, "rollout: multi-turn generation needs the KV cache");
}

}  // namespace

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

torch::Tensor uniform_table(const std::vector<uint64_t>& seeds, int64_t R, int64_t extra, torch::Device device) {
  const int64_t B = static_cast<int64_t>(seeds.size());
  auto u = torch::full({B * R + extra}, 0.5, torch::kDouble);
  double* data = u.data_ptr<double>();
  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = 0; t < R; ++t) data[b * R + t] = token_uniform(seeds[b], t);
  return u.to(device);
}

namespace {

// Without a KV cache (tests and the recompute benchmark): fixed micro-batches, the whole sequence again every step.
Generated generate_recompute(CausalLM& model, const torch::Tensor& ids, const torch::Tensor& mask,
                             const std::vector<uint64_t>& seeds, const GenerationParams& p) {
  const int64_t B = ids.size(0), R = p.max_new_tokens;
  auto uniforms = uniform_table(seeds, R, 0, ids.device()).view({B, R});
  std::vector<torch::Tensor> responses, log_probs;
  for (int64_t start = 0; start < B; start += p.micro_batch_size) {
    const int64_t n = std::min(p.micro_batch_size, B - start);
    torch::Tensor seq = ids.narrow(0, start, n), seq_mask = mask.narrow(0, start, n);
    auto running = torch::ones({n}, ids.options().dtype(torch::kBool));
    auto tokens_out = torch::full({n, R}, p.pad_id, ids.options());
    auto log_probs_out = torch::zeros({n, R}, ids.options().dtype(torch::kFloat));
    for (int64_t t = 0; t < R; ++t) {
      auto hidden = model->model->forward(seq, position_ids_from_mask(seq_mask), seq_mask, nullptr);
      auto logits = model->logits_from_hidden(hidden.select(1, hidden.size(1) - 1)).to(torch::kFloat);
      Sampled s = sample(logits, uniforms.narrow(0, start, n).select(1, t), p.temperature, p.top_k, p.top_p);
      tokens_out.select(1, t).copy_(torch::where(running, s.tokens, tokens_out.select(1, t)));
      log_probs_out.select(1, t).copy_(s.log_probs * running);
      running = running.logical_and(s.tokens.ne(p.eos_id));
      seq = torch::cat({seq, s.tokens.unsqueeze(1)}, 1);
      seq_mask = torch::cat({seq_mask, running.to(torch::kLong).unsqueeze(1)}, 1);
    }
    responses.push_back(tokens_out);
    log_probs.push_back(log_probs_out);
  }
  Generated out;  // single-turn: no masks of its own
  out.responses = torch::cat(responses, 0);
  out.log_probs = torch::cat(log_probs, 0);
  return out;
}

// 1 up to and including the first EOS of each row, 0 after: [B, R] -> [B, R] float.
torch::Tensor mask_through_eos(const torch::Tensor& responses, int64_t eos_id) {
  auto is_eos = responses.eq(eos_id).to(torch::kLong);
  auto eos_before = is_eos.cumsum(1) - is_eos;  // EOS strictly before each position
  return eos_before.eq(0).to(torch::kFloat);
}

}  // namespace

bool logits_finite(CausalLM& model, const std::vector<int64_t>& prompt, torch::Device device) {
  torch::NoGradGuard no_grad;
  EvalMode eval(*model);
  const torch::Tensor ids = torch::tensor(prompt, torch::kLong).unsqueeze(0).to(device);  // [1, T]
  const torch::Tensor positions = torch::arange(ids.size(1), ids.options()).unsqueeze(0);
  return torch::isfinite(model->forward(ids, positions)).all().item<bool>();
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
  EvalMode eval(*model);  // LoRA's dropout belongs to the training forward only
  const auto device = model->model->embed_tokens->weight.device();
  LeftPadded all = left_pad(prompts, P, p.pad_id);
  all.ids = all.ids.to(device);
  all.mask = all.mask.to(device);
  Generated generated = p.use_cache ? generate_continuous(model, all.ids, all.mask, seeds, p)
                                    : generate_recompute(model, all.ids, all.mask, seeds, p);
  RolloutOutput out;
  out.prompts = all.ids;
  out.responses = generated.responses;
  const bool multi_turn = generated.response_mask.defined();
  out.response_mask = multi_turn ? generated.response_mask.to(device) : mask_through_eos(out.responses, p.eos_id);
  out.log_probs = generated.log_probs * out.response_mask;
  out.input_ids = torch::cat({out.prompts, out.responses}, 1);
  const torch::Tensor response_attention =
      multi_turn ? generated.response_attention.to(device) : out.response_mask.to(torch::kLong);
  out.attention_mask = torch::cat({all.mask, response_attention}, 1);
  out.position_ids = position_ids_from_mask(out.attention_mask);
  out.routed_experts = generated.routed_experts;
  return out;
}

TokenLogProbs join_token_log_probs(const std::vector<TokenLogProbs>& parts,
                                   const std::function<torch::Tensor(const std::vector<torch::Tensor>&)>& join) {
  TokenLogProbs out;
  for (torch::Tensor TokenLogProbs::*f : kTokenLogProbFields) {
    if (parts.empty() || !(parts[0].*f).defined()) continue;
    std::vector<torch::Tensor> pieces;
    for (const TokenLogProbs& part : parts) pieces.push_back(part.*f);
    out.*f = join(pieces);
  }
  return out;
}

namespace {

// `options`' results from the logits [..., V] of the positions whose response tokens are `labels` [...] (at_ids: the
// options' tokens of these positions [..., K]). The log-probs of the labels and of at_ids come from one gather.
TokenLogProbs token_log_probs(const torch::Tensor& logits, const torch::Tensor& labels, const LogProbOptions& options,
                              const torch::Tensor& at_ids) {
  TokenLogProbs out;
  if (at_ids.defined()) {
    const torch::Tensor both = log_probs_at(logits, torch::cat({labels.unsqueeze(-1), at_ids}, -1));
    out.log_probs = both.select(-1, 0);
    out.at_log_probs = both.narrow(-1, 1, at_ids.size(-1));
  } else {
    out.log_probs = log_probs_from_logits(logits, labels);
  }
  if (options.entropy) out.entropy = entropy_from_logits(logits);
  if (options.argmax) out.argmax = logits.detach().argmax(-1);
  if (options.topk > 0)
    std::tie(out.top_log_probs, out.top_ids) = top_log_probs(logits.detach(), options.topk, options.topk_vocab);
  return out;
}

}  // namespace

TokenLogProbs compute_log_probs(CausalLM& model, const torch::Tensor& input_ids, const torch::Tensor& attention_mask,
                                const torch::Tensor& position_ids, int64_t response_length, double temperature,
                                int64_t micro_batch_size, const LogProbOptions& options) {
  const int64_t B = input_ids.size(0), T = input_ids.size(1), R = response_length;
  TORCH_CHECK(R >= 1 && R < T, "compute_log_probs: response_length ", R, " must be in [1, ", T - 1, "]");
  const int64_t step = micro_batch_size > 0 ? micro_batch_size : std::max<int64_t>(B, 1);
  const double scale = temperature > 0 ? temperature : 1.0;
  std::vector<TokenLogProbs> parts;
  for (int64_t start = 0; start < B; start += step) {
    const int64_t n = std::min(step, B - start);
    auto ids = input_ids.narrow(0, start, n);
    auto hidden = model->model->forward(ids, position_ids.narrow(0, start, n), attention_mask.narrow(0, start, n));
    // Position T - R - 1 + j predicts response token j.
    auto logits = model->logits_from_hidden(hidden.narrow(1, T - R - 1, R)).to(torch::kFloat) / scale;  // [n, R, V]
    parts.push_back(token_log_probs(logits, ids.narrow(1, T - R, R), options,
                                    options.at_ids.defined() ? options.at_ids.narrow(0, start, n) : torch::Tensor()));
  }
  return join_token_log_probs(parts, [](const std::vector<torch::Tensor>& pieces) { return torch::cat(pieces, 0); });
}

TokenLogProbs compute_log_probs_packed(CausalLM& model, const PackedSequences& packed, double temperature,
                                       const LogProbOptions& options) {
  const double scale = temperature > 0 ? temperature : 1.0;
  auto hidden = model->model->forward_packed(packed.input_ids, packed.position_ids, packed.lengths);  // [1, N, D]
  auto logits = model->logits_from_hidden(hidden[0].index_select(0, packed.predictors)).to(torch::kFloat) / scale;
  TokenLogProbs out = token_log_probs(logits.unsqueeze(0), packed.labels.unsqueeze(0), options,
                                      options.at_ids.defined() ? options.at_ids.unsqueeze(0) : torch::Tensor());
  for (torch::Tensor TokenLogProbs::*f : kTokenLogProbFields)
    if ((out.*f).defined()) out.*f = unpack_responses(packed, (out.*f)[0]);  // [1, M, ...] -> [B, R, ...]
  return out;
}

}  // namespace ppo
