package server

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"reflect"
	"strconv"
	"strings"
	"time"
)

// apiError is an error as OpenAI's API writes it:
// {"error":{"message","type","param","code"}}, with its HTTP status.
type apiError struct {
	Status  int
	Type    string // "invalid_request_error", "server_error", ...
	Param   string // the request field at fault ("" = none)
	Code    string
	Message string

	retryAfter time.Duration // a 503's Retry-After
}

func (e *apiError) Error() string { return e.Message }

// badRequest is a 400 that names the field at fault.
func badRequest(param, code, format string, args ...any) *apiError {
	return &apiError{Status: http.StatusBadRequest, Type: "invalid_request_error", Param: param, Code: code,
		Message: fmt.Sprintf(format, args...)}
}

// writeError writes err as OpenAI's error object: an apiError as it says,
// a too-large body as 413, a cancelled request as 499 (nobody reads it),
// anything else as 500.
func writeError(w http.ResponseWriter, err error) int {
	var ae *apiError
	var tooLarge *http.MaxBytesError
	switch {
	case errors.As(err, &ae):
	case errors.As(err, &tooLarge):
		ae = &apiError{Status: http.StatusRequestEntityTooLarge, Type: "invalid_request_error", Code: "request_too_large",
			Message: fmt.Sprintf("the request body is larger than %d bytes", tooLarge.Limit)}
	case errors.Is(err, errClientGone):
		ae = &apiError{Status: 499, Type: "server_error", Code: "cancelled", Message: "the client went away"}
	default:
		ae = &apiError{Status: http.StatusInternalServerError, Type: "server_error", Message: err.Error()}
	}
	if ae.retryAfter > 0 {
		w.Header().Set("Retry-After", strconv.Itoa(int((ae.retryAfter+time.Second-1)/time.Second)))
	}
	type body struct {
		Message string  `json:"message"`
		Type    string  `json:"type"`
		Param   *string `json:"param"`
		Code    *string `json:"code"`
	}
	b := body{Message: ae.Message, Type: ae.Type}
	if ae.Param != "" {
		b.Param = &ae.Param
	}
	if ae.Code != "" {
		b.Code = &ae.Code
	}
	writeJSON(w, ae.Status, map[string]body{"error": b})
	return ae.Status
}

var errClientGone = errors.New("server: the client went away")

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v) // a client gone mid-write is not our error
}

// decode reads r's JSON body into v. Malformed JSON, a field of the wrong
// type, or a body too large is an error naming what is wrong (and the
// field).
func decode(body io.Reader, v any) error {
	b, err := io.ReadAll(body)
	if err != nil {
		var tooLarge *http.MaxBytesError
		if errors.As(err, &tooLarge) {
			return err
		}
		return badRequest("", "invalid_body", "reading the request body: %v", err)
	}
	if err := json.Unmarshal(b, v); err != nil {
		var typ *json.UnmarshalTypeError
		var syn *json.SyntaxError
		switch {
		case errors.As(err, &typ) && typ.Field != "":
			field := strings.TrimPrefix(typ.Field, "sampling.") // the embedded struct's fields are the request's
			return badRequest(field, "invalid_type", "%s: must be %s, not %s", field, jsonType(typ.Type), withArticle(typ.Value))
		case errors.As(err, &syn):
			return badRequest("", "invalid_json", "the body is not valid JSON: %v (at byte %d)", err, syn.Offset)
		case errors.As(err, &typ):
			return badRequest("", "invalid_json", "the body must be a JSON object, not %s", withArticle(typ.Value))
		default:
			var fe *fieldError
			if errors.As(err, &fe) {
				return badRequest(fe.field, "invalid_type", "%s: %s", fe.field, fe.msg)
			}
			return badRequest("", "invalid_json", "the body is not valid JSON: %v", err)
		}
	}
	return nil
}

// jsonType says what JSON value a Go type takes, with its article: "an
// array", "a number" (never a Go type's name, which a client cannot read).
func jsonType(t reflect.Type) string {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch t.Kind() {
	case reflect.String:
		return "a string"
	case reflect.Bool:
		return "a boolean"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64, reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "an integer"
	case reflect.Float32, reflect.Float64:
		return "a number"
	case reflect.Slice, reflect.Array:
		return "an array"
	}
	return "an object"
}

// withArticle is a JSON value's kind ("array", "number 1.5") after its
// article.
func withArticle(v string) string {
	if v != "" && strings.ContainsRune("aeiou", rune(v[0])) {
		return "an " + v
	}
	return "a " + v
}

// fieldError is a custom decoder's error about one field.
type fieldError struct{ field, msg string }

func (e *fieldError) Error() string { return e.field + ": " + e.msg }
