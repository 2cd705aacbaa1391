// --dtype int8 through the binary on stories260K, against its own f32 run as the oracle:
// perplexity within 1%, and greedy texts that part from f32's only where f32 itself hesitates
// between two tokens (a near-tie), measured by f32's own log-probabilities.
#include <cmath>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "cli_util.h"

namespace {

using namespace tpllama::cli_test;
using nlohmann::json;

class Int8 : public StoriesSuite<Int8> {
 public:
  static constexpr const char* kTag = "int8";
};

TEST_F(Int8, PerplexityIsWithinOnePercentOfF32) {
  const std::string corpus = tpllama::shipped::models_dir() + "/demo/corpus.txt";
  double ppl[2] = {0, 0};
  const char* dtypes[2] = {"f32", "int8"};
  for (int i = 0; i < 2; ++i) {
    const std::string out = work_ + "/ppl_" + dtypes[i] + ".json";
    const CommandResult r = run_shell(binary() + " perplexity --model " + model_ + " --input " +
                                      corpus + " --dtype " + dtypes[i] + " --output " + out);
    ASSERT_EQ(r.exit_code, 0) << r.output;
    std::ifstream in(out);
    ppl[i] = json::parse(in).at("perplexity").get<double>();
  }
  EXPECT_LT(std::abs(ppl[1] / ppl[0] - 1), 0.01) << "f32 " << ppl[0] << ", int8 " << ppl[1];
  std::printf("perplexity of models/demo/corpus.txt: f32 %.5f, int8 %.5f (ratio %.5f)\n", ppl[0],
              ppl[1], ppl[1] / ppl[0]);
}

TEST_F(Int8, GreedyTextsPartFromF32OnlyAtNearTies) {
  const std::string in = work_ + "/refs.jsonl";
  {
    std::ofstream f(in);
    std::ifstream refs(stories_ + "/reference_greedy.jsonl");
    std::string line;
    for (int i = 0; std::getline(refs, line); ++i) {
      const json r = json::parse(line);
      const int n = r["steps"].get<int>() - static_cast<int>(r["prompt_tokens"].size()) + 1;
      f << json({{"id", i},
                 {"prompt", r["prompt"]},
                 {"max_tokens", n},
                 {"logprobs", 5},
                 {"ignore_eos", true}})
               .dump()
        << "\n";
    }
  }
  std::vector<json> runs[2];
  const char* dtypes[2] = {"f32", "int8"};
  for (int i = 0; i < 2; ++i) {
    const std::string out = work_ + "/greedy_" + dtypes[i] + ".jsonl";
    const CommandResult r = run_shell(binary() + " run --model " + model_ + " --input " + in +
                                      " --output " + out + " --ordered --dtype " + dtypes[i]);
    ASSERT_EQ(r.exit_code, 0) << r.output;
    runs[i] = read_jsonl(out);
  }
  ASSERT_EQ(runs[0].size(), 4u);
  ASSERT_EQ(runs[1].size(), 4u);
  int kept = 0;
  for (size_t i = 0; i < runs[0].size(); ++i) {
    const json& a = runs[0][i]["logprobs"];
    const json& b = runs[1][i]["logprobs"];
    if (a["tokens"] == b["tokens"]) {
      ++kept;
      continue;
    }
    size_t at = 0;
    while (a["tokens"][at] == b["tokens"][at]) ++at;
    const std::string theirs = b["tokens"][at];
    ASSERT_TRUE(a["top_logprobs"][at].contains(theirs))
        << "int8's token '" << theirs << "' at " << at << " is not among f32's five best";
    const double margin =
        a["token_logprobs"][at].get<double>() - a["top_logprobs"][at][theirs].get<double>();
    // stories260K's texts part at margins of 0.07 to 0.1 nats (scripts/bench/int8_accuracy.sh).
    EXPECT_LT(margin, 0.5) << "reference " << i << " parts at generated token " << at
                           << " where f32 was sure";
    std::printf("reference %zu: int8 parts at generated token %zu, f32 margin %.4f nats\n", i, at,
                margin);
  }
  EXPECT_GE(kept, 1) << "int8 kept none of the reference texts";
}

// An int8 checkpoint through the binary: `convert --dtype int8` writes it a third of the f32 size;
// `run` (--dtype auto) holds it as int8 and gives, log-probabilities included, what quantizing the
// f32 model at load gives, as does the one `convert --from hf` makes of the f32 directory, and so
// does `perplexity`; --dtype bf16 holds it dequantized.
TEST_F(Int8, AnInt8CheckpointRunsAsQuantizingTheF32ModelAtLoadDoes) {
  const std::string int8 = work_ + "/stories_int8";
  const CommandResult c = run_shell(binary() + " convert --from llama2c --checkpoint " + stories_ +
                                    "/stories260K.bin --tokenizer " + stories_ +
                                    "/tok512.model --dtype int8 --out " + int8);
  ASSERT_EQ(c.exit_code, 0) << c.output;
  const auto f32_bytes = fs::file_size(model_ + "/model.safetensors"),
             int8_bytes = fs::file_size(int8 + "/model.safetensors");
  EXPECT_LT(int8_bytes * 5, f32_bytes * 2) << "int8 " << int8_bytes << " bytes, f32 " << f32_bytes;
  const std::string in = work_ + "/ckpt_prompts.jsonl";
  std::ofstream(in)
      << json({{"id", 0}, {"prompt", "Once upon a time"}, {"max_tokens", 60}, {"logprobs", 3}})
             .dump()
      << "\n"
      << json({{"id", 1}, {"prompt", "The little dog"}, {"max_tokens", 60}, {"logprobs", 3}}).dump()
      << "\n";
  auto run = [&](const std::string& model, const std::string& flags, const std::string& name) {
    const CommandResult r =
        run_shell(binary() + " run --model " + model + " --input " + in + " --output " + work_ +
                  "/" + name + ".jsonl --ordered" + flags);
    EXPECT_EQ(r.exit_code, 0) << r.output;
    return std::pair{read_jsonl(work_ + "/" + name + ".jsonl"), r.output};
  };
  const auto [at_load, at_load_log] = run(model_, " --dtype int8", "at_load");
  const auto [stored, stored_log] = run(int8, "", "stored");
  ASSERT_EQ(at_load.size(), 2u);
  EXPECT_EQ(stored, at_load);
  EXPECT_NE(stored_log.find("weights int8"), std::string::npos) << stored_log;
  // The same from the converted f32 directory (`convert --from hf`).
  const std::string from_hf = work_ + "/stories_int8_from_hf";
  const CommandResult h = run_shell(binary() + " convert --from hf --model " + model_ +
                                    " --dtype int8 --out " + from_hf);
  ASSERT_EQ(h.exit_code, 0) << h.output;
  EXPECT_EQ(run(from_hf, "", "from_hf").first, at_load);
  const CommandResult no_model =
      run_shell(binary() + " convert --from hf --dtype int8 --out " + work_ + "/nothing");
  EXPECT_EQ(no_model.exit_code, 1);
  EXPECT_NE(no_model.output.find("convert --from hf needs --model DIR"), std::string::npos)
      << no_model.output;
  const auto [dequantized, dequantized_log] = run(int8, " --dtype bf16", "dequantized");
  ASSERT_EQ(dequantized.size(), 2u);
  EXPECT_NE(dequantized_log.find("the int8 checkpoint's matrices are held as bf16"),
            std::string::npos)
      << dequantized_log;

  const std::string corpus = tpllama::shipped::models_dir() + "/demo/corpus.txt";
  std::string ppl[2];
  int i = 0;
  for (const std::string& flags : {" --model " + model_ + " --dtype int8", " --model " + int8}) {
    const std::string out = work_ + "/ckpt_ppl_" + std::to_string(i) + ".json";
    const CommandResult r =
        run_shell(binary() + " perplexity --input " + corpus + " --output " + out + flags);
    ASSERT_EQ(r.exit_code, 0) << r.output;
    std::ifstream f(out);
    ppl[i++] = json::parse(f).at("perplexity").dump();
  }
  EXPECT_EQ(ppl[1], ppl[0])
      << "perplexity of the int8 checkpoint and of the f32 model quantized at load";
}

}  // namespace
