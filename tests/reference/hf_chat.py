"""Reference chat prompts for tests/model/test_hf_reference.cpp from transformers' apply_chat_template.

    python hf_chat.py TOKENIZER_DIR [TEMPLATE_FILE] < conversations.jsonl > prompts.jsonl

Input: one JSON object per line, {"messages": [{"role", "content"}, ...], "prefix": "...", "kwargs": {...}} (kwargs,
such as {"enable_thinking": false}, passed on to the template). Output: one line each, {"text": ..., "ids": [...]}: the
messages rendered with the generation prompt (the tokenizer's own chat template, or TEMPLATE_FILE's), then the prefix,
tokenized as apply_chat_template(tokenize=True) does it (no special tokens added); {"error": "..."} where the template
raises.
"""
import json
import sys

from transformers import AutoTokenizer

tokenizer = AutoTokenizer.from_pretrained(sys.argv[1])
template = open(sys.argv[2]).read() if len(sys.argv) > 2 else None
for line in sys.stdin:
    if not line.strip():
        continue
    item = json.loads(line)
    try:
        text = tokenizer.apply_chat_template(item["messages"], chat_template=template, add_generation_prompt=True,
                                             tokenize=False, **item.get("kwargs", {})) + item.get("prefix", "")
    except Exception as e:  # the template's raise_exception, or a variable it lacks
        sys.stdout.write(json.dumps({"error": f"{type(e).__name__}: {e}"}) + "\n")
        continue
    ids = tokenizer(text, add_special_tokens=False)["input_ids"]
    sys.stdout.write(json.dumps({"text": text, "ids": ids}) + "\n")
