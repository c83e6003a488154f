// The schema of the config's keys and what reads it. A section of common/config.h lists its keys once, as rows of
// an X-macro,
//   K(type, name, default, range, resume, help)
// which PPO_CONFIG_MEMBER and PPO_CONFIG_FIELD expand into the struct's members (with their defaults) and into the
// rows of its `fields(f)`; each row becomes a ConfigField, read by the strict loader, the range check, the YAML
// printer, `--help` and the resume check (records/trainer_state.h).
#pragma once

#include <functional>
#include <limits>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace YAML {
class Node;
}

namespace ppo {

struct Config;

// What values a key takes. A number's interval (each end open or closed; ints have closed ends), a string's names,
// or names kept by a registry above common/ (rl/algorithms.h and the like), which check_config applies.
struct KeyRange {
  enum class Kind { any, interval, names, registry };
  Kind kind = Kind::any;
  double lo = -std::numeric_limits<double>::infinity(), hi = std::numeric_limits<double>::infinity();
  bool lo_open = false, hi_open = false;
  std::optional<double> off;       // one value that means "off": allowed besides the interval, or its low end
  std::vector<std::string> names;  // Kind::names: the values allowed

  // What `--help` and the YAML comments show: "[0, 1)", ">= 1", "0 (off) to 65536", "error | left | right".
  std::string text(bool integer) const;
};

// Whether a resume may change the key (records/trainer_state.h changed_run_keys): `free` for how a run is carried out
// (length, logging, memory and micro-batch settings, timeouts, paths), `fixed` for what it computes.
enum class OnResume { fixed, free };

// The ranges a schema row names (written without the namespace in the rows).
namespace schema {
inline KeyRange any() {
  return {};
}
inline KeyRange interval(double lo, bool lo_open, double hi, bool hi_open) {
  KeyRange r;
  r.kind = KeyRange::Kind::interval;
  r.lo = lo, r.lo_open = lo_open, r.hi = hi, r.hi_open = hi_open;
  return r;
}
inline KeyRange at_least(double lo) {  // [lo, inf)
  return interval(lo, false, std::numeric_limits<double>::infinity(), true);
}
inline KeyRange above(double lo) {  // (lo, inf)
  return interval(lo, true, std::numeric_limits<double>::infinity(), true);
}
inline KeyRange between(double lo, double hi) {  // [lo, hi]
  return interval(lo, false, hi, false);
}
inline KeyRange off_or(double off, KeyRange on) {  // `off` (the feature is off), or a value of `on`
  on.off = off;
  return on;
}
template <class... Names>
KeyRange names(Names... allowed) {
  KeyRange r;
  r.kind = KeyRange::Kind::names;
  r.names = {allowed...};
  return r;
}
inline KeyRange registry() {  // names from a registry above common/, checked by check_config
  KeyRange r;
  r.kind = KeyRange::Kind::registry;
  return r;
}
constexpr OnResume fixed = OnResume::fixed;
constexpr OnResume free = OnResume::free;

// Bounds of sizes: far above any real run, low enough that every product check_config and the layers below form
// from them fits in 64 bits.
constexpr double k16 = 1 << 16, k22 = 1 << 22, k24 = 1 << 24, k26 = 1 << 26;
}  // namespace schema

// One leaf key of the config, reachable by its dotted path.
struct ConfigField {
  std::string key;                             // e.g. "actor.optim.lr"
  std::string type;                            // int | float | bool | string | list[int|float|string]
  std::string help;                            // one line
  std::string range;                           // the values it takes, e.g. "[0, 1]" or "error | left"; "" = any
  bool registry = false;                       // its names are a registry's above common/ (train/registry_keys.h)
  OnResume on_resume = OnResume::fixed;        // whether a resume may change it
  std::string default_text;                    // the built-in default, as YAML
  std::function<std::string()> get_text;       // current value as YAML
  std::function<void(const YAML::Node&)> set;  // throws UsageError on a wrong type
  std::function<void()> check;                 // throws UsageError naming key, value and range when out of range
};

// Every leaf of `config`, in declaration order; the setters write into `config`.
std::vector<ConfigField> config_fields(Config& config);
// The same leaves to read: getters and checks only, `set` empty.
std::vector<ConfigField> config_fields(const Config& config);

// Layering: built-in defaults <- each file in order <- each `key.path=value` override; then every key against its
// range, once. Throws UsageError naming the file/line or key (with its value and range) on any problem.
Config load_config(const std::vector<std::string>& files, const std::vector<std::string>& overrides);

// Applies one `key.path=value` override (its type is checked; its range is load_config's, on the layered values).
void apply_override(Config& config, const std::string& assignment);

// The variants a key names, each with one line of help, from a registry above common/ (train/registry_keys.h
// registry_choices): `--help` and `ppo config --comments` list them with the key.
struct KeyChoice {
  std::string name, help;
};
using KeyChoices = std::map<std::string, std::vector<KeyChoice>>;

// The resolved config as YAML; with `comments`, a header and, on each key, its meaning, choices, type and range
// (configs/ppo_trainer.yaml is this output).
std::string config_to_yaml(const Config& config, bool comments = false, const KeyChoices& choices = {});

// `--help` text: every key with its type, range, default, meaning and choices.
std::string config_help(const KeyChoices& choices = {});

// The closest valid key to `key` (edit distance), for "did you mean" hints.
std::string closest_key(const std::string& key);

}  // namespace ppo

// One schema row as a struct member with its default, and as a row of `fields(f)`.
#define PPO_CONFIG_MEMBER(type, name, default_value, range, resume, help) type name = default_value;
#define PPO_CONFIG_FIELD(type, name, default_value, range, resume, help) \
  f(                                                                     \
      #name, name, help,                                                 \
      [] {                                                               \
        using namespace ::ppo::schema;                                   \
        return range;                                                    \
      }(),                                                               \
      ::ppo::schema::resume);
