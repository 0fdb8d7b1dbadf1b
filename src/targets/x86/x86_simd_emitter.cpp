// The SIMD lanes' emitter (x86_avx512, x86_amx, x86_avx2): the kernel's head (includes, storage and vector-math
// helpers, micro-kernels), the ABI dims per spec policy, and the body of the region's kind.
#include "targets/x86/x86_simd_emitter.hpp"

#include <algorithm>
#include <charconv>

#include "codegen/abi.hpp"
#include "codegen/c_renderer.hpp"
#include "fusor/region_text.hpp"
#include "fusor/toolchain.hpp"
#include "targets/x86/x86_simd_common.hpp"

namespace fusor::x86 {

namespace simd {

std::string attention_helper_source(const AttentionRegion& region, const StorageLoad& ld,
                                    const Tuning& tuning); // x86_simd_attention.cpp

Error unsupported(RegionKind kind, const std::string& reason, std::string_view lane) {
  return make_error(ErrorCode::emit_unsupported, "region " + std::string(region_kind_name(kind)) +
                                                     ", target x86, lane " + std::string(lane) + ": " + reason);
}

} // namespace simd

namespace {

using simd::unsupported;

Expected<simd::StorageLoad> storage_load(DType dtype, RegionKind kind) {
  switch (dtype) {
  case DType::f32: return simd::StorageLoad{"float", "", ""};
  case DType::f16: return simd::StorageLoad{"uint16_t", "fusor_f16(", ")", DType::f16};
  case DType::bf16: return simd::StorageLoad{"uint16_t", "fusor_bf16(", ")", DType::bf16};
  case DType::fp8_e4m3:
  case DType::fp8_e5m2: break;
  }
  return unsupported(kind, "storage " + std::string(dtype_name(dtype)) + " is not supported (f32, f16, bf16 are)");
}

Expected<simd::Tuning> parse_tuning(RegionKind kind, const std::map<std::string, std::string>& options,
                                    std::string_view lane) {
  simd::Tuning t;
  t.amx = lane == kAmxLane;
  t.avx2 = lane == kAvx2Lane;
  if (t.avx2) t.mr = 6; // 12 ymm accumulators, two B vectors and a broadcast: all 16 registers
  if (t.avx2) t.srows = 16, t.crows = 0, t.wrows = 0; // the ymm row path: see Tuning::srows
  for (const auto& [key, value] : options) {
    int v = 0;
    const auto res = std::from_chars(value.data(), value.data() + value.size(), v);
    const bool number = res.ec == std::errc{} && res.ptr == value.data() + value.size();
    // Which tiles a knob belongs to. The AMX tile is 32 rows; `exact`, `overlap`, `dyn`, `isplit`,
    // `xsteal`, `zpv`, `qgrow` and `ppf` are AMX's, `lpack` the AMX and zmm tiles'; `stream` is the streaming kinds'
    // and `bpf`, `ksub`, `epf`, `bfuse`, `bnext`, `bcopy` and the row path's `srows`, `crows`, `llc`, `wrows`, `wcols`,
    // `runc`, `ksplit` the zmm and ymm tiles' (AMX's packing prefetches its own way; its tiles sum in their own order,
    // keep their own epilogue and take no row path); `fq` is attention's few-query path, on zmm or ymm registers in all
    // three lanes, `byhead` causal attention's order of items, `qs`, `qmin` and `qitems` attention's query blocks an
    // item, `kstream` its shared packs' stores and `trace` its phases' cycles in all three.
    enum class On { any, vector, amx, avx512 };
    // hi_avx2: the ymm tile's bound where it differs (6 rows).
    struct Knob {
      const char* name;
      int simd::Tuning::*field;
      int lo, hi;
      On on;
      int hi_avx2 = -1;
    };
    static constexpr Knob kKnobs[] = {
        {"mr", &simd::Tuning::mr, 4, 14, On::vector, 6},
        {"kc", &simd::Tuning::kc, 16, 1 << 16, On::any},
        {"mc", &simd::Tuning::mc, 1, 1 << 16, On::any},
        {"nb", &simd::Tuning::nb, 32, 4096, On::any},
        {"serial", &simd::Tuning::serial, 0, 1 << 30, On::any},
        {"exact", &simd::Tuning::exact, 0, 1, On::amx},
        {"overlap", &simd::Tuning::overlap, 0, 1, On::amx},
        {"stream", &simd::Tuning::stream, 0, 2, On::vector},
        {"bpf", &simd::Tuning::bpf, 0, 256, On::vector},
        {"ksub", &simd::Tuning::ksub, 0, 1 << 16, On::vector},
        {"epf", &simd::Tuning::epf, 0, 1, On::vector},
        {"bfuse", &simd::Tuning::bfuse, 0, 1, On::vector},
        {"bnext", &simd::Tuning::bnext, 0, 1, On::vector},
        {"bcopy", &simd::Tuning::bcopy, 0, 2, On::vector},
        {"srows", &simd::Tuning::srows, 0, 64, On::vector},
        {"fq", &simd::Tuning::fq, 0, 64, On::any},
        {"steal", &simd::Tuning::steal, 0, 1, On::vector},
        {"lag", &simd::Tuning::lag, 0, 1000000, On::vector},
        {"crows", &simd::Tuning::crows, 0, 64, On::vector},
        {"llc", &simd::Tuning::llc, 0, 1 << 30, On::vector},
        {"ksplit", &simd::Tuning::ksplit, 0, 1, On::vector},
        {"kstream", &simd::Tuning::kstream, 0, 1, On::any},
        {"byhead", &simd::Tuning::byhead, 0, 3, On::any},
        {"claim", &simd::Tuning::claim, 0, 2, On::any},
        {"qrun", &simd::Tuning::qrun, 0, 1, On::any},
        {"qmin", &simd::Tuning::qmin, 1, 16, On::any},
        {"qs", &simd::Tuning::qs, 0, 16, On::any},
        {"qitems", &simd::Tuning::qitems, 1, 64, On::any},
        {"l2", &simd::Tuning::l2, 0, 1 << 30, On::any},
        {"runc", &simd::Tuning::runc, 0, 16384, On::vector},
        {"dyn", &simd::Tuning::dyn, 0, 1, On::amx},
        {"isplit", &simd::Tuning::isplit, 1, 16, On::amx},
        {"wrows", &simd::Tuning::wrows, 0, 64, On::vector},
        {"wcols", &simd::Tuning::wcols, 32, 1 << 20, On::vector},
        {"trace", &simd::Tuning::trace, 0, 1, On::any},
        {"lpack", &simd::Tuning::lpack, 0, 1, On::avx512},
        {"xsteal", &simd::Tuning::xsteal, 0, 1 << 16, On::amx},
        {"zpv", &simd::Tuning::zpv, 0, 2, On::amx},
        {"qgrow", &simd::Tuning::qgrow, 0, 1, On::amx},
        {"ppf", &simd::Tuning::ppf, 0, 1, On::amx},
    };
    const Knob* knob = nullptr;
    std::string names;
    for (const Knob& k : kKnobs) {
      if (k.on == (t.amx ? On::vector : On::amx) || (k.on == On::avx512 && t.avx2)) continue;
      const std::string name = k.name;
      names += (names.empty() ? "" : ", ") + name;
      if (key == name) knob = &k;
    }
    if (!knob) return unsupported(kind, "unknown option '" + key + "=" + value + "' (options: " + names + ")", lane);
    int* field = &(t.*knob->field);
    const int lo = knob->lo, hi = t.avx2 && knob->hi_avx2 >= 0 ? knob->hi_avx2 : knob->hi;
    if (!number) return unsupported(kind, "option " + key + "=" + value + " is not an integer", lane);
    if (v < lo || v > hi)
      return unsupported(
          kind, "option " + key + "=" + value + " is outside " + std::to_string(lo) + ".." + std::to_string(hi), lane);
    if ((key == "nb" || key == "runc") && v % 32 != 0)
      return unsupported(kind, "option " + key + "=" + value + " is not a multiple of 32", lane);
    *field = v;
  }
  // Attention's default query block: one 12-row P·V tile (x86_simd_attention.cpp says why).
  if (kind == RegionKind::attention && !options.count("mr")) t.mr = t.avx2 ? 6 : 12;
  if (t.llc < 0) t.llc = static_cast<int>(std::min<std::int64_t>(host_llc_share_bytes() / 1024, 1 << 30));
  if (t.l2 < 0) t.l2 = static_cast<int>(std::min<std::int64_t>(host_l2_bytes() / 1024, 1 << 30));
  // AMX's K block: 384 lets A blocks of up to 455 rows (three bf16 parts) stay within 1 MiB of
  // L2 (768: 227), so B is packed for fewer row blocks; best of 30 calls at 512x2048x768 /
  // 1024^3 / 128x3072x768 / 2048^3 / gated 512x768->2048: 3.9-4.1 / 5.1-5.5 / 1.7 / 42.8 / 7.4
  // ms against 4.3 / 5.1-5.6 / 2.0 / 45.1 / 7.7 with 768.
  if (t.amx && !options.count("kc")) t.kc = 384;
  return t;
}

std::string dims_prologue(const Region& region, const EmitOptions& options) {
  const RegionKind kind = region_kind(region);
  const auto names = codegen::abi_dim_names(kind);
  std::vector<std::int64_t> values;
  if (options.spec != SpecPolicy::dynamic) values = codegen::abi_dim_values(kind, *options.dims);
  std::string s;
  for (size_t i = 0; i < names.size(); ++i) {
    const std::string name(names[i]), arg = "dims[" + std::to_string(i) + "]";
    if (options.spec == SpecPolicy::static_dims) {
      s += "  const int64_t " + name + " = " + std::to_string(values[i]) + "LL;\n";
      s += "  if (" + arg + " != " + name + ") return 1;\n";
    } else {
      s += "  const int64_t " + name + " = " + arg + ";\n";
      if (options.spec == SpecPolicy::bucket)
        s += "  if (" + name + " > " + std::to_string(dim_bucket(values[i])) + ") return 1;\n";
    }
  }
  return s;
}

// Helpers every kernel of the lane may use: 64-byte aligned allocation, integer helpers.
const char* kCommonHelpers = R"(static inline int64_t fusor_cdiv(int64_t a, int64_t b) { return (a + b - 1) / b; }
static inline void* fusor_alloc(size_t bytes) {
  return aligned_alloc(64, bytes == 0 ? 64 : (bytes + 63) / 64 * 64);
}
/* Scratch kept from call to call (grow-only, per thread; slots are the kernel's own): a
   fresh multi-MiB buffer is returned to the OS by free and page-faults on every first touch
   of the next call, which cost attention at S = 512 a fifth of its time. */
static void* fusor_scratch(int slot, size_t bytes) {
  static _Thread_local void* buf[8];
  static _Thread_local size_t cap[8];
  if (cap[slot] < bytes || !buf[slot]) {
    free(buf[slot]);
    buf[slot] = fusor_alloc(bytes);
    cap[slot] = buf[slot] ? bytes : 0;
  }
  return buf[slot];
}

)";

} // namespace

std::optional<std::string> simd_declines(const Region& region) {
  if (!host_has_avx512())
    return std::string("the host lacks AVX-512 (avx512f/bw/vl/dq); the portable x86_c lane serves it");
  const DType d = region_storage(region);
  if (d == DType::fp8_e4m3 || d == DType::fp8_e5m2)
    return std::string("fp8 storage is not supported by the x86_avx512 lane");
  return std::nullopt;
}

std::optional<std::string> avx2_declines(const Region& region) {
  if (!host_has_avx2_fma()) return std::string("the host lacks AVX2 and FMA; the portable x86_c lane serves it");
  const DType d = region_storage(region);
  if (d == DType::fp8_e4m3 || d == DType::fp8_e5m2)
    return std::string("fp8 storage is not supported by the x86_avx2 lane");
  return std::nullopt;
}

std::optional<std::string> amx_declines(const Region& region) {
  if (auto why = simd_declines(region)) return why;
  const RegionKind kind = region_kind(region);
  if (kind != RegionKind::fused && kind != RegionKind::matmul && kind != RegionKind::gated &&
      kind != RegionKind::attention)
    return "the x86_amx lane computes GEMM-rooted kinds and attention only";
  if (amx_emulated()) return std::nullopt;
  return host_lacks_amx_bf16();
}

namespace {

// Emission never looks at the host: simd_declines / amx_declines keep the kernels off a CPU
// without the ISA (emit_candidate applies them before a run), and `fusor emit` may write the
// source for another machine.
Expected<KernelSource> emit_lane(const Region& region, const EmitOptions& options, std::string_view lane) {
  const RegionKind kind = region_kind(region);
  FUSOR_TRY_ASSIGN(simd::Tuning tuning, parse_tuning(kind, options.options, lane));
  const DType storage = region_storage(region);
  FUSOR_TRY_ASSIGN(const simd::StorageLoad ld, storage_load(storage, kind));
  if (options.spec != SpecPolicy::dynamic && !options.dims)
    return unsupported(kind, "spec " + std::string(spec_policy_name(options.spec)) + " needs dims (--dims)", lane);
  const std::string key = codegen::shape_key(kind, options.spec, options.dims);

  const bool gemm_kind = kind == RegionKind::fused || kind == RegionKind::matmul || kind == RegionKind::gated;
  if (tuning.amx) {
    if (!gemm_kind && kind != RegionKind::attention)
      return unsupported(kind, "only GEMM-rooted kinds (fused, matmul, gated) and attention", lane);
    const auto* f = std::get_if<FusedRegion>(&region);
    // Attention: A, B are Q, K (the scores); V has as many parts and the probabilities three.
    tuning.amx_parts_a = simd::amx_parts(storage, f && !f->prologue().empty());
    tuning.amx_parts_b = simd::amx_parts(storage, false);
  }
  std::string body;
  std::optional<simd::GemmPlan> plan;
  if (const auto* f = std::get_if<FusedRegion>(&region))
    plan = simd::GemmPlan{f->a_layout() == Layout::col_major,
                          f->b_layout() == Layout::col_major,
                          f->prologue(),
                          f->epilogue(),
                          f->residual(),
                          f->reduction(),
                          f->eps(),
                          std::nullopt};
  else if (const auto* m = std::get_if<MatmulRegion>(&region))
    plan = simd::GemmPlan{m->transpose_a(), m->transpose_b(), {}, {}, false, std::nullopt, 0.0, std::nullopt};
  else if (const auto* g = std::get_if<GatedMatmulRegion>(&region))
    plan = simd::GemmPlan{false, false, {}, {}, false, std::nullopt, 0.0, g->gate_act()};
  if (plan) {
    body = simd::gemm_body(*plan, ld, tuning);
  } else if (const auto* a = std::get_if<AttentionRegion>(&region)) {
    body = simd::attention_body(*a, ld, tuning);
  } else if (const auto* p = std::get_if<PointwiseGraphRegion>(&region)) {
    body = simd::pointwise_body(*p, tuning.avx2);
  } else if (const auto* pr = std::get_if<PointwiseReduceRegion>(&region)) {
    body = simd::pointwise_reduce_body(*pr);
  } else if (const auto* n = std::get_if<NormChainRegion>(&region)) {
    body = simd::norm_chain_body(*n, tuning.avx2);
  }

  std::string head = "/* fusor kernel | region: " + print_region(region) + " | lane: " + std::string(lane) +
                     " | spec: " + key + " */\n";
  // The ymm lane on a host that has AVX-512 too: -march=native would let the compiler encode
  // its ymm code in EVEX and use ymm16-31, longer instructions that cost the GEMM tiles up to
  // 14 % on Zen 4 (512 x 2048 x 768, stand-alone driver: bias alone 0.875x the time without
  // them, bias + residual 0.90x, bias + GELU 0.97x). The lane is for AVX2 hosts, so it is
  // compiled as one: a flag GCC and Clang both take (a no-op where there is no AVX-512), named
  // in the source for whoever builds it by hand.
  const std::vector<std::string> lane_flags =
      tuning.avx2 ? std::vector<std::string>{"-mno-avx512f"} : std::vector<std::string>{};
  if (!lane_flags.empty()) {
    head += "/* compiled with";
    for (const auto& flag : lane_flags) head += " " + flag;
    head += " after the host compiler's flags */\n";
  }
  const bool streaming = kind == RegionKind::pointwise || kind == RegionKind::norm_chain;
  if (tuning.amx) head += "#define _GNU_SOURCE /* syscall() */\n#include <sys/syscall.h>\n#include <unistd.h>\n";
  head += "#include <immintrin.h>\n#include <math.h>\n#include <stdint.h>\n#include <stdlib.h>\n#include <string.h>\n";
  head += "#ifdef _OPENMP\n#include <omp.h>\n#endif\n\n";
  head += codegen::render_storage_helpers(codegen::c99_simd_dialect());
  head += codegen::render_vector_math_helpers(codegen::c99_simd_dialect()) + "\n";
  head += kCommonHelpers;
  head += "#define FUSOR_SERIAL_BELOW " + std::to_string(tuning.serial) + ".0\n";
  if (tuning.amx)
    head += simd::amx_source(tuning.amx_parts_a, tuning.amx_parts_b) +
            (kind == RegionKind::attention
                 ? simd::transpose16_source() + simd::amx_attention_queue_source(tuning.amx_parts_a, tuning.amx_parts_b,
                                                                                 tuning.amx_parts_b, tuning.exact != 0)
                 : simd::amx_ukr_source(tuning.amx_parts_a, tuning.amx_parts_b, tuning.exact != 0, "fusor_amx_ukr") +
                       simd::amx_packing_ukr_source(tuning.amx_parts_a, tuning.amx_parts_b, tuning.exact != 0, ld));
  else if (tuning.avx2 && (gemm_kind || kind == RegionKind::attention))
    head += simd::avx2_micro_kernel_source(tuning.mr, tuning.ksub);
  else if (gemm_kind || kind == RegionKind::attention)
    head += simd::micro_kernel_source(tuning.mr, tuning.ksub);
  if (plan && !tuning.amx)
    head += simd::edge_tiles_source(tuning.mr, tuning.avx2, simd::gemm_reads_in_place(*plan, ld, tuning),
                                    simd::gemm_packs_in_tiles(*plan, ld, tuning) ? tuning.bpf : -1,
                                    simd::gemm_copies_next_panel(*plan, ld, tuning) ? (plan->gate ? 16 : 32) : 0);
  const bool vector_math = kind == RegionKind::pointwise || kind == RegionKind::norm_chain;
  if (!tuning.avx2 && (gemm_kind || kind == RegionKind::attention || vector_math))
    head += codegen::render_avx512_math_helpers(codegen::c99_avx512_dialect());
  const auto* attention = std::get_if<AttentionRegion>(&region);
  const bool few_queries = attention && simd::attention_reads_few_queries(tuning);
  // (The x86_avx2 lane's flash loop takes the vocabulary's softmax step where the table's e^d is
  // expf.)
  const bool vector_words = few_queries || (attention && tuning.avx2 && simd::softmax_exp_is_expf());
  if (tuning.avx2 && (vector_math || vector_words))
    head += codegen::render_avx2_math_helpers(codegen::c99_avx2_dialect());
  if (attention) head += simd::attention_helper_source(*attention, ld, tuning);
  if (vector_words) head += simd::attention_vector_source(ld, tuning.avx2);
  if (few_queries) head += simd::attention_few_queries_source(*attention, ld);
  if (kind == RegionKind::pointwise || kind == RegionKind::pointwise_reduce) head += simd::pointwise_helpers();
  if (streaming) head += simd::stream_helpers(tuning.stream, simd::stream_limit_bytes(tuning), tuning.avx2);

  KernelSource source =
      codegen::kernel_source(region, options,
                             head +
                                 "int fusor_kernel(const void* const* operands, float* restrict out, const "
                                 "int64_t* dims) {\n" +
                                 dims_prologue(region, options) + body + "}\n",
                             "c", "x86", std::string(lane), key);
  source.compile_flags = lane_flags;
  return source;
}

} // namespace

Expected<KernelSource> emit_simd(const Region& region, const EmitOptions& options) {
  return emit_lane(region, options, kAvx512Lane);
}

Expected<KernelSource> emit_avx2(const Region& region, const EmitOptions& options) {
  return emit_lane(region, options, kAvx2Lane);
}

Expected<KernelSource> emit_amx(const Region& region, const EmitOptions& options) {
  return emit_lane(region, options, kAmxLane);
}

} // namespace fusor::x86
