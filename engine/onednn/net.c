#include "net.h"

#include <dnnl.h>
#include <dnnl_debug.h>
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

// The conversions of the loops below vectorise only without trapping
// maths and errno (GCC; cgo does not take these as flags).
#pragma GCC optimize("no-trapping-math", "no-math-errno")

static dnnl_engine_t engine;

#define TRY(call)                                                  \
  do {                                                             \
    dnnl_status_t s_ = (call);                                     \
    if (s_ != dnnl_success) {                                      \
      snprintf(err, errlen, "%s: %s", #call, dnnl_status2str(s_)); \
      goto fail;                                                   \
    }                                                              \
  } while (0)

static size_t size_of(int dt) { return dt == OD_F32 ? 4 : dt == OD_BF16 ? 2 : 1; }

size_t od_bytes(const od_desc *d) { return (size_t)d->c * d->h * d->w * size_of(d->dt); }

int od_init(char *err, size_t errlen) {
  if (engine) return 0;
  TRY(dnnl_engine_create(&engine, dnnl_cpu, 0));
  return 0;
fail:
  return -1;
}

int od_isa(void) { return (int)dnnl_get_effective_cpu_isa(); }

void *od_alloc(size_t n) { return aligned_alloc(64, (n + 63) / 64 * 64); }

void od_free(void *p) { free(p); }

static dnnl_data_type_t data_type(int dt) {
  return dt == OD_F32 ? dnnl_f32 : dt == OD_BF16 ? dnnl_bf16 : dnnl_u8;
}

static dnnl_status_t describe(dnnl_memory_desc_t *md, const od_desc *d) {
  dnnl_dims_t dims = {1, d->c, d->h, d->w};
  return dnnl_memory_desc_init_by_tag(md, 4, dims, data_type(d->dt), dnnl_nhwc);
}

struct od_conv {
  dnnl_primitive_t prim;
  dnnl_stream_t stream;
  dnnl_memory_t src, weights, bias, dst;
  dnnl_memory_t post;  // the multipliers of the last post-op, or NULL
  int post_index;      // that post-op's place in the chain
};

void od_conv_free(od_conv *c) {
  if (!c) return;
  if (c->prim) dnnl_primitive_destroy(c->prim);
  if (c->stream) dnnl_stream_destroy(c->stream);
  if (c->src) dnnl_memory_destroy(c->src);
  if (c->weights) dnnl_memory_destroy(c->weights);
  if (c->bias) dnnl_memory_destroy(c->bias);
  if (c->dst) dnnl_memory_destroy(c->dst);
  if (c->post) dnnl_memory_destroy(c->post);
  free(c);
}

od_conv *od_conv_new(const od_desc *src, const od_desc *dst, int k, int stride, int pad,
                     int pad_top, int pad_bottom, const float *weights, const int8_t *weights8, const float *wscale,
                     const float *bias, int act, float slope, const float *post, int threads,
                     char *impl, size_t impllen, char *err, size_t errlen) {
  od_conv *c = calloc(1, sizeof *c);
  dnnl_primitive_attr_t attr = NULL;
  dnnl_post_ops_t ops = NULL;
  dnnl_primitive_desc_t pd = NULL, reorder_pd = NULL;
  dnnl_primitive_t reorder = NULL;
  dnnl_memory_t user_weights = NULL;
  float *scales = NULL;
  if (!c) {
    snprintf(err, errlen, "out of memory");
    return NULL;
  }
  omp_set_num_threads(threads);  // oneDNN plans its blocking for them
  int oc = dst->c, quantized = src->dt == OD_U8;
  dnnl_memory_desc_t src_md, dst_md, weights_md, user_weights_md, bias_md;
  dnnl_dims_t weights_dims = {oc, src->c, k, k}, bias_dims = {oc};
  dnnl_dims_t strides = {stride, stride}, pads_before = {pad_top, pad}, pads_after = {pad_bottom, pad};
  dnnl_data_type_t weights_type = quantized ? dnnl_s8 : src->dt == OD_BF16 ? dnnl_bf16 : dnnl_f32;
  TRY(describe(&src_md, src));
  TRY(describe(&dst_md, dst));
  TRY(dnnl_memory_desc_init_by_tag(&weights_md, 4, weights_dims, weights_type, dnnl_format_tag_any));
  TRY(dnnl_memory_desc_init_by_tag(&user_weights_md, 4, weights_dims,
                                   quantized ? dnnl_s8 : dnnl_f32, dnnl_oihw));
  TRY(dnnl_memory_desc_init_by_tag(&bias_md, 1, bias_dims, dnnl_f32, dnnl_a));

  TRY(dnnl_primitive_attr_create(&attr));
  if (quantized) {
    // The accumulated products of q − zp and the int8 weights, with the
    // bias divided by the same factor, times each channel's scale, are
    // the result (or, for a uint8 dst, the result over dst's scale, to
    // which dst's zero point is added).
    scales = malloc(sizeof(float) * oc);
    if (!scales) {
      snprintf(err, errlen, "out of memory");
      goto fail;
    }
    float out = dst->dt == OD_U8 && act != OD_SWISH ? dst->scale : 1;
    for (int o = 0; o < oc; o++) scales[o] = src->scale * wscale[o] / out;
    TRY(dnnl_primitive_attr_set_output_scales(attr, oc, 1 << 1, scales));
    int32_t zp = src->zp;
    if (zp) TRY(dnnl_primitive_attr_set_zero_points(attr, DNNL_ARG_SRC, 1, 0, &zp));
    zp = dst->zp;
    if (dst->dt == OD_U8 && zp) TRY(dnnl_primitive_attr_set_zero_points(attr, DNNL_ARG_DST, 1, 0, &zp));
  }
  TRY(dnnl_post_ops_create(&ops));
  // Where the result is divided by a uint8 dst's scale after the
  // activation rather than in the output scales above.
  float after = quantized && dst->dt == OD_U8 && act == OD_SWISH ? 1 / dst->scale : 1;
  if (act == OD_LEAKY_RELU) {
    // oneDNN's relu with a negative slope is a leaky ReLU; with a uint8
    // dst it applies to the result over dst's scale, which is the same
    // (a leaky ReLU commutes with positive scales).
    TRY(dnnl_post_ops_append_eltwise(ops, 1.0f, dnnl_eltwise_relu, slope, 0.0f));
  } else if (act == OD_SWISH) {
    // Swish does not commute with scales: it applies to the result, and
    // a step after it divides by a uint8 dst's scale.
    TRY(dnnl_post_ops_append_eltwise(ops, 1.0f, dnnl_eltwise_swish, 1.0f, 0.0f));
  }
  if (post) {
    // The multipliers, with the division by dst's scale, as one binary
    // post-op of a value a channel.
    dnnl_memory_desc_t post_md;
    dnnl_dims_t post_dims = {1, oc, 1, 1};
    float *m = NULL;
    TRY(dnnl_memory_desc_init_by_tag(&post_md, 4, post_dims, dnnl_f32, dnnl_nhwc));
    TRY(dnnl_post_ops_append_binary(ops, dnnl_binary_mul, &post_md));
    TRY(dnnl_memory_create(&c->post, &post_md, engine, DNNL_MEMORY_ALLOCATE));
    TRY(dnnl_memory_get_data_handle(c->post, (void **)&m));
    for (int o = 0; o < oc; o++) m[o] = post[o] * after;
    c->post_index = dnnl_post_ops_len(ops) - 1;
  } else if (after != 1) {
    TRY(dnnl_post_ops_append_eltwise(ops, 1.0f, dnnl_eltwise_linear, after, 0.0f));
  }
  if (dnnl_post_ops_len(ops) > 0) TRY(dnnl_primitive_attr_set_post_ops(attr, ops));
  dnnl_convolution_desc_t d;
  TRY(dnnl_convolution_forward_desc_init(&d, dnnl_forward_inference, dnnl_convolution_direct,
                                         &src_md, &weights_md, bias ? &bias_md : NULL, &dst_md,
                                         strides, pads_before, pads_after));
  TRY(dnnl_primitive_desc_create(&pd, &d, attr, engine, NULL));
  const char *name = NULL;
  TRY(dnnl_primitive_desc_query(pd, dnnl_query_impl_info_str, 0, &name));
  snprintf(impl, impllen, "%s", name);
  TRY(dnnl_primitive_create(&c->prim, pd));
  TRY(dnnl_stream_create(&c->stream, engine, dnnl_stream_default_flags));

  // The weights, converted and reordered once into the layout the
  // primitive chose; the bias, copied.
  const dnnl_memory_desc_t *chosen = dnnl_primitive_desc_query_md(pd, dnnl_query_weights_md, 0);
  TRY(dnnl_memory_create(&c->weights, chosen, engine, DNNL_MEMORY_ALLOCATE));
  TRY(dnnl_memory_create(&user_weights, &user_weights_md, engine,
                         quantized ? (void *)weights8 : (void *)weights));
  TRY(dnnl_reorder_primitive_desc_create(&reorder_pd, &user_weights_md, engine, chosen, engine,
                                         NULL));
  TRY(dnnl_primitive_create(&reorder, reorder_pd));
  dnnl_exec_arg_t reorder_args[] = {{DNNL_ARG_FROM, user_weights}, {DNNL_ARG_TO, c->weights}};
  TRY(dnnl_primitive_execute(reorder, c->stream, 2, reorder_args));
  TRY(dnnl_stream_wait(c->stream));
  if (bias) {
    float *b = NULL;
    TRY(dnnl_memory_create(&c->bias, &bias_md, engine, DNNL_MEMORY_ALLOCATE));
    TRY(dnnl_memory_get_data_handle(c->bias, (void **)&b));
    for (int o = 0; o < oc; o++) b[o] = quantized ? bias[o] / (src->scale * wscale[o]) : bias[o];
  }
  // src and dst get their data at each run.
  TRY(dnnl_memory_create(&c->src, &src_md, engine, DNNL_MEMORY_NONE));
  TRY(dnnl_memory_create(&c->dst, &dst_md, engine, DNNL_MEMORY_NONE));
  goto done;
fail:
  od_conv_free(c);
  c = NULL;
done:
  free(scales);
  if (reorder) dnnl_primitive_destroy(reorder);
  if (reorder_pd) dnnl_primitive_desc_destroy(reorder_pd);
  if (user_weights) dnnl_memory_destroy(user_weights);
  if (pd) dnnl_primitive_desc_destroy(pd);
  if (ops) dnnl_post_ops_destroy(ops);
  if (attr) dnnl_primitive_attr_destroy(attr);
  return c;
}

int od_conv_run(od_conv *c, int threads, void *src, void *dst, char *err, size_t errlen) {
  omp_set_num_threads(threads);
  TRY(dnnl_memory_set_data_handle(c->src, src));
  TRY(dnnl_memory_set_data_handle(c->dst, dst));
  dnnl_exec_arg_t args[5] = {{DNNL_ARG_SRC, c->src},
                             {DNNL_ARG_WEIGHTS, c->weights},
                             {DNNL_ARG_DST, c->dst}};
  int n = 3;
  if (c->bias) args[n++] = (dnnl_exec_arg_t){DNNL_ARG_BIAS, c->bias};
  if (c->post)
    args[n++] = (dnnl_exec_arg_t){DNNL_ARG_ATTR_MULTIPLE_POST_OP(c->post_index) | DNNL_ARG_SRC_1,
                                  c->post};
  TRY(dnnl_primitive_execute(c->prim, c->stream, n, args));
  TRY(dnnl_stream_wait(c->stream));
  return 0;
fail:
  return -1;
}

// The loops read and write runs of n values of a tensor, starting at
// element at, through float32. bfloat16 is the top half of a float32,
// rounded to nearest even (the values here are finite); uint8 saturates
// and rounds to nearest even.

static inline size_t at(const od_desc *d, int y, int x) { return ((size_t)y * d->w + x) * d->c; }

static inline void load(const od_desc *d, const void *p, size_t i, int n, float *out) {
  switch (d->dt) {
    case OD_F32:
      memcpy(out, (const float *)p + i, sizeof(float) * n);
      break;
    case OD_BF16: {
      const uint16_t *v = (const uint16_t *)p + i;
      for (int j = 0; j < n; j++) {
        uint32_t bits = (uint32_t)v[j] << 16;
        memcpy(&out[j], &bits, 4);
      }
      break;
    }
    default: {
      const uint8_t *v = (const uint8_t *)p + i;
      float scale = d->scale;
      int zp = d->zp;
      for (int j = 0; j < n; j++) out[j] = scale * (float)(v[j] - zp);
    }
  }
}

static inline void store(const od_desc *d, void *p, size_t i, int n, const float *in) {
  switch (d->dt) {
    case OD_F32:
      memcpy((float *)p + i, in, sizeof(float) * n);
      break;
    case OD_BF16: {
      uint16_t *v = (uint16_t *)p + i;
      for (int j = 0; j < n; j++) {
        uint32_t bits;
        memcpy(&bits, &in[j], 4);
        v[j] = (uint16_t)((bits + 0x7fff + ((bits >> 16) & 1)) >> 16);
      }
      break;
    }
    default: {
      // Adding 1.5 × 2²³ to a float q in (−2²², 2²²) rounds it to the
      // nearest integer, ties to even, in the default rounding mode:
      // the sum's bits are those of 1.5 × 2²³ plus round(q), and any q
      // beyond lands on the side it saturates to. Clamped as integers,
      // with integer maxima and saturating packs, where a clamp of floats
      // took compares and blends: a pass scaling 48 channels to uint8
      // ran 27% faster (AMD EPYC, AVX-512), with the same results.
      uint8_t *v = (uint8_t *)p + i;
      float inv = 1 / d->scale, zp = (float)d->zp;
      for (int j = 0; j < n; j++) {
        float q = in[j] * inv + zp + 12582912.0f;
        int32_t r;
        memcpy(&r, &q, 4);
        r -= 0x4b400000;
        r = r < 0 ? 0 : r;
        v[j] = (uint8_t)(r > 255 ? 255 : r);
      }
    }
  }
}

// CHUNK is how many values a loop stages at once, on its thread's stack:
// at least a pixel's.
enum { CHUNK = OD_MAX_CHANNELS };

// The loops are built twice, for AVX-512 and for any x86-64, and the
// first call picks the one the CPU runs.
#define LOOP __attribute__((target_clones("arch=x86-64-v4", "default")))

LOOP void od_import(int threads, const float *x, const od_desc *dst, void *y) {
  size_t plane = (size_t)dst->h * dst->w;
#pragma omp parallel for num_threads(threads) schedule(static)
  for (int r = 0; r < dst->h; r++)
    for (int q = 0; q < dst->w; q++) {
      size_t i = (size_t)r * dst->w + q;
      float px[3] = {x[i], x[plane + i], x[2 * plane + i]};
      store(dst, y, at(dst, r, q), 3, px);
    }
}

LOOP void od_convert(int threads, const od_desc *src, const void *x, const od_desc *dst, void *y) {
  size_t n = od_bytes(src) / size_of(src->dt);
  size_t chunks = (n + CHUNK - 1) / CHUNK;
#pragma omp parallel for num_threads(threads) schedule(static)
  for (size_t k = 0; k < chunks; k++) {
    float v[CHUNK];
    int len = (int)(k + 1 < chunks ? CHUNK : n - k * CHUNK);
    load(src, x, k * CHUNK, len, v);
    store(dst, y, k * CHUNK, len, v);
  }
}

LOOP void od_depth_to_space(int threads, const od_desc *src, const void *x, int s, int offset,
                       int row_offset, const od_desc *dst, void *y, const od_desc *skip,
                       const void *z, int top, int left) {
  int c = dst->c;
#pragma omp parallel for collapse(2) num_threads(threads) schedule(static)
  for (int r = 0; r < src->h; r++)
    for (int qy = 0; qy < s; qy++) {
      int oy = s * r + qy + row_offset;
      if (oy < 0 || oy >= dst->h) continue;
      float v[CHUNK], add[CHUNK];
      for (int q = 0; q < src->w; q++)
        for (int qx = 0; qx < s; qx++) {
          int ox = s * q + qx + offset;
          if (ox < 0 || ox >= dst->w) continue;
          load(src, x, at(src, r, q) + (size_t)(qy * s + qx) * c, c, v);
          if (z) {
            load(skip, z, at(skip, oy + top, ox + left), c, add);
            for (int i = 0; i < c; i++) v[i] += add[i];
          }
          store(dst, y, at(dst, oy, ox), c, v);
        }
    }
}

LOOP void od_squeeze_excite(int threads, const od_desc *src, const void *x, const od_desc *dst,
                       void *y, const float *w1, const float *b1, int hidden, const float *w2,
                       const float *b2) {
  int c = src->c;
  double *sums = calloc(c, sizeof(double));
  float *hid = malloc(sizeof(float) * hidden), *scale = malloc(sizeof(float) * c);
#pragma omp parallel num_threads(threads)
  {
    double *mine = calloc(c, sizeof(double));
    float v[CHUNK];
#pragma omp for schedule(static)
    for (int r = 0; r < src->h; r++) {
      for (int q = 0; q < src->w; q++) {
        load(src, x, at(src, r, q), c, v);
        for (int i = 0; i < c; i++) mine[i] += v[i];
      }
    }
#pragma omp critical
    for (int i = 0; i < c; i++) sums[i] += mine[i];
    free(mine);
  }
  double pixels = (double)src->h * src->w;
  for (int j = 0; j < hidden; j++) {
    float v = b1[j];
    for (int i = 0; i < c; i++) v += w1[j * c + i] * (float)(sums[i] / pixels);
    hid[j] = v > 0 ? v : 0;
  }
  for (int i = 0; i < c; i++) {
    float v = b2[i];
    for (int j = 0; j < hidden; j++) v += w2[i * hidden + j] * hid[j];
    scale[i] = 1 / (1 + expf(-v));
  }
#pragma omp parallel for num_threads(threads) schedule(static)
  for (int r = 0; r < src->h; r++) {
    float v[CHUNK];
    for (int q = 0; q < src->w; q++) {
      load(src, x, at(src, r, q), c, v);
      for (int i = 0; i < c; i++) v[i] *= scale[i];
      store(dst, y, at(dst, r, q), c, v);
    }
  }
  free(sums);
  free(hid);
  free(scale);
}

// expf's value to within a few units in the last place, as a
// polynomial the loops vectorise (Cephes' expf: e^x = 2^n · e^r, r in
// ±ln2/2, with ln2 split in two for an exact r).
static inline float exp_poly(float x) {
  x = x < -87.3f ? -87.3f : x > 88.37f ? 88.37f : x;
  float n = floorf(x * 1.44269504f + 0.5f);
  float r = x - n * 0.693359375f + n * 2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r * r + r + 1;
  uint32_t bits = (uint32_t)((int32_t)n + 127) << 23;
  float two;
  memcpy(&two, &bits, 4);
  return p * two;
}

// RUN is how many values od_elementwise works on at once, at most (a
// pixel's at least): a run of each register of SPAN's attention (seven)
// then stays in the core's first-level cache. Runs of 1024 values made the
// attention pass of a 542×522 tile of 48 bfloat16 channels take 5.5 ms
// against 6.0–6.4 ms in runs of 4096, whose registers spill to the
// second level, and 6.6–6.8 in runs of 512 (the least and the median of
// 24 passes each, the builds alternating; AMD EPYC, AVX-512, 2 threads).
enum { RUN = 1024 };

// runs splits d's pixels into runs of per pixels, per the most whole
// pixels in RUN values (one at least), for the loops that work a run at
// a time; it returns how many there are.
static inline size_t runs(const od_desc *d, int *per) {
  *per = d->c < RUN ? RUN / d->c : 1;
  return ((size_t)d->h * d->w + *per - 1) / *per;
}

// run_values is how many values run k of n, of per pixels of d, holds
// (the last may be short), and sets first to where it starts.
static inline int run_values(const od_desc *d, int per, size_t k, size_t n, size_t *first) {
  *first = k * per * (size_t)d->c;
  return (int)((k + 1 < n ? (size_t)per : (size_t)d->h * d->w - k * per) * d->c);
}

static inline float sigmoid(float x) { return 1 / (1 + exp_poly(-x)); }

LOOP int od_elementwise(int threads, const od_desc *in, const void *const *x,
                        const od_desc *dst, void *y, int n, const od_step *steps,
                        const float *consts) {
  int c = dst->c, per;
  size_t count = runs(dst, &per);
  int run = per * c;
  // A register per step and thread, of a run of per pixels; a
  // constant's is filled once.
  float *all = malloc(sizeof(float) * run * n * threads);
  if (!all) return -1;
#pragma omp parallel num_threads(threads)
  {
    float *regs = all + (size_t)omp_get_thread_num() * run * n;
    for (int i = 0; i < n; i++)
      if (steps[i].op == OD_CONSTANT)
        for (int p = 0; p < per; p++) memcpy(regs + i * run + p * c, consts + steps[i].a, sizeof(float) * c);
#pragma omp for schedule(static)
    for (size_t k = 0; k < count; k++) {
      size_t first;
      int m = run_values(dst, per, k, count, &first);
      for (int i = 0; i < n; i++) {
        const od_step *s = &steps[i];
        float *out = regs + (size_t)i * run;
        const float *a = regs + (size_t)s->a * run, *b = regs + (size_t)s->b * run;
        switch (s->op) {
          case OD_INPUT:
            load(&in[s->a], x[s->a], first, m, out);
            break;
          case OD_ADD:
            for (int j = 0; j < m; j++) out[j] = a[j] + b[j];
            break;
          case OD_SUB:
            for (int j = 0; j < m; j++) out[j] = a[j] - b[j];
            break;
          case OD_MUL:
            for (int j = 0; j < m; j++) out[j] = a[j] * b[j];
            break;
          case OD_DIV:
            for (int j = 0; j < m; j++) out[j] = a[j] / b[j];
            break;
          case OD_SIGMOID:
            for (int j = 0; j < m; j++) out[j] = sigmoid(a[j]);
            break;
          case OD_PRELU:
            for (int j = 0; j < m; j++) out[j] = a[j] > 0 ? a[j] : a[j] * b[j];
            break;
        }
      }
      store(dst, y, first, m, regs + (size_t)(n - 1) * run);
    }
  }
  free(all);
  return 0;
}

// od_gate's one loop over each run, its two inputs staged, took 2.6-2.7
// ms for a 542×522 tile of 48 bfloat16 channels, where od_elementwise's
// six steps took 5.2-5.5 ms (the least of 16, caches flushed between;
// AMD EPYC, AVX-512, 2 threads), with the same results.
LOOP void od_gate(int threads, const od_desc *a, const void *x, const od_desc *b, const void *z,
                  const float *c, const float *post, const od_desc *dst, void *y) {
  int ch = dst->c, per;
  size_t count = runs(dst, &per);
#pragma omp parallel for num_threads(threads) schedule(static)
  for (size_t k = 0; k < count; k++) {
    float u[CHUNK], v[CHUNK];
    size_t first;
    int m = run_values(dst, per, k, count, &first);
    load(a, x, first, m, u);
    load(b, z, first, m, v);
    for (int p = 0; p < m; p += ch)
      for (int o = 0; o < ch; o++) {
        float s = u[p + o];
        u[p + o] = (s + v[p + o]) * (sigmoid(s) - c[o]);
      }
    if (post)
      for (int p = 0; p < m; p += ch)
        for (int o = 0; o < ch; o++) u[p + o] *= post[o];
    store(dst, y, first, m, u);
  }
}

LOOP void od_concat(int threads, int n, const od_desc *in, const void *const *x, const od_desc *dst,
                    void *y, const float *post) {
#pragma omp parallel for num_threads(threads) schedule(static)
  for (int r = 0; r < dst->h; r++) {
    float v[CHUNK];
    for (int q = 0; q < dst->w; q++) {
      int off = 0;
      for (int i = 0; i < n; i++) {
        load(&in[i], x[i], at(&in[i], r, q), in[i].c, v + off);
        off += in[i].c;
      }
      if (post)
        for (int o = 0; o < dst->c; o++) v[o] *= post[o];
      store(dst, y, at(dst, r, q), dst->c, v);
    }
  }
}

LOOP void od_upsample(int threads, const od_desc *src, const void *x, int s, const od_desc *dst,
                      void *y) {
#pragma omp parallel for num_threads(threads) schedule(static)
  for (int r = 0; r < dst->h; r++) {
    float v[CHUNK];
    for (int q = 0; q < dst->w; q++) {
      load(src, x, at(src, r / s, q / s), src->c, v);
      store(dst, y, at(dst, r, q), dst->c, v);
    }
  }
}

LOOP void od_export(int threads, const od_desc *a, const void *x, const od_desc *b, const void *z,
               int top, int left, float *out, size_t plane) {
#pragma omp parallel for num_threads(threads) schedule(static)
  for (int r = 0; r < a->h; r++)
    for (int q = 0; q < a->w; q++) {
      float u[3], v[3] = {0, 0, 0};
      load(a, x, at(a, r, q), 3, u);
      if (z) load(b, z, at(b, r + top, q + left), 3, v);
      size_t i = (size_t)r * a->w + q;
      for (int ch = 0; ch < 3; ch++) out[ch * plane + i] = u[ch] + v[ch];
    }
}
