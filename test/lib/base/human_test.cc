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

}  // namespace
}  // namespace cryo::human
