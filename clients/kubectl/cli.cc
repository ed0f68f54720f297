#include "clients/kubectl/cli.h"

#include <cstdlib>
#include <cstring>
#include <map>
#include <set>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "clients/kubectl/errors.h"
#include "clients/kubectl/kubectl.h"
#include "clients/kubectl/objects.h"
#include "lib/base/flags.h"
#include "lib/base/human.h"
#include "lib/base/ids.h"
#include "lib/contract/annotations.h"
#include "lib/contract/labels.h"

#ifndef CRYO_VERSION
#define CRYO_VERSION "unknown"
#endif

namespace cryo::kubectl {
namespace {

using nlohmann::json;

// ---- flags

enum class Output { kText, kWide, kJson, kYaml, kName };

struct Options {
  // kubectl's global flags, as given, for every kubectl call.
  std::vector<std::string> kubectl_flags;
  int verbosity = 0;
  // kubectl's meaning, the plugin's use.
  std::string ns;
  bool all_namespaces = false;
  Output output = Output::kText;
  bool version = false;
  // Where cryod is.
  std::string cryo_namespace = "cryo-system";
  std::string endpoint;       // --cryo-endpoint, else $CRYO_ENDPOINT, else pods
  std::string node_selector;  // --cryo-node-selector, else $CRYO_NODE_SELECTOR
  std::string prefix = contract::kDefaultPrefix;
  // The commands' own.
  std::string container;
  int timeout_s = 0;
  std::string node;
  std::string workload;
  std::string name;
  std::string from_file;
  bool dry_run = false;
};

// kubectl's global options (`kubectl options`): every one is passed on to every kubectl call,
// so the plugin authenticates, impersonates and logs as the user's kubectl would.
struct KubectlFlag {
  const char* name;
  char short_name;
  bool takes_value;
};
constexpr KubectlFlag kKubectlFlags[] = {
    {"kubeconfig", 0, true},
    {"context", 0, true},
    {"cluster", 0, true},
    {"user", 0, true},
    {"server", 's', true},
    {"token", 0, true},
    {"as", 0, true},
    {"as-group", 0, true},
    {"as-uid", 0, true},
    {"username", 0, true},
    {"password", 0, true},
    {"certificate-authority", 0, true},
    {"client-certificate", 0, true},
    {"client-key", 0, true},
    {"tls-server-name", 0, true},
    {"insecure-skip-tls-verify", 0, false},
    {"request-timeout", 0, true},
    {"disable-compression", 0, false},
    {"cache-dir", 0, true},
    {"match-server-version", 0, false},
    {"warnings-as-errors", 0, false},
    {"v", 'v', true},
    {"vmodule", 0, true},
    {"profile", 0, true},
    {"profile-output", 0, true},
    {"log-flush-frequency", 0, true},
};

constexpr char kKubectlFlagsHelp[] =
    R"(kubectl's own options, passed to every kubectl call the plugin makes (kubectl options
describes them):
  --kubeconfig, --context, --cluster, --user, -s/--server, --token, --as, --as-group,
  --as-uid, --username, --password, --certificate-authority, --client-certificate,
  --client-key, --tls-server-name, --insecure-skip-tls-verify, --request-timeout,
  --disable-compression, --cache-dir, --match-server-version, --warnings-as-errors,
  -v/--v (kubectl's log goes to stderr), --vmodule, --profile, --profile-output,
  --log-flush-frequency
Give them after "cryo": kubectl looks for a plugin only when its name comes first.
)";

constexpr char kFooterHelp[] =
    R"(
Every API call goes through your kubectl ($KUBECTL, else kubectl on PATH), with your
kubeconfig and credentials. Exit codes: docs/kubectl.md. The same binary installed as
kubectl-checkpoint makes "kubectl checkpoint POD" mean "kubectl cryo checkpoint POD", as long
as kubectl has no built-in "checkpoint" command.
)";

// "-n=ml", "-v=6": pflag takes the '=' after a short flag; flags.h hands it on with the value.
std::string ShortValue(absl::string_view v) { return std::string(absl::StripPrefix(v, "=")); }

void DeclareKubectlFlags(flags::FlagSet& fs, Options* o) {
  for (const KubectlFlag& f : kKubectlFlags) {
    const std::string name = f.name;
    const bool takes_value = f.takes_value;
    fs.Custom(
        name,
        [o, name, takes_value](absl::string_view v) {
          std::string value = ShortValue(v);
          bool b;
          if (!takes_value && !absl::SimpleAtob(value, &b)) {
            return absl::InvalidArgumentError(
                absl::StrCat("--", name, ": '", value, "' is not true or false"));
          }
          if (name == "v" && (!absl::SimpleAtoi(value, &o->verbosity) || o->verbosity < 0)) {
            return absl::InvalidArgumentError(
                absl::StrCat("-v/--v: '", value, "' is not a log level (0, 1, ... 10)"));
          }
          o->kubectl_flags.push_back(absl::StrCat("--", name, "=", value));
          return absl::OkStatus();
        },
        "passed to kubectl", takes_value ? "VALUE" : "");
    if (f.short_name != 0) fs.Short(f.short_name);
  }
}

absl::Status SetOutput(absl::string_view v, Output* out) {
  static const std::map<std::string, Output, std::less<>> kFormats = {{"text", Output::kText},
                                                                      {"wide", Output::kWide},
                                                                      {"json", Output::kJson},
                                                                      {"yaml", Output::kYaml},
                                                                      {"name", Output::kName}};
  const std::string value = ShortValue(v);
  auto it = kFormats.find(value);
  if (it == kFormats.end()) {
    return absl::InvalidArgumentError(
        absl::StrCat("-o/--output: '", value, "' is not one of text, wide, json, yaml or name"));
  }
  *out = it->second;
  return absl::OkStatus();
}

// -n, -A, -o: what kubectl means by them, for every command.
void DeclareCommonFlags(flags::FlagSet& fs, Options* o) {
  fs.Custom(
        "namespace",
        [o](absl::string_view v) {
          o->ns = ShortValue(v);
          return absl::OkStatus();
        },
        "the namespace (default: the kubeconfig context's, else default)", "NS")
      .Short('n');
  fs.Bool("all-namespaces", &o->all_namespaces, "list: checkpoints of every namespace").Short('A');
  fs.Custom(
        "output", [o](absl::string_view v) { return SetOutput(v, &o->output); },
        "text, wide (list: more columns), json, yaml or name", "FORMAT", "text")
      .Short('o');
}

void DeclareCryoFlags(flags::FlagSet& fs, Options* o) {
  fs.String("cryo-namespace", &o->cryo_namespace,
            "namespace of the cryo DaemonSet, whose pods run cryod", "NS");
  fs.String("cryo-endpoint", &o->endpoint,
            "pods (the cryo DaemonSet), or nodes:PORT (a host service)", "ENDPOINT")
      .DefaultText("$CRYO_ENDPOINT, else pods");
  fs.String("cryo-node-selector", &o->node_selector,
            "with nodes:PORT, ask only nodes with these labels", "SELECTOR")
      .DefaultText("$CRYO_NODE_SELECTOR");
  fs.String("annotation-prefix", &o->prefix, "prefix of cryo's pod annotations, as the shim's",
            "PREFIX");
  fs.Bool("version", &o->version, "the versions of kubectl cryo and of kubectl");
}

// The commands' own flags, and which commands take them.
const std::map<std::string, std::set<std::string>>& CommandFlags() {
  static const auto* m = new std::map<std::string, std::set<std::string>>{
      {"container", {"checkpoint"}},
      {"timeout", {"checkpoint"}},
      {"node", {"list", "inspect", "restore"}},
      {"workload", {"list", "restore"}},
      {"name", {"restore"}},
      {"from-file", {"restore"}},
      {"dry-run", {"restore"}},
  };
  return *m;
}

// `command`'s flags, or every command's when empty (the help texts are then any command's).
void DeclareCommandFlags(flags::FlagSet& fs, const std::string& command, Options* o) {
  auto takes = [&command](const char* flag) {
    return command.empty() || CommandFlags().at(flag).count(command) > 0;
  };
  if (takes("container")) {
    fs.Custom(
          "container",
          [o](absl::string_view v) {
            o->container = ShortValue(v);
            return absl::OkStatus();
          },
          "the container (default: the only one, or the pod's default-container)", "NAME")
        .Short('c');
  }
  if (takes("timeout")) {
    fs.Custom(
        "timeout",
        [o](absl::string_view v) {
          absl::Duration d;
          if (absl::SimpleAtoi(v, &o->timeout_s)) {
          } else if (absl::ParseDuration(v, &d)) {
            o->timeout_s = static_cast<int>(absl::ToInt64Seconds(d));
          } else {
            o->timeout_s = -1;
          }
          if (o->timeout_s <= 0) {
            return absl::InvalidArgumentError(
                absl::StrCat("--timeout: '", v, "' is not a number of seconds > 0 (or 5m)"));
          }
          return absl::OkStatus();
        },
        "how long kubelet waits, in seconds or as 5m (default: the runtime's)", "SECONDS");
  }
  if (takes("node")) {
    fs.String("node", &o->node,
              command == "restore" ? "bind the new pod to NODE (default: the scheduler picks)"
                                   : "ask only the cryod on NODE",
              "NODE");
  }
  if (takes("workload")) {
    fs.String("workload", &o->workload,
              command == "restore"
                  ? "annotate this job/, deployment/ or statefulset/'s pod template"
                  : "only checkpoints of this workload key",
              command == "restore" ? "KIND/NAME" : "W");
  }
  if (takes("name")) {
    fs.String("name", &o->name, "name of the new pod (default: <pod>-r-<random>)", "NEW");
  }
  if (takes("from-file")) {
    fs.String("from-file", &o->from_file,
              "the source pod (or its workload) as JSON or YAML, when it is gone", "FILE");
  }
  if (takes("dry-run")) {
    fs.Custom(
        "dry-run",
        [o](absl::string_view v) {
          bool b = false;
          if (v == "client" || v == "server") {
            b = true;
          } else if (v != "none" && !absl::SimpleAtob(v, &b)) {
            return absl::InvalidArgumentError(
                absl::StrCat("--dry-run: '", v, "' is not true, false, client or none"));
          }
          o->dry_run = b;
          return absl::OkStatus();
        },
        "print the pod (or the patch) instead of sending it", "");
  }
}

// ---- help

constexpr char kMainHelp[] =
    R"(kubectl cryo: checkpoint running containers with cryo, and restore them anywhere.

Usage:
  kubectl cryo checkpoint POD [-c CONTAINER] [--timeout SECONDS]
                                           checkpoint a running container
  kubectl cryo list [-n NS | -A] [--node NODE] [--workload W]
                                           list checkpoints, newest first
  kubectl cryo inspect ID                  show one checkpoint
  kubectl cryo restore ID [--name NEW] [--node NODE] [--from-file FILE]
                                           resume a checkpoint in a new pod
  kubectl cryo restore ID --workload KIND/NAME
                                           resume a workload's next pods from it
  kubectl cryo version                     versions of kubectl cryo and of kubectl

Run "kubectl cryo COMMAND --help" for a command's own options.
)";

constexpr char kCheckpointHelp[] =
    R"(Checkpoint a running container through kubelet's checkpoint API.

Usage:
  kubectl cryo checkpoint POD [-c CONTAINER] [-n NS] [--timeout SECONDS] [-o FORMAT]

The pod must be bound to a node where cryod runs; kubelet (with the ContainerCheckpoint
feature gate) asks the container runtime, which cryo's CRI shim serves, to checkpoint the
container. The container keeps running. POD may be written pod/NAME.

Then the node's cryod is asked for the new checkpoint. When its store has none, kubelet
does not go through cryo's shim (the runtime took the checkpoint itself): the command fails
with exit code 15 and names the runtime's own archive. -o name prints checkpoint/ID.
)";

constexpr char kListHelp[] = R"(List the checkpoints in cryo's stores, newest first.

Usage:
  kubectl cryo list [-n NS | -A] [--node NODE] [--workload W] [-o FORMAT]

Asks every cryod (or NODE's) through the API server. Nodes that share a store report the
same checkpoints once. Only checkpoints of pods in the namespace (-n, else the context's)
are listed; -A lists all, those taken outside Kubernetes too. -o json and -o yaml print a
kubectl List; -o name prints checkpoint/ID per line.
)";

constexpr char kInspectHelp[] =
    R"(Show one checkpoint: where it was taken, its size, stages and labels.

Usage:
  kubectl cryo inspect ID [--node NODE] [-o FORMAT]

Checkpoint ids are unique across namespaces: ID is looked up whatever -n says.
)";

constexpr char kRestoreHelp[] =
    R"(Resume a checkpoint in a new pod, on any node that sees its store.

Usage:
  kubectl cryo restore ID [--name NEW] [--node NODE] [--from-file FILE] [--dry-run] [-n NS]
  kubectl cryo restore ID --workload KIND/NAME [--dry-run] [-n NS]

The first form creates a copy of the pod the checkpoint was taken from (read from the
cluster, or from FILE when that pod is gone) with the annotation <prefix>/resume=ID; cryo
restores the container into it instead of starting it. The copy has no owner and none of
its controller's labels. It goes to -n's namespace, else the source pod's.

The second form annotates the pod template of a Job, Deployment or StatefulSet (a JSON
merge patch), so the workload's next pods resume from the checkpoint.
)";

constexpr char kVersionHelp[] = R"(Print the versions of kubectl cryo and of kubectl.

Usage:
  kubectl cryo version [-o json|yaml]

Also says whether kubectl has a built-in "checkpoint" command, which kubectl would run
instead of this plugin's second name, kubectl-checkpoint.
)";

const std::set<std::string>& Commands() {
  static const auto* s =
      new std::set<std::string>{"checkpoint", "list", "inspect", "restore", "version", "help"};
  return *s;
}

std::string Help(const std::string& topic) {
  const char* text = topic == "checkpoint" ? kCheckpointHelp
                     : topic == "list"     ? kListHelp
                     : topic == "inspect"  ? kInspectHelp
                     : topic == "restore"  ? kRestoreHelp
                     : topic == "version"  ? kVersionHelp
                                           : kMainHelp;
  Options defaults;
  std::string help = text;
  if (Commands().count(topic) && topic != "help" && topic != "version") {
    flags::FlagSet own;
    DeclareCommandFlags(own, topic, &defaults);
    if (std::string u = own.Usage(); !u.empty()) absl::StrAppend(&help, "\nOptions:\n", u);
  }
  flags::FlagSet common;
  DeclareCommonFlags(common, &defaults);
  DeclareCryoFlags(common, &defaults);
  absl::StrAppend(&help, "\nOptions of every command:\n", common.Usage(),
                  "  --help, -h\n      this help\n\n", kKubectlFlagsHelp, kFooterHelp);
  return help;
}

// ---- the cluster

struct Ctx {
  Ctx(Kubectl k, std::ostream& o, std::ostream& e) : kubectl(std::move(k)), out(o), err(e) {}

  // -n, else the kubeconfig context's namespace, else "default"; asked once.
  const std::string& Namespace() {
    if (ns.empty()) ns = kubectl.ContextNamespace();
    if (ns.empty()) ns = "default";
    return ns;
  }
  bool Structured() const { return o.output == Output::kJson || o.output == Output::kYaml; }
  // An object as -o json or -o yaml asks.
  void Print(const json& j) {
    out << (o.output == Output::kYaml
                ? ToYaml(j)
                : j.dump(2, ' ', false, json::error_handler_t::replace) + "\n");
  }

  Kubectl kubectl;
  std::ostream& out;
  std::ostream& err;
  Options o;
  CryodEndpoint endpoint;
  std::string ns;  // the namespace: -n, else resolved by Namespace() on first use
};

std::string PodPath(const std::string& ns, const std::string& pod) {
  return absl::StrCat("/api/v1/namespaces/", UrlEncode(ns), "/pods/", UrlEncode(pod));
}

// One cryod, and the API server path through which its HTTP API is reached.
struct Cryod {
  std::string node;
  std::string base;      // ".../proxy": cryod's paths follow
  std::string describe;  // for messages
};

std::string HostServiceHint() {
  return absl::StrCat(
      "If cryod runs as a host service on the nodes instead, point kubectl cryo at its HTTP "
      "port, which it reaches through the API server's node proxy: --cryo-endpoint nodes:",
      kDefaultCryodPort, " or CRYO_ENDPOINT=nodes:", kDefaultCryodPort,
      " (the port of cryod's metrics_address; docs/kubectl.md, \"cryod as a host service\").");
}

// The cryo DaemonSet's running pods (on `node` when given) that declare cryod's port.
absl::StatusOr<std::vector<Cryod>> PodCryods(Ctx& c, const std::string& node) {
  const std::string& cns = c.o.cryo_namespace;
  const std::string selector = contract::k8s::kCryoPodSelector;
  std::string path = absl::StrCat("/api/v1/namespaces/", UrlEncode(cns),
                                  "/pods?labelSelector=", UrlEncode(selector));
  if (!node.empty()) absl::StrAppend(&path, "&fieldSelector=", UrlEncode("spec.nodeName=" + node));
  auto list = c.kubectl.GetRaw(path);
  if (!list.ok() && !IsApiNotFound(list.status())) {
    return WithContext(list.status(), absl::StrCat("listing cryo pods in namespace ", cns));
  }
  std::vector<Cryod> usable;
  std::vector<CryoPod> no_port, idle;
  for (const CryoPod& p : list.ok() ? CryoPodsFromList(*list) : std::vector<CryoPod>{}) {
    if (!p.running) {
      idle.push_back(p);
    } else if (p.port == 0) {
      no_port.push_back(p);
    } else {
      usable.push_back({p.node,
                        absl::StrCat("/api/v1/namespaces/", UrlEncode(cns), "/pods/",
                                     UrlEncode(p.name), ":", p.port, "/proxy"),
                        absl::StrCat("cryo pod ", p.name, " (node ", p.node, ")")});
    }
  }
  if (!usable.empty()) return usable;
  const std::string where = node.empty() ? "" : " on node " + node;
  if (!no_port.empty()) {
    return Failure(
        kExitNoCryo,
        absl::StrCat("cryod not found", where, ": pod ", no_port[0].name, " in namespace ", cns,
                     " (labelled ", selector, ") declares no container port named \"",
                     kCryodPortName,
                     "\", through which the API server's pod proxy reaches cryod's HTTP API (the "
                     "chart declares it while metrics.enabled is true). ",
                     HostServiceHint()));
  }
  if (!idle.empty()) {
    return Failure(kExitNoCryo,
                   absl::StrCat("cryo is not running", where.empty() ? "" : where, ": pod ",
                                idle[0].name, " in namespace ", cns, " is ",
                                idle[0].phase.empty() ? "not started" : idle[0].phase));
  }
  return Failure(
      kExitNoCryo,
      absl::StrCat("cryod not found", where, ": no pod labelled ", selector, " in namespace ", cns,
                   node.empty() ? "" : " runs there",
                   ". If the cryo chart is installed in another namespace, add --cryo-namespace NS",
                   node.empty() ? "" : "; if the DaemonSet skips the node, see its tolerations",
                   ". ", HostServiceHint()));
}

// cryod as a host service: NODE:PORT through the node proxy, on `node` or every Ready node.
absl::StatusOr<std::vector<Cryod>> NodeCryods(Ctx& c, const std::string& node) {
  const int port = c.endpoint.port;
  auto make = [port](const std::string& n) {
    return Cryod{n, absl::StrCat("/api/v1/nodes/", UrlEncode(n), ":", port, "/proxy"),
                 absl::StrCat("cryod on node ", n, " (port ", port, ")")};
  };
  if (!node.empty()) return std::vector<Cryod>{make(node)};
  std::string path = "/api/v1/nodes";
  if (!c.o.node_selector.empty()) {
    absl::StrAppend(&path, "?labelSelector=", UrlEncode(c.o.node_selector));
  }
  auto list = c.kubectl.GetRaw(path);
  if (!list.ok()) {
    return WithContext(list.status(),
                       absl::StrCat("listing nodes (--cryo-endpoint ", c.endpoint.ToString(), ")"));
  }
  std::vector<Cryod> out;
  for (const std::string& n : ReadyNodes(*list)) out.push_back(make(n));
  if (out.empty()) {
    return Failure(kExitNoCryo,
                   absl::StrCat("cryod not found: no Ready node",
                                c.o.node_selector.empty() ? "" : " labelled " + c.o.node_selector,
                                " to ask (--cryo-endpoint ", c.endpoint.ToString(), ")"));
  }
  return out;
}

// The cryods to ask (only `node`'s when given). kExitNoCryo when there is none.
absl::StatusOr<std::vector<Cryod>> FindCryods(Ctx& c, const std::string& node) {
  return c.endpoint.kind == CryodEndpoint::kNodes ? NodeCryods(c, node) : PodCryods(c, node);
}

// GET on cryod's HTTP API through the API server's proxy.
absl::StatusOr<json> CryodGet(Ctx& c, const Cryod& d, const std::string& path) {
  auto r = c.kubectl.GetRaw(d.base + path);
  // A node named by --node (or a pod's) that does not exist answers 404 like an unknown
  // checkpoint would; the API server's message tells them apart.
  if (c.endpoint.kind == CryodEndpoint::kNodes && IsApiNotFound(r.status()) &&
      absl::StrContains(r.status().message(), absl::StrCat("nodes \"", d.node, "\" not found"))) {
    return Failure(kExitNoCryo, absl::StrCat("cryod not found: there is no node ", d.node));
  }
  return r;
}

// Why a cryod that was found might not answer.
std::string NoAnswerHint(const Ctx& c, const Cryod& d) {
  if (c.endpoint.kind != CryodEndpoint::kNodes) return "";
  return absl::StrCat(" (does cryod run on node ", d.node,
                      " as a host service, with its HTTP API on ", "port ", c.endpoint.port,
                      " of the node's address?)");
}

// Errors that mean no other cryod will do better: stop asking.
bool Fatal(const absl::Status& s) {
  int code = ExitCodeOf(s);
  return code == kExitApiUnreachable || code == kExitUnauthorized || code == kExitKubectlMissing ||
         code == kExitNoCryo;
}

// One checkpoint from the first cryod that has it.
absl::StatusOr<json> FetchCheckpoint(Ctx& c, const std::string& id, const std::string& node) {
  if (absl::Status s = ValidateCheckpointId(id); !s.ok()) {
    return Failure(kExitUsage, s.message());
  }
  auto cryods = FindCryods(c, node);
  if (!cryods.ok()) return cryods.status();
  std::vector<std::string> problems;
  for (const Cryod& d : *cryods) {
    auto r = CryodGet(c, d, absl::StrCat(kCryodCheckpointsPath, "/", id));
    if (r.ok()) return r;
    if (Fatal(r.status())) return r.status();
    if (!IsApiNotFound(r.status())) {
      problems.push_back(absl::StrCat(d.describe, ": ", r.status().message(), NoAnswerHint(c, d)));
    }
  }
  if (!problems.empty()) {
    return Failure(
        kExitCryodFailed,
        absl::StrCat("checkpoint ", id, " not found, and ", problems.size(), " of ", cryods->size(),
                     " cryods failed to answer: ", absl::StrJoin(problems, "; ")));
  }
  if (!node.empty()) {
    return Failure(kExitCheckpointNotFound,
                   absl::StrCat("checkpoint ", id, " is not in the store of cryod on node ", node,
                                " (restoring there needs a store shared with the node that took "
                                "it)"));
  }
  return Failure(kExitCheckpointNotFound,
                 absl::StrCat("checkpoint ", id, " not found (asked cryod on ", cryods->size(),
                              cryods->size() == 1 ? " node" : " nodes", ")"));
}

// ---- checkpoint POD

absl::Status Checkpoint(Ctx& c, const std::vector<std::string>& pos) {
  if (pos.size() != 1) {
    return Failure(kExitUsage, "checkpoint takes one POD: kubectl cryo checkpoint POD");
  }
  std::string pod_name = pos[0];
  for (const char* p : {"pod/", "pods/", "po/"}) {
    if (absl::StartsWith(pod_name, p)) pod_name = pod_name.substr(strlen(p));
  }
  const std::string ns = c.Namespace();
  const std::string ref = absl::StrCat(ns, "/", pod_name);

  auto pod = c.kubectl.GetRaw(PodPath(ns, pod_name));
  if (IsApiNotFound(pod.status())) {
    return Failure(kExitPodNotFound, absl::StrCat("pod ", ref, " not found"));
  }
  if (!pod.ok()) return WithContext(pod.status(), absl::StrCat("reading pod ", ref));
  auto container = PickContainer(*pod, c.o.container);
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
  auto cryods = FindCryods(c, node);
  if (!cryods.ok()) return cryods.status();
  const Cryod& cryod = cryods->front();
  const PodRef target{ns, pod_name, *container};
  const std::string uid = Str(*pod, "/metadata/uid");
  // What the store held before, so that the checkpoint this call makes is told apart from
  // older ones by id, without comparing the node's clock with ours.
  auto before = CryodGet(c, cryod, kCryodCheckpointsPath);
  if (!before.ok()) {
    if (Fatal(before.status())) return before.status();
    return Failure(kExitCryodFailed,
                   absl::StrCat(cryod.describe, " does not answer", NoAnswerHint(c, cryod),
                                ", so the checkpoint could not be confirmed; nothing was "
                                "checkpointed: ",
                                before.status().message()));
  }
  std::set<std::string> known;
  for (const auto& ck : CheckpointsOf(*before, target, uid)) {
    known.insert(Str(ck, "/checkpoint_id"));
  }

  std::string path =
      absl::StrCat("/api/v1/nodes/", UrlEncode(node), "/proxy/checkpoint/", UrlEncode(ns), "/",
                   UrlEncode(pod_name), "/", UrlEncode(*container));
  if (c.o.timeout_s > 0) absl::StrAppend(&path, "?timeout=", c.o.timeout_s);
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
  json items = r->value("items", json::array());
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
                                                  " (", archive_text, "), but ", cryod.describe,
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
  if (c.Structured()) {
    c.Print({{"namespace", ns},
             {"pod", pod_name},
             {"container", *container},
             {"node", node},
             {"items", items},
             {"checkpoint_id", id}});
  } else if (c.o.output == Output::kName) {
    c.out << "checkpoint/" << id << "\n";
  } else {
    c.out << "checkpointed " << what << " on node " << node << "\n";
    c.out << "  cryo checkpoint: " << id << " (kubectl cryo inspect " << id << ")\n";
    for (const auto& a : archives) c.out << "  kubelet archive: " << human::Printable(a) << "\n";
  }
  return absl::OkStatus();
}

// ---- list

absl::Status List(Ctx& c, const std::vector<std::string>& pos) {
  if (!pos.empty()) return Failure(kExitUsage, "list takes no arguments");
  // kubectl's rule: -A wins over -n.
  const std::string ns = c.o.all_namespaces ? "" : c.Namespace();
  auto cryods = FindCryods(c, c.o.node);
  if (!cryods.ok()) return cryods.status();
  std::string path = kCryodCheckpointsPath;
  if (!c.o.workload.empty()) absl::StrAppend(&path, "?workload=", UrlEncode(c.o.workload));
  std::vector<json> lists;
  std::vector<std::string> problems;
  for (const Cryod& d : *cryods) {
    auto r = CryodGet(c, d, path);
    if (Fatal(r.status())) return r.status();
    if (r.ok() && r->is_array()) {
      lists.push_back(std::move(*r));
    } else {
      problems.push_back(absl::StrCat(
          d.describe, ": ",
          r.ok() ? "answered something other than a list" : std::string(r.status().message()),
          r.ok() ? "" : NoAnswerHint(c, d)));
    }
  }
  for (const auto& p : problems) c.err << "warning: " << p << "\n";
  if (lists.empty()) {
    return Failure(kExitCryodFailed,
                   absl::StrCat("no cryod answered (", problems.size(), " asked)"));
  }
  json items = json::array();
  for (auto& ck : MergeCheckpoints(lists)) {
    if (ns.empty() || SourceOf(ck).namespace_name == ns) items.push_back(std::move(ck));
  }
  if (c.Structured()) {
    c.Print(KubeList(items));
    return absl::OkStatus();
  }
  if (c.o.output == Output::kName) {
    for (const auto& ck : items) c.out << "checkpoint/" << Str(ck, "/checkpoint_id") << "\n";
    return absl::OkStatus();
  }
  if (items.empty()) {
    c.err << (ns.empty() ? "No checkpoints found.\n"
                         : absl::StrCat("No checkpoints found in ", ns, " namespace.\n"));
    return absl::OkStatus();
  }
  const bool all = ns.empty();
  const bool wide = c.o.output == Output::kWide;
  std::vector<std::string> head = {"ID", "WORKLOAD", "POD", "NODE", "SIZE", "AGE"};
  if (all) head.insert(head.begin(), "NAMESPACE");
  if (wide) head.insert(head.end(), {"KIND", "FILES", "REASON", "CREATED"});
  std::vector<std::vector<std::string>> rows = {head};
  const absl::Time now = absl::Now();
  const std::string reason_label = contract::Key(c.o.prefix, contract::label::kReason);
  for (const auto& ck : items) {
    const absl::Time t = ParseRfc3339(Str(ck, "/created_at"));
    const PodRef src = SourceOf(ck);
    std::vector<std::string> row = {
        Str(ck, "/checkpoint_id"),
        Str(ck, "/workload"),
        src.pod.empty() ? "-"
                        : absl::StrCat(src.pod, "/", src.container.empty() ? "?" : src.container),
        Str(ck, "/node_name"),
        human::Bytes(U64(ck.value("size_bytes", json()))),
        t == absl::InfinitePast() ? "?" : human::Age(now - t)};
    if (all) row.insert(row.begin(), src.namespace_name.empty() ? "-" : src.namespace_name);
    if (wide) {
      const json labels = ck.value("labels", json::object());
      row.insert(row.end(), {Str(ck, "/kind"), absl::StrCat(U64(ck.value("file_count", json()))),
                             labels.is_object() ? labels.value(reason_label, "-") : "-",
                             Str(ck, "/created_at")});
    }
    for (auto& cell : row) cell = cell.empty() ? "-" : human::Printable(cell);
    rows.push_back(std::move(row));
  }
  c.out << human::Table(rows);
  return absl::OkStatus();
}

// ---- inspect ID

std::string JoinMs(const json& stage_ms) {
  std::vector<std::string> parts;
  if (stage_ms.is_object()) {
    for (auto it = stage_ms.begin(); it != stage_ms.end(); ++it) {
      parts.push_back(absl::StrCat(it.key(), " ", U64(it.value()), "ms"));
    }
  }
  return parts.empty() ? "-" : absl::StrJoin(parts, ", ");
}

absl::Status Inspect(Ctx& c, const std::vector<std::string>& pos) {
  if (pos.size() != 1) return Failure(kExitUsage, "inspect takes one checkpoint ID");
  auto ck = FetchCheckpoint(c, pos[0], c.o.node);
  if (!ck.ok()) return ck.status();
  const json& j = *ck;
  if (c.Structured()) {
    c.Print(j);
    return absl::OkStatus();
  }
  if (c.o.output == Output::kName) {
    c.out << "checkpoint/" << Str(j, "/checkpoint_id") << "\n";
    return absl::OkStatus();
  }
  const json m = j.value("manifest", json::object());
  auto line = [&c](const std::string& k, const std::string& v) {
    if (v.empty()) return;
    c.out << k << std::string(k.size() < 12 ? 12 - k.size() : 1, ' ') << human::Printable(v)
          << "\n";
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
  line("Command:", absl::StrCat(command, " (pid ", U64(j.value("root_pid", json())), ", ",
                                processes, processes == 1 ? " process)" : " processes)"));
  line("Size:", absl::StrCat(human::Bytes(U64(j.value("size_bytes", json()))), " in ",
                             U64(j.value("file_count", json())), " files"));
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
  line("Stages:", JoinMs(j.value("stage_ms", json::object())));
  line("Store:", Str(j, "/store_path"));
  const json labels = j.value("labels", json::object());
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
  for (const auto& [flag, value] : {std::pair<const char*, const std::string&>{"name", c.o.name},
                                    {"node", c.o.node},
                                    {"from-file", c.o.from_file}}) {
    if (!value.empty()) {
      return Failure(kExitUsage, absl::StrCat("--", flag, " does not go with --workload"));
    }
  }
  auto wl = ParseWorkload(c.o.workload);
  if (!wl.ok()) return Failure(kExitUsage, wl.status().message());
  auto ck = FetchCheckpoint(c, id, "");
  if (!ck.ok()) return ck.status();
  const PodRef src = SourceOf(*ck);
  std::string ns = c.o.ns.empty() ? src.namespace_name : c.o.ns;
  if (ns.empty()) ns = c.Namespace();
  const json patch = WorkloadResumePatch(c.o.prefix, id, src.container);
  const std::string ref = absl::StrCat(wl->resource, "/", wl->name);
  const std::string name = absl::StrCat(QualifiedKind(wl->resource), "/", wl->name);
  if (c.o.dry_run) {
    if (c.o.output == Output::kName) {
      c.out << name << "\n";
    } else if (c.Structured()) {
      c.Print(patch);
    } else {
      c.out << "would patch " << ref << " in namespace " << ns
            << " (kubectl patch --type merge) with:\n"
            << patch.dump(2) << "\n";
    }
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
  if (c.Structured()) {
    c.Print(*r);
  } else if (c.o.output == Output::kName) {
    c.out << name << "\n";
  } else {
    c.out << ref << " in namespace " << ns << " annotated: its new pods resume from checkpoint "
          << id << "\n";
  }
  return absl::OkStatus();
}

absl::Status Restore(Ctx& c, const std::vector<std::string>& pos) {
  if (pos.size() != 1) return Failure(kExitUsage, "restore takes one checkpoint ID");
  const std::string id = pos[0];
  if (absl::Status s = ValidateCheckpointId(id); !s.ok()) return Failure(kExitUsage, s.message());
  if (!c.o.workload.empty()) return RestoreWorkload(c, id);

  const std::string& node = c.o.node;
  // With --node, ask that node's cryod: it proves the checkpoint is reachable from there.
  auto ck = FetchCheckpoint(c, id, node);
  if (!ck.ok()) return ck.status();
  const PodRef src = SourceOf(*ck);

  json source;
  if (!c.o.from_file.empty()) {
    auto f = c.kubectl.ReadObjectFile(c.o.from_file);
    if (!f.ok()) {
      if (ExitCodeOf(f.status()) != kExitError) return f.status();
      return Failure(kExitUsage,
                     absl::StrCat("--from-file ", c.o.from_file, ": ", f.status().message()));
    }
    source = std::move(*f);
  } else {
    if (src.pod.empty() || src.namespace_name.empty()) {
      return Failure(
          kExitSourcePodGone,
          absl::StrCat("checkpoint ", id, " does not say which pod it was taken from (no ",
                       contract::k8s::kPodName,
                       " label): give the pod with --from-file pod.json|yaml"));
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
  ResumePodOptions ro;
  ro.checkpoint_id = id;
  ro.name = c.o.name;
  ro.node = node;
  ro.namespace_name = c.o.ns;
  ro.container = src.container;
  ro.prefix = c.o.prefix;
  auto pod = BuildResumePod(source, ro);
  if (!pod.ok()) return Failure(kExitError, pod.status().message());
  const std::string name = Str(*pod, "/metadata/name");
  if (c.o.dry_run) {
    if (c.o.output == Output::kName) {
      c.out << "pod/" << name << "\n";
    } else if (c.o.output == Output::kJson) {
      c.Print(*pod);
    } else {
      c.out << ToYaml(*pod);  // what a person reads, and what kubectl create -f takes
    }
    return absl::OkStatus();
  }
  auto created = c.kubectl.Create(*pod, c.o.ns);
  if (!created.ok()) {
    if (ExitCodeOf(created.status()) != kExitError) return created.status();
    return Failure(kExitError,
                   absl::StrCat("creating pod ", name, ": ", created.status().message()));
  }
  if (c.Structured()) {
    c.Print(*created);
    return absl::OkStatus();
  }
  if (c.o.output == Output::kName) {
    c.out << "pod/" << Str(*created, "/metadata/name") << "\n";
    return absl::OkStatus();
  }
  std::string ns = Str(*created, "/metadata/namespace");
  if (ns.empty()) ns = Str(*pod, "/metadata/namespace");
  c.out << "pod/" << Str(*created, "/metadata/name") << " created"
        << (ns.empty() ? "" : " in namespace " + ns) << ": it resumes from checkpoint " << id
        << (node.empty() ? " wherever the scheduler places it" : " on node " + node) << "\n";
  return absl::OkStatus();
}

// ---- version

absl::Status Version(Ctx& c, const std::vector<std::string>& pos) {
  if (!pos.empty()) return Failure(kExitUsage, "version takes no arguments");
  if (c.o.output == Output::kName) {
    return Failure(kExitUsage, "version prints text, json or yaml");
  }
  auto kubectl_version = c.kubectl.ClientVersion();
  if (!kubectl_version.ok()) {
    if (!c.Structured()) c.out << "kubectl cryo " << CRYO_VERSION << "\n";
    return WithContext(kubectl_version.status(), "asking kubectl for its version");
  }
  auto builtin = c.kubectl.HasBuiltin("checkpoint");
  if (c.Structured()) {
    json j = {{"kubectlCryo", {{"version", CRYO_VERSION}}},
              {"kubectl", {{"clientVersion", *kubectl_version}}}};
    if (builtin.ok()) j["kubectl"]["builtinCheckpoint"] = *builtin;
    c.Print(j);
    return absl::OkStatus();
  }
  c.out << "kubectl cryo " << CRYO_VERSION << "\n";
  c.out << "kubectl " << *kubectl_version << " (" << c.kubectl.options().kubectl << ")\n";
  if (builtin.ok()) {
    c.out << (*builtin ? "kubectl checkpoint: kubectl's built-in command, not this plugin: use "
                         "kubectl cryo\n"
                       : "kubectl checkpoint: not built into this kubectl; kubectl-checkpoint, "
                         "where installed, runs this plugin\n");
  }
  return absl::OkStatus();
}

// kubectl never runs a plugin whose name is a built-in command: once kubectl has its own
// "checkpoint" (KEP-5091), "kubectl checkpoint" runs that one. Someone running this binary as
// kubectl-checkpoint is told which name keeps working.
void WarnIfShadowed(Ctx& c) {
  auto builtin = c.kubectl.HasBuiltin("checkpoint");
  if (builtin.ok() && *builtin) {
    c.err << "warning: this kubectl has a built-in \"checkpoint\" command, which \"kubectl "
             "checkpoint\" runs instead of this plugin: use \"kubectl cryo checkpoint POD\" "
             "(and kubectl cryo list, inspect, restore)\n";
  }
}

}  // namespace

int RunCli(const std::vector<std::string>& argv, const std::string& invoked_as, std::ostream& out,
           std::ostream& err) {
  auto usage = [&err](absl::string_view message, const std::string& command) {
    err << "error: " << message << "\nSee 'kubectl cryo" << (command.empty() ? "" : " " + command)
        << " --help'.\n";
    return static_cast<int>(kExitUsage);
  };
  Options o;
  flags::FlagSet fs;
  DeclareCommonFlags(fs, &o);
  DeclareCryoFlags(fs, &o);
  DeclareCommandFlags(fs, "", &o);
  DeclareKubectlFlags(fs, &o);
  auto parsed = fs.Parse(argv, {.allow_unknown = true});
  if (!parsed.ok()) return usage(parsed.status().message(), "");

  // kubectl-cryo takes a command first; kubectl-checkpoint also takes the pod itself.
  std::vector<std::string> pos = parsed->positional;
  std::string command;
  if (!pos.empty() && Commands().count(pos[0])) {
    command = pos[0];
    pos.erase(pos.begin());
  } else if (!pos.empty() && invoked_as == kLegacyPluginName) {
    command = "checkpoint";
  } else if (!pos.empty()) {
    return usage(absl::StrCat("unknown command \"", pos[0],
                              "\" for \"kubectl cryo\" (to checkpoint a pod: kubectl cryo "
                              "checkpoint POD)"),
                 "");
  }
  if (command == "help") {
    out << Help(pos.empty() ? "" : pos[0]);
    return kExitOk;
  }
  if (parsed->help) {
    out << Help(command);
    return kExitOk;
  }
  if (command.empty() && o.version) command = "version";
  if (command.empty()) {
    err << Help("");
    return kExitUsage;
  }
  if (!parsed->unknown.empty()) {
    return usage(absl::StrCat("unknown flag", parsed->unknown.size() == 1 ? " " : "s ",
                              absl::StrJoin(parsed->unknown, ", ")),
                 command);
  }
  for (const auto& [flag, commands] : CommandFlags()) {
    if (fs.Given(flag) && !commands.count(command)) {
      return usage(absl::StrCat("--", flag, " is not a flag of ", command), command);
    }
  }
  if (o.all_namespaces && command != "list") {
    return usage(
        "-A/--all-namespaces goes with list only (checkpoint ids are unique across "
        "namespaces)",
        command);
  }
  if (o.cryo_namespace.empty() || o.prefix.empty()) {
    return usage("--cryo-namespace and --annotation-prefix cannot be empty", command);
  }
  if (!fs.Given("cryo-endpoint")) {
    if (const char* e = std::getenv("CRYO_ENDPOINT"); e != nullptr) o.endpoint = e;
  }
  if (!fs.Given("cryo-node-selector")) {
    if (const char* e = std::getenv("CRYO_NODE_SELECTOR"); e != nullptr) o.node_selector = e;
  }
  auto endpoint = ParseCryodEndpoint(o.endpoint);
  if (!endpoint.ok()) {
    return usage(absl::StrCat(fs.Given("cryo-endpoint") ? "--cryo-endpoint" : "$CRYO_ENDPOINT",
                              ": ", endpoint.status().message()),
                 command);
  }

  KubectlOptions ko;
  if (const char* k = std::getenv("KUBECTL"); k != nullptr && *k != '\0') ko.kubectl = k;
  ko.global_flags = o.kubectl_flags;
  if (o.verbosity > 0) ko.log = &err;
  Ctx c(Kubectl(ko), out, err);
  c.o = o;
  c.ns = o.ns;
  c.endpoint = *endpoint;
  if (invoked_as == kLegacyPluginName) WarnIfShadowed(c);

  absl::Status s = command == "list"      ? List(c, pos)
                   : command == "inspect" ? Inspect(c, pos)
                   : command == "restore" ? Restore(c, pos)
                   : command == "version" ? Version(c, pos)
                                          : Checkpoint(c, pos);
  if (s.ok()) return kExitOk;
  if (ExitCodeOf(s) == kExitUsage) return usage(s.message(), command);
  err << "error: " << s.message() << "\n";
  return ExitCodeOf(s);
}

}  // namespace cryo::kubectl
