// The layout flags parsed once into typed options: each spelling lands on its value, a flag left
// out keeps the documented default, and a spelling outside the set is refused as before.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "app/commands.h"

namespace tpllama {
namespace {

// Parses args (after the program name) with the layout flags bound to `o`.
void parse_layout(RunOptions& o, std::vector<std::string> args) {
  CLI::App app("test");
  add_layout_options(app, o);
  std::vector<std::string> reversed(args.rbegin(), args.rend());  // CLI11 takes them last first
  app.parse(reversed);
}

TEST(RunOptionsLayout, DefaultsAreAuto) {
  RunOptions o;
  parse_layout(o, {});
  EXPECT_EQ(o.session.placement.dtype, DTypeChoice::kAuto);
  EXPECT_EQ(o.session.kv_dtype, DTypeChoice::kAuto);
  EXPECT_EQ(o.session.placement.device, DeviceChoice::kAuto);
  EXPECT_EQ(o.session.placement.comm, CommChoice::kAuto);
  EXPECT_TRUE(o.session.engine.prefix_caching);
}

TEST(RunOptionsLayout, EachSpellingLandsOnItsValue) {
  RunOptions o;
  parse_layout(o, {"--dtype", "int8", "--kv-dtype", "bf16", "--device", "cuda", "--comm", "nccl",
                   "--prefix-caching", "off", "--threads", "3", "--tp", "2", "--share-gpus"});
  EXPECT_EQ(o.session.placement.dtype, DTypeChoice::kInt8);
  EXPECT_EQ(o.session.kv_dtype, DTypeChoice::kBF16);
  EXPECT_EQ(o.session.placement.device, DeviceChoice::kCuda);
  EXPECT_EQ(o.session.placement.comm, CommChoice::kNccl);
  EXPECT_FALSE(o.session.engine.prefix_caching);
  EXPECT_EQ(o.session.placement.threads, 3);
  EXPECT_EQ(o.session.layout.tp, 2);
  EXPECT_TRUE(o.session.placement.share_gpus);
  RunOptions p;
  parse_layout(p,
               {"--dtype", "bf16", "--device", "cpu", "--comm", "mpi", "--prefix-caching", "on"});
  EXPECT_EQ(p.session.placement.dtype, DTypeChoice::kBF16);
  EXPECT_EQ(p.session.placement.device, DeviceChoice::kCpu);
  EXPECT_EQ(p.session.placement.comm, CommChoice::kMpi);
  EXPECT_TRUE(p.session.engine.prefix_caching);
}

TEST(RunOptionsLayout, RefusesASpellingOutsideTheSetAsIsMemberDoes) {
  RunOptions o;
  try {
    parse_layout(o, {"--kv-dtype", "int8"});
    FAIL() << "--kv-dtype int8 was accepted";
  } catch (const CLI::ValidationError& e) {
    EXPECT_EQ(std::string(e.what()), "--kv-dtype: int8 not in {auto,f32,bf16}");
  }
  try {
    parse_layout(o, {"--prefix-caching", "1"});
    FAIL() << "--prefix-caching 1 was accepted";
  } catch (const CLI::ValidationError& e) {
    EXPECT_EQ(std::string(e.what()), "--prefix-caching: 1 not in {on,off}");
  }
}

TEST(RunOptionsLayout, HelpShowsTheSpellingsAndTheDefault) {
  RunOptions o;
  CLI::App app("test");
  add_layout_options(app, o);
  const std::string help = app.help();
  EXPECT_NE(help.find("--dtype TEXT:{auto,f32,bf16,int8}=auto"), std::string::npos) << help;
  EXPECT_NE(help.find("--comm TEXT:{auto,mpi,nccl}=auto"), std::string::npos) << help;
  EXPECT_NE(help.find("--prefix-caching TEXT:{on,off}=on"), std::string::npos) << help;
}

}  // namespace
}  // namespace tpllama
