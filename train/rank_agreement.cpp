// See train/rank_agreement.h.
#include "train/rank_agreement.h"

#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>

#include "common/error.h"
#include "common/files.h"
#include "common/json.h"
#include "common/strings.h"

namespace ppo {
namespace {

namespace fs = std::filesystem;

constexpr size_t kShownDifferences = 8;

// The files whose contents the run depends on, by the key that names them.
std::vector<std::pair<std::string, std::string>> input_files(const Config& c) {
  std::vector<std::pair<std::string, std::string>> files;
  for (const auto& [key, list] :
       {std::pair{"data.train_files", &c.data.train_files}, std::pair{"data.val_files", &c.data.val_files}})
    for (size_t i = 0; i < list->size(); ++i)
      files.emplace_back(key + (list->size() > 1 ? "[" + std::to_string(i) + "]" : std::string()), (*list)[i]);
  for (size_t i = 0; i < c.data.curriculum.train_files.size(); ++i)
    files.emplace_back("data.curriculum.train_files[" + std::to_string(i) + "]", c.data.curriculum.train_files[i]);
  if (c.model.tokenizer != "char") {
    std::error_code error;
    const bool folder = fs::is_directory(c.model.tokenizer, error);
    const fs::path dir = folder ? fs::path(c.model.tokenizer) : fs::path(c.model.tokenizer).parent_path();
    files.emplace_back("model.tokenizer", folder ? (dir / "tokenizer.json").string() : c.model.tokenizer);
    for (const char* name : {"tokenizer_config.json", "chat_template.jinja"})
      files.emplace_back(std::string("model.tokenizer ") + name, (dir / name).string());
  }
  if (!c.model.path.empty()) files.emplace_back("model.path config.json", c.model.path + "/config.json");
  if (!c.data.chat_template.empty() && c.data.chat_template != "chatml" && c.data.chat_template != "plain")
    files.emplace_back("data.chat_template", c.data.chat_template);
  return files;
}

// What this rank was given: key -> value text, file -> fingerprint.
std::map<std::string, std::string> describe(const Config& config) {
  std::map<std::string, std::string> given;
  for (const ConfigField& field : config_fields(config))
    if (field.key != "trainer.num_threads") given[field.key] = field.get_text();
  for (const auto& [key, path] : input_files(config))
    given["file of " + key + " (" + path + ")"] = file_fingerprint(path);
  return given;
}

}  // namespace

void check_ranks_agree(const Config& config, Context& context) {
  if (context.world_size() == 1) return;
  const nlohmann::json given = describe(config);
  std::vector<std::map<std::string, std::string>> all;
  for (const std::string& text :
       context.all_gather(given.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace)))
    all.push_back(parse_json_bounded(text).get<std::map<std::string, std::string>>());
  std::vector<std::string> differences;
  size_t count = 0;
  for (size_t rank = 1; rank < all.size(); ++rank) {
    std::map<std::string, std::string> keys = all[0];
    keys.insert(all[rank].begin(), all[rank].end());
    for (const auto& [key, unused] : keys) {
      const auto at0 = all[0].find(key), at_rank = all[rank].find(key);
      const std::string v0 = at0 == all[0].end() ? "(absent)" : at0->second;
      const std::string vr = at_rank == all[rank].end() ? "(absent)" : at_rank->second;
      if (v0 == vr) continue;
      if (++count <= kShownDifferences)
        differences.push_back(key + " is " + v0 + " on rank 0 but " + vr + " on rank " + std::to_string(rank));
    }
  }
  if (differences.empty()) return;
  std::string text = join(differences, "; ");
  if (count > kShownDifferences) text += "; and " + std::to_string(count - kShownDifferences) + " more";
  throw UsageError("the ranks of this job were given different configs or files: " + text +
                   ". Every rank must run the same config on the same files (an MPMD launch with other key=value "
                   "per rank, or hosts with different copies of a file, would compute different things on each)");
}

}  // namespace ppo
