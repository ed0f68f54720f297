// kubectl cryo restore ID: a checkpoint resumed.

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

namespace cryo::kubectl {

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

}  // namespace cryo::kubectl
