// The transaction on its own (daemon/engine/transaction.h): order, rollback, the commit, steps
// that do not apply, the stages it begins, the journal hook, and replaying undos by name.

#include "daemon/engine/transaction.h"

#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace cryo::engine {
namespace {

using ::testing::ElementsAre;

struct Log {
  Log() : je{&events} {}
  Log(const Log&) = delete;
  Log& operator=(const Log&) = delete;
  // What "the journal" holds: here, where the undos say what they did.
  struct Durable {
    std::vector<std::string>* events;
  };
  // The live handles an undo may use: absent (null) in recovery.
  struct Live {};
  std::vector<std::string> events;
  bool gpu = false;  // whether the "gpu" step applies
  Durable je;
  Live live;
  const Durable& JournalEntry() const { return je; }
};

Step<Log> Make(const std::string& name, bool with_undo, absl::Status result = absl::OkStatus(),
               Stage stage = Stage::kUnspecified) {
  Step<Log> s;
  s.name = name;
  s.stage = stage;
  s.run = [name, result](Log& l) {
    l.events.push_back("run " + name);
    return result;
  };
  if (with_undo) {
    s.undo = [name](const Log::Durable& d, Log::Live* live) {
      d.events->push_back("undo " + name + (live ? "" : " (recovery)"));
    };
  }
  return s;
}

Transaction<Log>::Hooks Recording(Log& l) {
  Transaction<Log>::Hooks h;
  h.on_begin = [&l](const std::string& name) {
    l.events.push_back("journal " + name);
    return absl::OkStatus();
  };
  h.begin_stage = [&l](Stage st, const StageSize& size) {
    l.events.push_back("stage " + std::to_string(static_cast<int>(st)) + " " +
                       std::to_string(size.bytes) + " " + size.note);
  };
  h.on_rolled_back = [&l] { l.events.push_back("rolled back"); };
  return h;
}

TEST(TransactionTest, AFailingStepUndoesWhatBeganNewestFirst) {
  Transaction<Log> t({Make("a", true), Make("b", false), Make("c", true),
                      Make("d", true, absl::UnavailableError("d failed"))});
  Log l;
  absl::Status st = t.Run(l, Recording(l));
  EXPECT_EQ(st.code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(l.events,
              ElementsAre("journal a", "run a", "run b", "journal c", "run c", "journal d", "run d",
                          "undo d", "undo c", "undo a", "rolled back"));
}

TEST(TransactionTest, AStepThatDoesNotApplyIsNeitherRunNorJournaledNorUndone) {
  Step<Log> gpu = Make("gpu", true, absl::OkStatus(), Stage::kGpuLock);
  gpu.applies = [](const Log& l) { return l.gpu; };
  gpu.size = [](const Log&) { return StageSize{7, "one GPU"}; };
  Transaction<Log> t({Make("a", true), gpu, Make("z", false, absl::InternalError("z"))});
  Log without;
  EXPECT_FALSE(t.Run(without, Recording(without)).ok());
  EXPECT_THAT(without.events, ElementsAre("journal a", "run a", "run z", "undo a", "rolled back"));

  Log with;
  with.gpu = true;
  EXPECT_FALSE(t.Run(with, Recording(with)).ok());
  const std::string stage =
      "stage " + std::to_string(static_cast<int>(Stage::kGpuLock)) + " 7 one GPU";
  EXPECT_THAT(with.events, ElementsAre("journal a", "run a", "journal gpu", stage, "run gpu",
                                       "run z", "undo gpu", "undo a", "rolled back"));
}

TEST(TransactionTest, NothingIsUndoneAfterTheCommit) {
  Step<Log> commit = Make("publish", false);
  commit.commit = true;
  Transaction<Log> t({Make("a", true), commit, Make("after", true, absl::InternalError("late"))});
  Log l;
  absl::Status st = t.Run(l, Recording(l));
  EXPECT_EQ(st.code(), absl::StatusCode::kInternal);
  // After the commit no step is journaled or undone: the checkpoint is published.
  EXPECT_THAT(l.events, ElementsAre("journal a", "run a", "run publish", "run after"));
}

TEST(TransactionTest, AStepThatEndsTheTransactionRunsNothingAfterItAndSucceeds) {
  Step<Log> plan = Make("plan", false);
  plan.ends = [](const Log& l) { return l.gpu; };  // "gpu" stands for "decided: nothing to do"
  Transaction<Log> t({Make("validate", false), plan, Make("stage", true), Make("dump", true)});
  Log ends;
  ends.gpu = true;
  EXPECT_TRUE(t.Run(ends, Recording(ends)).ok());
  EXPECT_THAT(ends.events, ElementsAre("run validate", "run plan"));

  Log goes_on;
  EXPECT_TRUE(t.Run(goes_on, Recording(goes_on)).ok());
  EXPECT_THAT(goes_on.events, ElementsAre("run validate", "run plan", "journal stage", "run stage",
                                          "journal dump", "run dump"));
}

TEST(TransactionTest, AStepThatMayEndItComesBeforeAnyUndo) {
  Step<Log> plan = Make("plan", false);
  plan.ends = [](const Log&) { return true; };
  EXPECT_THROW(Transaction<Log>({Make("stage", true), plan}), std::logic_error);
}

TEST(TransactionTest, ABeforeHookThatRefusesStopsThereAndRollsBack) {
  Transaction<Log> t({Make("a", true), Make("b", true)});
  Log l;
  auto h = Recording(l);
  h.before = [](const Step<Log>& s) {
    return s.name == "b" ? absl::CancelledError("cancelled") : absl::OkStatus();
  };
  EXPECT_EQ(t.Run(l, h).code(), absl::StatusCode::kCancelled);
  EXPECT_THAT(l.events, ElementsAre("journal a", "run a", "undo a", "rolled back"));
}

TEST(TransactionTest, AJournalThatCannotRecordAStepStopsBeforeIt) {
  Transaction<Log> t({Make("a", true), Make("b", true)});
  Log l;
  auto h = Recording(l);
  h.on_begin = [&l](const std::string& name) {
    if (name == "b") return absl::ResourceExhaustedError("disk full");
    l.events.push_back("journal " + name);
    return absl::OkStatus();
  };
  EXPECT_EQ(t.Run(l, h).code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(l.events, ElementsAre("journal a", "run a", "undo a", "rolled back"));
}

TEST(TransactionTest, UndoByNameReplaysNewestFirstAndNamesWhatItDoesNotKnow) {
  Transaction<Log> t({Make("a", true), Make("b", false), Make("c", true)});
  Log l;
  std::vector<std::string> unknown = t.Undo({"a", "b", "renamed", "c"}, l.je);
  EXPECT_THAT(unknown, ElementsAre("renamed"));
  // Recovery has what the journal held and no live handles.
  EXPECT_THAT(l.events, ElementsAre("undo c (recovery)", "undo a (recovery)"));
}

}  // namespace
}  // namespace cryo::engine
