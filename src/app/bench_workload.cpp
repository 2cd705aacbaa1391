// The synthetic workload of `tpllama bench` (see bench_workload.h).
#include "app/bench_workload.h"

#include <algorithm>
#include <stdexcept>

#include "core/error.h"

namespace tpllama {

// "128" or "64:256" (inclusive).
LengthRange parse_range(const std::string& text, const char* flag, int min_value) {
  LengthRange r;
  const size_t colon = text.find(':');
  try {
    size_t used = 0;
    r.lo = std::stoi(text.substr(0, colon), &used);
    if (used != (colon == std::string::npos ? text.size() : colon))
      throw std::invalid_argument(text);
    r.hi = r.lo;
    if (colon != std::string::npos) {
      r.hi = std::stoi(text.substr(colon + 1), &used);
      if (used != text.size() - colon - 1) throw std::invalid_argument(text);
    }
  } catch (const std::exception&) {
    fail(flag, " '", text, "': expected a length (128) or an inclusive range (64:256)");
  }
  if (r.lo < min_value || r.hi < r.lo)
    fail(flag, " '", text, "': lengths must be at least ", min_value,
         " and a range must not be empty");
  return r;
}

std::optional<Request> SyntheticSource::next(bool /*wait*/) {
  if (made_ == w_.requests()) return std::nullopt;
  Request r;
  r.id = made_;
  r.line = static_cast<size_t>(made_ + 1);
  const bool scoring = w_.continuations > 0;
  if (!scoring || made_ % w_.continuations == 0) context_ = new_prompt();
  ++made_;
  r.token_ids.assign(context_.begin(), context_.end());
  const int out = std::uniform_int_distribution<int>(w_.out.lo, w_.out.hi)(rng_);
  if (scoring) {
    r.scoring = true;
    r.n_context_tokens = static_cast<int>(context_.size());
    append_tokens(r.token_ids, out);
    r.max_tokens = 1;
  } else {
    r.max_tokens = out;
    r.ignore_eos = true;  // a constrained one may still end early, where its grammar is complete
    r.constraint = constraint_;
    output_tokens_ += out;
  }
  return r;
}

void SyntheticSource::append_tokens(std::vector<int>& ids, int n) {
  std::uniform_int_distribution<int> token(0, vocab_ - 1);
  const bool ordinary_ids = vocab_ > static_cast<int>(special_.size());
  for (int i = 0; i < n; ++i) {
    int id = token(rng_);
    while (ordinary_ids && std::find(special_.begin(), special_.end(), id) != special_.end())
      id = token(rng_);
    ids.push_back(id);
  }
}

// The shared prefix (or BOS) and the prompt's own tokens.
std::vector<int> SyntheticSource::new_prompt() {
  std::vector<int> ids = prefix_.empty() ? std::vector<int>{bos_} : prefix_;
  const int own = std::uniform_int_distribution<int>(w_.in.lo, w_.in.hi)(rng_);
  append_tokens(ids, own - (prefix_.empty() ? 1 : 0));
  lengths_.push_back(static_cast<int>(ids.size()));
  return ids;
}

}  // namespace tpllama
