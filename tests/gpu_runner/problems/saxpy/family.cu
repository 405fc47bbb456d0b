// Each thread handles ITEMS groups of VEC consecutive floats; VEC == 4 uses 16-byte loads.
extern "C" __global__ void saxpy_family(const float* __restrict__ x, const float* __restrict__ y,
                                        float* __restrict__ out, float a, int n) {
    long long base = ((long long)blockIdx.x * BLOCK * ITEMS) * VEC;
#pragma unroll
    for (int item = 0; item < ITEMS; ++item) {
        long long i = base + ((long long)item * BLOCK + threadIdx.x) * VEC;
#if VEC == 4
        if (i + 3 < n) {
            float4 xv = *reinterpret_cast<const float4*>(x + i);
            float4 yv = *reinterpret_cast<const float4*>(y + i);
            float4 r = make_float4(a * xv.x + yv.x, a * xv.y + yv.y, a * xv.z + yv.z, a * xv.w + yv.w);
            *reinterpret_cast<float4*>(out + i) = r;
        } else {
            for (long long j = i; j < n && j < i + 4; ++j) out[j] = a * x[j] + y[j];
        }
#else
        if (i < n) out[i] = a * x[i] + y[i];
#endif
    }
}
