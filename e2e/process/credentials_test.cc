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

}  // namespace
}  // namespace cryo::e2e
