// Engine::ImportImage: a checkpoint image becomes a checkpoint of the store (kept apart from the
// checkpoint and restore transactions: it stages and publishes like a checkpoint, but runs no
// job step, so a failure only aborts its stage).

#include "absl/cleanup/cleanup.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "daemon/container/checkpoint_image.h"
#include "daemon/engine/engine.h"
#include "lib/base/log.h"
#include "lib/base/status.h"
#include "lib/contract/annotations.h"
#include "lib/contract/checkpoint_image.h"

namespace cryo::engine {
namespace {

// Ids are path components of at most 128 bytes; 32 hex digits of the manifest digest keep
// distinct images apart.
std::string IdOfImage(const containerd::ImageManifest& im) {
  absl::string_view d = im.manifest.digest;
  absl::ConsumePrefix(&d, "sha256:");
  return absl::StrCat("image-", d.substr(0, 32));
}

ImportedImage Result(store::Manifest m, const std::string& rootfs_image, bool now) {
  ImportedImage r;
  if (m.container) {
    r.container_image = m.container->image;
    r.container_image_ref = m.container->image_ref;
  }
  if (r.container_image.empty()) r.container_image = rootfs_image;
  r.manifest = std::move(m);
  r.imported_now = now;
  return r;
}

}  // namespace

absl::StatusOr<ImportedImage> Engine::ImportImage(const std::string& image, absl::Time deadline) {
  if (d_.images == nullptr) {
    return absl::FailedPreconditionError(
        "this cryod reads no checkpoint images: it has no containerd runtime (runtime_endpoint)");
  }
  if (image.empty()) return absl::InvalidArgumentError("no image named");
  CRYO_ASSIGN_OR_RETURN(containerd::ImageManifest im, d_.images->Manifest({image}, deadline));
  const std::string container_name = contract::checkpoint_image::Find(
      contract::checkpoint_image::kNameKeys, im.annotations, im.config_labels);
  if (container_name.empty()) {
    return absl::FailedPreconditionError(
        absl::StrCat("image ", im.name, " is not a checkpoint image (no ",
                     contract::checkpoint_image::kNameKeys[0], " annotation or label)"));
  }
  const std::string id = IdOfImage(im);
  if (auto got = d_.store->Get(id); got.ok()) {
    return Result(*std::move(got), "", /*now=*/false);
  }
  CRYO_ASSIGN_OR_RETURN(auto staged, d_.store->Stage(id));
  // On failure: a stage that could not go is collected later, never listed.
  auto abort = absl::MakeCleanup([&] { (void)staged->Abort(); });
  // Bounded before anything is written: by the store's free space (less what a checkpoint of
  // this node may need next), in files and depth, and by the caller's deadline.
  container::ImportLimits limits;
  CRYO_ASSIGN_OR_RETURN(uint64_t free_bytes, d_.store->FreeBytes());
  constexpr uint64_t kReserve = 256ull << 20;
  const uint64_t held = SpaceHeldByCheckpoints();
  limits.max_bytes = free_bytes > kReserve + held ? free_bytes - kReserve - held : 0;
  // Imports at once, and checkpoints beside them, share the free space: each import asks it
  // again as it writes, leaving the reserve and what the running checkpoints expect to write.
  limits.room = [this, kReserve](uint64_t written) -> absl::Status {
    CRYO_ASSIGN_OR_RETURN(uint64_t now_free, d_.store->FreeBytes());
    const uint64_t keep = kReserve + SpaceHeldByCheckpoints();
    if (now_free >= keep) return absl::OkStatus();
    return absl::ResourceExhaustedError(
        absl::StrCat("the store has ", now_free, " bytes free after the image's first ", written,
                     " bytes, and keeps ", keep,
                     " free for the checkpoints running on this node (and a reserve); nothing was "
                     "published"));
  };
  limits.stop = [this, deadline] { return absl::Now() > deadline || stopping_.load(); };
  CRYO_ASSIGN_OR_RETURN(container::UnpackedImage u,
                        container::UnpackCheckpointImage(*d_.images, im, staged->staging_dir(),
                                                         deadline, cfg_.verify_threads, limits));
  store::Manifest m = std::move(u.manifest);
  const std::string original = m.id;
  m.id = id;
  m.labels[contract::Key(cfg_.annotation_prefix, contract::label::kSourceImage)] = im.name;
  m.labels[contract::Key(cfg_.annotation_prefix, contract::label::kSourceCheckpoint)] = original;
  absl::Status st = staged->Publish(m);
  if (absl::IsAlreadyExists(st)) {
    // A concurrent import of the same image won; it verified the same files.
    CRYO_ASSIGN_OR_RETURN(store::Manifest got, d_.store->Get(id));
    return Result(std::move(got), u.rootfs_image, /*now=*/false);
  }
  CRYO_RETURN_IF_ERROR(Annotate(st, absl::StrCat("publishing checkpoint image ", im.name)));
  std::move(abort).Cancel();
  CRYO_LOG(Info) << "imported checkpoint image " << im.name << " (checkpoint " << original
                 << " of container " << container_name << ") as checkpoint " << id << ", "
                 << m.TotalBytes() << " bytes verified";
  return Result(std::move(m), u.rootfs_image, /*now=*/true);
}

}  // namespace cryo::engine
