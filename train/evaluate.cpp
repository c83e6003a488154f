// See train/evaluate.h.
#include "train/evaluate.h"

#include <chrono>
#include <cstdio>
#include <limits>
#include <set>
#include <sstream>

#include "common/error.h"
#include "common/host_memory.h"
#include "rollout/rollout.h"
#include "train/experience.h"
#include "train/prompts.h"

namespace ppo {

namespace {

// Adds name/mean and name/<d> for every difficulty d: the mean of `values` over the rows where `weight` is 1 (the
// real rows of one data source, say), overall and by difficulty.
void add_by_difficulty(Metrics& m, const std::string& name, const torch::Tensor& values, const torch::Tensor& weight,
                       const torch::Tensor& difficulty, const std::set<int64_t>& difficulties) {
  const torch::Tensor v = values.to(torch::kFloat64), w = weight.to(torch::kFloat64);
  m.add_mean(name + "/mean", (v * w).sum().item<double>(), w.sum().item<double>());
  for (int64_t d : difficulties) {
    const torch::Tensor sel = w * (difficulty == d).to(torch::kFloat64);
    m.add_mean(name + "/" + std::to_string(d), (v * sel).sum().item<double>(), sel.sum().item<double>());
  }
}

// "eval: 1200/2720 responses | batch 1/1, decode step 180 | 35 s | ETA <= 44 s" on standard error (standard output
// keeps the tables), at most every 10 s and when the last response is done. While a batch decodes in one wave, every
// response ends within max_steps decode steps, so the ETA is a bound: the steps left at the batch's decode step time
// (measured after its prefill), and as many for each batch still to come. A batch in several waves estimates
// from the responses finished so far ("ETA ~").
class ProgressLine {
 public:
  ProgressLine(int64_t total_rows, int64_t batches, int64_t max_steps, bool enabled)
      : total_(total_rows), batches_(batches), max_steps_(max_steps), enabled_(enabled) {}
  void start_batch(bool one_wave) {
    ++batch_;
    one_wave_ = one_wave;
    first_steps_ = -1;
  }
  void add(int64_t rows, int64_t steps) {
    done_ += rows;
    if (first_steps_ < 0) {  // the first report of a batch comes after its prefill
      first_steps_ = steps;
      first_report_ = Clock::now();
    }
    const double elapsed = seconds(start_);
    if (!enabled_ || (done_ < total_ && elapsed - shown_at_ < 10)) return;
    shown_at_ = elapsed;
    const bool bound = one_wave_ && steps > first_steps_;
    double eta = static_cast<double>(total_ - done_) * elapsed / static_cast<double>(std::max<int64_t>(1, done_));
    if (bound)
      eta = seconds(first_report_) / static_cast<double>(steps - first_steps_) *
            static_cast<double>(std::max<int64_t>(0, max_steps_ - steps) + (batches_ - batch_) * max_steps_);
    if (done_ >= total_) eta = 0;
    std::fprintf(stderr, "eval: %lld/%lld responses | batch %lld/%lld, decode step %lld | %.0f s | ETA %s %.0f s\n",
                 static_cast<long long>(done_), static_cast<long long>(total_), static_cast<long long>(batch_),
                 static_cast<long long>(batches_), static_cast<long long>(steps), elapsed, bound ? "<=" : "~", eta);
    std::fflush(stderr);
  }

 private:
  using Clock = std::chrono::steady_clock;
  static double seconds(Clock::time_point since) { return std::chrono::duration<double>(Clock::now() - since).count(); }
  const Clock::time_point start_ = Clock::now();
  Clock::time_point first_report_ = start_;
  int64_t total_ = 0, batches_ = 0, max_steps_ = 0, batch_ = 0, done_ = 0, first_steps_ = -1;
  double shown_at_ = 0;
  bool enabled_ = false, one_wave_ = false;
};

// A UsageError, before anything is allocated, when decoding `rows` validation sequences of prompts `prompt_width`
// wide needs more host memory than this process may still allocate: one wave's KV cache (validation_wave_size) and
// sampling temporaries (32 bytes a vocabulary entry: the logits, their softmax, sort and cumulative sum), and for all
// the rows the batch (48 bytes a position: ids, masks, positions, log-probs) and the decoded texts and rewards (1 KiB).
// Measured on the tiny config (`ppo eval --samples 2048` against 4096, peak resident memory): 11.5 KB a row, where
// this counts 13.2 KB. On a GPU the device's memory is not asked, and the check is skipped.
void check_validation_memory(const Config& config, int64_t vocab_size, torch::Device device, int64_t prompt_width,
                             int64_t rows, int64_t k) {
  const double available = available_memory_bytes(), gib = 1 << 30;
  if (!device.is_cpu() || available < 0) return;
  const ModelConfig& mc = config.model;
  const int64_t together = validation_wave_size(config, prompt_width, rows);
  const auto wave = static_cast<double>(together);
  const auto width = static_cast<double>(
      decode_cache_width(prompt_width, config.data.max_response_length, config.rollout.multi_turn.enable));
  const double kv = kv_cache_bytes(mc, static_cast<int64_t>(width), together);
  const double logits = 32.0 * static_cast<double>(vocab_size) * wave;
  const double batch = (48.0 * width + 1024.0) * static_cast<double>(rows);
  if (kv + logits + batch <= available) return;
  std::ostringstream text;
  text.precision(3);
  text << "validation decodes " << rows << " sequences per rank (" << rows / k << " prompts x " << k << " samples), "
       << together << " of them together: about " << (kv + logits + batch) / gib << " GiB (KV cache " << kv / gib
       << " GiB, the batch " << batch / gib << " GiB), and this process may allocate " << available / gib
       << " GiB: lower data.val_batch_size" << (k > 1 ? " or eval's --samples" : "")
       << ", or decode in waves with rollout.max_num_seqs or rollout.max_kv_tokens";
  throw UsageError(text.str());
}

}  // namespace

std::vector<std::string> data_sources(const std::vector<TaskSample>& samples, const Rewarder& rewarder) {
  std::set<std::string> sources;
  for (const TaskSample& s : samples) sources.insert(rewarder.source_of(s));
  return {sources.begin(), sources.end()};
}

std::string model_source(const Config& config) {
  if (!config.actor.init_checkpoint.empty()) return config.actor.init_checkpoint;
  if (!config.model.path.empty()) return config.model.path + " (model.path)";
  return "the seeded initialisation";
}

void check_logits_finite(CausalLM& model, const std::vector<TaskSample>& samples, const Tokenizer& tokenizer,
                         const Config& config, torch::Device device, const std::string& what) {
  if (samples.empty()) return;
  const TaskSample& first = samples.front();
  const std::optional<ChatTemplate> chat = prompt_chat_template(config, tokenizer, any_chat_prompt(samples));
  std::vector<int64_t> ids = encode_prompt(tokenizer, first, config.data.max_prompt_length,
                                           chat_for(first, config, chat), config.data.truncation);
  if (ids.empty()) ids.push_back(0);
  usage_check(logits_finite(model, ids, device),
              what +
                  " gives non-finite logits (NaN or inf) on the first prompt: its weights are damaged, or values "
                  "of its config (rope_theta, rms_norm_eps, the sizes) make them overflow; nothing was evaluated");
}

ValMetrics evaluate(CausalLM& model, const std::vector<TaskSample>& samples, Rewarder& rewarder,
                    const Tokenizer& tokenizer, const Config& config, Context& context, ToolEnvironment* environment,
                    int64_t samples_per_prompt, bool show_progress) {
  Metrics m;
  const std::vector<std::string> sources = data_sources(samples, rewarder);
  std::set<int64_t> difficulties;
  for (const auto& s : samples) difficulties.insert(s.difficulty);
  const int64_t batch = config.data.val_batch_size, world = context.world_size(), k = samples_per_prompt;
  usage_check(k >= 1, "samples per prompt must be at least 1, got " + std::to_string(k));
  const double temperature =
      k > 1 && config.rollout.val_temperature <= 0 ? config.rollout.temperature : config.rollout.val_temperature;
  usage_check(k == 1 || temperature > 0,
              "pass@" + std::to_string(k) + " needs sampling: set rollout.val_temperature or rollout.temperature > 0");
  SamplingParams sampling{k, temperature, config.rollout.top_k, config.rollout.top_p, /*seed_index=*/-1};
  std::vector<RowReward> rewards;
  int64_t rank_rows = 0, batches = 0;  // this rank's rows over all batches: each is padded to a multiple of the ranks
  for (size_t begin = 0; begin < samples.size(); begin += batch, ++batches)
    rank_rows += (std::min<int64_t>(batch, static_cast<int64_t>(samples.size() - begin)) + world - 1) / world * k;
  ProgressLine progress(rank_rows, batches, config.data.max_response_length, show_progress && context.is_root());
  GenerationLayout layout{/*validation=*/true, [&progress](int64_t rows, int64_t steps) { progress.add(rows, steps); },
                          environment};
  for (size_t begin = 0; begin < samples.size(); begin += batch) {
    std::vector<TaskSample> chunk(samples.begin() + begin,
                                  samples.begin() + std::min(samples.size(), begin + static_cast<size_t>(batch)));
    RankPrompts prompts =
        rank_prompts(chunk, tokenizer, config, static_cast<int64_t>(chunk.size()), world, context.rank(), /*pad=*/true);
    const int64_t rows = static_cast<int64_t>(prompts.ids.size()) * k;
    check_validation_memory(config, vocab_size_for(config, tokenizer), context.device(), prompts.prompt_width, rows, k);
    progress.start_batch(validation_wave_size(config, prompts.prompt_width, rows) >= rows);
    Batch b = rollout_batch(model, tokenizer, prompts, sampling, config, layout);
    for (RowReward& r : compute_rewards(b, prompts, k, rewarder, tokenizer)) rewards.push_back(std::move(r));
    const torch::Tensor& difficulty = b.at(field::difficulty);
    std::vector<int64_t> source_ids;  // each row's index in `sources`
    for (int64_t row = 0; row < b.size(); ++row) {
      const std::string source = rewarder.source_of(prompts.samples[row / k]);
      source_ids.push_back(std::lower_bound(sources.begin(), sources.end(), source) - sources.begin());
    }
    const torch::Tensor source_id = torch::tensor(source_ids, torch::kInt64);
    for (size_t i = 0; i < sources.size(); ++i) {
      const std::string prefix = "val/" + sources[i] + "/";
      const torch::Tensor real = b.at(field::sample_mask) * (source_id == static_cast<int64_t>(i)).to(torch::kFloat32);
      if (k > 1) {  // rows are prompt-major: prompt i's samples are rows i*k .. i*k + k-1
        const torch::Tensor correct = b.at(field::correct).view({-1, k}).to(torch::kFloat64);
        const torch::Tensor prompt_real =
            (real * b.at(field::has_correct)).view({-1, k}).select(1, 0).to(torch::kFloat64);
        const torch::Tensor prompt_difficulty = difficulty.view({-1, k}).select(1, 0);
        add_by_difficulty(m, prefix + "pass@1", correct.mean(1), prompt_real, prompt_difficulty, difficulties);
        add_by_difficulty(m, prefix + "pass@" + std::to_string(k), (correct.sum(1) > 0).to(torch::kFloat64),
                          prompt_real, prompt_difficulty, difficulties);
      }
      // Each per-response field averaged over the real rows (".../mean") and over those of each difficulty; acc over
      // the rows whose reward says what "correct" is.
      add_by_difficulty(m, prefix + "score", b.at(field::scores), real, difficulty, difficulties);
      add_by_difficulty(m, prefix + "acc", b.at(field::correct), real * b.at(field::has_correct), difficulty,
                        difficulties);
      add_by_difficulty(m, prefix + "format_ok", b.at(field::format_ok), real, difficulty, difficulties);
      for (const auto& [name, values] : tool_use(b))  // multi-turn rollouts
        add_by_difficulty(m, prefix + "tool/" + name, values, real, difficulty, difficulties);
    }
  }
  add_reward_metrics(m, "val/", rewards, sources, context, /*extras_only=*/true);
  return m.reduce(context);
}

void add_reward_metrics(Metrics& m, const std::string& prefix, const std::vector<RowReward>& rows,
                        const std::vector<std::string>& sources, Context& context, bool extras_only) {
  // Sums and counts by "<data_source>/<name>". Every rank must add the same names: the extra fields an external
  // program answered may differ between ranks, so their union is agreed on first.
  std::map<std::string, std::pair<double, double>> sums;
  if (!extras_only) {
    for (const std::string& source : sources) sums[source + "/score"], sums[source + "/acc"];
  }
  for (const RowReward& r : rows) {
    if (!extras_only) {
      sums[r.data_source + "/score"].first += r.score.score;
      sums[r.data_source + "/score"].second += 1;
      if (r.score.has_correct) {
        sums[r.data_source + "/acc"].first += r.score.correct ? 1 : 0;
        sums[r.data_source + "/acc"].second += 1;
      }
    }
    for (const auto& [name, value] : r.score.extras) {
      sums[r.data_source + "/" + name].first += value;
      sums[r.data_source + "/" + name].second += 1;
    }
  }
  // The names travel length-prefixed ("<bytes>:<name>" each), so any byte of a name, a newline too, stays in it.
  std::string local;
  for (const auto& [name, sum] : sums) local += std::to_string(name.size()) + ":" + name;
  for (const std::string& names : context.all_gather(local)) {
    for (size_t at = 0; at < names.size();) {
      const size_t colon = names.find(':', at);
      const size_t length = std::stoull(names.substr(at, colon - at));
      sums[names.substr(colon + 1, length)];  // adds the names other ranks have, at zero
      at = colon + 1 + length;
    }
  }
  for (const auto& [name, sum] : sums) m.add_mean(prefix + name + "/mean", sum.first, sum.second);
}

std::vector<std::pair<std::string, torch::Tensor>> tool_use(const Batch& batch) {
  if (!batch.has(field::tool_turns)) return {};
  return {{"turns", batch.at(field::tool_turns)},
          {"calls", batch.at(field::tool_calls)},
          {"call_ratio", (batch.at(field::tool_calls) > 0).to(torch::kFloat32)},
          {"reward", batch.at(field::tool_reward)},
          {"appended_tokens", batch.at(field::tool_tokens)}};
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

void print_source_table(const ValMetrics& val, const std::vector<TaskSample>& samples, const std::string& prefix,
                        int64_t samples_per_prompt) {
  const std::map<int64_t, int64_t> counts = count_by_difficulty(samples);
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

void print_source_comparison(const ValMetrics& before, const std::string& before_label, const ValMetrics& after,
                             const std::string& after_label, const std::vector<TaskSample>& samples,
                             const std::string& prefix) {
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

// The samples of each data source, by name.
std::map<std::string, std::vector<TaskSample>> by_source(const std::vector<TaskSample>& samples,
                                                         const Rewarder& rewarder) {
  std::map<std::string, std::vector<TaskSample>> out;
  for (const TaskSample& s : samples) out[rewarder.source_of(s)].push_back(s);
  return out;
}

}  // namespace

void print_val_table(const ValMetrics& val, const std::vector<TaskSample>& samples, const Rewarder& rewarder,
                     int64_t samples_per_prompt) {
  const auto sources = by_source(samples, rewarder);
  for (const auto& [source, of_source] : sources) {
    if (sources.size() > 1) std::printf("data_source %s\n", source.c_str());
    const std::string prefix = "val/" + source + "/";
    print_source_table(val, of_source, prefix, samples_per_prompt);
    if (val.count(prefix + "tool/turns/mean"))
      std::printf("tool use: %.2f turns and %.2f answered calls a trajectory, %.3f of them called, tool reward %.3f\n",
                  val.at(prefix + "tool/turns/mean"), val.at(prefix + "tool/calls/mean"),
                  val.at(prefix + "tool/call_ratio/mean"), val.at(prefix + "tool/reward/mean"));
  }
}

void print_val_comparison(const ValMetrics& before, const std::string& before_label, const ValMetrics& after,
                          const std::string& after_label, const std::vector<TaskSample>& samples,
                          const Rewarder& rewarder) {
  const auto sources = by_source(samples, rewarder);
  for (const auto& [source, of_source] : sources) {
    if (sources.size() > 1) std::printf("data_source %s\n", source.c_str());
    print_source_comparison(before, before_label, after, after_label, of_source, "val/" + source + "/");
  }
}

}  // namespace ppo
