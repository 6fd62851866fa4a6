// Scalar activations shared by the CPU reference ops, written once so every op agrees.
#pragma once

#include <cmath>

namespace q38::cpu {

inline float Sigmoid(float x) { return 1.0f / (1.0f + std::exp(-x)); }
inline float Silu(float x) { return x * Sigmoid(x); }
// torch.nn.functional.softplus with its default threshold: linear above 20.
inline float Softplus(float x) { return x > 20.0f ? x : std::log1p(std::exp(x)); }

}  // namespace q38::cpu
