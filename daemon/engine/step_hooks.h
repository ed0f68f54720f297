#pragma once

// The checks every step of a checkpoint or a restore passes, in one place for both flows:
// fault injection (tests), the caller's deadline (where the flow says it is checked),
// cancellation, and the step's stage begun with the size it declares (transaction.h).

#include <functional>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "daemon/engine/operation.h"
#include "daemon/engine/stage_clock.h"
#include "daemon/engine/transaction.h"
#include "lib/base/status.h"

namespace cryo::engine {

using FaultHook = std::function<absl::Status(const std::string& step, bool after)>;

// `flow`: "checkpoint" or "restore", for messages; `deadline`: OK, or why the step may not
// start (DEADLINE_EXCEEDED); `cancel_note`: what a cancel left behind, for its message.
template <typename State>
typename Transaction<State>::Hooks StepHooks(
    const FaultHook& fault, Operation& op, StageClock& clock, const std::string& flow,
    std::function<absl::Status(const Step<State>&)> deadline, const std::string& cancel_note) {
  typename Transaction<State>::Hooks h;
  h.before = [fault, &op, flow, deadline, cancel_note](const Step<State>& step) -> absl::Status {
    if (fault) CRYO_RETURN_IF_ERROR(fault(step.name, false));
    CRYO_RETURN_IF_ERROR(deadline(step));
    // After the deadline: a caller at its deadline also goes away, which cancels.
    if (op.cancelled()) {
      return absl::CancelledError(absl::StrCat(flow, " cancelled before its ", step.name, " step (",
                                               op.cancel_reason(), ")", cancel_note));
    }
    return absl::OkStatus();
  };
  h.begin_stage = [&clock](Stage stage, const StageSize& size) {
    clock.Begin(stage, size.bytes, size.note);
  };
  if (fault) {
    h.after = [fault](const Step<State>& step) { return fault(step.name, true); };
  }
  return h;
}

}  // namespace cryo::engine
