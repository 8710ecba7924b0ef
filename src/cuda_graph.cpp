// CUDA graph capture behind GraphRunner's small interface
// (detail::DeviceGraph), so public headers need no CUDA headers. Compiled
// only when LibTorch has CUDA (STATICKV_WITH_CUDA).

#include <statickv/graph_runner.hpp>

#include <ATen/cuda/CUDAContext.h>
#include <ATen/cuda/CUDAEvent.h>
#include <ATen/cuda/CUDAGraph.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda.h>
#include <cuda_runtime_api.h>

#include <string>
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

namespace {

// Runs `body` `warmup_runs` times, captures it once on a side stream of
// `device` and hands the graph to `visit` before it is dropped.
void with_captured_graph(const at::Device& device, int warmup_runs,
                         const std::function<void()>& body,
                         const std::function<void(cudaGraph_t)>& visit) {
  const SideStream side(device, warmup_runs, body);
  at::cuda::CUDAGraph graph(/*keep_graph=*/true);
  graph.capture_begin();
  body();
  graph.capture_end();
  visit(graph.raw_cuda_graph());
}

std::vector<cudaGraphNode_t> nodes_of(cudaGraph_t graph) {
  size_t count = 0;
  C10_CUDA_CHECK(cudaGraphGetNodes(graph, nullptr, &count));
  std::vector<cudaGraphNode_t> nodes(count);
  C10_CUDA_CHECK(cudaGraphGetNodes(graph, nodes.data(), &count));
  nodes.resize(count);
  return nodes;
}

// A driver entry point by name, or nullptr where the driver lacks it.
// Through the runtime, so nothing links libcuda (absent on machines
// without a GPU, where the library must still load).
template <typename Fn>
Fn driver_entry(const char* symbol, unsigned int version) {
  void* fn = nullptr;
  cudaDriverEntryPointQueryResult found{};
  if (cudaGetDriverEntryPointByVersion(symbol, &fn, version, cudaEnableDefault, &found) !=
          cudaSuccess ||
      found != cudaDriverEntryPointSuccess) {
    (void)cudaGetLastError();
    return nullptr;
  }
  return reinterpret_cast<Fn>(fn);
}

// A kernel node's name and launch shape, through the driver's view of the
// node: it names kernels that libraries (cuBLAS) launched through the
// driver API as well as the runtime's.
GraphKernel kernel_of(cudaGraphNode_t node) {
  using GetParams = CUresult (*)(CUgraphNode, CUDA_KERNEL_NODE_PARAMS*);
  using GetName = CUresult (*)(const char**, CUfunction);
  static const auto get_params = driver_entry<GetParams>("cuGraphKernelNodeGetParams", 12000);
  static const auto get_name = driver_entry<GetName>("cuFuncGetName", 12030);
  GraphKernel k;
  k.name = "?";
  CUDA_KERNEL_NODE_PARAMS p{};
  if (get_params == nullptr ||
      get_params(reinterpret_cast<CUgraphNode>(node), &p) != CUDA_SUCCESS) {
    return k;
  }
  const char* name = nullptr;
  if (get_name != nullptr && p.func != nullptr && get_name(&name, p.func) == CUDA_SUCCESS &&
      name != nullptr) {
    k.name = name;
  }
  k.grid[0] = p.gridDimX, k.grid[1] = p.gridDimY, k.grid[2] = p.gridDimZ;
  k.block[0] = p.blockDimX, k.block[1] = p.blockDimY, k.block[2] = p.blockDimZ;
  k.shared_bytes = p.sharedMemBytes;
  return k;
}

}  // namespace

GraphNodeCounts count_graph_nodes(const at::Device& device, int warmup_runs,
                                  const std::function<void()>& body) {
  GraphNodeCounts counts;
  with_captured_graph(device, warmup_runs, body, [&](cudaGraph_t graph) {
    const std::vector<cudaGraphNode_t> nodes = nodes_of(graph);
    counts.total = static_cast<int64_t>(nodes.size());
    for (cudaGraphNode_t node : nodes) {
      cudaGraphNodeType type{};
      C10_CUDA_CHECK(cudaGraphNodeGetType(node, &type));
      counts.kernels += type == cudaGraphNodeTypeKernel;
      counts.copies += type == cudaGraphNodeTypeMemcpy;
      counts.sets += type == cudaGraphNodeTypeMemset;
    }
  });
  return counts;
}

std::vector<GraphKernel> graph_kernels(const at::Device& device, int warmup_runs,
                                       const std::function<void()>& body,
                                       const std::string& dot_path) {
  std::vector<GraphKernel> kernels;
  with_captured_graph(device, warmup_runs, body, [&](cudaGraph_t graph) {
    if (!dot_path.empty()) {
      C10_CUDA_CHECK(
          cudaGraphDebugDotPrint(graph, dot_path.c_str(), cudaGraphDebugDotFlagsVerbose));
    }
    for (cudaGraphNode_t node : nodes_of(graph)) {
      cudaGraphNodeType type{};
      C10_CUDA_CHECK(cudaGraphNodeGetType(node, &type));
      if (type == cudaGraphNodeTypeKernel) kernels.push_back(kernel_of(node));
    }
  });
  return kernels;
}

double stream_seconds(const at::Device& device, const std::function<void()>& fn) {
  const c10::cuda::CUDAGuard guard(device);
  const c10::cuda::CUDAStream stream = c10::cuda::getCurrentCUDAStream();
  stream.synchronize();
  at::cuda::CUDAEvent start(cudaEventDefault), stop(cudaEventDefault);  // timing on
  start.record(stream);
  fn();
  stop.record(stream);
  stop.synchronize();
  return static_cast<double>(start.elapsed_time(stop)) * 1e-3;
}

}  // namespace statickv::detail
