// Decoder-only transformer of the LLaMA / Qwen2 family: token embedding, RMSNorm, rotary position embedding,
// grouped-query attention (optional q/k/v bias), SwiGLU MLP, tied or untied LM head, and a scalar value head.
// Parameter names match Hugging Face `LlamaForCausalLM` / `Qwen2ForCausalLM` so that checkpoints load by name:
//   model.embed_tokens.weight, model.layers.{i}.self_attn.{q,k,v,o}_proj.weight (+ q/k/v .bias),
//   model.layers.{i}.mlp.{gate,up,down}_proj.weight, model.layers.{i}.{input,post_attention}_layernorm.weight,
//   model.norm.weight, lm_head.weight (absent when tied), value_head.{weight,bias} (ValueModel only).
// Reference: transformers/models/llama/modeling_llama.py (LlamaRMSNorm, rotate_half, apply_rotary_pos_emb,
// repeat_kv, LlamaAttention, LlamaMLP, LlamaDecoderLayer).
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

#include "common/config.h"
#include "model/packed_gemm.h"

namespace ppo {

// One projection for no-grad decoding, x w (+ bias), in the dtype the matmuls run in (compute_dtype: the autocast
// dtype when model.autocast_dtype is set, else model.dtype), with w held as the [in, out] operand of x w: float32 on
// the CPU packed once (model/packed_gemm.h: each product then streams it with no per-call packing), elsewhere the
// transpose of the [out, in] weight (a view; o's and down's the module's own tensor when nothing merges or casts).
struct FusedProjection {
  PackedWeight packed;    // float32 on the CPU
  torch::Tensor operand;  // [in, out] elsewhere (undefined when packed)
  torch::Tensor bias;     // [out], undefined without one
  int64_t out_features() const { return packed.panels.defined() ? packed.cols : operand.size(1); }
  // x [..., in] -> [..., out].
  torch::Tensor operator()(const torch::Tensor& x) const;
  // out [S, out] = x w (+ bias), or with `accumulate` out += x w (+ bias): x [S, in] and out in the compute dtype,
  // written in place (packed: with no ATen op).
  void into(const torch::Tensor& x, const torch::Tensor& out, bool accumulate) const;
};
// The projection of `weight` [out, in] (+ `bias` [out], may be undefined) in `dtype`.
FusedProjection fuse_projection(const torch::Tensor& weight, const torch::Tensor& bias, torch::ScalarType dtype);

// The projections of one decoder layer for no-grad decoding, LoRA's adapters merged in: [q; k; v] and [gate; up]
// stacked along the output dimension, so that a decode step runs one matmul where the modules run three (and two).
// Built once per generation (TransformerImpl::fused_weights; the weights do not change inside one), so that no step
// casts or packs a weight.
struct FusedLayerWeights {
  FusedProjection qkv;      // D -> (H + 2 H_kv) Dh, with the biases of model.attention_bias
  FusedProjection o;        // H Dh -> D
  FusedProjection gate_up;  // D -> 2 I
  FusedProjection down;     // I -> D
};
using FusedWeights = std::shared_ptr<const std::vector<FusedLayerWeights>>;

// Key/value cache of every layer for incremental decoding. Rows are sequences; all rows share one length
// (left padding keeps them aligned; the attention mask says which cached positions are real).
// Without autograd, storage grows by doubling and new entries are written in place; with autograd enabled the
// cache concatenates instead, so that it stays differentiable.
// A static cache (allocate_static) has a fixed capacity and row count for its whole life: the decode step
// (TransformerImpl::forward_step) writes each layer's new key and value at the device-side position `write_at` and
// attends over the whole capacity, so that the step has the same shapes and addresses every time (a CUDA graph can
// replay it); the host keeps the length with advance().
struct KVCache {
  struct Entry {
    torch::Tensor key, value;  // [B, H_kv, T_cached, Dh]
  };
  std::vector<torch::Tensor> keys, values;  // per layer [B, H_kv, capacity, Dh]
  std::vector<int64_t> lengths;             // per layer, valid positions
  int64_t capacity_hint = 0;                // positions reserved on first use (e.g. prompt + new tokens)
  FusedWeights fused;                       // when set (no-grad forwards only), the layers project with these
  torch::Tensor write_at;                   // static cache: [1] int64 on the device, the position a step writes

  int64_t length() const { return lengths.empty() ? 0 : lengths[0]; }  // cached positions (T_cached)
  int64_t batch_size() const { return keys.empty() || !keys[0].defined() ? 0 : keys[0].size(0); }
  int64_t capacity() const { return keys.empty() || !keys[0].defined() ? 0 : keys[0].size(2); }
  // Zeros for `rows` rows of `capacity` positions, each layer's keys and values shaped (heads, head dim) and typed as
  // `like`'s (a prefill's cache), length 0, write_at 0; `fused` is kept. Zeros: a position no row has written is
  // masked, and must hold a finite value for the masked scores to be exact.
  void allocate_static(const KVCache& like, int64_t rows, int64_t capacity);
  // Appends `key`, `value` [B, H_kv, T, Dh] to `layer`; returns that layer's whole cache [B, H_kv, T_cached, Dh].
  Entry append(int64_t layer, const torch::Tensor& key, const torch::Tensor& value);
  // Static cache: writes `key`, `value` [B, H_kv, 1, Dh] into the first B rows of `layer` at position write_at;
  // returns those rows over the whole capacity [B, H_kv, capacity, Dh].
  Entry write_step(int64_t layer, const torch::Tensor& key, const torch::Tensor& value);
  // Static cache, on the host: the steps since the last call wrote `count` positions.
  void advance(int64_t count);
  // Forgets every position at or beyond `length`.
  void trim(int64_t length);
  // Keeps only the rows `rows` ([B'] int64, on the cache's device), in that order. A static cache moves them to its
  // first B' rows in place (its storage stays).
  void select(const torch::Tensor& rows);
  // Forgets positions [0, count) of every row and moves the rest to the front (in place, capacity unchanged).
  void drop_front(int64_t count);
  // Copies every position of `source` (same layers, B' rows) into rows `rows` ([B'] int64) at positions
  // [at, at + source.length()); `at + source.length()` must not exceed this cache's length.
  void write_rows(const torch::Tensor& rows, const KVCache& source, int64_t at);
  void clear();
};

struct RMSNormImpl : torch::nn::Module {
  RMSNormImpl(int64_t dim, double eps);
  torch::Tensor forward(const torch::Tensor& x);  // [..., D] -> [..., D]
  // The decode step's norm of x [S, D] into out [S, D]: with `kernels`, float32 on the CPU without autograd, one
  // fused loop (the same maths, its sum taken in another order, so it rounds differently by about float32's
  // epsilon); otherwise forward, copied into out (in out's dtype).
  void forward_step(const torch::Tensor& x, const torch::Tensor& out, bool kernels);
  torch::Tensor weight;  // [D]
  double eps;
};
TORCH_MODULE(RMSNorm);

// Packed sequences of similar length, attended together as a padded [n, heads, L, Dh] batch (model/packing.h).
struct SegmentBucket {
  torch::Tensor gather;           // [n * L] int64: the packed position each padded slot reads (padding slots read 0)
  torch::Tensor bias;             // [n, 1, L, L] additive mask: causal, and padding keys masked
  int64_t count = 0, length = 0;  // n, L
};

// The attention plan of one packed forward: sequences sorted by length and cut into at most `max_buckets` buckets
// so that the padded attention work plus the buckets' fixed cost is least (an exact dynamic programme): a bucket's L
// is its longest sequence's length rounded up to a multiple of 64 (so that rounding does not depend on which
// sequences share a micro-batch), its work n x L^2 x `width` multiply-adds, its fixed cost kBucketCost (the host time
// of its dozen attention calls per layer, forward and backward, about 100 us on a CPU core, at about 1.6e11
// multiply-adds per second). Long sequences get buckets of their own; many short ones share few. `order` [N] int64: for
// each packed position, its slot among the buckets' padded slots laid end to end. `bias_dtype`: as
// AttentionInputs::bias.
struct PackedAttention {
  std::vector<SegmentBucket> buckets;
  torch::Tensor order;
};
inline constexpr double kBucketCost = 1 << 24;
PackedAttention plan_packed_attention(const std::vector<int64_t>& lengths, int64_t width, torch::ScalarType bias_dtype,
                                      torch::Device device, int64_t max_buckets = 8);

// What every attention layer of one forward shares: rotary tables and the mask.
struct AttentionInputs {
  torch::Tensor cos;  // [B, T, 1, Dh] cos(position * inv_freq), both halves
  torch::Tensor sin;  // [B, T, 1, Dh] sin of the same angles with the first half negated (rotate_half folded in)
  // [B, 1, T, T_total] additive mask: 0 where the key is a real token not in the query's future, else the lowest
  // finite value of its dtype (TransformerImpl::bias_dtype: float32 for eager attention, q's dtype for sdpa).
  torch::Tensor bias;
  // Packed sequences (model/packing.h), when set: B = 1, the T positions are sequences laid end to end, and each
  // attends causally within itself only, by this plan (`bias` is unused).
  std::shared_ptr<const PackedAttention> packed;
  // A decode step over a static cache (TransformerImpl::forward_step): the keys at or beyond this position are masked
  // for every row, so the CPU kernel stops there (other kernels attend over the whole width, which `bias` masks).
  // 0 = every key.
  int64_t key_count = 0;
};

// The decode step's activations for S rows (TransformerImpl::decode_buffers): allocated once per generation and
// written in place by every step, so that a step reads and writes the same addresses every time. The residual stream
// is in the embedding's dtype, the rest in the compute dtype.
struct DecodeBuffers {
  torch::Tensor hidden;    // [S, D] the residual stream
  torch::Tensor normed;    // [S, D] a norm's output: each projection's input, and the step's result
  torch::Tensor qkv;       // [S, (H + 2 H_kv) Dh] q, k and v of the new position (q and k rotated in place)
  torch::Tensor attended;  // [S, H Dh] attention's output
  torch::Tensor gate_up;   // [S, 2 I]
  torch::Tensor gate, up;  // [S, I] its two halves (views)
  torch::Tensor act;       // [S, I] silu(gate) * up
  torch::Tensor product;   // [S, D] o's and down's output where the compute dtype is not the residual's (autocast)
  // Views of the first `rows` rows (a step on fewer slots).
  DecodeBuffers first(int64_t rows) const;
};

// What every layer of one decode step shares.
struct StepInputs {
  // The ATen path: cos and sin [S, 1, Dh], bias [S, 1, 1, C]; with the CPU kernels only bias [S, C] and key_count.
  AttentionInputs attention;
  bool cpu_kernels = false;            // the CPU kernels run (model/decode_step.h), reading the fields below
  torch::Tensor cos_table, sin_table;  // [N, Dh] float32, the rotary tables of every position
  torch::Tensor positions;             // [S] int64, each row's position
  int64_t write_at = 0;                // the cache position the step writes (the static cache's write_at)
};

// The lowest finite value of `dtype` (float32, bfloat16 or float16): what masked positions of an additive attention
// mask hold.
double mask_value(torch::ScalarType dtype);

// Whether this LibTorch has at::scaled_dot_product_attention with the `scale` argument (>= 2.1).
bool sdpa_available();
// model.attn_implementation resolved for this build: true = sdpa, false = eager. UsageError for sdpa without it, or
// an unknown name (listing the valid ones).
bool use_sdpa(const std::string& attn_implementation);

// A LoRA adapter on one linear layer (Hu et al. 2021; PEFT's LoraLayer): x -> scaling B(A(dropout(x))), scaling
// alpha / rank (rsLoRA: alpha / sqrt(rank), lora_scaling in model/lora.h), lora_A [rank, in], lora_B [out, rank], no
// biases; dropout only in training mode. model/lora.h adds them to a model and reads and writes them.
struct LoraAdapterImpl : torch::nn::Module {
  LoraAdapterImpl(int64_t in, int64_t out, int64_t rank, double scaling, double dropout);
  torch::Tensor forward(const torch::Tensor& x);  // [..., in] -> [..., out], the update only
  torch::Tensor delta_weight() const;             // [out, in]: scaling B A, what merging adds to W
  torch::nn::Linear lora_A{nullptr}, lora_B{nullptr};
  double scaling;
  double dropout;
  std::shared_ptr<bool> enabled;  // shared by a model's adapters: off computes the base model
};
TORCH_MODULE(LoraAdapter);

// linear(x), plus the adapter's update when there is one and adapters are on.
torch::Tensor adapted(torch::nn::Linear& linear, LoraAdapter& adapter, const torch::Tensor& x);

struct AttentionImpl : torch::nn::Module {
  explicit AttentionImpl(const ModelConfig& config);
  // x [B, T, D] -> [B, T, D]; `cache` (may be null) receives this layer's keys/values.
  torch::Tensor forward(const torch::Tensor& x, const AttentionInputs& inputs, KVCache* cache, int64_t layer);
  // softmax(q k^T / sqrt(Dh) + mask) v by the configured kernel: q [B, H, T, Dh], k and v [B, H_kv, T_total, Dh]
  // -> [B, H, T, Dh].
  torch::Tensor attend(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                       const AttentionInputs& inputs) const;
  // attend for packed sequences (inputs.packed): each sequence causally within itself, bucket by bucket.
  torch::Tensor attend_packed(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                              const PackedAttention& plan) const;
  // A decode step's attention: rotary on the q and k heads of b.qkv, the new key and value stored at the written
  // position of the static cache, attention over the cache into b.attended.
  void forward_step(DecodeBuffers& b, const StepInputs& in, KVCache& cache, int64_t layer) const;
  int64_t num_heads, num_kv_heads, head_dim;
  bool sdpa;  // model.attn_implementation resolved (use_sdpa)
  torch::nn::Linear q_proj{nullptr}, k_proj{nullptr}, v_proj{nullptr}, o_proj{nullptr};
  LoraAdapter q_lora{nullptr}, k_lora{nullptr}, v_lora{nullptr}, o_lora{nullptr};  // null without LoRA
};
TORCH_MODULE(Attention);

struct MLPImpl : torch::nn::Module {
  explicit MLPImpl(const ModelConfig& config);
  // down(silu(gate(x)) * up(x)), [B, T, D] -> [B, T, D]; with `fused`, gate and up are one matmul.
  torch::Tensor forward(const torch::Tensor& x, const FusedLayerWeights* fused = nullptr);
  torch::nn::Linear gate_proj{nullptr}, up_proj{nullptr}, down_proj{nullptr};
  LoraAdapter gate_lora{nullptr}, up_lora{nullptr}, down_lora{nullptr};  // null without LoRA
};
TORCH_MODULE(MLP);

struct DecoderLayerImpl : torch::nn::Module {
  explicit DecoderLayerImpl(const ModelConfig& config);
  torch::Tensor forward(const torch::Tensor& x, const AttentionInputs& inputs, KVCache* cache, int64_t layer);
  // The layer in a decode step (TransformerImpl::forward_step): b.hidden [S, D] updated in place, with the fused
  // weights of the static `cache`.
  void forward_step(DecodeBuffers& b, const StepInputs& in, KVCache& cache, int64_t layer);
  RMSNorm input_layernorm{nullptr}, post_attention_layernorm{nullptr};
  Attention self_attn{nullptr};
  MLP mlp{nullptr};
};
TORCH_MODULE(DecoderLayer);

// ZeRO for the decoder layers (workers/sharding.h implements it). At stage 3 a layer's parameters exist whole only
// between gather(layer) and release(layer): the forward gathers, runs the layer without autograd and releases, and
// the backward gathers again, recomputes the layer with autograd (as gradient checkpointing does) and hands the
// layer's parameter gradients (in their .grad) to reduce_gradients(layer) before releasing. At stage 2 with gradient
// checkpointing only the reduction applies: the layer's gradients leave as soon as its backward has computed them.
struct LayerShards {
  virtual ~LayerShards() = default;
  // Whether forwards gather each layer (stage 3, and the model is not gathered whole for generation right now).
  virtual bool gathers_layers() const = 0;
  // Whether a training forward reduces each layer's gradients inside its backward (stage 3, or stage 2 with
  // gradient checkpointing).
  virtual bool reduces_in_backward() const = 0;
  virtual void gather(int64_t layer) = 0;
  virtual void release(int64_t layer) = 0;
  virtual void reduce_gradients(int64_t layer) = 0;
};

// The backbone ("model." in Hugging Face names).
struct TransformerImpl : torch::nn::Module {
  // Validates `config` (UsageError naming the keys) and initialises with the seeded scheme of init_parameters.
  // `vocab_size` is the resolved V (model.vocab_size, or the tokenizer's size when that is 0).
  TransformerImpl(const ModelConfig& config, int64_t vocab_size);
  // input_ids [B, T] int64, position_ids [B, T] int64, attention_mask [B, T_cached + T] (1 real, 0 pad; undefined
  // = all real), cache: null for a plain forward, else the cached positions are attended to and the new ones
  // appended. Returns the final-norm hidden states [B, T, D]. Pad queries (no allowed key) attend uniformly
  // instead of producing NaN; their outputs are meaningless and must be masked by the caller.
  torch::Tensor forward(const torch::Tensor& input_ids, const torch::Tensor& position_ids,
                        const torch::Tensor& attention_mask = {}, KVCache* cache = nullptr);
  // Packed sequences (model/packing.h): input_ids and position_ids [1, N] hold sequences of `lengths` tokens (sum N)
  // end to end; each attends causally within itself. Returns the final-norm hidden states [1, N, D], equal within
  // float rounding to the padded forward's at the same tokens.
  torch::Tensor forward_packed(const torch::Tensor& input_ids, const torch::Tensor& position_ids,
                               const std::vector<int64_t>& lengths);
  // One decode step over a static KV cache (KVCache::allocate_static): tokens and positions [S] int64, key_bias
  // [S, capacity] the additive mask over every position of the cache (0 = attend, mask_value(bias_dtype()) = not),
  // in bias_dtype(), with the position being written (cache.write_at) already open, `buffers` the first S rows of
  // decode_buffers'. The new position follows every cached one, so no causal mask is needed. Writes the new keys and
  // values, leaves write_at and the host's length to the caller, and returns buffers.normed: the final-norm hidden
  // states [S, D] in the compute dtype. Every tensor it writes is one of the buffers or the cache, in place: the same
  // shapes and addresses every call, and no host synchronisation, so that a CUDA graph can capture it. Float32 on
  // the CPU it runs the kernels of model/decode_step.h and five ATen ops per layer.
  const torch::Tensor& forward_step(const torch::Tensor& tokens, const torch::Tensor& positions,
                                    const torch::Tensor& key_bias, KVCache& cache, DecodeBuffers& buffers);
  // The buffers of forward_step for `rows` rows, zeros, on the model's device.
  DecodeBuffers decode_buffers(int64_t rows) const;
  // The dtype the matmuls run in: model.autocast_dtype when set, else model.dtype (the KV cache's dtype).
  torch::ScalarType compute_dtype() const;
  // The dtype of the additive attention mask: float32 (eager attention adds it to float32 scores), or the dtype q
  // has for sdpa (the autocast dtype when model.autocast_dtype is set, else model.dtype).
  torch::ScalarType bias_dtype() const;
  // The projection weights of every layer fused for no-grad decoding (a copy; rebuild after the weights change).
  FusedWeights fused_weights();
  // Rotary tables (AttentionInputs::cos, sin) for position_ids [B, T] whose values are < max_position, in `dtype`.
  // The float32 tables of every position are computed once per device and reused, and so is their copy in the last
  // other dtype asked for.
  std::pair<torch::Tensor, torch::Tensor> rotary(const torch::Tensor& position_ids, int64_t max_position,
                                                 torch::ScalarType dtype);
  // The decoder-layer loop; with model.enable_gradient_checkpointing (training forwards with autograd, no cache)
  // each layer keeps only its input and recomputes its activations in the backward pass.
  torch::Tensor run_blocks(torch::Tensor hidden, const AttentionInputs& inputs, KVCache* cache);

  ModelConfig config;
  int64_t vocab_size;
  bool sdpa;                      // model.attn_implementation resolved (use_sdpa)
  LayerShards* shards = nullptr;  // set by a sharded worker (parallel.zero_stage >= 2), owned by it
  // forward_step runs the CPU kernels where they apply; false runs its ATen ops there too, as on other devices
  // (tests compare the two).
  bool decode_kernels = true;
  std::shared_ptr<bool> lora_enabled = std::make_shared<bool>(true);  // the adapters' switch (model/lora.h)
  torch::nn::Embedding embed_tokens{nullptr};
  torch::nn::ModuleList layers;
  RMSNorm norm{nullptr};

 private:
  // Builds rotary_cos_ and rotary_sin_ on `device` for max(max_position, model.max_position_embeddings) positions,
  // unless they are there.
  void build_rotary_tables(torch::Device device, int64_t max_position);
  torch::Tensor rotary_cos_, rotary_sin_;  // [positions, Dh] float32: the tables of `rotary`, on the last device used
  torch::Tensor rotary_cos_cast_, rotary_sin_cast_;  // the same in the last other dtype asked for
};
TORCH_MODULE(Transformer);

// While alive, `module` and its children are in eval mode (LoRA's dropout off), as veRL's no-grad phases are
// (generation, validation); the mode it had is restored after.
class EvalMode {
 public:
  explicit EvalMode(torch::nn::Module& module) : module_(module), was_training_(module.is_training()) {
    module_.eval();
  }
  ~EvalMode() { module_.train(was_training_); }
  EvalMode(const EvalMode&) = delete;
  EvalMode& operator=(const EvalMode&) = delete;

 private:
  torch::nn::Module& module_;
  bool was_training_;
};

// model.autocast_dtype for the forwards of one model: while alive, ops on `device` run under autocast to `dtype`
// (matmuls in the low dtype, reductions such as softmax and log_softmax in float32), as torch.autocast does. No-op
// for "none". The version-specific calls (LibTorch 1.13 has per-device setters, 2.x set_autocast_*(device, ...))
// live here. UsageError for an unknown name.
class AutocastGuard {
 public:
  AutocastGuard(const std::string& autocast_dtype, torch::Device device);
  // UsageError for a name other than none, bfloat16, float16.
  static void check_name(const std::string& autocast_dtype);
  ~AutocastGuard();
  AutocastGuard(const AutocastGuard&) = delete;
  AutocastGuard& operator=(const AutocastGuard&) = delete;

 private:
  bool active_ = false;
  torch::DeviceType device_type_ = torch::kCPU;
  bool was_enabled_ = false;
  torch::ScalarType was_dtype_ = torch::kBFloat16;
};

// Backbone + LM head (tied to embed_tokens when model.tie_word_embeddings).
struct CausalLMImpl : torch::nn::Module {
  CausalLMImpl(const ModelConfig& config, int64_t vocab_size);
  // Same arguments as TransformerImpl::forward; returns logits [B, T, V] in the model dtype.
  torch::Tensor forward(const torch::Tensor& input_ids, const torch::Tensor& position_ids,
                        const torch::Tensor& attention_mask = {}, KVCache* cache = nullptr);
  torch::Tensor logits(const torch::Tensor& input_ids, const torch::Tensor& position_ids,
                       const torch::Tensor& attention_mask = {}, KVCache* cache = nullptr) {
    return forward(input_ids, position_ids, attention_mask, cache);
  }
  // hidden [..., D] -> logits [..., V]; lets callers project only the positions they need.
  torch::Tensor logits_from_hidden(const torch::Tensor& hidden);

  Transformer model{nullptr};
  torch::nn::Linear lm_head{nullptr};  // null when tied
};
TORCH_MODULE(CausalLM);

// Backbone + value_head Linear(D, 1): the critic.
struct ValueModelImpl : torch::nn::Module {
  ValueModelImpl(const ModelConfig& config, int64_t vocab_size);
  // Same arguments as TransformerImpl::forward; returns values [B, T] in float32.
  torch::Tensor forward(const torch::Tensor& input_ids, const torch::Tensor& position_ids,
                        const torch::Tensor& attention_mask = {}, KVCache* cache = nullptr);
  // hidden [..., D] -> values [...] in float32.
  torch::Tensor values_from_hidden(const torch::Tensor& hidden);

  Transformer model{nullptr};
  torch::nn::Linear value_head{nullptr};
};
TORCH_MODULE(ValueModel);

// Throws UsageError naming the offending model.* keys (divisibility of heads, even head_dim, sizes, dtype).
void validate_model_config(const ModelConfig& config, int64_t vocab_size);
// The parameters of a CausalLM of this shape (a ValueModel's differ by the head only).
double model_parameters(const ModelConfig& config, int64_t vocab_size);
// A UsageError naming the size keys when the model's float32 parameters alone exceed the memory this process may
// still allocate (MemAvailable, or a cgroup's limit): LibTorch's allocator would otherwise fail with a backtrace.
void check_model_fits_memory(const ModelConfig& config, int64_t vocab_size);
// The memory this process may still allocate: MemAvailable, or less under a cgroup (v2) limit; -1 when unknown.
double available_memory_bytes();

// model.dtype -> torch dtype; throws UsageError listing the valid names.
torch::Dtype model_dtype(const std::string& name);

// Seeded initialisation of every parameter of `module` (names prefixed by `prefix`), independent of the global
// RNG and of registration order: each parameter draws from its own CPU generator seeded by hash(seed, name).
// Weights of Linear/Embedding ~ N(0, std), RMSNorm weights = 1, biases = 0.
void init_parameters(torch::nn::Module& module, const std::string& prefix, int64_t seed, double std);

// Number of scalars in the module's parameters (a tied weight counts once).
int64_t parameter_count(const torch::nn::Module& module);

}  // namespace ppo
