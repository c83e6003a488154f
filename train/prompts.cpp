// See train/prompts.h.
#include "train/prompts.h"

#include "common/error.h"
#include "common/random.h"
#include "parallel/dispatch.h"

namespace ppo {

int64_t vocab_size_for(const Config& config, const Tokenizer& tokenizer) {
  return config.model.vocab_size > 0 ? config.model.vocab_size : tokenizer.vocab_size();
}

std::vector<TaskSample> load_prompts(const Config& config, const Task& task, bool train) {
  const std::string& file = train ? config.data.train_files : config.data.val_files;
  if (!file.empty()) return load_jsonl(task, file);
  const DataConfig& d = config.data;
  // Validation prompts use another seed than training ones.
  return task.generate(train ? d.train_size : d.val_size, d.min_difficulty, d.max_difficulty,
                       train ? static_cast<uint64_t>(d.seed) : hash_combine(static_cast<uint64_t>(d.seed), 0x7661));
}

std::optional<ChatTemplate> prompt_chat_template(const Config& config, const Tokenizer& tokenizer) {
  if (!config.data.apply_chat_template) return std::nullopt;
  usage_check(!tokenizer.chat_template().empty(),
              "data.apply_chat_template=true, but model.tokenizer '" + config.model.tokenizer +
                  "' has no chat template (chat_template.jinja, or \"chat_template\" in tokenizer_config.json)");
  return ChatTemplate::from_jinja(tokenizer.chat_template(),
                                  "data.apply_chat_template (" + config.model.tokenizer + ")");
}

std::string prompt_text(const TaskSample& sample, const ChatTemplate* chat) {
  if (!chat) return sample.prompt;
  const nlohmann::json messages = sample.messages.empty()
                                      ? nlohmann::json::array({{{"role", "user"}, {"content", sample.prompt}}})
                                      : sample.messages;
  return chat->render(messages) + sample.response_prefix;
}

std::vector<int64_t> encode_prompt(const Tokenizer& tokenizer, const TaskSample& sample, int64_t max_prompt_length,
                                   const ChatTemplate* chat) {
  std::vector<int64_t> ids;
  if (!chat && tokenizer.add_bos()) ids.push_back(tokenizer.bos_id());
  for (int64_t id : tokenizer.encode(prompt_text(sample, chat))) ids.push_back(id);
  usage_check(!ids.empty(), "prompt " + std::to_string(sample.index) + " is empty and the tokenizer has no BOS");
  usage_check(static_cast<int64_t>(ids.size()) <= max_prompt_length,
              "prompt " + std::to_string(sample.index) + " has " + std::to_string(ids.size()) +
                  " tokens, more than data.max_prompt_length=" + std::to_string(max_prompt_length));
  return ids;
}

RankPrompts rank_prompts(const std::vector<TaskSample>& global_samples, const Tokenizer& tokenizer,
                         const Config& config, int64_t block, int64_t world, int64_t rank, bool pad) {
  RankPrompts out;
  const std::optional<ChatTemplate> chat = prompt_chat_template(config, tokenizer);
  const ChatTemplate* chat_ptr = chat ? &*chat : nullptr;
  std::vector<std::vector<int64_t>> encoded;
  for (const auto& s : global_samples) {
    encoded.push_back(encode_prompt(tokenizer, s, config.data.max_prompt_length, chat_ptr));
    out.prompt_width = std::max(out.prompt_width, static_cast<int64_t>(encoded.back().size()));
  }
  const int64_t B = static_cast<int64_t>(global_samples.size());
  for (int64_t p : dispatch_positions(B, std::min(block, B), world, rank, pad)) {
    const bool is_pad = p < 0;
    const int64_t position = is_pad ? -1 - p : p;
    out.samples.push_back(global_samples[position]);
    out.texts.push_back(prompt_text(global_samples[position], chat_ptr));
    out.ids.push_back(encoded[position]);
    out.positions.push_back(position);
    out.is_pad.push_back(is_pad);
  }
  return out;
}

}  // namespace ppo
