#include "clients/kubectl/context.h"

#include <cstdlib>
#include <cstring>
#include <map>
#include <set>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
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
#include "lib/base/status.h"
#include "lib/contract/annotations.h"
#include "lib/contract/labels.h"

namespace cryo::kubectl {
namespace {

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
                        absl::StrCat("cryo pod ", p.name, " (node ", p.node, ")"), p.token_secret});
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
                 absl::StrCat("cryod on node ", n, " (port ", port, ")"), ""};
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

}  // namespace

std::string PodPath(const std::string& ns, const std::string& pod) {
  return absl::StrCat("/api/v1/namespaces/", UrlEncode(ns), "/pods/", UrlEncode(pod));
}

absl::StatusOr<std::vector<Cryod>> FindCryods(Ctx& c, const std::string& node) {
  return c.endpoint.kind == CryodEndpoint::kNodes ? NodeCryods(c, node) : PodCryods(c, node);
}

namespace {

// The token of cryod's HTTP API kept in Secret `name` of the cryo namespace (key "token").
absl::StatusOr<std::string> ApiToken(Ctx& c, const std::string& name) {
  if (auto it = c.api_tokens.find(name); it != c.api_tokens.end()) return it->second;
  const std::string& cns = c.o.cryo_namespace;
  auto secret = c.kubectl.GetRaw(
      absl::StrCat("/api/v1/namespaces/", UrlEncode(cns), "/secrets/", UrlEncode(name)));
  if (!secret.ok()) {
    return WithContext(secret.status(),
                       absl::StrCat("reading the token of cryod's HTTP API (Secret ", cns, "/",
                                    name, "; the chart's cryo-checkpoint-reader role may get it)"));
  }
  std::string token;
  const json::json_pointer at("/data/token");
  if (!secret->contains(at) || !secret->at(at).is_string() ||
      !absl::Base64Unescape(secret->at(at).get<std::string>(), &token) || token.empty()) {
    return Failure(kExitNoCryo, absl::StrCat("Secret ", cns, "/", name,
                                             " holds no \"token\" for cryod's HTTP API"));
  }
  c.api_tokens[name] = token;
  return token;
}

}  // namespace

absl::StatusOr<json> CryodGet(Ctx& c, const Cryod& d, const std::string& path) {
  std::string token;
  if (!d.token_secret.empty()) {
    CRYO_ASSIGN_OR_RETURN(token, ApiToken(c, d.token_secret));
  } else if (const char* t = std::getenv(contract::k8s::kCryodApiTokenEnv); t != nullptr) {
    token = t;
  }
  // The proxy drops Authorization: the token goes in a query's body.
  auto r = token.empty() ? c.kubectl.GetRaw(d.base + path)
                         : c.kubectl.PostRaw(d.base + "/v1/query",
                                             json{{"token", token}, {"get", path}}.dump());
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

bool Fatal(const absl::Status& s) {
  int code = ExitCodeOf(s);
  return code == kExitApiUnreachable || code == kExitUnauthorized || code == kExitKubectlMissing ||
         code == kExitNoCryo;
}

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

}  // namespace cryo::kubectl
