// gelu.comp — the erf form of GELU in place, h = h/2 (1 + erf(h / sqrt 2)),
// on an encoder's FFN rows (bert; the matrix kernel has added the up
// projection's bias). GLSL has no erf: Abramowitz & Stegun 7.1.26
// (|error| < 1.5e-7, below f32's rounding of the product it feeds).
// One invocation per element; grid (ceil(F / 64), T).
#version 450

layout(local_size_x = 64) in;

layout(std430, binding = 0) buffer HV { float h[]; };

layout(push_constant) uniform Push {
    uint F, T, stride;
} pc;

float erf_as(float x)
{
    const float a = abs(x), t = 1.0 / (1.0 + 0.3275911 * a);
    const float p = t * (0.254829592 + t * (-0.284496736 + t * (1.421413741 + t * (-1.453152027 + t * 1.061405429))));
    const float y = 1.0 - p * exp(-a * a);
    return x < 0.0 ? -y : y;
}

void main()
{
    const uint i = gl_GlobalInvocationID.x, t = gl_WorkGroupID.y;
    if (i >= pc.F || t >= pc.T)
        return;
    const float v = h[t * pc.stride + i];
    h[t * pc.stride + i] = 0.5 * v * (1.0 + erf_as(v * 0.70710678118654752));
}
