// Generation throughput: KV-cache decoding vs recomputing the whole sequence at every step; with --train, the
// training forward and backward instead.
// The model has the ModelConfig defaults (char vocabulary, V = 99) or the model section of --config; EOS stopping is
// disabled (eos_id = -1) so every row produces exactly --new-tokens tokens, unless --eos-id is given (a length-skewed
// workload: with the near-uniform random model, each token is EOS with probability about 1/V).
//
//   bench_generate [--config FILE.yaml] [--device cpu|cuda] [--threads N] [--batch B] [--slots S] [--prompt-len P]
//                  [--new-tokens R] [--repeats K] [--eos-id ID] [--check-interval K] [--no-recompute] [--json]
//                  [--train] [--profile] [--count-ops] [--no-cuda-graphs] [key=value ...]
//
// key=value: overrides of the config's model section, as `ppo train` takes them (e.g. model.num_layers=2
// model.dtype=float32: Qwen2.5-0.5B's shape with 2 layers on the CPU).
// --device cuda: the model on CUDA device 0 in model.dtype (bfloat16 or float16 only there), each timed generation
// ended by a device synchronize. The vocabulary is model.vocab_size when the config sets it (a real model's shape,
// e.g. configs/bench_qwen2.5-0.5b.yaml), else the character tokenizer's.
// --slots: rows decoded together (rollout.micro_batch_size; default = --batch). --json prints one line
// {"impl":"ppo.cpp",...} with the KV-cache figures (bench/peers.sh reads it). Real tokens/s counts generated tokens up
// to and including EOS; host_reads is the decode loop's device-to-host copies per generation.
// --train: the actor update's forward and backward (compute_log_probs over --batch rows of --prompt-len + --new-tokens
// random tokens, the mean log-prob of the last --new-tokens as the loss; no optimizer step), best of --repeats after a
// warm-up; tokens/s counts every token forwarded; the peak of allocated memory is the caching allocator's on CUDA, a
// counting allocator's on the CPU (bench/gpu/hf_decode.py --train does the same work in PyTorch eager).
// --profile (LibTorch 2.x): one more KV-cache generation under LibTorch's Kineto profiler, summarised as one JSON line
// {"impl":"ppo.cpp","mode":"profile",...}: wall time; the device's kernels, copies and memsets (count, summed time);
// the CUDA runtime calls (count, summed host time, the costliest by name); the kernels and host ops that took longest.
// The device's busy share (kernel time / wall time) says whether decoding waits on the host (launches, syncs).
// --count-ops: one more KV-cache generation with a RecordFunction callback that counts the ATen ops run inside each
// decode step (the "ppo::decode_step" scope of decode/continuous_decoder.cpp; prefills and the host's checks are
// outside it), printed as one JSON line {"impl":"ppo.cpp","mode":"ops",...}: steps, ops per step (every op, nested
// ones included, and the top-level ones a step calls), and the top-level ops per step by name. CPU and CUDA alike;
// with CUDA graphs the replayed steps run no ATen op, so count with --no-cuda-graphs (the ops a graph holds).
// --no-cuda-graphs: rollout.cuda_graphs=false (eager decode steps on CUDA).
// Without --no-recompute (and without --json), the recompute path runs too, and the two are compared: tokens identical
// (the same seeds), and the largest difference of their sampling-time log-probs.
//
// Build: add_executable(bench_generate bench/bench_generate.cpp) linked to ppo_rl.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include <ATen/record_function.h>
#include <torch/cuda.h>
#include <torch/version.h>
#if TORCH_VERSION_MAJOR >= 2
#include <torch/csrc/autograd/profiler_kineto.h>
#endif

#include "common/config.h"
#include "common/error.h"
#include "model/transformer.h"
#include "rollout/rollout.h"
#include "text/tokenizers.h"
#include "workers/memory.h"

namespace {

struct Args {
  std::string config;                  // YAML whose model section gives the shape; empty = ModelConfig defaults
  std::vector<std::string> overrides;  // key=value
  std::string device = "cpu";
  int64_t threads = 1;
  int64_t batch = 16;
  int64_t slots = 0;  // 0 = batch
  int64_t prompt_len = 16;
  int64_t new_tokens = 128;
  int64_t repeats = 3;  // best of K timed runs
  int64_t eos_id = -1;
  int64_t check_interval = ppo::GenerationParams().check_interval;
  bool recompute = true;
  bool json = false;
  bool train = false;
  bool profile = false;
  bool count_ops = false;
  bool cuda_graphs = true;
};

Args parse_args(int argc, char** argv) {
  Args args;
  for (int i = 1; i < argc; ++i) {
    const std::string key = argv[i];
    if (key.rfind("--", 0) != 0 && key.find('=') != std::string::npos) {
      args.overrides.push_back(key);
      continue;
    }
    // Flags without a value: each sets its field to the value given here.
    const std::pair<const char*, std::pair<bool*, bool>> switches[] = {
        {"--json", {&args.json, true}},           {"--no-recompute", {&args.recompute, false}},
        {"--train", {&args.train, true}},         {"--profile", {&args.profile, true}},
        {"--count-ops", {&args.count_ops, true}}, {"--no-cuda-graphs", {&args.cuda_graphs, false}}};
    const auto flag =
        std::find_if(std::begin(switches), std::end(switches), [&](const auto& entry) { return key == entry.first; });
    if (flag != std::end(switches)) {
      *flag->second.first = flag->second.second;
      continue;
    }
    if (i + 1 >= argc) {
      std::fprintf(stderr, "error: %s needs a value\n", key.c_str());
      std::exit(2);
    }
    const std::string text = argv[++i];
    if (key == "--config") {
      args.config = text;
      continue;
    }
    if (key == "--device") {
      if (text != "cpu" && text != "cuda") {
        std::fprintf(stderr, "error: --device is cpu or cuda, got '%s'\n", text.c_str());
        std::exit(2);
      }
      args.device = text;
      continue;
    }
    char* end = nullptr;
    const long long value = std::strtoll(text.c_str(), &end, 10);
    if (end == text.c_str() || *end != '\0') {
      std::fprintf(stderr, "error: %s wants a whole number, got '%s'\n", key.c_str(), text.c_str());
      std::exit(2);
    }
    if (key == "--threads")
      args.threads = value;
    else if (key == "--batch")
      args.batch = value;
    else if (key == "--slots")
      args.slots = value;
    else if (key == "--prompt-len")
      args.prompt_len = value;
    else if (key == "--new-tokens")
      args.new_tokens = value;
    else if (key == "--repeats")
      args.repeats = value;
    else if (key == "--eos-id")
      args.eos_id = value;
    else if (key == "--check-interval")
      args.check_interval = value;
    else {
      std::fprintf(stderr, "error: unknown option %s\n", key.c_str());
      std::exit(2);
    }
  }
  return args;
}

struct Timing {
  double seconds = 1e30;  // best of the repeats
  double real_tokens = 0;
  int64_t host_reads = 0;
  int64_t graph_replays = 0;           // decode steps replayed as CUDA graphs, per generation
  torch::Tensor responses, log_probs;  // of the last run
};

Timing time_generate(ppo::CausalLM& model, const std::vector<std::vector<int64_t>>& prompts,
                     const std::vector<uint64_t>& seeds, const ppo::GenerationParams& p, int64_t repeats) {
  Timing timing;
  for (int64_t r = 0; r < repeats; ++r) {
    const int64_t reads_before = ppo::rollout_host_reads(), replays_before = ppo::rollout_graph_replays();
    const auto start = std::chrono::steady_clock::now();
    auto out = ppo::generate_responses(model, prompts, seeds, p);
    if (out.responses.is_cuda()) torch::cuda::synchronize();
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    timing.host_reads = ppo::rollout_host_reads() - reads_before;
    timing.graph_replays = ppo::rollout_graph_replays() - replays_before;
    timing.real_tokens = out.response_mask.sum().item<double>();
    timing.responses = out.responses;
    timing.log_probs = out.log_probs;
    if (p.eos_id < 0 && timing.real_tokens != double(prompts.size() * p.max_new_tokens)) {
      std::fprintf(stderr, "error: a row stopped early\n");
      std::exit(1);
    }
    timing.seconds = std::min(timing.seconds, seconds);
  }
  return timing;
}

#if TORCH_VERSION_MAJOR >= 2
// Summed durations by name, the costliest `top` as a JSON object {"name": [count, ms], ...}.
struct Tally {
  std::map<std::string, std::pair<int64_t, double>> by_name;
  int64_t count = 0;
  double ms = 0;
  void add(const std::string& name, double event_ms) {
    auto& entry = by_name[name];
    entry.first += 1;
    entry.second += event_ms;
    count += 1;
    ms += event_ms;
  }
  std::string top(size_t n) const {
    std::vector<std::pair<std::string, std::pair<int64_t, double>>> rows(by_name.begin(), by_name.end());
    std::sort(rows.begin(), rows.end(), [](const auto& a, const auto& b) { return a.second.second > b.second.second; });
    std::string out = "{";
    for (size_t i = 0; i < std::min(n, rows.size()); ++i) {
      std::string name = rows[i].first.substr(0, 80);
      for (char& c : name)
        if (c == '"' || c == '\\' || c < ' ') c = ' ';
      char cell[160];
      std::snprintf(cell, sizeof cell, "%s\"%s\":[%lld,%.3f]", i ? "," : "", name.c_str(),
                    (long long)rows[i].second.first, rows[i].second.second);
      out += cell;
    }
    return out + "}";
  }
};

// One KV-cache generation under the Kineto profiler (--profile), summarised as one JSON line.
void profile_generate(ppo::CausalLM& model, const std::vector<std::vector<int64_t>>& prompts,
                      const std::vector<uint64_t>& seeds, const ppo::GenerationParams& p, bool cuda) {
  namespace prof = torch::profiler::impl;
  const prof::ProfilerConfig config(prof::ProfilerState::KINETO);
  std::set<prof::ActivityType> activities = {prof::ActivityType::CPU};
  if (cuda) activities.insert(prof::ActivityType::CUDA);
  torch::autograd::profiler::prepareProfiler(config, activities);
  torch::autograd::profiler::enableProfiler(config, activities);
  const auto start = std::chrono::steady_clock::now();
  ppo::generate_responses(model, prompts, seeds, p);
  if (cuda) torch::cuda::synchronize();
  const double wall_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  const auto result = torch::autograd::profiler::disableProfiler();
  Tally kernels, copies, memsets, runtime, host_ops;
  for (const auto& e : result->events()) {
    const std::string name = e.name();
    const double ms = double(e.durationNs()) / 1e6;
    if (e.deviceType() == c10::DeviceType::CUDA) {
      if (name.rfind("Memcpy", 0) == 0)
        copies.add(name, ms);
      else if (name.rfind("Memset", 0) == 0)
        memsets.add(name, ms);
      else
        kernels.add(name, ms);
    } else if (name.rfind("cu", 0) == 0) {  // cudaLaunchKernel, cuLaunchKernelEx, ...
      runtime.add(name, ms);
    } else if (name.rfind("aten::", 0) == 0) {
      host_ops.add(name, ms);  // inclusive times: nested ops count in their callers too
    }
  }
  std::printf(
      "{\"impl\":\"ppo.cpp\",\"mode\":\"profile\",\"rows\":%zu,\"new_tokens\":%lld,\"wall_ms\":%.3f,"
      "\"kernels\":%lld,\"kernel_ms\":%.3f,\"device_busy\":%.3f,\"copies\":%lld,\"copy_ms\":%.3f,\"memsets\":%lld,"
      "\"runtime_calls\":%lld,\"runtime_ms\":%.3f,\"aten_ops\":%lld,\"top_kernels\":%s,\"top_runtime\":%s,"
      "\"top_aten\":%s,\"copies_by_kind\":%s}\n",
      prompts.size(), (long long)p.max_new_tokens, wall_ms, (long long)kernels.count, kernels.ms,
      wall_ms > 0 ? kernels.ms / wall_ms : 0.0, (long long)copies.count, copies.ms, (long long)memsets.count,
      (long long)runtime.count, runtime.ms, (long long)host_ops.count, kernels.top(12).c_str(), runtime.top(8).c_str(),
      host_ops.top(12).c_str(), copies.top(4).c_str());
}
#endif

// --count-ops: the ATen ops inside decode steps, by name. A step's scope sets the depth to 0; ops at depth 0 are
// the step's own calls (top level), deeper ones are the ops those call.
struct OpCounts {
  std::mutex mutex;
  std::map<std::string, int64_t> top_level;
  int64_t all = 0, steps = 0;
};
OpCounts g_ops;
thread_local int g_op_depth = -1;  // -1: outside a decode step

std::unique_ptr<at::ObserverContext> count_op_start(const at::RecordFunction& fn) {
  const std::string name = fn.name();
  if (fn.scope() == at::RecordScope::USER_SCOPE) {
    if (name == "ppo::decode_step") {
      g_op_depth = 0;
      std::lock_guard<std::mutex> lock(g_ops.mutex);
      ++g_ops.steps;
    }
    return nullptr;
  }
  if (g_op_depth < 0) return nullptr;
  {
    std::lock_guard<std::mutex> lock(g_ops.mutex);
    ++g_ops.all;
    if (g_op_depth == 0) ++g_ops.top_level[name];
  }
  ++g_op_depth;
  return nullptr;
}

void count_op_end(const at::RecordFunction& fn, at::ObserverContext*) {
  if (fn.scope() == at::RecordScope::USER_SCOPE) {
    if (std::string(fn.name()) == "ppo::decode_step") g_op_depth = -1;
    return;
  }
  if (g_op_depth > 0) --g_op_depth;
}

void count_ops(ppo::CausalLM& model, const std::vector<std::vector<int64_t>>& prompts,
               const std::vector<uint64_t>& seeds, const ppo::GenerationParams& p) {
  const auto handle = at::addGlobalCallback(at::RecordFunctionCallback(count_op_start, count_op_end)
                                                .needsInputs(false)
                                                .scopes({at::RecordScope::FUNCTION, at::RecordScope::USER_SCOPE}));
  ppo::generate_responses(model, prompts, seeds, p);
  at::removeCallback(handle);
  const double steps = double(std::max<int64_t>(g_ops.steps, 1));
  std::vector<std::pair<std::string, int64_t>> rows(g_ops.top_level.begin(), g_ops.top_level.end());
  std::sort(rows.begin(), rows.end(), [](const auto& a, const auto& b) { return a.second > b.second; });
  int64_t top_level = 0;
  std::string by_name = "{";
  for (size_t i = 0; i < rows.size(); ++i) {
    top_level += rows[i].second;
    char cell[160];
    std::snprintf(cell, sizeof cell, "%s\"%s\":%.2f", i ? "," : "", rows[i].first.c_str(),
                  double(rows[i].second) / steps);
    by_name += cell;
  }
  std::printf(
      "{\"impl\":\"ppo.cpp\",\"mode\":\"ops\",\"rows\":%zu,\"new_tokens\":%lld,\"steps\":%lld,"
      "\"ops_per_step\":%.2f,\"top_level_ops_per_step\":%.2f,\"top_level_by_name\":%s}}\n",
      prompts.size(), (long long)p.max_new_tokens, (long long)g_ops.steps, double(g_ops.all) / steps,
      double(top_level) / steps, by_name.c_str());
}

// The training forward and backward of --train; returns the best time of `repeats` after one warm-up.
double time_train_step(ppo::CausalLM& model, const torch::Tensor& ids, int64_t response_length, int64_t repeats) {
  const torch::Tensor mask = torch::ones_like(ids);
  const torch::Tensor positions = torch::arange(ids.size(1), ids.options()).expand_as(ids);
  double best = 1e30;
  for (int64_t r = 0; r <= repeats; ++r) {
    model->zero_grad();
    if (ids.is_cuda()) torch::cuda::synchronize();
    const auto start = std::chrono::steady_clock::now();
    const auto out = ppo::compute_log_probs(model, ids, mask, positions, response_length, /*temperature=*/1.0);
    out.log_probs.mean().neg().backward();
    if (ids.is_cuda()) torch::cuda::synchronize();
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (r > 0) best = std::min(best, seconds);  // r = 0 is the warm-up
  }
  return best;
}

int train_benchmark(const Args& args, ppo::CausalLM& model, const ppo::ModelConfig& config, int64_t vocab) {
  const torch::Device device = model->parameters()[0].device();
  const int64_t T = args.prompt_len + args.new_tokens;
  torch::manual_seed(1);
  const torch::Tensor ids = torch::randint(4, vocab, {args.batch, T}, torch::kLong).to(device);
  model->train();
  ppo::reset_memory_peak(device);
  const double seconds = time_train_step(model, ids, args.new_tokens, args.repeats);
  const double peak_gb = ppo::memory_stats(device).peak_bytes / double(1 << 30);
  const double tokens_per_s = double(args.batch * T) / seconds;
  if (args.json) {
    std::printf(
        "{\"impl\":\"ppo.cpp\",\"mode\":\"train\",\"torch\":\"%s\",\"device\":\"%s\",\"dtype\":\"%s\","
        "\"batch\":%lld,\"prompt_len\":%lld,\"new_tokens\":%lld,\"seconds\":%.6f,\"tokens_per_s\":%.1f,"
        "\"peak_memory_gb\":%.3f,\"params\":%lld}\n",
        TORCH_VERSION, args.device.c_str(), config.dtype.c_str(), (long long)args.batch, (long long)args.prompt_len,
        (long long)args.new_tokens, seconds, tokens_per_s, peak_gb, (long long)ppo::parameter_count(*model));
  } else {
    std::printf("train step (forward + backward, %lld x %lld tokens): %.3f s  %.0f tokens/s  peak %.2f GB\n",
                (long long)args.batch, (long long)T, seconds, tokens_per_s, peak_gb);
  }
  return 0;
}

// Whether the model can run on --device (else it says why on stderr).
bool device_usable(const Args& args, const ppo::ModelConfig& config) {
  if (args.device == "cuda") {
    if (!torch::cuda::is_available()) {
      std::fprintf(stderr, "error: --device cuda, and no CUDA device is visible\n");
      return false;
    }
  } else if (config.dtype != "float32") {
    std::fprintf(stderr, "error: model.dtype=%s computes only on CUDA: pass --device cuda\n", config.dtype.c_str());
    return false;
  }
  return true;
}

// --json: one line with the KV-cache timing.
void print_json(const Args& args, const ppo::ModelConfig& config, const ppo::GenerationParams& p, const Timing& cached,
                ppo::CausalLM& model) {
  std::printf(
      "{\"impl\":\"ppo.cpp\",\"torch\":\"%s\",\"device\":\"%s\",\"dtype\":\"%s\",\"threads\":%lld,\"batch\":%lld,"
      "\"slots\":%lld,\"prompt_len\":%lld,"
      "\"new_tokens\":%lld,\"eos_id\":%lld,\"seconds\":%.6f,\"real_tokens\":%.0f,\"tokens_per_s\":%.1f,"
      "\"host_reads\":%lld,\"params\":%lld,\"cuda_graphs\":%s,\"graph_replays\":%lld}\n",
      TORCH_VERSION, args.device.c_str(), config.dtype.c_str(), (long long)args.threads, (long long)args.batch,
      (long long)p.micro_batch_size, (long long)args.prompt_len, (long long)args.new_tokens, (long long)args.eos_id,
      cached.seconds, cached.real_tokens, cached.real_tokens / cached.seconds, (long long)cached.host_reads,
      (long long)ppo::parameter_count(*model), args.cuda_graphs && args.device == "cuda" ? "true" : "false",
      (long long)cached.graph_replays);
}

// The same generation by the recompute loop: its timing, and whether it gives the cached decoder's tokens.
void compare_with_recompute(ppo::CausalLM& model, const std::vector<std::vector<int64_t>>& prompts,
                            const std::vector<uint64_t>& seeds, const ppo::GenerationParams& p, int64_t repeats,
                            const Timing& cached) {
  const Timing recompute = time_generate(model, prompts, seeds, p, repeats);
  std::printf("recompute:  %.3f s  %.0f tokens/s\n", recompute.seconds, recompute.real_tokens / recompute.seconds);
  std::printf("speedup (kv_cache / recompute): %.2fx\n", recompute.seconds / cached.seconds);
  // The decoder against the plain loop that runs the whole sequence again at every step: the same seeds.
  const int64_t differing = cached.responses.ne(recompute.responses).sum().item<int64_t>();
  std::printf("tokens identical to the recompute loop: %s (%lld of %lld differ), max |log-prob diff| %.3g\n",
              differing == 0 ? "yes" : "no", (long long)differing, (long long)cached.responses.numel(),
              (cached.log_probs - recompute.log_probs).abs().max().item<double>());
}

}  // namespace

int main(int argc, char** argv) try {
  const Args args = parse_args(argc, argv);
  torch::set_num_threads(static_cast<int>(args.threads));
  ppo::ModelConfig config;  // defaults: D 64, 2 layers, 4 heads / 2 kv heads, SwiGLU 128
  if (!args.config.empty() || !args.overrides.empty()) {
    std::vector<std::string> files;
    if (!args.config.empty()) files.push_back(args.config);
    config = ppo::load_config(files, args.overrides).model;
  }
  config.max_position_embeddings = std::max(config.max_position_embeddings, args.prompt_len + args.new_tokens);
  auto tokenizer = ppo::make_tokenizer(config.tokenizer);
  if (!device_usable(args, config)) return 2;
  const int64_t vocab = config.vocab_size > 0 ? config.vocab_size : tokenizer->vocab_size();
  if (args.train) ppo::install_memory_tracker();  // the CPU's peak counts the parameters too, as CUDA's does
  ppo::CausalLM model(config, vocab);
  if (args.device == "cuda") model->to(torch::Device(torch::kCUDA, 0));
  if (args.train) return train_benchmark(args, model, config, vocab);

  std::vector<std::vector<int64_t>> prompts;
  std::vector<uint64_t> seeds;
  for (int64_t i = 0; i < args.batch; ++i) {
    std::vector<int64_t> prompt = {tokenizer->bos_id()};
    for (int64_t j = 1; j < args.prompt_len; ++j) prompt.push_back(4 + (i * 7 + j * 3) % 90);
    prompts.push_back(prompt);
    seeds.push_back(ppo::sample_seed(1, 0, i, 0));
  }
  ppo::GenerationParams p;
  p.max_new_tokens = args.new_tokens;
  p.temperature = 1.0;
  p.micro_batch_size = args.slots > 0 ? args.slots : args.batch;
  p.pad_id = tokenizer->pad_id();
  p.eos_id = args.eos_id;  // -1: never stop, every row generates new_tokens tokens
  p.check_interval = args.check_interval;
  p.cuda_graphs = args.cuda_graphs;

  p.use_cache = true;
  time_generate(model, prompts, seeds, p, 1);  // warm-up
  const Timing cached = time_generate(model, prompts, seeds, p, args.repeats);
  if (args.count_ops) count_ops(model, prompts, seeds, p);
  if (args.profile) {
#if TORCH_VERSION_MAJOR >= 2
    profile_generate(model, prompts, seeds, p, args.device == "cuda");
#else
    std::fprintf(stderr, "error: --profile needs LibTorch 2.x (its Kineto profiler)\n");
    return 2;
#endif
  }
  if (args.json) {
    print_json(args, config, p, cached, model);
    return 0;
  }
  std::printf(
      "bench_generate: threads %lld, batch %lld, slots %lld, prompt %lld, new tokens %lld, eos %lld, params "
      "%lld, best of %lld\n",
      (long long)args.threads, (long long)args.batch, (long long)p.micro_batch_size, (long long)args.prompt_len,
      (long long)args.new_tokens, (long long)args.eos_id, (long long)ppo::parameter_count(*model),
      (long long)args.repeats);
  std::printf("kv_cache:   %.3f s  %.0f tokens/s  (%.0f real tokens, %lld host reads)\n", cached.seconds,
              cached.real_tokens / cached.seconds, cached.real_tokens, (long long)cached.host_reads);
  if (!args.recompute) return 0;
  p.use_cache = false;
  compare_with_recompute(model, prompts, seeds, p, args.repeats, cached);
  return 0;
} catch (const ppo::UsageError& e) {
  std::fprintf(stderr, "error: %s\n", e.what());
  return 2;
}
