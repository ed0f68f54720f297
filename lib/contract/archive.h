#pragma once

// File names of a checkpoint that other tools read: kubelet's checkpoint archive (as
// containerd and CRI-O write it, read by checkpointctl and by runtimes restoring it) and the
// container directory of a cryo checkpoint.

namespace cryo::contract::archive {

// In the kubelet checkpoint archive (a tar).
inline constexpr char kConfigDump[] = "config.dump";
inline constexpr char kSpecDump[] = "spec.dump";
inline constexpr char kCheckpointDir[] = "checkpoint";  // CRIU's images
inline constexpr char kRootfsDiff[] = "rootfs-diff.tar";
inline constexpr char kDeletedFiles[] = "deleted.files";
inline constexpr char kDumpLog[] = "dump.log";
inline constexpr char kStatsDump[] =
    "stats-dump";                            // CRIU's dump statistics (checkpointctl --stats)
inline constexpr char kStatus[] = "status";  // containerd's container status
inline constexpr char kStatusDump[] = "status.dump";  // CRI's ContainerStatus (CRI-O, containerd 2)
// cryo's own manifest (every file with its checksum), which makes the archive restorable by cryo
// (`kubectl cryo` / a checkpoint image) without its store.
inline constexpr char kCryoManifest[] = "cryo-manifest.json";
// cryo's other files of the checkpoint (the GPU fast path's data, gpu/...), each below this
// directory at its path in the checkpoint directory.
inline constexpr char kCryoDir[] = "cryo";

}  // namespace cryo::contract::archive

namespace cryo::contract::checkpoint {

// In a cryo checkpoint directory, beside images/.
inline constexpr char kContainerDir[] = "container";
// cryo-init's mount point in the container (CRYO_INIT_CONTAINER_PATH's directory): never part of
// the saved writable layer.
inline constexpr char kCryoInitDir[] = ".cryo";
inline constexpr char kRootfsDiff[] = "container/rootfs-diff.tar";
inline constexpr char kDeletedFiles[] = "container/deleted.files";

}  // namespace cryo::contract::checkpoint
