// The continuous-batching decoder over a KV cache (generate_continuous), with multi-turn trajectories and the
// counts of its host reads and CUDA graph replays.
#include "decode/continuous_decoder.h"

#include <algorithm>
#include <atomic>
#include <deque>
#include <numeric>
#include <optional>
#include <string>

#include <ATen/record_function.h>

#include "common/error.h"
#include "decode/fused_weights.h"
#include "decode/sampling.h"
#include "decode/step.h"
#include "decode/step_graphs.h"

namespace ppo {

namespace {

std::atomic<int64_t> g_host_reads{0};
std::atomic<int64_t> g_graph_replays{0}, g_graph_captures{0};

// While alive, every forward of `model` records its MoE routing (TransformerImpl::record_routing).
class RoutingRecorded {
 public:
  explicit RoutingRecorded(TransformerImpl& model) : model_(model) { model_.record_routing = true; }
  ~RoutingRecorded() { model_.record_routing = false; }
  RoutingRecorded(const RoutingRecorded&) = delete;
  RoutingRecorded& operator=(const RoutingRecorded&) = delete;

 private:
  TransformerImpl& model_;
};

// The decode loop's device-to-host copies go through here, so that they can be counted.
torch::Tensor to_host(const torch::Tensor& t) {
  g_host_reads.fetch_add(1, std::memory_order_relaxed);
  return t.to(torch::kCPU);
}

// Continuous-batching decoder over a KV cache. S slots decode together; slot s holds output row slot_row[s] (or none)
// and writes its next token to flat position slot_index[s] = row * R + t of the outputs, or to its scratch entry
// B * R + s once it has finished. Everything a step needs stays on the device: the host does not learn which rows
// finished until a check (every p.check_interval steps, and whenever a row reaches R tokens), where it reads the
// slots' state once, gives finished slots the next waiting rows (prefilled together, their cache rows copied into
// the freed slots) and, once no row waits and at most half the slots are busy, drops the idle slots.
//
// Cache layout: all slots share one length L; a row admitted when the cache held L_a positions has its context (the
// prompt, left-padded to the widest of its prefill) just before L_a and its new tokens from L_a on; the additive
// mask `bias_` [S, C] hides everything else of its row. When L reaches the capacity C, the positions no running row
// can still attend to are dropped from the front.
//
// The decode step is static: the KV cache, the mask and every per-slot tensor are allocated once per generation for
// the most slots (S_max), a step runs on their first S rows (views made when S changes), writes them in place and
// attends over the whole capacity C, so that it has the same shapes and addresses every time. S only shrinks, when
// keep_busy_slots moves the busy slots to the front; with CUDA graphs (rollout.cuda_graphs, StepGraphs) it is
// rounded up to a bucket and each bucket's step is captured once and replayed (not for an MoE model: its experts'
// products count their rows on the host).
//
// Multi-turn (p.turns): at a check, the rows whose turn ended there are read back (one more copy) and given to the
// handler; a row it continues waits, without a slot, for its continuation, which is written into its response and
// makes it wait for a slot again: rows that continue are admitted before new prompts, their context being the prompt
// and the response so far. The decoder ends when no row decodes, waits for a slot or waits for the handler.
class ContinuousDecoder {
 public:
  ContinuousDecoder(CausalLM& model, const torch::Tensor& ids, const torch::Tensor& mask,
                    const std::vector<uint64_t>& seeds, const GenerationParams& p)
      : model_(model), ids_(ids), mask_(mask), p_(p), graphs_(p.cuda_graphs && !model->model->has_moe(), ids.device()) {
    B_ = ids.size(0);
    P_ = ids.size(1);
    R_ = p.max_new_tokens;
    S_max_ = S_ = std::min(p.micro_batch_size, B_);
    C_ = decode_cache_width(P_, R_, multi_turn());
    const auto device = ids.device();
    longs_ = torch::TensorOptions().dtype(torch::kLong).device(device);
    out_tokens_ = torch::full({B_ * R_ + S_}, p.pad_id, longs_);
    out_log_probs_ = torch::zeros({B_ * R_ + S_}, longs_.dtype(torch::kFloat));
    uniforms_ = uniform_table(seeds, R_, S_, device);
    const torch::ScalarType bias_dtype = model->model->bias_dtype();
    masked_ = mask_value(bias_dtype);
    bias_ = torch::full({S_, C_}, masked_, longs_.dtype(bias_dtype));
    // A window as wide as the cache never hides a key.
    window_ = model->model->config.sliding_window < C_ ? model->model->config.sliding_window : 0;
    window_close_ = torch::zeros({1}, longs_);
    scratch_ = torch::arange(B_ * R_, B_ * R_ + S_, longs_);
    slot_index_ = scratch_.clone();
    slot_end_ = torch::zeros({S_}, longs_);
    slot_pos_ = torch::zeros({S_}, longs_);
    next_tokens_ = torch::full({S_}, p.pad_id, longs_);
    finished_ = torch::ones({S_}, longs_.dtype(torch::kBool));
    weights_ = fuse_weights(*model->model, p.product_rows > 0 ? p.product_rows : p.micro_batch_size);
    cache_.projections = weights_;
    // The LM head in the dtype the step's matmuls run in (cast, and packed on the CPU, once here, not every step; by
    // the packed loop at any width: oneDNN's product made decoding slower there, BENCHMARKS.md).
    const torch::ScalarType compute = model->model->compute_dtype();
    head_ = fuse_projection((model->lm_head ? model->lm_head->weight : model->model->embed_tokens->weight).detach(), {},
                            compute, /*rows=*/0);
    buffers_ = decode_buffers(*model->model, S_);
    logits_ = torch::zeros({S_, head_.out_features()}, buffers_.normed.options());
    if (compute != torch::kFloat)
      logits32_ = torch::zeros({S_, head_.out_features()}, logits_.options().dtype(torch::kFloat));
    step_uniforms_ = torch::zeros({S_}, uniforms_.options());
    step_log_probs_ = torch::zeros({S_}, out_log_probs_.options());
    next_index_ = torch::zeros({S_}, longs_);
    flags_ = torch::zeros({S_}, finished_.options());
    slot_row_.assign(S_, -1);
    admitted_at_.assign(S_, 0);
    slot_start_.assign(S_, 0);
    slot_offset_.assign(S_, 0);
    if (p.record_routing && model->model->has_moe()) {  // -1: no expert recorded (a token never fed to the model)
      const ModelConfig& c = model->model->config;
      const std::vector<int64_t> shape = {moe_layer_count(c), c.moe.num_experts_per_tok};
      routed_prompts_ = torch::full({B_, P_, shape[0], shape[1]}, -1, longs_.dtype(torch::kInt));
      routed_out_ = torch::full({B_ * R_ + S_, shape[0], shape[1]}, -1, routed_prompts_.options());
      recording_.emplace(*model->model);
    }
    if (multi_turn()) {
      const int64_t K = static_cast<int64_t>(p.stop_tokens.size());
      if (K > 0) {
        stop_ = torch::tensor(p.stop_tokens, torch::kLong).to(device);
        recent_ = torch::full({S_, K}, -1, longs_);
        shifted_ = torch::zeros({S_, K - 1}, longs_);
        matches_ = torch::zeros({S_, K}, finished_.options());
      }
      const torch::Tensor prompt_mask = mask.cpu(), prompt_ids = ids.cpu();
      const auto real = prompt_mask.accessor<int64_t, 2>(), id = prompt_ids.accessor<int64_t, 2>();
      prompts_.resize(B_);
      for (int64_t b = 0; b < B_; ++b)
        for (int64_t t = 0; t < P_; ++t)
          if (real[b][t] != 0) prompts_[b].push_back(id[b][t]);
      responses_.resize(B_);
      appended_.resize(B_);
    }
  }

  Generated run() {
    admit_first_wave();
    set_rows(S_);
    struct Count {  // the graphs' counts go to the process's totals however run() ends
      StepGraphs& graphs;
      ~Count() {
        g_graph_replays.fetch_add(graphs.replays(), std::memory_order_relaxed);
        g_graph_captures.fetch_add(graphs.captures(), std::memory_order_relaxed);
      }
    } count{graphs_};
    int64_t since_check = 0;
    while (true) {
      if (R_ > 1) {  // with R = 1 the prefill sampled every token
        if (cache_.length() == C_) compact_front();
        step();
        ++since_check;
      }
      if (R_ <= 1 || since_check >= p_.check_interval || some_row_reaches_limit()) {
        since_check = 0;
        if (!check()) break;
      }
    }
    Generated out;
    out.responses = out_tokens_.narrow(0, 0, B_ * R_).view({B_, R_});
    out.log_probs = out_log_probs_.narrow(0, 0, B_ * R_).view({B_, R_});
    if (multi_turn()) {
      out.response_mask = torch::zeros({B_, R_});
      out.response_attention = torch::zeros({B_, R_}, torch::kLong);
      for (int64_t b = 0; b < B_; ++b) {
        const int64_t length = static_cast<int64_t>(responses_[b].size());
        out.response_attention[b].narrow(0, 0, length).fill_(1);
        out.response_mask[b].narrow(0, 0, length).fill_(1);
        for (const auto& [begin, count] : appended_[b]) out.response_mask[b].narrow(0, begin, count).zero_();
      }
    }
    if (recording_)
      out.routed_experts =
          torch::cat({routed_prompts_, routed_out_.narrow(0, 0, B_ * R_).view({B_, R_, routed_out_.size(1), -1})}, 1);
    return out;
  }

 private:
  bool multi_turn() const { return p_.turns != nullptr; }

  // The first S prompts: one prefill writes the cache positions [0, P) of every slot.
  void admit_first_wave() {
    std::vector<int64_t> slots(S_), rows(S_);
    std::iota(slots.begin(), slots.end(), 0);
    for (int64_t& row : rows) row = next_prompt_++;
    admit(slots, rows);
  }

  // Prefills `rows` into `slots`, p.prefill_micro_batch_size at a time, and samples their next tokens. The first
  // prefill of the generation allocates the static cache (in the dtypes its keys and values came in).
  void admit(const std::vector<int64_t>& slots, const std::vector<int64_t>& rows) {
    const size_t n = slots.size(),
                 chunk = p_.prefill_micro_batch_size > 0 ? static_cast<size_t>(p_.prefill_micro_batch_size) : n;
    for (size_t begin = 0; begin < n; begin += chunk) {
      const size_t end = std::min(n, begin + chunk);
      admit_chunk({slots.begin() + begin, slots.begin() + end}, {rows.begin() + begin, rows.begin() + end});
    }
  }

  // The contexts of `rows`, left-padded to the widest: the prompt ids as given, or (a row that continues after a
  // turn) its prompt and response so far.
  LeftPadded contexts(const std::vector<int64_t>& rows, const torch::Tensor& rows_t) const {
    if (fresh(rows)) return {ids_.index_select(0, rows_t), mask_.index_select(0, rows_t)};
    std::vector<std::vector<int64_t>> sequences;
    int64_t width = 0;
    for (int64_t row : rows) {
      sequences.push_back(prompts_[row]);
      sequences.back().insert(sequences.back().end(), responses_[row].begin(), responses_[row].end());
      width = std::max(width, static_cast<int64_t>(sequences.back().size()));
    }
    LeftPadded padded = left_pad(sequences, width, p_.pad_id);
    return {padded.ids.to(longs_.device()), padded.mask.to(longs_.device())};
  }

  // Whether none of `rows` has a response yet (their context is their prompt).
  bool fresh(const std::vector<int64_t>& rows) const {
    bool none = true;
    for (int64_t row : rows) none = none && (!multi_turn() || responses_[row].empty());
    return none;
  }

  void admit_chunk(const std::vector<int64_t>& slots, const std::vector<int64_t>& rows) {
    const int64_t n = static_cast<int64_t>(slots.size());
    auto rows_t = torch::tensor(rows, torch::kLong).to(longs_.device());
    auto slots_t = torch::tensor(slots, torch::kLong).to(longs_.device());
    const LeftPadded context = contexts(rows, rows_t);  // [n, W]
    const torch::Tensor& ids = context.ids;
    const torch::Tensor& mask = context.mask;
    const int64_t W = ids.size(1);
    auto positions = position_ids_from_mask(mask);
    KVCache prefill;
    prefill.projections = weights_;
    auto hidden = model_->model->forward(ids, positions, mask, &prefill);  // [n, W, D]
    if (recording_ && fresh(rows))  // a prompt's routing (a multi-turn row prefilled again keeps its first)
      routed_prompts_.index_copy_(0, rows_t, model_->model->chosen_experts().view({n, W, routed_out_.size(1), -1}));
    if (!cache_.write_at.defined()) cache_.allocate_static(prefill, S_max_, C_);
    if (cache_.length() < W) cache_.advance(W - cache_.length());  // positions no row has written: hidden by bias_
    const int64_t L = cache_.length();
    cache_.write_rows(slots_t, prefill, L - W);
    auto row_bias = torch::full({n, C_}, masked_, bias_.options());
    row_bias.narrow(1, L - W, W).masked_fill_(mask.ne(0), 0.0);
    // The first step writes position L, which sees positions L - window + 1 .. L only.
    if (window_ > 0 && L - window_ >= 0) row_bias.narrow(1, 0, L - window_ + 1).fill_(masked_);
    bias_.index_copy_(0, slots_t, row_bias);
    auto logits = model_->logits_from_hidden(hidden.select(1, W - 1)).to(torch::kFloat);  // [n, V]
    std::vector<int64_t> offsets(n);
    for (int64_t i = 0; i < n; ++i) offsets[i] = multi_turn() ? static_cast<int64_t>(responses_[rows[i]].size()) : 0;
    auto first = rows_t * R_ + torch::tensor(offsets, torch::kLong).to(longs_.device());  // the next token of each row
    Sampled s = sample(logits, uniforms_.index_select(0, first), p_.temperature, p_.top_k, p_.top_p);
    out_tokens_.index_copy_(0, first, s.tokens);
    out_log_probs_.index_copy_(0, first, s.log_probs);
    auto row_end = rows_t * R_ + R_;
    auto finished = s.tokens.eq(p_.eos_id).logical_or_((first + 1).ge(row_end));
    if (stop_.defined()) {
      auto recent = torch::full({n, stop_.size(0)}, -1, longs_);
      recent.select(1, stop_.size(0) - 1).copy_(s.tokens);
      recent_.index_copy_(0, slots_t, recent);
      finished.logical_or_(recent.eq(stop_).all(1));
    }
    finished_.index_copy_(0, slots_t, finished);
    slot_index_.index_copy_(0, slots_t, torch::where(finished, scratch_.index_select(0, slots_t), first + 1));
    slot_end_.index_copy_(0, slots_t, row_end);
    slot_pos_.index_copy_(0, slots_t, positions.select(1, W - 1) + 1);
    next_tokens_.index_copy_(0, slots_t, s.tokens);
    for (int64_t i = 0; i < n; ++i) {
      slot_row_[slots[i]] = rows[i];
      admitted_at_[slots[i]] = L;
      slot_start_[slots[i]] = L - W;
      slot_offset_[slots[i]] = offsets[i];
    }
  }

  // The views a step of `rows` slots reads and writes: the first `rows` rows of each static buffer.
  void set_rows(int64_t rows) {
    S_ = rows;
    const auto first = [&](const torch::Tensor& t) { return t.defined() ? t.narrow(0, 0, rows) : t; };
    in_ = StepViews{};
    in_.bias = first(bias_);
    in_.tokens = first(next_tokens_);
    in_.positions = first(slot_pos_);
    in_.index = first(slot_index_);
    in_.end = first(slot_end_);
    in_.finished = first(finished_);
    in_.scratch = first(scratch_);
    in_.buffers = buffers_.first(rows);
    in_.logits = first(logits_);
    in_.logits32 = logits32_.defined() ? first(logits32_) : in_.logits;
    in_.uniforms = first(step_uniforms_);
    in_.log_probs = first(step_log_probs_);
    in_.next = first(next_index_);
    in_.flags = first(flags_);
    if (recent_.defined()) {
      const int64_t K = recent_.size(1);
      in_.recent = first(recent_);
      in_.shifted = first(shifted_);
      in_.matches = first(matches_);
      in_.recent_head = in_.recent.narrow(1, 0, K - 1);
      in_.recent_tail = in_.recent.narrow(1, 1, K - 1);
      in_.recent_last = in_.recent.select(1, K - 1);
    }
  }

  // One decode step of every slot: no host synchronisation; replayed as a CUDA graph where StepGraphs is active.
  void step() {
    ++steps_;
    cache_.write_at.fill_(cache_.length());
    // The step's input tokens sit just before each busy slot's next output (a finished slot writes to its scratch).
    const torch::Tensor routed_at =
        recording_ ? torch::where(in_.finished, in_.scratch, in_.index - 1) : torch::Tensor();
    graphs_.run(S_, [this] { step_ops(); });
    if (recording_) routed_out_.index_copy_(0, routed_at, model_->model->chosen_experts());
    cache_.advance(1);
  }

  // The step's ops, on the static buffers' first S rows (in_), every one in place or into a buffer.
  void step_ops() {
    RECORD_USER_SCOPE("ppo::decode_step");
    in_.bias.index_fill_(1, cache_.write_at, 0.0);  // the position written now is real for its slot
    if (window_ > 0) {
      // A sliding window: the position window behind the written one leaves every row's view (each row's tokens
      // sit at consecutive positions, so a position's distance is the same for all). Before the window is full this
      // is (write_at - window) mod C, a position not yet written and masked already.
      window_close_.copy_(cache_.write_at).add_(C_ - window_).remainder_(C_);
      in_.bias.index_fill_(1, window_close_, masked_);
    }
    const torch::Tensor& hidden = decode_step(*model_->model, *weights_, in_.tokens, in_.positions, in_.bias, cache_,
                                              in_.buffers, p_.cpu_kernels);  // [S, D]
    head_.into(hidden, in_.logits, /*accumulate=*/false);                    // [S, V]
    if (!in_.logits32.is_same(in_.logits)) in_.logits32.copy_(in_.logits);
    at::index_select_out(in_.uniforms, uniforms_, 0, in_.index);
    sample_into(in_.logits32, in_.uniforms, p_.temperature, p_.top_k, p_.top_p, in_.tokens, in_.log_probs);
    out_tokens_.index_copy_(0, in_.index, in_.tokens);
    out_log_probs_.index_copy_(0, in_.index, in_.log_probs);
    in_.next.copy_(in_.index).add_(1);  // (add_out with a scalar adds into a temporary, then copies)
    at::ge_out(in_.finished, in_.next, in_.end);
    at::eq_out(in_.flags, in_.tokens, p_.eos_id);
    in_.finished.logical_or_(in_.flags);
    if (stop_.defined()) {  // the last K tokens, shifted by one, against the stop sequence
      in_.shifted.copy_(in_.recent_tail);
      in_.recent_head.copy_(in_.shifted);
      in_.recent_last.copy_(in_.tokens);
      at::all_out(in_.flags, at::eq_out(in_.matches, in_.recent, stop_), 1);
      in_.finished.logical_or_(in_.flags);
    }
    at::where_out(in_.index, in_.finished, in_.scratch, in_.next);
    in_.positions.add_(1).masked_fill_(in_.finished, 0);
  }

  // The response tokens slot s's row has after the steps taken (the host knows this without looking, since each
  // step adds one cache position and one token).
  int64_t tokens_so_far(int64_t s) const { return slot_offset_[s] + cache_.length() - admitted_at_[s] + 1; }

  // Whether a busy slot wrote its last possible token (R) in the step just taken.
  bool some_row_reaches_limit() const {
    for (int64_t s = 0; s < S_; ++s)
      if (slot_row_[s] >= 0 && tokens_so_far(s) == R_) return true;
    return false;
  }

  // Reads the finished flags (the one device-to-host copy), hands ended turns to the handler, refills or drops
  // finished slots. False when done.
  bool check() {
    auto finished = to_host(in_.finished);
    const bool* f = finished.data_ptr<bool>();
    std::vector<int64_t> idle, ended;
    int64_t newly_finished = 0;
    for (int64_t s = 0; s < S_; ++s) {
      if (f[s] && slot_row_[s] >= 0) {
        if (multi_turn())
          ended.push_back(s);
        else
          ++newly_finished;
        slot_row_[s] = -1 - slot_row_[s];  // idle; its row is read below
      }
      if (slot_row_[s] < 0) idle.push_back(s);
    }
    if (!ended.empty()) newly_finished += end_turns(ended);
    for (int64_t s = 0; s < S_; ++s) slot_row_[s] = std::max<int64_t>(slot_row_[s], -1);
    while (true) {
      const int64_t busy = S_ - static_cast<int64_t>(idle.size()), waiting = B_ - next_prompt_;
      const bool must_wait = busy == 0 && waiting == 0 && ready_.empty() && pending_ > 0;
      if (multi_turn() && (pending_ > 0)) newly_finished += take_continuations(must_wait);
      if (!must_wait || !ready_.empty()) break;
    }
    if (p_.on_progress) p_.on_progress(newly_finished, steps_);
    std::vector<int64_t> rows;
    while (rows.size() < idle.size() && !ready_.empty()) rows.push_back(ready_.front()), ready_.pop_front();
    while (rows.size() < idle.size() && next_prompt_ < B_) rows.push_back(next_prompt_++);
    if (!rows.empty()) {
      idle.resize(rows.size());
      admit(idle, rows);
      return true;
    }
    const int64_t busy = S_ - static_cast<int64_t>(idle.size());
    if (busy == 0) return false;
    if (next_prompt_ == B_ && pending_ == 0 && 2 * busy <= S_) keep_busy_slots();
    return true;
  }

  // The turns of the slots `ended` (whose slot_row_ holds -1 - row) have ended: reads their rows back and asks the
  // handler about each. Returns the trajectories that ended.
  int64_t end_turns(const std::vector<int64_t>& ended) {
    std::vector<int64_t> rows;
    for (int64_t s : ended) rows.push_back(-1 - slot_row_[s]);
    const auto rows_t = torch::tensor(rows, torch::kLong).to(longs_.device());
    const torch::Tensor tokens = to_host(out_tokens_.narrow(0, 0, B_ * R_).view({B_, R_}).index_select(0, rows_t));
    const auto tok = tokens.accessor<int64_t, 2>();
    const int64_t K = static_cast<int64_t>(p_.stop_tokens.size());
    int64_t done = 0;
    for (size_t i = 0; i < ended.size(); ++i) {
      TurnEnd end;
      end.row = rows[i];
      end.turn_start = slot_offset_[ended[i]];
      int64_t t = end.turn_start;
      for (; t < R_; ++t) {
        if (tok[i][t] == p_.eos_id) break;
        if (K > 0 && t - end.turn_start + 1 >= K) {
          bool match = true;
          for (int64_t k = 0; k < K && match; ++k) match = tok[i][t - K + 1 + k] == p_.stop_tokens[k];
          if (match) {
            end.by_stop = true;
            break;
          }
        }
      }
      end.out_of_room = t >= R_ - 1;
      const int64_t length = std::min(t + 1, R_);
      std::vector<int64_t>& response = responses_[end.row];
      for (int64_t j = static_cast<int64_t>(response.size()); j < length; ++j) response.push_back(tok[i][j]);
      end.response = response;
      if (p_.turns->turn_ended(end))
        ++pending_;
      else
        ++done;
    }
    return done;
  }

  // Appends the continuations that have come to their rows' responses and queues the rows for a slot. Returns the
  // trajectories that ended (no tokens, or no room left for a token after them).
  int64_t take_continuations(bool wait) {
    int64_t done = 0;
    for (auto& [row, tokens] : p_.turns->continuations(wait)) {
      --pending_;
      std::vector<int64_t>& response = responses_[row];
      const int64_t at = static_cast<int64_t>(response.size()), count = static_cast<int64_t>(tokens.size());
      if (count == 0 || at + count >= R_) {
        ++done;
        continue;
      }
      out_tokens_.narrow(0, row * R_ + at, count).copy_(torch::tensor(tokens, torch::kLong));
      response.insert(response.end(), tokens.begin(), tokens.end());
      appended_[row].emplace_back(at, count);
      ready_.push_back(row);
    }
    return done;
  }

  // The front positions no busy slot can attend to (each slot's context starts at slot_start_) are dropped.
  void compact_front() {
    int64_t first = cache_.length();
    for (int64_t s = 0; s < S_; ++s)
      if (slot_row_[s] >= 0 && tokens_so_far(s) < R_)  // may not have sampled its last token yet
        first = std::min(first, slot_start_[s]);
    TORCH_CHECK(first > 0, "rollout: the KV cache is full and no position can be dropped");
    const int64_t kept = cache_.length() - first;
    cache_.drop_front(first);
    if (kept > 0) bias_.narrow(1, 0, kept).copy_(bias_.narrow(1, first, kept).clone());
    bias_.narrow(1, kept, C_ - kept).fill_(masked_);
    for (int64_t s = 0; s < S_; ++s) {
      admitted_at_[s] -= first;
      slot_start_[s] -= first;
    }
  }

  // No row waits and at most half the slots are busy: the busy slots move to the front (one copy of their cache
  // rows, in place) and the step runs on fewer rows: as many as are busy, or with graphs their bucket, whose
  // padding rows are idle slots.
  void keep_busy_slots() {
    std::vector<int64_t> busy;
    for (int64_t s = 0; s < S_; ++s)
      if (slot_row_[s] >= 0) busy.push_back(s);
    const int64_t n = static_cast<int64_t>(busy.size());
    const int64_t rows = graphs_.active() || p_.bucket_slots ? decode_bucket(n, S_max_) : n;
    if (rows >= S_) return;
    auto keep = torch::tensor(busy, torch::kLong).to(longs_.device());
    cache_.select(keep);
    for (torch::Tensor* t : {&bias_, &slot_index_, &slot_end_, &slot_pos_, &next_tokens_, &recent_})
      if (t->defined()) t->narrow(0, 0, n).copy_(t->index_select(0, keep));
    // The padding rows: idle, each writing its own scratch entry.
    finished_.narrow(0, 0, n).fill_(false);
    finished_.narrow(0, n, S_max_ - n).fill_(true);
    slot_index_.narrow(0, n, S_max_ - n).copy_(scratch_.narrow(0, n, S_max_ - n));
    slot_pos_.narrow(0, n, S_max_ - n).zero_();
    for (std::vector<int64_t>* v : {&slot_row_, &admitted_at_, &slot_start_, &slot_offset_}) {
      std::vector<int64_t> kept(static_cast<size_t>(S_max_), v == &slot_row_ ? -1 : 0);
      for (int64_t i = 0; i < n; ++i) kept[i] = (*v)[busy[i]];
      *v = kept;
    }
    set_rows(rows);
  }

  CausalLM& model_;
  torch::Tensor ids_, mask_;  // [B, P] all prompts, left-padded, on the device
  const GenerationParams& p_;
  // B prompts, P prompt width, R response width, S slots a step runs on (of S_max allocated), C cache positions.
  int64_t B_ = 0, P_ = 0, R_ = 0, S_ = 0, S_max_ = 0, C_ = 0;
  torch::TensorOptions longs_;
  double masked_ = 0;
  // The static buffers, allocated for S_max slots.
  torch::Tensor out_tokens_, out_log_probs_;  // [B * R + S] flat outputs; the last S entries are scratch
  torch::Tensor uniforms_;                    // [B * R + S] float64
  torch::Tensor bias_;                        // [S, C] additive attention mask
  int64_t window_ = 0;                        // model.sliding_window when it can bind (narrower than C), else 0
  torch::Tensor window_close_;                // [1] int64: the position a step hides from the window
  torch::Tensor scratch_;                     // [S] each slot's scratch entry
  torch::Tensor slot_index_, slot_end_;       // [S] next flat output index; row * R + R (past the row's last token)
  torch::Tensor slot_pos_, next_tokens_;      // [S] position id and token of the next step's input
  torch::Tensor finished_;                    // [S] bool: the slot is idle after the last step
  torch::Tensor stop_, recent_;               // multi-turn: [K] stop tokens; [S, K] each slot's last K tokens
  // What a step writes on its way, allocated for S_max slots.
  DecodeBuffers buffers_;            // the model's activations
  torch::Tensor logits_, logits32_;  // [S, V] in the compute dtype; their float32 copy where it is not
  torch::Tensor step_uniforms_;      // [S] float64: each slot's uniform for this step
  torch::Tensor step_log_probs_;     // [S] float32: the sampled tokens' log-probs
  torch::Tensor next_index_;         // [S] slot_index + 1
  torch::Tensor flags_;              // [S] bool: the slot's row ends (EOS, stop sequence)
  torch::Tensor shifted_, matches_;  // multi-turn: [S, K - 1] recent_'s last K - 1; [S, K] bool
  // p.record_routing with MoE layers: the experts each token was routed to, [B, P, L_moe, k] the prompts' and
  // [B * R + S, L_moe, k] the responses' (flat as out_tokens_), int32, -1 where none was recorded.
  torch::Tensor routed_prompts_, routed_out_;
  std::optional<RoutingRecorded> recording_;  // the model records its routing while the decoder lives
  // Their first S_ rows, what a step reads and writes (set_rows).
  struct StepViews {
    torch::Tensor bias, tokens, positions, index, end, finished, scratch, recent;
    DecodeBuffers buffers;
    torch::Tensor logits, logits32, uniforms, log_probs, next, flags, shifted, matches;
    torch::Tensor recent_head, recent_tail, recent_last;  // recent's first and last K - 1 columns, and its last
  } in_;
  std::shared_ptr<const FusedWeights> weights_;  // the layers' (the prefills' projections too)
  FusedProjection head_;                         // the LM head, D -> V
  KVCache cache_;
  StepGraphs graphs_;
  std::vector<int64_t> slot_row_;     // host: the output row of each slot, -1 = idle
  std::vector<int64_t> admitted_at_;  // host: the cache length when the slot's row was admitted
  std::vector<int64_t> slot_start_;   // host: the cache position where the slot's context starts
  std::vector<int64_t> slot_offset_;  // host: response tokens the slot's row had when admitted
  int64_t next_prompt_ = 0;
  int64_t steps_ = 0;  // decode steps taken
  // Multi-turn (host): each row's prompt, its response so far (up to its last ended turn, continuations included),
  // the appended spans {begin, count}, the rows waiting for a slot, and how many wait for the handler.
  std::vector<std::vector<int64_t>> prompts_, responses_;
  std::vector<std::vector<std::pair<int64_t, int64_t>>> appended_;
  std::deque<int64_t> ready_;
  int64_t pending_ = 0;
};

}  // namespace

Generated generate_continuous(CausalLM& model, const torch::Tensor& ids, const torch::Tensor& mask,
                              const std::vector<uint64_t>& seeds, const GenerationParams& p) {
  return ContinuousDecoder(model, ids, mask, seeds, p).run();
}

int64_t rollout_host_reads() {
  return g_host_reads.load(std::memory_order_relaxed);
}

int64_t rollout_graph_replays() {
  return g_graph_replays.load(std::memory_order_relaxed);
}

int64_t rollout_graph_captures() {
  return g_graph_captures.load(std::memory_order_relaxed);
}

}  // namespace ppo
