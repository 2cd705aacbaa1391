// Added tokens: read from tokenizer.json, matched leftmost-longest, with Hugging Face's
// single_word, lstrip and rstrip rules.
#include "text/added_tokens.h"

#include <algorithm>
#include <cstdint>

#include "core/utf8.h"
#include "text/encode_error.h"
#include "text/hf_unicode.h"
#include "text/normalizer.h"

namespace tpllama::hf {

AddedTokens::AddedTokens(const Json& list, const Normalizer& normalizer, const std::string& where) {
  if (list.is_null()) return;
  if (!list.is_array()) fail(where, " is ", json_kind(list), ", expected an array");
  for (size_t i = 0; i < list.size(); ++i) {
    std::string at = where + "[" + std::to_string(i) + "]";
    const Json& j = list[i];
    AddedToken t;
    long long id = req_int(j, "id", at);
    if (id < 0 || id > INT32_MAX) fail(at, ": id ", id, " is out of range");
    t.id = static_cast<int>(id);
    t.content = req_string(j, "content", at);
    t.single_word = opt_bool(j, "single_word", false, at);
    t.lstrip = opt_bool(j, "lstrip", false, at);
    t.rstrip = opt_bool(j, "rstrip", false, at);
    t.special = opt_bool(j, "special", false, at);
    t.normalized = opt_bool(j, "normalized", !t.special, at);  // Hugging Face's default
    tokens_.push_back(std::move(t));
  }
  for (size_t i = 0; i < tokens_.size(); ++i) {
    const AddedToken& t = tokens_[i];
    if (t.content.empty()) continue;  // matches nothing
    if (t.normalized) {
      std::string content = t.content;
      try {
        if (!normalizer.empty()) content = normalizer.apply(t.content);
      } catch (const EncodeError& e) {  // the file's own text: the file is at fault
        fail(where, "[", i, "]: its content normalized: ", e.what());
      }
      normalized_.add(content, static_cast<int>(i));
    } else {
      raw_.add(t.content, static_cast<int>(i));
    }
  }
}

void AddedTokens::Trie::add(std::string_view content, int token) {
  if (content.empty()) return;
  if (nodes.empty()) nodes.emplace_back();
  first[static_cast<unsigned char>(content[0])] = true;
  int node = 0;
  for (char ch : content) {
    auto c = static_cast<unsigned char>(ch);
    auto& kids = nodes[node].children;
    auto it = std::find_if(kids.begin(), kids.end(), [&](const auto& k) { return k.first == c; });
    if (it != kids.end()) {
      node = it->second;
    } else {
      int child = static_cast<int>(nodes.size());
      nodes[node].children.emplace_back(c, child);
      nodes.emplace_back();
      node = child;
    }
  }
  nodes[node].token = token;  // a repeated content: the later entry wins
}

std::pair<int, size_t> AddedTokens::Trie::longest_at(std::string_view text, size_t at) const {
  std::pair<int, size_t> best{-1, 0};
  int node = 0;
  for (size_t i = at; i < text.size(); ++i) {
    auto c = static_cast<unsigned char>(text[i]);
    const auto& kids = nodes[node].children;
    auto it = std::find_if(kids.begin(), kids.end(), [&](const auto& k) { return k.first == c; });
    if (it == kids.end()) break;
    node = it->second;
    if (nodes[node].token >= 0) best = {nodes[node].token, i + 1 - at};
  }
  return best;
}

namespace {

bool ends_with_word(std::string_view s) {
  if (s.empty()) return false;
  size_t begin = 0;
  return is_word_char(utf8::decode_before(s, s.size(), &begin));
}

bool starts_with_word(std::string_view s) {
  if (s.empty()) return false;
  size_t i = 0;
  return is_word_char(utf8::decode(s, i));
}

// Where the run of whitespace that ends at text[end) begins.
size_t whitespace_before(std::string_view text, size_t end) {
  while (end > 0) {
    size_t begin = 0;
    if (!is_white_space(utf8::decode_before(text, end, &begin))) break;
    end = begin;
  }
  return end;
}

// Where the run of whitespace that starts at text[begin] ends.
size_t whitespace_after(std::string_view text, size_t begin) {
  while (begin < text.size()) {
    size_t next = begin;
    if (!is_white_space(utf8::decode(text, next))) break;
    begin = next;
  }
  return begin;
}

}  // namespace

void AddedTokens::split(std::string_view text, bool normalized, std::vector<Segment>& out) const {
  const Trie& trie = normalized ? normalized_ : raw_;
  size_t done = 0;  // text before this is in out
  if (!trie.nodes.empty()) {
    size_t at = 0;
    while (at < text.size()) {
      if (!trie.first[static_cast<unsigned char>(text[at])]) {
        ++at;
        continue;
      }
      auto [index, length] = trie.longest_at(text, at);
      if (index < 0) {
        ++at;
        continue;
      }
      size_t begin = at, end = at + length;
      at = end;  // as Aho-Corasick: a match that the rules below discard still consumes its text
      const AddedToken& t = tokens_[index];
      if (t.single_word &&
          (ends_with_word(text.substr(0, begin)) || starts_with_word(text.substr(end)))) {
        continue;
      }
      if (t.lstrip) begin = std::max(whitespace_before(text, begin), done);
      if (t.rstrip) end = whitespace_after(text, end);
      if (begin > done) out.push_back({done, begin, -1});
      out.push_back({begin, end, t.id});
      done = end;
      at = std::max(at, end);
    }
  }
  if (done < text.size()) out.push_back({done, text.size(), -1});
}

}  // namespace tpllama::hf
