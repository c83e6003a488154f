// See train/evaluate.h.
#include "train/evaluate.h"

#include <cstdio>
#include <limits>
#include <set>

#include "train/experience.h"
#include "train/prompts.h"

namespace ppo {

ValMetrics evaluate(CausalLM& model, const std::vector<TaskSample>& samples, const Task& task,
                    const Tokenizer& tokenizer, const Config& config, Context& context) {
  Metrics m;
  const std::string prefix = "val/" + task.name();
  std::set<int64_t> difficulties;
  for (const auto& s : samples) difficulties.insert(s.difficulty);
  const int64_t batch = config.data.val_batch_size, world = context.world_size();
  SamplingParams sampling{1, config.rollout.val_temperature, config.rollout.top_k, config.rollout.top_p,
                          /*seed_index=*/-1};
  for (size_t begin = 0; begin < samples.size(); begin += batch) {
    std::vector<TaskSample> chunk(samples.begin() + begin,
                                  samples.begin() + std::min(samples.size(), begin + static_cast<size_t>(batch)));
    RankPrompts prompts =
        rank_prompts(chunk, tokenizer, config, static_cast<int64_t>(chunk.size()), world, context.rank(), /*pad=*/true);
    Batch b = generate_batch(model, tokenizer, prompts, sampling, config);
    reward_compute(b, prompts, 1, task, tokenizer);
    const torch::Tensor& real = b.at(field::sample_mask);
    // Each per-response field averaged over the real rows (".../mean") and over those of each difficulty.
    for (const auto& [key, name] : {std::pair<const char*, const char*>{field::scores, "score"},
                                    {field::correct, "acc"},
                                    {field::format_ok, "format_ok"}}) {
      const std::string metric = prefix + "/" + name + "/";
      m.add_mean(metric + "mean", (b.at(key) * real).sum().item<double>(), real.sum().item<double>());
      for (int64_t d : difficulties) {
        const torch::Tensor sel = real * (b.at(field::difficulty) == d).to(torch::kFloat32);
        m.add_mean(metric + std::to_string(d), (b.at(key) * sel).sum().item<double>(), sel.sum().item<double>());
      }
    }
  }
  return m.reduce(context);
}

void add_masked_stats(Metrics& m, const std::string& name, const torch::Tensor& values, const torch::Tensor& mask) {
  torch::Tensor v = values.to(torch::kFloat64), keep = mask.to(torch::kBool);
  m.add_mean(name + "/mean", (v * keep).sum().item<double>(), keep.sum().item<double>());
  const double inf = std::numeric_limits<double>::infinity();
  bool any = keep.any().item<bool>();
  m.add_max(name + "/max", any ? v.masked_select(keep).max().item<double>() : -inf);
  m.add_min(name + "/min", any ? v.masked_select(keep).min().item<double>() : inf);
}

void print_val_table(const ValMetrics& val, const std::vector<TaskSample>& samples, const std::string& task) {
  std::map<int64_t, int64_t> counts;
  for (const auto& s : samples) counts[s.difficulty]++;
  const std::string prefix = "val/" + task + "/";
  std::printf("%-12s %8s %8s %10s %8s\n", "difficulty", "prompts", "accuracy", "format_ok", "score");
  for (const auto& [d, n] : counts) {
    const std::string at = "/" + std::to_string(d);
    std::printf("%-12lld %8lld %8.3f %10.3f %8.3f\n", static_cast<long long>(d), static_cast<long long>(n),
                val.at(prefix + "acc" + at), val.at(prefix + "format_ok" + at), val.at(prefix + "score" + at));
  }
  std::printf("%-12s %8zu %8.3f %10.3f %8.3f\n", "all", samples.size(), val.at(prefix + "acc/mean"),
              val.at(prefix + "format_ok/mean"), val.at(prefix + "score/mean"));
}

}  // namespace ppo
