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
#include "clients/kubectl/context.h"
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

absl::Status SetOutput(absl::string_view v, Output* out, std::optional<JsonPath>* jsonpath) {
  static const std::map<std::string, Output, std::less<>> kFormats = {{"text", Output::kText},
                                                                      {"wide", Output::kWide},
                                                                      {"json", Output::kJson},
                                                                      {"yaml", Output::kYaml},
                                                                      {"name", Output::kName}};
  const std::string value = ShortValue(v);
  if (value == "jsonpath" || absl::StartsWith(value, "jsonpath=")) {
    const std::string tpl = value.size() > 9 ? value.substr(9) : "";
    if (tpl.empty()) {
      return absl::InvalidArgumentError(
          "-o/--output: jsonpath needs a template: -o jsonpath='{.items[*].checkpoint_id}'");
    }
    auto p = JsonPath::Parse(tpl);
    if (!p.ok())
      return absl::InvalidArgumentError(absl::StrCat("-o/--output: ", p.status().message()));
    *jsonpath = *std::move(p);
    *out = Output::kJsonPath;
    return absl::OkStatus();
  }
  auto it = kFormats.find(value);
  if (it == kFormats.end()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "-o/--output: '", value, "' is not one of text, wide, json, yaml, name or jsonpath=..."));
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
        "output", [o](absl::string_view v) { return SetOutput(v, &o->output, &o->jsonpath); },
        "text, wide (list: more columns), json, yaml, name or jsonpath=TEMPLATE", "FORMAT", "text")
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
      {"no-headers", {"list"}},
      {"selector", {"list"}},
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
  if (takes("no-headers")) {
    fs.Bool("no-headers", &o->no_headers, "the table without its header line");
  }
  if (takes("selector")) {
    fs.String("selector", &o->selector,
              "only checkpoints whose labels match: k=v, k==v, k!=v, k, !k (comma: all of them)",
              "SELECTOR")
        .Short('l');
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
  kubectl cryo list [-n NS | -A] [--node NODE] [--workload W] [-l SELECTOR] [--no-headers]
                    [-o FORMAT]

Asks every cryod (or NODE's) through the API server. Nodes that share a store report the
same checkpoints once. Only checkpoints of pods in the namespace (-n, else the context's)
are listed; -A lists all, those taken outside Kubernetes too. -l keeps those whose labels
match (cryo.dev/reason=periodic, io.kubernetes.pod.name!=web-0, ...). -o json and -o yaml
print a kubectl List; -o name prints checkpoint/ID per line.
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
  if (s.ok()) s = c.print_status;
  if (s.ok()) return kExitOk;
  if (ExitCodeOf(s) == kExitUsage) return usage(s.message(), command);
  err << "error: " << s.message() << "\n";
  return ExitCodeOf(s);
}

}  // namespace cryo::kubectl
