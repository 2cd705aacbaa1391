// The tpllama binary on a GPU (label gpu): stories260K greedy on the GPU against the reference
// generations of run.c, and TP / PP layouts sharing one GPU (--comm mpi --share-gpus) against the
// single-rank GPU run. Skips, saying so, without a GPU.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <string>
#include <vector>

#include "cli_util.h"
#include "ops/ops.h"

namespace {

using namespace tpllama::cli_test;
using nlohmann::json;

class GpuStories : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (tpllama::ops::gpu_count() == 0) return;
    ConvertedStories c = ConvertedStories::make("gpu_e2e");
    stories_ = c.stories;
    if (stories_.empty()) return;
    work_ = c.work;
    model_ = c.model;
    convert_ = c.convert;
    references_ = read_jsonl(stories_ + "/reference_greedy.jsonl");
    input_ = work_ + "/in.jsonl";
    write_reference_prompts(input_, references_, [](size_t i) { return json("ref" + std::to_string(i)); });
  }
  static void TearDownTestSuite() {
    if (!work_.empty()) fs::remove_all(work_);
  }
  void SetUp() override {
    if (tpllama::ops::gpu_count() == 0) GTEST_SKIP() << "no GPU visible: the GPU end-to-end tests need one (label gpu)";
    if (stories_.empty()) GTEST_SKIP() << "../shared/models/stories260K not found (set TPLLAMA_SHARED_DIR)";
    ASSERT_EQ(convert_.exit_code, 0) << convert_.output;
  }

  static CommandResult run(const std::string& output, const std::string& flags, int ranks = 0) {
    const std::string launcher = ranks > 0 ? "mpirun -np " + std::to_string(ranks) + " --oversubscribe " : "";
    return run_shell(launcher + binary() + " run --model " + model_ + " --input " + input_ + " --output " + output +
                     " --device cuda " + flags);
  }
  static std::string expected_text(size_t i) {
    const json& r = references_[i];
    return r["output"].get<std::string>().substr(r["prompt"].get<std::string>().size());
  }
  static std::vector<std::string> texts(const std::string& path) {
    auto records = by_id(read_jsonl(path));
    std::vector<std::string> out;
    for (size_t i = 0; i < references_.size(); ++i) {
      const json& r = records[json("ref" + std::to_string(i)).dump()];
      out.push_back(r.is_null() ? "<missing>" : r["text"].get<std::string>());
    }
    return out;
  }

  static std::string stories_, work_, model_, input_;
  static CommandResult convert_;
  static std::vector<json> references_;
};

std::string GpuStories::stories_, GpuStories::work_, GpuStories::model_, GpuStories::input_;
CommandResult GpuStories::convert_;
std::vector<json> GpuStories::references_;

// f32 weights on the GPU: cuBLAS in fp32 (no TF32) and fp32 kernels differ from run.c only in
// summation order, so the greedy text is the reference text.
TEST_F(GpuStories, GreedyF32ReproducesReferenceText) {
  const std::string out = work_ + "/f32.jsonl";
  CommandResult r = run(out, "--dtype f32");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("device: rank 0 on cuda:0"), std::string::npos) << r.output;
  const std::vector<std::string> got = texts(out);
  for (size_t i = 0; i < references_.size(); ++i)
    EXPECT_EQ(got[i], expected_text(i)) << "prompt " << references_[i]["prompt"];
}

// bf16 weights (the GPU default) and bf16 GEMM inputs move logits by about 1e-2, so the text may
// part from the f32 reference where two tokens nearly tie. Not yet calibrated on a GPU: the bounds
// are the CPU bf16 test's (400 identical characters, all records but one identical) quartered.
TEST_F(GpuStories, Bf16FollowsReferenceTextUntilANearTie) {
  const std::string out = work_ + "/bf16.jsonl";
  CommandResult r = run(out, "");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("weights bf16"), std::string::npos) << r.output;
  const std::vector<std::string> got = texts(out);
  size_t identical = 0;
  for (size_t i = 0; i < references_.size(); ++i) {
    const std::string want = expected_text(i);
    size_t same = 0;
    while (same < want.size() && same < got[i].size() && want[same] == got[i][same]) ++same;
    identical += got[i] == want;
    EXPECT_GE(same, std::min<size_t>(want.size(), 100)) << "prompt " << references_[i]["prompt"];
  }
  EXPECT_GE(4 * identical, references_.size()) << identical << " of " << references_.size() << " identical";
}

// Decode steps replayed as CUDA graphs (the default) against every kernel launched (--eager):
// the same bf16 text, record for record, and the log says which ran.
TEST_F(GpuStories, CudaGraphsGiveTheEagerText) {
  const std::string graphs = work_ + "/graphs.jsonl", eager = work_ + "/eager.jsonl";
  CommandResult rg = run(graphs, "--max-seqs 3");
  ASSERT_EQ(rg.exit_code, 0) << rg.output;
  EXPECT_NE(rg.output.find("decode steps as CUDA graphs"), std::string::npos) << rg.output;
  EXPECT_EQ(rg.output.find("CUDA graphs off"), std::string::npos) << rg.output;
  CommandResult re = run(eager, "--max-seqs 3 --eager");
  ASSERT_EQ(re.exit_code, 0) << re.output;
  EXPECT_NE(re.output.find("decode steps launched eagerly"), std::string::npos) << re.output;
  const std::vector<std::string> want = texts(eager), got = texts(graphs);
  for (size_t i = 0; i < want.size(); ++i) EXPECT_EQ(got[i], want[i]) << "prompt " << references_[i]["prompt"];
}

struct Layout {
  int tp, pp;
};

class GpuLayouts : public GpuStories, public ::testing::WithParamInterface<Layout> {};

// Several ranks on one GPU, their tensors staged through host memory and MPI: the same text as one
// rank on the GPU, record for record.
TEST_P(GpuLayouts, SharingOneGpuMatchesTheSingleRank) {
  const Layout l = GetParam();
  const std::string single = work_ + "/single.jsonl", shared = work_ + "/layout.jsonl";
  CommandResult r1 = run(single, "--dtype f32");
  ASSERT_EQ(r1.exit_code, 0) << r1.output;
  CommandResult r = run(shared,
                        "--dtype f32 --comm mpi --share-gpus --tp " + std::to_string(l.tp) + " --pp " + std::to_string(l.pp),
                        l.tp * l.pp);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("ranks share its GPU"), std::string::npos) << r.output;
  const std::vector<std::string> want = texts(single), got = texts(shared);
  for (size_t i = 0; i < want.size(); ++i) EXPECT_EQ(got[i], want[i]) << "prompt " << references_[i]["prompt"];
}

INSTANTIATE_TEST_SUITE_P(OneGpu, GpuLayouts, ::testing::Values(Layout{2, 1}, Layout{1, 2}, Layout{2, 2}),
                         [](const auto& param_info) {
                           return "tp" + std::to_string(param_info.param.tp) + "_pp" + std::to_string(param_info.param.pp);
                         });

// More ranks than GPUs without --share-gpus: every rank exits, non-zero, naming the ranks and the
// way out.
TEST_F(GpuStories, MoreRanksThanGpusIsRefusedUnlessShared) {
  const int ranks = tpllama::ops::gpu_count() + 1;
  CommandResult r = run(work_ + "/refused.jsonl", "", ranks);
  EXPECT_NE(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("would share GPU"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("--share-gpus --comm mpi"), std::string::npos) << r.output;
}

}  // namespace
