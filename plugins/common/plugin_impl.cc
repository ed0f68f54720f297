#include "plugins/common/plugin_impl.h"

#include <cstdlib>
#include <cstring>
#include <exception>
#include <string>

namespace cryo::gpu {
namespace {

// One per shared object and thread: the manager reads it right after the failing call.
thread_local std::string t_last_error;

PluginImpl* Impl(cryo_gpu_plugin* p) { return reinterpret_cast<PluginImpl*>(p); }

cryo_gpu_rc Fail(const absl::Status& s) {
  t_last_error = std::string(s.message());
  int code = static_cast<int>(s.code());
  return code == 0 ? CRYO_GPU_INTERNAL : code;
}

char* Dup(const std::string& s) {
  char* out = static_cast<char*>(std::malloc(s.size() + 1));
  if (out != nullptr) std::memcpy(out, s.c_str(), s.size() + 1);
  return out;
}

cryo_gpu_rc Emit(const absl::StatusOr<nlohmann::json>& j, char** out) {
  if (!j.ok()) return Fail(j.status());
  if (out == nullptr) return Fail(absl::InvalidArgumentError("out_json is NULL"));
  *out = Dup(j->dump());
  return CRYO_GPU_OK;
}

// Runs `f` with exceptions (JSON type errors, bad_alloc) turned into INTERNAL.
template <typename F>
cryo_gpu_rc Guard(F&& f) {
  try {
    return f();
  } catch (const std::exception& e) {
    return Fail(absl::InternalError(std::string("plugin exception: ") + e.what()));
  } catch (...) {
    return Fail(absl::InternalError("plugin exception"));
  }
}

std::vector<pid_t> Pids(const int32_t* pids, size_t n) {
  std::vector<pid_t> v;
  for (size_t i = 0; i < n && pids != nullptr; ++i) v.push_back(pids[i]);
  return v;
}

nlohmann::json ParseOrNull(const char* s) {
  if (s == nullptr || *s == '\0') return nullptr;
  return nlohmann::json::parse(s, nullptr, /*allow_exceptions=*/false);
}

void Destroy(cryo_gpu_plugin* p) { delete Impl(p); }
const char* LastError(cryo_gpu_plugin*) { return t_last_error.c_str(); }
void FreeString(char* s) { std::free(s); }

cryo_gpu_rc StatusHook(cryo_gpu_plugin* p, char** out) {
  return Guard([&] { return Emit(Impl(p)->Status(), out); });
}
cryo_gpu_rc ListDevicesHook(cryo_gpu_plugin* p, char** out) {
  return Guard([&] { return Emit(Impl(p)->ListDevices(), out); });
}
cryo_gpu_rc DiscoverHook(cryo_gpu_plugin* p, const int32_t* pids, size_t n, char** out) {
  return Guard([&] { return Emit(Impl(p)->Discover(Pids(pids, n)), out); });
}
cryo_gpu_rc StatusOnly(const absl::Status& s) { return s.ok() ? CRYO_GPU_OK : Fail(s); }
cryo_gpu_rc LockHook(cryo_gpu_plugin* p, int32_t pid, uint32_t timeout_ms) {
  return Guard([&] { return StatusOnly(Impl(p)->Lock(pid, timeout_ms)); });
}
cryo_gpu_rc CheckpointHook(cryo_gpu_plugin* p, int32_t pid) {
  return Guard([&] { return StatusOnly(Impl(p)->Checkpoint(pid)); });
}
cryo_gpu_rc RestoreHook(cryo_gpu_plugin* p, int32_t pid, const char* facts,
                        const cryo_gpu_device_pair* map, size_t n) {
  return Guard([&]() -> cryo_gpu_rc {
    DeviceMap m;
    for (size_t i = 0; i < n; ++i) {
      if (map[i].from_uuid == nullptr || map[i].to_uuid == nullptr) {
        return Fail(absl::InvalidArgumentError("device pair with a NULL uuid"));
      }
      m[map[i].from_uuid] = map[i].to_uuid;
    }
    nlohmann::json f = ParseOrNull(facts);
    if (f.is_discarded()) return Fail(absl::InvalidArgumentError("facts_json is not JSON"));
    return StatusOnly(Impl(p)->Restore(pid, f, m));
  });
}
cryo_gpu_rc UnlockHook(cryo_gpu_plugin* p, int32_t pid) {
  return Guard([&] { return StatusOnly(Impl(p)->Unlock(pid)); });
}
cryo_gpu_rc RollbackHook(cryo_gpu_plugin* p, int32_t pid) {
  return Guard([&] { return StatusOnly(Impl(p)->Rollback(pid)); });
}
cryo_gpu_rc DescribeHook(cryo_gpu_plugin* p, const char* procs, char** out) {
  return Guard([&]() -> cryo_gpu_rc {
    nlohmann::json j = ParseOrNull(procs);
    if (j.is_discarded()) return Fail(absl::InvalidArgumentError("procs_json is not JSON"));
    if (j.is_null()) j = nlohmann::json::array();
    return Emit(Impl(p)->Describe(j), out);
  });
}
cryo_gpu_rc CheckCompatibleHook(cryo_gpu_plugin* p, const char* section, const char* request,
                                char** out) {
  return Guard([&]() -> cryo_gpu_rc {
    nlohmann::json s = ParseOrNull(section);
    nlohmann::json r = ParseOrNull(request);
    if (s.is_discarded() || r.is_discarded()) {
      return Fail(absl::InvalidArgumentError("section_json or request_json is not JSON"));
    }
    if (r.is_null()) r = nlohmann::json::object();
    return Emit(Impl(p)->CheckCompatible(s, r), out);
  });
}
cryo_gpu_rc CriuOptionsHook(cryo_gpu_plugin* p, const int32_t* pids, size_t n, char** out) {
  return Guard([&] { return Emit(Impl(p)->CriuOptions(Pids(pids, n)), out); });
}
void SetLogHook(cryo_gpu_plugin* p, cryo_gpu_log_fn fn, void* ctx) { Impl(p)->SetLog(fn, ctx); }

}  // namespace

void FillPluginApi(cryo_gpu_plugin_api* api, const char* name, const char* version,
                   cryo_gpu_rc (*create)(const char*, cryo_gpu_plugin**)) {
  *api = cryo_gpu_plugin_api{};
  api->struct_size = sizeof(cryo_gpu_plugin_api);
  api->abi_major = CRYO_GPU_PLUGIN_ABI_MAJOR;
  api->abi_minor = CRYO_GPU_PLUGIN_ABI_MINOR;
  api->name = name;
  api->version = version;
  api->create = create;
  api->destroy = Destroy;
  api->last_error = LastError;
  api->free_string = FreeString;
  api->status = StatusHook;
  api->list_devices = ListDevicesHook;
  api->discover = DiscoverHook;
  api->lock = LockHook;
  api->checkpoint = CheckpointHook;
  api->restore = RestoreHook;
  api->unlock = UnlockHook;
  api->rollback = RollbackHook;
  api->describe = DescribeHook;
  api->check_compatible = CheckCompatibleHook;
  api->criu_options = CriuOptionsHook;
  api->set_log = SetLogHook;
}

cryo_gpu_rc CreatePluginWith(PluginFactory factory, const char* config_json,
                             cryo_gpu_plugin** out) {
  return Guard([&]() -> cryo_gpu_rc {
    if (out == nullptr) return Fail(absl::InvalidArgumentError("out is NULL"));
    nlohmann::json config = ParseOrNull(config_json);
    if (config.is_discarded()) return Fail(absl::InvalidArgumentError("config is not JSON"));
    if (config.is_null()) config = nlohmann::json::object();
    auto impl = factory(config);
    if (!impl.ok()) return Fail(impl.status());
    *out = WrapPluginImpl(*std::move(impl));
    return CRYO_GPU_OK;
  });
}

cryo_gpu_plugin* WrapPluginImpl(std::unique_ptr<PluginImpl> impl) {
  return reinterpret_cast<cryo_gpu_plugin*>(impl.release());
}

}  // namespace cryo::gpu
