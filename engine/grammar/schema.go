package grammar

import (
	"bytes"
	"encoding/json"
	"fmt"
	"sort"
	"strconv"
	"strings"
)

// JSON schema to GBNF, after llama.cpp's json_schema_to_grammar: each
// (sub)schema becomes a rule, properties in the schema's order. What the
// grammar cannot enforce is refused, naming the keyword and where it is
// (a JSON pointer), never dropped: a grammar that allowed more than the
// schema would let a model write JSON the schema rejects.

// jsonPrimitives are the shared rules every schema grammar may use.
const jsonPrimitives = `ws ::= | " " | "\n" [ \t]{0,20}
char ::= [^"\\\x7F\x00-\x1F] | "\\" (["\\/bfnrt] | "u" ([0-9a-cA-CeEfF] [0-9a-fA-F]{3} | [dD] [0-7] [0-9a-fA-F]{2}))
string ::= "\"" char* "\"" ws
integer ::= "-"? ("0" | [1-9] [0-9]{0,15}) ws
number ::= "-"? ("0" | [1-9] [0-9]{0,15}) ("." [0-9]{1,16})? ([eE] [-+]? [0-9]{1,2})? ws
boolean ::= ("true" | "false") ws
null ::= "null" ws
value ::= object | array | string | number | boolean | null
object ::= "{" ws ( string ":" ws value ("," ws string ":" ws value)* )? "}" ws
array ::= "[" ws ( value ("," ws value)* )? "]" ws
`

// annotations are keywords that describe and do not constrain.
var annotations = map[string]bool{"title": true, "description": true, "$schema": true, "$id": true, "default": true,
	"examples": true, "$comment": true, "deprecated": true, "readOnly": true, "writeOnly": true, "$defs": true, "definitions": true}

// SchemaGBNF compiles a JSON schema to GBNF text.
func SchemaGBNF(schema []byte) (string, error) {
	dec := json.NewDecoder(bytes.NewReader(schema))
	dec.UseNumber()
	root, err := decodeOrdered(dec)
	if err != nil {
		return "", fmt.Errorf("json schema: %w", err)
	}
	if dec.More() {
		return "", fmt.Errorf("json schema: text after the schema")
	}
	c := &schemaCompiler{root: root, rules: map[string]string{}, refs: map[string]string{}}
	body, err := c.visit(root, "#", "root")
	if err != nil {
		return "", err
	}
	var b strings.Builder
	fmt.Fprintf(&b, "root ::= %s\n", body)
	names := make([]string, 0, len(c.rules))
	for n := range c.rules {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		fmt.Fprintf(&b, "%s ::= %s\n", n, c.rules[n])
	}
	b.WriteString(jsonPrimitives)
	return b.String(), nil
}

// Schema compiles a JSON schema to a Grammar.
func Schema(schema []byte) (*Grammar, error) {
	src, err := SchemaGBNF(schema)
	if err != nil {
		return nil, err
	}
	return Parse(src)
}

// object is a JSON object with its keys in their order.
type object struct {
	keys []string
	vals map[string]any
}

func (o *object) get(k string) (any, bool) {
	v, ok := o.vals[k]
	return v, ok
}

func decodeOrdered(dec *json.Decoder) (any, error) {
	tok, err := dec.Token()
	if err != nil {
		return nil, err
	}
	switch t := tok.(type) {
	case json.Delim:
		switch t {
		case '{':
			o := &object{vals: map[string]any{}}
			for dec.More() {
				kt, err := dec.Token()
				if err != nil {
					return nil, err
				}
				k := kt.(string)
				v, err := decodeOrdered(dec)
				if err != nil {
					return nil, err
				}
				if _, dup := o.vals[k]; !dup {
					o.keys = append(o.keys, k)
				}
				o.vals[k] = v
			}
			_, err := dec.Token()
			return o, err
		case '[':
			var a []any
			for dec.More() {
				v, err := decodeOrdered(dec)
				if err != nil {
					return nil, err
				}
				a = append(a, v)
			}
			_, err := dec.Token()
			return a, err
		}
	}
	return tok, nil
}

type schemaCompiler struct {
	root  any
	rules map[string]string // name -> body
	refs  map[string]string // $ref -> rule name
	n     int
}

// unsupported is the error for a keyword the grammar cannot enforce.
func unsupported(at, keyword, why string) error {
	return fmt.Errorf("json schema: %s: %q is not supported (%s)", at, keyword, why)
}

// rule adds a rule with body and returns its name.
func (c *schemaCompiler) rule(hint, body string) string {
	c.n++
	name := fmt.Sprintf("%s-%d", sanitize(hint), c.n)
	c.rules[name] = body
	return name
}

func sanitize(s string) string {
	var b strings.Builder
	for _, r := range s {
		if r < 128 && isNameChar(byte(r)) {
			b.WriteRune(r)
		} else {
			b.WriteByte('-')
		}
	}
	if b.Len() == 0 || b.Len() > 40 {
		return "s"
	}
	return b.String()
}

// literal is the GBNF literal of a JSON value's text.
func literal(v any) (string, error) {
	text, err := json.Marshal(toPlain(v))
	if err != nil {
		return "", err
	}
	return gbnfQuote(string(text)) + " ws", nil
}

func gbnfQuote(s string) string {
	var b strings.Builder
	b.WriteByte('"')
	for _, r := range s {
		switch {
		case r == '"' || r == '\\':
			b.WriteByte('\\')
			b.WriteRune(r)
		case r < 0x20:
			fmt.Fprintf(&b, "\\x%02X", r)
		default:
			b.WriteRune(r)
		}
	}
	b.WriteByte('"')
	return b.String()
}

// toPlain turns decodeOrdered's objects back into maps (for Marshal).
func toPlain(v any) any {
	switch t := v.(type) {
	case *object:
		m := map[string]any{}
		for k, x := range t.vals {
			m[k] = toPlain(x)
		}
		return m
	case []any:
		out := make([]any, len(t))
		for i, x := range t {
			out[i] = toPlain(x)
		}
		return out
	}
	return v
}

// visit returns the GBNF body (an expression) for schema s at pointer at.
func (c *schemaCompiler) visit(s any, at, hint string) (string, error) {
	switch t := s.(type) {
	case bool:
		if t {
			return "value", nil
		}
		return "", unsupported(at, "false", "a schema that accepts nothing")
	case *object:
		return c.visitObject(t, at, hint)
	}
	return "", fmt.Errorf("json schema: %s: a schema must be an object or a boolean", at)
}

var handled = map[string]bool{"type": true, "enum": true, "const": true, "anyOf": true, "oneOf": true, "$ref": true,
	"properties": true, "required": true, "additionalProperties": true, "items": true, "minItems": true, "maxItems": true,
	"minLength": true, "maxLength": true, "pattern": true, "format": true, "minimum": true, "uniqueItems": true}

func (c *schemaCompiler) visitObject(s *object, at, hint string) (string, error) {
	for _, k := range s.keys {
		if !handled[k] && !annotations[k] {
			return "", unsupported(at, k, "the grammar cannot enforce it")
		}
	}
	if ref, ok := s.get("$ref"); ok {
		if len(s.keys) > 1 {
			for _, k := range s.keys {
				if k != "$ref" && !annotations[k] {
					return "", unsupported(at, k, "beside $ref")
				}
			}
		}
		return c.ref(ref, at)
	}
	if v, ok := s.get("const"); ok {
		return literal(v)
	}
	if v, ok := s.get("enum"); ok {
		vals, ok := v.([]any)
		if !ok || len(vals) == 0 {
			return "", fmt.Errorf("json schema: %s/enum: must be a non-empty array", at)
		}
		alts := make([]string, len(vals))
		for i, x := range vals {
			l, err := literal(x)
			if err != nil {
				return "", err
			}
			alts[i] = l
		}
		return "(" + strings.Join(alts, " | ") + ")", nil
	}
	for _, key := range []string{"anyOf", "oneOf"} {
		v, ok := s.get(key)
		if !ok {
			continue
		}
		subs, ok := v.([]any)
		if !ok || len(subs) == 0 {
			return "", fmt.Errorf("json schema: %s/%s: must be a non-empty array", at, key)
		}
		if key == "oneOf" {
			if err := disjoint(subs, at); err != nil {
				return "", err
			}
		}
		alts := make([]string, len(subs))
		for i, sub := range subs {
			body, err := c.visit(sub, fmt.Sprintf("%s/%s/%d", at, key, i), hint)
			if err != nil {
				return "", err
			}
			alts[i] = body
		}
		return "(" + strings.Join(alts, " | ") + ")", nil
	}
	typ, hasType := s.get("type")
	if !hasType {
		switch {
		case has(s, "properties", "additionalProperties", "required"):
			typ = "object"
		case has(s, "items", "minItems", "maxItems"):
			typ = "array"
		case has(s, "minLength", "maxLength", "pattern", "format"):
			typ = "string"
		default:
			return "value", nil
		}
	}
	if types, ok := typ.([]any); ok {
		alts := make([]string, len(types))
		for i, ty := range types {
			name, _ := ty.(string)
			body, err := c.typed(s, name, at, hint)
			if err != nil {
				return "", err
			}
			alts[i] = body
		}
		return "(" + strings.Join(alts, " | ") + ")", nil
	}
	name, _ := typ.(string)
	return c.typed(s, name, at, hint)
}

func has(s *object, keys ...string) bool {
	for _, k := range keys {
		if _, ok := s.get(k); ok {
			return true
		}
	}
	return false
}

// disjoint refuses a oneOf whose alternatives could match one instance
// together (one instance valid against two fails oneOf): alternatives of
// distinct types, or objects told apart by a const property, pass.
func disjoint(subs []any, at string) error {
	types := map[string]bool{}
	distinctTypes := true
	for _, sub := range subs {
		o, ok := sub.(*object)
		t, _ := func() (string, bool) {
			if !ok {
				return "", false
			}
			v, _ := o.get("type")
			s, ok := v.(string)
			return s, ok
		}()
		if t == "integer" {
			t = "number"
		}
		if t == "" || types[t] {
			distinctTypes = false
			break
		}
		types[t] = true
	}
	if distinctTypes {
		return nil
	}
	// A discriminator: a property every alternative requires with a
	// const of its own.
	first, _ := subs[0].(*object)
	if first == nil {
		return unsupported(at, "oneOf", "its alternatives may overlap")
	}
	props, _ := first.get("properties")
	po, _ := props.(*object)
	if po == nil {
		return unsupported(at, "oneOf", "its alternatives may overlap: give each a distinct type or a required const property")
	}
	for _, key := range po.keys {
		seen := map[string]bool{}
		ok := true
		for _, sub := range subs {
			o, _ := sub.(*object)
			c, req := constProp(o, key)
			if !req || seen[c] {
				ok = false
				break
			}
			seen[c] = true
		}
		if ok {
			return nil
		}
	}
	return unsupported(at, "oneOf", "its alternatives may overlap: give each a distinct type or a required const property")
}

// constProp is the JSON text of o's property key's const, and whether o
// requires key and has one.
func constProp(o *object, key string) (string, bool) {
	if o == nil {
		return "", false
	}
	req, _ := o.get("required")
	reqs, _ := req.([]any)
	found := false
	for _, r := range reqs {
		found = found || r == key
	}
	props, _ := o.get("properties")
	po, _ := props.(*object)
	if !found || po == nil {
		return "", false
	}
	p, _ := po.get(key)
	ps, _ := p.(*object)
	if ps == nil {
		return "", false
	}
	c, ok := ps.get("const")
	if !ok {
		e, ok := ps.get("enum")
		if vals, _ := e.([]any); !ok || len(vals) != 1 {
			return "", false
		}
		c = e.([]any)[0]
	}
	text, _ := json.Marshal(toPlain(c))
	return string(text), true
}

// ref resolves a local $ref (#/$defs/x, #/definitions/x) to a rule, one
// per target, so that recursive schemas become recursive rules.
func (c *schemaCompiler) ref(v any, at string) (string, error) {
	ref, ok := v.(string)
	if !ok || !strings.HasPrefix(ref, "#") {
		return "", unsupported(at, "$ref", fmt.Sprintf("%v: only references inside the schema (#/$defs/...)", v))
	}
	if name, ok := c.refs[ref]; ok {
		return name, nil
	}
	target := c.root
	if ref != "#" {
		for _, part := range strings.Split(strings.TrimPrefix(ref, "#/"), "/") {
			part = strings.ReplaceAll(strings.ReplaceAll(part, "~1", "/"), "~0", "~")
			o, ok := target.(*object)
			if !ok {
				return "", fmt.Errorf("json schema: %s: $ref %q does not resolve", at, ref)
			}
			if target, ok = o.get(part); !ok {
				return "", fmt.Errorf("json schema: %s: $ref %q does not resolve", at, ref)
			}
		}
	}
	name := c.rule("ref-"+ref[strings.LastIndexByte(ref, '/')+1:], "")
	c.refs[ref] = name
	body, err := c.visit(target, ref, name)
	if err != nil {
		return "", err
	}
	c.rules[name] = body
	return name, nil
}

func (c *schemaCompiler) typed(s *object, typ, at, hint string) (string, error) {
	// Keywords of other types are refused rather than ignored.
	only := map[string][]string{
		"object":  {"properties", "required", "additionalProperties"},
		"array":   {"items", "minItems", "maxItems", "uniqueItems"},
		"string":  {"minLength", "maxLength", "pattern", "format"},
		"integer": {"minimum"},
	}
	for k, keys := range only {
		if k == typ {
			continue
		}
		for _, key := range keys {
			if _, ok := s.get(key); ok && !multiType(s) {
				return "", unsupported(at, key, "on a schema of type "+strconv.Quote(typ))
			}
		}
	}
	switch typ {
	case "object":
		return c.objectType(s, at, hint)
	case "array":
		return c.arrayType(s, at, hint)
	case "string":
		return c.stringType(s, at, hint)
	case "integer":
		return c.integerType(s, at)
	case "number", "boolean", "null":
		if has(s, "minimum") {
			return "", unsupported(at, "minimum", "only on integers, and only 0 or 1")
		}
		return typ, nil
	}
	return "", fmt.Errorf("json schema: %s/type: %q is not a JSON schema type", at, typ)
}

func multiType(s *object) bool {
	t, _ := s.get("type")
	_, ok := t.([]any)
	return ok
}

func (c *schemaCompiler) objectType(s *object, at, hint string) (string, error) {
	propsV, _ := s.get("properties")
	props, _ := propsV.(*object)
	if propsV != nil && props == nil {
		return "", fmt.Errorf("json schema: %s/properties: must be an object", at)
	}
	required := map[string]bool{}
	if r, ok := s.get("required"); ok {
		list, ok := r.([]any)
		if !ok {
			return "", fmt.Errorf("json schema: %s/required: must be an array of names", at)
		}
		for _, x := range list {
			name, ok := x.(string)
			if !ok {
				return "", fmt.Errorf("json schema: %s/required: must be an array of names", at)
			}
			if props == nil || props.vals[name] == nil {
				return "", unsupported(at, "required", fmt.Sprintf("%q is required but not among the properties", name))
			}
			required[name] = true
		}
	}
	ap, hasAP := s.get("additionalProperties")
	if props == nil || len(props.keys) == 0 {
		switch {
		case hasAP && ap == false:
			return `"{" ws "}" ws`, nil
		case !hasAP || ap == true:
			return "object", nil
		}
		// A map: any keys, each value of the schema.
		val, err := c.visit(ap, at+"/additionalProperties", hint+"-value")
		if err != nil {
			return "", err
		}
		kv := c.rule(hint+"-kv", `string ":" ws `+val)
		return fmt.Sprintf(`"{" ws (%s ("," ws %s)*)? "}" ws`, kv, kv), nil
	}
	// Only the declared properties are written: valid whatever
	// additionalProperties says. Chains of rules place the commas:
	// first[i] writes properties i.. with none written before, rest[i]
	// with some written (each then starts with a comma).
	n := len(props.keys)
	kvs := make([]string, n)
	for i, k := range props.keys {
		val, err := c.visit(props.vals[k], at+"/properties/"+k, hint+"-"+k)
		if err != nil {
			return "", err
		}
		key, _ := literal(k)
		kvs[i] = key + ` ":" ws ` + val
	}
	first := make([]string, n+1)
	rest := make([]string, n+1)
	first[n], rest[n] = `""`, `""`
	for i := n - 1; i >= 0; i-- {
		restBody := fmt.Sprintf(`"," ws %s %s`, kvs[i], rest[i+1])
		firstBody := fmt.Sprintf(`%s %s`, kvs[i], rest[i+1])
		if !required[props.keys[i]] {
			restBody = fmt.Sprintf("(%s) | %s", restBody, rest[i+1])
			firstBody = fmt.Sprintf("(%s) | %s", firstBody, first[i+1])
		}
		rest[i] = c.rule(hint+"-rest", restBody)
		first[i] = c.rule(hint+"-props", firstBody)
	}
	return fmt.Sprintf(`"{" ws %s "}" ws`, first[0]), nil
}

func (c *schemaCompiler) arrayType(s *object, at, hint string) (string, error) {
	if u, ok := s.get("uniqueItems"); ok && u != false {
		return "", unsupported(at, "uniqueItems", "the grammar cannot compare items")
	}
	item := "value"
	if it, ok := s.get("items"); ok {
		var err error
		if item, err = c.visit(it, at+"/items", hint+"-item"); err != nil {
			return "", err
		}
	}
	lo, err := count(s, "minItems", at, 0)
	if err != nil {
		return "", err
	}
	hi, err := count(s, "maxItems", at, -1)
	if err != nil {
		return "", err
	}
	if hi >= 0 && hi < lo {
		return "", fmt.Errorf("json schema: %s: maxItems %d is below minItems %d", at, hi, lo)
	}
	if hi == 0 {
		return `"[" ws "]" ws`, nil
	}
	name := c.rule(hint+"-item", item)
	more := repeatSuffix(max(lo-1, 0), hi-1)
	list := fmt.Sprintf(`%s ("," ws %s)%s`, name, name, more)
	if lo == 0 {
		list = "(" + list + ")?"
	}
	return fmt.Sprintf(`"[" ws %s "]" ws`, list), nil
}

// count reads a non-negative integer keyword (def when absent), refusing
// counts past what a grammar's repetition takes.
func count(s *object, key, at string, def int) (int, error) {
	v, ok := s.get(key)
	if !ok {
		return def, nil
	}
	n, err := strconv.Atoi(fmt.Sprint(v))
	if err != nil || n < 0 {
		return 0, fmt.Errorf("json schema: %s/%s: %v is not a non-negative integer", at, key, v)
	}
	if n > maxRepeat {
		return 0, unsupported(at, key, fmt.Sprintf("%d: counts above %d", n, maxRepeat))
	}
	return n, nil
}

// repeatSuffix is the GBNF postfix for lo to hi (-1: no bound) repeats.
func repeatSuffix(lo, hi int) string {
	switch {
	case hi < 0 && lo == 0:
		return "*"
	case hi < 0:
		return fmt.Sprintf("{%d,}", lo)
	default:
		return fmt.Sprintf("{%d,%d}", lo, hi)
	}
}

func (c *schemaCompiler) stringType(s *object, at, hint string) (string, error) {
	if f, ok := s.get("format"); ok {
		body, ok := formats[fmt.Sprint(f)]
		if !ok {
			return "", unsupported(at, "format", fmt.Sprintf("%v: only %s", f, strings.Join(formatNames(), ", ")))
		}
		if has(s, "pattern", "minLength", "maxLength") {
			return "", unsupported(at, "format", "beside pattern, minLength or maxLength")
		}
		return `"\"" ` + body + ` "\"" ws`, nil
	}
	if p, ok := s.get("pattern"); ok {
		if has(s, "minLength", "maxLength") {
			return "", unsupported(at, "pattern", "beside minLength or maxLength")
		}
		body, err := patternGBNF(fmt.Sprint(p))
		if err != nil {
			return "", fmt.Errorf("json schema: %s/pattern: %w", at, err)
		}
		return `"\"" ` + body + ` "\"" ws`, nil
	}
	lo, err := count(s, "minLength", at, 0)
	if err != nil {
		return "", err
	}
	hi, err := count(s, "maxLength", at, -1)
	if err != nil {
		return "", err
	}
	if hi >= 0 && hi < lo {
		return "", fmt.Errorf("json schema: %s: maxLength %d is below minLength %d", at, hi, lo)
	}
	if lo == 0 && hi < 0 {
		return "string", nil
	}
	return `"\"" char` + repeatSuffix(lo, hi) + ` "\"" ws`, nil
}

// formats are the string formats the grammar writes exactly. A date's day
// follows its month (February stops at 28: no leap-year arithmetic, a
// restriction, never a day the format refuses).
var formats = map[string]string{
	"date":      `[0-9]{4} "-" (("0" [13578] | "1" [02]) "-" ("0" [1-9] | [12] [0-9] | "3" [01]) | ("0" [469] | "11") "-" ("0" [1-9] | [12] [0-9] | "30") | "02-" ("0" [1-9] | "1" [0-9] | "2" [0-8]))`,
	"time":      `([01] [0-9] | "2" [0-3]) ":" [0-5] [0-9] ":" [0-5] [0-9] ("." [0-9]{1,6})? ("Z" | [+-] ([01] [0-9] | "2" [0-3]) ":" [0-5] [0-9])`,
	"date-time": `[0-9]{4} "-" (("0" [13578] | "1" [02]) "-" ("0" [1-9] | [12] [0-9] | "3" [01]) | ("0" [469] | "11") "-" ("0" [1-9] | [12] [0-9] | "30") | "02-" ("0" [1-9] | "1" [0-9] | "2" [0-8])) "T" ([01] [0-9] | "2" [0-3]) ":" [0-5] [0-9] ":" [0-5] [0-9] ("." [0-9]{1,6})? ("Z" | [+-] ([01] [0-9] | "2" [0-3]) ":" [0-5] [0-9])`,
	"uuid":      `[0-9a-fA-F]{8} "-" [0-9a-fA-F]{4} "-" [0-9a-fA-F]{4} "-" [0-9a-fA-F]{4} "-" [0-9a-fA-F]{12}`,
}

func formatNames() []string {
	var names []string
	for n := range formats {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

func (c *schemaCompiler) integerType(s *object, at string) (string, error) {
	m, ok := s.get("minimum")
	if !ok {
		return "integer", nil
	}
	switch fmt.Sprint(m) {
	case "0":
		return `("0" | [1-9] [0-9]{0,15}) ws`, nil
	case "1":
		return `[1-9] [0-9]{0,15} ws`, nil
	}
	return "", unsupported(at, "minimum", fmt.Sprintf("%v: only 0 or 1", m))
}

// SchemaRules is SchemaGBNF with every rule renamed under name: the
// schema's start rule is name itself, the others name-..., so that the
// rules of several schemas can go into one grammar (a tool call's
// arguments, one schema per function).
func SchemaRules(schema []byte, name string) (string, error) {
	src, err := SchemaGBNF(schema)
	if err != nil {
		return "", err
	}
	return renameRules(src, name), nil
}

// renameRules prefixes every rule name of GBNF src (outside literals,
// classes, repetition counts and comments) with prefix-, root becoming
// prefix.
func renameRules(src, prefix string) string {
	var b strings.Builder
	for i := 0; i < len(src); {
		c := src[i]
		switch {
		case c == '"' || c == '[' || c == '{':
			end := map[byte]byte{'"': '"', '[': ']', '{': '}'}[c]
			j := i + 1
			for j < len(src) && src[j] != end {
				if src[j] == '\\' {
					j++
				}
				j++
			}
			j = min(j+1, len(src))
			b.WriteString(src[i:j])
			i = j
		case c == '#':
			j := i
			for j < len(src) && src[j] != '\n' {
				j++
			}
			b.WriteString(src[i:j])
			i = j
		case isNameChar(c):
			j := i
			for j < len(src) && isNameChar(src[j]) {
				j++
			}
			if src[i:j] == "root" {
				b.WriteString(prefix)
			} else {
				b.WriteString(prefix + "-" + src[i:j])
			}
			i = j
		default:
			b.WriteByte(c)
			i++
		}
	}
	return b.String()
}
