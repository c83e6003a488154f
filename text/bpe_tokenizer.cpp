// See text/bpe_tokenizer.h.
#include "text/bpe_tokenizer.h"

#include <filesystem>
#include <fstream>
#include <queue>
#include <sstream>

#include "common/error.h"
#include "common/json.h"
#include "text/pre_tokenizer.h"
#include "text/unicode.h"

namespace ppo {

namespace {
// Ids index dense tables: an id far past any real vocabulary (Qwen2.5 has 151,665) would allocate gigabytes.
constexpr int64_t kMaxTokenId = int64_t{1} << 24;

using nlohmann::json;

[[noreturn]] void fail(const std::string& origin, const std::string& problem) {
  throw UsageError(origin + ": " + problem);
}

// GPT-2's bytes_to_unicode (openai/gpt-2 src/encoder.py): printable Latin-1 bytes map to themselves, the other 68
// bytes to U+0100.. in order, so every byte has a visible character.
struct ByteLevelTable {
  std::array<char32_t, 256> byte_to_char{};
  std::array<int, 0x144> char_to_byte{};
  ByteLevelTable() {
    char_to_byte.fill(-1);
    int next = 0;
    for (int b = 0; b < 256; ++b) {
      const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
      byte_to_char[b] = printable ? static_cast<char32_t>(b) : static_cast<char32_t>(256 + next++);
      char_to_byte[byte_to_char[b]] = b;
    }
  }
};
const ByteLevelTable& byte_level() {
  static const ByteLevelTable table;
  return table;
}

// Byte-level spelling -> raw bytes; a token with a character outside the table keeps its UTF-8 bytes (as the Rust
// ByteLevel decoder does for added tokens such as "<|im_start|>" ... whose characters all map to themselves anyway).
std::string byte_level_to_bytes(const std::string& token) {
  std::string out;
  for (char32_t cp : utf8_decode(token)) {
    const int b = cp < 0x144 ? byte_level().char_to_byte[cp] : -1;
    if (b < 0) return token;
    out += static_cast<char>(b);
  }
  return out;
}

// ---- tokenizer.json access ----
const json& member(const json& obj, const char* key, const std::string& origin, const std::string& where) {
  if (!obj.is_object() || !obj.contains(key)) fail(origin, where + " has no \"" + key + "\"");
  return obj.at(key);
}

bool flag(const json& obj, const char* key, bool fallback, const std::string& origin, const std::string& where) {
  if (!obj.contains(key) || obj.at(key).is_null()) return fallback;
  if (!obj.at(key).is_boolean()) fail(origin, where + "." + key + " must be true or false");
  return obj.at(key).get<bool>();
}

std::string type_of(const json& obj, const std::string& origin, const std::string& where) {
  const json& t = member(obj, "type", origin, where);
  if (!t.is_string()) fail(origin, where + ".type must be a string");
  return t.get<std::string>();
}

// The steps of tokenizer.json's `key` (normalizer, pre_tokenizer): none when null, the list `list_key` of a
// {"type": "Sequence"}, else the one step itself.
std::vector<json> sequence_steps(const json& tokenizer_json, const char* key, const char* list_key,
                                 const std::string& origin) {
  const json stage = tokenizer_json.value(key, json());
  if (stage.is_null()) return {};
  if (!stage.is_object() || type_of(stage, origin, key) != "Sequence") return {stage};
  const json& list = member(stage, list_key, origin, key);
  if (!list.is_array()) fail(origin, std::string(key) + "." + list_key + " must be an array");
  return std::vector<json>(list.begin(), list.end());
}

bool is_ascii_space(char ch) {
  return ch == ' ' || (ch >= '\t' && ch <= '\r');
}
bool is_word_byte(char ch) {
  const auto u = static_cast<unsigned char>(ch);
  return std::isalnum(u) || ch == '_' || u >= 0x80;
}

}  // namespace

BpeTokenizer::BpeTokenizer(const std::string& path) {
  namespace fs = std::filesystem;
  const fs::path file = fs::is_directory(path) ? fs::path(path) / "tokenizer.json" : fs::path(path);
  load(read_json_file(file.string()), file.string());
  const fs::path config = file.parent_path() / "tokenizer_config.json";
  const json config_json = fs::exists(config) ? read_json_file(config.string()) : json::object();
  load_special_ids(config_json, config.string());
  const fs::path jinja = file.parent_path() / "chat_template.jinja";
  if (fs::exists(jinja)) {
    chat_template_ = read_regular_file(jinja.string());
  } else if (config_json.contains("chat_template")) {  // load_special_ids checked it is an object
    // A string, or (older files) a list of {"name", "template"} of which "default" is the one used.
    const json& t = config_json.at("chat_template");
    if (t.is_string()) chat_template_ = t.get<std::string>();
    if (t.is_array())
      for (const json& named : t)
        if (named.is_object() && named.value("name", "") == "default" && named.value("template", json()).is_string())
          chat_template_ = named.at("template").get<std::string>();
  }
}

BpeTokenizer::BpeTokenizer(const json& tokenizer_json, const std::string& origin, const json& tokenizer_config) {
  load(tokenizer_json, origin);
  load_special_ids(tokenizer_config, origin);
}

void BpeTokenizer::load(const json& tokenizer_json, const std::string& origin) {
  if (!tokenizer_json.is_object()) fail(origin, "a tokenizer.json must hold a JSON object");
  load_model(member(tokenizer_json, "model", origin, "tokenizer.json"), origin);
  if (tokenizer_json.contains("added_tokens") && !tokenizer_json.at("added_tokens").is_null())
    load_added_tokens(tokenizer_json.at("added_tokens"), origin);
  load_pipeline(tokenizer_json, origin);
}

void BpeTokenizer::load_model(const json& model, const std::string& origin) {
  if (type_of(model, origin, "model") != "BPE")
    fail(origin, "model.type is \"" + type_of(model, origin, "model") + "\"; supported: BPE");
  if (flag(model, "byte_fallback", false, origin, "model")) fail(origin, "model.byte_fallback is not supported");
  for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"})
    if (model.contains(key) && !model.at(key).is_null() && model.at(key) != "")
      fail(origin, std::string("model.") + key + " is not supported by byte-level BPE");
  ignore_merges_ = flag(model, "ignore_merges", false, origin, "model");
  const json& vocab = member(model, "vocab", origin, "model");
  if (!vocab.is_object() || vocab.empty()) fail(origin, "model.vocab must be a non-empty object {token: id}");
  byte_id_.fill(-1);
  for (const auto& [token, id_json] : vocab.items()) {
    if (!id_json.is_number_integer() || id_json.get<int64_t>() < 0 || id_json.get<int64_t>() >= kMaxTokenId)
      fail(origin, "model.vocab[\"" + token + "\"] must be a non-negative integer id below 2^24");
    const int64_t id = id_json.get<int64_t>();
    if (id >= static_cast<int64_t>(id_to_bytes_.size())) id_to_bytes_.resize(id + 1), id_kind_.resize(id + 1);
    if (id_kind_[id]) fail(origin, "model.vocab: id " + std::to_string(id) + " is given to two tokens");
    const std::string bytes = byte_level_to_bytes(token);
    id_to_bytes_[id] = bytes;
    id_kind_[id] = 1;
    token_to_id_[token] = id;
    bytes_to_id_.emplace(bytes, id);
    if (bytes.size() == 1) byte_id_[static_cast<uint8_t>(bytes[0])] = id;
  }
  // A byte without a token (SmolLM2's vocabulary has none for 21 bytes, 0x04 and 0xF5..0xFF among them) becomes
  // model.unk_token, or is dropped when there is none, as the Rust library does (models/bpe/model.rs merge_word).
  if (model.contains("unk_token") && !model.at("unk_token").is_null()) {
    const json& unk = model.at("unk_token");
    if (!unk.is_string() || token_to_id_.count(unk.get<std::string>()) == 0)
      fail(origin, "model.unk_token must name a token of model.vocab, got " + unk.dump());
    unk_id_ = token_to_id_.at(unk.get<std::string>());
  }
  fuse_unk_ = flag(model, "fuse_unk", false, origin, "model");
  const json& merges = member(model, "merges", origin, "model");
  if (!merges.is_array()) fail(origin, "model.merges must be an array");
  for (size_t rank = 0; rank < merges.size(); ++rank) {
    const json& m = merges[rank];
    const std::string where = "model.merges[" + std::to_string(rank) + "]";
    std::string left, right;
    if (m.is_string()) {  // "a b"
      const std::string s = m.get<std::string>();
      const size_t space = s.find(' ');
      if (space == std::string::npos || s.find(' ', space + 1) != std::string::npos)
        fail(origin, where + " \"" + s + "\" must be two tokens separated by one space");
      left = s.substr(0, space), right = s.substr(space + 1);
    } else if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string()) {  // ["a", "b"]
      left = m[0].get<std::string>(), right = m[1].get<std::string>();
    } else {
      fail(origin, where + " must be \"a b\" or [\"a\", \"b\"]");
    }
    const auto l = token_to_id_.find(left), r = token_to_id_.find(right), merged = token_to_id_.find(left + right);
    if (l == token_to_id_.end() || r == token_to_id_.end() || merged == token_to_id_.end())
      fail(origin, where + " (\"" + left + "\", \"" + right + "\") uses a token that is not in model.vocab");
    // A repeated pair keeps its last rank, as both the Rust and the transformers.js loaders do.
    merges_[(static_cast<uint64_t>(l->second) << 32) | static_cast<uint64_t>(r->second)] = {static_cast<int32_t>(rank),
                                                                                            merged->second};
  }
}

void BpeTokenizer::load_added_tokens(const json& added, const std::string& origin) {
  if (!added.is_array()) fail(origin, "added_tokens must be an array");
  for (size_t i = 0; i < added.size(); ++i) {
    const std::string where = "added_tokens[" + std::to_string(i) + "]";
    const json& a = added[i];
    const json& id = member(a, "id", origin, where);
    const json& content = member(a, "content", origin, where);
    if (!id.is_number_integer() || id.get<int64_t>() < 0 || id.get<int64_t>() >= kMaxTokenId)
      fail(origin, where + ".id must be a non-negative integer below 2^24");
    if (!content.is_string() || content.get<std::string>().empty())
      fail(origin, where + ".content must be a non-empty string");
    BpeAddedToken t;
    t.id = id.get<int64_t>();
    t.content = content.get<std::string>();
    t.special = flag(a, "special", false, origin, where);
    t.lstrip = flag(a, "lstrip", false, origin, where);
    t.rstrip = flag(a, "rstrip", false, origin, where);
    t.single_word = flag(a, "single_word", false, origin, where);
    if (t.id >= static_cast<int64_t>(id_to_bytes_.size())) id_to_bytes_.resize(t.id + 1), id_kind_.resize(t.id + 1);
    if (id_kind_[t.id] == 2 || id_kind_[t.id] == 3) fail(origin, where + ": id " + std::to_string(t.id) + " repeated");
    if (id_kind_[t.id] == 1 && id_to_bytes_[t.id] != byte_level_to_bytes(t.content))
      fail(origin, where + ": id " + std::to_string(t.id) + " already names another vocabulary token");
    id_to_bytes_[t.id] = byte_level_to_bytes(t.content);
    id_kind_[t.id] = t.special ? 3 : 2;
    token_to_id_[t.content] = t.id;
    added_.push_back(t);
  }
  added_edges_.clear();
  added_ends_.assign(1, {});
  for (size_t i = 0; i < added_.size(); ++i) {
    int32_t node = 0;
    for (const char c : added_[i].content) {
      const auto [edge, inserted] =
          added_edges_.try_emplace(static_cast<uint64_t>(node) << 8 | static_cast<uint8_t>(c), 0);
      if (inserted) edge->second = static_cast<int32_t>(added_ends_.size()), added_ends_.emplace_back();
      node = edge->second;
    }
    added_ends_[node].push_back(i);
  }
}

void BpeTokenizer::load_pipeline(const json& tj, const std::string& origin) {
  // normalizer: none or NFC (possibly inside a Sequence).
  const std::vector<json> norms = sequence_steps(tj, "normalizer", "normalizers", origin);
  for (const json& n : norms)
    if (type_of(n, origin, "normalizer") != "NFC")
      fail(origin, "normalizer \"" + type_of(n, origin, "normalizer") + "\" is not supported; supported: none, NFC");
  nfc_ = !norms.empty();

  // post_processor: only the special token TemplateProcessing puts before a single text matters (add_bos()).
  for (const json& p : sequence_steps(tj, "post_processor", "processors", origin)) {
    if (type_of(p, origin, "post_processor") != "TemplateProcessing" || !p.contains("single")) continue;
    const json& single = p.at("single");
    if (!single.is_array() || single.empty() || !single.front().is_object() || !single.front().contains("SpecialToken"))
      continue;
    const json& special = single.front().at("SpecialToken");
    const json id = special.is_object() ? special.value("id", json()) : json();
    if (!id.is_string())
      fail(origin, "post_processor TemplateProcessing: single[0].SpecialToken.id must be a token string, got " +
                       (id.is_null() ? special.dump().substr(0, 200) : id.dump().substr(0, 200)));
    post_processor_first_ = id.get<std::string>();
  }

  // pre_tokenizer: ByteLevel (GPT-2 regex when use_regex), or Sequence[Split(known regex), ByteLevel(use_regex=false)].
  const std::vector<json> steps = sequence_steps(tj, "pre_tokenizer", "pretokenizers", origin);
  bool byte_level_seen = false;
  for (const json& step : steps) {
    const std::string type = type_of(step, origin, "pre_tokenizer");
    const std::string where = "pre_tokenizer step " + step.dump().substr(0, 200);
    if (type == "ByteLevel") {
      const bool use_regex = flag(step, "use_regex", true, origin, "pre_tokenizer");
      if (byte_level_seen || (use_regex && split_ != BpeSplit::kNone)) fail(origin, where + ": a second split");
      byte_level_seen = true;
      add_prefix_space_ = flag(step, "add_prefix_space", false, origin, "pre_tokenizer");
      if (use_regex) split_ = BpeSplit::kGpt2;
      continue;
    }
    const json pattern = step.value("pattern", json::object());
    const std::string regex = pattern.is_object() && pattern.value("Regex", json()).is_string()
                                  ? pattern.at("Regex").get<std::string>()
                                  : std::string();
    const BpeSplit named = split_of_regex(regex);
    if (type == "Split" && named != BpeSplit::kNone && !byte_level_seen && split_ == BpeSplit::kNone &&
        step.value("behavior", json()) == "Isolated" && !flag(step, "invert", false, origin, "pre_tokenizer")) {
      split_ = named;
      continue;
    }
    fail(origin, where +
                     " is not supported; supported: ByteLevel, or Sequence[Split(Regex of GPT-2, Qwen2 or Llama-3, "
                     "behavior Isolated), ByteLevel(use_regex=false)]");
  }
  if (!byte_level_seen) fail(origin, "pre_tokenizer has no ByteLevel step; only byte-level BPE is supported");
  const json decoder = tj.value("decoder", json());
  if (!decoder.is_null() && type_of(decoder, origin, "decoder") != "ByteLevel")
    fail(origin, "decoder \"" + type_of(decoder, origin, "decoder") + "\" is not supported; supported: ByteLevel");
}

void BpeTokenizer::load_special_ids(const json& config, const std::string& origin) {
  if (!config.is_object()) fail(origin, "tokenizer_config must be a JSON object");
  const auto lookup = [&](const char* key) -> int64_t {
    if (!config.contains(key) || config.at(key).is_null()) return -1;
    const json& v = config.at(key);
    const json& content = v.is_object() ? member(v, "content", origin, key) : v;
    if (!content.is_string()) fail(origin, std::string(key) + " must be a token string or {\"content\": ...}");
    const int64_t id = token_to_id(content.get<std::string>());
    if (id < 0)
      fail(origin, std::string(key) + " \"" + content.get<std::string>() + "\" is not a token of the vocabulary");
    return id;
  };
  bos_id_ = lookup("bos_token");
  eos_id_ = lookup("eos_token");
  pad_id_ = lookup("pad_token");
  if (pad_id_ < 0) pad_id_ = eos_id_;
  const json add_bos = config.value("add_bos_token", json());
  if (!add_bos.is_null() && !add_bos.is_boolean()) fail(origin, "add_bos_token must be true or false");
  add_bos_ = add_bos.is_boolean()
                 ? add_bos.get<bool>()
                 : bos_id_ >= 0 && !post_processor_first_.empty() && token_to_id(post_processor_first_) == bos_id_;
  if (add_bos_ && bos_id_ < 0) fail(origin, "add_bos_token is true but there is no bos_token");
}

int64_t BpeTokenizer::token_to_id(const std::string& token) const {
  const auto it = token_to_id_.find(token);
  return it == token_to_id_.end() ? -1 : it->second;
}

std::vector<std::string> BpeTokenizer::pre_tokenize(const std::string& text) const {
  return split_text(text, split_);
}

std::vector<BpeTokenizer::Segment> BpeTokenizer::split_added_tokens(const std::string& text) const {
  std::vector<Segment> segments;
  std::vector<size_t> ends;
  size_t start = 0;  // first byte not yet in a segment
  for (size_t i = 0; i < text.size();) {
    // The tokens that match at i: the trie's nodes with tokens ending there, along the walk of text[i..].
    ends.clear();
    for (size_t k = i, node = 0; k < text.size(); ++k) {
      const auto edge = added_edges_.find(static_cast<uint64_t>(node) << 8 | static_cast<uint8_t>(text[k]));
      if (edge == added_edges_.end()) break;
      node = static_cast<size_t>(edge->second);
      if (!added_ends_[node].empty()) ends.push_back(node);
    }
    const BpeAddedToken* match = nullptr;
    for (auto node = ends.rbegin(); node != ends.rend() && !match; ++node) {  // longest first
      for (size_t index : added_ends_[*node]) {
        const BpeAddedToken& t = added_[index];
        const size_t e = i + t.content.size();
        if (t.single_word && ((i > 0 && is_word_byte(text[i - 1])) || (e < text.size() && is_word_byte(text[e]))))
          continue;
        match = &t;
        break;
      }
    }
    if (!match) {
      ++i;
      continue;
    }
    size_t s = i, e = i + match->content.size();
    if (match->lstrip)
      while (s > start && is_ascii_space(text[s - 1])) --s;
    if (match->rstrip)
      while (e < text.size() && is_ascii_space(text[e])) ++e;
    if (s > start) segments.push_back({start, s, -1});
    segments.push_back({s, e, match->id});
    start = i = e;
  }
  if (start < text.size()) segments.push_back({start, text.size(), -1});
  return segments;
}

// BPE on one pre-token, as models/bpe/word.rs merge_all: a min-heap of (rank, position) over adjacent pairs, stale
// entries skipped when popped.
void BpeTokenizer::encode_piece(const std::string& piece, std::vector<int64_t>& ids) const {
  if (piece.empty()) return;
  if (ignore_merges_) {
    const auto whole = bytes_to_id_.find(piece);
    if (whole != bytes_to_id_.end()) return ids.push_back(whole->second);
  }
  struct Symbol {
    int64_t id;
    int64_t prev, next;
    bool alive;
  };
  struct Merge {
    int32_t rank;
    int64_t pos, new_id;
    bool operator>(const Merge& o) const { return rank != o.rank ? rank > o.rank : pos > o.pos; }
  };
  std::vector<Symbol> sym;
  sym.reserve(piece.size());
  for (char byte : piece) {
    int64_t id = byte_id_[static_cast<uint8_t>(byte)];
    if (id < 0) {  // no token for this byte: unk_token (fused with a previous unk when fuse_unk), or dropped
      if (unk_id_ < 0 || (fuse_unk_ && !sym.empty() && sym.back().id == unk_id_)) continue;
      id = unk_id_;
    }
    const int64_t i = static_cast<int64_t>(sym.size());
    sym.push_back({id, i - 1, -1, true});
    if (i > 0) sym[i - 1].next = i;
  }
  const int64_t n = static_cast<int64_t>(sym.size());
  if (n == 0) return;
  const auto find_merge = [&](int64_t left, int64_t right) {
    return merges_.find((static_cast<uint64_t>(sym[left].id) << 32) | static_cast<uint64_t>(sym[right].id));
  };
  std::priority_queue<Merge, std::vector<Merge>, std::greater<Merge>> heap;
  for (int64_t i = 0; i + 1 < n; ++i) {
    const auto m = find_merge(i, i + 1);
    if (m != merges_.end()) heap.push({m->second.first, i, m->second.second});
  }
  while (!heap.empty()) {
    const Merge top = heap.top();
    heap.pop();
    Symbol& s = sym[top.pos];
    if (!s.alive || s.next < 0) continue;
    const auto m = find_merge(top.pos, s.next);
    if (m == merges_.end() || m->second.second != top.new_id) continue;  // the pair changed since it was queued
    sym[s.next].alive = false;
    s.id = top.new_id;
    s.next = sym[s.next].next;
    if (s.next >= 0) sym[s.next].prev = top.pos;
    if (s.prev >= 0) {
      const auto left = find_merge(s.prev, top.pos);
      if (left != merges_.end()) heap.push({left->second.first, s.prev, left->second.second});
    }
    if (s.next >= 0) {
      const auto right = find_merge(top.pos, s.next);
      if (right != merges_.end()) heap.push({right->second.first, top.pos, right->second.second});
    }
  }
  for (int64_t i = 0; i >= 0; i = sym[i].next) ids.push_back(sym[i].id);
}

std::vector<int64_t> BpeTokenizer::encode(const std::string& text) const {
  std::vector<int64_t> ids;
  for (const Segment& seg : split_added_tokens(text)) {
    if (seg.added_id >= 0) {
      ids.push_back(seg.added_id);
      continue;
    }
    std::string piece = text.substr(seg.begin, seg.end - seg.begin);
    if (nfc_) piece = unicode_nfc(piece);
    if (add_prefix_space_ && piece[0] != ' ') piece.insert(piece.begin(), ' ');
    for (const std::string& word : split_text(piece, split_)) encode_piece(word, ids);
  }
  return ids;
}

std::string BpeTokenizer::decode(const std::vector<int64_t>& ids, bool skip_special) const {
  std::string out;
  for (int64_t id : ids) {
    if (id < 0 || id >= vocab_size() || id_kind_[id] == 0) continue;
    if (skip_special && id_kind_[id] == 3) continue;
    out += id_to_bytes_[id];
  }
  return out;
}

}  // namespace ppo
