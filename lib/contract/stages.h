#pragma once

// The stages of cryod's operations, in one table: their numbers (cryo.v1.Stage's), the names
// manifests, results and metrics use, which operation reports each, and which of them hold the
// job (a leave-running checkpoint's stall, as the periodic schedule and cryo_periodic_stall_seconds
// count it). The engine, the metrics and the scheduler all read this table; a stage is added here
// and in the proto, nowhere else.

#include <string_view>

namespace cryo::contract {

enum class Stage {
  kUnspecified = 0,
  kValidate = 1,
  kGpuLock = 2,
  kGpuCheckpoint = 3,
  kDump = 4,
  kChecksum = 5,
  kPublish = 6,
  kFinish = 7,
  kVerify = 8,
  kWaitPids = 9,
  kRestore = 10,
  kGpuRestore = 11,
  kDone = 12,
  kRootfs = 13,
  kExport = 14,
  kGpuDrain = 15,     // the fast path moves device memory out (GPU free when it ends)
  kGpuSave = 16,      // ... and waits for its files to be written
  kGpuRefill = 17,    // the fast path moves device memory back in
  kGpuWrite = 18,     // leave-running: cryod writes the drained data while the job runs on
  kGpuHostCopy = 19,  // ... into memory cryod allocates before the drain
  kDumpWrite = 20,    // leave-running, dumped into node memory: the images written as it runs on
};

struct StageInfo {
  Stage stage;
  const char* name;
  bool checkpoint;  // a checkpoint reports it
  bool restore;     // a restore reports it
  bool holds_job;   // the job is held (frozen, or its GPU memory off the device) during it
};

// In the order a checkpoint, then a restore, passes through them.
inline constexpr StageInfo kStages[] = {
    {Stage::kValidate, "validate", true, true, false},
    {Stage::kGpuHostCopy, "gpu_host_copy", true, false, false},
    {Stage::kGpuDrain, "gpu_drain", true, false, true},
    {Stage::kGpuLock, "gpu_lock", true, false, true},
    {Stage::kGpuCheckpoint, "gpu_checkpoint", true, false, true},
    {Stage::kGpuSave, "gpu_save", true, false, true},
    {Stage::kDump, "dump", true, false, true},
    {Stage::kRootfs, "rootfs", true, true, true},
    {Stage::kGpuRestore, "gpu_restore", true, true, true},
    {Stage::kGpuRefill, "gpu_refill", true, true, true},
    {Stage::kGpuWrite, "gpu_write", true, false, false},
    {Stage::kDumpWrite, "dump_write", true, false, false},
    {Stage::kChecksum, "checksum", true, false, false},
    {Stage::kPublish, "publish", true, false, false},
    {Stage::kFinish, "finish", true, false, false},
    {Stage::kExport, "export", true, false, false},
    {Stage::kVerify, "verify", false, true, false},
    {Stage::kWaitPids, "wait_pids", false, true, false},
    {Stage::kRestore, "restore", false, true, false},
    {Stage::kDone, "done", false, true, false},
};

// "gpu_lock"; "unknown" for kUnspecified.
constexpr const char* NameOf(Stage s) {
  for (const StageInfo& i : kStages) {
    if (i.stage == s) return i.name;
  }
  return "unknown";
}

// Whether the stage named `name` holds the job.
constexpr bool HoldsJob(std::string_view name) {
  for (const StageInfo& i : kStages) {
    if (name == i.name) return i.holds_job;
  }
  return false;
}

}  // namespace cryo::contract
