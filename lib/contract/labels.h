#pragma once

// Kubernetes' own label and annotation names that cryo reads: kubelet's labels on every CRI
// container, and the Job controller's labels on its pods.

namespace cryo::contract::k8s {

// Set by kubelet on every container it creates through CRI.
inline constexpr char kPodNamespace[] = "io.kubernetes.pod.namespace";
inline constexpr char kPodName[] = "io.kubernetes.pod.name";
inline constexpr char kPodUid[] = "io.kubernetes.pod.uid";
inline constexpr char kContainerName[] = "io.kubernetes.container.name";
// The four above, in the order cryo copies them onto a checkpoint's labels.
inline constexpr const char* kContainerIdentity[] = {kPodNamespace, kPodName, kPodUid,
                                                     kContainerName};

// Set by kubelet on every container whose pod has one: the pod's terminationGracePeriodSeconds.
inline constexpr char kPodTerminationGracePeriod[] = "io.kubernetes.pod.terminationGracePeriod";

// Set by kubelet on every container: the path of its termination message in the container.
inline constexpr char kTerminationMessagePath[] = "io.kubernetes.container.terminationMessagePath";

// Set by the Job controller on its pods (the second is the older, unprefixed name).
inline constexpr char kJobName[] = "batch.kubernetes.io/job-name";
inline constexpr char kJobNameLegacy[] = "job-name";
inline constexpr char kControllerUid[] = "batch.kubernetes.io/controller-uid";
inline constexpr char kControllerUidLegacy[] = "controller-uid";

// Set by the StatefulSet controller on its pods: the pod's stable name.
inline constexpr char kStatefulSetPodName[] = "statefulset.kubernetes.io/pod-name";

// How the chart labels cryod's pods.
inline constexpr char kCryoPodSelector[] = "app.kubernetes.io/name=cryo";
// The chart's annotation on cryod's pods: the Secret (in their namespace) whose "token" cryod's
// HTTP checkpoint API asks for (cryod's http_api_token_file).
inline constexpr char kCryodApiTokenSecret[] = "cryo.dev/http-api-token-secret";
// Where kubectl cryo takes that token from when no pod names a Secret (cryod as a host service).
inline constexpr char kCryodApiTokenEnv[] = "CRYO_HTTP_API_TOKEN";

}  // namespace cryo::contract::k8s
