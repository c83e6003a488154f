// The pre-tokenizers of byte-level BPE that ppo.cpp implements by hand (std::regex has no \p{L}): the Split regexes of
// GPT-2, Qwen2, Qwen3.5 and Llama-3 as tokenizer.json spells them, each matched left to right with its alternatives in
// order, as the Rust `tokenizers` library's regex engine does (text/bpe_tokenizer.h has the patterns).
#pragma once

#include <string>
#include <vector>

namespace ppo {

// The split patterns implemented here.
enum class BpeSplit { kNone, kGpt2, kQwen2, kQwen35, kLlama3 };

// The split whose regex, spelled exactly as in tokenizer.json, is `regex`; kNone when it is none of them.
BpeSplit split_of_regex(const std::string& regex);

// `text` cut into pre-tokens by `split`, in order (kNone: the whole text as one piece, none when it is empty).
std::vector<std::string> split_text(const std::string& text, BpeSplit split);

}  // namespace ppo
