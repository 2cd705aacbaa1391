// The grammar engine's costs on a real vocabulary: compile time of each schema of
// tests/data/grammar/json_schema_cases.json, the vocabulary trie's build, and the time of one token
// mask (TokenTrie::allowed) at each token boundary of a valid instance of each schema, tokenized as
// the model would write it. Not a test; scripts/bench/grammar.sh runs it.
//
// Usage: grammar_bench TOKENIZER CASES_JSON
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <stdexcept>
#include <string>
#include <unordered_map>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "grammar/json_schema.h"
#include "grammar/matcher.h"
#include "grammar/token_mask.h"
#include "text/tokenizer.h"

namespace {

using Clock = std::chrono::steady_clock;
double ms_since(Clock::time_point t) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t).count();
}

// The text as tokens, each the longest one its remaining bytes start with (as a model writing it
// might; the tokenizer's own encoding would start a SentencePiece text with a '▁' space, which a
// JSON value does not).
std::vector<int> longest_match_tokens(const std::string& text,
                                      const std::unordered_map<std::string, int>& by_bytes,
                                      size_t longest) {
  std::vector<int> ids;
  for (size_t at = 0; at < text.size();) {
    size_t n = std::min(longest, text.size() - at);
    while (n > 0 && by_bytes.find(text.substr(at, n)) == by_bytes.end()) --n;
    if (n == 0) throw std::runtime_error("no token for byte " + std::to_string(at) + " of " + text);
    ids.push_back(by_bytes.at(text.substr(at, n)));
    at += n;
  }
  return ids;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: grammar_bench TOKENIZER CASES_JSON\n");
    return 2;
  }
  try {
    const tpllama::Tokenizer tok(argv[1]);
    std::vector<std::string> bytes(static_cast<size_t>(tok.vocab_size()));
    for (int id = 0; id < tok.vocab_size(); ++id)
      if (!tok.is_control(id)) bytes[static_cast<size_t>(id)] = tok.token_bytes(id);
    std::unordered_map<std::string, int> by_bytes;
    size_t longest = 0;
    for (int id = 0; id < tok.vocab_size(); ++id)
      if (!bytes[static_cast<size_t>(id)].empty()) {
        by_bytes.emplace(bytes[static_cast<size_t>(id)], id);
        longest = std::max(longest, bytes[static_cast<size_t>(id)].size());
      }
    auto t0 = Clock::now();
    const tpllama::grammar::TokenTrie trie(bytes);
    std::printf("vocabulary %d tokens: trie of %zu nodes built in %.1f ms\n", tok.vocab_size(),
                trie.nodes(), ms_since(t0));
    std::ifstream in(argv[2]);
    const auto cases = nlohmann::ordered_json::parse(in)["cases"];
    std::vector<double> all;
    for (const auto& c : cases) {
      t0 = Clock::now();
      const tpllama::grammar::Grammar g = tpllama::grammar::compile_json_schema(c["schema"]);
      const double compile_ms = ms_since(t0);
      std::string text;  // the first valid instance
      for (const auto& t : c["texts"])
        if (t[1].get<bool>()) {
          text = t[0];
          break;
        }
      std::vector<double> masks;
      tpllama::grammar::Matcher m(g);
      for (const int id : longest_match_tokens(text, by_bytes, longest)) {
        t0 = Clock::now();
        const tpllama::grammar::TokenMask mask = trie.allowed(m);
        masks.push_back(ms_since(t0));
        if (!tpllama::grammar::allows(mask, id) || !m.advance(tok.token_bytes(id))) {
          std::printf("%-9s the instance's token %d is not allowed: a bug\n",
                      c["name"].get<std::string>().c_str(), id);
          return 1;
        }
      }
      std::sort(masks.begin(), masks.end());
      double mean = 0;
      for (const double x : masks) mean += x / static_cast<double>(masks.size());
      const double p99 = masks[std::min(masks.size() - 1, masks.size() * 99 / 100)];
      std::printf("%-9s compile %7.2f ms; %3zu tokens: mask mean %7.3f ms, p99 %7.3f ms\n",
                  c["name"].get<std::string>().c_str(), compile_ms, masks.size(), mean, p99);
      all.insert(all.end(), masks.begin(), masks.end());
    }
    std::sort(all.begin(), all.end());
    double mean = 0;
    for (const double x : all) mean += x / static_cast<double>(all.size());
    std::printf("all       %zu masks: mean %.3f ms, p99 %.3f ms\n", all.size(), mean,
                all[std::min(all.size() - 1, all.size() * 99 / 100)]);
  } catch (const tpllama::Error& e) {
    std::fprintf(stderr, "grammar_bench: %s\n", e.what());
    return 1;
  }
  return 0;
}
