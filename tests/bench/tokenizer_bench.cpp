// Encode and decode speed of a Tokenizer (tokenizer.json or a SentencePiece .model) on one thread,
// as the engine uses it: encode() per prompt, and the streaming detokenizer one id at a time. Not a
// test: a benchmark that prints numbers. Usage: tokenizer_bench TOKENIZER [TEXT_FILE] The text
// (tests/data/tokenizer/english_sample.txt is the one to use; without a file an English-like text
// is generated) is cut into paragraphs, as prompts would be, and repeated to about 10 MB. The first
// pass over the text runs with a cold word cache and is reported apart.

#include <chrono>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "core/error.h"
#include "text/tokenizer.h"

namespace {

using Clock = std::chrono::steady_clock;

constexpr size_t kTargetBytes = 10u << 20;

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// Sentences from a fixed set of words picked by a seeded generator: English-like, not English.
std::string generated_text() {
  static const char* kWords[] = {
      "the",     "of",        "and",        "to",       "in",      "a",       "is",
      "that",    "for",       "it",         "as",       "was",     "with",    "be",
      "by",      "on",        "not",        "he",       "this",    "are",     "or",
      "his",     "from",      "at",         "which",    "but",     "have",    "an",
      "had",     "they",      "you",        "were",     "their",   "one",     "all",
      "we",      "can",       "her",        "has",      "there",   "been",    "if",
      "more",    "when",      "will",       "would",    "who",     "so",      "no",
      "model",   "batch",     "request",    "memory",   "token",   "server",  "throughput",
      "latency", "sequence",  "attention",  "weights",  "layer",   "cache",   "prompt",
      "answer",  "question",  "morning",    "river",    "village", "teacher", "garden",
      "quickly", "carefully", "remarkable", "ordinary", "1998",    "42"};
  const size_t n = sizeof kWords / sizeof kWords[0];
  uint64_t state = 0x9E3779B97F4A7C15ull;
  auto next = [&] {
    state ^= state << 13;
    state ^= state >> 7;
    state ^= state << 17;
    return state;
  };
  std::string text;
  while (text.size() < 64 * 1024) {
    size_t words = 6 + next() % 20;
    for (size_t w = 0; w < words; ++w) {
      std::string word = kWords[next() % n];
      if (w == 0) word[0] = static_cast<char>(std::toupper(static_cast<unsigned char>(word[0])));
      text += word;
      text += w + 1 == words ? ". " : (next() % 9 == 0 ? ", " : " ");
    }
    if (next() % 6 == 0) text += "\n\n";
  }
  return text;
}

std::vector<std::string> paragraphs(const std::string& text) {
  std::vector<std::string> out;
  size_t from = 0;
  while (from < text.size()) {
    size_t end = text.find("\n\n", from);
    end = end == std::string::npos ? text.size() : end + 2;
    out.push_back(text.substr(from, end - from));
    from = end;
  }
  return out;
}

struct Pass {
  double seconds = 0;
  size_t bytes = 0;
  size_t tokens = 0;
};

Pass encode_all(const tpllama::Tokenizer& tok, const std::vector<std::string>& prompts,
                std::vector<std::vector<int>>* ids) {
  Pass p;
  auto t0 = Clock::now();
  for (const std::string& prompt : prompts) {
    std::vector<int> v = tok.encode(prompt);
    p.bytes += prompt.size();
    p.tokens += v.size();
    if (ids) ids->push_back(std::move(v));
  }
  p.seconds = seconds_since(t0);
  return p;
}

int run(int argc, char** argv) {
  if (argc < 2 || argc > 3) {
    std::fprintf(stderr, "usage: tokenizer_bench TOKENIZER [TEXT_FILE]\n");
    return 2;
  }
  auto t0 = Clock::now();
  tpllama::Tokenizer tok(argv[1]);
  std::printf("load: %.2f s (%s, vocab %d)\n", seconds_since(t0), argv[1], tok.vocab_size());

  std::string text;
  if (argc == 3) {
    std::ifstream in(argv[2], std::ios::binary);
    if (!in) tpllama::fail(argv[2], ": cannot open");
    std::stringstream s;
    s << in.rdbuf();
    text = s.str();
  } else {
    text = generated_text();
  }
  if (text.empty()) tpllama::fail("the text is empty");
  std::vector<std::string> once = paragraphs(text);
  std::vector<std::string> prompts;
  size_t total = 0;
  while (total < kTargetBytes) {
    prompts.insert(prompts.end(), once.begin(), once.end());
    total += text.size();
  }

  Pass cold = encode_all(tok, once, nullptr);
  std::printf("encode, first pass (cold cache): %.1f MB/s over %.0f KB\n",
              cold.bytes / cold.seconds / 1e6, cold.bytes / 1e3);
  std::vector<std::vector<int>> ids;
  ids.reserve(prompts.size());
  Pass warm = encode_all(tok, prompts, &ids);
  std::printf("encode: %.1f MB/s, %.2f M tokens/s (%.1f MB, %zu prompts, %.2f bytes/token)\n",
              warm.bytes / warm.seconds / 1e6, warm.tokens / warm.seconds / 1e6, warm.bytes / 1e6,
              prompts.size(), static_cast<double>(warm.bytes) / warm.tokens);

  auto t1 = Clock::now();
  std::string decoded;
  decoded.reserve(warm.bytes);
  for (const std::vector<int>& v : ids) {
    tpllama::IncrementalDetokenizer detok(tok);  // one sequence per prompt, one id at a time
    for (int id : v) decoded += detok.push(id);
    decoded += detok.flush();
  }
  double decode_seconds = seconds_since(t1);
  std::printf("decode (streamed, one id at a time): %.1f MB/s, %.1f M tokens/s\n",
              decoded.size() / decode_seconds / 1e6, warm.tokens / decode_seconds / 1e6);

  std::string joined;
  joined.reserve(warm.bytes);
  for (const std::string& p : prompts) joined += p;
  std::printf("round trip: %s\n", decoded == joined ? "decoded text equals the input"
                                                    : "DECODED TEXT DIFFERS FROM THE INPUT");
  return decoded == joined ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "tokenizer_bench: %s\n", e.what());
    return 1;
  }
}
