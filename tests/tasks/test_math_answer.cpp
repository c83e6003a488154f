// Math final-answer rewards (tasks/math_answer.h): golden cases from GSM8K's and MATH's public conventions, and
// (tag [ref]) the scores side by side with veRL's own gsm8k.py and math_reward.py (tests/reference/verl_reward.py).
#include <catch2/catch.hpp>

#include <nlohmann/json.hpp>

#include <fstream>
#include <optional>
#include <string>
#include <vector>

#include "common/jsonl.h"
#include "tasks/math_answer.h"
#include "tests/reference/reference.h"
#include "tests/temp_dir.h"

namespace {

using ppo::math_answer_value;
using ppo::math_answers_equal;
using ppo::normalize_math_answer;

// Optional answers as text, so that a failed CHECK prints them.
const std::string kNone = "(none)";
std::string gsm8k(const std::string& response) {
  return ppo::gsm8k_final_answer(response).value_or(kNone);
}
std::string boxed(const std::string& response) {
  return ppo::last_boxed(response).value_or(kNone);
}

// A GSM8K training solution (openai/gsm8k, train[0]), with its calculator annotations.
const std::string kNataliaSolution =
    "Natalia sold 48/2 = <<48/2=24>>24 clips in May.\n"
    "Natalia sold 48+24 = <<48+24=72>>72 clips altogether in April and May.\n"
    "#### 72";

// "#### 7" followed by `n` copies of `filler`.
std::string answer_then(size_t n, const std::string& filler) {
  std::string s = "#### 7";
  for (size_t i = 0; i < n; ++i) s += filler;
  return s;
}

}  // namespace

TEST_CASE("math answer: gsm8k_final_answer follows veRL's strict #### rule", "[cpu][tasks][math]") {
  CHECK(gsm8k(kNataliaSolution) == "72");
  CHECK(gsm8k("She pays 5 * 200 = 1,000 dollars.\n#### 1,000") == "1000");  // ',' removed
  CHECK(gsm8k("#### 5\nWait, that is wrong.\n#### 7") == "7");              // the last one wins
  CHECK(gsm8k("#### -3") == "-3");
  CHECK(gsm8k("#### 42.") == "42.");  // the regex keeps a sentence's full stop (veRL: "42." != "42")
  CHECK(gsm8k("#### $18") == kNone);  // '$' is not in [-0-9.,]: no answer, as in veRL
  CHECK(gsm8k("####18") == kNone);    // the space after #### is required
  CHECK(gsm8k("#### #### 5") == "5");
  CHECK(gsm8k("#### 5 then #### x") == "5");  // the last match, not the last ####
  CHECK(gsm8k("#### - 5") == kNone);
  CHECK(gsm8k("The answer is 18.") == kNone);
  CHECK(gsm8k("") == kNone);
}

TEST_CASE("math answer: gsm8k_final_answer sees only the last 300 characters", "[cpu][tasks][math]") {
  CHECK(gsm8k(answer_then(294, " ")) == "7");    // 300 characters: nothing clipped
  CHECK(gsm8k(answer_then(295, " ")) == kNone);  // 301: the first '#' is clipped away
  CHECK(gsm8k(answer_then(294, "é")) == "7");    // 300 code points (594 bytes), as Python counts
  CHECK(gsm8k(answer_then(295, "é")) == kNone);
  CHECK(gsm8k("#### 5" + std::string(400, ' ') + "#### 8") == "8");
  CHECK(gsm8k("#### 5" + std::string(400, ' ')) == kNone);
}

TEST_CASE("math answer: last_boxed takes the last boxed answer with balanced braces", "[cpu][tasks][math]") {
  CHECK(boxed(R"(so $x = \boxed{\frac{1}{2}}$.)") == R"(\frac{1}{2})");
  CHECK(boxed(R"(\boxed{x^{2}+1})") == "x^{2}+1");
  CHECK(boxed(R"(\boxed{1} no, \boxed{2})") == "2");
  CHECK(boxed(R"(The answer is $\boxed 5$.)") == "5");  // lm-evaluation-harness's "\boxed " form
  CHECK(boxed(R"(\boxed 5 apples)") == "5");            // cut at whitespace (veRL keeps "5 apples")
  CHECK(boxed(R"(\boxed {5})") == "5");
  CHECK(boxed(R"(\fbox{3})") == "3");  // Hendrycks: \fbox when there is no \boxed
  CHECK(boxed(R"(\boxed{3} \fbox{4})") == "3");
  CHECK(boxed(R"(\boxed{})") == "");
  CHECK(boxed(R"(\boxed{\frac{1}{2})") == kNone);  // unbalanced
  CHECK(boxed(R"(\boxed)") == kNone);
  CHECK(boxed(R"(\boxedx)") == kNone);
  CHECK(boxed("no box here {1}") == kNone);
}

TEST_CASE("math answer: normalize_math_answer applies Hendrycks' strip_string and our additions",
          "[cpu][tasks][math]") {
  CHECK(normalize_math_answer(R"(\dfrac{1}{2})") == R"(\frac{1}{2})");
  CHECK(normalize_math_answer(R"(\tfrac12)") == R"(\frac{1}{2})");
  CHECK(normalize_math_answer(R"(\frac1{72})") == R"(\frac{1}{72})");
  CHECK(normalize_math_answer("3/4") == R"(\frac{3}{4})");
  CHECK(normalize_math_answer("-3/4") == R"(\frac{-3}{4})");
  CHECK(normalize_math_answer("03/4") == "03/4");  // not as Python's str(int) writes it
  CHECK(normalize_math_answer(R"(\left( 1, 2 \right))") == "(1,2)");
  CHECK(normalize_math_answer(R"(90^\circ)") == "90");
  CHECK(normalize_math_answer(R"(90^{\circ})") == "90");
  CHECK(normalize_math_answer(R"(\$18)") == "18");
  CHECK(normalize_math_answer("$18$") == "18");
  CHECK(normalize_math_answer(R"(10\%)") == "10");
  CHECK(normalize_math_answer("10%") == "10");
  CHECK(normalize_math_answer(R"(5\text{ cm})") == "5");  // "\text{ " marks units
  CHECK(normalize_math_answer(R"(\text{(B)})") == "(B)");
  CHECK(normalize_math_answer(R"(\textbf{Monday})") == "Monday");
  CHECK(normalize_math_answer("x = 5") == "5");
  CHECK(normalize_math_answer("abc = 5") == "abc=5");  // left side longer than 2 characters stays
  CHECK(normalize_math_answer(R"(\sqrt3)") == R"(\sqrt{3})");
  CHECK(normalize_math_answer(R"(\sqrt 3)") == R"(\sqrt{3})");
  CHECK(normalize_math_answer(".5") == "0.5");
  CHECK(normalize_math_answer("5.") == "5");
  CHECK(normalize_math_answer(R"(1,\!000)") == "1,000");
  CHECK(normalize_math_answer("0.5") == "0.5");  // Hendrycks' "0.5" -> \frac{1}{2} is left to the numeric compare
}

TEST_CASE("math answer: math_answer_value parses integers, decimals and fractions", "[cpu][tasks][math]") {
  using Catch::Detail::Approx;
  // clang-format off
  const std::vector<std::pair<std::string, double>> numbers = {
      {"12", 12},            {"1,000", 1000},           {"-12,345.5", -12345.5},   {"0.50", 0.5},
      {".5", 0.5},           {"-3.", -3},               {"+7", 7},                 {"1/2", 0.5},
      {"1.5/3", 0.5},        {R"(\frac12)", 0.5},       {R"(\dfrac{3}{4})", 0.75}, {R"(-\frac{1}{2})", -0.5},
      {"10%", 10},           {R"(\frac{-1}{2})", -0.5}, {R"(\$1,000.50)", 1000.5}, {"x = 4", 4},
      {R"(7\text{ cm})", 7},
  };
  // clang-format on
  for (const auto& [text, value] : numbers) {
    INFO(text);
    REQUIRE(math_answer_value(text).has_value());
    CHECK(*math_answer_value(text) == Approx(value).epsilon(1e-12));
  }
  for (const std::string text : {"1,2", "12,34", "x+1", R"(\sqrt{2})", "1/0", R"(\frac{1}{0})", "(B)", "", "."}) {
    INFO(text);
    CHECK(math_answer_value(text) == std::nullopt);
  }
}

TEST_CASE("math answer: math_answers_equal compares numbers by value and other answers as text", "[cpu][tasks][math]") {
  CHECK(math_answers_equal("72.0", "72"));
  CHECK(math_answers_equal("1,000", "1000"));
  CHECK(math_answers_equal("0.50", ".5"));
  CHECK(math_answers_equal("1/2", R"(\frac12)"));
  CHECK(math_answers_equal(R"(\frac12)", "0.5"));
  CHECK(math_answers_equal("-3", "-3.0"));
  CHECK(math_answers_equal("10%", "10"));
  CHECK(math_answers_equal("1000000000.5", "1000000000"));  // relative difference 5e-10 < 1e-9
  CHECK_FALSE(math_answers_equal("1000.01", "1000"));
  CHECK_FALSE(math_answers_equal("3.0001", "3"));
  CHECK_FALSE(math_answers_equal("2", R"(\frac{1}{2})"));
  CHECK_FALSE(math_answers_equal("-3", "3"));
  CHECK(math_answers_equal(R"(\text{(B)})", "(B)"));
  CHECK_FALSE(math_answers_equal("(C)", "(B)"));
  CHECK(math_answers_equal(R"(\sqrt3)", R"(\sqrt{3})"));
  CHECK(math_answers_equal(R"(\left[2,5\right))", "[2, 5)"));
  CHECK_FALSE(math_answers_equal("", ""));  // an empty answer is never right
}

TEST_CASE("math answer: score_gsm8k golden scores", "[cpu][tasks][math]") {
  const ppo::MathScore right = ppo::score_gsm8k("48 + 24 = 72\n#### 72", kNataliaSolution);
  CHECK(right.score == 1.0);
  CHECK(right.correct);
  CHECK(right.format_ok);
  CHECK(ppo::score_gsm8k("#### 72.0", "72").score == 1.0);
  CHECK(ppo::score_gsm8k("#### 1,000", "1000").score == 1.0);
  CHECK(ppo::score_gsm8k("#### 1000", "#### 1,000").score == 1.0);  // a solution's "#### N" as the truth
  const ppo::MathScore wrong = ppo::score_gsm8k("#### 71", "72");
  CHECK(wrong.score == 0.0);
  CHECK_FALSE(wrong.correct);
  CHECK(wrong.format_ok);
  const ppo::MathScore unformatted = ppo::score_gsm8k("The answer is 72.", "72");
  CHECK(unformatted.score == 0.0);
  CHECK_FALSE(unformatted.format_ok);
  CHECK_FALSE(ppo::score_gsm8k("#### $72", "72").format_ok);
  CHECK(ppo::score_gsm8k(R"(\boxed{72})", "72").score == 0.0);  // GSM8K wants "#### N"
}

TEST_CASE("math answer: score_math golden scores", "[cpu][tasks][math]") {
  const std::string solution = R"(The probability is $\boxed{\dfrac{1}{2}}$.)";  // a MATH solution as the truth
  const ppo::MathScore right = ppo::score_math(R"(so the answer is $\boxed{\frac12}$)", solution);
  CHECK(right.score == 1.0);
  CHECK(right.correct);
  CHECK(right.format_ok);
  CHECK(ppo::score_math(R"(\boxed{0.5})", R"(\frac{1}{2})").score == 1.0);
  CHECK(ppo::score_math(R"(\boxed{(B)})", R"(\text{(B)})").score == 1.0);
  CHECK(ppo::score_math("#### 5", "5").score == 1.0);  // no \boxed: the "#### N" answer
  const ppo::MathScore boxed_first = ppo::score_math(R"(\boxed{4} ... #### 5)", "5");
  CHECK(boxed_first.score == 0.0);  // the \boxed answer is the one scored
  CHECK(boxed_first.format_ok);
  const ppo::MathScore none = ppo::score_math("I think it is 5.", "5");
  CHECK(none.score == 0.0);
  CHECK_FALSE(none.format_ok);
  CHECK_FALSE(ppo::score_math(R"(\boxed{\frac{1}{2})", "0.5").format_ok);  // unbalanced
}

TEST_CASE("math answer: very long answers neither crash nor count as numbers", "[cpu][tasks][math]") {
  const std::string digits(300000, '1');  // std::regex recursion on this overflowed the stack
  CHECK(math_answer_value(digits) == std::nullopt);
  CHECK(math_answers_equal(digits, digits));  // still equal as text
  CHECK(ppo::score_math("\\boxed{" + digits + "/7}", "5").format_ok);
  CHECK_FALSE(ppo::score_math("\\boxed{" + digits + "/7}", "5").correct);
  CHECK(ppo::score_gsm8k("#### " + digits, digits).score == 0.0);  // clipped to its last 300 characters: no ####
  CHECK(ppo::score_gsm8k(digits + "#### 5", "5").score == 1.0);
}

// ---------------------------------------------------------------------------------------------------------------
// Side by side with veRL (the verl wheel in .venv-ref).

namespace {

struct RefCase {
  std::string fn;  // "gsm8k" | "math"
  std::string response;
  std::string ground_truth;
  bool solution = false;  // ground_truth is a full dataset solution (veRL reduces it as its data_preprocess does)
  bool agree = true;      // false: a documented leniency, ours scores 1 where veRL scores 0
};

std::vector<RefCase> ref_cases() {
  return {
      // GSM8K, same rule.
      {"gsm8k", kNataliaSolution, "72"},
      {"gsm8k", "#### 1,000", "1000"},
      {"gsm8k", "#### 5\n#### 7", "7"},
      {"gsm8k", "#### 5\n#### 7", "5"},
      {"gsm8k", "#### $18", "18"},
      {"gsm8k", "####18", "18"},
      {"gsm8k", "The answer is 18", "18"},
      {"gsm8k", "#### -3", "-3"},
      {"gsm8k", "#### #### 5", "5"},
      {"gsm8k", "#### 5 then #### x", "5"},
      {"gsm8k", "#### - 5", "5"},
      {"gsm8k", "#### 1,2,3", "123"},
      {"gsm8k", answer_then(294, " "), "7"},
      {"gsm8k", answer_then(295, " "), "7"},
      {"gsm8k", answer_then(294, "é"), "7"},
      {"gsm8k", "#### 72", kNataliaSolution, true},
      {"gsm8k", "#### 1200", "She earns 1,200.\n#### 1,200", true},
      {"gsm8k", "#### 71", kNataliaSolution, true},
      // GSM8K, ours compares numbers by value.
      {"gsm8k", "#### 72.0", "72", false, false},
      {"gsm8k", "#### 42.", "42", false, false},
      {"gsm8k", "#### 0.50", "0.5", false, false},
      // MATH, same rule.
      {"math", R"(so $\boxed{\frac{1}{2}}$)", R"(\frac{1}{2})"},
      {"math", R"(\boxed{\dfrac12})", R"(\frac{1}{2})"},
      {"math", R"(\boxed{0.5})", R"(\frac{1}{2})"},
      {"math", R"(\boxed{.5})", "0.5"},
      {"math", R"(\boxed{1/2})", R"(\frac{1}{2})"},
      {"math", R"(\boxed{1} no, \boxed{2})", "2"},
      {"math", R"(\boxed{1} no, \boxed{2})", "1"},
      {"math", R"(The answer is $\boxed 5$.)", "5"},
      {"math", R"(\boxed{\frac{1}{2})", R"(\frac{1}{2})"},
      {"math", "no boxed answer", "5"},
      {"math", R"(\boxed{10\%})", "10"},
      {"math", R"(\boxed{5\text{ cm}})", "5"},
      {"math", R"(\boxed{x = 5})", "5"},
      {"math", R"(\boxed{\left( 1, 2 \right)})", "(1,2)"},
      {"math", R"(\boxed{90^\circ})", "90"},
      {"math", R"(\boxed{\sqrt3})", R"(\sqrt{3})"},
      {"math", R"(\boxed{(C)})", "(B)"},
      {"math", R"(\boxed{3/4})", R"(Hence $x = \boxed{\frac{3}{4}}$.)", true},
      // MATH, ours is more lenient.
      {"math", R"(\fbox{3})", "3", false, false},
      {"math", R"(\boxed{1,000})", "1000", false, false},
      {"math", R"(\boxed{-3.0})", "-3", false, false},
      {"math", R"(\boxed{10%})", "10", false, false},
      {"math", R"(\boxed{\text{(B)}})", "(B)", false, false},
      {"math", R"(\boxed 5 apples)", "5", false, false},
      {"math", "#### 5", "5", false, false},
  };
}

}  // namespace

TEST_CASE("math answer: scores equal veRL's gsm8k.py and math_reward.py except the documented leniencies",
          "[cpu][tasks][math][ref]") {
  const std::vector<RefCase> cases = ref_cases();
  ppo_test::TempDir dir("ppo_math_ref");
  {
    std::ofstream in(dir.sub("in.jsonl"));
    for (const RefCase& c : cases)
      in << nlohmann::json{{"fn", c.fn},
                           {"response", c.response},
                           {"ground_truth", c.ground_truth},
                           {"solution", c.solution}}
                .dump()
         << "\n";
  }
  ppo_test::run_reference("verl_reward.py", "< \"" + dir.sub("in.jsonl") + "\" > \"" + dir.sub("out.jsonl") + "\"");
  const std::vector<nlohmann::json> verl = ppo::read_jsonl(dir.sub("out.jsonl"));
  REQUIRE(verl.size() == cases.size());
  for (size_t i = 0; i < cases.size(); ++i) {
    const RefCase& c = cases[i];
    const double ours =
        (c.fn == "gsm8k" ? ppo::score_gsm8k(c.response, c.ground_truth) : ppo::score_math(c.response, c.ground_truth))
            .score;
    const double theirs = verl[i].at("score").get<double>();
    INFO("case " << i << " " << c.fn << ": response " << nlohmann::json(c.response).dump() << ", ground truth "
                 << nlohmann::json(c.ground_truth).dump() << ": ours " << ours << ", veRL " << theirs);
    if (c.agree) {
      CHECK(ours == theirs);
    } else {
      CHECK(ours == 1.0);
      CHECK(theirs == 0.0);
    }
  }
}
