// hold: a stand-in GPU job for tests/gpu/run.sh. Allocates N GiB on one GPU and holds it until
// killed, so the test can check what vramd reports for its pid.
//
//   hold --gib N [--async] [--device D] [--pattern]
//
// --gib 0 creates the CUDA context only (its cost is what NVML shows for the process).
// --async allocates from the device's default memory pool with cudaMallocAsync, as ComfyUI's
// default allocator does, then writes to it so the pages are committed. Without --async it uses
// cudaMalloc (and writes too). Prints "held N GiB pid P" once the memory is held, then sleeps.
// --pattern writes a value that depends on each word's position instead of one byte, and on
// SIGUSR1 checks every word on the GPU and prints "checked N words: M wrong" (the suspend check:
// memory that went to host RAM and back must read the same).
#include <cuda_runtime.h>
#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

namespace {

volatile sig_atomic_t g_stop = 0;
volatile sig_atomic_t g_check = 0;
void on_signal(int) { g_stop = 1; }
void on_usr1(int) { g_check = 1; }

__device__ unsigned int word_at(size_t i) {
  return static_cast<unsigned int>(i * 2654435761u) ^ static_cast<unsigned int>(i >> 32);
}

__global__ void fill(unsigned int* p, size_t n) {
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<size_t>(gridDim.x) * blockDim.x)
    p[i] = word_at(i);
}

__global__ void count_wrong(const unsigned int* p, size_t n, unsigned long long* wrong) {
  unsigned long long mine = 0;
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<size_t>(gridDim.x) * blockDim.x)
    mine += p[i] != word_at(i);
  if (mine) atomicAdd(wrong, mine);
}

bool check(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return true;
  std::fprintf(stderr, "hold: %s: %s\n", what, cudaGetErrorString(e));
  return false;
}

int usage() {
  std::fprintf(stderr, "usage: hold --gib N [--async] [--device D] [--pattern]\n");
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  double gib = -1;
  bool async = false;
  bool pattern = false;
  int device = 0;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--gib") == 0 && i + 1 < argc) {
      char* end = nullptr;
      gib = std::strtod(argv[++i], &end);
      if (*end != '\0' || gib < 0) return usage();
    } else if (std::strcmp(argv[i], "--async") == 0) {
      async = true;
    } else if (std::strcmp(argv[i], "--pattern") == 0) {
      pattern = true;
    } else if (std::strcmp(argv[i], "--device") == 0 && i + 1 < argc) {
      device = std::atoi(argv[++i]);
    } else {
      return usage();
    }
  }
  if (gib < 0) return usage();

  if (!check(cudaSetDevice(device), "cudaSetDevice")) return 1;
  if (!check(cudaFree(nullptr), "creating the context")) return 1;  // context only

  const size_t bytes = static_cast<size_t>(gib * 1024.0 * 1024.0 * 1024.0);
  void* p = nullptr;
  cudaStream_t stream = nullptr;
  if (bytes > 0) {
    if (async) {
      if (!check(cudaStreamCreate(&stream), "cudaStreamCreate")) return 1;
      // Keep freed memory in the pool rather than returning it at the next sync (default 0).
      cudaMemPool_t pool;
      if (check(cudaDeviceGetDefaultMemPool(&pool, device), "cudaDeviceGetDefaultMemPool")) {
        unsigned long long threshold = ~0ULL;
        check(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &threshold),
              "cudaMemPoolSetAttribute");
      }
      if (!check(cudaMallocAsync(&p, bytes, stream), "cudaMallocAsync")) return 1;
      if (!check(cudaMemsetAsync(p, 0x5a, bytes, stream), "cudaMemsetAsync")) return 1;
      if (!check(cudaStreamSynchronize(stream), "cudaStreamSynchronize")) return 1;
    } else {
      if (!check(cudaMalloc(&p, bytes), "cudaMalloc")) return 1;
      if (!check(cudaMemset(p, 0x5a, bytes), "cudaMemset")) return 1;
      if (!check(cudaDeviceSynchronize(), "cudaDeviceSynchronize")) return 1;
    }
  }

  const size_t words = bytes / sizeof(unsigned int);
  unsigned long long* wrong = nullptr;
  if (pattern && words > 0) {
    if (!check(cudaMalloc(&wrong, sizeof(*wrong)), "cudaMalloc (counter)")) return 1;
    fill<<<1024, 256>>>(static_cast<unsigned int*>(p), words);
    if (!check(cudaDeviceSynchronize(), "fill")) return 1;
  }

  signal(SIGTERM, on_signal);
  signal(SIGINT, on_signal);
  signal(SIGUSR1, on_usr1);
  std::printf("held %g GiB pid %d%s\n", gib, static_cast<int>(getpid()), async ? " async" : "");
  std::fflush(stdout);
  while (!g_stop) {
    pause();
    if (!g_check || !wrong) continue;
    g_check = 0;
    unsigned long long bad = 0;
    bool ok = check(cudaMemset(wrong, 0, sizeof(*wrong)), "cudaMemset (counter)");
    if (ok) count_wrong<<<1024, 256>>>(static_cast<const unsigned int*>(p), words, wrong);
    ok = ok && check(cudaDeviceSynchronize(), "count_wrong") &&
         check(cudaMemcpy(&bad, wrong, sizeof(bad), cudaMemcpyDeviceToHost), "cudaMemcpy");
    if (ok)
      std::printf("checked %zu words: %llu wrong\n", words, bad);
    else
      std::printf("check failed\n");
    std::fflush(stdout);
  }
  // Exit without freeing: the driver takes everything back when the process ends, which is
  // what the test measures (holdings vanish after the process is gone).
  return 0;
}
