// See train/prompts.h.
#include "train/prompts.h"

#include <algorithm>
#include <fstream>
#include <sstream>

#include "common/error.h"
#include "common/random.h"
#include "parallel/dispatch.h"

namespace ppo {

int64_t vocab_size_for(const Config& config, const Tokenizer& tokenizer) {
  return config.model.vocab_size > 0 ? config.model.vocab_size : tokenizer.vocab_size();
}

namespace {

// Whether the prompt fits, after any chat template; false only when filtering is on (else encode_prompt throws).
bool prompt_fits(const Tokenizer& tokenizer, const TaskSample& sample, const Config& config, const ChatTemplate* chat) {
  if (!config.data.filter_overlong_prompts) {
    encode_prompt(tokenizer, sample, config.data.max_prompt_length, chat, config.data.truncation);
    return true;
  }
  const size_t bos = !chat && tokenizer.add_bos() ? 1 : 0;
  return static_cast<int64_t>(bos + tokenizer.encode(prompt_text(sample, chat)).size()) <=
         config.data.max_prompt_length;
}

}  // namespace

std::vector<TaskSample> load_prompts(const Config& config, const Task& task, const Tokenizer& tokenizer, bool train,
                                     int64_t* skipped) {
  const std::string& file = train ? config.data.train_files : config.data.val_files;
  const DataConfig& d = config.data;
  std::vector<TaskSample> samples;
  if (!file.empty()) {
    samples = load_jsonl(task, file, d.prompt_key);
    usage_check(!samples.empty(), file + ": no records");
  } else {
    // Validation prompts use another seed than training ones.
    samples =
        task.generate(train ? d.train_size : d.val_size, d.min_difficulty, d.max_difficulty,
                      train ? static_cast<uint64_t>(d.seed) : hash_combine(static_cast<uint64_t>(d.seed), 0x7661));
    for (TaskSample& s : samples) s.data_source = task.name();
  }
  const std::optional<ChatTemplate> chat = prompt_chat_template(config, tokenizer, any_chat_prompt(samples));
  std::vector<TaskSample> kept;
  for (TaskSample& s : samples)
    if (prompt_fits(tokenizer, s, config, chat_for(s, config, chat))) kept.push_back(std::move(s));
  if (skipped) *skipped = static_cast<int64_t>(samples.size() - kept.size());
  usage_check(!kept.empty(), (file.empty() ? std::string("the generated prompts") : file) +
                                 ": every prompt is longer than data.max_prompt_length=" +
                                 std::to_string(d.max_prompt_length) + " (data.filter_overlong_prompts skipped them)");
  return kept;
}

std::optional<ChatTemplate> prompt_chat_template(const Config& config, const Tokenizer& tokenizer, bool needed) {
  const std::string& chosen = config.data.chat_template;
  if (chosen == "chatml") return ChatTemplate();
  if (chosen == "plain") return ChatTemplate::plain();
  if (!chosen.empty()) {
    std::ifstream in(chosen);
    usage_check(in.good(), "data.chat_template: '" + chosen + "' is not chatml, plain or a readable .jinja file");
    std::stringstream text;
    text << in.rdbuf();
    return ChatTemplate::from_jinja(text.str(), "data.chat_template (" + chosen + ")");
  }
  if (!config.data.apply_chat_template && !needed) return std::nullopt;
  const std::string why = config.data.apply_chat_template ? "data.apply_chat_template=true"
                                                          : "the data has prompts that are lists of chat messages";
  usage_check(!tokenizer.chat_template().empty(),
              why + ", but model.tokenizer '" + config.model.tokenizer +
                  "' has no chat template (chat_template.jinja, or \"chat_template\" in tokenizer_config.json); set "
                  "data.chat_template=chatml | plain | a .jinja file");
  return ChatTemplate::from_jinja(tokenizer.chat_template(), why + " (" + config.model.tokenizer + ")");
}

const ChatTemplate* chat_for(const TaskSample& sample, const Config& config, const std::optional<ChatTemplate>& chat) {
  return chat && (config.data.apply_chat_template || sample.prompt_is_chat) ? &*chat : nullptr;
}

bool any_chat_prompt(const std::vector<TaskSample>& samples) {
  return std::any_of(samples.begin(), samples.end(), [](const TaskSample& s) { return s.prompt_is_chat; });
}

std::string prompt_text(const TaskSample& sample, const ChatTemplate* chat) {
  if (!chat) {
    usage_check(!sample.prompt_is_chat, (sample.origin.empty() ? "" : sample.origin + ": ") +
                                            "the prompt is a list of chat messages and no chat template is set "
                                            "(data.chat_template)");
    return sample.prompt;
  }
  const nlohmann::json messages = sample.messages.empty()
                                      ? nlohmann::json::array({{{"role", "user"}, {"content", sample.prompt}}})
                                      : sample.messages;
  return chat->render(messages) + sample.response_prefix;
}

std::vector<int64_t> encode_prompt(const Tokenizer& tokenizer, const TaskSample& sample, int64_t max_prompt_length,
                                   const ChatTemplate* chat, const std::string& truncation) {
  std::vector<int64_t> ids;
  if (!chat && tokenizer.add_bos()) ids.push_back(tokenizer.bos_id());
  for (int64_t id : tokenizer.encode(prompt_text(sample, chat))) ids.push_back(id);
  const std::string what = sample.origin.empty() ? "prompt " + std::to_string(sample.index) : sample.origin;
  usage_check(!ids.empty(), what + ": the prompt is empty and the tokenizer has no BOS");
  const int64_t n = static_cast<int64_t>(ids.size());
  if (n <= max_prompt_length) return ids;
  if (truncation == "left") return std::vector<int64_t>(ids.end() - max_prompt_length, ids.end());
  if (truncation == "right") return std::vector<int64_t>(ids.begin(), ids.begin() + max_prompt_length);
  if (truncation == "middle") {  // veRL: the first max/2 tokens and the last max - max/2
    std::vector<int64_t> kept(ids.begin(), ids.begin() + max_prompt_length / 2);
    kept.insert(kept.end(), ids.end() - (max_prompt_length - max_prompt_length / 2), ids.end());
    return kept;
  }
  throw UsageError(
      what + ": the prompt has " + std::to_string(n) +
      " tokens, more than data.max_prompt_length=" + std::to_string(max_prompt_length) +
      " (data.truncation=left, right or middle cuts such prompts; data.filter_overlong_prompts=true skips them)");
}

RankPrompts rank_prompts(const std::vector<TaskSample>& global_samples, const Tokenizer& tokenizer,
                         const Config& config, int64_t block, int64_t world, int64_t rank, bool pad) {
  RankPrompts out;
  const std::optional<ChatTemplate> chat = prompt_chat_template(config, tokenizer, any_chat_prompt(global_samples));
  std::vector<std::vector<int64_t>> encoded;
  for (const auto& s : global_samples) {
    encoded.push_back(
        encode_prompt(tokenizer, s, config.data.max_prompt_length, chat_for(s, config, chat), config.data.truncation));
    out.prompt_width = std::max(out.prompt_width, static_cast<int64_t>(encoded.back().size()));
  }
  const int64_t B = static_cast<int64_t>(global_samples.size());
  for (int64_t p : dispatch_positions(B, std::min(block, B), world, rank, pad)) {
    const bool is_pad = p < 0;
    const int64_t position = is_pad ? -1 - p : p;
    out.samples.push_back(global_samples[position]);
    out.texts.push_back(prompt_text(global_samples[position], chat_for(global_samples[position], config, chat)));
    out.ids.push_back(encoded[position]);
    out.positions.push_back(position);
    out.is_pad.push_back(is_pad);
  }
  return out;
}

}  // namespace ppo
