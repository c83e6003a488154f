// Generation throughput: KV-cache decoding vs recomputing the whole sequence at every step.
// The model has the ModelConfig defaults (char vocabulary, V = 99); EOS stopping is disabled (eos_id = -1) so every
// row produces exactly --new-tokens tokens.
//
//   bench_generate [--threads N] [--batch B] [--prompt-len P] [--new-tokens R] [--repeats K]
//
// Build: add_executable(bench_generate bench/bench_generate.cpp) linked to ppo_core.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "model/tokenizer.h"
#include "model/transformer.h"
#include "rollout/rollout.h"

namespace {

struct Args {
  int64_t threads = 1;
  int64_t batch = 16;
  int64_t prompt_len = 16;
  int64_t new_tokens = 128;
  int64_t repeats = 3;  // best of K timed runs
};

Args parse_args(int argc, char** argv) {
  Args args;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string key = argv[i];
    const int64_t value = std::atoll(argv[i + 1]);
    if (key == "--threads")
      args.threads = value;
    else if (key == "--batch")
      args.batch = value;
    else if (key == "--prompt-len")
      args.prompt_len = value;
    else if (key == "--new-tokens")
      args.new_tokens = value;
    else if (key == "--repeats")
      args.repeats = value;
    else {
      std::fprintf(stderr, "error: unknown option %s\n", key.c_str());
      std::exit(2);
    }
  }
  return args;
}

// Best wall time (seconds) of `repeats` generations.
double time_generate(ppo::CausalLM& model, const std::vector<std::vector<int64_t>>& prompts,
                     const std::vector<uint64_t>& seeds, const ppo::GenerationParams& p, int64_t repeats) {
  double best = 1e30;
  for (int64_t r = 0; r < repeats; ++r) {
    const auto start = std::chrono::steady_clock::now();
    auto out = ppo::generate_responses(model, prompts, seeds, p);
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (out.response_mask.sum().item<double>() != double(prompts.size() * p.max_new_tokens)) {
      std::fprintf(stderr, "error: a row stopped early\n");
      std::exit(1);
    }
    best = std::min(best, seconds);
  }
  return best;
}

}  // namespace

int main(int argc, char** argv) {
  const Args args = parse_args(argc, argv);
  torch::set_num_threads(static_cast<int>(args.threads));
  ppo::ModelConfig config;  // defaults: D 64, 2 layers, 4 heads / 2 kv heads, SwiGLU 128
  auto tokenizer = ppo::make_tokenizer(config.tokenizer);
  ppo::CausalLM model(config, tokenizer->vocab_size());

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
  p.micro_batch_size = args.batch;
  p.pad_id = tokenizer->pad_id();
  p.eos_id = -1;  // never stop: every row generates new_tokens tokens

  p.use_cache = true;
  time_generate(model, prompts, seeds, p, 1);  // warm-up
  const double cached = time_generate(model, prompts, seeds, p, args.repeats);
  p.use_cache = false;
  const double recompute = time_generate(model, prompts, seeds, p, args.repeats);

  const double tokens = double(args.batch * args.new_tokens);
  std::printf("bench_generate: threads %lld, batch %lld, prompt %lld, new tokens %lld, params %lld, best of %lld\n",
              (long long)args.threads, (long long)args.batch, (long long)args.prompt_len, (long long)args.new_tokens,
              (long long)ppo::parameter_count(*model), (long long)args.repeats);
  std::printf("kv_cache:   %.3f s  %.0f tokens/s\n", cached, tokens / cached);
  std::printf("recompute:  %.3f s  %.0f tokens/s\n", recompute, tokens / recompute);
  std::printf("speedup (kv_cache / recompute): %.2fx\n", recompute / cached);
  return 0;
}
