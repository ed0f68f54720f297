/*
 * What cryo-init, the shim and cryod agree on. Plain C: cryo-init includes it too.
 */
#ifndef CRYO_INIT_PROTOCOL_H_
#define CRYO_INIT_PROTOCOL_H_

/* Where the shim mounts cryo-init (read-only) in an opted-in container. */
#define CRYO_INIT_CONTAINER_PATH "/.cryo/init"

/* Where the shim mounts the GPU fast-path library (read-only) when the pod asks for it, and the
 * variable naming it to cryo-init, which puts it first in the job's LD_PRELOAD (keeping what the
 * image's own LD_PRELOAD holds) and removes the variable. A restored job finds the library at
 * the same path, which its memory maps. */
#define CRYO_INIT_FASTPATH_CONTAINER_PATH "/.cryo/libcryo_gpu_fastpath.so"
#define CRYO_INIT_PRELOAD_ENV "CRYO_INIT_PRELOAD"

/* Set by the shim in a container created to resume: the checkpoint to restore. cryo-init then
 * starts nothing and waits for cryod. */
#define CRYO_INIT_RESTORE_ENV "CRYO_INIT_RESTORE_FROM"

/* How long (seconds) a resuming cryo-init waits for cryod before giving up; env overrides. */
#define CRYO_INIT_RESTORE_TIMEOUT_ENV "CRYO_INIT_RESTORE_TIMEOUT_S"
#define CRYO_INIT_RESTORE_TIMEOUT_DEFAULT_S 900

/* cryod tells a resuming cryo-init how the restore went with this real-time signal (a kernel
 * number, the same whatever libc each side uses; glibc keeps 32 and 33 for itself), queued
 * with a value: the restored job's pid in the container (> 0), or <= 0 when the restore failed
 * (cryod has written why to the container's stderr). */
#define CRYO_INIT_SIGNAL 40

/* cryo-init's own exit code when the restore failed or never came. */
#define CRYO_INIT_EXIT_RESTORE_FAILED 125

/* Queued with CRYO_INIT_SIGNAL to a cryo-init whose job cryod has just checkpointed and is about
 * to end (a stop's checkpoint is published): cryo-init then exits with the checkpointed exit code
 * instead of the job's 137, so that Kubernetes' policies (a Job's podFailurePolicy) can tell a
 * checkpointed stop from a failure. Sent with si_code SI_QUEUE from outside the container. */
#define CRYO_INIT_VALUE_CHECKPOINTED 0x43525930 /* "CRY0" */

/* Queued instead when cryod takes no checkpoint at a stop because one would not finish within
 * the grace period, and ends the job so that its replacement resumes from the newest periodic
 * checkpoint (docs/operations.md, "The plan at a stop"). The value is this base plus the work
 * lost: that checkpoint's age in seconds, at most CRYO_INIT_LOST_MAX_S. cryo-init exits with the
 * checkpointed exit code and its termination message names the work lost. */
#define CRYO_INIT_VALUE_RESUMES_EARLIER 0x44000000
#define CRYO_INIT_LOST_MAX_S 0x00FFFFFF

/* The checkpointed exit code (1..124: 125-127 are cryo-init's own and the shell's), set by the
 * shim (flag, or the pod's annotation <prefix>/checkpointed-exit-code); the default is sysexits'
 * EX_TEMPFAIL: try again later. */
#define CRYO_INIT_CHECKPOINTED_EXIT_ENV "CRYO_INIT_CHECKPOINTED_EXIT_CODE"
#define CRYO_INIT_CHECKPOINTED_EXIT_DEFAULT 75
#define CRYO_INIT_CHECKPOINTED_EXIT_MAX 124

/* Where kubelet reads the container's termination message (the shim passes the container's
 * terminationMessagePath); cryo-init writes there why it stopped after a checkpoint. */
#define CRYO_INIT_TERMINATION_LOG_ENV "CRYO_INIT_TERMINATION_LOG"

/* Set to 1, cryo-init says what it does on stderr (the container's log); it is quiet otherwise,
 * so a resumed job's log goes on without a line of cryo's own. */
#define CRYO_INIT_VERBOSE_ENV "CRYO_INIT_VERBOSE"

#endif /* CRYO_INIT_PROTOCOL_H_ */
