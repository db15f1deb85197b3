package dashboard

import (
	"cmp"
	"encoding/json"
	"fmt"
	"html/template"
	"maps"
	"net/http"
	"regexp"
	"slices"
	"strings"

	"github.com/getkin/kin-openapi/openapi3"

	"github.com/upscalekit/upscale"
	"github.com/upscalekit/upscale/api"
)

// The API reference page is the API's OpenAPI document (api.OpenAPI),
// rendered on the server when the Dashboard is made: no script, nothing
// loaded from elsewhere. Its prose is plain text with `code` spans.

// reference is the rendered document.
type reference struct {
	Title, Summary string
	Intro          []template.HTML
	// Auth says how a request authenticates: the security schemes'
	// descriptions.
	Auth []template.HTML
	// Example is the first request body example, which the quickstart
	// sends, and Answer the 200 answer's example.
	Example map[string]any
	Answer  string
	// Operations are the paths' operations, but those that only refuse
	// a method (405), which Refused names instead.
	Operations []operation
	Refused    []string
	// Callbacks are the webhooks the API sends.
	Callbacks []operation
	// Errors are the problem codes by the status they are answered with.
	Errors []errorRow
}

// operation is one operation of a path or a webhook.
type operation struct {
	Anchor, Method, Path, Summary string
	Description                   []template.HTML
	Parameters                    []field
	// Bodies are the request's bodies, one per media type: JSON first,
	// then a form's.
	Bodies    []body
	Responses []response
}

// body is a request body of one media type.
type body struct {
	// Label names the media type as a heading does: "JSON", or the
	// media type itself.
	Label       string
	Description []template.HTML
	Fields      []field
	// Examples are the body's examples: a JSON body's as JSON, a form's
	// one part a line.
	Examples []example
}

// field is a parameter, a header, or a property of a body.
type field struct {
	Name, In, Type, Values, Default string
	Required                        bool
	// Or names the properties that may stand in for a required one,
	// when the schema requires one of several (oneOf).
	Or          string
	Description []template.HTML
}

type example struct {
	Name    string
	Summary []template.HTML
	Text    string
}

type response struct {
	Status      string
	Description []template.HTML
	// Headers are the answer's headers; Fields its JSON body's
	// properties, and Example the body's example as JSON.
	Headers, Fields []field
	Example         string
}

// errorRow is the problem codes answered with one status, and what that
// answer means.
type errorRow struct {
	Status      string
	Codes       []string
	Description []template.HTML
}

type referencePage struct {
	frame
	reference
	// Curl is the quickstart's request; KeyHint what the account's keys
	// look like, for the line that sets API_KEY.
	Curl, KeyHint string
}

// loadReference renders the API's OpenAPI document.
func loadReference() (reference, error) {
	doc, err := openapi3.NewLoader().LoadFromData(api.OpenAPI)
	if err != nil {
		return reference{}, fmt.Errorf("dashboard: the API's OpenAPI document: %w", err)
	}
	ref := reference{Title: doc.Info.Title, Summary: doc.Info.Summary, Intro: prose(doc.Info.Description)}
	for _, name := range slices.Sorted(maps.Keys(doc.Components.SecuritySchemes)) {
		if scheme := doc.Components.SecuritySchemes[name].Value; scheme != nil && scheme.Scheme == "bearer" {
			ref.Auth = append(ref.Auth, template.HTML("Send your API key in every request's <code>Authorization</code> header: <code>Authorization: Bearer &lt;key&gt;</code>. A missing, unknown or revoked key is answered 401 <code>unauthorized</code>."))
			ref.Auth = append(ref.Auth, prose(scheme.Description)...)
		}
	}
	paths := doc.Paths.Map()
	for _, path := range slices.Sorted(maps.Keys(paths)) {
		for _, o := range operations(path, paths[path]) {
			if len(o.Responses) == 1 && o.Responses[0].Status == "405" {
				ref.Refused = append(ref.Refused, path)
				continue
			}
			ref.Operations = append(ref.Operations, o)
		}
	}
	for _, name := range slices.Sorted(maps.Keys(doc.Webhooks)) {
		ref.Callbacks = append(ref.Callbacks, operations(name, doc.Webhooks[name])...)
	}
	if first := doc.Paths.Value("/api/v1/upscale"); first != nil && first.Post != nil {
		ref.Example, ref.Answer = quickstart(first.Post)
	}
	ref.Errors = errorRows(doc, paths)
	return ref, nil
}

// quickstart returns op's first request example and its 200 answer's.
func quickstart(op *openapi3.Operation) (map[string]any, string) {
	var body map[string]any
	if op.RequestBody != nil && op.RequestBody.Value != nil {
		if media := op.RequestBody.Value.Content.Get("application/json"); media != nil && len(media.Examples) > 0 {
			first := media.Examples[slices.Sorted(maps.Keys(media.Examples))[0]]
			if first.Value != nil {
				body, _ = first.Value.Value.(map[string]any)
			}
		}
	}
	answer := ""
	if ok := op.Responses.Value("200"); ok != nil && ok.Value != nil {
		if media := ok.Value.Content.Get("application/json"); media != nil {
			answer = indentedJSON(media.Example)
		}
	}
	return body, answer
}

// errorRows lists the problem codes (the Problem schema's code enum) by
// the statuses whose descriptions name them, in the order of the
// statuses, each with the first such description.
func errorRows(doc *openapi3.T, paths map[string]*openapi3.PathItem) []errorRow {
	var codes []string
	if problem := doc.Components.Schemas["Problem"]; problem != nil && problem.Value != nil {
		if code := problem.Value.Properties["code"]; code != nil && code.Value != nil {
			for _, c := range code.Value.Enum {
				codes = append(codes, fmt.Sprint(c))
			}
		}
	}
	byStatus := map[string]*errorRow{}
	for _, path := range slices.Sorted(maps.Keys(paths)) {
		for _, method := range methodOrder {
			op := paths[path].GetOperation(method)
			if op == nil || op.Responses == nil {
				continue
			}
			for status, r := range op.Responses.Map() {
				if r.Value == nil || r.Value.Description == nil {
					continue
				}
				row := byStatus[status]
				for _, c := range codes {
					if !regexp.MustCompile(`\b` + c + `\b`).MatchString(*r.Value.Description) {
						continue
					}
					if row == nil {
						row = &errorRow{Status: status, Description: prose(*r.Value.Description)}
						byStatus[status] = row
					}
					if !slices.Contains(row.Codes, c) {
						row.Codes = append(row.Codes, c)
					}
				}
			}
		}
	}
	var rows []errorRow
	for _, status := range slices.Sorted(maps.Keys(byStatus)) {
		rows = append(rows, *byStatus[status])
	}
	return rows
}

// methodOrder lists the methods in the order a reader meets them.
var methodOrder = []string{"POST", "GET", "DELETE", "PUT", "PATCH"}

func operations(path string, item *openapi3.PathItem) []operation {
	var ops []operation
	byMethod := item.Operations()
	for _, method := range methodOrder {
		op, ok := byMethod[method]
		if !ok {
			continue
		}
		o := operation{
			Anchor: strings.ToLower(method) + "-" + strings.Trim(regexp.MustCompile(`[^a-z0-9]+`).ReplaceAllString(strings.ToLower(path), "-"), "-"),
			Method: method, Path: path, Summary: op.Summary, Description: prose(op.Description),
		}
		for _, p := range append(item.Parameters, op.Parameters...) {
			if p.Value == nil {
				continue
			}
			f := schemaField(p.Value.Name, p.Value.Schema, p.Value.Required, p.Value.Description)
			f.In = p.Value.In
			o.Parameters = append(o.Parameters, f)
		}
		if op.RequestBody != nil && op.RequestBody.Value != nil {
			o.Bodies = bodies(op.RequestBody.Value.Content)
		}
		if op.Responses != nil {
			responses := op.Responses.Map()
			for _, status := range slices.Sorted(maps.Keys(responses)) {
				if r := responses[status].Value; r != nil && r.Description != nil {
					o.Responses = append(o.Responses, responseOf(status, r))
				}
			}
		}
		ops = append(ops, o)
	}
	return ops
}

// bodyTypes are the request bodies the page renders, in its order, with
// their labels and how each renders an example.
var bodyTypes = []struct {
	mediaType, label string
	render           func(*openapi3.SchemaRef, any) string
}{
	{"application/json", "JSON", func(_ *openapi3.SchemaRef, v any) string { return indentedJSON(v) }},
	{"multipart/form-data", "multipart/form-data", formParts},
}

// bodies renders a request's bodies of the media types in bodyTypes.
func bodies(content openapi3.Content) []body {
	var out []body
	for _, t := range bodyTypes {
		media := content.Get(t.mediaType)
		if media == nil {
			continue
		}
		b := body{Label: t.label, Fields: properties(media.Schema)}
		if media.Schema != nil && media.Schema.Value != nil {
			b.Description = prose(media.Schema.Value.Description)
		}
		for _, name := range slices.Sorted(maps.Keys(media.Examples)) {
			if e := media.Examples[name].Value; e != nil {
				b.Examples = append(b.Examples, example{Name: name, Summary: prose(e.Summary), Text: t.render(media.Schema, e.Value)})
			}
		}
		out = append(out, b)
	}
	return out
}

// formParts renders an example of a form as its parts, one a line: a
// file's first, then the others by name.
func formParts(s *openapi3.SchemaRef, v any) string {
	fields, _ := v.(map[string]any)
	names := slices.SortedFunc(maps.Keys(fields), func(a, b string) int {
		if fa, fb := isFile(propertyOf(s, a)), isFile(propertyOf(s, b)); fa != fb {
			if fa {
				return -1
			}
			return 1
		}
		return cmp.Compare(a, b)
	})
	var lines []string
	for _, name := range names {
		lines = append(lines, name+": "+fmt.Sprint(fields[name]))
	}
	return strings.Join(lines, "\n")
}

// propertyOf is the schema of s's property name, nil for none.
func propertyOf(s *openapi3.SchemaRef, name string) *openapi3.SchemaRef {
	if s == nil || s.Value == nil {
		return nil
	}
	return s.Value.Properties[name]
}

// isFile reports whether s is a file's bytes: a string of a media type
// (OpenAPI 3.1's contentMediaType) or of format binary (3.0's).
func isFile(s *openapi3.SchemaRef) bool {
	return s != nil && s.Value != nil && s.Value.Type.Is("string") && (s.Value.ContentMediaType != "" || s.Value.Format == "binary")
}

// responseOf renders the answer r with status: its headers, and its JSON
// body's fields and example (a problem's fields are the error table's).
func responseOf(status string, r *openapi3.Response) response {
	out := response{Status: status, Description: prose(*r.Description)}
	for _, name := range slices.Sorted(maps.Keys(r.Headers)) {
		if h := r.Headers[name].Value; h != nil {
			out.Headers = append(out.Headers, schemaField(name, h.Schema, false, h.Description))
		}
	}
	if media := r.Content.Get("application/json"); media != nil {
		out.Fields = properties(media.Schema)
		out.Example = indentedJSON(media.Example)
	} else if media := r.Content.Get("application/problem+json"); media != nil {
		out.Example = indentedJSON(media.Example)
	}
	return out
}

// indentedJSON is v as indented JSON, "" for none.
func indentedJSON(v any) string {
	if v == nil {
		return ""
	}
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return ""
	}
	return string(b)
}

// properties lists the properties of an object schema, the required ones
// first; a property that one of the schema's oneOf alternatives requires
// is required, or the ones the others require.
func properties(s *openapi3.SchemaRef) []field {
	if s == nil || s.Value == nil {
		return nil
	}
	var fields []field
	for name, p := range s.Value.Properties {
		description := ""
		if p.Value != nil {
			description = p.Value.Description
		}
		f := schemaField(name, p, slices.Contains(s.Value.Required, name), description)
		if others, ok := alternatives(s.Value.OneOf, name); ok && !f.Required {
			f.Required, f.Or = true, strings.Join(others, ", ")
		}
		fields = append(fields, f)
	}
	slices.SortFunc(fields, func(a, b field) int {
		if a.Required != b.Required {
			if a.Required {
				return -1
			}
			return 1
		}
		return cmp.Compare(a.Name, b.Name)
	})
	return fields
}

// alternatives reports whether one of the schemas in oneOf requires
// name, and what the others require instead.
func alternatives(oneOf openapi3.SchemaRefs, name string) (others []string, ok bool) {
	for _, alt := range oneOf {
		if alt == nil || alt.Value == nil {
			continue
		}
		if slices.Contains(alt.Value.Required, name) {
			ok = true
			continue
		}
		others = append(others, alt.Value.Required...)
	}
	return others, ok
}

func schemaField(name string, s *openapi3.SchemaRef, required bool, description string) field {
	f := field{Name: name, Required: required, Description: prose(description), Type: typeName(s)}
	if s != nil && s.Value != nil {
		var values []string
		for _, v := range s.Value.Enum {
			if v == nil {
				v = "null"
			}
			values = append(values, fmt.Sprint(v))
		}
		f.Values = strings.Join(values, ", ")
		if s.Value.Default != nil {
			f.Default = fmt.Sprint(s.Value.Default)
		}
	}
	return f
}

// typeName says what a schema is: the name of the component it refers
// to, or its types.
func typeName(s *openapi3.SchemaRef) string {
	if s == nil {
		return ""
	}
	if name, ok := strings.CutPrefix(s.Ref, "#/components/schemas/"); ok {
		return name
	}
	if s.Value == nil || s.Value.Type == nil {
		return ""
	}
	if isFile(s) {
		return "file"
	}
	types := strings.Join(s.Value.Type.Slice(), " or ")
	if s.Value.Items != nil {
		types += " of " + typeName(s.Value.Items)
	}
	return types
}

var codeSpan = regexp.MustCompile("`([^`]+)`")

// prose renders text as paragraphs (split at blank lines), escaped, with
// its `code` spans as code.
func prose(text string) []template.HTML {
	var paragraphs []template.HTML
	for _, p := range regexp.MustCompile(`\n\s*\n`).Split(strings.TrimSpace(text), -1) {
		if p = strings.Join(strings.Fields(p), " "); p == "" {
			continue
		}
		var b strings.Builder
		last := 0
		for _, m := range codeSpan.FindAllStringSubmatchIndex(p, -1) {
			b.WriteString(template.HTMLEscapeString(p[last:m[0]]))
			b.WriteString("<code>" + template.HTMLEscapeString(p[m[2]:m[3]]) + "</code>")
			last = m[1]
		}
		b.WriteString(template.HTMLEscapeString(p[last:]))
		paragraphs = append(paragraphs, template.HTML(b.String()))
	}
	return paragraphs
}

func (d *Dashboard) referencePage(w http.ResponseWriter, r *http.Request) {
	// The page needs no sign-in: an account that cannot be told shows as
	// none.
	account, holder, _ := d.account(w, r)
	r = withSignedIn(r, holder)
	page := referencePage{frame: d.frame(r, account, "reference"), reference: d.reference, KeyHint: d.cfg.KeyPrefix + "…"}
	if account != "" {
		if keys, err := d.cfg.Keys.ListKeys(r.Context(), account); err == nil {
			if i := slices.IndexFunc(keys, func(k upscale.KeyInfo) bool { return k.Revoked.IsZero() && k.Hint != "" }); i >= 0 {
				page.KeyHint = keys[i].Hint
			}
		}
	}
	body := maps.Clone(d.reference.Example)
	if len(d.cfg.Samples) > 0 && body != nil {
		body["imageUrl"] = d.cfg.Samples[0].URL // one this server serves: the command works as it is
	}
	raw, _ := json.Marshal(body)
	page.Curl = curlCommand(d.cfg.APIURL, raw)
	d.render(w, r, http.StatusOK, "reference", page)
}
