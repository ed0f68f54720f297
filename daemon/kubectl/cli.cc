#include "daemon/kubectl/cli.h"

#include <cstdlib>
#include <cstring>
#include <map>
#include <optional>
#include <set>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "lib/base/ids.h"
#include "daemon/kubectl/errors.h"
#include "daemon/kubectl/kubectl.h"
#include "daemon/kubectl/objects.h"
#include "lib/base/human.h"

namespace cryo::kubectl {
namespace {

constexpr char kGlobalHelp[] = R"(Global options (every command):
  -n, --namespace NS        namespace of the pod (default: the kubeconfig context's)
      --kubeconfig FILE     passed to kubectl
      --context NAME        passed to kubectl
      --cryo-namespace NS   where the cryo DaemonSet runs (default cryo-system)
      --annotation-prefix P prefix of cryo's pod annotations (default cryo.dev)
  -o, --output FORMAT       text (default) or json
  -h, --help                this help

Every API call goes through your kubectl ($KUBECTL, else kubectl on PATH), with your
kubeconfig and credentials.
)";

constexpr char kMainHelp[] = R"(Checkpoint running containers with cryo, and restore them anywhere.

Usage:
  kubectl checkpoint POD [-c CONTAINER] [--timeout SECONDS]   checkpoint a running container
  kubectl checkpoint list [--node NODE] [--workload W]        list cryo's checkpoints
  kubectl checkpoint inspect ID                               show one checkpoint
  kubectl checkpoint restore ID [--name NEW] [--node NODE]    resume it in a new pod
  kubectl checkpoint restore ID --workload KIND/NAME          resume a workload's next pods

Run "kubectl checkpoint COMMAND --help" for a command's options.

)";

constexpr char kCheckpointHelp[] =
    R"(Checkpoint a running container through kubelet's checkpoint API.

Usage:
  kubectl checkpoint POD [-c CONTAINER] [-n NS] [--timeout SECONDS] [-o json]

The pod must be bound to a node that runs cryo; kubelet (with the ContainerCheckpoint
feature gate) asks the container runtime, which cryo's CRI shim serves, to checkpoint the
container. The container keeps running. POD may be written pod/NAME.

Then the node's cryod is asked for the new checkpoint. When its store has none, kubelet
does not go through cryo's shim (the runtime took the checkpoint itself): the command fails
with exit code 15 and names the runtime's own archive.

Options:
  -c, --container NAME      the container (needed when the pod has several and no
                            kubectl.kubernetes.io/default-container annotation)
      --timeout SECONDS     how long kubelet waits for the checkpoint (default: the runtime's)

)";

constexpr char kListHelp[] = R"(List the checkpoints in cryo's stores, newest first.

Usage:
  kubectl checkpoint list [--node NODE] [--workload W] [-o json]

Asks cryod on every cryo pod (or on NODE's) through the API server's pod proxy. Nodes that
share a store report the same checkpoints once.

Options:
      --node NODE           ask only the cryo pod on this node
      --workload W          only checkpoints of this workload key

)";

constexpr char kInspectHelp[] =
    R"(Show one checkpoint: where it was taken, its size, stages and labels.

Usage:
  kubectl checkpoint inspect ID [--node NODE] [-o json]

Options:
      --node NODE           ask only the cryo pod on this node

)";

constexpr char kRestoreHelp[] =
    R"(Resume a checkpoint in a new pod, on any node that sees its store.

Usage:
  kubectl checkpoint restore ID [--name NEW] [--node NODE] [--from-file FILE] [--dry-run]
  kubectl checkpoint restore ID --workload KIND/NAME [--dry-run]

The first form creates a copy of the pod the checkpoint was taken from (read from the
cluster, or from FILE when that pod is gone) with the annotation <prefix>/resume=ID; cryo
restores the container into it instead of starting it. The copy has no owner and none of
its controller's labels.

The second form annotates the pod template of a Job, Deployment or StatefulSet (a JSON
merge patch), so the workload's next pods resume from the checkpoint.

Options:
      --name NEW            name of the new pod (default: <pod>-r-<random>)
      --node NODE           bind the new pod to this node (default: the scheduler picks)
      --from-file FILE      the pod (or a workload with a pod template) as JSON or YAML
      --workload KIND/NAME  job/NAME, deployment/NAME or statefulset/NAME
      --dry-run             print the pod (or patch) instead of sending it

)";

// Flags of every command; `value` says whether it takes one.
struct FlagSpec {
  const char* name;
  char short_name;
  bool value;
};

constexpr FlagSpec kFlags[] = {
    {"namespace", 'n', true},    {"kubeconfig", 0, true},        {"context", 0, true},
    {"cryo-namespace", 0, true}, {"annotation-prefix", 0, true}, {"output", 'o', true},
    {"help", 'h', false},        {"container", 'c', true},       {"timeout", 0, true},
    {"node", 0, true},           {"workload", 0, true},          {"name", 0, true},
    {"from-file", 0, true},      {"dry-run", 0, false},
};

const std::set<std::string> kGlobalFlags = {
    "namespace", "kubeconfig", "context", "cryo-namespace", "annotation-prefix", "output", "help"};
const std::map<std::string, std::set<std::string>> kCommandFlags = {
    {"checkpoint", {"container", "timeout"}},
    {"list", {"node", "workload"}},
    {"inspect", {"node"}},
    {"restore", {"name", "node", "from-file", "workload", "dry-run"}},
    {"help", {}},
};

struct Args {
  std::vector<std::string> pos;
  std::map<std::string, std::string> values;  // the last one wins, as in kubectl
  std::set<std::string> bools;

  std::string Get(const std::string& k) const {
    auto it = values.find(k);
    return it == values.end() ? "" : it->second;
  }
  bool Has(const std::string& k) const { return values.count(k) || bools.count(k); }
};

const FlagSpec* FindFlag(const std::string& name, char short_name) {
  for (const auto& f : kFlags) {
    if (short_name ? f.short_name == short_name : name == f.name) return &f;
  }
  return nullptr;
}

absl::StatusOr<Args> ParseArgs(const std::vector<std::string>& in) {
  Args a;
  for (size_t i = 0; i < in.size(); ++i) {
    const std::string& s = in[i];
    if (s == "--") {
      a.pos.insert(a.pos.end(), in.begin() + i + 1, in.end());
      break;
    }
    if (s.size() < 2 || s[0] != '-') {
      a.pos.push_back(s);
      continue;
    }
    const FlagSpec* f = nullptr;
    std::optional<std::string> value;
    if (s[1] == '-') {
      std::string name = s.substr(2);
      if (auto eq = name.find('='); eq != std::string::npos) {
        value = name.substr(eq + 1);
        name = name.substr(0, eq);
      }
      f = FindFlag(name, 0);
      if (f == nullptr) return Failure(kExitUsage, absl::StrCat("unknown flag --", name));
    } else {
      f = FindFlag("", s[1]);
      if (f == nullptr) return Failure(kExitUsage, absl::StrCat("unknown flag ", s.substr(0, 2)));
      // -nNS and -n=NS as kubectl accepts them.
      if (s.size() > 2) value = s[2] == '=' ? s.substr(3) : s.substr(2);
    }
    if (!f->value) {
      if (value && (*value == "false" || *value == "none")) continue;
      if (value && *value != "true" && *value != "client" && *value != "server") {
        return Failure(kExitUsage, absl::StrCat("--", f->name, " takes no value"));
      }
      a.bools.insert(f->name);
      continue;
    }
    if (!value) {
      if (i + 1 >= in.size())
        return Failure(kExitUsage, absl::StrCat("--", f->name, " needs a value"));
      value = in[++i];
    }
    a.values[f->name] = *value;
  }
  return a;
}

struct Ctx {
  Ctx(Kubectl k, std::ostream& o, std::ostream& e) : kubectl(std::move(k)), out(o), err(e) {}

  // -n, else the kubeconfig context's namespace, else "default"; asked once.
  const std::string& Namespace() {
    if (ns.empty()) ns = kubectl.ContextNamespace();
    if (ns.empty()) ns = "default";
    return ns;
  }

  Kubectl kubectl;
  std::ostream& out;
  std::ostream& err;
  Args args;
  std::string ns;       // the namespace: -n, else resolved by Namespace() on first use
  std::string ns_flag;  // -n as given, "" without
  std::string cryo_ns = "cryo-system";
  std::string prefix = contract::kDefaultPrefix;
  bool json = false;
};

std::string PodPath(const std::string& ns, const std::string& pod) {
  return absl::StrCat("/api/v1/namespaces/", UrlEncode(ns), "/pods/", UrlEncode(pod));
}

// The running cryo pods (on `node` when given). kExitNoCryo when there are none.
absl::StatusOr<std::vector<CryoPod>> RunningCryoPods(Ctx& c, const std::string& node) {
  std::string path = absl::StrCat("/api/v1/namespaces/", UrlEncode(c.cryo_ns),
                                  "/pods?labelSelector=", UrlEncode(contract::k8s::kCryoPodSelector));
  if (!node.empty()) absl::StrAppend(&path, "&fieldSelector=", UrlEncode("spec.nodeName=" + node));
  auto list = c.kubectl.GetRaw(path);
  if (!list.ok() && !IsApiNotFound(list.status())) {
    return WithContext(list.status(), absl::StrCat("listing cryo pods in namespace ", c.cryo_ns));
  }
  std::vector<CryoPod> all = list.ok() ? CryoPodsFromList(*list) : std::vector<CryoPod>{};
  std::vector<CryoPod> running, idle;
  for (const auto& p : all) (p.running ? running : idle).push_back(p);
  if (!running.empty()) return running;
  const std::string where = node.empty() ? "in the cluster" : "on node " + node;
  if (!idle.empty()) {
    return Failure(kExitNoCryo,
                   absl::StrCat("cryo is not running ", where, ": pod ", idle[0].name, " is ",
                                idle[0].phase.empty() ? "not started" : idle[0].phase));
  }
  return Failure(kExitNoCryo,
                 absl::StrCat(node.empty() ? "the cluster does not run cryo"
                                           : "node " + node + " does not run cryo",
                              ": no pod labelled ", contract::k8s::kCryoPodSelector, " in namespace ", c.cryo_ns,
                              node.empty() ? "" : " is scheduled there",
                              " (is the cryo DaemonSet installed there, and does it tolerate the "
                              "node's taints? --cryo-namespace names another namespace)"));
}

// GET on cryod's HTTP API through the API server's pod proxy.
absl::StatusOr<nlohmann::json> CryodGet(Ctx& c, const CryoPod& p, const std::string& path) {
  return c.kubectl.GetRaw(absl::StrCat("/api/v1/namespaces/", UrlEncode(c.cryo_ns), "/pods/",
                                       UrlEncode(p.name), ":", p.port, "/proxy", path));
}

// Errors that mean no other cryo pod will do better: stop asking.
bool Fatal(const absl::Status& s) {
  int code = ExitCodeOf(s);
  return code == kExitApiUnreachable || code == kExitUnauthorized || code == kExitKubectlMissing;
}

std::string Describe(const CryoPod& p) {
  return absl::StrCat("cryo pod ", p.name, " (node ", p.node, ")");
}

// One checkpoint from the first cryod that has it.
absl::StatusOr<nlohmann::json> FetchCheckpoint(Ctx& c, const std::string& id,
                                               const std::string& node) {
  if (absl::Status s = ValidateCheckpointId(id); !s.ok()) {
    return Failure(kExitUsage, s.message());
  }
  auto pods = RunningCryoPods(c, node);
  if (!pods.ok()) return pods.status();
  std::vector<std::string> problems;
  for (const auto& p : *pods) {
    auto r = CryodGet(c, p, absl::StrCat(std::string(kCryodCheckpointsPath), "/", id));
    if (r.ok()) return r;
    if (Fatal(r.status())) return r.status();
    if (!IsApiNotFound(r.status())) {
      problems.push_back(absl::StrCat(Describe(p), ": ", r.status().message()));
    }
  }
  if (!problems.empty()) {
    return Failure(kExitCryodFailed,
                   absl::StrCat("checkpoint ", id, " not found, and cryod failed to answer on ",
                                problems.size(), " pods: ", absl::StrJoin(problems, "; ")));
  }
  if (!node.empty()) {
    return Failure(kExitCheckpointNotFound,
                   absl::StrCat("checkpoint ", id, " is not in the store of cryo on node ", node,
                                " (restoring there needs a store shared with the node that took "
                                "it)"));
  }
  return Failure(kExitCheckpointNotFound,
                 absl::StrCat("checkpoint ", id, " not found (asked cryo on ", pods->size(),
                              pods->size() == 1 ? " node" : " nodes", ")"));
}

// ---- checkpoint POD

absl::Status Checkpoint(Ctx& c) {
  if (c.args.pos.size() != 1) {
    return Failure(kExitUsage, "checkpoint takes one POD (see kubectl checkpoint --help)");
  }
  std::string pod_name = c.args.pos[0];
  for (const char* p : {"pod/", "pods/", "po/"}) {
    if (absl::StartsWith(pod_name, p)) pod_name = pod_name.substr(strlen(p));
  }
  int timeout_s = 0;
  if (c.args.Has("timeout")) {
    std::string t = c.args.Get("timeout");
    absl::Duration d;
    if (absl::SimpleAtoi(t, &timeout_s)) {
    } else if (absl::ParseDuration(t, &d)) {
      timeout_s = static_cast<int>(absl::ToInt64Seconds(d));
    } else {
      timeout_s = -1;
    }
    if (timeout_s <= 0) return Failure(kExitUsage, "--timeout wants a number of seconds > 0");
  }
  const std::string ns = c.Namespace();
  const std::string ref = absl::StrCat(ns, "/", pod_name);

  auto pod = c.kubectl.GetRaw(PodPath(ns, pod_name));
  if (IsApiNotFound(pod.status())) {
    return Failure(kExitPodNotFound, absl::StrCat("pod ", ref, " not found"));
  }
  if (!pod.ok()) return WithContext(pod.status(), absl::StrCat("reading pod ", ref));
  auto container = PickContainer(*pod, c.args.Get("container"));
  if (!container.ok()) return Failure(kExitContainerNotFound, container.status().message());
  const std::string node = Str(*pod, "/spec/nodeName");
  if (node.empty()) {
    std::string phase = Str(*pod, "/status/phase");
    return Failure(kExitPodNotScheduled,
                   absl::StrCat("pod ", ref, " is not scheduled to a node yet",
                                phase.empty() ? "" : " (phase " + phase + ")"));
  }
  if (std::string why = NotRunningReason(*pod, *container); !why.empty()) {
    return Failure(kExitContainerNotRunning, absl::StrCat("container ", *container, " of pod ", ref,
                                                          " is not running (", why, ")"));
  }
  auto cryo = RunningCryoPods(c, node);
  if (!cryo.ok()) return cryo.status();
  const CryoPod& cryod = cryo->front();
  const PodRef target{ns, pod_name, *container};
  const std::string uid = Str(*pod, "/metadata/uid");
  // What the store held before, so that the checkpoint this call makes is told apart from
  // older ones by id, without comparing the node's clock with ours.
  auto before = CryodGet(c, cryod, kCryodCheckpointsPath);
  if (!before.ok()) {
    if (Fatal(before.status())) return before.status();
    return Failure(
        kExitCryodFailed,
        absl::StrCat(Describe(cryod), " does not answer, so the checkpoint could not be ",
                     "confirmed; nothing was checkpointed: ", before.status().message()));
  }
  std::set<std::string> known;
  for (const auto& ck : CheckpointsOf(*before, target, uid)) {
    known.insert(Str(ck, "/checkpoint_id"));
  }

  std::string path =
      absl::StrCat("/api/v1/nodes/", UrlEncode(node), "/proxy/checkpoint/", UrlEncode(ns), "/",
                   UrlEncode(pod_name), "/", UrlEncode(*container));
  if (timeout_s > 0) absl::StrAppend(&path, "?timeout=", timeout_s);
  auto r = c.kubectl.PostRaw(path, "");
  const std::string what = absl::StrCat(ref, "/", *container);
  if (!r.ok()) {
    if (ExitCodeOf(r.status()) != kExitError) {
      return WithContext(r.status(), absl::StrCat("checkpointing ", what, " on node ", node));
    }
    if (IsApiNotFound(r.status())) {
      return Failure(kExitKubeletRefused,
                     absl::StrCat("kubelet on node ", node,
                                  " has no checkpoint API: enable its ContainerCheckpoint feature "
                                  "gate (kubectl said: ",
                                  r.status().message(), ")"));
    }
    return Failure(kExitKubeletRefused,
                   absl::StrCat("kubelet on node ", node, " refused to checkpoint ", what, ": ",
                                r.status().message()));
  }
  nlohmann::json items = r->value("items", nlohmann::json::array());
  std::vector<std::string> archives;
  if (items.is_array()) {
    for (const auto& it : items) {
      if (it.is_string()) archives.push_back(it.get<std::string>());
    }
  }
  const std::string archive_text =
      archives.empty() ? "kubelet named no archive"
                       : absl::StrCat("the runtime's own archive is at ",
                                      absl::StrJoin(archives, ", "), " on node ", node);

  // kubelet answers alike whoever served CheckpointContainer: containerd >= 2.0 and CRI-O do it
  // themselves when kubelet talks to them directly, and then cryo's store gets nothing.
  auto after = CryodGet(c, cryod, kCryodCheckpointsPath);
  if (!after.ok()) {
    if (Fatal(after.status())) return after.status();
    return Failure(kExitCryodFailed, absl::StrCat("kubelet on node ", node, " checkpointed ", what,
                                                  " (", archive_text, "), but ", Describe(cryod),
                                                  " did not answer to confirm that cryo took it: ",
                                                  after.status().message()));
  }
  std::string id;
  for (const auto& ck : CheckpointsOf(*after, target, uid)) {
    std::string ck_id = Str(ck, "/checkpoint_id");
    // The list is newest first: the first unknown id is this call's.
    if (!ck_id.empty() && !known.count(ck_id)) {
      id = ck_id;
      break;
    }
  }
  if (id.empty()) {
    return Failure(
        kExitNotThroughCryo,
        absl::StrCat("kubelet on node ", node, " checkpointed ", what,
                     ", but cryo's store has no new checkpoint of it: kubelet does not seem to go "
                     "through cryo-cri-shim (containerd >= 2.0 and CRI-O answer "
                     "CheckpointContainer themselves; point kubelet at the shim as in "
                     "docs/install.md, step 4). ",
                     absl::AsciiStrToUpper(archive_text.substr(0, 1)), archive_text.substr(1),
                     "."));
  }
  if (c.json) {
    nlohmann::json j = {{"namespace", ns}, {"pod", pod_name}, {"container", *container},
                        {"node", node},    {"items", items},  {"checkpoint_id", id}};
    c.out << j.dump(2) << "\n";
    return absl::OkStatus();
  }
  c.out << "checkpointed " << what << " on node " << node << "\n";
  c.out << "  cryo checkpoint: " << id << " (kubectl checkpoint inspect " << id << ")\n";
  for (const auto& a : archives) c.out << "  kubelet archive: " << a << "\n";
  return absl::OkStatus();
}

// ---- list

absl::Status List(Ctx& c) {
  if (c.args.pos.size() != 1) return Failure(kExitUsage, "list takes no arguments");
  const std::string node = c.args.Get("node");
  auto pods = RunningCryoPods(c, node);
  if (!pods.ok()) return pods.status();
  std::string path = std::string(kCryodCheckpointsPath);
  if (c.args.Has("workload"))
    absl::StrAppend(&path, "?workload=", UrlEncode(c.args.Get("workload")));
  std::vector<nlohmann::json> lists;
  std::vector<std::string> problems;
  for (const auto& p : *pods) {
    auto r = CryodGet(c, p, path);
    if (Fatal(r.status())) return r.status();
    if (r.ok() && r->is_array()) {
      lists.push_back(std::move(*r));
    } else {
      problems.push_back(absl::StrCat(
          Describe(p), ": ",
          r.ok() ? "answered something other than a list" : std::string(r.status().message())));
    }
  }
  for (const auto& p : problems) c.err << "warning: " << p << "\n";
  if (lists.empty()) {
    return Failure(kExitCryodFailed,
                   absl::StrCat("no cryod answered (", problems.size(), " cryo pods asked)"));
  }
  nlohmann::json merged = MergeCheckpoints(lists);
  if (c.json) {
    c.out << merged.dump(2) << "\n";
    return absl::OkStatus();
  }
  if (merged.empty()) {
    c.err << "No checkpoints found.\n";
    return absl::OkStatus();
  }
  std::vector<std::vector<std::string>> rows = {{"ID", "WORKLOAD", "POD", "NODE", "SIZE", "AGE"}};
  const absl::Time now = absl::Now();
  for (const auto& ck : merged) {
    absl::Time t = ParseRfc3339(Str(ck, "/created_at"));
    rows.push_back({Str(ck, "/checkpoint_id"), Str(ck, "/workload"), SourceOf(ck).ToString(),
                    Str(ck, "/node_name"),
                    human::Bytes(U64(ck.value("size_bytes", nlohmann::json()))),
                    t == absl::InfinitePast() ? "?" : human::Age(now - t)});
  }
  c.out << human::Table(rows);
  return absl::OkStatus();
}

// ---- inspect ID

std::string JoinMs(const nlohmann::json& stage_ms) {
  std::vector<std::string> parts;
  if (stage_ms.is_object()) {
    for (auto it = stage_ms.begin(); it != stage_ms.end(); ++it) {
      parts.push_back(absl::StrCat(it.key(), " ", U64(it.value()), "ms"));
    }
  }
  return parts.empty() ? "-" : absl::StrJoin(parts, ", ");
}

absl::Status Inspect(Ctx& c) {
  if (c.args.pos.size() != 2) return Failure(kExitUsage, "inspect takes one checkpoint ID");
  auto ck = FetchCheckpoint(c, c.args.pos[1], c.args.Get("node"));
  if (!ck.ok()) return ck.status();
  const nlohmann::json& j = *ck;
  if (c.json) {
    c.out << j.dump(2) << "\n";
    return absl::OkStatus();
  }
  const nlohmann::json m = j.value("manifest", nlohmann::json::object());
  auto line = [&c](const std::string& k, const std::string& v) {
    if (v.empty()) return;
    c.out << k << std::string(k.size() < 12 ? 12 - k.size() : 1, ' ') << v << "\n";
  };
  const absl::Time t = ParseRfc3339(Str(j, "/created_at"));
  std::string command = Str(j, "/command");
  if (m.contains("target") && m["target"].contains("cmdline") &&
      m["target"]["cmdline"].is_array() && !m["target"]["cmdline"].empty()) {
    std::vector<std::string> argv;
    for (const auto& a : m["target"]["cmdline"]) {
      if (a.is_string()) argv.push_back(a.get<std::string>());
    }
    command = absl::StrJoin(argv, " ");
  }
  size_t processes = j.contains("pids") && j["pids"].is_array() ? j["pids"].size() : 0;
  line("ID:", Str(j, "/checkpoint_id"));
  line("Workload:", Str(j, "/workload"));
  line("Kind:", Str(j, "/kind"));
  line("Pod:", SourceOf(j).ToString());
  line("Node:", Str(j, "/node_name"));
  line("Created:",
       absl::StrCat(Str(j, "/created_at"),
                    t == absl::InfinitePast() ? "" : " (" + human::Age(absl::Now() - t) + " ago)"));
  line("Command:", absl::StrCat(command, " (pid ", U64(j.value("root_pid", nlohmann::json())), ", ",
                                processes, processes == 1 ? " process)" : " processes)"));
  line("Size:", absl::StrCat(human::Bytes(U64(j.value("size_bytes", nlohmann::json()))), " in ",
                             U64(j.value("file_count", nlohmann::json())), " files"));
  std::vector<std::string> source;
  if (auto k = Str(m, "/source/kernel"); !k.empty()) source.push_back("kernel " + k);
  if (auto a = Str(m, "/source/arch"); !a.empty()) source.push_back(a);
  if (auto v = Str(m, "/source/criu_version"); !v.empty()) source.push_back("CRIU " + v);
  if (auto v = Str(m, "/source/cryo_version"); !v.empty()) source.push_back("cryo " + v);
  line("Source:", absl::StrJoin(source, ", "));
  line("Image:", Str(m, "/container/image"));
  if (m.contains("gpu") && m["gpu"].is_object() && !m["gpu"].empty()) {
    std::vector<std::string> plugins;
    for (auto it = m["gpu"].begin(); it != m["gpu"].end(); ++it) plugins.push_back(it.key());
    size_t n = m.contains("gpu_processes") && m["gpu_processes"].is_array()
                   ? m["gpu_processes"].size()
                   : 0;
    line("GPU:", absl::StrCat(absl::StrJoin(plugins, ", "), " (", n,
                              n == 1 ? " GPU process)" : " GPU processes)"));
  }
  std::vector<std::string> options;
  if (m.value("/options/leave_running"_json_pointer, false)) options.push_back("left running");
  if (m.value("/options/tcp_established"_json_pointer, false)) options.push_back("established TCP");
  if (m.value("/options/shell_job"_json_pointer, false)) options.push_back("shell job");
  line("Options:", absl::StrJoin(options, ", "));
  line("Stages:", JoinMs(j.value("stage_ms", nlohmann::json::object())));
  line("Store:", Str(j, "/store_path"));
  const nlohmann::json labels = j.value("labels", nlohmann::json::object());
  bool first = true;
  for (auto it = labels.begin(); it != labels.end(); ++it) {
    if (!it.value().is_string()) continue;
    line(first ? "Labels:" : " ", absl::StrCat(it.key(), "=", it.value().get<std::string>()));
    first = false;
  }
  return absl::OkStatus();
}

// ---- restore ID

absl::Status RestoreWorkload(Ctx& c, const std::string& id) {
  for (const char* f : {"name", "node", "from-file"}) {
    if (c.args.Has(f)) {
      return Failure(kExitUsage, absl::StrCat("--", f, " does not go with --workload"));
    }
  }
  auto wl = ParseWorkload(c.args.Get("workload"));
  if (!wl.ok()) return Failure(kExitUsage, wl.status().message());
  auto ck = FetchCheckpoint(c, id, "");
  if (!ck.ok()) return ck.status();
  const PodRef src = SourceOf(*ck);
  std::string ns = c.ns_flag.empty() ? src.namespace_name : c.ns_flag;
  if (ns.empty()) ns = c.Namespace();
  const nlohmann::json patch = WorkloadResumePatch(c.prefix, id, src.container);
  const std::string ref = absl::StrCat(wl->resource, "/", wl->name);
  if (c.args.bools.count("dry-run")) {
    if (!c.json) c.out << "would patch " << ref << " in namespace " << ns << " with:\n";
    c.out << patch.dump(2) << "\n";
    return absl::OkStatus();
  }
  auto r = c.kubectl.MergePatch(wl->resource, wl->name, ns, patch);
  if (!r.ok()) {
    if (ExitCodeOf(r.status()) != kExitError) return r.status();
    if (IsApiNotFound(r.status())) {
      return Failure(kExitWorkloadNotFound,
                     absl::StrCat(ref, " not found in namespace ", ns, ": ", r.status().message()));
    }
    return Failure(kExitError,
                   absl::StrCat("patching ", ref, " in namespace ", ns, ": ", r.status().message(),
                                wl->resource == "job"
                                    ? " (a Job's pod template can only change while the Job is "
                                      "suspended and has not started pods)"
                                    : ""));
  }
  if (c.json) {
    c.out << r->dump(2) << "\n";
    return absl::OkStatus();
  }
  c.out << ref << " in namespace " << ns << " annotated: its new pods resume from checkpoint " << id
        << "\n";
  return absl::OkStatus();
}

absl::Status Restore(Ctx& c) {
  if (c.args.pos.size() != 2) return Failure(kExitUsage, "restore takes one checkpoint ID");
  const std::string id = c.args.pos[1];
  if (absl::Status s = ValidateCheckpointId(id); !s.ok()) return Failure(kExitUsage, s.message());
  if (c.args.Has("workload")) return RestoreWorkload(c, id);

  const std::string node = c.args.Get("node");
  // With --node, ask that node's cryod: it proves the checkpoint is reachable from there.
  auto ck = FetchCheckpoint(c, id, node);
  if (!ck.ok()) return ck.status();
  const PodRef src = SourceOf(*ck);

  nlohmann::json source;
  if (c.args.Has("from-file")) {
    auto f = c.kubectl.ReadObjectFile(c.args.Get("from-file"));
    if (!f.ok()) {
      if (ExitCodeOf(f.status()) != kExitError) return f.status();
      return Failure(kExitUsage, absl::StrCat("--from-file ", c.args.Get("from-file"), ": ",
                                              f.status().message()));
    }
    source = std::move(*f);
  } else {
    if (src.pod.empty() || src.namespace_name.empty()) {
      return Failure(kExitSourcePodGone,
                     absl::StrCat("checkpoint ", id,
                                  " does not say which pod it was taken from (no ", contract::k8s::kPodName,
                                  " label): give the pod with --from-file "
                                  "pod.json|yaml"));
    }
    const std::string ref = absl::StrCat(src.namespace_name, "/", src.pod);
    auto pod = c.kubectl.GetRaw(PodPath(src.namespace_name, src.pod));
    if (IsApiNotFound(pod.status())) {
      return Failure(kExitSourcePodGone,
                     absl::StrCat("pod ", ref, ", which checkpoint ", id,
                                  " was taken from, no longer exists: give its manifest with "
                                  "--from-file pod.json|yaml (saved with kubectl get pod -o yaml, "
                                  "or a workload's pod template)"));
    }
    if (!pod.ok()) return WithContext(pod.status(), absl::StrCat("reading pod ", ref));
    source = std::move(*pod);
  }
  ResumePodOptions o;
  o.checkpoint_id = id;
  o.name = c.args.Get("name");
  o.node = node;
  o.namespace_name = c.ns_flag;
  o.container = src.container;
  o.prefix = c.prefix;
  auto pod = BuildResumePod(source, o);
  if (!pod.ok()) return Failure(kExitError, pod.status().message());
  const std::string name = Str(*pod, "/metadata/name");
  if (c.args.bools.count("dry-run")) {
    c.out << pod->dump(2) << "\n";
    return absl::OkStatus();
  }
  auto created = c.kubectl.Create(*pod, c.ns_flag);
  if (!created.ok()) {
    if (ExitCodeOf(created.status()) != kExitError) return created.status();
    return Failure(kExitError,
                   absl::StrCat("creating pod ", name, ": ", created.status().message()));
  }
  if (c.json) {
    c.out << created->dump(2) << "\n";
    return absl::OkStatus();
  }
  std::string ns = Str(*created, "/metadata/namespace");
  if (ns.empty()) ns = Str(*pod, "/metadata/namespace");
  c.out << "pod/" << Str(*created, "/metadata/name") << " created"
        << (ns.empty() ? "" : " in namespace " + ns) << ": it resumes from checkpoint " << id
        << (node.empty() ? " wherever the scheduler places it" : " on node " + node) << "\n";
  return absl::OkStatus();
}

}  // namespace

int RunCli(const std::vector<std::string>& argv, std::ostream& out, std::ostream& err) {
  auto usage = [&err](const absl::Status& s) {
    err << "error: " << s.message() << "\nSee 'kubectl checkpoint --help'.\n";
    return ExitCodeOf(s);
  };
  auto parsed = ParseArgs(argv);
  if (!parsed.ok()) return usage(parsed.status());
  Args& a = *parsed;

  std::string command = "checkpoint";
  if (!a.pos.empty() && kCommandFlags.count(a.pos[0])) command = a.pos[0];
  auto help = [](const std::string& topic) {
    const char* text = topic == "checkpoint" ? kCheckpointHelp
                       : topic == "list"     ? kListHelp
                       : topic == "inspect"  ? kInspectHelp
                       : topic == "restore"  ? kRestoreHelp
                                             : kMainHelp;
    return absl::StrCat(text, kGlobalHelp);
  };
  if (a.bools.count("help") || command == "help") {
    std::string topic = command == "help" ? (a.pos.size() > 1 ? a.pos[1] : "")
                        : a.pos.empty()   ? ""
                                          : command;
    out << help(topic);
    return kExitOk;
  }
  if (a.pos.empty()) {
    err << help("");
    return kExitUsage;
  }
  const auto& allowed = kCommandFlags.at(command);
  for (const auto& [k, v] : a.values) {
    if (!kGlobalFlags.count(k) && !allowed.count(k)) {
      return usage(Failure(kExitUsage, absl::StrCat("--", k, " is not a flag of ", command)));
    }
  }
  for (const auto& k : a.bools) {
    if (!kGlobalFlags.count(k) && !allowed.count(k)) {
      return usage(Failure(kExitUsage, absl::StrCat("--", k, " is not a flag of ", command)));
    }
  }
  const std::string output = a.Get("output");
  if (!output.empty() && output != "json" && output != "text") {
    return usage(Failure(kExitUsage, "--output is text or json"));
  }

  KubectlOptions ko;
  if (const char* k = std::getenv("KUBECTL"); k && *k) ko.kubectl = k;
  ko.kubeconfig = a.Get("kubeconfig");
  ko.context = a.Get("context");
  Ctx c(Kubectl(ko), out, err);
  c.args = a;
  c.ns = c.ns_flag = a.Get("namespace");
  if (a.Has("cryo-namespace")) c.cryo_ns = a.Get("cryo-namespace");
  if (a.Has("annotation-prefix")) c.prefix = a.Get("annotation-prefix");
  if (c.cryo_ns.empty() || c.prefix.empty()) {
    return usage(Failure(kExitUsage, "--cryo-namespace and --annotation-prefix cannot be empty"));
  }
  c.json = output == "json";

  absl::Status s = command == "list"      ? List(c)
                   : command == "inspect" ? Inspect(c)
                   : command == "restore" ? Restore(c)
                                          : Checkpoint(c);
  if (s.ok()) return kExitOk;
  if (ExitCodeOf(s) == kExitUsage) return usage(s);
  err << "error: " << s.message() << "\n";
  return ExitCodeOf(s);
}

}  // namespace cryo::kubectl
