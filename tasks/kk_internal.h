// What the Knights and Knaves files (kk.cpp, kk_score.cpp, kk_task.cpp) share beyond kk.h: statements in error
// messages, role words, the default knight_knave field and the reading of solution lines.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>
#include <vector>

namespace ppo {

// Whether `j` has more than `levels` levels of arrays/objects (kk.cpp).
bool kk_nested_deeper_than(const nlohmann::json& j, int64_t levels);
// JSON for an error message, cut to 200 characters (kk.cpp).
std::string kk_excerpt(const nlohmann::json& j);
// The public dataset's knight_knave field with its default words (kk.cpp).
nlohmann::json kk_default_knight_knave();
// "a knight" or "a knave" (kk.cpp).
std::string kk_role_text(bool knight);
// End of the run of \s starting at pos, pos when there is none (kk_score.cpp).
size_t kk_skip_spaces(const std::string& s, size_t pos);
// Logic-RL's parse_solution_text_format: the names and roles of "(1) Zoey is a knight" lines (kk_score.cpp).
void kk_parse_solution_lines(const std::string& text, std::vector<std::string>& names, std::vector<bool>& solution);

}  // namespace ppo
