// config.json as export_hf writes it, for model/hf.cpp; model/hf_config.cpp also reads it (read_hf_config, model/hf.h).
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>

#include "common/model_config.h"
#include "model/tokenizer.h"

namespace ppo {

// The fields transformers' configuration class of the family (model_type resolved from `c`) writes, with the shape
// of `c`, `vocab_size` tokens, tied or untied embeddings, the stored dtype's name, and the tokenizer's BOS and EOS.
// `classifier`: the family's *ForSequenceClassification with one label, and pad_token_id the tokenizer's pad (none
// when that is EOS: transformers scores the last token that is not pad_token_id, and a response ends in EOS).
nlohmann::json hf_config_json(const ModelConfig& c, int64_t vocab_size, bool tied, const std::string& dtype,
                              const Tokenizer& tokenizer, bool classifier = false);

}  // namespace ppo
