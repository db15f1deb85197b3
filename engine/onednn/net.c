#include "net.h"

#include <dnnl.h>
#include <dnnl_debug.h>
#include <math.h>
#include <omp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static dnnl_engine_t engine;

#define TRY(call)                                                  \
  do {                                                             \
    dnnl_status_t s_ = (call);                                     \
    if (s_ != dnnl_success) {                                      \
      snprintf(err, errlen, "%s: %s", #call, dnnl_status2str(s_)); \
      goto fail;                                                   \
    }                                                              \
  } while (0)

static size_t padded(int c) { return (size_t)(c + 15) / 16 * 16; }

size_t od_bytes(const od_desc *d) {
  size_t channels = d->planar ? (size_t)d->c : padded(d->c);
  return channels * d->h * d->w * (d->dt == OD_BF16 ? 2 : 4);
}

int od_init(char *err, size_t errlen) {
  if (engine) return 0;
  TRY(dnnl_engine_create(&engine, dnnl_cpu, 0));
  return 0;
fail:
  return -1;
}

void *od_alloc(size_t n) { return aligned_alloc(64, (n + 63) / 64 * 64); }

void od_free(void *p) { free(p); }

static dnnl_status_t describe(dnnl_memory_desc_t *md, const od_desc *d) {
  dnnl_dims_t dims = {1, d->c, d->h, d->w};
  return dnnl_memory_desc_init_by_tag(md, 4, dims, d->dt == OD_BF16 ? dnnl_bf16 : dnnl_f32,
                                      d->planar ? dnnl_nchw : dnnl_nChw16c);
}

struct od_conv {
  dnnl_primitive_t prim;
  dnnl_stream_t stream;
  dnnl_memory_t src, weights, bias, dst;
};

void od_conv_free(od_conv *c) {
  if (!c) return;
  if (c->prim) dnnl_primitive_destroy(c->prim);
  if (c->stream) dnnl_stream_destroy(c->stream);
  if (c->src) dnnl_memory_destroy(c->src);
  if (c->weights) dnnl_memory_destroy(c->weights);
  if (c->bias) dnnl_memory_destroy(c->bias);
  if (c->dst) dnnl_memory_destroy(c->dst);
  free(c);
}

od_conv *od_conv_new(const od_desc *src, const od_desc *dst, int k, int stride, int pad,
                     const float *weights, const float *bias, int act, float slope, int threads,
                     char *impl, size_t impllen, char *err, size_t errlen) {
  od_conv *c = calloc(1, sizeof *c);
  dnnl_primitive_attr_t attr = NULL;
  dnnl_post_ops_t ops = NULL;
  dnnl_primitive_desc_t pd = NULL, reorder_pd = NULL;
  dnnl_primitive_t reorder = NULL;
  dnnl_memory_t user_weights = NULL;
  if (!c) {
    snprintf(err, errlen, "out of memory");
    return NULL;
  }
  omp_set_num_threads(threads);  // oneDNN plans its blocking for them
  dnnl_memory_desc_t src_md, dst_md, weights_md, user_weights_md, bias_md;
  dnnl_dims_t weights_dims = {dst->c, src->c, k, k}, bias_dims = {dst->c};
  dnnl_dims_t strides = {stride, stride}, pads = {pad, pad};
  TRY(describe(&src_md, src));
  TRY(describe(&dst_md, dst));
  TRY(dnnl_memory_desc_init_by_tag(&weights_md, 4, weights_dims,
                                   src->dt == OD_BF16 ? dnnl_bf16 : dnnl_f32, dnnl_format_tag_any));
  TRY(dnnl_memory_desc_init_by_tag(&user_weights_md, 4, weights_dims, dnnl_f32, dnnl_oihw));
  TRY(dnnl_memory_desc_init_by_tag(&bias_md, 1, bias_dims, dnnl_f32, dnnl_a));

  TRY(dnnl_primitive_attr_create(&attr));
  if (act) {
    // oneDNN's relu with a negative slope is a leaky ReLU.
    TRY(dnnl_post_ops_create(&ops));
    TRY(dnnl_post_ops_append_eltwise(ops, 1.0f, dnnl_eltwise_relu, slope, 0.0f));
    TRY(dnnl_primitive_attr_set_post_ops(attr, ops));
  }
  dnnl_convolution_desc_t d;
  TRY(dnnl_convolution_forward_desc_init(&d, dnnl_forward_inference, dnnl_convolution_direct,
                                         &src_md, &weights_md, bias ? &bias_md : NULL, &dst_md,
                                         strides, pads, pads));
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
  TRY(dnnl_memory_create(&user_weights, &user_weights_md, engine, (void *)weights));
  TRY(dnnl_reorder_primitive_desc_create(&reorder_pd, &user_weights_md, engine, chosen, engine,
                                         NULL));
  TRY(dnnl_primitive_create(&reorder, reorder_pd));
  dnnl_exec_arg_t reorder_args[] = {{DNNL_ARG_FROM, user_weights}, {DNNL_ARG_TO, c->weights}};
  TRY(dnnl_primitive_execute(reorder, c->stream, 2, reorder_args));
  TRY(dnnl_stream_wait(c->stream));
  if (bias) {
    void *handle = NULL;
    TRY(dnnl_memory_create(&c->bias, &bias_md, engine, DNNL_MEMORY_ALLOCATE));
    TRY(dnnl_memory_get_data_handle(c->bias, &handle));
    memcpy(handle, bias, sizeof(float) * dst->c);
  }
  // src and dst get their data at each run.
  TRY(dnnl_memory_create(&c->src, &src_md, engine, DNNL_MEMORY_NONE));
  TRY(dnnl_memory_create(&c->dst, &dst_md, engine, DNNL_MEMORY_NONE));
  goto done;
fail:
  od_conv_free(c);
  c = NULL;
done:
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
  dnnl_exec_arg_t args[] = {{DNNL_ARG_SRC, c->src},
                            {DNNL_ARG_WEIGHTS, c->weights},
                            {DNNL_ARG_DST, c->dst},
                            {DNNL_ARG_BIAS, c->bias}};
  TRY(dnnl_primitive_execute(c->prim, c->stream, c->bias ? 4 : 3, args));
  TRY(dnnl_stream_wait(c->stream));
  return 0;
fail:
  return -1;
}

// bfloat16: the top half of a float32, rounded to nearest even (the
// values here are finite).
static inline float bf16_load(uint16_t v) {
  uint32_t bits = (uint32_t)v << 16;
  float f;
  memcpy(&f, &bits, 4);
  return f;
}

static inline uint16_t bf16_store(float f) {
  uint32_t bits;
  memcpy(&bits, &f, 4);
  bits += 0x7fff + ((bits >> 16) & 1);
  return (uint16_t)(bits >> 16);
}

static inline float f32_load(float v) { return v; }
static inline float f32_store(float f) { return f; }

// The offset of channel c's value at (y, x) in a tensor of d's shape.
static inline size_t blocked_at(const od_desc *d, int c, int y, int x) {
  return (((size_t)(c / 16) * d->h + y) * d->w + x) * 16 + c % 16;
}

static inline size_t planar_at(const od_desc *d, int c, int y, int x) {
  return ((size_t)c * d->h + y) * d->w + x;
}

void od_import(int threads, const float *x, int h, int w, float *f32, void *bf16) {
  size_t n = (size_t)3 * h * w;
  if (f32) memcpy(f32, x, n * sizeof(float));
  if (bf16) {
    uint16_t *y = bf16;
#pragma omp parallel for num_threads(threads) schedule(static)
    for (size_t i = 0; i < n; i++) y[i] = bf16_store(x[i]);
  }
}

// Each loop below is written once for each data type T of its blocked
// tensors; LOAD and STORE convert between T and float. The depth-to-space
// loops walk src: its pixel (r, q) holds, for each phase (qy, qx), the
// values of dst's pixel (s × r + qy + offset, s × q + qx + offset).
#define LOOPS(SUFFIX, T, LOAD, STORE)                                                           \
  static void d2s_blocked_##SUFFIX(int threads, const od_desc *src, const T *x, int s,        \
                                   int offset, const od_desc *dst, T *y, const od_desc *skip,  \
                                   const T *z, int top, int left) {                            \
    int blocks = dst->c / 16;                                                                  \
    _Pragma("omp parallel for collapse(2) num_threads(threads) schedule(static)")              \
    for (int b = 0; b < blocks; b++)                                                           \
      for (int r = 0; r < src->h; r++)                                                         \
        for (int qy = 0; qy < s; qy++) {                                                       \
          int oy = s * r + qy + offset;                                                        \
          if (oy < 0 || oy >= dst->h) continue;                                                \
          for (int q = 0; q < src->w; q++)                                                     \
            for (int qx = 0; qx < s; qx++) {                                                   \
              int ox = s * q + qx + offset;                                                    \
              if (ox < 0 || ox >= dst->w) continue;                                            \
              const T *from = x + blocked_at(src, (qy * s + qx) * dst->c + b * 16, r, q);      \
              T *to = y + blocked_at(dst, b * 16, oy, ox);                                     \
              if (z) {                                                                         \
                const T *add = z + blocked_at(skip, b * 16, oy + top, ox + left);              \
                for (int i = 0; i < 16; i++) to[i] = STORE(LOAD(from[i]) + LOAD(add[i]));      \
              } else {                                                                         \
                for (int i = 0; i < 16; i++) to[i] = from[i];                                  \
              }                                                                                \
            }                                                                                  \
        }                                                                                      \
  }                                                                                            \
  static void d2s_planar_##SUFFIX(int threads, const od_desc *src, const T *x, int s,         \
                                  int offset, const od_desc *dst, float *y, uint16_t *bf16) {  \
    _Pragma("omp parallel for collapse(2) num_threads(threads) schedule(static)")              \
    for (int o = 0; o < dst->c; o++)                                                           \
      for (int r = 0; r < src->h; r++)                                                         \
        for (int qy = 0; qy < s; qy++) {                                                       \
          int oy = s * r + qy + offset;                                                        \
          if (oy < 0 || oy >= dst->h) continue;                                                \
          for (int q = 0; q < src->w; q++)                                                     \
            for (int qx = 0; qx < s; qx++) {                                                   \
              int ox = s * q + qx + offset;                                                    \
              if (ox < 0 || ox >= dst->w) continue;                                            \
              float v = LOAD(x[blocked_at(src, (qy * s + qx) * dst->c + o, r, q)]);            \
              size_t at = planar_at(dst, o, oy, ox);                                           \
              y[at] = v;                                                                       \
              if (bf16) bf16[at] = bf16_store(v);                                              \
            }                                                                                  \
        }                                                                                      \
  }                                                                                            \
  static void channel_sums_##SUFFIX(int threads, const od_desc *d, const T *x, double *sums) { \
    int blocks = (int)(padded(d->c) / 16);                                                     \
    _Pragma("omp parallel for num_threads(threads) schedule(static)")                          \
    for (int b = 0; b < blocks; b++) {                                                         \
      double acc[16] = {0};                                                                    \
      for (int y = 0; y < d->h; y++) {                                                         \
        float row[16] = {0};                                                                   \
        const T *p = x + blocked_at(d, b * 16, y, 0);                                          \
        for (int i = 0; i < d->w; i++)                                                         \
          for (int c = 0; c < 16; c++) row[c] += LOAD(p[i * 16 + c]);                          \
        for (int c = 0; c < 16; c++) acc[c] += row[c];                                         \
      }                                                                                        \
      for (int c = 0; c < 16; c++) sums[b * 16 + c] = acc[c];                                  \
    }                                                                                          \
  }                                                                                            \
  static void scale_channels_##SUFFIX(int threads, const od_desc *d, T *x,                    \
                                      const float *scale) {                                    \
    int blocks = (int)(padded(d->c) / 16);                                                     \
    _Pragma("omp parallel for collapse(2) num_threads(threads) schedule(static)")              \
    for (int b = 0; b < blocks; b++)                                                           \
      for (int y = 0; y < d->h; y++) {                                                         \
        T *row = x + blocked_at(d, b * 16, y, 0);                                              \
        const float *k = scale + b * 16;                                                       \
        for (int i = 0; i < d->w; i++)                                                         \
          for (int c = 0; c < 16; c++) row[i * 16 + c] = STORE(LOAD(row[i * 16 + c]) * k[c]);  \
      }                                                                                        \
  }

LOOPS(f32, float, f32_load, f32_store)
LOOPS(bf16, uint16_t, bf16_load, bf16_store)

void od_depth_to_space(int threads, const od_desc *src, const void *x, int s, int offset,
                       const od_desc *dst, void *y, void *bf16, const od_desc *skip,
                       const void *skipdata, int top, int left) {
  if (dst->planar) {
    if (src->dt == OD_BF16) d2s_planar_bf16(threads, src, x, s, offset, dst, y, bf16);
    else d2s_planar_f32(threads, src, x, s, offset, dst, y, bf16);
  } else if (src->dt == OD_BF16) {
    d2s_blocked_bf16(threads, src, x, s, offset, dst, y, skip, skipdata, top, left);
  } else {
    d2s_blocked_f32(threads, src, x, s, offset, dst, y, skip, skipdata, top, left);
  }
}

void od_squeeze_excite(int threads, const od_desc *x, void *data, const float *w1,
                       const float *b1, int hidden, const float *w2, const float *b2) {
  int c = x->c, cp = (int)padded(c);
  double *sums = malloc(sizeof(double) * cp);
  float *hid = malloc(sizeof(float) * hidden), *scale = malloc(sizeof(float) * cp);
  if (x->dt == OD_BF16) channel_sums_bf16(threads, x, data, sums);
  else channel_sums_f32(threads, x, data, sums);
  double pixels = (double)x->h * x->w;
  for (int j = 0; j < hidden; j++) {
    float v = b1[j];
    for (int i = 0; i < c; i++) v += w1[j * c + i] * (float)(sums[i] / pixels);
    hid[j] = v > 0 ? v : 0;
  }
  for (int i = 0; i < cp; i++) {
    float v = 0;
    if (i < c) {
      v = b2[i];
      for (int j = 0; j < hidden; j++) v += w2[i * hidden + j] * hid[j];
    }
    scale[i] = i < c ? 1 / (1 + expf(-v)) : 0;
  }
  if (x->dt == OD_BF16) scale_channels_bf16(threads, x, data, scale);
  else scale_channels_f32(threads, x, data, scale);
  free(sums);
  free(hid);
  free(scale);
}

void od_add_planar(int threads, const od_desc *a, const float *x, const od_desc *b,
                   const float *skip, int top, int left, float *out) {
#pragma omp parallel for collapse(2) num_threads(threads) schedule(static)
  for (int c = 0; c < a->c; c++)
    for (int y = 0; y < a->h; y++) {
      const float *from = x + blocked_at(a, c, y, 0);
      const float *add = skip + planar_at(b, c, y + top, left);
      float *to = out + planar_at(a, c, y, 0);
      for (int i = 0; i < a->w; i++) to[i] = from[i * 16] + add[i];
    }
}
