// GGUF block formats: sizes, layouts and a portable (scalar) dequantization.
// Layouts follow the GGUF file format as gguf-py's reference dequantizers read it; the code is
// our own. Every function here is plain C++ (no ISA extensions): the scalar fallback and the
// prompt path (dequantize a tile of rows, then a float GEMM) use it on any x86-64.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>

namespace chatapp_gguf {

enum class Format { Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q4_K, Q5_K, Q6_K, IQ4_XS, Unknown };

struct FormatInfo {
  const char* name;
  Format format;
  int block_values;  // weights per block
  int block_bytes;   // bytes per block
};

inline const FormatInfo* format_info(const std::string& name) {
  static const FormatInfo table[] = {
      {"Q4_0", Format::Q4_0, 32, 18},    {"Q4_1", Format::Q4_1, 32, 20},
      {"Q5_0", Format::Q5_0, 32, 22},    {"Q5_1", Format::Q5_1, 32, 24},
      {"Q8_0", Format::Q8_0, 32, 34},    {"Q4_K", Format::Q4_K, 256, 144},
      {"Q5_K", Format::Q5_K, 256, 176},  {"Q6_K", Format::Q6_K, 256, 210},
      {"IQ4_XS", Format::IQ4_XS, 256, 136},
  };
  for (const auto& f : table)
    if (name == f.name) return &f;
  return nullptr;
}

// The 16 signed values a 4-bit IQ4_NL / IQ4_XS index selects.
static const int8_t kIq4Values[16] = {-127, -104, -83, -65, -49, -35, -22, -10,
                                      1,    13,   25,  38,  53,  69,  89,  113};

inline float half_to_float(uint16_t h) {
  uint32_t sign = uint32_t(h & 0x8000) << 16;
  uint32_t exponent = (h >> 10) & 0x1f;
  uint32_t mantissa = h & 0x3ff;
  uint32_t bits;
  if (exponent == 0) {
    if (mantissa == 0) {
      bits = sign;
    } else {  // subnormal: mantissa * 2^-24
      float v = float(mantissa) * (1.0f / 16777216.0f);
      std::memcpy(&bits, &v, 4);
      bits |= sign;
    }
  } else if (exponent == 31) {
    bits = sign | 0x7f800000u | (mantissa << 13);
  } else {
    bits = sign | ((exponent + 112) << 23) | (mantissa << 13);
  }
  float out;
  std::memcpy(&out, &bits, 4);
  return out;
}

inline float read_half(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return half_to_float(h);
}

// The 6-bit scale and minimum of sub-block j (0..7) of a Q4_K / Q5_K super-block.
inline void k_scale_min(const uint8_t* s, int j, int* scale, int* minimum) {
  if (j < 4) {
    *scale = s[j] & 63;
    *minimum = s[j + 4] & 63;
  } else {
    *scale = (s[j + 4] & 0x0f) | ((s[j - 4] >> 6) << 4);
    *minimum = (s[j + 4] >> 4) | ((s[j] >> 6) << 4);
  }
}

// One block (block_values weights) to floats.
inline void dequantize_block(Format f, const uint8_t* b, float* out) {
  switch (f) {
    case Format::Q4_0: {
      float d = read_half(b);
      for (int i = 0; i < 16; ++i) {
        out[i] = d * float((b[2 + i] & 0x0f) - 8);
        out[i + 16] = d * float((b[2 + i] >> 4) - 8);
      }
      break;
    }
    case Format::Q4_1: {
      float d = read_half(b), m = read_half(b + 2);
      for (int i = 0; i < 16; ++i) {
        out[i] = d * float(b[4 + i] & 0x0f) + m;
        out[i + 16] = d * float(b[4 + i] >> 4) + m;
      }
      break;
    }
    case Format::Q5_0:
    case Format::Q5_1: {
      bool with_min = f == Format::Q5_1;
      float d = read_half(b), m = with_min ? read_half(b + 2) : 0.0f;
      const uint8_t* qhp = b + (with_min ? 4 : 2);
      const uint8_t* qs = qhp + 4;
      uint32_t qh;
      std::memcpy(&qh, qhp, 4);
      for (int i = 0; i < 16; ++i) {
        int lo = (qs[i] & 0x0f) | (((qh >> i) & 1) << 4);
        int hi = (qs[i] >> 4) | (((qh >> (i + 16)) & 1) << 4);
        if (with_min) {
          out[i] = d * float(lo) + m;
          out[i + 16] = d * float(hi) + m;
        } else {
          out[i] = d * float(lo - 16);
          out[i + 16] = d * float(hi - 16);
        }
      }
      break;
    }
    case Format::Q8_0: {
      float d = read_half(b);
      for (int i = 0; i < 32; ++i) out[i] = d * float(int8_t(b[2 + i]));
      break;
    }
    case Format::Q4_K:
    case Format::Q5_K: {
      bool five = f == Format::Q5_K;
      float d = read_half(b), dmin = read_half(b + 2);
      const uint8_t* scales = b + 4;
      const uint8_t* qh = b + 16;
      const uint8_t* qs = b + (five ? 48 : 16);
      for (int chunk = 0; chunk < 4; ++chunk) {
        for (int half = 0; half < 2; ++half) {
          int j = 2 * chunk + half, sc, mn;
          k_scale_min(scales, j, &sc, &mn);
          float scale = d * float(sc), offset = dmin * float(mn);
          for (int i = 0; i < 32; ++i) {
            int q = half ? (qs[32 * chunk + i] >> 4) : (qs[32 * chunk + i] & 0x0f);
            if (five) q |= ((qh[i] >> j) & 1) << 4;
            out[32 * j + i] = scale * float(q) - offset;
          }
        }
      }
      break;
    }
    case Format::Q6_K: {
      const uint8_t* ql = b;
      const uint8_t* qh = b + 128;
      const int8_t* sc = reinterpret_cast<const int8_t*>(b + 192);
      float d = read_half(b + 208);
      for (int half = 0; half < 2; ++half) {
        const uint8_t* l = ql + 64 * half;
        const uint8_t* h = qh + 32 * half;
        const int8_t* s = sc + 8 * half;
        float* o = out + 128 * half;
        for (int i = 0; i < 32; ++i) {
          int g = i / 16;
          o[i] = d * float(s[g]) * float(((l[i] & 0x0f) | ((h[i] & 3) << 4)) - 32);
          o[i + 32] = d * float(s[g + 2]) * float(((l[i + 32] & 0x0f) | (((h[i] >> 2) & 3) << 4)) - 32);
          o[i + 64] = d * float(s[g + 4]) * float(((l[i] >> 4) | (((h[i] >> 4) & 3) << 4)) - 32);
          o[i + 96] = d * float(s[g + 6]) * float(((l[i + 32] >> 4) | (((h[i] >> 6) & 3) << 4)) - 32);
        }
      }
      break;
    }
    case Format::IQ4_XS: {
      float d = read_half(b);
      uint16_t scales_h;
      std::memcpy(&scales_h, b + 2, 2);
      const uint8_t* scales_l = b + 4;
      const uint8_t* qs = b + 8;
      for (int j = 0; j < 8; ++j) {
        int ls = ((scales_l[j / 2] >> (4 * (j % 2))) & 0x0f) | (((scales_h >> (2 * j)) & 3) << 4);
        float dl = d * float(ls - 32);
        for (int i = 0; i < 16; ++i) {
          out[32 * j + i] = dl * float(kIq4Values[qs[16 * j + i] & 0x0f]);
          out[32 * j + 16 + i] = dl * float(kIq4Values[qs[16 * j + i] >> 4]);
        }
      }
      break;
    }
    case Format::Unknown:
      break;
  }
}

inline void dequantize_row(const FormatInfo& info, const uint8_t* row, int k, float* out) {
  int blocks = k / info.block_values;
  for (int i = 0; i < blocks; ++i)
    dequantize_block(info.format, row + size_t(i) * info.block_bytes, out + size_t(i) * info.block_values);
}

}  // namespace chatapp_gguf
