// libFuzzer target for YAML anchors and aliases in config files (common/config.cpp): structure-aware, the input bytes
// drive a generator that writes a YAML config of real sections and keys, flow and block style, with anchors (&aN)
// and aliases (*aN) anywhere, self-referential ones and "billion laughs" chains among them. An alias must make
// load_config throw ppo::UsageError (yaml-cpp would share the anchored node: a cycle, or an
// exponential walk); a config without one loads or throws UsageError. Any other exception, crash, sanitizer report,
// failed check or input over 10 s (-timeout) is a bug. Built and run by scripts/fuzz.sh
// (`bash scripts/fuzz.sh build 30 yaml_aliases`).
#include <cstddef>
#include <cstdint>
#include <string>

#include "common/config.h"
#include "common/error.h"
#include "tests/fuzz/fuzz_support.h"

namespace {

// Reads the input a byte at a time; zeros once it is used up.
struct Bytes {
  const uint8_t* data;
  size_t size, at = 0;
  uint8_t next() { return at < size ? data[at++] : 0; }
};

const char* const kSections[] = {"data", "actor", "trainer", "rollout", "algorithm", "model"};
const char* const kKeys[] = {"logger", "betas", "optim", "train_batch_size", "n", "lr", "task", "seed", "kl_ctrl"};
const char* const kScalars[] = {"1", "0.5", "console", "[0.9, 0.999]", "true", "reverse", "~", "''"};

class Generator {
 public:
  explicit Generator(Bytes& in) : in_(in) {}

  // A YAML value (flow style) of at most `depth` more levels.
  std::string value(int depth) {
    const uint8_t choice = in_.next();
    std::string anchor;
    if (choice & 0x80) anchor = "&a" + std::to_string(anchors_++) + " ";  // anchors any node may carry
    switch (depth <= 0 ? 0 : choice % 6) {
      case 0:
        return anchor + kScalars[in_.next() % std::size(kScalars)];
      case 1:
      case 2: {  // a mapping
        std::string text = anchor + "{";
        for (int i = 0, n = 1 + in_.next() % 3; i < n; ++i)
          text += (i ? ", " : "") + std::string(kKeys[in_.next() % std::size(kKeys)]) + std::to_string(i) + ": " +
                  value(depth - 1);
        return text + "}";
      }
      case 3: {  // a sequence
        std::string text = anchor + "[";
        for (int i = 0, n = 1 + in_.next() % 3; i < n; ++i) text += (i ? ", " : "") + value(depth - 1);
        return text + "]";
      }
      case 4:  // an alias of an anchor defined so far, or of the one being defined (a cycle)
        ++aliases_;
        if (anchors_ == 0) return "&a" + std::to_string(anchors_++) + " [*a0]";
        return anchor + "[*a" + std::to_string(in_.next() % anchors_) + "]";
      default: {  // a billion-laughs chain: each level lists the one before it several times
        std::string text = "{l0: &a" + std::to_string(anchors_++) + " [x, x]";
        for (int level = 1, n = 2 + in_.next() % 8; level < n; ++level, ++anchors_, ++aliases_) {
          text += ", l" + std::to_string(level) + ": &a" + std::to_string(anchors_) + " [";
          for (int k = 0; k < 9; ++k) text += (k ? ", " : "") + std::string("*a") + std::to_string(anchors_ - 1);
          text += "]";
        }
        return anchor + text + "}";
      }
    }
  }

  // A config: sections of keys, each section in block or flow style.
  std::string document() {
    std::string text;
    for (int s = 0, n = 1 + in_.next() % 3; s < n; ++s) {
      text += std::string(kSections[in_.next() % std::size(kSections)]) + ":";
      if (in_.next() % 2) {
        text += " " + value(4) + "\n";
        continue;
      }
      text += "\n";
      for (int k = 0, m = 1 + in_.next() % 3; k < m; ++k)
        text += "  " + std::string(kKeys[in_.next() % std::size(kKeys)]) + ": " + value(4) + "\n";
    }
    return text;
  }

  int aliases() const { return aliases_; }

 private:
  Bytes& in_;
  int anchors_ = 0, aliases_ = 0;
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  Bytes in{data, size};
  Generator generator(in);
  const std::string yaml = generator.document();
  try {
    ppo::load_config({ppo_fuzz::file_with(0, yaml)}, {});
  } catch (const ppo::UsageError&) {
    return 0;
  }
  if (generator.aliases() > 0) ppo_fuzz::finding("fuzz_yaml_aliases", "a config with an alias loaded:\n" + yaml);
  return 0;
}
