#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <utime.h>

#include "daemon/store/store.h"
#include "gtest/gtest.h"
#include "lib/base/fs.h"
#include "test/daemon/test_util.h"

namespace cryo::store {
namespace {

Manifest M(const std::string& id, const std::string& workload, const std::string& created) {
  Manifest m;
  m.id = id;
  m.workload = workload;
  m.created_at = created;
  m.root_pid = 1234;
  m.files = {{"images/pages-1.img", 5, "x"}};
  return m;
}

class LocalStoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto s = CreateLocalStore({dir_.path + "/store", "node-a", true});
    ASSERT_TRUE(s.ok()) << s.status();
    store_ = std::move(*s);
  }
  void Publish(const std::string& id, const std::string& workload, const std::string& created) {
    auto st = store_->Stage(id);
    ASSERT_TRUE(st.ok()) << st.status();
    ASSERT_TRUE(fs::WriteFileAtomic((*st)->images_dir() + "/pages-1.img", "hello", 0644).ok());
    ASSERT_TRUE((*st)->Publish(M(id, workload, created)).ok());
  }
  TempDir dir_;
  std::unique_ptr<CheckpointStore> store_;
};

TEST_F(LocalStoreTest, StagedIsInvisibleUntilPublished) {
  auto st = store_->Stage("c1");
  ASSERT_TRUE(st.ok());
  ASSERT_TRUE(fs::WriteFileAtomic((*st)->images_dir() + "/pages-1.img", "hello").ok());
  EXPECT_EQ(store_->Get("c1").status().code(), absl::StatusCode::kNotFound);
  EXPECT_TRUE(store_->List()->empty());
  ASSERT_TRUE((*st)->Publish(M("c1", "w", "2026-01-01")).ok());
  auto got = store_->Get("c1");
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(got->workload, "w");
  EXPECT_FALSE(fs::Exists((*st)->staging_dir()));
  EXPECT_TRUE(fs::ListDir(dir_.path + "/store/.staging")->empty());
}

TEST_F(LocalStoreTest, ImagesAreOwnerOnly) {
  Publish("c1", "w", "2026-01-01");
  struct stat st;
  ASSERT_EQ(::stat((dir_.path + "/store/checkpoints/c1").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0700u);
  ASSERT_EQ(::stat((dir_.path + "/store/checkpoints/c1/images/pages-1.img").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u) << "images hold process memory";
  ASSERT_EQ(::stat((dir_.path + "/store/checkpoints/c1/manifest.json").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
}

TEST_F(LocalStoreTest, DuplicateIdsAndBadIdsAreRefused) {
  Publish("c1", "w", "2026-01-01");
  EXPECT_EQ(store_->Stage("c1").status().code(), absl::StatusCode::kAlreadyExists);
  // Two writers racing for one id: the second publish loses and nothing is overwritten.
  auto a = store_->Stage("c2");
  auto b = store_->Stage("c2");
  ASSERT_TRUE(a.ok() && b.ok());
  ASSERT_TRUE((*a)->Publish(M("c2", "first", "2026-01-02")).ok());
  EXPECT_EQ((*b)->Publish(M("c2", "second", "2026-01-02")).code(),
            absl::StatusCode::kAlreadyExists);
  EXPECT_EQ(store_->Get("c2")->workload, "first");
  for (const char* bad : {"../x", "", ".x", "a/b"}) {
    EXPECT_EQ(store_->Stage(bad).status().code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_EQ(store_->Get(bad).status().code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_EQ(store_->Delete(bad).code(), absl::StatusCode::kInvalidArgument) << bad;
  }
}

TEST_F(LocalStoreTest, AbortAndDestructorRemoveStaging) {
  std::string dir;
  {
    auto st = store_->Stage("c1");
    ASSERT_TRUE(st.ok());
    dir = (*st)->staging_dir();
    EXPECT_TRUE(fs::IsDir(dir));
  }
  EXPECT_FALSE(fs::Exists(dir)) << "an unpublished stage must not outlive its owner";
}

TEST_F(LocalStoreTest, ListNewestFirstDeleteAndRetention) {
  Publish("a1", "a", "2026-01-01T00:00:01Z");
  Publish("a2", "a", "2026-01-01T00:00:02Z");
  Publish("b1", "b", "2026-01-01T00:00:03Z");
  Publish("a3", "a", "2026-01-01T00:00:04Z");
  auto all = store_->List();
  ASSERT_EQ(all->size(), 4u);
  EXPECT_EQ((*all)[0].id, "a3");
  EXPECT_EQ((*all)[3].id, "a1");
  // a1 is being read by a restore: retention leaves it for a later pass.
  auto kept = store_->ApplyRetention("a", 2, {"a1"});
  ASSERT_TRUE(kept.ok());
  EXPECT_TRUE(kept->empty());
  EXPECT_TRUE(store_->Get("a1").ok());
  auto deleted = store_->ApplyRetention("a", 2, {});
  ASSERT_TRUE(deleted.ok());
  EXPECT_EQ(*deleted, std::vector<std::string>{"a1"});
  EXPECT_EQ(store_->List()->size(), 3u);
  EXPECT_TRUE(store_->Get("b1").ok()) << "other workloads untouched";
  EXPECT_FALSE(fs::Exists(dir_.path + "/store/checkpoints/a1"));
  EXPECT_TRUE(store_->Delete("a2").ok());
  EXPECT_EQ(store_->Delete("a2").code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(store_->Get("a2").status().code(), absl::StatusCode::kNotFound);
}

// Retention keeps the newest K *good* checkpoints: a damaged one does not take a place (a
// workload with periodic checkpoints must keep K it can resume from).
TEST_F(LocalStoreTest, RetentionKeepsTheNewestGoodOnesADamagedOneTakesNoPlace) {
  Publish("p1", "w", "2026-01-01T00:00:01Z");
  Publish("p2", "w", "2026-01-01T00:00:02Z");
  Publish("p3", "w", "2026-01-01T00:00:03Z");
  Publish("p4", "w", "2026-01-01T00:00:04Z");
  ASSERT_TRUE(store_->MarkDamaged("p4", "images/pages-1.img: checksum mismatch").ok());
  ASSERT_TRUE(store_->MarkDamaged("p1", "images/pages-1.img: checksum mismatch").ok());
  auto deleted = store_->ApplyRetention("w", 2, {});
  ASSERT_TRUE(deleted.ok()) << deleted.status();
  // p3 and p2 are the two good ones; p4 (damaged, newer) stays for inspection; p1 goes.
  EXPECT_EQ(*deleted, std::vector<std::string>{"p1"});
  EXPECT_TRUE(store_->Get("p2").ok());
  EXPECT_TRUE(store_->Get("p3").ok());
  EXPECT_TRUE(store_->Get("p4").ok());
}

TEST_F(LocalStoreTest, DamagedIsRecordedBesideTheManifest) {
  Publish("c1", "w", "2026-01-01T00:00:00Z");
  EXPECT_EQ(store_->Get("c1")->damaged, "");
  ASSERT_TRUE(store_->MarkDamaged("c1", "images/pages-1.img: checksum mismatch").ok());
  EXPECT_EQ(store_->Get("c1")->damaged, "images/pages-1.img: checksum mismatch");
  EXPECT_EQ(store_->List()->at(0).damaged, "images/pages-1.img: checksum mismatch");
  EXPECT_EQ(store_->MarkDamaged("nope", "x").code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(store_->MarkDamaged("../x", "x").code(), absl::StatusCode::kInvalidArgument);
  ASSERT_TRUE(store_->Delete("c1").ok()) << "a damaged checkpoint is deleted like any other";
  EXPECT_EQ(store_->Get("c1").status().code(), absl::StatusCode::kNotFound);
}

TEST_F(LocalStoreTest, TamperedManifestIdIsRejected) {
  Publish("c1", "w", "2026-01-01");
  ASSERT_EQ(::rename((dir_.path + "/store/checkpoints/c1").c_str(),
                     (dir_.path + "/store/checkpoints/c9").c_str()),
            0);
  EXPECT_EQ(store_->Get("c9").status().code(), absl::StatusCode::kDataLoss);
}

// List keeps the manifests it parsed (a plan at a stop lists the whole store); every change to
// a manifest's file is seen, as are damage marks, checkpoints deleted by another node and one
// published again under a deleted one's id.
TEST_F(LocalStoreTest, ListedManifestsAreReadAgainWheneverTheirFileChanges) {
  Publish("c1", "w", "2026-01-01T00:00:01Z");
  Publish("c2", "w", "2026-01-01T00:00:02Z");
  ASSERT_EQ(store_->List()->size(), 2u);
  const std::string c1 = dir_.path + "/store/checkpoints/c1";

  // Rewritten in place, same length: another mtime and ctime.
  auto text = fs::ReadFile(c1 + "/manifest.json");
  ASSERT_TRUE(text.ok());
  std::string changed = *text;
  const size_t at = changed.find("\"workload\": \"w\"");
  ASSERT_NE(at, std::string::npos) << changed;
  changed.replace(at, 15, "\"workload\": \"v\"");
  int fd = ::open((c1 + "/manifest.json").c_str(), O_WRONLY | O_CLOEXEC);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(::pwrite(fd, changed.data(), changed.size(), 0), static_cast<ssize_t>(changed.size()));
  ::close(fd);
  auto listed = store_->List();
  ASSERT_TRUE(listed.ok());
  ASSERT_EQ(listed->size(), 2u);
  EXPECT_EQ(listed->at(1).workload, "v") << "a changed manifest was not read again";

  ASSERT_TRUE(store_->MarkDamaged("c2", "images/pages-1.img: checksum mismatch").ok());
  EXPECT_EQ(store_->List()->at(0).damaged, "images/pages-1.img: checksum mismatch");

  // Deleted by another node, then published again under the same id by a third.
  ASSERT_TRUE(fs::RemoveTree(c1).ok());
  ASSERT_EQ(store_->List()->size(), 1u);
  Publish("c1", "u", "2026-01-01T00:00:03Z");
  listed = store_->List();
  ASSERT_TRUE(listed.ok());
  ASSERT_EQ(listed->size(), 2u);
  EXPECT_EQ(listed->at(0).id, "c1");
  EXPECT_EQ(listed->at(0).workload, "u");
  EXPECT_EQ(store_->Get("c1")->created_at, "2026-01-01T00:00:03Z");
}

// A refused manifest is remembered by its file's identity too (parsed once, not on every
// listing) and is read again, and listed, once its file changes.
TEST_F(LocalStoreTest, ARefusedManifestStaysRefusedUntilItsFileChanges) {
  Publish("c1", "w", "2026-01-01T00:00:01Z");
  const std::string path = dir_.path + "/store/checkpoints/c1/manifest.json";
  auto good = fs::ReadFile(path);
  ASSERT_TRUE(good.ok());
  ASSERT_TRUE(fs::WriteFileAtomic(path, "{\"version\": \"not a manifest\"").ok());
  for (int i = 0; i < 3; ++i) {
    EXPECT_TRUE(store_->List()->empty());
    EXPECT_EQ(store_->Get("c1").status().code(), absl::StatusCode::kInvalidArgument)
        << store_->Get("c1").status();
  }
  ASSERT_TRUE(fs::WriteFileAtomic(path, *good).ok());
  ASSERT_EQ(store_->List()->size(), 1u);
  EXPECT_TRUE(store_->Get("c1").ok());
}

TEST_F(LocalStoreTest, LinkedCheckpointsAndManifestsAreNotCheckpoints) {
  Publish("real", "w", "2026-11-22T08:00:00.000Z");
  // A checkpoint directory that is a link to another, and a manifest that is a link.
  const std::string root = dir_.path + "/store/checkpoints";
  ASSERT_EQ(::symlink((root + "/real").c_str(), (root + "/alias").c_str()), 0);
  ASSERT_TRUE(fs::MakeDirs(root + "/fake").ok());
  ASSERT_EQ(
      ::symlink((root + "/real/manifest.json").c_str(), (root + "/fake/manifest.json").c_str()), 0);
  EXPECT_FALSE(store_->Get("alias").ok());
  EXPECT_FALSE(store_->LocalPath("alias").ok());
  EXPECT_FALSE(store_->Get("fake").ok());
  auto all = store_->List();
  ASSERT_TRUE(all.ok());
  ASSERT_EQ(all->size(), 1u);
  EXPECT_EQ((*all)[0].id, "real");
}

TEST_F(LocalStoreTest, CollectIncomplete) {
  auto mine = store_->Stage("m1");
  ASSERT_TRUE(mine.ok());
  std::string mine_dir = (*mine)->staging_dir();
  // Another node's stage, fresh (may be in progress) and old (abandoned).
  std::string fresh = dir_.path + "/store/.staging/x+node-b+aaaa";
  std::string old = dir_.path + "/store/.staging/y+node-b+bbbb";
  ASSERT_TRUE(fs::MakeDirs(fresh).ok());
  ASSERT_TRUE(fs::MakeDirs(old).ok());
  struct utimbuf t {
    1000, 1000
  };
  ::utime(old.c_str(), &t);
  // A published directory whose manifest never arrived.
  std::string orphan = dir_.path + "/store/checkpoints/orphan";
  ASSERT_TRUE(fs::MakeDirs(orphan).ok());
  ::utime(orphan.c_str(), &t);
  // While this node may be checkpointing, its own stages are left alone.
  auto n = store_->CollectIncomplete(absl::Hours(1), false);
  ASSERT_TRUE(n.ok());
  EXPECT_EQ(*n, 2);
  EXPECT_TRUE(fs::Exists(mine_dir));
  EXPECT_TRUE(fs::Exists(fresh));
  EXPECT_FALSE(fs::Exists(old));
  EXPECT_FALSE(fs::Exists(orphan));
  // At start, nothing of this node is in progress: its stages are abandoned.
  n = store_->CollectIncomplete(absl::Hours(1), true);
  ASSERT_TRUE(n.ok());
  EXPECT_EQ(*n, 1);
  EXPECT_FALSE(fs::Exists(mine_dir));
  EXPECT_TRUE(fs::Exists(fresh));
}

// One manifest with oversized labels (written by hand into a shared store) is skipped; every
// other checkpoint is still listed.
TEST_F(LocalStoreTest, AnOversizedManifestIsSkippedAndTheOthersListed) {
  Publish("good", "w", "2026-01-01");
  Publish("big", "w", "2026-01-02");
  const std::string path = dir_.path + "/store/checkpoints/big/manifest.json";
  auto text = fs::ReadFile(path);
  ASSERT_TRUE(text.ok());
  const std::string huge(1 << 20, 'x');
  std::string labels = "\"labels\": {\"a\": \"" + huge + "\", \"b\": \"" + huge + "\"},";
  std::string t = *text;
  const size_t at = t.find("\"labels\"");
  ASSERT_NE(at, std::string::npos);
  t.replace(at, t.find('}', at) - at + 2, labels);
  ASSERT_TRUE(fs::WriteFileAtomic(path, t).ok());
  EXPECT_EQ(store_->Get("big").status().code(), absl::StatusCode::kInvalidArgument)
      << store_->Get("big").status();
  auto all = store_->List();
  ASSERT_TRUE(all.ok()) << all.status();
  ASSERT_EQ(all->size(), 1u);
  EXPECT_EQ((*all)[0].id, "good");
}

// A host directory outside the store, with contents that must survive whatever the store does.
struct Outside {
  TempDir dir;
  Outside() {
    EXPECT_TRUE(fs::WriteFileAtomic(dir.path + "/keep", "host file").ok());
    EXPECT_TRUE(fs::MakeDirs(dir.path + "/sub").ok());
    EXPECT_TRUE(fs::WriteFileAtomic(dir.path + "/sub/keep", "host file").ok());
  }
  bool Intact() const {
    return fs::Exists(dir.path + "/keep") && fs::Exists(dir.path + "/sub/keep");
  }
};

// Found on 2026-11-24: collection listed `.trash` with opendir, which follows a link, and removed
// what it found there: a store writer who replaced `.trash` by a link to a host directory had
// root on every node empty that directory.
TEST_F(LocalStoreTest, ALinkedTrashOrStagingIsRefusedAndNothingOutsideIsDeleted) {
  Publish("c1", "w", "2026-01-01");
  for (const char* layout : {".trash", ".staging", "checkpoints"}) {
    SCOPED_TRACE(layout);
    Outside outside;
    const std::string p = dir_.path + "/store/" + layout;
    const std::string aside = p + ".real";
    ASSERT_EQ(::rename(p.c_str(), aside.c_str()), 0);
    ASSERT_EQ(::symlink(outside.dir.path.c_str(), p.c_str()), 0);

    auto n = store_->CollectIncomplete(absl::ZeroDuration(), true);
    EXPECT_EQ(n.status().code(), absl::StatusCode::kFailedPrecondition) << n.status();
    EXPECT_EQ(store_->CheckWritable().code(), absl::StatusCode::kFailedPrecondition);
    EXPECT_NE(store_->CheckWritable().message().find(layout), absl::string_view::npos)
        << store_->CheckWritable();
    if (std::string(layout) == ".staging") {
      EXPECT_FALSE(store_->RemoveStagingDir(dir_.path + "/store/.staging/keep+node-a+x").ok());
      EXPECT_FALSE(store_->Stage("c2").ok());
    } else {
      EXPECT_FALSE(store_->Delete("c1").ok());
    }
    EXPECT_TRUE(outside.Intact());

    ASSERT_EQ(::unlink(p.c_str()), 0);
    ASSERT_EQ(::rename(aside.c_str(), p.c_str()), 0);
  }
  EXPECT_TRUE(store_->Get("c1").ok());
}

// Links as entries of the layout's directories, and inside a checkpoint: each link goes, what it
// points at stays.
TEST_F(LocalStoreTest, LinksInsideTheStoreAreRemovedThemselvesNeverFollowed) {
  Outside outside;
  const std::string root = dir_.path + "/store";
  for (const std::string& link : {root + "/.trash/gone+abcd", root + "/.staging/x+node-b+aaaa",
                                  root + "/.staging/y+node-a+bbbb", root + "/checkpoints/junk"}) {
    ASSERT_EQ(::symlink(outside.dir.path.c_str(), link.c_str()), 0) << link;
  }
  Publish("c1", "w", "2026-01-01");
  ASSERT_EQ(::symlink(outside.dir.path.c_str(), (root + "/checkpoints/c1/images/link").c_str()), 0);
  auto n = store_->CollectIncomplete(absl::ZeroDuration(), true);
  ASSERT_TRUE(n.ok()) << n.status();
  EXPECT_EQ(*n, 4);
  EXPECT_TRUE(fs::ListDir(root + "/.trash")->empty());
  EXPECT_TRUE(fs::ListDir(root + "/.staging")->empty());
  EXPECT_TRUE(store_->Delete("c1").ok());
  EXPECT_TRUE(fs::ListDir(root + "/checkpoints")->empty());
  EXPECT_TRUE(outside.Intact());
}

// Found on 2026-11-24: a store directory deleted and made again under a running cryod gave 404s
// from the API until cryod restarted.
TEST_F(LocalStoreTest, ADeletedStoreIsUnavailableAndARecreatedOneIsUsedAgain) {
  Publish("c1", "w", "2026-01-01");
  const std::string root = dir_.path + "/store";
  ASSERT_TRUE(fs::RemoveTree(root).ok());
  EXPECT_EQ(store_->CheckWritable().code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(store_->List().status().code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(store_->Get("c1").status().code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(store_->Stage("c2").status().code(), absl::StatusCode::kUnavailable);
  EXPECT_FALSE(fs::Exists(root)) << "a missing store is not made again behind the admin's back";

  ASSERT_EQ(::mkdir(root.c_str(), 0700), 0);
  EXPECT_TRUE(store_->CheckWritable().ok()) << store_->CheckWritable();
  auto all = store_->List();
  ASSERT_TRUE(all.ok()) << all.status();
  EXPECT_TRUE(all->empty());
  EXPECT_EQ(store_->Get("c1").status().code(), absl::StatusCode::kNotFound);
  Publish("c2", "w", "2026-01-02");
  EXPECT_TRUE(store_->Get("c2").ok());

  // A layout directory removed on its own comes back too.
  ASSERT_TRUE(fs::RemoveTree(root + "/.trash").ok());
  EXPECT_TRUE(store_->Delete("c2").ok());
  EXPECT_TRUE(store_->List()->empty());
}

TEST(LocalStore, RelativeRootIsRefused) {
  EXPECT_EQ(CreateLocalStore({"relative/path", "n", true}).status().code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace cryo::store
