#ifndef UPSCALE_DENOISE_H
#define UPSCALE_DENOISE_H

// denoise_params says how strongly denoise_image filters; step 0 is off.
typedef struct {
	// Every DCT coefficient below noise_threshold * sigma is dropped, sigma
	// being the noise measured in that plane.
	double noise_threshold;
	// For a JPEG source (has_tables), its quantisation tables in natural
	// order: coefficient k is also dropped below quant_threshold * table[k],
	// the step JPEG rounded it to, and after filtering each luma block on
	// the file's grid is moved back within half a step of what the file
	// says.
	int has_tables;
	float luma_table[64], chroma_table[64];
	double quant_threshold;
	// Block grids are shifted by step pixels (1, 2, 4 or 8): 1 is every
	// grid, the best and slowest.
	int step;
} denoise_params;

// ycbcr_from_rgb is the matrix, row by row, from RGB to JPEG's Y, Cb and
// Cr, the planes the denoiser works in.
extern const double ycbcr_from_rgb[9];

// denoise_image filters the first colour_bands (1 or 3) bands of an
// interleaved float image of w x h pixels and bands bands in place; other
// bands (alpha) are left alone. sigma is the noise of each colour plane (Y,
// Cb, Cr; or grey), and (grid_x, grid_y) where a JPEG block starts. It
// returns 0, or -1 if memory ran out.
int denoise_image(float *pixels, int w, int h, int bands, int colour_bands, const double sigma[3], int grid_x, int grid_y, const denoise_params *p);

#endif
