// The configuration: one struct per section, defaults in the declarations, one line of meaning per field.
// Leaf names follow veRL where the concept is the same. `fields(f)` lists a section's keys for the strict loader,
// the YAML printer and `--help`; it is the single place a key is declared.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

namespace YAML {
class Node;
}

namespace ppo {

struct CurriculumConfig {
  std::vector<std::string> train_files;  // one JSONL per stage, in order
  std::vector<int64_t> difficulties;     // or one difficulty per stage, over the one training set
  int64_t steps_per_stage = 0;           // steps of each stage but the last, which runs to the end

  template <class F>
  void fields(F&& f) {
    f("train_files", train_files,
      "curriculum learning (Logic-RL, Xie et al. 2025, arXiv:2502.14768: Knights-and-Knaves of 3, then 4, ... "
      "7 people): the training prompts of each stage, one file (JSONL or Parquet) per stage in order (instead of "
      "data.train_files)");
    f("difficulties", difficulties,
      "or a difficulty schedule over the one training set (data.train_files, or the generated prompts): stage k "
      "takes the prompts of difficulty difficulties[k] (people for kk, digits for toy tasks)");
    f("steps_per_stage", steps_per_stage,
      "steps of each stage but the last, which runs to trainer.total_training_steps (0 there: steps_per_stage x "
      "the stages). A stage samples its own prompts, reshuffled every pass as data.shuffle says; resume is exact");
  }
};

struct DataConfig {
  std::string task = "reverse";          // built-in task: reverse | digit_sum | kk
  std::vector<std::string> train_files;  // JSONL or Parquet files of prompts, concatenated; empty = generate
  std::vector<std::string> val_files;    // the same for validation prompts; empty = generate from the task
  std::string prompt_key = "prompt";     // veRL records: the field holding the prompt (string or chat messages)
  int64_t train_size = 2048;             // prompts generated for training when train_files is empty
  int64_t val_size = 64;                 // prompts generated for validation when val_files is empty
  int64_t min_difficulty = 2;            // task difficulty range (digits for toy tasks, people for kk)
  int64_t max_difficulty = 4;            //
  int64_t max_prompt_length = 64;        // tokens; longer prompts: see truncation and filter_overlong_prompts
  std::string truncation = "error";      // a prompt over max_prompt_length: error | left | right | middle (veRL's)
  bool filter_overlong_prompts = false;  // skip (and count) prompts over max_prompt_length when loading
  bool apply_chat_template = false;      // render prompts with the tokenizer's chat template (model/chat_template.h)
  std::string chat_template = "";    // chat messages' template: "" = the tokenizer's | chatml | plain | a .jinja file
  int64_t max_response_length = 16;  // tokens generated at most per response
  int64_t train_batch_size = 16;     // prompts per PPO step (global, all ranks)
  int64_t val_batch_size = 64;       // prompts per validation generation batch (global), decoded together
  bool shuffle = true;               // reshuffle the training prompts every epoch
  int64_t seed = 1;                  // data generation and sampler seed
  CurriculumConfig curriculum;

  template <class F>
  void fields(F&& f) {
    f("task", task, "built-in task: reverse | digit_sum | kk");
    f("train_files", train_files,
      "training prompts: a file or a list of files, JSONL or Parquet (.parquet) mixed, read in order: the task's "
      "records, or veRL's (prompt, data_source, reward_model.ground_truth, extra_info); empty = generate from the "
      "task");
    f("val_files", val_files, "validation prompts (as train_files); empty = generate from the task");
    f("prompt_key", prompt_key, "veRL records: the field holding the prompt, a string or a list of chat messages");
    f("train_size", train_size, "prompts generated for training when train_files is empty");
    f("val_size", val_size, "prompts generated for validation when val_files is empty");
    f("min_difficulty", min_difficulty, "smallest task difficulty (digits for toy tasks, people for kk)");
    f("max_difficulty", max_difficulty, "largest task difficulty");
    f("max_prompt_length", max_prompt_length,
      "longest prompt in tokens; a longer one is handled by truncation, or skipped with filter_overlong_prompts");
    f("truncation", truncation,
      "a prompt longer than max_prompt_length: error (names the file and line) | left (keep its last tokens) | right "
      "(keep its first tokens) | middle (keep both ends)");
    f("filter_overlong_prompts", filter_overlong_prompts,
      "skip prompts longer than max_prompt_length when the data is loaded (the count is printed)");
    f("apply_chat_template", apply_chat_template,
      "render each prompt as a chat (system/user messages, then the assistant turn) with the tokenizer's ChatML "
      "chat template, as instruct models expect; false = the task's plain prompt text (veRL records whose prompt is a "
      "list of messages are always rendered)");
    f("chat_template", chat_template,
      "template of chat prompts: empty = the tokenizer's | chatml | plain (\"User: ...\\nAssistant: \") | a path to a "
      "ChatML-form .jinja file");
    f("max_response_length", max_response_length, "most tokens generated per response");
    f("train_batch_size", train_batch_size, "prompts per PPO step, over all ranks");
    f("val_batch_size", val_batch_size,
      "prompts per validation generation batch, over all ranks; a batch's sequences decode together (bounded by "
      "rollout.max_num_seqs and rollout.max_kv_tokens), so the KV cache of a batch must fit");
    f("shuffle", shuffle, "reshuffle the training prompts every epoch");
    f("seed", seed, "seed of data generation and of the prompt sampler");
    f("curriculum", curriculum, "");
  }
};

struct ModelConfig {
  std::string path = "";                       // Hugging Face folder to load; empty = the shape below, seeded init
  std::string tokenizer = "char";              // char | a folder with tokenizer.json
  std::string lora_path = "";                  // a PEFT adapter folder: the actor's starting adapters
  int64_t hidden_size = 64;                    // D
  int64_t num_layers = 2;                      // transformer blocks
  int64_t num_heads = 4;                       // H, query heads
  int64_t num_kv_heads = 2;                    // key/value heads (grouped-query attention)
  int64_t intermediate_size = 128;             // SwiGLU width
  int64_t vocab_size = 0;                      // V; 0 = the tokenizer's size
  int64_t max_position_embeddings = 256;       // longest sequence
  double rope_theta = 10000.0;                 // rotary embedding base
  double rms_norm_eps = 1e-6;                  // RMSNorm epsilon
  bool tie_word_embeddings = true;             // LM head shares the embedding matrix
  bool attention_bias = false;                 // q/k/v projections have a bias (Qwen2)
  std::string dtype = "float32";               // float32 | bfloat16 | float16 (compute dtype)
  double init_std = 0.02;                      // std of the seeded initialisation
  int64_t seed = 0;                            // initialisation seed
  bool enable_gradient_checkpointing = false;  // recompute block activations in backward
  std::string attn_implementation = "auto";    // auto | eager | sdpa (LibTorch >= 2.1)
  std::string autocast_dtype = "none";         // none | bfloat16 | float16: mixed-precision forwards

  template <class F>
  void fields(F&& f) {
    f("path", path,
      "Hugging Face folder (config.json + safetensors) for actor, reference and critic backbone; its config.json "
      "replaces the shape keys below and its tokenizer.json is used while model.tokenizer is char; "
      "actor/critic.init_checkpoint wins; empty = the shape below, seeded init");
    f("tokenizer", tokenizer, "tokenizer: char (built-in character-level) or a folder with tokenizer.json");
    f("lora_path", lora_path,
      "a PEFT LoRA adapter folder (adapter_config.json, adapter_model.safetensors): the actor's starting adapters "
      "(needs actor.lora.rank, with its rank and target modules)");
    f("hidden_size", hidden_size, "model width D");
    f("num_layers", num_layers, "number of transformer blocks");
    f("num_heads", num_heads, "query heads H");
    f("num_kv_heads", num_kv_heads, "key/value heads (grouped-query attention); divides num_heads");
    f("intermediate_size", intermediate_size, "SwiGLU MLP width");
    f("vocab_size", vocab_size, "vocabulary size V; 0 = the tokenizer's size");
    f("max_position_embeddings", max_position_embeddings, "longest sequence (prompt + response) in tokens");
    f("rope_theta", rope_theta, "rotary position embedding base");
    f("rms_norm_eps", rms_norm_eps, "RMSNorm epsilon");
    f("tie_word_embeddings", tie_word_embeddings, "the LM head shares the token embedding matrix");
    f("attention_bias", attention_bias, "q/k/v projections carry a bias (Qwen2 does)");
    f("dtype", dtype, "compute dtype: float32 | bfloat16 | float16");
    f("init_std", init_std, "standard deviation of the seeded initialisation");
    f("seed", seed, "initialisation seed");
    f("enable_gradient_checkpointing", enable_gradient_checkpointing,
      "recompute each block's activations in the backward pass (actor and critic)");
    f("attn_implementation", attn_implementation,
      "attention kernel: auto (sdpa where LibTorch >= 2.1 has it, else eager) | eager (matmul + softmax) | sdpa "
      "(at::scaled_dot_product_attention)");
    f("autocast_dtype", autocast_dtype,
      "none | bfloat16 | float16: every model forward runs under autocast to this dtype (parameters keep model.dtype)");
  }
};

struct OptimConfig {
  double lr = 1e-4;                          // peak learning rate
  double weight_decay = 0.0;                 // AdamW decoupled weight decay
  std::vector<double> betas = {0.9, 0.999};  // AdamW betas
  double eps = 1e-8;                         // AdamW epsilon
  int64_t lr_warmup_steps = 0;               // linear warmup steps (optimizer steps)
  std::string warmup_style = "constant";     // constant | cosine (after warmup)
  double min_lr_ratio = 0.0;                 // cosine floor as a fraction of lr

  template <class F>
  void fields(F&& f) {
    f("lr", lr, "peak learning rate");
    f("weight_decay", weight_decay, "AdamW decoupled weight decay");
    f("betas", betas, "AdamW betas [beta1, beta2]");
    f("eps", eps, "AdamW epsilon");
    f("lr_warmup_steps", lr_warmup_steps, "linear warmup length in optimizer steps");
    f("warmup_style", warmup_style, "schedule after warmup: constant | cosine");
    f("min_lr_ratio", min_lr_ratio, "cosine schedule floor as a fraction of lr");
  }
};

struct OffloadConfig {
  bool param = false;      // parameters live in host memory between phases
  bool grad = false;       // gradients leave the device after each mini-batch's reduction
  bool optimizer = false;  // AdamW moments live in host memory

  template <class F>
  void fields(F&& f) {
    f("param", param, "keep parameters in host memory, on the device only for the phase that needs them");
    f("grad", grad, "move gradients to host memory after each mini-batch's reduction");
    f("optimizer", optimizer, "keep the optimizer state in host memory and update there");
  }
};

// LoRA (Hu et al. 2021, arXiv:2106.09685) on a worker's linear layers, with veRL's and PEFT's meanings: the frozen
// weight W plus (alpha / rank) B A, A [rank, in] and B [out, rank] trained (model/lora.h).
struct LoraConfig {
  int64_t rank = 0;                                          // 0 = off: the whole model is trained
  double alpha = 16.0;                                       // the update's scale is alpha / rank
  bool use_rslora = false;                                   // rank-stabilised LoRA: the scale is alpha / sqrt(rank)
  double dropout = 0.0;                                      // dropout on the adapters' input while training
  std::vector<std::string> target_modules = {"all-linear"};  // HF module names, or all-linear (every projection)
  bool init_lora_weights = true;  // A Kaiming-uniform and B zero (the model starts as its base); false: B random too

  template <class F>
  void fields(F&& f) {
    f("rank", rank, "LoRA rank; 0 = off (every weight trained)");
    f("alpha", alpha, "LoRA alpha: the adapters' update is scaled by alpha / rank");
    f("use_rslora", use_rslora,
      "rank-stabilised LoRA (Kalajdzievski 2023, PEFT's use_rslora): the update is scaled by alpha / sqrt(rank)");
    f("dropout", dropout, "dropout on the adapters' input while training (0 = none)");
    f("target_modules", target_modules,
      "the linear layers that get adapters: all-linear (q_proj, k_proj, v_proj, o_proj, gate_proj, up_proj, "
      "down_proj) or a list of those names");
    f("init_lora_weights", init_lora_weights,
      "PEFT's default: A Kaiming-uniform, B zero, so the adapted model starts equal to its base; false: B random too");
  }
};

struct PolicyLossConfig {
  std::string loss_mode = "vanilla";  // a row of rl/algorithms.h policy_losses()

  template <class F>
  void fields(F&& f) {
    f("loss_mode", loss_mode, "the policy loss, each taking actor.clip_ratio_low/high:");
  }
};

struct ActorConfig {
  int64_t ppo_mini_batch_size = 8;           // prompts per mini-batch (global)
  int64_t ppo_micro_batch_size_per_gpu = 8;  // responses per micro-batch per rank
  bool use_dynamic_bsz = false;              // micro-batches by token budget instead of count
  int64_t ppo_max_token_len_per_gpu = 4096;  // token budget per micro-batch when use_dynamic_bsz
  bool use_remove_padding = true;            // forwards over the real tokens only, packed into one sequence
  int64_t ppo_epochs = 1;                    // passes over the batch per step
  bool shuffle = false;                      // shuffle samples between epochs
  double clip_ratio = 0.2;                   // default for clip_ratio_low/high
  double clip_ratio_low = -1;                // lower clip; < 0 = clip_ratio
  double clip_ratio_high = -1;               // upper clip; < 0 = clip_ratio
  double clip_ratio_c = 3.0;                 // dual-clip bound for negative advantages (> 1)
  std::string loss_agg_mode = "token-mean";  // see rl/algorithms.h
  PolicyLossConfig policy_loss;              // which policy loss
  double entropy_coeff = 0.0;                // entropy bonus weight
  bool use_kl_loss = false;                  // KL to the reference as a loss term
  double kl_loss_coef = 0.001;               // its weight
  std::string kl_loss_type = "low_var_kl";   // kl | abs | mse | low_var_kl
  double grad_clip = 1.0;                    // global gradient-norm clip
  std::string init_checkpoint = "";          // start from this checkpoint folder
  OptimConfig optim;
  OffloadConfig offload;
  LoraConfig lora;

  template <class F>
  void fields(F&& f) {
    f("ppo_mini_batch_size", ppo_mini_batch_size, "prompts per mini-batch over all ranks (x rollout.n responses)");
    f("ppo_micro_batch_size_per_gpu", ppo_micro_batch_size_per_gpu, "responses per micro-batch on each rank");
    f("use_dynamic_bsz", use_dynamic_bsz, "form micro-batches by a token budget instead of a count");
    f("ppo_max_token_len_per_gpu", ppo_max_token_len_per_gpu, "token budget per micro-batch when use_dynamic_bsz");
    f("use_remove_padding", use_remove_padding,
      "policy and reference forwards (log-probs, update) run on a micro-batch's real tokens only, laid end to end "
      "in one sequence with attention kept within each; false: padded [rows, prompt + response] tensors");
    f("ppo_epochs", ppo_epochs, "passes over the step's batch");
    f("shuffle", shuffle, "shuffle samples between PPO epochs");
    f("clip_ratio", clip_ratio, "PPO clip range, default of clip_ratio_low and clip_ratio_high");
    f("clip_ratio_low", clip_ratio_low, "lower clip range (ratio >= 1 - low); < 0 means clip_ratio");
    f("clip_ratio_high", clip_ratio_high, "upper clip range (ratio <= 1 + high); < 0 means clip_ratio");
    f("clip_ratio_c", clip_ratio_c, "dual-clip bound for negative advantages, > 1");
    f("loss_agg_mode", loss_agg_mode,
      "token-mean | seq-mean-token-sum | seq-mean-token-mean | seq-mean-token-sum-norm");
    f("policy_loss", policy_loss, "");
    f("entropy_coeff", entropy_coeff, "weight of the entropy bonus");
    f("use_kl_loss", use_kl_loss, "add KL to the reference policy as a loss term");
    f("kl_loss_coef", kl_loss_coef, "weight of the KL loss");
    f("kl_loss_type", kl_loss_type, "KL estimator of the loss: kl | abs | mse | low_var_kl");
    f("grad_clip", grad_clip, "clip gradients to this global norm");
    f("init_checkpoint", init_checkpoint, "start the policy from this checkpoint folder (e.g. an SFT run's)");
    f("optim", optim, "");
    f("offload", offload, "");
    f("lora", lora, "");
  }
};

struct EnvironmentConfig {
  std::string command = "";  // the tool environment program (JSON lines on stdin/stdout)
  double timeout_s = 60.0;   // longest wait for one answer

  template <class F>
  void fields(F&& f) {
    f("command", command,
      "the tool environment, started once per rank (sh -c): one JSON line per tool call on stdin, one JSON line with "
      "\"output\" (and optionally \"done\", \"reward\") back (docs/multi-turn.md)");
    f("timeout_s", timeout_s, "longest wait in seconds for the environment's next answer line");
  }
};

struct MultiTurnConfig {
  bool enable = false;                     // rollouts of several assistant turns with tool calls
  int64_t max_turns = 4;                   // assistant turns per trajectory
  int64_t max_tool_response_length = 256;  // tokens of one tool output; a longer one is cut
  std::string call_start = "<tool_call>";  // a tool call is the text from here ...
  std::string stop = "</tool_call>";       // ... to here, which also ends the assistant's turn
  EnvironmentConfig environment;

  template <class F>
  void fields(F&& f) {
    f("enable", enable,
      "multi-turn rollouts: an assistant turn that ends in a tool call gets the environment's answer appended in the "
      "chat template's tool role, and generation goes on in the same trajectory; tool and template tokens are "
      "masked out of the losses (docs/multi-turn.md)");
    f("max_turns", max_turns, "assistant turns per trajectory (>= 1); a call in the last turn is not answered");
    f("max_tool_response_length", max_tool_response_length,
      "tokens of one tool output (>= 1); a longer output keeps its first tokens");
    f("call_start", call_start,
      "a tool call is the text of an assistant turn from this string to `stop`; empty: from the turn's start");
    f("stop", stop,
      "the text that ends an assistant turn with a tool call (besides EOS), as Qwen2.5 and Hermes write tool calls; "
      "empty: a turn ends at EOS only, and its call at the turn's end (both empty: every turn goes to the "
      "environment, which says when it is done)");
    f("environment", environment, "");
  }
};

struct RolloutConfig {
  int64_t n = 4;                                   // responses per prompt
  double temperature = 1.0;                        // 0 = greedy
  int64_t top_k = -1;                              // -1 = off
  double top_p = 1.0;                              // 1 = off
  int64_t micro_batch_size = 64;                   // sequences decoded together per rank (validation: prefill)
  int64_t max_num_seqs = 0;                        // KV-cache bound: sequences per wave; 0 = micro_batch_size
  int64_t max_kv_tokens = 0;                       // KV-cache bound in token positions per wave; 0 = off
  int64_t check_interval = 8;                      // decode steps between the host's looks at finished rows
  bool cuda_graphs = true;                         // CUDA: replay the decode step as CUDA graphs
  int64_t log_prob_micro_batch_size_per_gpu = 16;  // responses per log-prob forward
  bool log_prob_use_dynamic_bsz = false;           // log-prob micro-batches by token budget
  int64_t log_prob_max_token_len_per_gpu = 4096;   // that budget
  double val_temperature = 0.0;                    // validation sampling; 0 = greedy
  MultiTurnConfig multi_turn;

  template <class F>
  void fields(F&& f) {
    f("n", n, "responses sampled per prompt");
    f("temperature", temperature, "sampling temperature; 0 = greedy");
    f("top_k", top_k, "sample among the k most likely tokens; -1 = off");
    f("top_p", top_p, "nucleus sampling mass; 1 = off");
    f("micro_batch_size", micro_batch_size,
      "sequences decoded together on each rank; a finished sequence's slot takes the next waiting prompt "
      "(validation decodes a whole data.val_batch_size batch together and prefills this many prompts at a time)");
    f("max_num_seqs", max_num_seqs,
      "KV-cache bound in sequences per generation wave; 0 = micro_batch_size (validation: the whole batch)");
    f("max_kv_tokens", max_kv_tokens,
      "KV-cache bound in token positions per generation wave (sequences x cache width; the width is prompt width + "
      "max_response_length + half of that for the rows that join as others finish); 0 = off");
    f("check_interval", check_interval,
      "decode steps between the host's reads of which rows finished (the decode loop's only device-to-host copy; "
      "finished rows' slots then take waiting prompts); a row reaching max_response_length is noticed at once");
    f("cuda_graphs", cuda_graphs,
      "on CUDA, replay the decode step as CUDA graphs, one per batch-size bucket (1, 2, 4, 8, then multiples of 16), "
      "captured the second time a bucket runs; no effect on the CPU");
    f("log_prob_micro_batch_size_per_gpu", log_prob_micro_batch_size_per_gpu,
      "responses per forward pass when computing log-probs");
    f("log_prob_use_dynamic_bsz", log_prob_use_dynamic_bsz, "log-prob micro-batches by token budget");
    f("log_prob_max_token_len_per_gpu", log_prob_max_token_len_per_gpu, "token budget of a log-prob micro-batch");
    f("val_temperature", val_temperature, "sampling temperature for validation; 0 = greedy");
    f("multi_turn", multi_turn, "");
  }
};

struct RefConfig {
  int64_t log_prob_micro_batch_size_per_gpu = 16;  // responses per reference forward
  OffloadConfig offload;

  template <class F>
  void fields(F&& f) {
    f("log_prob_micro_batch_size_per_gpu", log_prob_micro_batch_size_per_gpu,
      "responses per forward pass of the reference policy");
    f("offload", offload, "");
  }
};

struct CriticConfig {
  int64_t ppo_mini_batch_size = 8;
  int64_t ppo_micro_batch_size_per_gpu = 8;
  bool use_dynamic_bsz = false;
  int64_t ppo_max_token_len_per_gpu = 4096;
  bool use_remove_padding = true;  // as actor.use_remove_padding
  int64_t ppo_epochs = 1;
  double cliprange_value = 0.5;
  double grad_clip = 1.0;
  std::string loss_agg_mode = "token-mean";
  std::string init_checkpoint = "";
  OptimConfig optim;
  OffloadConfig offload;
  LoraConfig lora;  // the value head is always trained in full

  template <class F>
  void fields(F&& f) {
    f("ppo_mini_batch_size", ppo_mini_batch_size, "prompts per critic mini-batch over all ranks");
    f("ppo_micro_batch_size_per_gpu", ppo_micro_batch_size_per_gpu, "responses per critic micro-batch per rank");
    f("use_dynamic_bsz", use_dynamic_bsz, "form critic micro-batches by a token budget");
    f("ppo_max_token_len_per_gpu", ppo_max_token_len_per_gpu, "critic token budget per micro-batch");
    f("use_remove_padding", use_remove_padding,
      "critic forwards (values, update) on the real tokens only, packed (as actor.use_remove_padding)");
    f("ppo_epochs", ppo_epochs, "critic passes over the step's batch");
    f("cliprange_value", cliprange_value, "value clipping range around the old values");
    f("grad_clip", grad_clip, "clip critic gradients to this global norm");
    f("loss_agg_mode", loss_agg_mode, "aggregation of the value loss (as actor.loss_agg_mode)");
    f("init_checkpoint", init_checkpoint, "start the critic from this checkpoint folder");
    f("optim", optim, "");
    f("offload", offload, "");
    f("lora", lora, "");
  }
};

struct KlCtrlConfig {
  std::string type = "fixed";  // fixed | adaptive
  double kl_coef = 0.001;      // initial / fixed coefficient
  double target_kl = 0.1;      // adaptive target
  int64_t horizon = 10000;     // adaptive horizon

  template <class F>
  void fields(F&& f) {
    f("type", type, "KL-in-reward controller: fixed | adaptive");
    f("kl_coef", kl_coef, "KL penalty coefficient (initial value when adaptive)");
    f("target_kl", target_kl, "adaptive controller's target KL");
    f("horizon", horizon, "adaptive controller's horizon");
  }
};

struct RolloutCorrectionConfig {
  std::string rollout_is = "off";         // off | token | sequence
  double rollout_is_threshold = 2.0;      // upper bound C of the weights
  double rollout_is_threshold_lower = 0;  // 0: truncate at C (TIS); > 0: zero weights outside [lower, C] (masking)

  template <class F>
  void fields(F&& f) {
    f("rollout_is", rollout_is,
      "importance weights pi_train / pi_rollout on the policy loss, from the rollout's own log-probs and the "
      "training forward's (veRL algorithm.rollout_correction.rollout_is; OpenRLHF is_correction_type): off | token "
      "(one weight per token) | sequence (the product over the response). The gap is logged every step either way");
    f("rollout_is_threshold", rollout_is_threshold,
      "upper bound C of the weights: truncated IS (TIS, Yao et al. 2025) caps them at C");
    f("rollout_is_threshold_lower", rollout_is_threshold_lower,
      "0: truncate at rollout_is_threshold (TIS); > 0: masking instead (IcePop / MIS, veRL's \"lower_upper\" "
      "threshold): weights outside [lower, rollout_is_threshold] become 0, the others stay as they are");
  }
};

struct FilterGroupsConfig {
  bool enable = false;
  std::string metric = "acc";        // see rl/algorithms.h filter_metric_names
  int64_t max_num_gen_batches = 10;  // generation batches per step at most

  template <class F>
  void fields(F&& f) {
    f("enable", enable,
      "DAPO dynamic sampling (Yu et al. 2025, arXiv:2503.14476; veRL algorithm.filter_groups): prompt groups whose "
      "responses all have the same metric are dropped, and further batches of data.train_batch_size prompts are "
      "generated until data.train_batch_size groups remain (the surplus is dropped). Needs rollout.n >= 2");
    f("metric", metric,
      "what must differ within a group: acc (correct or not) | score (the task's score) | seq_reward (the score "
      "with reward.overlong_buffer's punishment)");
    f("max_num_gen_batches", max_num_gen_batches,
      "generation batches a step may take at most; fewer groups with signal than that stops the run with an "
      "error (veRL's 0, no limit, is not offered: a policy that solves everything would never finish a step)");
  }
};

struct AlgorithmConfig {
  std::string adv_estimator = "gae";        // a row of rl/algorithms.h adv_estimators()
  double gamma = 1.0;                       // discount
  double lam = 1.0;                         // GAE lambda
  bool norm_adv_by_std_in_grpo = true;      // GRPO divides by the group std
  bool mask_truncated_completions = false;  // responses cut off at max length leave the losses
  bool use_kl_in_reward = false;            // subtract a KL penalty from the token rewards
  std::string kl_penalty = "kl";            // KL estimator in the reward
  KlCtrlConfig kl_ctrl;
  RolloutCorrectionConfig rollout_correction;
  FilterGroupsConfig filter_groups;

  template <class F>
  void fields(F&& f) {
    f("adv_estimator", adv_estimator, "the advantage estimator:");
    f("gamma", gamma, "discount factor");
    f("lam", lam, "GAE lambda");
    f("norm_adv_by_std_in_grpo", norm_adv_by_std_in_grpo, "grpo and grpo_passk divide advantages by the group's std");
    f("mask_truncated_completions", mask_truncated_completions,
      "responses cut off at data.max_response_length (no EOS) leave every loss; their rewards still count in their "
      "group (TRL mask_truncated_completions; DAPO, Yu et al. 2025, masks them too)");
    f("use_kl_in_reward", use_kl_in_reward, "subtract a per-token KL penalty from the reward");
    f("kl_penalty", kl_penalty, "KL estimator used in the reward: kl | abs | mse | low_var_kl");
    f("kl_ctrl", kl_ctrl, "");
    f("rollout_correction", rollout_correction, "");
    f("filter_groups", filter_groups, "");
  }
};

struct TrainerConfig {
  int64_t total_epochs = 1;                 // passes over the training prompts
  int64_t total_training_steps = 0;         // > 0 overrides total_epochs
  std::string output_dir = "runs/default";  // run directory
  int64_t save_freq = 0;                    // checkpoint every N steps; 0 = only at the end
  int64_t test_freq = 0;                    // validate every N steps; 0 = never during training
  bool val_before_train = false;            // validate before the first step
  std::string resume_mode = "auto";         // auto | disable | a checkpoint path
  int64_t max_ckpt_to_keep = 2;             // older checkpoints are deleted; 0 = keep all
  int64_t critic_warmup = 0;                // critic-only steps before the actor trains
  bool balance_batch = false;               // reorder the batch so ranks get similar token counts
  int64_t num_threads = 0;                  // intra-op threads per rank; 0 = usable cores, at most cores / ranks
  int64_t seed = 1;                         // sampling and shuffle seed
  int64_t log_freq = 1;                     // console progress line every N steps
  bool write_checkpoints = true;            // false = never write checkpoints (benchmarks)
  int64_t max_skipped_steps = 5;            // stop after this many steps in a row with a skipped update; 0 = never
  std::vector<std::string> logger = {"console", "jsonl", "tensorboard"};  // console | jsonl | tensorboard
  bool resume_allow_config_change = false;           // resume although keys that change the numbers differ
  bool accept_checkpoints_without_manifest = false;  // load checkpoints written before manifests, unverified

  template <class F>
  void fields(F&& f) {
    f("total_epochs", total_epochs, "passes over the training prompts (when total_training_steps is 0)");
    f("total_training_steps", total_training_steps, "PPO steps to run; > 0 overrides total_epochs");
    f("output_dir", output_dir, "run directory: config.yaml, metrics.jsonl, checkpoints/");
    f("save_freq", save_freq, "write a checkpoint every N steps; 0 = only after the last step");
    f("test_freq", test_freq, "validate every N steps; 0 = not during training");
    f("val_before_train", val_before_train, "validate before the first step");
    f("resume_mode", resume_mode, "auto (latest in output_dir) | disable | path of a checkpoint folder");
    f("max_ckpt_to_keep", max_ckpt_to_keep, "keep at most this many checkpoints; 0 = all");
    f("critic_warmup", critic_warmup, "steps that update only the critic");
    f("balance_batch", balance_batch, "reorder the batch so every rank gets a similar token count");
    f("num_threads", num_threads,
      "intra-op CPU threads per rank; 0 = the cores this rank may use (its CPU affinity), at most cores / local "
      "ranks; use 1 on a machine other jobs share");
    f("seed", seed, "seed of sampling and mini-batch shuffles");
    f("log_freq", log_freq, "print a progress line every N steps");
    f("write_checkpoints", write_checkpoints, "false = never write checkpoints");
    f("max_skipped_steps", max_skipped_steps,
      "stop with an error after this many steps in a row in which an optimizer step was skipped (a non-finite "
      "gradient norm); each such step prints a warning; 0 = never stop");
    f("resume_allow_config_change", resume_allow_config_change,
      "resume from a checkpoint whose run had other values of keys that change the numbers (batch sizes, "
      "rollout.n, seeds, the model's shape, the algorithm, the data, the reward); the keys are printed. Without it "
      "such a resume is an error naming them");
    f("accept_checkpoints_without_manifest", accept_checkpoints_without_manifest,
      "load checkpoints that have no manifest.json (written before manifests existed), without verifying their "
      "files; every checkpoint written now has one, and a missing one is otherwise an error");
    f("logger", logger,
      "where metrics go, a list of: console (a progress line per step), jsonl (metrics.jsonl), tensorboard (event "
      "files in the run directory: tensorboard --logdir runs/)");
  }
};

struct OverlongBufferConfig {
  bool enable = false;          // DAPO's soft overlong punishment
  int64_t len = 0;              // the last `len` tokens before data.max_response_length
  double penalty_factor = 1.0;  // the penalty at data.max_response_length

  template <class F>
  void fields(F&& f) {
    f("enable", enable,
      "DAPO's soft overlong punishment (Yu et al. 2025, arXiv:2503.14476; veRL reward_model.overlong_buffer): a "
      "response in the last `len` tokens before data.max_response_length loses up to penalty_factor from its score, "
      "linearly in its length");
    f("len", len, "the buffer: penalties start at data.max_response_length - len tokens (1 .. max_response_length)");
    f("penalty_factor", penalty_factor, "the penalty of a response of data.max_response_length tokens (>= 0)");
  }
};

struct RewardConfig {
  std::string function = "";   // built-in reward for every record; empty = chosen by each record's data_source
  std::string command = "";    // external reward program (JSON lines on stdin/stdout); overrides function
  double timeout_s = 60.0;     // reward.command: longest wait for one answer line
  double batch_timeout_s = 0;  // reward.command: longest wait for a whole batch; 0 = none
  OverlongBufferConfig overlong_buffer;

  template <class F>
  void fields(F&& f) {
    f("function", function,
      "built-in reward for every record: exact_match | gsm8k | math | kk | reverse | digit_sum; empty = chosen by "
      "each record's data_source");
    f("command", command,
      "external reward program, started once per rank (sh -c): one JSON line per response on stdin, one JSON line "
      "with \"score\" back (docs/your-own-task.md); overrides function");
    f("timeout_s", timeout_s,
      "reward.command: longest wait in seconds for the next answer line, per line (each answer restarts it, so a "
      "long batch of a fast program is fine)");
    f("batch_timeout_s", batch_timeout_s,
      "reward.command: longest wait in seconds for all the answers of one batch (one rank's responses of a step); "
      "0 = none, only timeout_s applies");
    f("overlong_buffer", overlong_buffer, "");
  }
};

struct ParallelConfig {
  std::string backend = "auto";   // auto | mpi | nccl
  bool pad_to_world = false;      // pad the global batch to a multiple of the world size
  int64_t check_params_freq = 0;  // verify parameters are identical on all ranks every N steps; 0 = never
  double timeout_s = 600.0;       // longest wait in one collective before the job ends with an error; 0 = forever
  int64_t zero_stage = 0;         // 0 whole state on every rank; 1 optimizer, 2 + gradients, 3 + parameters sharded
  bool check_collectives = true;  // every collective first checks that all ranks issue the same one

  template <class F>
  void fields(F&& f) {
    f("backend", backend,
      "collectives: auto (NCCL for CUDA tensors when each rank of a host has its own GPU, else MPI) | mpi | nccl");
    f("pad_to_world", pad_to_world, "pad the global batch with masked copies to a multiple of the world size");
    f("check_params_freq", check_params_freq, "checksum parameters across ranks every N steps; 0 = never");
    f("timeout_s", timeout_s,
      "longest wait in seconds inside one collective (a stopped rank, a lost host or link): the job then ends with "
      "an error naming the collective and the rank; 0 = wait forever");
    f("zero_stage", zero_stage,
      "ZeRO sharding of the actor's and critic's state over the ranks: 0 = none (every rank holds everything), 1 = "
      "AdamW state, 2 = and gradients, 3 = and parameters (gathered layer by layer for each forward and backward, "
      "the whole policy once per rollout; the reference model keeps only its shard)");
    f("check_collectives", check_collectives,
      "before each collective the ranks compare what they are about to issue (name, dtype, size): a rank whose "
      "sequence differs ends the job with an error naming both, instead of a hang");
  }
};

// What check_config (train/config_check.h) derives from the config for a world size; never set by the user.
struct Derived {
  int64_t world_size = 1;
  int64_t total_training_steps = 0;     // trainer.total_training_steps, or the curriculum's; 0: by total_epochs
  int64_t dispatch_block = 0;           // prompts per dispatch block: gcd of the actor and critic mini-batches
  int64_t padded_train_batch_size = 0;  // train_batch_size with every block padded to the world (pad_to_world)
  int64_t prompts_per_rank = 0;         // padded_train_batch_size / world
  int64_t responses_per_rank = 0;       // prompts_per_rank * n
  int64_t actor_mini_batches = 0;       // mini-batches per epoch
  int64_t actor_mini_prompts_per_rank = 0;
  int64_t actor_micro_batches = 0;     // micro-batches per mini-batch per rank (fixed-size mode)
  int64_t actor_micro_batch_size = 0;  // responses per micro-batch: ppo_micro_batch_size_per_gpu, at most a rank's
  int64_t critic_mini_batches = 0;
  int64_t critic_mini_prompts_per_rank = 0;
  int64_t critic_micro_batches = 0;
  int64_t critic_micro_batch_size = 0;
  int64_t val_prompts_per_rank = 0;
  std::vector<std::string> notes;  // settings check_config replaced without changing any number, one line each
};

struct Config {
  DataConfig data;
  ModelConfig model;
  ActorConfig actor;
  RolloutConfig rollout;
  RefConfig ref;
  CriticConfig critic;
  AlgorithmConfig algorithm;
  TrainerConfig trainer;
  RewardConfig reward;
  ParallelConfig parallel;
  Derived derived;  // filled by check_config (train/config_check.h)

  template <class F>
  void fields(F&& f) {
    f("data", data, "");
    f("model", model, "");
    f("actor", actor, "");
    f("rollout", rollout, "");
    f("ref", ref, "");
    f("critic", critic, "");
    f("algorithm", algorithm, "");
    f("trainer", trainer, "");
    f("reward", reward, "");
    f("parallel", parallel, "");
  }
};

// One leaf key of the config, reachable by its dotted path.
struct ConfigField {
  std::string key;                             // e.g. "actor.optim.lr"
  std::string type;                            // int | float | bool | string | list[int|float|string]
  std::string help;                            // one line
  std::string default_text;                    // the built-in default, as YAML
  std::function<std::string()> get_text;       // current value as YAML
  std::function<void(const YAML::Node&)> set;  // throws UsageError on a wrong type
};

// Every leaf of `config`, in declaration order; the setters write into `config`.
std::vector<ConfigField> config_fields(Config& config);

// Layering: built-in defaults <- each file in order <- each `key.path=value` override.
// Throws UsageError naming the file/line or key on any problem.
Config load_config(const std::vector<std::string>& files, const std::vector<std::string>& overrides);

// Applies one `key.path=value` override.
void apply_override(Config& config, const std::string& assignment);

// The variants a key names, each with one line of help, from a registry above common/ (rl/algorithms.h
// variant_choices): `--help` and `ppo config --comments` list them with the key.
struct KeyChoice {
  std::string name, help;
};
using KeyChoices = std::map<std::string, std::vector<KeyChoice>>;

// The resolved config as YAML; with `comments`, each key carries its meaning and its choices
// (configs/ppo_trainer.yaml).
std::string config_to_yaml(Config& config, bool comments = false, const KeyChoices& choices = {});

// `--help` text: every key with its type, default, meaning and choices.
std::string config_help(const KeyChoices& choices = {});

// The closest valid key to `key` (edit distance), for "did you mean" hints.
std::string closest_key(const std::string& key);

}  // namespace ppo
