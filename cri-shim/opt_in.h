// Which containers cryo manages, decided from the pod's annotations (prefix configurable,
// default "cryo.dev"):
//   <prefix>/checkpoint-on-stop: "true"   checkpoint when kubelet stops the container
//                                         (preemption, eviction, drain)
//   <prefix>/resume: "auto" | "<id>"      resume from the newest checkpoint of the workload
//                                         (or start fresh when there is none), or from <id>
//   <prefix>/workload: "<key>"            workload key override
//   <prefix>/containers: "a,b"            only these containers of the pod (default: all)
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

// From the pod's sandbox config (annotations, labels, metadata) and the container's name.
OptIn DecideOptIn(const std::string& prefix, const StringMap& pod_annotations,
                  const StringMap& pod_labels, const std::string& pod_namespace,
                  const std::string& pod_name, const std::string& container_name);

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

// The default workload key: <namespace>.<job name>.<first 8 of the Job's uid>.<container> for
// a Job's pods (they share the job-name and controller-uid labels: a replacement pod finds its
// predecessor's checkpoints, a re-created Job of the same name does not), else
// <namespace>.<pod name>.<container>. For other controllers whose pod names change, set
// <prefix>/workload.
std::string DefaultWorkloadKey(const StringMap& pod_labels, const std::string& pod_namespace,
                               const std::string& pod_name, const std::string& container_name);

}  // namespace cryo::shim
