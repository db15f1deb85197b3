// The C half of engine/onednn: oneDNN's convolutions, and the loops for
// the memory-bound steps between them.
//
// A tensor is one image of c channels of h × w values, float32 or
// bfloat16, either planar (nchw: channel after channel) or blocked
// (oneDNN's nChw16c: channels in blocks of 16, a block's 16 values of one
// pixel side by side, channels past c zero).
#ifndef UPSCALE_ONEDNN_NET_H
#define UPSCALE_ONEDNN_NET_H

#include <stddef.h>

enum { OD_F32 = 0, OD_BF16 = 1 };

typedef struct {
  int c, h, w;
  int dt;      // OD_F32 or OD_BF16
  int planar;  // 1 for nchw, 0 for nChw16c
} od_desc;

// od_bytes is the size of d's data.
size_t od_bytes(const od_desc *d);

// od_init creates the process's CPU engine, once; 0 on success, else err
// says why.
int od_init(char *err, size_t errlen);

// od_alloc returns n bytes aligned for AVX-512, or NULL; od_free frees
// them.
void *od_alloc(size_t n);
void od_free(void *p);

typedef struct od_conv od_conv;

// od_conv_new makes a convolution from src to dst (blocked) with a square
// kernel k, stride and zero padding pad on every side, bias (dst->c
// floats, or NULL) and, with act, a leaky ReLU of slope after it. weights
// are float32 [dst->c][src->c][k][k]; they are converted and reordered
// into the primitive's own copy. The primitive runs on threads threads.
// impl receives the implementation oneDNN chose. NULL on failure, with err
// saying why.
od_conv *od_conv_new(const od_desc *src, const od_desc *dst, int k, int stride, int pad,
                     const float *weights, const float *bias, int act, float slope, int threads,
                     char *impl, size_t impllen, char *err, size_t errlen);
// od_conv_run runs c from src to dst, which are laid out as c's
// descriptions say; 0 on success.
int od_conv_run(od_conv *c, int threads, void *src, void *dst, char *err, size_t errlen);
void od_conv_free(od_conv *c);

// The loops. Each runs on threads threads.

// od_import copies x, 3 planes of h × w float32, into f32 and bf16, planar
// tensors of the same shape; either may be NULL.
void od_import(int threads, const float *x, int h, int w, float *f32, void *bf16);

// od_depth_to_space spreads the channels of src (blocked) over the pixels
// of dst: src's channel (qy × s + qx) × dst->c + o at (r, q) is dst's
// channel o at (s × r + qy + offset, s × q + qx + offset), and values
// that fall outside dst are dropped. dst is blocked, of src's data type
// and of channels a multiple of 16, or planar float32; bf16, if not NULL,
// receives a bfloat16 copy of a planar dst. With skip (blocked, of dst's
// data type), each value of a blocked dst is added the value of skip at
// top, left from it.
void od_depth_to_space(int threads, const od_desc *src, const void *x, int s, int offset,
                       const od_desc *dst, void *y, void *bf16, const od_desc *skip,
                       const void *skipdata, int top, int left);

// od_squeeze_excite scales each channel of x (blocked) in place by
// sigmoid(w2 · relu(w1 · mean + b1) + b2), where mean is the channels'
// means over the pixels, w1 is [hidden][x->c] and w2 [x->c][hidden].
void od_squeeze_excite(int threads, const od_desc *x, void *data, const float *w1,
                       const float *b1, int hidden, const float *w2, const float *b2);

// od_add_planar writes to out, planar float32 of a's shape, the sum of a
// (blocked float32) and the window of b (planar float32) at top, left.
void od_add_planar(int threads, const od_desc *a, const float *x, const od_desc *b,
                   const float *skip, int top, int left, float *out);

#endif
