#include "lib/base/ids.h"

#include "gtest/gtest.h"

namespace cryo {
namespace {

TEST(Ids, AcceptsSafeIds) {
  for (const char* id : {"a", "job-1", "train_v2.step-100", "A.B-c_9"}) {
    EXPECT_TRUE(ValidateCheckpointId(id).ok()) << id;
  }
  EXPECT_TRUE(ValidateCheckpointId(std::string(128, 'x')).ok());
}

TEST(Ids, RefusesPathTricksAndOddNames) {
  for (const std::string& id :
       std::vector<std::string>{"", "..", "../x", "a/b", "/etc", ".hidden", "-rf", "a b", "a\nb",
                                std::string("a\0b", 3), "a+b", std::string(129, 'x')}) {
    absl::Status s = ValidateCheckpointId(id);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << id;
  }
}

TEST(Ids, GeneratedIdsAreValidAndSortable) {
  absl::Time t = absl::FromUnixSeconds(1795000000);
  std::string id = MakeCheckpointId("py torch/../x", t);
  EXPECT_TRUE(ValidateCheckpointId(id).ok()) << id;
  EXPECT_EQ(id.rfind("py_torch_.._x-20261118-", 0), 0u) << id;
  EXPECT_LT(MakeCheckpointId("w", t), MakeCheckpointId("w", t + absl::Hours(1)));
  EXPECT_EQ(SanitizeIdPart("..."), "job");
}

}  // namespace
}  // namespace cryo
