// Counts of N int32 keys in 2048 bins, the straightforward way: a memset step zeroes hist; one
// thread per key (blocks of 256) adds 1 to the key's bin with an atomic in global memory. Keys
// outside [0, 2047] are not counted.
extern "C" __global__ void bincount_global(const int* __restrict__ keys, unsigned int* __restrict__ hist, int n)
{
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        const int k = keys[i];
        if ((unsigned int)k < 2048u) atomicAdd(&hist[k], 1u);
    }
}
