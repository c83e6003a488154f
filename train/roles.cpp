// See train/roles.h.
#include "train/roles.h"

#include <algorithm>
#include <nlohmann/json.hpp>
#include <sstream>
#include <utility>

#include "common/error.h"
#include "model/safetensors.h"
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

Batch trainer_rows(const Delivery& delivery, const Config& config, const Context& context) {
  return dispatch_groups(delivery.global, delivery.group_rows, config.rollout.n, config.derived.dispatch_block,
                         context.world_size(), context.rank(), config.parallel.pad_to_world);
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

Delivery load_delivery(const std::string& path, int64_t n) {
  json metadata;
  Delivery d;
  d.global.fields = load_safetensors(path, &metadata);
  usage_check(metadata.is_object() && metadata.contains("delivery") && metadata["delivery"].is_string(),
              path + ": no `delivery` metadata: not a batch a run with async.max_staleness=1 saved");
  try {
    read_meta(json::parse(metadata["delivery"].get<std::string>()), d, path);
    d.global.check();
    d.group_rows = group_rows_of(d.global, n);
  } catch (const std::exception& e) {
    throw UsageError(path + ": the saved batch is not one this run can train on (" + e.what() + ")");
  }
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
  const bool ahead = config_.async.max_staleness >= 1 && step < run_.schedule().total_steps();
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
