#!/usr/bin/env python3
"""A byte-level BPE tokenizer.json cut to its first N tokens, for benchmarks of a smaller vocabulary.

Keeps the ids below N - len(added tokens) and the merges among them, and renumbers the added
(special) tokens to the top of the N ids, in the post-processor and tokenizer_config.json too.
Usage: scripts/data/truncate_bpe_vocab.py SRC_DIR N OUT_DIR   (SRC_DIR holds tokenizer.json and
tokenizer_config.json; OUT_DIR gets both, for `tpllama convert --from random --tokenizer`).
"""
import json
import os
import sys


def main():
    src, n, out = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    t = json.load(open(os.path.join(src, "tokenizer.json")))
    config = json.load(open(os.path.join(src, "tokenizer_config.json")))
    added = t["added_tokens"]
    keep = n - len(added)
    vocab = {tok: i for tok, i in t["model"]["vocab"].items() if i < keep}
    merges = []
    for m in t["model"]["merges"]:
        a, b = m.split(" ") if isinstance(m, str) else m
        if a in vocab and b in vocab and a + b in vocab:
            merges.append(m)
    t["model"]["vocab"] = vocab
    t["model"]["merges"] = merges
    renumber = {a["id"]: keep + k for k, a in enumerate(added)}
    for a in added:
        a["id"] = renumber[a["id"]]

    def fix(node):
        if isinstance(node, dict):
            if "ids" in node:
                node["ids"] = [renumber.get(i, i) for i in node["ids"]]
            for v in node.values():
                fix(v)
        elif isinstance(node, list):
            for v in node:
                fix(v)
    fix(t["post_processor"])
    decoder = config.get("added_tokens_decoder", {})
    config["added_tokens_decoder"] = {str(renumber[int(k)]): v for k, v in decoder.items()
                                      if int(k) in renumber}
    os.makedirs(out, exist_ok=True)
    json.dump(t, open(os.path.join(out, "tokenizer.json"), "w"), ensure_ascii=False)
    json.dump(config, open(os.path.join(out, "tokenizer_config.json"), "w"), ensure_ascii=False)
    print(f"{out}: {len(vocab)} tokens + {len(added)} added = {n}, {len(merges)} merges")


if __name__ == "__main__":
    main()
