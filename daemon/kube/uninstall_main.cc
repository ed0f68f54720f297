// cryo-uninstall: the chart's pre-delete hook (charts/cryo/templates/uninstall-hook.yaml).
//
//   cryo-uninstall --daemonset NAME [--namespace NS] [--timeout 4m]
//
// Puts every node's kubelet back on the runtime it used before shim.configureKubelet converted
// it, before `helm uninstall` deletes the DaemonSet (daemon/kube/kubelet_restore.h). Runs in a
// pod with a service account allowed to get and patch that DaemonSet and list its pods. Exit 0:
// done (or nothing to do); 1: not done, and why; 2: usage.
#include <cstdio>
#include <iostream>
#include <string>
#include <vector>

#include "absl/strings/ascii.h"
#include "daemon/kube/api_client.h"
#include "daemon/kube/kubelet_restore.h"
#include "lib/base/flags.h"
#include "lib/base/fs.h"

int main(int argc, char** argv) {
  cryo::kube::KubeletRestoreOptions o;
  std::string sa_dir = cryo::kube::kServiceAccountDir;
  cryo::flags::FlagSet flags;
  flags.String("daemonset", &o.daemonset, "the cryo DaemonSet", "NAME")
      .String("namespace", &o.namespace_name,
              "its namespace (default: the pod's own, from the service account)", "NS")
      .Duration("timeout", &o.timeout,
                "how long every node may take to put its kubelet back (inside helm's own 5m)")
      .String("service-account-dir", &sa_dir, "the service account's token, ca.crt, namespace",
              "DIR");
  auto parsed = flags.Parse(std::vector<std::string>(argv + 1, argv + argc));
  if (!parsed.ok() || parsed->help) {
    std::FILE* to = parsed.ok() ? stdout : stderr;
    if (!parsed.ok())
      std::fprintf(to, "cryo-uninstall: %s\n", std::string(parsed.status().message()).c_str());
    std::fprintf(to, "usage: cryo-uninstall --daemonset NAME [--namespace NS] [--timeout D]\n%s",
                 flags.Usage().c_str());
    return parsed.ok() ? 0 : 2;
  }
  if (o.daemonset.empty()) {
    std::fprintf(stderr, "cryo-uninstall: --daemonset is required\n");
    return 2;
  }
  if (o.namespace_name.empty()) {
    auto ns = cryo::fs::ReadFile(sa_dir + "/namespace");
    if (!ns.ok()) {
      std::fprintf(stderr, "cryo-uninstall: no --namespace and %s/namespace unreadable: %s\n",
                   sa_dir.c_str(), std::string(ns.status().message()).c_str());
      return 2;
    }
    o.namespace_name = std::string(absl::StripAsciiWhitespace(*ns));
  }
  auto config = cryo::kube::InClusterConfig(sa_dir);
  if (!config.ok()) {
    std::fprintf(stderr, "cryo-uninstall: %s\n", std::string(config.status().message()).c_str());
    return 1;
  }
  auto api = cryo::kube::ApiClient::Create(*config, absl::Seconds(30));
  if (!api.ok()) {
    std::fprintf(stderr, "cryo-uninstall: %s\n", std::string(api.status().message()).c_str());
    return 1;
  }
  o.log = &std::cout;
  std::cout << std::unitbuf;
  absl::Status s = cryo::kube::RestoreKubeletEndpoints(**api, o);
  if (!s.ok()) {
    std::fprintf(stderr, "cryo-uninstall: %s\n", std::string(s.message()).c_str());
    return 1;
  }
  return 0;
}
