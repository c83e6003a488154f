#include "common/manifest.h"

#include <algorithm>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <vector>

#include "common/error.h"
#include "common/files.h"
#include "common/json.h"

namespace fs = std::filesystem;

namespace ppo {

namespace {

constexpr const char* kManifest = "manifest.json";
bool g_accept_without_manifest = false;

}  // namespace

void accept_checkpoints_without_manifest(bool accept) {
  g_accept_without_manifest = accept;
}

void write_manifest(const std::string& dir) {
  nlohmann::json files = nlohmann::json::object();
  std::vector<fs::path> paths;
  for (const auto& entry : fs::recursive_directory_iterator(dir))
    if (entry.is_regular_file()) paths.push_back(entry.path());
  std::sort(paths.begin(), paths.end());
  for (const fs::path& p : paths) {
    const std::string name = fs::relative(p, dir).generic_string();
    if (name == kManifest) continue;
    const FileDigest d = file_digest(p.string());
    files[name] = {{"bytes", d.bytes}, {"xxh3_128", d.xxh3_128}};
  }
  write_file_atomic(dir + "/" + kManifest, nlohmann::json{{"files", files}}.dump(2) + "\n");
}

namespace {

// The manifest of `dir`, or null when it has none; a manifest that is not one is a UsageError.
nlohmann::json read_manifest(const std::string& dir) {
  const std::string path = dir + "/" + kManifest;
  std::error_code error;
  if (!fs::exists(fs::symlink_status(path, error))) {
    usage_check(g_accept_without_manifest,
                dir + " has no " + kManifest +
                    ": every checkpoint ppo.cpp writes carries one, so this one is "
                    "incomplete or was altered. A checkpoint written before manifests existed loads, unverified, with "
                    "trainer.accept_checkpoints_without_manifest=true");
    return nullptr;
  }
  nlohmann::json manifest;
  try {
    manifest = parse_json_bounded(read_regular_file(path));
  } catch (const nlohmann::json::exception&) {  // invalid JSON; nested past the limit is a UsageError
  } catch (const UsageError&) {
  }
  usage_check(manifest.is_object() && manifest.contains("files") && manifest["files"].is_object(),
              path + ": not a checkpoint manifest (a JSON object with \"files\"); the checkpoint is damaged");
  return manifest["files"];
}

void verify_entry(const std::string& dir, const std::string& name, const nlohmann::json& entry,
                  const std::string& manifest) {
  const std::string path = dir + "/" + name;
  usage_check(entry.is_object() && entry.contains("bytes") && entry["bytes"].is_number_unsigned() &&
                  entry.contains("xxh3_128") && entry["xxh3_128"].is_string(),
              manifest + ": the entry of '" + name + "' is damaged");
  usage_check(fs::exists(path), "checkpoint file " + path + " is missing (listed in " + manifest + ")");
  const FileDigest d = file_digest(path);
  usage_check(d.bytes == entry["bytes"].get<uint64_t>() && d.xxh3_128 == entry["xxh3_128"].get<std::string>(),
              "checkpoint file " + path + " is damaged: " + std::to_string(d.bytes) + " bytes with checksum " +
                  d.xxh3_128 + ", " + manifest + " says " + entry["bytes"].dump() + " bytes with " +
                  entry["xxh3_128"].dump() + "; resume from another checkpoint (trainer.resume_mode=<its folder>)");
}

}  // namespace

void verify_manifest_entry(const std::string& file) {
  const fs::path p(file);
  const std::string dir = p.parent_path().empty() ? "." : p.parent_path().string();
  const nlohmann::json files = read_manifest(dir);
  if (files.is_null()) return;
  const std::string name = p.filename().string(), manifest = dir + "/" + kManifest;
  usage_check(files.contains(name), file + " is not listed in " + manifest + ": the checkpoint is damaged");
  verify_entry(dir, name, files[name], manifest);
}

bool manifest_lists(const std::string& file) {
  const fs::path p(file);
  const nlohmann::json files = read_manifest(p.parent_path().empty() ? "." : p.parent_path().string());
  return !files.is_null() && files.contains(p.filename().string());
}

void verify_manifest(const std::string& dir) {
  const nlohmann::json files = read_manifest(dir);
  for (const auto& [name, entry] : files.items()) verify_entry(dir, name, entry, dir + "/" + kManifest);
}

}  // namespace ppo
