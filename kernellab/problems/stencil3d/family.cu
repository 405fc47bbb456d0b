// 7-point stencil over an NX x NY x NZ fp32 grid (x fastest), zero outside the grid (stencil3d):
//   out = C0 in[z][y][x] + C1 (in[x-1] + in[x+1]) + C2 (in[y-1] + in[y+1]) + C3 (in[z-1] + in[z+1])
// Memory-bound: each point is read and written once at best, 8 bytes for 8 flops.
//
// Knobs (the variant's #define lines come before this text):
//   ALGO_direct  a thread computes ZPT points one above the other, each from 7 loads through the cache
//   ALGO_march   a thread walks ZPT planes up z keeping in[z-1], in[z], in[z+1] in registers: one new
//                load along z a point, the x and y neighbours through the cache
//   ALGO_smem    as march, and the block stages each plane's tile with its one-point halo in shared
//                memory, so the x and y neighbours come from there
//   BX, BY       the block's threads along x and y (a block covers BX x BY points of ZPT planes)
//   ZPT          z planes a thread computes
//   LOAD_plain   plain loads; LOAD_ldg: through the read-only path (__ldg)
#define C0 -2.5f
#define C1 0.75f
#define C2 0.5f
#define C3 0.25f

#if defined(LOAD_ldg)
#define LD(p) __ldg(p)
#else
#define LD(p) (*(p))
#endif

__device__ __forceinline__ float at(const float* __restrict__ in, int x, int y, int z, int nx, int ny, int nz)
{
    if (x < 0 || y < 0 || z < 0 || x >= nx || y >= ny || z >= nz) return 0.0f;
    return LD(&in[((long long)z * ny + y) * nx + x]);
}

extern "C" __global__ void __launch_bounds__(BX * BY)
stencil3d_family(const float* __restrict__ in, float* __restrict__ out, int nx, int ny, int nz)
{
    const int x = blockIdx.x * BX + threadIdx.x;
    const int y = blockIdx.y * BY + threadIdx.y;
    const int z0 = blockIdx.z * ZPT;
    const bool inside = x < nx && y < ny;
    const long long sz = (long long)nx * ny;
#if defined(ALGO_direct)
    if (!inside) return;
#pragma unroll
    for (int k = 0; k < ZPT; ++k) {
        const int z = z0 + k;
        if (z >= nz) break;
        const long long i = z * sz + (long long)y * nx + x;
        out[i] = C0 * LD(&in[i]) + C1 * (at(in, x - 1, y, z, nx, ny, nz) + at(in, x + 1, y, z, nx, ny, nz))
               + C2 * (at(in, x, y - 1, z, nx, ny, nz) + at(in, x, y + 1, z, nx, ny, nz))
               + C3 * (at(in, x, y, z - 1, nx, ny, nz) + at(in, x, y, z + 1, nx, ny, nz));
    }
#else
    // the column through (x, y): below, here and above the plane being computed
    float below = inside ? at(in, x, y, z0 - 1, nx, ny, nz) : 0.0f;
    float here = inside ? at(in, x, y, z0, nx, ny, nz) : 0.0f;
#if defined(ALGO_smem)
    __shared__ float tile[BY + 2][BX + 2];
    const int tx = threadIdx.x + 1, ty = threadIdx.y + 1;
#endif
    for (int k = 0; k < ZPT; ++k) {
        const int z = z0 + k;
        if (z >= nz) break;  // the same z for the whole block: no thread leaves a barrier early
        const float above = inside ? at(in, x, y, z + 1, nx, ny, nz) : 0.0f;
#if defined(ALGO_smem)
        tile[ty][tx] = here;
        if (threadIdx.x == 0) tile[ty][0] = at(in, x - 1, y, z, nx, ny, nz);
        if (threadIdx.x == BX - 1) tile[ty][BX + 1] = at(in, x + 1, y, z, nx, ny, nz);
        if (threadIdx.y == 0) tile[0][tx] = at(in, x, y - 1, z, nx, ny, nz);
        if (threadIdx.y == BY - 1) tile[BY + 1][tx] = at(in, x, y + 1, z, nx, ny, nz);
        __syncthreads();
        const float xs = tile[ty][tx - 1] + tile[ty][tx + 1];
        const float ys = tile[ty - 1][tx] + tile[ty + 1][tx];
        __syncthreads();  // the tile is rewritten for the next plane
#else
        const float xs = inside ? at(in, x - 1, y, z, nx, ny, nz) + at(in, x + 1, y, z, nx, ny, nz) : 0.0f;
        const float ys = inside ? at(in, x, y - 1, z, nx, ny, nz) + at(in, x, y + 1, z, nx, ny, nz) : 0.0f;
#endif
        if (inside) out[z * sz + (long long)y * nx + x] = C0 * here + C1 * xs + C2 * ys + C3 * (below + above);
        below = here;
        here = above;
    }
#endif
}
