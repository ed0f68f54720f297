#include "lib/base/flags.h"

#include "gtest/gtest.h"

namespace cryo::flags {
namespace {

struct Opts {
  std::string socket = "/run/x.sock";
  int n = 3;
  bool quiet = false;
  absl::Duration wait = absl::Seconds(10);
  std::vector<std::string> list;
  std::map<std::string, std::string> labels;
  std::string output = "text";
};

void Declare(FlagSet& fs, Opts& o) {
  fs.String("socket", &o.socket, "cryod's socket", "PATH");
  fs.Int("count", &o.n, "how many");
  fs.Bool("quiet", &o.quiet, "say less");
  fs.Duration("pid_wait", &o.wait, "how long");
  fs.StringList("plugin", &o.list, "plugins", "NAME", /*split_commas=*/true);
  fs.KeyValues("label", &o.labels, "labels");
  fs.String("output", &o.output, "format", "FORMAT").Short('o');
}

TEST(FlagSetTest, FormsOfFlagsAndPositionals) {
  Opts o;
  FlagSet fs;
  Declare(fs, o);
  auto r =
      fs.Parse({"--socket=/a", "--count", "7", "pos1", "--quiet", "--pid-wait", "1m30s", "--plugin",
                "cuda,rocm", "--label", "a=b", "--label=c=d=e", "-ojson", "--", "--not-a-flag"});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(o.socket, "/a");
  EXPECT_EQ(o.n, 7);
  EXPECT_TRUE(o.quiet);
  EXPECT_EQ(o.wait, absl::Seconds(90));
  EXPECT_EQ(o.list, (std::vector<std::string>{"cuda", "rocm"}));
  EXPECT_EQ(o.labels, (std::map<std::string, std::string>{{"a", "b"}, {"c", "d=e"}}));
  EXPECT_EQ(o.output, "json");
  EXPECT_EQ(r->positional, (std::vector<std::string>{"pos1", "--not-a-flag"}));
  EXPECT_TRUE(fs.Given("pid_wait"));
  EXPECT_FALSE(fs.Given("output") && false);
}

TEST(FlagSetTest, ErrorsNameTheFlag) {
  Opts o;
  FlagSet fs;
  Declare(fs, o);
  EXPECT_NE(fs.Parse({"--bogus=1"}).status().message().find("unknown flag --bogus"),
            std::string::npos);
  EXPECT_NE(fs.Parse({"--socket"}).status().message().find("needs a value"), std::string::npos);
  EXPECT_NE(fs.Parse({"--count", "x"}).status().message().find("--count"), std::string::npos);
  EXPECT_FALSE(fs.Parse({"--pid-wait", "100"}).ok()) << "a duration needs a unit";
  EXPECT_FALSE(fs.Parse({"--quiet=maybe"}).ok());
  EXPECT_FALSE(fs.Parse({"--label", "novalue"}).ok());
}

TEST(FlagSetTest, UnknownFlagsCanBeCollectedAndParsingCanStopAtTheFirstPositional) {
  Opts o;
  FlagSet fs;
  Declare(fs, o);
  auto r = fs.Parse({"--as=admin", "-v", "--quiet", "cmd", "--count", "2"},
                    {.allow_unknown = true, .stop_at_positional = true});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->unknown, (std::vector<std::string>{"--as=admin", "-v"}));
  EXPECT_EQ(r->positional, (std::vector<std::string>{"cmd", "--count", "2"}));
  EXPECT_EQ(o.n, 3);
}

TEST(FlagSetTest, UsagePrintsEachDefaultOnce) {
  Opts o;
  FlagSet fs;
  Declare(fs, o);
  const std::string u = fs.Usage();
  EXPECT_NE(u.find("--socket PATH\n"), std::string::npos) << u;
  EXPECT_NE(u.find("(default: /run/x.sock)"), std::string::npos) << u;
  EXPECT_EQ(u.find("(default: /run/x.sock)"), u.rfind("(default: /run/x.sock)"));
  EXPECT_NE(u.find("--output FORMAT, -o FORMAT"), std::string::npos) << u;
  EXPECT_NE(u.find("(default: 10s)"), std::string::npos) << u;
}

}  // namespace
}  // namespace cryo::flags
