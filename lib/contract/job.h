#pragma once

// Which pods form one job (issue 37): the members that are checkpointed at one cut and resumed
// together. Read from the pod's annotations and labels, first match wins:
//   <prefix>/job: NAME, <prefix>/job-size: "N"     the pod says so itself (N members);
//   jobset.sigs.k8s.io/jobset-name                 a JobSet's pod;
//   training.kubeflow.org/job-name                 a Kubeflow PyTorchJob's (training operator) pod;
//   batch.kubernetes.io/job-name with a completion index
//                                                  an indexed Job's pod.
// Owners' pods do not carry the job's size: cryod reads it from the owner (size 0 here). A
// plain Job without completion indexes is not a job of several members (its pods are
// interchangeable, nothing says which one a replacement stands for).
//
// A member is named so that its replacement pod has the same name: <prefix>/job-member when
// set; else the owner's index (JobSet: "<job-global-index>-<completion index>", PyTorchJob:
// "<replica-type>-<replica-index>", indexed Job: "<completion index>"); else a StatefulSet pod's
// name; else the pod's name.

#include <map>
#include <optional>
#include <string>

#include "absl/status/statusor.h"

namespace cryo::contract {

using StringMap = std::map<std::string, std::string>;

// Members of one job, at most (a bound on what a job checkpoint's record lists).
inline constexpr int kMaxJobMembers = 4096;

namespace pod {
inline constexpr char kJob[] = "job";               // the job's name (in the pod's namespace)
inline constexpr char kJobSize[] = "job-size";      // "N": how many pods the job has
inline constexpr char kJobMember[] = "job-member";  // this pod's member name (optional)
}  // namespace pod

// Copied by the shim onto the containers of a member's pod (the pod annotations' names, and
// "job-source": where the membership came from, JobSourceName).
namespace container {
inline constexpr char kJob[] = "job";
inline constexpr char kJobSize[] = "job-size";  // absent: the owner says
inline constexpr char kJobMember[] = "job-member";
inline constexpr char kJobSource[] = "job-source";
}  // namespace container

namespace k8s {
inline constexpr char kJobSetName[] = "jobset.sigs.k8s.io/jobset-name";
inline constexpr char kJobSetGlobalIndex[] = "jobset.sigs.k8s.io/job-global-index";
inline constexpr char kKubeflowJobName[] = "training.kubeflow.org/job-name";
inline constexpr char kKubeflowReplicaType[] = "training.kubeflow.org/replica-type";
inline constexpr char kKubeflowReplicaIndex[] = "training.kubeflow.org/replica-index";
// The Job controller's completion index: an annotation on every indexed Job's pod, and a label
// too since Kubernetes 1.28.
inline constexpr char kJobCompletionIndex[] = "batch.kubernetes.io/job-completion-index";
}  // namespace k8s

enum class JobSource { kAnnotation, kJobSet, kPyTorchJob, kIndexedJob };
const char* JobSourceName(JobSource s);

struct JobMembership {
  std::string name;  // the job's name, unique in its namespace for its source
  JobSource source = JobSource::kAnnotation;
  int size = 0;        // members; 0: the owner says (cryod asks the Kubernetes API)
  std::string member;  // this pod's member name, the same for its replacement
};

// nullopt: the pod is no member of a job. INVALID_ARGUMENT naming the annotation for a job
// without a usable size (missing, not a number, below 1 or above kMaxJobMembers) or a name or
// member that is not a Kubernetes name (lower-case letters, digits, '-' and '.', at most 253).
absl::StatusOr<std::optional<JobMembership>> JobOf(const std::string& prefix,
                                                   const StringMap& pod_annotations,
                                                   const StringMap& pod_labels,
                                                   const std::string& pod_name);

// A name as Kubernetes allows for objects (DNS subdomain): what a job or member name must be
// to go into the store's paths.
bool IsKubernetesName(const std::string& s);

}  // namespace cryo::contract
