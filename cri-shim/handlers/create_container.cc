// CreateContainer: where opted-in containers get cryo-init. For a pod that opted in (see
// opt_in.h), cryo-init is bind-mounted read-only and becomes the entrypoint with the
// container's original command behind it; a container that is to resume also gets the
// checkpoint id in its environment, which makes cryo-init wait for the restore instead of
// starting the command. The shim's decisions go on the container's annotations. Other pods
// are forwarded unchanged.
//
// A container whose image is a checkpoint image (Kubernetes' restore-from-image flow, see
// lib/contract/checkpoint_image.h) is created from the image the checkpoint was taken in, under
// cryo-init waiting for a restore from that checkpoint, which cryod has first imported from the
// image into its store and verified; this needs no annotation and no shared store.
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <optional>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/mutex.h"
#include "cri-shim/handlers/common.h"
#include "cri-shim/handlers/handlers.h"
#include "cri-shim/metrics.h"
#include "cri-shim/opt_in.h"
#include "lib/base/log.h"
#include "lib/contract/checkpoint_every.h"
#include "lib/contract/checkpoint_image.h"
#include "lib/contract/criu_annotations.h"
#include "lib/contract/cryo_init_protocol.h"
#include "lib/contract/job.h"
#include "lib/contract/labels.h"
#include "lib/cri/verbose_info.h"
#include "nlohmann/json.hpp"

namespace cryo::shim {
namespace {

namespace cri = ::runtime::v1;

void AddEnv(cri::ContainerConfig* config, const std::string& key, const std::string& value) {
  cri::KeyValue* env = config->add_envs();
  env->set_key(key);
  env->set_value(value);
}

std::vector<std::string> JsonStrings(const nlohmann::json& j) {
  std::vector<std::string> out;
  if (!j.is_array()) return out;
  for (const auto& v : j) {
    if (v.is_string()) out.push_back(v.get<std::string>());
  }
  return out;
}

// What the container would run without the shim: the runtime's rule (command overrides the
// image's entrypoint, args its cmd), with the image's config from the runtime.
absl::StatusOr<std::vector<std::string>> EffectiveArgv(CallContext& ctx,
                                                       const cri::ContainerConfig& config) {
  std::vector<std::string> command(config.command().begin(), config.command().end());
  std::vector<std::string> args(config.args().begin(), config.args().end());
  if (command.empty()) {
    cri::ImageStatusRequest req;
    *req.mutable_image() = config.image();
    req.set_verbose(true);
    cri::ImageStatusResponse resp;
    auto rctx = ctx.NewRuntimeContext();
    grpc::Status s = ctx.runtime().images().ImageStatus(rctx.get(), req, &resp);
    if (!s.ok()) return FromGrpc(s);
    nlohmann::json info;
    if (auto it = resp.info().find("info"); it != resp.info().end()) {
      auto parsed = json::Parse(it->second, kCriVerboseInfoLimits);
      if (parsed.ok()) info = std::move(*parsed);
    }
    nlohmann::json image_config;
    if (info.is_object() && info.contains("imageSpec") && info["imageSpec"].is_object()) {
      image_config = info["imageSpec"].value("config", nlohmann::json::object());
    }
    if (!image_config.is_object()) {
      return absl::FailedPreconditionError(absl::StrCat(
          "cannot tell what container ", config.metadata().name(),
          " runs: no command in its spec and the runtime did not report the config of image ",
          config.image().image()));
    }
    command = JsonStrings(image_config.value("Entrypoint", nlohmann::json()));
    if (args.empty()) args = JsonStrings(image_config.value("Cmd", nlohmann::json()));
  }
  command.insert(command.end(), args.begin(), args.end());
  if (command.empty()) {
    return absl::FailedPreconditionError(absl::StrCat("container ", config.metadata().name(),
                                                      " has no command: neither its spec "
                                                      "nor image ",
                                                      config.image().image(), " names one"));
  }
  return command;
}

// Whether an image is a checkpoint image, remembered by image id: asked for every container
// the node creates, so most answers come from here.
class CheckpointImageCache {
 public:
  std::optional<std::optional<std::string>> Get(const std::string& id) {
    absl::MutexLock l(&mu_);
    auto it = known_.find(id);
    if (it == known_.end()) return std::nullopt;
    return it->second;
  }
  void Put(const std::string& id, std::optional<std::string> name) {
    absl::MutexLock l(&mu_);
    if (known_.size() > 4096) known_.clear();  // image ids come and go: bound the memory
    known_[id] = std::move(name);
  }

 private:
  absl::Mutex mu_;
  absl::flat_hash_map<std::string, std::optional<std::string>> known_ ABSL_GUARDED_BY(mu_);
};

class CreateContainerHandler final
    : public UnaryOwnedMethod<cri::CreateContainerRequest, cri::CreateContainerResponse> {
 public:
  explicit CreateContainerHandler(const HandlerDeps& deps)
      : UnaryOwnedMethod("/runtime.v1.RuntimeService/CreateContainer"), deps_(deps) {}

 protected:
  Result HandleRequest(CallContext& ctx, const Request& request) override {
    if (!request.has_config() || !request.has_sandbox_config()) return ForwardUnchanged{};
    const cri::PodSandboxConfig& pod = request.sandbox_config();
    const std::string pod_name =
        absl::StrCat(pod.metadata().namespace_(), "/", pod.metadata().name());
    OptIn opt =
        DecideOptIn(deps_.annotation_prefix, {pod.annotations().begin(), pod.annotations().end()},
                    {pod.labels().begin(), pod.labels().end()},
                    {pod.metadata().namespace_(), pod.metadata().name(), pod.metadata().uid()},
                    request.config().metadata().name());
    if (std::optional<std::string> image = CheckpointImageOf(ctx, request.config().image())) {
      return CreateFromCheckpointImage(ctx, request, pod_name, std::move(opt), *image);
    }
    if (!opt.managed) return ForwardUnchanged{};

    std::string resume_from;
    if (opt.resume == "auto") {
      // A job's member resumes its own part of the job's newest committed job checkpoint, and
      // nothing else: its members resume one cut or none (a bad job fails the creation below).
      auto job = contract::JobOf(deps_.annotation_prefix,
                                 {pod.annotations().begin(), pod.annotations().end()},
                                 {pod.labels().begin(), pod.labels().end()}, pod.metadata().name());
      const contract::JobMembership* member = job.ok() && job->has_value() ? &**job : nullptr;
      // As cryod lists a part's job: "<namespace>/<job>".
      const std::string job_key =
          member == nullptr ? "" : absl::StrCat(pod.metadata().namespace_(), "/", member->name);
      auto list = deps_.cryod->List(opt.workload);
      if (!list.ok()) {
        // Starting fresh would throw away the job's progress: let kubelet retry instead.
        return absl::UnavailableError(absl::StrCat(
            "pod ", pod_name, " resumes automatically, but the checkpoints of workload ",
            opt.workload, " cannot be listed: ", list.status().message()));
      }
      for (const auto& ck : *list) {
        if (ck.kind() != "container") continue;
        // A member's part is its own (members of one Job share its workload key); a pod that is
        // no member resumes no part of a job.
        if (member == nullptr ? !ck.job().empty()
                              : ck.job() != job_key || ck.job_member() != member->member) {
          continue;
        }
        if (!ck.job_uncommitted().empty()) {
          // A job checkpoint's part restores only with its job checkpoint, once committed.
          CRYO_LOG(Warning) << "pod " << pod_name << ": skipping checkpoint " << ck.checkpoint_id()
                            << " (" << ck.job_uncommitted() << ")";
          continue;
        }
        if (!ck.damaged().empty()) {
          // The other members resume this cut: an older part of this one would not match them.
          if (member != nullptr) {
            return absl::FailedPreconditionError(
                absl::StrCat("pod ", pod_name, " (member ", member->member, " of job ",
                             member->name, "): its part ", ck.checkpoint_id(),
                             " of the job's newest job checkpoint is "
                             "damaged (",
                             ck.damaged(), "); the members resume one cut or none"));
          }
          // A restore found it damaged: an older one loses less than starting over.
          CRYO_LOG(Warning) << "pod " << pod_name << ": skipping damaged checkpoint "
                            << ck.checkpoint_id() << " (" << ck.damaged() << ")";
          continue;
        }
        resume_from = ck.checkpoint_id();
        break;
      }
    } else if (!opt.resume.empty()) {
      auto got = deps_.cryod->Get(opt.resume);
      if (!got.ok()) {
        if (absl::IsNotFound(got.status())) {
          return absl::FailedPreconditionError(absl::StrCat(
              "pod ", pod_name, ": annotation ", deps_.annotation_prefix,
              "/resume names checkpoint '", opt.resume, "', which is not in the checkpoint store"));
        }
        return absl::Status(got.status().code(),
                            absl::StrCat("pod ", pod_name, ": checkpoint '", opt.resume,
                                         "': ", got.status().message()));
      }
      if (got->kind() != "container") {
        return absl::FailedPreconditionError(absl::StrCat("pod ", pod_name, ": checkpoint '",
                                                          opt.resume, "' is of a ", got->kind(),
                                                          ", not of a container"));
      }
      // A checkpoint holds its pod's memory: another namespace's is not this pod's to resume
      // (cryod refuses the restore too, by the runtime's labels).
      if (auto ns = got->labels().find(contract::k8s::kPodNamespace);
          ns != got->labels().end() && ns->second != pod.metadata().namespace_()) {
        return absl::PermissionDeniedError(
            absl::StrCat("pod ", pod_name, ": checkpoint '", opt.resume, "' belongs to namespace ",
                         ns->second, "; a pod resumes only checkpoints of its own namespace"));
      }
      resume_from = opt.resume;
    }
    return CreateUnderInit(ctx, request, pod_name, opt, resume_from, request);
  }

 private:
  // The name containerd knows checkpoint image `spec` by, or nullopt when it is none (or the
  // runtime cannot say: CRI-O, an image it does not have; the runtime then answers as usual).
  std::optional<std::string> CheckpointImageOf(CallContext& ctx, const cri::ImageSpec& spec) {
    if (!deps_.images || spec.image().empty()) return std::nullopt;
    cri::ImageStatusRequest req;
    *req.mutable_image() = spec;
    cri::ImageStatusResponse resp;
    auto rctx = ctx.NewRuntimeContext();
    if (!ctx.runtime().images().ImageStatus(rctx.get(), req, &resp).ok() || !resp.has_image() ||
        resp.image().id().empty()) {
      return std::nullopt;
    }
    const cri::Image& img = resp.image();
    if (auto known = cache_.Get(img.id())) return *known;
    std::vector<std::string> names(img.repo_tags().begin(), img.repo_tags().end());
    names.insert(names.end(), img.repo_digests().begin(), img.repo_digests().end());
    names.push_back(spec.image());
    names.push_back(img.id());
    auto m = deps_.images->Manifest(names, absl::Now() + absl::Seconds(10));
    if (!m.ok()) {
      if (absl::IsUnimplemented(m.status())) {
        // Not containerd: checkpoint images cannot be read here; say so once.
        if (!warned_unimplemented_.exchange(true)) {
          CRYO_LOG(Warning) << "the runtime does not serve containerd's image API: checkpoint "
                               "images are not recognised ("
                            << m.status().message() << ")";
        }
        cache_.Put(img.id(), std::nullopt);
      } else if (!absl::IsNotFound(m.status())) {
        CRYO_LOG(Warning) << "reading image " << spec.image() << ": " << m.status();
      }
      return std::nullopt;
    }
    std::optional<std::string> out;
    if (!contract::checkpoint_image::Find(contract::checkpoint_image::kNameKeys, m->annotations,
                                          m->config_labels)
             .empty()) {
      out = m->name;
    }
    cache_.Put(img.id(), out);
    return out;
  }

  Result CreateFromCheckpointImage(CallContext& ctx, const Request& request,
                                   const std::string& pod_name, OptIn opt,
                                   const std::string& image) {
    const std::string what =
        absl::StrCat("pod ", pod_name, ": container ", request.config().metadata().name(),
                     "'s image ", image, " is a checkpoint image");
    // Reading and verifying the image may take a while for a large job; kubelet retries the
    // creation if its own deadline passes first, and the import is idempotent.
    auto imported =
        deps_.cryod->ImportCheckpointImage(image, absl::Now() + TimeLeft(ctx, absl::Minutes(30)));
    if (deps_.metrics) {
      deps_.metrics->ContainerOperation("import_image", imported.ok() ? "ok" : "failed")
          .Increment();
    }
    if (!imported.ok()) {
      CRYO_LOG(Warning) << what << ", but it cannot be restored: " << imported.status();
      return absl::Status(
          imported.status().code(),
          absl::StrCat(what, ", but it cannot be restored: ", imported.status().message()));
    }
    const std::string& original = imported->container_image();
    const std::string& id = imported->checkpoint().checkpoint_id();
    if (original.empty()) {
      return absl::FailedPreconditionError(absl::StrCat(what, " that names no image to run it in"));
    }
    // The checkpoint's image must be here: pulled now if it is not (kubelet pulled only the
    // checkpoint image). Without credentials: a private image must be on the node already.
    cri::ImageStatusRequest sreq;
    sreq.mutable_image()->set_image(original);
    cri::ImageStatusResponse sresp;
    {
      auto rctx = ctx.NewRuntimeContext();
      grpc::Status s = ctx.runtime().images().ImageStatus(rctx.get(), sreq, &sresp);
      if (!s.ok()) return FromGrpc(s);
    }
    if (!sresp.has_image()) {
      cri::PullImageRequest preq;
      preq.mutable_image()->set_image(original);
      *preq.mutable_sandbox_config() = request.sandbox_config();
      cri::PullImageResponse presp;
      auto rctx = ctx.NewRuntimeContext();
      grpc::Status s = ctx.runtime().images().PullImage(rctx.get(), preq, &presp);
      if (!s.ok()) {
        return absl::FailedPreconditionError(absl::StrCat(
            what, " of a container of image ", original,
            ", which is not on this node and could not be pulled: ", s.error_message()));
      }
      auto rctx2 = ctx.NewRuntimeContext();
      if (grpc::Status s2 = ctx.runtime().images().ImageStatus(rctx2.get(), sreq, &sresp);
          !s2.ok()) {
        return FromGrpc(s2);
      }
    }
    // A tag may point elsewhere on this node: refuse now, not at the restore.
    const std::string& want = imported->container_image_ref();
    if (!want.empty() && sresp.has_image() && want != sresp.image().id() &&
        std::find(sresp.image().repo_digests().begin(), sresp.image().repo_digests().end(), want) ==
            sresp.image().repo_digests().end()) {
      return absl::FailedPreconditionError(absl::StrCat(what, " taken in image ", original, " (",
                                                        want, "), but ", original, " is ",
                                                        sresp.image().id(),
                                                        " on this node: a job resumes only on the "
                                                        "image it ran on"));
    }
    if (!opt.managed) {
      opt.managed = true;
      const cri::PodSandboxConfig& pod = request.sandbox_config();
      opt.workload = DefaultWorkloadKey(
          {pod.labels().begin(), pod.labels().end()},
          {pod.metadata().namespace_(), pod.metadata().name(), pod.metadata().uid()},
          request.config().metadata().name());
    }
    Request changed = request;
    changed.mutable_config()->mutable_image()->Clear();
    changed.mutable_config()->mutable_image()->set_image(original);
    (*changed.mutable_config()->mutable_annotations())[contract::Key(
        deps_.annotation_prefix, contract::container::kCheckpointImage)] = image;
    CRYO_LOG(Info) << what << " (checkpoint " << id << ", "
                   << (imported->imported_now() ? "imported now" : "imported before")
                   << "): creating it from " << original;
    return CreateUnderInit(ctx, request, pod_name, opt, id, changed);
  }

  // The pod's cryo annotations onto the container under cryo-init (with the environment and
  // mounts they ask for), each checked: a bad value fails the creation, not a preemption later.
  absl::Status CarryPodAnnotations(const Request& request, const std::string& pod_name,
                                   const std::map<std::string, std::string>& pod_annotations,
                                   cri::ContainerConfig* config) {
    const cri::PodSandboxConfig& pod = request.sandbox_config();
    auto& ann = *config->mutable_annotations();
    // A stop after a checkpoint ends the container with its own exit code, which a Job's
    // podFailurePolicy can ignore; and with a termination message saying why.
    int exit_code = deps_.checkpointed_exit_code;
    if (auto it = pod_annotations.find(
            contract::Key(deps_.annotation_prefix, contract::pod::kCheckpointedExitCode));
        it != pod_annotations.end()) {
      if (!absl::SimpleAtoi(it->second, &exit_code) || exit_code < 1 ||
          exit_code > CRYO_INIT_CHECKPOINTED_EXIT_MAX) {
        return absl::InvalidArgumentError(absl::StrCat("pod ", pod_name, ": annotation ", it->first,
                                                       ": '", it->second,
                                                       "' is not an exit code from 1 to 124"));
      }
    }
    AddEnv(config, CRYO_INIT_CHECKPOINTED_EXIT_ENV, absl::StrCat(exit_code));
    if (auto it = request.config().annotations().find(contract::k8s::kTerminationMessagePath);
        it != request.config().annotations().end() && !it->second.empty()) {
      AddEnv(config, CRYO_INIT_TERMINATION_LOG_ENV, it->second);
    }
    if (auto it = pod_annotations.find(
            contract::Key(deps_.annotation_prefix, contract::pod::kCheckpointMinGrace));
        it != pod_annotations.end()) {
      int s = 0;
      if (!absl::SimpleAtoi(it->second, &s) || s < 0) {
        return absl::InvalidArgumentError(absl::StrCat("pod ", pod_name, ": annotation ", it->first,
                                                       ": '", it->second,
                                                       "' is not a number of seconds"));
      }
      ann[contract::Key(deps_.annotation_prefix, contract::container::kCheckpointMinGrace)] =
          absl::StrCat(s);
    }
    if (auto it = pod_annotations.find(
            contract::Key(deps_.annotation_prefix, contract::pod::kCheckpointEvery));
        it != pod_annotations.end()) {
      auto every = contract::ParseCheckpointEvery(it->second);
      if (!every.ok()) {
        return absl::InvalidArgumentError(absl::StrCat("pod ", pod_name, ": annotation ", it->first,
                                                       ": ", every.status().message()));
      }
      ann[contract::Key(deps_.annotation_prefix, contract::container::kCheckpointEvery)] =
          absl::StrCat(absl::ToInt64Seconds(*every));
    }
    // The job the pod is a member of (issue 37): checked now, so that a bad size fails the
    // creation rather than the job's first checkpoint.
    auto job = contract::JobOf(deps_.annotation_prefix, pod_annotations,
                               {pod.labels().begin(), pod.labels().end()}, pod.metadata().name());
    if (!job.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("pod ", pod_name, ": ", job.status().message()));
    }
    if (job->has_value()) {
      const contract::JobMembership& j = **job;
      ann[contract::Key(deps_.annotation_prefix, contract::container::kJob)] = j.name;
      ann[contract::Key(deps_.annotation_prefix, contract::container::kJobMember)] = j.member;
      ann[contract::Key(deps_.annotation_prefix, contract::container::kJobSource)] =
          contract::JobSourceName(j.source);
      if (j.size > 0) {
        ann[contract::Key(deps_.annotation_prefix, contract::container::kJobSize)] =
            absl::StrCat(j.size);
      }
    }
    for (const std::string& key : contract::CriuAnnotationKeys()) {
      auto it = pod_annotations.find(contract::Key(deps_.annotation_prefix, key));
      if (it != pod_annotations.end()) ann[it->first] = it->second;
    }
    if (auto it = pod_annotations.find(
            contract::Key(deps_.annotation_prefix, contract::pod::kGpuFastPath));
        it != pod_annotations.end()) {
      if (it->second != "true" && it->second != "false") {
        return absl::InvalidArgumentError(absl::StrCat("pod ", pod_name, ": annotation ", it->first,
                                                       ": '", it->second,
                                                       "' is neither \"true\" nor \"false\""));
      }
      if (it->second == "true") {
        if (::access(deps_.fastpath_library.c_str(), R_OK) != 0) {
          // The job runs as before; its GPU memory goes the driver's way.
          CRYO_LOG(Warning) << "pod " << pod_name << " asks for the GPU fast path but "
                            << deps_.fastpath_library << " is not on this node";
        } else {
          cri::Mount* lib = config->add_mounts();
          lib->set_container_path(CRYO_INIT_FASTPATH_CONTAINER_PATH);
          lib->set_host_path(deps_.fastpath_library);
          lib->set_readonly(true);
          AddEnv(config, CRYO_INIT_PRELOAD_ENV, CRYO_INIT_FASTPATH_CONTAINER_PATH);
          ann[contract::Key(deps_.annotation_prefix, contract::container::kGpuFastPath)] = "true";
        }
      }
    }
    return absl::OkStatus();
  }

  // Creates `base` (the request, or the request with its image replaced) under cryo-init.
  Result CreateUnderInit(CallContext& ctx, const Request& request, const std::string& pod_name,
                         const OptIn& opt, const std::string& resume_from, const Request& base) {
    const cri::PodSandboxConfig& pod = request.sandbox_config();
    // The pod's CRIU options are checked now: a bad value fails the creation, not a
    // preemption later.
    const std::map<std::string, std::string> pod_annotations(pod.annotations().begin(),
                                                             pod.annotations().end());
    if (auto criu = contract::ParseCriuAnnotations(pod_annotations, deps_.annotation_prefix);
        !criu.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("pod ", pod_name, ": ", criu.status().message()));
    }
    auto argv = EffectiveArgv(ctx, base.config());
    if (!argv.ok()) return argv.status();
    cri::CreateContainerRequest changed = base;
    cri::ContainerConfig* config = changed.mutable_config();
    config->clear_command();
    config->clear_args();
    config->add_command(CRYO_INIT_CONTAINER_PATH);
    config->add_command("--");
    for (const auto& a : *argv) config->add_command(a);
    cri::Mount* m = config->add_mounts();
    m->set_container_path(CRYO_INIT_CONTAINER_PATH);
    m->set_host_path(deps_.init_path);
    m->set_readonly(true);
    ManagedKeys keys(deps_.annotation_prefix);
    auto& ann = *config->mutable_annotations();
    ann[keys.managed] = "true";
    ann[keys.workload] = opt.workload;
    if (opt.checkpoint_on_stop) ann[keys.checkpoint_on_stop] = "true";
    if (absl::Status carried = CarryPodAnnotations(request, pod_name, pod_annotations, config);
        !carried.ok()) {
      return carried;
    }
    if (!resume_from.empty()) {
      ann[keys.resume_from] = resume_from;
      AddEnv(config, CRYO_INIT_RESTORE_ENV, resume_from);
    }

    cri::CreateContainerResponse resp;
    auto rctx = ctx.NewRuntimeContext();
    grpc::Status s = ctx.runtime().runtime().CreateContainer(rctx.get(), changed, &resp);
    if (!s.ok()) return FromGrpc(s);
    CRYO_LOG(Info) << "created " << request.config().metadata().name() << " of pod " << pod_name
                   << " under cryo-init (workload " << opt.workload
                   << (opt.checkpoint_on_stop ? ", checkpoint on stop" : "")
                   << (resume_from.empty() ? (opt.resume == "auto" ? ", nothing to resume yet" : "")
                                           : absl::StrCat(", resumes from ", resume_from))
                   << ")";
    return resp;
  }

 private:
  HandlerDeps deps_;
  CheckpointImageCache cache_;
  std::atomic<bool> warned_unimplemented_{false};
};

}  // namespace

std::unique_ptr<OwnedMethod> NewCreateContainerHandler(const HandlerDeps& deps) {
  return std::make_unique<CreateContainerHandler>(deps);
}

}  // namespace cryo::shim
