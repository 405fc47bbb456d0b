// Softened gravitational accelerations of N bodies, all pairs, the straightforward way: one thread
// per body (blocks of 256) walks every body j straight from global memory and sums
//   acc[i] += m_j (p_j - p_i) / (|p_j - p_i|^2 + eps^2)^(3/2)
// with sqrtf and a division. pos[j] = (x, y, z, m); acc[i] = (ax, ay, az).
#define EPS2 0.01f

extern "C" __global__ void nbody_naive(const float4* __restrict__ pos, float* __restrict__ acc, int n)
{
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    const float4 p = pos[i];
    float ax = 0.0f, ay = 0.0f, az = 0.0f;
    for (int j = 0; j < n; ++j) {
        const float4 q = pos[j];
        const float dx = q.x - p.x, dy = q.y - p.y, dz = q.z - p.z;
        const float r2 = dx * dx + dy * dy + dz * dz + EPS2;
        const float s = q.w / (r2 * sqrtf(r2));
        ax += dx * s;
        ay += dy * s;
        az += dz * s;
    }
    acc[3 * i] = ax;
    acc[3 * i + 1] = ay;
    acc[3 * i + 2] = az;
}
