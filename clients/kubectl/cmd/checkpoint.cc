// kubectl cryo checkpoint POD: a pod's container checkpointed through kubelet.

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

// ---- checkpoint POD

// kubelet's checkpoint API on `node` (through the API server's node proxy): its answer, or the
// failure as the plugin's exit codes say it.
absl::StatusOr<json> AskKubelet(Ctx& c, const std::string& node, const std::string& ns,
                                const std::string& pod_name, const std::string& container,
                                const std::string& what) {
  std::string path =
      absl::StrCat("/api/v1/nodes/", UrlEncode(node), "/proxy/checkpoint/", UrlEncode(ns), "/",
                   UrlEncode(pod_name), "/", UrlEncode(container));
  if (c.o.timeout_s > 0) absl::StrAppend(&path, "?timeout=", c.o.timeout_s);
  auto r = c.kubectl.PostRaw(path, "");
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
  return r;
}

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

  const std::string what = absl::StrCat(ref, "/", *container);
  auto r = AskKubelet(c, node, ns, pod_name, *container, what);
  if (!r.ok()) return r.status();
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

}  // namespace cryo::kubectl
