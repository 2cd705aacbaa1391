// The CPU sampler. Nothing sorts a whole 128k vocabulary when it can be avoided: top_k keeps a
// k-heap, and top_p / untruncated draws select and sort a head only until it holds enough mass.
#include "ops/cpu/sampling.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstddef>
#include <cstring>

#include "core/error.h"

namespace tpllama::ops::cpu {
namespace {

// Sampling order: more probable first, equal probabilities by lower token id.
bool better(const Candidate& a, const Candidate& b) {
  return a.prob > b.prob || (a.prob == b.prob && a.token < b.token);
}

// A set whose mass reaches top_p exactly in real arithmetic can fall a few ulps short after
// exp/sum rounding; this slack keeps such a boundary on the "reached" side.
constexpr double kTopPSlack = 1e-9;

double top_p_target(double top_p, double total) {
  return top_p * total * (1.0 - kTopPSlack);
}

// Number of leading entries of sorted `c` whose cumulative weight first reaches target.
size_t prefix_reaching(const std::vector<Candidate>& c, size_t count, double target) {
  double cum = 0.0;
  for (size_t i = 0; i < count; ++i) {
    cum += c[i].prob;
    if (cum >= target) return i + 1;
  }
  return count + 1;  // not reached within count
}

// Reorders c so its first `len` entries are its best, sorted, and their cumulative weight first
// reaches target there (or len == c.size()); returns len. The selected head grows 4x at a time with
// nth_element over the unselected rest only, so a peaked distribution never sorts the vocabulary.
size_t sorted_prefix(std::vector<Candidate>& c, double target) {
  if (c.empty()) return 0;
  size_t done = 0;
  size_t k = std::min<size_t>(c.size(), 256);
  double mass = 0.0;
  for (;;) {
    if (k < c.size())
      std::nth_element(c.begin() + static_cast<std::ptrdiff_t>(done),
                       c.begin() + static_cast<std::ptrdiff_t>(k - 1), c.end(), better);
    for (size_t i = done; i < k; ++i) mass += c[i].prob;
    if (mass >= target || k == c.size()) break;
    done = k;
    k = std::min(c.size(), k * 4);
  }
  std::sort(c.begin(), c.begin() + static_cast<std::ptrdiff_t>(k), better);
  return std::min(prefix_reaching(c, k, target), k);
}

// The GPU sampler sorts a NaN first and refuses the row; so does this one, naming the token,
// rather than draw from an order a NaN makes meaningless. Checked in the passes that read the
// logits anyway, in index order, so the first NaN is named.
void refuse_nan(const float* logits, int i) {
  if (std::isnan(logits[i])) fail("logits have a NaN (token ", i, ")");
}

double finite_max(const float* logits, int n) {
  double max_logit = -INFINITY;
  for (int i = 0; i < n; ++i) {
    refuse_nan(logits, i);
    max_logit = std::max(max_logit, static_cast<double>(logits[i]));
  }
  if (!std::isfinite(max_logit)) fail("logits have no finite maximum (max ", max_logit, ")");
  return max_logit;
}

// Every token with its softmax weight (max weight exactly 1, unnormalised); total gets their sum.
std::vector<Candidate> all_weights(const float* logits, int n, double max_logit, double temperature,
                                   double& total) {
  std::vector<Candidate> c(static_cast<size_t>(n));
  total = 0.0;
  for (int i = 0; i < n; ++i) {
    const double w = std::exp((static_cast<double>(logits[i]) - max_logit) / temperature);
    c[static_cast<size_t>(i)] = {i, w};
    total += w;
  }
  return c;
}

// The k best tokens, sorted, with softmax weights, in one pass over the logits: a heap of the k
// best so far (worst on top) rejects most entries with one comparison, and only k exponentials are
// needed. Selecting on raw logits is selecting on probabilities, which are monotone in them.
std::vector<Candidate> top_k_weights(const float* logits, int n, int k, double temperature) {
  std::vector<Candidate> c;  // prob holds the logit until the selection is done
  c.reserve(static_cast<size_t>(k));
  for (int i = 0; i < k; ++i) {
    refuse_nan(logits, i);
    c.push_back({i, static_cast<double>(logits[i])});
  }
  std::make_heap(c.begin(), c.end(), better);
  for (int i = k; i < n; ++i) {
    refuse_nan(logits, i);
    const Candidate cand{i, static_cast<double>(logits[i])};
    if (!better(cand, c.front())) continue;
    std::pop_heap(c.begin(), c.end(), better);
    c.back() = cand;
    std::push_heap(c.begin(), c.end(), better);
  }
  std::sort(c.begin(), c.end(), better);
  const double max_logit = c.front().prob;
  if (!std::isfinite(max_logit)) fail("logits have no finite maximum (max ", max_logit, ")");
  for (auto& cand : c) cand.prob = std::exp((cand.prob - max_logit) / temperature);
  return c;
}

// Drops the tail below min_weight (the top weight is 1, so this is min_p * p_max). It keeps a
// prefix of the sorted order, so it may run before sorting; remove_if keeps any existing order.
void apply_min_p(std::vector<Candidate>& c, double min_weight) {
  if (min_weight <= 0.0) return;
  c.erase(std::remove_if(c.begin(), c.end(),
                         [&](const Candidate& cand) { return cand.prob < min_weight; }),
          c.end());
}

}  // namespace

int argmax(const float* logits, int n) {
  if (n <= 0) fail("argmax over ", n, " logits");
  int best = 0;
  for (int i = 1; i < n; ++i)
    if (logits[i] > logits[best]) best = i;
  return best;
}

std::vector<Candidate> candidate_set(const float* logits, int n, const SamplingParams& p) {
  if (!(p.temperature > 0.0)) fail("candidate_set needs temperature > 0, got ", p.temperature);
  if (n <= 0) fail("candidate_set over ", n, " logits");
  const double min_weight = std::clamp(p.min_p, 0.0, 1.0);  // above 1 would drop even the top
  std::vector<Candidate> c;
  if (p.top_k > 0 && p.top_k < n) {
    c = top_k_weights(logits, n, p.top_k, p.temperature);
    double total = 0.0;
    for (const auto& cand : c) total += cand.prob;
    // top_p measures mass within the top-k set, as llama.cpp and Hugging Face do.
    if (p.top_p < 1.0)
      c.resize(std::min(c.size(), prefix_reaching(c, c.size(), top_p_target(p.top_p, total))));
    apply_min_p(c, min_weight);
  } else {
    double total = 0.0;
    c = all_weights(logits, n, finite_max(logits, n), p.temperature, total);
    apply_min_p(c, min_weight);  // before sorting: fewer to sort; total stays the full mass
    if (p.top_p < 1.0)
      c.resize(sorted_prefix(c, top_p_target(p.top_p, total)));
    else
      std::sort(c.begin(), c.end(), better);
  }
  double kept = 0.0;
  for (const auto& cand : c) kept += cand.prob;
  for (auto& cand : c) cand.prob /= kept;
  return c;
}

int sample_with_uniform(const float* logits, int n, const SamplingParams& p, double u) {
  if (p.temperature == 0.0) return argmax(logits, n);
  const bool truncates = (p.top_k > 0 && p.top_k < n) || p.top_p < 1.0 || p.min_p > 0.0;
  if (!truncates) {
    // The walk over the full sorted vocabulary stops where the cumulative mass passes u; finding
    // that point by selection avoids sorting all of a 128k vocabulary for every token.
    if (!(p.temperature > 0.0)) fail("sample needs temperature >= 0, got ", p.temperature);
    if (n <= 0) fail("sample over ", n, " logits");
    double total = 0.0;
    std::vector<Candidate> c = all_weights(logits, n, finite_max(logits, n), p.temperature, total);
    return c[sorted_prefix(c, std::nextafter(u * total, INFINITY)) - 1].token;
  }
  const std::vector<Candidate> c = candidate_set(logits, n, p);
  double cum = 0.0;
  for (const auto& cand : c) {
    cum += cand.prob;
    if (u < cum) return cand.token;
  }
  return c.back().token;  // rounding left the cumulative sum just below u
}

std::vector<int32_t> sample_rows(Tensor logits, int n, const std::vector<SampleRow>& rows) {
  std::vector<int32_t> tokens(rows.size());
  for (size_t r = 0; r < rows.size(); ++r)
    tokens[r] = sample_with_uniform(logits.as<float>() + static_cast<int64_t>(r) * logits.size(1),
                                    n, rows[r].params, rows[r].uniform);
  return tokens;
}

void edit_logits(Tensor logits, Tensor cells, Tensor params) {
  const int64_t rows = logits.size(0), cols = logits.size(1);
  for (int64_t i = 0; i < cells.size(0); ++i) {
    const int64_t r = cells.as<int32_t>()[2 * i], c = cells.as<int32_t>()[2 * i + 1];
    TPLLAMA_CHECK(r >= 0 && r < rows && c >= 0 && c < cols, "edit_logits: cell (", r, ", ", c,
                  ") of ", logits.shape_string());
    const float* p = params.as<float>() + 3 * i;
    float x = logits.as<float>()[r * cols + c] + p[0];
    if (p[1] != 1.0f) x = x > 0.0f ? x / p[1] : x * p[1];
    logits.as<float>()[r * cols + c] = x - p[2];
  }
}

namespace {
// A word of refused tokens' logits, copied in one go.
const std::array<float, 32> kRefusedWord = [] {
  std::array<float, 32> a{};
  a.fill(-INFINITY);
  return a;
}();
constexpr uint32_t kRefusedBits = 0xFF800000u;  // -inf
// For each byte of a mask word, its 8 bits as lane masks (all ones: keep the logit), so that the
// select is plain ANDs and ORs, which the compiler vectorizes on any x86-64 or Arm.
const std::array<std::array<uint32_t, 8>, 256> kKeepLanes = [] {
  std::array<std::array<uint32_t, 8>, 256> t{};
  for (int byte = 0; byte < 256; ++byte)
    for (int k = 0; k < 8; ++k) t[byte][k] = ((byte >> k) & 1) != 0 ? ~uint32_t{0} : 0;
  return t;
}();
}  // namespace

void mask_logits(Tensor logits, Tensor rows, Tensor words, int64_t first_token) {
  const int64_t cols = logits.size(1), width = words.size(1), n = rows.numel();
  for (int64_t i = 0; i < n; ++i) {
    const int64_t r = rows.as<int32_t>()[i];
    TPLLAMA_CHECK(r >= 0 && r < logits.size(0), "mask_logits: row ", r, " of ", logits.size(0));
  }
  // A word at a time: an all-allowed word (a free string's) costs one test, an all-refused one
  // a fill; only mixed words go bit by bit. Rows in parallel (32 rows of 128k at once).
#pragma omp parallel for schedule(static) if (n * cols >= (int64_t{1} << 18))
  for (int64_t i = 0; i < n; ++i) {
    const auto* bits = reinterpret_cast<const uint32_t*>(words.as<int32_t>() + i * width);
    float* row = logits.as<float>() + rows.as<int32_t>()[i] * cols;
    int64_t c = 0;
    while (c < cols) {
      const int64_t t = first_token + c, w = t >> 5;
      const int shift = static_cast<int>(t & 31);
      const int64_t span = std::min<int64_t>(32 - shift, cols - c);
      if (w >= width) {  // past the mask's words: not allowed
        std::fill(row + c, row + cols, -INFINITY);
        break;
      }
      const uint32_t word = bits[w] >> shift;
      const uint32_t full = span == 32 ? ~uint32_t{0} : (uint32_t{1} << span) - 1;
      float* at = row + c;
      if (span == 32) {  // a whole word: fixed-length loops, which the compiler vectorizes
        if (word == 0) {
          std::memcpy(at, kRefusedWord.data(), sizeof kRefusedWord);
        } else if (word != full) {  // a select by lane masks, a byte of the word at a time
          uint32_t v[32];
          std::memcpy(v, at, sizeof v);
          for (int b = 0; b < 4; ++b) {
            const uint32_t* keep = kKeepLanes[(word >> (8 * b)) & 0xFF].data();
            uint32_t* lanes = v + 8 * b;
            for (int k = 0; k < 8; ++k) lanes[k] = (lanes[k] & keep[k]) | (kRefusedBits & ~keep[k]);
          }
          std::memcpy(at, v, sizeof v);
        }
      } else if ((word & full) != full) {
        for (int64_t k = 0; k < span; ++k)
          if (((word >> k) & 1) == 0) at[k] = -INFINITY;
      }
      c += span;
    }
  }
}

void argmax_rows(Tensor index, Tensor value, Tensor logits) {
  const int64_t cols = logits.size(1);
  for (int64_t r = 0; r < logits.size(0); ++r) {
    const float* row = logits.as<float>() + r * cols;
    int64_t best = 0;
    bool bad = !(row[0] < INFINITY);
    for (int64_t c = 1; c < cols; ++c) {
      if (row[c] > row[best]) best = c;
      bad |= !(row[c] < INFINITY);
    }
    index.as<int32_t>()[r] = bad ? -1 : static_cast<int32_t>(best);
    value.as<float>()[r] = bad ? INFINITY : row[best];
  }
}

void logit_sums(Tensor sums, Tensor logits, Tensor rows, Tensor max, Tensor chosen) {
  const int64_t n = rows.numel();
  const int64_t cols = logits.size(1);
  for (int64_t i = 0; i < n; ++i) {
    const int64_t r = rows.as<int32_t>()[i];
    TPLLAMA_CHECK(r >= 0 && r < logits.size(0), "logit_sums: row ", r, " of ", logits.size(0));
    const float* row = logits.as<float>() + r * cols;
    double sum = 0;
    for (int64_t c = 0; c < cols; ++c)
      sum += std::exp(static_cast<double>(row[c]) - max.as<float>()[i]);
    const int32_t at = chosen.as<int32_t>()[i];
    sums.as<float>()[i] = static_cast<float>(sum);
    sums.as<float>()[n + i] = at >= 0 && at < cols ? row[at] : 0.0f;
  }
}

}  // namespace tpllama::ops::cpu
