#include "daemon/termination/watcher.h"

#include <algorithm>
#include <exception>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "lib/base/log.h"
#include "lib/base/status.h"

namespace cryo::termination {
namespace {

class WallClock : public Clock {
 public:
  absl::Time Now() override { return absl::Now(); }
};

std::string DescribeDeadline(absl::Time deadline) {
  if (deadline == absl::InfiniteFuture()) return "no deadline given";
  const absl::Duration left = absl::Trunc(deadline - absl::Now(), absl::Seconds(1));
  return absl::StrCat("deadline ",
                      absl::FormatTime(absl::RFC3339_sec, deadline, absl::UTCTimeZone()),
                      left > absl::ZeroDuration()
                          ? absl::StrCat(" (in ", absl::FormatDuration(left), ")")
                          : absl::StrCat(" (passed ", absl::FormatDuration(-left), " ago)"));
}

// What makes two poll errors "the same" for logging: the code and the message with numbers
// left out (curl says "after 0 ms" one time and "after 1 ms" the next).
std::string ErrorKey(const absl::Status& s) {
  std::string key = absl::StatusCodeToString(s.code());
  key.push_back(':');
  for (char c : s.message()) {
    if (c >= '0' && c <= '9') {
      if (key.back() != '#') key.push_back('#');
    } else {
      key.push_back(c);
    }
  }
  return key;
}

}  // namespace

Clock* RealClock() {
  static WallClock* clock = new WallClock();
  return clock;
}

absl::StatusOr<std::unique_ptr<TerminationWatcher>> TerminationWatcher::CreateFromConfig(
    const WatcherConfig& config, NoticeCallback on_notice, Clock* clock) {
  if (config.providers.empty()) {
    return absl::InvalidArgumentError("no termination notice providers configured");
  }
  if (config.poll_interval <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError("termination poll interval must be positive");
  }
  if (clock == nullptr) clock = RealClock();
  CRYO_ASSIGN_OR_RETURN(std::shared_ptr<HttpClient> http,
                        CurlHttpClient::Create(config.request_timeout));
  std::vector<std::unique_ptr<NoticeProvider>> providers;
  std::vector<std::string> seen;
  for (const std::string& name : config.providers) {
    if (std::find(seen.begin(), seen.end(), name) != seen.end()) continue;
    seen.push_back(name);
    if (name == "gce") {
      CRYO_RETURN_IF_ERROR(Annotate(ParseHttpUrl(config.gce_url).status(), "gce"));
      providers.push_back(std::make_unique<GcePreemptedProvider>(http, config.gce_url));
      providers.push_back(std::make_unique<GceMaintenanceProvider>(http, config.gce_url));
    } else if (name == "aws") {
      CRYO_RETURN_IF_ERROR(Annotate(ParseHttpUrl(config.aws_url).status(), "aws"));
      AwsOptions o;
      o.base_url = config.aws_url;
      providers.push_back(std::make_unique<AwsSpotProvider>(http, clock, o));
    } else if (name == "azure") {
      CRYO_RETURN_IF_ERROR(Annotate(ParseHttpUrl(config.azure_url).status(), "azure"));
      AzureOptions o;
      o.events_url = config.azure_url;
      o.vm_name = config.azure_vm_name;
      providers.push_back(std::make_unique<AzureEventsProvider>(http, clock, o));
    } else {
      return absl::InvalidArgumentError(absl::StrCat("unknown termination notice provider '", name,
                                                     "' (known: gce, aws, azure)"));
    }
  }
  Options options;
  options.poll_interval = config.poll_interval;
  options.http = http;
  return Create(std::move(providers), std::move(options), std::move(on_notice));
}

absl::StatusOr<std::unique_ptr<TerminationWatcher>> TerminationWatcher::Create(
    std::vector<std::unique_ptr<NoticeProvider>> providers, Options options,
    NoticeCallback on_notice) {
  if (providers.empty()) return absl::InvalidArgumentError("no termination notice providers");
  if (options.poll_interval <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError("termination poll interval must be positive");
  }
  if (!on_notice) return absl::InvalidArgumentError("no notice callback");
  return std::unique_ptr<TerminationWatcher>(
      new TerminationWatcher(std::move(providers), std::move(options), std::move(on_notice)));
}

TerminationWatcher::TerminationWatcher(std::vector<std::unique_ptr<NoticeProvider>> providers,
                                       Options options, NoticeCallback on_notice)
    : options_(std::move(options)),
      on_notice_(std::move(on_notice)),
      providers_(std::move(providers)) {
  absl::MutexLock l(&mu_);
  for (const auto& p : providers_) {
    ProviderState s;
    s.name = p->Name();
    states_.push_back(std::move(s));
  }
  standing_.resize(providers_.size());
}

TerminationWatcher::~TerminationWatcher() { Stop(); }

absl::Status TerminationWatcher::Start() {
  absl::MutexLock l(&mu_);
  if (started_ || stopping_) return absl::FailedPreconditionError("watcher started before");
  started_ = true;
  std::vector<std::string> names;
  for (const auto& s : states_) names.push_back(s.name);
  CRYO_LOG(Info) << "watching node termination notices (" << absl::StrJoin(names, ", ")
                 << ") every " << options_.poll_interval;
  thread_ = std::thread([this] { Loop(); });
  return absl::OkStatus();
}

void TerminationWatcher::Stop() {
  {
    absl::MutexLock l(&mu_);
    stopping_ = true;  // wakes Loop()'s wait
  }
  if (options_.http) options_.http->Shutdown();  // ends a request in flight
  // Stop() from inside the callback must not join its own thread; the destructor does not run
  // there, so someone else joins later.
  if (thread_.joinable() && thread_.get_id() != std::this_thread::get_id()) thread_.join();
}

void TerminationWatcher::Loop() {
  for (;;) {
    PollOnce();
    absl::MutexLock l(&mu_);
    mu_.AwaitWithTimeout(absl::Condition(&stopping_), options_.poll_interval);
    if (stopping_) return;
  }
}

void TerminationWatcher::PollOnce() {
  absl::MutexLock poll_lock(&poll_mu_);
  for (size_t i = 0; i < providers_.size(); ++i) {
    {
      absl::MutexLock l(&mu_);
      if (stopping_) return;
    }
    NoticeProvider& provider = *providers_[i];
    absl::StatusOr<std::vector<Notice>> result = provider.Poll();
    std::vector<Notice> fresh;
    {
      absl::MutexLock l(&mu_);
      ProviderState& state = states_[i];
      state.polls++;
      if (!result.ok()) {
        if (stopping_ && absl::IsCancelled(result.status())) return;  // our own Stop()
        state.errors++;
        // Once per distinct error, not every poll: a node on the wrong cloud would otherwise
        // log every second.
        if (state.last.ok() || ErrorKey(state.last) != ErrorKey(result.status())) {
          CRYO_LOG(Warning) << "termination notices: " << state.name
                            << " cannot be checked (will keep trying): " << result.status();
        } else {
          CRYO_LOG(Debug) << "termination notices: " << state.name << ": " << result.status();
        }
        // An error says nothing about the standing notices: keep them, so one that still
        // stands after the endpoint recovers is not taken for a new one.
        state.last = result.status();
        continue;
      }
      if (!state.last.ok()) {
        CRYO_LOG(Info) << "termination notices: " << state.name << " answers again";
      }
      state.last = absl::OkStatus();
      // A notice that is gone from a good answer is forgotten: if it comes back (a cancelled
      // maintenance rescheduled) it is a new one.
      std::set<std::string> now;
      for (Notice& n : *result) {
        if (!now.insert(n.id).second) continue;
        if (!standing_[i].count(n.id)) fresh.push_back(std::move(n));
      }
      standing_[i] = std::move(now);
      state.standing.assign(standing_[i].begin(), standing_[i].end());
      notices_ += fresh.size();
    }
    for (const Notice& n : fresh) {
      CRYO_LOG(Warning) << "node termination notice from " << n.provider << ": " << n.kind << ", "
                        << DescribeDeadline(n.deadline) << ": " << n.detail;
      // The callback is cryod's; nothing it throws may unwind through the watcher.
      try {
        on_notice_(n);
      } catch (const std::exception& e) {
        CRYO_LOG(Error) << "termination notice callback threw: " << e.what();
      } catch (...) {
        CRYO_LOG(Error) << "termination notice callback threw";
      }
    }
  }
}

std::vector<TerminationWatcher::ProviderState> TerminationWatcher::States() const {
  absl::MutexLock l(&mu_);
  return states_;
}

int64_t TerminationWatcher::notices() const {
  absl::MutexLock l(&mu_);
  return notices_;
}

}  // namespace cryo::termination
