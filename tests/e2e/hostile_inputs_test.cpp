// Inputs that never end, never start, go quiet or ask too much, through the binary: an endless
// line costs a bounded amount and becomes an error record; a FIFO with no writer, and a stream that
// went quiet, are waited on with the stop signal heard; lines read are answered without waiting
// for the next; a prompt too long for the context is refused by its bytes; model files that are
// FIFOs or devices, hostfiles and corpora that never end, and a KV budget past the free memory are
// refused by name.
#include <fcntl.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>
#include <thread>

#include "cli_util.h"

namespace {

using namespace tpllama::cli_test;
namespace fs = std::filesystem;
using nlohmann::json;

class HostileInputs : public StoriesSuite<HostileInputs> {
 public:
  static constexpr const char* kTag = "hostile";

 protected:
  // tpllama run on `input` in the background, its own process group, output and log in work_.
  pid_t start_run(const std::string& name, const std::string& input,
                  const std::string& flags = "") {
    out_ = work_ + "/" + name + ".jsonl";
    log_ = work_ + "/" + name + ".log";
    fs::remove(out_);
    return spawn_shell(binary() + " run --model " + model_ + " --input " + input + " --output " +
                           out_ + " --max-tokens 8 --log-interval 0" + flags + " >" + log_ +
                           " 2>&1",
                       /*new_group=*/true);
  }
  std::string fifo(const std::string& name) {
    const std::string path = work_ + "/" + name;
    fs::remove(path);
    EXPECT_EQ(::mkfifo(path.c_str(), 0600), 0);
    return path;
  }
  static void write_line(int fd, const std::string& line) {
    const std::string text = line + "\n";
    ASSERT_EQ(::write(fd, text.data(), text.size()), static_cast<ssize_t>(text.size()));
  }

  std::string out_, log_;
};

// The user starts the job before the program that feeds its FIFO, then gives up: the job stops at
// once (it used to sit in open() or a read, deaf to the signal, until the stop deadline killed it).
TEST_F(HostileInputs, AFifoWithNoWriterStopsAtTheSignal) {
  const pid_t pid = start_run("no_writer", fifo("no_writer.fifo"));
  std::this_thread::sleep_for(std::chrono::milliseconds(2500));
  ::kill(pid, SIGTERM);
  const ProcessExit e = wait_for_exit(pid, log_, std::chrono::seconds(30));
  EXPECT_EQ(e.code, 75) << e.log;
  EXPECT_LT(e.seconds, 10) << e.log;
  EXPECT_NE(e.log.find("received signal 15"), std::string::npos) << e.log;
}

// A pipe that delivers a line and goes quiet: the line is answered at once, not when the next one
// comes; the wait is no stall (--stall-timeout 2 passes several times over) and a signal ends it.
TEST_F(HostileInputs, ALineIsAnsweredWithoutWaitingForTheNextAndAQuietStreamIsNoStall) {
  const std::string path = fifo("quiet.fifo");
  const pid_t pid = start_run("quiet", path, " --stall-timeout 2");
  const int w = open_fifo_writer(path);
  ASSERT_GE(w, 0) << "the run never opened its input";
  write_line(w, "Once upon a time");
  EXPECT_EQ(wait_for_lines(out_, 1, std::chrono::seconds(30)), 1u)
      << "the first line waited for a second one";
  std::this_thread::sleep_for(std::chrono::seconds(6));
  write_line(w, "The little dog");
  EXPECT_EQ(wait_for_lines(out_, 2, std::chrono::seconds(30)), 2u);
  std::this_thread::sleep_for(std::chrono::seconds(1));
  ::kill(pid, SIGINT);
  const ProcessExit e = wait_for_exit(pid, log_, std::chrono::seconds(30));
  ::close(w);
  EXPECT_EQ(e.code, 75) << e.log;
  EXPECT_LT(e.seconds, 10) << e.log;
  EXPECT_EQ(e.log.find("the job ends at --stall-timeout"), std::string::npos)
      << "waiting for input was taken for a hung rank:\n"
      << e.log;
  const std::vector<json> records = read_jsonl(out_);
  ASSERT_EQ(records.size(), 2u);
  EXPECT_EQ(records[0]["id"], 1);
  EXPECT_EQ(records[1]["id"], 2);
  EXPECT_NE(records[1]["finish_reason"], "error") << records[1];
}

// /dev/zero as the input: one endless line. It becomes an error record once past the line limit,
// memory stays near it (it used to grow by gigabytes), and a signal stops the run.
TEST_F(HostileInputs, AnEndlessLineIsAnErrorRecordAndCostsTheLimit) {
  const pid_t pid = start_run("zero", "/dev/zero");
  EXPECT_EQ(wait_for_lines(out_, 1, std::chrono::seconds(30)), 1u);
  std::this_thread::sleep_for(std::chrono::seconds(2));
  ::kill(pid, SIGINT);
  const ProcessExit e = wait_for_exit(pid, log_, std::chrono::seconds(30));
  EXPECT_EQ(e.code, 75) << e.log;
  EXPECT_LT(e.seconds, 10) << e.log;
  EXPECT_LT(e.max_rss_kib, 512L * 1024) << "peak memory " << e.max_rss_kib << " KiB";
  const std::vector<json> records = read_jsonl(out_);
  ASSERT_EQ(records.size(), 1u);
  EXPECT_EQ(records[0]["finish_reason"], "error");
  EXPECT_EQ(records[0]["error"],
            "line 1 is longer than 64 MiB, the limit for one request: not read (no context holds "
            "that much text)");
}

// A 10 MB prompt cannot fit stories260K's 512-token context whatever its tokens: it is refused by
// its length, untokenized (tokenizing it took 31 s and 1.4 GB), and the next line is answered.
TEST_F(HostileInputs, APromptLongerThanAnyContextIsRefusedByItsBytes) {
  const std::string in = work_ + "/huge.txt";
  {
    std::ofstream f(in);
    for (int i = 0; i < 1000000; ++i) f << "Once upon ";
    f << "\nThe little dog\n";
  }
  const CommandResult r =
      run_shell(binary() + " run --model " + model_ + " --input " + in + " --output " + work_ +
                "/huge.jsonl --max-tokens 4 --stall-timeout 6");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  const std::vector<json> records = read_jsonl(work_ + "/huge.jsonl");
  ASSERT_EQ(records.size(), 2u) << r.output;
  EXPECT_EQ(records[0]["finish_reason"], "error");
  const std::string error = records[0]["error"];
  EXPECT_EQ(error.rfind("line 1: the prompt is 10000000 bytes, so at least ", 0), 0u) << error;
  EXPECT_NE(
      error.find(
          " tokens with this tokenizer, more than the 512-token context holds: not tokenized"),
      std::string::npos)
      << error;
  EXPECT_NE(records[1]["finish_reason"], "error") << records[1];
}

// Model files must be regular files: a FIFO would be waited on forever (open() blocked, deaf to
// SIGTERM), /dev/zero read without end.
TEST_F(HostileInputs, ModelFilesThatAreFifosOrDevicesAreRefused) {
  const std::string in = work_ + "/one.txt";
  std::ofstream(in) << "Once upon a time\n";
  struct Case {
    std::string file, what;
    bool device;
  };
  for (const Case& c :
       {Case{"config.json", "model config", false},
        Case{"model.safetensors", "weights file", false}, Case{"config.json", "model config", true},
        Case{"tokenizer.model", "tokenizer file", true}}) {
    const std::string dir = work_ + "/bad_" + c.file + (c.device ? "_zero" : "_fifo");
    fs::remove_all(dir);
    fs::copy(model_, dir);
    fs::remove(dir + "/" + c.file);
    if (c.device)
      fs::create_symlink("/dev/zero", dir + "/" + c.file);
    else
      ASSERT_EQ(::mkfifo((dir + "/" + c.file).c_str(), 0600), 0);
    const CommandResult r = run_shell("timeout -s KILL 30 " + binary() + " run --model " + dir +
                                      " --input " + in + " --output " + dir + "/out.jsonl");
    EXPECT_EQ(r.exit_code, 1) << c.file << ": " << r.output;
    const std::string kind = c.device ? "is a character device, not a regular file"
                                      : "is a FIFO (named pipe), not a regular file";
    EXPECT_NE(r.output.find(c.what + " " + dir + "/" + c.file), std::string::npos) << r.output;
    EXPECT_NE(r.output.find(kind), std::string::npos) << r.output;
  }
}

// plan --hostfile and perplexity --input read streams (`<(...)`) as they come, up to a limit.
TEST_F(HostileInputs, EndlessHostfilesAndCorporaAreRefusedAtTheirLimit) {
  const CommandResult plan = run_shell("timeout -s KILL 60 " + binary() + " plan --model " +
                                       model_ + " --hostfile /dev/zero");
  EXPECT_EQ(plan.exit_code, 1) << plan.output;
  EXPECT_NE(plan.output.find("hostfile /dev/zero is over the 16 MiB limit for such a file"),
            std::string::npos)
      << plan.output;
  const CommandResult ppl = run_shell("timeout -s KILL 60 " + binary() + " perplexity --model " +
                                      model_ + " --input /dev/zero");
  EXPECT_EQ(ppl.exit_code, 1) << ppl.output;
  EXPECT_NE(ppl.output.find("corpus /dev/zero is over the 1 GiB limit for such a file"),
            std::string::npos)
      << ppl.output;
}

// perplexity on a FIFO nobody writes: a signal ends the wait (exit 75), where it used to hang.
TEST_F(HostileInputs, PerplexityWaitingOnAFifoStopsAtTheSignal) {
  const std::string path = fifo("corpus.fifo");
  log_ = work_ + "/ppl_fifo.log";
  const pid_t pid = spawn_shell(
      binary() + " perplexity --model " + model_ + " --input " + path + " >" + log_ + " 2>&1",
      /*new_group=*/true);
  std::this_thread::sleep_for(std::chrono::milliseconds(2500));
  ::kill(pid, SIGTERM);
  const ProcessExit e = wait_for_exit(pid, log_, std::chrono::seconds(30));
  EXPECT_EQ(e.code, 75) << e.log;
  EXPECT_LT(e.seconds, 10) << e.log;
  EXPECT_NE(e.log.find("received signal 15 while reading corpus " + path), std::string::npos)
      << e.log;
}

// --kv-cache-memory asks for more than the machine has free (here 1,000,000 sequences of 512
// tokens, 640 GB): refused before the allocation, which would have ended in the OOM killer.
TEST_F(HostileInputs, AKvBudgetPastTheFreeMemoryIsRefused) {
  const std::string in = work_ + "/kv.txt";
  std::ofstream(in) << "Once upon a time\n";
  const CommandResult r =
      run_shell(binary() + " run --model " + model_ + " --input " + in + " --output " + work_ +
                "/kv.jsonl --kv-cache-memory 1TiB --max-seqs 1000000");
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("--kv-cache-memory 1TiB: rank 0 would hold a KV cache of "),
            std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("of free memory left after the weights"), std::string::npos) << r.output;
  const CommandResult absurd =
      run_shell(binary() + " run --model " + model_ + " --input " + in + " --output " + work_ +
                "/kv.jsonl --kv-cache-memory 1e30GiB");
  EXPECT_EQ(absurd.exit_code, 1) << absurd.output;
  EXPECT_NE(absurd.output.find("size '1e30GiB' is beyond any machine's memory (at most 8 EiB)"),
            std::string::npos)
      << absurd.output;
}

}  // namespace
