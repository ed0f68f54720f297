#include "daemon/journal/journal.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "gtest/gtest.h"
#include "lib/base/fs.h"
#include "test/daemon/test_util.h"

namespace cryo::journal {
namespace {

TEST(Journal, PutLoadRemove) {
  TempDir d;
  auto j = Journal::Open(d.path + "/journal");
  ASSERT_TRUE(j.ok());
  Entry e;
  e.op_id = "ch-1";
  e.kind = OpKind::kCheckpoint;
  e.checkpoint_id = "c1";
  e.state = OpState::kDumped;
  e.steps = {"stage", "gpu_lock"};
  e.tasks = {{100, 5, false}, {101, 6, true}};
  e.staging_dir = "/s/c1+n+x";
  e.leave_running = true;
  e.gpu = {{100, "cuda", {{"uuid", "GPU-1"}}, 0}};
  ASSERT_TRUE((*j)->Put(e).ok());
  e.state = OpState::kPublished;
  ASSERT_TRUE((*j)->Put(e).ok());  // replaces, never duplicates
  auto all = (*j)->LoadAll();
  ASSERT_TRUE(all.ok());
  ASSERT_EQ(all->size(), 1u);
  EXPECT_EQ((*all)[0].state, OpState::kPublished);
  EXPECT_EQ((*all)[0].steps, (std::vector<std::string>{"stage", "gpu_lock"}));
  EXPECT_TRUE((*all)[0].tasks[1].was_stopped);
  EXPECT_EQ((*all)[0].tasks.size(), 2u);
  EXPECT_EQ((*all)[0].tasks[1].start_time, 6u);
  EXPECT_TRUE((*all)[0].leave_running);
  EXPECT_EQ((*all)[0].gpu[0].plugin, "cuda");
  ASSERT_TRUE((*j)->Remove("ch-1").ok());
  EXPECT_TRUE((*j)->LoadAll()->empty());
  EXPECT_TRUE((*j)->Remove("ch-1").ok()) << "removing twice is fine";
}

// Every entry carries the boot it was written in; one without (an older cryod's) is taken as of
// this boot, as before.
TEST(Journal, EntriesCarryTheBootTheyWereWrittenIn) {
  TempDir d;
  auto now = Journal::Open(d.path, "boot-2");
  auto earlier = Journal::Open(d.path, "boot-1");
  ASSERT_TRUE(now.ok() && earlier.ok());
  Entry e;
  e.op_id = "old";
  e.boot_id = "ignored: the journal stamps its own";
  ASSERT_TRUE((*earlier)->Put(e).ok());
  e.op_id = "new";
  ASSERT_TRUE((*now)->Put(e).ok());
  ASSERT_TRUE(
      fs::WriteFileAtomic(d.path + "/unstamped.json",
                          R"({"op_id": "unstamped", "kind": "checkpoint", "state": "dumped"})")
          .ok());
  auto all = (*now)->LoadAll();
  ASSERT_TRUE(all.ok());
  ASSERT_EQ(all->size(), 3u);
  for (const Entry& got : *all) {
    EXPECT_EQ((*now)->OfEarlierBoot(got), got.op_id == "old") << got.op_id;
    if (got.op_id == "old") {
      EXPECT_EQ(got.boot_id, "boot-1");
    }
  }
  EXPECT_FALSE(CurrentBootId().empty()) << "no /proc/sys/kernel/random/boot_id";
}

// Two cryods sharing a journal would undo each other's operations: the second is refused, and
// the lock file is no entry (LoadAll neither returns nor removes it).
TEST(Journal, OneCryodHoldsAJournal) {
  TempDir d;
  auto first = Journal::Open(d.path);
  auto second = Journal::Open(d.path);
  ASSERT_TRUE(first.ok() && second.ok());
  ASSERT_TRUE((*first)->HoldExclusively().ok());
  absl::Status st = (*second)->HoldExclusively();
  EXPECT_EQ(st.code(), absl::StatusCode::kFailedPrecondition) << st;
  EXPECT_NE(st.message().find("journal_dir"), std::string::npos) << st;
  auto all = (*first)->LoadAll();
  ASSERT_TRUE(all.ok());
  EXPECT_TRUE(all->empty());
  EXPECT_TRUE(fs::Exists(d.path + "/.lock"));
  first->reset();  // cryod gone: the next one takes it
  EXPECT_TRUE((*second)->HoldExclusively().ok());
}

// A cryod whose journal_dir changed (the chart's move to /run) takes over what its predecessor
// left in the former place, boot id and all; garbage there stays behind.
TEST(Journal, AdoptsTheEntriesOfItsFormerPlace) {
  TempDir d;
  auto old = Journal::Open(d.path + "/state/journal", "boot-1");
  auto now = Journal::Open(d.path + "/run/journal", "boot-2");
  ASSERT_TRUE(old.ok() && now.ok());
  Entry e;
  e.op_id = "left-in-flight";
  e.steps = {"stage", "dump"};
  ASSERT_TRUE((*old)->Put(e).ok());
  ASSERT_TRUE(fs::WriteFileAtomic(d.path + "/state/journal/junk.json", "{").ok());
  auto moved = (*now)->Adopt(d.path + "/state/journal");
  ASSERT_TRUE(moved.ok()) << moved.status();
  EXPECT_EQ(*moved, 1);
  auto all = (*now)->LoadAll();
  ASSERT_TRUE(all.ok());
  ASSERT_EQ(all->size(), 1u);
  EXPECT_EQ((*all)[0].steps, e.steps);
  EXPECT_EQ((*all)[0].boot_id, "boot-1");
  EXPECT_FALSE(fs::Exists(d.path + "/state/journal/left-in-flight.json"));
  EXPECT_EQ(*(*now)->Adopt(d.path + "/no-such-dir"), 0);
}

TEST(Journal, DropsCorruptEntriesAndTemporaries) {
  TempDir d;
  auto j = Journal::Open(d.path);
  ASSERT_TRUE(fs::WriteFileAtomic(d.path + "/bad.json", "{truncated").ok());
  ASSERT_TRUE(fs::WriteFileAtomic(d.path + "/x.json.tmp.1.2", "{}").ok());
  auto all = (*j)->LoadAll();
  ASSERT_TRUE(all.ok());
  EXPECT_TRUE(all->empty());
  EXPECT_TRUE(fs::ListDir(d.path)->empty());
}

TEST(Journal, MistypedEntriesAreDroppedNotThrown) {
  TempDir d;
  auto j = Journal::Open(d.path);
  for (const char* bad : {R"({"op_id": 7, "kind": "checkpoint", "state": "dumped"})",
                          R"({"op_id": "a", "kind": "checkpoint", "state": "sleeping"})",
                          R"({"op_id": "b", "kind": "checkpoint", "state": "dumped",
                              "tasks": [{"pid": "x", "start_time": 1}]})",
                          R"({"op_id": "c", "kind": "checkpoint", "state": "dumped",
                              "gpu": [{"pid": 1}]})",
                          R"({"op_id": "../../etc", "kind": "restore", "state": "restoring"})"}) {
    static int n = 0;
    ASSERT_TRUE(fs::WriteFileAtomic(d.path + "/e" + std::to_string(n++) + ".json", bad).ok());
  }
  auto all = (*j)->LoadAll();
  ASSERT_TRUE(all.ok());
  EXPECT_TRUE(all->empty());
}

// Found on 2026-11-24: LoadAll read a whole file before its 1 MiB check, through links, and a
// FIFO named like an entry hung cryod's start. Now an entry is sized before it is read, opened
// without following links and only as a regular file; anything else is dropped.
TEST(Journal, HugeLinkedAndFifoEntriesAreDroppedWithoutReadingThem) {
  TempDir d;
  const std::string dir = d.path + "/journal";
  auto j = Journal::Open(dir);
  ASSERT_TRUE(j.ok());
  Entry e;
  e.op_id = "good-1";
  e.checkpoint_id = "c1";
  ASSERT_TRUE((*j)->Put(e).ok());
  // A 64 GiB sparse file: reading it first would take minutes and all memory.
  int fd = ::open((dir + "/huge.json").c_str(), O_CREAT | O_WRONLY | O_CLOEXEC, 0600);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(::ftruncate(fd, int64_t{64} << 30), 0);
  ::close(fd);
  ASSERT_EQ(::mkfifo((dir + "/fifo.json").c_str(), 0600), 0);
  ASSERT_TRUE(
      fs::WriteFileAtomic(d.path + "/elsewhere.json",
                          R"({"op_id": "linked", "kind": "checkpoint", "state": "started"})")
          .ok());
  ASSERT_EQ(::symlink((d.path + "/elsewhere.json").c_str(), (dir + "/linked.json").c_str()), 0);

  auto all = (*j)->LoadAll();
  ASSERT_TRUE(all.ok()) << all.status();
  ASSERT_EQ(all->size(), 1u);
  EXPECT_EQ((*all)[0].op_id, "good-1");
  for (const char* gone : {"/huge.json", "/fifo.json", "/linked.json"}) {
    EXPECT_FALSE(fs::Exists(dir + gone)) << gone;
  }
  EXPECT_TRUE(fs::Exists(d.path + "/elsewhere.json")) << "a link's target is not the journal's";
}

}  // namespace
}  // namespace cryo::journal
