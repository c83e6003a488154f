// Math final-answer rewards: GSM8K's "#### N" and MATH's \boxed{...}, pure string code.
//
// Sources (rules named where they are implemented, in math_answer.cpp):
//   veRL gsm8k.py        https://github.com/volcengine/verl/blob/main/verl/utils/reward_score/gsm8k.py
//                        (extract_solution "strict", compute_score defaults format_score 0.0, score 1.0)
//   veRL math_reward.py  https://github.com/volcengine/verl/blob/main/verl/utils/reward_score/math_reward.py, a copy
//                        of lm-evaluation-harness's hendrycks_math utils: last_boxed_only_string, remove_boxed,
//                        strip_string, is_equiv
//   Hendrycks MATH       https://github.com/hendrycks/math modeling/dataset/util.py (last_boxed_only_string, with
//                        \fbox) and modeling/math_equivalence.py (_strip_string, is_equiv)
//
// Where we are more lenient than veRL (tests/tasks/test_math_answer.cpp checks each against veRL 0.9.1):
//   - numbers compare as numbers: veRL compares strings ("72.0" != "72", "1,000" != "1000", "0.50" != ".5",
//     "-3" != "-3.0", GSM8K's "#### 42." gives "42." != "42"); here they are equal within 1e-9 relative
//   - "%" and "$" are dropped as in Hendrycks' _strip_string (veRL's copy drops only "\%" and "\$")
//   - \text{X}, \textbf{X}, \mbox{X}, \mathrm{X} are unwrapped to X (as Minerva's normalize_final_answer, veRL's
//     math_dapo.py), so "\text{(B)}" equals "(B)"; a trailing "." is dropped
//   - \fbox{...} answers count (veRL's remove_boxed asserts "\boxed{" and scores them 0); "\boxed 5 is it" gives "5"
//     (veRL: "5 is it"); "\boxed {5}" gives "5"
//   - score_math falls back to the "#### N" answer when the response has no \boxed{}
//   - ground truths may be a full GSM8K solution ("... #### 72") or "\boxed{...}"-wrapped; both are reduced to the
//     answer first, as veRL's examples/data_preprocess/gsm8k.py and math_dataset.py do before training
// Where we follow veRL although it is strict: GSM8K's regex needs "#### " then [-0-9.,]: "#### $18", "####18" and
// "#### -$5" have no answer.
#pragma once

#include <optional>
#include <string>

namespace ppo {

// GSM8K's final answer as veRL's gsm8k.py extracts it ("strict" method): the last match of "#### (-?[0-9.,]+)" in
// the last 300 characters (Unicode code points, as Python counts) of the response, with ',' and '$' removed.
// nullopt: none.
std::optional<std::string> gsm8k_final_answer(const std::string& response);

// The content of the last \boxed{...} (or \boxed <token>, or \fbox{...} when there is no \boxed) with nested braces
// balanced, as Hendrycks' last_boxed_only_string + remove_boxed. "\boxed <token>": the text after the spaces up to
// the next whitespace or '$'. nullopt: none, unbalanced braces, or an empty token.
std::optional<std::string> last_boxed(const std::string& response);

// Normalised answer text, Hendrycks' _strip_string plus the lenient rules above, in this order: drop line breaks,
// "\!", "\left", "\right", "^{\circ}", "^\circ", "$" (and "\$"); "\\" -> "\"; "tfrac"/"dfrac" -> "frac"; cut units
// at "\text{ " (a \text with a leading space, Hendrycks' remove_right_units); unwrap \text{X} \textbf{X} \mbox{X}
// \mathrm{X}; drop "\%" and "%"; trim and drop one trailing "."; " ." -> " 0.", "{." -> "{0.", a leading "." -> "0.";
// "k = 5" -> "5" (one '=', left side of at most 2 characters); \sqrt3 -> \sqrt{3}; drop whitespace; \frac12 ->
// \frac{1}{2}; "a/b" of integers -> \frac{a}{b}. Hendrycks' special case "0.5" -> \frac{1}{2} is left out: numbers
// are compared by value (math_answer_value).
std::string normalize_math_answer(const std::string& answer);

// The value of the normalised answer when it is a number: integers and decimals ("12", "-3.", "0.50", ".5"),
// thousands commas ("1,000", "-12,345.5"; "1,2" is not a number: MATH uses commas for lists), fractions "a/b" and
// \frac{a}{b} / \frac12 of such numbers, negated ("-\frac{1}{2}", "\frac{-1}{2}"). Percent: the sign is dropped
// (Hendrycks), so "10%" is 10, not 0.1. nullopt otherwise (also for a zero denominator).
std::optional<double> math_answer_value(const std::string& answer);

// Equal when both have numeric values equal within a relative 1e-9 (absolute 1e-12), else when the normalised texts
// are equal (and non-empty).
bool math_answers_equal(const std::string& given, const std::string& truth);

// The answer a ground truth holds: the last \boxed{} content (MATH solution), else the last "#### N" answer (full
// GSM8K solution; the whole text is searched, not only its last 300 characters), else the text itself.
std::string math_ground_truth_answer(const std::string& ground_truth);

struct MathScore {
  double score = 0;        // 1 when correct, else 0 (veRL's defaults: no format score)
  bool correct = false;    // the extracted answer equals the ground truth (math_answers_equal)
  bool format_ok = false;  // an answer could be extracted
};

// GSM8K: format_ok when a "#### N" answer exists; correct when it equals the ground truth's answer; score 1 when
// correct, else 0 (veRL's gsm8k.py defaults: format_score 0.0, score 1.0).
MathScore score_gsm8k(const std::string& response, const std::string& ground_truth);

// MATH: the last \boxed{} answer; if the response has none, the "#### N" answer; score 1 / 0 like veRL's
// math_reward.py compute_score.
MathScore score_math(const std::string& response, const std::string& ground_truth);

}  // namespace ppo
