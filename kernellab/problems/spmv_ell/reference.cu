// y = A x for a sparse A in ELLPACK layout, fp32: row r holds K entries, values val[r, k] and column
// indices col[r, k] (both row-major [R, K]), and y[r] = sum over k < K of val[r, k] * x[col[r, k]].
// One thread per row walks its K entries in order. Rows are K*4 = 128 bytes apart, so at each step
// the 32 threads of a warp load from 32 different rows (one 4-byte word of each 128-byte line), and
// every gather of x is a random 4-byte read.
extern "C" __global__ void spmv_ell_rows(const float* __restrict__ val, const int* __restrict__ col,
                                         const float* __restrict__ x, float* __restrict__ y, int rows, int k)
{
    const int row = blockIdx.x * blockDim.x + threadIdx.x;
    if (row >= rows) return;
    const float* v = val + (size_t)row * k;
    const int* c = col + (size_t)row * k;
    float acc = 0.0f;
    for (int j = 0; j < k; ++j) acc += v[j] * x[c[j]];
    y[row] = acc;
}
