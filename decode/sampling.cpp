#include "decode/sampling.h"

#include <ATen/Parallel.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "common/random.h"

namespace ppo {

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

namespace {

// Keeps the top_k most likely entries of probs [B, V] (float64, vocabulary order), then the smallest set of most
// likely ones of mass >= top_p; zeroes the rest. Ties are ranked in vocabulary order (a stable sort).
torch::Tensor restrict_probs(const torch::Tensor& probs, int64_t top_k, double top_p) {
  const int64_t V = probs.size(-1);
  torch::Tensor sorted, order;
  std::tie(sorted, order) = torch::sort(probs, /*stable=*/true, /*dim=*/-1, /*descending=*/true);
  if (top_k > 0 && top_k < V) sorted.narrow(-1, top_k, V - top_k).zero_();
  if (top_p < 1.0) {
    auto renormed = sorted / sorted.sum(-1, /*keepdim=*/true);
    auto mass_before = renormed.cumsum(-1) - renormed;  // exclusive prefix sum
    auto drop = mass_before.ge(top_p);
    drop.narrow(-1, 0, 1).fill_(false);  // the most likely token always stays
    sorted.masked_fill_(drop, 0.0);
  }
  return torch::zeros_like(probs).scatter_(-1, order, sorted);
}

}  // namespace

torch::Tensor sampling_probs(const torch::Tensor& logits, double temperature, int64_t top_k, double top_p) {
  auto probs = torch::softmax(logits.to(torch::kDouble) / temperature, -1);  // [B, V]
  if ((top_k > 0 && top_k < logits.size(-1)) || top_p < 1.0) probs = restrict_probs(probs, top_k, top_p);
  return probs / probs.sum(-1, /*keepdim=*/true);
}

namespace {

// sample() on the ATen path.
Sampled sample_with_ops(const torch::Tensor& logits, const torch::Tensor& uniforms, double temperature, int64_t top_k,
                        double top_p) {
  auto x = logits.to(torch::kFloat);
  if (temperature > 0 && temperature != 1.0) x = x / temperature;
  auto log_probs = torch::log_softmax(x, -1);  // [B, V]
  torch::Tensor tokens;
  if (temperature <= 0) {
    tokens = logits.argmax(-1);
  } else {
    auto probs = log_probs.exp().to(torch::kDouble);
    if ((top_k > 0 && top_k < logits.size(-1)) || top_p < 1.0) probs = restrict_probs(probs, top_k, top_p);
    auto cdf = probs.cumsum(-1);  // [B, V], nondecreasing
    // The target stays below the total, so the first entry above it exists and has a nonzero probability.
    auto total = cdf.narrow(-1, cdf.size(-1) - 1, 1) * (1.0 - 0x1.0p-52);  // [B, 1]
    auto target = uniforms.to(cdf.options()).unsqueeze(1) * total;
    tokens = cdf.le(target).sum(-1);  // the first index with cdf > target
  }
  return {tokens, log_probs.gather(-1, tokens.unsqueeze(-1)).squeeze(-1)};
}

// Whether sample_rows_cpu applies: float32 logits [B, V] with contiguous rows and float64 uniforms on the CPU, no
// autograd, and no top-k or top-p.
bool sample_kernel_applies(const torch::Tensor& logits, const torch::Tensor& uniforms, int64_t top_k, double top_p) {
  return logits.is_cpu() && logits.scalar_type() == torch::kFloat && logits.dim() == 2 && logits.stride(1) == 1 &&
         !logits.requires_grad() && uniforms.is_cpu() && uniforms.scalar_type() == torch::kDouble &&
         (top_k <= 0 || top_k >= logits.size(1)) && top_p >= 1.0;
}

// sample() row by row with no ATen op: z = x / T (x when T is 0 or 1), its maximum m, e = exp(z - m) and their float64
// sum E (one exp per entry), then the first token whose running float64 sum of e exceeds u E (1 - 2^-52) (greedy:
// the first maximum); log-prob = z[token] - m - log E. The same distribution as the ATen path, which scans
// exp(log_softmax(z)) instead; each row on its own. tokens [B] int64 and log_probs [B] float32 are written.
void sample_rows_cpu(const torch::Tensor& logits, const torch::Tensor& uniforms, double temperature,
                     const torch::Tensor& tokens, const torch::Tensor& log_probs) {
  const int64_t B = logits.size(0), V = logits.size(1);
  TORCH_CHECK(uniforms.numel() >= B && tokens.numel() >= B && log_probs.numel() >= B &&
                  tokens.scalar_type() == torch::kLong && log_probs.scalar_type() == torch::kFloat,
              "sample: outputs and uniforms must have a row each");
  const bool greedy = temperature <= 0, scaled = !greedy && temperature != 1.0;
  const float t = static_cast<float>(temperature);
  const float* xp = logits.data_ptr<float>();
  const double* u = uniforms.data_ptr<double>();
  int64_t* tok = tokens.data_ptr<int64_t>();
  float* lp = log_probs.data_ptr<float>();
  const int64_t row = logits.stride(0), u_step = uniforms.stride(0), tok_step = tokens.stride(0),
                lp_step = log_probs.stride(0);
  at::parallel_for(0, B, 1, [&](int64_t begin, int64_t end) {
    std::vector<float> e(static_cast<size_t>(V));
    for (int64_t b = begin; b < end; ++b) {
      const float* x = xp + b * row;
      float top = -std::numeric_limits<float>::infinity();
      int64_t first_max = 0;
      for (int64_t v = 0; v < V; ++v) {
        e[v] = scaled ? x[v] / t : x[v];
        if (e[v] > top) top = e[v], first_max = v;
      }
      double sum = 0;
      for (int64_t v = 0; v < V; ++v) sum += (e[v] = std::exp(e[v] - top));
      int64_t token = first_max;
      if (!greedy) {
        // The target stays below the sum, so the first running sum above it exists, at a nonzero entry.
        const double target = u[b * u_step] * sum * (1.0 - 0x1.0p-52);
        double running = 0;
        token = 0;
        for (int64_t v = 0; v < V; ++v)
          if ((running += e[v]) > target) {
            token = v;
            break;
          }
      }
      const float z = scaled ? x[token] / t : x[token];
      tok[b * tok_step] = token;
      lp[b * lp_step] = static_cast<float>(static_cast<double>(z - top) - std::log(sum));
    }
  });
}

}  // namespace

Sampled sample(const torch::Tensor& logits, const torch::Tensor& uniforms, double temperature, int64_t top_k,
               double top_p) {
  if (!sample_kernel_applies(logits, uniforms, top_k, top_p))
    return sample_with_ops(logits, uniforms, temperature, top_k, top_p);
  Sampled s{torch::empty({logits.size(0)}, torch::kLong), torch::empty({logits.size(0)}, torch::kFloat)};
  sample_rows_cpu(logits, uniforms, temperature, s.tokens, s.log_probs);
  return s;
}

void sample_into(const torch::Tensor& logits, const torch::Tensor& uniforms, double temperature, int64_t top_k,
                 double top_p, const torch::Tensor& tokens, const torch::Tensor& log_probs) {
  if (sample_kernel_applies(logits, uniforms, top_k, top_p) && tokens.is_cpu() && log_probs.is_cpu()) {
    sample_rows_cpu(logits, uniforms, temperature, tokens, log_probs);
    return;
  }
  const Sampled s = sample_with_ops(logits, uniforms, temperature, top_k, top_p);
  tokens.copy_(s.tokens);
  log_probs.copy_(s.log_probs);
}

torch::Tensor sample_tokens(const torch::Tensor& logits, const torch::Tensor& uniforms, double temperature,
                            int64_t top_k, double top_p) {
  return sample(logits, uniforms, temperature, top_k, top_p).tokens;
}

torch::Tensor log_probs_from_logits(const torch::Tensor& logits, const torch::Tensor& labels) {
  return log_probs_at(logits, labels.unsqueeze(-1)).squeeze(-1);
}

torch::Tensor log_probs_at(const torch::Tensor& logits, const torch::Tensor& ids) {
  auto x = logits.to(torch::kFloat);                         // [B, T, V]
  return x.gather(-1, ids) - torch::logsumexp(x, -1, true);  // [B, T, K]
}

std::pair<torch::Tensor, torch::Tensor> top_log_probs(const torch::Tensor& logits, int64_t k, int64_t vocab) {
  torch::NoGradGuard no_grad;
  auto x = logits.to(torch::kFloat);
  const int64_t V = x.size(-1);
  auto [values, ids] = x.narrow(-1, 0, vocab > 0 ? std::min(vocab, V) : V).topk(k, -1);
  return {values - torch::logsumexp(x, -1, true), ids};
}

torch::Tensor entropy_from_logits(const torch::Tensor& logits) {
  auto x = logits.to(torch::kFloat);  // [B, T, V]
  return torch::logsumexp(x, -1) - (torch::softmax(x, -1) * x).sum(-1);
}

}  // namespace ppo
