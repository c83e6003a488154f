"""Writes llama.cpp's collection of chat templates and a vocabulary test pair into OUT, from PyPI only.

llama.cpp keeps copies of models' published chat templates (models/templates/*.jinja: Qwen3-0.6B's, QwQ's, Qwen3.5's,
Llama 3.x's, Mistral's, ...) and, for each vocabulary it supports, strings with the ids the model's own Hugging Face
tokenizer gives them (models/ggml-vocab-NAME.gguf.inp and .out). The package llama-cpp-python vendors llama.cpp, and
its source distribution is its only file on PyPI; this script downloads that one archive (pinned by version and
sha256), takes those files and nothing else, and builds nothing.
  OUT/templates/*.jinja
  OUT/vocab/ggml-vocab-qwen2.gguf.inp, .out     (Qwen2's tokenizer: the vocabulary Qwen2.5 and Qwen3 share)

    .venv-ref/bin/python scripts/ref_templates.py --out .ref/llama.cpp      (idempotent)
"""

import argparse
import hashlib
import os
import shutil
import sys
import tarfile
import urllib.request

NAME = "llama_cpp_python-0.3.36.tar.gz"
URL = ("https://files.pythonhosted.org/packages/ec/e9/e7de2b0463ea3ffbf0ede6cb21b58c1258a8f6521aae45ca773a59fe7cf3/"
       + NAME)
SHA256 = "832db0699007f1be95a7e41ef12e88926b02ba836461e36a36372db2760c1a2e"
VOCAB = ("ggml-vocab-qwen2.gguf.inp", "ggml-vocab-qwen2.gguf.out")
VERSION = "1"  # bump when the files change


def download(path):
    digest = hashlib.sha256()
    with urllib.request.urlopen(URL, timeout=300) as response, open(path, "wb") as f:
        while chunk := response.read(1 << 20):
            digest.update(chunk)
            f.write(chunk)
    if digest.hexdigest() != SHA256:
        raise SystemExit(f"error: ref_templates: {NAME} has sha256 {digest.hexdigest()}, expected {SHA256}")


def publish(tmp, out, version):
    """Stamps the finished folder `tmp` with `version` and puts it at `out`, replacing what was there."""
    with open(os.path.join(tmp, ".complete"), "w") as f:
        f.write(version)
    shutil.rmtree(out, ignore_errors=True)
    os.rename(tmp, out)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    stamp = os.path.join(args.out, ".complete")
    if os.path.exists(stamp) and open(stamp).read() == VERSION:
        print(f"ref_templates: {args.out} present")
        return 0
    tmp = args.out + ".tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    os.makedirs(os.path.join(tmp, "templates"))
    os.makedirs(os.path.join(tmp, "vocab"))
    archive = os.path.join(tmp, NAME)
    download(archive)
    prefix = NAME[:-len(".tar.gz")] + "/vendor/llama.cpp/models/"
    templates = 0
    with tarfile.open(archive) as tar:
        for member in tar.getmembers():
            if not member.isfile() or not member.name.startswith(prefix):
                continue
            rest = member.name[len(prefix):]
            if rest.startswith("templates/") and rest.endswith(".jinja") and rest.count("/") == 1:
                target, templates = os.path.join(tmp, rest), templates + 1
            elif rest in VOCAB:
                target = os.path.join(tmp, "vocab", rest)
            else:
                continue
            with tar.extractfile(member) as src, open(target, "wb") as dst:
                shutil.copyfileobj(src, dst)
    os.remove(archive)
    missing = [f for f in ["templates/Qwen-Qwen3-0.6B.jinja"] + ["vocab/" + v for v in VOCAB]
               if not os.path.exists(os.path.join(tmp, f))]
    if missing:
        raise SystemExit(f"error: ref_templates: {NAME} lacks {', '.join(missing)}")
    publish(tmp, args.out, VERSION)
    print(f"ref_templates: wrote {args.out} ({templates} chat templates)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
