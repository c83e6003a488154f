// Tests of model/: tokenizer, parameter names and counts, seeded init, config validation, and the attention
// equivalences (KV-cache decoding == full forward; left padding does not change real tokens' logits).
#include <catch2/catch.hpp>

#include <set>

#include "common/error.h"
#include "model/transformer.h"
#include "tests/model/small_model.h"
#include "text/tokenizers.h"

namespace {

// Small GQA config with q/k/v bias and an untied head: every optional path is exercised.
ppo::ModelConfig gqa_config() {
  ppo::ModelConfig c = ppo_test::small_model_config(/*num_layers=*/2, /*intermediate_size=*/48, /*seed=*/3);
  c.attention_bias = true;
  c.tie_word_embeddings = false;
  c.init_std = 0.2;  // larger than the default so that attention is far from uniform and errors would show
  return c;
}

struct Batch {
  torch::Tensor ids, mask, positions;  // [B, T]
};

// Left-pads `rows` to a common width (pad id 0).
Batch left_padded(const std::vector<std::vector<int64_t>>& rows, int64_t width) {
  const int64_t B = static_cast<int64_t>(rows.size());
  Batch batch{torch::zeros({B, width}, torch::kLong), torch::zeros({B, width}, torch::kLong), {}};
  for (int64_t b = 0; b < B; ++b) {
    const int64_t offset = width - static_cast<int64_t>(rows[b].size());
    for (size_t j = 0; j < rows[b].size(); ++j) {
      batch.ids[b][offset + j] = rows[b][j];
      batch.mask[b][offset + j] = 1;
    }
  }
  batch.positions = (batch.mask.cumsum(1) - 1).clamp_min(0);
  return batch;
}

// Max |a - b| over the positions where mask [B, T] is 1; a, b [B, T, V].
double max_diff_at(const torch::Tensor& a, const torch::Tensor& b, const torch::Tensor& mask) {
  auto diff = (a - b).abs().amax(-1) * mask.to(torch::kFloat);
  return diff.max().item<double>();
}

}  // namespace

TEST_CASE("char tokenizer round trip, specials and fallback", "[cpu][model]") {
  auto tok = ppo::make_tokenizer("char");
  REQUIRE(tok->vocab_size() == 99);  // 3 specials + '\n' + 95 printable characters (32..126)
  REQUIRE(tok->pad_id() == 0);
  REQUIRE(tok->bos_id() == 1);
  REQUIRE(tok->eos_id() == 2);
  const std::string text = "Hello, World!\n0123 ~{}";
  auto ids = tok->encode(text);
  REQUIRE(ids.size() == text.size());
  CHECK(tok->decode(ids) == text);
  CHECK(ids[0] == 4 + ('H' - 32));  // printable characters start at id 4
  CHECK(tok->encode("\n")[0] == 3);
  CHECK(tok->encode(" ")[0] == 4);
  CHECK(tok->encode("~")[0] == 98);
  // Unknown bytes (here a UTF-8 'e acute', two bytes) fall back to '?'; tab becomes a space.
  CHECK(tok->decode(tok->encode("caf\xc3\xa9\t")) == "caf?? ");
  std::vector<int64_t> with_specials = {1, 4 + ('a' - 32), 2, 0};
  CHECK(tok->decode(with_specials) == "a");
  CHECK(tok->decode(with_specials, /*skip_special=*/false) == "<bos>a<eos><pad>");
  CHECK(tok->decode({500}) == "?");
  CHECK_THROWS_AS(ppo::make_tokenizer("gpt2"), ppo::UsageError);
  CHECK_THROWS_WITH(ppo::make_tokenizer("gpt2"), Catch::Contains("model.tokenizer"));
}

TEST_CASE("parameter names follow Hugging Face", "[cpu][model]") {
  auto config = gqa_config();
  ppo::CausalLM untied(config, 20);
  auto params = untied->named_parameters();
  for (const char* name :
       {"model.embed_tokens.weight", "model.norm.weight", "lm_head.weight", "model.layers.0.self_attn.q_proj.weight",
        "model.layers.0.self_attn.q_proj.bias", "model.layers.1.self_attn.k_proj.weight",
        "model.layers.1.self_attn.k_proj.bias", "model.layers.1.self_attn.v_proj.bias",
        "model.layers.1.self_attn.o_proj.weight", "model.layers.1.mlp.gate_proj.weight",
        "model.layers.1.mlp.up_proj.weight", "model.layers.1.mlp.down_proj.weight",
        "model.layers.1.input_layernorm.weight", "model.layers.1.post_attention_layernorm.weight"}) {
    INFO(name);
    CHECK(params.contains(name));
  }
  CHECK_FALSE(params.contains("model.layers.0.self_attn.o_proj.bias"));  // o_proj never has a bias
  CHECK(params["model.layers.0.self_attn.k_proj.weight"].sizes() == torch::IntArrayRef({16, 32}));  // [H_kv*Dh, D]
  CHECK(params["lm_head.weight"].sizes() == torch::IntArrayRef({20, 32}));

  config.tie_word_embeddings = true;
  config.attention_bias = false;
  ppo::CausalLM tied(config, 20);
  auto tied_params = tied->named_parameters();
  CHECK_FALSE(tied_params.contains("lm_head.weight"));
  CHECK_FALSE(tied_params.contains("model.layers.0.self_attn.q_proj.bias"));

  ppo::ValueModel critic(config, 20);
  auto critic_params = critic->named_parameters();
  CHECK(critic_params.contains("value_head.weight"));
  CHECK(critic_params.contains("value_head.bias"));
  CHECK(critic_params.contains("model.layers.1.mlp.down_proj.weight"));
}

TEST_CASE("parameter count matches the closed form", "[cpu][model]") {
  // V = 10, D = 8, L = 2, H = 4, H_kv = 2 (Dh = 2), I = 12, q/k/v bias, untied:
  //   embed V*D = 80
  //   per layer: q D*D + D = 72, k D*(H_kv*Dh) + 4 = 36, v 36, o D*D = 64, mlp 3*D*I = 288, two norms 2*D = 16
  //              -> 512, times L = 1024
  //   final norm D = 8, lm_head V*D = 80       total 80 + 1024 + 8 + 80 = 1192; tied: 1112
  //   value model (tied backbone) 80 + 1024 + 8 + value_head D + 1 = 1121
  ppo::ModelConfig c;
  c.hidden_size = 8;
  c.num_layers = 2;
  c.num_heads = 4;
  c.num_kv_heads = 2;
  c.intermediate_size = 12;
  c.attention_bias = true;
  c.tie_word_embeddings = false;
  CHECK(ppo::parameter_count(*ppo::CausalLM(c, 10)) == 1192);
  c.tie_word_embeddings = true;
  CHECK(ppo::parameter_count(*ppo::CausalLM(c, 10)) == 1112);
  CHECK(ppo::parameter_count(*ppo::ValueModel(c, 10)) == 1121);
}

TEST_CASE("config validation names the keys", "[cpu][model]") {
  ppo::ModelConfig c;
  c.num_kv_heads = 3;  // 4 heads
  CHECK_THROWS_WITH(ppo::CausalLM(c, 10), Catch::Contains("model.num_kv_heads"));
  c = ppo::ModelConfig();
  c.hidden_size = 66;  // 66 / 4 heads
  CHECK_THROWS_WITH(ppo::CausalLM(c, 10), Catch::Contains("model.hidden_size"));
  c = ppo::ModelConfig();
  c.dtype = "fp8";
  CHECK_THROWS_AS(ppo::CausalLM(c, 10), ppo::UsageError);
  c = ppo::ModelConfig();
  CHECK_THROWS_WITH(ppo::CausalLM(c, 0), Catch::Contains("model.vocab_size"));
}

TEST_CASE("seeded init is reproducible and independent of the global RNG", "[cpu][model]") {
  auto config = gqa_config();
  config.init_std = 0.02;
  torch::manual_seed(1);
  ppo::CausalLM a(config, 50);
  torch::manual_seed(99);
  torch::rand({100});
  ppo::CausalLM b(config, 50);
  auto pa = a->named_parameters(), pb = b->named_parameters();
  for (const auto& item : pa) {
    INFO(item.key());
    CHECK(torch::equal(item.value(), pb[item.key()]));
  }
  // Scheme: N(0, std) weights, ones for norms, zeros for biases.
  auto embed = pa["model.embed_tokens.weight"];
  CHECK(std::abs(embed.std().item<double>() - 0.02) < 0.002);  // 50 * 32 = 1600 draws: se of std ~ 0.02/sqrt(3200)
  CHECK(torch::equal(pa["model.norm.weight"], torch::ones({32})));
  CHECK(torch::equal(pa["model.layers.0.self_attn.q_proj.bias"], torch::zeros({32})));
  // Different layers draw different values; a different seed changes the weights.
  CHECK_FALSE(torch::equal(pa["model.layers.0.mlp.up_proj.weight"], pa["model.layers.1.mlp.up_proj.weight"]));
  config.seed = 4;
  ppo::CausalLM c(config, 50);
  CHECK_FALSE(torch::equal(pa["model.embed_tokens.weight"], c->named_parameters()["model.embed_tokens.weight"]));
  // The critic built from the same config starts from the same backbone as the policy.
  config.seed = 3;
  ppo::ValueModel critic(config, 50);
  CHECK(torch::equal(pa["model.layers.1.mlp.down_proj.weight"],
                     critic->named_parameters()["model.layers.1.mlp.down_proj.weight"]));
}

// KV-cache decoding on `device` equals the full forward there, also after trim and select.
static void check_kv_cache(const torch::Device& device) {
  torch::NoGradGuard no_grad;
  ppo::CausalLM model(gqa_config(), 20);
  model->to(device);
  // Three sequences of 7, 5 and 9 real tokens, left-padded to width 9; the last 6 columns are "generated".
  const int64_t P = 3, total = 9;
  Batch full = left_padded({{5, 6, 7, 8, 9, 10, 11}, {12, 13, 14, 15, 16}, {3, 4, 5, 6, 7, 8, 9, 10, 11}}, total);
  full = {full.ids.to(device), full.mask.to(device), full.positions.to(device)};
  auto reference = model->forward(full.ids, full.positions, full.mask);  // [3, 9, V]
  REQUIRE_FALSE(torch::isnan(reference).any().item<bool>());             // pad queries produce no NaN

  // Prefill P columns, then one column per step, then the last two columns in one call.
  ppo::KVCache cache;
  std::vector<torch::Tensor> pieces;
  std::vector<std::pair<int64_t, int64_t>> spans = {{0, P}, {P, 1}, {P + 1, 1}, {P + 2, 1}, {P + 3, 1}, {P + 4, 2}};
  for (auto span : spans) {
    auto cols = [&](const torch::Tensor& t) { return t.narrow(1, span.first, span.second); };
    pieces.push_back(
        model->forward(cols(full.ids), cols(full.positions), full.mask.narrow(1, 0, span.first + span.second), &cache));
  }
  REQUIRE(cache.length() == total);
  auto incremental = torch::cat(pieces, 1);
  const double diff = max_diff_at(incremental, reference, full.mask);
  WARN("KV-cache vs full forward, max |logit diff| over real tokens: " << diff);
  CHECK(diff <= 1e-5);
  CHECK(reference.abs().max().item<double>() > 0.1);  // logits are not trivially zero

  // select(): keep rows 2 and 0, decode their last column again from a trimmed cache.
  cache.trim(total - 1);
  cache.select(torch::tensor({2, 0}, torch::kLong).to(device));
  auto rows = torch::tensor({2, 0}, torch::kLong).to(device);
  auto last = model->forward(full.ids.index_select(0, rows).narrow(1, total - 1, 1),
                             full.positions.index_select(0, rows).narrow(1, total - 1, 1),
                             full.mask.index_select(0, rows), &cache);
  auto expected = reference.index_select(0, rows).narrow(1, total - 1, 1);
  const double select_diff = (last - expected).abs().max().item<double>();
  WARN("KV-cache after trim + select, max |logit diff|: " << select_diff);
  CHECK(select_diff <= 1e-5);
}

TEST_CASE("KV-cache decoding equals the full forward (left padding, GQA)", "[cpu][model]") {
  check_kv_cache(torch::kCPU);
}

TEST_CASE("KV-cache decoding equals the full forward on CUDA, and CUDA logits equal the CPU's", "[gpu][model]") {
  const torch::Device cuda(torch::kCUDA, 0);
  check_kv_cache(cuda);
  // fp32 on both devices: cuBLAS and the CPU BLAS sum in different orders, nothing more. LibTorch leaves TF32 off for
  // matmuls unless asked.
  torch::NoGradGuard no_grad;
  ppo::CausalLM model(gqa_config(), 20);
  Batch full = left_padded({{5, 6, 7, 8, 9, 10, 11}, {12, 13, 14, 15, 16}, {3, 4, 5, 6, 7, 8, 9, 10, 11}}, 9);
  auto on_cpu = model->forward(full.ids, full.positions, full.mask);
  model->to(cuda);
  auto on_cuda = model->forward(full.ids.to(cuda), full.positions.to(cuda), full.mask.to(cuda)).cpu();
  const double diff = max_diff_at(on_cuda, on_cpu, full.mask);
  WARN("CUDA vs CPU logits, max |diff| over real tokens: " << diff);
  CHECK(diff <= 1e-4 * on_cpu.abs().max().item<double>());
  // bf16 autocast on CUDA (fp32 parameters): the log-probs the PPO ratio uses move by a few hundredths. bfloat16 keeps
  // 8 significant bits (a relative step of 2^-8 = 0.004 per rounding); the largest move over every real token here
  // was 0.076 on an H200, so the bound is twice that: a wrong cast or a dropped autocast region moves them by units.
  auto config = gqa_config();
  config.autocast_dtype = "bfloat16";
  ppo::CausalLM mixed(config, 20);
  mixed->to(cuda);
  auto low = mixed->forward(full.ids.to(cuda), full.positions.to(cuda), full.mask.to(cuda)).cpu();
  CHECK(low.scalar_type() == torch::kBFloat16);
  const auto lp32 = torch::log_softmax(on_cpu, -1), lp16 = torch::log_softmax(low.to(torch::kFloat), -1);
  const double lp_diff = max_diff_at(lp16, lp32, full.mask);
  WARN("bf16 autocast vs fp32 on CUDA, max |log-prob diff| over real tokens: " << lp_diff);
  CHECK(lp_diff > 0);
  CHECK(lp_diff <= 0.15);
}

TEST_CASE("left padding does not change the logits of real tokens", "[cpu][model]") {
  torch::NoGradGuard no_grad;
  ppo::CausalLM model(gqa_config(), 20);
  const std::vector<int64_t> prompt = {4, 9, 2, 17, 3, 8};
  Batch alone = left_padded({prompt}, 6);
  Batch padded = left_padded({prompt, {1, 2, 3, 4, 5, 6, 7, 8, 9, 10}}, 10);  // 4 pads before `prompt`
  auto a = model->forward(alone.ids, alone.positions, alone.mask);            // [1, 6, V]
  auto b = model->forward(padded.ids, padded.positions, padded.mask);         // [2, 10, V]
  REQUIRE_FALSE(torch::isnan(b).any().item<bool>());
  const double diff = (a[0] - b[0].narrow(0, 4, 6)).abs().max().item<double>();
  WARN("same prompt, 0 vs 4 left pads, max |logit diff|: " << diff);
  CHECK(diff <= 1e-5);
  // Sanity: the mask matters (without it, the pads change the logits).
  auto unmasked = model->forward(padded.ids, torch::arange(10).repeat({2, 1}), torch::ones({2, 10}, torch::kLong));
  CHECK((a[0] - unmasked[0].narrow(0, 4, 6)).abs().max().item<double>() > 1e-3);
}

TEST_CASE("value model returns one float value per token", "[cpu][model]") {
  auto config = gqa_config();
  ppo::ValueModel critic(config, 20);
  Batch batch = left_padded({{3, 4, 5}, {6, 7}}, 3);
  auto values = critic->forward(batch.ids, batch.positions, batch.mask);
  CHECK(values.sizes() == torch::IntArrayRef({2, 3}));
  CHECK(values.scalar_type() == torch::kFloat);
  values.sum().backward();
  CHECK(critic->value_head->weight.grad().abs().sum().item<double>() > 0);
}

TEST_CASE("bfloat16 model runs and stays close to float32", "[cpu][model]") {
  torch::NoGradGuard no_grad;
  auto config = gqa_config();
  ppo::CausalLM fp32(config, 20);
  config.dtype = "bfloat16";
  ppo::CausalLM bf16(config, 20);
  CHECK(bf16->model->embed_tokens->weight.scalar_type() == torch::kBFloat16);
  Batch batch = left_padded({{3, 4, 5, 6}, {6, 7}}, 4);
  auto a = fp32->forward(batch.ids, batch.positions, batch.mask);
  auto b = bf16->forward(batch.ids, batch.positions, batch.mask).to(torch::kFloat);
  // bf16 keeps 8 significant bits (relative error ~4e-3 per op); logits are O(1) here.
  const double diff = max_diff_at(a, b, batch.mask);
  const double scale = a.abs().max().item<double>();
  WARN("bf16 vs fp32, max |logit diff| " << diff << " (max |logit| " << scale << ")");
  CHECK(diff <= 0.05 * std::max(1.0, scale));
}

TEST_CASE("rotary embedding: logits depend only on relative positions", "[cpu][model]") {
  // RoPE rotates q and k by angles proportional to their positions, so q.k depends on the position difference
  // only: shifting every position by a constant leaves the logits unchanged (up to float rounding of the angles).
  // A rotation applied with mismatched conventions to q and k, or not at all to one of them, breaks this.
  torch::NoGradGuard no_grad;
  ppo::CausalLM model(gqa_config(), 20);
  auto ids = torch::tensor({{3, 9, 4, 11, 5, 17, 2}}, torch::kLong);
  auto positions = torch::arange(7).unsqueeze(0);
  auto a = model->forward(ids, positions, {});
  auto b = model->forward(ids, positions + 5, {});
  const double diff = (a - b).abs().max().item<double>();
  WARN("positions shifted by 5, max |logit diff|: " << diff);
  CHECK(diff <= 1e-4);
  // ... while reversing the positions (not a shift) changes them.
  auto c = model->forward(ids, 6 - positions, {});
  CHECK((a - c).abs().max().item<double>() > 1e-2);
}

TEST_CASE("grouped-query attention shares kv head h / n_rep, as Hugging Face repeat_kv", "[cpu][model]") {
  // A GQA model (4 query heads, 2 kv heads) equals the multi-head model whose kv heads are the GQA kv heads
  // repeated as repeat_kv does: kv head j serves query heads 2j and 2j + 1.
  torch::NoGradGuard no_grad;
  auto config = gqa_config();
  ppo::CausalLM gqa(config, 20);
  config.num_kv_heads = 4;
  ppo::CausalLM mha(config, 20);
  auto source = gqa->named_parameters();
  for (auto& item : mha->named_parameters()) {
    auto value = source[item.key()];
    if (item.key().find("k_proj") != std::string::npos || item.key().find("v_proj") != std::string::npos) {
      const int64_t head_dim = 32 / 4;  // rows are [H_kv * Dh] = kv head major
      value = value.view({2, head_dim, -1}).repeat_interleave(2, 0).reshape(item.value().sizes());
    }
    item.value().copy_(value);
  }
  Batch batch = left_padded({{3, 4, 5, 6, 7}, {8, 9, 10}}, 5);
  auto a = gqa->forward(batch.ids, batch.positions, batch.mask);
  auto b = mha->forward(batch.ids, batch.positions, batch.mask);
  const double diff = max_diff_at(a, b, batch.mask);
  WARN("GQA vs MHA with repeated kv heads, max |logit diff|: " << diff);
  CHECK(diff <= 1e-5);
}

TEST_CASE("sdpa and eager attention agree: padded forward, KV-cache decoding and gradients", "[cpu][model]") {
  ppo::ModelConfig config = gqa_config();
  config.attn_implementation = "eager";
  CHECK_FALSE(ppo::use_sdpa("eager"));
  CHECK(ppo::use_sdpa("auto") == ppo::sdpa_available());
  CHECK_THROWS_WITH(ppo::use_sdpa("flash"), Catch::Contains("valid: auto | eager | sdpa"));
  if (!ppo::sdpa_available()) {  // LibTorch 1.13: sdpa is refused with a hint; auto is eager
    CHECK_THROWS_WITH(ppo::use_sdpa("sdpa"), Catch::Contains("needs LibTorch >= 2.1"));
    return;
  }
  ppo::CausalLM eager(config, 20);
  config.attn_implementation = "sdpa";
  ppo::CausalLM sdpa(config, 20);  // same seed: same weights
  Batch batch = left_padded({{5, 6, 7, 8, 9, 10, 11}, {12, 13, 14}, {3, 4, 5, 6, 7, 8, 9, 10, 11}}, 9);

  // Training forward with autograd, then the gradients of a loss over the real tokens.
  auto a = eager->forward(batch.ids, batch.positions, batch.mask);
  auto b = sdpa->forward(batch.ids, batch.positions, batch.mask);
  REQUIRE_FALSE(torch::isnan(b).any().item<bool>());  // pad queries (no allowed key) stay finite
  const double forward_diff = max_diff_at(a, b, batch.mask);
  WARN("sdpa vs eager, max |logit diff| over real tokens: " << forward_diff);
  CHECK(forward_diff <= 1e-5);
  const auto weights = batch.mask.to(torch::kFloat).unsqueeze(-1);
  (a * weights).pow(2).sum().backward();
  (b * weights).pow(2).sum().backward();
  double grad_diff = 0, grad_scale = 0;
  const auto ga = eager->named_parameters(), gb = sdpa->named_parameters();
  for (const auto& item : ga) {
    grad_diff = std::max(grad_diff, (item.value().grad() - gb[item.key()].grad()).abs().max().item<double>());
    grad_scale = std::max(grad_scale, item.value().grad().abs().max().item<double>());
  }
  WARN("sdpa vs eager, max |grad diff| " << grad_diff << " (max |grad| " << grad_scale << ")");
  CHECK(grad_diff <= 1e-5 * grad_scale);

  // Decoding with the KV cache: prefill 4 columns, then one column per step.
  torch::NoGradGuard no_grad;
  ppo::KVCache cache;
  std::vector<torch::Tensor> pieces;
  for (int64_t start = 0; start < 9; start += start == 0 ? 4 : 1) {
    const int64_t width = start == 0 ? 4 : 1;
    auto cols = [&](const torch::Tensor& t) { return t.narrow(1, start, width); };
    pieces.push_back(
        sdpa->forward(cols(batch.ids), cols(batch.positions), batch.mask.narrow(1, 0, start + width), &cache));
  }
  const double decode_diff = max_diff_at(torch::cat(pieces, 1), a.detach(), batch.mask);
  WARN("sdpa KV-cache decoding vs eager full forward, max |logit diff|: " << decode_diff);
  CHECK(decode_diff <= 1e-5);
}

TEST_CASE("bfloat16 autocast: low-precision matmuls, float32 parameters, state restored", "[cpu][model]") {
  auto config = gqa_config();
  ppo::CausalLM fp32(config, 20);
  config.autocast_dtype = "bfloat16";
  ppo::CausalLM mixed(config, 20);
  CHECK(mixed->model->embed_tokens->weight.scalar_type() == torch::kFloat);
  Batch batch = left_padded({{3, 4, 5, 6, 9, 2}, {6, 7}}, 6);
  torch::Tensor a, b;
  {
    torch::NoGradGuard no_grad;
    a = fp32->forward(batch.ids, batch.positions, batch.mask);
    b = mixed->forward(batch.ids, batch.positions, batch.mask);
  }
  CHECK(b.scalar_type() == torch::kBFloat16);  // the LM head ran in bfloat16
  const double diff = max_diff_at(a, b.to(torch::kFloat), batch.mask);
  const double scale = a.abs().max().item<double>();
  WARN("bf16 autocast vs fp32, max |logit diff| " << diff << " (max |logit| " << scale << ")");
  CHECK(diff > 0);  // it did change the arithmetic
  CHECK(diff <= 0.05 * std::max(1.0, scale));
  // Outside the model's forward, autocast is off again: a float32 matmul stays float32.
  CHECK(torch::matmul(a[0], a[0].transpose(0, 1)).scalar_type() == torch::kFloat);
  CHECK_THROWS_WITH(ppo::AutocastGuard("fp8", torch::kCPU), Catch::Contains("none | bfloat16 | float16"));

  // Gradient checkpointing recomputes under the same autocast: identical gradients.
  config.enable_gradient_checkpointing = true;
  ppo::CausalLM checkpointed(config, 20);
  const auto weights = batch.mask.to(torch::kFloat).unsqueeze(-1);
  (mixed->forward(batch.ids, batch.positions, batch.mask).to(torch::kFloat) * weights).pow(2).sum().backward();
  (checkpointed->forward(batch.ids, batch.positions, batch.mask).to(torch::kFloat) * weights).pow(2).sum().backward();
  const auto gm = mixed->named_parameters(), gc = checkpointed->named_parameters();
  for (const auto& item : gm) {
    INFO(item.key());
    CHECK(item.value().grad().scalar_type() == torch::kFloat);
    CHECK(torch::equal(item.value().grad(), gc[item.key()].grad()));
  }
}
