#pragma once

// The job journal: one small JSON file per operation in flight, replaced atomically at every
// state change and removed when the operation ends. It holds everything the undo of an
// operation's begun steps needs, so that after a crash or restart cryod can take back exactly
// what a live failure would have (see daemon/engine/).
//
// It must outlive cryod, not the node: every entry describes processes, GPU locks and network
// locks that a reboot ends too (the stage it names is collected as any incomplete checkpoint).
// So entries are not fsynced (an fsync waits behind every write queued on the disk: with the
// store on that disk, behind the checkpoints being written), and an entry of an earlier boot is
// recognised by its boot id and never acted on: its pids may name other processes now.

#include <sys/types.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "daemon/records/gpu_process.h"
#include "nlohmann/json.hpp"

namespace cryo::journal {

enum class OpKind { kCheckpoint, kRestore };
// checkpoint: started -> dumping -> dumped -> published; restore: restoring.
enum class OpState { kStarted, kDumping, kDumped, kPublished, kRestoring };
const char* Name(OpKind k);
const char* Name(OpState s);
std::optional<OpKind> ParseOpKind(const std::string& s);
std::optional<OpState> ParseOpState(const std::string& s);

struct Task {
  int pid = 0;
  uint64_t start_time = 0;  // tells the task from a later process that reused its pid
  // Stopped (SIGSTOP) before the checkpoint began: a rollback leaves it stopped.
  bool was_stopped = false;
};

struct Entry {
  std::string op_id;
  OpKind kind = OpKind::kCheckpoint;
  std::string checkpoint_id;
  OpState state = OpState::kStarted;
  // Steps begun whose undo has not run, in the order they began.
  std::vector<std::string> steps;
  std::vector<Task> tasks;
  int criu_pid = 0;
  uint64_t criu_start_time = 0;
  std::string staging_dir;
  bool leave_running = false;
  bool tcp_established = false;
  std::vector<gpu::GpuProcess> gpu;  // GPU processes locked or checkpointed, for rollback
  // Processes whose fast-path library drained its memory (into files of staging_dir when
  // `files` > 0), for the refill a rollback owes them.
  std::vector<gpu::FastpathProcess> fastpath;
  int container_init_pid = 0;  // container mode: host pid of the container's cryo-init
  std::string started_at;
  // The kernel's boot id when the entry was written (the journal sets it); empty in entries of
  // cryods before it, which are taken as of this boot.
  std::string boot_id;
};

nlohmann::json EntryToJson(const Entry& e);
// Total: a malformed entry is INVALID_ARGUMENT, never an exception.
absl::StatusOr<Entry> EntryFromJson(const nlohmann::json& j);
// An entry file's text as recovery reads it: bounded JSON (size, depth), then EntryFromJson.
absl::StatusOr<Entry> ParseEntry(absl::string_view text);

// The running kernel's boot id (/proc/sys/kernel/random/boot_id); empty when unreadable.
std::string CurrentBootId();

class Journal {
 public:
  // `boot_id`: the boot entries are written in and recognised as of (tests pass one); empty:
  // CurrentBootId().
  static absl::StatusOr<std::unique_ptr<Journal>> Open(const std::string& dir,
                                                       std::string boot_id = "");
  ~Journal();
  // Takes the directory for this process alone (a lock held while it lives): two cryods sharing
  // a journal would undo each other's operations. FAILED_PRECONDITION when another holds it.
  absl::Status HoldExclusively();
  // Writes the entry, stamped with this boot's id.
  absl::Status Put(const Entry& e);
  absl::Status Remove(const std::string& op_id);
  // Moves the entries another directory holds into this journal (a cryod whose journal_dir
  // changed: those are operations its predecessor left in flight there). Returns how many.
  absl::StatusOr<int> Adopt(const std::string& old_dir);
  // Every entry left behind; unreadable files are reported and skipped.
  absl::StatusOr<std::vector<Entry>> LoadAll();
  // Written before the node last booted: the processes it names are gone.
  bool OfEarlierBoot(const Entry& e) const;
  const std::string& dir() const { return dir_; }

 private:
  Journal(std::string dir, std::string boot_id)
      : dir_(std::move(dir)), boot_id_(std::move(boot_id)) {}
  std::string PathOf(const std::string& op_id) const;
  std::string dir_;
  std::string boot_id_;
  int lock_fd_ = -1;
};

}  // namespace cryo::journal
