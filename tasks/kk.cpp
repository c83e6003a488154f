// Knights and Knaves generator, formatter and the Logic-RL reward (see kk.h for the sources).
#include "tasks/kk.h"

#include <cstring>
#include <optional>
#include <set>

#include "common/json.h"
#include "common/strings.h"

namespace ppo {

using nlohmann::json;

const std::vector<std::string>& kk_name_pool() {
  static const std::vector<std::string> names = {
      "Zoey",   "Oliver",   "Grace", "Emma",  "Liam",    "Olivia", "Noah",     "Ava",    "Ethan",  "Sophia",
      "Mason",  "Isabella", "Mia",   "James", "Henry",   "Amelia", "Lucas",    "Harper", "Evelyn", "Abigail",
      "Daniel", "Emily",    "Jacob", "Logan", "Jackson", "Ella",   "Samuel",   "Chloe",  "Owen",   "Riley",
      "Aria",   "Joseph",   "Lily",  "Luke",  "Aurora",  "David",  "Scarlett", "Jack",   "Aiden",  "Victoria"};
  return names;
}

// ---------------------------------------------------------------------------------------------------------------
// Statements: nested JSON arrays.

namespace {

bool is_leaf(const json& s) {
  return s.is_array() && !s.empty() && (s[0] == "telling-truth" || s[0] == "lying");
}

// Whether `j` has more than `levels` levels of arrays/objects. Recurses at most levels + 1 deep.
bool nested_deeper_than(const json& j, int64_t levels) {
  if (!j.is_structured()) return false;
  if (levels == 0) return true;
  for (const json& child : j)
    if (nested_deeper_than(child, levels - 1)) return true;
  return false;
}

// JSON for an error message: cut to 200 characters, and not printed at all when deeper than any statement may be
// (dump() recurses once per level).
std::string excerpt(const json& j) {
  if (nested_deeper_than(j, kKkMaxStatementDepth))
    return "(nested deeper than " + std::to_string(kKkMaxStatementDepth) + " levels)";
  const std::string text = j.dump(-1, ' ', false, json::error_handler_t::replace);
  return text.size() <= 200 ? text : text.substr(0, 200) + "...";
}

[[noreturn]] void malformed(const json& s, const std::string& why) {
  throw UsageError("kk: malformed statement " + excerpt(s) + ": " + why);
}

// Called with the depth of the node about to be visited (the top statement is depth 1).
void check_depth(int64_t depth) {
  if (depth > kKkMaxStatementDepth)
    throw UsageError("kk: statement nested deeper than " + std::to_string(kKkMaxStatementDepth) +
                     " levels (the limit; puzzles have depth 2-3)");
}

int64_t leaf_person(const json& s, size_t n_people) {
  if (s.size() != 2 || !s[1].is_number_integer()) malformed(s, "a leaf is [\"telling-truth\"|\"lying\", person]");
  const int64_t p = s[1].get<int64_t>();
  if (p < 0 || p >= static_cast<int64_t>(n_people)) malformed(s, "person index out of range");
  return p;
}

bool evaluate(const json& s, const std::vector<bool>& knights, int64_t depth) {
  check_depth(depth);
  if (!s.is_array() || s.empty() || !s[0].is_string()) malformed(s, "expected [operator, ...]");
  const std::string op = s[0].get<std::string>();
  if (op == "telling-truth") return knights[leaf_person(s, knights.size())];
  if (op == "lying") return !knights[leaf_person(s, knights.size())];
  if (op == "not") {
    if (s.size() != 2) malformed(s, "\"not\" takes one operand");
    return !evaluate(s[1], knights, depth + 1);
  }
  if (op == "and" || op == "or") {
    if (s.size() < 3) malformed(s, "\"" + op + "\" takes at least two operands");
    bool all = true, any = false;
    for (size_t i = 1; i < s.size(); ++i) {
      const bool v = evaluate(s[i], knights, depth + 1);
      all = all && v;
      any = any || v;
    }
    return op == "and" ? all : any;
  }
  if (op == "->" || op == "<=>") {
    if (s.size() != 3) malformed(s, "\"" + op + "\" takes two operands");
    const bool a = evaluate(s[1], knights, depth + 1), b = evaluate(s[2], knights, depth + 1);
    return op == "->" ? (!a || b) : (a == b);
  }
  malformed(s, "unknown operator; valid: telling-truth, lying, not, and, or, ->, <=>");
}

}  // namespace

bool kk_evaluate(const json& s, const std::vector<bool>& knights) {
  return evaluate(s, knights, /*depth=*/1);
}

std::vector<std::vector<bool>> kk_solutions(const json& statements) {
  usage_check(statements.is_array() && !statements.empty() && statements.size() <= 20,
              "kk: statements must be an array of 1..20 statements");
  const size_t n = statements.size();
  std::vector<std::vector<bool>> solutions;
  for (uint64_t mask = 0; mask < (uint64_t{1} << n); ++mask) {
    std::vector<bool> knights(n);
    for (size_t i = 0; i < n; ++i) knights[i] = ((mask >> i) & 1) != 0;
    bool consistent = true;
    for (size_t i = 0; i < n && consistent; ++i) consistent = kk_evaluate(statements[i], knights) == knights[i];
    if (consistent) solutions.push_back(knights);
  }
  return solutions;
}

// ---------------------------------------------------------------------------------------------------------------
// Sampling (mirrors the published KKProblemSampler._sample_statement).

namespace {

json sample_statement(std::mt19937_64& rng, int64_t speaker, int64_t depth, int64_t n_people, const KkConfig& c);

// `count` distinct operands of depth - 1. Leaves-only operands allow at most 2n - 1 distinct ones.
json sample_operands(std::mt19937_64& rng, int64_t speaker, int64_t depth, int64_t n_people, const KkConfig& c,
                     const std::string& op, int64_t count) {
  if (depth - 1 == 1) count = std::min(count, 2 * n_people - 1);
  json node = json::array();
  node.push_back(op);
  std::set<std::string> seen;
  while (static_cast<int64_t>(node.size()) < count + 1) {
    json operand = sample_statement(rng, speaker, depth - 1, n_people, c);
    if (seen.insert(operand.dump()).second) node.push_back(std::move(operand));
  }
  return node;
}

json sample_statement(std::mt19937_64& rng, int64_t speaker, int64_t depth, int64_t n_people, const KkConfig& c) {
  const int64_t dice = uniform_int(rng, 0, 5);
  if (depth == 1 || dice == 0) {
    while (true) {
      const bool lying = uniform_int(rng, 0, 1) == 1;
      const int64_t person = uniform_int(rng, 0, n_people - 1);
      if (lying && person == speaker) continue;  // "I am a knave" has no consistent speaker
      json leaf = json::array();
      leaf.push_back(lying ? "lying" : "telling-truth");
      leaf.push_back(person);
      return leaf;
    }
  }
  if (dice == 1) {
    json node = json::array();
    node.push_back("not");
    node.push_back(sample_statement(rng, speaker, depth - 1, n_people, c));
    return node;
  }
  if (dice == 2 || dice == 3) {
    const int64_t count = uniform_int(rng, 2, c.width);
    return sample_operands(rng, speaker, depth, n_people, c, dice == 2 ? "and" : "or", count);
  }
  return sample_operands(rng, speaker, depth, n_people, c, dice == 4 ? "->" : "<=>", 2);
}

}  // namespace

json kk_sample_statements(std::mt19937_64& rng, int64_t n_people, const KkConfig& config) {
  usage_check(
      config.depth >= 1 && config.depth <= kKkMaxGenerateDepth,
      "kk: depth " + std::to_string(config.depth) + " is out of range: 1 to " + std::to_string(kKkMaxGenerateDepth));
  usage_check(config.width >= 2 && config.width <= kKkMaxWidth,
              "kk: width " + std::to_string(config.width) + " is out of range: 2 to " + std::to_string(kKkMaxWidth));
  usage_check(n_people >= 1, "kk: need at least one person");
  json statements = json::array();
  for (int64_t i = 0; i < n_people; ++i) statements.push_back(sample_statement(rng, i, config.depth, n_people, config));
  return statements;
}

// ---------------------------------------------------------------------------------------------------------------
// Text.

namespace {

std::string role_text(bool knight) {
  return knight ? "a knight" : "a knave";
}

std::string leaf_text(const std::vector<std::string>& names, const json& leaf, bool negate) {
  const int64_t p = leaf_person(leaf, names.size());
  return names[p] + " is " + (negate ? "not " : "") + role_text(leaf[0] == "telling-truth");
}

std::string node_text(const std::vector<std::string>& names, const json& s, int64_t depth) {
  check_depth(depth);
  if (is_leaf(s)) return leaf_text(names, s, /*negate=*/false);
  if (!s.is_array() || s.size() < 2 || !s[0].is_string()) malformed(s, "expected [operator, ...]");
  const std::string op = s[0].get<std::string>();
  if (op == "not") {
    if (!is_leaf(s[1])) return "it is not the case that " + node_text(names, s[1], depth + 1);
    check_depth(depth + 1);  // the negated leaf is one level down, as kk_evaluate counts it
    return leaf_text(names, s[1], /*negate=*/true);
  }
  std::string text;
  if (op == "and" || op == "or") {
    for (size_t i = 1; i < s.size(); ++i) text += (i > 1 ? " " + op + " " : "") + node_text(names, s[i], depth + 1);
  } else if (op == "->" && s.size() == 3) {
    text = "if " + node_text(names, s[1], depth + 1) + " then " + node_text(names, s[2], depth + 1);
  } else if (op == "<=>" && s.size() == 3) {
    text = node_text(names, s[1], depth + 1) + " if and only if " + node_text(names, s[2], depth + 1);
  } else {
    malformed(s, "unknown operator or wrong operand count");
  }
  return depth == 1 ? text : "(" + text + ")";
}

std::string capitalized(std::string s) {
  if (!s.empty() && s[0] >= 'a' && s[0] <= 'z') s[0] = static_cast<char>(s[0] - 'a' + 'A');
  return s;
}

std::string replace_all(std::string text, const std::string& from, const std::string& to) {
  for (size_t pos = text.find(from); pos != std::string::npos; pos = text.find(from, pos + to.size())) {
    text.replace(pos, from.size(), to);
  }
  return text;
}

// Ways of reporting a statement, after the published K&K formatter's list. {C} is the statement capitalised (it
// opens a quotation), {c} as is.
const std::vector<std::string>& saying_templates() {
  static const std::vector<std::string> templates = {"{name} said that {c}.",
                                                     "{name} told you that {c}.",
                                                     "{name} said, \"{C}.\"",
                                                     "{name} stated, \"{C}\".",
                                                     "According to {name}, \"{C}\".",
                                                     "In {name}'s words: \"{C}\".",
                                                     "{name} remarked, \"{C}\".",
                                                     "\"{C},\" {name} declared.",
                                                     "{name} expressed that {c}.",
                                                     "As {name} put it, \"{C}\".",
                                                     "\"{C},\" {name} mentioned.",
                                                     "{name} commented, \"{C}\".",
                                                     "In a statement by {name}: \"{C}\".",
                                                     "{name} noted, \"{C}\".",
                                                     "\"{C},\" {name} claimed.",
                                                     "{name} was heard saying, \"{C}\"."};
  return templates;
}

// "A, B, and C" as in the published data (also "A, and B" for two).
std::string join_with_and(const std::vector<std::string>& items) {
  std::string text;
  for (size_t i = 0; i + 1 < items.size(); ++i) text += items[i] + ", ";
  return text + (items.size() > 1 ? "and " : "") + items.back();
}

json default_knight_knave() {
  return {{"knight", "knight"},   {"knave", "knave"},   {"a_knight", "a knight"},
          {"a_knave", "a knave"}, {"Knight", "Knight"}, {"Knave", "Knave"}};
}

}  // namespace

std::string kk_statement_text(const std::vector<std::string>& names, const json& statement) {
  return node_text(names, statement, /*depth=*/1);
}

std::string kk_solution_text_format(const std::vector<std::string>& names, const std::vector<bool>& solution) {
  std::string text;
  for (size_t i = 0; i < names.size(); ++i) {
    text += (i > 0 ? "\n(" : "(") + std::to_string(i + 1) + ") " + names[i] + " is " + role_text(solution[i]);
  }
  return text;
}

std::string kk_solution_text(const std::vector<std::string>& names, const std::vector<bool>& solution) {
  std::vector<std::string> parts;
  for (size_t i = 0; i < names.size(); ++i) parts.push_back(names[i] + " is " + role_text(solution[i]));
  return join_with_and(parts) + ".";
}

json kk_format_record(const json& statements, const std::vector<bool>& solution, std::mt19937_64& rng) {
  const int64_t n = static_cast<int64_t>(statements.size());
  // Distinct names: partial Fisher-Yates over the pool.
  std::vector<std::string> pool = kk_name_pool();
  usage_check(n <= static_cast<int64_t>(pool.size()), "kk: more people than names in the pool");
  for (int64_t i = 0; i < n; ++i) std::swap(pool[i], pool[uniform_int(rng, i, static_cast<int64_t>(pool.size()) - 1)]);
  const std::vector<std::string> names(pool.begin(), pool.begin() + n);

  std::string quiz =
      "A very special island is inhabited only by knights and knaves. Knights always tell the truth, and knaves "
      "always lie. You meet " +
      std::to_string(n) + " inhabitants: " + join_with_and(names) + ".";
  const auto& templates = saying_templates();
  for (int64_t i = 0; i < n; ++i) {
    const std::string content = kk_statement_text(names, statements[i]);
    std::string sentence = templates[uniform_int(rng, 0, static_cast<int64_t>(templates.size()) - 1)];
    sentence = replace_all(replace_all(sentence, "{C}", capitalized(content)), "{c}", content);
    quiz += " " + replace_all(sentence, "{name}", names[i]);
  }
  quiz += " So who is a knight and who is a knave?";

  json record;
  record["quiz"] = quiz;
  record["names"] = names;
  record["knight_knave"] = default_knight_knave();
  record["solution"] = solution;
  record["solution_text"] = kk_solution_text(names, solution);
  record["solution_text_format"] = kk_solution_text_format(names, solution);
  record["statements"] = statements;
  return record;
}

std::vector<json> kk_generate_records(int64_t count, int64_t min_people, int64_t max_people, uint64_t seed,
                                      const KkConfig& config) {
  usage_check(count >= 0 && count <= kMaxTaskSamples,
              "kk: count " + std::to_string(count) + " is out of range: 0 to " + std::to_string(kMaxTaskSamples));
  usage_check(kKkMinPeople <= min_people && min_people <= max_people && max_people <= kKkMaxPeople,
              "kk: number of people range [" + std::to_string(min_people) + ", " + std::to_string(max_people) +
                  "] is invalid; valid: 2 <= min <= max <= 8");
  std::mt19937_64 rng(seed);
  std::set<std::string> seen;  // statements of every kept puzzle (no duplicate puzzles)
  std::vector<json> records;
  for (int64_t i = 0; i < count; ++i) {
    const int64_t n = min_people + i % (max_people - min_people + 1);
    bool found = false;
    for (int64_t attempt = 0; attempt < config.max_retry && !found; ++attempt) {
      const json statements = kk_sample_statements(rng, n, config);
      if (seen.count(statements.dump()) > 0) continue;
      const std::vector<std::vector<bool>> solutions = kk_solutions(statements);
      if (solutions.size() != 1) continue;
      seen.insert(statements.dump());
      json record = kk_format_record(statements, solutions[0], rng);
      record["index"] = i;
      records.push_back(std::move(record));
      found = true;
    }
    usage_check(found, "kk: no new puzzle with a unique solution for " + std::to_string(n) + " people after " +
                           std::to_string(config.max_retry) + " tries; lower the count or raise depth/width");
  }
  return records;
}

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
    if (!v.is_boolean()) throw UsageError("field 'solution': expected an array of booleans, got " + excerpt(solution));
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
      reasoning += (i > 0 ? " " : "") + std::string("Assume ") + names[i] + " is " + role_text(solution[i]) +
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
// Logic-RL reward.

namespace {

size_t count_substr(const std::string& text, const std::string& needle) {
  size_t count = 0;
  for (size_t pos = text.find(needle); pos != std::string::npos; pos = text.find(needle, pos + needle.size())) {
    ++count;
  }
  return count;
}

// validate_response_structure: each tag exactly once, and first occurrences in order.
bool valid_structure(const std::string& text) {
  const std::vector<std::string> tags = {"<think>", "</think>", "<answer>", "</answer>"};
  bool ok = true;
  std::vector<std::ptrdiff_t> positions;
  for (const std::string& tag : tags) {
    ok = ok && count_substr(text, tag) == 1;
    const size_t pos = text.find(tag);
    positions.push_back(pos == std::string::npos ? -1 : static_cast<std::ptrdiff_t>(pos));
  }
  return ok && positions[0] <= positions[1] && positions[1] <= positions[2] && positions[2] <= positions[3];
}

// extract_solution: the last non-overlapping <answer>(.*?)</answer>, stripped; nullopt when there is none.
std::optional<std::string> last_answer_block(const std::string& text) {
  const std::string open = "<answer>", close = "</answer>";
  std::optional<std::string> last;
  size_t pos = text.find(open);
  while (pos != std::string::npos) {
    const size_t end = text.find(close, pos + open.size());
    if (end == std::string::npos) break;
    last = trim(text.substr(pos + open.size(), end - pos - open.size()));
    pos = text.find(open, end + close.size());
  }
  return last;
}

// Logic-RL matches answers with Python regexes. They are matched by hand here, in linear time: std::regex recurses
// per character and overflows the stack on long inputs. Classes as std::regex has them in the "C" locale.

bool is_word_char(char c) {  // \w
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
}

bool is_space_char(char c) {  // \s
  return c == ' ' || (c >= '\t' && c <= '\r');
}

char ascii_lower(char c) {
  return c >= 'A' && c <= 'Z' ? static_cast<char>(c - 'A' + 'a') : c;
}

std::string to_lower(std::string s) {
  for (char& c : s) c = ascii_lower(c);
  return s;
}

// \b at pos: a word character on exactly one side (the ends of the text count as non-word).
bool word_boundary(const std::string& s, size_t pos) {
  const bool before = pos > 0 && is_word_char(s[pos - 1]);
  const bool after = pos < s.size() && is_word_char(s[pos]);
  return before != after;
}

// End of the run of \s starting at pos (pos when there is none).
size_t skip_spaces(const std::string& s, size_t pos) {
  while (pos < s.size() && is_space_char(s[pos])) ++pos;
  return pos;
}

// Whether s continues at pos with `lower_word`, ignoring ASCII case.
bool continues_with(const std::string& s, size_t pos, const char* lower_word) {
  for (; *lower_word; ++lower_word, ++pos)
    if (pos >= s.size() || ascii_lower(s[pos]) != *lower_word) return false;
  return true;
}

struct RoleClaim {
  bool knight = false;
  size_t end = 0;  // just past "knight" / "knave"
};

// \s+is\s+a\s+(knight|knave) at pos, ignoring case. Each \s+ takes the whole run: a letter must follow it.
std::optional<RoleClaim> role_claim(const std::string& s, size_t pos) {
  for (const char* word : {"is", "a"}) {
    const size_t start = skip_spaces(s, pos);
    if (start == pos || !continues_with(s, start, word)) return std::nullopt;
    pos = start + std::strlen(word);
  }
  const size_t start = skip_spaces(s, pos);
  if (start == pos) return std::nullopt;
  if (continues_with(s, start, "knight")) return RoleClaim{true, start + 6};
  if (continues_with(s, start, "knave")) return RoleClaim{false, start + 5};
  return std::nullopt;
}

// Calls visit(p) for each position p where `needle` occurs in `text`, left to right, until visit returns true.
// Knuth-Morris-Pratt, linear in text.size() + needle.size(); an empty needle occurs at every position.
template <typename Visit>
void for_each_occurrence(const std::string& text, const std::string& needle, Visit visit) {
  const size_t m = needle.size();
  if (m == 0) {
    for (size_t p = 0; p <= text.size(); ++p)
      if (visit(p)) return;
    return;
  }
  std::vector<size_t> border(m, 0);  // border[i]: longest proper prefix of needle[0..i] that also ends it
  for (size_t i = 1, k = 0; i < m; ++i) {
    while (k > 0 && needle[i] != needle[k]) k = border[k - 1];
    if (needle[i] == needle[k]) ++k;
    border[i] = k;
  }
  for (size_t i = 0, k = 0; i < text.size(); ++i) {
    while (k > 0 && text[i] != needle[k]) k = border[k - 1];
    if (text[i] == needle[k]) ++k;
    if (k == m) {
      if (visit(i + 1 - m)) return;
      k = border[m - 1];
    }
  }
}

// Logic-RL's \bNAME\b\s+is\s+a\s+\b(knight|knave)\b (NAME escaped, case-insensitive): the role (true = knight) of
// the first match in `text`, or nullopt. A candidate's whitespace run follows a word character that ends NAME, so
// each run is scanned by at most three candidates.
std::optional<bool> claimed_role(const std::string& text, const std::string& lower_text, const std::string& name) {
  std::optional<bool> role;
  for_each_occurrence(lower_text, to_lower(name), [&](size_t p) {
    const size_t name_end = p + name.size();
    if (!word_boundary(text, p) || !word_boundary(text, name_end)) return false;
    const std::optional<RoleClaim> claim = role_claim(text, name_end);
    if (!claim || !word_boundary(text, claim->end)) return false;
    role = claim->knight;
    return true;
  });
  return role;
}

// parse_model_answer: roles per name (true = knight), or nullopt when the knight/knave count != n or a name has no
// "<name> is a knight|knave".
std::optional<std::vector<bool>> parse_roles(const std::string& answer, const std::vector<std::string>& names) {
  const std::string lower = to_lower(answer);
  if (count_substr(lower, "knight") + count_substr(lower, "knave") != names.size()) return std::nullopt;
  std::vector<bool> roles;
  for (const std::string& name : names) {
    const std::optional<bool> role = claimed_role(answer, lower, name);
    if (!role) return std::nullopt;
    roles.push_back(*role);
  }
  return roles;
}

}  // namespace

KkScore kk_score(const std::string& response, const std::vector<std::string>& names, const std::vector<bool>& solution,
                 bool prompt_opens_think) {
  usage_check(names.size() == solution.size(), "kk_score: names and solution differ in length");
  // Logic-RL scores the text after "Assistant:", which holds the prompt's opening "<think>".
  const std::string processed = (prompt_opens_think ? "<think>" : "") + response;
  KkScore result;
  const bool format_ok = valid_structure(processed);
  result.format_score = format_ok ? 1.0 : -1.0;
  const std::optional<std::string> answer = last_answer_block(processed);
  if (!format_ok) {
    result.answer_score = -2.0;
    result.status = "bad_format";
  } else if (!answer || answer->empty()) {
    result.answer_score = -2.0;
    result.status = "empty_answer";
  } else if (const auto roles = parse_roles(*answer, names); !roles) {
    result.answer_score = -2.0;
    result.status = "unparseable";
  } else if (*roles == solution) {
    result.answer_score = 2.0;
    result.correct = true;
    result.status = "correct";
  } else {
    result.answer_score = -1.5;
    result.status = "wrong_answer";
  }
  result.total = result.format_score + result.answer_score;
  return result;
}

// ---------------------------------------------------------------------------------------------------------------
// The task.

namespace {

// regex_replace(text, ",\s*\]", "]"): drops the trailing comma of Python 1-tuples "(x,)" once they are arrays.
std::string drop_trailing_commas(const std::string& text) {
  std::string out;
  for (size_t i = 0; i < text.size(); ++i) {
    if (text[i] == ',') {
      const size_t next = skip_spaces(text, i + 1);
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

// Logic-RL's parse_solution_text_format: every "\(\d+\)\s+(\w+)\s+is\s+a\s+(knight|knave)" (case-insensitive), left to
// right. Each candidate starts at a '(' and scans no other '(', so the text is scanned once.
void parse_solution_lines(const std::string& text, std::vector<std::string>& names, std::vector<bool>& solution) {
  for (size_t i = 0; i < text.size(); ++i) {
    if (text[i] != '(') continue;
    size_t close = i + 1;
    while (close < text.size() && text[close] >= '0' && text[close] <= '9') ++close;
    if (close == i + 1 || close == text.size() || text[close] != ')') continue;
    const size_t name_begin = skip_spaces(text, close + 1);
    size_t name_end = name_begin;
    while (name_end < text.size() && is_word_char(text[name_end])) ++name_end;
    if (name_begin == close + 1 || name_end == name_begin) continue;
    const std::optional<RoleClaim> claim = role_claim(text, name_end);
    if (!claim) continue;
    names.push_back(text.substr(name_begin, name_end - name_begin));
    solution.push_back(claim->knight);
    i = claim->end - 1;
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
  if (!ground_truth.is_object()) throw UsageError("kk ground truth: expected an object, got " + excerpt(ground_truth));
  names.clear();
  solution.clear();
  if (ground_truth.contains("names") && ground_truth.contains("solution")) {
    names = names_of(ground_truth);
    solution = solution_of(ground_truth);
  } else {
    parse_solution_lines(json_field<std::string>(ground_truth, "solution_text_format"), names, solution);
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
  std::string text = "(";
  for (size_t i = 0; i < statements.size(); ++i) text += (i ? ", " : "") + kk_python_statements(statements[i]);
  return text + (statements.size() == 1 ? ",)" : ")");
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
    usage_check(!nested_deeper_than(record["knight_knave"], kKkMaxStatementDepth),
                "field 'knight_knave': nested deeper than " + std::to_string(kKkMaxStatementDepth) + " levels");
    gt["knight_knave"] = record["knight_knave"];
  } else {
    gt["knight_knave"] = default_knight_knave();
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
