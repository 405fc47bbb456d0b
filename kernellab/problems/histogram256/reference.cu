// 256-bin histogram of N bytes, the textbook way: a memset step zeroes hist; 1024 blocks of 256
// threads stride over the bytes one at a time, each block counting into its own histogram in
// shared memory, which is then added to hist with one global atomic per bin.
extern "C" __global__ void histogram_shared(const unsigned char* __restrict__ data,
                                            unsigned int* __restrict__ hist, int n)
{
    __shared__ unsigned int local[256];
    local[threadIdx.x] = 0u;
    __syncthreads();
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
        atomicAdd(&local[data[i]], 1u);
    __syncthreads();
    atomicAdd(&hist[threadIdx.x], local[threadIdx.x]);
}
