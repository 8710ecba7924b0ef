// CUDA graph capture behind GraphRunner's small interface
// (detail::DeviceGraph), so public headers need no CUDA headers. Compiled
// only when LibTorch has CUDA (STATICKV_WITH_CUDA).

#include <statickv/graph_runner.hpp>

#include <ATen/cuda/CUDAContext.h>
#include <ATen/cuda/CUDAGraph.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime_api.h>

#include <vector>

namespace statickv::detail {

namespace {

class CudaGraph final : public DeviceGraph {
 public:
  explicit CudaGraph(std::unique_ptr<at::cuda::CUDAGraph> graph) : graph_(std::move(graph)) {}
  void replay() override { graph_->replay(); }

 private:
  std::unique_ptr<at::cuda::CUDAGraph> graph_;
};

// Capture's set-up, held for the capture: `device` current, the caller's
// stream drained (capture is rare, once per key, so plain synchronization
// orders it with the caller's work; replays then run on the caller's
// stream), and a side stream current, since the legacy default stream
// cannot capture; `body` warmed up there `warmup_runs` times.
class SideStream {
 public:
  SideStream(const at::Device& device, int warmup_runs, const std::function<void()>& body)
      : device_guard_(checked(device)), side_(drained_side_stream()), stream_guard_(side_) {
    for (int i = 0; i < warmup_runs; ++i) body();
    side_.synchronize();
  }

 private:
  static const at::Device& checked(const at::Device& device) {
    TORCH_CHECK(device.is_cuda(), "device: expected a cuda device but got ", device);
    return device;
  }
  static c10::cuda::CUDAStream drained_side_stream() {
    c10::cuda::getCurrentCUDAStream().synchronize();
    return c10::cuda::getStreamFromPool();
  }
  c10::cuda::CUDAGuard device_guard_;
  c10::cuda::CUDAStream side_;
  c10::cuda::CUDAStreamGuard stream_guard_;
};

// A capture that throws leaves the default CUDA generator's state marked
// as capturing: CUDAGraph::capture_end throws on the invalidated capture
// before its generator epilogue runs. Every later random op outside a
// capture, and every replay of a graph captured earlier (its prologue
// advances the same state), would then fail with "Offset increment outside
// graph capture". A one-kernel capture on the same stream runs the prologue
// and the epilogue once more and leaves the state as it was (one kernel: an
// empty capture warns).
void end_generator_capture() {
  const at::Tensor one = at::zeros({1}, at::TensorOptions().device(at::kCUDA));
  at::cuda::CUDAGraph graph(/*keep_graph=*/true);
  graph.capture_begin();
  one.add_(0);
  graph.capture_end();
}

}  // namespace

GraphPool new_graph_pool() {
  const at::cuda::MempoolId_t id = at::cuda::graph_pool_handle();
  return GraphPool{static_cast<uint64_t>(id.first), static_cast<uint64_t>(id.second)};
}

std::unique_ptr<DeviceGraph> capture_cuda_graph(const at::Device& device, GraphPool pool,
                                                int warmup_runs,
                                                const std::function<void()>& body) {
  const SideStream side(device, warmup_runs, body);
  auto graph = std::make_unique<at::cuda::CUDAGraph>();
  graph->capture_begin(at::cuda::MempoolId_t{pool.first, pool.second});
  std::string failure;
  try {
    body();
  } catch (const c10::Error& e) {
    failure = e.what_without_backtrace();
  } catch (const std::exception& e) {
    failure = e.what();
  }
  if (!failure.empty()) {
    // End the broken capture so the stream can be used again; its own error
    // (the capture was invalidated) adds nothing to the first one.
    try {
      graph->capture_end();
    } catch (const std::exception&) {
    }
    (void)cudaGetLastError();
    end_generator_capture();
    TORCH_CHECK(false, "CUDA graph capture failed: ", failure);
  }
  graph->capture_end();
  return std::make_unique<CudaGraph>(std::move(graph));
}

GraphNodeCounts count_graph_nodes(const at::Device& device, int warmup_runs,
                                  const std::function<void()>& body) {
  const SideStream side(device, warmup_runs, body);
  at::cuda::CUDAGraph graph(/*keep_graph=*/true);
  graph.capture_begin();
  body();
  graph.capture_end();
  cudaGraph_t raw = graph.raw_cuda_graph();
  size_t count = 0;
  C10_CUDA_CHECK(cudaGraphGetNodes(raw, nullptr, &count));
  std::vector<cudaGraphNode_t> nodes(count);
  C10_CUDA_CHECK(cudaGraphGetNodes(raw, nodes.data(), &count));
  GraphNodeCounts counts;
  counts.total = static_cast<int64_t>(count);
  for (cudaGraphNode_t node : nodes) {
    cudaGraphNodeType type{};
    C10_CUDA_CHECK(cudaGraphNodeGetType(node, &type));
    counts.kernels += type == cudaGraphNodeTypeKernel;
    counts.copies += type == cudaGraphNodeTypeMemcpy;
    counts.sets += type == cudaGraphNodeTypeMemset;
  }
  return counts;
}

}  // namespace statickv::detail
