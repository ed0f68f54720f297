#include "lib/base/human.h"

#include "gtest/gtest.h"

namespace cryo::human {
namespace {

TEST(HumanTest, BytesAgesTables) {
  EXPECT_EQ(Bytes(512), "512 B");
  EXPECT_EQ(Bytes(1536ull << 20), "1.5 GiB");
  EXPECT_EQ(Bytes(300ull << 20), "300 MiB");
  EXPECT_EQ(Age(absl::Seconds(59)), "59s");
  EXPECT_EQ(Age(absl::Minutes(90)), "90m");
  EXPECT_EQ(Age(absl::Hours(5)), "5h");
  EXPECT_EQ(Age(absl::Hours(72)), "3d");
  EXPECT_EQ(Age(-absl::Seconds(5)), "0s");
  EXPECT_EQ(Table({{"A", "BB"}, {"ccc", "d"}}), "A     BB\nccc   d\n");
}

TEST(HumanTest, ControlCharactersAreEscaped) {
  EXPECT_EQ(Printable("train-1"), "train-1");
  EXPECT_EQ(Printable("a\x1b[2Jb\n"), "a\\x1b[2Jb\\x0a");
}

TEST(HumanTest, Rfc3339TimesAsManifestsWriteThem) {
  EXPECT_EQ(ParseRfc3339("2026-11-27T08:00:00Z"), absl::FromUnixSeconds(1795766400));
  EXPECT_EQ(ParseRfc3339("2026-11-27T09:00:00+01:00"), absl::FromUnixSeconds(1795766400));
  EXPECT_EQ(ParseRfc3339("yesterday"), absl::InfinitePast());
  EXPECT_EQ(ParseRfc3339(""), absl::InfinitePast());
}

}  // namespace
}  // namespace cryo::human
