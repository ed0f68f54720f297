// Which containers cryo manages, decided from the pod's annotations (prefix configurable,
// default "cryo.dev"):
//   <prefix>/checkpoint-on-stop: "true"   checkpoint when kubelet stops the container
//                                         (preemption, eviction, drain)
//   <prefix>/resume: "auto" | "<id>"      resume from the newest checkpoint of the workload
//                                         (or start fresh when there is none), or from <id>
//   <prefix>/workload: "<key>"            workload key override
//   <prefix>/containers: "a,b"            only these containers of the pod (default: all)
//   <prefix>/checkpoint-every: "20m"      periodic checkpoints in the background (opts in too)
// The shim copies its decision onto the container's own annotations at creation, so later
// calls (stop, start, checkpoint) need no pod lookup.
#pragma once

#include <map>
#include <string>

#include "lib/contract/annotations.h"

namespace cryo::shim {

using StringMap = std::map<std::string, std::string>;

struct OptIn {
  bool managed = false;  // cryo-init is injected
  bool checkpoint_on_stop = false;
  std::string resume;    // "", "auto" or a checkpoint id
  std::string workload;  // key grouping the checkpoints of one job across pods
};

// Who the pod is: its sandbox metadata (CreateContainer) or kubelet's labels on its containers.
struct PodIdentity {
  std::string namespace_;
  std::string name;
  std::string uid;
};

// From the pod's sandbox config (annotations, labels, metadata) and the container's name.
OptIn DecideOptIn(const std::string& prefix, const StringMap& pod_annotations,
                  const StringMap& pod_labels, const PodIdentity& pod,
                  const std::string& container_name);

// Container annotations the shim sets on containers it manages.
struct ManagedKeys {
  explicit ManagedKeys(const std::string& prefix)
      : managed(contract::Key(prefix, contract::container::kManaged)),
        checkpoint_on_stop(contract::Key(prefix, contract::container::kCheckpointOnStop)),
        workload(contract::Key(prefix, contract::container::kWorkloadKey)),
        resume_from(contract::Key(prefix, contract::container::kResumeFrom)) {}
  std::string managed;             // "true"
  std::string checkpoint_on_stop;  // "true" when asked
  std::string workload;            // the workload key
  std::string resume_from;         // checkpoint id this container resumes from
};

// The default workload key, by what the pod's labels say of its owner. The key decides which
// checkpoints `resume: auto` finds: the same key resumes, a new key starts fresh.
//   a Job's pod (job-name and controller-uid labels, either spelling)
//       <namespace>.<job name>.<first 8 of the Job's uid>.<container>: the Job's replacement
//       pods resume; a new Job of the same name (a new uid) starts fresh;
//   a StatefulSet's pod (statefulset.kubernetes.io/pod-name)
//       <namespace>.<pod name>.<container>: its replacement has the same name (a stable
//       identity, a new uid) and resumes;
//   any other pod (bare pods, Deployments, ReplicaSets, DaemonSets)
//       <namespace>.<pod name>.<first 8 of the pod's uid>.<container>: the same pod resumes (its
//       container restarted in place), a pod re-created under the same name starts fresh.
// Without the uid it is known by (it names none) the key leaves it out. <prefix>/workload
// overrides all of these.
std::string DefaultWorkloadKey(const StringMap& pod_labels, const PodIdentity& pod,
                               const std::string& container_name);

}  // namespace cryo::shim
