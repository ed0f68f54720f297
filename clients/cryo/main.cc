// cryo: command-line client of cryod for people on a node (and, with -o json, for scripts).

#include <grpcpp/grpcpp.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <limits>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/time.h"
#include "clients/cryo/common.h"
#include "clients/cryo/output.h"
#include "cryo/v1/cryo.grpc.pb.h"
#include "daemon/api/checkpoint_json.h"
#include "daemon/criu/options.h"
#include "lib/base/flags.h"
#include "lib/base/human.h"
#include "lib/base/status.h"
#include "lib/contract/annotations.h"
#include "nlohmann/json.hpp"

namespace cryo::cli {
namespace {

// Unary calls answer from cryod's state at once; one that takes longer than this is a stuck
// cryod, and the user should hear so rather than wait forever.
std::chrono::system_clock::time_point UnaryDeadline() {
  return std::chrono::system_clock::now() + std::chrono::seconds(30);
}

int Checkpoint(Global& g, Cryod& stub, const std::vector<std::string>& argv) {
  v1::CheckpointRequest req;
  std::string id, workload, op_id;
  std::map<std::string, std::string> labels;
  bool leave_running = false, tcp = false, shell_job = false;
  absl::Duration lock_timeout = absl::ZeroDuration();
  flags::FlagSet fs;
  fs.String("id", &id, "checkpoint id", "ID");
  fs.String("workload", &workload, "group for retention and listing", "NAME");
  fs.String("operation-id", &op_id, "id of the operation, to watch it from elsewhere", "ID");
  fs.KeyValues("label", &labels, "recorded in the manifest");
  fs.Bool("leave-running", &leave_running, "keep the job running afterwards");
  fs.Bool("tcp-established", &tcp, "include established TCP connections");
  // CRIU options: given ones override the node's defaults (criu_* in cryod's config).
  bool tcp_close = false, skip_in_flight = false, link_remap = false, ext_unix_sk = false;
  std::string ghost_limit;
  fs.Bool("tcp-close", &tcp_close, "restore TCP connections closed");
  fs.Bool("skip-in-flight", &skip_in_flight, "leave out connections in a listener's queue");
  fs.Bool("link-remap", &link_remap, "allow open files unlinked while another link remains");
  fs.Bool("ext-unix-sk", &ext_unix_sk, "allow unix sockets connected outside the job");
  fs.String("ghost-limit", &ghost_limit, "largest deleted-but-open file carried", "SIZE");
  fs.Bool("shell-job", &shell_job, "the tree was started from a terminal");
  fs.Duration("gpu-lock-timeout", &lock_timeout, "bound on locking GPU processes");
  bool detach = false;
  fs.Bool("detach", &detach, "leave the operation running and print its id");
  std::vector<std::string> pos;
  int rc = 0;
  if (!ParseCommand(g, fs, argv, &pos, &rc)) return rc;
  if (pos.size() != 1) return Usage("checkpoint takes one PID");
  int pid;
  if (!absl::SimpleAtoi(pos[0], &pid) || pid <= 0) return Usage("PID must be a positive number");
  req.set_pid(pid);
  req.set_checkpoint_id(id);
  req.set_workload(workload);
  req.set_operation_id(op_id);
  for (const auto& [k, v] : labels) (*req.mutable_labels())[k] = v;
  uint32_t ms = 0;
  if (absl::Status s = ToMs(lock_timeout, "gpu-lock-timeout", &ms); !s.ok()) {
    return Usage(std::string(s.message()));
  }
  req.set_gpu_lock_timeout_ms(ms);
  req.set_leave_running(leave_running);
  if (fs.Given("tcp-established")) req.mutable_criu()->set_tcp_established(tcp);
  if (fs.Given("tcp-close")) req.mutable_criu()->set_tcp_close(tcp_close);
  if (fs.Given("skip-in-flight")) req.mutable_criu()->set_skip_in_flight(skip_in_flight);
  if (fs.Given("link-remap")) req.mutable_criu()->set_link_remap(link_remap);
  if (fs.Given("ext-unix-sk")) req.mutable_criu()->set_ext_unix_sk(ext_unix_sk);
  if (!ghost_limit.empty()) {
    uint64_t bytes = 0;
    if (absl::Status s = human::ParseSize(ghost_limit, &bytes); !s.ok()) {
      return Usage(absl::StrCat("--ghost-limit: ", s.message()));
    }
    req.mutable_criu()->set_ghost_limit_bytes(bytes);
  }
  req.set_shell_job(shell_job);
  req.set_detach(detach);
  grpc::ClientContext ctx;
  auto reader = stub->Checkpoint(&ctx, req);
  if (detach) return Detached(g, reader.get(), ctx);
  v1::OperationEvent last;
  grpc::Status s = Follow(g, reader.get(), &last);
  if (!s.ok()) return Fail(g, "checkpoint", s);
  PrintCheckpointed(g, last.checkpoint());
  return 0;
}

int Restore(Global& g, Cryod& stub, const std::vector<std::string>& argv) {
  v1::RestoreRequest req;
  std::string op_id;
  std::map<std::string, std::string> gpu_map;
  absl::Duration pid_wait = absl::ZeroDuration();
  flags::FlagSet fs;
  fs.Duration("pid-wait", &pid_wait, "wait this long for the pids to be free");
  fs.KeyValues("gpu-map", &gpu_map, "map a checkpointed GPU onto one of this node's",
               "OLD_UUID=NEW_UUID");
  fs.String("operation-id", &op_id, "id of the operation, to watch it from elsewhere", "ID");
  bool detach = false;
  fs.Bool("detach", &detach, "leave the operation running and print its id");
  std::vector<std::string> pos;
  int rc = 0;
  if (!ParseCommand(g, fs, argv, &pos, &rc)) return rc;
  if (pos.size() != 1) return Usage("restore takes one checkpoint ID");
  req.set_detach(detach);
  req.set_checkpoint_id(pos[0]);
  req.set_operation_id(op_id);
  uint32_t ms = 0;
  if (absl::Status s = ToMs(pid_wait, "pid-wait", &ms); !s.ok()) {
    return Usage(std::string(s.message()));
  }
  req.set_pid_wait_timeout_ms(ms);
  for (const auto& [k, v] : gpu_map) (*req.mutable_gpu_map())[k] = v;
  grpc::ClientContext ctx;
  auto reader = stub->Restore(&ctx, req);
  if (detach) return Detached(g, reader.get(), ctx);
  v1::OperationEvent last;
  grpc::Status s = Follow(g, reader.get(), &last);
  if (!s.ok()) return Fail(g, "restore", s);
  PrintRestored(g, last.restored());
  return 0;
}

// "NS/NAME" into the request's namespace and job.
bool SplitJob(const std::string& job, std::string* ns, std::string* name) {
  const size_t slash = job.find('/');
  if (slash == std::string::npos || slash == 0 || slash + 1 == job.size()) return false;
  *ns = job.substr(0, slash);
  *name = job.substr(slash + 1);
  return true;
}

void PrintJobCheckpointed(const Global& g, const v1::JobCheckpointInfo& j) {
  if (g.json) {
    std::cout << ToJson(j) << "\n";
    return;
  }
  std::cout << "job checkpoint " << j.job_checkpoint_id() << " of " << j.namespace_() << "/"
            << j.job() << ": " << j.parts_size() << " members at one cut (" << Ms(j.cut_ms())
            << "), committed\n";
  for (const auto& p : j.parts()) {
    std::cout << "  " << p.job_member() << ": " << p.checkpoint_id() << ", "
              << human::Bytes(p.size_bytes()) << ", pid " << p.root_pid() << "\n";
  }
}

int CheckpointJob(Global& g, Cryod& stub, const std::vector<std::string>& argv) {
  v1::CheckpointJobRequest req;
  std::string job, id;
  bool leave_running = false, tcp = false;
  absl::Duration cut = absl::ZeroDuration();
  flags::FlagSet fs;
  fs.String("job", &job, "the job", "NS/NAME");
  fs.String("id", &id, "job checkpoint id", "ID");
  fs.Bool("leave-running", &leave_running, "keep every member running afterwards");
  fs.Bool("tcp-established", &tcp, "include established TCP connections");
  fs.Duration("cut-timeout", &cut, "how long a member dumped first waits for the others");
  std::vector<std::string> pos;
  int rc = 0;
  if (!ParseCommand(g, fs, argv, &pos, &rc)) return rc;
  std::string ns, name;
  if (!SplitJob(job, &ns, &name)) return Usage("checkpoint-job needs --job NS/NAME");
  req.set_namespace_(ns);
  req.set_job(name);
  req.set_job_checkpoint_id(id);
  uint32_t ms = 0;
  if (absl::Status s = ToMs(cut, "cut-timeout", &ms); !s.ok()) {
    return Usage(std::string(s.message()));
  }
  req.set_cut_timeout_ms(ms);
  // Members found through the Kubernetes API take these.
  req.mutable_member_defaults()->set_leave_running(leave_running);
  if (fs.Given("tcp-established")) {
    req.mutable_member_defaults()->mutable_criu()->set_tcp_established(tcp);
  }
  for (const std::string& m : pos) {
    const size_t eq = m.find('=');
    const size_t at = m.find('@', eq == std::string::npos ? 0 : eq);
    int pid = 0;
    if (eq == std::string::npos ||
        !absl::SimpleAtoi(
            m.substr(eq + 1, at == std::string::npos ? std::string::npos : at - eq - 1), &pid) ||
        pid <= 0 || (at != std::string::npos && at + 1 == m.size())) {
      return Usage(absl::StrCat("'", m, "' is not MEMBER=PID or MEMBER=PID@NODE"));
    }
    v1::JobMember* jm = req.add_members();
    jm->set_member(m.substr(0, eq));
    if (at != std::string::npos) jm->set_node(m.substr(at + 1));
    jm->mutable_checkpoint()->set_pid(pid);
    jm->mutable_checkpoint()->set_leave_running(leave_running);
    jm->mutable_checkpoint()->set_workload(absl::StrCat(ns, ".", name, ".", m.substr(0, eq)));
    if (fs.Given("tcp-established"))
      jm->mutable_checkpoint()->mutable_criu()->set_tcp_established(tcp);
  }
  grpc::ClientContext ctx;
  auto reader = stub->CheckpointJob(&ctx, req);
  v1::OperationEvent last;
  grpc::Status s = Follow(g, reader.get(), &last);
  if (!s.ok()) return Fail(g, "checkpoint-job", s);
  PrintJobCheckpointed(g, last.job_checkpoint());
  return 0;
}

int RestoreJob(Global& g, Cryod& stub, const std::vector<std::string>& argv) {
  v1::RestoreJobRequest req;
  std::string job;
  absl::Duration pid_wait = absl::ZeroDuration();
  flags::FlagSet fs;
  fs.String("job", &job, "the job", "NS/NAME");
  fs.Duration("pid-wait", &pid_wait, "wait this long for the pids to be free");
  std::vector<std::string> pos;
  int rc = 0;
  if (!ParseCommand(g, fs, argv, &pos, &rc)) return rc;
  std::string ns, name;
  if (!SplitJob(job, &ns, &name)) return Usage("restore-job needs --job NS/NAME");
  if (pos.size() != 1) return Usage("restore-job takes one job checkpoint ID");
  req.set_namespace_(ns);
  req.set_job(name);
  req.set_job_checkpoint_id(pos[0]);
  uint32_t ms = 0;
  if (absl::Status s = ToMs(pid_wait, "pid-wait", &ms); !s.ok()) {
    return Usage(std::string(s.message()));
  }
  req.set_pid_wait_timeout_ms(ms);
  grpc::ClientContext ctx;
  auto reader = stub->RestoreJob(&ctx, req);
  v1::OperationEvent last;
  grpc::Status s = Follow(g, reader.get(), &last);
  if (!s.ok()) return Fail(g, "restore-job", s);
  if (g.json) {
    std::cout << ToJson(last.job_restored()) << "\n";
    return 0;
  }
  for (const auto& [member, r] : last.job_restored().members()) {
    std::cout << "restored " << member << " (" << r.checkpoint_id() << ") as pid " << r.root_pid()
              << "\n";
  }
  return 0;
}

int Cancel(Global& g, Cryod& stub, const std::vector<std::string>& argv) {
  std::string reason;
  flags::FlagSet fs;
  fs.String("reason", &reason, "recorded with the operation's result", "TEXT");
  std::vector<std::string> pos;
  int rc = 0;
  if (!ParseCommand(g, fs, argv, &pos, &rc)) return rc;
  if (pos.size() != 1) return Usage("cancel takes one operation id");
  v1::CancelOperationRequest req;
  req.set_operation_id(pos[0]);
  req.set_reason(reason.empty() ? "cancelled with cryo cancel" : reason);
  v1::CancelOperationResponse resp;
  grpc::ClientContext ctx;
  ctx.set_deadline(UnaryDeadline());
  grpc::Status s = stub->CancelOperation(&ctx, req, &resp);
  if (!s.ok()) return Fail(g, "cancel", s);
  if (g.json) {
    std::cout << nlohmann::json{{"operation_id", pos[0]}, {"cancelled", true}}.dump(2) << "\n";
  } else {
    std::cout << "asked operation " << pos[0]
              << " to stop; it rolls back at its next safe point (cryo watch " << pos[0]
              << " shows how it ends)\n";
  }
  return 0;
}

int Watch(Global& g, Cryod& stub, const std::vector<std::string>& argv) {
  flags::FlagSet fs;
  std::vector<std::string> pos;
  int rc = 0;
  if (!ParseCommand(g, fs, argv, &pos, &rc)) return rc;
  if (pos.size() != 1) return Usage("watch takes one operation id");
  v1::WatchOperationRequest req;
  req.set_operation_id(pos[0]);
  grpc::ClientContext ctx;
  auto reader = stub->WatchOperation(&ctx, req);
  v1::OperationEvent last;
  grpc::Status s = Follow(g, reader.get(), &last);
  if (!s.ok()) return Fail(g, "operation", s);
  // The end of the operation, as the command that started it would have printed it.
  if (last.has_checkpoint()) {
    PrintCheckpointed(g, last.checkpoint());
  } else if (last.has_restored()) {
    PrintRestored(g, last.restored());
  } else if (last.has_job_checkpoint()) {
    PrintJobCheckpointed(g, last.job_checkpoint());
  } else if (g.json) {
    std::cout << ToJson(last) << "\n";
  } else {
    std::cout << "operation " << human::Printable(pos[0]) << " ended\n";
  }
  return 0;
}

int List(Global& g, Cryod& stub, const std::vector<std::string>& argv) {
  std::string workload;
  flags::FlagSet fs;
  fs.String("workload", &workload, "only this workload's checkpoints", "NAME");
  std::vector<std::string> pos;
  int rc = 0;
  if (!ParseCommand(g, fs, argv, &pos, &rc)) return rc;
  if (!pos.empty()) return Usage("list takes no arguments");
  v1::ListCheckpointsRequest req;
  req.set_workload(workload);
  v1::ListCheckpointsResponse resp;
  grpc::ClientContext ctx;
  ctx.set_deadline(UnaryDeadline());
  grpc::Status s = stub->ListCheckpoints(&ctx, req, &resp);
  if (!s.ok()) return Fail(g, "list", s);
  if (resp.omitted() > 0) {
    std::cerr << "cryo: " << resp.omitted()
              << " older checkpoints did not fit one answer; narrow the list with --workload\n";
  }
  if (g.json) {
    std::cout << ToJson(resp) << "\n";
    return 0;
  }
  std::vector<std::vector<std::string>> rows = {
      {"ID", "WORKLOAD", "NODE", "CREATED", "SIZE", "REASON", "PID", "COMMAND"}};
  for (const auto& c : resp.checkpoints()) {
    // Why it was taken (the <prefix>/reason label: periodic, stop, ...); "-" for none.
    std::string reason = "-";
    for (const auto& [k, v] : c.labels()) {
      if (absl::EndsWith(k, absl::StrCat("/", contract::label::kReason))) reason = v;
    }
    // A damaged checkpoint stays listed (its space is used) but says it will not restore.
    // Names come from a store other nodes write: never raw control characters on a terminal.
    // So does a job checkpoint's part whose job checkpoint is not committed (yet, or ever).
    std::string id = c.checkpoint_id();
    if (!c.damaged().empty()) {
      id += " (DAMAGED)";
    } else if (!c.job_uncommitted().empty()) {
      id += " (UNCOMMITTED)";
    }
    rows.push_back({id, human::Printable(c.workload()), human::Printable(c.node_name()),
                    human::Printable(c.created_at()),
                    human::SizeCell(c.size_bytes(), c.referenced_bytes()), human::Printable(reason),
                    absl::StrCat(c.root_pid()), human::Printable(c.command())});
  }
  std::cout << human::Table(rows);
  return 0;
}

int Inspect(Global& g, Cryod& stub, const std::vector<std::string>& argv) {
  flags::FlagSet fs;
  std::vector<std::string> pos;
  int rc = 0;
  if (!ParseCommand(g, fs, argv, &pos, &rc)) return rc;
  if (pos.size() != 1) return Usage("inspect takes one checkpoint ID");
  v1::GetCheckpointRequest req;
  req.set_checkpoint_id(pos[0]);
  v1::CheckpointInfo c;
  grpc::ClientContext ctx;
  ctx.set_deadline(UnaryDeadline());
  grpc::Status s = stub->GetCheckpoint(&ctx, req, &c);
  if (!s.ok()) return Fail(g, "inspect", s);
  if (g.json) {
    // The manifest itself is the most useful thing to a script.
    std::cout << c.manifest_json();
    return 0;
  }
  std::cout << "id:        " << c.checkpoint_id() << "\n"
            << "workload:  " << human::Printable(c.workload()) << "\n"
            << "node:      " << human::Printable(c.node_name()) << "\n"
            << "created:   " << human::Printable(c.created_at()) << "\n"
            << "command:   " << human::Printable(c.command()) << " (pid " << c.root_pid() << ", "
            << c.pids_size() << " processes)\n"
            << "size:      " << human::SizeCell(c.size_bytes(), c.referenced_bytes()) << " in "
            << c.file_count() << " files\n"
            << (c.damaged().empty() ? "" : "DAMAGED:   " + human::Printable(c.damaged()) + "\n")
            << (c.job().empty() ? ""
                                : "job:       " + human::Printable(c.job()) + ", member " +
                                      human::Printable(c.job_member()) + " of job checkpoint " +
                                      human::Printable(c.job_checkpoint()) + "\n")
            << (c.job_uncommitted().empty()
                    ? ""
                    : "UNCOMMITTED: " + human::Printable(c.job_uncommitted()) + "\n")
            << "criu:      " << human::Printable(c.criu_version()) << ", kernel "
            << human::Printable(c.kernel()) << "\n"
            << "stages:    " << human::Printable(Ms(c.stage_ms())) << "\n"
            << "path:      " << human::Printable(c.store_path()) << "\n";
  for (const auto& [k, v] : c.labels()) {
    std::cout << "label:     " << human::Printable(k) << "=" << human::Printable(v) << "\n";
  }
  std::vector<std::vector<std::string>> rows = {{"  FILE", "SIZE", "CHECKSUM"}};
  for (const auto& f : c.files()) {
    rows.push_back({"  " + human::Printable(f.path()), human::Bytes(f.size()),
                    human::Printable(f.checksum())});
  }
  std::cout << human::Table(rows);
  return 0;
}

int Remove(Global& g, Cryod& stub, const std::vector<std::string>& argv) {
  flags::FlagSet fs;
  std::vector<std::string> pos;
  int rc = 0;
  if (!ParseCommand(g, fs, argv, &pos, &rc)) return rc;
  if (pos.empty()) return Usage("rm takes one or more checkpoint IDs");
  nlohmann::json out = nlohmann::json::array();
  for (const auto& id : pos) {
    v1::DeleteCheckpointRequest req;
    req.set_checkpoint_id(id);
    v1::DeleteCheckpointResponse resp;
    grpc::ClientContext ctx;
    ctx.set_deadline(UnaryDeadline());
    grpc::Status s = stub->DeleteCheckpoint(&ctx, req, &resp);
    if (!s.ok()) {
      rc = 1;
      if (g.json) {
        out.push_back(
            {{"id", id},
             {"error", {{"code", CodeName(s.error_code())}, {"message", s.error_message()}}}});
      } else {
        Fail(g, absl::StrCat("rm ", id), s);
      }
      continue;
    }
    if (g.json) {
      out.push_back({{"id", id}, {"deleted", true}});
    } else {
      std::cout << "deleted " << id << "\n";
    }
  }
  if (g.json) std::cout << out.dump(2) << "\n";
  return rc;
}

int Node(Global& g, Cryod& stub, const std::vector<std::string>& argv) {
  flags::FlagSet fs;
  std::vector<std::string> pos;
  int rc = 0;
  if (!ParseCommand(g, fs, argv, &pos, &rc)) return rc;
  if (!pos.empty()) return Usage("node takes no arguments");
  v1::NodeInfoResponse n;
  grpc::ClientContext ctx;
  ctx.set_deadline(UnaryDeadline());
  grpc::Status s = stub->NodeInfo(&ctx, v1::NodeInfoRequest(), &n);
  if (!s.ok()) return Fail(g, "node", s);
  if (g.json) {
    std::cout << ToJson(n) << "\n";
    return 0;
  }
  std::cout << "node:     " << n.node_name() << " (cryo " << n.cryo_version() << ")\n"
            << "kernel:   " << n.kernel() << " " << n.arch() << "\n"
            << "criu:     " << n.criu_version() << " at " << n.criu_path()
            << (n.criu_check_error().empty()
                    ? " (check ok)"
                    : absl::StrCat(" (check FAILED: ", n.criu_check_error(), ")"))
            << "\n"
            << "store:    " << n.store_path() << " (" << human::Bytes(n.store_free_bytes())
            << " free)\n";
  if (n.plugins().empty()) std::cout << "plugins:  none (CPU only)\n";
  for (const auto& p : n.plugins()) {
    std::cout << "plugin:   " << p.name() << " " << p.version() << " "
              << (p.available() ? "available" : "unavailable") << " " << p.detail() << "\n";
  }
  std::cout << "fastpath: " << (n.gpu_fast_path_enabled() ? "on" : "off") << ", library "
            << (n.gpu_fast_path_library().empty() ? "(none configured)" : n.gpu_fast_path_library())
            << (n.gpu_fast_path_library_present() ? "" : " (not installed)") << "\n";
  for (const auto& gpu : n.gpus()) {
    std::cout << "gpu:      " << gpu.uuid() << " " << gpu.name() << " "
              << human::Bytes(gpu.memory_free_bytes()) << " free of "
              << human::Bytes(gpu.memory_total_bytes()) << "\n";
  }
  for (const auto& op : n.operations()) {
    std::cout << "running:  " << op.operation_id() << " " << op.kind() << " " << op.target() << " ("
              << StageLabel(op.stage()) << ")\n";
  }
  return 0;
}

}  // namespace
}  // namespace cryo::cli

int main(int argc, char** argv) {
  using namespace cryo::cli;
  Global g;
  const char* env = std::getenv("CRYO_SOCKET");
  g.socket = env && *env ? env : "/run/cryo/cryod.sock";
  std::vector<std::string> args(argv + 1, argv + argc);
  // Global flags before the command; the command's own parser takes them after it too.
  cryo::flags::FlagSet fs;
  DeclareGlobal(fs, g);
  auto r = fs.Parse(args, {.allow_unknown = false, .stop_at_positional = true});
  if (!r.ok()) return Usage(std::string(r.status().message()));
  if (r->help || (!r->positional.empty() && r->positional[0] == "help")) return Help();
  if (absl::Status s = CheckGlobal(g); !s.ok()) return Usage(std::string(s.message()));
  if (r->positional.empty()) return Usage("no command");
  const std::string cmd = r->positional[0];
  const std::vector<std::string> rest(r->positional.begin() + 1, r->positional.end());
  // Needs no cryod: answered before any channel is made.
  if (cmd == "version") {
    if (g.json) {
      std::cout << nlohmann::json{{"version", CRYO_VERSION}}.dump(2) << "\n";
    } else {
      std::cout << "cryo " << CRYO_VERSION << "\n";
    }
    return 0;
  }
  Cryod stub(g);
  if (cmd == "checkpoint") return Checkpoint(g, stub, rest);
  if (cmd == "restore") return Restore(g, stub, rest);
  if (cmd == "checkpoint-job") return CheckpointJob(g, stub, rest);
  if (cmd == "restore-job") return RestoreJob(g, stub, rest);
  if (cmd == "list" || cmd == "ls") return List(g, stub, rest);
  if (cmd == "inspect") return Inspect(g, stub, rest);
  if (cmd == "rm" || cmd == "delete") return Remove(g, stub, rest);
  if (cmd == "node") return Node(g, stub, rest);
  if (cmd == "watch") return Watch(g, stub, rest);
  if (cmd == "cancel") return Cancel(g, stub, rest);
  return Usage(absl::StrCat("unknown command '", cmd, "'"));
}
