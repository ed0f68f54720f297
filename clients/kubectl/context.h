#pragma once

// What kubectl cryo's commands share (one file per command under cmd/, as kubectl lays out its
// own): the parsed options, the context a command runs in (kubectl, output, namespace, where
// cryod is), and finding cryods and their checkpoints through the API server.

#include <map>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "clients/kubectl/jsonpath.h"
#include "clients/kubectl/kubectl.h"
#include "clients/kubectl/objects.h"
#include "lib/contract/annotations.h"
#include "nlohmann/json.hpp"

namespace cryo::kubectl {

using nlohmann::json;

// What -o asks for.
enum class Output { kText, kWide, kJson, kYaml, kName, kJsonPath };

// The command line, parsed.
struct Options {
  // kubectl's global flags, as given, for every kubectl call.
  std::vector<std::string> kubectl_flags;
  int verbosity = 0;
  // kubectl's meaning, the plugin's use.
  std::string ns;
  bool all_namespaces = false;
  Output output = Output::kText;
  std::optional<JsonPath> jsonpath;  // -o jsonpath=TEMPLATE
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
  bool no_headers = false;  // list: the table without its header
  std::string selector;     // list: -l, over the checkpoints' labels
};

// A command's context: kubectl, where its output goes, the options, where cryod is.
struct Ctx {
  Ctx(Kubectl k, std::ostream& o, std::ostream& e) : kubectl(std::move(k)), out(o), err(e) {}

  // -n, else the kubeconfig context's namespace, else "default"; asked once.
  const std::string& Namespace() {
    if (ns.empty()) ns = kubectl.ContextNamespace();
    if (ns.empty()) ns = "default";
    return ns;
  }
  bool Structured() const {
    return o.output == Output::kJson || o.output == Output::kYaml || o.output == Output::kJsonPath;
  }
  // An object as -o json, yaml or jsonpath asks. A jsonpath that finds nothing prints nothing
  // and fails the command (print_status), as kubectl's does.
  void Print(const json& j) {
    if (o.output == Output::kJsonPath && o.jsonpath.has_value()) {
      absl::StatusOr<std::string> s = o.jsonpath->Execute(j);
      if (s.ok()) {
        out << *s;
      } else if (print_status.ok()) {
        print_status = s.status();
      }
      return;
    }
    out << (o.output == Output::kYaml
                ? ToYaml(j)
                : j.dump(2, ' ', false, json::error_handler_t::replace) + "\n");
  }
  absl::Status print_status;

  Kubectl kubectl;
  std::ostream& out;
  std::ostream& err;
  Options o;
  CryodEndpoint endpoint;
  std::string ns;  // the namespace: -n, else resolved by Namespace() on first use
  std::map<std::string, std::string> api_tokens;  // cryod's HTTP API tokens by Secret, read once
};

// The API server's path of a pod.
std::string PodPath(const std::string& ns, const std::string& pod);

// One cryod, and the API server path through which its HTTP API is reached.
struct Cryod {
  std::string node;
  std::string base;          // ".../proxy": cryod's paths follow
  std::string describe;      // for messages
  std::string token_secret;  // the Secret (cryo namespace) with its HTTP API's token, if any
};

// The cryods to ask (only `node`'s when given). kExitNoCryo when there is none.
absl::StatusOr<std::vector<Cryod>> FindCryods(Ctx& c, const std::string& node);
// GET on cryod's HTTP API through the API server's proxy: with the token of the pod's Secret
// (or $CRYO_HTTP_API_TOKEN) as POST /v1/query, since the proxy passes no Authorization header.
absl::StatusOr<json> CryodGet(Ctx& c, const Cryod& d, const std::string& path);
// Why a cryod that was found might not answer ("" when nothing is known).
std::string NoAnswerHint(const Ctx& c, const Cryod& d);
// Errors that mean no other cryod will do better: stop asking.
bool Fatal(const absl::Status& s);
// One checkpoint from the first cryod that has it (only `node`'s when given).
absl::StatusOr<json> FetchCheckpoint(Ctx& c, const std::string& id, const std::string& node);

// The commands, each in cmd/<name>.cc: `pos` are its positional arguments.
absl::Status Checkpoint(Ctx& c, const std::vector<std::string>& pos);
absl::Status List(Ctx& c, const std::vector<std::string>& pos);
absl::Status Inspect(Ctx& c, const std::vector<std::string>& pos);
absl::Status Restore(Ctx& c, const std::vector<std::string>& pos);
absl::Status Version(Ctx& c, const std::vector<std::string>& pos);

}  // namespace cryo::kubectl
