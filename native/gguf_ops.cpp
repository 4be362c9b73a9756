// ONNX Runtime custom operators that multiply float32 activations by GGUF-quantized weights
// kept as their raw GGUF block bytes (docs/converter.md, "Native kernels").
//
//   chatapp.gguf.GgufMatMul(A float [..., K], W uint8 [N, row bytes]) -> float [..., N]
//   chatapp.gguf.GgufGather(W uint8 [N, row bytes], ids int64 [...]) -> float [..., K]
//     attributes: qtype (string: Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q4_K, Q5_K, Q6_K, IQ4_XS), K, N
//
// One row (a decode step): the row is quantized to int16 per block of 32 (as exact as the stock
// graph's two int8 levels), and every weight row is an integer dot product of its GGUF codes
// widened to int16 with it (AVX2 vpmaddwd, AVX-512 VNNI vpdpwssd), four weight rows at a time (Q8_0 and Q6_K one: CHATAPP_STREAM_ROWS), spread over the
// session's intra-op threads. Input [m, 1, K] (one new token of each of m sequences decoded
// together, engine/slots.py): each row on that one-row path, bit for bit its product alone,
// every task's weight rows read from memory once for all m rows; the 32-value block formats
// (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0), Q4_K, Q5_K and Q6_K also widen each weight block once for
// four rows (dot_kernels.inc: BLOCK32_MULTI, q45_k_multi, q6_k_multi). Several rows (a prompt),
// float32 products as exact as the stock graph's prompt: 2 to 6 rows, each weight row dequantized
// whole and dotted with every row (few_rows.inc); under 64 rows, tasks of 16 weight rows dequantized 256 values at a time into
// L1, packed [k][16], times every activation row (six rows by sixteen weight rows a register
// tile, FMA); from 64 rows, 256-row tiles dequantized by all threads, then ONNX Runtime's own
// Gemm. Prompts on int16 activations instead (prompt16.inc): the session config entry
// chatapp.gguf.prompt=int16 (the engine's prompt precision), or CHATAPP_GGUF_PROMPT=int16.
//   chatapp.gguf.DecodeAttention: GroupQueryAttention for one new token (decode_attention.inc).
// The instruction set is picked once, when the library is registered; CHATAPP_GGUF_ISA=scalar or
// avx2 asks for less (tests use it to cover every path on one machine).

#define ORT_API_MANUAL_INIT
#include <onnxruntime_cxx_api.h>
#undef ORT_API_MANUAL_INIT

#include <immintrin.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "gguf_blocks.h"

// Two to this many activation rows of the K-quants take the decode-step kernel on AVX-512 VNNI
// (fast8_step.inc; in runs of at most four), more prompt8.inc (from its kPrompt8MinRows, 16).
static const size_t kStepRowsMax = 15;
// Three or four rows (a run) take the step kernel only where their laid-out activations (rows x
// K bytes, streamed for every weight row) fit this core's L1 data cache, as the OS reports it at
// run time; beyond, the 4 x 4 tiles, which load each activation once for four weight rows, are
// faster (Q4_K, K = 14336, one thread: 4 rows 3.8-4.0 ms stepped against 3.4 on tiles; K = 4096:
// 0.88 against 0.95-1.00). Unknown size: the step kernel.
static bool step_rows_fit(size_t rows, size_t k) {
  static const size_t l1 = [] {
    long bytes = sysconf(_SC_LEVEL1_DCACHE_SIZE);
    return bytes > 0 ? size_t(bytes) : size_t(0);
  }();
  return rows <= 2 || l1 == 0 || std::min(rows, size_t(4)) * k <= l1;
}

namespace chatapp_gguf {

// An activation row in int16 per block of 32: x ~ s q (dot_kernels.inc).
static const float kLevels = 32512.0f;  // 127 x 256: the stock graph's two int8 levels' range
struct QuantizedRow {
  int16_t* q;  // k values
  float* s;    // k / 32 block scales
  float* sq;   // k / 32: s x sum(q) of the block (block minimums)
};

struct QuantizedStorage {
  int k;
  std::vector<int16_t> codes;
  std::vector<float> floats;
  QuantizedRow row{};
  explicit QuantizedStorage(int width) : k(width), codes(size_t(k)), floats(2 * size_t(k / 32)) {
    row = {codes.data(), floats.data(), floats.data() + k / 32};
  }
};

// The prompt path's view of one chunk of a task: `rows` weight rows dequantized to float32 (wf,
// wstride values a row), values [k0, k0 + len) of K, times all m activation rows x [m, K],
// added into y[:, col + r] (y is [m, n]).
struct PromptChunk {
  const float* wf;
  int wstride, rows;
  const float* x;
  size_t m;
  int k, k0, len;
  float* y;
  size_t n, col;
};

// One activation block's 32 int16 values in registers: elements 0..15, 16..31.
struct Act16 {
  __m256i x0, x1;
};

// Step kernels read CHATAPP_ROWS weight rows together and prefetch each one the next group's
// distance ahead (at least CHATAPP_PREFETCH bytes): the group's rows are adjacent, so they read
// as one forward stream. Prefetching a fixed 1 KB ahead of each row stayed inside the group and
// ran the big matrices 2-3x slower. Q8_0 and Q6_K read one row at a time (CHATAPP_STREAM_ROWS):
// the heads of most files, where the memory sets the pace, and one row after the other is the
// plain forward stream the hardware prefetchers follow best. Four interleaved rows of 680 bytes
// (Gemma 3's 262k-row Q8_0 head) read it at 12-15 ms a step against 9-10 ms one by one; a 1B
// shape's Q6_K head went 8.1-8.4 -> 6.7-7.1 ms. The 4- and 5-bit formats, whose kernels unpack
// more a byte, keep four rows sharing each activation block's loads (one at a time made them
// slower). All three are -D knobs for experiments (native_step_bench.py).
#ifndef CHATAPP_PREFETCH
#define CHATAPP_PREFETCH 4096
#endif
#ifndef CHATAPP_ROWS
#define CHATAPP_ROWS 4
#endif
#ifndef CHATAPP_STREAM_ROWS
#define CHATAPP_STREAM_ROWS 1
#endif

// The portable quantization (the scalar path): the same arithmetic as the vector ones, so every
// path multiplies by the same rounded activations.
static void quantize_row_scalar(const float* x, int k, QuantizedRow* out) {
  for (int b = 0; b < k / 32; ++b) {
    float amax = 0.0f;
    for (int i = 0; i < 32; ++i) amax = std::max(amax, std::fabs(x[32 * b + i]));
    float inv = amax > 0.0f ? kLevels / amax : 0.0f;
    float sum = 0.0f;
    for (int i = 0; i < 32; ++i) {
      float q = std::nearbyint(x[32 * b + i] * inv);  // ties to even, as the vector rounding
      out->q[32 * b + i] = int16_t(q);
      sum += q;
    }
    out->s[b] = amax / kLevels;
    out->sq[b] = out->s[b] * sum;
  }
}

#include "fast8.inc"

#define ISA avx2
#define TARGET __attribute__((target("avx2,fma,f16c")))
#define DOT16(w0, w1, x0, x1) \
  _mm256_add_epi32(_mm256_madd_epi16(w0, x0), _mm256_madd_epi16(w1, x1))
#define DOT_MULTI_WIDE 0  // sixteen registers: at most four activation rows a pass
#include "dot_kernels.inc"
#undef DOT_MULTI_WIDE
#define VNNI 0
#include "fast8_kernels.inc"
#undef VNNI
#undef ISA
#undef TARGET
#undef DOT16

// VNNI: vpmaddwd, then vpdpwssd adds the second half's pairs into it (the same integers).
#define ISA avx512
#define TARGET __attribute__((target("avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")))
#define DOT16(w0, w1, x0, x1) _mm256_dpwssd_epi32(_mm256_madd_epi16(w0, x0), w1, x1)
#define DOT_MULTI_WIDE 1  // 32 registers: up to eight activation rows a pass
#include "dot_kernels.inc"
#undef DOT_MULTI_WIDE
#define VNNI 1
#include "fast8_kernels.inc"
#undef VNNI
#undef ISA
#undef TARGET
#undef DOT16

enum class Isa { Scalar, Avx2, Avx512 };

static Isa detect_isa() {
  __builtin_cpu_init();
  Isa best = Isa::Scalar;
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) best = Isa::Avx2;
  if (best == Isa::Avx2 && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
      __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512vnni"))
    best = Isa::Avx512;
  const char* asked = std::getenv("CHATAPP_GGUF_ISA");
  if (asked != nullptr) {
    std::string a(asked);
    if (a == "scalar") return Isa::Scalar;
    if (a == "avx2" && best != Isa::Scalar) return Isa::Avx2;
  }
  return best;
}

static Isa g_isa = Isa::Scalar;

#include "prompt16.inc"
#include "float_dots.inc"
#include "decode_attention.inc"
#include "few_rows.inc"
#include "prompt8.inc"

static const char* isa_name(Isa isa) {
  return isa == Isa::Avx512 ? "avx512vnni" : isa == Isa::Avx2 ? "avx2" : "scalar";
}

// The scalar fallback: dequantized weights times the same rounded activations (s q) as the vector
// paths, block by block.
static void rows_dot_scalar(const FormatInfo& info, const uint8_t* w, size_t row_bytes,
                            const QuantizedRow& a, int k, float* out, size_t begin, size_t end) {
  std::vector<float> block(info.block_values);
  for (size_t n = begin; n < end; ++n) {
    const uint8_t* row = w + n * row_bytes;
    float total = 0.0f;
    for (int b = 0; b < k / info.block_values; ++b) {
      dequantize_block(info.format, row + size_t(b) * info.block_bytes, block.data());
      for (int i = 0; i < info.block_values; i += 32) {
        int ab = (b * info.block_values + i) / 32;
        float part = 0.0f;
        for (int j = 0; j < 32; ++j)
          part += block[i + j] * float(a.q[32 * ab + j]);
        total += part * a.s[ab];
      }
    }
    out[n] = total;
  }
}

// The prompt path's scalar fallback: the same float32 products, summed in order.
static void prompt_chunk_scalar(const PromptChunk& pc) {
  for (size_t c = 0; c < pc.m; ++c) {
    const float* x = pc.x + c * size_t(pc.k) + pc.k0;
    for (int r = 0; r < pc.rows; ++r) {
      const float* w = pc.wf + size_t(r) * pc.wstride;
      float total = 0.0f;
      for (int i = 0; i < pc.len; ++i) total += w[i] * x[i];
      pc.y[c * pc.n + pc.col + size_t(r)] += total;
    }
  }
}

// A decode step's task: enough weight rows to make the task's own cost (claiming it from the
// pool, its first prefetches) small beside the rows' reading, at least kTaskBytes, yet at least
// kMinTasks tasks a matrix so that up to 8 threads stay balanced. 16-row tasks cut a 262k-row
// head into 16k tasks; 96-row ones cost about 5% less CPU time on one thread.
#ifndef CHATAPP_TASK_BYTES
#define CHATAPP_TASK_BYTES 65536
#endif
static const size_t kTaskBytes = CHATAPP_TASK_BYTES;
static const size_t kMinTaskRows = 16;
static const size_t kMinTasks = 32;

static size_t step_task_rows(size_t n, size_t row_bytes) {
  size_t rows = std::min(kTaskBytes / row_bytes, n / kMinTasks) / kMinTaskRows * kMinTaskRows;
  return std::max(rows, kMinTaskRows);
}
// A prompt task's weight rows, and the values of K dequantized at a time (a multiple of 256:
// whole super-blocks): 16 x 256 floats are 16 KB, packed again [k][16] for the tiles.
static const int kPromptRows = 16;
static const int kPromptChunk = 256;
static const size_t kGemmTileRows = 256;  // weight rows dequantized per Gemm in a long prompt

// Prompts of at least this many rows take the Gemm path; CHATAPP_GGUF_GEMM_ROWS=N, read when a
// session creates its kernels, changes it (tests cover both paths; 2 sends every prompt to Gemm).
static size_t prompt_gemm_rows() {
  const char* asked = std::getenv("CHATAPP_GGUF_GEMM_ROWS");
  return asked != nullptr ? size_t(std::strtoull(asked, nullptr, 10)) : size_t(64);
}

// Prompts on int16 activations: the session's config entry "chatapp.gguf.prompt" ("int16" or
// "float": the engine's prompt precision), else CHATAPP_GGUF_PROMPT (experiments).
static const char* kPromptConfig = "chatapp.gguf.prompt";

static bool prompt_int16(const std::string& configured) {
  if (!configured.empty()) return configured == "int16";
  const char* asked = std::getenv("CHATAPP_GGUF_PROMPT");
  return asked != nullptr && std::string(asked) == "int16";
}

// The precision of every GgufMatMul: the session's config entry "chatapp.gguf.precision" ("fast":
// 8-bit activations, fast8.inc; "exact": float32 prompts or int16 ones as chatapp.gguf.prompt
// says, int16 steps), else CHATAPP_GGUF_PRECISION (experiments), else fast.
static const char* kPrecisionConfig = "chatapp.gguf.precision";

static bool precision_fast(const std::string& configured) {
  std::string asked = configured;
  if (asked.empty()) {
    const char* env = std::getenv("CHATAPP_GGUF_PRECISION");
    asked = env != nullptr ? env : "";
  }
  if (asked.empty() || asked == "fast") return true;
  if (asked == "exact") return false;
  throw std::runtime_error("chatapp.gguf.precision must be \"fast\" or \"exact\", not \"" + asked + "\"");
}

// The fast precision's work (fast8.inc): activation rows quantized by all threads, then tasks of
// weight rows, each times every activation row.
struct FastJob {
  const FormatInfo* info;
  const uint8_t* w;
  size_t row_bytes;
  const float* x;
  Act8* act;
  float* y;  // [m, n]
  size_t n, task_rows;
};

// A row's quantization: the AVX-512 one where it runs (the same bits as the scalar one; an AVX2
// one, 8 values a vector, was no faster than the scalar loop: 1.6 against 1.9 us at K = 2048).
static void act8_quantize(const float* x, Act8* a, size_t c) {
  if (g_isa == Isa::Avx512)
    act8_quantize_row_avx512(x, a, c);
  else
    act8_quantize_row(x, a, c);
}

static void fast_quantize_task(void* data, size_t row) {
  auto* job = static_cast<FastJob*>(data);
  act8_quantize(job->x + row * size_t(job->act->k), job->act, row);
}

// How many activation rows a tile of the running instruction set's fast kernels takes
// (fast8_kernels.inc FAST_TILE_C; the scalar path goes row by row).
static size_t fast_tile_columns() {
  switch (g_isa) {
    case Isa::Avx512: return 4;
    case Isa::Avx2: return 2;
    case Isa::Scalar: return 1;
  }
  return 1;
}

static void fast_task(void* data, size_t task) {
  auto* job = static_cast<FastJob*>(data);
  size_t begin = task * job->task_rows, end = std::min(job->n, begin + job->task_rows);
  const Act8& a = *job->act;
  switch (g_isa) {
    case Isa::Avx512:
      fast_rows_avx512(*job->info, job->w, job->row_bytes, a, 0, a.m, job->y, job->n, begin, end);
      break;
    case Isa::Avx2:
      fast_rows_avx2(*job->info, job->w, job->row_bytes, a, 0, a.m, job->y, job->n, begin, end);
      break;
    case Isa::Scalar:
      fast_rows_scalar(*job->info, job->w, job->row_bytes, a, 0, a.m, job->y, job->n, begin, end);
      break;
  }
}

// `m` activation rows (a decode step of m sequences): each task's weight rows are read from
// memory once, for the first activation row, and from the cache (a task is ~64 KB) for the
// others; every row's products are the one-row step's, computed the same way.
struct StepJob {
  const FormatInfo* info;
  const uint8_t* w;
  size_t row_bytes;
  const QuantizedRow* a;  // m rows
  size_t m;
  int k;
  size_t n;
  float* out;  // [m, n]
  size_t task_rows;
};

static void step_task(void* data, size_t task) {
  auto* job = static_cast<StepJob*>(data);
  size_t begin = task * job->task_rows, end = std::min(job->n, begin + job->task_rows);
  if (job->m > 1 && g_isa == Isa::Avx512 &&
      rows_dot_multi_avx512(*job->info, job->w, job->row_bytes, job->a, job->m, job->k, job->out,
                            job->n, begin, end))
    return;
  if (job->m > 1 && g_isa == Isa::Avx2 &&
      rows_dot_multi_avx2(*job->info, job->w, job->row_bytes, job->a, job->m, job->k, job->out,
                          job->n, begin, end))
    return;
  for (size_t r = 0; r < job->m; ++r) {
    const QuantizedRow& a = job->a[r];
    float* out = job->out + r * job->n;
    switch (g_isa) {
      case Isa::Avx512:
        rows_dot_avx512(*job->info, job->w, job->row_bytes, a, job->k, out, begin, end);
        break;
      case Isa::Avx2:
        rows_dot_avx2(*job->info, job->w, job->row_bytes, a, job->k, out, begin, end);
        break;
      case Isa::Scalar:
        rows_dot_scalar(*job->info, job->w, job->row_bytes, a, job->k, out, begin, end);
        break;
    }
  }
}

// The portable dequantization compiled again for AVX2 (the compiler vectorizes its loops).
__attribute__((target("avx2,fma,f16c"), flatten)) static void dequantize_row_avx2(
    const FormatInfo& info, const uint8_t* row, int k, float* out) {
  dequantize_row(info, row, k, out);
}


struct GgufMatMulKernel {
  const FormatInfo* info = nullptr;
  int64_t k = 0, n = 0;
  size_t row_bytes = 0;
  Ort::Op gemm{nullptr};
  size_t gemm_rows = prompt_gemm_rows();
  size_t few_rows = prompt_few_rows();
  bool int16_prompt = false;
  bool fast = false;
  // The output head (its weight named lm_head.* or embed.*, as the converter names it) multiplies
  // int16 activations in fast too, exact's step arithmetic for every row count: its rounding goes
  // straight into the logits, and on the real Gemma 3 270M it took fast's mean KL divergence from
  // 0.00485 to 0.00449 nats at no measured cost (docs/engine.md, "Fidelity").
  // CHATAPP_GGUF_HEAD=int8 keeps the head on 8-bit activations (experiments).
  bool head16 = false;

  GgufMatMulKernel(const OrtApi& /*api*/, const OrtKernelInfo* kernel_info, bool int16, bool fast_precision)
      : int16_prompt(int16), fast(fast_precision) {
    Ort::ConstKernelInfo ki(kernel_info);
    std::string qtype = ki.GetAttribute<std::string>("qtype");
    info = format_info(qtype);
    if (info == nullptr) throw std::runtime_error("GgufMatMul: unsupported qtype " + qtype);
    k = ki.GetAttribute<int64_t>("K");
    n = ki.GetAttribute<int64_t>("N");
    if (k <= 0 || n <= 0 || k % info->block_values != 0)
      throw std::runtime_error("GgufMatMul: K must be a positive multiple of the block size");
    row_bytes = size_t(k / info->block_values) * info->block_bytes;
    if (fast) {
      const char* head = std::getenv("CHATAPP_GGUF_HEAD");
      std::string weight;
      try {
        weight = ki.GetInputName(1);
      } catch (const std::exception&) {
        weight.clear();  // an ONNX Runtime without input names: every matrix 8-bit
      }
      head16 = !(head != nullptr && std::string(head) == "int8") &&
               (weight.rfind("lm_head.", 0) == 0 || weight.rfind("embed.", 0) == 0);
    }
    // A standalone operator gets no defaults: every attribute is spelled out.
    int64_t trans_a = 0, trans_b = 1;
    float alpha = 1.0f, beta = 0.0f;
    Ort::OpAttr attrs[] = {
        Ort::OpAttr("transA", &trans_a, 1, OrtOpAttrType::ORT_OP_ATTR_INT),
        Ort::OpAttr("transB", &trans_b, 1, OrtOpAttrType::ORT_OP_ATTR_INT),
        Ort::OpAttr("alpha", &alpha, 1, OrtOpAttrType::ORT_OP_ATTR_FLOAT),
        Ort::OpAttr("beta", &beta, 1, OrtOpAttrType::ORT_OP_ATTR_FLOAT),
    };
    const char* type_names[] = {"T"};
    ONNXTensorElementDataType types[] = {ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT};
    gemm = Ort::Op::Create(kernel_info, "Gemm", "", 13, type_names, types, 1, attrs, 4, 2, 1);
  }

  OrtStatusPtr ComputeV2(OrtKernelContext* context) {
    try {
      Compute(context);
      return nullptr;
    } catch (const std::exception& e) {
      return Ort::GetApi().CreateStatus(ORT_RUNTIME_EXCEPTION, e.what());
    }
  }

  void Compute(OrtKernelContext* context) {
    Ort::KernelContext ctx(context);
    Ort::ConstValue a = ctx.GetInput(0);
    Ort::ConstValue w = ctx.GetInput(1);
    std::vector<int64_t> shape = a.GetTensorTypeAndShapeInfo().GetShape();
    std::vector<int64_t> w_shape = w.GetTensorTypeAndShapeInfo().GetShape();
    if (shape.empty() || shape.back() != k)
      throw std::runtime_error("GgufMatMul: the input's last dimension is not K");
    if (w_shape.size() != 2 || w_shape[0] != n || size_t(w_shape[1]) != row_bytes)
      throw std::runtime_error("GgufMatMul: the weight is not [N, K / block * block bytes]");
    size_t m = 1;
    for (size_t i = 0; i + 1 < shape.size(); ++i) m *= size_t(shape[i]);
    std::vector<int64_t> out_shape = shape;
    out_shape.back() = n;
    Ort::UnownedValue out = ctx.GetOutput(0, out_shape);
    float* y = out.GetTensorMutableData<float>();
    const float* x = a.GetTensorData<float>();
    const uint8_t* wb = w.GetTensorData<uint8_t>();
    if (m == 0) return;
    // [m, 1, K] with m > 1: one new token of each of m sequences (engine/slots.py), each row
    // a decode step's: the integer path, as that sequence alone would take it.
    bool step_rows = shape.size() >= 2 && shape[shape.size() - 2] == 1;
    if (fast && !head16) {
      fast_product(ctx, x, m, wb, y);
    } else if (m == 1 || step_rows || head16) {
      step(ctx, x, m, wb, y);
    } else if (int16_prompt) {
      Packed16 packed;
      pack16(x, m, int(k), &packed);
      Prompt16Job job{info, wb, row_bytes, size_t(n), &packed, y};
      ctx.ParallelFor(prompt16_task, (size_t(n) + kPrompt16Rows - 1) / kPrompt16Rows, 0, &job);
    } else {
      if (m <= few_rows)
        prompt_few(ctx, x, m, wb, y);
      else if (m < gemm_rows)
        prompt(ctx, x, m, wb, y);
      else
        prompt_gemm(ctx, context, x, m, wb, y);
    }
  }

  // The fast precision: every row count takes the same path (fast8.inc), so an output element
  // is the same whatever the other rows of the call.
  void fast_product(Ort::KernelContext& ctx, const float* x, size_t m, const uint8_t* wb, float* y) {
    thread_local Act8 act;
    // A few rows (a verifying run of drafted tokens, a batched step) in whole tiles: a tile
    // shares each unpacked weight register among its activation rows, where a remainder takes
    // its rows one by one. One thread's CPU time on a 1.1B shape's step (Q4_K, AVX-512 VNNI),
    // against one row: 2 rows 1.60x -> 1.33x padded to 4, 3 rows 2.10x -> 1.34x, 7 rows 2.87x
    // -> 2.43x; a remainder of one row is cheaper alone (5 rows 1.85x, padded 2.40x). The
    // padding repeats the last row and its results are dropped: an element's float steps do
    // not depend on the tile, so the real rows keep their bits.
    size_t tile = fast_tile_columns(), left = m % tile;
    // Two to kStepRowsMax rows of the K-quants take the step kernel unpadded (fast8_step.inc), of
    // a 32-value format runs of four-row tiles and a last tile of 1-3 (fast8_kernels.inc,
    // fast_rows_f).
    const Format f = info->format;
    const bool kquant = f == Format::Q4_K || f == Format::Q5_K || f == Format::Q6_K;
    const bool b32 = f == Format::Q4_0 || f == Format::Q4_1 || f == Format::Q5_0 || f == Format::Q5_1 ||
                     f == Format::Q8_0;
    bool k_steps = g_isa == Isa::Avx512 && m >= 2 && m <= kStepRowsMax && ((kquant && step_rows_fit(m, k)) || b32);
    bool pad = m > 1 && left >= 2 && !k_steps && !prompt8_fits(info->format, m);
    size_t padded = pad ? m + tile - left : m;
    thread_local std::vector<float> spare;
    float* out = y;
    if (padded != m) {
      spare.resize(padded * size_t(n));
      out = spare.data();
    }
    act8_resize(&act, padded, int(k), info->block_values);
    size_t task_rows = step_task_rows(size_t(n), row_bytes);
    FastJob job{info, wb, row_bytes, x, &act, out, size_t(n), task_rows};
    if (m >= 8)
      ctx.ParallelFor(fast_quantize_task, m, 0, &job);
    else
      for (size_t r = 0; r < m; ++r) act8_quantize(x + r * size_t(k), &act, r);
    for (size_t r = m; r < padded; ++r) act8_quantize(x + (m - 1) * size_t(k), &act, r);
    if (prompt8_fits(info->format, m)) {
      prompt8_product(ctx, info, wb, row_bytes, size_t(n), act, y);
      return;
    }
    ctx.ParallelFor(fast_task, (size_t(n) + task_rows - 1) / task_rows, 0, &job);
    if (padded != m) std::memcpy(y, out, m * size_t(n) * sizeof(float));
  }

  void step(Ort::KernelContext& ctx, const float* x, size_t m, const uint8_t* wb, float* y) {
    thread_local std::vector<std::unique_ptr<QuantizedStorage>> storage;
    thread_local std::vector<QuantizedRow> rows;
    if (storage.size() < m) storage.resize(m);
    rows.resize(m);
    for (size_t r = 0; r < m; ++r) {
      auto& s = storage[r];
      if (!s || s->k < k) s = std::make_unique<QuantizedStorage>(int(k));
      const float* xr = x + r * size_t(k);
      if (g_isa == Isa::Avx512)
        quantize_row_avx512(xr, int(k), &s->row);
      else if (g_isa == Isa::Avx2)
        quantize_row_avx2(xr, int(k), &s->row);
      else
        quantize_row_scalar(xr, int(k), &s->row);
      rows[r] = s->row;
    }
    size_t task_rows = step_task_rows(size_t(n), row_bytes);
    StepJob job{info, wb, row_bytes, rows.data(), m, int(k), size_t(n), y, task_rows};
    size_t tasks = (size_t(n) + task_rows - 1) / task_rows;
    ctx.ParallelFor(step_task, tasks, 0, &job);
  }

  // Several rows (a prompt): see prompt().
  struct PromptJob {
    const GgufMatMulKernel* self;
    const uint8_t* wb;
    const float* x;
    size_t m;
    float* y;
  };

  // Values [k0, k0 + len) of one weight row to float32 (k0 and len: whole blocks).
  void dequantize_part(const uint8_t* row, int k0, int len, float* out) const {
    const uint8_t* src = row + size_t(k0 / info->block_values) * info->block_bytes;
    if (g_isa == Isa::Scalar)
      dequantize_row(*info, src, len, out);
    else if (!(g_isa == Isa::Avx512 ? dequant_row_avx512 : dequant_row_avx2)(info->format, src, len, out))
      dequantize_row_avx2(*info, src, len, out);
  }

  // One task: kPromptRows weight rows, dequantized kPromptChunk values at a time and packed
  // [k][16] in buffers that stay in L1, times every activation row.
  static void prompt_task(void* data, size_t task) {
    auto* job = static_cast<PromptJob*>(data);
    const GgufMatMulKernel* self = job->self;
    size_t n = size_t(self->n), m = job->m, begin = task * kPromptRows;
    int rows = int(std::min(n - begin, size_t(kPromptRows)));
    alignas(32) float wf[kPromptRows * kPromptChunk];
    alignas(32) float packed[kPromptRows * kPromptChunk];
    std::vector<float> spare;  // [m, 16] for the last task of a matrix whose N is not a multiple of 16
    if (rows < kPromptRows) {
      spare.assign(m * kPromptRows, 0.0f);
      std::fill(wf + rows * kPromptChunk, wf + kPromptRows * kPromptChunk, 0.0f);
    }
    for (size_t c = 0; c < m; ++c) std::fill_n(job->y + c * n + begin, rows, 0.0f);
    int k = int(self->k);
    for (int k0 = 0; k0 < k; k0 += kPromptChunk) {
      int len = std::min(kPromptChunk, k - k0);
      for (int r = 0; r < rows; ++r)
        self->dequantize_part(job->wb + (begin + size_t(r)) * self->row_bytes, k0, len,
                              wf + r * kPromptChunk);
      PromptChunk pc{wf, kPromptChunk, rows, job->x, m, k, k0, len, job->y, n, begin};
      if (g_isa == Isa::Avx512)
        prompt_chunk_avx512(pc, packed, spare.data());
      else if (g_isa == Isa::Avx2)
        prompt_chunk_avx2(pc, packed, spare.data());
      else
        prompt_chunk_scalar(pc);
    }
    if (rows < kPromptRows && g_isa != Isa::Scalar)
      for (size_t c = 0; c < m; ++c)
        std::copy_n(spare.data() + c * kPromptRows, rows, job->y + c * n + begin);
  }

  // A few rows (few_rows.inc): tasks of kPromptRows weight rows, each row dequantized whole
  // into a per-thread buffer and dotted with every activation row.
  static void few_task(void* data, size_t task) {
    auto* job = static_cast<PromptJob*>(data);
    const GgufMatMulKernel* self = job->self;
    size_t n = size_t(self->n), m = job->m, begin = task * kPromptRows;
    size_t end = std::min(n, begin + kPromptRows);
    int k = int(self->k);
    thread_local std::vector<float> wf;
    wf.resize(size_t(k));
    float dots[kFewRowsMax];
    auto few_dots = dots_for(g_isa);
    for (size_t r = begin; r < end; ++r) {
      self->dequantize_part(job->wb + r * self->row_bytes, 0, k, wf.data());
      few_dots(wf.data(), job->x, m, k, dots);
      for (size_t c = 0; c < m; ++c) job->y[c * n + r] = dots[c];
    }
  }

  void prompt_few(Ort::KernelContext& ctx, const float* x, size_t m, const uint8_t* wb, float* y) {
    PromptJob job{this, wb, x, m, y};
    ctx.ParallelFor(few_task, (size_t(n) + kPromptRows - 1) / kPromptRows, 0, &job);
  }

  // Tasks of kPromptRows weight rows spread over the session's threads: each dequantizes its
  // rows once per call, a chunk at a time, and multiplies them by every activation row (FMA,
  // six activation rows by sixteen weight rows a register tile).
  void prompt(Ort::KernelContext& ctx, const float* x, size_t m, const uint8_t* wb, float* y) {
    PromptJob job{this, wb, x, m, y};
    size_t tasks = (size_t(n) + kPromptRows - 1) / kPromptRows;
    ctx.ParallelFor(prompt_task, tasks, 0, &job);
  }

  // Long prompts: 256-row tiles of the weight dequantized to float32 by all threads, then one
  // ONNX Runtime Gemm per tile (which spreads itself over the threads). MLAS's packed kernel
  // beats the tiles above once there are enough rows to amortize its packing; below that the
  // two barriers a tile costs dominate (docs/converter.md, "Prompt kernels").
  struct TileJob {
    const GgufMatMulKernel* self;
    const uint8_t* wb;
    float* weights;
  };

  static void dequant_rows_task(void* data, size_t row) {
    auto* job = static_cast<TileJob*>(data);
    const GgufMatMulKernel* self = job->self;
    self->dequantize_part(job->wb + row * self->row_bytes, 0, int(self->k), job->weights + row * size_t(self->k));
  }

  void prompt_gemm(Ort::KernelContext& ctx, OrtKernelContext* context, const float* x, size_t m,
                   const uint8_t* wb, float* y) {
    size_t tile = std::min(size_t(n), kGemmTileRows);
    std::vector<float> weights(tile * size_t(k)), part(m * tile);
    Ort::MemoryInfo cpu = Ort::MemoryInfo::CreateCpu(OrtArenaAllocator, OrtMemTypeDefault);
    std::vector<int64_t> a_shape{int64_t(m), k};
    Ort::Value a_value = Ort::Value::CreateTensor<float>(cpu, const_cast<float*>(x), m * size_t(k),
                                                         a_shape.data(), a_shape.size());
    for (size_t start = 0; start < size_t(n); start += tile) {
      size_t rows = std::min(tile, size_t(n) - start);
      TileJob job{this, wb + start * row_bytes, weights.data()};
      ctx.ParallelFor(dequant_rows_task, rows, 0, &job);
      std::vector<int64_t> b_shape{int64_t(rows), k}, c_shape{int64_t(m), int64_t(rows)};
      Ort::Value b_value = Ort::Value::CreateTensor<float>(cpu, weights.data(), rows * size_t(k),
                                                           b_shape.data(), b_shape.size());
      Ort::Value c_value = Ort::Value::CreateTensor<float>(cpu, part.data(), m * rows,
                                                           c_shape.data(), c_shape.size());
      const OrtValue* inputs[] = {a_value, b_value};
      OrtValue* outputs[] = {c_value};
      gemm.Invoke(context, inputs, 2, outputs, 1);
      for (size_t r = 0; r < m; ++r)
        std::copy(part.data() + r * rows, part.data() + (r + 1) * rows, y + r * size_t(n) + start);
    }
  }
};

struct GgufMatMulOp : Ort::CustomOpBase<GgufMatMulOp, GgufMatMulKernel, true> {
  bool int16_prompt, fast;
  GgufMatMulOp(bool int16, bool fast_precision) : int16_prompt(int16), fast(fast_precision) {}
  OrtStatusPtr CreateKernelV2(const OrtApi& api, const OrtKernelInfo* info, void** kernel) const {
    try {
      *kernel = new GgufMatMulKernel(api, info, int16_prompt, fast);
      return nullptr;
    } catch (const std::exception& e) {
      return api.CreateStatus(ORT_INVALID_ARGUMENT, e.what());
    }
  }
  const char* GetName() const { return "GgufMatMul"; }
  const char* GetExecutionProviderType() const { return "CPUExecutionProvider"; }
  size_t GetInputTypeCount() const { return 2; }
  ONNXTensorElementDataType GetInputType(size_t index) const {
    return index == 0 ? ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT : ONNX_TENSOR_ELEMENT_DATA_TYPE_UINT8;
  }
  size_t GetOutputTypeCount() const { return 1; }
  ONNXTensorElementDataType GetOutputType(size_t) const { return ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT; }
};

// Rows of a GGUF matrix by index, dequantized exactly (the token embedding):
//   chatapp.gguf.GgufGather(W uint8 [N, row bytes], ids int64 [...]) -> float [..., K]
struct GgufGatherKernel {
  const FormatInfo* info = nullptr;
  int64_t k = 0, n = 0;
  size_t row_bytes = 0;

  GgufGatherKernel(const OrtApi& /*api*/, const OrtKernelInfo* kernel_info) {
    Ort::ConstKernelInfo ki(kernel_info);
    std::string qtype = ki.GetAttribute<std::string>("qtype");
    info = format_info(qtype);
    if (info == nullptr) throw std::runtime_error("GgufGather: unsupported qtype " + qtype);
    k = ki.GetAttribute<int64_t>("K");
    n = ki.GetAttribute<int64_t>("N");
    if (k <= 0 || n <= 0 || k % info->block_values != 0)
      throw std::runtime_error("GgufGather: K must be a positive multiple of the block size");
    row_bytes = size_t(k / info->block_values) * info->block_bytes;
  }

  OrtStatusPtr ComputeV2(OrtKernelContext* context) {
    try {
      Ort::KernelContext ctx(context);
      Ort::ConstValue w = ctx.GetInput(0);
      Ort::ConstValue ids = ctx.GetInput(1);
      std::vector<int64_t> w_shape = w.GetTensorTypeAndShapeInfo().GetShape();
      if (w_shape.size() != 2 || w_shape[0] != n || size_t(w_shape[1]) != row_bytes)
        throw std::runtime_error("GgufGather: the weight is not [N, K / block * block bytes]");
      std::vector<int64_t> shape = ids.GetTensorTypeAndShapeInfo().GetShape();
      size_t count = ids.GetTensorTypeAndShapeInfo().GetElementCount();
      shape.push_back(k);
      float* y = ctx.GetOutput(0, shape).GetTensorMutableData<float>();
      const int64_t* index = ids.GetTensorData<int64_t>();
      const uint8_t* wb = w.GetTensorData<uint8_t>();
      for (size_t i = 0; i < count; ++i) {
        int64_t row = index[i] < 0 ? index[i] + n : index[i];
        if (row < 0 || row >= n) throw std::runtime_error("GgufGather: an index is out of range");
        dequantize_row(*info, wb + size_t(row) * row_bytes, int(k), y + i * size_t(k));
      }
      return nullptr;
    } catch (const std::exception& e) {
      return Ort::GetApi().CreateStatus(ORT_RUNTIME_EXCEPTION, e.what());
    }
  }
};

struct GgufGatherOp : Ort::CustomOpBase<GgufGatherOp, GgufGatherKernel, true> {
  OrtStatusPtr CreateKernelV2(const OrtApi& api, const OrtKernelInfo* info, void** kernel) const {
    try {
      *kernel = new GgufGatherKernel(api, info);
      return nullptr;
    } catch (const std::exception& e) {
      return api.CreateStatus(ORT_INVALID_ARGUMENT, e.what());
    }
  }
  const char* GetName() const { return "GgufGather"; }
  const char* GetExecutionProviderType() const { return "CPUExecutionProvider"; }
  size_t GetInputTypeCount() const { return 2; }
  ONNXTensorElementDataType GetInputType(size_t index) const {
    return index == 0 ? ONNX_TENSOR_ELEMENT_DATA_TYPE_UINT8 : ONNX_TENSOR_ELEMENT_DATA_TYPE_INT64;
  }
  size_t GetOutputTypeCount() const { return 1; }
  ONNXTensorElementDataType GetOutputType(size_t) const { return ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT; }
};

}  // namespace chatapp_gguf

static const char* kDomain = "chatapp.gguf";

extern "C" {

__attribute__((visibility("default"))) OrtStatus* ORT_API_CALL RegisterCustomOps(OrtSessionOptions* options,
                                                                                const OrtApiBase* api) {
  Ort::InitApi(api->GetApi(ORT_API_VERSION));
  chatapp_gguf::g_isa = chatapp_gguf::detect_isa();
  // One domain for each precision (fast; exact with float or int16 prompts), made once: a session
  // gets the one its options ask for (ONNX Runtime keeps the domains it is given for as long as
  // the sessions live).
  static chatapp_gguf::GgufMatMulOp matmul_float(false, false), matmul_int16(true, false), matmul_fast(false, true);
  static chatapp_gguf::GgufGatherOp gather;
  static chatapp_gguf::DecodeAttentionOp attention;
  try {
    static Ort::CustomOpDomain domain_float(kDomain), domain_int16(kDomain), domain_fast(kDomain);
    static bool added = false;
    if (!added) {
      domain_float.Add(&matmul_float);
      domain_int16.Add(&matmul_int16);
      domain_fast.Add(&matmul_fast);
      for (Ort::CustomOpDomain* d : {&domain_float, &domain_int16, &domain_fast}) {
        d->Add(&gather);
        d->Add(&attention);
      }
      added = true;
    }
    Ort::UnownedSessionOptions session_options(options);
    std::string precision = session_options.GetConfigEntryOrDefault(chatapp_gguf::kPrecisionConfig, "");
    std::string configured = session_options.GetConfigEntryOrDefault(chatapp_gguf::kPromptConfig, "");
    if (chatapp_gguf::precision_fast(precision))
      session_options.Add(domain_fast);
    else
      session_options.Add(chatapp_gguf::prompt_int16(configured) ? domain_int16 : domain_float);
  } catch (const std::exception& e) {
    return Ort::GetApi().CreateStatus(ORT_FAIL, e.what());
  }
  return nullptr;
}

// Which instruction set the kernels use on this machine (for tests and `chatapp bench`).
__attribute__((visibility("default"))) const char* chatapp_gguf_isa() {
  return chatapp_gguf::isa_name(chatapp_gguf::detect_isa());
}

}

#include "mapped_file_net.inc"  // the SIGBUS net for mapped weight files (engine/mapped_weights.py)
