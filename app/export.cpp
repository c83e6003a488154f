// See app/export.h.
#include "app/export.h"

#include <filesystem>
#include <iostream>

#include "common/config.h"
#include "common/error.h"
#include "common/files.h"
#include "model/hf.h"
#include "model/lora.h"
#include "model/weights.h"
#include "parallel/context.h"
#include "text/tokenizers.h"
#include "train/prompts.h"
#include "workers/actor.h"
#include "workers/critic.h"
#include "workers/worker.h"

namespace ppo {
namespace {

namespace fs = std::filesystem;

// <run>/config.yaml for a checkpoint folder <run>/checkpoints/global_step_N (as RunDir lays them out).
std::string run_config_of(const fs::path& checkpoint) {
  return (checkpoint.parent_path().parent_path() / "config.yaml").string();
}

// `path` absolute, with symbolic links resolved as far as it exists, and without a trailing separator.
fs::path resolved(const std::string& path) {
  fs::path p = fs::weakly_canonical(fs::absolute(path)).lexically_normal();
  return p.filename().empty() ? p.parent_path() : p;
}

// Whether `inner` is `outer` or lies inside it (both resolved).
bool is_within(const fs::path& inner, const fs::path& outer) {
  const fs::path relative = inner.lexically_relative(outer);
  return !relative.empty() && *relative.begin() != "..";
}

// --out of `ppo export` must not touch what is read or what the run owns, and --force replaces only an earlier
// export: a folder of the files export writes and nothing else.
void check_export_target(const fs::path& out, const fs::path& checkpoint, bool force) {
  const std::string shown = "--out " + out.string();
  usage_check(!is_within(checkpoint, out), shown + " is the checkpoint being exported or a folder holding it");
  const fs::path checkpoints = checkpoint.parent_path();
  usage_check(!is_within(out, checkpoint) && !(checkpoints.filename() == "checkpoints" && is_within(out, checkpoints)),
              shown + " lies inside the run's checkpoints (" + checkpoints.string() +
                  "), which the run prunes and resumes from; write the export elsewhere");
  std::error_code error;
  const fs::file_status status = fs::symlink_status(out, error);
  if (!fs::exists(status)) return;
  usage_check(fs::is_directory(status), shown + " exists and is not a folder");
  if (fs::is_empty(out, error)) return;
  usage_check(force, shown + " exists and is not empty; choose another, or pass --force to replace an earlier export");
  for (const auto& entry : fs::directory_iterator(out)) {
    const std::string name = entry.path().filename().string();
    usage_check(entry.is_regular_file() && is_hf_export_file(name),
                shown + " holds '" + name + "', which is not a file ppo export writes: --force replaces only an " +
                    "earlier export (config.json, the weights, the tokenizer files), so nothing else is deleted");
  }
}

// Checkpoint -> Hugging Face folder. The model shape and tokenizer come from the run's config.yaml (or --config),
// with key=value overrides on top; the weights from <checkpoint>/actor.pt (actor.safetensors from a ZeRO-3 run).
// A `ppo rm` checkpoint: the critic's weights (critic.pt, or its LoRA adapters) and no policy.
bool is_reward_model_checkpoint(const std::string& checkpoint) {
  return !fs::is_regular_file(weights_file(checkpoint, "actor")) &&
         !fs::is_regular_file(checkpoint + "/actor_lora.safetensors") &&
         (fs::is_regular_file(weights_file(checkpoint, "critic")) ||
          fs::is_regular_file(checkpoint + "/critic_lora.safetensors"));
}

// The policy of `checkpoint` into folder `out`: merged (a Hugging Face model) or its PEFT adapter. Returns its
// parameter count.
int64_t write_policy_export(Config config, const std::string& checkpoint, const std::string& lora_mode,
                            const std::string& out, uint64_t max_shard_bytes) {
  config.actor.init_checkpoint = checkpoint;
  auto tokenizer = make_tokenizer(config.model.tokenizer);
  const std::unique_ptr<Actor> actor = Actor::reference(config, vocab_size_for(config, *tokenizer));
  if (lora_mode == "adapter") {
    usage_check(actor->has_lora(), "--lora adapter: " + checkpoint + " has no LoRA adapters (its run had " +
                                       "actor.lora.rank 0); export it whole, without --lora adapter");
    save_peft_adapter(*actor->model(), config.actor.lora, out, config.model.path);
  } else {
    merge_lora(*actor->model()->model);
    export_hf(actor->model(), config.model, out, *tokenizer, config.model.tokenizer, max_shard_bytes);
  }
  return parameter_count(*actor->model());
}

// The reward model of a `ppo rm` checkpoint into folder `out`, its LoRA adapters merged, as a sequence classifier.
int64_t write_reward_model_export(const Config& config, const std::string& checkpoint, const std::string& lora_mode,
                                  const std::string& out, uint64_t max_shard_bytes) {
  usage_check(lora_mode == "merged", "--lora adapter: " + checkpoint +
                                         " is a reward model's checkpoint (ppo rm), exported whole as a "
                                         "*ForSequenceClassification folder; drop --lora adapter");
  auto tokenizer = make_tokenizer(config.model.tokenizer);
  const int64_t vocab = vocab_size_for(config, *tokenizer);
  const ModelConfig shape = critic_model_config(config, vocab);  // critic.model.path's rotary base and norms
  ValueModel model =
      initial_model<ValueModel>(shape, vocab, checkpoint, "critic", /*is_value_model=*/true, config.critic.lora);
  merge_lora(*model->model);
  export_hf_classifier(model, shape, out, *tokenizer, config.model.tokenizer, max_shard_bytes);
  return parameter_count(*model);
}

}  // namespace

int run_export_command(CommandArgs& a) {
  usage_check(a.args.count("checkpoint") == 1,
              "ppo export needs --checkpoint DIR, a checkpoint folder such as runs/x/checkpoints/global_step_10");
  usage_check(a.args.count("out") == 1, "ppo export needs --out DIR, the Hugging Face folder to write");
  const std::string checkpoint = a.args["checkpoint"].as<std::string>(), out = a.args["out"].as<std::string>();
  usage_check(!out.empty(), "--out is empty: give the Hugging Face folder to write, e.g. --out exported/");
  const bool reward_model = is_reward_model_checkpoint(checkpoint);
  usage_check(reward_model || fs::is_regular_file(weights_file(checkpoint, "actor")) ||
                  fs::is_regular_file(checkpoint + "/actor_lora.safetensors"),
              checkpoint + "/actor.pt not found: --checkpoint must be a checkpoint folder such as " +
                  "runs/x/checkpoints/global_step_10");
  const std::string lora_mode = a.args["lora"].as<std::string>();
  usage_check(lora_mode == "merged" || lora_mode == "adapter",
              "--lora " + lora_mode +
                  ": valid: merged (a whole Hugging Face model, the adapters folded in) or adapter "
                  "(PEFT's adapter folder)");
  const uint64_t max_shard_bytes = a.args["max-shard-bytes"].as<uint64_t>();
  usage_check(max_shard_bytes > 0,
              "--max-shard-bytes is 0: give the most bytes a weight file may hold (default "
              "5368709120, 5 GiB)");
  const fs::path out_path = resolved(out), checkpoint_path = resolved(checkpoint);
  check_export_target(out_path, checkpoint_path, a.args.count("force") > 0);
  if (a.config_files.empty()) {
    const std::string run_config = run_config_of(checkpoint_path);
    usage_check(fs::is_regular_file(run_config),
                run_config + " not found: the run's config gives the model shape and tokenizer; pass --config FILE");
    a.config_files.push_back(run_config);
  }
  Config config = command_config(a);
  if (!Context::get().is_root()) return 0;  // one writer
  // Written completely in a folder of its own beside --out, then renamed into place: a failure leaves no
  // half-written folder, and no folder of the user's is taken for a temporary one.
  fs::create_directories(out_path.parent_path());
  const std::string tmp = make_temp_dir(out_path.string());
  int64_t parameters = 0;
  try {
    parameters = reward_model ? write_reward_model_export(config, checkpoint, lora_mode, tmp, max_shard_bytes)
                              : write_policy_export(config, checkpoint, lora_mode, tmp, max_shard_bytes);
  } catch (...) {
    std::error_code ignored;
    ppo::remove_tree(tmp, ignored);
    throw;
  }
  std::error_code error;
  if (fs::exists(out_path, error) && !fs::is_empty(out_path, error)) {  // an earlier export (checked above)
    const std::string old = make_temp_dir(out_path.string());
    fs::rename(out_path, old);
    fs::rename(tmp, out_path);
    ppo::remove_tree(old);
  } else {
    fs::rename(tmp, out_path);
  }
  std::cout << "exported " << checkpoint << " (" << (reward_model ? "a reward model, " : "") << parameters
            << " parameters) to " << out << "\n";
  return 0;
}

void export_options(cxxopts::Options& o) {
  o.add_options()("checkpoint", "checkpoint folder (<run>/checkpoints/global_step_N)", cxxopts::value<std::string>())(
      "out", "Hugging Face folder to write", cxxopts::value<std::string>())(
      "max-shard-bytes", "split the weights into model-0000i-of-0000N.safetensors above this size",
      cxxopts::value<uint64_t>()->default_value("5368709120"))(
      "force", "replace --out when it holds an earlier export (only the files export writes)")(
      "lora",
      "a LoRA checkpoint: merged (a whole Hugging Face model, the adapters folded in) or adapter (PEFT's "
      "adapter_config.json and adapter_model.safetensors)",
      cxxopts::value<std::string>()->default_value("merged"));
}

}  // namespace ppo
