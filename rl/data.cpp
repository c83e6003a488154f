#include "rl/data.h"

#include <numeric>

#include "common/error.h"
#include "common/random.h"
#include "parallel/dispatch.h"
#include "rollout/rollout.h"

namespace ppo {

int64_t vocab_size_for(const Config& config, const Tokenizer& tokenizer) {
  return config.model.vocab_size > 0 ? config.model.vocab_size : tokenizer.vocab_size();
}

std::vector<TaskSample> load_prompts(const Config& config, const Task& task, bool train) {
  const std::string& file = train ? config.data.train_files : config.data.val_files;
  if (!file.empty()) return load_jsonl(task, file);
  const DataConfig& d = config.data;
  // Validation prompts use another seed than training ones.
  return task.generate(train ? d.train_size : d.val_size, d.min_difficulty, d.max_difficulty,
                       train ? static_cast<uint64_t>(d.seed) : hash_combine(static_cast<uint64_t>(d.seed), 0x7661));
}

std::vector<int64_t> encode_prompt(const Tokenizer& tokenizer, const TaskSample& sample, int64_t max_prompt_length) {
  std::vector<int64_t> ids;
  if (tokenizer.bos_id() >= 0) ids.push_back(tokenizer.bos_id());  // Qwen tokenizers have no BOS
  for (int64_t id : tokenizer.encode(sample.prompt)) ids.push_back(id);
  usage_check(!ids.empty(), "prompt " + std::to_string(sample.index) + " is empty and the tokenizer has no BOS");
  usage_check(static_cast<int64_t>(ids.size()) <= max_prompt_length,
              "prompt " + std::to_string(sample.index) + " has " + std::to_string(ids.size()) +
                  " tokens, more than data.max_prompt_length=" + std::to_string(max_prompt_length));
  return ids;
}

int64_t steps_per_epoch(int64_t dataset_size, int64_t batch_size) {
  return dataset_size / batch_size;
}

std::vector<int64_t> step_prompt_indices(int64_t dataset_size, int64_t batch_size, int64_t step, uint64_t seed,
                                         bool shuffle) {
  const int64_t per_epoch = steps_per_epoch(dataset_size, batch_size);
  usage_check(per_epoch >= 1, "the dataset has " + std::to_string(dataset_size) +
                                  " prompts, fewer than data.train_batch_size=" + std::to_string(batch_size));
  const int64_t epoch = step / per_epoch, offset = (step % per_epoch) * batch_size;
  std::vector<int64_t> order(dataset_size);
  if (shuffle) {
    order = seeded_permutation(dataset_size, hash_combine(seed, static_cast<uint64_t>(epoch)));
  } else {
    for (int64_t i = 0; i < dataset_size; ++i) order[i] = i;
  }
  return std::vector<int64_t>(order.begin() + offset, order.begin() + offset + batch_size);
}

RankPrompts rank_prompts(const std::vector<TaskSample>& global_samples, const Tokenizer& tokenizer,
                         const Config& config, int64_t block, int64_t world, int64_t rank, bool pad) {
  RankPrompts out;
  for (const auto& s : global_samples) {
    int64_t width = static_cast<int64_t>(encode_prompt(tokenizer, s, config.data.max_prompt_length).size());
    out.prompt_width = std::max(out.prompt_width, width);
  }
  const int64_t B = static_cast<int64_t>(global_samples.size());
  for (int64_t p : dispatch_positions(B, std::min(block, B), world, rank, pad)) {
    const bool is_pad = p < 0;
    const int64_t position = is_pad ? -1 - p : p;
    out.samples.push_back(global_samples[position]);
    out.ids.push_back(encode_prompt(tokenizer, global_samples[position], config.data.max_prompt_length));
    out.positions.push_back(position);
    out.is_pad.push_back(is_pad);
  }
  return out;
}

int64_t generation_wave_size(const Config& config, int64_t prompt_width) {
  const RolloutConfig& r = config.rollout;
  int64_t wave = r.max_num_seqs > 0 ? r.max_num_seqs : r.micro_batch_size;
  if (r.max_kv_tokens > 0)
    wave = std::min(wave, std::max<int64_t>(1, r.max_kv_tokens / (prompt_width + config.data.max_response_length)));
  return wave;
}

Batch rollout_generate(CausalLM& model, const Tokenizer& tokenizer, const RankPrompts& prompts,
                       const SamplingParams& sampling, const Config& config) {
  std::vector<std::vector<int64_t>> rows;
  std::vector<uint64_t> seeds;
  std::vector<int64_t> group, position, difficulty;
  std::vector<float> sample_mask;
  for (size_t i = 0; i < prompts.ids.size(); ++i) {
    for (int64_t j = 0; j < sampling.n; ++j) {
      rows.push_back(prompts.ids[i]);
      seeds.push_back(sample_seed(static_cast<uint64_t>(config.trainer.seed), sampling.step, prompts.positions[i], j));
      group.push_back(prompts.is_pad[i] ? -1 - prompts.positions[i] : prompts.positions[i]);
      position.push_back(prompts.positions[i]);
      difficulty.push_back(prompts.samples[i].difficulty);
      sample_mask.push_back(prompts.is_pad[i] ? 0.f : 1.f);
    }
  }
  GenerationParams p;
  p.max_new_tokens = config.data.max_response_length;
  p.temperature = sampling.temperature;
  p.top_k = sampling.top_k;
  p.top_p = sampling.top_p;
  p.micro_batch_size = generation_wave_size(config, prompts.prompt_width);
  p.pad_id = tokenizer.pad_id();
  p.eos_id = tokenizer.eos_id();
  p.prompt_width = prompts.prompt_width;
  RolloutOutput out = generate(model, rows, seeds, p);
  for (torch::Tensor* t :
       {&out.prompts, &out.responses, &out.input_ids, &out.attention_mask, &out.position_ids, &out.response_mask})
    *t = t->cpu();  // the batch lives in host memory; phases move their micro-batches to the device
  Batch batch;
  torch::Tensor mask = torch::tensor(sample_mask);
  batch.set("prompts", out.prompts);
  batch.set("responses", out.responses);
  batch.set("input_ids", out.input_ids);
  batch.set("attention_mask", out.attention_mask);
  batch.set("position_ids", out.position_ids);
  batch.set("response_mask", out.response_mask * mask.unsqueeze(1));  // padding copies never reach a loss
  batch.set("sample_mask", mask);
  batch.set("group_id", torch::tensor(group, torch::kInt64));
  batch.set("prompt_index", torch::tensor(position, torch::kInt64));
  batch.set("difficulty", torch::tensor(difficulty, torch::kInt64));
  batch.check();
  return batch;
}

std::string response_text(const Batch& batch, int64_t row, const Tokenizer& tokenizer) {
  torch::Tensor ids = batch.at("responses")[row].cpu();
  std::vector<int64_t> out;
  for (int64_t t = 0; t < ids.size(0); ++t) {
    int64_t id = ids[t].item<int64_t>();
    if (id == tokenizer.eos_id() || id == tokenizer.pad_id()) break;
    out.push_back(id);
  }
  return tokenizer.decode(out);
}

void reward_compute(Batch& batch, const RankPrompts& prompts, int64_t n, const Task& task, const Tokenizer& tokenizer) {
  const int64_t B = batch.size(), R = batch.at("responses").size(1);
  torch::Tensor scores = torch::zeros({B}), correct = torch::zeros({B});
  torch::Tensor token_scores = torch::zeros({B, R});
  torch::Tensor lengths = batch.at("response_mask").sum(1).to(torch::kInt64);
  for (int64_t b = 0; b < B; ++b) {
    if (prompts.is_pad[b / n]) continue;
    Score s = task.score(prompts.samples[b / n], response_text(batch, b, tokenizer));
    scores[b] = s.score;
    correct[b] = s.correct ? 1.f : 0.f;
    int64_t last = lengths[b].item<int64_t>() - 1;
    if (last >= 0) token_scores[b][last] = s.score;
  }
  batch.set("scores", scores);
  batch.set("correct", correct);
  batch.set("token_scores", token_scores);
}

namespace {

// Every rank's rows, rank 0's first (all ranks hold batches of the same shapes).
Batch all_gather_rows(const Batch& local, Context& context) {
  const int64_t world = context.world_size(), B = local.size();
  Batch global;
  for (const auto& [name, t] : local.fields) {
    std::vector<int64_t> shape = t.sizes().vec();
    shape[0] = world * B;
    torch::Tensor all = torch::zeros(shape, t.options());
    all.narrow(0, context.rank() * B, B).copy_(t);
    context.all_reduce(all, ReduceOp::sum);  // adding zeros is exact
    global.fields[name] = all;
  }
  return global;
}

}  // namespace

Batch balance_batch(const Batch& local, int64_t block_rows, int64_t n, Context& context, Metrics& metrics) {
  const int64_t world = context.world_size(), B = local.size();
  TORCH_CHECK(block_rows >= n && block_rows % n == 0 && B % block_rows == 0,
              "balance_batch: rows per block must be whole prompt groups");
  Batch global = all_gather_rows(local, context);
  torch::Tensor row_tokens = global.at("attention_mask").sum(1).to(torch::kInt64);
  const int64_t groups_per_block = block_rows / n;
  auto group_tokens = [&](int64_t first_row) { return row_tokens.narrow(0, first_row, n).sum().item<int64_t>(); };
  std::vector<int64_t> before(world, 0), after(world, 0);
  std::vector<std::vector<int64_t>> rows(world);
  for (int64_t block = 0; block < B / block_rows; ++block) {
    struct Group {
      int64_t tokens, first_row;
    };
    std::vector<Group> groups;
    for (int64_t q = 0; q < world; ++q)
      for (int64_t j = 0; j < groups_per_block; ++j) {
        const int64_t first = q * B + block * block_rows + j * n;
        groups.push_back({group_tokens(first), first});
        before[q] += groups.back().tokens;
      }
    std::stable_sort(groups.begin(), groups.end(), [](const Group& a, const Group& b) { return a.tokens > b.tokens; });
    std::vector<int64_t> taken(world, 0);
    for (const Group& g : groups) {
      int64_t best = -1;
      for (int64_t q = 0; q < world; ++q)
        if (taken[q] < groups_per_block && (best < 0 || after[q] < after[best])) best = q;
      taken[best] += 1;
      after[best] += g.tokens;
      for (int64_t i = 0; i < n; ++i) rows[best].push_back(g.first_row + i);
    }
  }
  auto imbalance = [world](const std::vector<int64_t>& load) {
    const double total = static_cast<double>(std::accumulate(load.begin(), load.end(), int64_t{0}));
    return total > 0 ? static_cast<double>(*std::max_element(load.begin(), load.end())) * world / total : 1.0;
  };
  metrics.set("perf/rank_token_imbalance_before", imbalance(before));
  if (imbalance(after) >= imbalance(before)) {  // greedy is not optimal: never do worse than the dispatcher did
    metrics.set("perf/rank_token_imbalance_after", imbalance(before));
    return local;
  }
  metrics.set("perf/rank_token_imbalance_after", imbalance(after));
  return global.select(torch::tensor(rows[context.rank()], torch::kInt64));
}

}  // namespace ppo
