// What every hand-written kernel of Hypatia starts from (hopper/wgmma_linear.cu,
// chain/grid_chain.cu, hopper/transpose.cu): the headers NVRTC needs, the integer types, and the
// activations. `kernel::cuda::Preamble` puts this header, then a configuration's #defines and
// generated code, before a kernel; device benchmarks compile the same text, written by
// `cargo run --example cuda_source` (tools/README.md).
#include <cuda_bf16.h>
#include <cuda_fp16.h>
typedef unsigned int u32;
typedef unsigned long long u64;

// The activations, by the codes of `Activation` (#[repr(u32)]; a unit test checks that the two
// agree), computed as Burn's ops compute them. A kernel compiles in the one it applies, so the
// switch folds away: a run-time switch cost the Hopper kernel 2.3x (decision record 0004).
#define ACT_NONE 0u
#define ACT_RELU 1u
#define ACT_GELU 2u
#define ACT_GELU_TANH 3u
#define ACT_SILU 4u
#define ACT_LEAKY_RELU 5u
#define ACT_CLAMP 6u

__device__ __forceinline__ float activate(float v, u32 act, float alpha, float beta) {
    switch (act) {
    case ACT_RELU:
        return v <= 0.0f ? 0.0f : v; // keeps NaN, like Burn's relu (never fmaxf)
    case ACT_GELU:
        return v * (erff(v / 1.41421356f) + 1.0f) / 2.0f;
    case ACT_GELU_TANH:
        // v * v * v, not powf: within an ulp of it, without powf's slow path in the epilogue.
        return v * (tanhf((v + v * v * v * 0.044715f) * 0.79788456f) + 1.0f) * 0.5f;
    case ACT_SILU:
        return v * expf(-logf(expf(-v) + 1.0f));
    case ACT_LEAKY_RELU:
        return v < 0.0f ? v * alpha : v;
    case ACT_CLAMP:
        return fmaxf(alpha, fminf(beta, v)); // CubeCL's clamp on CUDA, NaN included
    default:
        return v;
    }
}

// What a backward epilogue does with its gate g (the forward's pre-activation), by the codes of
// `Gate` (#[repr(u32)]; the same unit test checks them), compiled in like ACT.
#define GATE_NONE 0u
#define GATE_RELU 1u
#define GATE_GELU 2u
// SiLU's backward also reads the forward's saved sigmoid s, a second gate-shaped operand (the
// kernel's `mask`, MASKED).
#define GATE_SILU 3u
// Tanh GELU's backward also reads the forward's saved tanh(i) + 1 (s, the kernel's `mask`) and
// the saved tanh input i (a third gate-shaped operand, the kernel's `aux`, AUXED).
#define GATE_GELU_TANH 4u
// LeakyReLU's backward as Burn's `Autodiff` computes it for mask_where(x, x < 0, x * slope):
// the gate g is the forward's saved mask (nonzero where x < 0), alpha the slope;
// mask_where's two gradients against zeros, the second scaled, added.
#define GATE_LEAKY_RELU 5u

__device__ __forceinline__ float gate_grad(float v, float g, float s, float i, float alpha,
                                           u32 gate) {
    switch (gate) {
    case GATE_RELU:
        return g <= 0.0f ? 0.0f : v; // a NaN gate keeps the value, like Burn's mask_fill
    case GATE_GELU: {
        // Burn 0.21's gelu_backward, op for op (the tanh approximation's derivative); g * g * g
        // for powi(g, 3), as ACT_GELU_TANH does.
        const float g3 = g * g * g;
        const float t = tanhf(g3 * 0.0356774f + g * 0.797885f);
        const float sech = -(t * t) + 1.0f;
        return (t * 0.5f + ((g3 * 0.0535161f + g * 0.398942f) * sech + 0.5f)) * v;
    }
    case GATE_SILU: {
        // Burn's `Autodiff` of `x · sigmoid(x)`, as the CubeCL kernels' gate_grad: v · s plus
        // v · g through `sigmoid_backward` of a sigmoid recomputed from g.
        const float sigmoid = expf(-logf(expf(-g) + 1.0f));
        const float derivative = sigmoid * (-sigmoid + 1.0f);
        return v * s + derivative * (v * g);
    }
    case GATE_GELU_TANH: {
        // Burn's `Autodiff` of gelu_approximate's ops, as the CubeCL kernels' gate_grad: the
        // last mul_scalar's and mul's gradients, tanh's (t recomputed from i), then the add's
        // and powf_scalar's (g · g · 3), summed in the order the gradients arrive.
        const float h = v * 0.5f;
        const float t = tanhf(i);
        const float d = ((h * g) * (-(t * t) + 1.0f)) * 0.7978845608f;
        return (d + h * s) + (d * 0.044715f) * ((g * g) * 3.0f);
    }
    case GATE_LEAKY_RELU: {
        const bool negative = g != 0.0f;
        return (negative ? 0.0f : v) + (negative ? v : 0.0f) * alpha;
    }
    default:
        return v;
    }
}
