// Which pods form one job: by the pod's own annotation, or by what JobSet, the training
// operator and indexed Jobs label their pods with; and the member names a replacement keeps.
#include "lib/contract/job.h"

#include "gtest/gtest.h"

namespace cryo::contract {
namespace {

absl::StatusOr<std::optional<JobMembership>> Of(const StringMap& ann, const StringMap& labels,
                                                const std::string& pod = "train-a-7x2k") {
  return JobOf("cryo.dev", ann, labels, pod);
}

TEST(JobOfTest, APodWithNoJobIsNoMember) {
  auto j = Of({{"cryo.dev/checkpoint-on-stop", "true"}}, {{"app", "train"}});
  ASSERT_TRUE(j.ok()) << j.status();
  EXPECT_FALSE(j->has_value());
  // A plain Job's pods (no completion index) are interchangeable: not members of one job.
  j = Of({}, {{"batch.kubernetes.io/job-name", "trainer"}});
  ASSERT_TRUE(j.ok()) << j.status();
  EXPECT_FALSE(j->has_value());
}

TEST(JobOfTest, TheAnnotationNamesTheJobAndItsSize) {
  auto j = Of({{"cryo.dev/job", " sum "}, {"cryo.dev/job-size", "2"}},
              {{"statefulset.kubernetes.io/pod-name", "sum-1"}});
  ASSERT_TRUE(j.ok()) << j.status();
  ASSERT_TRUE(j->has_value());
  EXPECT_EQ((*j)->name, "sum");
  EXPECT_EQ((*j)->source, JobSource::kAnnotation);
  EXPECT_EQ((*j)->size, 2);
  EXPECT_EQ((*j)->member, "sum-1") << "a StatefulSet's pod name is kept by its replacement";
  // A bare pod: its own name; the member annotation wins over both.
  j = Of({{"cryo.dev/job", "sum"}, {"cryo.dev/job-size", "2"}}, {});
  ASSERT_TRUE(j.ok() && j->has_value());
  EXPECT_EQ((*j)->member, "train-a-7x2k");
  j = Of({{"cryo.dev/job", "sum"}, {"cryo.dev/job-size", "2"}, {"cryo.dev/job-member", "left"}},
         {{"statefulset.kubernetes.io/pod-name", "sum-1"}});
  ASSERT_TRUE(j.ok() && j->has_value());
  EXPECT_EQ((*j)->member, "left");
}

TEST(JobOfTest, AJobWithoutAUsableSizeIsRefusedNamingTheAnnotation) {
  auto j = Of({{"cryo.dev/job", "sum"}}, {});
  EXPECT_EQ(j.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(j.status().message().find("cryo.dev/job-size is missing"), std::string::npos)
      << j.status();
  for (const char* bad : {"two", "0", "-1", "4097", "2.5"}) {
    j = Of({{"cryo.dev/job", "sum"}, {"cryo.dev/job-size", bad}}, {});
    EXPECT_EQ(j.status().code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_NE(j.status().message().find("cryo.dev/job-size"), std::string::npos) << j.status();
  }
}

TEST(JobOfTest, NamesThatCannotBeAStorePathAreRefused) {
  for (const char* bad : {"../x", "Sum", "a/b", ".x", "x.", "a..b"}) {
    auto j = Of({{"cryo.dev/job", bad}, {"cryo.dev/job-size", "2"}}, {});
    EXPECT_EQ(j.status().code(), absl::StatusCode::kInvalidArgument) << bad;
    j = Of({{"cryo.dev/job", "sum"}, {"cryo.dev/job-size", "2"}, {"cryo.dev/job-member", bad}}, {});
    EXPECT_EQ(j.status().code(), absl::StatusCode::kInvalidArgument) << bad;
  }
}

TEST(JobOfTest, AJobSetsPodIsAMemberByItsGlobalAndCompletionIndex) {
  auto j = Of({{"batch.kubernetes.io/job-completion-index", "1"}},
              {{"jobset.sigs.k8s.io/jobset-name", "pytorch"},
               {"jobset.sigs.k8s.io/job-global-index", "0"},
               {"batch.kubernetes.io/job-name", "pytorch-workers-0"}});
  ASSERT_TRUE(j.ok()) << j.status();
  ASSERT_TRUE(j->has_value());
  EXPECT_EQ((*j)->name, "pytorch") << "the JobSet, not its Job";
  EXPECT_EQ((*j)->source, JobSource::kJobSet);
  EXPECT_EQ((*j)->size, 0) << "the JobSet's spec says; cryod asks the API";
  EXPECT_EQ((*j)->member, "0-1");
}

TEST(JobOfTest, APyTorchJobsPodIsAMemberByReplicaTypeAndIndex) {
  auto j = Of({}, {{"training.kubeflow.org/job-name", "bert"},
                   {"training.kubeflow.org/replica-type", "Worker"},
                   {"training.kubeflow.org/replica-index", "3"}});
  ASSERT_TRUE(j.ok() && j->has_value()) << j.status();
  EXPECT_EQ((*j)->name, "bert");
  EXPECT_EQ((*j)->source, JobSource::kPyTorchJob);
  EXPECT_EQ((*j)->member, "worker-3");
}

TEST(JobOfTest, AnIndexedJobsPodIsAMemberByItsCompletionIndex) {
  auto j = Of({}, {{"batch.kubernetes.io/job-name", "sum"},
                   {"batch.kubernetes.io/job-completion-index", "0"}});
  ASSERT_TRUE(j.ok() && j->has_value()) << j.status();
  EXPECT_EQ((*j)->name, "sum");
  EXPECT_EQ((*j)->source, JobSource::kIndexedJob);
  EXPECT_EQ((*j)->member, "0");
  // The annotation wins over the owner's labels: the pod says which job it is.
  j = Of(
      {{"cryo.dev/job", "pair"}, {"cryo.dev/job-size", "2"}},
      {{"batch.kubernetes.io/job-name", "sum"}, {"batch.kubernetes.io/job-completion-index", "1"}});
  ASSERT_TRUE(j.ok() && j->has_value()) << j.status();
  EXPECT_EQ((*j)->name, "pair");
  EXPECT_EQ((*j)->size, 2);
  EXPECT_EQ((*j)->member, "1");
}

}  // namespace
}  // namespace cryo::contract
