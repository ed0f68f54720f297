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
inline constexpr char kStatsDump[] = "stats-dump";

}  // namespace cryo::contract::archive

namespace cryo::contract::checkpoint {

// In a cryo checkpoint directory, beside images/.
inline constexpr char kContainerDir[] = "container";
inline constexpr char kRootfsDiff[] = "container/rootfs-diff.tar";
inline constexpr char kDeletedFiles[] = "container/deleted.files";

}  // namespace cryo::contract::checkpoint
