#pragma once

// The restore gate: the tasks CRIU restored wait, before they run, for cryod's verdict.
//
// CRIU runs its action scripts (--action-script) at "post-restore" after every task and every
// page is in place and before any task resumes; a script that fails makes CRIU kill the tasks
// and fail the restore. So cryod can let CRIU restore while it still checks what CRIU reads
// (the pages images: most of a restore's bytes, and read by CRIU as memory contents only), and
// nothing of the job runs unless they pass. cryod names cryo-nsexec as that script: run with no
// arguments and CRTOOLS_SCRIPT_ACTION set, it waits for one line on the FIFO that kGateFifoEnv
// names. kGateOk lets CRIU go on; anything else, an end of the FIFO, the FIFO's name taken away,
// or cryod (kGateOwnerEnv) gone, fails the restore.

#include <sys/types.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "lib/base/fd.h"

namespace cryo::criu {

inline constexpr char kGateFifoEnv[] = "CRYO_RESTORE_GATE";
inline constexpr char kGateOwnerEnv[] = "CRYO_RESTORE_GATE_OWNER";
inline constexpr char kGateOk[] = "ok";
inline constexpr char kGateAction[] = "post-restore";

class RestoreGate {
 public:
  // Makes the FIFO `fifo` (0600, in a directory only cryod reaches) and holds it open for
  // reading and writing: the verdict waits in it whenever the script comes, and the script
  // never blocks opening it. `script` is the gate program (cryo-nsexec).
  static absl::StatusOr<std::unique_ptr<RestoreGate>> Open(std::string fifo, std::string script);
  ~RestoreGate();  // closes and removes the FIFO
  RestoreGate(const RestoreGate&) = delete;
  RestoreGate& operator=(const RestoreGate&) = delete;

  // CRIU's arguments and environment that run the gate.
  std::vector<std::string> Args() const;
  std::vector<std::string> Env() const;

  // The verdict, once. Never blocks: it waits in the FIFO for the script.
  absl::Status Tell(bool ok);
  // Takes the FIFO's name away: a script waiting at the gate then fails the restore (what a
  // verdict that could not be told comes to).
  void Withdraw();

 private:
  RestoreGate(std::string fifo, std::string script, UniqueFd fd)
      : fifo_(std::move(fifo)), script_(std::move(script)), fd_(std::move(fd)) {}
  std::string fifo_;
  std::string script_;
  UniqueFd fd_;
};

// The gate's side, in the script's process: 0 lets CRIU resume the tasks, 1 makes it kill them.
// Actions other than kGateAction pass at once. `poll_ms` bounds each wait before it checks that
// cryod is still there.
int WaitAtRestoreGate(int poll_ms = 200);

}  // namespace cryo::criu
