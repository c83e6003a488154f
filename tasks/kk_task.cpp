// The Knights and Knaves task: Logic-RL's prompt, the reference answer, records in and out (the public dataset's
// and veRL's layouts) and the ground truth a reward reads (see kk.h for the sources).
#include "tasks/kk.h"

#include "common/json.h"
#include "common/strings.h"
#include "tasks/kk_internal.h"

namespace ppo {

using nlohmann::json;

// ---------------------------------------------------------------------------------------------------------------
// Prompt and reference answer.

json kk_chat_messages(const std::string& quiz) {
  // Logic-RL examples/data_preprocess/kk.py, template_type "qwen-instruct": this system text and the quiz as the
  // user's message. (Logic-RL writes the ChatML by hand, with an extra "\n" before each <|im_end|>.)
  static const std::string kSystem =
      "You are a helpful assistant. The assistant first thinks about the reasoning process in the mind and then "
      "provides the user with the answer. The reasoning process and answer are enclosed within <think> </think> "
      "and<answer> </answer> tags, respectively, i.e., <think> reasoning process here </think><answer> answer here "
      "</answer>.  Now the user asks you to solve a logical reasoning problem. After thinking, when you finally "
      "reach a conclusion, clearly state the identity of each character within <answer> </answer> tags. i.e., "
      "<answer> (1) Zoey is a knight\n(2) ... </answer>.";
  return json::array({{{"role", "system"}, {"content", kSystem}}, {{"role", "user"}, {"content", quiz}}});
}

std::string kk_prompt(const std::string& quiz, bool prompt_opens_think) {
  // Logic-RL examples/data_preprocess/kk.py, template_type "base".
  return "The user asks a question, and the Assistant solves it. The assistant first thinks about the reasoning "
         "process in the mind and then provides the user with the final answer. The reasoning process and answer "
         "are enclosed within <think> </think> and <answer> </answer> tags, respectively, i.e., <think> reasoning "
         "process here </think><answer> answer here </answer>. Now the user asks you to solve a logical reasoning "
         "problem. After thinking, when you finally reach a conclusion, clearly state the identity of each character "
         "within <answer> </answer> tags. List the identity of each person one by one, for example, <answer> (1) "
         "Zoey is a knight\n(2) Oliver is a knight\n(3)... </answer>.\n\nUser:" +
         quiz + "\nAssistant:" + (prompt_opens_think ? " <think>" : "");
}

namespace {

std::vector<std::string> names_of(const json& record) {
  return json_field<std::vector<std::string>>(record, "names");
}

std::vector<bool> solution_of(const json& record) {
  usage_check(record.contains("solution"), "missing field 'solution'");
  const json& solution = record.at("solution");  // not copied: copying JSON recurses once per level
  usage_check(solution.is_array(), "field 'solution': expected an array of booleans");
  std::vector<bool> knights;
  for (const json& v : solution) {
    if (!v.is_boolean())
      throw UsageError("field 'solution': expected an array of booleans, got " + kk_excerpt(solution));
    knights.push_back(v.get<bool>());
  }
  return knights;
}

}  // namespace

std::string kk_reference_answer(const json& record, bool prompt_opens_think) {
  const std::vector<std::string> names = names_of(record);
  const std::vector<bool> solution = solution_of(record);
  // In the style of the public data's cot_repeat_steps, for the final assignment only.
  std::string reasoning;
  if (record.contains("statements") && record["statements"].is_array()) {
    const json& statements = record["statements"];
    for (size_t i = 0; i < names.size(); ++i) {
      reasoning += (i > 0 ? " " : "") + std::string("Assume ") + names[i] + " is " + kk_role_text(solution[i]) +
                   ". No contradiction is found in their " + (solution[i] ? "" : "false ") + "claim that " +
                   kk_statement_text(names, statements[i]) + ".";
    }
    reasoning += " This leads to a feasible solution.";
  } else {
    reasoning = "Checking every statement under one assignment leads to a feasible solution.";
  }
  return std::string(prompt_opens_think ? " " : "<think> ") + reasoning + " </think> <answer> " +
         kk_solution_text_format(names, solution) + " </answer>";
}

// ---------------------------------------------------------------------------------------------------------------
// The task.

namespace {

// regex_replace(text, ",\s*\]", "]"): drops the trailing comma of Python 1-tuples "(x,)" once they are arrays.
std::string drop_trailing_commas(const std::string& text) {
  std::string out;
  for (size_t i = 0; i < text.size(); ++i) {
    if (text[i] == ',') {
      const size_t next = kk_skip_spaces(text, i + 1);
      if (next < text.size() && text[next] == ']') i = next;
    }
    out += text[i];
  }
  return out;
}

// "(('lying', 1), ('not', ('telling-truth', 0)))" (public HF records) -> JSON arrays.
json parse_python_statements(const std::string& text) {
  std::string converted;
  for (char c : text) converted += c == '(' ? '[' : c == ')' ? ']' : c == '\'' ? '"' : c;
  try {
    return parse_json_bounded(drop_trailing_commas(converted));
  } catch (const json::exception&) {
    throw UsageError("field 'statements': cannot read " + text.substr(0, 200));
  } catch (const UsageError&) {  // past the JSON reader's depth, so past kKkMaxStatementDepth too
    throw UsageError("field 'statements': nested deeper than " + std::to_string(kKkMaxStatementDepth) + " levels");
  }
}

TaskSample kk_sample(const json& ground_truth, int64_t index, bool prompt_opens_think) {
  TaskSample s;
  const std::string quiz = ground_truth.at("quiz").get<std::string>();
  s.prompt = kk_prompt(quiz, prompt_opens_think);
  s.messages = kk_chat_messages(quiz);
  s.response_prefix = prompt_opens_think ? "<think>" : "";
  s.answer = kk_reference_answer(ground_truth, prompt_opens_think);
  s.ground_truth = ground_truth;
  s.difficulty = static_cast<int64_t>(ground_truth.at("names").size());
  s.index = index;
  return s;
}

}  // namespace

std::vector<TaskSample> KkTask::generate(int64_t count, int64_t min_difficulty, int64_t max_difficulty,
                                         uint64_t seed) const {
  std::vector<TaskSample> samples;
  for (json& record : kk_generate_records(count, min_difficulty, max_difficulty, seed, config_)) {
    const int64_t index = record["index"].get<int64_t>();
    record.erase("index");
    samples.push_back(kk_sample(record, index, config_.prompt_opens_think));
  }
  return samples;
}

void kk_truth(const json& ground_truth, std::vector<std::string>& names, std::vector<bool>& solution) {
  if (!ground_truth.is_object())
    throw UsageError("kk ground truth: expected an object, got " + kk_excerpt(ground_truth));
  names.clear();
  solution.clear();
  if (ground_truth.contains("names") && ground_truth.contains("solution")) {
    names = names_of(ground_truth);
    solution = solution_of(ground_truth);
  } else {
    kk_parse_solution_lines(json_field<std::string>(ground_truth, "solution_text_format"), names, solution);
  }
  usage_check(!names.empty() && names.size() == solution.size(),
              "kk ground truth: needs \"names\" and \"solution\", or \"solution_text_format\" lines \"(1) Name is a "
              "knight\"");
}

Score KkTask::score(const TaskSample& sample, const std::string& response) const {
  const KkScore k =
      kk_score(response, names_of(sample.ground_truth), solution_of(sample.ground_truth), config_.prompt_opens_think);
  Score s;
  s.score = k.total;
  s.correct = k.correct;
  s.format_ok = k.format_score > 0;
  return s;
}

json KkTask::to_json(const TaskSample& s) const {
  json record = s.ground_truth;
  if (s.prompt != kk_prompt(s.ground_truth.at("quiz").get<std::string>(), config_.prompt_opens_think))
    record["prompt"] = s.prompt;
  if (s.answer != kk_reference_answer(s.ground_truth, config_.prompt_opens_think)) record["answer"] = s.answer;
  record["index"] = s.index;
  return record;
}

std::string kk_python_statements(const json& statements) {
  if (statements.is_string()) return "'" + statements.get<std::string>() + "'";
  if (!statements.is_array()) return statements.dump();
  const std::string items = join(statements, ", ", [](const nlohmann::json& s) { return kk_python_statements(s); });
  return "(" + items + (statements.size() == 1 ? ",)" : ")");
}

json KkTask::to_verl(const TaskSample& s) const {
  json record = Task::to_verl(s);
  record["data_source"] = "kk_logic";
  record["ability"] = "logic";
  json truth = {{"solution_text_format", s.ground_truth.at("solution_text_format")}};
  if (s.ground_truth.contains("statements")) truth["statements"] = kk_python_statements(s.ground_truth["statements"]);
  record["reward_model"]["ground_truth"] = truth;
  return record;
}

TaskSample KkTask::from_json(const json& record) const {
  const std::vector<std::string> names = names_of(record);
  const std::vector<bool> solution = solution_of(record);
  usage_check(!names.empty() && names.size() == solution.size(),
              "fields 'names' (" + std::to_string(names.size()) + ") and 'solution' (" +
                  std::to_string(solution.size()) + ") must have the same non-zero length");
  json gt;
  gt["quiz"] = json_field<std::string>(record, "quiz");
  gt["names"] = names;
  gt["solution"] = solution;
  if (record.contains("knight_knave")) {
    usage_check(!kk_nested_deeper_than(record["knight_knave"], kKkMaxStatementDepth),
                "field 'knight_knave': nested deeper than " + std::to_string(kKkMaxStatementDepth) + " levels");
    gt["knight_knave"] = record["knight_knave"];
  } else {
    gt["knight_knave"] = kk_default_knight_knave();
  }
  gt["solution_text"] = record.contains("solution_text") ? json_field<std::string>(record, "solution_text")
                                                         : kk_solution_text(names, solution);
  gt["solution_text_format"] = record.contains("solution_text_format")
                                   ? json_field<std::string>(record, "solution_text_format")
                                   : kk_solution_text_format(names, solution);
  if (record.contains("statements") && !record["statements"].is_null()) {
    const json& raw = record["statements"];
    const json parsed = raw.is_string() ? parse_python_statements(raw.get<std::string>()) : json();
    const json& statements = raw.is_string() ? parsed : raw;
    usage_check(statements.is_array() && statements.size() == names.size(),
                "field 'statements': expected one statement per person");
    // kk_evaluate checks every node and the depth limit before the statements are copied (a copy recurses).
    for (size_t i = 0; i < names.size(); ++i) {
      usage_check(kk_evaluate(statements[i], solution) == solution[i],
                  "field 'solution' is inconsistent with 'statements' (person " + std::to_string(i) + ")");
    }
    gt["statements"] = statements;
  }
  const int64_t index = record.contains("index") ? json_field<int64_t>(record, "index") : 0;
  TaskSample s = kk_sample(gt, index, config_.prompt_opens_think);
  if (record.contains("prompt")) {
    s.prompt = json_field<std::string>(record, "prompt");
    usage_check(!config_.prompt_opens_think || ends_with(s.prompt, "<think>"),
                "field 'prompt' must end with \"<think>\": the Logic-RL reward counts the prompt's opening tag as the "
                "response's");
  }
  if (record.contains("answer")) s.answer = json_field<std::string>(record, "answer");
  return s;
}

}  // namespace ppo
