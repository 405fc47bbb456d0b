// 7-point stencil over an NX x NY x NZ fp32 grid (x fastest), zero outside the grid:
//   out = C0 in[z][y][x] + C1 (in[x-1] + in[x+1]) + C2 (in[y-1] + in[y+1]) + C3 (in[z-1] + in[z+1])
// The straightforward way: one thread per point (blocks of 32 x 8 over x and y, one z plane per
// grid row), every neighbour read from global memory.
#define C0 -2.5f
#define C1 0.75f
#define C2 0.5f
#define C3 0.25f

extern "C" __global__ void stencil3d_naive(const float* __restrict__ in, float* __restrict__ out,
                                           int nx, int ny, int nz)
{
    const int x = blockIdx.x * blockDim.x + threadIdx.x;
    const int y = blockIdx.y * blockDim.y + threadIdx.y;
    const int z = blockIdx.z;
    if (x >= nx || y >= ny || z >= nz) return;
    const long long sy = nx, sz = (long long)nx * ny;
    const long long i = z * sz + y * sy + x;
    const float xm = x > 0 ? in[i - 1] : 0.0f, xp = x < nx - 1 ? in[i + 1] : 0.0f;
    const float ym = y > 0 ? in[i - sy] : 0.0f, yp = y < ny - 1 ? in[i + sy] : 0.0f;
    const float zm = z > 0 ? in[i - sz] : 0.0f, zp = z < nz - 1 ? in[i + sz] : 0.0f;
    out[i] = C0 * in[i] + C1 * (xm + xp) + C2 * (ym + yp) + C3 * (zm + zp);
}
