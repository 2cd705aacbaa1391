// tokenizer.json's "pre_tokenizer": how a stretch of normalized text is cut into the words BPE sees
// one at a time. Split (regex or string, every delimiter behavior, invert), ByteLevel (optional
// prefix space and GPT-2's split), Metaspace, and Sequences of them; others are refused.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "text/hf_json.h"
#include "text/hf_regex.h"

namespace tpllama::hf {

struct Piece {
  std::string text;
  bool at_origin = false;  // starts at byte 0 of the whole input (Metaspace's "first" scheme)
};

class PreTokenizer {
 public:
  PreTokenizer() = default;
  // j is the "pre_tokenizer" value (null for none); where names it in messages.
  PreTokenizer(const Json& j, const std::string& where);

  // Whether the chain ends in ByteLevel: its words are then raw bytes that the model spells in the
  // byte-level alphabet (the mapping itself is left to the BPE model, which works on bytes).
  bool byte_level() const { return byte_level_; }
  // Whether a Split step removes what it cuts on (behavior Removed): the words then hold less text.
  bool drops_text() const;

  // Appends the words of text (valid UTF-8), empty ones dropped. Not thread-safe (regex state).
  void split(std::string_view text, bool at_origin, std::vector<Piece>& out) const;

 private:
  enum class Kind { kSplit, kByteLevel, kMetaspace };
  enum class Behavior { kRemoved, kIsolated, kMergedWithPrevious, kMergedWithNext, kContiguous };
  enum class Prepend { kAlways, kFirst, kNever };
  struct Step {
    Kind kind = Kind::kSplit;
    std::vector<Pattern> pattern;  // Split, Metaspace (its replacement), ByteLevel with use_regex
    Behavior behavior = Behavior::kIsolated;
    bool invert = false;
    bool add_prefix_space = false;  // ByteLevel
    std::string replacement;        // Metaspace
    Prepend prepend = Prepend::kAlways;
  };

  void add(const Json& j, const std::string& where);
  void add_split(const Json& j, const std::string& where);
  void add_byte_level(const Json& j, const std::string& where);
  void add_metaspace(const Json& j, const std::string& where);
  void run_step(const Step& step, std::string_view text, bool at_origin,
                std::vector<Piece>& out) const;
  void cut(const Step& step, std::string_view text, bool at_origin, std::vector<Piece>& out) const;

  std::vector<Step> steps_;
  bool byte_level_ = false;
  mutable std::vector<Span> matches_;  // scratch, reused between calls
};

}  // namespace tpllama::hf
