// cryo-gate: cryod's gate at one of CRIU's actions (daemon/criu/action_gate.h). CRIU runs it as
// its action script at every action of a dump or restore that cryod gates; at the gate's action
// it waits for cryod's verdict, at the others it exits at once. A program of its own, apart from
// cryo-nsexec, so that each start loads a few libraries rather than all of cryod's.

#include "daemon/criu/action_gate.h"

int main() { return cryo::criu::WaitAtGate(); }
