// resolve(): the engine's flags, the model, the layout and every rank's memory into the
// EngineConfig the engine runs with — each value from the closed form of its rule, and each flag
// that cannot work refused by name.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "core/error.h"
#include "model/step_batch.h"
#include "session/engine_flags.h"
#include "test_util.h"

namespace tpllama {
namespace {

using testing_util::error_of;

LlamaConfig model(int context = 4096) {
  LlamaConfig c;
  c.max_seq_len = context;
  c.n_layers = 8;
  return c;
}

Topology layout(int tp, int pp) {
  LayoutRequest request;
  request.tp = tp;
  request.pp = pp;
  NodeInfo nodes;
  nodes.ranks_on_node = tp * pp;
  nodes.node_of_rank.assign(static_cast<size_t>(tp * pp), 0);
  nodes.host_of_rank.assign(static_cast<size_t>(tp * pp), "node0");
  return make_topology(request, nodes, tp * pp, 0, 8);
}

constexpr uint64_t kMiB = uint64_t{1} << 20;

// A CPU rank of `free` bytes whose KV cache takes 1 KiB a position.
RankMemory cpu(uint64_t free, int sharers = 1) {
  return {false, 1024, free, sharers};
}

TEST(EngineFlags, ResolveGivesEveryValueByItsRule) {
  EngineFlags f;
  f.max_seqs = 8;
  f.max_batch_tokens = 512;
  const std::vector<RankMemory> memory = {cpu(1024 * kMiB), cpu(1024 * kMiB)};
  const EngineConfig e = resolve(f, model(), layout(1, 2), memory);
  EXPECT_EQ(e.max_seqs, 8);
  EXPECT_EQ(e.max_batch_tokens, 512);
  EXPECT_EQ(e.max_logit_rows, max_logit_rows(8, 512));
  EXPECT_EQ(e.groups, 2) << "one group in flight per pipeline stage";
  EXPECT_EQ(e.context, 4096);
  EXPECT_EQ(e.kv_block_size, 64) << "a CPU's default";
  // 80% of 1 GiB over 64 KiB blocks is 13107 blocks, more than 8 full contexts take (8 × 64).
  EXPECT_EQ(e.kv_blocks, 8 * 64);
  EXPECT_TRUE(e.prefix_caching);
  EXPECT_EQ(e.grace_seconds, 90);
}

TEST(EngineFlags, TheBlockSizeIsTheSmallestDefaultOverRanksUnlessGiven) {
  EngineFlags f;
  std::vector<RankMemory> memory = {cpu(1024 * kMiB), {true, 1024, 1024 * kMiB, 1}};
  EXPECT_EQ(resolve(f, model(), layout(2, 1), memory).kv_block_size, 16)
      << "a GPU rank beside a CPU rank: 16 for both";
  f.max_model_len = 40;
  memory[1].gpu = false;
  EXPECT_EQ(resolve(f, model(), layout(2, 1), memory).kv_block_size, 40)
      << "never more than the context";
  f.kv_block_size = 8;
  EXPECT_EQ(resolve(f, model(), layout(2, 1), memory).kv_block_size, 8);
}

TEST(EngineFlags, TheContextIsTheModelsOrLessByFlagOrCommand) {
  EngineFlags f;
  EXPECT_EQ(resolve_context(f, model(2048)), 2048);
  f.max_model_len = 1000;
  EXPECT_EQ(resolve_context(f, model(2048)), 1000);
  f.command_context = 300;
  EXPECT_EQ(resolve_context(f, model(2048)), 300) << "perplexity's window";
  f.command_context = 5000;
  EXPECT_EQ(resolve_context(f, model(2048)), 1000);
  f.max_model_len = 4096;
  EXPECT_EQ(error_of([&] { resolve_context(f, model(2048)); }),
            "--max-model-len 4096 exceeds the model's context of 2048 tokens "
            "(max_position_embeddings)");
}

TEST(EngineFlags, ThePoolIsTheSmallestRanksShare) {
  EngineFlags f;
  f.max_seqs = 64;
  f.max_model_len = 4096;
  f.kv_block_size = 16;
  // 16 KiB blocks: rank 1 has 100 MiB shared by 2 ranks, 80% of 50 MiB = 2560 blocks.
  const std::vector<RankMemory> memory = {cpu(1024 * kMiB), cpu(100 * kMiB, 2)};
  EXPECT_EQ(resolve(f, model(), layout(2, 1), memory).kv_blocks, 2560);
  f.kv_cache_memory = "8MiB";
  EXPECT_EQ(resolve(f, model(), layout(2, 1), memory).kv_blocks, 512) << "8 MiB of 16 KiB";
}

TEST(EngineFlags, FlagsThatCannotWorkAreRefusedByName) {
  EngineFlags f;
  const std::vector<RankMemory> memory = {cpu(1024 * kMiB), cpu(64 * kMiB)};
  f.max_seqs = 0;
  EXPECT_EQ(error_of([&] { resolve(f, model(), layout(2, 1), memory); }),
            "--max-seqs must be at least 1, got 0");
  f.max_seqs = 4;
  f.max_batch_tokens = 0;
  EXPECT_EQ(error_of([&] { resolve(f, model(), layout(2, 1), memory); }),
            "--max-batch-tokens must be at least 1, got 0");
  f.max_batch_tokens = 64;
  f.max_seqs = 64;
  f.kv_cache_memory = "100MiB";
  EXPECT_NE(error_of([&] {
              resolve(f, model(), layout(2, 1), memory);
            }).find("--kv-cache-memory 100MiB: rank 1 would hold a KV cache of"),
            std::string::npos);
  f.kv_cache_memory = "1MiB";  // 16 blocks of 64: not one 4096-token sequence
  f.context_flag = "--context-len";
  EXPECT_EQ(error_of([&] { resolve(f, model(), layout(2, 1), memory); }),
            "the KV cache holds 16 blocks of 64 tokens on the smallest rank, less than one "
            "4096-token sequence needs (64): give more --kv-cache-memory or a smaller "
            "--context-len");
  f.kv_cache_memory = "lots";
  EXPECT_NE(error_of([&] { resolve(f, model(), layout(2, 1), memory); }), "");
}

}  // namespace
}  // namespace tpllama
