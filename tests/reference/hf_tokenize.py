"""Reference token ids for tests/model/test_bpe.cpp from Hugging Face `tokenizers` (the Rust library).

    python hf_tokenize.py TOKENIZER_DIR_OR_JSON < strings.jsonl > ids.jsonl
    python hf_tokenize.py TOKENIZER_DIR_OR_JSON --decode < ids.jsonl > texts.jsonl

Input: one JSON string per line. Output: one JSON array of ids per line, no special tokens added (the
post-processor is not applied), as ppo::BpeTokenizer::encode. With --decode, the other way: one JSON array of ids
per line in, the library's decode of it (special tokens kept) out as one JSON string per line.
"""
import json
import os
import sys

from tokenizers import Tokenizer

path = sys.argv[1]
tokenizer = Tokenizer.from_file(os.path.join(path, "tokenizer.json") if os.path.isdir(path) else path)
lines = [json.loads(line) for line in sys.stdin if line.strip()]
if "--decode" in sys.argv[2:]:
    for ids in lines:
        sys.stdout.write(json.dumps(tokenizer.decode(ids, skip_special_tokens=False)) + "\n")
else:
    for encoding in tokenizer.encode_batch(lines, add_special_tokens=False):
        sys.stdout.write(json.dumps(encoding.ids) + "\n")
