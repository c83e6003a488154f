// Multi-turn rollouts with a tool environment (train/multi_turn.h): the answer format, the tool-call rule, the chat
// forms of tool messages, the environment program and its failures, the exact positions of the masked tokens, and a
// policy update that tool tokens do not enter but through the context.
#include <catch2/catch.hpp>

#include <cstdio>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "common/config.h"
#include "common/error.h"
#include "rl/algorithms.h"
#include "tasks/datasets.h"
#include "tests/paths.h"
#include "tests/temp_dir.h"
#include "tests/usage_error.h"
#include "text/chat_template.h"
#include "text/tokenizers.h"
#include "train/config_check.h"
#include "train/experience.h"
#include "train/multi_turn.h"
#include "train/prompts.h"
#include "workers/actor.h"

namespace {

using nlohmann::json;
using ppo_test::usage_error_message;

// A Python environment: `body` is the loop body given `r` (the request) that writes one line.
std::string python_environment(const ppo_test::TempDir& dir, const std::string& name, const std::string& body) {
  std::ofstream(dir.sub(name)) << "import json, sys, time\n"
                                  "for line in sys.stdin:\n"
                                  "    r = json.loads(line)\n"
                               << body;
  return "python3 '" + dir.sub(name) + "'";
}

ppo::Config tiny_config(const std::string& output_dir, std::vector<std::string> overrides = {}) {
  overrides.insert(overrides.end(),
                   {"trainer.output_dir=" + output_dir, "trainer.num_threads=1", "data.max_response_length=64",
                    "model.max_position_embeddings=80", "model.init_std=0.3"});
  ppo::Config c = ppo::load_config({ppo_test::paths().source_dir + "/configs/regression_tiny.yaml"}, overrides);
  ppo::check_config(c, 1);
  return c;
}

// The response tokens of row b of `batch` that are real (attention 1).
std::vector<int64_t> real_response(const ppo::Batch& batch, int64_t b) {
  const int64_t R = batch.at("responses").size(1);
  const torch::Tensor real = batch.at("attention_mask")[b].narrow(0, -R, R);
  std::vector<int64_t> out;
  for (int64_t t = 0; t < R && real[t].item<int64_t>() != 0; ++t)
    out.push_back(batch.at("responses")[b][t].item<int64_t>());
  return out;
}

}  // namespace

TEST_CASE("tool answers: output, done and reward, and each malformed answer named", "[cpu][multi_turn]") {
  const ppo::ToolAnswer a = ppo::parse_tool_answer(R"({"output": "408", "done": true, "reward": -0.5, "x": 1})");
  CHECK(a.output == "408");
  CHECK(a.done);
  CHECK(a.reward == -0.5);
  const ppo::ToolAnswer b = ppo::parse_tool_answer(R"({"output": "", "done": null})");
  CHECK(b.output.empty());
  CHECK_FALSE(b.done);
  CHECK(b.reward == 0);
  for (const auto& [line, expected] : std::vector<std::pair<std::string, std::string>>{
           {"408", "not a JSON object"},
           {"{\"output\": 408}", "no string \"output\""},
           {"{\"result\": \"408\"}", "no string \"output\""},
           {"{\"output\": \"a\", \"done\": 1}", "\"done\" is not a bool"},
           {"{\"output\": \"a\", \"reward\": \"1\"}", "\"reward\" is not a number"},
           {"{\"output\": \"a\", \"reward\": 1e300}", "\"reward\" 1e+300 is outside [-1e6, 1e6]"},
           {"{\"output\": \"a\", \"reward\": -3.0e38}", "\"reward\" -3e+38 is outside [-1e6, 1e6]"},
           {"{\"output\": ", "not JSON"}}) {
    INFO(line);
    CHECK_THAT(usage_error_message([&] { ppo::parse_tool_answer(line); }), Catch::Contains(expected));
  }
}

TEST_CASE("the tool call of a turn: between call_start and stop, or the whole turn without them", "[cpu][multi_turn]") {
  ppo::MultiTurnConfig c;  // <tool_call> ... </tool_call>
  std::string call;
  CHECK(ppo::find_tool_call("Let me see. <tool_call>12 * 34</tool_call>", true, c, call));
  CHECK(call == "12 * 34");
  CHECK(ppo::find_tool_call("<tool_call>1</tool_call> then <tool_call>\n{\"a\": 2}\n</tool_call>", true, c, call));
  CHECK(call == "\n{\"a\": 2}\n");
  CHECK(ppo::find_tool_call("no start, then 3 + 4</tool_call>", true, c, call));  // ended by stop: the whole turn
  CHECK(call == "no start, then 3 + 4");
  // Ended with EOS: a complete call inside the turn counts, text after it too; none means the final answer.
  CHECK(ppo::find_tool_call("<tool_call>5 - 1</tool_call> I will wait.", false, c, call));
  CHECK(call == "5 - 1");
  CHECK_FALSE(ppo::find_tool_call("The answer is 408.", false, c, call));
  CHECK_FALSE(ppo::find_tool_call("3 + 4</tool_call>", false, c, call));
  c.stop = "";
  c.call_start = "";  // every turn that ends with EOS goes to the environment
  CHECK(ppo::find_tool_call("I say: knight.", false, c, call));
  CHECK(call == "I say: knight.");
  c.call_start = "CALL:";
  CHECK(ppo::find_tool_call("first CALL: look north", false, c, call));
  CHECK(call == " look north");
  CHECK_FALSE(ppo::find_tool_call("nothing", false, c, call));
}

TEST_CASE("tool messages in the three chat forms, and the text inserted after a tool call", "[cpu][multi_turn]") {
  const json messages = json::parse(R"([{"role": "user", "content": "q"}, {"role": "assistant", "content": "c1"},
      {"role": "tool", "content": "t1"}, {"role": "tool", "content": "t2"}, {"role": "assistant", "content": "a"}])");
  const ppo::ChatTemplate role("Be brief."),
      qwen("Be brief.", ppo::ChatTemplate::Form::chatml, ppo::ChatTemplate::ToolForm::qwen);
  CHECK(role.render(messages, false) ==
        "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nq<|im_end|>\n<|im_start|>assistant\nc1<|im_end|>\n"
        "<|im_start|>tool\nt1<|im_end|>\n<|im_start|>tool\nt2<|im_end|>\n<|im_start|>assistant\na<|im_end|>\n");
  CHECK(qwen.render(messages, false) ==
        "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nq<|im_end|>\n<|im_start|>assistant\nc1<|im_end|>\n"
        "<|im_start|>user\n<tool_response>\nt1\n</tool_response>\n<tool_response>\nt2\n</tool_response><|im_end|>\n"
        "<|im_start|>assistant\na<|im_end|>\n");
  CHECK(ppo::ChatTemplate::plain().render(messages, true) ==
        "User: q\nAssistant: c1\nTool: t1\nTool: t2\nAssistant: "
        "a\nAssistant: ");
  CHECK(role.tool_turn("408", /*eos_closed=*/true) == "\n<|im_start|>tool\n408<|im_end|>\n<|im_start|>assistant\n");
  CHECK(role.tool_turn("408", false) == "<|im_end|>\n<|im_start|>tool\n408<|im_end|>\n<|im_start|>assistant\n");
  CHECK(qwen.tool_turn("408", true) ==
        "\n<|im_start|>user\n<tool_response>\n408\n</tool_response><|im_end|>\n<|im_start|>assistant\n");
  CHECK(ppo::ChatTemplate::plain().tool_turn("408", true) == "\nTool: 408\nAssistant: ");
  CHECK(ppo::ChatTemplate::from_jinja(
            "<|im_start|>assistant<|im_end|>{{- '\\n<tool_response>\\n' }}{{- '\\n</tool_response>' }}", "q")
            .tool_form() == ppo::ChatTemplate::ToolForm::qwen);
  CHECK(ppo::ChatTemplate::from_jinja("<|im_start|>assistant<|im_end|>", "s").tool_form() ==
        ppo::ChatTemplate::ToolForm::role);
  // Another form (Qwen3-Coder's writes '\n</tool_response>\n'; LFM2's <|tool_response_start|>): its tool messages
  // are refused, not rendered as Qwen's.
  for (const std::string jinja :
       {"<|im_start|>assistant<|im_end|>{{- '<tool_response>\\n' }}{{- '\\n</tool_response>\\n' }}",
        "<|im_start|>assistant<|im_end|>{{ '<|tool_response_start|>' }}"}) {
    const ppo::ChatTemplate other = ppo::ChatTemplate::from_jinja(jinja, "o");
    CHECK(other.tool_form() == ppo::ChatTemplate::ToolForm::unknown);
    CHECK_THAT(
        ppo_test::usage_error_message([&] { other.tool_turn("408", true); }),
        Catch::Matchers::Contains("chat message 0 is a tool message") && Catch::Matchers::Contains("does not render"));
  }
}

TEST_CASE(
    "the environment program answers in order from its thread, and a crash, a timeout or a bad answer names the "
    "command and the call",
    "[cpu][multi_turn]") {
  ppo_test::TempDir dir("ppo_tools");
  ppo::EnvironmentConfig c;
  c.command = python_environment(
      dir, "echo.py", "    print(json.dumps({'output': r['call'][::-1], 'reward': r['turn']}), flush=True)\n");
  c.timeout_s = 20;
  {
    ppo::ToolEnvironment env(c, 0, 1);
    for (int64_t i = 0; i < 5; ++i)
      env.submit(i, {{"call", "call" + std::to_string(i)}, {"turn", i}}, "call " + std::to_string(i));
    std::map<int64_t, ppo::ToolAnswer> got;
    while (got.size() < 5)
      for (auto& [tag, answer] : env.collect(/*wait=*/true)) got[tag] = answer;
    for (int64_t i = 0; i < 5; ++i) {
      CHECK(got[i].output == std::to_string(i) + "llac");
      CHECK(got[i].reward == i);
    }
    CHECK(env.collect(false).empty());
  }
  const auto failure = [&](const std::string& body, double timeout_s) {
    ppo::EnvironmentConfig bad = c;
    bad.command = python_environment(dir, "bad.py", body);
    bad.timeout_s = timeout_s;
    ppo::ToolEnvironment env(bad, 0, 1);
    env.submit(7, {{"call", "x"}}, "the call of trajectory 0-3-1 (sample data.jsonl:4, turn 2)");
    return usage_error_message([&] { env.collect(/*wait=*/true); });
  };
  const std::string crash = failure("    sys.exit(3)\n", 20);
  CHECK_THAT(crash, Catch::Contains("rollout.multi_turn.environment.command 'python3") &&
                        Catch::Contains("exited with status 3 before answering the call of trajectory 0-3-1 (sample "
                                        "data.jsonl:4, turn 2)"));
  const std::string slow = failure("    time.sleep(30)\n", 0.5);
  CHECK_THAT(slow, Catch::Contains("no answer to the call of trajectory 0-3-1") &&
                       Catch::Contains("rollout.multi_turn.environment.timeout_s=0.5"));
  const std::string bad = failure("    print('{\"out\": 1}', flush=True)\n", 20);
  CHECK_THAT(bad,
             Catch::Contains("bad answer to the call of trajectory 0-3-1") && Catch::Contains("no string \"output\""));
}

TEST_CASE("the calculator example evaluates arithmetic, bare or in Hermes JSON, and refuses anything else",
          "[cpu][multi_turn]") {
  ppo::EnvironmentConfig c;
  c.command = "python3 '" + ppo_test::paths().source_dir + "/examples/tools/calculator.py'";
  ppo::ToolEnvironment env(c, 0, 1);
  const std::vector<std::pair<std::string, std::string>> calls = {
      {"12 * 34", "408"},
      {"\n{\"name\": \"calculator\", \"arguments\": {\"expression\": \"(2 + 3) x 4\"}}\n", "20"},
      {"7 / 2", "3.5"},
      {"1,000 - 1", "999"},
      {"__import__('os').system('true')", "error: "},
      {"2 ** 1000", "error: exponent too large"},
      {"1 / 0", "error: division by zero"}};
  for (size_t i = 0; i < calls.size(); ++i) env.submit(static_cast<int64_t>(i), {{"call", calls[i].first}}, "call");
  std::map<int64_t, std::string> outputs;
  while (outputs.size() < calls.size())
    for (auto& [tag, answer] : env.collect(/*wait=*/true)) {
      CHECK_FALSE(answer.done);
      outputs[tag] = answer.output;
    }
  for (size_t i = 0; i < calls.size(); ++i) {
    INFO(calls[i].first << " -> " << outputs[static_cast<int64_t>(i)]);
    CHECK(outputs[static_cast<int64_t>(i)].rfind(calls[i].second, 0) == 0);
  }
}

namespace {

// A multi-turn rollout of the tiny policy whose environment answers every call with `output`; the most frequent
// response character of this model ends a turn with a call (no call_start), so that rows take several turns.
struct ToolRollout {
  ppo_test::TempDir dir{"ppo_tools"};
  ppo::Config c = tiny_config(dir.sub("run"));
  std::unique_ptr<ppo::Actor> actor = ppo::Actor::policy(c, 99, /*total_optimizer_steps=*/10);
  std::unique_ptr<ppo::Tokenizer> tokenizer = ppo::make_tokenizer("char");
  int64_t stop = 0;
  ppo::Batch batch;

  explicit ToolRollout(const std::string& output) {
    auto task = ppo::make_task(c.data.task);
    const ppo::RankPrompts prompts = ppo::rank_prompts(task->generate(8, 2, 3, 7), *tokenizer, c, 8, 1, 0, false);
    // The most frequent response character of this model ends a turn, so that rows take several.
    const ppo::Batch single = ppo::rollout_batch(actor->model(), *tokenizer, prompts, {2, 1.0, -1, 1.0, 0}, c);
    std::map<int64_t, int> counts;
    for (int64_t b = 0; b < single.size(); ++b)
      for (int64_t id : real_response(single, b))
        if (id >= ppo::CharTokenizer::kFirstPrintable) ++counts[id];
    for (const auto& [id, n] : counts)
      if (stop == 0 || n > counts[stop]) stop = id;
    ppo::MultiTurnConfig& mt = c.rollout.multi_turn;
    mt.enable = true;
    mt.call_start = "";
    mt.stop = tokenizer->decode({stop});
    mt.max_turns = 3;
    mt.environment.command = python_environment(
        dir, "fixed.py", "    print(json.dumps({'output': " + json(output).dump() + "}), flush=True)\n");
    ppo::ToolEnvironment env(mt.environment, 0, 1);
    batch = ppo::rollout_batch(actor->model(), *tokenizer, prompts, {2, 1.0, -1, 1.0, 0}, c, {false, {}, &env});
  }
};

}  // namespace

TEST_CASE("multi-turn rollout: tool and template tokens sit exactly where the chat form puts them, and are masked",
          "[cpu][multi_turn]") {
  const ToolRollout rollout("FIXED");
  const ppo::Batch& batch = rollout.batch;
  const ppo::Tokenizer* tokenizer = rollout.tokenizer.get();
  const int64_t stop = rollout.stop;
  const int64_t R = batch.at("responses").size(1);
  // Re-derived from the tokens: a turn ends at the stop character (a call) or EOS (the final answer, since a call
  // would have ended it earlier); a call in turns 1 and 2 (max_turns 3) not at the last position is answered, and the
  // plain form's tool message, "\nTool: FIXED\nAssistant: ", follows when it and one more token fit.
  const auto insertion = [&](bool eos) {
    return tokenizer->encode(ppo::ChatTemplate::plain().tool_turn("FIXED", eos));
  };
  int64_t inserted = 0, rows_with_two = 0;
  for (int64_t b = 0; b < batch.size(); ++b) {
    INFO("row " << b << ": " << tokenizer->decode(real_response(batch, b), false) << " | stop '"
                << tokenizer->decode({stop}) << "' | mask " << batch.at("response_mask")[b]);
    const std::vector<int64_t> tokens = real_response(batch, b);
    std::vector<float> expected(R, 0.f);
    int64_t t = 0, turns = 0, calls = 0;
    while (t < static_cast<int64_t>(tokens.size())) {
      int64_t end = t;
      while (end < static_cast<int64_t>(tokens.size()) && tokens[end] != stop && tokens[end] != tokenizer->eos_id())
        expected[end++] = 1.f;
      if (end == static_cast<int64_t>(tokens.size())) {  // cut at R: a turn the handler is told of, out of room
        ++turns;
        break;
      }
      expected[end] = 1.f;
      ++turns;
      const std::vector<int64_t> ins = insertion(/*eos=*/false);
      const int64_t after = end + 1;
      const bool call = tokens[end] == stop && turns < 3 && after < R;
      calls += call;
      if (!call || after + static_cast<int64_t>(ins.size()) >= R) {
        CHECK(after == static_cast<int64_t>(tokens.size()));  // the trajectory ends with this turn
        break;
      }
      REQUIRE(after + static_cast<int64_t>(ins.size()) <= static_cast<int64_t>(tokens.size()));
      CHECK(std::vector<int64_t>(tokens.begin() + after, tokens.begin() + after + ins.size()) == ins);
      t = after + static_cast<int64_t>(ins.size());
      inserted += static_cast<int64_t>(ins.size());
    }
    rows_with_two += calls >= 2;
    CHECK(torch::equal(batch.at("response_mask")[b], torch::tensor(expected)));
    CHECK(batch.at("tool_calls")[b].item<float>() == calls);
    CHECK(batch.at("tool_turns")[b].item<float>() == turns);
  }
  std::printf("multi-turn rollout: %lld tool tokens appended over %lld rows, %lld rows with two calls\n",
              static_cast<long long>(inserted), static_cast<long long>(batch.size()),
              static_cast<long long>(rows_with_two));
  CHECK(inserted > 0);
  CHECK(rows_with_two > 0);
  CHECK(batch.at("tool_tokens").sum().item<float>() == inserted);
}

TEST_CASE("a policy update sees tool tokens only as context: their own policy-loss, KL and entropy terms are inert",
          "[cpu][multi_turn]") {
  ToolRollout rollout("FIXED");
  ppo::Batch& batch = rollout.batch;
  ppo::Actor& actor = *rollout.actor;
  const torch::Tensor mask = batch.at("response_mask");
  const int64_t R = mask.size(1);
  const torch::Tensor tool = batch.at("attention_mask").narrow(1, -R, R).to(torch::kFloat) - mask;  // 1 on tool tokens
  REQUIRE(tool.sum().item<double>() > 0);
  REQUIRE(tool.min().item<double>() == 0);
  torch::manual_seed(5);
  const torch::Tensor old_log_probs = actor.compute_log_probs(batch, ppo::MicroBatchSpec{8});
  const torch::Tensor advantages = torch::randn(mask.sizes()) * mask;
  const torch::Tensor ref_log_probs = old_log_probs + 0.1 * torch::randn(mask.sizes());
  // The actor's loss (workers/actor.cpp): the policy loss, minus an entropy bonus, plus a KL loss; the gradients of
  // the parameters, and of the loss by each token's log-prob and entropy.
  struct Grads {
    torch::Tensor params, by_log_prob, by_entropy;
  };
  const auto gradients = [&](const torch::Tensor& old_lp, const torch::Tensor& adv, const torch::Tensor& ref,
                             const std::string& mode) {
    actor.optimizer().zero_grad();
    ppo::TokenLogProbs lp = ppo::compute_log_probs(actor.model(), batch.at("input_ids"), batch.at("attention_mask"),
                                                   batch.at("position_ids"), R, 1.0);
    ppo::PolicyLossParams p;
    p.loss_agg_mode = ppo::parse_loss_agg_mode(mode);
    p.denominator = ppo::agg_denominator(p.loss_agg_mode, mask.sum().item<double>(), static_cast<double>(mask.size(0)));
    p.norm_length = static_cast<double>(R);
    const torch::Tensor kl = ppo::kl_penalty(lp.log_probs, ref, ppo::parse_kl_estimator("low_var_kl"));
    torch::Tensor loss = ppo::policy_loss(old_lp, lp.log_probs, adv, mask, p).loss -
                         0.01 * ppo::agg_loss(lp.entropy, mask, p.loss_agg_mode, p.denominator, p.norm_length) +
                         0.1 * ppo::agg_loss(kl, mask, p.loss_agg_mode, p.denominator, p.norm_length);
    auto by_token = torch::autograd::grad({loss}, {lp.log_probs, lp.entropy}, {}, /*retain_graph=*/true);
    loss.backward();
    std::vector<torch::Tensor> grads;
    for (auto& param : actor.model()->parameters()) grads.push_back(param.grad().clone().reshape({-1}));
    return Grads{torch::cat(grads), by_token[0], by_token[1]};
  };
  for (const std::string mode : {"token-mean", "seq-mean-token-mean", "seq-mean-token-sum-norm"}) {
    INFO(mode);
    const Grads base = gradients(old_log_probs, advantages, ref_log_probs, mode);
    // Each token-level term is 0 by a tool token's log-prob and entropy, and not by the sampled tokens'.
    CHECK((base.by_log_prob * tool).abs().max().item<double>() == 0);
    CHECK((base.by_entropy * tool).abs().max().item<double>() == 0);
    CHECK((base.by_log_prob * mask).abs().max().item<double>() > 0);
    // Other old log-probs, advantages and reference log-probs on the tool tokens: the very same gradients.
    const Grads other = gradients(old_log_probs + 3 * tool, advantages + 5 * tool, ref_log_probs - 2 * tool, mode);
    CHECK(torch::equal(other.params, base.params));
    // The same change on one sampled token moves them: the comparison can fail.
    const torch::Tensor one = torch::zeros_like(mask);
    const torch::Tensor sampled = mask.nonzero();
    one[sampled[0][0].item<int64_t>()][sampled[0][1].item<int64_t>()] = 1;
    const Grads moved = gradients(old_log_probs, advantages + 5 * one, ref_log_probs, mode);
    CHECK_FALSE(torch::equal(moved.params, base.params));
  }
}
