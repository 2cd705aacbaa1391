// Pre-tokenizer steps read from tokenizer.json and run in order, each on the words of the last.
#include "text/pre_tokenizer.h"

#include <algorithm>

namespace tpllama::hf {
namespace {

// GPT-2's split, used by ByteLevel when its use_regex is on.
constexpr const char* kGpt2Pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

struct Region {
  size_t begin;
  size_t end;
  bool match;
};

// Hugging Face's merge rule over alternating match/non-match regions: a match joins the region
// before it unless that was a match too (MergedWithPrevious), or like regions join (Contiguous).
// `extend` folds a region into the last one kept.
template <typename Extend>
void fold(const std::vector<Region>& in, bool contiguous, std::vector<Region>& out, Extend extend) {
  bool previous_match = false;
  for (const Region& r : in) {
    bool join = contiguous ? r.match == previous_match : (r.match && !previous_match);
    if (join && !out.empty()) {
      extend(out.back(), r);
    } else {
      out.push_back({r.begin, r.end, false});
    }
    previous_match = r.match;
  }
}

}  // namespace

PreTokenizer::PreTokenizer(const Json& j, const std::string& where) {
  if (!j.is_null()) add(j, where);
}

void PreTokenizer::add(const Json& j, const std::string& where) {
  if (byte_level_) {
    fail(where,
         ": a pre-tokenizer after ByteLevel is not supported (it would see byte-level "
         "characters, not text)");
  }
  std::string type = type_of(j, where);
  if (type == "Sequence") {
    const Json& list = req_array(j, "pretokenizers", where);
    for (size_t i = 0; i < list.size(); ++i) {
      add(list[i], where + ".pretokenizers[" + std::to_string(i) + "]");
    }
  } else if (type == "Split") {
    add_split(j, where);
  } else if (type == "ByteLevel") {
    add_byte_level(j, where);
  } else if (type == "Metaspace") {
    add_metaspace(j, where);
  } else {
    refuse_type(where, type, "Split, ByteLevel, Sequence, Metaspace");
  }
}

void PreTokenizer::add_split(const Json& j, const std::string& where) {
  Step step;
  step.kind = Kind::kSplit;
  step.pattern.push_back(Pattern::from_json(member(j, "pattern", where), where));
  std::string behavior = req_string(j, "behavior", where);
  if (behavior == "Removed") {
    step.behavior = Behavior::kRemoved;
  } else if (behavior == "Isolated") {
    step.behavior = Behavior::kIsolated;
  } else if (behavior == "MergedWithPrevious") {
    step.behavior = Behavior::kMergedWithPrevious;
  } else if (behavior == "MergedWithNext") {
    step.behavior = Behavior::kMergedWithNext;
  } else if (behavior == "Contiguous") {
    step.behavior = Behavior::kContiguous;
  } else {
    fail(where, ": Split behavior '", behavior, "' is not one of Removed, Isolated, ",
         "MergedWithPrevious, MergedWithNext, Contiguous");
  }
  step.invert = opt_bool(j, "invert", false, where);
  steps_.push_back(std::move(step));
}

void PreTokenizer::add_byte_level(const Json& j, const std::string& where) {
  Step step;
  step.kind = Kind::kByteLevel;
  step.add_prefix_space = opt_bool(j, "add_prefix_space", true, where);
  if (opt_bool(j, "use_regex", true, where)) {
    step.pattern.push_back(Pattern::regex(kGpt2Pattern, where));
  }
  if (step.add_prefix_space || !step.pattern.empty()) steps_.push_back(std::move(step));
  byte_level_ = true;
}

void PreTokenizer::add_metaspace(const Json& j, const std::string& where) {
  Step step;
  step.kind = Kind::kMetaspace;
  step.replacement = req_string(j, "replacement", where);
  if (step.replacement.empty()) fail(where, ": Metaspace replacement is empty");
  // Files written before prepend_scheme existed say add_prefix_space instead.
  std::string scheme = opt_string(j, "prepend_scheme", "", where);
  if (scheme.empty()) scheme = opt_bool(j, "add_prefix_space", true, where) ? "always" : "never";
  if (scheme == "always") {
    step.prepend = Prepend::kAlways;
  } else if (scheme == "first") {
    step.prepend = Prepend::kFirst;
  } else if (scheme == "never") {
    step.prepend = Prepend::kNever;
  } else {
    fail(where, ": Metaspace prepend_scheme '", scheme, "' is not one of always, first, never");
  }
  if (opt_bool(j, "split", true, where)) {
    step.pattern.push_back(Pattern::literal(step.replacement));
    step.behavior = Behavior::kMergedWithNext;
  }
  steps_.push_back(std::move(step));
}

bool PreTokenizer::drops_text() const {
  return std::any_of(steps_.begin(), steps_.end(), [](const Step& s) {
    return s.kind == Kind::kSplit && s.behavior == Behavior::kRemoved;
  });
}

void PreTokenizer::split(std::string_view text, bool at_origin, std::vector<Piece>& out) const {
  if (text.empty()) return;
  if (steps_.empty()) {
    out.push_back({std::string(text), at_origin});
    return;
  }
  if (steps_.size() == 1) {
    run_step(steps_[0], text, at_origin, out);
    return;
  }
  std::vector<Piece> current;
  run_step(steps_[0], text, at_origin, current);
  std::vector<Piece> next;
  for (size_t s = 1; s < steps_.size(); ++s) {
    std::vector<Piece>& dest = s + 1 == steps_.size() ? out : next;
    for (const Piece& p : current) run_step(steps_[s], p.text, p.at_origin, dest);
    if (&dest == &next) {
      current.swap(next);
      next.clear();
    }
  }
}

void PreTokenizer::run_step(const Step& step, std::string_view text, bool at_origin,
                            std::vector<Piece>& out) const {
  if (step.kind == Kind::kSplit) {
    cut(step, text, at_origin, out);
    return;
  }
  std::string s;
  if (step.kind == Kind::kByteLevel) {
    if (step.add_prefix_space && text.front() != ' ') s.push_back(' ');
    s.append(text);
  } else {  // Metaspace: spaces become the replacement, which may then lead the word
    s.reserve(text.size() + step.replacement.size());
    for (char c : text) {
      if (c == ' ') {
        s += step.replacement;
      } else {
        s.push_back(c);
      }
    }
    bool starts = s.compare(0, step.replacement.size(), step.replacement) == 0;
    bool prepend =
        step.prepend == Prepend::kAlways || (step.prepend == Prepend::kFirst && at_origin);
    if (prepend && !starts) s.insert(0, step.replacement);
  }
  if (step.pattern.empty()) {
    out.push_back({std::move(s), at_origin});
  } else {
    cut(step, s, at_origin, out);
  }
}

void PreTokenizer::cut(const Step& step, std::string_view text, bool at_origin,
                       std::vector<Piece>& out) const {
  matches_.clear();
  step.pattern.front().find_all(text, matches_);
  std::vector<Region> regions;
  regions.reserve(2 * matches_.size() + 1);
  size_t from = 0;
  for (const Span& m : matches_) {
    if (m.begin > from) regions.push_back({from, m.begin, false});
    regions.push_back({m.begin, m.end, true});
    from = m.end;
  }
  if (from < text.size()) regions.push_back({from, text.size(), false});
  if (step.invert) {
    for (Region& r : regions) r.match = !r.match;
  }

  std::vector<Region> kept;
  kept.reserve(regions.size());
  switch (step.behavior) {
    case Behavior::kIsolated:
      kept = regions;
      break;
    case Behavior::kRemoved:
      for (const Region& r : regions) {
        if (!r.match) kept.push_back(r);
      }
      break;
    case Behavior::kContiguous:
    case Behavior::kMergedWithPrevious:
      fold(regions, step.behavior == Behavior::kContiguous, kept,
           [](Region& last, const Region& r) { last.end = r.end; });
      break;
    case Behavior::kMergedWithNext: {
      // A match joins the region after it: the same fold, run from the end.
      std::vector<Region> reversed(regions.rbegin(), regions.rend());
      fold(reversed, false, kept, [](Region& last, const Region& r) { last.begin = r.begin; });
      std::reverse(kept.begin(), kept.end());
      break;
    }
  }
  for (const Region& r : kept) {
    if (r.end > r.begin) {
      out.push_back(
          {std::string(text.substr(r.begin, r.end - r.begin)), at_origin && r.begin == 0});
    }
  }
}

}  // namespace tpllama::hf
