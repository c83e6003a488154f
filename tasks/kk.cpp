// Knights and Knaves puzzles: statements (evaluation, solutions), the sampler, the English text and the generator
// (see kk.h for the sources). The prompt and the task are in kk_task.cpp, the Logic-RL reward in kk_score.cpp.
#include "tasks/kk.h"

#include <set>

#include "common/strings.h"
#include "tasks/kk_internal.h"

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

// Whether `j` has more than `levels` levels of arrays/objects. Recurses at most levels + 1 deep.
bool kk_nested_deeper_than(const json& j, int64_t levels) {
  if (!j.is_structured()) return false;
  if (levels == 0) return true;
  for (const json& child : j)
    if (kk_nested_deeper_than(child, levels - 1)) return true;
  return false;
}

// JSON for an error message: cut to 200 characters, and not printed at all when deeper than any statement may be
// (dump() recurses once per level).
std::string kk_excerpt(const json& j) {
  if (kk_nested_deeper_than(j, kKkMaxStatementDepth))
    return "(nested deeper than " + std::to_string(kKkMaxStatementDepth) + " levels)";
  const std::string text = j.dump(-1, ' ', false, json::error_handler_t::replace);
  return text.size() <= 200 ? text : text.substr(0, 200) + "...";
}

namespace {

bool is_leaf(const json& s) {
  return s.is_array() && !s.empty() && (s[0] == "telling-truth" || s[0] == "lying");
}

[[noreturn]] void malformed(const json& s, const std::string& why) {
  throw UsageError("kk: malformed statement " + kk_excerpt(s) + ": " + why);
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

std::string kk_role_text(bool knight) {
  return knight ? "a knight" : "a knave";
}

namespace {

std::string leaf_text(const std::vector<std::string>& names, const json& leaf, bool negate) {
  const int64_t p = leaf_person(leaf, names.size());
  return names[p] + " is " + (negate ? "not " : "") + kk_role_text(leaf[0] == "telling-truth");
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

}  // namespace

json kk_default_knight_knave() {
  return {{"knight", "knight"},   {"knave", "knave"},   {"a_knight", "a knight"},
          {"a_knave", "a knave"}, {"Knight", "Knight"}, {"Knave", "Knave"}};
}

std::string kk_statement_text(const std::vector<std::string>& names, const json& statement) {
  return node_text(names, statement, /*depth=*/1);
}

std::string kk_solution_text_format(const std::vector<std::string>& names, const std::vector<bool>& solution) {
  std::string text;
  for (size_t i = 0; i < names.size(); ++i) {
    text += (i > 0 ? "\n(" : "(") + std::to_string(i + 1) + ") " + names[i] + " is " + kk_role_text(solution[i]);
  }
  return text;
}

std::string kk_solution_text(const std::vector<std::string>& names, const std::vector<bool>& solution) {
  std::vector<std::string> parts;
  for (size_t i = 0; i < names.size(); ++i) parts.push_back(names[i] + " is " + kk_role_text(solution[i]));
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
  record["knight_knave"] = kk_default_knight_knave();
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

}  // namespace ppo
