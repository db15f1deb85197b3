package client

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"mime/multipart"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
)

// maxFilenameBytes bounds the upload's filename, as most file systems
// bound a name: the API counts it against the 16 KiB a form may spend
// beside the file's bytes.
const maxFilenameBytes = 255

// WriteForm writes req and image to w as the parts of the
// multipart/form-data request the API takes for an upload: req's
// non-empty fields as text parts (the names of their JSON form, numbers
// in decimal), then image's bytes in the file part "image". The part is
// named after filename's last element, without control characters, at
// most 255 bytes; "image" when that leaves nothing: the API goes by the
// bytes, never the name. A nil image writes no file part, for a form
// whose source is req.ImageURL. WriteForm does not close w, whose Close
// writes the closing boundary.
//
// It is what UpscaleFile and SubmitFile send, for a caller that makes
// the request itself, such as one that streams a large file instead of
// holding it in memory.
func (req Request) WriteForm(w *multipart.Writer, filename string, image io.Reader) error {
	number := func(n int) string {
		if n == 0 {
			return ""
		}
		return strconv.Itoa(n)
	}
	// The fields go first, so that a server reading the parts in order
	// can judge them before the file's bytes.
	for _, f := range []struct{ name, value string }{
		{"imageUrl", req.ImageURL}, {"scale", number(req.Scale)}, {"imageType", req.ImageType}, {"denoise", req.Denoise},
		{"format", req.Format}, {"quality", number(req.Quality)}, {"model", req.Model}, {"webhookUrl", req.WebhookURL},
	} {
		if f.value == "" {
			continue
		}
		if err := w.WriteField(f.name, f.value); err != nil {
			return err
		}
	}
	if image == nil {
		return nil
	}
	part, err := w.CreateFormFile("image", partFilename(filename))
	if err != nil {
		return err
	}
	if _, err := io.Copy(part, image); err != nil {
		return fmt.Errorf("client: read the image: %w", err)
	}
	return nil
}

// partFilename is name as an upload's filename: its last element (a
// browser or a Windows path may give a whole path), valid UTF-8 without
// control characters, which could end the part's header line, and at
// most maxFilenameBytes long.
func partFilename(name string) string {
	name = name[strings.LastIndexAny(name, `/\`)+1:]
	name = strings.Map(func(r rune) rune {
		if unicode.IsControl(r) {
			return -1
		}
		return r
	}, strings.ToValidUTF8(name, ""))
	for len(name) > maxFilenameBytes {
		_, size := utf8.DecodeLastRuneInString(name)
		name = name[:len(name)-size]
	}
	if name == "" {
		return "image"
	}
	return name
}

// fileForm is the upload of image with req, built whole in memory so that
// every attempt of a call sends the same bytes: its Content-Type and its
// body.
func fileForm(image io.Reader, req Request) (contentType string, body []byte, err error) {
	switch {
	case req.ImageURL != "":
		return "", nil, errors.New("client: an upload takes no ImageURL: the API takes the image or its address, not both")
	case image == nil:
		return "", nil, errors.New("client: an upload needs an image")
	}
	var name string
	if named, ok := image.(interface{ Name() string }); ok {
		name = named.Name()
	}
	var b bytes.Buffer
	w := multipart.NewWriter(&b)
	if err := req.WriteForm(w, name, image); err != nil {
		return "", nil, err
	}
	if err := w.Close(); err != nil {
		return "", nil, err
	}
	return w.FormDataContentType(), b.Bytes(), nil
}
