// Process mode, real cryod and CRIU: a job that runs with no capability and no_new_privs comes
// back exactly so; a checkpoint rewritten in the store to bring it back with every capability
// and no_new_privs off is refused before anything runs, whether the writer also fixed the
// checksums, raised the recorded credentials, or even re-signed the manifest with the cluster's
// key (then the images' credentials exceed what the job had, named by field). Other uids are
// covered by the unit tests and the containerd suite: CRIU needs CAP_SYS_RESOURCE to dump
// another user's process, which root lacks on our build machines.

#include <sys/stat.h>
#include <unistd.h>

#include <fstream>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "daemon/store/manifest.h"
#include "daemon/store/signature.h"
#include "e2e/process/fixture.h"
#include "lib/base/fs.h"
#include "test/daemon/criu/craft_images.h"

namespace cryo::e2e {
namespace {

using grpc::StatusCode;

class ProcessCredentialsE2e : public ProcessFixture {
 protected:
  // A job with no capability and no_new_privs, checkpointed (and so stopped) as "c1".
  Workload& CheckpointedConfinedJob(Cryod& a) {
    auto w = Workload::StartConfined(dir_, 16);
    EXPECT_TRUE(w.ok()) << w.status();
    if (!w.ok()) std::abort();
    workloads_.push_back(std::move(*w));
    Workload& job = *workloads_.back();
    EXPECT_TRUE(job.WaitMain(10));
    grpc::Status s = a.Checkpoint(Req(job.pid(), "c1"));
    EXPECT_TRUE(s.ok()) << s.error_message();
    EXPECT_TRUE(WaitGone(job));
    return job;
  }

  std::string Dir() const { return store_ + "/checkpoints/c1"; }

  store::Manifest ReadManifest() {
    auto text = fs::ReadFile(Dir() + "/manifest.json");
    EXPECT_TRUE(text.ok());
    auto m = store::ParseManifest(text.ok() ? *text : "");
    EXPECT_TRUE(m.ok()) << m.status();
    return m.ok() ? *m : store::Manifest{};
  }
  void WriteManifest(const store::Manifest& m) {
    ASSERT_TRUE(fs::WriteFileAtomic(Dir() + "/manifest.json", store::ManifestToJson(m)).ok());
  }

  void RaiseImages() {
    ASSERT_TRUE(cryo::testing::RewriteImageCredentials(Dir(), cryo::testing::RaiseToRoot));
  }
};

TEST_F(ProcessCredentialsE2e, AConfinedJobComesBackExactlyAsConfined) {
  Cryod& a = Node("node-a");
  Workload& w = CheckpointedConfinedJob(a);
  store::Manifest m = ReadManifest();
  ASSERT_TRUE(m.credentials.has_value());
  EXPECT_EQ(m.credentials->uids, std::set<uint32_t>{::getuid()});
  EXPECT_EQ(m.credentials->caps.eff, 0u);
  EXPECT_EQ(m.credentials->caps.bnd, 0u);
  EXPECT_TRUE(m.credentials->no_new_privs);
  EXPECT_TRUE(absl::StartsWith(m.signature, store::kSignaturePrefix)) << m.signature;

  grpc::Status s = a.Restore(RestoreReq("c1"));
  ASSERT_TRUE(s.ok()) << s.error_message();
  ExpectRunning(w);
  EXPECT_EQ(w.Verify(), 1);
  auto status = fs::ReadFile(absl::StrCat("/proc/", w.pid(), "/status"));
  ASSERT_TRUE(status.ok());
  EXPECT_TRUE(absl::StrContains(*status, "CapEff:\t0000000000000000")) << *status;
  EXPECT_TRUE(absl::StrContains(*status, "CapBnd:\t0000000000000000")) << *status;
  EXPECT_TRUE(absl::StrContains(*status, "NoNewPrivs:\t1")) << *status;
}

// The seccomp mode of every thread of process `pid`, as /proc shows it ("tid:mode").
std::vector<std::string> SeccompOfEveryThread(pid_t pid) {
  std::vector<std::string> out;
  for (const std::string& tid : fs::ListNames(absl::StrCat("/proc/", pid, "/task"))) {
    auto st = fs::ReadFile(absl::StrCat("/proc/", pid, "/task/", tid, "/status"));
    if (!st.ok()) continue;
    const size_t at = st->find("\nSeccomp:\t");
    out.push_back(absl::StrCat(tid, ":", at == std::string::npos ? "?" : st->substr(at + 10, 1)));
  }
  return out;
}

// Every thread of a multi-threaded job under one seccomp filter (as a pod's job under the
// runtime's default profile): CRIU records the filter on the main thread only (TSYNC) and the
// restore gives it to every thread. The check reads it that way: checkpointed, restored, and
// every thread is filtered again (issue 40: this was refused as "seccomp mode is 0").
TEST_F(ProcessCredentialsE2e, AMultiThreadedJobUnderASeccompFilterComesBackFilteredOnEveryThread) {
  Cryod& a = Node("node-a");
  auto before = Workload::StartConfined(dir_, 16, /*seccomp=*/true, /*threads=*/4);
  ASSERT_TRUE(before.ok()) << before.status();
  // The job itself, before: five threads (main and four), each under the filter.
  std::vector<std::string> modes = SeccompOfEveryThread((*before)->pid());
  ASSERT_EQ(modes.size(), 5u) << absl::StrJoin(modes, " ");
  for (const auto& m : modes) EXPECT_TRUE(absl::EndsWith(m, ":2")) << m;
  workloads_.push_back(std::move(*before));
  Workload& w = *workloads_.back();
  grpc::Status s = a.Checkpoint(Req(w.pid(), "c1"));
  ASSERT_TRUE(s.ok()) << s.error_message();
  ASSERT_TRUE(WaitGone(w));
  store::Manifest m = ReadManifest();
  ASSERT_TRUE(m.credentials.has_value());
  EXPECT_EQ(m.credentials->seccomp_mode, 2);

  s = a.Restore(RestoreReq("c1"));
  ASSERT_TRUE(s.ok()) << s.error_message();
  ExpectRunning(w);
  EXPECT_EQ(w.Verify(), 1);
  modes = SeccompOfEveryThread(w.pid());
  ASSERT_EQ(modes.size(), 5u) << absl::StrJoin(modes, " ");
  for (const auto& mode : modes) EXPECT_TRUE(absl::EndsWith(mode, ":2")) << mode;
  // The child process is under it too (it was forked after the filter).
  const int child = w.Status().value("child_pid", 0);
  ASSERT_GT(child, 0);
  for (const auto& mode : SeccompOfEveryThread(child)) EXPECT_TRUE(absl::EndsWith(mode, ":2"));
}

// A job in a user namespace of its own (what a pod with hostUsers: false is): its root holds
// every capability there, which /proc reports as if they were the node's, and CRIU would
// recreate it in the node's namespace. Refused before anything stops, naming the namespace;
// the job runs on.
TEST_F(ProcessCredentialsE2e, AJobInAUserNamespaceOfItsOwnIsRefusedBeforeAnythingStops) {
  Cryod& a = Node("node-a");
  auto w = Workload::Start(dir_, 8, 2, {}, {"/usr/bin/unshare", "--user", "--map-root-user"});
  ASSERT_TRUE(w.ok()) << w.status();
  workloads_.push_back(std::move(*w));
  Workload& job = *workloads_.back();
  grpc::Status s = a.Checkpoint(Req(job.pid(), "userns"));
  EXPECT_EQ(s.error_code(), StatusCode::FAILED_PRECONDITION) << s.error_message();
  EXPECT_TRUE(absl::StrContains(s.error_message(), "user namespace of its own"))
      << s.error_message();
  EXPECT_TRUE(absl::StrContains(s.error_message(), "hostUsers")) << s.error_message();
  EXPECT_TRUE(absl::StrContains(s.error_message(), "nothing was stopped")) << s.error_message();
  ExpectRunning(job);
  EXPECT_FALSE(fs::Exists(store_ + "/checkpoints/userns"));
}

TEST_F(ProcessCredentialsE2e, ImagesRewrittenToRaiseTheJobAreRefusedBeforeAnythingRuns) {
  Cryod& a = Node("node-a");
  Workload& w = CheckpointedConfinedJob(a);
  RaiseImages();
  // The checksums match again, the signature does not.
  grpc::Status s = a.Restore(RestoreReq("c1"));
  EXPECT_EQ(s.error_code(), StatusCode::PERMISSION_DENIED) << s.error_message();
  EXPECT_TRUE(absl::StrContains(s.error_message(), "signature")) << s.error_message();
  EXPECT_EQ(w.State(), '-') << "nothing may start";

  // The recorded credentials raised to match: still the signature.
  store::Manifest m = ReadManifest();
  m.credentials->uids.insert(0);
  m.credentials->caps.eff = m.credentials->caps.prm = m.credentials->caps.bnd = ~uint64_t{0};
  m.credentials->no_new_privs = false;
  WriteManifest(m);
  s = a.Restore(RestoreReq("c1"));
  EXPECT_EQ(s.error_code(), StatusCode::PERMISSION_DENIED) << s.error_message();
  EXPECT_TRUE(absl::StrContains(s.error_message(), "signature")) << s.error_message();
  EXPECT_EQ(w.State(), '-');
}

// The second line: even with the cluster's key (re-signed), images that claim more than the
// job had when it was checkpointed are refused, naming the field.
TEST_F(ProcessCredentialsE2e, ASignedManifestStillBoundsItsImagesByTheRecordedCredentials) {
  Cryod& a = Node("node-a");
  Workload& w = CheckpointedConfinedJob(a);
  RaiseImages();
  auto key = fs::ReadFile(dir_ + "/cluster-signing.key");
  ASSERT_TRUE(key.ok());
  store::Manifest m = ReadManifest();
  m.signature = store::SignManifest(m, *key);
  WriteManifest(m);
  grpc::Status s = a.Restore(RestoreReq("c1"));
  EXPECT_EQ(s.error_code(), StatusCode::PERMISSION_DENIED) << s.error_message();
  EXPECT_TRUE(absl::StrContains(s.error_message(), "cap_prm")) << s.error_message();
  EXPECT_TRUE(absl::StrContains(s.error_message(), "CAP_SYS_ADMIN")) << s.error_message();
  EXPECT_EQ(w.State(), '-');
}

// Issue 34: unlisted files (ghost-file-*.img, remap-fpath.img) added to a signed checkpoint made
// CRIU mknod a device node as root and hand it to a job without capabilities. A restore refuses
// every file its signed manifest does not list, by name, before anything runs.
TEST_F(ProcessCredentialsE2e, FilesTheSignedManifestDoesNotListAreRefusedByName) {
  Cryod& a = Node("node-a");
  Workload& w = CheckpointedConfinedJob(a);
  for (const char* name : {"ghost-file-7.img", "ghost-file-8.img"}) {
    ASSERT_FALSE(fs::Exists(Dir() + "/images/" + name));
    ASSERT_TRUE(fs::WriteFileAtomic(Dir() + "/images/" + name, std::string(64, 'g')).ok());
  }
  grpc::Status s = a.Restore(RestoreReq("c1"));
  EXPECT_EQ(s.error_code(), StatusCode::PERMISSION_DENIED) << s.error_message();
  EXPECT_TRUE(absl::StrContains(s.error_message(), "images/ghost-file-7.img")) << s.error_message();
  EXPECT_TRUE(absl::StrContains(s.error_message(), "images/ghost-file-8.img")) << s.error_message();
  EXPECT_EQ(w.State(), '-') << "nothing may start";
  // A refusal, not damage: the checkpoint's own files are intact. Without the planted files the
  // same checkpoint restores.
  for (const char* name : {"ghost-file-7.img", "ghost-file-8.img"}) {
    ASSERT_EQ(::unlink((Dir() + "/images/" + name).c_str()), 0);
  }
  s = a.Restore(RestoreReq("c1"));
  ASSERT_TRUE(s.ok()) << s.error_message();
  EXPECT_NE(w.State(), '-') << "the honest checkpoint did not restore";
  w.Kill();
}

}  // namespace
}  // namespace cryo::e2e
