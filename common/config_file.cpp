// See common/config_file.h.
#include "common/config_file.h"

#include <yaml-cpp/eventhandler.h>

#include <cctype>
#include <cstdio>
#include <filesystem>
#include <set>
#include <sstream>

#include "common/error.h"
#include "common/files.h"
#include "common/utf8.h"

namespace ppo {
namespace {

// A key given twice in one mapping: YAML forbids it, and yaml-cpp would keep both (the later one silently winning).
void check_unique_keys(const YAML::Node& node, const std::string& path) {
  if (node.IsSequence())
    for (const auto& item : node) check_unique_keys(item, path);
  if (!node.IsMap()) return;
  std::set<std::string> seen;
  for (const auto& item : node) {
    const std::string key = yaml_text(item.first);
    if (!seen.insert(key).second)
      throw UsageError(path + ":" + std::to_string(item.first.Mark().line + 1) + ": key '" + key +
                       "' is given twice in the same mapping");
    check_unique_keys(item.second, path);
  }
}

// The YAML documents in `text`, counted by their markers at the start of a line: a "---" after content, or content
// after a "...", starts another (a "---" before any content opens the first).
int yaml_documents(const std::string& text) {
  int documents = 0;
  bool content = false, ended = false;
  std::istringstream lines(text);
  for (std::string line; std::getline(lines, line);) {
    const auto marker = [&](const char* m) {
      return line.rfind(m, 0) == 0 && (line.size() == 3 || std::isspace(static_cast<unsigned char>(line[3])));
    };
    if (marker("---")) {
      documents += content || documents == 0 ? 1 : 0;
      content = false, ended = false;
      const size_t rest = line.find_first_not_of(" \t", 3);
      if (rest != std::string::npos && line[rest] != '#') content = true;  // "--- value"
      continue;
    }
    if (marker("...")) {
      ended = true;
      continue;
    }
    const size_t first = line.find_first_not_of(" \t\r");
    if (first == std::string::npos || line[first] == '#') continue;
    if (documents == 0 || ended) ++documents, ended = false;
    content = true;
  }
  return documents;
}

// Whether the only content of `text` (outside comments and document markers) is an explicit null.
bool is_null_document(const std::string& text) {
  std::istringstream lines(text);
  for (std::string line; std::getline(lines, line);) {
    const size_t first = line.find_first_not_of(" \t\r");
    if (first == std::string::npos || line[first] == '#' || line.rfind("---", 0) == 0 || line.rfind("...", 0) == 0)
      continue;
    const size_t last = line.find_last_not_of(" \t\r");
    const std::string value = line.substr(first, last - first + 1);
    if (value != "~" && value != "null" && value != "Null" && value != "NULL") return false;
  }
  return true;
}

// yaml-cpp gives an alias (*name) the very node of its anchor (&name): a self-referential anchor makes a cycle that
// every walk of the tree follows forever, and a chain of aliases (a "billion laughs") expands exponentially. A config
// never needs them, so the event stream is read first and the first alias refused, naming where it is.
class AliasRefuser : public YAML::EventHandler {
 public:
  explicit AliasRefuser(std::string origin) : origin_(std::move(origin)) {}
  void OnAlias(const YAML::Mark& mark, YAML::anchor_t) override {
    throw UsageError(origin_ + ":" + std::to_string(mark.line + 1) + ":" + std::to_string(mark.column + 1) +
                     ": YAML aliases (*name) are not supported in a config; write the value out");
  }
  void OnDocumentStart(const YAML::Mark&) override {}
  void OnDocumentEnd() override {}
  void OnNull(const YAML::Mark&, YAML::anchor_t) override {}
  void OnScalar(const YAML::Mark&, const std::string&, YAML::anchor_t, const std::string&) override {}
  void OnSequenceStart(const YAML::Mark&, const std::string&, YAML::anchor_t, YAML::EmitterStyle::value) override {}
  void OnSequenceEnd() override {}
  void OnMapStart(const YAML::Mark&, const std::string&, YAML::anchor_t, YAML::EmitterStyle::value) override {}
  void OnMapEnd() override {}

 private:
  std::string origin_;
};

}  // namespace

std::string yaml_text(const YAML::Node& node) {
  if (node.IsScalar()) return node.Scalar();
  YAML::Emitter out;
  out << YAML::Flow << node;
  return out.c_str();
}

// YAML::Load(text) once the text is known to hold no alias; `origin` names the file or override in errors.
YAML::Node load_yaml(const std::string& text, const std::string& origin) {
  std::istringstream stream(text);
  YAML::Parser parser(stream);
  AliasRefuser refuser(origin);
  parser.HandleNextDocument(refuser);
  return YAML::Load(text);
}

YAML::Node read_config_file(const std::string& path) {
  std::error_code error;
  usage_check(!std::filesystem::is_directory(path, error),
              "--config " + path + " is a folder; give a YAML file, e.g. configs/regression_tiny.yaml");
  const std::string contents = read_regular_file(path);
  if (const size_t line = first_invalid_utf8_line(contents); line > 0)
    throw UsageError(path + ":" + std::to_string(line) + ": not valid UTF-8 (a config file is UTF-8 text)");
  // YAML's printable characters exclude the C0 controls but tab, LF and CR, and DEL: yaml-cpp would read a NUL as an
  // escape and keep the others in values (an output folder with a newline, error lines with raw control codes).
  for (size_t i = 0, line = 1; i < contents.size(); ++i) {
    const unsigned char c = static_cast<unsigned char>(contents[i]);
    if (c == '\n') ++line;
    if ((c < 0x20 && c != '\t' && c != '\n' && c != '\r') || c == 0x7f) {
      char code[8];
      std::snprintf(code, sizeof code, "0x%02x", c);
      throw UsageError(path + ":" + std::to_string(line) + ": a control character (byte " + code +
                       ") where YAML allows only printable text");
    }
  }
  const int documents = yaml_documents(contents);
  usage_check(documents <= 1, path + " holds " + std::to_string(documents) +
                                  " YAML documents (separated by ---); a config file holds one: put the others in "
                                  "files of their own and give --config once for each");
  YAML::Node root;
  try {
    root = load_yaml(contents, path);  // not LoadAll: yaml-cpp 0.7's LoadAll loops forever on some inputs (e.g. ",")
  } catch (const YAML::ParserException& e) {
    throw UsageError(path + ":" + std::to_string(e.mark.line + 1) + ":" + std::to_string(e.mark.column + 1) +
                     ": YAML syntax error: " + e.msg);
  } catch (const YAML::Exception& e) {
    throw UsageError(path + ": YAML error: " + e.msg);
  }
  // yaml-cpp reads some malformed text (e.g. a first line ", a: 1") as an empty document: never ignore a file so.
  usage_check(!root.IsNull() || documents == 0 || is_null_document(contents),
              path + ": not a YAML mapping (it does not parse as YAML; look at its first lines)");
  check_unique_keys(root, path);
  return root;
}

}  // namespace ppo
