// The C half of engine/onednn: oneDNN's convolutions, and the loops for
// the memory-bound steps between them.
//
// A tensor is one image of c channels of h × w values in NHWC order (the
// c values of a pixel side by side, pixel after pixel, row after row): the
// layout oneDNN runs its bfloat16 and int8 convolutions fastest in. Its
// values are float32, bfloat16, or uint8 q standing for scale × (q − zp).
#ifndef UPSCALE_ONEDNN_NET_H
#define UPSCALE_ONEDNN_NET_H

#include <stddef.h>
#include <stdint.h>

enum { OD_F32 = 0, OD_BF16 = 1, OD_U8 = 2 };

// OD_MAX_CHANNELS bounds a tensor's channels: the loops stage runs of up
// to this many values on their stack.
enum { OD_MAX_CHANNELS = 4096 };

typedef struct {
  int c, h, w;
  int dt;       // OD_F32, OD_BF16 or OD_U8
  float scale;  // OD_U8's
  int zp;       // OD_U8's
} od_desc;

// od_bytes is the size of d's data.
size_t od_bytes(const od_desc *d);

// od_init creates the process's CPU engine, once; 0 on success, else err
// says why.
int od_init(char *err, size_t errlen);

// od_isa is the instruction set oneDNN builds its kernels for, a
// dnnl_cpu_isa_t: the CPU's, or less where ONEDNN_MAX_CPU_ISA caps it.
int od_isa(void);

// od_alloc returns n bytes aligned for AVX-512, or NULL; od_free frees
// them.
void *od_alloc(size_t n);
void od_free(void *p);

typedef struct od_conv od_conv;

// The activations a convolution may end with.
enum { OD_NO_ACT = 0, OD_LEAKY_RELU = 1, OD_SWISH = 2 };

// od_conv_new makes a convolution from src to dst with a square kernel k,
// stride and zero padding pad left and right, pad_top above and
// pad_bottom below (a band of a padded convolution's rows takes its
// padding only where it meets the tensor's edge), bias (dst->c floats, or
// NULL), the activation act after it (OD_LEAKY_RELU's of slope) and then
// each output channel o multiplied by post[o] (post NULL: by 1). With a float src
// (either float type), weights are float32 [dst->c][src->c][k][k]; with a
// uint8 src, they are int8 weights8 of the same layout, standing for
// weights8 × wscale[o] for output channel o, and dst may be of any type.
// The weights are converted and reordered into the primitive's own copy.
// The primitive runs on threads threads. impl receives the implementation
// oneDNN chose. NULL on failure, with err saying why.
od_conv *od_conv_new(const od_desc *src, const od_desc *dst, int k, int stride, int pad,
                     int pad_top, int pad_bottom, const float *weights, const int8_t *weights8, const float *wscale,
                     const float *bias, int act, float slope, const float *post, int threads,
                     char *impl, size_t impllen, char *err, size_t errlen);
// od_conv_run runs c from src to dst, laid out as c's descriptions say; 0
// on success.
int od_conv_run(od_conv *c, int threads, void *src, void *dst, char *err, size_t errlen);
void od_conv_free(od_conv *c);

// The loops. Each runs on threads threads, and reads and writes tensors of
// any type, converting through float32.

// od_import writes x, 3 planes of dst's h × w float32, to dst.
void od_import(int threads, const float *x, const od_desc *dst, void *y);

// od_convert writes src to dst, of the same shape and another type.
void od_convert(int threads, const od_desc *src, const void *x, const od_desc *dst, void *y);

// od_depth_to_space spreads the channels of src over the pixels of dst:
// src's channel (qy × s + qx) × dst->c + o at (r, q) is dst's channel o at
// (s × r + qy + row_offset, s × q + qx + offset); values that fall outside
// dst are dropped. With skip, the value of skip at top, left from each of
// dst's is added to it.
void od_depth_to_space(int threads, const od_desc *src, const void *x, int s, int offset,
                       int row_offset, const od_desc *dst, void *y, const od_desc *skip,
                       const void *z, int top, int left);

// od_squeeze_excite writes to dst each channel of src scaled by
// sigmoid(w2 · relu(w1 · mean + b1) + b2), where mean is the channels'
// means over the pixels, w1 is [hidden][src->c] and w2 [src->c][hidden].
// dst may be src.
void od_squeeze_excite(int threads, const od_desc *src, const void *x, const od_desc *dst,
                       void *y, const float *w1, const float *b1, int hidden, const float *w2,
                       const float *b2);

// The steps of od_elementwise's programs. Step i makes register i, of
// the tensors' c values at each pixel, from registers a and b before it:
// OD_INPUT the a-th input, OD_CONSTANT the c values at consts + a; the
// operators are ONNX's (OD_PRELU: a where positive, else a × b).
enum { OD_INPUT, OD_CONSTANT, OD_ADD, OD_SUB, OD_MUL, OD_DIV, OD_SIGMOID, OD_PRELU };

typedef struct {
  int op, a, b;
} od_step;

// od_elementwise writes to dst, at each pixel, the last register of the
// program steps (n of them) on the inputs in[i] at x[i], each of dst's
// shape; 0 on success, -1 when it could not have memory for its
// registers.
int od_elementwise(int threads, const od_desc *in, const void *const *x,
                    const od_desc *dst, void *y, int n, const od_step *steps, const float *consts);

// od_gate writes to dst, at each value of channel o, (a + b) ×
// (sigmoid(a) − c[o]) × post[o] (post NULL: by 1), a and b of dst's
// shape: SPAN's attention, and the scaling for the convolution that reads
// it, the program od_elementwise would run in six steps (eight), in one
// loop.
void od_gate(int threads, const od_desc *a, const void *x, const od_desc *b, const void *z,
             const float *c, const float *post, const od_desc *dst, void *y);

// od_concat writes the n tensors in[i] at x[i], of dst's height and width,
// side by side along the channels of dst, each channel o multiplied by
// post[o] (post NULL: by 1).
void od_concat(int threads, int n, const od_desc *in, const void *const *x, const od_desc *dst,
               void *y, const float *post);

// od_upsample writes to dst src enlarged s times by nearest neighbours:
// dst's pixel (r, q) is src's (r / s, q / s).
void od_upsample(int threads, const od_desc *src, const void *x, int s, const od_desc *dst, void *y);

// od_export writes to out, 3 planes of plane float32 each, a's h × w
// values from the first of each: a, of 3 channels, plus the window of b
// at top, left when z is not NULL.
void od_export(int threads, const od_desc *a, const void *x, const od_desc *b, const void *z,
               int top, int left, float *out, size_t plane);

#endif
