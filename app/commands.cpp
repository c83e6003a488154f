// The subcommand table of `ppo`.
#include "app/commands.h"

#include <iostream>
#include <nlohmann/json.hpp>

#include "app/eval.h"
#include "app/export.h"
#include "app/generate.h"
#include "app/plan.h"
#include "app/regress.h"
#include "app/track.h"
#include "common/blas_kernels.h"
#include "common/config.h"
#include "common/error.h"
#include "common/files.h"
#include "common/json.h"
#include "common/manifest.h"
#include "common/strings.h"
#include "model/hf.h"
#include "parallel/context.h"
#include "rl/algorithms.h"
#include "tasks/datasets.h"
#include "tasks/kk.h"
#include "tasks/reward.h"
#include "tasks/task.h"
#include "text/tokenizers.h"
#include "train/config_check.h"
#include "train/prompts.h"
#include "train/rank_agreement.h"
#include "train/registry_keys.h"
#include "train/rm.h"
#include "train/sft.h"
#include "train/trainer.h"
#include "workers/reward_worker.h"

namespace ppo {

namespace {

// The whole number of `--flag`, which must lie in [lo, hi]: a UsageError naming the flag otherwise.
int64_t count_flag(CommandArgs& a, const std::string& flag, int64_t lo, int64_t hi) {
  const int64_t value = a.args[flag].as<int64_t>();
  usage_check(value >= lo && value <= hi, "--" + flag + "=" + std::to_string(value) +
                                              " is out of range: " + std::to_string(lo) + " to " + std::to_string(hi));
  return value;
}

int run_plan_command(CommandArgs& a) {
  Config config = command_config(a);
  PlanCommandOptions o;
  o.world_size = a.args["world-size"].as<int64_t>();
  if (a.args.count("device-memory")) o.device_memory = a.args["device-memory"].as<std::string>();
  o.prompt_length = a.args["prompt-length"].as<int64_t>();
  return run_plan(config, o);
}

// "rank 2" or "ranks 0-3".
std::string rank_range(int64_t first, int64_t last) {
  return first == last ? "rank " + std::to_string(first)
                       : "ranks " + std::to_string(first) + "-" + std::to_string(last);
}

int run_config(CommandArgs& a) {
  Config config = command_config(a);
  const int64_t world = Context::get().job_size();
  check_config(config, world);
  if (!Context::get().is_root()) return 0;
  const int64_t rollout = config.parallel.rollout_ranks;
  if (rollout > 0)  // the roles of `ppo train` with this config on these ranks
    std::cout << "# roles on " << world << " ranks: " << rank_range(0, world - rollout - 1) << " train, "
              << rank_range(world - rollout, world - 1) << " generate and score (parallel.rollout_ranks=" << rollout
              << ", async.max_staleness=" << config.async.max_staleness << ")\n";
  std::cout << config_to_yaml(config, a.args.count("comments") > 0, registry_choices());
  return 0;
}

// What the model computes on: half-precision models only on a CUDA device (LibTorch's CPU kernels lack half versions
// of ops they use); on the CPU, one warning line when OpenBLAS runs kernels older than the CPU (common/blas_kernels.h).
void check_compute_device(const Config& config) {
  const Context& context = Context::get();
  usage_check(config.model.dtype == "float32" || context.device().is_cuda(),
              "model.dtype=" + config.model.dtype +
                  " needs a CUDA device, and none is visible here (LibTorch's CPU kernels lack half-precision "
                  "versions of ops this model uses); use model.dtype=float32 on the CPU");
  if (context.is_root() && !context.device().is_cuda()) {
    const std::string warning = blas_kernels_warning();
    if (!warning.empty()) std::cerr << warning << std::endl;
  }
}

int run_train_command(CommandArgs& a) {
  Config config = command_config(a);
  check_compute_device(config);
  return run_train(config);
}

int run_sft_command(CommandArgs& a) {
  Config config = command_config(a);
  check_compute_device(config);
  return run_sft(config);
}

int run_rm_command(CommandArgs& a) {
  Config config = command_config(a);
  check_compute_device(config);
  return run_rm(config);
}

int run_eval_command(CommandArgs& a) {
  Config config = command_config(a);
  check_compute_device(config);
  return run_eval(config, a.args.count("checkpoint") ? a.args["checkpoint"].as<std::string>() : "",
                  count_flag(a, "samples", 1, int64_t{1} << 16));  // rollout.n's bound
}

int run_generate_command(CommandArgs& a) {
  Config config = command_config(a);
  check_compute_device(config);
  return run_generate(config, count_flag(a, "count", 1, kMaxTaskSamples), a.args.count("jsonl") > 0);
}

// "3" or "2-8" -> [min, max].
std::pair<int64_t, int64_t> parse_range(const std::string& flag, const std::string& text) {
  try {
    size_t dash = text.find('-');
    if (dash == std::string::npos) return {std::stoll(text), std::stoll(text)};
    return {std::stoll(text.substr(0, dash)), std::stoll(text.substr(dash + 1))};
  } catch (const std::exception&) {
    throw UsageError("--" + flag + " '" + text + "' is not N or MIN-MAX");
  }
}

int run_data_command(CommandArgs& a) {
  usage_check(a.args.count("task") == 1,
              "ppo data needs a task name, e.g. ppo data kk --people 3 --count 100 "
              "--out kk.jsonl; tasks: " +
                  join(task_names(), ", "));
  usage_check(a.args.count("out") == 1, "ppo data needs --out FILE.jsonl or FILE.parquet");
  std::unique_ptr<Task> task = make_task(a.args["task"].as<std::string>());
  if (a.args.count("depth") || a.args.count("width")) {
    usage_check(task->name() == "kk", "--depth and --width apply to the kk task only");
    KkConfig kk;
    if (a.args.count("depth")) kk.depth = count_flag(a, "depth", 1, kKkMaxGenerateDepth);
    if (a.args.count("width")) kk.width = count_flag(a, "width", 2, kKkMaxWidth);
    task = std::make_unique<KkTask>(kk);
  }
  std::string range =
      a.args.count("people") ? a.args["people"].as<std::string>() : a.args["difficulty"].as<std::string>();
  auto [lo, hi] = parse_range(a.args.count("people") ? "people" : "difficulty", range);
  usage_check(lo >= 1 && lo <= hi, "difficulty range " + range + " is empty or below 1");
  const int64_t count = count_flag(a, "count", 1, kMaxTaskSamples);
  std::vector<TaskSample> samples;
  try {
    samples = task->generate(count, lo, hi, a.args["seed"].as<uint64_t>());
  } catch (const UsageError& e) {  // the range names the flag it came from
    throw UsageError("--" + std::string(a.args.count("people") ? "people" : "difficulty") + " " + range + ": " +
                     e.what());
  }
  write_samples(*task, samples, a.args["out"].as<std::string>());
  std::cout << "wrote " << samples.size() << " " << task->name() << " records to " << a.args["out"].as<std::string>()
            << "\n";
  return 0;
}

int run_regress_command(CommandArgs& a) {
  RegressOptions o;
  o.quick = a.args.count("quick") > 0;
  o.update = a.args.count("update") > 0;
  o.jobs = count_flag(a, "jobs", 1, 1024);
  o.out = a.args["out"].as<std::string>();
  o.reference = a.args["reference"].as<std::string>();
  if (a.args.count("only")) o.only = a.args["only"].as<std::string>();
  if (a.args.count("binary")) o.binary = a.args["binary"].as<std::string>();
  o.config_files = a.config_files;
  o.extra_overrides = a.overrides;
  return run_regress(o);
}

int run_score_command(CommandArgs& a) {
  for (const char* flag : {"task", "data", "responses"})
    usage_check(a.args.count(flag) == 1, std::string("ppo score needs --") + flag);
  auto task = make_task(a.args["task"].as<std::string>());
  const Config config = load_config(a.config_files, a.overrides);
  auto samples = load_samples(*task, a.args["data"].as<std::string>(), config.data.prompt_key);
  auto responses = load_responses_jsonl(a.args["responses"].as<std::string>());
  // veRL records are scored as training scores them: by data_source, reward.function or reward.command.
  Rewarder rewarder(config.reward, task->name());
  rewarder.check(samples);
  // K&K prompts end with "<think>" (Logic-RL), so the reward counts that tag as the response's opening one. A
  // response from a system whose prompt did not open it starts with its own "<think>": auto detects that per
  // response; true/false force one reading for all.
  const std::string opens =
      a.args.count("prompt-opens-think") ? a.args["prompt-opens-think"].as<std::string>() : "auto";
  usage_check(opens == "auto" || opens == "true" || opens == "false",
              "--prompt-opens-think: unknown value '" + opens + "'; valid: auto, true, false");
  usage_check(task->name() == "kk" || !a.args.count("prompt-opens-think"),
              "--prompt-opens-think applies to the kk task only, not to " + task->name());
  KkConfig unopened_config;
  unopened_config.prompt_opens_think = false;
  const KkTask opened, unopened(unopened_config);
  auto scorer = [&](const TaskSample& sample, const std::string& response) {
    if (sample.data_source != task->name()) {
      const std::string prompt = sample.prompt_is_chat ? sample.messages.back().value("content", "") : sample.prompt;
      return rewarder.score({{&sample, prompt, response}}).front();
    }
    if (task->name() != "kk") return task->score(sample, response);
    const bool own_think = opens == "false" || (opens == "auto" && trim(response).rfind("<think>", 0) == 0);
    return (own_think ? unopened : opened).score(sample, response);
  };
  ScoreReport report = score_responses(samples, responses, scorer);
  // A reward model scores each (prompt, response) too, rendered with its own tokenizer and chat template.
  std::vector<double> rm_scores;
  if (a.args.count("reward-model")) {
    usage_check(a.args["rm-micro-batch"].as<int64_t>() >= 1, "--rm-micro-batch must be at least 1");
    RewardWorker rm(config, a.args["reward-model"].as<std::string>(), torch::kCPU);
    std::vector<std::vector<int64_t>> rows;
    for (size_t i = 0; i < samples.size(); ++i)
      rows.push_back(rm.folder().encode(prompt_messages(samples[i]), responses[i]));
    rm_scores = rm.score_rows(rows, a.args["rm-micro-batch"].as<int64_t>());
  }
  for (size_t i = 0; i < report.scores.size(); ++i) {
    std::printf("%zu\tscore %+.2f\t%s", i, report.scores[i].score, report.scores[i].correct ? "correct" : "wrong");
    if (!rm_scores.empty()) std::printf("\trm %+.6f", rm_scores[i]);
    std::printf("\n");
  }
  std::printf("%-12s %8s %8s\n", "difficulty", "count", "accuracy");
  for (const auto& [d, acc] : report.accuracy_by_difficulty)
    std::printf("%-12lld %8lld %8.3f\n", static_cast<long long>(d),
                static_cast<long long>(report.count_by_difficulty.at(d)), acc);
  std::printf("accuracy %.4f  mean score %.4f  format ok %.4f  (%zu responses)\n", report.accuracy, report.mean_score,
              report.format_rate, report.scores.size());
  if (!rm_scores.empty()) {
    double sum = 0;
    for (double v : rm_scores) sum += v;
    std::printf("reward model mean score %.6f  (%zu responses, %s)\n", sum / static_cast<double>(rm_scores.size()),
                rm_scores.size(), a.args["reward-model"].as<std::string>().c_str());
  }
  return 0;
}

// JSON lines {"text": ...} on stdin -> {"ids": [...]} on stdout, one per line (blank lines skipped). No special
// tokens are added. A bad line stops with a UsageError naming its number.
int run_tokenize_command(CommandArgs& a) {
  usage_check(a.args.count("tokenizer") == 1,
              "ppo tokenize needs --tokenizer DIR (a folder with tokenizer.json, a tokenizer.json, or char)");
  auto tokenizer = make_tokenizer(a.args["tokenizer"].as<std::string>());
  int64_t line_number = 0;
  for (std::string line; std::getline(std::cin, line);) {
    ++line_number;
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    const std::string where = "stdin line " + std::to_string(line_number) + ": ";
    nlohmann::json record;
    try {
      record = parse_json_bounded(line);
    } catch (const nlohmann::json::exception& e) {
      throw UsageError(where + "not valid JSON (" + e.what() + ")");
    } catch (const UsageError& e) {
      throw UsageError(where + e.what());
    }
    usage_check(record.is_object() && record.contains("text") && record.at("text").is_string(),
                where + "expected an object with a string field \"text\", e.g. {\"text\": \"hello\"}");
    std::cout << nlohmann::json{{"ids", tokenizer->encode(record.at("text").get<std::string>())}}.dump() << "\n";
  }
  std::cout.flush();
  return 0;
}

// Each subcommand's own flags.
void eval_options(cxxopts::Options& o) {
  o.add_options()("checkpoint", "checkpoint folder (default: actor.init_checkpoint)", cxxopts::value<std::string>())(
      "samples",
      "samples per prompt; k > 1 reports pass@1 and pass@k, sampled at rollout.val_temperature (or "
      "rollout.temperature when that is 0)",
      cxxopts::value<int64_t>()->default_value("1"));
}

void generate_options(cxxopts::Options& o) {
  o.add_options()("count", "number of prompts", cxxopts::value<int64_t>()->default_value("8"))(
      "jsonl", "print one JSON object per response: prompt (the text fed to the model), response, reward, correct");
}

void data_options(cxxopts::Options& o) {
  o.add_options()("task", "task name", cxxopts::value<std::string>())("people", "kk: number of people, N or MIN-MAX",
                                                                      cxxopts::value<std::string>())(
      "depth", "kk: maximum statement depth (default 2; 1 = \"X is a knight/knave\" only)", cxxopts::value<int64_t>())(
      "width", "kk: maximum operands of and/or (default 2)", cxxopts::value<int64_t>())(
      "difficulty", "difficulty, N or MIN-MAX", cxxopts::value<std::string>()->default_value("2-4"))(
      "count", "records", cxxopts::value<int64_t>()->default_value("100"))(
      "seed", "generator seed", cxxopts::value<uint64_t>()->default_value("1"))(
      "out", "output file: .jsonl (the task's records) or .parquet (veRL's layout)", cxxopts::value<std::string>());
}

void regress_options(cxxopts::Options& o) {
  o.add_options()("quick", "only reverse x gae, grpo (the ctest subset)")(
      "update", "re-record the references of the cases run (after a change meant to change them)")(
      "jobs", "cases run at once", cxxopts::value<int64_t>()->default_value("2"))(
      "out", "output folder", cxxopts::value<std::string>()->default_value("runs/regress"))(
      "reference", "reference curves (JSON)",
      cxxopts::value<std::string>()->default_value("tests/regress/reference.json"))(
      "only", "run only the cases whose task/estimator name contains this text", cxxopts::value<std::string>())(
      "binary", "the ppo binary the cases run (default: this one)", cxxopts::value<std::string>());
}

void score_options(cxxopts::Options& o) {
  o.add_options()("task", "task name", cxxopts::value<std::string>())("data", "task JSONL (e.g. K&K puzzles)",
                                                                      cxxopts::value<std::string>())(
      "responses", "JSONL with a \"response\" field per line, same order", cxxopts::value<std::string>())(
      "prompt-opens-think",
      "kk: auto (default: a response that starts with <think> opened its own), true (the prompt ended with <think>, "
      "as ppo data writes it) or false",
      cxxopts::value<std::string>())(
      "reward-model",
      "also score each response with a reward model: a *ForSequenceClassification folder with one label, its own "
      "tokenizer and chat template",
      cxxopts::value<std::string>())("rm-micro-batch", "responses per forward of the reward model",
                                     cxxopts::value<int64_t>()->default_value("8"));
}

void tokenize_options(cxxopts::Options& o) {
  o.add_options()("tokenizer", "a folder with tokenizer.json, a tokenizer.json, or char",
                  cxxopts::value<std::string>());
}

void plan_options(cxxopts::Options& o) {
  o.add_options()("world-size", "ranks the run will have (one device each)",
                  cxxopts::value<int64_t>()->default_value("1"))(
      "device-memory", "memory of one device, e.g. 80GB, 80GiB or 141GB: says whether the run fits",
      cxxopts::value<std::string>())("prompt-length",
                                     "tokens of the widest prompt of a batch (default: data.max_prompt_length)",
                                     cxxopts::value<int64_t>()->default_value("0"));
}

void config_options(cxxopts::Options& o) {
  o.add_options()("comments", "add each key's meaning as a comment (as configs/ppo_trainer.yaml)");
}

}  // namespace

std::vector<Command> all_commands() {
  // {name, summary, takes --config and key=value, what bare arguments are, its flags, its function}
  return {
      {"train", "PPO training (or another algorithm.adv_estimator)", true, "overrides", nullptr, run_train_command},
      {"sft", "supervised warm-start on a task's reference answers", true, "overrides", nullptr, run_sft_command},
      {"rm", "train a reward model on preference pairs (Bradley-Terry, the critic's keys)", true, "overrides", nullptr,
       run_rm_command},
      {"eval", "accuracy of a checkpoint on the validation prompts, table by difficulty", true, "overrides",
       eval_options, run_eval_command},
      {"generate", "sample responses for validation prompts and print them with their rewards", true, "overrides",
       generate_options, run_generate_command},
      {"data", "write a task dataset as JSONL or Parquet (ppo data kk --people 3 --count 100 --out kk.parquet)", false,
       "task", data_options, run_data_command},
      {"regress", "the learning regression suite: every estimator x toy task against stored reference curves", true,
       "overrides", regress_options, run_regress_command},
      {"score", "score responses from any system against a task dataset", false, "overrides", score_options,
       run_score_command},
      {"export",
       "write a checkpoint's policy (a ppo rm checkpoint's reward model) as a Hugging Face folder (config.json, "
       "safetensors, tokenizer)",
       true, "overrides", export_options, run_export_command},
      {"tokenize", "JSON lines {\"text\": ...} on stdin -> {\"ids\": [...]} on stdout", false, "tokenizer",
       tokenize_options, run_tokenize_command},
      {"track",
       "log a run folder's metrics to W&B or MLflow (ppo track --to mlflow runs/x), continuing its tracked run", false,
       "run-dir", track_options, run_track_command},
      {"config", "print the fully resolved config (YAML) and exit", true, "overrides", config_options, run_config},
      {"plan", "predict each phase's peak device memory per rank, whether it fits, and what would make it fit", true,
       "overrides", plan_options, run_plan_command},
  };
}

}  // namespace ppo
