// What a generation is asked for (GenerationParams, with multi-turn rollouts' TurnHandler), the KV cache's size, and
// the decoder's counters: what rollout.h's generate_responses and the continuous-batching decoder
// (continuous_decoder.h) share.
#pragma once

#include <cstdint>
#include <functional>
#include <utility>
#include <vector>

#include "common/model_config.h"

namespace ppo {

// Multi-turn rollouts (rollout.multi_turn): how an assistant turn ended, as the decoder tells it at a check.
struct TurnEnd {
  int64_t row = 0;                // output row
  std::vector<int64_t> response;  // the row's response tokens so far (generated and inserted), this turn's last
  int64_t turn_start = 0;         // where this turn's generated tokens begin in `response`
  bool by_stop = false;           // it ended with GenerationParams::stop_tokens (else with EOS, or out of room)
  bool out_of_room = false;       // it filled the response width R
};

// What follows an assistant turn: the decoder calls turn_ended at a check for each row whose turn ended there, and
// continuations at every check (with `wait` when it has no other work), so the answers of a tool can come while
// the other rows decode.
class TurnHandler {
 public:
  virtual ~TurnHandler() = default;
  // true: the row will get a continuation (its turn called a tool); false: its trajectory ends here.
  virtual bool turn_ended(const TurnEnd& end) = 0;
  // The tokens to append to rows whose continuations have come, {row, tokens}, in any order; no tokens = the
  // trajectory ends. With `wait`, returns at least one (or throws).
  virtual std::vector<std::pair<int64_t, std::vector<int64_t>>> continuations(bool wait) = 0;
};

struct GenerationParams {
  int64_t max_new_tokens = 16;           // R: response width; generation stops earlier only when every row hit EOS
  double temperature = 1.0;              // 0 = greedy (argmax); log-probs are then taken at temperature 1
  int64_t top_k = -1;                    // sample among the k most likely tokens; <= 0 = off
  double top_p = 1.0;                    // nucleus: smallest set of most likely tokens with mass >= top_p; 1 = off
  int64_t micro_batch_size = 64;         // rows decoded together: slots; a finished row's slot takes the next prompt
  int64_t prefill_micro_batch_size = 0;  // prompts per prefill forward; 0 = every prompt admitted at once
  int64_t pad_id = 0;                    // fills the prompt's left and the response's right padding
  int64_t eos_id = -1;                   // a row stops after sampling it; < 0 = never stop (benchmarks)
  int64_t prompt_width = 0;              // P: left-pad prompts to this width; 0 = longest prompt
  bool use_cache = true;                 // false = recompute the whole sequence at every step (tests, benchmark)
  bool cuda_graphs = true;               // on CUDA, replay the decode step as CUDA graphs (decode/step_graphs.h)
  bool cpu_kernels = true;  // float32 on the CPU, the decode step's kernels (false: its ATen ops, as on other devices)
  // Run decode steps on bucket sizes of slots (decode_bucket), the padding slots idle, as CUDA graphs always do; on
  // the CPU only for tests of that padding.
  bool bucket_slots = false;
  // The rows that choose the CPU's float32 product (decode/fused_weights.h's uses_dnnl): a number the same on every
  // rank (rollout.micro_batch_size), so that N ranks decode as one; 0 = micro_batch_size.
  int64_t product_rows = 0;
  // The host reads which rows finished (the one device-to-host copy of the decode loop) every this many steps, and
  // whenever a row reaches max_new_tokens; finished slots then take waiting prompts.
  int64_t check_interval = 8;
  // Called at each of those reads with the number of rows that finished since the last one and the decode steps
  // taken so far (progress lines).
  std::function<void(int64_t finished_rows, int64_t decode_steps)> on_progress;
  // Multi-turn rollouts (with the KV cache only): a turn ends at EOS, at stop_tokens (when not empty) or at R. The
  // handler then says whether the row goes on; appended tokens (tool answers) are real context but masked out of
  // response_mask, and the row is prefilled again, prompt and response so far, into a free slot. A row's sampled
  // tokens still depend only on its seed, token index and context, so trajectories do not depend on the batching.
  TurnHandler* turns = nullptr;
  std::vector<int64_t> stop_tokens;
  // An MoE model's routing recorded (with the KV cache only): RolloutOutput::routed_experts.
  bool record_routing = false;
};

// Positions each slot of the KV cache holds for prompts of width P and responses of up to R tokens: P + R plus room
// for the rows that join later, so that the cache is compacted at most once every (P + R) / 2 steps. Multi-turn
// rollouts prefill a row's prompt and response so far again, left-padded to the widest of its prefill: P + 2R, plus
// half of that.
int64_t decode_cache_width(int64_t prompt_width, int64_t max_new_tokens, bool multi_turn = false);
// The bytes of the KV cache of `sequences` slots of `width` positions (decode_cache_width) for a model of `mc`'s
// shape: keys and values of every layer, in the model's dtype.
double kv_cache_bytes(const ModelConfig& mc, int64_t width, int64_t sequences);

// Device-to-host copies made by generate_responses in this process so far (tests and benchmarks count them; the
// decoder, continuous_decoder.cpp, keeps the counts).
int64_t rollout_host_reads();
// Decode steps replayed as CUDA graphs, and graphs captured, by generate_responses in this process so far.
int64_t rollout_graph_replays();
int64_t rollout_graph_captures();

}  // namespace ppo
