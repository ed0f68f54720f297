#include "cri-shim/flags.h"

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/strip.h"
#include "lib/base/flags.h"
#include "lib/contract/cryo_init_protocol.h"

namespace cryo::shim {

namespace {

// Declares every flag against `o` (and `level`, parsed after).
void Declare(flags::FlagSet& fs, Options& o, std::string& level) {
  fs.String("listen", &o.listen,
            "unix socket to serve CRI on (what kubelet's "
            "--container-runtime-endpoint names)",
            "PATH");
  fs.String("runtime-endpoint", &o.runtime_endpoint,
            "containerd or CRI-O socket, unix:///path or /path", "ADDR");
  fs.String("cryod-socket", &o.cryod_socket, "cryod's socket", "PATH");
  fs.String("annotation-prefix", &o.annotation_prefix,
            "prefix of the pod annotations P/checkpoint-on-stop, P/resume, ...", "P");
  fs.String("init-path", &o.init_path, "host path of cryo-init, mounted into opted-in containers",
            "PATH");
  fs.String("fastpath-library", &o.fastpath_library,
            "host path of the GPU fast-path library, preloaded into pods that ask for it", "PATH");
  fs.String("metrics-address", &o.metrics_address,
            "Prometheus endpoint HOST:PORT; empty disables it", "HOST:PORT");
  fs.String("metrics-file", &o.metrics_file,
            "also write the metrics to this file (Prometheus' text format), for cryod's "
            "/metrics/shim; empty: no file",
            "PATH");
  fs.Int("metrics-file-interval-seconds", &o.metrics_file_interval_s,
         "how often --metrics-file is rewritten (1..300)", "SECONDS");
  fs.String("log-level", &level, "debug, info, warning or error", "LEVEL");
  fs.Int("checkpointed-exit-code", &o.checkpointed_exit_code,
         "exit code of a container stopped after its checkpoint (1..124)");
  fs.Int("checkpoint-min-grace-seconds", &o.checkpoint_min_grace_s,
         "stops giving less grace are not checkpointed (3 skips force deletes)", "SECONDS");
}

}  // namespace

std::string UsageText() {
  Options o;
  std::string level = "info";
  flags::FlagSet fs;
  Declare(fs, o, level);
  return "usage: cryo-cri-shim [flags]\n\n" + fs.Usage();
}

absl::StatusOr<std::string> UnixEndpointPath(absl::string_view endpoint) {
  absl::string_view path = endpoint;
  if (absl::ConsumePrefix(&path, "unix://")) {
    // unix:///abs/path: what remains starts with '/'.
  } else if (absl::ConsumePrefix(&path, "unix:")) {
  }
  if (path.empty() || path[0] != '/') {
    return absl::InvalidArgumentError(absl::StrCat(
        "endpoint \"", endpoint, "\" is not a unix socket (want unix:///path or /path)"));
  }
  return std::string(path);
}

absl::StatusOr<std::string> NormalizeUnixEndpoint(absl::string_view endpoint) {
  absl::StatusOr<std::string> path = UnixEndpointPath(endpoint);
  if (!path.ok()) return path.status();
  return absl::StrCat("unix://", *path);
}

absl::StatusOr<Options> ParseFlags(const std::vector<std::string>& args) {
  Options opts;
  std::string level = "info";
  flags::FlagSet fs;
  Declare(fs, opts, level);
  absl::StatusOr<flags::FlagSet::Result> r = fs.Parse(args);
  if (!r.ok()) return r.status();
  if (!r->positional.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("unexpected argument \"", r->positional.front(), "\""));
  }
  opts.show_help = r->help;
  absl::StatusOr<LogLevel> parsed = ParseLogLevel(level);
  if (!parsed.ok()) return parsed.status();
  opts.log_level = *parsed;
  if (opts.listen.empty()) return absl::InvalidArgumentError("--listen must not be empty");
  if (opts.checkpointed_exit_code < 1 ||
      opts.checkpointed_exit_code > CRYO_INIT_CHECKPOINTED_EXIT_MAX) {
    return absl::InvalidArgumentError(
        "--checkpointed-exit-code must be 1..124 (125-127 are "
        "cryo-init's own and the shell's)");
  }
  if (opts.checkpoint_min_grace_s < 0) {
    return absl::InvalidArgumentError("--checkpoint-min-grace-seconds must not be negative");
  }
  if (!opts.metrics_file.empty() && opts.metrics_file[0] != '/') {
    return absl::InvalidArgumentError("--metrics-file must be an absolute path");
  }
  if (opts.metrics_file_interval_s < 1 || opts.metrics_file_interval_s > 300) {
    return absl::InvalidArgumentError("--metrics-file-interval-seconds must be 1..300");
  }
  if (opts.annotation_prefix.empty() || opts.annotation_prefix.find('/') != std::string::npos) {
    return absl::InvalidArgumentError(absl::StrCat("--annotation-prefix \"", opts.annotation_prefix,
                                                   "\" must be a non-empty DNS-style prefix"));
  }
  if (opts.init_path.empty() || opts.init_path[0] != '/') {
    return absl::InvalidArgumentError("--init-path must be an absolute path");
  }
  absl::StatusOr<std::string> listen_path = UnixEndpointPath(opts.listen);
  if (!listen_path.ok()) return listen_path.status();
  opts.listen = *listen_path;
  absl::StatusOr<std::string> runtime = NormalizeUnixEndpoint(opts.runtime_endpoint);
  if (!runtime.ok()) return runtime.status();
  opts.runtime_endpoint = *runtime;
  return opts;
}

}  // namespace cryo::shim
