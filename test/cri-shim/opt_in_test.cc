// The default workload key (which checkpoints `resume: auto` finds) for each kind of pod, and
// the opt-in decision around it.
#include "cri-shim/opt_in.h"

#include "gtest/gtest.h"

namespace cryo::shim {
namespace {

const PodIdentity kPod{"ml", "train-0", "0f1e2d3c-4b5a-4000-8000-000000000001"};

TEST(DefaultWorkloadKeyTest, AJobsPodsShareTheJobsKeyAndANewJobOfTheSameNameDoesNot) {
  StringMap job = {{"batch.kubernetes.io/job-name", "trainer"},
                   {"batch.kubernetes.io/controller-uid", "5e1f0c2a-0000-4000-8000-000000000001"}};
  EXPECT_EQ(DefaultWorkloadKey(job, kPod, "worker"), "ml.trainer.5e1f0c2a.worker");
  // A replacement pod: another name and uid, the same Job.
  EXPECT_EQ(DefaultWorkloadKey(job, {"ml", "trainer-x7k2p", "another-uid"}, "worker"),
            "ml.trainer.5e1f0c2a.worker");
  job["batch.kubernetes.io/controller-uid"] = "9a8b7c6d-0000-4000-8000-000000000002";
  EXPECT_EQ(DefaultWorkloadKey(job, kPod, "worker"), "ml.trainer.9a8b7c6d.worker");
}

TEST(DefaultWorkloadKeyTest, OlderJobLabelsToo) {
  StringMap job = {{"job-name", "trainer"}, {"controller-uid", "5e1f0c2a-0000"}};
  EXPECT_EQ(DefaultWorkloadKey(job, kPod, "worker"), "ml.trainer.5e1f0c2a.worker");
  // Without a uid (not the Job controller's labels): the Job's name alone.
  EXPECT_EQ(DefaultWorkloadKey({{"job-name", "trainer"}}, kPod, "worker"), "ml.trainer.worker");
}

TEST(DefaultWorkloadKeyTest, AStatefulSetsReplacementPodResumes) {
  StringMap sts = {{"statefulset.kubernetes.io/pod-name", "train-0"},
                   {"controller-revision-hash", "train-7c9d"}};
  EXPECT_EQ(DefaultWorkloadKey(sts, kPod, "worker"), "ml.train-0.worker");
  // The replacement: same name, new uid.
  EXPECT_EQ(DefaultWorkloadKey(sts, {"ml", "train-0", "new-uid"}, "worker"), "ml.train-0.worker");
}

TEST(DefaultWorkloadKeyTest, ABarePodRecreatedUnderTheSameNameStartsFresh) {
  EXPECT_EQ(DefaultWorkloadKey({}, kPod, "worker"), "ml.train-0.0f1e2d3c.worker");
  EXPECT_EQ(DefaultWorkloadKey({}, {"ml", "train-0", "7a6b5c4d-0000"}, "worker"),
            "ml.train-0.7a6b5c4d.worker");
  // A Deployment's pod is keyed the same way (its replacements have other names anyway).
  EXPECT_EQ(DefaultWorkloadKey({{"pod-template-hash", "5d8f"}}, kPod, "worker"),
            "ml.train-0.0f1e2d3c.worker");
  // A pod known by no uid: its name.
  EXPECT_EQ(DefaultWorkloadKey({}, {"ml", "train-0", ""}, "worker"), "ml.train-0.worker");
}

TEST(DecideOptInTest, TheWorkloadAnnotationWinsOverEveryDefault) {
  StringMap ann = {{"cryo.dev/checkpoint-on-stop", "true"}, {"cryo.dev/workload", " ml.trainer "}};
  StringMap job = {{"batch.kubernetes.io/job-name", "trainer"},
                   {"batch.kubernetes.io/controller-uid", "5e1f0c2a-0000"}};
  OptIn o = DecideOptIn("cryo.dev", ann, job, kPod, "worker");
  EXPECT_TRUE(o.managed);
  EXPECT_TRUE(o.checkpoint_on_stop);
  EXPECT_EQ(o.workload, "ml.trainer.worker") << "the old key of a Job's pods, pinned";
}

// A key belongs to the pod's namespace: one that names no namespace, or another's, gets the
// pod's in front, so a pod of namespace B can neither read nor push out A's checkpoints.
TEST(DecideOptInTest, AWorkloadKeyIsTheNamespaces) {
  StringMap ann = {{"cryo.dev/checkpoint-on-stop", "true"}, {"cryo.dev/workload", "trainer"}};
  EXPECT_EQ(DecideOptIn("cryo.dev", ann, {}, kPod, "worker").workload, "ml.trainer.worker");
  ann["cryo.dev/workload"] = "ml.trainer";
  const PodIdentity other{"team-b", "train-0", "0f1e2d3c-0000"};
  EXPECT_EQ(DecideOptIn("cryo.dev", ann, {}, other, "worker").workload, "team-b.ml.trainer.worker");
}

// A period alone opts in to checkpoints at a stop too (issue 42), unless the pod says
// checkpoint-on-stop "false".
TEST(DecideOptInTest, APeriodAloneOptsInAndOffDoesNot) {
  StringMap every = {{"cryo.dev/checkpoint-every", "20m"}};
  OptIn o = DecideOptIn("cryo.dev", every, {}, kPod, "worker");
  EXPECT_TRUE(o.managed) << "periodic checkpoints need the job under cryo-init";
  EXPECT_TRUE(o.checkpoint_on_stop) << "checkpointed at its stop as well";
  every["cryo.dev/checkpoint-on-stop"] = "false";
  o = DecideOptIn("cryo.dev", every, {}, kPod, "worker");
  EXPECT_TRUE(o.managed);
  EXPECT_FALSE(o.checkpoint_on_stop) << "the pod said no";
  for (const char* off : {"off", "0", "never", " OFF "}) {
    StringMap none = {{"cryo.dev/checkpoint-every", off}};
    EXPECT_FALSE(DecideOptIn("cryo.dev", none, {}, kPod, "worker").managed) << off;
  }
}

TEST(DecideOptInTest, OnlyTheListedContainersAndOnlyPodsThatOptIn) {
  EXPECT_FALSE(DecideOptIn("cryo.dev", {}, {}, kPod, "worker").managed);
  StringMap ann = {{"cryo.dev/resume", "auto"}, {"cryo.dev/containers", "a, worker"}};
  EXPECT_TRUE(DecideOptIn("cryo.dev", ann, {}, kPod, "worker").managed);
  EXPECT_FALSE(DecideOptIn("cryo.dev", ann, {}, kPod, "sidecar").managed);
  OptIn o = DecideOptIn("cryo.dev", ann, {}, kPod, "worker");
  EXPECT_EQ(o.resume, "auto");
  EXPECT_FALSE(o.checkpoint_on_stop);
  EXPECT_EQ(o.workload, "ml.train-0.0f1e2d3c.worker");
}

}  // namespace
}  // namespace cryo::shim
