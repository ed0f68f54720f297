#pragma once

// A gate at one of CRIU's actions: CRIU waits there, with the tasks frozen, until cryod says so.
//
// CRIU runs its action scripts (--action-script) at fixed points; a script that fails makes CRIU
// undo what it did. cryod names cryo-gate as that script (cryo-nsexec where cryo-gate is not
// installed: run with no arguments and CRTOOLS_SCRIPT_ACTION set, it is the gate too); both run
// WaitAtGate. At the gate's action it says it has
// arrived (a line on the arrival FIFO, for a cryod that has work to do at that point), then waits
// for one line on the verdict FIFO. kGateOk lets CRIU go on; anything else, an end of the FIFO,
// the FIFO's name taken away, or cryod (kGateOwnerEnv) gone, fails CRIU's call. Other actions
// pass at once.
//
// Two gates are used:
//  - "post-restore": every task and page is in place and no task has run. cryod lets CRIU
//    restore while it still checks the pages images, and nothing runs unless they pass.
//  - "post-dump": the images are written and the tasks are still frozen. cryod writes the
//    pages of private anonymous memory itself (criu/anon_pages.h), several threads at once,
//    and CRIU resumes the tasks, or ends them, only after that. A refusal there makes CRIU
//    resume the tasks and fail the dump: the job runs on.

#include <sys/types.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "lib/base/fd.h"

namespace cryo::criu {

inline constexpr char kGateFifoEnv[] = "CRYO_GATE";
inline constexpr char kGateOwnerEnv[] = "CRYO_GATE_OWNER";
inline constexpr char kGateActionEnv[] = "CRYO_GATE_ACTION";  // unset: kRestoreAction
inline constexpr char kGateOk[] = "ok";
inline constexpr char kRestoreAction[] = "post-restore";
inline constexpr char kDumpAction[] = "post-dump";

// Where the gate's side says it has arrived: beside the verdict FIFO.
inline std::string GateArrivalFifo(const std::string& fifo) { return fifo + ".arrived"; }

class ActionGate {
 public:
  // Makes the FIFOs `fifo` (the verdict) and `fifo`.arrived (0600, in a directory only cryod
  // reaches) and holds both open for reading and writing: the verdict waits in its FIFO
  // whenever the script comes, and neither side blocks opening them. `script` is the gate
  // program (cryo-gate, or cryo-nsexec), `action` the CRIU action it holds.
  static absl::StatusOr<std::unique_ptr<ActionGate>> Open(std::string fifo, std::string script,
                                                          std::string action = kRestoreAction);
  ~ActionGate();  // closes and removes the FIFOs
  ActionGate(const ActionGate&) = delete;
  ActionGate& operator=(const ActionGate&) = delete;

  // CRIU's arguments and environment that run the gate.
  std::vector<std::string> Args() const;
  std::vector<std::string> Env() const;

  // Whether the script has arrived at the gate, waiting at most `timeout`.
  bool WaitArrival(absl::Duration timeout);
  // The verdict, once. Never blocks: it waits in the FIFO for the script.
  absl::Status Tell(bool ok);
  // Takes the FIFOs' names away: a script waiting at the gate then fails CRIU's call (what a
  // verdict that could not be told comes to).
  void Withdraw();

 private:
  ActionGate(std::string fifo, std::string script, std::string action, UniqueFd fd,
             UniqueFd arrived)
      : fifo_(std::move(fifo)),
        script_(std::move(script)),
        action_(std::move(action)),
        fd_(std::move(fd)),
        arrived_(std::move(arrived)) {}
  std::string fifo_;
  std::string script_;
  std::string action_;
  UniqueFd fd_;
  UniqueFd arrived_;
};

// The gate's side, in the script's process: 0 lets CRIU go on, 1 makes it undo its call.
// Actions other than the gate's pass at once. `poll_ms` bounds each wait before it checks that
// cryod is still there.
int WaitAtGate(int poll_ms = 200);

}  // namespace cryo::criu
