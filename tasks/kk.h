// Knights and Knaves (K&K) logic puzzles and the Logic-RL reward.
//
// Generator: the construction of Xie et al. 2024, "On Memorization of Large Language Models in Logical
// Reasoning" (dataset K-and-K/knights-and-knaves; the same sampler is in reasoning-gym's knights_knaves.py).
// Each of n people says one statement from the grammar
//   leaf   ["telling-truth", i] ("i is a knight") | ["lying", i] ("i is a knave"; never said of oneself)
//   ["not", s] | ["and", s1, ..., sk] | ["or", s1, ..., sk] (2 <= k <= width) | ["->", s1, s2] | ["<=>", s1, s2]
// with depth <= KkConfig::depth (1: leaves only). A node is a leaf with probability 1/6 (always at depth 1),
// otherwise not / and / or / -> / <=> with 1/6, 1/6, 1/6, 1/6, 1/6; operands of one node are distinct. A puzzle
// is kept only when exactly one assignment is consistent (person i is a knight iff statement i is true, checked
// over all 2^n assignments) and its statements differ from every earlier puzzle of the same call.
//
// Records carry the public dataset's fields: quiz, names, knight_knave, solution (true = knight), solution_text,
// solution_text_format, statements (nested arrays, 0-based people), index. Public records, where "statements" is a
// Python tuple string, are read too.
//
// Prompt: Logic-RL's "base" template (examples/data_preprocess/kk.py), which ENDS WITH "Assistant: <think>": the
// model continues inside an opened think block. Logic-RL's reward (verl/utils/reward_score/kk.py) scores the text
// after "Assistant:", so the prompt's "<think>" counts as the response's opening tag. kk_score therefore prepends
// "<think>" to the response when prompt_opens_think is true, and the reference answer (SFT target) starts with the
// reasoning, not with "<think>": " Assume ... </think> <answer> (1) Zoey is a knight\n(2) ... </answer>".
//
// A record may carry its own "prompt" and "answer" strings (as verl datasets store the prompt): they replace the
// template and the reference answer, e.g. shorter ones for a character-level model. The reward is unchanged, so a
// "prompt" must still end with "<think>" while prompt_opens_think is true. to_json writes them back only when they
// differ from the template and the reference answer.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "tasks/task.h"

namespace ppo {

struct KkConfig {
  int64_t depth = 2;               // maximum statement depth (1 to kKkMaxGenerateDepth; 1 = "X is a knight/knave" only)
  int64_t width = 2;               // maximum operands of "and"/"or" (2 to kKkMaxWidth)
  int64_t max_retry = 100000;      // candidate puzzles tried per kept puzzle before giving up
  bool prompt_opens_think = true;  // prompt ends with "<think>" (Logic-RL); the reward counts it as the response's
};

inline constexpr int64_t kKkMinPeople = 2;
inline constexpr int64_t kKkMaxPeople = 8;
// Deepest statement read or generated (a leaf is depth 1; Logic-RL's puzzles have depth <= 3). Reading, evaluating
// and printing statements recurse once per level, so deeper ones are a UsageError instead of a stack overflow.
inline constexpr int64_t kKkMaxStatementDepth = 64;
// Generated puzzles are shallower and narrower: a node has on average (7 + width) / 6 children, so a statement grows
// as ((7 + width) / 6)^depth; at 8 and 8 about 1,500 nodes (Logic-RL's have depth <= 3 and width 2).
inline constexpr int64_t kKkMaxGenerateDepth = 8;
inline constexpr int64_t kKkMaxWidth = 8;

// The names people are drawn from (distinct, letters only, none containing "knight"/"knave").
const std::vector<std::string>& kk_name_pool();

// Truth value of a statement when knights[i] says whether person i is a knight. UsageError on a malformed node or
// one nested deeper than kKkMaxStatementDepth.
bool kk_evaluate(const nlohmann::json& statement, const std::vector<bool>& knights);
// Every consistent assignment (person i is a knight iff statements[i] is true), by brute force over 2^n.
std::vector<std::vector<bool>> kk_solutions(const nlohmann::json& statements);
// One statement per person, drawn as described above.
nlohmann::json kk_sample_statements(std::mt19937_64& rng, int64_t n_people, const KkConfig& config);
// Statement as English, e.g. "Oliver is a knight or Grace is not a knave".
std::string kk_statement_text(const std::vector<std::string>& names, const nlohmann::json& statement);
// A public-format record (without "index") for a solved puzzle; names and phrasings are drawn from rng.
nlohmann::json kk_format_record(const nlohmann::json& statements, const std::vector<bool>& solution,
                                std::mt19937_64& rng);
// `count` puzzles; puzzle i has min_people + (i mod (max - min + 1)) people; "index" = i. Deterministic for a seed.
std::vector<nlohmann::json> kk_generate_records(int64_t count, int64_t min_people, int64_t max_people, uint64_t seed,
                                                const KkConfig& config = {});

// "(1) Zoey is a knight\n(2) Oliver is a knave" and "Zoey is a knight, and Oliver is a knave.".
std::string kk_solution_text_format(const std::vector<std::string>& names, const std::vector<bool>& solution);
std::string kk_solution_text(const std::vector<std::string>& names, const std::vector<bool>& solution);
// Logic-RL base template around the quiz.
std::string kk_prompt(const std::string& quiz, bool prompt_opens_think = true);
// The chat form (data.apply_chat_template): Logic-RL's "qwen-instruct" system message, then the quiz as the user's
// message. The sample's response_prefix is "<think>" when prompt_opens_think, as Logic-RL's assistant turn opens.
nlohmann::json kk_chat_messages(const std::string& quiz);
// SFT target: short reasoning (each person's statement checked under the solution) then the answer block. When
// the prompt opens <think>, the answer does not repeat it.
std::string kk_reference_answer(const nlohmann::json& record, bool prompt_opens_think = true);

// Logic-RL reward (verl/utils/reward_score/kk.py, compute_score):
//   format: "<think>", "</think>", "<answer>", "</answer>" each exactly once, in this order: +1, else -1.
//   answer (the last <answer>...</answer>, stripped): -2 when the format failed or it is empty; -2 when the number
//   of "knight" plus "knave" substrings (case-insensitive) != n or some name lacks "<name> is a knight|knave";
//   +2 when every role matches, else -1.5.
struct KkScore {
  double format_score = 0;  // +1 / -1
  double answer_score = 0;  // +2 / -1.5 / -2
  double total = 0;         // format_score + answer_score, in [-3, 3]
  bool correct = false;     // format ok and every role right
  std::string status;       // "correct", "wrong_answer", "unparseable", "empty_answer", "bad_format"
};
KkScore kk_score(const std::string& response, const std::vector<std::string>& names, const std::vector<bool>& solution,
                 bool prompt_opens_think = true);

// The people and the solution a ground truth names: its "names" and "solution" fields (ppo.cpp's and the public
// dataset's records), or else its "solution_text_format" lines "(1) Zoey is a knight" (Logic-RL's veRL records,
// parsed as Logic-RL's kk.py parse_solution_text_format does). UsageError when it has neither.
// Statements as the public dataset writes them, Python tuples: [["lying", 1], ["telling-truth", 0]] ->
// "(('lying', 1), ('telling-truth', 0))"; parse_python_statements reads them back.
std::string kk_python_statements(const nlohmann::json& statements);
void kk_truth(const nlohmann::json& ground_truth, std::vector<std::string>& names, std::vector<bool>& solution);

// The "kk" task: difficulty = number of people (2..8). ground_truth holds the record's public fields.
class KkTask : public Task {
 public:
  explicit KkTask(KkConfig config = {}) : config_(config) {}
  std::string name() const override { return "kk"; }
  std::vector<TaskSample> generate(int64_t count, int64_t min_difficulty, int64_t max_difficulty,
                                   uint64_t seed) const override;
  Score score(const TaskSample& sample, const std::string& response) const override;
  nlohmann::json to_json(const TaskSample& s) const override;         // the public fields + index
  TaskSample from_json(const nlohmann::json& record) const override;  // needs quiz, names, solution
  // Logic-RL's veRL layout (examples/data_preprocess/kk.py): data_source "kk_logic", ability "logic", ground truth
  // {"solution_text_format", "statements"} with the statements as a Python tuple string, as in the public dataset.
  nlohmann::json to_verl(const TaskSample& s) const override;
  const KkConfig& config() const { return config_; }

 private:
  KkConfig config_;
};

}  // namespace ppo
