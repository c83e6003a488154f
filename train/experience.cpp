// See train/experience.h.
#include "train/experience.h"

#include <optional>

#include "common/error.h"
#include "common/utf8.h"
#include "parallel/dispatch.h"
#include "rollout/rollout.h"

namespace ppo {

namespace {

// `wave` lowered so that its KV cache holds at most rollout.max_kv_tokens positions (when set), and at least 1.
int64_t within_kv_tokens(const Config& config, int64_t prompt_width, int64_t wave) {
  const int64_t kv_tokens = config.rollout.max_kv_tokens;
  if (kv_tokens > 0)
    wave = std::min(wave, kv_tokens / decode_cache_width(prompt_width, config.data.max_response_length,
                                                         config.rollout.multi_turn.enable));
  return std::max<int64_t>(1, wave);
}

}  // namespace

int64_t generation_wave_size(const Config& config, int64_t prompt_width) {
  const RolloutConfig& r = config.rollout;
  return within_kv_tokens(config, prompt_width, r.max_num_seqs > 0 ? r.max_num_seqs : r.micro_batch_size);
}

int64_t validation_wave_size(const Config& config, int64_t prompt_width, int64_t rows) {
  const int64_t max_num_seqs = config.rollout.max_num_seqs;
  return within_kv_tokens(config, prompt_width, max_num_seqs > 0 ? std::min(rows, max_num_seqs) : rows);
}

namespace {

// The generation parameters of a rollout: the sampling's, the wave size of training or validation, the tokenizer's
// pad and EOS.
GenerationParams generation_params(const Config& config, const Tokenizer& tokenizer, const SamplingParams& sampling,
                                   const GenerationLayout& layout, int64_t prompt_width, int64_t num_rows) {
  GenerationParams p;
  p.max_new_tokens = config.data.max_response_length;
  p.temperature = sampling.temperature;
  p.top_k = sampling.top_k;
  p.top_p = sampling.top_p;
  if (layout.validation) {
    p.micro_batch_size = validation_wave_size(config, prompt_width, num_rows);
    p.prefill_micro_batch_size = config.rollout.micro_batch_size;
    p.on_progress = layout.on_progress;
  } else {
    p.micro_batch_size = generation_wave_size(config, prompt_width);
  }
  p.product_rows = config.rollout.micro_batch_size;  // the waves depend on a rank's prompts and rows
  p.check_interval = config.rollout.check_interval;
  p.cuda_graphs = config.rollout.cuda_graphs;
  p.pad_id = tokenizer.pad_id();
  p.eos_id = tokenizer.eos_id();
  p.prompt_width = prompt_width;
  return p;
}

// The multi-turn fields: each trajectory's turns, answered calls and environment reward, and its appended tokens.
void set_tool_fields(Batch& batch, const ToolTurns& turns, const RolloutOutput& out, const torch::Tensor& mask) {
  std::vector<float> turn_count, calls, reward;
  for (const TrajectoryTools& t : turns.stats()) {
    turn_count.push_back(static_cast<float>(t.turns));
    calls.push_back(static_cast<float>(t.calls));
    reward.push_back(static_cast<float>(t.reward));
  }
  batch.set(field::tool_turns, torch::tensor(turn_count) * mask);
  batch.set(field::tool_calls, torch::tensor(calls) * mask);
  batch.set(field::tool_reward, torch::tensor(reward) * mask);
  const int64_t R = out.responses.size(1);
  batch.set(field::tool_tokens,
            (out.attention_mask.narrow(1, -R, R).sum(1).to(torch::kFloat) - out.response_mask.sum(1)) * mask);
}

}  // namespace

Batch rollout_batch(CausalLM& model, const Tokenizer& tokenizer, const RankPrompts& prompts,
                    const SamplingParams& sampling, const Config& config, const GenerationLayout& layout) {
  std::vector<std::vector<int64_t>> rows;
  std::vector<uint64_t> seeds;
  std::vector<int64_t> group, position, difficulty;
  std::vector<float> sample_mask;
  for (size_t i = 0; i < prompts.ids.size(); ++i) {
    for (int64_t j = 0; j < sampling.n; ++j) {
      rows.push_back(prompts.ids[i]);
      seeds.push_back(
          sample_seed(static_cast<uint64_t>(config.trainer.seed), sampling.seed_index, prompts.positions[i], j));
      group.push_back(prompts.is_pad[i] ? -1 - prompts.positions[i] : prompts.positions[i]);
      position.push_back(prompts.positions[i]);
      difficulty.push_back(prompts.samples[i].difficulty);
      sample_mask.push_back(prompts.is_pad[i] ? 0.f : 1.f);
    }
  }
  GenerationParams p =
      generation_params(config, tokenizer, sampling, layout, prompts.prompt_width, static_cast<int64_t>(rows.size()));
  const MultiTurnConfig& multi_turn = config.rollout.multi_turn;
  std::optional<ChatTemplate> chat;
  std::optional<ToolTurns> turns;
  if (multi_turn.enable) {
    TORCH_CHECK(layout.environment != nullptr, "rollout_batch: rollout.multi_turn needs the environment program");
    chat = prompt_chat_template(config, tokenizer, any_chat_prompt(prompts.samples));
    std::vector<Trajectory> trajectories;
    for (size_t i = 0; i < prompts.ids.size(); ++i)
      for (int64_t j = 0; j < sampling.n; ++j)
        trajectories.push_back({&prompts.samples[i], chat_for(prompts.samples[i], config, chat),
                                (layout.validation ? "val-" : "") + std::to_string(sampling.seed_index) + "-" +
                                    std::to_string(prompts.positions[i]) + "-" + std::to_string(j)});
    turns.emplace(*layout.environment, tokenizer, multi_turn, std::move(trajectories));
    p.turns = &*turns;
    if (!multi_turn.stop.empty()) p.stop_tokens = tokenizer.encode(multi_turn.stop);
  }
  p.record_routing = !layout.validation && config.actor.router_replay == "R3";
  RolloutOutput out = generate_responses(model, rows, seeds, p);
  for (torch::Tensor* t : {&out.prompts, &out.responses, &out.input_ids, &out.attention_mask, &out.position_ids,
                           &out.response_mask, &out.log_probs, &out.routed_experts})
    if (t->defined()) *t = t->cpu();  // the batch lives in host memory; phases move their micro-batches to the device
  Batch batch;
  torch::Tensor mask = torch::tensor(sample_mask);
  batch.set(field::prompts, out.prompts);
  batch.set(field::responses, out.responses);
  batch.set(field::input_ids, out.input_ids);
  batch.set(field::attention_mask, out.attention_mask);
  batch.set(field::position_ids, out.position_ids);
  batch.set(field::response_mask, out.response_mask * mask.unsqueeze(1));  // padding copies never reach a loss
  batch.set(field::sample_mask, mask);
  batch.set(field::rollout_log_probs, out.log_probs);
  batch.set(field::group_id, torch::tensor(group, torch::kInt64));
  batch.set(field::prompt_index, torch::tensor(position, torch::kInt64));
  batch.set(field::difficulty, torch::tensor(difficulty, torch::kInt64));
  if (out.routed_experts.defined()) batch.set(field::routed_experts, out.routed_experts);
  if (turns) set_tool_fields(batch, *turns, out, mask);
  batch.check();
  return batch;
}

std::string response_text(const Batch& batch, int64_t row, const Tokenizer& tokenizer) {
  torch::Tensor ids = batch.at(field::responses)[row].cpu();
  std::vector<int64_t> out;
  if (batch.has(field::tool_turns)) {  // a trajectory: its real tokens, tool messages included
    const int64_t R = ids.size(0);
    const torch::Tensor real = batch.at(field::attention_mask)[row].narrow(0, -R, R).to(torch::kCPU, torch::kLong);
    const torch::Tensor tokens = ids.to(torch::kLong).contiguous();
    const auto is_real = real.accessor<int64_t, 1>();
    const auto id = tokens.accessor<int64_t, 1>();
    for (int64_t t = 0; t < R; ++t)
      if (is_real[t] != 0) out.push_back(id[t]);
    if (!out.empty() && out.back() == tokenizer.eos_id()) out.pop_back();
    return utf8_lossy(tokenizer.decode(out, /*skip_special=*/false));
  }
  for (int64_t t = 0; t < ids.size(0); ++t) {
    int64_t id = ids[t].item<int64_t>();
    if (id == tokenizer.eos_id() || id == tokenizer.pad_id()) break;
    out.push_back(id);
  }
  return utf8_lossy(tokenizer.decode(out));
}

void place_scores(Batch& batch, const torch::Tensor& scores) {
  const int64_t R = batch.at(field::responses).size(1);
  // The score sits on the last sampled token (the last 1 of response_mask): GAE and the returns skip masked tokens,
  // so a score on a tool token would be lost. Without tool messages that is the response's last token.
  const torch::Tensor positions = torch::arange(1, R + 1).unsqueeze(0);
  const torch::Tensor lengths = (batch.at(field::response_mask) > 0).to(torch::kInt64).mul(positions).amax(1);  // [B]
  const torch::Tensor score = scores.to(torch::kFloat32);
  const torch::Tensor last = (lengths - 1).clamp_min(0).unsqueeze(1);      // [B, 1]
  const torch::Tensor placed = (lengths > 0).to(torch::kFloat32) * score;  // a row without a sampled token: none
  batch.set(field::scores, score);
  batch.set(field::token_scores, torch::zeros({batch.size(), R}).scatter(1, last, placed.unsqueeze(1)));
}

std::vector<RowReward> compute_rewards(Batch& batch, const RankPrompts& prompts, int64_t n, Rewarder& rewarder,
                                       const Tokenizer& tokenizer) {
  const int64_t B = batch.size();
  std::vector<RewardRequest> requests;
  std::vector<RowReward> rows;
  for (int64_t b = 0; b < B; ++b) {
    if (prompts.is_pad[b / n]) continue;
    const TaskSample& sample = prompts.samples[b / n];
    requests.push_back({&sample, prompts.texts[b / n], response_text(batch, b, tokenizer)});
    rows.push_back({b, rewarder.source_of(sample), Score{}});
  }
  const std::vector<Score> scores = rewarder.score(requests);
  torch::Tensor score = torch::zeros({B}), correct = torch::zeros({B}), has_correct = torch::zeros({B});
  torch::Tensor format_ok = torch::zeros({B});
  const bool tools = batch.has(field::tool_reward);
  for (size_t i = 0; i < rows.size(); ++i) {
    Score& s = rows[i].score = scores[i];
    const int64_t b = rows[i].row;
    if (tools) s.score += batch.at(field::tool_reward)[b].item<double>();  // the environment's rewards
    score[b] = s.score;
    correct[b] = s.correct ? 1.f : 0.f;
    has_correct[b] = s.has_correct ? 1.f : 0.f;
    format_ok[b] = s.format_ok ? 1.f : 0.f;
  }
  place_scores(batch, score);
  batch.set(field::correct, correct);
  batch.set(field::has_correct, has_correct);
  batch.set(field::format_ok, format_ok);
  return rows;
}

Batch concat_generations(const std::vector<Batch>& parts, int64_t pad_id) {
  int64_t width = 0;  // the widest prompt side
  for (const Batch& b : parts) width = std::max(width, b.at(field::prompts).size(1));
  std::vector<Batch> padded;
  for (const Batch& b : parts) {
    TORCH_CHECK(b.at(field::responses).size(1) == parts.front().at(field::responses).size(1),
                "concat_generations: the response widths differ");
    const int64_t extra = width - b.at(field::prompts).size(1);
    Batch p = b;
    if (extra > 0)
      for (const auto& [name, value] :
           std::initializer_list<std::pair<const char*, int64_t>>{{field::prompts, pad_id},
                                                                  {field::input_ids, pad_id},
                                                                  {field::attention_mask, 0},
                                                                  {field::position_ids, 0}}) {
        const torch::Tensor& t = b.at(name);
        p.set(name, torch::cat({torch::full({t.size(0), extra}, value, t.options()), t}, 1));
      }
    if (extra > 0 && b.has(field::routed_experts)) {  // [rows, P + R, MoE layers, k]: -1, no routing recorded
      const torch::Tensor& t = b.at(field::routed_experts);
      p.set(field::routed_experts,
            torch::cat({torch::full({t.size(0), extra, t.size(2), t.size(3)}, -1, t.options()), t}, 1));
    }
    padded.push_back(std::move(p));
  }
  return Batch::concat(padded);
}

Batch dispatch_groups(const Batch& global, const std::vector<int64_t>& group_rows, int64_t n, int64_t block,
                      int64_t world, int64_t rank, bool pad) {
  const int64_t groups = static_cast<int64_t>(group_rows.size());
  std::vector<int64_t> rows, ids, index;
  std::vector<float> real;
  for (int64_t p : dispatch_positions(groups, std::min(block, groups), world, rank, pad)) {
    const int64_t position = p < 0 ? -1 - p : p;
    for (int64_t j = 0; j < n; ++j) {
      rows.push_back(group_rows[position] + j);
      ids.push_back(p);  // the dispatcher's -1 - p marks a padding copy, as rollout_batch's group ids do
      index.push_back(position);
      real.push_back(p < 0 ? 0.f : 1.f);
    }
  }
  Batch out = global.select(torch::tensor(rows, torch::kInt64));
  const torch::Tensor mask = torch::tensor(real);
  out.set(field::group_id, torch::tensor(ids, torch::kInt64));
  out.set(field::prompt_index, torch::tensor(index, torch::kInt64));
  out.set(field::sample_mask, mask);
  out.set(field::response_mask, out.at(field::response_mask) * mask.unsqueeze(1));
  for (const char* name : {field::scores, field::correct, field::has_correct, field::format_ok})
    out.set(name, out.at(name) * mask);
  out.set(field::token_scores, out.at(field::token_scores) * mask.unsqueeze(1));
  return out;
}

}  // namespace ppo
