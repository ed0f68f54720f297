#include "daemon/gpu/plugin.h"

#include <dlfcn.h>

#include <cstddef>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "lib/base/json.h"
#include "lib/base/log.h"

namespace cryo::gpu {
namespace {

// A plugin's answers are small documents (device lists, facts, CRIU flags).
constexpr size_t kMaxPluginJsonBytes = 16u << 20;
constexpr int kMaxPluginJsonDepth = 32;

}  // namespace

absl::StatusOr<std::unique_ptr<Plugin>> Plugin::FromTable(const cryo_gpu_plugin_api* api,
                                                          const nlohmann::json& config,
                                                          void* dl_handle) {
  auto fail = [&](absl::Status s) {
    if (dl_handle != nullptr) ::dlclose(dl_handle);
    return s;
  };
  if (api == nullptr) return fail(absl::InvalidArgumentError("plugin table is NULL"));
  const char* name = api->struct_size >= offsetof(cryo_gpu_plugin_api, name) + sizeof(char*) &&
                             api->name != nullptr
                         ? api->name
                         : "?";
  if (api->abi_major != CRYO_GPU_PLUGIN_ABI_MAJOR) {
    return fail(absl::FailedPreconditionError(
        absl::StrCat("GPU plugin ", name, " has ABI ", api->abi_major, ".", api->abi_minor,
                     ", this cryod speaks ABI ", CRYO_GPU_PLUGIN_ABI_MAJOR, ".x")));
  }
  // Every hook of ABI 1.0 is required. Hooks of later minors are used only when struct_size
  // covers them and they are set: older plugins simply lack them.
  if (api->struct_size < offsetof(cryo_gpu_plugin_api, criu_options) + sizeof(void*) ||
      api->create == nullptr || api->destroy == nullptr || api->last_error == nullptr ||
      api->free_string == nullptr || api->status == nullptr || api->list_devices == nullptr ||
      api->discover == nullptr || api->lock == nullptr || api->checkpoint == nullptr ||
      api->restore == nullptr || api->unlock == nullptr || api->rollback == nullptr ||
      api->describe == nullptr || api->check_compatible == nullptr ||
      api->criu_options == nullptr) {
    return fail(absl::FailedPreconditionError(
        absl::StrCat("GPU plugin ", name, " lacks hooks required by ABI 1.0")));
  }
  std::unique_ptr<Plugin> p(new Plugin(api, dl_handle));
  p->name_ = name;
  p->version_ = api->version != nullptr ? api->version : "";
  std::string cfg = config.is_null() ? "{}" : config.dump();
  cryo_gpu_rc rc = api->create(cfg.c_str(), &p->handle_);
  if (rc != CRYO_GPU_OK) {
    absl::Status s = p->Error(rc, "create");
    p->handle_ = nullptr;
    return s;  // ~Plugin closes the library
  }
  // ABI 1.1: the plugin's messages go to cryod's log, named after the plugin.
  if (api->struct_size >= offsetof(cryo_gpu_plugin_api, set_log) + sizeof(void*) &&
      api->set_log != nullptr) {
    api->set_log(p->handle_, &Plugin::LogThunk, p.get());
  }
  return p;
}

absl::StatusOr<std::unique_ptr<Plugin>> Plugin::Open(const std::string& path,
                                                     const nlohmann::json& config) {
  // RTLD_LOCAL: two plugins may carry their own copies of shared helpers.
  void* dl = ::dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (dl == nullptr) {
    const char* err = ::dlerror();
    return absl::FailedPreconditionError(
        absl::StrCat("cannot load GPU plugin ", path, ": ", err ? err : "dlopen failed"));
  }
  auto entry = reinterpret_cast<cryo_gpu_plugin_entry_fn>(::dlsym(dl, CRYO_GPU_PLUGIN_ENTRY));
  if (entry == nullptr) {
    ::dlclose(dl);
    return absl::FailedPreconditionError(
        absl::StrCat(path, " is not a cryo GPU plugin (no ", CRYO_GPU_PLUGIN_ENTRY, ")"));
  }
  return FromTable(entry(), config, dl);
}

void Plugin::LogThunk(void* ctx, int32_t level, const char* msg) {
  const auto* self = static_cast<const Plugin*>(ctx);
  if (msg == nullptr) return;
  switch (level) {
    case CRYO_GPU_LOG_DEBUG:
      CRYO_LOG(Debug) << self->name_ << " plugin: " << msg;
      break;
    case CRYO_GPU_LOG_INFO:
      CRYO_LOG(Info) << self->name_ << " plugin: " << msg;
      break;
    case CRYO_GPU_LOG_WARNING:
      CRYO_LOG(Warning) << self->name_ << " plugin: " << msg;
      break;
    default:
      CRYO_LOG(Error) << self->name_ << " plugin: " << msg;
      break;
  }
}

Plugin::~Plugin() {
  if (handle_ != nullptr) api_->destroy(handle_);
  if (dl_ != nullptr) ::dlclose(dl_);
}

absl::Status Plugin::Error(cryo_gpu_rc rc, const char* hook) {
  const char* msg = api_->last_error(handle_);
  auto code = static_cast<absl::StatusCode>(rc);
  if (rc <= 0 || rc > 16) code = absl::StatusCode::kInternal;
  return absl::Status(
      code,
      absl::StrCat(name_, " plugin: ", msg != nullptr && *msg ? msg : "failed", " (", hook, ")"));
}

absl::StatusOr<nlohmann::json> Plugin::TakeJson(cryo_gpu_rc rc, char* out, const char* hook) {
  if (rc != CRYO_GPU_OK) {
    if (out != nullptr) api_->free_string(out);
    return Error(rc, hook);
  }
  if (out == nullptr) {
    return absl::InternalError(absl::StrCat(name_, " plugin: ", hook, " returned no JSON"));
  }
  auto j = json::Parse(absl::string_view(out, ::strnlen(out, kMaxPluginJsonBytes + 1)),
                       {kMaxPluginJsonBytes, kMaxPluginJsonDepth});
  api_->free_string(out);
  if (!j.ok()) {
    return absl::InternalError(
        absl::StrCat(name_, " plugin: ", hook, " returned bad JSON: ", j.status().message()));
  }
  return *std::move(j);
}

PluginStatus Plugin::Status() {
  PluginStatus st;
  st.name = name_;
  st.version = version_;
  char* out = nullptr;
  cryo_gpu_rc rc = api_->status(handle_, &out);
  auto j = TakeJson(rc, out, "status");
  if (!j.ok()) {
    st.detail = std::string(j.status().message());
    return st;
  }
  json::Fields f(*j, absl::StrCat(name_, " plugin: status"));
  absl::Status s =
      j->is_object()
          ? f.Bool("available", &st.available)
          : absl::InvalidArgumentError(absl::StrCat(name_, " plugin: status is not an object"));
  if (s.ok()) s = f.Str("detail", &st.detail);
  if (!s.ok()) {
    st.available = false;
    st.detail = std::string(s.message());
  }
  return st;
}

absl::StatusOr<nlohmann::json> Plugin::ListDevices() {
  char* out = nullptr;
  cryo_gpu_rc rc = api_->list_devices(handle_, &out);
  return TakeJson(rc, out, "list_devices");
}

absl::StatusOr<nlohmann::json> Plugin::Discover(const std::vector<pid_t>& pids) {
  std::vector<int32_t> p(pids.begin(), pids.end());
  char* out = nullptr;
  cryo_gpu_rc rc = api_->discover(handle_, p.data(), p.size(), &out);
  return TakeJson(rc, out, "discover");
}

absl::Status Plugin::Lock(pid_t pid, uint32_t timeout_ms) {
  cryo_gpu_rc rc = api_->lock(handle_, pid, timeout_ms);
  return rc == CRYO_GPU_OK ? absl::OkStatus() : Error(rc, "lock");
}

absl::Status Plugin::Checkpoint(pid_t pid) {
  cryo_gpu_rc rc = api_->checkpoint(handle_, pid);
  return rc == CRYO_GPU_OK ? absl::OkStatus() : Error(rc, "checkpoint");
}

absl::Status Plugin::Restore(pid_t pid, const nlohmann::json& facts, const DeviceMap& map) {
  std::vector<cryo_gpu_device_pair> pairs;
  for (const auto& [from, to] : map) pairs.push_back({from.c_str(), to.c_str()});
  std::string f = facts.is_null() ? "" : facts.dump();
  cryo_gpu_rc rc =
      api_->restore(handle_, pid, f.empty() ? nullptr : f.c_str(), pairs.data(), pairs.size());
  return rc == CRYO_GPU_OK ? absl::OkStatus() : Error(rc, "restore");
}

absl::Status Plugin::Unlock(pid_t pid) {
  cryo_gpu_rc rc = api_->unlock(handle_, pid);
  return rc == CRYO_GPU_OK ? absl::OkStatus() : Error(rc, "unlock");
}

absl::Status Plugin::Rollback(pid_t pid) {
  cryo_gpu_rc rc = api_->rollback(handle_, pid);
  return rc == CRYO_GPU_OK ? absl::OkStatus() : Error(rc, "rollback");
}

absl::StatusOr<nlohmann::json> Plugin::Describe(const std::vector<GpuProcess>& procs) {
  nlohmann::json arr = nlohmann::json::array();
  for (const GpuProcess& g : procs) arr.push_back({{"pid", g.pid}, {"facts", g.facts}});
  std::string s = arr.dump();
  char* out = nullptr;
  cryo_gpu_rc rc = api_->describe(handle_, s.c_str(), &out);
  return TakeJson(rc, out, "describe");
}

absl::StatusOr<nlohmann::json> Plugin::CheckCompatible(const nlohmann::json& section,
                                                       const nlohmann::json& request) {
  std::string s = section.dump();
  std::string r = request.dump();
  char* out = nullptr;
  cryo_gpu_rc rc = api_->check_compatible(handle_, s.c_str(), r.c_str(), &out);
  return TakeJson(rc, out, "check_compatible");
}

absl::StatusOr<nlohmann::json> Plugin::CriuOptions(const std::vector<pid_t>& pids) {
  std::vector<int32_t> p(pids.begin(), pids.end());
  char* out = nullptr;
  cryo_gpu_rc rc = api_->criu_options(handle_, p.data(), p.size(), &out);
  return TakeJson(rc, out, "criu_options");
}

}  // namespace cryo::gpu
