// Byte-level BPE: a tiny hand-built tokenizer with hand-derived ids, the hand-written pre-tokenizer regexes, NFC,
// malformed tokenizer.json files, and (tag [ref]) token ids compared with Hugging Face tokenizers on the real
// SmolLM2, Qwen2.5, Qwen3.6 and Llama-3 vocabularies and on two tokenizers trained with Qwen2's and Llama-3's settings
// (scripts/ref_tokenizers.py, scripts/get_smollm2.sh).
#include <catch2/catch.hpp>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <random>

#include "common/error.h"
#include "tests/model/tiny_tokenizer.h"
#include "tests/reference/reference.h"
#include "tests/temp_dir.h"
#include "text/bpe_tokenizer.h"
#include "text/unicode.h"

namespace {

namespace fs = std::filesystem;
using nlohmann::json;

using ppo_test::byte_char;
using ppo_test::kGpt2Regex;
using ppo_test::kLlama3Regex;
using ppo_test::kQwen2Regex;
using ppo_test::tiny_tokenizer_json;

using Ids = std::vector<int64_t>;
using Pieces = std::vector<std::string>;

std::string cp(char32_t c) {
  std::string s;
  ppo::utf8_append(s, c);
  return s;
}

}  // namespace

TEST_CASE("bpe merges by rank on a hand-built vocabulary", "[cpu][hf]") {
  const ppo::BpeTokenizer tok(tiny_tokenizer_json(kQwen2Regex), "tiny");
  // "hello": (h,e) r0 -> he l l o; (l,l) r1 -> he ll o; (he,ll) r2 -> hell o; (hell,o) r3 -> hello.
  CHECK(tok.encode("hello") == Ids{259});
  // Pre-tokens "hello" and " world"; " world" = Ġ w o r l d, only (Ġ,w) merges: 260 then the bytes o r l d.
  CHECK(tok.encode("hello world") == Ids{259, 260, 'o', 'r', 'l', 'd'});
  // "lll": two (l,l) pairs of equal rank; the leftmost merges first.
  CHECK(tok.encode("lll") == Ids{257, 'l'});
  // "hel": (h,e) -> he l; no (he,l) merge.
  CHECK(tok.encode("hel") == Ids{256, 'l'});
  // Added tokens are cut out first and never split or merged with their neighbours.
  CHECK(tok.encode("<|im_start|>hello<think>") == Ids{300, 259, 301});
  CHECK(tok.encode("<|im_start") == Ids{'<', '|', 'i', 'm', '_', 's', 't', 'a', 'r', 't'});
  CHECK(tok.encode("") == Ids{});
  // Bytes that are not printable ASCII go through the byte table: "\n" is byte 10 -> id 10, "é" = C3 A9.
  CHECK(tok.encode("\n") == Ids{10});
  CHECK(tok.encode("\xC3\xA9") == Ids{0xC3, 0xA9});
  // NFC first: e + U+0301 composes to é (C3 A9).
  CHECK(tok.encode("e\xCC\x81") == Ids{0xC3, 0xA9});

  CHECK(tok.decode({300, 259, 301}) == "hello<think>");  // special <|im_start|> skipped, <think> is not special
  CHECK(tok.decode({300, 259, 301}, /*skip_special=*/false) == "<|im_start|>hello<think>");
  CHECK(tok.decode({259, 999999, -1, 280}) == "hello");  // ids without a token are skipped
  CHECK(tok.vocab_size() == 302);
  CHECK(tok.token_to_id("hello") == 259);
  CHECK(tok.token_to_id(byte_char(' ') + "w") == 260);
  CHECK(tok.token_to_id("<think>") == 301);
  CHECK(tok.token_to_id("nope") == -1);
  CHECK(tok.bos_id() == -1);
  CHECK(tok.name() == "bpe");

  // Any byte string survives encode -> decode, invalid UTF-8 included (no NFC change for these).
  std::mt19937 rng(11);
  for (int trial = 0; trial < 200; ++trial) {
    std::string s(rng() % 24, '\0');
    for (char& c : s) c = static_cast<char>(rng() % 256);
    if (ppo::utf8_is_valid(s) && ppo::unicode_nfc(s) != s) continue;
    INFO("trial " << trial);
    CHECK(tok.decode(tok.encode(s), false) == s);
  }
}

TEST_CASE("bpe special token ids come from tokenizer_config", "[cpu][hf]") {
  const json config = {{"bos_token", nullptr}, {"eos_token", {{"content", "<|im_start|>"}}}, {"pad_token", "<think>"}};
  const ppo::BpeTokenizer tok(tiny_tokenizer_json(kQwen2Regex), "tiny", config);
  CHECK(tok.bos_id() == -1);
  CHECK(tok.eos_id() == 300);
  CHECK(tok.pad_id() == 301);
  const ppo::BpeTokenizer no_pad(tiny_tokenizer_json(kQwen2Regex), "tiny", {{"eos_token", "hello"}});
  CHECK(no_pad.pad_id() == 259);  // pad falls back to eos
  CHECK_THROWS_WITH(ppo::BpeTokenizer(tiny_tokenizer_json(kQwen2Regex), "tiny", {{"eos_token", "<nope>"}}),
                    Catch::Contains("eos_token"));
}

TEST_CASE("bpe pre-tokenizer splits like the Qwen2, Llama-3 and GPT-2 regexes", "[cpu][hf]") {
  const ppo::BpeTokenizer qwen(tiny_tokenizer_json(kQwen2Regex), "qwen");
  const ppo::BpeTokenizer llama(tiny_tokenizer_json(kLlama3Regex), "llama");
  json gpt2_json = tiny_tokenizer_json(kGpt2Regex);
  gpt2_json["pre_tokenizer"] = {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", true}};
  const ppo::BpeTokenizer gpt2(gpt2_json, "gpt2");
  CHECK(qwen.split() == ppo::BpeSplit::kQwen2);
  CHECK(llama.split() == ppo::BpeSplit::kLlama3);
  CHECK(gpt2.split() == ppo::BpeSplit::kGpt2);

  const std::string text = "Hello world's 123  foo\n\nbar!!\n";
  // Qwen2, alternative by alternative: letters; " world" (optional non-letter + letters); 's (contraction);
  // " " before a digit (\s+ as nothing else matches a lone space before a number); digits one by one;
  // "  foo": \s+(?!\S) leaves the last space to " foo"; "\n\n" by \s*[\r\n]+; "!!\n" by ' ?[^\s\p{L}\p{N}]+[\r\n]*'.
  CHECK(qwen.pre_tokenize(text) ==
        Pieces{"Hello", " world", "'s", " ", "1", "2", "3", " ", " foo", "\n\n", "bar", "!!\n"});
  // Llama-3: digits in runs of up to three.
  CHECK(llama.pre_tokenize(text) == Pieces{"Hello", " world", "'s", " ", "123", " ", " foo", "\n\n", "bar", "!!\n"});
  CHECK(llama.pre_tokenize("1234567") == Pieces{"123", "456", "7"});
  // GPT-2: " 123" (optional space + digit run); "\n\n" is split by \s+(?!\S) then \s+; "!!" then "\n".
  CHECK(gpt2.pre_tokenize(text) == Pieces{"Hello", " world", "'s", " 123", " ", " foo", "\n", "\n", "bar", "!!", "\n"});

  // Contractions: case-insensitive in Qwen2, lowercase only in GPT-2 (where ' and S fall apart).
  CHECK(qwen.pre_tokenize("IT'S") == Pieces{"IT", "'S"});
  CHECK(gpt2.pre_tokenize("IT'S") == Pieces{"IT", "'", "S"});
  CHECK(qwen.pre_tokenize("we'll'x") == Pieces{"we", "'ll", "'x"});  // "'x": the optional non-letter + letters
  // A tab joins the following letters; CR/LF never do.
  CHECK(qwen.pre_tokenize("\tabc\ndef") == Pieces{"\tabc", "\n", "def"});
  // Whitespace containing a newline ends after the last newline; trailing whitespace stays whole.
  CHECK(qwen.pre_tokenize("a  \n b   ") == Pieces{"a", "  \n", " b", "   "});
  // Unicode classes: CJK letters, U+00A0 (no-break space) is \s, "²" is \p{N} (No), "，" is punctuation.
  CHECK(qwen.pre_tokenize("你好，世界") == Pieces{"你好", "，世界"});
  CHECK(qwen.pre_tokenize("x\xC2\xA0y²") == Pieces{"x", "\xC2\xA0y", "²"});
  // Punctuation runs keep one leading space and swallow newlines after them.
  CHECK(qwen.pre_tokenize("a {}\r\n") == Pieces{"a", " {}\r\n"});
}

TEST_CASE("bpe long runs of one character class tokenize in linear time", "[cpu][hf]") {
  // Sizes where a scan that re-reads the rest of a run per pre-token (as the digit split once did: 9 s for 160k
  // digits) or a quadratic merge loop would run for minutes; the results are checked against the expected groups.
  const ppo::BpeTokenizer qwen(tiny_tokenizer_json(kQwen2Regex), "qwen");
  const ppo::BpeTokenizer llama(tiny_tokenizer_json(kLlama3Regex), "llama");
  json gpt2_json = tiny_tokenizer_json(kGpt2Regex);
  gpt2_json["pre_tokenizer"] = {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", true}};
  const ppo::BpeTokenizer gpt2(gpt2_json, "gpt2");

  const std::string digits(5000000, '7');
  // Qwen2: one digit per pre-token; the tiny vocabulary has no digit merges, so each is its byte token.
  CHECK(qwen.encode(digits) == Ids(digits.size(), '7'));
  // Llama-3: groups of three, 5000000 = 3 * 1666666 + 2.
  Pieces groups(1666666, "777");
  groups.push_back("77");
  CHECK(llama.pre_tokenize(digits) == groups);
  // GPT-2: the whole run is one pre-token.
  CHECK(gpt2.pre_tokenize(digits) == Pieces{digits});

  // One pre-token of 1M letters goes through the merge loop whole: (l,l) pairs merge leftmost first; "hello" x 200k
  // takes every merge rank.
  const std::string ls(1000001, 'l');
  Ids want(500000, 257);
  want.push_back('l');
  CHECK(qwen.encode(ls) == want);
  std::string hellos;
  for (int i = 0; i < 200000; ++i) hellos += "hello";
  CHECK(gpt2.pre_tokenize(hellos) == Pieces{hellos});
  CHECK(gpt2.encode(hellos) == Ids(200000, 259));
  // 1M spaces and 1M punctuation characters: one pre-token each.
  CHECK(qwen.pre_tokenize(std::string(1000000, ' ')) == Pieces{std::string(1000000, ' ')});
  CHECK(qwen.pre_tokenize(std::string(1000000, '!')) == Pieces{std::string(1000000, '!')});
}

TEST_CASE("bpe 100,000 added tokens over 150,000 characters are matched in one pass", "[cpu][hf]") {
  // Added tokens a0 .. a99999 (as a tokenizer with a large added vocabulary has them): comparing every token that
  // starts with the text's byte took over 120 s for this text; the trie walks each position once.
  json j = tiny_tokenizer_json(kQwen2Regex);
  for (int i = 0; i < 100000; ++i)
    j["added_tokens"].push_back({{"id", 1000 + i}, {"content", "a" + std::to_string(i)}});
  const auto loading = std::chrono::steady_clock::now();
  const ppo::BpeTokenizer tok(j, "many_added");
  std::mt19937 rng(7);
  std::string text;
  Ids want;
  const Ids space_x = tok.encode(" x ");
  while (text.size() < 150000) {  // "a<n> x ": the longest added token at each "a" is a<n> itself
    const int n = static_cast<int>(rng() % 100000);
    text += "a" + std::to_string(n) + " x ";
    want.push_back(1000 + n);
    want.insert(want.end(), space_x.begin(), space_x.end());
  }
  CHECK(tok.encode(text) == want);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - loading).count();
  WARN("100,000 added tokens: loaded and " << text.size() << " characters encoded in " << seconds << " s");
  CHECK(seconds < 60);  // a hang guard, far above the trie's time; the speed itself is not what is tested
}

TEST_CASE("bpe unicode helpers: classes and NFC", "[cpu][hf]") {
  CHECK(ppo::unicode_is_letter(U'a'));
  CHECK(ppo::unicode_is_letter(U'中'));
  CHECK(ppo::unicode_is_letter(0x10400));  // Deseret capital long I (Lu)
  CHECK_FALSE(ppo::unicode_is_letter(U'1'));
  CHECK(ppo::unicode_is_number(U'٣'));    // Arabic-Indic digit three (Nd)
  CHECK(ppo::unicode_is_number(0x216B));  // Roman numeral twelve (Nl)
  CHECK(ppo::unicode_is_whitespace(0x3000));
  CHECK(ppo::unicode_is_whitespace(0x85));
  CHECK_FALSE(ppo::unicode_is_whitespace(0x200B));  // zero width space is not White_Space
  CHECK_FALSE(ppo::unicode_is_letter(0x1F600));     // emoji: So

  // Values checked against Python: unicodedata.normalize("NFC", ...).
  CHECK(ppo::unicode_nfc("e" + cp(0x301)) == cp(0xE9));                          // composition
  CHECK(ppo::unicode_nfc(cp(0x212B)) == cp(0xC5));                               // singleton: Angstrom sign -> Å
  CHECK(ppo::unicode_nfc("a" + cp(0x302) + cp(0x323)) == cp(0x1EAD));            // reorder (220 < 230), compose twice
  CHECK(ppo::unicode_nfc("a" + cp(0x301) + cp(0x301)) == cp(0xE1) + cp(0x301));  // second acute is blocked
  CHECK(ppo::unicode_nfc(cp(0x1100) + cp(0x1161) + cp(0x11A8)) == cp(0xAC01));   // Hangul L V T -> 각
  CHECK(ppo::unicode_nfc(cp(0xAC00) + cp(0x11A8)) == cp(0xAC01));                // Hangul LV + T
  CHECK(ppo::unicode_nfc(cp(0x0F73)) == cp(0x0F71) + cp(0x0F72));                // excluded from composition
  CHECK(ppo::unicode_nfc(cp(0x1E0A) + cp(0x323)) == cp(0x1E0C) + cp(0x307));     // Ḋ + dot below -> Ḍ + dot above
  CHECK(ppo::unicode_nfc(std::string("plain ascii")) == "plain ascii");
  CHECK(ppo::unicode_nfc(std::string("\xFF\xCC\x81")) == "\xFF\xCC\x81");  // invalid UTF-8 is left alone

  CHECK(ppo::utf8_decode("a\xE4\xB8\xAD\xF0\x9F\x98\x80") == std::vector<char32_t>{U'a', 0x4E2D, 0x1F600});
  CHECK(ppo::utf8_decode("\xC0\xAF") == std::vector<char32_t>{0xFFFD, 0xFFFD});  // overlong '/'
  CHECK_FALSE(ppo::utf8_is_valid("\xED\xA0\x80"));                               // surrogate

  // One U+FFFD per maximal ill-formed subpart; values checked against Python: bytes.decode("utf-8", "replace").
  const std::string r = cp(0xFFFD);
  CHECK(ppo::utf8_lossy("a\xE4\xB8") == "a" + r);  // a character cut at the end
  CHECK(ppo::utf8_lossy("\xE4\xB8\xAD\xE4") == "\xE4\xB8\xAD" + r);
  CHECK(ppo::utf8_lossy("\xF0\x9F\x98") == r);
  CHECK(ppo::utf8_lossy("\xC0\xAF") == r + r);          // overlong: C0 starts nothing
  CHECK(ppo::utf8_lossy("\xED\xA0\x80") == r + r + r);  // surrogate: ED takes only 80..9F
  CHECK(ppo::utf8_lossy(std::string("\xF0\x9F") + "A\xE0\x80\xAF") == r + "A" + r + r + r);
  CHECK(ppo::utf8_lossy("\xE4\xB8x\xE4\xB8\xAD") == r + "x\xE4\xB8\xAD");
  CHECK(ppo::utf8_printable(std::string("a\0b\x1B[31m\n\t\x7F\xFF", 12)) == "a\\x00b\\x1b[31m\n\t\\x7f" + r);
}

TEST_CASE("bpe bytes without a token are dropped, or become unk_token", "[cpu][hf]") {
  // As the Rust library's BPE (models/bpe/model.rs merge_word): the byte's neighbours become adjacent and may merge.
  json j = tiny_tokenizer_json(kQwen2Regex);
  j["model"]["vocab"].erase(byte_char('z'));
  const ppo::BpeTokenizer dropping(j, "no byte z");
  CHECK(dropping.encode("lzl") == Ids{257});  // one pre-token; (l,l) merges across the dropped byte
  CHECK(dropping.encode("z") == Ids{});
  j["model"]["unk_token"] = "hello";
  const ppo::BpeTokenizer unk(j, "unk");
  CHECK(unk.encode("lzl") == Ids{'l', 259, 'l'});
  CHECK(unk.encode("zz") == Ids{259, 259});
  j["model"]["fuse_unk"] = true;
  const ppo::BpeTokenizer fused(j, "fused");
  CHECK(fused.encode("zz") == Ids{259});
}

TEST_CASE("bpe rejects malformed tokenizer.json naming the file", "[cpu][hf]") {
  ppo_test::TempDir tmp;
  const fs::path dir = tmp.path;
  const std::string path = (dir / "tokenizer.json").string();
  const auto error_for = [&](const std::string& content) -> std::string {
    std::ofstream(path) << content;
    try {
      ppo::BpeTokenizer tok(dir.string());  // a folder holding tokenizer.json
    } catch (const ppo::UsageError& e) {
      return e.what();
    }
    return "";
  };
  const auto expect = [&](const std::string& content, const std::string& problem) {
    const std::string error = error_for(content);
    INFO("error: " << error);
    CHECK(error.find(path) != std::string::npos);
    CHECK(error.find(problem) != std::string::npos);
  };
  REQUIRE(error_for(tiny_tokenizer_json(kQwen2Regex).dump()).empty());

  expect("{\"model\": ", "invalid JSON");
  expect("[]", "JSON object");
  json j = tiny_tokenizer_json(kQwen2Regex);
  j["model"]["type"] = "WordPiece";
  expect(j.dump(), "supported: BPE");
  j = tiny_tokenizer_json(kQwen2Regex);
  j["model"]["merges"].push_back("he zz");
  expect(j.dump(), "model.merges[5]");
  j = tiny_tokenizer_json(kQwen2Regex);
  j["model"]["merges"].push_back("abc");
  expect(j.dump(), "one space");
  j = tiny_tokenizer_json(kQwen2Regex);
  j["model"]["unk_token"] = "<nope>";
  expect(j.dump(), "model.unk_token");
  j = tiny_tokenizer_json(kQwen2Regex);
  j["model"]["vocab"]["hello"] = "x";
  expect(j.dump(), "model.vocab[\"hello\"]");
  j = tiny_tokenizer_json(R"(\w+|\s+)");
  expect(j.dump(), "pre_tokenizer step");
  j = tiny_tokenizer_json(kQwen2Regex);
  j["normalizer"] = {{"type", "NFKC"}};
  expect(j.dump(), "supported: none, NFC");
  j = tiny_tokenizer_json(kQwen2Regex);
  j["added_tokens"][0].erase("content");
  expect(j.dump(), "added_tokens[0]");
  j = tiny_tokenizer_json(kQwen2Regex);
  j.erase("model");
  expect(j.dump(), "has no \"model\"");
  CHECK_THROWS_WITH(ppo::BpeTokenizer((dir / "missing.json").string()), Catch::Contains("missing.json: no such file"));
}

// ---- comparison with transformers.js ----
namespace {

// What random_piece draws most pieces from: words, code, special tokens, numbers and Unicode edge cases.
const char* const kPieceWords[] = {
    "the",
    "The",
    "THE",
    "hello",
    "world",
    "Hello",
    "tokenizer",
    "don't",
    "I'M",
    "we'll",
    "they've",
    "it's",
    "café",
    "naïve",
    "Ångström",
    "straße",
    "日本語",
    "中文字符",
    "한국어",
    "Привет",
    "мир",
    "Ελληνικά",
    "עברית",
    "العربية",
    "हिन्दी",
    "ไทย",
    "𝔘𝔫𝔦𝔠𝔬𝔡𝔢",
    "def",
    "return",
    "std::vector<int>",
    "x->y",
    "a+=b;",
    "#include",
    "<|im_start|>",
    "<|im_end|>",
    "<|endoftext|>",
    "<think>",
    "</think>",
    "<|begin_of_text|>",
    "<|eot_id|>",
    "<|im_sta",
    "|>",
    "<|",
    "system",
    "user",
    "assistant",
    "\\n",
    "http://example.com/a?b=c&d=e",
    "foo_bar",
    "CamelCase",
    "snake_case_name",
    "e\xCC\x81",
    "A\xCC\x8A",
    "n\xCC\x83o",         // n + combining tilde + o: a mark inside a word
    "\xCC\x81x",          // a lone mark before a letter
    " \xCC\x81\xCC\x82",  // space, then two marks
    "1\xCC\x81",          // a mark after a digit
    "a\x04b",             // control bytes: SmolLM2's vocabulary has no token for 0x04, 0x06, 0x13, 0x14
    "\x06\x06x\x13\x14",
    "Ti\xE1\xBA\xBFng Vi\xE1\xBB\x87t",      // Vietnamese, precomposed
    "\xE0\xA4\x95\xE0\xA5\x8D\xE0\xA4\xB7",  // Devanagari conjunct with a virama (Mn)
    "\xE1\x84\x80\xE1\x85\xA1",
    "ﬁ",
    "①②",
    "Ⅻ",
    "１２３",
    "٣٤",
    "²³",
    "½",
    "😀",
    "👍🏽",
    "👨‍👩‍👧",
    "🇯🇵",
    "❤️",
    "∑∫√",
    "→",
    "…",
    "—",
    "«»",
    "¿Qué?",
    "'s",
    "'S",
    "'ll",
    "'Re",
    "''",
    "\"quoted\"",
    "(paren)",
    "[1, 2, 3]",
    "{\"k\": 1}",
    "$x^2$",
    "%d",
    "@user",
    "tab\tsep",
    "end.",
    "100%",
    "3.14159",
    "1e-9",
    "0xFF",
    "-42",
    "1,000,000",
    "2024-01-01",
    "12:30",
};

// White space pieces, ASCII and Unicode.
const char* const kPieceSpaces[] = {
    " ",    " ",   " ",   "  ",       "   ",      "\t",           "\n",           "\n\n",
    "\r\n", " \n", "\n ", "  \n\n  ", "\xC2\xA0", "\xE3\x80\x80", "\xE2\x80\x83", " \t "};

std::string random_piece(std::mt19937& rng) {
  static const std::vector<std::string> words(std::begin(kPieceWords), std::end(kPieceWords));
  static const std::vector<std::string> spaces(std::begin(kPieceSpaces), std::end(kPieceSpaces));
  const auto pick = [&](const std::vector<std::string>& v) { return v[rng() % v.size()]; };
  const auto random_cp = [&](char32_t lo, char32_t hi) { return cp(lo + rng() % (hi - lo + 1)); };
  switch (rng() % 12) {
    case 0:
    case 1:
    case 2:
    case 3:
      return pick(words);
    case 4:
    case 5:
      return pick(spaces);
    case 6:
      return std::to_string(rng() % 100000);
    case 7:
      return std::string(1 + rng() % 3, "!?.,;:-=*/\\#"[rng() % 12]);
    case 8:
      return random_cp(0x4E00, 0x9FA5) + random_cp(0x4E00, 0x9FA5);  // CJK unified ideographs
    case 9:
      return random_cp(0x3041, 0x3093) + random_cp(0x30A1, 0x30F3);  // hiragana + katakana
    case 10:
      return random_cp(0xAC00, 0xD7A3);  // Hangul syllable
    default:
      return random_cp(0x1F600, 0x1F64F);  // emoticons
  }
}

// >= 1000 deterministic strings: short mixes, plus edge cases.
std::vector<std::string> comparison_strings() {
  std::vector<std::string> out = {"",
                                  " ",
                                  "\n",
                                  "  ",
                                  "a",
                                  "<|im_start|>",
                                  "<|im_start|>user\nhi<|im_end|>\n",
                                  "1234567890123",
                                  std::string(300, ' ') + "x",
                                  std::string(200, '\n'),
                                  std::string(500, '7'),
                                  "x" + std::string(50, ' '),
                                  "A" + std::string(2000, 'a')};
  std::mt19937 rng(2024);
  while (out.size() < 1200) {
    std::string s;
    const int n = 1 + rng() % 12;
    for (int k = 0; k < n; ++k) s += random_piece(rng);
    out.push_back(s);
  }
  return out;
}

// Runs tests/reference/hf_tokenize.py (Hugging Face tokenizers) on `strings`; one id list per string.
std::vector<Ids> reference_ids(const std::string& tokenizer, const std::vector<std::string>& strings) {
  ppo_test::TempDir tmp;
  const fs::path dir = tmp.path;
  {
    std::ofstream in(dir / "in.jsonl");
    for (const std::string& s : strings) in << json(s).dump() << "\n";
  }
  ppo_test::run_reference("hf_tokenize.py", "\"" + tokenizer + "\" < \"" + (dir / "in.jsonl").string() + "\" > \"" +
                                                (dir / "out.jsonl").string() + "\"");
  std::vector<Ids> ids;
  std::ifstream out(dir / "out.jsonl");
  for (std::string line; std::getline(out, line);) ids.push_back(json::parse(line).get<Ids>());
  return ids;
}

// Encodes comparison_strings() with the tokenizer in .ref/`sub` by ppo.cpp and by Hugging Face tokenizers (the
// reference environment, tests/reference/reference.h); ids must be identical, and ppo.cpp's decode must give back the
// (NFC-normalised, when the tokenizer normalises) string.
void compare_with_reference(const std::string& sub, bool nfc, ppo::BpeSplit split) {
  const std::string folder = ppo_test::ref_path(sub);
  const ppo::BpeTokenizer tok(folder);
  CHECK(tok.split() == split);
  const std::vector<std::string> strings = comparison_strings();
  const std::vector<Ids> expected = reference_ids(folder, strings);
  REQUIRE(expected.size() == strings.size());
  int mismatches = 0;
  size_t tokens = 0;
  for (size_t i = 0; i < strings.size(); ++i) {
    const Ids ids = tok.encode(strings[i]);
    tokens += ids.size();
    if (ids != expected[i] && ++mismatches <= 5) {
      INFO("string " << i << ": " << json(strings[i]).dump() << "\nppo.cpp:    " << json(ids).dump()
                     << "\ntokenizers: " << json(expected[i]).dump());
      CHECK(ids == expected[i]);
    }
    const std::string want = nfc ? ppo::unicode_nfc(strings[i]) : strings[i];
    // Bytes without a token are dropped (as the Rust library does without an unk_token), so such strings do not
    // come back.
    const bool has_all_bytes =
        std::all_of(want.begin(), want.end(), [&](char b) { return tok.encode({b}).size() > 0; });
    if (has_all_bytes && tok.decode(ids, /*skip_special=*/false) != want && ++mismatches <= 5) {
      INFO("string " << i << " does not round-trip: " << json(strings[i]).dump());
      CHECK(tok.decode(ids, false) == want);
    }
  }
  INFO(sub << ": " << mismatches << " mismatches in " << strings.size() << " strings");
  CHECK(mismatches == 0);
  CHECK(tokens > strings.size());  // the strings were encoded into something
  std::printf("%s: %zu strings, %zu tokens, %d mismatches with Hugging Face tokenizers\n", sub.c_str(), strings.size(),
              tokens, mismatches);
}

}  // namespace

TEST_CASE("bpe SmolLM2 tokenizer (GGUF via transformers) matches Hugging Face tokenizers", "[cpu][hf][ref]") {
  compare_with_reference("smollm2-135m-instruct", /*nfc=*/false, ppo::BpeSplit::kGpt2);
}

namespace {

// Every prefix of the ids of strings with multi-byte characters, decoded by ppo.cpp (raw bytes) made valid by
// utf8_lossy, equals the Hugging Face tokenizers' decode of it: a length limit that cuts a character gives U+FFFD as
// in veRL's decoded responses.
void compare_cut_decodes(const std::string& sub) {
  const std::string folder = ppo_test::ref_path(sub);
  const ppo::BpeTokenizer tok(folder);
  std::vector<Ids> prefixes;
  for (const std::string& s : comparison_strings()) {
    if (std::all_of(s.begin(), s.end(), [](char c) { return static_cast<unsigned char>(c) < 0x80; })) continue;
    const Ids ids = tok.encode(s);
    for (size_t n = 1; n <= ids.size() && prefixes.size() < 4000; ++n)
      prefixes.emplace_back(ids.begin(), ids.begin() + n);
  }
  ppo_test::TempDir tmp;
  {
    std::ofstream in(tmp.sub("ids.jsonl"));
    for (const Ids& ids : prefixes) in << json(ids).dump() << "\n";
  }
  ppo_test::run_reference("hf_tokenize.py", "\"" + folder + "\" --decode < \"" + tmp.sub("ids.jsonl") + "\" > \"" +
                                                tmp.sub("texts.jsonl") + "\"");
  std::ifstream out(tmp.sub("texts.jsonl"));
  int mismatches = 0, invalid = 0;
  size_t i = 0;
  for (std::string line; std::getline(out, line); ++i) {
    REQUIRE(i < prefixes.size());
    const std::string raw = tok.decode(prefixes[i], /*skip_special=*/false);
    invalid += ppo::utf8_is_valid(raw) ? 0 : 1;
    if (ppo::utf8_lossy(raw) != json::parse(line).get<std::string>() && ++mismatches <= 5) {
      INFO("ids " << json(prefixes[i]).dump() << "\ntokenizers: " << line);
      CHECK(ppo::utf8_lossy(raw) == json::parse(line).get<std::string>());
    }
  }
  CHECK(i == prefixes.size());
  CHECK(mismatches == 0);
  CHECK(invalid > 100);  // the cut characters were there to compare
  std::printf("%s: %zu cut decodes (%d not whole UTF-8), %d mismatches with Hugging Face tokenizers\n", sub.c_str(),
              prefixes.size(), invalid, mismatches);
}

}  // namespace

TEST_CASE("bpe decodes cut inside a character equal Hugging Face tokenizers' decode (SmolLM2, Qwen2.5)",
          "[cpu][hf][ref]") {
  compare_cut_decodes("smollm2-135m-instruct");
  compare_cut_decodes("tokenizers/qwen2.5");
}

TEST_CASE("bpe Qwen2.5 tokenizer matches Hugging Face tokenizers", "[cpu][hf][ref]") {
  compare_with_reference("tokenizers/qwen2.5", /*nfc=*/true, ppo::BpeSplit::kQwen2);
}

TEST_CASE("bpe Qwen3 tokenizer (Qwen2.5's vocabulary, <think> and tool tokens added) matches Hugging Face tokenizers",
          "[cpu][hf][ref]") {
  compare_with_reference("tokenizers/qwen3", /*nfc=*/true, ppo::BpeSplit::kQwen2);
}

TEST_CASE("bpe Qwen3.6 tokenizer matches Hugging Face tokenizers", "[cpu][hf][ref]") {
  compare_with_reference("tokenizers/qwen3.6", /*nfc=*/true, ppo::BpeSplit::kQwen35);
}

TEST_CASE("bpe tokenizer trained with Qwen2's settings matches Hugging Face tokenizers", "[cpu][hf][ref]") {
  compare_with_reference("tokenizers/trained-qwen2", /*nfc=*/true, ppo::BpeSplit::kQwen2);
}

TEST_CASE("bpe tokenizer trained with Llama-3's settings matches Hugging Face tokenizers", "[cpu][hf][ref]") {
  compare_with_reference("tokenizers/trained-llama3", /*nfc=*/false, ppo::BpeSplit::kLlama3);
}

TEST_CASE("bpe Llama-3 tokenizer matches Hugging Face tokenizers", "[cpu][hf][ref]") {
  compare_with_reference("tokenizers/llama3", /*nfc=*/false, ppo::BpeSplit::kLlama3);
}
