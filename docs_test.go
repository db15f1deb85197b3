package upscale_test

import (
	"bufio"
	"bytes"
	"cmp"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"unicode"
)

// TestDocsLinksResolve checks every relative link of README.md,
// CHANGELOG.md and docs/*.md: the file it names exists, relative to the
// directory of the page that links to it, and its #fragment, if any, is
// the slug of a heading in that file (or in the page itself for a bare
// #fragment), as GitHub makes slugs. Links to http:, https: and mailto: addresses, and
// anything inside fenced code blocks or code spans, are not checked.
func TestDocsLinksResolve(t *testing.T) {
	pages, err := filepath.Glob(filepath.Join("docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	pages = append([]string{"README.md", "CHANGELOG.md"}, pages...)
	slugs := map[string]map[string]bool{} // by cleaned path
	anchors := func(t *testing.T, path string) map[string]bool {
		t.Helper()
		path = filepath.Clean(path)
		if s, ok := slugs[path]; ok {
			return s
		}
		src, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		s := docHeadingSlugs(src)
		slugs[path] = s
		return s
	}
	for _, page := range pages {
		src, err := os.ReadFile(page)
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range docLinks(src) {
			target := l.target
			switch {
			case strings.HasPrefix(target, "http:"), strings.HasPrefix(target, "https:"),
				strings.HasPrefix(target, "mailto:"):
				continue
			}
			file, fragment, _ := strings.Cut(target, "#")
			file, err := url.PathUnescape(file)
			if err != nil {
				t.Errorf("%s:%d: %s: %v", page, l.line, target, err)
				continue
			}
			dest := page
			if file != "" {
				dest = filepath.Join(filepath.Dir(page), filepath.FromSlash(file))
				info, err := os.Stat(dest)
				if err != nil {
					t.Errorf("%s:%d: %s: no such file %s", page, l.line, target, dest)
					continue
				}
				if info.IsDir() {
					if fragment != "" {
						t.Errorf("%s:%d: %s: a fragment on a directory", page, l.line, target)
					}
					continue
				}
			}
			if fragment == "" {
				continue
			}
			if !strings.HasSuffix(dest, ".md") {
				t.Errorf("%s:%d: %s: a fragment on a file that is not markdown", page, l.line, target)
				continue
			}
			if !anchors(t, dest)[fragment] {
				t.Errorf("%s:%d: %s: no heading in %s has the slug %q", page, l.line, target, dest, fragment)
			}
		}
	}
}

// docLink is one markdown link: its target and the line it is on.
type docLink struct {
	target string
	line   int
}

var (
	// docLinkPattern matches [text](target) and [text](target "title"), and
	// so the link inside an image's ![alt](target).
	docLinkPattern = regexp.MustCompile(`\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+"[^"]*")?\s*\)`)
	// docCodeSpan matches an inline code span, whose text is not markdown.
	docCodeSpan = regexp.MustCompile("`+[^`]*`+")
)

// docLinks returns the links of src outside fenced code blocks and
// code spans.
func docLinks(src []byte) []docLink {
	var links []docLink
	docProseLines(src, func(n int, line string) {
		line = docCodeSpan.ReplaceAllString(line, "")
		for _, m := range docLinkPattern.FindAllStringSubmatch(line, -1) {
			links = append(links, docLink{target: m[1], line: n})
		}
	})
	return links
}

// docHeadingSlugs returns the anchors GitHub gives the ATX headings of src
// that are outside fenced code blocks: a heading's text lowercased, its
// spaces turned into hyphens and every other character but letters,
// digits, hyphens and underscores dropped; a slug met before gets -1,
// -2, ... added.
func docHeadingSlugs(src []byte) map[string]bool {
	slugs := map[string]bool{}
	seen := map[string]int{}
	docProseLines(src, func(_ int, line string) {
		text, ok := docHeadingText(line)
		if !ok {
			return
		}
		slug := docSlug(text)
		if n, dup := seen[slug]; dup {
			seen[slug] = n + 1
			slug += "-" + strconv.Itoa(n+1)
		} else {
			seen[slug] = 0
		}
		slugs[slug] = true
	})
	return slugs
}

// docHeadingText returns the text of an ATX heading line (# to ######,
// up to three spaces of indent), without its closing #s.
func docHeadingText(line string) (string, bool) {
	trimmed := strings.TrimLeft(line, " ")
	if len(line)-len(trimmed) > 3 {
		return "", false
	}
	level := len(trimmed) - len(strings.TrimLeft(trimmed, "#"))
	if level < 1 || level > 6 {
		return "", false
	}
	rest := trimmed[level:]
	if rest != "" && rest[0] != ' ' && rest[0] != '\t' {
		return "", false
	}
	rest = strings.TrimSpace(rest)
	if closing := strings.TrimRight(rest, "#"); closing == "" || strings.HasSuffix(closing, " ") {
		rest = strings.TrimSpace(closing)
	}
	return rest, true
}

// docInlineLink matches a link or image in a heading, whose text alone
// makes the slug.
var docInlineLink = regexp.MustCompile(`!?\[([^\]]*)\]\([^)]*\)`)

// docSlug makes a heading's text into its anchor as GitHub does.
func docSlug(text string) string {
	text = docInlineLink.ReplaceAllString(text, "$1")
	var b strings.Builder
	for _, r := range strings.ToLower(text) {
		switch {
		case r == ' ':
			b.WriteRune('-')
		case r == '-', r == '_', unicode.IsLetter(r), unicode.IsDigit(r):
			b.WriteRune(r)
		}
	}
	return b.String()
}

// docProseLines calls f with each line of src (numbered from 1) that is
// not inside a fenced code block, nor a fence itself.
func docProseLines(src []byte, f func(n int, line string)) {
	var fence string // the open fence's marker, "" outside a block
	s := bufio.NewScanner(bytes.NewReader(src))
	s.Buffer(nil, 1<<20)
	for n := 1; s.Scan(); n++ {
		line := s.Text()
		trimmed := strings.TrimLeft(line, " ")
		if len(line)-len(trimmed) <= 3 {
			if marker := docFenceMarker(trimmed); marker != "" {
				switch {
				case fence == "":
					fence = marker
					continue
				case strings.HasPrefix(marker, fence) && strings.TrimSpace(strings.TrimLeft(trimmed, marker[:1])) == "":
					fence = ""
					continue
				}
			}
		}
		if fence == "" {
			f(n, line)
		}
	}
}

// docFenceMarker returns the run of three or more backticks or tildes that
// line begins with, or "".
func docFenceMarker(line string) string {
	for _, c := range []string{"`", "~"} {
		run := len(line) - len(strings.TrimLeft(line, c))
		if run >= 3 {
			return line[:run]
		}
	}
	return ""
}

// TestArchitectureHasEveryPackage: docs/architecture.md's table has a
// row for every package outside internal/, so that a package added is
// placed on the map.
func TestArchitectureHasEveryPackage(t *testing.T) {
	doc, err := os.ReadFile("docs/architecture.md")
	if err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command("go", "list", "./...").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	for path := range strings.Lines(strings.TrimSpace(string(out))) {
		path = strings.TrimPrefix(strings.TrimSpace(path), "github.com/upscalekit/upscale")
		path = cmp.Or(strings.TrimPrefix(path, "/"), "upscale")
		if strings.HasPrefix(path, "internal/") || strings.Contains(path, "/internal/") {
			continue
		}
		if !strings.Contains(string(doc), "\n| `"+path+"`") {
			t.Errorf("docs/architecture.md's table has no row for %s", path)
		}
	}
}

// TestArchitectureMapsEveryFile: docs/architecture.md's "Where the code
// is" names every file of the root package, by name or by its family
// (auth*.go), so that the map a newcomer reads stays whole.
func TestArchitectureMapsEveryFile(t *testing.T) {
	doc, err := os.ReadFile("docs/architecture.md")
	if err != nil {
		t.Fatal(err)
	}
	_, where, ok := strings.Cut(string(doc), "## Where the code is")
	if !ok {
		t.Fatal(`docs/architecture.md has no "Where the code is"`)
	}
	named := regexp.MustCompile(`[a-z]+\*?\.go`).FindAllString(where, -1)
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	for _, file := range files {
		if strings.HasSuffix(file, "_test.go") {
			continue
		}
		mapped := false
		for _, name := range named {
			if match, _ := filepath.Match(name, file); match {
				mapped = true
			}
		}
		if !mapped {
			t.Errorf("docs/architecture.md's map does not name %s", file)
		}
	}
}
