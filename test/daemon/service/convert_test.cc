#include "daemon/service/convert.h"

#include <string>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "lib/base/limits.h"

namespace cryo::service {
namespace {

engine::CheckpointRecord Record(int i) {
  engine::CheckpointRecord r;
  r.manifest.id = absl::StrCat("c", i);
  r.manifest.workload = "w";
  r.manifest.root_pid = 100;
  r.manifest.pids = {100};
  return r;
}

// Labels at the bounds a manifest may hold: each entry is about 16 KiB.
engine::CheckpointRecord FullRecord(int i) {
  engine::CheckpointRecord r = Record(i);
  for (int k = 0; k < 4; ++k) {
    r.manifest.labels[absl::StrCat("key-", k)] = std::string(limits::kMaxLabelValue - 16, 'v');
  }
  return r;
}

// Found on 2026-11-24: a list answer had no bound, so labels large enough (or checkpoints
// enough) broke `cryo list` and the shim's listing for everyone at gRPC's 4 MiB limit.
TEST(ListResponse, StaysUnderTheClientsLimitAndCountsWhatItLeftOut) {
  std::vector<engine::CheckpointRecord> records;
  for (int i = 0; i < 400; ++i) records.push_back(FullRecord(i));
  v1::ListCheckpointsResponse r = ToListResponse(records);
  EXPECT_LE(r.ByteSizeLong(), kMaxListBytes);
  EXPECT_LT(r.ByteSizeLong(), 4u << 20);
  EXPECT_GT(r.checkpoints_size(), 100);
  EXPECT_EQ(r.checkpoints_size() + static_cast<int>(r.omitted()), 400);
  EXPECT_GT(r.omitted(), 0u);
  // Newest first as given: what is left out is the oldest.
  EXPECT_EQ(r.checkpoints(0).checkpoint_id(), "c0");
  EXPECT_EQ(r.checkpoints(r.checkpoints_size() - 1).checkpoint_id(),
            absl::StrCat("c", r.checkpoints_size() - 1));
}

TEST(ListResponse, AnEntryWithAHugeTreeIsListedWithoutItsPids) {
  std::vector<engine::CheckpointRecord> records = {Record(0), Record(1)};
  records[1].manifest.pids.assign(60000, 4194303);
  v1::ListCheckpointsResponse r = ToListResponse(records);
  ASSERT_EQ(r.checkpoints_size(), 2);
  EXPECT_EQ(r.omitted(), 0u);
  EXPECT_EQ(r.checkpoints(0).pids_size(), 1);
  EXPECT_EQ(r.checkpoints(1).pids_size(), 0);
  EXPECT_EQ(r.checkpoints(1).root_pid(), 100);
}

// The engine's stages go out as cryo.v1.Stage by number: each row of the table is the proto's
// value of that number, STAGE_ and its name in capitals.
TEST(StageToProto, EveryStageIsTheProtosValueOfItsNumber) {
  for (const contract::StageInfo& i : contract::kStages) {
    EXPECT_EQ(v1::Stage_Name(ToProto(i.stage)),
              absl::AsciiStrToUpper(absl::StrCat("stage_", i.name)))
        << i.name;
  }
  EXPECT_EQ(static_cast<int>(v1::Stage_MAX), static_cast<int>(contract::Stage::kDumpWrite))
      << "a stage of the proto has no row in lib/contract/stages.h";
}

// A peer's word of a round of the GPU cut, as another cryod may send it: what this one does not
// know is no reason to go on.
TEST(GpuCutWordFromProto, AnOutcomeThisCryodDoesNotKnowIsAFailureWithAReason) {
  v1::GpuCutWord p;
  p.set_round(3);
  p.set_collectives(41);
  p.set_outcome(static_cast<v1::GpuCutWord::Outcome>(7));
  gpu::CutWord w = FromProto(p);
  EXPECT_EQ(w.outcome, gpu::CutWord::kFailed);
  EXPECT_FALSE(w.why.empty());
  EXPECT_EQ(w.collectives, 41u);
  // And the known ones survive the trip both ways.
  for (auto o : {gpu::CutWord::kOk, gpu::CutWord::kBusy, gpu::CutWord::kFailed}) {
    gpu::CutWord in;
    in.outcome = o;
    in.collectives = 9;
    in.why = o == gpu::CutWord::kOk ? "" : "why";
    v1::GpuCutWord wire = ToProto(5, in);
    EXPECT_EQ(wire.round(), 5u);
    gpu::CutWord out = FromProto(wire);
    EXPECT_EQ(out.outcome, o);
    EXPECT_EQ(out.collectives, 9u);
    EXPECT_EQ(out.why, in.why);
  }
}

}  // namespace
}  // namespace cryo::service
