#include "lib/base/human.h"

#include <string>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
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

// Found on 2026-11-28 (issue 38): "4T" was refused as ambiguous with "write 4Ti", which was then
// refused too. Every size the ambiguity message suggests is taken.
TEST(HumanTest, SizesTakeKubernetesBinarySuffixesAndRefuseAmbiguousOnesWithAFix) {
  const std::pair<const char*, uint64_t> ok[] = {
      {"4096", 4096},      {"64Ki", 64ull << 10}, {"64KiB", 64ull << 10},
      {"1Gi", 1ull << 30}, {"4Ti", 4ull << 40},   {"4TiB", 4ull << 40},
      {"2Pi", 2ull << 50}, {"1Ei", 1ull << 60},   {" 8Mi ", 8ull << 20}};
  for (const auto& [text, want] : ok) {
    uint64_t got = 0;
    EXPECT_TRUE(ParseSize(text, &got).ok()) << text;
    EXPECT_EQ(got, want) << text;
  }
  for (const char* bad : {"4T", "4M", "4k", "1G"}) {
    uint64_t got = 0;
    absl::Status st = ParseSize(bad, &got);
    ASSERT_FALSE(st.ok()) << bad;
    EXPECT_TRUE(absl::StrContains(st.message(), "ambiguous")) << st;
    // The fix it suggests parses.
    const std::string fix = absl::StrCat(std::string(bad).substr(0, 1),
                                         std::string(1, absl::ascii_toupper(bad[1])), "i");
    EXPECT_TRUE(absl::StrContains(st.message(), absl::StrCat("write ", fix))) << st;
    EXPECT_TRUE(ParseSize(fix, &got).ok()) << fix;
  }
  uint64_t got = 0;
  EXPECT_FALSE(ParseSize("16Ei", &got).ok()) << "beyond 64 bits";
  EXPECT_FALSE(ParseSize("Ki", &got).ok());
  EXPECT_FALSE(ParseSize("-1", &got).ok());
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
