// CopyRowSlices on the GPU: the host row indices go to temporaries on the device, then one
// launch of engine/kernels/cuda/zipvl.cuh's LaunchCopyRowSlices.
#include "engine/kernels/cuda/zipvl.cuh"
#include "engine/ops/cuda_backends.h"
#include "engine/ops/cuda_op_util_cuda.h"

namespace framezip::engine::ops {
namespace {

// Empty lists (the identity) reach the kernel as null.
const int32_t* RowsOrNull(const Tensor& t) {
  return t.numel() > 0 ? static_cast<const int32_t*>(t.raw_data()) : nullptr;
}

}  // namespace

Status CopyRowSlicesCuda(Device device, int64_t count, int64_t width, const SourceRows& src,
                         const DestinationRows& dst) {
  ScopedCudaDevice scope(device);
  // Freed when this returns: the caching allocator hands them out again only to work queued
  // after this launch on the same stream.
  FZ_ASSIGN_OR_RETURN(Tensor src_rows, DeviceI32(src.rows, device));
  FZ_ASSIGN_OR_RETURN(Tensor dst_rows, DeviceI32(dst.rows, device));
  cuda::RowSliceCopy p;
  p.src = src.data;
  p.src_stride = src.stride;
  p.src_col0 = src.col0;
  p.src_rows = RowsOrNull(src_rows);
  p.dst = dst.data;
  p.dst_stride = dst.stride;
  p.dst_col0 = dst.col0;
  p.dst_rows = RowsOrNull(dst_rows);
  p.rows = count;
  p.width = width;
  return LaunchStatus(cuda::LaunchCopyRowSlices(p, CurrentFramezipStream()), "CopyRowSlices");
}

}  // namespace framezip::engine::ops
