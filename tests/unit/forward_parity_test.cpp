// The production CPU forward (candidate) against the independent fp64 forward in tests/reference
// (reference): stories260K, random-weight models of several shapes and dtypes, and invariance of
// the logits under batching and prefill chunking.
#include <cmath>
#include <fstream>
#include <memory>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "llama_reference.h"
#include "model/checkpoint.h"
#include "model/llama2c.h"
#include "model/llama_model.h"
#include "parallel/self_comm.h"
#include "test_util.h"

namespace tpllama {
namespace {

// A single-rank model plus its cache, able to run any sequence of steps.
struct Candidate {
  Checkpoint checkpoint;
  SelfCommunicator comm;
  LlamaModel model;
  KvCache cache;

  static constexpr int kBlockSize = 4;  // small, so sequences cross many block boundaries
  static constexpr int kBlocks = 128;
  int next_block = kBlocks - 1;  // hand blocks out backwards: tables are never contiguous

  explicit Candidate(const std::string& dir, int max_tokens = 256, int slots = 4)
      : checkpoint(dir),
        model(checkpoint, Topology::single(checkpoint.config().n_layers), comm, DeviceContext{},
              ModelLimits{max_tokens, max_tokens}),
        cache(model.n_layers_local(), model.kv_dim_local(), kBlockSize, kBlocks, slots) {}

  // Gives a slot blocks for `positions` positions.
  void reserve(int slot, int positions) {
    cache.release(slot);
    for (int p = 0; p < positions; p += kBlockSize) {
      if (next_block < 0) next_block = kBlocks - 1;
      cache.append_block(slot, next_block--);
    }
  }

  // Logits at every position of `tokens`, computed in chunks of `chunk` tokens in one slot.
  std::vector<std::vector<float>> all_logits(const std::vector<int>& tokens, int chunk) {
    const int slot = 0;
    reserve(slot, static_cast<int>(tokens.size()));
    std::vector<std::vector<float>> out;
    for (size_t begin = 0; begin < tokens.size(); begin += static_cast<size_t>(chunk)) {
      StepBatch b;
      for (size_t i = begin; i < std::min(tokens.size(), begin + static_cast<size_t>(chunk)); ++i) {
        b.tokens.push_back(tokens[i]);
        b.positions.push_back(static_cast<int>(i));
        b.slots.push_back(slot);
        b.logit_rows.push_back(static_cast<int>(i - begin));
      }
      Tensor logits = model.forward(b, cache);
      for (int64_t r = 0; r < logits.size(0); ++r)
        out.emplace_back(logits.as<float>() + r * logits.size(1),
                         logits.as<float>() + (r + 1) * logits.size(1));
    }
    return out;
  }
};

double max_abs_diff(const std::vector<std::vector<double>>& reference,
                    const std::vector<std::vector<float>>& candidate) {
  EXPECT_EQ(reference.size(), candidate.size());
  double worst = 0;
  for (size_t p = 0; p < std::min(reference.size(), candidate.size()); ++p) {
    EXPECT_EQ(reference[p].size(), candidate[p].size());
    for (size_t v = 0; v < std::min(reference[p].size(), candidate[p].size()); ++v)
      worst = std::max(worst, std::abs(reference[p][v] - candidate[p][v]));
  }
  return worst;
}

std::vector<int> first_reference_tokens(const std::string& stories, size_t n) {
  std::ifstream in(stories + "/reference_greedy.jsonl");
  std::string line;
  std::getline(in, line);
  auto j = nlohmann::json::parse(line);
  std::vector<int> tokens = j["prompt_tokens"].get<std::vector<int>>();
  for (int t : j["generated_tokens"]) tokens.push_back(t);
  tokens.resize(n);
  return tokens;
}

TEST(ForwardParity, Stories260kMatchesReferenceForwardAndShippedLogits) {
  TPLLAMA_REQUIRE_STORIES(stories);
  const std::string dir = testing_util::fresh_dir("parity_stories");
  convert_llama2c(stories + "/stories260K.bin",
                  ConvertOptions{dir, stories + "/tok512.model", DType::kF32});
  const std::vector<int> tokens = first_reference_tokens(stories, 64);

  // Reference: the original llama2.c weights in Meta's interleaved RoPE layout, so the converter's
  // permutation to rotate-half is checked too.
  reference::Config rc;
  reference::Weights rw = reference::load_llama2c(stories + "/stories260K.bin", &rc);
  auto expected = reference::forward_all(rc, rw, tokens, reference::RopeLayout::kInterleaved);

  Candidate candidate(dir);
  auto got = candidate.all_logits(tokens, 64);
  EXPECT_LT(max_abs_diff(expected, got), 1e-4);

  std::ifstream f(stories + "/logits_once_upon_a_time.f32", std::ios::binary);
  std::vector<float> shipped(64 * 512);
  ASSERT_TRUE(f.read(reinterpret_cast<char*>(shipped.data()),
                     static_cast<std::streamsize>(shipped.size() * 4)));
  double worst = 0;
  for (size_t p = 0; p < 64; ++p)
    for (size_t v = 0; v < 512; ++v)
      worst = std::max(worst, std::abs(double(shipped[p * 512 + v]) - got[p][v]));
  EXPECT_LT(worst, 1e-4) << "against logits_once_upon_a_time.f32";
}

struct RandomCase {
  const char* name;
  reference::Config config;
  const char* dtype;
  int n_shards;
  double tolerance;
};

void PrintTo(const RandomCase& c, std::ostream* os) {
  *os << c.name << " (" << c.dtype << ")";
}

reference::Config make_config(int dim, int hidden, int layers, int heads, int kv_heads, int vocab,
                              bool tied) {
  reference::Config c{};
  c.dim = dim;
  c.hidden_dim = hidden;
  c.n_layers = layers;
  c.n_heads = heads;
  c.n_kv_heads = kv_heads;
  c.vocab_size = vocab;
  c.max_seq_len = 128;
  c.tie_word_embeddings = tied;
  return c;
}

std::vector<RandomCase> random_cases() {
  std::vector<RandomCase> cases;
  cases.push_back({"gqa", make_config(64, 160, 3, 8, 2, 97, false), "F32", 1, 1e-4});
  cases.push_back({"mha_tied", make_config(48, 128, 2, 4, 4, 64, true), "F32", 1, 1e-4});
  cases.push_back({"odd_sizes", make_config(40, 97, 3, 5, 5, 131, false), "F32", 3, 1e-4});
  auto llama3 = make_config(64, 192, 2, 4, 1, 80, false);
  llama3.rope_theta = 500000;
  llama3.rope_scaling = {true, 8.0, 1.0, 4.0, 16};
  cases.push_back({"llama3_rope_scaling_mqa", llama3, "F32", 1, 1e-4});
  cases.push_back({"bf16_weights", make_config(64, 176, 2, 8, 4, 96, false), "BF16", 2, 1e-4});
  cases.push_back({"f16_weights", make_config(64, 176, 2, 8, 4, 96, true), "F16", 1, 1e-4});
  auto wide_head = make_config(64, 128, 2, 2, 1, 50, false);
  wide_head.head_dim = 48;  // head_dim * n_heads != dim, as some checkpoints have
  cases.push_back({"explicit_head_dim", wide_head, "F32", 1, 1e-4});
  // The other families, untied and tied, on the AVX-512 kernels (head_dim 16 or 32) and the
  // portable one (head_dim 8).
  auto family = [](reference::Family f, int dim, int heads, int kv_heads, bool tied) {
    auto c = make_config(dim, 160, 3, heads, kv_heads, 90, tied);
    c.family = f;
    c.rope_theta = f == reference::Family::kMistral ? 10000 : 1000000;
    return c;
  };
  auto mistral = family(reference::Family::kMistral, 64, 4, 2, false);
  mistral.sliding_window = 8;  // 40 tokens: most positions see only part of the context
  cases.push_back({"mistral_window", mistral, "F32", 1, 1e-4});
  auto mistral_portable = family(reference::Family::kMistral, 32, 4, 4, true);
  mistral_portable.sliding_window = 5;
  cases.push_back({"mistral_window_portable_tied", mistral_portable, "F32", 1, 1e-4});
  auto mistral_full = family(reference::Family::kMistral, 64, 4, 2, false);  // sliding_window null
  cases.push_back({"mistral_no_window", mistral_full, "F32", 1, 1e-4});
  cases.push_back(
      {"qwen2_biases", family(reference::Family::kQwen2, 64, 4, 2, false), "F32", 2, 1e-4});
  cases.push_back(
      {"qwen2_biases_tied", family(reference::Family::kQwen2, 64, 2, 1, true), "BF16", 1, 1e-4});
  auto qwen3 = family(reference::Family::kQwen3, 64, 4, 2, false);
  qwen3.head_dim = 32;  // q_proj 64 -> 128: head_dim * heads != dim, as Qwen3 has
  cases.push_back({"qwen3_qk_norm", qwen3, "F32", 1, 1e-4});
  auto qwen3_tied = family(reference::Family::kQwen3, 64, 4, 4, true);
  qwen3_tied.head_dim = 8;
  cases.push_back({"qwen3_qk_norm_tied_portable", qwen3_tied, "F32", 1, 1e-4});
  return cases;
}

class RandomModelParity : public ::testing::TestWithParam<RandomCase> {};

TEST_P(RandomModelParity, LogitsMatchReferenceAtEveryPosition) {
  RandomCase c = GetParam();
  const std::string dir = testing_util::fresh_dir(std::string("parity_") + c.name);
  reference::Weights w = reference::random_weights(c.config, 1234);
  reference::write_hf_model(dir, c.config, &w, c.dtype, c.n_shards);
  std::vector<int> tokens;
  for (int i = 0; i < 40; ++i) tokens.push_back((i * 37 + 11) % c.config.vocab_size);
  auto expected = reference::forward_all(c.config, w, tokens, reference::RopeLayout::kRotateHalf);

  Candidate candidate(dir);
  EXPECT_LT(max_abs_diff(expected, candidate.all_logits(tokens, 40)), c.tolerance) << c.name;
}

INSTANTIATE_TEST_SUITE_P(Shapes, RandomModelParity, ::testing::ValuesIn(random_cases()),
                         [](const auto& param_info) { return std::string(param_info.param.name); });

// Chunked prefill and token-by-token decode must give the logits of a single full prefill.
TEST(ForwardParity, ChunkingDoesNotChangeLogits) {
  const std::string dir = testing_util::fresh_dir("parity_chunks");
  auto config = make_config(64, 160, 2, 8, 2, 70, false);
  reference::Weights w = reference::random_weights(config, 7);
  reference::write_hf_model(dir, config, &w, "F32");
  std::vector<int> tokens;
  for (int i = 0; i < 30; ++i) tokens.push_back((i * 13 + 5) % 70);
  Candidate candidate(dir);
  auto whole = candidate.all_logits(tokens, 30);
  for (int chunk : {1, 7}) {
    auto chunked = candidate.all_logits(tokens, chunk);
    double worst = 0;
    for (size_t p = 0; p < whole.size(); ++p)
      for (size_t v = 0; v < whole[p].size(); ++v)
        worst = std::max(worst, double(std::abs(whole[p][v] - chunked[p][v])));
    EXPECT_LT(worst, 1e-5) << "chunk " << chunk;
  }
}

// Mistral's sliding window whatever the step's shape: one token a step (decode), short chunks, and
// one long prefill run (the GEMM path); the expected logits are the reference's with the window,
// which differ from full attention's, so an engine that ignores the window fails.
TEST(ForwardParity, SlidingWindowHoldsInEveryChunking) {
  const std::string dir = testing_util::fresh_dir("parity_window");
  auto config = make_config(64, 160, 2, 4, 2, 70, false);
  config.family = reference::Family::kMistral;
  config.sliding_window = 6;
  reference::Weights w = reference::random_weights(config, 21);
  reference::write_hf_model(dir, config, &w, "F32");
  std::vector<int> tokens;
  for (int i = 0; i < 48; ++i) tokens.push_back((i * 29 + 3) % 70);
  const auto expected =
      reference::forward_all(config, w, tokens, reference::RopeLayout::kRotateHalf);
  auto full = config;
  full.sliding_window = 0;
  const auto unwindowed =
      reference::forward_all(full, w, tokens, reference::RopeLayout::kRotateHalf);
  std::vector<std::vector<float>> as_float;
  for (const auto& row : unwindowed) as_float.emplace_back(row.begin(), row.end());
  ASSERT_GT(max_abs_diff(expected, as_float), 0.1) << "the window must change these logits";
  Candidate candidate(dir);
  for (int chunk : {1, 2, 7, 48})
    EXPECT_LT(max_abs_diff(expected, candidate.all_logits(tokens, chunk)), 1e-4)
        << "chunk " << chunk;
}

// Two sequences sharing a step must not see each other: each gets its solo logits.
TEST(ForwardParity, SequencesInOneStepAreIndependent) {
  const std::string dir = testing_util::fresh_dir("parity_batch");
  auto config = make_config(64, 160, 2, 8, 4, 70, true);
  reference::Weights w = reference::random_weights(config, 9);
  reference::write_hf_model(dir, config, &w, "F32");
  const std::vector<int> a = {1, 5, 9, 13, 17, 21}, b = {1, 60, 2, 33};
  Candidate candidate(dir);
  auto solo_a = candidate.all_logits(a, 6);
  auto solo_b = candidate.all_logits(b, 4);

  const int slot_a = 1, slot_b = 2;
  candidate.reserve(slot_a, 8);
  candidate.reserve(slot_b, 8);
  StepBatch step;
  for (size_t i = 0; i < a.size(); ++i) {
    step.tokens.push_back(a[i]);
    step.positions.push_back(static_cast<int>(i));
    step.slots.push_back(slot_a);
  }
  for (size_t i = 0; i < b.size(); ++i) {
    step.tokens.push_back(b[i]);
    step.positions.push_back(static_cast<int>(i));
    step.slots.push_back(slot_b);
  }
  step.logit_rows = {5, 9};
  Tensor logits = candidate.model.forward(step, candidate.cache);
  for (int v = 0; v < 70; ++v) {
    EXPECT_NEAR(logits.as<float>()[v], solo_a[5][static_cast<size_t>(v)], 1e-5);
    EXPECT_NEAR(logits.as<float>()[70 + v], solo_b[3][static_cast<size_t>(v)], 1e-5);
  }
}

}  // namespace
}  // namespace tpllama
