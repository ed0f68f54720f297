#include "cri-shim/app.h"

#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/mutex.h"
#include "cri-shim/handlers/handlers.h"
#include "grpcpp/client_context.h"
#include "lib/base/log.h"
#include "lib/metrics/registry.h"

namespace cryo::shim {
namespace {

StepOutcome ParseFlagsStep(AppState& s) {
  absl::StatusOr<Options> opts = ParseFlags(s.args);
  if (!opts.ok()) {
    fprintf(stderr, "cryo-cri-shim: %s\n%s", std::string(opts.status().message()).c_str(),
            UsageText().c_str());
    return StepOutcome::Fatal(std::string(opts.status().message()));
  }
  s.options = *opts;
  if (s.options.show_help) {
    fputs(UsageText().c_str(), stdout);
    return StepOutcome::Stop();
  }
  return StepOutcome::Ok();
}

// Debian's abseil checks every Mutex acquisition for lock-order cycles (a debugging aid);
// gRPC locks several absl::Mutexes per call, so this is a measurable share of the shim's CPU.
StepOutcome TuneRuntimeStep(AppState& s) {
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
  return StepOutcome::Ok();
}

StepOutcome ConfigureLoggingStep(AppState& s) {
  SetLogProgram("cryo-cri-shim");
  SetLogLevel(s.options.log_level);
  CRYO_LOG(Info) << "starting cryo-cri-shim " << CRYO_VERSION << ": listen " << s.options.listen
                 << ", runtime " << s.options.runtime_endpoint;
  return StepOutcome::Ok();
}

// Before any thread exists, so that every thread inherits the mask and only sigwait sees them.
StepOutcome BlockSignalsStep(AppState& s) {
  sigemptyset(&s.stop_signals);
  sigaddset(&s.stop_signals, SIGINT);
  sigaddset(&s.stop_signals, SIGTERM);
  if (int err = pthread_sigmask(SIG_BLOCK, &s.stop_signals, nullptr); err != 0) {
    return StepOutcome::Fatal(absl::StrCat("pthread_sigmask: ", strerror(err)));
  }
  signal(SIGPIPE, SIG_IGN);
  return StepOutcome::Ok();
}

StepOutcome CreateMetricsStep(AppState& s) {
  s.registry = metrics::NewRegistry("cryo-cri-shim");
  absl::StatusOr<std::unique_ptr<ShimMetrics>> metrics = ShimMetrics::Create(s.registry);
  if (!metrics.ok()) return StepOutcome::Fatal(std::string(metrics.status().message()));
  s.metrics = std::move(*metrics);
  return StepOutcome::Ok();
}

StepOutcome StartMetricsEndpointStep(AppState& s) {
  if (s.options.metrics_address.empty()) {
    CRYO_LOG(Info) << "metrics endpoint disabled";
    return StepOutcome::Ok();
  }
  try {
    s.exposer = std::make_unique<prometheus::Exposer>(s.options.metrics_address);
  } catch (const std::exception& e) {
    return StepOutcome::Fatal(
        absl::StrCat("metrics endpoint on ", s.options.metrics_address, ": ", e.what()));
  }
  s.exposer->RegisterCollectable(s.registry);
  std::vector<int> ports = s.exposer->GetListeningPorts();
  CRYO_LOG(Info) << "metrics on http://" << s.options.metrics_address << "/metrics (port "
                 << absl::StrJoin(ports, ",") << ")";
  return StepOutcome::Ok();
}

StepOutcome StartMetricsFileStep(AppState& s) {
  if (s.options.metrics_file.empty()) return StepOutcome::Ok();
  auto w = MetricsFileWriter::Start(s.registry, s.options.metrics_file,
                                    absl::Seconds(s.options.metrics_file_interval_s));
  if (!w.ok()) return StepOutcome::Fatal(absl::StrCat("--metrics-file: ", w.status().message()));
  s.metrics_file = std::move(*w);
  CRYO_LOG(Info) << "metrics written to " << s.options.metrics_file << " every "
                 << s.options.metrics_file_interval_s << " s";
  return StepOutcome::Ok();
}

StepOutcome StartServerStep(AppState& s) {
  HandlerDeps deps;
  deps.annotation_prefix = s.options.annotation_prefix;
  deps.init_path = s.options.init_path;
  deps.fastpath_library = s.options.fastpath_library;
  deps.checkpointed_exit_code = s.options.checkpointed_exit_code;
  deps.checkpoint_min_grace_s = s.options.checkpoint_min_grace_s;
  deps.cryod = NewCryodClient(s.options.cryod_socket);
  deps.metrics = s.metrics.get();
  // containerd serves its image API on the CRI socket (checkpoint images are read there).
  if (auto images = containerd::ConnectImageContent(s.options.runtime_endpoint); images.ok()) {
    deps.images = std::move(*images);
  }
  if (::access(deps.init_path.c_str(), X_OK) != 0) {
    // Opted-in containers would fail to start; others are unaffected, so serve anyway.
    CRYO_LOG(Warning) << "cryo-init not found at " << deps.init_path
                      << ": containers of opted-in pods will fail to start (see --init-path)";
  }
  absl::StatusOr<OwnedMethods> owned = DefaultOwnedMethods(deps);
  if (!owned.ok()) return StepOutcome::Fatal(std::string(owned.status().message()));
  absl::StatusOr<std::unique_ptr<ShimServer>> server = ShimServer::Create(
      {s.options.listen, s.options.runtime_endpoint}, std::move(*owned), s.metrics.get());
  if (!server.ok()) return StepOutcome::Fatal(std::string(server.status().message()));
  s.server = std::move(*server);
  CRYO_LOG(Info) << "serving CRI on unix:" << s.options.listen;
  return StepOutcome::Ok();
}

// Informational only: the shim serves (and answers UNAVAILABLE) while the runtime is down.
StepOutcome ProbeRuntimeStep(AppState& s) {
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(2));
  runtime::v1::VersionRequest req;
  req.set_version("v1");
  runtime::v1::VersionResponse resp;
  grpc::Status st = s.server->runtime().runtime().Version(&ctx, req, &resp);
  if (st.ok()) {
    CRYO_LOG(Info) << "runtime: " << resp.runtime_name() << " " << resp.runtime_version()
                   << " (CRI " << resp.runtime_api_version() << ")";
  } else {
    CRYO_LOG(Warning) << "runtime at " << s.options.runtime_endpoint
                      << " not answering yet: " << st.error_message();
  }
  return StepOutcome::Ok();
}

StepOutcome WaitForSignalStep(AppState& s) {
  int sig = 0;
  if (int err = sigwait(&s.stop_signals, &sig); err != 0) {
    return StepOutcome::Fatal(absl::StrCat("sigwait: ", strerror(err)));
  }
  CRYO_LOG(Info) << "received " << strsignal(sig) << ", shutting down";
  return StepOutcome::Ok();
}

StepOutcome StopServerStep(AppState& s) {
  if (s.server != nullptr) {
    s.server->Shutdown(absl::Seconds(5));
    s.server.reset();
  }
  return StepOutcome::Ok();
}

StepOutcome StopMetricsEndpointStep(AppState& s) {
  s.exposer.reset();
  s.metrics_file.reset();
  return StepOutcome::Ok();
}

constexpr Step kStartup[] = {
    {"parse-flags", ParseFlagsStep},
    {"configure-logging", ConfigureLoggingStep},
    {"tune-runtime", TuneRuntimeStep},
    {"block-signals", BlockSignalsStep},
    {"create-metrics", CreateMetricsStep},
    {"start-metrics-endpoint", StartMetricsEndpointStep},
    {"start-metrics-file", StartMetricsFileStep},
    {"start-server", StartServerStep},
    {"probe-runtime", ProbeRuntimeStep},
    {"wait-for-signal", WaitForSignalStep},
};

constexpr Step kTeardown[] = {
    {"stop-server", StopServerStep},
    {"stop-metrics-endpoint", StopMetricsEndpointStep},
};

}  // namespace

int RunSteps(AppState& state, std::span<const Step> startup, std::span<const Step> teardown) {
  int code = 0;
  for (const Step& step : startup) {
    StepOutcome out = step.run(state);
    if (out.kind == StepOutcome::Kind::kOk) continue;
    if (out.kind == StepOutcome::Kind::kFatal) {
      CRYO_LOG(Error) << "step " << step.name << " failed: " << out.message;
      code = 1;
    } else if (!out.message.empty()) {
      CRYO_LOG(Info) << "step " << step.name << ": " << out.message;
    }
    break;
  }
  for (const Step& step : teardown) {
    StepOutcome out = step.run(state);
    if (out.kind == StepOutcome::Kind::kFatal) {
      CRYO_LOG(Error) << "teardown step " << step.name << " failed: " << out.message;
      code = 1;
    }
  }
  return code;
}

int RunShim(std::vector<std::string> args) {
  AppState state;
  state.args = std::move(args);
  return RunSteps(state, kStartup, kTeardown);
}

}  // namespace cryo::shim
