// What the cryo CLI's commands share: the usage text, the global flags, failure and duration
// handling, following an operation's stream and printing what it ended with.

#include "clients/cryo/common.h"

#include <unistd.h>

#include <algorithm>
#include <iostream>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "clients/cryo/output.h"
#include "daemon/api/checkpoint_json.h"
#include "lib/base/human.h"
#include "lib/base/status.h"
#include "nlohmann/json.hpp"

namespace cryo::cli {
namespace {

constexpr char kUsage[] = R"(usage: cryo [--socket PATH] [-o text|json] COMMAND [ARGS]

Commands:
  checkpoint PID   checkpoint the process tree rooted at PID into the store
      --id ID              checkpoint id (default: <workload>-<time>-<rand>)
      --workload NAME      group for retention and listing (default: the command name)
      --leave-running      keep the job running afterwards (default: stop it, as on preemption)
      --tcp-established    include established TCP connections
      --tcp-close          ... and restore them closed
      --skip-in-flight     leave out connections waiting in a listener's queue
      --link-remap[=false] allow open files unlinked while another link remains
      --ghost-limit SIZE   largest deleted-but-open file carried (64Mi, 1Gi)
      --ext-unix-sk        allow unix sockets connected outside the job
                           (CRIU options; unset ones take the node's defaults)
      --shell-job          the tree was started from a terminal (detected when needed)
      --label KEY=VALUE    recorded in the manifest (repeatable)
      --gpu-lock-timeout D bound on locking GPU processes (e.g. 30s)
      --detach             print the operation id and leave it running (Ctrl-C otherwise
                           cancels the operation, which then rolls back)
  restore ID       restore a checkpoint on this node (it keeps its pids)
      --pid-wait D         wait this long for the pids to be free (default: node setting)
      --gpu-map OLD=NEW    map a checkpointed GPU UUID onto one of this node's (repeatable)
      --detach             print the operation id and leave it running
  checkpoint-job --job NS/NAME [MEMBER=PID[@NODE]...]
                   checkpoint every member of a job at one cut; the job checkpoint exists
                   once all parts are published and its record is committed. Without
                   MEMBER=PID: the job's running pods, as the Kubernetes API lists them;
                   @NODE: that member runs on another node (its cryod is asked for it)
      --id ID              job checkpoint id (each part: ID.MEMBER)
      --leave-running      keep every member running afterwards
      --tcp-established    include established TCP connections (between the members too)
      --cut-timeout D      how long a member dumped first waits for the others (default 2m)
  restore-job --job NS/NAME ID
                   restore every member of a committed job checkpoint on this node together
      --pid-wait D         wait this long for the pids to be free (default: node setting)
  list             list checkpoints, newest first    [--workload NAME]
  inspect ID       show a checkpoint's manifest and files
  rm ID...         delete checkpoints
  node             show this node: CRIU, kernel, store, GPU plugins, operations in flight
  watch OP         follow an operation started elsewhere
  cancel OP        stop an operation: it rolls back unless already published or restored
  version          print cryo's version

Options:
  --socket PATH    cryod's socket (default $CRYO_SOCKET or /run/cryo/cryod.sock)
  -o, --output F   text (default) or json
)";

}  // namespace

void DeclareGlobal(flags::FlagSet& fs, Global& g) {
  fs.String("socket", &g.socket, "cryod's socket", "PATH");
  fs.String("output", &g.output, "text or json", "FORMAT").Short('o');
}

absl::Status CheckGlobal(Global& g) {
  if (g.output != "json" && g.output != "text") {
    return absl::InvalidArgumentError("output format is text or json");
  }
  g.json = g.output == "json";
  return absl::OkStatus();
}

int Usage(const std::string& msg) {
  if (!msg.empty()) std::cerr << "cryo: " << msg << "\n\n";
  std::cerr << kUsage;
  return 2;
}

// Asked for: on stdout, as other tools print their help (`cryo --help | less`).
int Help() {
  std::cout << kUsage;
  return 0;
}

std::string CodeName(grpc::StatusCode c) { return cryo::CodeName(static_cast<int>(c)); }

// The same JSON as cryod's HTTP API and kubectl-checkpoint print.
std::string ToJson(const google::protobuf::Message& m) { return api::MessageToJson(m); }

int Fail(const Global& g, const std::string& what, const grpc::Status& s) {
  std::string msg = s.error_message();
  if (s.error_code() == grpc::StatusCode::UNAVAILABLE) {
    msg = absl::StrCat("cannot reach cryod at ", g.socket,
                       " (is it running, and are you root?): ", msg);
  }
  if (g.json) {
    nlohmann::json j = {{"error", {{"code", CodeName(s.error_code())}, {"message", msg}}}};
    std::cout << j.dump(2) << "\n";
  } else {
    std::cerr << "cryo: " << what << " failed: " << CodeName(s.error_code()) << ": " << msg << "\n";
  }
  return 1;
}

// A duration flag as the API's milliseconds; the API field is 32 bits, so longer is an error
// rather than a silent wrap.
absl::Status ToMs(absl::Duration d, const char* flag, uint32_t* ms) {
  if (d > absl::Milliseconds(std::numeric_limits<uint32_t>::max())) {
    return absl::InvalidArgumentError(
        absl::StrCat("--", flag, " ", absl::FormatDuration(d), " is longer than the ",
                     absl::FormatDuration(absl::Milliseconds(std::numeric_limits<uint32_t>::max())),
                     " cryod accepts"));
  }
  *ms = static_cast<uint32_t>(absl::ToInt64Milliseconds(d));
  return absl::OkStatus();
}

// Parses a command's arguments with its flags plus the global ones (which may follow the
// command); prints usage and returns false on error.
bool ParseCommand(Global& g, flags::FlagSet& fs, const std::vector<std::string>& argv,
                  std::vector<std::string>* pos, int* rc) {
  DeclareGlobal(fs, g);
  auto r = fs.Parse(argv);
  if (!r.ok()) {
    *rc = Usage(std::string(r.status().message()));
    return false;
  }
  if (r->help) {
    *rc = Help();
    return false;
  }
  if (absl::Status s = CheckGlobal(g); !s.ok()) {
    *rc = Usage(std::string(s.message()));
    return false;
  }
  *pos = r->positional;
  return true;
}

std::string Ms(const google::protobuf::Map<std::string, uint64_t>& m) {
  std::vector<std::pair<std::string, uint64_t>> v(m.begin(), m.end());
  std::sort(v.begin(), v.end());
  std::vector<std::string> parts;
  for (const auto& [k, ms] : v) parts.push_back(absl::StrCat(k, " ", ms, "ms"));
  return absl::StrJoin(parts, ", ");
}

// --detach: the first event names the operation; then leave it running.
int Detached(const Global& g, grpc::ClientReaderInterface<v1::OperationEvent>* r,
             grpc::ClientContext& ctx) {
  v1::OperationEvent ev;
  if (!r->Read(&ev)) {
    grpc::Status s = r->Finish();
    return Fail(g, "start", s);
  }
  if (g.json) {
    std::cout << nlohmann::json{{"operation_id", ev.operation_id()}}.dump(2) << "\n";
  } else {
    std::cout << "operation " << ev.operation_id() << " started; follow it with: cryo watch "
              << ev.operation_id() << "\n";
  }
  ctx.TryCancel();
  return 0;
}

// Drains an operation stream, drawing progress, and returns the final event.
grpc::Status Follow(const Global& g, grpc::ClientReaderInterface<v1::OperationEvent>* r,
                    v1::OperationEvent* last) {
  ProgressBar bar(!g.json && ::isatty(STDERR_FILENO));
  v1::OperationEvent ev;
  while (r->Read(&ev)) {
    if (ev.has_progress()) {
      bar.Update(ev.progress());
    } else {
      *last = ev;
    }
  }
  bar.Clear();
  return r->Finish();
}

// What a finished checkpoint and restore print (the command that ran them, and `watch`).
void PrintCheckpointed(const Global& g, const v1::CheckpointInfo& c) {
  if (g.json) {
    std::cout << ToJson(c) << "\n";
    return;
  }
  std::cout << "checkpoint " << c.checkpoint_id() << ": " << human::Bytes(c.size_bytes()) << " in "
            << c.file_count() << " files, pid " << c.root_pid() << " ("
            << (c.leave_running() ? "left running" : "stopped") << ")\n"
            << "  stages: " << Ms(c.stage_ms()) << "\n";
  if (c.gpu_fastpath_bytes() > 0) {
    std::cout << "  gpu:    " << human::Bytes(c.gpu_fastpath_bytes()) << " by the fast path, "
              << human::Bytes(c.gpu_driver_bytes()) << " by the driver\n";
  }
  std::cout << "  stored: " << c.store_path() << "\n";
}

void PrintRestored(const Global& g, const v1::RestoreResult& r) {
  if (g.json) {
    std::cout << ToJson(r) << "\n";
    return;
  }
  std::cout << "restored " << r.checkpoint_id() << " as pid " << r.root_pid() << "\n"
            << "  stages: " << Ms(r.stage_ms()) << "\n";
}

}  // namespace cryo::cli
