// The Mover's park (gpu_fastpath.h, "Parking"): a leave-running drain's data copied within the
// GPU into device memory cryod's parking process holds, and back, so that the driver's
// checkpoint finds the job's context empty without a copy over PCIe while the job is held.

#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include "plugins/fastpath/mover.h"
#include "plugins/fastpath/mover_internal.h"

namespace cryo::fastpath {

using mover_internal::Cuda;

namespace {

// The PCI bus id (the one name processes with different device numbers agree on) of the one GPU
// that holds all of `phys`; "" when it is none or several, or host memory (NCCL's SHM buffers,
// which have no place in a GPU's park) is among it.
std::string OneGpu(const Driver& d, const std::vector<Phys*>& phys) {
  std::set<int> devices;
  for (const Phys* p : phys) {
    if (p->host_mem) return "";
    devices.insert(p->prop.location.id);
  }
  CUdevice dev = 0;
  char bus[32] = {0};
  if (devices.size() != 1 || d.cuDeviceGet(&dev, *devices.begin()) != CUDA_SUCCESS ||
      d.cuDeviceGetPCIBusId(bus, sizeof(bus), dev) != CUDA_SUCCESS) {
    return "";
  }
  return bus;
}

}  // namespace

std::string Mover::Device() {
  std::vector<Phys*> moved;
  {
    std::lock_guard<std::mutex> l(reg_.mu());
    for (auto& [id, p] : reg_.phys()) {
      if (Registry::Moved(*p) && p->real != 0) moved.push_back(p.get());
    }
  }
  return OneGpu(d_, moved);
}

bool Mover::FitsPark(const std::string& device, uint64_t bytes) {
  return !plan_.empty() && total_ <= bytes && !device.empty() && OneGpu(d_, plan_) == device;
}

Result Mover::CopyPark(int fd, uint64_t bytes, bool out) {
  if (plan_.empty()) return {};
  if (total_ > bytes) {
    return Result::Failed("the park holds " + std::to_string(bytes) + " bytes, not the " +
                          std::to_string(total_) + " of the drain");
  }
  Phys* first = plan_.front();
  d_.cuCtxSetCurrent(first->ctx);
  CUmemGenericAllocationHandle h = 0;
  CUresult r =
      d_.cuMemImportFromShareableHandle(&h, reinterpret_cast<void*>(static_cast<intptr_t>(fd)),
                                        CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
  if (r != CUDA_SUCCESS) return Cuda(d_, "importing cryod's park", r);
  CUdeviceptr va = 0;
  r = d_.cuMemAddressReserve(&va, bytes, 0, 0, 0);
  if (r != CUDA_SUCCESS) {
    d_.cuMemRelease(h);
    return Cuda(d_, "reserving a range for cryod's park", r);
  }
  r = d_.cuMemMap(va, bytes, 0, h, 0);
  bool mapped = r == CUDA_SUCCESS;
  if (mapped) {
    CUmemAccessDesc a{};
    a.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    a.location.id = first->prop.location.id;  // the job's number of the park's GPU
    a.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    r = d_.cuMemSetAccess(va, bytes, &a, 1);
  }
  Result err;
  if (r != CUDA_SUCCESS) err = Cuda(d_, "mapping cryod's park", r);
  // Every allocation at its place in the stream, one stream per context, all waited for.
  for (size_t i = 0; err.ok() && i < plan_.size(); ++i) {
    Phys* p = plan_[i];
    d_.cuCtxSetCurrent(p->ctx);
    const CUdeviceptr job = SourceOf(p);
    const CUdeviceptr park = va + p->stream_offset;
    r = d_.cuMemcpyDtoDAsync_v2(out ? park : job, out ? job : park, p->size, StreamFor(p->ctx));
    if (r != CUDA_SUCCESS)
      err = Cuda(d_, out ? "copying into cryod's park" : "copying back from cryod's park", r);
  }
  for (auto& [ctx, st] : streams_) {
    d_.cuCtxSetCurrent(ctx);
    r = st != nullptr ? d_.cuStreamSynchronize(st) : d_.cuCtxSynchronize();
    if (r != CUDA_SUCCESS && err.ok()) err = Cuda(d_, "waiting for the park's copies", r);
  }
  d_.cuCtxSetCurrent(first->ctx);
  if (mapped) d_.cuMemUnmap(va, bytes);
  d_.cuMemAddressFree(va, bytes);
  d_.cuMemRelease(h);
  return err;
}

}  // namespace cryo::fastpath
