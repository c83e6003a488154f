"""Reference token ids for tests/model/test_bpe.cpp from Hugging Face `tokenizers` (the Rust library).

    python hf_tokenize.py TOKENIZER_DIR_OR_JSON < strings.jsonl > ids.jsonl

Input: one JSON string per line. Output: one JSON array of ids per line, no special tokens added (the
post-processor is not applied), as ppo::BpeTokenizer::encode.
"""
import json
import os
import sys

from tokenizers import Tokenizer

path = sys.argv[1]
tokenizer = Tokenizer.from_file(os.path.join(path, "tokenizer.json") if os.path.isdir(path) else path)
texts = [json.loads(line) for line in sys.stdin if line.strip()]
for encoding in tokenizer.encode_batch(texts, add_special_tokens=False):
    sys.stdout.write(json.dumps(encoding.ids) + "\n")
