#pragma once

// The checkpoint and restore flows of cryod, independent of gRPC. Each flow is a transaction
// (transaction.h): named steps over one state object, each with its undo; a live failure and
// crash recovery take back the same way. Every outside system is an interface (store, CRIU,
// GPU plugins, /proc, the container runtime) so the flows are tested with fakes, and the real
// ones are used by cryod and the integration tests.
//
//   checkpoint: validate -> plan -> stage -> gpu_host_copy -> gpu_drain -> gpu_lock ->
//               gpu_checkpoint -> gpu_save ->
//               dump -> credentials -> rootfs -> resume_early -> gpu_resume -> gpu_refill ->
//               gpu_write -> manifest -> publish (commit) -> finish -> export
//   restore:    validate -> init_handshake -> check -> verify -> credentials -> wait_pids ->
//               journal -> rootfs -> criu_restore -> gpu_restore -> gpu_refill -> done (commit)
// (gpu_host_copy, gpu_drain, gpu_save, gpu_refill and gpu_write are the GPU fast path's:
// gpu_fastpath.cc.)

#include <sys/types.h>

#include <algorithm>
#include <atomic>
#include <functional>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "daemon/container/runtime.h"
#include "daemon/container/target.h"
#include "daemon/criu/anon_pages.h"
#include "daemon/criu/credentials.h"
#include "daemon/criu/criu.h"
#include "daemon/engine/gpu_write_start.h"
#include "daemon/engine/job_control.h"
#include "daemon/engine/job_cut.h"
#include "daemon/engine/operation.h"
#include "daemon/engine/pace.h"
#include "daemon/engine/test_hooks.h"
#include "daemon/engine/transaction.h"
#include "daemon/engine/types.h"
#include "daemon/gpu/copy_share.h"
#include "daemon/gpu/fastpath.h"
#include "daemon/gpu/gpu_manager.h"
#include "daemon/gpu/host_copy.h"
#include "daemon/gpu/host_copy_pool.h"
#include "daemon/gpu/parker.h"
#include "daemon/journal/journal.h"
#include "daemon/metrics/metrics.h"
#include "daemon/store/store.h"
#include "lib/base/fd.h"
#include "lib/base/proc.h"
#include "lib/containerd/image_content.h"

namespace cryo::engine {

// The GPU fast path (docs/gpu.md): how cryod drives the library in jobs that load it.
struct FastpathConfig {
  bool enabled = true;  // used for every job that runs the library
  int threads = std::max(1u, std::thread::hardware_concurrency());  // copy threads per process
  // Files (and writers) per process the drained memory goes into, in parallel with direct I/O;
  // 0 keeps it in the process's memory for CRIU to write.
  int writers = 4;
  // A leave-running checkpoint drains into cryod's memory, refills from it, and writes the
  // files while the job runs on (gpu_write): the job stalls only for the copies. Used when the
  // node's available memory holds the job's GPU data.
  bool in_memory = true;
  // That write refers to the chunks unchanged since the workload's newest good checkpoint
  // instead of writing them again.
  bool incremental = true;
  int host_copy_fs = -1;  // a tmpfs with huge pages for that memory (MountHostCopyFs; -1: memfds)
  // Memory held faulted in for those drains (gpu_staging_mib); with it, stop checkpoints drain
  // into cryod's memory too, and the GPUs of a node vacate at memory speed. Null: none.
  gpu::HostCopyPool* staging = nullptr;
  // When a stop checkpoint's write from staging memory begins (gpu_write_start).
  GpuWriteStart write_start = GpuWriteStart::kDrained;
  // Leave-running drains park the GPU data on the GPU (gpu_park).
  bool park = false;
  // Restores onto the same GPUs read the GPU data into a park first (gpu_restore_into_gpu).
  bool restore_into_gpu = false;
  gpu::ParkerOptions parker;  // for both
};

struct EngineConfig {
  std::string node_name;
  std::string state_dir;  // journal/ and ops/<op-id>/ (CRIU logs)
  absl::Duration pid_wait_timeout = absl::Seconds(10);
  // The one default bound on locking GPU processes (a request may give its own).
  absl::Duration gpu_lock_timeout = absl::Seconds(10);
  absl::Duration incomplete_ttl = absl::Hours(24);
  // How long a job member's replacement waits for the other members' before its restore
  // (the step `job_gather`); arrivals older than twice this do not count.
  absl::Duration job_gather_timeout = absl::Minutes(5);
  // Newest checkpoints kept per workload after each checkpoint; 0 keeps all.
  int retention_keep = 0;
  // Threads that verify checksums before a restore (the images are read from the page cache
  // or the store's network link: several streams go faster than one).
  int verify_threads = std::clamp<int>(std::thread::hardware_concurrency(), 2, 8);
  // Threads that copy a process-mode dump's anonymous memory at CRIU's post-dump
  // (criu/anon_pages.h); 0: CRIU copies it, with one thread.
  int dump_copy_threads = criu::DefaultDumpCopyThreads();
  // Copy ahead of the freeze, with the writes tracked (criu/pre_copy.h).
  bool dump_pre_copy = true;
  // ... shared memory too, after the drain (pre_copy.h).
  bool dump_pre_copy_shared = false;
  // Operation log directories kept under state_dir/ops.
  int keep_op_logs = 50;
  pid_t self_pid = 0;
  // cryo-nsexec, which runs CRIU inside containers (container mode) and, in process mode, is
  // CRIU's post-restore and post-dump gate (criu/action_gate.h) where cryo-gate is not beside it.
  std::string nsexec_path;
  // Prefix of the annotations the shim puts on the containers it manages.
  std::string annotation_prefix = "cryo.dev";
  // CRIU options of every job unless its request says otherwise.
  criu::NodeDefaults criu_defaults;
  FastpathConfig fastpath;
  // A tmpfs (gpu::MountPrivateTmpfs) that leave-running checkpoints dump the job into, to copy
  // the images into the store as it runs on (dump_staging.h), when the node's memory holds them;
  // -1: CRIU writes into the store while the job is frozen.
  int dump_staging_fs = -1;
  // Pages images' memory kept from one such dump for the next (criu/pages_pool.h); may be null.
  criu::PagesPool* pages_pool = nullptr;
  // Where the fast-path library is installed on this node (`cryo node` says whether it is).
  std::string fastpath_library;
  // The key manifests are signed with (store/signature.h); empty: a random one for this
  // Engine's lifetime (tests), so nothing it signed is restored in process mode by another.
  std::string signing_key;
  // See test_hooks.h.
  std::string test_hook_dir;
  // Tests only: called before (`after` false) and after every step up to a commit; a non-OK
  // status fails the step there, as a real failure would.
  std::function<absl::Status(const std::string& step, bool after)> fault;
};

class JobPeers;      // job_peers.h
class JobDirectory;  // job_peers.h

struct EngineDeps {
  store::CheckpointStore* store = nullptr;
  criu::Criu* criu = nullptr;
  gpu::GpuManager* gpu = nullptr;
  journal::Journal* journal = nullptr;
  metrics::Metrics* metrics = nullptr;
  const proc::ProcReader* proc = nullptr;
  // The node's container runtime; null: container mode is refused.
  runtime::ContainerRuntime* runtime = nullptr;
  // The GPU fast path; null: every job's GPU memory goes the driver's way.
  gpu::Fastpath* fastpath = nullptr;
  // The runtime's image content (containerd's API); null: checkpoint images are refused.
  containerd::ImageContent* images = nullptr;
  // Other nodes' cryods, for job checkpoints that span nodes; null: such jobs are refused.
  JobPeers* peers = nullptr;
  // Where a job's members run (the Kubernetes API); null: a job checkpoint must list them.
  JobDirectory* jobs = nullptr;
};

struct CheckpointState;
struct RestoreState;
struct CheckpointLive;
struct RestoreLive;
class PostDumpPages;  // checkpoint.cc

// Refuses a multi-process NCCL job whose ranks share GPU memory, unless every such rank runs the
// GPU fast path of a version that carries it (checkpoint.cc).
absl::Status CheckNcclSharing(const std::vector<gpu::GpuProcess>& gpu,
                              const std::vector<gpu::FastpathProcess>& fast);

// PERMISSION_DENIED when container checkpoint `m` was taken in a pod of another namespace than
// `target`'s (restore.cc).
absl::Status CheckSameNamespace(const store::Manifest& m, const runtime::ContainerInfo& target);

class Engine {
 public:
  Engine(EngineConfig cfg, EngineDeps deps);
  ~Engine();

  // Finishes or undoes what the journal says was in flight when cryod stopped (through the
  // same undo steps a live failure runs), then collects incomplete checkpoints. Called once at
  // startup, before serving.
  absl::Status Recover();

  // Removes other nodes' stages older than the incomplete TTL (the node died mid-checkpoint),
  // published directories that never got a manifest, the trash, and with `own_stages` this
  // node's stages (only at start, before any operation). Without `own_stages` it is safe while
  // operations run and takes no lock they wait on; cryod calls it so every 10 minutes.
  // Returns how many directories went.
  int CollectIncomplete(bool own_stages = false, const std::set<std::string>& keep = {});

  // Runs the journal entries Recover() left because they give jobs their GPU memory back (a
  // refill takes as long as reading the memory back, and may hang on a job's library) on a
  // thread of its own, so that cryod serves meanwhile. Their jobs stay claimed (a checkpoint of
  // one is refused) until each is done. Once Stop()'s grace has passed its waits end, and an
  // entry not finished stays in the journal for the next start.
  void RecoverInBackground();

  absl::StatusOr<CheckpointResult> Checkpoint(const CheckpointRequest& req, Operation& op);
  // A job checkpoint (issue 37): every member's part checkpointed at one cut on its own thread
  // (each as Checkpoint does, rolled back alone on failure), then the record committed.
  // Members that fail before the cut fail the whole job checkpoint and every member runs on
  // (or, for a stop, is left to its stop); a failure after it leaves parts that never commit
  // and are collected.
  absl::StatusOr<JobCheckpointResult> CheckpointJob(const JobCheckpointRequest& req, Operation& op);
  // The members of a job checkpoint on this node when another node's cryod drives it (the Peer
  // service): `at_cut` hears when they are all dumped (or why not), `wait_go` returns the
  // driver's word once every node is at the cut (OK: go on; else abort, and every member here
  // is rolled back). Their parts are published; the driver commits. `gpu_up` carries this
  // node's word of each round of the GPU cut to the driver and brings back the job's;
  // `gpu_left` tells it that no member here takes part (JobGpuCut).
  absl::StatusOr<std::vector<CheckpointResult>> CheckpointJobMembers(
      const JobCheckpointRequest& req, Operation& op,
      const std::function<void(const absl::Status&)>& at_cut,
      const std::function<absl::Status()>& wait_go, JobGpuCut::Upstream gpu_up,
      std::function<void()> gpu_left);
  // Whether container `container_id` runs here as member `member` of job `ns`/`job`: the pod's
  // namespace (kubelet's label) and the membership the shim recorded on it at creation
  // (lib/contract/job.h). PERMISSION_DENIED naming what differs: another node's cryod may ask
  // for a job's members only.
  absl::Status CheckJobMember(const std::string& container_id, const std::string& ns,
                              const std::string& job, const std::string& member);
  // The job's members running here: containers whose pods the shim marked as members of
  // `ns`/`job` at creation (their namespace label and job annotations), each with its container
  // and this node's name. FAILED_PRECONDITION without a container runtime.
  absl::StatusOr<std::vector<JobCheckpointRequest::Member>> LocalJobMembers(const std::string& ns,
                                                                            const std::string& job);
  // Whether this node drives the job's periodic job checkpoints: it runs the member whose name
  // sorts first among those running (FindJobMembers, `size` as there).
  absl::StatusOr<bool> DrivesJob(const std::string& ns, const std::string& job, int size);
  // A committed job checkpoint restored on this node, all members together (process mode).
  absl::StatusOr<JobRestoreResult> RestoreJob(const JobRestoreRequest& req, Operation& op);
  absl::StatusOr<RestoreResult> Restore(const RestoreRequest& req, Operation& op);

  // Makes checkpoint image `image` (a cryo kubelet archive as an OCI image, in the node's
  // runtime) a checkpoint of this store, verified file by file against the archive's manifest,
  // under the id "image-<its manifest digest>". Idempotent: an image imported before is found.
  // Returns the checkpoint and the image its container ran.
  absl::StatusOr<ImportedImage> ImportImage(const std::string& image, absl::Time deadline);

  absl::StatusOr<CheckpointRecord> Get(const std::string& id);
  // For a job checkpoint's part, why it is not restorable now; "" when it is (or no part).
  std::string JobUncommitted(const store::Manifest& m);
  absl::StatusOr<std::vector<CheckpointRecord>> List(const std::string& workload);
  absl::Status Delete(const std::string& id);
  NodeFacts Node();
  // cryod is stopping: work outside the OperationRunner (image imports) ends at its next check,
  // and once `grace` has passed too, so do the waits that give a job its GPU memory back (an
  // undo's or a recovery's refill: the library finishes it by itself).
  void Stop(absl::Duration grace = absl::ZeroDuration()) {
    stop_grace_end_ns_.store(absl::ToUnixNanos(absl::Now() + grace));
    stopping_.store(true);
  }

  const EngineConfig& config() const { return cfg_; }
  // The workload's newest checkpoint that no restore found damaged (nullopt: none, or the store
  // could not be listed, which is logged).
  std::optional<store::Manifest> NewestGood(const std::string& workload);
  // How fast this node's checkpoints went (the plan and the periodic schedule predict from it).
  const CheckpointPace& pace() const { return pace_; }
  // The steps' names in order (tests, docs).
  std::vector<std::string> CheckpointStepNames() const;
  std::vector<std::string> RestoreStepNames() const;

 private:
  friend struct CheckpointState;
  friend struct RestoreState;
  class Claim;

  Transaction<CheckpointState> CheckpointSteps();
  Transaction<RestoreState> RestoreSteps();

  // Checkpoint steps.
  absl::Status ValidateCheckpoint(CheckpointState& s);
  absl::Status PlanCheckpoint(CheckpointState& s);
  absl::Status FallBack(CheckpointState& s);
  absl::Status StageCheckpoint(CheckpointState& s);
  absl::Status LockGpus(CheckpointState& s);
  absl::Status CheckpointGpus(CheckpointState& s);
  absl::Status Dump(CheckpointState& s);
  std::shared_ptr<PostDumpPages> AnonPagesBesideCriu(const CheckpointState& s,
                                                     const std::string& images);
  // Whether cryod copies the job's memory at CRIU's post-dump (criu/anon_pages.h): process mode,
  // the job's pids cryod's own.
  bool CopiesDumpPages(const CheckpointState& s) const;
  // pre_copy: the memory of the fast path's processes copied ahead of the freeze (never fails
  // the checkpoint: what it could not copy is copied at the freeze).
  absl::Status PreCopyMemory(CheckpointState& s);
  void UndoPreCopy(const journal::Entry& e, CheckpointLive* live);
  // pre_copy_shared: their shared memory copied after the drain, on a thread of its own until
  // the dump.
  absl::Status PreCopySharedMemory(CheckpointState& s);
  // dump_pages: the pages copied ahead put into the images after the thaw, their checksums.
  absl::Status FinishDumpPages(CheckpointState& s);
  // Whether cryo-nsexec is there to be CRIU's action gate (criu/action_gate.h).
  bool GateProgramUsable() const;
  // The gate's program: cryo-gate beside cryo-nsexec where it is installed, else cryo-nsexec.
  std::string GateProgram() const;
  absl::Status CheckDumpRestorable(CheckpointState& s);
  absl::Status WriteDump(CheckpointState& s);
  absl::Status SaveRootfs(CheckpointState& s);
  // A job checkpoint's members when it names none (the Kubernetes API, else this node's runtime
  // and the peers'), checked against the job's size.
  absl::StatusOr<std::vector<JobCheckpointRequest::Member>> FindJobMembers(
      const JobCheckpointRequest& req);
  // The plan at a member's stop (req.plan): nullopt to take the job checkpoint; else the
  // answer that takes none and names the newest good committed one to resume from.
  std::optional<JobCheckpointResult> PlanJob(const JobCheckpointRequest& req);
  // Keeps the job's newest retention_keep job checkpoints, and those a kept one's parts refer
  // to or a restore here reads; deletes the others (record first, then parts).
  void ApplyJobRetention(const std::string& ns, const std::string& job);
  // Each of `which` (indices into req.members) checkpointed on a thread of its own, to `cut`.
  std::vector<absl::StatusOr<CheckpointResult>> RunJobMembers(const JobCheckpointRequest& req,
                                                              const std::vector<int>& which,
                                                              const std::shared_ptr<JobCut>& cut,
                                                              Operation& op);
  // The job checkpoint's record, of every member's part as the shared store holds it, signed
  // and committed (the commit is the rename that makes the job checkpoint exist).
  absl::StatusOr<JobCheckpointResult> CommitJob(const JobCheckpointRequest& req,
                                                const std::string& what,
                                                std::map<std::string, CheckpointResult> parts,
                                                absl::Duration skew, size_t nodes);
  absl::Status MeetJobCut(CheckpointState& s);
  // This member's party in its job checkpoint's GPU cut (job_cut.h); null outside one.
  std::unique_ptr<gpu::CutParties> JobGpuParty(const CheckpointState& s);
  void LeaveJobGpuCut(CheckpointState& s);
  absl::Status ResumeEarly(CheckpointState& s);
  absl::Status ResumeGpus(CheckpointState& s);
  absl::Status BuildManifest(CheckpointState& s);
  absl::Status Publish(CheckpointState& s);
  absl::Status Finish(CheckpointState& s);
  absl::Status Export(CheckpointState& s);
  absl::Status DrainGpus(CheckpointState& s);
  absl::Status SaveGpuData(CheckpointState& s);
  absl::Status RefillGpus(CheckpointState& s);
  // gpu_write's previous checkpoint (incremental), held from deletion; and its write begun early.
  std::optional<store::Manifest> WritePrevious(CheckpointState& s);
  void BeginGpuWrite(CheckpointState& s);
  absl::Status WriteGpuData(CheckpointState& s);
  absl::Status AllocateHostCopies(CheckpointState& s);
  // Whether a leave-running drain may go into cryod's memory: on, and every library speaks it.
  bool MayDrainIntoMemory(const CheckpointState& s) const;
  // How long the job's GPU work may take to stop (the lock's bound, the drain's too): the
  // request's, else the node's.
  absl::Duration GpuLockTimeout(const CheckpointRequest& req) const;
  // The node's settings for this checkpoint's drains (copy threads, bounds, when to stop).
  gpu::FastpathDrainOptions DrainOptionsFor(const CheckpointState& s) const;
  // Their undos: they read the journal entry and, in a live rollback, the live handles (null
  // in recovery, which runs them too).
  void UndoStage(const journal::Entry& e, CheckpointLive* live);
  void UndoDrain(const journal::Entry& e, CheckpointLive* live);
  void UndoGpu(const journal::Entry& e, CheckpointLive* live);
  void UndoDump(const journal::Entry& e, CheckpointLive* live);
  // What a published checkpoint still owes its job: kill it (preemption) or let it run.
  void CompletePublished(const journal::Entry& e);
  void EndCheckpointedJob(const journal::Entry& e, const std::vector<journal::Task>& tasks);

  // Restore steps.
  absl::Status ValidateRestore(RestoreState& s);
  absl::Status CheckRestore(RestoreState& s);
  absl::Status Verify(RestoreState& s);
  // A checkpoint that failed its checks: recorded as damaged (DATA_LOSS) and said so.
  absl::Status RefuseUnverified(RestoreState& s, const absl::Status& st);
  absl::Status CheckRestoreCredentials(RestoreState& s);
  // A job member's part waits until the replacements of every member of its job checkpoint are
  // ready to resume it, so that they resume one cut together (job_checkpoint.cc).
  absl::Status GatherJobMembers(RestoreState& s);
  void UndoJobGather(const journal::Entry& e, RestoreLive* live);
  void MarkJobArrivalFailed(RestoreLive& live);
  absl::Status HoldJobConnections(RestoreState& s);
  absl::Status ReleaseJobConnections(RestoreState& s);
  absl::Status WaitPidsFree(RestoreState& s);
  absl::Status FreeListenPorts(RestoreState& s);
  absl::Status JournalRestore(RestoreState& s);
  absl::Status ApplyRootfs(RestoreState& s);
  absl::Status RunCriuRestore(RestoreState& s);
  absl::Status RestoreGpus(RestoreState& s);
  // Starts reading the GPU data into staging memory when it has a slot for every process
  // (gpu_prefetch.h); never fails the restore: without it the library reads the files.
  absl::Status PrefetchGpuData(RestoreState& s);
  // gpu_restore_into_gpu: which fast-path processes may have their files read into GPU memory
  // (onto the GPU they were checkpointed on, from files of this checkpoint alone), and a parking
  // process for each, reading them (s.fills). Never fails the restore: a process without one is
  // read as before.
  std::vector<char> FillCandidates(const RestoreState& s);
  void StartFills(RestoreState& s, const std::vector<char>& filling);
  absl::Status StartGpuFills(RestoreState& s);
  absl::Status RefillRestoredGpus(RestoreState& s);
  // Whether the library of every process read ahead follows a read still running (version).
  bool FollowsReads(RestoreState& s);
  void LogPrefetch(RestoreState& s, const absl::Status& read, absl::Duration after);
  // Where process f's GPU data of checkpoint `m` (in `dir`) is: each file's chunks in the file
  // that holds them (this checkpoint's, or the same file of one it refers to), with the digests
  // recorded; the files opened are added to `open`.
  absl::StatusOr<std::vector<gpu::ChunkSources>> FastpathSources(const store::Manifest& m,
                                                                 const std::string& dir,
                                                                 const gpu::FastpathProcess& f,
                                                                 std::vector<UniqueFd>* open);
  // Process f's GPU data of checkpoint `m` (in `dir`), read into cryod's memory where some of
  // its chunks are another checkpoint's (incremental), each chunk checked; an empty descriptor
  // where the files hold it all (the library reads those itself).
  absl::StatusOr<UniqueFd> ReadThrough(const store::Manifest& m, const std::string& dir,
                                       const gpu::FastpathProcess& f);
  // DATA_LOSS when a checkpoint `m` refers to is gone, or its file is not one or too short to
  // hold the chunks: found before a restore starts anything (the chunks' digests are checked
  // as they are read).
  absl::Status CheckReferences(const store::Manifest& m);
  absl::Status Done(RestoreState& s);
  void UndoInitHandshake(const journal::Entry& e, RestoreLive* live);
  void UndoCriuRestore(const journal::Entry& e, RestoreLive* live);

  absl::Status ValidateTarget(pid_t pid, std::vector<proc::ProcInfo>* tree);
  // The most the threads of `tree` hold now (from /proc).
  absl::StatusOr<criu::CredentialCeiling> LiveCredentials(const std::vector<proc::ProcInfo>& tree);
  // The most a job in the container whose cryo-init is `init_pid` may hold: what the runtime
  // gave that init from the container's spec, its seccomp filters included.
  absl::StatusOr<criu::CredentialCeiling> ContainerCeiling(pid_t init_pid);
  // The credentials check of a restore: the images in `images` against `ceiling`.
  absl::Status CheckImageCredentials(const std::string& images, bool container,
                                     const criu::CredentialCeiling& ceiling,
                                     absl::string_view whose);
  absl::StatusOr<container::ContainerTarget> Container(const std::string& id, bool restore);
  // Container mode, after CRIU: no restored process keeps an OOM score below its container's.
  void RaiseOomScores(const std::vector<proc::ProcInfo>& tree, pid_t init_pid);
  // FAILED_PRECONDITION, saying `who` and `outcome`, when `pid` is not in cryod's user namespace.
  absl::Status CheckNodeUserNamespace(pid_t pid, absl::string_view who, absl::string_view outcome);
  // The GPU plugins' CRIU arguments for these processes; `job` (a dump's options, or null)
  // takes those cryo types, the rest go to `args`.
  absl::Status AddGpuCriuOptions(const std::vector<gpu::GpuProcess>& procs, criu::JobOptions* job,
                                 std::vector<std::string>* args, std::vector<std::string>* env);
  std::string OpDir(const std::string& op_id) const;
  // The one policy of journal writes (transaction.h): a write that comes before an irreversible
  // act must succeed, or the step fails before the act (an undo nobody could replay after a
  // crash must not be needed); a write that records what was already done is logged when it
  // fails, since failing the step would not undo the act.
  absl::Status JournalBefore(const journal::Entry& e);
  void JournalAfter(const journal::Entry& e);

  // Brings the memory of drained fast-path processes back, from wherever it is: their own
  // memory, or the files under `dir`. Best effort (rollback, recovery).
  // memfds[i]: process i's data in cryod's memory (procs[i].memory), -1 or absent when gone.
  // `published`: the checkpoint `dir` holds, when it is published (its files may refer to
  // another's).
  void RefillFastpath(const std::vector<gpu::FastpathProcess>& procs, const std::string& dir,
                      const std::vector<int>& memfds = {},
                      const store::Manifest* published = nullptr);
  void PruneOpLogs();
  // Learns the pace of this node's checkpoints from those in the store (at start).
  void SeedPace();
  void RecoverEntry(const journal::Entry& e);

  EngineConfig cfg_;
  gpu::CopyShare copy_share_;  // the node's copy threads among drains at once
  EngineDeps d_;
  std::string signing_key_;
  std::atomic<bool> stopping_{false};
  // Entries Recover() left to RecoverInBackground, with the claims on their jobs.
  std::vector<std::pair<journal::Entry, std::unique_ptr<Claim>>> deferred_;
  std::thread recovery_;
  std::atomic<int64_t> stop_grace_end_ns_{0};
  // Whether cryod is stopping and its grace has passed (Stop).
  bool PastStopGrace() const {
    return stopping_.load() && absl::ToUnixNanos(absl::Now()) > stop_grace_end_ns_.load();
  }
  // What ends an operation's wait on a refill: its cancel, its deadline, or PastStopGrace.
  std::function<bool()> RefillStop(Operation* op, absl::Time deadline) const;
  std::unique_ptr<containerd::ImageContent> own_images_;
  JobControl jobs_;
  TestHooks hooks_;
  CheckpointPace pace_;
  std::unique_ptr<Transaction<CheckpointState>> checkpoint_txn_;
  std::unique_ptr<Transaction<RestoreState>> restore_txn_;
  absl::Mutex mu_;
  std::set<pid_t> busy_pids_ ABSL_GUARDED_BY(mu_);
  std::set<std::string> busy_ids_ ABSL_GUARDED_BY(mu_);
  // Checkpoints that checkpoints being written refer to (Claim::HoldReferences).
  std::multiset<std::string> held_refs_ ABSL_GUARDED_BY(mu_);
  // What the checkpoints in flight expect to write into the store (Claim::HoldSpace).
  uint64_t space_held_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t SpaceHeldByCheckpoints();
};

}  // namespace cryo::engine
