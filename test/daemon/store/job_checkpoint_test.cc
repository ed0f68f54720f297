// Job checkpoints in the store (issue 37): the record is written last, names each part with the
// digest of its manifest, and only then does the job checkpoint exist; a part without its
// record is never restored and is collected.
#include "daemon/store/job_checkpoint.h"

#include <fcntl.h>
#include <unistd.h>

#include "daemon/store/signature.h"
#include "daemon/store/store.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "lib/base/fs.h"
#include "nlohmann/json.hpp"
#include "test/daemon/test_util.h"

namespace cryo::store {
namespace {

using ::testing::HasSubstr;

class JobCheckpointTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto s = CreateLocalStore({dir_.path + "/store", "node-a", true});
    ASSERT_TRUE(s.ok()) << s.status();
    store_ = std::move(*s);
  }
  // Publishes member `member`'s part of job checkpoint `jcid` of ml/sum.
  Manifest Part(const std::string& id, const std::string& member, const std::string& jcid) {
    Manifest m;
    m.id = id;
    m.workload = "ml.sum." + member;
    m.created_at = "2026-11-29T05:00:00Z";
    m.root_pid = 1234;
    m.files = {{"images/pages-1.img", 5, "x"}};
    m.job = JobPart{"ml", "sum", jcid, member, {}, {}};
    auto st = store_->Stage(id);
    EXPECT_TRUE(st.ok()) << st.status();
    if (!st.ok()) return m;
    EXPECT_TRUE(fs::WriteFileAtomic((*st)->images_dir() + "/pages-1.img", "hello").ok());
    EXPECT_TRUE((*st)->Publish(m).ok());
    return m;
  }
  JobCheckpoint Record(const std::string& jcid, const std::vector<Manifest>& parts) {
    JobCheckpoint jc;
    jc.id = jcid;
    jc.namespace_ = "ml";
    jc.job = "sum";
    jc.created_at = "2026-11-29T05:00:01Z";
    for (const auto& p : parts) {
      jc.members.push_back({p.job->member, p.id, "node-a", ManifestDigest(p)});
    }
    jc.cut_ms = {{"freeze_skew", 3}};
    return jc;
  }
  TempDir dir_;
  std::unique_ptr<CheckpointStore> store_;
};

TEST_F(JobCheckpointTest, TheRecordRoundTripsAndMalformedOnesAreRefused) {
  JobCheckpoint jc = Record("j1", {Part("a1", "left", "j1"), Part("b1", "right", "j1")});
  jc.signature = SignJobCheckpoint(jc, std::string(32, 'k'));
  auto back = ParseJobCheckpoint(JobCheckpointToJson(jc));
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(JobCheckpointToJson(*back), JobCheckpointToJson(jc));
  EXPECT_TRUE(VerifyJobCheckpointSignature(*back, std::string(32, 'k')).ok());

  auto refused = [&](JobCheckpoint bad, const std::string& why) {
    auto p = ParseJobCheckpoint(JobCheckpointToJson(bad));
    EXPECT_EQ(p.status().code(), absl::StatusCode::kInvalidArgument) << why;
    EXPECT_THAT(std::string(p.status().message()), HasSubstr(why));
  };
  JobCheckpoint twice = jc;
  twice.members.push_back(twice.members[0]);
  refused(twice, "listed twice");
  JobCheckpoint digest = jc;
  digest.members[0].manifest_digest = "sha256:00";
  refused(digest, "manifest_digest");
  JobCheckpoint name = jc;
  name.job = "../etc";
  refused(name, "not a Kubernetes name");
  JobCheckpoint none = jc;
  none.members.clear();
  refused(none, "1 to 4096 members");
  auto newer = ParseJobCheckpoint(R"({"format": "cryo.job-checkpoint/v9"})");
  EXPECT_EQ(newer.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(ParseJobCheckpoint("[1").status().code(), absl::StatusCode::kInvalidArgument);
}

TEST_F(JobCheckpointTest, AJobCheckpointExistsOnceCommittedAndItsPartsAreItsOwn) {
  Manifest a = Part("a1", "left", "j1"), b = Part("b1", "right", "j1");
  // Before the commit: the parts are published, and no part restores alone.
  auto alone = CommittedJobCheckpointOf(*store_, a);
  EXPECT_EQ(alone.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(alone.status().message()), HasSubstr("never committed"));
  EXPECT_TRUE(store_->ListJobCheckpoints("ml", "sum")->empty());

  ASSERT_TRUE(store_->CommitJobCheckpoint(Record("j1", {a, b})).ok());
  auto list = store_->ListJobCheckpoints("ml", "sum");
  ASSERT_TRUE(list.ok()) << list.status();
  ASSERT_EQ(list->size(), 1u);
  EXPECT_EQ((*list)[0].members.size(), 2u);
  for (const Manifest& p : {a, b}) {
    auto of = CommittedJobCheckpointOf(*store_, *store_->Get(p.id));
    ASSERT_TRUE(of.ok()) << of.status();
    EXPECT_EQ(of->id, "j1");
  }
  EXPECT_EQ(store_->CommitJobCheckpoint(Record("j1", {a, b})).code(),
            absl::StatusCode::kAlreadyExists);
  EXPECT_TRUE(store_->ListJobCheckpoints("ml", "other")->empty()) << "records are per job";
}

TEST_F(JobCheckpointTest, ACommitNamingAMissingOrChangedPartWritesNothing) {
  Manifest a = Part("a1", "left", "j1");
  Manifest b;  // the member that died before its part was published
  b.id = "b1";
  b.job = JobPart{"ml", "sum", "j1", "right", {}, {}};
  auto s = store_->CommitJobCheckpoint(Record("j1", {a, b}));
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(s.message()), HasSubstr("member right's part 'b1' is not in the store"));
  EXPECT_TRUE(store_->ListJobCheckpoints("ml", "sum")->empty());

  // A part of another job checkpoint, or one whose manifest is not the one named.
  Manifest other = Part("b2", "right", "j0");
  s = store_->CommitJobCheckpoint(Record("j1", {a, other}));
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(s.message()), HasSubstr("is not member right's part of it"));
  Manifest right = Part("b3", "right", "j1");
  JobCheckpoint jc = Record("j1", {a, right});
  jc.members[1].manifest_digest = ManifestDigest(a);
  s = store_->CommitJobCheckpoint(jc);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(s.message()), HasSubstr("manifest digest differs"));
  EXPECT_TRUE(store_->ListJobCheckpoints("ml", "sum")->empty());
  EXPECT_TRUE(fs::ListDir(dir_.path + "/store/jobs")->empty()) << "no temporary record left";
}

TEST_F(JobCheckpointTest, APartChangedAfterTheCommitIsNotThePartCommitted) {
  Manifest a = Part("a1", "left", "j1"), b = Part("b1", "right", "j1");
  ASSERT_TRUE(store_->CommitJobCheckpoint(Record("j1", {a, b})).ok());
  // Whoever can write the store rewrites a part's manifest (another command, say).
  Manifest changed = *store_->Get("a1");
  changed.cmdline = {"/bin/sh", "-c", "evil"};
  ASSERT_TRUE(fs::WriteFileAtomic(dir_.path + "/store/checkpoints/a1/manifest.json",
                                  ManifestToJson(changed))
                  .ok());
  auto of = CommittedJobCheckpointOf(*store_, *store_->Get("a1"));
  EXPECT_EQ(of.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(of.status().message()), HasSubstr("changed since the commit"));
  // And a record rewritten to name other parts fails its signature.
  const std::string key(32, 'k');
  JobCheckpoint jc = *store_->GetJobCheckpoint("ml", "sum", "j1");
  jc.signature = SignJobCheckpoint(jc, key);
  jc.members[0].checkpoint_id = "a0";
  EXPECT_EQ(VerifyJobCheckpointSignature(jc, key).code(), absl::StatusCode::kPermissionDenied);
}

TEST_F(JobCheckpointTest, PartsNeverCommittedAreCollectedAndCommittedOnesStay) {
  Manifest a = Part("a1", "left", "j1"), b = Part("b1", "right", "j1");
  ASSERT_TRUE(store_->CommitJobCheckpoint(Record("j1", {a, b})).ok());
  Part("a2", "left", "j2");  // j2: the other member failed, no commit
  // Young parts may still be committed: they stay.
  ASSERT_TRUE(store_->CollectIncomplete(absl::Hours(1), false).ok());
  EXPECT_TRUE(store_->Get("a2").ok());
  auto n = store_->CollectIncomplete(absl::ZeroDuration(), false);
  ASSERT_TRUE(n.ok()) << n.status();
  EXPECT_EQ(store_->Get("a2").status().code(), absl::StatusCode::kNotFound);
  EXPECT_TRUE(store_->Get("a1").ok());
  EXPECT_TRUE(store_->Get("b1").ok());
  // A workload's retention leaves parts to their job checkpoint's.
  auto gone = store_->ApplyRetention("ml.sum.left", 0 + 1, {});
  ASSERT_TRUE(gone.ok());
  EXPECT_TRUE(gone->empty());
  EXPECT_TRUE(store_->Get("a1").ok());
}

TEST_F(JobCheckpointTest, DeletingAJobCheckpointTakesTheRecordFirstThenItsParts) {
  Manifest a = Part("a1", "left", "j1"), b = Part("b1", "right", "j1");
  ASSERT_TRUE(store_->CommitJobCheckpoint(Record("j1", {a, b})).ok());
  ASSERT_TRUE(store_->DeleteJobCheckpoint("ml", "sum", "j1").ok());
  EXPECT_EQ(store_->GetJobCheckpoint("ml", "sum", "j1").status().code(),
            absl::StatusCode::kNotFound);
  EXPECT_EQ(store_->Get("a1").status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(store_->Get("b1").status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(store_->DeleteJobCheckpoint("ml", "sum", "j1").code(), absl::StatusCode::kNotFound);
}

// A member's replacement arrives (job_gather): one entry per member of a job, replaced by its
// next arrival, beside the records without being one, and collected once old.
TEST_F(JobCheckpointTest, ArrivalsAreOnePerMemberAndNoRecordAndAreCollected) {
  Manifest a = Part("a1", "left", "j1"), b = Part("b1", "right", "j1");
  ASSERT_TRUE(store_->CommitJobCheckpoint(Record("j1", {a, b})).ok());
  const absl::Time t = absl::FromUnixSeconds(1'800'000'000);
  ASSERT_TRUE(store_
                  ->MarkJobArrival("ml", "sum",
                                   {"left", "j0", "node-b", t, {}, JobArrival::State::kArrived})
                  .ok());
  ASSERT_TRUE(
      store_
          ->MarkJobArrival(
              "ml", "sum",
              {"left", "j1", "node-a", t + absl::Seconds(1), {}, JobArrival::State::kArrived})
          .ok());
  ASSERT_TRUE(store_
                  ->MarkJobArrival("ml", "sum2",
                                   {"right", "j1", "node-a", t, {}, JobArrival::State::kArrived})
                  .ok());
  auto got = store_->JobArrivals("ml", "sum");
  ASSERT_TRUE(got.ok()) << got.status();
  ASSERT_EQ(got->size(), 1u) << "one per member: the later arrival replaced the first";
  EXPECT_EQ((*got)[0].member, "left");
  EXPECT_EQ((*got)[0].job_checkpoint, "j1");
  EXPECT_EQ((*got)[0].node, "node-a");
  EXPECT_EQ((*got)[0].at, t + absl::Seconds(1));
  EXPECT_EQ(store_->ListJobCheckpoints("ml", "sum")->size(), 1u) << "an arrival is no record";
  EXPECT_EQ(store_
                ->MarkJobArrival("ml", "sum",
                                 {"../x", "j1", "node-a", t, {}, JobArrival::State::kArrived})
                .code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(store_
                ->MarkJobArrival("ml", "sum",
                                 {"left", "../j1", "node-a", t, {}, JobArrival::State::kArrived})
                .code(),
            absl::StatusCode::kInvalidArgument);
  // A planted file that is no arrival is skipped.
  ASSERT_TRUE(fs::WriteFileAtomic(dir_.path + "/store/jobs/ml+sum@arrival@right", "{}").ok());
  EXPECT_EQ(store_->JobArrivals("ml", "sum")->size(), 1u);
  ASSERT_TRUE(store_->CollectIncomplete(absl::ZeroDuration(), false).ok());
  EXPECT_TRUE(store_->JobArrivals("ml", "sum")->empty());
  EXPECT_TRUE(store_->GetJobCheckpoint("ml", "sum", "j1").ok()) << "the record stays";
}

// A replacement's arrival carries its pod's addresses (the members' connections are rewritten
// to them) and, written again, whether it was restored or failed; once done it is removed. A
// part carries its pod's addresses at the cut. Anything not an address, or not a state, is
// refused.
TEST_F(JobCheckpointTest, ArrivalsAndPartsCarryThePodsAddresses) {
  const absl::Time t = absl::FromUnixSeconds(1'800'000'000);
  JobArrival a{"left", "j1", "node-b", t, {"10.88.2.3", "fd00::3"}, JobArrival::State::kRestored};
  auto back = ParseJobArrival(JobArrivalToJson(a));
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->pod_ips, a.pod_ips);
  EXPECT_EQ(back->state, JobArrival::State::kRestored);
  for (auto state : {JobArrival::State::kArrived, JobArrival::State::kFailed}) {
    a.state = state;
    back = ParseJobArrival(JobArrivalToJson(a));
    ASSERT_TRUE(back.ok());
    EXPECT_EQ(back->state, state);
  }
  nlohmann::json odd = nlohmann::json::parse(JobArrivalToJson(a));
  odd["state"] = "resumed-twice";
  EXPECT_FALSE(ParseJobArrival(odd.dump()).ok());
  ASSERT_TRUE(store_->MarkJobArrival("ml", "sum", a).ok());
  ASSERT_EQ(store_->JobArrivals("ml", "sum")->size(), 1u);
  ASSERT_TRUE(store_->RemoveJobArrival("ml", "sum", "left").ok());
  EXPECT_TRUE(store_->JobArrivals("ml", "sum")->empty());
  EXPECT_TRUE(store_->RemoveJobArrival("ml", "sum", "left").ok()) << "none is fine";
  EXPECT_EQ(store_->RemoveJobArrival("ml", "sum", "../x").code(),
            absl::StatusCode::kInvalidArgument);
  for (const char* bad : {R"(["10.88.2.3; drop"])", R"("10.88.2.3")", R"([7])"}) {
    nlohmann::json j = nlohmann::json::parse(JobArrivalToJson(a));
    j["pod_ips"] = nlohmann::json::parse(bad);
    EXPECT_FALSE(ParseJobArrival(j.dump()).ok()) << bad;
  }
  Manifest m = Part("a1", "left", "j1");
  m.job->pod_ips = {"10.88.1.2"};
  m.job->former_addresses = {{"10.88.0.7", "10.88.1.2"}, {"10.88.0.8", "10.88.2.3"}};
  auto parsed = ParseManifest(ManifestToJson(m));
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_EQ(parsed->job->pod_ips, m.job->pod_ips);
  EXPECT_EQ(parsed->job->former_addresses, m.job->former_addresses);
  nlohmann::json j = nlohmann::json::parse(ManifestToJson(m));
  j["job"]["pod_ips"] = {"10.88.1.2/24"};
  EXPECT_EQ(ParseManifest(j.dump()).status().code(), absl::StatusCode::kInvalidArgument);
  j = nlohmann::json::parse(ManifestToJson(m));
  j["job"]["former_addresses"]["10.88.0.9"] = "10.88.1.2 dnat to 1.2.3.4";
  EXPECT_EQ(ParseManifest(j.dump()).status().code(), absl::StatusCode::kInvalidArgument)
      << "what becomes a firewall rule is an address, nothing else";
  // A part written before the field (a manifest of an older cryod) has moved nowhere.
  j = nlohmann::json::parse(ManifestToJson(m));
  j["job"].erase("former_addresses");
  parsed = ParseManifest(j.dump());
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_TRUE(parsed->job->former_addresses.empty());
}

TEST_F(JobCheckpointTest, ARecordPlantedAsALinkOrForAnotherJobIsRefused) {
  Manifest a = Part("a1", "left", "j1"), b = Part("b1", "right", "j1");
  ASSERT_TRUE(store_->CommitJobCheckpoint(Record("j1", {a, b})).ok());
  const std::string jobs = dir_.path + "/store/jobs/";
  // Another namespace's job renamed into ours: the record says whose it is.
  ASSERT_EQ(::rename((jobs + "ml+sum+j1.json").c_str(), (jobs + "dev+sum+j1.json").c_str()), 0);
  EXPECT_EQ(store_->GetJobCheckpoint("dev", "sum", "j1").status().code(),
            absl::StatusCode::kDataLoss);
  ASSERT_EQ(::symlink((jobs + "dev+sum+j1.json").c_str(), (jobs + "ml+sum+j1.json").c_str()), 0);
  EXPECT_FALSE(store_->GetJobCheckpoint("ml", "sum", "j1").ok());
  EXPECT_TRUE(store_->ListJobCheckpoints("ml", "sum")->empty());
  EXPECT_EQ(store_->GetJobCheckpoint("ml", "../x", "j1").status().code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace cryo::store
