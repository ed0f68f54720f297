#pragma once

// Watches the cloud's node termination notices (spot/preemptible reclaim, host maintenance that
// stops the VM) so cryod can checkpoint every opted-in container before the node goes. A thread
// polls each provider every poll interval and calls back once per distinct notice.
//
//   termination::WatcherConfig wc;          // from cryod's termination_* keys
//   wc.providers = {"gce", "aws"};
//   auto w = termination::TerminationWatcher::CreateFromConfig(
//       wc, [](const termination::Notice& n) { /* start checkpoints, return quickly */ });
//   if (!w.ok()) ...;
//   (*w)->Start();  ...  (*w)->Stop();      // Stop() is prompt; the destructor stops too

#include <cstdint>
#include <functional>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "daemon/termination/aws.h"
#include "daemon/termination/azure.h"
#include "daemon/termination/clock.h"
#include "daemon/termination/gce.h"
#include "daemon/termination/http_client.h"
#include "daemon/termination/provider.h"

namespace cryo::termination {

struct WatcherConfig {
  std::vector<std::string> providers;  // "gce", "aws", "azure"
  absl::Duration poll_interval = absl::Seconds(1);
  absl::Duration request_timeout = absl::Seconds(2);  // per HTTP request
  std::string gce_url = kGceDefaultUrl;
  std::string aws_url = kAwsDefaultUrl;
  std::string azure_url = kAzureDefaultUrl;
  std::string azure_vm_name;  // empty: learned from the metadata service
};

// Called on the watcher's thread, once per distinct notice. Polling pauses while it runs, and
// Stop() waits for it: hand long work (the checkpoints) to another thread.
using NoticeCallback = std::function<void(const Notice&)>;

class TerminationWatcher {
 public:
  struct Options {
    absl::Duration poll_interval = absl::Seconds(1);
    // When set, Stop() shuts it down so a request in flight ends at once.
    std::shared_ptr<HttpClient> http;
  };

  // Providers named in `config` (a name given twice counts once; "gce" is two providers,
  // gce/preempted and gce/maintenance-event) over one CurlHttpClient. INVALID_ARGUMENT for no
  // or an unknown provider name, a URL that is not http://, or a non-positive interval.
  // Not started.
  static absl::StatusOr<std::unique_ptr<TerminationWatcher>> CreateFromConfig(
      const WatcherConfig& config, NoticeCallback on_notice, Clock* clock = RealClock());
  // Any providers (tests, other clouds). Not started.
  static absl::StatusOr<std::unique_ptr<TerminationWatcher>> Create(
      std::vector<std::unique_ptr<NoticeProvider>> providers, Options options,
      NoticeCallback on_notice);

  ~TerminationWatcher();  // Stop()
  TerminationWatcher(const TerminationWatcher&) = delete;
  TerminationWatcher& operator=(const TerminationWatcher&) = delete;

  // Starts the polling thread; its first poll is immediate. FAILED_PRECONDITION if started
  // before or stopped.
  absl::Status Start();
  // Ends the thread without waiting out the interval or a request in flight (it does wait for a
  // callback that is running). Idempotent; final.
  void Stop();

  // Polls every provider once on the calling thread and calls back for new notices. The thread
  // uses it; tests call it directly. Serialised with the thread's polls.
  void PollOnce();

  struct ProviderState {
    std::string name;
    absl::Status last = absl::OkStatus();  // outcome of the last poll
    int64_t polls = 0;
    int64_t errors = 0;
    std::vector<std::string> standing;  // ids of the notices that stood at the last good poll
  };
  std::vector<ProviderState> States() const;
  // Notices delivered so far.
  int64_t notices() const;

 private:
  TerminationWatcher(std::vector<std::unique_ptr<NoticeProvider>> providers, Options options,
                     NoticeCallback on_notice);
  void Loop();

  const Options options_;
  const NoticeCallback on_notice_;
  // Fixed at construction; Poll() is called under poll_mu_ only.
  const std::vector<std::unique_ptr<NoticeProvider>> providers_;

  absl::Mutex poll_mu_;  // one poll at a time; held across provider calls and callbacks
  mutable absl::Mutex mu_;
  std::vector<ProviderState> states_ ABSL_GUARDED_BY(mu_);  // parallel to providers_
  std::vector<std::set<std::string>> standing_ ABSL_GUARDED_BY(mu_);
  int64_t notices_ ABSL_GUARDED_BY(mu_) = 0;
  bool started_ ABSL_GUARDED_BY(mu_) = false;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;
};

}  // namespace cryo::termination
