#pragma once

/*
 * cryo GPU plugin C ABI.
 *
 * A plugin is a shared library that exports one symbol, CRYO_GPU_PLUGIN_ENTRY
 * ("cryo_gpu_plugin_v1"), a function returning a pointer to a static cryo_gpu_plugin_api table.
 * cryod calls create() once, then the hooks, from several threads at once (one per process of a
 * job), so hooks must be thread-safe; then destroy().
 *
 * Versioning: abi_major changes when an existing field changes meaning or layout; cryod refuses
 * a plugin of another major. New hooks are only ever appended at the end of the table and bump
 * abi_minor; struct_size tells cryod which fields the plugin knows: a field whose end lies past
 * struct_size (or a NULL hook) is treated as "not implemented".
 *
 * Ownership: every char* a hook returns through an out-parameter is allocated by the plugin and
 * must be released by the caller with free_string() of the same table. Strings passed in are
 * owned by the caller and valid only during the call. last_error() returns a plugin-owned string
 * that stays valid until the next hook call on the same thread.
 *
 * Errors: every hook returns a cryo_gpu_rc; on anything but CRYO_GPU_OK, last_error() on the
 * same thread says why (called with p == NULL after a failed create()). Values are the
 * canonical status codes (absl::StatusCode / gRPC).
 *
 * Data: structured inputs and outputs are UTF-8 JSON documents (described at each hook), so
 * they can grow without breaking the ABI. A GPU is named by its vendor UUID string
 * (e.g. "GPU-6f2c..." for NVIDIA).
 */

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define CRYO_GPU_PLUGIN_ABI_MAJOR 1
#define CRYO_GPU_PLUGIN_ABI_MINOR 1
#define CRYO_GPU_PLUGIN_ENTRY "cryo_gpu_plugin_v1"

typedef int32_t cryo_gpu_rc;
enum {
  CRYO_GPU_OK = 0,
  CRYO_GPU_INVALID_ARGUMENT = 3,
  CRYO_GPU_DEADLINE_EXCEEDED = 4, /* lock did not succeed within its timeout */
  CRYO_GPU_NOT_FOUND = 5,
  CRYO_GPU_FAILED_PRECONDITION = 9, /* driver missing, unsupported feature, incompatible GPU */
  CRYO_GPU_ABORTED = 10,            /* the process went away during the call */
  CRYO_GPU_UNIMPLEMENTED = 12,
  CRYO_GPU_INTERNAL = 13,
  CRYO_GPU_UNAVAILABLE = 14,
};

/* One plugin instance; opaque to cryod. */
typedef struct cryo_gpu_plugin cryo_gpu_plugin;

/* Log levels of set_log's callback. */
enum {
  CRYO_GPU_LOG_DEBUG = 0,
  CRYO_GPU_LOG_INFO = 1,
  CRYO_GPU_LOG_WARNING = 2,
  CRYO_GPU_LOG_ERROR = 3,
};

/* cryod's log: `msg` (UTF-8, one line, no newline) is owned by the plugin and valid only during
 * the call; `ctx` is what set_log was given. Thread-safe: called from any hook's thread. */
typedef void (*cryo_gpu_log_fn)(void* ctx, int32_t level, const char* msg);

/* A checkpointed GPU and the GPU of this node it is restored onto. */
typedef struct cryo_gpu_device_pair {
  const char* from_uuid;
  const char* to_uuid;
} cryo_gpu_device_pair;

typedef struct cryo_gpu_plugin_api {
  /* sizeof(cryo_gpu_plugin_api) as the plugin was built: must stay the first field. */
  uint32_t struct_size;
  uint16_t abi_major;
  uint16_t abi_minor;
  const char* name;    /* static, e.g. "cuda"; names the manifest section */
  const char* version; /* static */

  /* config_json: a JSON object of plugin options (may be "{}" or NULL). Succeeds on nodes
   * without the vendor's driver: status() then reports available=false. */
  cryo_gpu_rc (*create)(const char* config_json, cryo_gpu_plugin** out);
  void (*destroy)(cryo_gpu_plugin* p);
  const char* (*last_error)(cryo_gpu_plugin* p);
  void (*free_string)(char* s);

  /* {"available": bool, "detail": "why not / driver version", "driver_version": "..."} */
  cryo_gpu_rc (*status)(cryo_gpu_plugin* p, char** out_json);

  /* [{"uuid","name","chip","index","memory_total_bytes","memory_free_bytes",
   *   "driver_version"}], in the vendor's device order. */
  cryo_gpu_rc (*list_devices)(cryo_gpu_plugin* p, char** out_json);

  /* Which of pids use this vendor's GPUs: [{"pid": N, "facts": {...}}]. Fails
   * (FAILED_PRECONDITION, with the reason) when one uses a feature that cannot be checkpointed,
   * or when the driver is unusable but a process uses the GPU. */
  cryo_gpu_rc (*discover)(cryo_gpu_plugin* p, const int32_t* pids, size_t count, char** out_json);

  /* Blocks the process's GPU API calls and waits for its work to drain; DEADLINE_EXCEEDED
   * (process left running) when that takes longer than timeout_ms (0: no bound). */
  cryo_gpu_rc (*lock)(cryo_gpu_plugin* p, int32_t pid, uint32_t timeout_ms);
  /* Locked -> device memory moved into the process's host memory, GPU resources released. */
  cryo_gpu_rc (*checkpoint)(cryo_gpu_plugin* p, int32_t pid);
  /* Checkpointed -> device state back, process left locked. facts_json is what discover gave
   * for this process (from the manifest; may be NULL). map: checkpointed -> target GPU; empty
   * means the same GPUs. */
  cryo_gpu_rc (*restore)(cryo_gpu_plugin* p, int32_t pid, const char* facts_json,
                         const cryo_gpu_device_pair* map, size_t map_count);
  cryo_gpu_rc (*unlock)(cryo_gpu_plugin* p, int32_t pid);
  /* Best effort: from whatever state (locked, checkpointed) back to running, in place. */
  cryo_gpu_rc (*rollback)(cryo_gpu_plugin* p, int32_t pid);

  /* The plugin's section of the manifest. procs_json: [{"pid": N, "facts": {...}}] as
   * discover() gave them (the processes may hold no GPU state any more when this is called).
   * Answers a JSON object with at least "devices" (the job's GPUs in order, each with "uuid",
   * "name", "chip" and, when known, "memory_used_bytes") and "processes". */
  cryo_gpu_rc (*describe)(cryo_gpu_plugin* p, const char* procs_json, char** out_json);

  /* Before a restore touches anything. section_json: what describe() gave at checkpoint time.
   * request_json: {"map": {from: to}, "env_pid": N} (both optional; env_pid names a process
   * whose environment says which GPUs the restored job may use). Answers {"map": {from: to}}
   * covering every checkpointed GPU, or FAILED_PRECONDITION with the reason (chip differs,
   * too little free memory, no driver). */
  cryo_gpu_rc (*check_compatible)(cryo_gpu_plugin* p, const char* section_json,
                                  const char* request_json, char** out_json);

  /* What CRIU needs for these processes: {"args": [...], "env": {...}} (may be empty). */
  cryo_gpu_rc (*criu_options)(cryo_gpu_plugin* p, const int32_t* pids, size_t count,
                              char** out_json);
  /* ABI 1.0 ends here; append new hooks below and bump CRYO_GPU_PLUGIN_ABI_MINOR. */

  /* ABI 1.1: where the plugin's own messages go (timings, what the driver said). cryod calls it
   * once, right after create(), before any other hook; a plugin that never gets it (an older
   * cryod) logs nothing. fn may be NULL to stop logging. */
  void (*set_log)(cryo_gpu_plugin* p, cryo_gpu_log_fn fn, void* ctx);
  /* ABI 1.1 ends here. */
} cryo_gpu_plugin_api;

typedef const cryo_gpu_plugin_api* (*cryo_gpu_plugin_entry_fn)(void);

#ifdef __cplusplus
}
#endif
