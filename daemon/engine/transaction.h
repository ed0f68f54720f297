#pragma once

// Checkpoint and restore are transactions: an ordered list of named steps over one state
// object, each with the undo of what it does. When a step fails, or the operation is cancelled
// or past its deadline before the commit, the undo of every begun step runs, newest first, and
// nothing the transaction did is left behind. Steps after the commit step are its completion:
// a failure there is reported but undoes nothing (the checkpoint is published).
//
// Crash recovery uses the same undos: before a step with an undo runs, its name is recorded
// (the journal, through `on_begin`), and cryod replays the recorded names through Undo() at its
// next start. An undo must be safe whatever part of its step ran, and its type says what it may
// read: the state's durable part (`State::Durable`, from `JournalEntry()`: what the journal holds)
// and its live handles (`State::Live`, member `live`: descriptors, drains in flight, the stage),
// which are there in a live rollback and null during recovery.
//
// Steps declare themselves: whether they apply to this job (a step that does not is skipped:
// not run, not journaled, its stage not begun, its undo never needed), and the progress stage
// they run in, which the transaction begins (with the size the step declares) before running
// them. The checks before every step (fault injection, deadline, cancellation) are the caller's
// one `before` hook, the same for both flows (engine.cc, StepHooks).

#include <cstdint>
#include <functional>
#include <stdexcept>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "daemon/engine/types.h"

namespace cryo::engine {

// What a stage reports as its size: bytes to move (0: unknown) and a note.
struct StageSize {
  uint64_t bytes = 0;
  std::string note;
};

template <typename State>
struct Step {
  using Durable = typename State::Durable;
  using Live = typename State::Live;
  std::string name;
  // The progress stage this step runs in, begun by the transaction (kUnspecified: stays in the
  // current one; such a step begins one itself when it must time it otherwise).
  Stage stage = Stage::kUnspecified;
  std::function<absl::Status(State&)> run;
  // Empty when the step changes nothing that must be taken back. `live` is null in recovery.
  std::function<void(const Durable&, Live* live)> undo;
  // After this step succeeds, nothing is undone any more.
  bool commit = false;
  // Empty: always.
  std::function<bool(const State&)> applies;
  // The stage's size (empty: none).
  std::function<StageSize(const State&)> size;
  // True after this step ran: the transaction is complete here, the steps after it do not run
  // (a decision that nothing more is to be done, like the plan at a stop). Nothing is undone,
  // as after a commit, so such a step comes before any step with an undo (the constructor
  // refuses another order).
  std::function<bool(const State&)> ends;
};

// A step, its parts in order (the step lists read as a table).
template <typename State>
Step<State> MakeStep(
    std::string name, Stage stage, std::function<absl::Status(State&)> run,
    std::function<void(const typename State::Durable&, typename State::Live*)> undo = nullptr,
    std::function<bool(const State&)> applies = nullptr,
    std::function<StageSize(const State&)> size = nullptr, bool commit = false) {
  Step<State> t;
  t.name = std::move(name);
  t.stage = stage;
  t.run = std::move(run);
  t.undo = std::move(undo);
  t.applies = std::move(applies);
  t.size = std::move(size);
  t.commit = commit;
  return t;
}

template <typename State>
class Transaction {
 public:
  struct Hooks {
    // Before every step up to the commit: a non-OK status (cancelled, deadline) stops the
    // transaction there and rolls it back.
    std::function<absl::Status(const Step<State>&)> before;
    // Begins the stage of a step that has one, with its size, right before it runs.
    std::function<void(Stage, const StageSize&)> begin_stage;
    // Before a step with an undo runs: records it (the journal). A failure stops the
    // transaction: an undo nobody could replay after a crash must not be needed.
    std::function<absl::Status(const std::string& name)> on_begin;
    // After a step up to the commit succeeded: a non-OK status fails that step (its undo runs).
    std::function<absl::Status(const Step<State>&)> after;
    // With the failure, before the undos run (an undo may need to say why).
    std::function<void(const absl::Status&)> on_failure;
    // After the undos ran (the journal entry can go).
    std::function<void()> on_rolled_back;
  };

  explicit Transaction(std::vector<Step<State>> steps) : steps_(std::move(steps)) {
    bool undo_before = false;
    for (const Step<State>& step : steps_) {
      if (step.ends && undo_before) {
        throw std::logic_error("step " + step.name +
                               " may end the transaction after a step "
                               "with an undo: that undo would never run");
      }
      undo_before |= static_cast<bool>(step.undo);
    }
  }

  absl::Status Run(State& s, const Hooks& hooks) {
    std::vector<const Step<State>*> begun;
    bool committed = false;
    for (const Step<State>& step : steps_) {
      if (step.applies && !step.applies(s)) continue;
      absl::Status st;
      if (!committed && hooks.before) st = hooks.before(step);
      if (st.ok() && !committed && step.undo && hooks.on_begin) st = hooks.on_begin(step.name);
      if (st.ok()) {
        if (!committed && step.undo) begun.push_back(&step);
        if (step.stage != Stage::kUnspecified && hooks.begin_stage) {
          hooks.begin_stage(step.stage, step.size ? step.size(s) : StageSize{});
        }
        st = step.run(s);
        if (st.ok() && !committed && !step.commit && hooks.after) st = hooks.after(step);
      }
      if (!st.ok()) {
        if (committed) return st;
        if (hooks.on_failure) hooks.on_failure(st);
        // The journal entry as it stands now, the same for every undo.
        const typename State::Durable& je = s.JournalEntry();
        for (auto it = begun.rbegin(); it != begun.rend(); ++it) (*it)->undo(je, &s.live);
        if (hooks.on_rolled_back) hooks.on_rolled_back();
        return st;
      }
      if (step.commit) committed = true;
      if (step.ends && step.ends(s)) return absl::OkStatus();
    }
    return absl::OkStatus();
  }

  // Runs the undo of the named steps, newest first (steps without an undo have nothing to do),
  // over what the journal held and no live handles (recovery). Returns the names no step has (a
  // journal from another cryod version): the caller says so, they are never skipped silently.
  std::vector<std::string> Undo(const std::vector<std::string>& begun,
                                const typename State::Durable& je) const {
    std::vector<std::string> unknown;
    for (auto it = begun.rbegin(); it != begun.rend(); ++it) {
      bool found = false;
      for (const Step<State>& step : steps_) {
        if (step.name != *it) continue;
        found = true;
        if (step.undo) step.undo(je, nullptr);
      }
      if (!found) unknown.push_back(*it);
    }
    return unknown;
  }

  const std::vector<Step<State>>& steps() const { return steps_; }

 private:
  std::vector<Step<State>> steps_;
};

}  // namespace cryo::engine
