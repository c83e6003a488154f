// veRL-format records (tasks/verl_record.h), the reward registry and Rewarder (tasks/reward.h), and the prompt
// rules of data.truncation / data.filter_overlong_prompts / chat prompts (train/prompts.h).
#include <catch2/catch.hpp>

#include <fstream>
#include <string>
#include <vector>

#include "common/config.h"
#include "common/error.h"
#include "tasks/datasets.h"
#include "tasks/reward.h"
#include "tasks/task.h"
#include "tasks/verl_record.h"
#include "tests/temp_dir.h"
#include "tests/usage_error.h"
#include "text/tokenizers.h"
#include "train/prompts.h"

using Catch::Matchers::Contains;
using nlohmann::json;
using ppo_test::usage_error_message;

namespace {

void write_lines(const std::string& path, const std::vector<json>& records) {
  std::ofstream out(path);
  for (const json& r : records) out << r.dump() << "\n";
}

json gsm8k_record(const std::string& question, const std::string& truth, int index) {
  return {{"data_source", "openai/gsm8k"},
          {"prompt", json::array({{{"role", "user"}, {"content", question}}})},
          {"ability", "math"},
          {"reward_model", {{"style", "rule"}, {"ground_truth", truth}}},
          {"extra_info", {{"split", "train"}, {"index", index}, {"answer", "2+3=5\n#### 5"}}}};
}

ppo::Score score_with(ppo::Rewarder& rewarder, const ppo::TaskSample& sample, const std::string& response,
                      const std::string& prompt = "") {
  return rewarder.score({{&sample, prompt, response}}).front();
}

}  // namespace

TEST_CASE("veRL records: prompt string or messages, ground truth, data_source and extra_info", "[tasks][verl]") {
  const ppo::TaskSample chat = ppo::verl_sample(gsm8k_record("What is 2+3?", "5", 7), "prompt");
  CHECK(chat.prompt_is_chat);
  CHECK(chat.messages.size() == 1);
  CHECK(chat.data_source == "openai/gsm8k");
  CHECK(chat.ground_truth == "5");
  CHECK(chat.index == 7);
  CHECK(chat.answer == "2+3=5\n#### 5");  // extra_info.answer: the SFT target
  CHECK(chat.extra_info["split"] == "train");

  json plain = {{"question", "12>"}, {"reward_model", {{"ground_truth", {{"target", "21"}}}}}};
  const ppo::TaskSample s = ppo::verl_sample(plain, "question");  // data.prompt_key
  CHECK_FALSE(s.prompt_is_chat);
  CHECK(s.prompt == "12>");
  CHECK(s.data_source.empty());
  CHECK(s.index == -1);
  CHECK(ppo::is_verl_record(plain));
  CHECK_FALSE(ppo::is_verl_record(json{{"prompt", "x"}, {"answer", "y"}}));
}

TEST_CASE("veRL records: each broken rule names its field", "[tasks][verl]") {
  json r = gsm8k_record("q", "5", 0);
  CHECK_THAT(usage_error_message([&] { ppo::verl_sample(r, "question"); }),
             Contains("missing field 'question'") && Contains("data.prompt_key"));
  json no_truth = r;
  no_truth["reward_model"] = {{"style", "rule"}};
  CHECK_THAT(usage_error_message([&] { ppo::verl_sample(no_truth, "prompt"); }), Contains("reward_model.ground_truth"));
  json bad_prompt = r;
  bad_prompt["prompt"] = json::array({{{"role", "user"}}});
  CHECK_THAT(usage_error_message([&] { ppo::verl_sample(bad_prompt, "prompt"); }), Contains("field 'prompt'"));
  json bad_source = r;
  bad_source["data_source"] = 3;
  CHECK_THAT(usage_error_message([&] { ppo::verl_sample(bad_source, "prompt"); }), Contains("data_source"));
  json bad_index = r;
  bad_index["extra_info"]["index"] = "seven";
  CHECK_THAT(usage_error_message([&] { ppo::verl_sample(bad_index, "prompt"); }),
             Contains("extra_info: field 'index'"));
}

TEST_CASE("load_samples reads veRL and task records and names the file and line of a bad one", "[tasks][verl]") {
  ppo_test::TempDir dir("verl_load");
  const std::string path = dir.sub("train.jsonl");
  json broken = gsm8k_record("q", "5", 1);
  broken["reward_model"] = "5";
  write_lines(path, {gsm8k_record("What is 2+3?", "5", 0), broken});
  auto task = ppo::make_task("reverse");
  CHECK_THAT(usage_error_message([&] { ppo::load_samples(*task, path); }),
             Contains(path + ":2:") && Contains("reward_model.ground_truth"));
  write_lines(path, {gsm8k_record("What is 2+3?", "5", 0),
                     {{"prompt", "12>"}, {"answer", "21"}, {"ground_truth", {{"target", "21"}}}, {"difficulty", 2}}});
  const std::vector<ppo::TaskSample> samples = ppo::load_samples(*task, path);
  REQUIRE(samples.size() == 2);
  CHECK(samples[0].data_source == "openai/gsm8k");
  CHECK(samples[0].origin == path + ":1");
  CHECK(samples[1].data_source == "reverse");  // a task record: the task's name
  CHECK(samples[1].origin == path + ":2");
}

TEST_CASE("built-in rewards by data_source and by name", "[tasks][verl][reward]") {
  CHECK(ppo::reward_function_for("openai/gsm8k") == "gsm8k");
  CHECK(ppo::reward_function_for("lighteval/MATH") == "math");
  CHECK(ppo::reward_function_for("kk_logic") == "kk");
  CHECK(ppo::reward_function_for("reverse") == "reverse");
  CHECK(ppo::reward_function_for("my/dataset").empty());
  CHECK_THAT(usage_error_message([] { ppo::make_reward_function("f1"); }),
             Contains("unknown reward 'f1'") && Contains("exact_match") && Contains("gsm8k"));

  ppo::Rewarder by_source(ppo::RewardConfig{}, "reverse");
  const ppo::TaskSample gsm = ppo::verl_sample(gsm8k_record("What is 1000+1?", "1001", 0), "prompt");
  CHECK(score_with(by_source, gsm, "1000+1=1001\n#### 1,001").score == 1.0);
  CHECK(score_with(by_source, gsm, "1000+1=1002\n#### 1002").score == 0.0);
  CHECK_FALSE(score_with(by_source, gsm, "1001").format_ok);  // no "#### N"

  // A toy task's reward with veRL's plain-string ground truth, and with the task's own {"target": ...}.
  ppo::TaskSample toy = ppo::verl_sample(
      {{"prompt", "123>"}, {"data_source", "reverse"}, {"reward_model", {{"ground_truth", "321"}}}}, "prompt");
  CHECK(score_with(by_source, toy, "321").correct);
  CHECK(score_with(by_source, toy, "321").score == Approx(1.0));
  CHECK(score_with(by_source, toy, "3").score < 1.0);

  // Logic-RL's K&K records carry the solution as solution_text_format lines; the prompt opened the think block.
  ppo::TaskSample kk = ppo::verl_sample(
      {{"prompt", "... <think>"},
       {"data_source", "kk_logic"},
       {"reward_model", {{"ground_truth", {{"solution_text_format", "(1) Zoey is a knave\n(2) Liam is a knight"}}}}}},
      "prompt");
  const std::string right = " reasoning </think> <answer> (1) Zoey is a knave\n(2) Liam is a knight </answer>";
  CHECK(score_with(by_source, kk, right, "User: ... Assistant: <think>").score == 3.0);
  CHECK(score_with(by_source, kk, "<think>" + right, "<|im_start|>assistant\n").score == 3.0);
  CHECK(score_with(by_source, kk, right, "<|im_start|>assistant\n").score == -3.0);  // no opening tag anywhere
  const std::string wrong = " x </think> <answer> (1) Zoey is a knight\n(2) Liam is a knight </answer>";
  CHECK(score_with(by_source, kk, wrong, "<think>").score == -0.5);

  // exact_match by reward.function, for every record whatever its data_source.
  ppo::RewardConfig exact;
  exact.function = "exact_match";
  ppo::Rewarder by_name(exact, "reverse");
  CHECK(score_with(by_name, gsm, " 1001\n").correct);
  CHECK_FALSE(score_with(by_name, gsm, "#### 1001").correct);
}

TEST_CASE("a data_source without a reward is refused at start-up with its record's place", "[tasks][verl][reward]") {
  ppo::TaskSample s = ppo::verl_sample(
      {{"prompt", "p"}, {"data_source", "my/dataset"}, {"reward_model", {{"ground_truth", "x"}}}}, "prompt");
  s.origin = "data/train.jsonl:4";
  ppo::Rewarder rewarder(ppo::RewardConfig{}, "reverse");
  CHECK_THAT(usage_error_message([&] { rewarder.check({s}); }),
             Contains("data/train.jsonl:4") && Contains("data_source 'my/dataset' has no built-in reward") &&
                 Contains("reward.function") && Contains("reward.command"));
  ppo::RewardConfig exact;
  exact.function = "exact_match";
  CHECK_NOTHROW(ppo::Rewarder(exact, "reverse").check({s}));
}

TEST_CASE("prompts over data.max_prompt_length: error, left or right truncation, or filtered", "[tasks][verl]") {
  auto tokenizer = ppo::make_tokenizer("char");
  ppo::TaskSample s;
  s.prompt = "0123456789";
  s.origin = "train.jsonl:3";
  // The char tokenizer adds BOS: 11 tokens.
  CHECK(ppo::encode_prompt(*tokenizer, s, 11).size() == 11);
  CHECK_THAT(usage_error_message([&] { ppo::encode_prompt(*tokenizer, s, 8); }),
             Contains("train.jsonl:3") && Contains("11 tokens") && Contains("data.max_prompt_length=8") &&
                 Contains("data.truncation") && Contains("data.filter_overlong_prompts"));
  const std::vector<int64_t> left = ppo::encode_prompt(*tokenizer, s, 4, nullptr, "left");
  const std::vector<int64_t> right = ppo::encode_prompt(*tokenizer, s, 4, nullptr, "right");
  CHECK(tokenizer->decode(left) == "6789");  // veRL's "left": the last tokens stay
  REQUIRE(right.size() == 4);
  CHECK(right.front() == tokenizer->bos_id());
  CHECK(tokenizer->decode({right.begin() + 1, right.end()}) == "012");
  const std::vector<int64_t> middle = ppo::encode_prompt(*tokenizer, s, 5, nullptr, "middle");
  REQUIRE(middle.size() == 5);  // veRL: the first 5/2 = 2 tokens and the last 3
  CHECK(middle.front() == tokenizer->bos_id());
  CHECK(tokenizer->decode({middle.begin() + 1, middle.end()}) == "0789");

  ppo_test::TempDir dir("verl_filter");
  const std::string path = dir.sub("val.jsonl");
  write_lines(
      path,
      {{{"prompt", "short"}, {"data_source", "reverse"}, {"reward_model", {{"ground_truth", "1"}}}},
       {{"prompt", std::string(40, 'x')}, {"data_source", "reverse"}, {"reward_model", {{"ground_truth", "1"}}}}});
  ppo::Config config;
  config.data.val_files = {path};
  config.data.max_prompt_length = 16;
  auto task = ppo::make_task("reverse");
  CHECK_THAT(usage_error_message([&] { ppo::load_prompts(config, *task, *tokenizer, false); }),
             Contains(path + ":2") && Contains("41 tokens"));
  config.data.filter_overlong_prompts = true;
  int64_t skipped = -1;
  const std::vector<ppo::TaskSample> kept = ppo::load_prompts(config, *task, *tokenizer, false, &skipped);
  CHECK(kept.size() == 1);
  CHECK(skipped == 1);
}

TEST_CASE("chat-message prompts need a template: data.chat_template plain or chatml", "[tasks][verl]") {
  auto tokenizer = ppo::make_tokenizer("char");  // no chat template of its own
  ppo::Config config;
  const ppo::TaskSample chat = ppo::verl_sample(gsm8k_record("What is 2+3?", "5", 0), "prompt");
  CHECK_THAT(usage_error_message([&] { ppo::prompt_chat_template(config, *tokenizer, /*needed=*/true); }),
             Contains("lists of chat messages") && Contains("data.chat_template"));
  CHECK_THAT(usage_error_message([&] { ppo::prompt_text(chat, nullptr); }), Contains("no chat template"));
  config.data.chat_template = "plain";
  auto plain = ppo::prompt_chat_template(config, *tokenizer, true);
  REQUIRE(plain);
  CHECK(ppo::prompt_text(chat, ppo::chat_for(chat, config, plain)) == "User: What is 2+3?\nAssistant: ");
  config.data.chat_template = "chatml";
  auto chatml = ppo::prompt_chat_template(config, *tokenizer, true);
  CHECK(ppo::prompt_text(chat, ppo::chat_for(chat, config, chatml)) ==
        "<|im_start|>user\nWhat is 2+3?<|im_end|>\n<|im_start|>assistant\n");
  // A plain-string prompt stays as it is unless data.apply_chat_template says otherwise.
  ppo::TaskSample text;
  text.prompt = "12>";
  CHECK(ppo::chat_for(text, config, chatml) == nullptr);
  config.data.chat_template = "/no/such/template.jinja";
  CHECK_THAT(usage_error_message([&] { ppo::prompt_chat_template(config, *tokenizer); }),
             Contains("data.chat_template") && Contains("/no/such/template.jinja"));
}
