// Hostile chat templates through the binary (issue 28): nesting that used to crash the parser is
// refused at load naming its line, for chat and plain-prompt jobs alike; renders that would run
// for hours or take gigabytes become their request's error record naming the budget while the
// good requests of the file are answered.
#include <signal.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>

#include "cli_util.h"

namespace {

using namespace tpllama::cli_test;
namespace fs = std::filesystem;
using nlohmann::json;

class HostileTemplates : public StoriesSuite<HostileTemplates> {
 public:
  static constexpr const char* kTag = "hostile_templates";

 protected:
  std::string write_file(const std::string& name, const std::string& text) {
    const std::string path = work_ + "/" + name;
    std::ofstream(path) << text;
    return path;
  }
  // The command in the background, its own process group, output to log_.
  pid_t start(const std::string& name, const std::string& args) {
    log_ = work_ + "/" + name + ".log";
    return spawn_shell(binary() + " " + args + " >" + log_ + " 2>&1", /*new_group=*/true);
  }

  std::string log_;
};

std::string repeat(const std::string& s, int n) {
  std::string out;
  for (int i = 0; i < n; ++i) out += s;
  return out;
}

json chat(const std::string& id, const std::string& mode) {
  return {{"id", id},
          {"messages", json::array({{{"role", "user"}, {"content", "Once upon a time"}}})},
          {"chat_template_kwargs", {{"mode", mode}}},
          {"max_tokens", 2}};
}

// The modes each make one request hostile; every other request renders its messages.
constexpr const char* kModalTemplate =
    "{% if mode == 'loops' %}{% for i in range(100000) %}{% for j in range(100000) %}{% endfor "
    "%}{% endfor %}"
    "{% elif mode == 'indent' %}{{ messages|tojson(indent=1000000000) }}"
    "{% elif mode == 'string' %}{% set ns = namespace(s='ab') %}"
    "{% for i in range(64) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}"
    "{% elif mode == 'list' %}{% set ns = namespace(l=[1]) %}"
    "{% for i in range(64) %}{% set ns.l = ns.l + ns.l %}{% endfor %}"
    "{% elif mode == 'divide' %}{{ (-9223372036854775807 - 1) // -1 }}"
    "{% elif mode == 'modulo' %}{{ (-9223372036854775807 - 1) % -1 }}"
    "{% endif %}{% for m in messages %}{{ m.content }}{% endfor %}";

// 10 000 parentheses in a branch that never runs: `tokenize` and `run`, chat and plain-prompt jobs,
// the template from --chat-template or from tokenizer_config.json, stop at load naming the line
// (they used to die of SIGSEGV with no record).
TEST_F(HostileTemplates, DeepNestingIsRefusedAtLoadNamingTheLine) {
  const std::string deep = "{% if false %}\n\n{{ " + repeat("(", 10000) + "1" + repeat(")", 10000) +
                           " }}{% endif %}{{ messages }}";
  const std::string file = write_file("deep.jinja", deep);
  const std::string model = work_ + "/deep_model";
  fs::copy(model_, model, fs::copy_options::recursive | fs::copy_options::overwrite_existing);
  json config = json::object();
  if (fs::exists(model + "/tokenizer_config.json"))
    config = json::parse(std::ifstream(model + "/tokenizer_config.json"));
  config["chat_template"] = deep;
  std::ofstream(model + "/tokenizer_config.json") << config.dump();
  const std::string plain = write_file("plain.txt", "Once upon a time\n");
  const std::string chats = write_file("chats.jsonl", chat("c", "none").dump() + "\n");
  const std::string runs[] = {
      "tokenize --model " + model_ + " --chat-template " + file + " --input " + chats +
          " --output " + work_ + "/d1.jsonl",
      "run --model " + model_ + " --chat-template " + file + " --input " + chats + " --output " +
          work_ + "/d2.jsonl",
      "tokenize --model " + model + " --input " + plain + " --output " + work_ + "/d3.jsonl",
      "run --model " + model + " --input " + plain + " --output " + work_ +
          "/d4.jsonl --max-tokens 2",
  };
  for (const std::string& args : runs) {
    const CommandResult r = run_shell(binary() + " " + args);
    EXPECT_EQ(r.exit_code, 1) << args << "\n" << r.output;
    EXPECT_NE(r.output.find("line 3: nesting deeper than 200 levels"), std::string::npos)
        << args << "\n"
        << r.output;
  }
}

// One file, good requests between hostile ones: each hostile render is its own error record naming
// the budget (or the overflow), every good request is answered, and the job stays under 1 GiB.
TEST_F(HostileTemplates, RendersPastTheBudgetAreErrorRecordsAndTheRestIsAnswered) {
  const std::string file = write_file("modal.jinja", kModalTemplate);
  std::string lines;
  const char* modes[] = {"loops", "indent", "string", "list", "divide", "modulo"};
  for (const char* mode : modes)
    lines +=
        chat(std::string("good-") + mode, "none").dump() + "\n" + chat(mode, mode).dump() + "\n";
  const std::string input = write_file("modal.jsonl", lines);
  for (const std::string command : {"tokenize", "run"}) {
    const std::string out = work_ + "/modal_" + command + ".jsonl";
    const pid_t pid =
        start("modal_" + command, command + " --model " + model_ + " --chat-template " + file +
                                      " --input " + input + " --output " + out);
    const ProcessExit e = wait_for_exit(pid, log_, std::chrono::seconds(240));
    ASSERT_EQ(e.code, 0) << command << "\n" << e.log;
    EXPECT_LT(e.max_rss_kib, 1L << 20) << command << ": peak RSS " << e.max_rss_kib << " KiB";
    const auto records = by_id(read_jsonl(out));
    ASSERT_EQ(records.size(), 12u) << command;
    for (const char* mode : modes) {
      const json& good = records.at(json(std::string("good-") + mode).dump());
      EXPECT_FALSE(good.contains("error")) << command << ": " << good.dump();
      const json& bad = records.at(json(mode).dump());
      const std::string m = mode;
      if (m == "modulo") {  // Python's -2**63 % -1 is 0: no error
        EXPECT_FALSE(bad.contains("error")) << command << ": " << bad.dump();
        continue;
      }
      ASSERT_TRUE(bad.contains("error")) << command << ": " << bad.dump();
      const std::string error = bad["error"];
      const std::string expected = m == "loops"    ? "render budget of"
                                   : m == "divide" ? "integer overflow"
                                                   : "render budget of 268435456 bytes";
      EXPECT_NE(error.find(expected), std::string::npos) << command << " " << mode << ": " << error;
    }
  }
}

// SIGTERM while a template renders: the render hears it within a few thousand steps, the command
// exits 75 (stopped early, --resume continues) and the records written stay. Each request here
// renders until the step budget ends it, so the first record shows the job is running; before the
// budget and the signal check, no record ever came and tokenize ignored SIGTERM for hours.
TEST_F(HostileTemplates, AStopSignalEndsALongRenderAndTheJobExits75) {
  const std::string file = write_file("loops.jinja", kModalTemplate);
  std::string lines;
  constexpr int kRequests = 40;
  for (int i = 0; i < kRequests; ++i)
    lines += chat("loops-" + std::to_string(i), "loops").dump() + "\n";
  const std::string input = write_file("loops.jsonl", lines);
  for (const std::string command : {"tokenize", "run"}) {
    const std::string out = work_ + "/loops_" + command + ".jsonl";
    log_ = work_ + "/loops_" + command + ".log";
    const pid_t pid =
        spawn_shell(binary() + " " + command + " --model " + model_ + " --chat-template " + file +
                        " --input " + input + " --output " + out + " >" + log_ + " 2>&1",
                    /*new_group=*/true);
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
    while (read_jsonl(out).empty() && std::chrono::steady_clock::now() < deadline)
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    const size_t before = read_jsonl(out).size();
    ::kill(-pid, SIGTERM);
    const ProcessExit e = wait_for_exit(pid, log_, std::chrono::seconds(60));
    ASSERT_GE(before, 1u) << command << ": no render ended within 120 s\n" << e.log;
    EXPECT_EQ(e.code, 75) << command << "\n" << e.log;
    EXPECT_LT(e.seconds, 30) << command;
    const auto records = read_jsonl(out);
    EXPECT_LT(records.size(), static_cast<size_t>(kRequests))
        << command << ": the stop came after every render";
    for (const json& r : records)
      EXPECT_NE(r.value("error", ""), "") << command << ": " << r.dump();
  }
}

}  // namespace
