#include "lib/contract/criu_annotations.h"

#include "gtest/gtest.h"

namespace cryo::contract {
namespace {

TEST(CriuAnnotationsTest, ParsesWhatIsSetAndLeavesTheRestToTheNode) {
  auto a = ParseCriuAnnotations({{"x.io/criu-link-remap", "false"},
                                 {"x.io/criu-ghost-limit", "128Mi"},
                                 {"x.io/criu-tcp-close", "TRUE"},
                                 {"cryo.dev/criu-ext-unix-sk", "true"},  // another prefix
                                 {"x.io/unrelated", "1"}},
                                "x.io");
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(a->link_remap, false);
  EXPECT_EQ(a->ghost_limit, 128ull << 20);
  EXPECT_EQ(a->tcp_close, true);
  EXPECT_FALSE(a->ext_unix_sk.has_value());
  EXPECT_FALSE(a->tcp_established.has_value());
}

TEST(CriuAnnotationsTest, BadValuesNameTheAnnotation) {
  auto a = ParseCriuAnnotations({{"cryo.dev/criu-skip-in-flight", "yes please"}}, "cryo.dev");
  EXPECT_EQ(a.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(a.status().message().find("cryo.dev/criu-skip-in-flight"), std::string::npos);
  a = ParseCriuAnnotations({{"cryo.dev/criu-ghost-limit", "lots"}}, "cryo.dev");
  EXPECT_EQ(a.status().code(), absl::StatusCode::kInvalidArgument);
  // "4M" means 4 MiB to CRIU and 4,000,000 bytes to Kubernetes: refused, saying both.
  a = ParseCriuAnnotations({{"cryo.dev/criu-ghost-limit", "4M"}}, "cryo.dev");
  ASSERT_FALSE(a.ok());
  EXPECT_NE(a.status().message().find("4 MiB"), std::string::npos) << a.status();
  EXPECT_NE(a.status().message().find("4000000 bytes"), std::string::npos) << a.status();
  EXPECT_NE(a.status().message().find("write 4Mi"), std::string::npos) << a.status();
  // Above the cap: refused when the pod's container is created, not at its first checkpoint.
  a = ParseCriuAnnotations({{"cryo.dev/criu-ghost-limit", "32Gi"}}, "cryo.dev");
  EXPECT_EQ(a.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(a.status().message().find("above the most allowed"), std::string::npos) << a.status();
  a = ParseCriuAnnotations({{"cryo.dev/criu-ghost-limit", "16Gi"}}, "cryo.dev");
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(*a->ghost_limit, 16ull << 30);
}

}  // namespace
}  // namespace cryo::contract
