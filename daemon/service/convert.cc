#include "daemon/service/convert.h"

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"

namespace cryo::service {

engine::CheckpointRequest FromProto(const v1::CheckpointRequest& r, absl::Time deadline) {
  engine::CheckpointRequest out;
  out.pid = r.pid();
  out.container_id = r.container_id();
  out.checkpoint_id = r.checkpoint_id();
  out.workload = r.workload();
  out.leave_running = r.leave_running();
  out.plan = r.plan();
  out.shell_job = r.shell_job();
  const v1::CriuOptions& c = r.criu();
  if (c.has_tcp_established()) out.criu.tcp_established = c.tcp_established();
  if (r.tcp_established()) out.criu.tcp_established = true;
  if (c.has_tcp_close()) out.criu.tcp_close = c.tcp_close();
  if (c.has_skip_in_flight()) out.criu.skip_in_flight = c.skip_in_flight();
  if (c.has_link_remap()) out.criu.link_remap = c.link_remap();
  if (c.has_ghost_limit_bytes()) out.criu.ghost_limit = c.ghost_limit_bytes();
  if (c.has_ext_unix_sk()) out.criu.ext_unix_sk = c.ext_unix_sk();
  out.labels = {r.labels().begin(), r.labels().end()};
  out.gpu_lock_timeout = absl::Milliseconds(r.gpu_lock_timeout_ms());
  out.export_archive = r.export_archive();
  out.deadline = deadline;
  return out;
}

v1::CheckpointRequest ToProto(const engine::CheckpointRequest& r) {
  v1::CheckpointRequest out;
  out.set_pid(r.pid);
  out.set_container_id(r.container_id);
  out.set_checkpoint_id(r.checkpoint_id);
  out.set_workload(r.workload);
  out.set_leave_running(r.leave_running);
  out.set_plan(r.plan);
  out.set_shell_job(r.shell_job);
  const auto& o = r.criu;
  v1::CriuOptions* c = out.mutable_criu();
  if (o.tcp_established) c->set_tcp_established(*o.tcp_established);
  if (o.tcp_close) c->set_tcp_close(*o.tcp_close);
  if (o.skip_in_flight) c->set_skip_in_flight(*o.skip_in_flight);
  if (o.link_remap) c->set_link_remap(*o.link_remap);
  if (o.ghost_limit) c->set_ghost_limit_bytes(*o.ghost_limit);
  if (o.ext_unix_sk) c->set_ext_unix_sk(*o.ext_unix_sk);
  for (const auto& [k, v] : r.labels) (*out.mutable_labels())[k] = v;
  out.set_gpu_lock_timeout_ms(static_cast<uint32_t>(absl::ToInt64Milliseconds(r.gpu_lock_timeout)));
  out.set_export_archive(r.export_archive);
  return out;
}

engine::RestoreRequest FromProto(const v1::RestoreRequest& r, absl::Time deadline) {
  engine::RestoreRequest out;
  out.checkpoint_id = r.checkpoint_id();
  out.container_id = r.container_id();
  out.pid_wait_timeout = absl::Milliseconds(r.pid_wait_timeout_ms());
  out.gpu_map = {r.gpu_map().begin(), r.gpu_map().end()};
  out.deadline = deadline;
  return out;
}

v1::Stage ToProto(engine::Stage s) { return static_cast<v1::Stage>(static_cast<int>(s)); }

v1::Progress ToProto(const engine::Progress& p) {
  v1::Progress out;
  out.set_stage(ToProto(p.stage));
  out.set_bytes_done(p.bytes_done);
  out.set_bytes_total(p.bytes_total);
  out.set_elapsed_ms(p.elapsed_ms);
  out.set_message(p.message);
  return out;
}

v1::CheckpointInfo ToProto(const store::Manifest& m, bool with_files) {
  v1::CheckpointInfo i;
  i.set_checkpoint_id(m.id);
  i.set_workload(m.workload);
  i.set_node_name(m.node);
  i.set_created_at(m.created_at);
  i.set_root_pid(m.root_pid);
  for (int p : m.pids) i.add_pids(p);
  i.set_command(m.command);
  i.set_size_bytes(m.TotalBytes());
  i.set_referenced_bytes(m.ReferencedBytes());
  i.set_file_count(m.files.size());
  i.set_criu_version(m.criu_version);
  i.set_kernel(m.kernel);
  i.set_leave_running(m.leave_running);
  i.set_kind(store::KindName(m.kind));
  i.set_damaged(m.damaged);
  for (const auto& f : m.gpu_fastpath) {
    i.set_gpu_fastpath_bytes(i.gpu_fastpath_bytes() + f.bytes);
    i.set_gpu_driver_bytes(i.gpu_driver_bytes() + f.driver_bytes);
  }
  for (const auto& [k, v] : m.labels) (*i.mutable_labels())[k] = v;
  for (const auto& [k, v] : m.stage_ms) (*i.mutable_stage_ms())[k] = v;
  if (m.job) {
    i.set_job(absl::StrCat(m.job->namespace_, "/", m.job->job));
    i.set_job_checkpoint(m.job->job_checkpoint);
    i.set_job_member(m.job->member);
  }
  if (with_files) {
    for (const auto& f : m.files) {
      auto* fi = i.add_files();
      fi->set_path(f.path);
      fi->set_size(f.size);
      fi->set_checksum(f.checksum);
    }
    i.set_manifest_json(store::ManifestToJson(m));
  }
  return i;
}

v1::CheckpointInfo ToProto(const engine::CheckpointRecord& r, bool with_files) {
  v1::CheckpointInfo i = ToProto(r.manifest, with_files);
  if (!r.store_path.empty()) i.set_store_path(r.store_path);
  i.set_job_uncommitted(r.job_uncommitted);
  return i;
}

v1::ListCheckpointsResponse ToListResponse(const std::vector<engine::CheckpointRecord>& records) {
  v1::ListCheckpointsResponse out;
  size_t bytes = 0;
  for (const auto& r : records) {
    v1::CheckpointInfo i = ToProto(r, /*with_files=*/false);
    if (i.ByteSizeLong() > kMaxListEntryBytes) i.clear_pids();
    // Tag and length of the repeated field's entry: a few bytes more than the entry itself.
    const size_t size = i.ByteSizeLong() + 8;
    if (bytes + size > kMaxListBytes) {
      out.set_omitted(out.omitted() + 1);
      continue;
    }
    bytes += size;
    *out.add_checkpoints() = std::move(i);
  }
  return out;
}

v1::CheckpointInfo ToProto(const engine::CheckpointResult& r) {
  v1::CheckpointInfo i = ToProto(r.manifest, false);
  i.set_store_path(r.store_path);
  if (!r.not_taken.empty()) {
    i.set_not_taken(r.not_taken);
    i.set_work_lost_s(absl::ToInt64Seconds(r.work_lost));
  }
  return i;
}

v1::RestoreResult ToProto(const engine::RestoreResult& r) {
  v1::RestoreResult out;
  out.set_checkpoint_id(r.checkpoint_id);
  out.set_root_pid(r.root_pid);
  for (const auto& [k, v] : r.stage_ms) (*out.mutable_stage_ms())[k] = v;
  return out;
}

v1::NodeInfoResponse ToProto(const engine::NodeFacts& n,
                             const std::vector<std::shared_ptr<engine::Operation>>& running) {
  v1::NodeInfoResponse r;
  r.set_node_name(n.node_name);
  r.set_cryo_version(n.cryo_version);
  r.set_kernel(n.kernel);
  r.set_arch(n.arch);
  r.set_criu_version(n.criu_version);
  r.set_criu_path(n.criu_path);
  r.set_criu_check_error(n.criu_check_error);
  r.set_store_path(n.store_path);
  r.set_store_free_bytes(n.store_free_bytes);
  r.set_gpu_fast_path_enabled(n.fastpath_enabled);
  r.set_gpu_fast_path_library(n.fastpath_library);
  r.set_gpu_fast_path_library_present(n.fastpath_library_present);
  for (const auto& p : n.plugins) {
    auto* pi = r.add_plugins();
    pi->set_name(p.name);
    pi->set_version(p.version);
    pi->set_available(p.available);
    pi->set_detail(p.detail);
  }
  for (const auto& g : n.gpus) {
    auto* gi = r.add_gpus();
    gi->set_vendor(g.vendor);
    gi->set_uuid(g.uuid);
    gi->set_name(g.name);
    gi->set_chip(g.chip);
    gi->set_memory_total_bytes(g.memory_total_bytes);
    gi->set_memory_free_bytes(g.memory_free_bytes);
    gi->set_driver_version(g.driver_version);
  }
  for (const auto& op : running) {
    auto* o = r.add_operations();
    o->set_operation_id(op->id());
    o->set_kind(op->kind());
    o->set_target(op->target());
    o->set_stage(ToProto(op->stage()));
  }
  return r;
}

// gRPC's "no deadline" is the largest time_point.
absl::Time DeadlineOf(const grpc::ServerContext* ctx) {
  return ctx->deadline() == std::chrono::system_clock::time_point::max()
             ? absl::InfiniteFuture()
             : absl::FromChrono(ctx->deadline());
}

engine::JobCheckpointRequest FromProto(const v1::CheckpointJobRequest& r, absl::Time deadline) {
  engine::JobCheckpointRequest out;
  out.namespace_ = r.namespace_();
  out.job = r.job();
  out.id = r.job_checkpoint_id();
  out.deadline = deadline;
  if (r.cut_timeout_ms() > 0) out.cut_timeout = absl::Milliseconds(r.cut_timeout_ms());
  out.member_defaults = FromProto(r.member_defaults(), deadline);
  out.job_size = static_cast<int>(std::min<uint32_t>(r.job_size(), 1u << 20));
  out.export_container = r.export_container();
  out.plan = r.plan();
  for (const auto& m : r.members()) {
    out.members.push_back({m.member(), FromProto(m.checkpoint(), deadline), m.node()});
  }
  return out;
}

engine::JobRestoreRequest FromProto(const v1::RestoreJobRequest& r, absl::Time deadline) {
  engine::JobRestoreRequest out;
  out.namespace_ = r.namespace_();
  out.job = r.job();
  out.id = r.job_checkpoint_id();
  out.pid_wait_timeout = absl::Milliseconds(r.pid_wait_timeout_ms());
  out.deadline = deadline;
  return out;
}

v1::CheckpointJobRequest ToProto(const engine::JobCheckpointRequest& r) {
  v1::CheckpointJobRequest out;
  out.set_namespace_(r.namespace_);
  out.set_job(r.job);
  out.set_job_checkpoint_id(r.id);
  out.set_cut_timeout_ms(static_cast<uint32_t>(absl::ToInt64Milliseconds(r.cut_timeout)));
  for (const auto& m : r.members) {
    v1::JobMember* jm = out.add_members();
    jm->set_member(m.member);
    jm->set_node(m.node);
    *jm->mutable_checkpoint() = ToProto(m.req);
  }
  *out.mutable_member_defaults() = ToProto(r.member_defaults);
  out.set_job_size(static_cast<uint32_t>(std::max(r.job_size, 0)));
  out.set_export_container(r.export_container);
  out.set_plan(r.plan);
  return out;
}

v1::GpuCutWord ToProto(int round, const gpu::CutWord& w) {
  v1::GpuCutWord p;
  p.set_round(static_cast<uint32_t>(round));
  p.set_collectives(w.collectives);
  p.set_outcome(w.outcome == gpu::CutWord::kBusy     ? v1::GpuCutWord::BUSY
                : w.outcome == gpu::CutWord::kFailed ? v1::GpuCutWord::FAILED
                                                     : v1::GpuCutWord::OK);
  p.set_why(w.why);
  return p;
}

gpu::CutWord FromProto(const v1::GpuCutWord& p) {
  gpu::CutWord w;
  w.collectives = p.collectives();
  // An outcome this cryod does not know is no reason to go on.
  w.outcome = p.outcome() == v1::GpuCutWord::OK     ? gpu::CutWord::kOk
              : p.outcome() == v1::GpuCutWord::BUSY ? gpu::CutWord::kBusy
                                                    : gpu::CutWord::kFailed;
  w.why = p.why();
  if (w.outcome == gpu::CutWord::kFailed && w.why.empty()) w.why = "a member failed at the GPU cut";
  return w;
}

v1::JobCheckpointInfo ToProto(const engine::JobCheckpointResult& r) {
  v1::JobCheckpointInfo i;
  i.set_job_checkpoint_id(r.record.id);
  i.set_namespace_(r.record.namespace_);
  i.set_job(r.record.job);
  i.set_created_at(r.record.created_at);
  for (const auto& p : r.parts) *i.add_parts() = ToProto(p);
  for (const auto& [k, v] : r.record.cut_ms) (*i.mutable_cut_ms())[k] = v;
  i.set_not_taken(r.not_taken);
  return i;
}

v1::OperationEvent ResultEvent(const std::string& op_id, const engine::OperationResult& r) {
  v1::OperationEvent ev;
  ev.set_operation_id(op_id);
  if (const auto* c = std::get_if<engine::CheckpointResult>(&r)) {
    *ev.mutable_checkpoint() = ToProto(*c);
  } else if (const auto* rr = std::get_if<engine::RestoreResult>(&r)) {
    *ev.mutable_restored() = ToProto(*rr);
  } else if (const auto* j = std::get_if<engine::JobCheckpointResult>(&r)) {
    *ev.mutable_job_checkpoint() = ToProto(*j);
  } else if (const auto* jr = std::get_if<engine::JobRestoreResult>(&r)) {
    for (const auto& [name, m] : jr->members) {
      (*ev.mutable_job_restored()->mutable_members())[name] = ToProto(m);
    }
  }
  return ev;
}

}  // namespace cryo::service
