// See train/distillation.h.
#include "train/distillation.h"

#include <filesystem>
#include <vector>

#include "common/config_schema.h"
#include "common/error.h"
#include "model/hf.h"
#include "model/weights.h"

namespace ppo {

namespace fs = std::filesystem;

namespace {

constexpr const char* kKey = "distillation.teacher.model.path";

// Whether `dir` is a ppo.cpp checkpoint with a policy: actor.pt, actor.safetensors (ZeRO-3) or LoRA adapters.
bool has_policy_weights(const std::string& dir) {
  return fs::is_regular_file(weights_file(dir, "actor")) || fs::is_regular_file(dir + "/actor_lora.safetensors");
}

// The teacher's model from a Hugging Face folder: the student's settings (dtype, attention, checkpointing) with the
// folder's shape and tokenizer.
void hf_teacher(Config& teacher, const std::string& dir) {
  teacher.model.path = dir;
  teacher.model.tokenizer = "char";  // the folder's tokenizer.json when it has one (resolve_model_path)
  teacher.model.lora_path.clear();
  teacher.actor.lora = LoraConfig{};
  teacher.actor.init_checkpoint.clear();
  resolve_model_path(teacher.model);
}

// The teacher's model from a checkpoint: the shape, tokenizer and LoRA settings of the run that wrote it.
void checkpoint_teacher(Config& teacher, const std::string& dir) {
  const fs::path run_config = fs::path(dir).parent_path().parent_path() / "config.yaml";
  usage_check(fs::is_regular_file(run_config),
              std::string(kKey) + "=" + dir + " is a checkpoint, but its run's config.yaml (" + run_config.string() +
                  "), which gives the teacher's shape and tokenizer, is not there");
  const Config run = load_config({run_config.string()}, {});
  teacher.model = run.model;
  teacher.actor.lora = run.actor.lora;
  teacher.actor.init_checkpoint = dir;
}

}  // namespace

std::unique_ptr<Config> teacher_config(const Config& config) {
  const DistillationConfig& d = config.distillation;
  const std::string& dir = d.teacher.model.path;
  auto teacher = std::make_unique<Config>(config);
  teacher->ref.offload = d.teacher.offload;
  teacher->ref.log_prob_micro_batch_size_per_gpu = d.teacher.log_prob_micro_batch_size_per_gpu;
  teacher->actor.router_replay = "disabled";  // the student's routing is not the teacher's
  try {
    if (fs::is_regular_file(fs::path(dir) / "config.json"))
      hf_teacher(*teacher, dir);
    else if (has_policy_weights(dir))
      checkpoint_teacher(*teacher, dir);
    else
      throw UsageError(dir +
                       " is neither a Hugging Face folder (config.json) nor a ppo.cpp checkpoint with a policy "
                       "(actor.pt, actor.safetensors or actor_lora.safetensors)");
  } catch (const UsageError& e) {
    const std::string what = e.what();
    throw UsageError(what.rfind(kKey, 0) == 0 ? what : std::string(kKey) + ": " + what);
  }
  return teacher;
}

void check_teacher_tokenizer(const Tokenizer& student, const std::string& student_source, const Tokenizer& teacher,
                             const std::string& teacher_source) {
  const std::string both = " (the student's tokenizer " + student_source + ", the teacher's " + teacher_source +
                           "): the teacher must read the student's token ids as the student does";
  usage_check(student.vocab_size() == teacher.vocab_size(),
              std::string(kKey) + ": the vocabularies differ in size, " + std::to_string(student.vocab_size()) +
                  " and " + std::to_string(teacher.vocab_size()) + " tokens" + both);
  const std::vector<std::pair<const char*, std::pair<int64_t, int64_t>>> specials = {
      {"pad", {student.pad_id(), teacher.pad_id()}},
      {"bos", {student.bos_id(), teacher.bos_id()}},
      {"eos", {student.eos_id(), teacher.eos_id()}}};
  for (const auto& [name, ids] : specials)
    usage_check(ids.first == ids.second, std::string(kKey) + ": the " + name + " token ids differ, " +
                                             std::to_string(ids.first) + " and " + std::to_string(ids.second) + both);
  for (int64_t id = 0; id < student.vocab_size(); ++id) {
    const std::string a = student.decode({id}, /*skip_special=*/false), b = teacher.decode({id}, false);
    usage_check(a == b, std::string(kKey) + ": token " + std::to_string(id) + " differs" + both);
  }
}

void check_teacher_vocab(int64_t student_vocab, int64_t teacher_vocab, int64_t topk) {
  usage_check(teacher_vocab >= student_vocab,
              std::string(kKey) + ": the teacher's model has " + std::to_string(teacher_vocab) +
                  " vocabulary rows and the student's " + std::to_string(student_vocab) +
                  ": the teacher could not score every token the student samples");
  usage_check(topk <= student_vocab, "distillation.topk=" + std::to_string(topk) + " is more tokens than the " +
                                         std::to_string(student_vocab) + " of the student's vocabulary");
}

}  // namespace ppo
