// See train/evaluate.h.
#include "train/evaluate.h"

#include <cstdio>
#include <limits>
#include <set>

#include "common/error.h"
#include "train/experience.h"
#include "train/prompts.h"

namespace ppo {

ValMetrics evaluate(CausalLM& model, const std::vector<TaskSample>& samples, const Task& task,
                    const Tokenizer& tokenizer, const Config& config, Context& context, int64_t samples_per_prompt) {
  Metrics m;
  const std::string prefix = "val/" + task.name();
  std::set<int64_t> difficulties;
  for (const auto& s : samples) difficulties.insert(s.difficulty);
  const int64_t batch = config.data.val_batch_size, world = context.world_size(), k = samples_per_prompt;
  usage_check(k >= 1, "samples per prompt must be at least 1, got " + std::to_string(k));
  const double temperature =
      k > 1 && config.rollout.val_temperature <= 0 ? config.rollout.temperature : config.rollout.val_temperature;
  usage_check(k == 1 || temperature > 0,
              "pass@" + std::to_string(k) + " needs sampling: set rollout.val_temperature or rollout.temperature > 0");
  SamplingParams sampling{k, temperature, config.rollout.top_k, config.rollout.top_p, /*seed_index=*/-1};
  for (size_t begin = 0; begin < samples.size(); begin += batch) {
    std::vector<TaskSample> chunk(samples.begin() + begin,
                                  samples.begin() + std::min(samples.size(), begin + static_cast<size_t>(batch)));
    RankPrompts prompts =
        rank_prompts(chunk, tokenizer, config, static_cast<int64_t>(chunk.size()), world, context.rank(), /*pad=*/true);
    Batch b = generate_batch(model, tokenizer, prompts, sampling, config);
    reward_compute(b, prompts, k, task, tokenizer);
    const torch::Tensor& real = b.at(field::sample_mask);
    if (k > 1) {  // rows are prompt-major: prompt i's samples are rows i*k .. i*k + k-1
      const torch::Tensor correct = b.at(field::correct).view({-1, k}).to(torch::kFloat64);
      const torch::Tensor prompt_real = real.view({-1, k}).select(1, 0).to(torch::kFloat64);
      const torch::Tensor prompt_difficulty = b.at(field::difficulty).view({-1, k}).select(1, 0);
      const torch::Tensor pass1 = correct.mean(1), pass_k = (correct.sum(1) > 0).to(torch::kFloat64);
      for (const auto& [values, name] :
           {std::pair<torch::Tensor, std::string>{pass1, "pass@1"}, {pass_k, "pass@" + std::to_string(k)}}) {
        const std::string metric = prefix + "/" + name + "/";
        m.add_mean(metric + "mean", (values * prompt_real).sum().item<double>(), prompt_real.sum().item<double>());
        for (int64_t d : difficulties) {
          const torch::Tensor sel = prompt_real * (prompt_difficulty == d).to(torch::kFloat64);
          m.add_mean(metric + std::to_string(d), (values * sel).sum().item<double>(), sel.sum().item<double>());
        }
      }
    }
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

namespace {
std::map<int64_t, int64_t> count_by_difficulty(const std::vector<TaskSample>& samples) {
  std::map<int64_t, int64_t> counts;
  for (const auto& s : samples) counts[s.difficulty]++;
  return counts;
}
}  // namespace

void print_val_table(const ValMetrics& val, const std::vector<TaskSample>& samples, const std::string& task,
                     int64_t samples_per_prompt) {
  const std::map<int64_t, int64_t> counts = count_by_difficulty(samples);
  const std::string prefix = "val/" + task + "/";
  if (samples_per_prompt > 1) {
    const std::string pass_k = "pass@" + std::to_string(samples_per_prompt);
    std::printf("%-12s %8s %8s %8s %10s %8s\n", "difficulty", "prompts", "pass@1", pass_k.c_str(), "format_ok",
                "score");
    auto row = [&](const std::string& label, int64_t n, const std::string& suffix) {
      std::printf("%-12s %8lld %8.3f %8.3f %10.3f %8.3f\n", label.c_str(), static_cast<long long>(n),
                  val.at(prefix + "pass@1/" + suffix), val.at(prefix + pass_k + "/" + suffix),
                  val.at(prefix + "format_ok/" + suffix), val.at(prefix + "score/" + suffix));
    };
    for (const auto& [d, n] : counts) row(std::to_string(d), n, std::to_string(d));
    row("all", static_cast<int64_t>(samples.size()), "mean");
    return;
  }
  std::printf("%-12s %8s %8s %10s %8s\n", "difficulty", "prompts", "accuracy", "format_ok", "score");
  for (const auto& [d, n] : counts) {
    const std::string at = "/" + std::to_string(d);
    std::printf("%-12lld %8lld %8.3f %10.3f %8.3f\n", static_cast<long long>(d), static_cast<long long>(n),
                val.at(prefix + "acc" + at), val.at(prefix + "format_ok" + at), val.at(prefix + "score" + at));
  }
  std::printf("%-12s %8zu %8.3f %10.3f %8.3f\n", "all", samples.size(), val.at(prefix + "acc/mean"),
              val.at(prefix + "format_ok/mean"), val.at(prefix + "score/mean"));
}

void print_val_comparison(const ValMetrics& before, const std::string& before_label, const ValMetrics& after,
                          const std::string& after_label, const std::vector<TaskSample>& samples,
                          const std::string& task) {
  const std::string prefix = "val/" + task + "/";
  const int width = static_cast<int>(std::max<size_t>({8, before_label.size(), after_label.size()}));
  std::printf("%-12s %8s | %-*s %-*s | %-*s %-*s\n", "", "", width, "accuracy", width, "", width, "score", width, "");
  std::printf("%-12s %8s | %-*s %-*s | %-*s %-*s\n", "difficulty", "prompts", width, before_label.c_str(), width,
              after_label.c_str(), width, before_label.c_str(), width, after_label.c_str());
  auto row = [&](const std::string& label, int64_t n, const std::string& suffix) {
    std::printf("%-12s %8lld | %-*.3f %-*.3f | %-*.3f %-*.3f\n", label.c_str(), static_cast<long long>(n), width,
                before.at(prefix + "acc/" + suffix), width, after.at(prefix + "acc/" + suffix), width,
                before.at(prefix + "score/" + suffix), width, after.at(prefix + "score/" + suffix));
  };
  for (const auto& [d, n] : count_by_difficulty(samples)) row(std::to_string(d), n, std::to_string(d));
  row("all", static_cast<int64_t>(samples.size()), "mean");
}

}  // namespace ppo
