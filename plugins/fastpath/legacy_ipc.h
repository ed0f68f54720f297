#pragma once

// Legacy CUDA IPC (cuIpcGetMemHandle / cuIpcOpenMemHandle) of memory the library owns.
//
// The driver cannot give a legacy IPC handle for memory backed the library's way (a physical
// allocation mapped on a reserved range), and a job that used the driver's handles could not be
// restored anyway (driver 580 restores no process that maps another's memory). So the library
// makes the handle itself: the allocation is exported once as a POSIX descriptor the library
// keeps, and the 64 bytes of CUipcMemHandle carry kIpcMagic, the exporter's pid, that export's
// id, the allocation's size and a random secret. The process that opens it asks the exporter's
// library for the descriptor over the exporter's channel ("share", lib/contract/gpu_fastpath.h),
// imports it and maps it at a new address, exactly as NCCL's P2P transport does with the
// descriptors it passes itself. From then on the checkpoint finds, moves and carries it like any
// other shared allocation (docs/gpu.md, "Shared memory between ranks").

#include <cuda.h>

#include <chrono>
#include <cstdint>
#include <string>

#include "plugins/fastpath/gate.h"
#include "plugins/fastpath/mover.h"
#include "plugins/fastpath/registry.h"
#include "plugins/fastpath/result.h"

namespace cryo::fastpath {

void EncodeIpcHandle(const IpcHandle& h, CUipcMemHandle* out);
// False for a handle that is not the library's (the driver's own: passed through).
bool DecodeIpcHandle(const CUipcMemHandle& in, IpcHandle* out);

std::string SecretHex(const uint64_t secret[2]);
bool SecretFromHex(const std::string& hex, uint64_t secret[2]);

// Asks the exporter's library for the descriptor of h's export: *fd (the caller's), or why not,
// with ErrorCode::kBusy when the exporter's memory is out of the GPU just now (ask again).
Result FetchIpcShare(const IpcHandle& h, int* fd);

// cuIpcOpenMemHandle of the library's handle: the descriptor fetched outside the gate (the
// exporter may be held at a cut that waits for this process's gate), imported and mapped inside
// it; fetched again when a drain came in between. Gives up after `patience` of busy answers.
CUresult OpenIpcHandle(Registry& reg, Mover& mover, Gate& gate, const IpcHandle& h,
                       CUdeviceptr* dptr, std::chrono::milliseconds patience);

}  // namespace cryo::fastpath
