// cryo: command-line client of cryod for people on a node (and, with -o json, for scripts).

#include <grpcpp/grpcpp.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/time.h"
#include "daemon/api/checkpoint_json.h"
#include "daemon/cli/output.h"
#include "cryo/v1/cryo.grpc.pb.h"
#include "nlohmann/json.hpp"

namespace cryo::cli {
namespace {

// Unary calls answer from cryod's state at once; one that takes longer than this is a stuck
// cryod, and the user should hear so rather than wait forever.
std::chrono::system_clock::time_point UnaryDeadline() {
  return std::chrono::system_clock::now() + std::chrono::seconds(30);
}

constexpr char kUsage[] = R"(usage: cryo [--socket PATH] [-o text|json] COMMAND [ARGS]

Commands:
  checkpoint PID   checkpoint the process tree rooted at PID into the store
      --id ID              checkpoint id (default: <workload>-<time>-<rand>)
      --workload NAME      group for retention and listing (default: the command name)
      --leave-running      keep the job running afterwards (default: stop it, as on preemption)
      --tcp-established    include established TCP connections
      --shell-job          the tree was started from a terminal (detected when needed)
      --label KEY=VALUE    recorded in the manifest (repeatable)
      --gpu-lock-timeout D bound on locking GPU processes (e.g. 30s)
  restore ID       restore a checkpoint on this node (it keeps its pids)
      --pid-wait D         wait this long for the pids to be free (default: node setting)
      --gpu-map OLD=NEW    map a checkpointed GPU UUID onto one of this node's (repeatable)
  list             list checkpoints, newest first    [--workload NAME]
  inspect ID       show a checkpoint's manifest and files
  rm ID...         delete checkpoints
  node             show this node: CRIU, kernel, store, GPU plugins, operations in flight
  watch OP         follow an operation started elsewhere

Options:
  --socket PATH    cryod's socket (default $CRYO_SOCKET or /run/cryo/cryod.sock)
  -o, --output F   text (default) or json
)";

struct Global {
  std::string socket;
  bool json = false;
};

int Usage(const std::string& msg) {
  if (!msg.empty()) std::cerr << "cryo: " << msg << "\n\n";
  std::cerr << kUsage;
  return 2;
}

std::string CodeName(grpc::StatusCode c) {
  static const char* names[] = {"OK",
                                "CANCELLED",
                                "UNKNOWN",
                                "INVALID_ARGUMENT",
                                "DEADLINE_EXCEEDED",
                                "NOT_FOUND",
                                "ALREADY_EXISTS",
                                "PERMISSION_DENIED",
                                "RESOURCE_EXHAUSTED",
                                "FAILED_PRECONDITION",
                                "ABORTED",
                                "OUT_OF_RANGE",
                                "UNIMPLEMENTED",
                                "INTERNAL",
                                "UNAVAILABLE",
                                "DATA_LOSS",
                                "UNAUTHENTICATED"};
  int i = static_cast<int>(c);
  return i >= 0 && i <= 16 ? names[i] : absl::StrCat(i);
}

// The same JSON as cryod's HTTP API and kubectl-checkpoint print.
std::string ToJson(const google::protobuf::Message& m) { return api::MessageToJson(m); }

int Fail(const Global& g, const std::string& what, const grpc::Status& s) {
  std::string msg = s.error_message();
  if (s.error_code() == grpc::StatusCode::UNAVAILABLE) {
    msg = absl::StrCat("cannot reach cryod at ", g.socket, " (is it running, and are you root?): ",
                       msg);
  }
  if (g.json) {
    nlohmann::json j = {{"error", {{"code", CodeName(s.error_code())}, {"message", msg}}}};
    std::cout << j.dump(2) << "\n";
  } else {
    std::cerr << "cryo: " << what << " failed: " << CodeName(s.error_code()) << ": " << msg
              << "\n";
  }
  return 1;
}

// Arguments after the command: flags with values, boolean flags, positionals.
struct Args {
  std::vector<std::string> pos;
  std::multimap<std::string, std::string> kv;
  std::set<std::string> flags;
  std::string error;
};

Args ParseArgs(const std::vector<std::string>& in, const std::set<std::string>& with_value,
               const std::set<std::string>& boolean) {
  Args a;
  for (size_t i = 0; i < in.size(); ++i) {
    const std::string& s = in[i];
    if (s.rfind("--", 0) != 0) {
      a.pos.push_back(s);
      continue;
    }
    std::string name = s.substr(2), value;
    bool has_eq = false;
    if (auto eq = name.find('='); eq != std::string::npos) {
      value = name.substr(eq + 1);
      name = name.substr(0, eq);
      has_eq = true;
    }
    if (boolean.count(name) && !has_eq) {
      a.flags.insert(name);
    } else if (with_value.count(name)) {
      if (!has_eq) {
        if (i + 1 >= in.size()) {
          a.error = absl::StrCat("--", name, " needs a value");
          return a;
        }
        value = in[++i];
      }
      a.kv.emplace(name, value);
    } else {
      a.error = absl::StrCat("unknown option --", name);
      return a;
    }
  }
  return a;
}

bool ParseDurationMs(const std::string& s, uint32_t* ms) {
  absl::Duration d;
  if (!absl::ParseDuration(s, &d) || d < absl::ZeroDuration()) return false;
  *ms = static_cast<uint32_t>(absl::ToInt64Milliseconds(d));
  return true;
}

bool ParsePair(const std::string& s, std::string* k, std::string* v) {
  auto eq = s.find('=');
  if (eq == std::string::npos || eq == 0) return false;
  *k = s.substr(0, eq);
  *v = s.substr(eq + 1);
  return true;
}

std::string Ms(const google::protobuf::Map<std::string, uint64_t>& m) {
  std::vector<std::pair<std::string, uint64_t>> v(m.begin(), m.end());
  std::sort(v.begin(), v.end());
  std::vector<std::string> parts;
  for (const auto& [k, ms] : v) parts.push_back(absl::StrCat(k, " ", ms, "ms"));
  return absl::StrJoin(parts, ", ");
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

int Checkpoint(const Global& g, v1::Cryo::Stub& stub, const std::vector<std::string>& argv) {
  Args a = ParseArgs(argv, {"id", "workload", "label", "gpu-lock-timeout", "operation-id"},
                     {"leave-running", "tcp-established", "shell-job"});
  if (!a.error.empty()) return Usage(a.error);
  if (a.pos.size() != 1) return Usage("checkpoint takes one PID");
  v1::CheckpointRequest req;
  int pid;
  if (!absl::SimpleAtoi(a.pos[0], &pid) || pid <= 0) return Usage("PID must be a positive number");
  req.set_pid(pid);
  for (const auto& [k, v] : a.kv) {
    if (k == "id") req.set_checkpoint_id(v);
    if (k == "workload") req.set_workload(v);
    if (k == "operation-id") req.set_operation_id(v);
    if (k == "label") {
      std::string lk, lv;
      if (!ParsePair(v, &lk, &lv)) return Usage("--label wants KEY=VALUE");
      (*req.mutable_labels())[lk] = lv;
    }
    if (k == "gpu-lock-timeout") {
      uint32_t ms;
      if (!ParseDurationMs(v, &ms)) return Usage("--gpu-lock-timeout wants a duration like 30s");
      req.set_gpu_lock_timeout_ms(ms);
    }
  }
  req.set_leave_running(a.flags.count("leave-running"));
  req.set_tcp_established(a.flags.count("tcp-established"));
  req.set_shell_job(a.flags.count("shell-job"));
  grpc::ClientContext ctx;
  auto reader = stub.Checkpoint(&ctx, req);
  v1::OperationEvent last;
  grpc::Status s = Follow(g, reader.get(), &last);
  if (!s.ok()) return Fail(g, "checkpoint", s);
  const auto& c = last.checkpoint();
  if (g.json) {
    std::cout << ToJson(c) << "\n";
  } else {
    std::cout << "checkpoint " << c.checkpoint_id() << ": " << HumanBytes(c.size_bytes()) << " in "
              << c.file_count() << " files, pid " << c.root_pid() << " ("
              << (c.leave_running() ? "left running" : "stopped") << ")\n"
              << "  stages: " << Ms(c.stage_ms()) << "\n"
              << "  stored: " << c.store_path() << "\n";
  }
  return 0;
}

int Restore(const Global& g, v1::Cryo::Stub& stub, const std::vector<std::string>& argv) {
  Args a = ParseArgs(argv, {"pid-wait", "gpu-map", "operation-id"}, {});
  if (!a.error.empty()) return Usage(a.error);
  if (a.pos.size() != 1) return Usage("restore takes one checkpoint ID");
  v1::RestoreRequest req;
  req.set_checkpoint_id(a.pos[0]);
  for (const auto& [k, v] : a.kv) {
    if (k == "operation-id") req.set_operation_id(v);
    if (k == "pid-wait") {
      uint32_t ms;
      if (!ParseDurationMs(v, &ms)) return Usage("--pid-wait wants a duration like 10s");
      req.set_pid_wait_timeout_ms(ms);
    }
    if (k == "gpu-map") {
      std::string from, to;
      if (!ParsePair(v, &from, &to)) return Usage("--gpu-map wants OLD_UUID=NEW_UUID");
      (*req.mutable_gpu_map())[from] = to;
    }
  }
  grpc::ClientContext ctx;
  auto reader = stub.Restore(&ctx, req);
  v1::OperationEvent last;
  grpc::Status s = Follow(g, reader.get(), &last);
  if (!s.ok()) return Fail(g, "restore", s);
  const auto& r = last.restored();
  if (g.json) {
    std::cout << ToJson(r) << "\n";
  } else {
    std::cout << "restored " << r.checkpoint_id() << " as pid " << r.root_pid() << "\n"
              << "  stages: " << Ms(r.stage_ms()) << "\n";
  }
  return 0;
}

int Watch(const Global& g, v1::Cryo::Stub& stub, const std::vector<std::string>& argv) {
  if (argv.size() != 1) return Usage("watch takes one operation id");
  v1::WatchOperationRequest req;
  req.set_operation_id(argv[0]);
  grpc::ClientContext ctx;
  auto reader = stub.WatchOperation(&ctx, req);
  v1::OperationEvent last;
  grpc::Status s = Follow(g, reader.get(), &last);
  if (!s.ok()) return Fail(g, "operation", s);
  std::cout << (g.json ? ToJson(last) : last.DebugString()) << "\n";
  return 0;
}

int List(const Global& g, v1::Cryo::Stub& stub, const std::vector<std::string>& argv) {
  Args a = ParseArgs(argv, {"workload"}, {});
  if (!a.error.empty()) return Usage(a.error);
  if (!a.pos.empty()) return Usage("list takes no arguments");
  v1::ListCheckpointsRequest req;
  if (auto it = a.kv.find("workload"); it != a.kv.end()) req.set_workload(it->second);
  v1::ListCheckpointsResponse resp;
  grpc::ClientContext ctx;
  ctx.set_deadline(UnaryDeadline());
  grpc::Status s = stub.ListCheckpoints(&ctx, req, &resp);
  if (!s.ok()) return Fail(g, "list", s);
  if (g.json) {
    std::cout << ToJson(resp) << "\n";
    return 0;
  }
  std::vector<std::vector<std::string>> rows = {
      {"ID", "WORKLOAD", "NODE", "CREATED", "SIZE", "PID", "COMMAND"}};
  for (const auto& c : resp.checkpoints()) {
    // A damaged checkpoint stays listed (its space is used) but says it will not restore.
    rows.push_back({c.damaged().empty() ? c.checkpoint_id() : c.checkpoint_id() + " (DAMAGED)",
                    c.workload(), c.node_name(), c.created_at(), HumanBytes(c.size_bytes()),
                    absl::StrCat(c.root_pid()), c.command()});
  }
  std::cout << Table(rows);
  return 0;
}

int Inspect(const Global& g, v1::Cryo::Stub& stub, const std::vector<std::string>& argv) {
  if (argv.size() != 1) return Usage("inspect takes one checkpoint ID");
  v1::GetCheckpointRequest req;
  req.set_checkpoint_id(argv[0]);
  v1::CheckpointInfo c;
  grpc::ClientContext ctx;
  ctx.set_deadline(UnaryDeadline());
  grpc::Status s = stub.GetCheckpoint(&ctx, req, &c);
  if (!s.ok()) return Fail(g, "inspect", s);
  if (g.json) {
    // The manifest itself is the most useful thing to a script.
    std::cout << c.manifest_json();
    return 0;
  }
  std::cout << "id:        " << c.checkpoint_id() << "\n"
            << "workload:  " << c.workload() << "\n"
            << "node:      " << c.node_name() << "\n"
            << "created:   " << c.created_at() << "\n"
            << "command:   " << c.command() << " (pid " << c.root_pid() << ", " << c.pids_size()
            << " processes)\n"
            << "size:      " << HumanBytes(c.size_bytes()) << " in " << c.file_count() << " files\n"
            << (c.damaged().empty() ? "" : "DAMAGED:   " + c.damaged() + "\n")
            << "criu:      " << c.criu_version() << ", kernel " << c.kernel() << "\n"
            << "stages:    " << Ms(c.stage_ms()) << "\n"
            << "path:      " << c.store_path() << "\n";
  for (const auto& [k, v] : c.labels()) std::cout << "label:     " << k << "=" << v << "\n";
  std::vector<std::vector<std::string>> rows = {{"  FILE", "SIZE", "CHECKSUM"}};
  for (const auto& f : c.files()) {
    rows.push_back({"  " + f.path(), HumanBytes(f.size()), f.checksum()});
  }
  std::cout << Table(rows);
  return 0;
}

int Remove(const Global& g, v1::Cryo::Stub& stub, const std::vector<std::string>& argv) {
  if (argv.empty()) return Usage("rm takes one or more checkpoint IDs");
  int rc = 0;
  nlohmann::json out = nlohmann::json::array();
  for (const auto& id : argv) {
    v1::DeleteCheckpointRequest req;
    req.set_checkpoint_id(id);
    v1::DeleteCheckpointResponse resp;
    grpc::ClientContext ctx;
    ctx.set_deadline(UnaryDeadline());
    grpc::Status s = stub.DeleteCheckpoint(&ctx, req, &resp);
    if (!s.ok()) {
      rc = 1;
      if (g.json) {
        out.push_back({{"id", id}, {"error", s.error_message()}, {"code", CodeName(s.error_code())}});
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

int Node(const Global& g, v1::Cryo::Stub& stub, const std::vector<std::string>& argv) {
  if (!argv.empty()) return Usage("node takes no arguments");
  v1::NodeInfoResponse n;
  grpc::ClientContext ctx;
  ctx.set_deadline(UnaryDeadline());
  grpc::Status s = stub.NodeInfo(&ctx, v1::NodeInfoRequest(), &n);
  if (!s.ok()) return Fail(g, "node", s);
  if (g.json) {
    std::cout << ToJson(n) << "\n";
    return 0;
  }
  std::cout << "node:     " << n.node_name() << " (cryo " << n.cryo_version() << ")\n"
            << "kernel:   " << n.kernel() << " " << n.arch() << "\n"
            << "criu:     " << n.criu_version() << " at " << n.criu_path()
            << (n.criu_check_error().empty() ? " (check ok)"
                                             : absl::StrCat(" (check FAILED: ",
                                                            n.criu_check_error(), ")"))
            << "\n"
            << "store:    " << n.store_path() << " (" << HumanBytes(n.store_free_bytes())
            << " free)\n";
  if (n.plugins().empty()) std::cout << "plugins:  none (CPU only)\n";
  for (const auto& p : n.plugins()) {
    std::cout << "plugin:   " << p.name() << " " << p.version() << " "
              << (p.available() ? "available" : "unavailable") << " " << p.detail() << "\n";
  }
  for (const auto& gpu : n.gpus()) {
    std::cout << "gpu:      " << gpu.uuid() << " " << gpu.name() << " "
              << HumanBytes(gpu.memory_free_bytes()) << " free of "
              << HumanBytes(gpu.memory_total_bytes()) << "\n";
  }
  for (const auto& op : n.operations()) {
    std::cout << "running:  " << op.operation_id() << " " << op.kind() << " " << op.target()
              << " (" << StageLabel(op.stage()) << ")\n";
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
  size_t i = 0;
  for (; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (a == "-h" || a == "--help" || a == "help") return Usage(""), 0;
    if (a == "--socket" && i + 1 < args.size()) {
      g.socket = args[++i];
    } else if (a.rfind("--socket=", 0) == 0) {
      g.socket = a.substr(9);
    } else if ((a == "-o" || a == "--output") && i + 1 < args.size()) {
      std::string f = args[++i];
      if (f != "json" && f != "text") return Usage("output format is text or json");
      g.json = f == "json";
    } else if (a == "-o=json" || a == "--output=json" || a == "-ojson") {
      g.json = true;
    } else {
      break;
    }
  }
  if (i >= args.size()) return Usage("no command");
  std::string cmd = args[i];
  std::vector<std::string> rest;
  // -o may also follow the command.
  for (size_t j = i + 1; j < args.size(); ++j) {
    if ((args[j] == "-o" || args[j] == "--output") && j + 1 < args.size()) {
      if (args[j + 1] != "json" && args[j + 1] != "text") return Usage("output format is text or json");
      g.json = args[++j] == "json";
    } else {
      rest.push_back(args[j]);
    }
  }
  auto channel = grpc::CreateChannel("unix://" + g.socket, grpc::InsecureChannelCredentials());
  auto stub = cryo::v1::Cryo::NewStub(channel);
  if (cmd == "checkpoint") return Checkpoint(g, *stub, rest);
  if (cmd == "restore") return Restore(g, *stub, rest);
  if (cmd == "list" || cmd == "ls") return List(g, *stub, rest);
  if (cmd == "inspect") return Inspect(g, *stub, rest);
  if (cmd == "rm" || cmd == "delete") return Remove(g, *stub, rest);
  if (cmd == "node") return Node(g, *stub, rest);
  if (cmd == "watch") return Watch(g, *stub, rest);
  return Usage(absl::StrCat("unknown command '", cmd, "'"));
}
