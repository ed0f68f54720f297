/*
 * What cryo-init, the shim and cryod agree on. Plain C: cryo-init includes it too.
 */
#ifndef CRYO_INIT_PROTOCOL_H_
#define CRYO_INIT_PROTOCOL_H_

/* Where the shim mounts cryo-init (read-only) in an opted-in container. */
#define CRYO_INIT_CONTAINER_PATH "/.cryo/init"

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

#endif /* CRYO_INIT_PROTOCOL_H_ */
