// The strict config loader: defaults <- YAML files <- key=value overrides, with errors that name what is wrong.
#include "common/config.h"

#include <yaml-cpp/yaml.h>

#include <cctype>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "common/config_file.h"
#include "common/error.h"
#include "common/files.h"
#include "common/strings.h"
#include "common/utf8.h"

namespace ppo {
namespace {

// ---- scalar parsing: strict, so "64.5" is not an int and "abc" is not a number ----

[[noreturn]] void type_error(const std::string& key, const YAML::Node& node, const std::string& type) {
  throw UsageError(key + ": '" + yaml_text(node) + "' is not " + type);
}

// The magnitude bound of integer keys: a count or size above it is a typo, and products of two stay far from
// overflow. Seeds may use the range LibTorch's generators take.
constexpr int64_t kMaxConfigInt = (int64_t{1} << 31) - 1;
constexpr int64_t kMaxSeed = int64_t{1} << 62;

int64_t parse_int(const std::string& key, const YAML::Node& node) {
  if (!node.IsScalar()) type_error(key, node, "an integer");
  const std::string& s = node.Scalar();
  errno = 0;
  char* end = nullptr;
  long long v = std::strtoll(s.c_str(), &end, 10);
  if (s.empty() || *end != '\0') type_error(key, node, "an integer");
  const bool seed = key == "seed" || ends_with(key, ".seed");
  const int64_t bound = seed ? kMaxSeed : kMaxConfigInt;
  usage_check(errno != ERANGE && v <= bound && v >= -bound,
              key + "=" + s + " is out of range: " + (seed ? "a seed" : "an integer key") + " takes values up to " +
                  std::to_string(bound) + " in magnitude");
  return v;
}

double parse_float(const std::string& key, const YAML::Node& node) {
  if (!node.IsScalar()) type_error(key, node, "a number");
  const std::string& s = node.Scalar();
  errno = 0;
  char* end = nullptr;
  double v = std::strtod(s.c_str(), &end);
  if (s.empty() || *end != '\0' || errno == ERANGE || !std::isfinite(v)) type_error(key, node, "a finite number");
  return v;
}

bool parse_bool(const std::string& key, const YAML::Node& node) {
  if (!node.IsScalar()) type_error(key, node, "a boolean (true or false)");
  std::string s = node.Scalar();
  std::transform(s.begin(), s.end(), s.begin(), ::tolower);
  if (s == "true" || s == "yes" || s == "on") return true;
  if (s == "false" || s == "no" || s == "off") return false;
  type_error(key, node, "a boolean (true or false)");
}

std::string format_float(double v) {
  char buffer[64];
  auto result = std::to_chars(buffer, buffer + sizeof(buffer), v);  // shortest text that reads back identically
  std::string s(buffer, result.ptr);
  if (s.find_first_of(".eEn") == std::string::npos) s += ".0";
  return s;
}

// ---- a key's range: its text, and the check of a value against it ----

// A number as an error or `--help` shows it: 6 significant digits, 1e12 rather than 1e+12.
std::string number_text(double v) {
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  std::ostringstream out;
  out << v;
  std::string s = out.str();
  if (const size_t e = s.find('e'); e != std::string::npos) {  // 1e+12 -> 1e12, 1e-05 -> 1e-5
    const size_t digits = s.find_first_not_of("+-0", e + 1);
    s = s.substr(0, e + 1) + (s[e + 1] == '-' ? "-" : "") + s.substr(digits);
  }
  return s;
}

// The text of an integer range (whole-number ends): ">= 1", "1 to 16777216", "0 (off) to 65536", "-1 (off) or >= 1".
std::string integer_range_text(const KeyRange& r) {
  const auto whole = [](double v) { return std::to_string(static_cast<int64_t>(v)); };
  const bool off_is_lo = r.off && *r.off == r.lo;
  const std::string lo = whole(r.lo) + (off_is_lo ? " (off)" : "");
  const std::string on = std::isinf(r.hi) ? ">= " + lo : lo + " to " + whole(r.hi);
  return r.off && !off_is_lo ? whole(*r.off) + " (off) or " + on : on;
}

bool in_range(const KeyRange& r, double v) {
  if (r.kind != KeyRange::Kind::interval || (r.off && v == *r.off)) return true;
  return (r.lo_open ? v > r.lo : v >= r.lo) && (r.hi_open ? v < r.hi : v <= r.hi);
}

// `key`=`v` against an integer range: "KEY=V must be >= N" for a lower bound only, else "KEY=V is out of range: ...".
void check_int(const std::string& key, const KeyRange& r, int64_t v) {
  if (in_range(r, static_cast<double>(v))) return;
  const std::string given = key + "=" + std::to_string(v);
  throw UsageError(given + (std::isinf(r.hi) ? " must be " : " is out of range: ") + integer_range_text(r));
}

void check_float(const std::string& key, const KeyRange& r, double v) {
  usage_check(in_range(r, v), key + "=" + number_text(v) + " is out of range: it must lie in " + r.text(false));
}

void check_string(const std::string& key, const KeyRange& r, const std::string& v) {
  if (r.kind != KeyRange::Kind::names || std::find(r.names.begin(), r.names.end(), v) != r.names.end()) return;
  throw UsageError(key + ": unknown value '" + v + "'; valid: " + join(r.names, ", "));
}

// ---- one ConfigField per supported leaf type ----

// What every leaf shares; `type`, `get_text`, `set` and `check` come from its type.
ConfigField field_base(const std::string& key, const char* type, const char* help, const KeyRange& range,
                       OnResume on_resume) {
  ConfigField f;
  f.key = key, f.type = type, f.help = help, f.on_resume = on_resume;
  f.range = range.text(std::string(type) == "int" || std::string(type) == "list[int]");
  f.registry = range.kind == KeyRange::Kind::registry;
  return f;
}

ConfigField make_field(const std::string& key, int64_t& v, const char* help, const KeyRange& range,
                       OnResume on_resume) {
  ConfigField f = field_base(key, "int", help, range, on_resume);
  f.get_text = [&v] { return std::to_string(v); };
  f.set = [&v, key](const YAML::Node& n) { v = parse_int(key, n); };
  f.check = [&v, key, range] { check_int(key, range, v); };
  return f;
}
ConfigField make_field(const std::string& key, double& v, const char* help, const KeyRange& range, OnResume on_resume) {
  ConfigField f = field_base(key, "float", help, range, on_resume);
  f.get_text = [&v] { return format_float(v); };
  f.set = [&v, key](const YAML::Node& n) { v = parse_float(key, n); };
  f.check = [&v, key, range] { check_float(key, range, v); };
  return f;
}
ConfigField make_field(const std::string& key, bool& v, const char* help, const KeyRange& range, OnResume on_resume) {
  ConfigField f = field_base(key, "bool", help, range, on_resume);
  f.get_text = [&v] { return std::string(v ? "true" : "false"); };
  f.set = [&v, key](const YAML::Node& n) { v = parse_bool(key, n); };
  f.check = [] {};
  return f;
}
// A string value as YAML gave it, refused when it is not valid UTF-8: yaml-cpp decodes an input that starts with a NUL
// byte as UTF-16 or UTF-32, and can hand back bytes that no UTF-8 reader accepts.
const std::string& utf8_scalar(const std::string& key, const YAML::Node& n) {
  usage_check(first_invalid_utf8_line(n.Scalar()) == 0,
              key + ": the value is not valid UTF-8 text (does it start with a NUL byte?)");
  return n.Scalar();
}

ConfigField make_field(const std::string& key, std::string& v, const char* help, const KeyRange& range,
                       OnResume on_resume) {
  ConfigField f = field_base(key, "string", help, range, on_resume);
  f.get_text = [&v] { return nlohmann::json(v).dump(); };
  f.set = [&v, key](const YAML::Node& n) {
    if (!n.IsScalar()) type_error(key, n, "a string");
    v = utf8_scalar(key, n);
  };
  f.check = [&v, key, range] { check_string(key, range, v); };
  return f;
}
// A list of numbers: `type` as `ppo config` shows it, `expected` for the type error, `parse` and `format` of one;
// each element lies in `range`.
template <class T, class Parse, class Format, class Check>
ConfigField make_list_field(const std::string& key, std::vector<T>& v, const char* help, const KeyRange& range,
                            OnResume on_resume, const char* type, const char* expected, Parse parse, Format format,
                            Check check) {
  ConfigField f = field_base(key, type, help, range, on_resume);
  f.get_text = [&v, format] { return "[" + join(v, ", ", format) + "]"; };
  f.set = [&v, key, expected, parse](const YAML::Node& n) {
    if (!n.IsSequence()) type_error(key, n, expected);
    std::vector<T> out;
    for (const auto& item : n) out.push_back(parse(key, item));
    v = out;
  };
  f.check = [&v, key, range, check] {
    for (const T& x : v) check(key, range, x);
  };
  return f;
}
ConfigField make_field(const std::string& key, std::vector<double>& v, const char* help, const KeyRange& range,
                       OnResume on_resume) {
  return make_list_field(key, v, help, range, on_resume, "list[float]", "a list of numbers, e.g. [0.9, 0.999]",
                         parse_float, format_float, check_float);
}
ConfigField make_field(const std::string& key, std::vector<int64_t>& v, const char* help, const KeyRange& range,
                       OnResume on_resume) {
  return make_list_field(
      key, v, help, range, on_resume, "list[int]", "a list of whole numbers, e.g. [3, 4, 5]", parse_int,
      [](int64_t x) { return std::to_string(x); }, check_int);
}

ConfigField make_field(const std::string& key, std::vector<std::string>& v, const char* help, const KeyRange& range,
                       OnResume on_resume) {
  ConfigField f = field_base(key, "list[string]", help, range, on_resume);
  f.get_text = [&v] {
    return "[" + join(v, ", ", [](const std::string& item) { return nlohmann::json(item).dump(); }) + "]";
  };
  f.set = [&v, key](const YAML::Node& n) {  // a list, or one name as a one-element list (as veRL takes both)
    if (n.IsNull()) return void(v = {});    // `key=` or `key: ~`: none
    if (n.IsScalar()) {
      const std::string one = utf8_scalar(key, n);
      return void(v = one.empty() ? std::vector<std::string>{} : std::vector<std::string>{one});
    }
    if (!n.IsSequence()) type_error(key, n, "a list of names, e.g. [console, jsonl]");
    std::vector<std::string> out;
    for (const auto& item : n) {
      if (!item.IsScalar()) type_error(key, n, "a list of names, e.g. [console, jsonl]");
      out.push_back(utf8_scalar(key, item));
    }
    v = out;
  };
  f.check = [&v, key, range] {
    for (const std::string& x : v) check_string(key, range, x);
  };
  return f;
}

// Visits a section's `fields(f)`: a leaf row becomes a ConfigField, a nested section is visited under its name.
struct Collector {
  std::string prefix;
  std::vector<ConfigField>* out;
  std::string key_of(const char* name) const { return prefix.empty() ? name : prefix + "." + name; }
  template <class T>
  void operator()(const char* name, T& value, const char* help, const KeyRange& range, OnResume on_resume) {
    out->push_back(make_field(key_of(name), value, help, range, on_resume));
  }
  template <class Section>
  void operator()(const char* name, Section& section) {
    section.fields(Collector{key_of(name), out});
  }
};

size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diag = std::exchange(row[0], i);
    for (size_t j = 1; j <= b.size(); ++j)  // diag becomes the row above's value at j
      diag = std::exchange(row[j], std::min({row[j] + 1, row[j - 1] + 1, diag + (a[i - 1] == b[j - 1] ? 0 : 1)}));
  }
  return row[b.size()];
}

std::string leaf_of(const std::string& key) {
  size_t dot = key.rfind('.');
  return dot == std::string::npos ? key : key.substr(dot + 1);
}

ConfigField& find_field(std::vector<ConfigField>& fields, const std::string& key, const std::string& where) {
  for (auto& f : fields)
    if (f.key == key) return f;
  std::string hint = closest_key(key);
  throw UsageError(where + "unknown config key '" + key + "'" + (hint.empty() ? "" : "; did you mean " + hint + "?") +
                   " (ppo config --help lists every key)");
}

// Walks a YAML mapping and applies every leaf; a mapping where a leaf is expected (or the reverse) is an error.
// `seen`: the keys the file set so far and their lines; a key set twice (nested, then dotted) is an error.
void apply_node(std::vector<ConfigField>& fields, const YAML::Node& node, const std::string& prefix,
                const std::string& where, std::map<std::string, std::string>& seen) {
  for (const auto& item : node) {
    std::string key = (prefix.empty() ? "" : prefix + ".") + item.first.as<std::string>();
    const YAML::Node& value = item.second;
    bool is_prefix =
        std::any_of(fields.begin(), fields.end(), [&](const ConfigField& f) { return f.key.rfind(key + ".", 0) == 0; });
    if (value.IsMap() && is_prefix) {
      apply_node(fields, value, key, where, seen);
      continue;
    }
    if (is_prefix) throw UsageError(where + "'" + key + "' is a section; give its keys, e.g. " + key + ".<name>");
    const std::string line = std::to_string(item.first.Mark().line + 1), file = where.substr(0, where.size() - 2);
    if (const auto [it, added] = seen.emplace(key, line); !added)
      throw UsageError(file + ":" + line + ": " + key + " is given twice in this file (line " + it->second + " and " +
                       line + ")");
    ConfigField& field = find_field(fields, key, where);
    if (value.IsNull()) throw UsageError(where + key + " has no value (expected " + field.type + ")");
    try {
      field.set(value);
    } catch (const UsageError& e) {
      throw UsageError(where + e.what());
    }
  }
}

void apply_file(std::vector<ConfigField>& fields, const std::string& path) {
  const YAML::Node root = read_config_file(path);
  if (root.IsNull()) return;  // an empty file changes nothing
  if (!root.IsMap()) throw UsageError(path + ": a config file must be a mapping of sections (data:, actor:, ...)");
  try {
    std::map<std::string, std::string> seen;
    apply_node(fields, root, "", path + ": ", seen);
  } catch (const YAML::Exception& e) {
    throw UsageError(path + ":" + std::to_string(e.mark.line + 1) + ": " + e.msg);
  }
}

}  // namespace

std::string KeyRange::text(bool integer) const {
  switch (kind) {
    case Kind::any:
    case Kind::registry:
      return "";
    case Kind::names:
      return join(names, " | ");
    case Kind::interval:
      break;
  }
  if (integer) return integer_range_text(*this);
  return (lo_open ? "(" : "[") + number_text(lo) + ", " + number_text(hi) + (hi_open ? ")" : "]");
}

std::vector<ConfigField> config_fields(Config& config) {
  std::vector<ConfigField> fields;
  config.fields(Collector{"", &fields});
  static const std::vector<std::string> defaults = [] {
    Config d;
    std::vector<ConfigField> f;
    d.fields(Collector{"", &f});
    std::vector<std::string> text;
    for (auto& x : f) text.push_back(x.get_text());
    return text;
  }();
  for (size_t i = 0; i < fields.size(); ++i) fields[i].default_text = defaults[i];
  return fields;
}

std::vector<ConfigField> config_fields(const Config& config) {
  // The fields refer to `config`'s members; with no setter, nothing writes through them.
  std::vector<ConfigField> fields = config_fields(const_cast<Config&>(config));
  for (ConfigField& f : fields) f.set = nullptr;
  return fields;
}

std::string closest_key(const std::string& key) {
  Config scratch;
  std::string best;
  size_t best_d = std::string::npos;
  for (const auto& f : config_fields(scratch)) {
    // A bare leaf name (ppo_mini_batch_size) or a key in the wrong section is matched by its leaf too.
    size_t d = std::min(edit_distance(key, f.key), edit_distance(leaf_of(key), leaf_of(f.key)) + 1);
    if (d < best_d) best_d = d, best = f.key;
  }
  return best_d <= std::max<size_t>(3, key.size() / 4) ? best : "";
}

void apply_override(Config& config, const std::string& assignment) {
  size_t eq = assignment.find('=');
  if (eq == std::string::npos || eq == 0)
    throw UsageError("override '" + assignment + "' is not of the form key.path=value");
  usage_check(first_invalid_utf8_line(assignment) == 0, "override '" + assignment + "' is not valid UTF-8");
  std::string key = assignment.substr(0, eq);
  std::string text = assignment.substr(eq + 1);
  auto fields = config_fields(config);
  ConfigField& field = find_field(fields, key, "");
  YAML::Node value;
  if (field.type.rfind("list", 0) == 0) {
    try {
      value = load_yaml(text, "override '" + assignment + "'");
    } catch (const YAML::Exception&) {
      throw UsageError(key + ": '" + text + "' is not " + field.type + ", e.g. [0.9, 0.999]");
    }
  } else {
    value = YAML::Node(text);
  }
  field.set(value);
}

Config load_config(const std::vector<std::string>& files, const std::vector<std::string>& overrides) {
  Config config;
  auto fields = config_fields(config);
  for (const auto& path : files) apply_file(fields, path);
  for (const auto& o : overrides) apply_override(config, o);
  for (const ConfigField& field : fields) field.check();  // once, on the layered values
  return config;
}

std::string config_to_yaml(const Config& config, bool comments, const KeyChoices& choices) {
  std::ostringstream out;
  if (comments)
    out << "# ppo.cpp: every config key with its default and meaning. Generated by `build/ppo config --comments`;\n"
           "# tests/common/test_config.cpp fails if this file and the defaults in common/config.h disagree.\n"
           "# Experiment configs (configs/*.yaml) override only what differs.\n";
  std::vector<std::string> open;  // the section path printed so far
  for (const auto& f : config_fields(config)) {
    std::vector<std::string> parts;
    std::stringstream ss(f.key);
    for (std::string p; std::getline(ss, p, '.');) parts.push_back(p);
    size_t common = 0;
    while (common < open.size() && common + 1 < parts.size() && open[common] == parts[common]) ++common;
    open.resize(common);
    for (size_t i = common; i + 1 < parts.size(); ++i) {
      if (i == 0 && out.tellp() > 0) out << "\n";
      out << std::string(2 * i, ' ') << parts[i] << ":\n";
      open.push_back(parts[i]);
    }
    std::string indent(2 * (parts.size() - 1), ' ');
    out << indent << parts.back() << ": " << f.get_text();
    if (comments) {
      out << "  # " << f.help;
      if (const auto it = choices.find(f.key); it != choices.end())
        for (size_t i = 0; i < it->second.size(); ++i)
          out << (i ? " | " : " ") << it->second[i].name
              << (it->second[i].help.empty() ? "" : " (" + it->second[i].help + ")");
      out << " (" << f.type << (f.range.empty() ? "" : ": " + f.range) << ")";
    }
    out << "\n";
  }
  return out.str();
}

std::string config_help(const KeyChoices& choices) {
  Config scratch;
  std::ostringstream out;
  out << "Config keys (set in a YAML file given with --config, or on the command line as key.path=value):\n";
  for (const auto& f : config_fields(scratch)) {
    out << "  " << f.key << " (" << f.type << (f.range.empty() ? "" : ": " + f.range) << ", default " << f.default_text
        << ")\n      " << f.help << "\n";
    if (const auto it = choices.find(f.key); it != choices.end())
      for (const KeyChoice& choice : it->second)
        out << "        " << choice.name << (choice.help.empty() ? "" : ": " + choice.help) << "\n";
  }
  return out.str();
}

}  // namespace ppo
