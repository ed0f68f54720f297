// cryo-gpu-floors: what the machine can do at best for a checkpoint of N GiB, measured the way
// the fast path moves data, so the suite can put cryo's times beside them in the same call:
//   d2h_ms     device-to-host into one pinned 256 MiB buffer, repeated over N GiB of device memory
//   fill_ms    N GiB copied into fresh (never touched) host memory by T threads, huge pages
//              asked for as the library asks for them
//   warm_fill_ms  the same copy again, into that memory now faulted in
//   write_ms   N GiB written into W files of DIR with direct I/O, one writer per file
//   read_ms    the same files read back with direct I/O, one reader per file
//   pipe_write_ms  a checkpoint's shape: device-to-host into the (registered) host memory, each
//              256 MiB written to its file as soon as it is there
//   pipe_read_ms   a restore's shape: the files read into that memory, each 256 MiB copied to the
//              device as soon as it is read; the best a restore through host memory can do
//   ring_read_ms   the files read straight to the device through a small ring of pinned buffers
//              per reader (2 x 8 MiB, a stream each: the ring stays in the CPU's cache), with no
//              host copy of the whole; ring_read_hash_ms the same with each piece hashed as the
//              store's checksum (chunked_xxh3.h) before its copy: what a restore that reads the
//              store into GPU memory from its start could do (docs/proposals/restore-into-gpu.md)
//   register_pieces_ms / register_pieces8_ms  the same memory registered 256 MiB at a time, by
//              one thread and by eight
//   d2h_one_ms / d2h_all_ms  with two GPUs or more (and --node 1, the default): N GiB from GPU 0
//              alone, then from every GPU at once, each into its own faulted, registered host
//              memory (staging memory's kind): what the node allows drains side by side
//
//   cryo-gpu-floors --gib 8 --dir /var/tmp/store --threads 16 --files 4
// Prints one JSON object. The files are removed afterwards.

#include <cuda_runtime.h>
#include <fcntl.h>
#include <sched.h>
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "lib/base/chunked_xxh3.h"

namespace {

using Clock = std::chrono::steady_clock;
double Ms(Clock::time_point a) {
  return std::chrono::duration<double, std::milli>(Clock::now() - a).count();
}

int Fail(const char* what) {
  std::printf("{\"error\": \"%s\"}\n", what);
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  double gib = 1;
  std::string dir = "/var/tmp";
  int threads = static_cast<int>(std::thread::hardware_concurrency());
  int files = 4;
  int node = 1;
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string a = argv[i];
    if (a == "--gib")
      gib = std::atof(argv[i + 1]);
    else if (a == "--dir")
      dir = argv[i + 1];
    else if (a == "--threads")
      threads = std::atoi(argv[i + 1]);
    else if (a == "--files")
      files = std::atoi(argv[i + 1]);
    else if (a == "--node")
      node = std::atoi(argv[i + 1]);
    else
      return Fail("unknown argument");
  }
  const size_t slot = 256ull << 20;
  const size_t total = static_cast<size_t>(gib * (1ull << 30)) / slot * slot;
  if (total == 0 || threads < 1 || files < 1) return Fail("bad sizes");

  // Device-to-host through one pinned buffer (the library uses a ring of them).
  void* dev = nullptr;
  void* pinned = nullptr;
  const size_t dev_bytes = std::min(total, size_t(4) << 30);  // re-read: the link is the limit
  if (cudaMalloc(&dev, dev_bytes) != cudaSuccess) return Fail("cudaMalloc");
  if (cudaHostAlloc(&pinned, slot, cudaHostAllocPortable) != cudaSuccess) return Fail("pinned");
  cudaMemset(dev, 1, dev_bytes);
  cudaDeviceSynchronize();
  auto t0 = Clock::now();
  for (size_t off = 0; off < total; off += slot) {
    cudaMemcpy(pinned, static_cast<char*>(dev) + off % dev_bytes, slot, cudaMemcpyDeviceToHost);
  }
  const double d2h_ms = Ms(t0);
  std::memset(pinned, 7, slot);

  // Filling fresh host memory with T threads.
  char* host = static_cast<char*>(mmap(nullptr, total, PROT_READ | PROT_WRITE,
                                       MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0));
  if (host == MAP_FAILED) return Fail("mmap");
  madvise(host, total, MADV_HUGEPAGE);
  // N GiB copied into `host` by T threads, each its share, from the pinned buffer.
  auto fill_host = [&] {
    const auto start = Clock::now();
    std::vector<std::thread> ts;
    const size_t per = (total / threads + 4095) & ~size_t{4095};
    for (int k = 0; k < threads; ++k) {
      ts.emplace_back([&, k] {
        for (size_t off = k * per; off < std::min(total, (k + 1) * per); off += slot) {
          std::memcpy(host + off, pinned, std::min(slot, std::min(total, (k + 1) * per) - off));
        }
      });
    }
    for (auto& t : ts) t.join();
    return Ms(start);
  };
  const double fill_ms = fill_host();
  // The same copy again, into that memory now faulted in: what a copy into memory kept faulted
  // in (staging memory, pooled pages images) can do. Fresh against this is the price of
  // allocating and zeroing pages (and, on a VM that backs its memory on first touch, of that).
  const double warm_fill_ms = fill_host();

  // The store's floors: W files, direct I/O, one thread each, the same striping as the library.
  std::vector<std::string> paths;
  for (int k = 0; k < files; ++k) paths.push_back(dir + "/cryo-floor." + std::to_string(k));
  // File k, with direct I/O where the file system takes it.
  auto open_floor = [&](int k, bool write) {
    const int flags = write ? O_WRONLY | O_CREAT | O_TRUNC : O_RDONLY;
    int fd = open(paths[k].c_str(), flags | O_DIRECT, 0600);
    return fd >= 0 ? fd : open(paths[k].c_str(), flags, 0600);
  };
  auto io = [&](bool write) {
    std::vector<std::thread> ts;
    const size_t units = total / slot;
    for (int k = 0; k < files; ++k) {
      ts.emplace_back([&, k] {
        int fd = open_floor(k, write);
        if (fd < 0) return;
        for (size_t u = k; u < units; u += files) {
          char* p = host + u * slot;
          off_t at = static_cast<off_t>((u / files) * slot);
          ssize_t n = write ? pwrite(fd, p, slot, at) : pread(fd, p, slot, at);
          if (n != static_cast<ssize_t>(slot)) break;
        }
        if (write) fdatasync(fd);
        close(fd);
      });
    }
    for (auto& t : ts) t.join();
  };
  t0 = Clock::now();
  io(true);
  const double write_ms = Ms(t0);
  t0 = Clock::now();
  io(false);
  const double read_ms = Ms(t0);

  // The pipelines: one 256 MiB unit at a time handed between the GPU's copy and the file I/O,
  // the way cryod's staging slot hands it to the library. Registering the memory (what the
  // library does to a slot once) is not counted.
  const size_t units = total / slot;
  std::unique_ptr<std::atomic<int>[]> ready(new std::atomic<int>[units]);
  auto wait_for = [&](size_t u) {
    while (!ready[u].load(std::memory_order_acquire)) sched_yield();
  };
  double reg_ms = -1, pipe_write_ms = -1, pipe_read_ms = -1;
  t0 = Clock::now();
  if (cudaHostRegister(host, total, cudaHostRegisterPortable) == cudaSuccess) {
    reg_ms = Ms(t0);
    cudaStream_t stream;
    cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking);
    auto pipe = [&](bool write) {
      for (size_t u = 0; u < units; ++u) ready[u].store(0);
      std::vector<std::thread> ts;
      for (int k = 0; k < files; ++k) {
        ts.emplace_back([&, k] {
          int fd = open_floor(k, write);
          for (size_t u = k; u < units; u += files) {
            char* p = host + u * slot;
            off_t at = static_cast<off_t>((u / files) * slot);
            if (write) {
              wait_for(u);
              if (fd >= 0) (void)!pwrite(fd, p, slot, at);
            } else {
              if (fd >= 0) (void)!pread(fd, p, slot, at);
              ready[u].store(1, std::memory_order_release);
            }
          }
          if (fd >= 0) {
            if (write) fdatasync(fd);
            close(fd);
          }
        });
      }
      for (size_t u = 0; u < units; ++u) {
        char* d = static_cast<char*>(dev) + (u * slot) % dev_bytes;
        if (write) {
          cudaMemcpyAsync(host + u * slot, d, slot, cudaMemcpyDeviceToHost, stream);
          cudaStreamSynchronize(stream);
          ready[u].store(1, std::memory_order_release);
        } else {
          wait_for(u);
          cudaMemcpyAsync(d, host + u * slot, slot, cudaMemcpyHostToDevice, stream);
        }
      }
      cudaStreamSynchronize(stream);
      for (auto& t : ts) t.join();
    };
    t0 = Clock::now();
    pipe(true);
    pipe_write_ms = Ms(t0);
    t0 = Clock::now();
    pipe(false);
    pipe_read_ms = Ms(t0);
    cudaStreamDestroy(stream);
    cudaHostUnregister(host);
  }
  // Each file read by its own thread into two pinned 8 MiB buffers in turn, each copied to the
  // device on its own stream as soon as it is read (and hashed, with `hash`): the GPU memory is
  // the only place the whole lands.
  auto ring_read = [&](bool hash) {
    constexpr size_t kPiece = 8ull << 20;
    std::atomic<int> bad{0};
    std::vector<std::thread> ts;
    const auto start = Clock::now();
    for (int k = 0; k < files; ++k) {
      ts.emplace_back([&, k] {
        int fd = open_floor(k, false);
        char* buf[2] = {nullptr, nullptr};
        cudaStream_t st[2] = {nullptr, nullptr};
        for (int b = 0; b < 2; ++b) {
          if (cudaHostAlloc(reinterpret_cast<void**>(&buf[b]), kPiece, cudaHostAllocPortable) !=
                  cudaSuccess ||
              cudaStreamCreateWithFlags(&st[b], cudaStreamNonBlocking) != cudaSuccess) {
            ++bad;
          }
        }
        cryo::xxh3chunked::Hasher hasher;
        int b = 0;
        for (size_t u = k; fd >= 0 && bad == 0 && u < units; u += files) {
          const off_t at = static_cast<off_t>((u / files) * slot);
          for (size_t off = 0; off < slot; off += kPiece, b ^= 1) {
            cudaStreamSynchronize(st[b]);  // this buffer's last copy is done
            if (pread(fd, buf[b], kPiece, at + static_cast<off_t>(off)) !=
                static_cast<ssize_t>(kPiece)) {
              ++bad;
              break;
            }
            if (hash) hasher.Update(buf[b], kPiece);
            char* d = static_cast<char*>(dev) + (u * slot + off) % dev_bytes;
            cudaMemcpyAsync(d, buf[b], kPiece, cudaMemcpyHostToDevice, st[b]);
          }
        }
        if (hash) (void)hasher.Finish();
        for (int i = 0; i < 2; ++i) {
          if (st[i] != nullptr) {
            cudaStreamSynchronize(st[i]);
            cudaStreamDestroy(st[i]);
          }
          if (buf[i] != nullptr) cudaFreeHost(buf[i]);
        }
        if (fd >= 0) close(fd);
      });
    }
    for (auto& t : ts) t.join();
    return bad == 0 ? Ms(start) : -1.0;
  };
  // The files as the pipelines left them: in the page cache, as for the read floor above, and on
  // a tmpfs the store itself.
  const double ring_read_ms = ring_read(false);
  const double ring_read_hash_ms = ring_read(true);
  for (const auto& p : paths) unlink(p.c_str());

  // Registering the same memory 256 MiB at a time, by one thread and by eight: whether a
  // library could register a slot piece by piece behind a read instead of all of it first.
  auto register_pieces = [&](int n) {
    const auto t = Clock::now();
    std::vector<std::thread> ts;
    std::atomic<int> bad{0};
    for (int k = 0; k < n; ++k) {
      ts.emplace_back([&, k] {
        for (size_t u = k; u < units; u += n) {
          if (cudaHostRegister(host + u * slot, slot, cudaHostRegisterPortable) != cudaSuccess)
            ++bad;
        }
      });
    }
    for (auto& th : ts) th.join();
    const double took = bad == 0 ? Ms(t) : -1;
    for (size_t u = 0; u < units; ++u) cudaHostUnregister(host + u * slot);
    return took;
  };
  const double reg_pieces_ms = register_pieces(1);
  const double reg_pieces8_ms = register_pieces(8);

  // The node's drains side by side: every GPU into host memory of its own at once, against
  // GPU 0 alone into the same kind of memory.
  int gpus = 0;
  cudaGetDeviceCount(&gpus);
  double d2h_one_ms = -1, d2h_all_ms = -1;
  if (node == 1 && gpus >= 2) {
    std::vector<char*> regions(gpus, nullptr);
    std::vector<void*> devs(gpus, nullptr);
    std::vector<int> ok(gpus, 0);
    std::vector<std::thread> ts;
    for (int g = 0; g < gpus; ++g) {
      ts.emplace_back([&, g] {
        cudaSetDevice(g);
        void* r = mmap(nullptr, total, PROT_READ | PROT_WRITE,
                       MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
        if (r == MAP_FAILED) return;
        madvise(r, total, MADV_HUGEPAGE);
        std::memset(r, 0, total);
        regions[g] = static_cast<char*>(r);
        if (cudaHostRegister(r, total, cudaHostRegisterPortable) != cudaSuccess) return;
        if (cudaMalloc(&devs[g], dev_bytes) != cudaSuccess) return;
        cudaMemset(devs[g], 3, dev_bytes);
        cudaDeviceSynchronize();
        ok[g] = 1;
      });
    }
    for (auto& t : ts) t.join();
    ts.clear();
    auto drain = [&](int g) {
      cudaSetDevice(g);
      cudaStream_t st;
      cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking);
      for (size_t off = 0; off < total; off += slot) {
        cudaMemcpyAsync(regions[g] + off, static_cast<char*>(devs[g]) + off % dev_bytes, slot,
                        cudaMemcpyDeviceToHost, st);
      }
      cudaStreamSynchronize(st);
      cudaStreamDestroy(st);
    };
    bool all_ok = true;
    for (int g = 0; g < gpus; ++g) all_ok = all_ok && ok[g];
    if (all_ok) {
      t0 = Clock::now();
      drain(0);
      d2h_one_ms = Ms(t0);
      t0 = Clock::now();
      for (int g = 0; g < gpus; ++g) ts.emplace_back([&, g] { drain(g); });
      for (auto& t : ts) t.join();
      d2h_all_ms = Ms(t0);
    }
    for (int g = 0; g < gpus; ++g) {
      cudaSetDevice(g);
      if (devs[g] != nullptr) cudaFree(devs[g]);
      if (regions[g] != nullptr) {
        cudaHostUnregister(regions[g]);
        munmap(regions[g], total);
      }
    }
    cudaSetDevice(0);
  }

  std::printf(
      "{\"gib\": %.3f, \"bytes\": %zu, \"threads\": %d, \"files\": %d, \"d2h_ms\": %.1f, "
      "\"fill_ms\": %.1f, \"write_ms\": %.1f, \"read_ms\": %.1f, \"d2h_gbps\": %.2f, "
      "\"fill_gbps\": %.2f, \"write_gbps\": %.2f, \"read_gbps\": %.2f, \"register_ms\": %.1f, "
      "\"pipe_write_ms\": %.1f, \"pipe_read_ms\": %.1f, \"gpus\": %d, \"d2h_one_ms\": %.1f, "
      "\"d2h_all_ms\": %.1f, \"register_pieces_ms\": %.1f, \"register_pieces8_ms\": %.1f, "
      "\"warm_fill_ms\": %.1f, \"warm_fill_gbps\": %.2f, \"ring_read_ms\": %.1f, "
      "\"ring_read_hash_ms\": %.1f}\n",
      gib, total, threads, files, d2h_ms, fill_ms, write_ms, read_ms, total / d2h_ms / 1e6,
      total / fill_ms / 1e6, total / write_ms / 1e6, total / read_ms / 1e6, reg_ms, pipe_write_ms,
      pipe_read_ms, gpus, d2h_one_ms, d2h_all_ms, reg_pieces_ms, reg_pieces8_ms, warm_fill_ms,
      total / warm_fill_ms / 1e6, ring_read_ms, ring_read_hash_ms);
  return 0;
}
