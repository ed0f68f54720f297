// cryo-cri-shim's life as a list of small steps on one shared state: each startup step returns
// ok, stop (a clean early exit, e.g. --help) or fatal; teardown steps always run.
#pragma once

#include <signal.h>

#include <memory>
#include <span>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "cri-shim/flags.h"
#include "cri-shim/metrics.h"
#include "cri-shim/metrics_file.h"
#include "cri-shim/shim_server.h"
#include "prometheus/exposer.h"
#include "prometheus/registry.h"

namespace cryo::shim {

struct AppState {
  std::vector<std::string> args;
  Options options;
  sigset_t stop_signals;
  std::shared_ptr<prometheus::Registry> registry;
  std::unique_ptr<ShimMetrics> metrics;
  std::unique_ptr<prometheus::Exposer> exposer;
  std::unique_ptr<MetricsFileWriter> metrics_file;
  std::unique_ptr<ShimServer> server;
};

struct StepOutcome {
  enum class Kind { kOk, kStop, kFatal };
  Kind kind = Kind::kOk;
  std::string message;

  static StepOutcome Ok() { return {}; }
  static StepOutcome Stop(std::string message = "") { return {Kind::kStop, std::move(message)}; }
  static StepOutcome Fatal(std::string message) { return {Kind::kFatal, std::move(message)}; }
};

struct Step {
  absl::string_view name;
  StepOutcome (*run)(AppState& state);
};

// Runs startup steps in order until the end, a stop or a fatal one, then all teardown steps.
// Returns the process exit code: 0 unless a step was fatal.
int RunSteps(AppState& state, std::span<const Step> startup, std::span<const Step> teardown);

// The shim's own steps (see app.cc for the list).
int RunShim(std::vector<std::string> args);

}  // namespace cryo::shim
