// Knights and Knaves: generator properties, text, the Logic-RL reward, public-record I/O.
#include <catch2/catch.hpp>

#include <cctype>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <optional>
#include <random>
#include <regex>
#include <set>
#include <string>
#include <vector>

#include "common/error.h"
#include "tasks/datasets.h"
#include "tasks/kk.h"
#include "tests/tasks/same_samples.h"
#include "tests/temp_dir.h"

namespace {

using nlohmann::json;

// Independent of tasks/kk.cpp: truth of a statement tree under an assignment (true = knight).
bool truth(const json& s, const std::vector<bool>& knight) {
  const std::string op = s.at(0).get<std::string>();
  if (op == "telling-truth") return knight.at(s.at(1).get<size_t>());
  if (op == "lying") return !knight.at(s.at(1).get<size_t>());
  if (op == "not") return !truth(s.at(1), knight);
  if (op == "->") return !truth(s.at(1), knight) || truth(s.at(2), knight);
  if (op == "<=>") return truth(s.at(1), knight) == truth(s.at(2), knight);
  bool all = true, any = false;
  for (size_t i = 1; i < s.size(); ++i) {
    const bool v = truth(s[i], knight);
    all = all && v, any = any || v;
  }
  if (op == "and") return all;
  if (op == "or") return any;
  throw std::runtime_error("unknown operator " + op);
}

// All assignments where every person is a knight exactly when their statement is true.
std::vector<std::vector<bool>> brute_force(const json& statements) {
  const size_t n = statements.size();
  std::vector<std::vector<bool>> found;
  for (size_t mask = 0; mask < (size_t{1} << n); ++mask) {
    std::vector<bool> knight(n);
    for (size_t i = 0; i < n; ++i) knight[i] = (mask >> i) & 1;
    bool ok = true;
    for (size_t i = 0; i < n; ++i) ok = ok && truth(statements[i], knight) == knight[i];
    if (ok) found.push_back(knight);
  }
  return found;
}

// Depth of a statement tree (a leaf has depth 1); checks the grammar on the way.
int depth_of(const json& s, size_t speaker, size_t n, size_t width) {
  const std::string op = s.at(0).get<std::string>();
  if (op == "telling-truth" || op == "lying") {
    REQUIRE(s.size() == 2);
    REQUIRE(s[1].get<size_t>() < n);
    REQUIRE_FALSE((op == "lying" && s[1].get<size_t>() == speaker));  // nobody says "I am a knave"
    return 1;
  }
  size_t operands = s.size() - 1;
  if (op == "not") REQUIRE(operands == 1);
  if (op == "->" || op == "<=>") REQUIRE(operands == 2);
  if (op == "and" || op == "or") {
    REQUIRE(operands >= 2);
    REQUIRE(operands <= width);
    std::set<std::string> distinct;
    for (size_t i = 1; i < s.size(); ++i) distinct.insert(s[i].dump());
    REQUIRE(distinct.size() == operands);
  }
  int deepest = 0;
  for (size_t i = 1; i < s.size(); ++i) deepest = std::max(deepest, depth_of(s[i], speaker, n, width));
  return deepest + 1;
}

std::vector<bool> to_bools(const json& j) {
  std::vector<bool> v;
  for (const json& b : j) v.push_back(b.get<bool>());
  return v;
}

// ["not", ["not", ... ["lying", 1]]]: a statement `depth` levels deep (Oliver is a knave, negated depth - 1 times).
std::string nested_not_text(size_t depth) {
  std::string text;
  for (size_t i = 1; i < depth; ++i) text += "[\"not\", ";
  return text + "[\"lying\", 1]" + std::string(depth - 1, ']');
}

json nested_not(size_t depth) {
  return json::parse(nested_not_text(depth));
}

// A public-format record where Zoey is a knight and Oliver a knave. The statements are moved in: copying deeply
// nested JSON recurses once per level.
json published_record(json statements) {
  json record = {{"quiz", "Zoey said that Oliver is a knave. Oliver said that Zoey is not a knight."},
                 {"names", {"Zoey", "Oliver"}},
                 {"solution", {true, false}}};
  record["statements"] = std::move(statements);
  return record;
}

std::string lowercase(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

// What the reward (tasks/kk_score.cpp) did with std::regex before it matched by hand (Logic-RL's parse_model_answer):
// roles per name, or nullopt. Only for short inputs: std::regex recurses per character.
std::optional<std::vector<bool>> regex_roles(const std::string& answer, const std::vector<std::string>& names) {
  const std::string lower = lowercase(answer);
  size_t words = 0;
  for (const char* word : {"knight", "knave"})
    for (size_t pos = lower.find(word); pos != std::string::npos; pos = lower.find(word, pos + 1)) ++words;
  if (words != names.size()) return std::nullopt;
  std::vector<bool> roles;
  for (const std::string& name : names) {
    std::string escaped;
    for (char c : name)
      escaped += (std::string(R"(\^$.|?*+()[]{})").find(c) != std::string::npos ? "\\" : "") + std::string(1, c);
    const std::regex pattern("\\b" + escaped + "\\b\\s+is\\s+a\\s+\\b(knight|knave)\\b",
                             std::regex::ECMAScript | std::regex::icase);
    std::smatch match;
    if (!std::regex_search(answer, match, pattern)) return std::nullopt;
    roles.push_back(lowercase(match[1].str()) == "knight");
  }
  return roles;
}

const std::vector<std::string> kNames = {"Zoey", "Oliver", "Grace"};
const std::vector<bool> kSolution = {true, false, true};
const std::string kRight = "(1) Zoey is a knight\n(2) Oliver is a knave\n(3) Grace is a knight";

}  // namespace

TEST_CASE("kk: every generated puzzle has exactly one solution and it is the recorded one", "[cpu][tasks][kk]") {
  std::set<std::string> all_statements;
  for (uint64_t seed : {1u, 2u, 3u}) {
    // 14 puzzles over 2..8 people: two per size per seed.
    const std::vector<json> records = ppo::kk_generate_records(14, 2, 8, seed);
    REQUIRE(records.size() == 14);
    for (size_t i = 0; i < records.size(); ++i) {
      const json& r = records[i];
      const size_t n = 2 + i % 7;
      INFO("seed " << seed << " puzzle " << i << ": " << r["statements"].dump());
      REQUIRE(r["names"].size() == n);
      REQUIRE(r["statements"].size() == n);
      CHECK(r["index"] == i);
      const auto solutions = brute_force(r["statements"]);
      REQUIRE(solutions.size() == 1);
      CHECK(solutions[0] == to_bools(r["solution"]));
      for (size_t p = 0; p < n; ++p) CHECK(depth_of(r["statements"][p], p, n, /*width=*/2) <= 2);
      CHECK(std::set<json>(r["names"].begin(), r["names"].end()).size() == n);
      if (seed == 1) CHECK(all_statements.insert(r["statements"].dump()).second);  // no duplicate puzzles
    }
  }
}

TEST_CASE("kk: deeper and wider grammar still yields unique puzzles", "[cpu][tasks][kk]") {
  ppo::KkConfig config;
  config.depth = 3;
  config.width = 3;
  const std::vector<json> records = ppo::kk_generate_records(6, 3, 5, 11, config);
  int deepest = 0;
  for (const json& r : records) {
    const size_t n = r["names"].size();
    REQUIRE(brute_force(r["statements"]).size() == 1);
    for (size_t p = 0; p < n; ++p) deepest = std::max(deepest, depth_of(r["statements"][p], p, n, 3));
    CHECK(r["quiz"].get<std::string>().find("So who is a knight and who is a knave?") != std::string::npos);
  }
  CHECK(deepest <= 3);
}

TEST_CASE("kk: same seed gives identical records, another seed differs", "[cpu][tasks][kk]") {
  const auto a = ppo::kk_generate_records(10, 2, 6, 5);
  const auto b = ppo::kk_generate_records(10, 2, 6, 5);
  const auto prefix = ppo::kk_generate_records(4, 2, 6, 5);
  const auto c = ppo::kk_generate_records(10, 2, 6, 6);
  CHECK(json(a) == json(b));
  for (size_t i = 0; i < prefix.size(); ++i) CHECK(prefix[i] == a[i]);
  CHECK(json(a) != json(c));

  const ppo::KkTask task;
  const auto s1 = task.generate(6, 3, 4, 77);
  const auto s2 = task.generate(6, 3, 4, 77);
  for (size_t i = 0; i < s1.size(); ++i) {
    CHECK(task.to_json(s1[i]).dump() == task.to_json(s2[i]).dump());
    CHECK(s1[i].prompt == s2[i].prompt);
    CHECK(s1[i].difficulty == 3 + static_cast<int64_t>(i % 2));
  }
  CHECK_THROWS_AS(task.generate(3, 1, 4, 1), ppo::UsageError);
  CHECK_THROWS_AS(task.generate(3, 2, 9, 1), ppo::UsageError);
}

TEST_CASE("kk: statement and solution text", "[cpu][tasks][kk]") {
  const json leaf = json::parse(R"(["lying", 1])");
  CHECK(ppo::kk_statement_text(kNames, leaf) == "Oliver is a knave");
  CHECK(ppo::kk_statement_text(kNames, json::parse(R"(["not", ["lying", 0]])")) == "Zoey is not a knave");
  CHECK(ppo::kk_statement_text(kNames, json::parse(R"(["or", ["telling-truth", 2], ["lying", 1]])")) ==
        "Grace is a knight or Oliver is a knave");
  CHECK(ppo::kk_statement_text(kNames, json::parse(R"(["->", ["telling-truth", 0], ["telling-truth", 2]])")) ==
        "if Zoey is a knight then Grace is a knight");
  CHECK(ppo::kk_statement_text(kNames, json::parse(R"(["<=>", ["lying", 2], ["and", ["lying", 0], ["lying", 1]]])")) ==
        "Grace is a knave if and only if (Zoey is a knave and Oliver is a knave)");
  CHECK(ppo::kk_solution_text(kNames, kSolution) == "Zoey is a knight, Oliver is a knave, and Grace is a knight.");
  CHECK(ppo::kk_solution_text_format(kNames, kSolution) == kRight);

  const ppo::KkTask task;
  const auto samples = task.generate(3, 3, 3, 8);
  for (const auto& s : samples) {
    const std::string quiz = s.ground_truth["quiz"];
    const auto names = s.ground_truth["names"].get<std::vector<std::string>>();
    CHECK(quiz.rfind("A very special island is inhabited only by knights and knaves. Knights always tell the truth, "
                     "and knaves always lie. You meet 3 inhabitants: " +
                         names[0] + ", " + names[1] + ", and " + names[2] + ".",
                     0) == 0);
    // One sentence per person, each naming its speaker.
    for (const auto& name : names) CHECK(quiz.find(name) != std::string::npos);
    CHECK(s.prompt.find(quiz) != std::string::npos);
    // Logic-RL base template: the model continues an opened think block.
    const std::string suffix = "\nAssistant: <think>";
    REQUIRE(s.prompt.size() > suffix.size());
    CHECK(s.prompt.substr(s.prompt.size() - suffix.size()) == suffix);
    CHECK(s.ground_truth["knight_knave"]["Knight"] == "Knight");
    CHECK(s.ground_truth["knight_knave"]["a_knave"] == "a knave");
  }
}

TEST_CASE("kk: Logic-RL reward golden cases", "[cpu][tasks][kk]") {
  struct Case {
    std::string what, response;
    double format, answer;
    std::string status;
  };
  // The prompt already opened <think>, so a well-formed response has </think>, <answer>, </answer> once each.
  // format +1/-1; answer +2 right, -1.5 wrong, -2 unparseable/empty/format failed.
  const std::string think = " Zoey tells the truth. </think> ";
  const std::vector<Case> cases = {
      {"correct", think + "<answer> " + kRight + " </answer>", 1, 2, "correct"},
      {"wrong role", think + "<answer> (1) Zoey is a knight\n(2) Oliver is a knave\n(3) Grace is a knave </answer>", 1,
       -1.5, "wrong_answer"},
      {"names in another order", think + "<answer>Grace is a knight, Zoey is a knight, and Oliver is a knave.</answer>",
       1, 2, "correct"},
      {"case-insensitive", think + "<answer>ZOEY IS A KNIGHT; OLIVER is a Knave; grace is a KNIGHT</answer>", 1, 2,
       "correct"},
      {"</think> missing", " Zoey tells the truth. <answer> " + kRight + " </answer>", -1, -2, "bad_format"},
      {"<think> doubled", "<think>" + think + "<answer> " + kRight + " </answer>", -1, -2, "bad_format"},
      {"out of order", " reasoning <answer> " + kRight + " </answer> </think>", -1, -2, "bad_format"},
      {"two answer blocks", think + "<answer> (1) Zoey is a knave </answer> <answer> " + kRight + " </answer>", -1, -2,
       "bad_format"},
      {"too many role words", think + "<answer> " + kRight + ", not a knave </answer>", 1, -2, "unparseable"},
      {"plural counts as a role word", think + "<answer>Zoey and Grace are knights, Oliver is a knave</answer>", 1, -2,
       "unparseable"},
      {"a name missing",
       think + "<answer> (1) Zoey is a knight\n(2) Oliver is a knave\n(3) Gracie is a knight "
               "</answer>",
       1, -2, "unparseable"},
      {"empty answer", think + "<answer>  \n </answer>", 1, -2, "empty_answer"},
      {"empty response", "", -1, -2, "bad_format"},
  };
  for (const Case& c : cases) {
    INFO(c.what << ": " << c.response);
    const ppo::KkScore got = ppo::kk_score(c.response, kNames, kSolution);
    CHECK(got.format_score == c.format);
    CHECK(got.answer_score == c.answer);
    CHECK(got.total == c.format + c.answer);
    CHECK(got.correct == (c.status == "correct"));
    CHECK(got.status == c.status);
  }
  // Without an opened think block the response must open it itself.
  CHECK(ppo::kk_score("<think>" + think + "<answer> " + kRight + " </answer>", kNames, kSolution, false).total == 3);
  CHECK(ppo::kk_score(think + "<answer> " + kRight + " </answer>", kNames, kSolution, false).total == -3);
}

TEST_CASE("kk: the reference answer earns the full reward", "[cpu][tasks][kk]") {
  const ppo::KkTask task;
  for (const auto& s : task.generate(14, 2, 8, 21)) {
    INFO(s.answer);
    const ppo::Score score = task.score(s, s.answer);
    CHECK(score.score == 3.0);
    CHECK(score.correct);
    CHECK(score.format_ok);
    CHECK(s.answer.find("<think>") == std::string::npos);  // the prompt opened it
    CHECK(s.answer.substr(s.answer.size() - 9) == "</answer>");
  }
  // A wrong answer under the same sample: flip the first role in the answer block.
  const auto s = task.generate(1, 3, 3, 4)[0];
  const bool first_knight = s.ground_truth["solution"][0];
  std::string wrong = s.answer;
  const size_t pos = wrong.rfind(first_knight ? "is a knight" : "is a knave", wrong.find("\n(2)"));
  wrong.replace(pos, first_knight ? 11 : 10, first_knight ? "is a knave" : "is a knight");
  CHECK(task.score(s, wrong).score == -0.5);
}

TEST_CASE("kk: JSONL round trip and public-format records", "[cpu][tasks][kk]") {
  const ppo::KkTask task;
  const auto samples = task.generate(7, 2, 8, 3);
  ppo_test::TempDir tmp;
  const std::string path = tmp.sub("kk.jsonl");
  ppo::write_jsonl(task, samples, path);
  const auto loaded = ppo::load_samples(task, path);
  std::ifstream in(path);
  std::string first_line;
  std::getline(in, first_line);
  ppo_test::require_same_samples(loaded, samples);
  const json record = json::parse(first_line);
  for (const char* field :
       {"quiz", "names", "knight_knave", "solution", "solution_text", "solution_text_format", "statements", "index"}) {
    CHECK(record.contains(field));
  }

  // A record as published on the Hub: statements as a Python tuple string, extra fields.
  const json published = {
      {"quiz", "A very special island ... Zoey said that Oliver is a knave. ..."},
      {"names", {"Zoey", "Oliver"}},
      {"solution", {true, false}},
      {"statements", "(('lying', 1), ('not', ('telling-truth', 0)),)"},  // Oliver: "Zoey is not a knight"
      {"cot_head", "Let's think step by step"},
      {"index", 12}};
  const ppo::TaskSample p = task.from_json(published);
  CHECK(p.difficulty == 2);
  CHECK(p.index == 12);
  CHECK(p.ground_truth["statements"] == json::parse(R"([["lying", 1], ["not", ["telling-truth", 0]]])"));
  CHECK(p.ground_truth["solution_text_format"] == "(1) Zoey is a knight\n(2) Oliver is a knave");
  CHECK_FALSE(p.ground_truth.contains("cot_head"));
  CHECK(task.score(p, p.answer).score == 3.0);

  json no_statements = published;
  no_statements.erase("statements");
  CHECK(task.score(task.from_json(no_statements), task.from_json(no_statements).answer).score == 3.0);

  json inconsistent = published;
  inconsistent["solution"] = {false, false};
  CHECK_THROWS_AS(task.from_json(inconsistent), ppo::UsageError);
  json missing = published;
  missing.erase("quiz");
  CHECK_THROWS_WITH(task.from_json(missing), Catch::Contains("missing field 'quiz'"));
  json mismatched = published;
  mismatched["solution"] = {true};
  CHECK_THROWS_AS(task.from_json(mismatched), ppo::UsageError);
}

TEST_CASE("kk: a record's own prompt and answer replace the template, the reward is unchanged", "[cpu][tasks][kk]") {
  const ppo::KkTask task;
  const ppo::TaskSample base = task.generate(1, 2, 2, 5)[0];
  CHECK_FALSE(task.to_json(base).contains("prompt"));  // template and reference answer are not written out
  CHECK_FALSE(task.to_json(base).contains("answer"));

  json record = task.to_json(base);
  record["prompt"] = "User: " + base.ground_truth["quiz"].get<std::string>() + "\nAssistant: <think>";
  record["answer"] =
      " </think> <answer> " + base.ground_truth["solution_text_format"].get<std::string>() + " </answer>";
  const ppo::TaskSample own = task.from_json(record);
  CHECK(own.prompt == record["prompt"]);
  CHECK(own.answer == record["answer"]);
  CHECK(own.prompt.size() < base.prompt.size());
  CHECK(task.score(own, own.answer).score == 3.0);
  CHECK(task.score(own, base.answer).score == task.score(base, base.answer).score);
  CHECK(task.score(own, " no tags").score == task.score(base, " no tags").score);
  const json written = task.to_json(own);
  CHECK(written["prompt"] == record["prompt"]);
  CHECK(written["answer"] == record["answer"]);
  CHECK(task.from_json(written).prompt == own.prompt);

  json no_think = record;
  no_think["prompt"] = "User: who is a knight?\nAssistant:";
  CHECK_THROWS_WITH(task.from_json(no_think), Catch::Contains("must end with \"<think>\""));
  const ppo::KkTask no_think_task(ppo::KkConfig{2, 2, 100000, /*prompt_opens_think=*/false});
  CHECK(no_think_task.from_json(no_think).prompt == no_think["prompt"]);
}

TEST_CASE("kk: statements nested deeper than the limit are a UsageError and not a stack overflow", "[cpu][tasks][kk]") {
  const std::vector<bool> knights = {true, false};
  // At the limit a statement still evaluates and prints; one level more is refused, naming the limit.
  // "Oliver is a knave" (true) under depth - 1 "not"s.
  CHECK(ppo::kk_evaluate(nested_not(ppo::kKkMaxStatementDepth), knights) == ((ppo::kKkMaxStatementDepth - 1) % 2 == 0));
  CHECK(ppo::kk_statement_text(kNames, nested_not(ppo::kKkMaxStatementDepth)).size() > 0);
  const std::string too_deep = "nested deeper than " + std::to_string(ppo::kKkMaxStatementDepth) + " levels";
  CHECK_THROWS_WITH(ppo::kk_evaluate(nested_not(ppo::kKkMaxStatementDepth + 1), knights), Catch::Contains(too_deep));
  CHECK_THROWS_WITH(ppo::kk_statement_text(kNames, nested_not(ppo::kKkMaxStatementDepth + 1)),
                    Catch::Contains(too_deep));
  ppo::KkConfig deep_config;
  deep_config.depth = ppo::kKkMaxGenerateDepth + 1;
  std::mt19937_64 rng(1);
  CHECK_THROWS_AS(ppo::kk_sample_statements(rng, 2, deep_config), ppo::UsageError);

  // Records as `ppo score` / `ppo train` read them. 40k levels overflowed the stack in kk_evaluate; 200k levels of
  // plain arrays overflow nlohmann's copy, == and dump(), which must not be reached either. The test builds them
  // from text and moves them, never copying.
  const ppo::KkTask task;
  const std::string oliver = R"(, ["lying", 0]])";
  CHECK_THROWS_WITH(task.from_json(published_record(json::parse("[" + nested_not_text(40000) + oliver))),
                    Catch::Contains(too_deep));
  std::string tuple = "(";
  for (int i = 0; i < 40000; ++i) tuple += "('not', ";
  tuple += "('lying', 1)" + std::string(40000, ')') + ", ('lying', 0))";
  CHECK_THROWS_WITH(task.from_json(published_record(tuple)), Catch::Contains(too_deep));
  const std::string arrays = std::string(200000, '[') + std::string(200000, ']');
  CHECK_THROWS_WITH(task.from_json(published_record(json::parse(R"([["not", )" + arrays + "]" + oliver))),
                    Catch::Contains(too_deep));
  CHECK_THROWS_WITH(task.from_json(published_record(json::parse(R"([["bogus", )" + arrays + "]" + oliver))),
                    Catch::Contains("malformed statement") && Catch::Contains("unknown operator"));
  json record = published_record(nullptr);
  record["solution"] = json::parse("[true, " + arrays + "]");
  CHECK_THROWS_WITH(task.from_json(record), Catch::Contains("expected an array of booleans"));
  record = published_record(nullptr);
  record["knight_knave"] = json::parse(arrays);
  CHECK_THROWS_WITH(task.from_json(record), Catch::Contains("field 'knight_knave'") && Catch::Contains(too_deep));
  std::vector<std::string> names;
  std::vector<bool> solution;
  CHECK_THROWS_WITH(ppo::kk_truth(json::parse(arrays), names, solution), Catch::Contains("expected an object"));

  // The JSONL reader stops it sooner, at its JSON depth limit (common/json.h), naming the file and line.
  ppo_test::TempDir tmp;
  const std::string path = tmp.sub("kk_deep.jsonl");
  std::ofstream(path) << R"({"quiz": "q", "names": ["Zoey", "Oliver"], "solution": [true, false], "statements": [)" +
                             nested_not_text(40000) + oliver + "}\n";
  CHECK_THROWS_WITH(ppo::load_samples(task, path),
                    Catch::Contains(path + ":1: ") && Catch::Contains("JSON nested deeper than 100 levels"));
}

TEST_CASE("kk: a long whitespace run scores and parses like a short one", "[cpu][tasks][kk]") {
  // std::regex recursed per character: 100k spaces in an answer, or 40k in a tuple string, overflowed the stack.
  const auto response = [](const std::string& gap) {
    return " Zoey tells the truth. </think> <answer> (1) Zoey" + gap + "is a knight\n(2) Oliver is" + gap +
           "a knave\n(3) Grace is a\t\n\r\v\f" + gap + "knight </answer>";
  };
  CHECK(ppo::kk_score(response(std::string(100, ' ')), kNames, kSolution).total == 3.0);
  CHECK(ppo::kk_score(response(std::string(100000, ' ')), kNames, kSolution).total == 3.0);
  CHECK(ppo::kk_score(response(std::string(100000, '\n')), kNames, kSolution).total == 3.0);
  // Nothing but whitespace between the name and "is": still one \s+ run; no whitespace at all: no match.
  CHECK(ppo::kk_score(response(""), kNames, kSolution).status == "unparseable");

  std::vector<std::string> names;
  std::vector<bool> solution;
  ppo::kk_truth({{"solution_text_format", "(1)" + std::string(100000, ' ') + "Zoey is a knight\n(2) Oliver" +
                                              std::string(100000, '\t') + "is a knave"}},
                names, solution);
  CHECK(names == std::vector<std::string>{"Zoey", "Oliver"});
  CHECK(solution == std::vector<bool>{true, false});

  const ppo::KkTask task;
  const json want = json::parse(R"([["lying", 1], ["not", ["telling-truth", 0]]])");
  for (size_t gap : {size_t{1}, size_t{40000}, size_t{1000000}}) {
    INFO(gap << " spaces before the closing parenthesis");
    const std::string statements = "(('lying', 1), ('not', ('telling-truth', 0))," + std::string(gap, ' ') + ")";
    CHECK(task.from_json(published_record(statements)).ground_truth["statements"] == want);
  }
}

namespace {

// Answers: the roles the regexes read (std::regex on short inputs), and kk_score reading the same.
void check_answers_like_regexes() {
  struct Case {
    std::vector<std::string> names;
    std::string answer;
    bool parses;  // what the regexes give, pinned so the reference itself is checked
  };
  const std::vector<Case> cases = {
      {{"Zoey"}, "Zoey is a knight", true},
      {{"Zoey"}, "Zoeyis a knight", false},
      {{"Zoey"}, "xZoey is a knave", false},
      {{"Zoey"}, "ZOEY IS A KNAVE", true},
      {{"Zoey"}, "zoey\tis\na\r\nknight", true},
      {{"Zoey"}, "Zoey\vis\fa  knave.", true},
      {{"Zoey"}, "Zoey_ is a knight", false},
      {{"Zoey"}, "_Zoey is a knight", false},
      {{"Zoey"}, "Zoey1 is a knight", false},
      {{"Zoey"}, "Zoey, is a knight", false},
      {{"Zoey"}, "Zoey is a knight_", false},
      {{"Zoey"}, "Zoey is a knight1", false},
      {{"Zoey"}, "Zoey is a knights", false},
      {{"Zoey"}, "Zoey is a knight.", true},
      {{"Zoey"}, "Zoey is an knight", false},
      {{"Zoey"}, "Zoey is aknight", false},
      {{"Zoey"}, "Zoey isa knight", false},
      {{"Zoey"}, "(1) Zoey is a knave", true},
      {{"Zoey"}, "\xC3\xA9Zoey is a knight", true},  // a non-ASCII byte is not \w
      {{"Zoey"}, "Zoey\xC3\xA9 is a knight", false},
      {{"Zoey"}, "xZoey is a knave, Zoey is", false},
      {{"Zoey"}, "Zoeyx is, Zoey is a knave", true},
      {{"Zoey", "Zoey"}, "Zoey is a knave and Zoey is a knight", true},  // the first match counts for both
      {{"Zoey", "Oliver"}, "Oliver is a knave; zoey IS a KNIGHT", true},
      {{"A.B"}, "a.b is a knight", true},
      {{"A.B"}, "AxB is a knight", false},  // the name is matched literally
      {{"O'Neil"}, "o'neil is a knave", true},
      {{"Zoey "}, "Zoey is a knight", false},
      {{"Zoey "}, "Zoey  is a knight", false},
      {{""}, "x is a knight", true},
      {{"aab"}, "aaab is a knave aab is", false},
      {{"aab"}, "aaab aab is a knave", true},
  };
  for (const Case& c : cases) {
    INFO(c.answer);
    const std::optional<std::vector<bool>> want = regex_roles(c.answer, c.names);
    CHECK(want.has_value() == c.parses);
    // Scored against the regexes' roles: "correct" iff kk_score reads the same roles.
    const std::vector<bool> truth = want ? *want : std::vector<bool>(c.names.size(), true);
    const ppo::KkScore got = ppo::kk_score(" </think> <answer>" + c.answer + "</answer>", c.names, truth);
    CHECK(got.status == (want ? "correct" : "unparseable"));
  }
}

// Logic-RL's solution_text_format lines: every \(\d+\)\s+(\w+)\s+is\s+a\s+(knight|knave), case-insensitive.
void check_solution_lines_like_regex() {
  const std::regex line(R"(\(\d+\)\s+(\w+)\s+is\s+a\s+(knight|knave))", std::regex::icase);
  for (const std::string text :
       {"(1) Zoey is a knight\n(2) Oliver is a knave", "(12)\tZoey_1\nIS\tA\vKNAVE",
        "(1)Zoey is a knight (2) Oliver is a knave", "(1) Zoey is a knightly (2) Oliver is a knave",
        "(x) Zoey is a knight (3) Grace   is   a   knave.", "((1) Zoey is a knight",
        "(1) Zo\xC3\xA9 is a knight (2) Oliver is an knave (3) Grace is a knight", "(1) Zoey (2) Oliver is a knave",
        "(1) Zoey is a (2) Oliver is a knight"}) {
    INFO(text);
    std::vector<std::string> want_names;
    std::vector<bool> want_solution;
    for (auto it = std::sregex_iterator(text.begin(), text.end(), line); it != std::sregex_iterator(); ++it) {
      want_names.push_back((*it)[1].str());
      want_solution.push_back(lowercase((*it)[2].str()) == "knight");
    }
    REQUIRE_FALSE(want_names.empty());
    std::vector<std::string> names;
    std::vector<bool> solution;
    ppo::kk_truth({{"solution_text_format", text}}, names, solution);
    CHECK(names == want_names);
    CHECK(solution == want_solution);
  }
}

// Python tuple strings: regex_replace(",\s*\]", "]") drops the comma of 1-tuples after ( ) -> [ ].
void check_python_tuples_like_regex() {
  const ppo::KkTask task;
  for (const std::string statements :
       {"(('lying', 1), ('not', ('telling-truth', 0)),)", "(('lying', 1),\t\n ('not', ('telling-truth', 0) , ) ,  )",
        "(('lying', 1) , ('not', ('telling-truth', 0),\r\n),\v)"}) {
    INFO(statements);
    std::string converted;
    for (char c : statements) converted += c == '(' ? '[' : c == ')' ? ']' : c == '\'' ? '"' : c;
    const json want = json::parse(std::regex_replace(converted, std::regex(",\\s*\\]"), "]"));
    CHECK(task.from_json(published_record(statements)).ground_truth["statements"] == want);
  }
}

}  // namespace

TEST_CASE("kk: hand-written answer matching agrees with Logic-RL's regexes", "[cpu][tasks][kk]") {
  // Side by side with std::regex on short inputs: \b word boundaries, \w = [A-Za-z0-9_], \s = [ \t\n\v\f\r], case.
  check_answers_like_regexes();
  check_solution_lines_like_regex();
  check_python_tuples_like_regex();
}
