// The Mover's copies: GPU memory to host memory and back, from files, with their threads and
// pinned buffers (mover.cc holds the gates, the plan's steps and their undo).

#include <errno.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <deque>
#include <functional>
#include <thread>

#include "plugins/fastpath/mover.h"

// The library runs inside jobs, which may not have libxxhash: its code is compiled in.
#define XXH_INLINE_ALL
#include "lib/base/chunked_xxh3.h"
#include "lib/base/io_all.h"
#include "plugins/fastpath/mover_internal.h"
#include "plugins/fastpath/pinned_pipeline.h"

namespace cryo::fastpath {
namespace {

using mover_internal::Clock;
using mover_internal::Cuda;
using mover_internal::Errno;
using mover_internal::Ms;

// A counter to wait on until it drops to zero.
class Countdown {
 public:
  void Add(int n) {
    std::lock_guard<std::mutex> l(mu_);
    n_ += n;
  }
  bool Done() {
    std::lock_guard<std::mutex> l(mu_);
    if (--n_ == 0) {
      cv_.notify_all();
      return true;
    }
    return false;
  }
  void Wait() {
    std::unique_lock<std::mutex> l(mu_);
    cv_.wait(l, [&] { return n_ == 0; });
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  int n_ = 0;
};

// Threads for host-side copies; joined when it goes.
class Pool {
 public:
  explicit Pool(int n) {
    for (int i = 0; i < n; ++i) {
      threads_.emplace_back([this] {
        GateGuard::MarkLibraryThread();
        Run();
      });
    }
  }
  ~Pool() {
    {
      std::lock_guard<std::mutex> l(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    for (auto& t : threads_) t.join();
  }
  void Submit(std::function<void()> f) {
    {
      std::lock_guard<std::mutex> l(mu_);
      q_.push_back(std::move(f));
    }
    cv_.notify_one();
  }
  int size() const { return static_cast<int>(threads_.size()); }

 private:
  void Run() {
    for (;;) {
      std::function<void()> f;
      {
        std::unique_lock<std::mutex> l(mu_);
        cv_.wait(l, [&] { return stop_ || !q_.empty(); });
        if (q_.empty()) return;
        f = std::move(q_.front());
        q_.pop_front();
      }
      f();
    }
  }
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> q_;
  bool stop_ = false;
  std::vector<std::thread> threads_;
};

// Page-aligned pinned host memory (direct I/O needs the alignment).
class Pinned {
 public:
  Pinned(const Driver& d, size_t bytes) : d_(d) {
    result_ = d_.cuMemHostAlloc(&raw_, bytes + 4096, CU_MEMHOSTALLOC_PORTABLE);
    if (result_ == CUDA_SUCCESS) {
      auto a = (reinterpret_cast<uintptr_t>(raw_) + 4095) & ~uintptr_t{4095};
      p_ = reinterpret_cast<char*>(a);
    } else {
      raw_ = nullptr;
    }
  }
  ~Pinned() {
    if (raw_ != nullptr) d_.cuMemFreeHost(raw_);
  }
  Pinned(const Pinned&) = delete;
  Pinned& operator=(const Pinned&) = delete;
  char* get() const { return p_; }
  CUresult result() const { return result_; }

 private:
  const Driver& d_;
  CUresult result_ = CUDA_SUCCESS;
  void* raw_ = nullptr;
  char* p_ = nullptr;
};
}  // namespace

bool Mover::Plan() {
  std::lock_guard<std::mutex> l(reg_.mu());
  plan_.clear();
  total_ = 0;
  imports_.clear();
  for (auto& [id, p] : reg_.phys()) {
    if (p->imported && p->real != 0) imports_.push_back(p.get());
    if (!Registry::Moved(*p) || p->real == 0) continue;
    p->stream_offset = total_;
    total_ += p->size;
    plan_.push_back(p.get());
  }
  return true;
}

std::vector<Mover::Piece> Mover::PiecesOf(uint64_t stream_off, uint64_t len) const {
  std::vector<Piece> out;
  // plan_ is in stream order: find the first allocation that ends after stream_off.
  auto it = std::upper_bound(plan_.begin(), plan_.end(), stream_off, [](uint64_t off, Phys* p) {
    return off < p->stream_offset + p->size;
  });
  for (; it != plan_.end() && len > 0; ++it) {
    Phys* p = *it;
    uint64_t from = stream_off - p->stream_offset;
    uint64_t take = std::min<uint64_t>(len, p->size - from);
    out.push_back({p, from, take});
    stream_off += take;
    len -= take;
  }
  return out;
}

Result Mover::MapTemporary(Phys* p) {
  CUdeviceptr va = 0;
  CUresult r = d_.cuMemAddressReserve(&va, p->size, 0, 0, 0);
  if (r != CUDA_SUCCESS) return Cuda(d_, "reserving a range to copy through", r);
  r = d_.cuMemMap(va, p->size, 0, p->real, 0);
  if (r == CUDA_SUCCESS) {
    CUmemAccessDesc a{};
    a.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    a.location.id = p->prop.location.id;
    CUdevice dev = 0;
    // Host memory: copied by the device of the context that made it.
    if (p->host_mem && d_.cuCtxSetCurrent(p->ctx) == CUDA_SUCCESS &&
        d_.cuCtxGetDevice(&dev) == CUDA_SUCCESS) {
      a.location.id = dev;
    }
    a.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    r = d_.cuMemSetAccess(va, p->size, &a, 1);
    if (r != CUDA_SUCCESS) d_.cuMemUnmap(va, p->size);
  }
  if (r != CUDA_SUCCESS) {
    d_.cuMemAddressFree(va, p->size);
    return Cuda(d_, "mapping an allocation to copy it", r);
  }
  temp_maps_[p] = va;
  return {};
}

void Mover::UnmapTemporaries() {
  for (auto& [p, va] : temp_maps_) {
    d_.cuMemUnmap(va, p->size);
    d_.cuMemAddressFree(va, p->size);
  }
  temp_maps_.clear();
}

CUdeviceptr Mover::SourceOf(Phys* p) {
  auto it = sources_.find(p);
  return it == sources_.end() ? 0 : it->second;
}

Result Mover::FindSources() {
  sources_.clear();
  {
    std::lock_guard<std::mutex> l(reg_.mu());
    for (auto& [va, m] : reg_.mappings()) {
      if (m.offset == 0 && m.size >= m.phys->size && !sources_.count(m.phys)) {
        sources_[m.phys] = va;
      }
    }
  }
  for (Phys* p : plan_) {
    if (sources_.count(p)) continue;
    Result err = MapTemporary(p);
    if (!err.ok()) return err;
    sources_[p] = temp_maps_[p];
  }
  return {};
}

CUstream Mover::StreamFor(CUcontext ctx) {
  auto it = streams_.find(ctx);
  if (it != streams_.end()) return it->second;
  CUstream s = nullptr;
  if (d_.cuStreamCreate(&s, CU_STREAM_NON_BLOCKING) != CUDA_SUCCESS) s = nullptr;
  streams_[ctx] = s;
  return s;
}

void Mover::DestroyStreams() {
  for (auto& [ctx, s] : streams_) {
    if (s == nullptr) continue;
    d_.cuCtxSetCurrent(ctx);
    d_.cuStreamDestroy_v2(s);
  }
  streams_.clear();
}

Result Mover::CopyDirect(bool out, uint64_t window,
                         const std::function<Result(uint64_t end)>& ahead) {
  // Every allocation in slot-sized pieces, spread over a stream per slot so that the copy
  // engines stay busy; then all of them waited for.
  const char* what = out ? "copying device memory out" : "copying memory back to the GPU";
  std::map<std::pair<CUcontext, size_t>, CUstream> streams;
  Result err;
  size_t n = 0;
  uint64_t issued = 0;
  // A drain in windows tells its progress a window at a time, as the DMA finishes each (so
  // cryod's write behind it starts early): after a window's last piece, an event on every
  // stream, and the windows told in order once all their events have happened.
  struct Mark {
    uint64_t end;
    std::vector<std::pair<CUcontext, CUevent>> events;
  };
  std::vector<Mark> marks;
  size_t told = 0;
  auto tell_done = [&](bool wait) {
    for (; told < marks.size(); ++told) {
      for (auto& [ctx, ev] : marks[told].events) {
        if (ev == nullptr) continue;
        d_.cuCtxSetCurrent(ctx);
        if ((wait ? d_.cuEventSynchronize(ev) : d_.cuEventQuery(ev)) != CUDA_SUCCESS) return;
        d_.cuEventDestroy_v2(ev);
        ev = nullptr;
      }
      std::lock_guard<std::mutex> l(progress_mu_);
      copied_ = std::max(copied_, marks[told].end);
      Tell();
      progress_cv_.notify_all();
    }
  };
  auto mark = [&](uint64_t end, CUcontext current) {
    Mark m{end, {}};
    for (auto& [key, s] : streams) {
      CUevent ev = nullptr;
      d_.cuCtxSetCurrent(key.first);
      // Without an event this window is told with the next one that has its events.
      if (s == nullptr || d_.cuEventCreate(&ev, CU_EVENT_DISABLE_TIMING) != CUDA_SUCCESS) continue;
      if (d_.cuEventRecord(ev, s) != CUDA_SUCCESS) {
        d_.cuEventDestroy_v2(ev);
        continue;
      }
      m.events.push_back({key.first, ev});
    }
    d_.cuCtxSetCurrent(current);
    marks.push_back(std::move(m));
    tell_done(/*wait=*/false);
  };
  for (Phys* p : plan_) {
    d_.cuCtxSetCurrent(p->ctx);
    const CUdeviceptr dev = SourceOf(p);
    for (uint64_t off = 0; off < p->size && err.ok(); ++n) {
      const uint64_t at = p->stream_offset + off;
      uint64_t len = std::min<uint64_t>(cfg_.ring_slot_bytes, p->size - off);
      if (window > 0) len = std::min(len, (at / window + 1) * window - at);
      if (ahead) err = ahead(at + len);
      if (err.ok() && !out) err = WaitFollowed(at + len);
      if (!err.ok()) break;
      if (ahead) d_.cuCtxSetCurrent(p->ctx);  // it may have made another context current
      CUstream& st = streams[{p->ctx, n % std::max(2, cfg_.ring_slots)}];
      if (st == nullptr && d_.cuStreamCreate(&st, CU_STREAM_NON_BLOCKING) != CUDA_SUCCESS) {
        st = nullptr;
        err = Result::Failed("no stream to copy on");
      } else if (out && dev == 0) {
        err = Result::Failed("no mapping to copy an allocation from");
      } else if (CUresult r = out ? d_.cuMemcpyDtoHAsync_v2(p->host + off, dev + off, len, st)
                                  : d_.cuMemcpyHtoDAsync_v2(dev + off, p->host + off, len, st);
                 r != CUDA_SUCCESS) {
        err = Cuda(d_, what, r);
      }
      issued += err.ok() ? len : 0;
      off += len;
      if (err.ok() && out && window > 0 && (at + len) % window == 0 && at + len < total_) {
        mark(at + len, p->ctx);
      }
    }
    if (!err.ok()) break;
  }
  if (err.ok()) tell_done(/*wait=*/true);
  for (Mark& m : marks) {
    for (auto& [ctx, ev] : m.events) {
      if (ev == nullptr) continue;
      d_.cuCtxSetCurrent(ctx);
      d_.cuEventDestroy_v2(ev);
    }
  }
  for (auto& [key, st] : streams) {
    d_.cuCtxSetCurrent(key.first);
    if (CUresult r = d_.cuStreamSynchronize(st); r != CUDA_SUCCESS && err.ok()) {
      err = Cuda(d_, what, r);
    }
    d_.cuStreamDestroy_v2(st);
  }
  if (out) {
    // The writers follow a drain's progress.
    std::lock_guard<std::mutex> l(progress_mu_);
    if (err.ok()) copied_ = std::max(copied_, issued);
    if (!err.ok()) copy_failed_ = true;
    Tell();
    progress_cv_.notify_all();
  }
  return err;
}

Result Mover::CopyOut(int threads) {
  if (host_registered_) return CopyDirect(/*out=*/true);
  // Into cryod's memory (already faulted in when it is a staging slot): the DMA writes it
  // directly, and the CPU neither copies nor reads the ring.
  if (host_base_ != nullptr && cfg_.register_windows && !plan_.empty()) {
    bool fallback = false;
    Result r = CopyRegistered(/*out=*/true, &fallback);
    if (!fallback) return r;
  }
  struct Item {
    Phys* phys;
    uint64_t off;
    uint64_t len;
  };
  std::vector<Item> items;
  for (Phys* p : plan_) {
    for (uint64_t off = 0; off < p->size; off += cfg_.ring_slot_bytes) {
      items.push_back({p, off, std::min<uint64_t>(cfg_.ring_slot_bytes, p->size - off)});
    }
  }
  if (items.empty()) return {};
  d_.cuCtxSetCurrent(plan_.front()->ctx);
  std::vector<std::unique_ptr<Pinned>> ring;
  for (int i = 0; i < cfg_.ring_slots; ++i) {
    ring.push_back(std::make_unique<Pinned>(d_, cfg_.ring_slot_bytes));
    if (ring.back()->get() == nullptr) {
      return Cuda(d_, "allocating the pinned staging buffers", ring.back()->result());
    }
  }
  std::vector<Countdown> slot_busy(ring.size());
  std::vector<char> item_done(items.size(), 0);
  size_t next_done = 0;
  auto item_finished = [&](size_t i) {
    std::lock_guard<std::mutex> l(progress_mu_);
    item_done[i] = 1;
    while (next_done < items.size() && item_done[next_done]) copied_ += items[next_done++].len;
    Tell();
    progress_cv_.notify_all();
  };
  Result err;
  {
    Pool pool(std::max(1, threads));
    CUcontext cur = plan_.front()->ctx;
    for (size_t i = 0; i < items.size() && err.ok(); ++i) {
      const Item& it = items[i];
      const size_t slot = i % ring.size();
      slot_busy[slot].Wait();
      if (it.phys->ctx != cur) {
        cur = it.phys->ctx;
        d_.cuCtxSetCurrent(cur);
      }
      CUstream stream = StreamFor(cur);
      CUdeviceptr src = SourceOf(it.phys);
      if (stream == nullptr || src == 0) {
        err = Result::Failed("no stream or no mapping to copy an allocation from");
        break;
      }
      char* buf = ring[slot]->get();
      CUresult r = d_.cuMemcpyDtoHAsync_v2(buf, src + it.off, it.len, stream);
      if (r == CUDA_SUCCESS) r = d_.cuStreamSynchronize(stream);
      if (r != CUDA_SUCCESS) {
        err = Cuda(d_, "copying device memory out", r);
        break;
      }
      // The bytes now go from the ring into the job's fresh host memory on many threads: first
      // touch of fresh memory is what limits one thread.
      const uint64_t piece = std::max<uint64_t>(
          2ull << 20, ((it.len + pool.size() - 1) / pool.size() + 4095) & ~uint64_t{4095});
      const int n = static_cast<int>((it.len + piece - 1) / piece);
      auto left = std::make_shared<std::atomic<int>>(n);
      slot_busy[slot].Add(n);
      char* dst = it.phys->host + it.off;
      for (int k = 0; k < n; ++k) {
        const uint64_t a = k * piece;
        const uint64_t b = std::min<uint64_t>(it.len - a, piece);
        pool.Submit([&, i, slot, a, b, dst, buf, left] {
          std::memcpy(dst + a, buf + a, b);
          slot_busy[slot].Done();
          if (left->fetch_sub(1) == 1) item_finished(i);
        });
      }
    }
    for (auto& s : slot_busy) s.Wait();
  }
  ring.clear();
  if (!err.ok()) {
    std::lock_guard<std::mutex> l(progress_mu_);
    copy_failed_ = true;
    progress_cv_.notify_all();
  }
  return err;
}

Result Mover::Release() {
  for (Phys* p : plan_) {
    std::vector<std::pair<CUdeviceptr, size_t>> maps;
    {
      std::lock_guard<std::mutex> l(reg_.mu());
      for (auto& [va, m] : reg_.mappings()) {
        if (m.phys == p) maps.push_back({va, m.size});
      }
    }
    for (size_t i = 0; i < maps.size(); ++i) {
      CUresult r = d_.cuMemUnmap(maps[i].first, maps[i].second);
      if (r != CUDA_SUCCESS) {
        // Put back what this allocation already lost; the caller refills the others.
        for (size_t k = 0; k < i; ++k) {
          d_.cuMemMap(maps[k].first, maps[k].second, 0, p->real, 0);
        }
        return Cuda(d_, "unmapping device memory", r);
      }
    }
    auto t = temp_maps_.find(p);
    if (t != temp_maps_.end()) {
      d_.cuMemUnmap(t->second, p->size);
      d_.cuMemAddressFree(t->second, p->size);
      temp_maps_.erase(t);
    }
    // The library's reference is the last one (the mappings are gone): this frees the memory.
    if (Registry::HoldsReference(*p)) d_.cuMemRelease(p->real);
    p->real = 0;
  }
  return {};
}

Result Mover::Recreate() {
  for (Phys* p : plan_) {
    if (p->real != 0) continue;
    d_.cuCtxSetCurrent(p->ctx);
    CUmemGenericAllocationHandle h = 0;
    CUresult r = d_.cuMemCreate(&h, p->size, &p->prop, 0);
    if (r != CUDA_SUCCESS) {
      const std::string where =
          p->host_mem
              ? " bytes of host memory (NUMA node " + std::to_string(p->prop.location.id) + ")"
              : " bytes of device memory on GPU " + std::to_string(p->prop.location.id);
      return Cuda(d_, ("creating " + std::to_string(p->size) + where).c_str(), r);
    }
    p->real = h;
    std::lock_guard<std::mutex> l(reg_.mu());
    for (auto& [va, m] : reg_.mappings()) {
      if (m.phys != p) continue;
      r = d_.cuMemMap(va, m.size, m.offset, h, 0);
      for (size_t i = 0; r == CUDA_SUCCESS && i < m.access.size(); ++i) {
        r = d_.cuMemSetAccess(va, m.size, m.access[i].data(), m.access[i].size());
      }
      if (r != CUDA_SUCCESS) return Cuda(d_, "mapping device memory at its old address", r);
    }
  }
  return FindSources();
}

Result Mover::CopyRegistered(bool out, bool* fallback) {
  // Registering 32 GiB whole took 0.7-3.0 s, longer than the copy it saves; 256 MiB at a time
  // it went at 39 GB/s, faster than a fast store reads, so it keeps ahead of cryod's read
  // (two H200s, 2026-11-30).
  constexpr uint64_t kPage = 4096;
  const uint64_t window = std::max(kPage, cfg_.register_window_bytes & ~(kPage - 1));
  // A refill's DMA only reads cryod's memory; a drain's writes it.
  const unsigned flags = CU_MEMHOSTREGISTER_PORTABLE | (out ? 0 : CU_MEMHOSTREGISTER_READ_ONLY);
  *fallback = false;
  std::vector<char*> windows;
  uint64_t reg_end = 0;
  bool registering = true;
  // Windows up to the one holding stream byte `end - 1`, and the next. A window the driver
  // refuses after the first is copied as plain memory (the driver stages it itself).
  auto register_to = [&](uint64_t end) -> Result {
    end = std::min(total_, end + window);
    d_.cuCtxSetCurrent(plan_.front()->ctx);
    while (registering && reg_end < end) {
      const uint64_t b = std::min(total_, reg_end + window);
      const uint64_t len = (b - reg_end + kPage - 1) & ~(kPage - 1);
      CUresult r = d_.cuMemHostRegister_v2(host_base_ + reg_end, len, flags);
      if (r != CUDA_SUCCESS) {
        if (windows.empty()) {
          *fallback = true;
          return Cuda(d_, "registering cryod's memory", r);
        }
        registering = false;
        break;
      }
      windows.push_back(host_base_ + reg_end);
      reg_end = b;
    }
    return {};
  };
  // The first window before any copy: refused, the caller copies through the ring instead,
  // and nothing has told a drain's writers that the copy failed.
  if (Result r = register_to(0); !r.ok()) return r;
  // A piece never spans two windows: each DMA touches one registration.
  Result err = CopyDirect(out, window, register_to);
  if (!plan_.empty()) d_.cuCtxSetCurrent(plan_.front()->ctx);
  for (char* w : windows) d_.cuMemHostUnregister(w);
  return err;
}

Result Mover::CopyInFromHost(int threads) {
  if (plan_.empty()) return {};
  if (host_registered_) return CopyDirect(/*out=*/false);
  if (followed_ && cfg_.register_windows) {
    bool fallback = false;
    Result r = CopyRegistered(/*out=*/false, &fallback);
    if (!fallback) return r;
  }
  d_.cuCtxSetCurrent(plan_.front()->ctx);
  std::vector<std::unique_ptr<Pinned>> ring;
  for (int i = 0; i < std::max(2, cfg_.ring_slots); ++i) {
    ring.push_back(std::make_unique<Pinned>(d_, cfg_.ring_slot_bytes));
    if (ring.back()->get() == nullptr) {
      return Cuda(d_, "allocating the pinned staging buffers", ring.back()->result());
    }
  }
  // One stream per slot (per context): a slot waits only for its own last copy to the GPU, so
  // the threads fill the next slots while the DMA runs (one stream for all made each fill wait
  // for every copy before it: 16 GB/s where the DMA does 50, H100 2026-11-27).
  std::map<std::pair<CUcontext, size_t>, CUstream> streams;
  auto destroy = [&] {
    for (auto& [key, st] : streams) {
      d_.cuCtxSetCurrent(key.first);
      d_.cuStreamSynchronize(st);
      d_.cuStreamDestroy_v2(st);
    }
    streams.clear();
  };
  std::vector<CUstream> last(ring.size(), nullptr);
  Pool pool(std::max(1, threads));
  CUcontext cur = plan_.front()->ctx;
  size_t n_item = 0;
  Result err;
  for (Phys* p : plan_) {
    for (uint64_t off = 0; off < p->size && err.ok(); off += cfg_.ring_slot_bytes, ++n_item) {
      const uint64_t len = std::min<uint64_t>(cfg_.ring_slot_bytes, p->size - off);
      if (p->ctx != cur) {
        cur = p->ctx;
        d_.cuCtxSetCurrent(cur);
      }
      const size_t slot = n_item % ring.size();
      CUstream& stream = streams[{cur, slot}];
      if (stream == nullptr && d_.cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING) != CUDA_SUCCESS) {
        stream = nullptr;
        err = Result::Failed("no stream to copy on");
        break;
      }
      char* buf = ring[slot]->get();
      err = WaitFollowed(p->stream_offset + off + len);
      if (!err.ok()) break;
      // This slot's copy to the GPU before must be done before it is filled again.
      if (last[slot] != nullptr) d_.cuStreamSynchronize(last[slot]);
      last[slot] = stream;
      Countdown done;
      const uint64_t piece = std::max<uint64_t>(2ull << 20, (len + pool.size() - 1) / pool.size());
      const int n = static_cast<int>((len + piece - 1) / piece);
      done.Add(n);
      for (int k = 0; k < n; ++k) {
        const uint64_t a = k * piece;
        const uint64_t b = std::min<uint64_t>(len - a, piece);
        const char* src = p->host + off;
        pool.Submit([&done, buf, src, a, b] {
          std::memcpy(buf + a, src + a, b);
          done.Done();
        });
      }
      done.Wait();
      CUresult r = d_.cuMemcpyHtoDAsync_v2(SourceOf(p) + off, buf, len, stream);
      if (r != CUDA_SUCCESS) err = Cuda(d_, "copying memory back to the GPU", r);
    }
    if (!err.ok()) break;
  }
  destroy();  // waits for every copy: the ring goes next
  return err;
}

Result Mover::CopyInFromFiles(const std::vector<int>& fds, std::vector<FileSum>* sums) {
  const int w = static_cast<int>(fds.size());
  // After a drain into cryod's memory, cryod chose how many files it wrote (in the same layout).
  if (w != nfiles_ && !(in_memfd_ && w > 0)) {
    return Result::Failed("the drain wrote " + std::to_string(nfiles_) + " files, " +
                          std::to_string(w) + " were given");
  }
  sums->assign(w, FileSum{});
  std::vector<Result> errs(w);
  std::vector<std::unique_ptr<xxh3chunked::Hasher>> hashers;
  for (int k = 0; k < w; ++k) hashers.push_back(std::make_unique<xxh3chunked::Hasher>());
  const uint64_t units = stripe_ == 0 ? 0 : (total_ + stripe_ - 1) / stripe_;
  // Per file, a reader keeps the disk busy (direct I/O into a few pinned buffers) while a second
  // thread hashes each buffer and copies it to the GPU: neither waits for the other's work.
  // A file must hold exactly what the drain wrote to it: nothing appended, nothing cut.
  auto size_error = [&](int k, uint64_t written) -> Result {
    struct stat st;
    if (::fstat(fds[k], &st) != 0 || static_cast<uint64_t>(st.st_size) == written) return {};
    return Result::Failed("file " + std::to_string(k) + " holds " + std::to_string(st.st_size) +
                          " bytes, the drain wrote " + std::to_string(written));
  };
  auto reader = [&](int k) {
    GateGuard::MarkLibraryThread();
    Result& err = errs[k];
    if (static_cast<uint64_t>(k) >= units) {
      // No part of the stream went to this file: nothing to read or pin buffers for (a process
      // that owns nothing may have no context to pin them with).
      err = size_error(k, 0);
      (*sums)[k] = hashers[k]->Finish();
      return;
    }
    d_.cuCtxSetCurrent(plan_.front()->ctx);
    constexpr int kBuffers = 3;
    std::vector<std::unique_ptr<Pinned>> pinned;
    std::vector<char*> bufs;
    for (int i = 0; i < kBuffers; ++i) {
      pinned.push_back(std::make_unique<Pinned>(d_, cfg_.read_bytes));
      if (pinned.back()->get() == nullptr) {
        err = Cuda(d_, "allocating pinned read buffers", pinned.back()->result());
        return;
      }
      bufs.push_back(pinned.back()->get());
    }
    // The consumer hashes each buffer in file order and copies it to where its bytes belong,
    // on a stream per context of its own (destroyed once it is done).
    std::map<CUcontext, CUstream> streams;
    {
      PinnedPipeline pipe(bufs, [&](const PinnedPipeline::Item& it) -> Result {
        hashers[k]->Update(it.buf, it.n);
        uint64_t delta = 0;
        for (const Piece& pc : PiecesOf(it.tag, it.n)) {
          auto s = streams.find(pc.phys->ctx);
          if (s == streams.end()) {
            d_.cuCtxSetCurrent(pc.phys->ctx);
            CUstream st = nullptr;
            if (d_.cuStreamCreate(&st, CU_STREAM_NON_BLOCKING) != CUDA_SUCCESS) st = nullptr;
            s = streams.emplace(pc.phys->ctx, st).first;
          }
          d_.cuCtxSetCurrent(pc.phys->ctx);
          CUresult r = s->second == nullptr
                           ? CUDA_ERROR_UNKNOWN
                           : d_.cuMemcpyHtoDAsync_v2(SourceOf(pc.phys) + pc.offset, it.buf + delta,
                                                     pc.len, s->second);
          if (r == CUDA_SUCCESS) r = d_.cuStreamSynchronize(s->second);
          if (r != CUDA_SUCCESS) return Cuda(d_, "copying a file's data to the GPU", r);
          delta += pc.len;
        }
        return {};
      });
      uint64_t file_size = 0;
      for (uint64_t c = k; c < units && err.ok(); c += w) {
        const uint64_t unit_off = c * stripe_;
        const uint64_t unit_len = std::min<uint64_t>(stripe_, total_ - unit_off);
        const off_t file_off = static_cast<off_t>((c / w) * stripe_);
        for (uint64_t pos = 0; pos < unit_len && err.ok(); pos += cfg_.read_bytes) {
          const uint64_t n = std::min<uint64_t>(cfg_.read_bytes, unit_len - pos);
          char* b = pipe.Acquire();
          if (std::string why; !io::ReadAll(fds[k], b, n, file_off + pos, &why)) {
            err = Result::Failed("file " + std::to_string(k) + ": " + why);
            break;
          }
          pipe.Submit(b, unit_off + pos, n);
        }
        file_size += unit_len;
      }
      Result consumer_err = pipe.Finish();
      if (err.ok()) err = std::move(consumer_err);
      if (err.ok()) err = size_error(k, file_size);
    }
    for (auto& [c, st] : streams) {
      d_.cuCtxSetCurrent(c);
      if (st != nullptr) d_.cuStreamDestroy_v2(st);
    }
    (*sums)[k] = hashers[k]->Finish();
  };
  std::vector<std::thread> ts;
  for (int k = 0; k < w; ++k) ts.emplace_back(reader, k);
  for (auto& t : ts) t.join();
  for (Result& e : errs) {
    if (!e.ok()) return std::move(e);
  }
  return {};
}

// Host memory for plan_'s data: fresh anonymous memory per allocation, or (memfd >= 0) the
// memfd mapped shared, in stream order (grown to the drain's size when `write`).
Result Mover::MapHost(int memfd, bool write) {
  if (memfd < 0) {
    for (Phys* p : plan_) {
      void* m = ::mmap(nullptr, p->size, PROT_READ | PROT_WRITE,
                       MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
      if (m == MAP_FAILED) return Errno("host memory for the GPU's data");
      if (cfg_.huge_pages) ::madvise(m, p->size, MADV_HUGEPAGE);
      p->host = static_cast<char*>(m);
    }
    return {};
  }
  if (total_ == 0) return {};
  struct stat st;
  if (::fstat(memfd, &st) != 0) return Errno("cryod's host memory");
  if (static_cast<uint64_t>(st.st_size) < total_) {
    // cryod sized it from an earlier status; the job allocated since. The rest is the job's.
    if (!write) {
      return Result::Failed("cryod's host memory holds " + std::to_string(st.st_size) +
                            " bytes; the drain put " + std::to_string(total_) + " there");
    }
    if (::ftruncate(memfd, static_cast<off_t>(total_)) != 0)
      return Errno("growing cryod's host memory");
  }
  void* m =
      ::mmap(nullptr, total_, write ? PROT_READ | PROT_WRITE : PROT_READ, MAP_SHARED, memfd, 0);
  if (m == MAP_FAILED) return Errno("mapping cryod's host memory");
  if (cfg_.huge_pages) ::madvise(m, total_, MADV_HUGEPAGE);
  host_base_ = static_cast<char*>(m);
  host_len_ = total_;
  for (Phys* p : plan_) p->host = host_base_ + p->stream_offset;
  // Registered, the DMA reads or writes it directly: no pass through the ring. Where the driver
  // refuses (no context, read-only registration unsupported), the ring does it as before.
  if (cfg_.register_host && !plan_.empty()) {
    d_.cuCtxSetCurrent(plan_.front()->ctx);
    const unsigned flags = CU_MEMHOSTREGISTER_PORTABLE | (write ? 0 : CU_MEMHOSTREGISTER_READ_ONLY);
    host_registered_ = d_.cuMemHostRegister_v2(host_base_, host_len_, flags) == CUDA_SUCCESS;
  }
  return {};
}

void Mover::Tell() {
  if (told_) told_.Raise(copied_);
}

Result Mover::WaitFollowed(uint64_t end, bool verdict) {
  using Words = contract::gpu_fastpath::ProgressWords;
  if (!followed_) return {};
  const auto deadline = std::chrono::steady_clock::now() +
                        std::chrono::milliseconds(contract::gpu_fastpath::kMaxHoldMs);
  switch (
      followed_.Wait(end, verdict, [&] { return std::chrono::steady_clock::now() > deadline; })) {
    case Words::Waited::kDone:
      return {};
    case Words::Waited::kBad:
      return Result::Failed(
          "cryod's read of this refill's data from the checkpoint found it damaged: the data "
          "copied to the GPU is not the job's, and the job stays held",
          ErrorCode::kDataLoss);
    case Words::Waited::kEndedShort:
      return Result::Failed("cryod's progress page says " + std::to_string(followed_.verdict()) +
                            " after " + std::to_string(followed_.ready()) + " bytes");
    case Words::Waited::kStopped:
      break;
  }
  return Result::Failed("cryod's read of this refill's data stopped at " +
                        std::to_string(followed_.ready()) + " bytes");
}

void Mover::FreeHost() {
  if (host_registered_) {
    if (!plan_.empty()) d_.cuCtxSetCurrent(plan_.front()->ctx);
    d_.cuMemHostUnregister(host_base_);
    host_registered_ = false;
  }
  for (Phys* p : plan_) {
    if (p->host != nullptr && host_base_ == nullptr) ::munmap(p->host, p->size);
    p->host = nullptr;
  }
  if (host_base_ != nullptr) ::munmap(host_base_, host_len_);
  host_base_ = nullptr;
  host_len_ = 0;
}

void Mover::StopWriters() {
  for (auto& w : writers_) {
    if (w->thread.joinable()) w->thread.join();
  }
}

}  // namespace cryo::fastpath
