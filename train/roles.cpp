// See train/roles.h.
#include "train/roles.h"

#include <algorithm>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>
#include <utility>

#include "common/error.h"
#include "common/files.h"
#include "common/json.h"
#include "common/manifest.h"
#include "model/safetensors.h"
#include "parallel/tensor_sync.h"
#include "records/trainer_state.h"
#include "train/evaluate.h"
#include "train/experience.h"
#include "train/prompts.h"
#include "workers/worker.h"

namespace ppo {
namespace {

using nlohmann::json;

// Every rank's text, over the whole job (both roles).
std::vector<std::string> across_job(Context& context, const std::string& mine) {
  Context::Scope job(context, Group::job);
  return context.all_gather(mine);
}

// A batch and its description as one text: a JSON line, then the fields in LibTorch's archive format.
std::string pack(const Batch& batch, const json& meta) {
  torch::serialize::OutputArchive archive;
  json names = json::array();
  for (const auto& [name, tensor] : batch.fields) {
    archive.write(name, tensor);
    names.push_back(name);
  }
  std::ostringstream out;
  out << json{{"meta", meta}, {"fields", names}}.dump() << '\n';
  archive.save_to(out);
  return out.str();
}

std::pair<Batch, json> unpack(const std::string& text) {
  const size_t newline = text.find('\n');
  const json head = json::parse(text.substr(0, newline));
  std::istringstream in(text.substr(newline + 1));
  torch::serialize::InputArchive archive;
  archive.load_from(in);
  Batch batch;
  for (const auto& name : head.at("fields")) {
    torch::Tensor tensor;
    archive.read(name.get<std::string>(), tensor);
    batch.fields[name.get<std::string>()] = tensor;
  }
  return {batch, head.at("meta")};
}

// The first row of each real group of `global`, ordered by the prompts' positions in the step's batch.
std::vector<int64_t> group_rows_of(const Batch& global, int64_t n) {
  const torch::Tensor ids = global.at(field::group_id), positions = global.at(field::prompt_index);
  std::vector<std::pair<int64_t, int64_t>> firsts;  // (position, row)
  for (int64_t row = 0; row < global.size(); row += n)
    if (ids[row].item<int64_t>() >= 0) firsts.emplace_back(positions[row].item<int64_t>(), row);
  std::sort(firsts.begin(), firsts.end());
  std::vector<int64_t> rows;
  for (const auto& first : firsts) rows.push_back(first.second);
  return rows;
}

// Absent (a batch saved before the moments were kept): none. `what` names the JSON for an error.
RunningMoments moments_of(const json& parent, const std::string& what) {
  if (!parent.contains("reward_moments")) return {};
  return parse_reward_moments(parent.at("reward_moments"), what);
}

json meta_of(const Delivery& d) {
  return {{"metrics", metrics_json(d.metrics)},
          {"policy_version", d.policy_version},
          {"gen_batches", d.gen_batches},
          {"reward_moments", reward_moments_json(d.reward_moments)}};
}

// `what`: where the metadata came from, for an error.
void read_meta(const json& meta, Delivery& d, const std::string& what) {
  d.metrics = parse_metrics_json(meta.at("metrics"), what);
  d.policy_version = meta.at("policy_version").get<int64_t>();
  d.gen_batches = meta.at("gen_batches").get<int64_t>();
  d.reward_moments = moments_of(meta, what);
}

}  // namespace

void send_batch(Context& context, const PendingBatch& g) {
  Delivery d;
  d.metrics = context.rank() == 0 ? g.metrics : std::map<std::string, double>{};
  d.policy_version = g.policy_version;
  d.gen_batches = g.gen_batches;
  d.reward_moments = g.reward_moments;
  across_job(context, pack(g.rows, meta_of(d)));
}

Delivery receive_batch(Context& context, int64_t n, int64_t pad_id) {
  const std::vector<std::string> texts = across_job(context, "");
  Delivery d;
  std::vector<Batch> parts;
  bool first = true;
  for (const std::string& text : texts) {
    if (text.empty()) continue;  // a trainer's
    auto [rows, meta] = unpack(text);
    parts.push_back(std::move(rows));
    if (first) read_meta(meta, d, "a rollout rank's batch");  // the first rollout rank's carries the metrics
    first = false;
  }
  d.global = concat_generations(parts, pad_id);
  d.group_rows = group_rows_of(d.global, n);
  return d;
}

Batch trainer_rows(const Delivery& delivery, const Config& config, int64_t dispatch_block, const Context& context) {
  return dispatch_groups(delivery.global, delivery.group_rows, config.rollout.n, dispatch_block, context.world_size(),
                         context.rank(), config.parallel.pad_to_world);
}

void sync_weights(Context& context, Actor& policy) {
  const bool in_group = context.role() == Role::rollout || context.job_rank() == 0;
  // Only stage 3 needs every trainer: the whole-model gather is collective among them.
  if (!in_group && policy.state().zero_stage() != 3) return;
  WorkerState::Phase phase(policy.state(), /*whole_model=*/true);
  if (!in_group) return;
  Context::Scope group(context, Group::weight_sync);
  torch::NoGradGuard no_grad;
  // One flat buffer per dtype, in the parameters' order (the same model on both sides).
  std::map<c10::ScalarType, std::vector<torch::Tensor>> by_dtype;
  for (const auto& item : policy.model()->named_parameters())
    if (!policy.has_lora() || trains_with_lora(item.key()))
      by_dtype[item.value().scalar_type()].push_back(item.value());
  for (auto& [dtype, params] : by_dtype) {
    torch::Tensor buffer = flatten_tensors(params);
    context.broadcast(buffer, /*root=*/0);
    if (context.role() == Role::rollout) unflatten_into(buffer, params);
  }
}

RolesStart share_start(Context& context, const RolesStart& start) {
  const json mine = context.is_root() ? json{{"policy_version", start.policy_version},
                                             {"gen_batches", start.gen_batches},
                                             {"in_flight", start.in_flight},
                                             {"reward_moments", reward_moments_json(start.reward_moments)}}
                                      : json();
  const json root = json::parse(across_job(context, mine.dump()).front());
  return {root.at("policy_version").get<int64_t>(), root.at("gen_batches").get<int64_t>(),
          root.at("in_flight").get<bool>(), moments_of(root, "the first trainer's start")};
}

std::map<std::string, double> share_validation(Context& context, const std::map<std::string, double>& metrics) {
  const bool speaks = context.role() == Role::rollout && context.rank() == 0;
  for (const std::string& text : across_job(context, speaks ? metrics_json(metrics).dump() : ""))
    if (!text.empty()) return parse_metrics_json(json::parse(text), "the rollout ranks' validation metrics");
  throw std::logic_error("share_validation: no rollout rank sent the metrics");
}

void save_delivery(const std::string& path, const Delivery& delivery) {
  save_safetensors(path, delivery.global.fields, json{{"delivery", meta_of(delivery).dump()}});
}

namespace {

// The fields a rollout delivers, by shape: [B, P] (prompts), [B, R], [B, P + R] and [B]; and whether a field holds
// token ids or positions (int64) or floats. Multi-turn rollouts add the tool fields, routing replay routed_experts
// ([B, P + R, MoE layers, k] int32, checked on its own).
enum class Span { prompt, response, sequence, row };
struct DeliveryField {
  const char* name;
  Span span;
  bool ids;
  bool optional;
};
constexpr DeliveryField kDeliveryFields[] = {{field::prompts, Span::prompt, true, false},
                                             {field::responses, Span::response, true, false},
                                             {field::input_ids, Span::sequence, true, false},
                                             {field::attention_mask, Span::sequence, true, false},
                                             {field::position_ids, Span::sequence, true, false},
                                             {field::response_mask, Span::response, false, false},
                                             {field::rollout_log_probs, Span::response, false, false},
                                             {field::token_scores, Span::response, false, false},
                                             {field::group_id, Span::row, true, false},
                                             {field::prompt_index, Span::row, true, false},
                                             {field::difficulty, Span::row, true, false},
                                             {field::sample_mask, Span::row, false, false},
                                             {field::scores, Span::row, false, false},
                                             {field::correct, Span::row, false, false},
                                             {field::has_correct, Span::row, false, false},
                                             {field::format_ok, Span::row, false, false},
                                             {field::tool_turns, Span::row, false, true},
                                             {field::tool_calls, Span::row, false, true},
                                             {field::tool_reward, Span::row, false, true},
                                             {field::tool_tokens, Span::row, false, true}};

void check_delivery_fields(const std::map<std::string, torch::Tensor>& fields, int64_t n, const std::string& path) {
  auto shape_of = [&](const char* name) {
    const auto it = fields.find(name);
    usage_check(it != fields.end(), path + ": field '" + name + "' is missing");
    usage_check(it->second.dim() == 2 && it->second.size(0) > 0 && it->second.size(0) % n == 0,
                path + ": field '" + name + "' has shape " + shape_text(it->second.sizes()) +
                    ": not [rows, length] with rows a positive multiple of rollout.n=" + std::to_string(n));
    return it->second.sizes();
  };
  const c10::IntArrayRef responses = shape_of(field::responses);
  const int64_t rows = responses[0], R = responses[1], P = shape_of(field::prompts)[1];
  size_t known = 0;
  for (const DeliveryField& f : kDeliveryFields) {
    const auto it = fields.find(f.name);
    if (it == fields.end()) {
      usage_check(f.optional, path + ": field '" + f.name + "' is missing");
      continue;
    }
    ++known;
    const torch::Tensor& t = it->second;
    std::vector<int64_t> want = {rows};
    if (f.span != Span::row) want.push_back(f.span == Span::prompt ? P : f.span == Span::response ? R : P + R);
    usage_check(t.sizes() == at::IntArrayRef(want), path + ": field '" + f.name + "' has shape " +
                                                        shape_text(t.sizes()) + ", expected " + shape_text(want));
    usage_check(f.ids ? t.scalar_type() == torch::kInt64 : t.is_floating_point(),
                path + ": field '" + f.name + "' has dtype " + std::string(c10::toString(t.scalar_type())) +
                    ", expected " + (f.ids ? "int64" : "a floating-point type"));
  }
  if (const auto it = fields.find(field::routed_experts); it != fields.end()) {  // routing replay's record
    const torch::Tensor& t = it->second;
    usage_check(t.dim() == 4 && t.size(0) == rows && t.size(1) == P + R && t.scalar_type() == torch::kInt32,
                path + ": field '" + field::routed_experts + "' has shape " + shape_text(t.sizes()) + " and dtype " +
                    std::string(c10::toString(t.scalar_type())) + ", expected [" + std::to_string(rows) + ", " +
                    std::to_string(P + R) + ", MoE layers, k] int32");
    ++known;
  }
  if (known == fields.size()) return;
  for (const auto& [name, t] : fields) {
    const bool listed =
        name == field::routed_experts || std::any_of(std::begin(kDeliveryFields), std::end(kDeliveryFields),
                                                     [&](const DeliveryField& f) { return name == f.name; });
    usage_check(listed, path + ": field '" + name + "' is not one a rollout delivers");
  }
}

}  // namespace

bool generates_ahead(const Config& config, const StepSchedule& schedule, int64_t step) {
  return config.async.max_staleness >= 1 && (step < schedule.total_steps() || schedule.saves_at(step));
}

Delivery load_delivery(const std::string& path, const Config& config, const TrainerState& state) {
  verify_manifest_entry(path);
  json metadata;
  Delivery d;
  d.global.fields = load_safetensors(path, &metadata);
  usage_check(metadata.is_object() && metadata.contains("delivery") && metadata["delivery"].is_string(),
              path + ": no `delivery` metadata: not a batch a run with async.max_staleness=1 saved");
  check_delivery_fields(d.global.fields, config.rollout.n, path);
  const std::optional<json> meta = try_parse_json_bounded(metadata["delivery"].get<std::string>());
  usage_check(meta && meta->is_object(), path + ": the `delivery` metadata is not a JSON object");
  for (const char* key : {"metrics", "policy_version", "gen_batches"})
    usage_check(meta->contains(key), path + ": the `delivery` metadata has no '" + key + "'");
  for (const char* key : {"policy_version", "gen_batches"})
    usage_check(meta->at(key).is_number_integer(), path + ": '" + key + "' in the `delivery` metadata is " +
                                                       meta->at(key).dump() + ", not a whole number");
  read_meta(*meta, d, path);
  // The batch of step s + 1, generated during step s from the weights of step s - 1.
  usage_check(d.policy_version == state.global_step - 1,
              path + ": 'policy_version' is " + std::to_string(d.policy_version) +
                  ", but the batch in flight at step " + std::to_string(state.global_step) +
                  " comes from the weights of step " + std::to_string(state.global_step - 1) +
                  ": the file belongs to another checkpoint");
  usage_check(d.gen_batches == state.gen_batches, path + ": 'gen_batches' is " + std::to_string(d.gen_batches) +
                                                      ", trainer_state.json says " + std::to_string(state.gen_batches) +
                                                      ": the file belongs to another checkpoint");
  usage_check(d.reward_moments.count == state.reward_moments.count &&
                  d.reward_moments.mean == state.reward_moments.mean &&
                  d.reward_moments.var == state.reward_moments.var,
              path + ": 'reward_moments' differ from trainer_state.json's: the file belongs to another checkpoint");
  d.group_rows = group_rows_of(d.global, config.rollout.n);
  usage_check(!d.group_rows.empty(), path + ": field 'group_id' marks no row as a real prompt's");
  return d;
}

RolloutSteps::RolloutSteps(Run& run)
    : run_(run),
      config_(run.config()),
      context_(run.context()),
      policy_(Actor::reference(config_, vocab_size_for(config_, *run.inputs().tokenizer), context_.device())),
      generator_(run) {}

void RolloutSteps::start() {
  if (started_) return;
  started_ = true;
  const RolesStart s = share_start(context_, {});
  version_ = s.policy_version;
  generator_.set_gen_batches(s.gen_batches);
  generator_.set_reward_moments(s.reward_moments);
  sent_ahead_ = s.in_flight;
  sync_weights(context_, *policy_);
}

PendingBatch RolloutSteps::generate(int64_t step) {
  Metrics m;
  PendingBatch g;
  g.rows = generator_.generate(*policy_, step, m);
  g.metrics = m.reduce(context_);
  g.policy_version = version_;
  g.gen_batches = generator_.gen_batches();
  g.reward_moments = generator_.reward_moments();
  return g;
}

std::map<std::string, double> RolloutSteps::step(int64_t step) {
  start();
  if (!sent_ahead_) send_batch(context_, generate(step));
  sent_ahead_ = false;
  // One step off-policy: the next batch, from the weights before this step's update, while the trainers update.
  const bool ahead = generates_ahead(config_, run_.schedule(), step);
  PendingBatch next;
  if (ahead) next = generate(step + 1);
  sync_weights(context_, *policy_);
  version_ = step;
  if (ahead) {
    send_batch(context_, next);
    sent_ahead_ = true;
  }
  return {};
}

ValMetrics RolloutSteps::validate(int64_t /*step*/) {
  start();
  RunInputs& in = run_.inputs();
  ValMetrics val;
  {
    WorkerState::Phase phase(policy_->state(), /*whole_model=*/true);
    val = evaluate(policy_->model(), in.val_set, *in.rewarder, *in.tokenizer, config_, context_, in.environment.get());
  }
  return share_validation(context_, val);
}

void RolloutSteps::check_identical(const std::string& when) {
  policy_->state().check_identical(context_, when + " (rollout ranks)");
}

}  // namespace ppo
