// cryo-gpu-testload: a CUDA job for the GPU checkpoint tests. Holds N GiB of device memory in
// chunks (256 MiB unless --chunk-mib says otherwise) filled with a pattern that depends on each
// chunk's generation; every step one chunk is verified and rewritten with the next generation
// (one kernel), and a busy kernel keeps the GPU occupied. Any word that does not hold what the host
// expects is counted. The status file (JSON, replaced atomically about every 200 ms) says how far
// it got and whether every word so far verified.
//
//   cryo-gpu-testload --gib 8 --status /tmp/s.json [--spin-ms 5000] [--managed-mib 64]
//                     [--busy-us 2000] [--seconds 0] [--chunk-mib 256] [--static-gib 16]
// --static-gib allocates that much more first, as "weights": filled once, and every step one
// chunk of them is verified but never written (an inference server's weights; what an
// incremental checkpoint need not write again).
// (A small job, `--gib 0.015625 --chunk-mib 16`, gives a checkpoint small enough to carry from
// one machine to another for the cross-node test.)

#include <cuda_runtime.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace {

volatile sig_atomic_t g_stop = 0;

__host__ __device__ inline uint64_t Mix(uint64_t x) {
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdULL;
  x ^= x >> 33;
  x *= 0xc4ceb9fe1a85ec53ULL;
  x ^= x >> 33;
  return x;
}

__host__ __device__ inline uint64_t Pattern(uint64_t chunk, uint64_t i, uint64_t gen) {
  return Mix((chunk << 40) ^ i) ^ (gen * 0x9E3779B97F4A7C15ULL);
}

__global__ void Fill(uint64_t* p, size_t words, uint64_t chunk, uint64_t gen) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < words;
       i += size_t(gridDim.x) * blockDim.x) {
    p[i] = Pattern(chunk, i, gen);
  }
}

// Checks generation `gen`, writes `gen + 1`.
__global__ void VerifyAdvance(uint64_t* p, size_t words, uint64_t chunk, uint64_t gen,
                              unsigned long long* bad) {
  unsigned long long mine = 0;
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < words;
       i += size_t(gridDim.x) * blockDim.x) {
    if (p[i] != Pattern(chunk, i, gen)) ++mine;
    p[i] = Pattern(chunk, i, gen + 1);
  }
  if (mine) atomicAdd(bad, mine);
}

__global__ void Spin(long long cycles, unsigned long long* counter) {
  long long start = clock64();
  while (clock64() - start < cycles) {
  }
  if (threadIdx.x == 0 && blockIdx.x == 0) atomicAdd(counter, 1ULL);
}

__global__ void Touch(int* p, size_t n) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n;
       i += size_t(gridDim.x) * blockDim.x) {
    p[i] += 1;
  }
}

// Checks generation 0 of a weights chunk; writes nothing.
__global__ void VerifyStatic(const uint64_t* p, size_t words, uint64_t chunk,
                             unsigned long long* bad) {
  unsigned long long mine = 0;
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < words;
       i += size_t(gridDim.x) * blockDim.x) {
    if (p[i] != Pattern(chunk, i, 0)) ++mine;
  }
  if (mine) atomicAdd(bad, mine);
}

struct Status {
  double gib = 0;
  uint64_t chunks = 0;
  uint64_t steps = 0;
  uint64_t full_passes = 0;
  unsigned long long mismatches = 0;
  unsigned long long busy_kernels = 0;
  bool ready = false;
  std::string error;
};

void WriteStatus(const std::string& path, const Status& s) {
  if (path.empty()) return;
  std::string tmp = path + ".tmp";
  FILE* f = std::fopen(tmp.c_str(), "w");
  if (!f) return;
  std::fprintf(f,
               "{\"pid\": %d, \"gib\": %.6f, \"chunks\": %llu, \"ready\": %s, \"steps\": %llu, "
               "\"full_passes\": %llu, \"mismatches\": %llu, \"busy_kernels\": %llu, "
               "\"verified\": %s, \"error\": \"%s\"}\n",
               getpid(), s.gib, (unsigned long long)s.chunks, s.ready ? "true" : "false",
               (unsigned long long)s.steps, (unsigned long long)s.full_passes, s.mismatches,
               s.busy_kernels, s.ready && s.mismatches == 0 && s.error.empty() ? "true" : "false",
               s.error.c_str());
  std::fclose(f);
  std::rename(tmp.c_str(), path.c_str());
}

}  // namespace

int main(int argc, char** argv) {
  double gib = 1;
  std::string status_path;
  long spin_ms = 0;
  long busy_us = 2000;
  long managed_mib = 0;
  double seconds = 0;
  long chunk_mib = 256;
  double static_gib = 0;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    const char* v = i + 1 < argc ? argv[i + 1] : "";
    if (a == "--gib")
      gib = std::atof(v), ++i;
    else if (a == "--status")
      status_path = v, ++i;
    else if (a == "--spin-ms")
      spin_ms = std::atol(v), ++i;
    else if (a == "--busy-us")
      busy_us = std::atol(v), ++i;
    else if (a == "--managed-mib")
      managed_mib = std::atol(v), ++i;
    else if (a == "--seconds")
      seconds = std::atof(v), ++i;
    else if (a == "--static-gib")
      static_gib = std::atof(v), ++i;
    else if (a == "--chunk-mib")
      chunk_mib = std::atol(v), ++i;
    else {
      std::fprintf(stderr, "unknown argument %s\n", a.c_str());
      return 2;
    }
  }
  signal(SIGTERM, [](int) { g_stop = 1; });
  signal(SIGINT, [](int) { g_stop = 1; });

  Status st;
  st.gib = gib;
  auto fail = [&](const char* what, cudaError_t e) {
    st.error = std::string(what) + ": " + cudaGetErrorString(e);
    WriteStatus(status_path, st);
    std::fprintf(stderr, "%s\n", st.error.c_str());
    return 1;
  };

  int sms = 0, clock_khz = 0;
  cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0);
  cudaDeviceGetAttribute(&clock_khz, cudaDevAttrClockRate, 0);
  if (chunk_mib <= 0) {
    std::fprintf(stderr, "--chunk-mib must be positive\n");
    return 2;
  }
  const size_t chunk_bytes = size_t(chunk_mib) << 20;
  const size_t chunk_words = chunk_bytes / sizeof(uint64_t);
  // The weights first, so that they lead the fast path's stream.
  constexpr uint64_t kWeightsId = 1 << 20;
  const size_t nweights = static_cast<size_t>(static_gib * 1024.0 / double(chunk_mib) + 0.5);
  std::vector<uint64_t*> weights(nweights, nullptr);
  for (size_t c = 0; c < nweights; ++c) {
    if (cudaError_t e = cudaMalloc(&weights[c], chunk_bytes); e != cudaSuccess)
      return fail("cudaMalloc", e);
    Fill<<<sms * 4, 512>>>(weights[c], chunk_words, kWeightsId + c, 0);
  }
  size_t chunks = static_cast<size_t>(gib * 1024.0 / double(chunk_mib) + 0.5);
  if (chunks == 0) chunks = 1;
  st.chunks = chunks;
  std::vector<uint64_t*> mem(chunks, nullptr);
  std::vector<uint64_t> gen(chunks, 0);
  for (size_t c = 0; c < chunks; ++c) {
    if (cudaError_t e = cudaMalloc(&mem[c], chunk_bytes); e != cudaSuccess)
      return fail("cudaMalloc", e);
    Fill<<<sms * 4, 512>>>(mem[c], chunk_words, c, 0);
  }
  unsigned long long* bad = nullptr;
  unsigned long long* busy = nullptr;
  if (cudaError_t e = cudaMalloc(&bad, sizeof(*bad)); e != cudaSuccess)
    return fail("cudaMalloc", e);
  if (cudaError_t e = cudaMalloc(&busy, sizeof(*busy)); e != cudaSuccess)
    return fail("cudaMalloc", e);
  cudaMemset(bad, 0, sizeof(*bad));
  cudaMemset(busy, 0, sizeof(*busy));
  int* managed = nullptr;
  size_t managed_n = size_t(managed_mib) << 20 >> 2;
  if (managed_mib > 0) {
    if (cudaError_t e = cudaMallocManaged(&managed, managed_n * sizeof(int)); e != cudaSuccess) {
      return fail("cudaMallocManaged", e);
    }
    std::memset(managed, 0, managed_n * sizeof(int));
  }
  if (cudaError_t e = cudaDeviceSynchronize(); e != cudaSuccess) return fail("fill", e);
  st.ready = true;
  WriteStatus(status_path, st);
  std::fprintf(stderr, "testload pid %d: %zu x %ld MiB ready\n", getpid(), chunks, chunk_mib);

  // clock64 counts SM cycles: cycles = us * kHz / 1000.
  long long busy_cycles = static_cast<long long>(busy_us) * clock_khz / 1000;
  long long spin_cycles = static_cast<long long>(spin_ms) * clock_khz;
  auto start = std::chrono::steady_clock::now();
  auto last_write = start;
  while (!g_stop) {
    size_t c = st.steps % chunks;
    VerifyAdvance<<<sms * 4, 512>>>(mem[c], chunk_words, c, gen[c], bad);
    ++gen[c];
    if (nweights > 0) {
      const size_t w = st.steps % nweights;
      VerifyStatic<<<sms * 4, 512>>>(weights[w], chunk_words, kWeightsId + w, bad);
    }
    Spin<<<sms, 128>>>(spin_ms > 0 ? spin_cycles : busy_cycles, busy);
    if (managed) Touch<<<sms, 256>>>(managed, managed_n);
    if (cudaError_t e = cudaDeviceSynchronize(); e != cudaSuccess) return fail("step", e);
    ++st.steps;
    if (st.steps % chunks == 0) ++st.full_passes;
    auto now = std::chrono::steady_clock::now();
    if (now - last_write > std::chrono::milliseconds(200)) {
      cudaMemcpy(&st.mismatches, bad, sizeof(*bad), cudaMemcpyDeviceToHost);
      if (cudaError_t e = cudaMemcpy(&st.busy_kernels, busy, sizeof(*busy), cudaMemcpyDeviceToHost);
          e != cudaSuccess) {
        return fail("readback", e);
      }
      WriteStatus(status_path, st);
      last_write = now;
    }
    if (seconds > 0 && now - start > std::chrono::duration<double>(seconds)) break;
  }
  cudaMemcpy(&st.mismatches, bad, sizeof(*bad), cudaMemcpyDeviceToHost);
  WriteStatus(status_path, st);
  return st.mismatches == 0 ? 0 : 3;
}
