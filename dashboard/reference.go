package dashboard

import (
	"cmp"
	"context"
	"fmt"
	"html/template"
	"maps"
	"net/http"
	"regexp"
	"slices"
	"strings"

	"github.com/getkin/kin-openapi/openapi3"

	"github.com/upscalekit/upscale/api"
)

// The API reference page is the API's OpenAPI document (api.OpenAPI),
// rendered on the server when the Dashboard is made: no script, nothing
// loaded from elsewhere. Its prose is plain text with `code` spans.

// reference is the rendered document.
type reference struct {
	Title, Summary string
	Intro          []template.HTML
	Operations     []operation
	// Callbacks are the webhooks the API sends.
	Callbacks []operation
}

// operation is one operation of a path or a webhook.
type operation struct {
	Anchor, Method, Path, Summary string
	Description                   []template.HTML
	Parameters, Body              []field
	Responses                     []response
}

// field is a parameter, or a property of a request or webhook body.
type field struct {
	Name, In, Type, Values, Default string
	Required                        bool
	Description                     []template.HTML
}

type response struct {
	Status      string
	Description []template.HTML
}

type referencePage struct {
	frame
	reference
}

// loadReference renders the API's OpenAPI document.
func loadReference() (reference, error) {
	doc, err := openapi3.NewLoader().LoadFromData(api.OpenAPI)
	if err != nil {
		return reference{}, fmt.Errorf("dashboard: the API's OpenAPI document: %w", err)
	}
	ref := reference{Title: doc.Info.Title, Summary: doc.Info.Summary, Intro: prose(doc.Info.Description)}
	paths := doc.Paths.Map()
	for _, path := range slices.Sorted(maps.Keys(paths)) {
		ref.Operations = append(ref.Operations, operations(path, paths[path])...)
	}
	for _, name := range slices.Sorted(maps.Keys(doc.Webhooks)) {
		ref.Callbacks = append(ref.Callbacks, operations(name, doc.Webhooks[name])...)
	}
	return ref, nil
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
			if media := op.RequestBody.Value.Content.Get("application/json"); media != nil {
				o.Body = properties(media.Schema)
			}
		}
		if op.Responses != nil {
			responses := op.Responses.Map()
			for _, status := range slices.Sorted(maps.Keys(responses)) {
				if r := responses[status].Value; r != nil && r.Description != nil {
					o.Responses = append(o.Responses, response{Status: status, Description: prose(*r.Description)})
				}
			}
		}
		ops = append(ops, o)
	}
	return ops
}

// properties lists the properties of an object schema, the required ones
// first.
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
		fields = append(fields, schemaField(name, p, slices.Contains(s.Value.Required, name), description))
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

func schemaField(name string, s *openapi3.SchemaRef, required bool, description string) field {
	f := field{Name: name, Required: required, Description: prose(description), Type: typeName(s)}
	if s != nil && s.Value != nil {
		var values []string
		for _, v := range s.Value.Enum {
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
	r = r.WithContext(context.WithValue(r.Context(), holderKey{}, holder))
	d.render(w, r, http.StatusOK, "reference", referencePage{frame: d.frame(r, account, "reference"), reference: d.reference})
}
