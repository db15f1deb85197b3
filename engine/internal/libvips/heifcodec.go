package libvips

import (
	"encoding/binary"
	"image"
)

// The sizes a HEIC's or AVIF's coded streams say they decode to, read as
// their decoders read them (libde265 for HEVC; dav1d or libaom for AV1),
// so that what an image declares (ispe) can be held against what decoding
// it makes. Each function returns every size the stream's sequence
// headers give, or a sentence saying why they cannot be read.

// bitReader reads an MSB-first bit string; past its end it reads zeros
// and reports short.
type bitReader struct {
	data  []byte
	at    int // in bits
	short bool
}

func (r *bitReader) bits(n int) uint64 {
	var v uint64
	for range n {
		bit := uint64(0)
		if r.at < 8*len(r.data) {
			bit = uint64(r.data[r.at/8]>>(7-r.at%8)) & 1
		} else {
			r.short = true
		}
		v = v<<1 | bit
		r.at++
	}
	return v
}

// leadingZeros counts zero bits before the next one, which it reads; at
// most 32.
func (r *bitReader) leadingZeros() int {
	n := 0
	for r.bits(1) == 0 && !r.short {
		if n++; n > 32 {
			r.short = true // no stream here codes a number this long
			break
		}
	}
	return n
}

// ue reads an unsigned Exp-Golomb number (HEVC's ue(v)).
func (r *bitReader) ue() uint64 {
	n := r.leadingZeros()
	return 1<<n - 1 + r.bits(n)
}

// hevcSizes reads the picture size of every sequence parameter set
// libde265 would be given for an image: those of its hvcC configuration
// (its NAL unit arrays) and those in its data (NAL units after 4-byte
// lengths, as libheif passes them on).
func hevcSizes(config []byte, data [][]byte) ([]image.Point, string) {
	var sizes []image.Point
	add := func(nal []byte) string {
		if len(nal) < 2 || nal[0]>>1&63 != hevcSPS {
			return ""
		}
		size, ok := hevcSPSSize(unescapeRBSP(nal[2:]))
		if !ok {
			return "its HEVC sequence parameter set cannot be read"
		}
		sizes = append(sizes, size)
		return ""
	}
	const arraysAt = 22 // after hvcC's fixed fields
	if len(config) < arraysAt+1 {
		return nil, "its HEVC configuration (hvcC) is cut short"
	}
	r := &bigEndianReader{data: config[arraysAt+1:]}
	for range config[arraysAt] {
		r.read(8) // completeness and NAL unit type
		for range r.read(16) {
			nal := r.bytes(int(r.read(16)))
			if r.short {
				return nil, "its HEVC configuration (hvcC) is cut short"
			}
			if why := add(nal); why != "" {
				return nil, why
			}
		}
	}
	for _, extent := range data {
		for len(extent) > 0 {
			if len(extent) < 4 || uint64(binary.BigEndian.Uint32(extent)) > uint64(len(extent)-4) {
				return nil, "its HEVC data is cut short"
			}
			n := binary.BigEndian.Uint32(extent)
			if why := add(extent[4 : 4+n]); why != "" {
				return nil, why
			}
			extent = extent[4+n:]
		}
	}
	return sizes, ""
}

// hevcSPS is the NAL unit type of a sequence parameter set.
const hevcSPS = 33

// unescapeRBSP removes the emulation prevention bytes from a NAL unit's
// payload: the 3 of every 0, 0, 3.
func unescapeRBSP(b []byte) []byte {
	out := make([]byte, 0, len(b))
	zeros := 0
	for _, c := range b {
		if zeros >= 2 && c == 3 {
			zeros = 0
			continue
		}
		if c == 0 {
			zeros++
		} else {
			zeros = 0
		}
		out = append(out, c)
	}
	return out
}

// hevcSPSSize reads pic_width_in_luma_samples and
// pic_height_in_luma_samples, the size libde265 decodes, from a sequence
// parameter set's RBSP (H.265 7.3.2.2).
func hevcSPSSize(rbsp []byte) (image.Point, bool) {
	r := &bitReader{data: rbsp}
	r.bits(4) // sps_video_parameter_set_id
	subLayers := int(r.bits(3))
	r.bits(1)  // sps_temporal_id_nesting_flag
	r.bits(96) // general profile, tier and level
	profilePresent, levelPresent := make([]bool, subLayers), make([]bool, subLayers)
	for i := range subLayers {
		profilePresent[i], levelPresent[i] = r.bits(1) == 1, r.bits(1) == 1
	}
	if subLayers > 0 {
		r.bits(2 * (8 - subLayers)) // reserved
	}
	for i := range subLayers {
		if profilePresent[i] {
			r.bits(88)
		}
		if levelPresent[i] {
			r.bits(8)
		}
	}
	r.ue() // sps_seq_parameter_set_id
	if r.ue() == 3 {
		r.bits(1) // separate_colour_plane_flag
	}
	w, h := r.ue(), r.ue()
	if r.short || w == 0 || h == 0 || w > 1<<20 || h > 1<<20 {
		return image.Point{}, false
	}
	return image.Pt(int(w), int(h)), true
}

// av1Sizes reads max_frame_width and max_frame_height, the largest frame
// an AV1 decoder makes, from every sequence header OBU it would be given
// for an image: those of its av1C configuration, after its four fixed
// bytes, and those in its data.
func av1Sizes(config []byte, data [][]byte) ([]image.Point, string) {
	if len(config) < 4 {
		return nil, "its AV1 configuration (av1C) is cut short"
	}
	var sizes []image.Point
	for _, obus := range append([][]byte{config[4:]}, data...) {
		for len(obus) > 0 {
			typ, payload, rest, ok := nextOBU(obus)
			if !ok {
				return nil, "its AV1 data is cut short"
			}
			if typ == av1SequenceHeader {
				size, ok := av1SequenceSize(payload)
				if !ok {
					return nil, "its AV1 sequence header cannot be read"
				}
				sizes = append(sizes, size)
			}
			obus = rest
		}
	}
	return sizes, ""
}

// av1SequenceHeader is the OBU type of a sequence header.
const av1SequenceHeader = 1

// nextOBU splits the first OBU off b (AV1 5.3): its type and payload, and
// what follows it.
func nextOBU(b []byte) (typ int, payload, rest []byte, ok bool) {
	header := b[0]
	typ, at := int(header>>3&15), 1
	if header&4 != 0 { // an extension byte
		at++
	}
	if at > len(b) {
		return 0, nil, nil, false
	}
	if header&2 == 0 { // no size field: to the end
		return typ, b[at:], nil, true
	}
	size, n := uint64(0), 0
	for ; n < 8; n++ { // leb128
		if at+n >= len(b) {
			return 0, nil, nil, false
		}
		size |= uint64(b[at+n]&127) << (7 * n)
		if b[at+n]&128 == 0 {
			break
		}
	}
	at += n + 1
	if n == 8 || size > uint64(len(b)-at) {
		return 0, nil, nil, false
	}
	return typ, b[at : at+int(size)], b[at+int(size):], true
}

// av1SequenceSize reads max_frame_width_minus_1 and
// max_frame_height_minus_1 from a sequence header OBU's payload (AV1
// 5.5.1).
func av1SequenceSize(payload []byte) (image.Point, bool) {
	r := &bitReader{data: payload}
	r.bits(3)           // seq_profile
	r.bits(1)           // still_picture
	if r.bits(1) == 1 { // reduced_still_picture_header
		r.bits(5) // seq_level_idx
	} else {
		decoderModel := false
		var delayBits int
		if r.bits(1) == 1 { // timing_info_present_flag
			r.bits(64)          // num_units_in_display_tick, time_scale
			if r.bits(1) == 1 { // equal_picture_interval
				r.bits(r.leadingZeros()) // num_ticks_per_picture_minus_1, uvlc
			}
			if r.bits(1) == 1 { // decoder_model_info_present_flag
				decoderModel = true
				delayBits = int(r.bits(5)) + 1 // buffer_delay_length_minus_1
				r.bits(32 + 5 + 5)             // num_units_in_decoding_tick, two lengths
			}
		}
		displayDelay := r.bits(1) == 1
		for range r.bits(5) + 1 { // operating points
			r.bits(12) // operating_point_idc
			if r.bits(5) > 7 {
				r.bits(1) // seq_tier
			}
			if decoderModel && r.bits(1) == 1 {
				r.bits(2*delayBits + 1)
			}
			if displayDelay && r.bits(1) == 1 {
				r.bits(4)
			}
		}
	}
	widthBits, heightBits := int(r.bits(4))+1, int(r.bits(4))+1
	w, h := r.bits(widthBits)+1, r.bits(heightBits)+1
	return image.Pt(int(w), int(h)), !r.short
}
