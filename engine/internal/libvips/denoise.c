// Sliding-window DCT denoising: every 8x8 block of the image, on grids
// shifted by step pixels, goes to the DCT domain, loses the coefficients
// too small to be signal, and comes back; each pixel is the weighted mean
// of the blocks that cover it. Colour is filtered as JPEG's Y, Cb and Cr,
// where a JPEG source's rounding happened.
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "denoise.h"

typedef float basis_t[8][8];

const double ycbcr_from_rgb[9] = {
	0.299, 0.587, 0.114,
	-0.168736, -0.331264, 0.5,
	0.5, -0.418688, -0.081312,
};

// init_basis fills b with the orthonormal 8-point DCT-II, the one JPEG uses,
// so JPEG's quantisation steps apply to its coefficients as they are.
static void init_basis(basis_t b) {
	for (int k = 0; k < 8; k++)
		for (int n = 0; n < 8; n++)
			b[k][n] = (k == 0 ? sqrt(1.0 / 8) : sqrt(2.0 / 8)) * cos(M_PI * (2 * n + 1) * k / 16.0);
}

// forward puts the DCT of the 8x8 block at in (rows stride apart) into c.
static void forward(const basis_t b, const float *in, int stride, float c[64]) {
	float tmp[64];
	for (int k = 0; k < 8; k++)
		for (int x = 0; x < 8; x++) {
			float s = 0;
			for (int n = 0; n < 8; n++)
				s += b[k][n] * in[n * stride + x];
			tmp[k * 8 + x] = s;
		}
	for (int k = 0; k < 8; k++)
		for (int l = 0; l < 8; l++) {
			float s = 0;
			for (int x = 0; x < 8; x++)
				s += tmp[k * 8 + x] * b[l][x];
			c[k * 8 + l] = s;
		}
}

// inverse puts the 8x8 block whose DCT is c into out (rows 8 apart).
static void inverse(const basis_t b, const float c[64], float out[64]) {
	float tmp[64];
	for (int k = 0; k < 8; k++)
		for (int x = 0; x < 8; x++) {
			float s = 0;
			for (int l = 0; l < 8; l++)
				s += c[k * 8 + l] * b[l][x];
			tmp[k * 8 + x] = s;
		}
	for (int n = 0; n < 8; n++)
		for (int x = 0; x < 8; x++) {
			float s = 0;
			for (int k = 0; k < 8; k++)
				s += b[k][n] * tmp[k * 8 + x];
			out[n * 8 + x] = s;
		}
}

// filter_block transforms the 8x8 block at in (rows stride apart), drops
// every coefficient below its threshold, transforms back into out and
// returns the block's weight: a block that keeps fewer coefficients is
// flatter, so more of it is trusted.
static float filter_block(const basis_t b, const float *in, int stride, const float thr[64], float out[64]) {
	float c[64];
	int kept = 0;
	forward(b, in, stride, c);
	for (int i = 1; i < 64; i++) {
		if (fabsf(c[i]) < thr[i])
			c[i] = 0;
		else
			kept++;
	}
	inverse(b, c, out);
	return 1.0f / (1 + kept);
}

// project moves each block of plane on the JPEG's grid (origin gx, gy)
// back to the nearest image JPEG would have stored as the same file: every
// DCT coefficient within half a quantisation step of decoded's.
static void project(const basis_t b, float *plane, const float *decoded, int w, int h, int gx, int gy, const float table[64]) {
	float diff[64], c[64], back[64];
	for (int by = gy; by + 8 <= h; by += 8)
		for (int bx = gx; bx + 8 <= w; bx += 8) {
			size_t origin = (size_t) by * w + bx;
			for (int y = 0; y < 8; y++)
				for (int x = 0; x < 8; x++)
					diff[y * 8 + x] = plane[origin + y * w + x] - decoded[origin + y * w + x];
			forward(b, diff, 8, c);
			for (int k = 0; k < 64; k++) {
				float half = table[k] / 2;
				c[k] = c[k] > half ? half : c[k] < -half ? -half : c[k];
			}
			inverse(b, c, back);
			for (int y = 0; y < 8; y++)
				for (int x = 0; x < 8; x++)
					plane[origin + y * w + x] = decoded[origin + y * w + x] + back[y * 8 + x];
		}
}

static int clamp_origin(int v, int size) { return v < 0 ? 0 : v > size - 8 ? size - 8 : v; }

// denoise_plane filters every 8x8 block of the w x h plane, on every grid
// shifted by step pixels, and replaces each pixel by the weighted mean of
// the filtered blocks that cover it, using acc and weight as scratch
// (w x h each).
static void denoise_plane(const basis_t b, float *plane, int w, int h, const float thr[64], int step, float *acc, float *weight) {
	size_t n = (size_t) w * h;
	float block[64];
	memset(acc, 0, n * sizeof(float));
	memset(weight, 0, n * sizeof(float));
	for (int sy = 0; sy < 8; sy += step)
		for (int sx = 0; sx < 8; sx += step)
			// A shifted grid starts one block early so that its first
			// block, pushed back inside, covers the first rows and columns.
			for (int gy = sy ? sy - 8 : 0; gy < h; gy += 8)
				for (int gx = sx ? sx - 8 : 0; gx < w; gx += 8) {
					size_t origin = (size_t) clamp_origin(gy, h) * w + clamp_origin(gx, w);
					float wt = filter_block(b, plane + origin, w, thr, block);
					for (int y = 0; y < 8; y++)
						for (int x = 0; x < 8; x++) {
							acc[origin + y * w + x] += wt * block[y * 8 + x];
							weight[origin + y * w + x] += wt;
						}
				}
	for (size_t i = 0; i < n; i++)
		plane[i] = acc[i] / weight[i];
}

int denoise_image(float *pixels, int w, int h, int bands, int colour_bands, const double sigma[3], int grid_x, int grid_y, const denoise_params *p) {
	if (w < 8 || h < 8) // too small for one block: left as it is
		return 0;
	size_t n = (size_t) w * h;
	float *planes = malloc(sizeof(float) * n * (colour_bands + 2 + p->has_tables));
	if (!planes)
		return -1;
	float *acc = planes + colour_bands * n, *weight = acc + n, *decoded = weight + n;
	basis_t b;
	init_basis(b);

	for (size_t i = 0; i < n; i++) {
		const float *px = pixels + i * bands;
		if (colour_bands == 3) {
			for (int c = 0; c < 3; c++) {
				const double *m = ycbcr_from_rgb + 3 * c;
				planes[c * n + i] = m[0] * px[0] + m[1] * px[1] + m[2] * px[2];
			}
		} else
			planes[i] = px[0];
	}
	for (int c = 0; c < colour_bands; c++) {
		float *plane = planes + c * n, thr[64];
		double noise = p->noise_threshold * sigma[c];
		const float *table = c == 0 ? p->luma_table : p->chroma_table;
		thr[0] = 0; // the block's mean is kept whatever it is
		for (int k = 1; k < 64; k++) {
			double quant = p->has_tables ? p->quant_threshold * table[k] : 0;
			thr[k] = sqrt(noise * noise + quant * quant);
		}
		if (p->has_tables && c == 0)
			memcpy(decoded, plane, n * sizeof(float));
		denoise_plane(b, plane, w, h, thr, p->step, acc, weight);
		if (p->has_tables && c == 0)
			project(b, plane, decoded, w, h, grid_x, grid_y, p->luma_table);
	}
	for (size_t i = 0; i < n; i++) {
		float *px = pixels + i * bands;
		if (colour_bands == 3) {
			float y = planes[i], cb = planes[n + i], cr = planes[2 * n + i];
			px[0] = y + 1.402f * cr;
			px[1] = y - 0.344136f * cb - 0.714136f * cr;
			px[2] = y + 1.772f * cb;
		} else
			px[0] = planes[i];
	}
	free(planes);
	return 0;
}
