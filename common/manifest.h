// Checkpoint manifests: a checkpoint folder's manifest.json lists the size and checksum of every other file in it,
// and loading verifies them (common/files.h's file_digest).
#pragma once

#include <string>

namespace ppo {

// `dir`/manifest.json lists every other file under `dir` (relative path, size in bytes,
// XXH3-128 checksum as hex).
void write_manifest(const std::string& dir);
// Checks `file`'s size and checksum against the manifest of the folder holding it: a difference, or a file the
// manifest does not list, is a UsageError naming the file (a damaged checkpoint). Every checkpoint ppo.cpp writes has
// a manifest, so a missing one is a UsageError too, unless checkpoints without one are accepted (then nothing is
// checked).
void verify_manifest_entry(const std::string& file);
// Whether the manifest of the folder holding `file` lists it (false without a manifest).
bool manifest_lists(const std::string& file);
// trainer.accept_checkpoints_without_manifest: loads checkpoints written before manifests existed, unverified.
// Process-wide, set once by each command from its config.
void accept_checkpoints_without_manifest(bool accept);
// Verifies every file the manifest of `dir` lists.
void verify_manifest(const std::string& dir);

}  // namespace ppo
