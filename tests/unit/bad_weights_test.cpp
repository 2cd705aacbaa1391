// Non-finite numbers in a model: a NaN or Inf weight is refused at load naming the tensor and the
// element; a checkpoint with tensors config.json does not name is refused before any weight is
// read; a logit row holding NaN or +Inf becomes kNonFiniteRow (never token 0, never a failed draw)
// and ends only its own request, with an error record.
#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "engine/block_allocator.h"
#include "engine/scheduler.h"
#include "engine/sequence.h"
#include "engine_test_util.h"
#include "llama_reference.h"
#include "model/checkpoint.h"
#include "model/llama_model.h"
#include "model/vocab_head.h"
#include "parallel/self_comm.h"
#include "test_util.h"

namespace tpllama {
namespace {

namespace fs = std::filesystem;

reference::Config tiny() {
  return testing_util::tiny_reference_config();
}

class BadWeights : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = (fs::temp_directory_path() / ("tpllama_bad_weights_" + std::to_string(::getpid())))
               .string();
    fs::remove_all(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  // Loads the model in dir_ on one CPU rank; returns the error, "" when it loaded.
  std::string load_error() {
    try {
      Checkpoint ckpt(dir_);
      SelfCommunicator comm;
      LlamaModel model(ckpt, Topology::single(ckpt.config().n_layers), comm, DeviceContext{},
                       ModelLimits{8, 8});
    } catch (const Error& e) {
      return e.what();
    }
    return "";
  }

  std::string dir_;
};

TEST_F(BadWeights, NanInQProjIsRefusedNamingTensorAndElement) {
  const reference::Config c = tiny();
  reference::Weights w = reference::random_weights(c, 5);
  w.layers[1].wq[11 * 16 + 7] = std::numeric_limits<double>::quiet_NaN();
  reference::write_hf_model(dir_, c, &w, "BF16");
  const std::string err = load_error();
  EXPECT_NE(
      err.find("model.layers.1.self_attn.q_proj.weight element 183 (row 11, column 7) is NaN"),
      std::string::npos)
      << err;
}

TEST_F(BadWeights, InfInANormIsRefusedNamingTheElement) {
  const reference::Config c = tiny();
  reference::Weights w = reference::random_weights(c, 5);
  w.layers[0].ffn_norm[3] = -std::numeric_limits<double>::infinity();
  reference::write_hf_model(dir_, c, &w, "F32");
  const std::string err = load_error();
  EXPECT_NE(err.find("model.layers.0.post_attention_layernorm.weight element 3 is -Inf"),
            std::string::npos)
      << err;
}

TEST_F(BadWeights, FiniteModelLoads) {
  const reference::Config c = tiny();
  reference::Weights w = reference::random_weights(c, 5);
  reference::write_hf_model(dir_, c, &w, "F32");
  EXPECT_EQ(load_error(), "");
}

TEST_F(BadWeights, ConfigWithFewerLayersThanTheCheckpointIsRefused) {
  reference::Config c = tiny();
  c.n_layers = 4;
  reference::Weights w = reference::random_weights(c, 5);
  reference::write_hf_model(dir_, c, &w, "F32");
  nlohmann::json config;
  std::ifstream(dir_ + "/config.json") >> config;
  config["num_hidden_layers"] = 2;
  std::ofstream(dir_ + "/config.json") << config.dump();
  const std::string err = load_error();
  EXPECT_NE(err.find("checkpoint has tensors config.json does not account for: model.layers.2.*, "
                     "model.layers.3.*"),
            std::string::npos)
      << err;
  EXPECT_NE(err.find("num_hidden_layers 2"), std::string::npos) << err;
}

// The head of a finite model, fed hand-made logits.
TEST_F(BadWeights, NonFiniteLogitRowsAreMarkedNotDrawn) {
  const reference::Config c = tiny();
  reference::Weights w = reference::random_weights(c, 5);
  reference::write_hf_model(dir_, c, &w, "F32");
  Checkpoint ckpt(dir_);
  SelfCommunicator comm;
  LlamaModel model(ckpt, Topology::single(c.n_layers), comm, DeviceContext{}, ModelLimits{8, 8});
  VocabParallelHead head(model, comm);
  std::vector<float> logits(static_cast<size_t>(4 * c.vocab_size), 0.0f);
  auto at = [&](int row, int col) -> float& {
    return logits[static_cast<size_t>(row * c.vocab_size + col)];
  };
  at(0, 9) = 5.0f;                                     // finite: token 9
  at(1, 20) = std::nanf("");                           // NaN, greedy
  at(2, 3) = std::numeric_limits<float>::infinity();   // +Inf, sampled
  at(3, 0) = -std::numeric_limits<float>::infinity();  // -Inf is a masked logit, not a fault
  at(3, 11) = 1.0f;
  std::vector<RowSampling> rows(4);
  rows[2].params.temperature = 0.8;
  rows[2].uniform = 0.5;
  rows[1].logprobs = 2;
  const SampledTokens out =
      head.sample(rows, {}, {}, Tensor(logits.data(), DType::kF32, {4, c.vocab_size}));
  EXPECT_EQ(out.tokens, (std::vector<int32_t>{9, kNonFiniteRow, kNonFiniteRow, 11}));
}

TEST(NonFiniteRow, EndsOnlyItsOwnRequestWithAnError) {
  std::vector<std::unique_ptr<Sequence>> seqs;
  for (int id = 0; id < 2; ++id) {
    Request r;
    r.id = id;
    r.line = static_cast<size_t>(id) + 1;
    r.max_tokens = 4;
    seqs.push_back(testing_util::make_sequence(r, {1, 5, 6}, 0, static_cast<uint64_t>(id)));
  }
  BlockAllocator blocks(4, 4, 2);
  Scheduler scheduler({64, 8, 2, 1}, blocks);
  testing_util::OutputSide out(StopRules{{2}, 64});
  Group g;
  for (auto& s : seqs) {
    out.open(*s);
    scheduler.admit(*s);
    s->start_step(3);
    g.members.push_back(s.get());
    g.rows.push_back(s.get());
  }
  SampledRows rows;
  rows.tokens = {kNonFiniteRow, 7};
  out.apply(scheduler, g, rows);
  EXPECT_STREQ(finish_reason_name(seqs[0]->finish_reason()), "error");
  const Result bad = out.record(*seqs[0]);
  EXPECT_EQ(bad.error,
            "the model's logits for this request are not finite (NaN or Inf) at position 2: its "
            "activations overflowed or its weights hold a NaN or Inf");
  EXPECT_EQ(bad.line, 1u);
  EXPECT_NE(seqs[1]->state(), SequenceState::kFinished);
  EXPECT_EQ(seqs[1]->tokens().back(), 7);
}

}  // namespace
}  // namespace tpllama
