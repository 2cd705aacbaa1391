// LineInput and the whole-file readers: lines of a pipe are handed out as their '\n' arrives, a
// FIFO with no writer is waited on in bounded slices (never in open()), an endless line costs the
// limit and no more, and model files that are FIFOs or devices, or too large, are refused by name.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <string>

#include <gtest/gtest.h>

#include "core/error.h"
#include "core/file_read.h"
#include "io/line_input.h"
#include "test_util.h"

namespace tpllama {
namespace {

using Status = LineInput::Status;
namespace fs = std::filesystem;

std::string fd_path(int fd) {
  return "/proc/self/fd/" + std::to_string(fd);
}

void write_all(int fd, const std::string& text) {
  ASSERT_EQ(::write(fd, text.data(), text.size()), static_cast<ssize_t>(text.size()));
}

TEST(LineInput, TextInMemoryGivesEveryLineAndTheLastWithoutNewline) {
  LineInput in(std::string("one\n\ntwo\nthree"));
  std::string line;
  EXPECT_EQ(in.next(&line, 0), Status::kLine);
  EXPECT_EQ(line, "one");
  EXPECT_EQ(in.next(&line, 0), Status::kLine);
  EXPECT_EQ(line, "");
  EXPECT_EQ(in.next(&line, 0), Status::kLine);
  EXPECT_EQ(line, "two");
  EXPECT_EQ(in.next(&line, 0), Status::kLine);
  EXPECT_EQ(line, "three");
  EXPECT_EQ(in.next(&line, 0), Status::kEnd);
  EXPECT_EQ(in.next(&line, 0), Status::kEnd);
}

TEST(LineInput, APipesLineComesWithoutWaitingForTheNext) {
  int p[2];
  ASSERT_EQ(::pipe(p), 0);
  LineInput in(fd_path(p[0]), "prompt file");
  std::string line;
  EXPECT_EQ(in.next(&line, 0), Status::kPending);
  write_all(p[1], "first\nsec");
  EXPECT_EQ(in.next(&line, 0), Status::kLine);
  EXPECT_EQ(line, "first");
  const auto start = std::chrono::steady_clock::now();
  EXPECT_EQ(in.next(&line, 200), Status::kPending) << "half a line is not a line";
  EXPECT_GE(std::chrono::steady_clock::now() - start, std::chrono::milliseconds(150))
      << "the wait is the one asked for";
  write_all(p[1], "ond\n");
  EXPECT_EQ(in.next(&line, 1000), Status::kLine);
  EXPECT_EQ(line, "second");
  ::close(p[1]);
  EXPECT_EQ(in.next(&line, 1000), Status::kEnd);
  ::close(p[0]);
}

TEST(LineInput, AFifoWithNoWriterIsWaitedOnInSlicesThenRead) {
  const std::string dir = testing_util::fresh_dir("line_input_fifo");
  const std::string fifo = dir + "/in.fifo";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  LineInput in(fifo, "prompt file");  // opening for reading must not wait for a writer
  std::string line;
  EXPECT_EQ(in.next(&line, 100), Status::kPending) << "no writer yet is not the end of the input";
  const int w = ::open(fifo.c_str(), O_WRONLY | O_NONBLOCK);
  ASSERT_GE(w, 0);
  write_all(w, "x\n");
  ::close(w);
  EXPECT_EQ(in.next(&line, 1000), Status::kLine);
  EXPECT_EQ(line, "x");
  EXPECT_EQ(in.next(&line, 1000), Status::kEnd) << "the writer came and went";
  fs::remove_all(dir);
}

TEST(LineInput, ALineOverTheLimitIsReportedOnceAndSkipped) {
  LineInput whole(std::string("short\n0123456789abc\nafter\n"), 8);
  std::string line;
  EXPECT_EQ(whole.next(&line, 0), Status::kLine);
  EXPECT_EQ(whole.next(&line, 0), Status::kTooLong);
  EXPECT_EQ(whole.next(&line, 0), Status::kLine);
  EXPECT_EQ(line, "after");
  EXPECT_EQ(whole.next(&line, 0), Status::kEnd);

  int p[2];
  ASSERT_EQ(::pipe(p), 0);
  LineInput piecewise(fd_path(p[0]), "prompt file", 8);
  write_all(p[1], "0123456789");
  EXPECT_EQ(piecewise.next(&line, 0), Status::kTooLong) << "known too long before its end comes";
  write_all(p[1], "more of it");
  EXPECT_EQ(piecewise.next(&line, 0), Status::kPending) << "the rest of the long line is no line";
  write_all(p[1], " still\nnext\n");
  EXPECT_EQ(piecewise.next(&line, 0), Status::kLine);
  EXPECT_EQ(line, "next");
  ::close(p[1]);
  EXPECT_EQ(piecewise.next(&line, 1000), Status::kEnd);
  ::close(p[0]);
}

TEST(LineInput, AnEndlessLineReturnsWithinTheWaitHoldingNoMoreThanTheLimit) {
  LineInput zeros("/dev/zero", "prompt file", size_t{1} << 20);
  std::string line;
  EXPECT_EQ(zeros.next(&line, 5000), Status::kTooLong);
  const auto start = std::chrono::steady_clock::now();
  EXPECT_EQ(zeros.next(&line, 100), Status::kPending)
      << "bytes keep coming, but no line: the caller gets control back";
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));
}

TEST(LineInput, ADirectoryIsRefusedByName) {
  const std::string dir = testing_util::fresh_dir("line_input_dir");
  try {
    LineInput in(dir, "prompt file");
    FAIL() << "a directory was opened as input";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()), "cannot open prompt file " + dir + ": Is a directory");
  }
  fs::remove_all(dir);
}

TEST(FileRead, ModelFilesMustBeRegularFilesWithinTheLimit) {
  const std::string dir = testing_util::fresh_dir("file_read");
  const std::string fifo = dir + "/config.json", small = dir + "/small.json";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  EXPECT_EQ(testing_util::error_of([&] { read_regular_file(fifo, "model config", 1024); }),
            "model config " + fifo +
                " is a FIFO (named pipe), not a regular file (a FIFO or a device would be waited "
                "on or read without "
                "end): give the file itself");
  EXPECT_NE(testing_util::error_of([&] {
              read_regular_file("/dev/zero", "tokenizer file", 1024);
            }).find("tokenizer file /dev/zero is a character device, not a regular file"),
            std::string::npos);
  EXPECT_NE(testing_util::error_of([&] {
              read_regular_file(dir, "model config", 1024);
            }).find(" is a directory, not a regular file"),
            std::string::npos);
  std::ofstream(small) << std::string(2000, 'x');
  EXPECT_EQ(testing_util::error_of([&] { read_regular_file(small, "model config", 1024); }),
            "model config " + small +
                " is 2000 bytes, over the 1 KiB limit for such a file: is it the right file?");
  EXPECT_EQ(read_regular_file(small, "model config", 2000), std::string(2000, 'x'));
  fs::remove_all(dir);
}

TEST(FileRead, StreamsAreReadAsTheyComeUpToTheLimit) {
  int p[2];
  ASSERT_EQ(::pipe(p), 0);
  write_all(p[1], "node1 slots=4\nnode2 slots=4\n");
  ::close(p[1]);
  EXPECT_EQ(read_stream_file(fd_path(p[0]), "hostfile", 1024), "node1 slots=4\nnode2 slots=4\n");
  ::close(p[0]);
  EXPECT_EQ(
      testing_util::error_of([] { read_stream_file("/dev/zero", "hostfile", size_t{1} << 20); }),
      "hostfile /dev/zero is over the 1 MiB limit for such a file (read that far and stopped): is "
      "it the right "
      "file?");
}

}  // namespace
}  // namespace tpllama
